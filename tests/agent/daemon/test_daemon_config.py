"""Flags over the TOML file over defaults; every mistake is one actionable line."""
import pytest

from edgeopt_agent.daemon import cli
from edgeopt_agent.daemon.config import build_config
from edgeopt_agent.wire.broker import parse_broker
from edgeopt_agent.errors import UserError


def flags(**given):
    return given


def test_defaults(monkeypatch):
    monkeypatch.delenv("EDGEOPT_AGENT_PASSWORD", raising=False)
    config = build_config(flags(device_id="rpi-01"))
    assert (config.broker.host, config.broker.port, config.broker.tls) == ("localhost", 1883, False)
    assert config.telemetry_interval_s == 30.0
    assert config.client_id == "edgeopt-agent-rpi-01"
    assert config.data_dir.name == "edgeopt-agent"


def test_file_values_and_flags_over_them(tmp_path):
    (tmp_path / "ca.pem").write_text("ca")
    (tmp_path / "pw").write_text("s3cret\n")
    path = tmp_path / "agent.toml"
    path.write_text(
        'broker = "mqtt.example:8884"\ndevice_id = "from-file"\nprofile = "rpi5"\ndata_dir = "state"\n'
        'telemetry_interval = 10\ntls_ca = "ca.pem"\nusername = "board"\npassword_file = "pw"\n'
    )
    config = build_config(flags(device_id="from-flag", telemetry_interval=None), path)
    assert config.device_id == "from-flag"
    assert config.telemetry_interval_s == 10.0
    assert config.profile == "rpi5"
    assert config.data_dir == tmp_path / "state"
    assert (config.broker.host, config.broker.port, config.broker.tls) == ("mqtt.example", 8884, True)
    assert config.broker.tls_ca == tmp_path / "ca.pem"
    assert (config.broker.username, config.broker.password) == ("board", "s3cret")


def test_tls_changes_the_default_port():
    assert build_config(flags(device_id="d", tls=True)).broker.port == 8883


@pytest.mark.parametrize(
    "text, expected",
    [("host", ("host", None)), ("host:1", ("host", 1)), ("[::1]:1883", ("::1", 1883)), ("[fe80::2]", ("fe80::2", None))],
)
def test_broker_addresses(text, expected):
    assert parse_broker(text) == expected


@pytest.mark.parametrize(
    "given, fragment",
    [
        (dict(broker="host:99999"), "out of range"),
        (dict(broker="::1"), "HOST:PORT"),
        (dict(device_id="a/b"), "invalid device id"),
        (dict(telemetry_interval=0.0), "positive"),
        (dict(tls_cert="/nonexistent/c.pem"), "tls_key"),
        (dict(tls_ca="/nonexistent/ca.pem"), "no such file"),
        (dict(password="x"), "username"),
        (dict(reconnect_min=5.0, reconnect_max=1.0), "reconnect"),
        (dict(log_level="loud"), "log level"),
        (dict(max_job_timeout=0.0), "max_job_timeout must be positive"),
        (dict(clock_skew=-1.0), "clock skew must be zero or more"),
        (dict(device_id=" "), "device id is empty"),
        (dict(device_id="-lead"), "invalid device id '-lead'"),
        (dict(device_id="x" * 65), "1-64 letters"),
        (dict(device_id="rpi+1"), "names this board's MQTT topics"),
    ],
)
def test_bad_settings_are_user_errors(given, fragment):
    given.setdefault("device_id", "d")
    with pytest.raises(UserError, match=fragment):
        build_config(given)


def test_config_file_mistakes_name_the_file_and_key(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('device-id = "x"\n')
    with pytest.raises(UserError, match="unknown key 'device-id'; did you mean 'device_id'"):
        build_config({}, path)
    path.write_text("telemetry_interval = 'often'\n")
    with pytest.raises(UserError, match="'telemetry_interval' must be float"):
        build_config({}, path)
    path.write_text("broker = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        build_config({}, path)
    with pytest.raises(UserError, match="cannot read config file"):
        build_config({}, tmp_path / "missing.toml")


def test_cli_prints_one_line_and_exits_2_on_a_user_error(capsys):
    assert cli.main(["--broker", "localhost:0", "--device-id", "d"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("edgeopt-agent: error: broker port 0")


def test_cli_unknown_profile_is_a_user_error(capsys, tmp_path):
    assert cli.main(["--device-id", "d", "--profile", "rpi9", "--data-dir", str(tmp_path)]) == 2
    assert "unknown device 'rpi9'" in capsys.readouterr().err


def test_an_empty_device_id_is_a_user_error_not_the_host_name(capsys, tmp_path):
    assert cli.main(["--device-id", "", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device id is empty: give --device-id ID" in err
    path = tmp_path / "agent.toml"
    path.write_text('device_id = ""\n')
    with pytest.raises(UserError, match="device id is empty"):
        build_config({}, path)
    assert build_config({"device_id": None}).device_id  # left out entirely: the host name


def test_clock_skew_from_file_and_flag(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('device_id = "d"\nclock_skew = 30\n')
    assert build_config({}, path).clock_skew_s == 30.0
    assert build_config({"clock_skew": 5.0}, path).clock_skew_s == 5.0
    assert build_config({"device_id": "d"}).clock_skew_s == 300.0


def test_cli_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("edgeopt-agent ")


def test_cli_unusable_tls_files_fail_at_start(capsys, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate")
    assert cli.main(["--device-id", "d", "--data-dir", str(tmp_path / "data"), "--tls-ca", str(ca)]) == 2
    assert "cannot set up TLS" in capsys.readouterr().err


def test_two_agents_cannot_share_a_data_dir(tmp_path):
    from edgeopt_agent.daemon.agent import Agent

    config = build_config({"device_id": "d", "data_dir": str(tmp_path)})
    first = Agent(config)
    with pytest.raises(UserError, match="already running with data dir"):
        Agent(config)
    first.shutdown()  # releases the data dir
    Agent(config).shutdown()
