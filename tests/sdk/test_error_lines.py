"""One error style: a mistake in the command line reads like every other error, one `error:` line that
says where to look, not click's `Usage: ... Error: ...` block."""
import pytest

from edgeopt.cli.main import main


@pytest.mark.parametrize("argv, said", [
    (["convert", "model.onnx"], "error: missing option '-d' / '--device' / '--profile' (see: edgeopt convert --help)"),
    (["convert", "model.onnx", "-d", "rpi4", "--format", "bogus"], "error: invalid value for '--format': 'bogus' is not"),
    (["bogus"], "error: no such command 'bogus' (see: edgeopt --help)"),
    (["devices", "--no-such-flag"], "error: no such option '--no-such-flag' (see: edgeopt devices --help)"),
])
def test_a_usage_mistake_is_one_error_line(argv, said, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), captured.err
    assert "Usage:" not in captured.err and "Error:" not in captured.err and not captured.out
