"""Whether this agent may run a job at all: signed by the fleet key, fresh, for this device, not
seen before, and not an older build of a model than the last one it accepted.

Checks, in order, each with its own error kind:

    unsigned_job / signature_invalid   the job as a whole is not signed by the trusted key
    expired / not_yet_valid            outside issued_at .. expires_at, give or take the clock skew
    replayed                           a job with this id was run or refused here before
    wrong_target                       the job names other devices or another profile
    downgrade                          its release is older than the last accepted for that model,
                                       and the signed job does not say allow_downgrade

Job ids and the last accepted release of each model live in the agent's SQLite state, so a
restart forgets neither; a job id is kept until its job has expired. Only a job whose signature
holds is remembered, so a forged job cannot block the genuine one with the same id.

Without a trusted key none of this is checked (anyone who can publish on the jobs topic could
write any job anyway): the agent says so at start, on every job and in its status.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Optional

from .. import signing, wire
from ..signing import TrustedKey
from .store import STATE_FILE, Store

log = logging.getLogger(__name__)

DEFAULT_CLOCK_SKEW_S = 300.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS seen_jobs (
    job_id TEXT PRIMARY KEY,
    keep_until REAL NOT NULL,
    first_seen REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS seen_jobs_keep ON seen_jobs (keep_until);
CREATE TABLE IF NOT EXISTS releases (
    model TEXT PRIMARY KEY,
    version REAL NOT NULL,
    job_id TEXT NOT NULL,
    accepted REAL NOT NULL
);
"""


class JobLedger:
    """The signed jobs this agent has seen, and the release of each model it last accepted."""

    def __init__(self, store: Store):
        self._store = store
        with store.transaction() as db:
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)

    def seen(self, job_id: str) -> bool:
        with self._store.transaction() as db:
            return db.execute("SELECT 1 FROM seen_jobs WHERE job_id = ?", (job_id,)).fetchone() is not None

    def remember(self, job_id: str, keep_until: float, now: float) -> None:
        """Remember a job id until `keep_until`, and forget those whose time has passed."""
        with self._store.transaction() as db:
            db.execute("DELETE FROM seen_jobs WHERE keep_until < ?", (now,))
            db.execute("INSERT OR IGNORE INTO seen_jobs (job_id, keep_until, first_seen) VALUES (?, ?, ?)",
                       (job_id, keep_until, now))

    def remembered(self) -> int:
        with self._store.transaction() as db:
            return db.execute("SELECT COUNT(*) FROM seen_jobs").fetchone()[0]

    def last_release(self, model: str) -> Optional[float]:
        with self._store.transaction() as db:
            row = db.execute("SELECT version FROM releases WHERE model = ?", (model,)).fetchone()
        return row[0] if row else None

    def accept_release(self, release: wire.Release, job_id: str, now: float) -> None:
        with self._store.transaction() as db:
            db.execute("INSERT OR REPLACE INTO releases (model, version, job_id, accepted) VALUES (?, ?, ?, ?)",
                       (release.model, release.version, job_id, now))


class Admission:
    def __init__(self, device_id: str, profile: Optional[str], trusted_key: Optional[TrustedKey],
                 ledger: Optional[JobLedger], clock_skew_s: float = DEFAULT_CLOCK_SKEW_S,
                 clock: Callable[[], float] = time.time):
        if trusted_key is not None and ledger is None:
            raise ValueError("checking signed jobs needs a ledger to remember them in")
        self.device_id = device_id
        self.profile = profile
        self.trusted_key = trusted_key
        self.ledger = ledger
        self.clock_skew_s = clock_skew_s
        self._clock = clock

    @classmethod
    def for_data_dir(cls, device_id: str, data_dir: Path, trusted_key: Optional[TrustedKey],
                     profile: Optional[str] = None, clock_skew_s: float = DEFAULT_CLOCK_SKEW_S) -> "Admission":
        """Admission with its ledger in the agent state file of `data_dir` (when there is a key)."""
        ledger = JobLedger(Store(Path(data_dir) / STATE_FILE)) if trusted_key is not None else None
        return cls(device_id, profile, trusted_key, ledger, clock_skew_s)

    def precheck(self, job: wire.BenchmarkJob) -> None:
        """The checks that change nothing (on a job's arrival, before its chunks are asked for)."""
        if self.trusted_key is not None:
            self._check(job, first_attempt=True, record=False)

    def admit(self, job: wire.BenchmarkJob, attempts: int = 1) -> None:
        """All checks, remembering the job; `attempts` > 1 is this same job message started again
        after an interruption (its id is then already remembered, by itself)."""
        if self.trusted_key is None:
            log.warning("running job %s without checking who sent it: this agent has no trusted key", job.job_id)
            return
        self._check(job, first_attempt=attempts <= 1, record=True)

    def _check(self, job: wire.BenchmarkJob, first_attempt: bool, record: bool) -> None:
        assert self.ledger is not None
        signing.check_signature(self.trusted_key, job)
        now = self._clock()
        self._check_validity(job, now)
        if first_attempt and self.ledger.seen(job.job_id):
            raise wire.ProtocolError(
                f"job '{job.job_id}' was already received by this device; a job runs once: deploy again "
                "for a new job", kind="replayed")
        if record:
            self.ledger.remember(job.job_id, job.expires_at + self.clock_skew_s, now)
        if not job.target.includes(self.device_id, self.profile):
            raise wire.ProtocolError(
                f"job is for {job.target.describe()}; this is device '{self.device_id}' "
                f"(profile {self.profile or 'not set'})", kind="wrong_target")
        self._check_release(job, now, record)

    def _check_validity(self, job: wire.BenchmarkJob, now: float) -> None:
        if now > job.expires_at + self.clock_skew_s:
            raise wire.ProtocolError(
                f"job expired {_ago(now - job.expires_at)} ago (this device's clock: {_utc(now)}); "
                "deploy again", kind="expired")
        if job.issued_at - self.clock_skew_s > now:
            raise wire.ProtocolError(
                f"job is issued {_ago(job.issued_at - now)} in the future by this device's clock ({_utc(now)}), "
                f"beyond the {self.clock_skew_s:g} s allowed for clock skew; check the clocks of the host "
                "and the device", kind="not_yet_valid")

    def _check_release(self, job: wire.BenchmarkJob, now: float, record: bool) -> None:
        release = job.release
        if release is None:
            return
        last = self.ledger.last_release(release.model)
        if last is not None and release.version < last and not job.allow_downgrade:
            raise wire.ProtocolError(
                f"model '{release.model}' version {release.version:g} is older than version {last:g}, the last "
                "this device accepted; deploy with --allow-downgrade to go back on purpose", kind="downgrade")
        if record:
            self.ledger.accept_release(release, job.job_id, now)


def _ago(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
