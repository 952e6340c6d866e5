"""The audit's case, end to end: `kill -9` of the agent mid-benchmark takes the benchmark child with it,
so the restarted agent's re-run of the job is the only benchmark on the board."""
import json
import sys
import time

import pytest
from agent_harness import Listener
from harness import AgentProcess, wait_until, write_tiny_onnx

from edgeopt_agent import wire
from edgeopt_agent.bench.leftovers import RECORD_FILE
from edgeopt_agent.processes import process_start

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see processes end")]

DEVICE = "lifetime-dev"


def benchmark_children():
    """Pids of every benchmark child process on this machine that is not a zombie."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or b"edgeopt_agent.bench.child" not in (entry / "cmdline").read_bytes():
                continue
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:].split()[0] != b"Z":
            found.append(int(entry.name))
    return found


def test_killed_agent_takes_its_benchmark_child_along(mqtt_broker, tmp_path):
    data_dir = tmp_path / "agent-data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    listener = Listener(mqtt_broker, DEVICE)
    first = AgentProcess(mqtt_broker, data_dir, DEVICE).start()
    second = None
    try:
        listener.wait_for("status", lambda e: e["body"]["state"] == "online")
        already = set(benchmark_children())  # another test's children are not this test's business
        job = wire.benchmark_job(DEVICE, 1, "long", sha, "onnx", path="models/tiny.onnx", runs=10 ** 9,
                                     duration_s=4, max_duration_s=4, warmup_runs=1, warmup_s=0, idle_s=0,
                                     timeout_s=120)
        listener.send_job(job.encode())
        record = data_dir / RECORD_FILE
        assert wait_until(record.exists, "the agent to note a benchmark child", 30)
        note = json.loads(record.read_text())
        assert note["pid"] in benchmark_children()

        first.kill()
        began = time.monotonic()
        assert wait_until(lambda: note["pid"] not in benchmark_children(),
                          "the benchmark child to go with the killed agent (within 2 s)", 2.0)
        gone_after = time.monotonic() - began

        second = AgentProcess(mqtt_broker, data_dir, DEVICE).start()  # the job is still open: it runs again

        def new_note():
            try:
                seen = json.loads(record.read_text())
            except (OSError, ValueError):  # not there yet (the old note is dropped first)
                return None
            return seen if (seen["pid"], seen["start"]) != (note["pid"], note["start"]) else None

        rerun = wait_until(new_note, "the restarted agent to run the job again", 30)
        assert rerun, "the restarted agent never ran the job again"
        assert set(benchmark_children()) - already == {rerun["pid"]}  # only the re-run measures
        body = listener.wait_for("results", lambda e: e["body"]["job_id"] == "long", timeout=60)["body"]
        assert body["ok"] is True, body["error"]
        assert wait_until(lambda: not record.exists(), "the note to go with the child", 10)
        assert "was still running" not in second.log()  # nothing had to be reaped
        print(f"benchmark child gone {gone_after * 1000:.0f} ms after kill -9 of the agent")
        assert process_start(note["pid"]) != note["start"]
    finally:
        for agent in (first, second):
            if agent is not None:
                agent.close()
        listener.close()
