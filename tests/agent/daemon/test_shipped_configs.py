"""The files in scripts/ that users install as they are: they must load."""
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from mqtt_broker import free_port, mosquitto_binary

from edgeopt_agent.daemon.config import build_config

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def test_example_agent_config_loads(tmp_path):
    config = build_config({}, SCRIPTS / "agent.example.toml")
    assert config.device_id == "rpi5-lab-01" and config.profile == "rpi5"
    assert (config.broker.host, config.broker.port) == ("broker.local", 1883)
    assert config.telemetry_interval_s == 30.0


def test_service_unit_runs_the_console_script_with_the_example_config():
    unit = (SCRIPTS / "edgeopt-agent.service").read_text()
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", unit, re.M)
    assert exec_start and exec_start.group(1).endswith("/edgeopt-agent")
    assert "--config /etc/edgeopt/agent.toml" in exec_start.group(2)
    assert re.search(r"^KillSignal=SIGTERM$", unit, re.M)
    assert re.search(r"^StateDirectory=edgeopt-agent$", unit, re.M)


def test_shipped_mosquitto_config_starts_and_raises_the_queue_limit(tmp_path):
    binary = mosquitto_binary()
    if binary is None:
        pytest.skip("mosquitto is not installed")
    text = (SCRIPTS / "mosquitto.conf").read_text()
    assert int(re.search(r"^max_queued_messages (\d+)$", text, re.M).group(1)) > 1000
    assert re.search(r"^persistence true$", text, re.M)
    port = free_port()
    text = text.replace("listener 1883 127.0.0.1", f"listener {port} 127.0.0.1")
    text = text.replace("persistence_location /var/lib/mosquitto/", f"persistence_location {tmp_path}/")
    config = tmp_path / "mosquitto.conf"
    # As root, mosquitto would switch to the 'mosquitto' user, who may not write to tmp_path.
    config.write_text(text + ("user root\n" if os.geteuid() == 0 else ""))
    broker = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert broker.poll() is None, broker.stdout.read().decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the shipped mosquitto.conf did not start a listener"
                time.sleep(0.05)
    finally:
        broker.terminate()
        broker.wait(10)
