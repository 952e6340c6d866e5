"""The README's main job, end to end, as a user runs it: `edgeopt quickstart`."""
import json
import os
import subprocess
import sys

import psutil
import pytest

pytestmark = pytest.mark.slow


def test_quickstart_converts_deploys_measures_collects_and_reports(tmp_path):
    out = tmp_path / "qs"
    run = subprocess.run([sys.executable, "-m", "edgeopt.cli.main", "quickstart", "-o", str(out), "--json",
                          "--timeout", "120"], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, COLUMNS="200"))
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    manifest = json.loads((out / "model" / "manifest.json").read_text())
    assert summary["recommended"] == manifest["recommended"]
    [deployment] = summary["deployments"]
    assert deployment["ok"] is True and deployment["artifact_key"] == manifest["recommended"]
    [row] = [r for r in summary["results"] if r["job_id"] == deployment["job_id"]]
    assert row["device_id"] == "quickstart-x86" and row["valid"] is True
    assert row["p50_ms"] > 0 and row["artifact_key"] == manifest["recommended"]
    recommended = next(a for a in manifest["artifacts"] if a["recommended"])
    assert row["accuracy_drop_points"] == pytest.approx(recommended["accuracy"]["drop_points"])
    html = (out / "report.html").read_text()
    assert "quickstart-x86" in html and "<svg" in html
    # Written while the agent ran: its board is online, and the lone artifact's missing speed-up says why.
    assert ">online<" in html and ">offline<" not in html
    assert "no FP32 baseline measured on this board" in html
    agent_log = (out / "agent.log").read_text()
    assert "Traceback" not in agent_log
    # The collector's confirmations are signed by a key the fleet key certified: the agent acts on them.
    assert "ignoring a confirm message" not in agent_log
    # Everything it started is stopped: no agent or broker process still points into its folder.
    leftovers = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                 if any(str(out) in part for part in (p.info["cmdline"] or []))]
    assert leftovers == []
