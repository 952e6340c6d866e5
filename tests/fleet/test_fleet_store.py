"""The fleet store on SQLite and (when a server is there) PostgreSQL: storing, duplicates, gaps,
rejections, device state, result comparison, schema migrations (`db_url`: tests/fleet/conftest.py)."""
import json
import sqlite3

import pytest

from edgeopt.errors import UserError
from edgeopt.fleet.migrations import MIGRATIONS, Migration, latest_version
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire

@pytest.fixture
def store(db_url):
    opened = open_store(db_url)
    yield opened
    opened.close()


def ingest(store, published):
    return store.ingest(published.topic, published.payload)


def seqs_of(store, device_id):
    return sorted(row["seq"] for row in store.telemetry(device=device_id))


def test_telemetry_is_stored_with_its_figures_and_full_body(store):
    device = SimulatedDevice("rpi-01", profile="rpi4", seed=1)
    sent = device.telemetry(temperature_c=61.5, power_w=4.25)
    outcome = ingest(store, sent)
    assert (outcome.status, outcome.kind, outcome.device_id, outcome.message_id) == (
        "stored", "telemetry", "rpi-01", sent.envelope.id)
    [row] = store.telemetry()
    body = sent.envelope.body
    assert row["seq"] == 1 and row["ts"] == sent.envelope.ts
    assert row["temperature_c"] == 61.5 and row["power_w"] == 4.25 and row["power_source"] == "simulated"
    assert row["cpu_percent"] == pytest.approx(sum(body["cpu"]["load_pct"]) / 4, abs=0.01)
    assert row["memory_used_mb"] == pytest.approx(3906.0 - body["memory"]["available_mb"], abs=0.1)
    assert row["body"] == body


def test_the_same_message_twice_is_stored_once_and_counted(store):
    sent = SimulatedDevice("rpi-01").telemetry()
    assert ingest(store, sent).status == "stored"
    assert ingest(store, sent).status == "duplicate"
    report = store.ingest_many([(sent.topic, sent.payload)] * 2)
    assert [o.status for o in report.outcomes] == ["duplicate", "duplicate"]
    assert len(store.telemetry()) == 1
    stats = store.stats()
    assert stats["stored"] == {"telemetry": 1} and stats["duplicate"] == {"telemetry": 3}


def test_a_skipped_sequence_number_is_an_open_gap_until_it_arrives(store):
    device = SimulatedDevice("rpi-01")
    late = {}
    for seq in range(1, 8):
        message = device.telemetry()
        if seq in (3, 4, 5):
            late[seq] = message
        else:
            ingest(store, message)
    assert [(g["first_missing_seq"], g["last_missing_seq"], g["filled"]) for g in store.gaps()] == [(3, 5, False)]
    assert store.devices()[0]["missing_messages"] == 3

    ingest(store, late[4])
    assert [(g["first_missing_seq"], g["last_missing_seq"], g["filled"]) for g in store.gaps()] == [
        (3, 3, False), (4, 4, True), (5, 5, False)]
    assert store.stats()["gaps"] == {"missing": 2, "filled": 1, "suspect_jumps": 0}

    store.ingest_many([(late[5].topic, late[5].payload), (late[3].topic, late[3].payload)])
    assert all(g["filled"] for g in store.gaps())
    assert store.gaps(open_only=True) == []
    assert store.devices()[0]["missing_messages"] == 0
    assert seqs_of(store, "rpi-01") == list(range(1, 8))


def test_reordering_inside_one_batch_records_no_gap(store):
    device = SimulatedDevice("rpi-01")
    batch = [device.telemetry() for _ in range(6)]
    shuffled = [batch[i] for i in (3, 0, 5, 1, 4, 2)]
    report = store.ingest_many([(m.topic, m.payload) for m in shuffled])
    assert [o.status for o in report.outcomes] == ["stored"] * 6
    assert [o.message_id for o in report.outcomes] == [m.envelope.id for m in shuffled]
    assert store.gaps() == [] and report.new_gaps == 0


def test_streams_are_per_device_and_kind_and_status_numbers_are_not_checked(store):
    a, b = SimulatedDevice("a"), SimulatedDevice("b")
    ingest(store, a.telemetry())
    ingest(store, b.telemetry(seq=40))  # b's first message sets its baseline: no gap before it
    ingest(store, a.result("job-1"))
    ingest(store, a.result("job-3", seq=3))
    ingest(store, a.status(seq=1))
    ingest(store, a.status(seq=9))  # agents number a Last Will per connection: status seqs have holes
    assert [(g["device_id"], g["kind"], g["first_missing_seq"]) for g in store.gaps()] == [("a", "results", 2)]


def test_first_seen_baseline_and_late_messages_before_it_are_stored_without_a_gap(store):
    device = SimulatedDevice("rpi-01")
    messages = [device.telemetry() for _ in range(3)]
    for message in reversed(messages):
        assert ingest(store, message).status == "stored"
    assert store.gaps() == []
    assert seqs_of(store, "rpi-01") == [1, 2, 3]


def rejected_reason(store, topic, payload):
    outcome = store.ingest(topic, payload)
    assert outcome.status == "rejected", outcome
    return outcome.reason


def test_bad_messages_are_rejected_with_their_reason_and_never_stored(store):
    device = SimulatedDevice("rpi-01")
    good = device.telemetry()
    data = json.loads(good.payload)
    signed = good.changed  # what the board itself got wrong: signed by it all the same
    cases = {
        "malformed_message": [b"not json", b"[1, 2]", json.dumps({**data, "seq": -1}).encode(),
                              json.dumps({k: v for k, v in data.items() if k != "ts"}).encode(), b"\xff\xfe"],
        "wrong_device": [signed({**data, "device_id": "rpi-02"})],
        "unsupported_schema": [signed({**data, "schema": 2})],
        "unexpected_type": [signed({**data, "type": "result"})],
        "unsigned_message": [json.dumps({k: v for k, v in data.items() if k != "sig"}).encode()],
        "signature_invalid": [json.dumps({**data, "seq": 5}).encode(),  # someone's altered copy
                              json.dumps({**data, "sig": {**data["sig"], "value": "AAAA"}}).encode()],
    }
    for reason, payloads in cases.items():
        for payload in payloads:
            assert rejected_reason(store, good.topic, payload) == reason, payload
    status = device.status()
    assert rejected_reason(store, wire.status_topic("rpi-01"),
                           status.changed({**json.loads(status.payload), "body": {"state": "sleepy"}})) == "invalid_body"
    published = device.result("job-1")
    result = json.loads(published.payload)
    for body in ({**result["body"], "ok": "yes"}, {**result["body"], "meta": ["x"]},
                 {**result["body"], "meta": {"accuracy_drop_points": "0.3"}},
                 {**result["body"], "ok": False, "error": None}):
        assert rejected_reason(store, wire.results_topic("rpi-01"), published.changed({**result, "body": body})) \
            == "invalid_body"
    assert rejected_reason(store, "edgeopt/v1/rpi-01/jobs", good.payload) == "unexpected_topic"
    assert rejected_reason(store, "edgeopt/v1/-bad/telemetry", good.payload) == "invalid_topic"
    assert rejected_reason(store, "other/topic", good.payload) == "invalid_topic"

    stats = store.stats()
    assert stats["stored"] == {} and store.telemetry() == [] and store.results() == [] and store.devices() == []
    assert stats["rejected"] == {"malformed_message": 5, "wrong_device": 1, "unsupported_schema": 1,
                                 "unexpected_type": 1, "invalid_body": 5, "unexpected_topic": 1, "invalid_topic": 2,
                                 "unsigned_message": 1, "signature_invalid": 2}
    latest = store.rejected(limit=1)[0]
    assert latest["topic"] == "other/topic" and latest["payload_bytes"] == len(good.payload)
    assert latest["excerpt"].startswith('{"id":"') and latest["excerpt"].endswith("…")
    wrong = [r for r in store.rejected(limit=50) if r["reason"] == "wrong_device"][0]
    assert wrong["message_id"] == good.envelope.id and "rpi-02" in wrong["detail"]
    # The good message itself still goes in afterwards: a rejection is not a duplicate.
    assert ingest(store, good).status == "stored"


def test_oversized_and_binary_payloads_are_rejected_with_a_printable_excerpt(db_url):
    with open_store(db_url, max_message_bytes=1024) as small:
        topic = wire.telemetry_topic("rpi-01")
        assert rejected_reason(small, topic, b"{" + b" " * 2000 + b"}") == "oversized"
        assert rejected_reason(small, topic, b"\x00\x01binary\xff") == "malformed_message"
        excerpts = [r["excerpt"] for r in small.rejected()]
        assert excerpts[0] == "\\x00\\x01binary\\xff"
        assert len(excerpts[1]) <= 260


def test_non_finite_numbers_are_stored_as_null(store):
    device = SimulatedDevice("rpi-01")
    sent = device.telemetry()
    data = json.loads(sent.payload)
    data["body"]["memory"]["swap_used_mb"] = None
    # NaN is not JSON (the agent sends null); a sender that writes it is read as null, signature included.
    payload = sent.changed(data).replace(b'"swap_used_mb":null', b'"swap_used_mb":NaN')
    assert b"NaN" in payload
    assert store.ingest(sent.topic, payload).status == "stored"
    assert store.telemetry()[0]["body"]["memory"]["swap_used_mb"] is None


def test_device_state_follows_the_newest_status_even_when_statuses_arrive_out_of_order(store):
    device = SimulatedDevice("rpi-01", profile="rpi4", agent_version="0.1.0")
    online = device.status()  # seq 1
    will = device.status(wire.OFFLINE, "connection_lost")  # seq 2: the Will of that connection
    online_again = device.status()  # seq 3
    ingest(store, online)
    assert store.devices()[0]["state"] == "online"
    ingest(store, online_again)
    ingest(store, will)  # arrives late: older than online_again
    [row] = store.devices()
    assert (row["state"], row["profile"], row["agent_version"], row["mqtt_protocol"]) == ("online", "rpi4", "0.1.0", "5")

    # Agent state wiped (its provisioned key kept): seqs restart.
    restarted = SimulatedDevice("rpi-01", clock=lambda: online.envelope.ts + 60, key=device.key)
    ingest(store, restarted.status(wire.OFFLINE, "shutdown"))
    assert (store.devices()[0]["state"], store.devices()[0]["state_reason"]) == ("offline", "shutdown")


def test_devices_show_profile_versions_temperature_and_last_seen(store):
    device = SimulatedDevice("jetson-01", profile="jetson-orin-nano")
    first = device.telemetry(temperature_c=48.0)
    second = device.telemetry(temperature_c=55.5)
    ingest(store, second)
    ingest(store, first)  # older: must not overwrite the newer reading
    [row] = store.devices()
    assert row["state"] == "unknown"  # no status message seen yet
    assert row["profile"] == "jetson-orin-nano" and row["agent_version"] == "0.1.0"
    assert row["runtimes"] == {"onnxruntime": "1.31.1", "ai-edge-litert": "2.3.0"}
    assert row["temperature_c"] == 55.5
    assert row["last_seen"] == max(first.envelope.ts, second.envelope.ts)


def meta(model, key, drop, fmt="onnx", precision="int8"):
    return {"model": model, "model_sha256": "a" * 64, "artifact_key": key, "format": fmt, "precision": precision,
            "accuracy_drop_points": drop, "manifest_sha256": "b" * 64}


def test_results_keep_the_latest_per_device_model_artifact_sorted_for_comparison(store):
    rpi, jetson = SimulatedDevice("rpi-01", profile="rpi4"), SimulatedDevice("jetson-01", profile="jetson-orin-nano")
    ingest(store, rpi.status())
    ingest(store, jetson.status())
    ingest(store, rpi.result("j1", p50_ms=30.0, meta=meta("digits", "onnx-fp32", 0.0, precision="fp32")))
    ingest(store, rpi.result("j2", p50_ms=12.0, meta=meta("digits", "onnx-int8", 0.4), energy_mj=60.0))
    ingest(store, jetson.result("j3", p50_ms=4.0, meta=meta("digits", "onnx-int8", 0.4), valid=False))
    ingest(store, rpi.result("j4", p50_ms=11.0, meta=meta("digits", "onnx-int8", 0.4)))  # newer run, same artifact
    ingest(store, jetson.result("j5", ok=False, error_kind="artifact_rejected", error_message="bad signature",
                                meta=meta("digits", "tflite-int8", 0.5, fmt="tflite")))
    ingest(store, rpi.result("j6", p50_ms=2.0, meta=meta("alpha", "onnx-int8", None)))

    rows = store.results()
    assert [(r["model"], r["device_id"], r["artifact_key"], r["job_id"]) for r in rows] == [
        ("alpha", "rpi-01", "onnx-int8", "j6"),
        ("digits", "jetson-01", "onnx-int8", "j3"),
        ("digits", "rpi-01", "onnx-int8", "j4"),
        ("digits", "rpi-01", "onnx-fp32", "j1"),
        ("digits", "jetson-01", "tflite-int8", "j5"),  # failures sort last within their model
    ]
    fast = rows[1]
    assert fast["profile"] == "jetson-orin-nano" and fast["format"] == "onnx" and fast["precision"] == "int8"
    assert (fast["p50_ms"], fast["p90_ms"], fast["p99_ms"]) == (4.0, pytest.approx(4.4), pytest.approx(5.2))
    assert fast["throughput_ips"] == 250.0 and fast["peak_rss_mb"] == 120.0 and fast["runtime"] == "onnxruntime"
    assert fast["accuracy_drop_points"] == 0.4
    assert fast["valid"] is False and fast["invalid_reasons"] == ["during the run: throttled"] and fast["ok"] is True
    failed = rows[4]
    assert (failed["ok"], failed["error_kind"], failed["error_message"]) == (False, "artifact_rejected", "bad signature")
    assert failed["p50_ms"] is None and failed["format"] == "tflite"

    assert [r["job_id"] for r in store.results(model="digits", profile="rpi4")] == ["j4", "j1"]
    assert [r["job_id"] for r in store.results(device="jetson-01")] == ["j3", "j5"]
    assert len(store.results(latest=False)) == 6
    assert store.results(model="digits", device="rpi-01", with_body=True)[0]["body"]["result"]["runs"] == 100


def test_results_without_deploy_metadata_fall_back_to_the_artifact_file(store):
    device = SimulatedDevice("rpi-01")
    ingest(store, device.result("job-9", p50_ms=5.0))
    [row] = store.results()
    assert (row["model"], row["artifact_key"], row["format"], row["precision"]) == (None, "job-9.onnx", "onnx", None)


def test_telemetry_filters_by_device_time_and_keeps_the_newest_n_oldest_first(store):
    now = [1000.0]
    a = SimulatedDevice("a", clock=lambda: now[0])
    b = SimulatedDevice("b", clock=lambda: 5000.0)
    for _ in range(5):
        ingest(store, a.telemetry())
        now[0] += 10
    ingest(store, b.telemetry())
    assert [r["seq"] for r in store.telemetry(device="a")] == [1, 2, 3, 4, 5]
    assert [r["seq"] for r in store.telemetry(device="a", limit=2)] == [4, 5]
    assert [r["ts"] for r in store.telemetry(device="a", since=1030)] == [1030.0, 1040.0]
    assert [r["device_id"] for r in store.telemetry(limit=1)] == ["b"]
    with pytest.raises(ValueError):
        store.telemetry(limit=0)


def test_everything_stored_survives_closing_and_reopening(db_url):
    device = SimulatedDevice("rpi-01")
    with open_store(db_url) as first:
        ingest(first, device.status())
        ingest(first, device.telemetry())
        ingest(first, device.result("job-1"))
    with open_store(db_url, create=False) as again:
        assert again.stats()["stored"] == {"status": 1, "telemetry": 1, "results": 1}
        assert again.devices()[0]["state"] == "online"


def schema_version(store):
    with store.db.transaction() as tx:
        return [r["version"] for r in tx.rows("SELECT version FROM schema_version ORDER BY version")]


def test_schema_is_created_once_and_later_migrations_apply_in_order(db_url):
    with open_store(db_url) as store:
        assert schema_version(store) == [m.version for m in MIGRATIONS]
    with open_store(db_url) as store:  # opening again applies nothing twice
        assert schema_version(store) == [m.version for m in MIGRATIONS]
    newest = latest_version()
    later = MIGRATIONS + (
        Migration(newest + 2, "index telemetry by power", ("CREATE INDEX telemetry_power ON telemetry (power_w)",)),
        Migration(newest + 1, "a note per device", ("ALTER TABLE devices ADD COLUMN note TEXT",)),
    )
    with open_store(db_url, migrations=later) as store:
        assert schema_version(store) == [m.version for m in MIGRATIONS] + [newest + 1, newest + 2]
        with store.db.transaction() as tx:
            tx.execute("INSERT INTO devices (device_id, first_seen, last_seen, note) VALUES (?, ?, ?, ?)",
                       ("x", 1.0, 1.0, "rack 3"))
    with pytest.raises(UserError, match=f"schema version {newest + 2}, newer than this edgeopt knows"):
        open_store(db_url)


def test_a_failing_migration_leaves_the_schema_as_it_was(db_url):
    broken = MIGRATIONS + (Migration(latest_version() + 1, "broken", (
        "ALTER TABLE devices ADD COLUMN note TEXT", "THIS IS NOT SQL")),)
    with pytest.raises(Exception):
        open_store(db_url, migrations=broken)
    with open_store(db_url) as store:
        assert schema_version(store) == [m.version for m in MIGRATIONS]
        with pytest.raises(Exception, match="note"):
            with store.db.transaction() as tx:
                tx.rows("SELECT note FROM devices")


def test_sqlite_database_uses_wal(tmp_path):
    path = tmp_path / "fleet.db"
    open_store(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("url, path", [
    ("sqlite:///rel/fleet.db", "rel/fleet.db"),
    ("rel/bare.db", "rel/bare.db"),
])
def test_sqlite_urls_name_relative_paths(tmp_path, monkeypatch, url, path):
    monkeypatch.chdir(tmp_path)
    open_store(url).close()
    assert (tmp_path / path).is_file()


def test_absolute_sqlite_url_and_the_environment_default(tmp_path, monkeypatch):
    open_store(f"sqlite:///{tmp_path}/abs.db").close()  # sqlite:////tmp/... : four slashes
    assert (tmp_path / "abs.db").is_file()
    monkeypatch.setenv("EDGEOPT_FLEET_DB", f"sqlite:///{tmp_path}/from-env.db")
    open_store().close()
    assert (tmp_path / "from-env.db").is_file()


@pytest.mark.parametrize("url, message", [
    ("mysql://x@y/z", "unsupported database URL scheme 'mysql'"),
    ("sqlite://", "needs a path"),
    ("  ", "empty database URL"),
])
def test_bad_database_urls_say_what_works(url, message):
    with pytest.raises(UserError, match=message):
        open_store(url)


def test_readers_do_not_create_an_empty_database(tmp_path):
    with pytest.raises(UserError, match="no fleet database at"):
        open_store(f"sqlite:///{tmp_path}/missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_a_file_that_is_not_a_database_is_a_user_error(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database " * 100)
    with pytest.raises(UserError, match="cannot open the fleet database"):
        open_store(f"sqlite:///{path}")
    assert path.read_text().startswith("these are my notes")


def test_unreachable_postgresql_is_a_user_error_without_the_password():
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'edgeopt[fleet]')")
    with pytest.raises(UserError, match=r"cannot connect to PostgreSQL at postgresql://u:\*\*\*@127.0.0.1:9/db"):
        open_store("postgresql://u:secret@127.0.0.1:9/db?connect_timeout=2")


def with_body(published, seq=None, **changes):
    """The message with another body or seq, signed by its device: what that board got wrong itself."""
    data = json.loads(published.payload)
    data["body"].update(changes)
    if seq is not None:
        data["seq"] = seq
    return published.topic, published.changed(data)


def test_values_no_database_column_takes_are_rejected_or_cleaned(store):
    device = SimulatedDevice("rpi-01")
    result = json.loads(device.result("job-1").payload)["body"]
    telemetry = device.telemetry()
    batch = [
        with_body(device.telemetry(), seq=2 ** 63),
        with_body(device.result("job-2"), result={**result["result"], "threads": 2 ** 63}),
        with_body(device.status(), reason="lost\ud800 link\x00"),
        with_body(device.result("job-\x003"), ok=False, error={"kind": "failed", "message": "bad \udfff byte"},
                  meta={"model": "m\x00", "accuracy_drop_points": 2 ** 64}),
        with_body(device.telemetry(), memory={"total_mb": 10 ** 400, "available_mb": 1.0}),
        (wire.telemetry_topic("rpi-01"), json.dumps({"id": "\ud800\x00", "type": "x"}).encode()),
        (wire.telemetry_topic("rpi-01"), telemetry.changed({**json.loads(telemetry.payload), "type": "\ud800\x00"})),
        (wire.telemetry_topic("rpi-01"), b"[" * 5000),
        (wire.telemetry_topic("rpi-01"), device.telemetry().payload.replace(b'"ts":', b'"ts":1' + b"0" * 400 + b',"x":')),
    ]
    report = store.ingest_many(batch)
    assert [(o.status, o.reason) for o in report.outcomes] == [
        ("rejected", "malformed_message"), ("rejected", "invalid_body"), ("stored", None), ("stored", None),
        ("stored", None), ("rejected", "malformed_message"), ("rejected", "unexpected_type"),
        ("rejected", "malformed_message"), ("rejected", "malformed_message")]
    assert store.devices()[0]["state_reason"] == "lost link"
    [failed] = store.results()
    assert (failed["job_id"], failed["error_message"], failed["model"]) == ("job-3", "bad  byte", "m")
    assert failed["accuracy_drop_points"] == float(2 ** 64)
    assert store.telemetry()[0]["memory_used_mb"] is None
    rejected = store.rejected(limit=50)
    assert "2147483647" in [r for r in rejected if r["reason"] == "invalid_body"][0]["detail"]
    assert [r["message_id"] for r in rejected if "lacks" in r["detail"]] == [""]
    assert ["a '' message" in r["detail"] for r in rejected if r["reason"] == "unexpected_type"] == [True]


def refuse_long_text(store, db_url, limit):
    """Make the database itself refuse text over `limit` characters, as a column it cannot fit."""
    if db_url.startswith("sqlite"):
        store.db._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
    else:
        with store.db.transaction() as tx:
            tx.execute(f"ALTER TABLE telemetry ALTER COLUMN body TYPE VARCHAR({limit})")


def test_a_message_the_database_refuses_costs_only_itself(store, db_url):
    refuse_long_text(store, db_url, 3000)
    device = SimulatedDevice("rpi-01")
    first, big, last = device.telemetry(), with_body(device.telemetry(), pad="x" * 4000), device.telemetry()
    report = store.ingest_many([(first.topic, first.payload), big, (last.topic, last.payload)])
    assert [(o.status, o.reason) for o in report.outcomes] == [("stored", None), ("rejected", "unstorable"),
                                                               ("stored", None)]
    assert report.counts["stored"] == 2 and report.new_gaps == 1 and report.missing == 1
    assert seqs_of(store, "rpi-01") == [1, 3]
    [rejected] = store.rejected()
    assert rejected["message_id"] == json.loads(big[1])["id"] and rejected["excerpt"].startswith('{"id":')
    assert store.ingest(*big).reason == "unstorable"  # alone too


def test_an_agent_whose_state_was_wiped_gets_a_new_baseline(store):
    before = SimulatedDevice("rpi-01", clock=lambda: 1000.0)
    ingest(store, before.status(seq=40))
    for seq in (90, 91):
        ingest(store, before.telemetry(seq=seq))
    wiped = SimulatedDevice("rpi-01", clock=lambda: 2000.0, key=before.key)  # numbers from 1 again (same key)
    ingest(store, wiped.status())
    for seq in (1, 2, 5):
        ingest(store, wiped.telemetry(seq=seq))
    assert [(g["first_missing_seq"], g["last_missing_seq"]) for g in store.gaps()] == [(3, 4)]
    ingest(store, before.status(seq=41))  # the old agent's late Will is no restart
    ingest(store, wiped.telemetry(seq=7))
    assert [(g["first_missing_seq"], g["last_missing_seq"]) for g in store.gaps()] == [(3, 4), (6, 6)]
