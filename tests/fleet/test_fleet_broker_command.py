"""`edgeopt fleet broker`: Mosquitto with the shipped settings (persistent across restarts, also
started as root), the embedded broker where Mosquitto is missing, and a busy port refused in one line."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from mqtt_broker import free_port, mosquitto_binary
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeopt.fleet.broker import LAUNCHER_KEYS, SHIPPED_CONFIG, mosquitto_settings

# The command as a user runs it; MISSING_MOSQUITTO runs it on a machine without mosquitto.
COMMAND = [sys.executable, "-c", "import sys; from edgeopt.cli.main import main; sys.exit(main(sys.argv[1:]))"]
MISSING_MOSQUITTO = [sys.executable, "-c", "import sys; import edgeopt.fleet.broker as b; "
                     "b.mosquitto_binary = lambda: None; from edgeopt.cli.main import main; sys.exit(main(sys.argv[1:]))"]


class BrokerCommand:
    def __init__(self, command, port, data_dir):
        env = {k: v for k, v in os.environ.items() if k not in ("EDGEOPT_BROKER", "EDGEOPT_TEST_BROKER")}
        self.process = subprocess.Popen([*command, "fleet", "broker", "--port", str(port), "--data-dir", str(data_dir)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.first_line = self.process.stdout.readline().strip()
        assert self.first_line.startswith("started"), self.first_line + self.process.stderr.read()

    def stop(self, sig=signal.SIGINT):
        self.process.send_signal(sig)
        out, err = self.process.communicate(timeout=20)
        return self.process.returncode, out, err


def mosquitto_config(command_pid):
    """The config the command's Mosquitto read: the memory file it still holds open."""
    children = Path(f"/proc/{command_pid}/task/{command_pid}/children").read_text().split()
    for child in children:
        for fd in Path(f"/proc/{child}/fd").iterdir():
            if os.readlink(fd).startswith("/memfd:mosquitto.conf"):
                return fd.read_text()
    raise AssertionError(f"no Mosquitto holding its config among {children}")


def _wait_closed(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _v5_client(port, client_id):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 3600
    client.connect("127.0.0.1", port, 30, clean_start=False, properties=properties)
    return client


def test_shipped_settings_leave_out_what_the_launcher_sets():
    settings = mosquitto_settings(SHIPPED_CONFIG)
    assert "max_queued_messages 1000000" in settings and "persistence true" in settings
    assert not [line for line in settings if line.split()[0] in LAUNCHER_KEYS]


def test_mosquitto_keeps_queued_messages_across_a_ctrl_c_and_restart(open_dir):
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed (the embedded broker is tested below)")
    port, data_dir, sent = free_port(), open_dir / "broker", 5
    broker = BrokerCommand(COMMAND, port, data_dir)
    assert f"started mosquitto on 127.0.0.1:{port}" in broker.first_line
    assert "settings: scripts/mosquitto.conf" in broker.first_line
    assert not (data_dir / "mosquitto.conf").exists()  # handed over by descriptor, never a file
    config = mosquitto_config(broker.process.pid)
    assert "max_queued_messages 1000000" in config and f"persistence_location {data_dir.resolve()}/" in config

    away = _v5_client(port, "collector-away")  # subscribes, then leaves: the broker queues for it
    away.subscribe("edgeopt/v1/test/results", qos=1)
    away.loop(1)
    away.loop(1)
    away.disconnect()
    sender = _v5_client(port, "sender")
    sender.loop_start()
    for n in range(sent):
        sender.publish("edgeopt/v1/test/results", str(n).encode(), qos=1).wait_for_publish(10)
    sender.disconnect()
    sender.loop_stop()

    code, out, err = broker.stop(signal.SIGINT)
    assert code == 0, err
    assert "broker stopped" in out
    assert _wait_closed(port), "mosquitto still listens after Ctrl-C"
    assert (data_dir / "mosquitto.db").is_file()

    broker = BrokerCommand(COMMAND, port, data_dir)
    try:
        received = []
        back = _v5_client(port, "collector-away")
        back.on_message = lambda client, userdata, message: received.append(int(message.payload))
        deadline = time.monotonic() + 10
        while len(received) < sent and time.monotonic() < deadline:
            back.loop(0.1)
        back.disconnect()
        assert sorted(received) == list(range(sent))
    finally:
        code, _, err = broker.stop(signal.SIGTERM)
    assert code == 0, err
    log = (data_dir / "mosquitto.log").read_text()
    assert "Permission denied" not in log and "Error" not in log, log
    if os.geteuid() == 0:  # started as root it drops to the mosquitto user, who owns the data dir
        assert "run as mosquitto" in broker.first_line
        assert Path(data_dir / "mosquitto.db").stat().st_uid == Path(data_dir).stat().st_uid != 0


def test_as_root_a_data_dir_the_mosquitto_user_cannot_reach_keeps_the_broker_root(tmp_path):
    if mosquitto_binary() is None:
        pytest.skip("mosquitto is not installed")
    if os.geteuid() != 0:
        pytest.skip("only a broker started as root changes user")
    os.chmod(tmp_path, 0o700)
    port, data_dir = free_port(), tmp_path / "broker"
    broker = BrokerCommand(COMMAND, port, data_dir)
    client = _v5_client(port, "retained-writer")
    client.loop_start()
    client.publish("edgeopt/v1/test/status", b"online", qos=1, retain=True).wait_for_publish(10)
    client.disconnect()
    client.loop_stop()
    code, _, err = broker.stop()
    assert code == 0, err
    assert "run as root" in broker.first_line
    assert (data_dir / "mosquitto.db").is_file()
    assert "Permission denied" not in (data_dir / "mosquitto.log").read_text()


def test_without_mosquitto_the_embedded_broker_serves_until_sigterm(tmp_path):
    port = free_port()
    broker = BrokerCommand(MISSING_MOSQUITTO, port, tmp_path / "broker")
    try:
        assert f"started the embedded broker (amqtt, MQTT 3.1.1) on 127.0.0.1:{port}" in broker.first_line
        assert "nothing persists" in broker.first_line
        received = []
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="probe", protocol=mqtt.MQTTv311)
        client.on_message = lambda c, userdata, message: received.append(message.payload)
        client.connect("127.0.0.1", port, 30)
        client.subscribe("edgeopt/v1/probe/status", qos=1)
        client.loop(1)
        client.publish("edgeopt/v1/probe/status", b"hello", qos=1)
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            client.loop(0.1)
        client.disconnect()
        assert received == [b"hello"]
    finally:
        code, out, err = broker.stop(signal.SIGTERM)
    assert code == 0, err
    assert "broker stopped" in out
    assert _wait_closed(port), "the embedded broker still listens after SIGTERM"


def test_a_busy_port_is_refused_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([*COMMAND, "fleet", "broker", "--port", str(port), "--data-dir", str(tmp_path / "b")],
                             capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is already in use (another broker?): stop that one, or give this one "
        f"another with --port"]
    assert "started" not in run.stdout


def test_a_stop_sent_the_moment_it_says_started_stops_the_broker_too(tmp_path):
    """A supervisor may stop the command as soon as its first line appears: the broker it started goes
    with it (the signal handlers are in place before the broker starts)."""
    port = free_port()
    broker = BrokerCommand(COMMAND, port, tmp_path / "broker")
    code, out, err = broker.stop(signal.SIGTERM)
    assert code == 0, err
    assert "broker stopped" in out
    assert _wait_closed(port), "the broker still listens after its command was stopped"


@pytest.mark.skipif(os.geteuid() != 0 or mosquitto_binary() is None,
                    reason="needs root and mosquitto: the data folder is handed to the mosquitto user only then")
def test_as_root_links_planted_in_the_data_folder_are_never_followed(tmp_path):
    """The folder belongs to the broker's user once handed over: a link it plants there must not make
    root hand over, or overwrite, the file it points at."""
    import pwd

    from edgeopt.fleet.broker import MqttBroker

    try:
        pwd.getpwnam("mosquitto")
    except KeyError:
        pytest.skip("no mosquitto user on this machine")
    open_dir = Path(tempfile.mkdtemp(prefix="edgeopt-broker-links-", dir="/tmp"))
    os.chmod(open_dir, 0o755)
    try:
        data_dir = open_dir / "broker"
        data_dir.mkdir()
        secret, config_target = open_dir / "secret", open_dir / "config-target"
        secret.write_text("root's")
        config_target.write_text("untouched")
        os.chmod(secret, 0o600)
        (data_dir / "mosquitto.db.evil").symlink_to(secret)
        (data_dir / "mosquitto.conf").symlink_to(config_target)
        broker = MqttBroker(data_dir, kind="mosquitto", port=free_port()).start()
        broker.stop()
        assert secret.stat().st_uid == 0, "root handed a linked file to the mosquitto user"
        assert config_target.read_text() == "untouched", "root wrote the broker's config through a link"
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)
