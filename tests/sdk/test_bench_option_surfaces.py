"""Each benchmark option is defined once (edgeopt_agent.wire.bench_options.BenchOptions): `edgeopt
bench`'s and `edgeopt deploy`'s flags, the deploy API's `bench` names, a job's `bench` checks on the
board, the manifest's board overrides and the board's BenchmarkSpec are generated from it, so they
cannot drift apart; an option added there reaches every one of them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

from edgeopt.cli.bench import bench as bench_command
from edgeopt.cli.deploy import deploy as deploy_command
from edgeopt_agent import wire
from edgeopt_agent.bench import BenchmarkSpec
from edgeopt_agent.errors import UserError
from edgeopt_agent.runtimes import PRECISIONS, RUNTIMES
from edgeopt_agent.wire.bench_options import BenchOptions
from edgeopt_converters.manifest import BOARD_OPTIONS, BOARD_OVERRIDES, board_options

ROOT = Path(__file__).resolve().parents[2]


def _params(command):
    return {p.name: p for p in command.params if isinstance(p, click.Option)}


def _default(command, param):
    """The flag's default, None where it has none (click 8.3 says so with its own sentinel)."""
    default = param.default
    return None if default is getattr(click.core, "UNSET", None) else default


def _cli_options():
    return {name: spec for name, spec in BenchOptions.specs().items() if spec.cli}


def test_bench_and_deploy_take_every_cli_option_with_its_help_choices_and_default():
    bench, deploy = _params(bench_command), _params(deploy_command)
    defaults = BenchOptions.defaults()
    for name, spec in _cli_options().items():
        for command, params in (("bench", bench), ("deploy", deploy)):
            assert name in params, f"{name} has no flag in `edgeopt {command}`"
            assert params[name].help == spec.help
            if spec.allowed():
                assert tuple(params[name].type.choices) == spec.allowed()
        assert _default(bench_command, bench[name]) == defaults[name]
        assert _default(deploy_command, deploy[name]) is None, "deploy sends what is given: the board has the defaults"
    assert set(bench) - set(BenchOptions.specs()) == {"input_shapes", "input_values", "no_sensors", "allow_invalid",
                                                      "as_json"}, "a bench flag that is not a benchmark option"
    assert tuple(bench["runtime"].type.choices) == RUNTIMES and tuple(bench["precision"].type.choices) == PRECISIONS
    assert "--bench-timeout" in deploy["timeout_s"].opts and "--timeout" in deploy["wait_s"].opts
    assert {"--timeout", "--bench-timeout"} <= set(bench["timeout_s"].opts)


def test_the_board_and_the_manifest_take_the_same_options():
    names = list(BenchOptions.specs())
    assert list(wire.BENCH_OPTIONS) == names
    spec_fields = BenchmarkSpec.defaults()
    assert list(spec_fields) == names and spec_fields == BenchOptions.defaults(), "the board's defaults are the options'"
    assert set(BOARD_OPTIONS) <= set(names) and set(BOARD_OVERRIDES) <= set(BOARD_OPTIONS)
    assert wire.parse_bench({"runs": 7, "batch_sizes": [1, 2]}) == {"runs": 7, "batch_sizes": [1, 2]}
    with pytest.raises(TypeError, match="board_options.. overrides only runtime, precision, threads, not runs"):
        board_options({}, runs=3)


@pytest.mark.parametrize("given, message", [
    ({"runs": 0}, "runs must be 1 or more, got 0"),
    ({"timeout_s": 0}, "timeout_s must be above 0, got 0"),
    ({"runtime": "openvino"}, "unknown runtime 'openvino'"),
    ({"profile": 1}, "profile must be true or false"),
])
def test_one_check_everywhere(given, message):
    """The board's spec, a job and the deploy API refuse a value with the same words."""
    [(name, value)] = given.items()
    with pytest.raises(UserError, match=message):
        BenchmarkSpec(artifact="m.onnx", **given)
    with pytest.raises(wire.ProtocolError, match=f"bench option '{name}': {message}"):
        wire.parse_bench({name: value})
    with pytest.raises(UserError, match=message):
        BenchOptions.read_given(given)
    with pytest.raises(TypeError, match="unknown benchmark option.*iterations.*known: runs"):
        BenchOptions.read_given({"iterations": 5})
    with pytest.raises(TypeError, match="unknown benchmark option.*iterations"):
        wire.benchmark_body("j", "0" * 64, "onnx", path="m.onnx", iterations=5)


# One field added to BenchOptions, in the source, and nothing else: the child process below loads the
# wire module with it, then looks for it on every surface.
MADE_UP = '    made_up_knob: Optional[int] = option(None, "A made-up knob.", kind=int, minimum=1)\n'
PROBE = textwrap.dedent('''
    import importlib.abc, importlib.util, json, sys, types
    from pathlib import Path

    TARGET = "edgeopt_agent.wire.bench_options"
    SOURCE = Path(sys.argv[1]).read_text(encoding="utf-8")
    ANCHOR = "    def __post_init__(self) -> None:\\n        super().__post_init__()\\n        self._check_together()"
    assert SOURCE.count(ANCHOR) == 1
    SOURCE = SOURCE.replace(ANCHOR, sys.argv[2] + "\\n" + ANCHOR)

    class Edited(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, self, origin=sys.argv[1]) if name == TARGET else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.__file__ = sys.argv[1]
            exec(compile(SOURCE, sys.argv[1], "exec"), module.__dict__)

    sys.meta_path.insert(0, Edited())

    from click.testing import CliRunner
    import edgeopt.cli.bench as bench_cli
    import edgeopt.deploy
    from edgeopt.cli.deploy import deploy as deploy_cli
    from edgeopt.deploy.api import _with_board
    from edgeopt_agent import wire
    from edgeopt_agent.bench import BenchmarkSpec

    seen = {}
    bench_cli.resolve_runtime = lambda path, runtime: "onnxruntime"
    bench_cli.run_benchmark = lambda spec, **kw: seen.setdefault("spec", spec) and {"ok": True, "artifact": spec.artifact}
    Path("m.onnx").write_bytes(b"not read")
    bench = CliRunner().invoke(bench_cli.bench, ["m.onnx", "--made-up-knob", "3", "--json", "--no-sensors"])
    edgeopt.deploy.deploy = lambda outdir, settings, **kw: seen.setdefault("deploy", kw["bench"]) and []
    deploy = CliRunner().invoke(deploy_cli, [".", "--device-id", "pi", "--unsigned", "--made-up-knob", "3", "--json"])
    body = wire.benchmark_body("j", "0" * 64, "onnx", path="models/m.onnx",
                               **_with_board(seen["deploy"], types.SimpleNamespace(entry=None)))
    job = wire.parse_job(wire.job_message("pi", 1, body))
    board = BenchmarkSpec.from_dict(dict(job.bench, artifact="m.onnx"))
    try:
        wire.parse_bench({"made_up_knob": 0})
        refused = None
    except wire.ProtocolError as exc:
        refused = str(exc)
    print(json.dumps({"bench_exit": bench.exit_code, "bench_output": bench.output, "bench": seen["spec"].made_up_knob,
                      "deploy_exit": deploy.exit_code, "deploy_output": deploy.output, "deploy": seen["deploy"],
                      "job": job.bench, "board": board.to_dict()["made_up_knob"], "refused": refused,
                      "help": "--made-up-knob" in CliRunner().invoke(deploy_cli, ["--help"]).output}))
''')


def test_a_made_up_option_added_in_one_place_reaches_bench_deploy_the_job_and_the_board(tmp_path):
    source = ROOT / "agent" / "edgeopt_agent" / "wire" / "bench_options.py"
    run = subprocess.run([sys.executable, "-c", PROBE, str(source), MADE_UP], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["bench_exit"] == 0, seen["bench_output"]
    assert seen["bench"] == 3, "`edgeopt bench --made-up-knob 3` reaches the benchmark spec"
    assert seen["deploy_exit"] == 0 and seen["help"], seen["deploy_output"]
    assert seen["deploy"] == {"made_up_knob": 3}, "`edgeopt deploy --made-up-knob 3` reaches the deploy API"
    assert seen["job"] == {"made_up_knob": 3}, "the job carries it and the board's check takes it"
    assert seen["board"] == 3, "the board's benchmark spec holds it (what its benchmark child receives)"
    assert seen["refused"] == "bench option 'made_up_knob': made_up_knob must be 1 or more, got 0"
