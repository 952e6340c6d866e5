"""Low-severity fleet items: a forged huge seq is a suspect jump, not 4.6e18 missing messages;
database passwords are never printed; old telemetry and rejections are pruned (CLI and collector)."""
import json
import time

import pytest
from test_fleet_store import ingest

from edgeopt.cli.main import main
from edgeopt.errors import UserError
from edgeopt.fleet.database import connect, redact_url, scrub
from edgeopt.fleet.retention import DAY_S, Retention
from edgeopt.fleet.sequences import MAX_PLAUSIBLE_GAP
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store


def test_a_forged_huge_seq_is_a_suspect_jump_not_missing_messages(db_url, capsys):  # SQLite and PostgreSQL (conftest)
    device = SimulatedDevice("pi-1")
    with open_store(db_url) as store:
        for _ in range(3):
            ingest(store, device.telemetry())
        report = store.ingest_many([(m.topic, m.payload) for m in [device.telemetry(seq=2 ** 62)]])
        assert report.counts["stored"] == 1 and report.missing == 0 and report.suspect == 1
        # The device's real numbers go on from 4 and are checked as before: 5 is then missing.
        ingest(store, device.telemetry(seq=4))
        ingest(store, device.telemetry(seq=6))
        stats = store.stats()
        assert stats["gaps"] == {"missing": 1, "filled": 0, "suspect_jumps": 1}
        assert [(g["first_missing_seq"], g["last_missing_seq"]) for g in store.gaps(open_only=True)] == [(5, 5)]
        assert [(g["first_missing_seq"], g["last_missing_seq"]) for g in store.gaps(suspect=True)] == [(4, 2 ** 62 - 1)]
        assert store.devices()[0]["missing_messages"] == 1
        # A jump just inside the limit is still loss.
        ingest(store, device.telemetry(seq=6 + MAX_PLAUSIBLE_GAP + 1))
        assert store.stats()["gaps"]["missing"] == 1 + MAX_PLAUSIBLE_GAP
    assert main(["fleet", "stats", "--db", db_url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["gaps"]["suspect_jumps"] == 1 and shown["suspect_jumps"][0]["last_missing_seq"] == 2 ** 62 - 1
    assert main(["fleet", "stats", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "suspect sequence jumps (not counted as missing): 1" in out


@pytest.mark.parametrize("url, shown", [
    ("postgresql://fleet:s3cret@db:5432/fleet", "postgresql://fleet:***@db:5432/fleet"),
    ("postgresql://fleet@db/fleet?password=s3cret&sslmode=require", "postgresql://fleet@db/fleet?password=***&sslmode=require"),
    ("postgresql://db/fleet?sslmode=require&PASSWORD=s3cret", "postgresql://db/fleet?sslmode=require&PASSWORD=***"),
    ("postgresql://db/fleet?sslpassword=s3cret", "postgresql://db/fleet?sslpassword=***"),
    ("sqlite:///fleet.db", "sqlite:///fleet.db"),
])
def test_database_passwords_are_redacted(url, shown):
    assert redact_url(url) == shown
    if "s3cret" in url:  # a driver's error quoting the URL, or the bare password
        assert "s3cret" not in scrub(f'could not parse "{url}": s3cret is wrong', url)


def test_a_failed_postgres_connection_does_not_print_the_password(capsys):
    pytest.importorskip("psycopg")
    url = "postgresql://nobody@127.0.0.1:1/fleet?password=s3cret-pw&connect_timeout=2"
    with pytest.raises(UserError) as caught:
        connect(url)
    assert "s3cret-pw" not in str(caught.value) and "password=***" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__  # no driver text in -v tracebacks
    assert main(["fleet", "devices", "--db", url]) == 2
    assert "s3cret-pw" not in capsys.readouterr().err


def test_prune_deletes_old_telemetry_and_rejections_only(db_url, capsys):  # noqa: F811
    now = time.time()
    device = SimulatedDevice("pi-1")
    with open_store(db_url) as store:
        old = [device.telemetry() for _ in range(3)]
        fresh = [device.telemetry() for _ in range(2)]
        result = device.result("job-1")
        store.ingest_many([(m.topic, m.payload) for m in old], received_at=now - 40 * DAY_S)
        store.ingest_many([(m.topic, m.payload) for m in fresh + [result]], received_at=now)
        store.ingest_many([("edgeopt/v1/pi-1/telemetry", b"not json")], received_at=now - 40 * DAY_S)
        store.ingest_many([("edgeopt/v1/pi-1/telemetry", b"still not json")], received_at=now)
        _age(store, old, now - 40 * DAY_S)
    assert main(["fleet", "prune", "--older-than", "30d", "--db", db_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == {"telemetry": 3, "rejected": 1}
    with open_store(db_url, create=False) as store:
        assert [r["seq"] for r in store.telemetry(device="pi-1")] == [4, 5]
        assert len(store.rejected()) == 1 and len(store.results()) == 1
        assert store.stats()["stored"] == {"telemetry": 2, "results": 1}
    assert main(["fleet", "prune", "--older-than", "sometime", "--db", db_url]) == 2
    assert "--older-than 'sometime' is not a time" in capsys.readouterr().err


def _age(store, published, ts):
    """Make messages look sent at `ts` (the simulator stamps them now)."""
    ids = [json.loads(m.payload)["id"] for m in published]
    with store.db.transaction() as tx:
        for message_id in ids:
            tx.execute("UPDATE telemetry SET ts = ? WHERE id = ?", (ts, message_id))


def test_the_collector_option_prunes_at_start_and_then_periodically(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    device = SimulatedDevice("pi-1")
    clock = [1_000_000_000.0]
    with open_store(url) as store:
        store.ingest_many([(m.topic, m.payload) for m in [device.telemetry(), device.telemetry()]])
        with store.db.transaction() as tx:
            tx.execute("UPDATE telemetry SET ts = ? WHERE seq = 1", (clock[0] - 3 * DAY_S,))
            tx.execute("UPDATE telemetry SET ts = ? WHERE seq = 2", (clock[0] - 1 * DAY_S,))
        retention = Retention(store, days=2, every_s=3600, clock=lambda: clock[0])
        assert retention.tick() == {"telemetry": 1, "rejected": 0}
        clock[0] += 1800
        assert retention.tick() is None  # not due yet
        clock[0] += 1 * DAY_S
        assert retention.tick() == {"telemetry": 1, "rejected": 0}
        assert store.telemetry() == []
    with pytest.raises(ValueError):
        Retention(store, days=0)
