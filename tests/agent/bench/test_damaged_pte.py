"""A damaged ExecuTorch program is a bad artifact, not a runtime error, and a benchmark that runs
out of time while the runtime is still being imported says so (issue 38, item 7).

The `.pte` is built here (torch.export, then executorch's exporter), then damaged the way the
audit's mutated files were: its method name replaced by bytes that are not UTF-8 (the runtime
then raised UnicodeDecodeError, reported as `runtime_error`), or by another name (KeyError).
"""
from __future__ import annotations

import pytest

from edgeopt_agent.bench import BAD_ARTIFACT, BenchmarkSpec, run_benchmark
from edgeopt_agent.bench import child as bench_child
from edgeopt_agent.bench.failures import classify
from edgeopt_agent.runners import ArtifactError, open_runner

torch = pytest.importorskip("torch", reason="building a .pte needs torch")
exir = pytest.importorskip("executorch.exir", reason="building a .pte needs the executorch package (executorch extra)")
pytest.importorskip("executorch.runtime", reason="running a .pte here needs executorch's runtime")

METHOD = b"forward"
DAMAGE = {
    "not UTF-8": b"\xff\xfe\xfdward",  # as long as "forward"
    "another name": b"fxrward",
}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.linear(x))

    exported = torch.export.export(Tiny().eval(), (torch.randn(1, 4),))
    data = exir.to_edge(exported).to_executorch().buffer
    assert data.count(METHOD) == 1, "the method's name is where the damage goes"
    folder = tmp_path_factory.mktemp("pte")
    files = {"intact": folder / "tiny.pte"}
    files["intact"].write_bytes(data)
    for label, replacement in DAMAGE.items():
        files[label] = folder / f"tiny-{label.replace(' ', '-')}.pte"
        files[label].write_bytes(data.replace(METHOD, replacement))
    return files


@pytest.mark.parametrize("label, says", [("not UTF-8", "method table is damaged"), ("another name", "no method")])
def test_a_damaged_method_table_is_a_bad_artifact(program, label, says):
    runner = open_runner(program[label], runtime="executorch")
    with pytest.raises(ArtifactError, match=says) as caught:
        runner.load()
    assert classify(caught.value)["kind"] == BAD_ARTIFACT
    with open_runner(program["intact"], runtime="executorch") as intact:  # the same file undamaged loads
        assert [i.name for i in intact.inputs()] == ["input_0"]


@pytest.mark.slow
def test_the_benchmark_answers_bad_artifact_for_it(program):
    spec = BenchmarkSpec(artifact=str(program["not UTF-8"]), runtime="executorch", runs=3, duration_s=0,
                         warmup_runs=1, warmup_s=0, idle_s=0, timeout_s=120)
    result = run_benchmark(spec)
    assert result["ok"] is False and result["error"]["kind"] == BAD_ARTIFACT, result["error"]


def test_importing_the_runtime_is_its_own_phase(monkeypatch, program):
    """On a loaded board, importing executorch (and torch) can take longer than the job's timeout: the
    phase the child is in when it is killed names the import, not the model's loading."""
    sent = []

    def send(kind, **fields):
        sent.append((kind, fields))

    def opening(*args, **kwargs):
        raise TimeoutError(sent[-1][1]["text"])  # where a timeout would have found the child

    monkeypatch.setattr(bench_child, "open_runner", opening)
    spec = BenchmarkSpec(artifact=str(program["intact"]), runtime="executorch", runs=1, idle_s=0)
    with pytest.raises(TimeoutError, match="importing the executorch runtime"):
        bench_child.benchmark(spec, send)
    monkeypatch.undo()

    phases = []

    def until_loaded(kind, **fields):
        if kind == "loaded":
            raise StopIteration  # enough: the model is loaded
        phases.append(fields.get("text"))

    with pytest.raises(StopIteration):
        bench_child.benchmark(spec, until_loaded)
    assert phases.index("importing the executorch runtime") < phases.index("loading the model")
