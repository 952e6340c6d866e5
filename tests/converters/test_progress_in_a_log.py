"""`edgeopt convert ... | tee log`: a line as each step starts and ends, and one at least every beat while
edgeopt works, even inside one long call (an export); Ctrl-C is said as `interrupted`."""
import io
import threading
import time

import pytest

import edgeopt
from edgeopt_converters.progress import LineProgress, RichProgress, duration
from model_files import write_slow_export_factory


class TimedLog(io.StringIO):
    """A log that remembers when each line arrived."""

    def __init__(self):
        super().__init__()
        self.times = []
        self._lock = threading.Lock()

    def write(self, text):
        with self._lock:
            self.times.extend(time.monotonic() for _ in range(text.count("\n")))
            return super().write(text)


def test_a_step_says_when_it_starts_with_its_size_and_when_it_ends():
    log = io.StringIO()
    progress = LineProgress(log)
    with progress.step("FP32 reference", 300) as advance:
        advance(300)
    with progress.step("export ONNX FP32", 1) as advance:
        advance()
    with progress.step("time on host (batch 1, 2 threads)", 40, "rounds") as advance:
        advance(12)
    lines = log.getvalue().splitlines()
    assert lines[0] == "FP32 reference: started (300 samples)"
    assert lines[1].startswith("FP32 reference: done in ") and lines[1].endswith("(300/300)")
    assert lines[2] == "export ONNX FP32: started"
    assert lines[3].startswith("export ONNX FP32: done in ")
    assert lines[4] == "time on host (batch 1, 2 threads): started (40 rounds)"


def test_a_long_call_inside_a_step_still_gets_a_line_every_beat():
    log = TimedLog()
    with LineProgress(log, beat_s=0.2) as progress:
        with progress.step("export ONNX FP32", 1) as advance:
            time.sleep(1.2)  # one call that does not return for a while (torch.onnx.export)
            advance()
    lines = log.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("export ONNX FP32: ") and line.endswith(" so far")]
    assert len(beats) >= 3, lines
    assert max(b - a for a, b in zip(log.times, log.times[1:])) < 0.2 + 0.5, lines


def test_a_counted_step_says_how_far_it_is_and_about_how_long_is_left():
    clock = [0.0]
    log = io.StringIO()
    progress = LineProgress(log, clock=lambda: clock[0])
    with progress.step("FP32 reference", 300) as advance:
        clock[0] = 120.0
        advance(120)
        assert progress.beat_line() == "FP32 reference 120/300, 2 min, about 3 min left"
        advance(-120)
        assert progress.beat_line() == "FP32 reference 0/300, 2 min, still on the first"
        advance(120)
    clock[0] = 165.0
    assert progress.beat_line() == "still working, 45 s since FP32 reference ended"


def test_the_beat_stops_with_the_reporter():
    log = io.StringIO()
    with LineProgress(log, beat_s=0.05):
        time.sleep(0.3)
    said = log.getvalue()
    assert said.startswith("still working, ")
    time.sleep(0.2)
    assert log.getvalue() == said
    assert not [t for t in threading.enumerate() if t.name == "edgeopt-progress-beat"]


def test_ctrl_c_is_said_as_interrupted_not_failed():
    log = io.StringIO()
    progress = LineProgress(log)
    with pytest.raises(KeyboardInterrupt):
        with progress.step("FP32 reference", 300) as advance:
            advance(120)
            raise KeyboardInterrupt
    last = log.getvalue().splitlines()[-1]
    assert last.startswith("FP32 reference: interrupted after ") and last.endswith("(120/300)")


def test_an_interrupted_bar_stays_where_it_stopped():
    progress = RichProgress()
    progress.console.file = io.StringIO()
    with progress:
        with pytest.raises(KeyboardInterrupt):
            with progress.step("FP32 reference", 300) as advance:
                advance(120)
                raise KeyboardInterrupt
        with progress.step("export ONNX FP32", 1) as advance:
            advance()
    reference, export = progress._bars.tasks
    assert reference.completed == 120 and reference.description == "FP32 reference: interrupted"
    assert export.completed == 1


@pytest.mark.parametrize("seconds, said", [(0.4, "0 s"), (12, "12 s"), (60, "1 min"), (150, "2 min 30 s"),
                                           (725, "12 min"), (3900, "1 h 5 min"), (7200, "2 h")])
def test_durations_read_as_a_person_says_them(seconds, said):
    assert duration(seconds) == said




@pytest.mark.slow
def test_a_conversion_in_a_log_never_goes_quiet_for_a_beat(tmp_path):
    import numpy as np

    model = write_slow_export_factory(tmp_path / "slow.py", 1.5)
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))
    log = TimedLog()
    started = time.monotonic()
    with LineProgress(log, beat_s=0.3) as progress:
        edgeopt.convert(model, device="x86-64", output_dir=tmp_path / "out", progress=progress,
                        formats=["onnx"], precisions=["fp32"], calibration=tmp_path / "calib.npy", time_on_host=False)
    ended = time.monotonic()
    lines = log.getvalue().splitlines()
    gaps = [b - a for a, b in zip([started, *log.times], [*log.times, ended])]
    assert max(gaps) < 0.3 + 1.0, list(zip(gaps, lines + ["(summary)"]))
    assert "export ONNX FP32: started" in lines
    assert any(line.startswith("export ONNX FP32: ") and line.endswith(" so far") for line in lines), lines


def test_the_headline_comes_with_the_first_line_and_not_alone():
    log = io.StringIO()
    progress = LineProgress(log)
    progress.headline("convert model.py:build for rpi4 into out")
    assert log.getvalue() == ""  # a mistake found now is the only line
    with progress.step("FP32 reference", 2) as advance:
        advance(2)
    assert log.getvalue().splitlines()[:2] == ["convert model.py:build for rpi4 into out",
                                               "FP32 reference: started (2 samples)"]
    assert log.getvalue().count("convert model.py") == 1
