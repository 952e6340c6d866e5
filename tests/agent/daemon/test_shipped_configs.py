"""The files in scripts/ that users install as they are: they must load."""
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from mqtt_broker import MqttBroker, free_port, mosquitto_binary
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeopt.fleet.broker import AUTOSAVE_CHANGES

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


def shipped_mosquitto(tmp_path, port):
    """scripts/mosquitto.conf as shipped, on `port` and with its persistence in tmp_path."""
    binary = mosquitto_binary()
    if binary is None:
        pytest.skip("mosquitto is not installed")
    text = (SCRIPTS / "mosquitto.conf").read_text()
    text = text.replace("listener 1883 127.0.0.1", f"listener {port} 127.0.0.1")
    text = text.replace("persistence_location /var/lib/mosquitto/", f"persistence_location {tmp_path}/")
    config = tmp_path / "mosquitto.conf"
    # As root, mosquitto would switch to the 'mosquitto' user, who may not write to tmp_path.
    config.write_text(text + ("user root\n" if os.geteuid() == 0 else ""))
    broker = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while True:
        assert broker.poll() is None, broker.stdout.read().decode()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return broker
        except OSError:
            assert time.monotonic() < deadline, "the shipped mosquitto.conf did not start a listener"
            time.sleep(0.05)


def test_shipped_mosquitto_config_starts_and_raises_the_queue_limit(tmp_path):
    text = (SCRIPTS / "mosquitto.conf").read_text()
    assert int(re.search(r"^max_queued_messages (\d+)$", text, re.M).group(1)) > 1000
    assert re.search(r"^persistence true$", text, re.M)
    broker = shipped_mosquitto(tmp_path, free_port())
    broker.terminate()
    broker.wait(10)


def test_shipped_mosquitto_config_saves_on_changes_like_the_local_broker(tmp_path):
    for name in ("mosquitto.conf", "mosquitto-secure.conf"):
        text = (SCRIPTS / name).read_text()
        assert re.search(r"^autosave_on_changes true$", text, re.M), name
        assert int(re.search(r"^autosave_interval (\d+)$", text, re.M).group(1)) == AUTOSAVE_CHANGES, name
    assert f"autosave_interval {AUTOSAVE_CHANGES}" in MqttBroker(tmp_path / "local")._mosquitto_config()


def _client(port, client_id, session_expiry=None):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = session_expiry or 0
    client.connect("127.0.0.1", port, 30, clean_start=False, properties=properties)
    return client


def test_shipped_mosquitto_config_keeps_queued_messages_through_a_crash(tmp_path):
    """kill -9 a minute before the first timed save would come: what was queued is on disk all the same."""
    port, sent = free_port(), 3 * AUTOSAVE_CHANGES
    broker = shipped_mosquitto(tmp_path, port)
    try:
        away = _client(port, "away", session_expiry=3600)  # a collector that subscribed, then left
        away.subscribe("queued/#", qos=1)
        away.loop(1)
        away.loop(1)
        away.disconnect()
        sender = _client(port, "sender")
        sender.loop_start()
        for n in range(sent):
            sender.publish("queued/x", str(n).encode(), qos=1).wait_for_publish(10)
        sender.loop_stop()
        broker.kill()
        broker.wait(10)
        broker = shipped_mosquitto(tmp_path, port)
        received = []
        back = _client(port, "away", session_expiry=3600)
        back.on_message = lambda client, userdata, message: received.append(int(message.payload))
        deadline = time.monotonic() + 10
        while len(received) < sent - AUTOSAVE_CHANGES and time.monotonic() < deadline:
            back.loop(0.1)
        back.disconnect()
        assert len(received) >= sent - AUTOSAVE_CHANGES, f"{len(received)} of {sent} queued messages survived"
    finally:
        broker.kill()
        broker.wait(10)
