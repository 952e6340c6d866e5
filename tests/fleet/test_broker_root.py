"""`edgeopt fleet broker` started as root: the mosquitto account, which owns the data folder, cannot
make root run Mosquitto as root, rewrite what Mosquitto reads as root, or hang the command."""
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mqtt_broker import free_port, mosquitto_binary

from edgeopt.errors import UserError
from edgeopt.fleet.broker import MqttBroker

TRIALS = 5
COMMAND = [sys.executable, "-c", "import sys; from edgeopt.cli.main import main; sys.exit(main(sys.argv[1:]))"]

# What the audit ran as the mosquitto account: rewrite every config it sees in its folder, with
# `user root` appended, between root's write and Mosquitto's read.
ATTACKER = r"""
import os, sys, time
folder, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < until:
    try:
        names = os.listdir(folder)
    except OSError:
        continue
    for name in names:
        if not name.endswith(".conf"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path) as handle:
                text = handle.read()
        except OSError:
            continue
        if "listener" in text and "user root" not in text:
            with open(path + ".new", "w") as handle:
                handle.write(text + "\nuser root\n")
            os.replace(path + ".new", path)
"""


@pytest.fixture
def account():
    if os.geteuid() != 0 or mosquitto_binary() is None:
        pytest.skip("needs root and mosquitto: only a broker started as root hands its folder to an account")
    try:
        return pwd.getpwnam("mosquitto")
    except KeyError:
        pytest.skip("no mosquitto account on this machine")


@pytest.fixture
def data_dir(open_dir):
    """A data folder the mosquitto account can reach, as /srv/... or /var/lib/... would be."""
    return open_dir / "broker"


def _python_for(account):
    """A Python the account can run (the system's, where this one lives in a folder closed to it)."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def _attacker(account, folder, seconds):
    return subprocess.Popen([_python_for(account), "-c", ATTACKER, str(folder), str(seconds)],
                            user=account.pw_uid, group=account.pw_gid, extra_groups=[])


def _uid_of(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def _wait_listening(port, process):
    import socket

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert process.poll() is None, "mosquitto exited"
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("mosquitto did not listen")


def test_the_race_is_won_when_root_writes_the_config_into_the_account_s_folder(account, data_dir):
    """The old way (config written into the data folder, then read by Mosquitto as root): the account
    rewrites it in between, and Mosquitto stays root."""
    data_dir.mkdir()
    os.chown(data_dir, account.pw_uid, account.pw_gid)
    attacker = _attacker(account, data_dir, 120)
    won = 0
    try:
        time.sleep(1.0)  # the attacker is watching
        for _ in range(2 * TRIALS):  # it wins about 3 in 5 here; the audit's won 5 of 5
            if won:
                break
            port = free_port()
            config = data_dir / "mosquitto.conf"
            config.unlink(missing_ok=True)
            config.write_text(f"persistence true\npersistence_location {data_dir}/\nlistener {port} 127.0.0.1\n"
                              f"allow_anonymous true\n")
            broker = subprocess.Popen([mosquitto_binary(), "-c", str(config)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            try:
                _wait_listening(port, broker)
                won += _uid_of(broker.pid) == 0
            finally:
                broker.kill()
                broker.wait()
    finally:
        attacker.kill()
        attacker.wait()
    assert won, f"the attacker won none of {2 * TRIALS} races against the old way: the test below proves nothing"


def test_the_account_wins_no_race_against_the_broker_command(account, data_dir):
    data_dir.mkdir()
    os.chown(data_dir, account.pw_uid, account.pw_gid)  # handed over by an earlier start
    attacker = _attacker(account, data_dir, 120)
    won = 0
    try:
        time.sleep(1.0)  # the attacker is watching
        for _ in range(TRIALS):
            broker = MqttBroker(data_dir, kind="mosquitto", port=free_port()).start()
            try:
                won += _uid_of(broker._process.pid) == 0
                assert broker.run_as == "mosquitto"
            finally:
                broker.stop()
            assert not (data_dir / "mosquitto.conf").exists()
    finally:
        attacker.kill()
        attacker.wait()
    assert won == 0, f"the mosquitto account made Mosquitto run as root in {won} of {TRIALS} starts"


def test_a_password_file_the_account_can_rewrite_is_refused(account, data_dir):
    data_dir.mkdir()
    mine = data_dir.parent / "edgeopt.passwd"
    mine.write_text("")
    os.chown(mine, account.pw_uid, account.pw_gid)
    broker = MqttBroker(data_dir, kind="mosquitto", port=free_port(),
                        listener_settings=[f"password_file {mine}", "allow_anonymous false"])
    with pytest.raises(UserError, match="account can change"):
        broker.start()
    assert broker.returncode is None

    inside = data_dir / "edgeopt.passwd"  # root's file, in the folder the account owns: it can replace it
    inside.write_text("")
    inside.chmod(0o640)
    broker = MqttBroker(data_dir, kind="mosquitto", port=free_port(),
                        listener_settings=[f"password_file {inside}", "allow_anonymous false"])
    os.chown(data_dir, account.pw_uid, account.pw_gid)
    with pytest.raises(UserError, match="account can change"):
        broker.start()

    roots = data_dir.parent / "roots.passwd"
    roots.write_text("")
    roots.chmod(0o640)
    os.chown(roots, 0, account.pw_gid)
    broker = MqttBroker(data_dir, kind="mosquitto", port=free_port(),
                        listener_settings=[f"password_file {roots}", "allow_anonymous false"]).start()
    broker.stop()


def test_a_fifo_planted_as_the_log_does_not_hang_the_command(tmp_path):
    data_dir = tmp_path / "broker"
    data_dir.mkdir()
    os.mkfifo(data_dir / f"{'mosquitto' if mosquitto_binary() else 'amqtt'}.log")
    started = time.monotonic()
    run = subprocess.run([*COMMAND, "fleet", "broker", "--port", str(free_port()), "--data-dir", str(data_dir)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a plain file" in lines[0] and "remove" in lines[0], run.stderr
    assert time.monotonic() - started < 30
