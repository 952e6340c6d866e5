"""A signed deploy from this (x86) host to an agent running on emulated aarch64 (scripts/verify_arm.sh).

Starts a loopback Mosquitto broker, the agent inside the arm64 userland (chroot, pinned CPU,
trusting a fresh signing key), deploys one of OUTDIR's artifacts (--artifact: tflite-int8,
ncnn-fp16, ...) signed with that key, and checks the answer: ok, valid, and its outputs matched
the host's FP32 reference. Prints one line per fact; exits 1 when the deploy did not come back right.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgeopt.fleet.broker import free_port


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="the arm64 userland")
    parser.add_argument("--venv", default="/opt/venv-agent", help="the agent's venv inside it")
    parser.add_argument("--cpu", default="cortex-a76")
    parser.add_argument("--profile", default="rpi5")
    parser.add_argument("--outdir", type=Path, required=True, help="an `edgeopt convert` output folder")
    parser.add_argument("--artifact", default="tflite-int8", help="which of OUTDIR's artifacts to deploy")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)

    from edgeopt.deploy import deploy
    from edgeopt.deploy.keys import init_keys

    work = Path(tempfile.mkdtemp(prefix="arm-deploy-"))
    port = free_port()
    (work / "mosquitto.conf").write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    broker = subprocess.Popen(["/usr/sbin/mosquitto", "-c", str(work / "mosquitto.conf")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    keys = init_keys(work / "keys")
    inside = Path("/opt/deploy-test")
    shutil.rmtree(args.root / inside.relative_to("/"), ignore_errors=True)
    (args.root / inside.relative_to("/")).mkdir(parents=True)
    shutil.copy(keys.public_key, args.root / inside.relative_to("/") / "trusted.pub")
    env = {"QEMU_CPU": args.cpu, "HOME": "/root", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    log_path = work / "agent.log"
    device = "emu-" + args.profile
    with open(log_path, "wb") as log:
        agent = subprocess.Popen(
            [shutil.which("chroot") or "/usr/sbin/chroot", str(args.root), f"{args.venv}/bin/edgeopt-agent", "--broker", f"127.0.0.1:{port}",
             "--device-id", device, "--profile", args.profile, "--data-dir", str(inside / "data"),
             "--trusted-key", str(inside / "trusted.pub"), "--telemetry-interval", "60", "--log-level", "info"],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        rows, deadline = None, time.monotonic() + 300
        while rows is None:  # the emulated agent takes a while to come online
            try:
                rows = deploy(args.outdir, broker=f"127.0.0.1:{port}", device=device, private_key=keys.private_key, artifact=args.artifact,
                              wait=True, timeout_s=args.timeout, bench={"runs": 10, "duration_s": 0.5})
            except Exception as exc:  # "no online device" until its retained status arrives
                if time.monotonic() > deadline or agent.poll() is not None:
                    print(f"deploy failed: {exc}\n{log_path.read_text(errors='replace')[-3000:]}")
                    return 1
                time.sleep(5)
        [row] = rows
        result = row.get("result") or {}
        check = result.get("output_check") or {}
        print(f"signed deploy of {row['artifact_key']} (key {keys.key_id}) to {device} on emulated {args.cpu}: "
              f"state {row['state']}, ok {row['ok']}, valid {result.get('valid')}")
        print(f"runtime {result.get('runtime')} {result.get('runtime_version')}, "
              f"p50 {((result.get('latency_ms') or {}).get('p50'))} ms (emulated: not a board timing)")
        print("output check: " + json.dumps(check.get("outputs")))
        good = row["state"] == "answered" and row["ok"] and result.get("valid") and check.get("ok")
        if not good:
            print(f"FAILED: {row.get('error')} {result.get('invalid_reasons')}")
        return 0 if good else 1
    finally:
        agent.terminate()
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        broker.terminate()
        broker.wait(10)
        if os.environ.get("KEEP_ARM_DEPLOY") is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
