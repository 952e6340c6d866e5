"""`edgeopt quickstart | tee log`: with stderr not a terminal the quickstart's own lines and every step's
line go to the log (the line reporter has no rich console to print through)."""
from pathlib import Path

import edgeopt.quickstart as quickstart_module
from edgeopt.cli.main import main
from edgeopt.quickstart import QuickstartResult
from edgeopt_converters.progress import LineProgress, ProgressReporter, RichProgress


def test_every_reporter_says_a_line_between_steps(tmp_path):
    log = (tmp_path / "log.txt").open("w")
    LineProgress(log).say("• started the broker")
    log.close()
    assert (tmp_path / "log.txt").read_text() == "• started the broker\n"
    for reporter in (ProgressReporter, LineProgress, RichProgress):
        assert callable(getattr(reporter, "say"))


def test_the_cli_quickstart_writes_its_lines_into_a_log(tmp_path, monkeypatch, capfd):
    def fake_run(options, say, progress):
        say("started the broker")
        with progress.step("export ONNX FP32", 1) as advance:
            advance()
        return QuickstartResult(Path(options.output_dir), {"recommended": None}, [], [], [], tmp_path / "report.html",
                                "sqlite:///fleet.db", "127.0.0.1:1883")

    monkeypatch.setattr(quickstart_module, "run_quickstart", fake_run)
    assert main(["quickstart", "-o", str(tmp_path / "out")]) == 0
    err = capfd.readouterr().err
    assert "• started the broker" in err and "export ONNX FP32: done in" in err
