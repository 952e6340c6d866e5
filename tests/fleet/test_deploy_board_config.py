"""`edgeopt deploy` sends the board configuration the manifest planned (runtime, engine precision,
threads, fallback runtimes) inside the signed job, `--runtime/--precision/--threads` override it, and
the agent honours it and reports what it really ran: the runtime, its version and providers, the
threads (capped by the board's CPUs, saying so) and a fallback with its reason."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_harness import RawClient, deploy_agent
from harness import QUICK_BENCH, wait_until
from mqtt_broker import MqttBroker

from edgeopt.cli.main import main
from edgeopt.deploy import deploy, init_keys
from edgeopt.deploy.api import broker_settings
from edgeopt.deploy.mqtt import HostClient
from edgeopt.deploy.targets import read_statuses
from edgeopt_agent import wire
from edgeopt_agent.bench.spec import available_cpus
from edgeopt_agent.profiles import load_profile

pytestmark = pytest.mark.slow

NETS = Path(__file__).resolve().parents[1] / "converters" / "nets.py"
CLI_BENCH = ["--runs", "3", "--duration", "0", "--idle", "0"]
CPUS = available_cpus()


def _has_tensorrt() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt") is not None


def _convert(tmp_path_factory, device):
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    import edgeopt

    outdir = tmp_path_factory.mktemp(f"converted-{device}")
    edgeopt.convert(f"{NETS}:small_cnn", device=device, output_dir=outdir, input_shape="1,3,16,16",
                    formats=("onnx",), time_on_host=False)
    return outdir


@pytest.fixture(scope="module")
def x86_out(tmp_path_factory):
    return _convert(tmp_path_factory, "x86-64")


@pytest.fixture(scope="module")
def jetson_out(tmp_path_factory):
    return _convert(tmp_path_factory, "jetson-orin-nano")


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    pytest.importorskip("cryptography", reason="signing needs the cryptography package (fleet extra)")
    return init_keys(tmp_path_factory.mktemp("keys") / "fleet")


@pytest.fixture(scope="module")
def boards(tmp_path_factory, key):
    """A broker and two agents that run only jobs signed by `key`: lab-x86 (x86-64) and lab-jetson
    (jetson-orin-nano profile, on this machine: no TensorRT unless it is installed here)."""
    workdir = tmp_path_factory.mktemp("boards")
    broker = MqttBroker(workdir / "broker").start()
    agents = {name: deploy_agent(broker, workdir, name, profile, trusted_key=key.public_key)
              for name, profile in (("lab-x86", "x86-64"), ("lab-jetson", "jetson-orin-nano"))}
    try:
        for agent in agents.values():
            agent.start()

        def online():
            client = HostClient(broker_settings(broker.address))
            try:
                client.connect()
                return {s.device_id for s in read_statuses(client).values() if s.online} == set(agents)
            finally:
                client.close()

        wait_until(online, "both agents online")
        yield broker, agents
    finally:
        for agent in agents.values():
            agent.close()
        broker.stop()


def _job_and_row(broker, device, run):
    """Run `run()` (a deploy) while a spy reads the job it sends; returns (job body, result row)."""
    spy = RawClient(broker, [wire.jobs_topic(device)])
    try:
        row = run()
        job = spy.wait_for(wire.jobs_topic(device), lambda e: e["body"]["job_id"] == row["job_id"])
    finally:
        spy.close()
    return job["body"], row


def _deploy(outdir, broker, key, device, artifact, **bench):
    [row] = deploy(outdir, broker.address, device=device, artifact=artifact, private_key=key.private_key,
                   wait=True, timeout_s=120, bench={**QUICK_BENCH, **bench})
    return row


def _cli(capsys, outdir, broker, key, device, artifact, *extra):
    code = main(["deploy", str(outdir), "--device", device, "--artifact", artifact, "--broker", broker.address,
                 "--key", str(key.private_key), "--wait", "--json", *CLI_BENCH, *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    [row] = json.loads(captured.out)
    return row


def _board_options(body):
    return {k: body["bench"].get(k) for k in ("runtime", "precision", "threads", "fallback_runtimes")}


def test_an_x86_board_runs_the_profiles_runtime_and_threads(x86_out, boards, key):
    broker, _ = boards
    threads = load_profile("x86-64").default_threads
    body, row = _job_and_row(broker, "lab-x86", lambda: _deploy(x86_out, broker, key, "lab-x86", "onnx-int8"))
    assert body["signature"]["key_id"]  # the configuration travels inside the signed body
    assert _board_options(body) == {"runtime": "onnxruntime", "precision": None, "threads": threads,
                                    "fallback_runtimes": None}
    assert row["ok"] is True, row["error"]
    result = row["result"]
    assert result["runtime"] == "onnxruntime" and result["runtime_version"] and result["providers"]
    assert result["fallback"] is None
    assert result["threads_requested"] == threads and result["threads"] == min(threads, CPUS)
    if CPUS < threads:
        assert result["threads_capped"].startswith(f"threads capped at {CPUS}: {threads} asked for")
    else:
        assert result["threads_capped"] is None


def test_threads_given_to_deploy_reach_the_board(x86_out, boards, key, capsys):
    broker, _ = boards
    body, row = _job_and_row(broker, "lab-x86",
                             lambda: _cli(capsys, x86_out, broker, key, "lab-x86", "onnx-fp32", "--threads", "1"))
    assert body["bench"]["threads"] == 1 and body["bench"]["runtime"] == "onnxruntime"
    assert row["ok"] is True and row["result"]["threads"] == 1 and row["result"]["threads_capped"] is None


@pytest.mark.skipif(_has_tensorrt(), reason="TensorRT is installed here: the job would run TensorRT, not fall back")
def test_a_jetson_job_falls_back_to_onnxruntime_where_tensorrt_is_missing_and_says_why(jetson_out, boards, key):
    broker, _ = boards
    threads = load_profile("jetson-orin-nano").default_threads
    body, row = _job_and_row(broker, "lab-jetson",
                             lambda: _deploy(jetson_out, broker, key, "lab-jetson", "onnx-fp16"))
    assert _board_options(body) == {"runtime": "tensorrt", "precision": "fp16", "threads": threads,
                                    "fallback_runtimes": ["onnxruntime"]}
    assert row["ok"] is True, row["error"]
    result = row["result"]
    assert result["runtime"] == "onnxruntime" and "CPUExecutionProvider" in result["providers"]
    fallback = result["fallback"]
    assert fallback["from"] == "tensorrt" and fallback["to"] == "onnxruntime"
    assert "TensorRT is not installed" in fallback["reason"] and fallback["precision_dropped"] == "fp16"
    assert result["spec"]["runtime"] == "tensorrt"  # what was asked for stays on record
    assert result["threads_requested"] == threads and result["threads"] == min(threads, CPUS)
    if CPUS < threads:
        assert result["threads_capped"] == (f"threads capped at {CPUS}: {threads} asked for, but this machine "
                                            f"lets the benchmark use {CPUS} CPU{'s' if CPUS != 1 else ''}")


def test_runtime_given_to_deploy_replaces_the_planned_engine(jetson_out, boards, key, capsys):
    broker, _ = boards
    body, row = _job_and_row(broker, "lab-jetson", lambda: _cli(capsys, jetson_out, broker, key, "lab-jetson",
                                                                "onnx-int8", "--runtime", "onnxruntime"))
    assert _board_options(body) == {"runtime": "onnxruntime", "precision": None, "threads": 6,
                                    "fallback_runtimes": None}
    assert row["ok"] is True and row["result"]["runtime"] == "onnxruntime" and row["result"]["fallback"] is None


def test_a_precision_for_a_runtime_that_builds_no_engine_is_refused_on_the_host(x86_out, boards, key, capsys):
    broker, _ = boards
    code = main(["deploy", str(x86_out), "--device", "lab-x86", "--artifact", "onnx-int8", "--broker", broker.address,
                 "--key", str(key.private_key), "--precision", "int8"])
    err = capsys.readouterr().err
    assert code == 2
    assert "artifact 'onnx-int8' runs on onnxruntime: leave the precision out" in err


@pytest.mark.skipif(_has_tensorrt(), reason="TensorRT is installed here: the job would run TensorRT, not fall back")
def test_deploy_says_when_a_board_ran_otherwise_than_asked(jetson_out, boards, key, capsys):
    broker, _ = boards
    code = main(["deploy", str(jetson_out), "--device", "lab-jetson", "--artifact", "onnx-fp32", "--broker",
                 broker.address, "--key", str(key.private_key), "--wait", *CLI_BENCH])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "lab-jetson: ran onnxruntime instead of tensorrt: TensorRT is not installed" in err
    if CPUS < 6:
        assert f"lab-jetson: threads capped at {CPUS}: 6 asked for" in err
