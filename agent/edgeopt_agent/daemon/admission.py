"""Whether this agent may run a job at all: signed by the fleet key, fresh, for this device, not
seen before, and not an older build of a model than the last one it accepted.

Checks, in order, each with its own error kind:

    unsigned_job / signature_invalid   the job as a whole is not signed by the trusted key
    expired / not_yet_valid            outside issued_at .. expires_at, give or take the clock skew
    replayed                           a job with this id was run or refused here before
    wrong_target                       the job names other devices or another profile
    downgrade                          its release is older than the last accepted for that model,
                                       and the signed job does not say allow_downgrade

Job ids and the last accepted release of each model live in the agent's SQLite state and in a
second copy beside it (replay-state.json), merged at start, so neither a restart nor the loss of
one file forgets them; a job id is kept until its job has expired. Only a job whose signature
holds, that is fresh, new and addressed to this device is remembered (with the clock mark it
raises), so a forged job cannot block the genuine one with the same id, and another device's job
changes nothing here; a job then refused as a downgrade stays remembered.

Clocks: ids are forgotten by the latest time this device has seen (its clock at an admission, or
an accepted job's issued_at), and expiry is judged by that time too, so a clock that jumped
ahead and back cannot make a forgotten job valid again. When both copies are lost in a data dir
that had run jobs, jobs issued before that start are refused (`replayed`).

Failing closed: a valid copy that remembers nothing, beside no ledger in agent.db, counts as lost
(not as an empty record). A damaged copy with no ledger to rebuild it from stops every start, not
only the first (the tables are made in the same transaction that reads the copy, so a refused
start leaves agent.db as it found it), until an operator resets the ledger with
`edgeopt-agent --accept-replay-risk`: the damaged copy is kept aside and jobs issued before that
moment are refused. A mark found at start beyond this board's clock plus the skew (a copy from
elsewhere, or a clock set back while the agent was stopped) is not obeyed: it is refused, the
clock mark restarts at now, and jobs issued before now are refused as possibly seen.

Without a trusted key none of this is checked (anyone who can publish on the jobs topic could
write any job anyway): the agent says so at start, on every job and in its status.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from .. import signing, wire
from ..errors import UserError
from ..files import write_atomically
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
CREATE TABLE IF NOT EXISTS ledger_marks (
    name TEXT PRIMARY KEY,
    value REAL NOT NULL
);
"""
# The second copy of the ledger, beside agent.db: either one restores the other at start.
COPY_FILE = "replay-state.json"
COPY_SCHEMA = "edgeopt.replay-state/1"
# Marks: the time before which jobs are refused as possibly seen (set when the ledger was lost
# on a data dir that had been used), and the latest time this device has seen (its clock or an
# accepted job's issued_at): expiry is judged by it, so a clock set back cannot revive a job
# whose id was forgotten while the clock was ahead.
NOT_BEFORE, CLOCK_MARK = "not_before", "clock_mark"
# Folders whose contents show that jobs ran in a data dir before.
_USED_DIRS = ("artifacts", "transfers", "engines")


class ReplayState:
    """What the ledger knows, in a form both copies share (and the copy file holds as JSON)."""

    def __init__(self, jobs=None, releases=None, marks=None):
        self.jobs: Dict[str, Tuple[float, float]] = dict(jobs or {})  # id -> (keep_until, first_seen)
        self.releases: Dict[str, Tuple[float, str, float]] = dict(releases or {})  # model -> (version, job, accepted)
        self.marks: Dict[str, float] = dict(marks or {})

    def merge(self, other: "ReplayState") -> "ReplayState":
        """Everything either copy remembers: the longer-kept id, the newer release, the later mark."""
        merged = ReplayState(self.jobs, self.releases, self.marks)
        for job_id, kept in other.jobs.items():
            if job_id not in merged.jobs or kept[0] > merged.jobs[job_id][0]:
                merged.jobs[job_id] = kept
        for model, release in other.releases.items():
            if model not in merged.releases or release[0] > merged.releases[model][0]:
                merged.releases[model] = release
        for name, value in other.marks.items():
            merged.marks[name] = max(value, merged.marks.get(name, value))
        return merged

    def empty(self) -> bool:
        return not (self.jobs or self.releases or self.marks)

    def to_json(self) -> bytes:
        return json.dumps({
            "schema": COPY_SCHEMA,
            "marks": self.marks,
            "jobs": [[job_id, keep, first] for job_id, (keep, first) in sorted(self.jobs.items())],
            "releases": [[model, *release] for model, release in sorted(self.releases.items())],
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "ReplayState":
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict) or data.get("schema") != COPY_SCHEMA:
            raise ValueError(f"its schema is not {COPY_SCHEMA}")
        marks, jobs, releases = data.get("marks"), data.get("jobs"), data.get("releases")
        if not (isinstance(marks, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in marks.values())):
            raise ValueError("'marks' is not an object of numbers")
        state = cls(marks={str(k): float(v) for k, v in marks.items()})
        for row in jobs if isinstance(jobs, list) else [None]:
            if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and _numbers(row[1:])):
                raise ValueError("'jobs' is not a list of [job id, keep until, first seen]")
            state.jobs[row[0]] = (float(row[1]), float(row[2]))
        for row in releases if isinstance(releases, list) else [None]:
            if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and isinstance(row[2], str)
                    and _numbers([row[1], row[3]])):
                raise ValueError("'releases' is not a list of [model, version, job id, accepted]")
            state.releases[row[0]] = (float(row[1]), row[2], float(row[3]))
        return state


def _numbers(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


class JobLedger:
    """The signed jobs this agent has seen, and the release of each model it last accepted.

    Kept twice: in agent.db and in replay-state.json beside it, written after every admission.
    At start the two are merged (what either remembers counts), so deleting or losing one file
    forgets nothing. When both are gone from a data dir that had run jobs (its artifacts/,
    transfers/ or engines/ hold files), the agent cannot tell what it ran: it then refuses every
    job issued before this start (beyond the clock skew), as possibly replayed.
    """

    def __init__(self, store: Store, copy_path: Optional[Path] = None, clock: Callable[[], float] = time.time,
                 clock_skew_s: float = DEFAULT_CLOCK_SKEW_S, accept_replay_risk: bool = False):
        """`accept_replay_risk`: an operator said to start a new ledger if this one is damaged beyond
        repair (`edgeopt-agent --accept-replay-risk`); without it such a ledger stops the start."""
        self._store = store
        self.copy_path = Path(copy_path) if copy_path is not None else store.path.with_name(COPY_FILE)
        self.clock_skew_s = clock_skew_s
        self.reset: Optional[str] = None  # what the operator's reset did, when it did anything
        # One transaction: a start refused below leaves no ledger tables behind, so the next start
        # finds the same loss and refuses too.
        with store.transaction() as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            # seen_jobs without ledger_marks: the state of an agent from before the second copy.
            self._reconcile("seen_jobs" in tables, "ledger_marks" not in tables, clock(), accept_replay_risk)

    def _reconcile(self, had_ledger: bool, first_copy: bool, now: float, accept_replay_risk: bool) -> None:
        copy = self._read_copy(had_ledger, accept_replay_risk, now)
        if copy is not None and not had_ledger and copy.empty():
            log.warning("%s is valid but remembers nothing, and %s has no job ledger: counted as lost, not as an "
                        "empty record", self.copy_path, self._store.path.name)
            copy = None
        with self._store.transaction():
            state = self.state()
            if copy is not None:
                state = state.merge(copy)
                if not had_ledger:
                    log.warning("the job ledger in %s was missing: restored from %s (%d job ids, %d releases)",
                                self._store.path, self.copy_path, len(copy.jobs), len(copy.releases))
            elif had_ledger and first_copy:
                log.info("keeping a second copy of the job ledger in %s", self.copy_path)
            elif had_ledger:
                log.warning("%s was missing: rebuilt from %s", self.copy_path, self._store.path)
            elif self.reset is not None or self._used_before():
                state.marks[NOT_BEFORE] = now
                log.warning("no job ledger (%s, %s), but this data dir ran jobs before (expected only when this "
                            "agent has just been given its trusted key): to be sure no job runs twice, jobs issued "
                            "before %s are refused; deploy again", self._store.path.name, self.copy_path.name,
                            _utc(now))
            self._refuse_future_marks(state, now)
            self._write_state(state)
            try:
                self._write_copy()
            except OSError as exc:
                raise UserError(f"cannot write the job ledger copy {self.copy_path}: {exc.strerror}; "
                                "pass a writable --data-dir") from None

    def _refuse_future_marks(self, state: ReplayState, now: float) -> None:
        """A mark beyond this board's clock (plus the skew) is not obeyed: not a time this board has seen
        by its clock now, so either the copy came from elsewhere or the clock went back while the agent
        was stopped. The clock mark restarts at now, and jobs issued before now are refused as possibly
        seen (a job this board ran while its clock was ahead may have had its id forgotten)."""
        ahead = {name: value for name, value in state.marks.items() if value > now + self.clock_skew_s}
        if not ahead:
            return
        log.warning("the job ledger holds %s, beyond this board's clock (%s) plus the %g s clock skew: not obeyed. "
                    "Jobs issued before now are refused as possibly seen; if the clock is wrong, fix it (NTP) and "
                    "deploy again", ", ".join(f"{name} {_utc(value)}" for name, value in sorted(ahead.items())),
                    _utc(now), self.clock_skew_s)
        state.marks[CLOCK_MARK] = now
        state.marks[NOT_BEFORE] = now

    def _read_copy(self, had_ledger: bool, accept_replay_risk: bool, now: float) -> Optional[ReplayState]:
        try:
            raw = self.copy_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise UserError(f"cannot read the job ledger copy {self.copy_path}: {exc.strerror}; "
                            "check the data dir's permissions") from None
        try:
            return ReplayState.from_json(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            if had_ledger:
                log.warning("%s is damaged (%s): rebuilt from %s", self.copy_path, exc, self._store.path)
                return None
            if not accept_replay_risk:
                raise UserError(f"the job ledger copy {self.copy_path} is damaged ({exc}) and {self._store.path} has "
                                "no ledger, so this board cannot tell which signed jobs it already ran: restore either "
                                "file from a backup, or start a new ledger with `edgeopt-agent --accept-replay-risk` "
                                "(jobs issued before then are refused; a job it ran may run again only if its clock "
                                "is behind)") from None
            aside = self.copy_path.with_name(f"{self.copy_path.name}.damaged-{int(now)}")
            try:
                os.replace(self.copy_path, aside)
            except OSError as exc2:
                raise UserError(f"cannot move the damaged job ledger copy {self.copy_path} aside: "
                                f"{exc2.strerror}") from None
            self.reset = f"the damaged copy is kept as {aside}; jobs issued before {_utc(now)} are refused"
            log.warning("job ledger reset by the operator (--accept-replay-risk): %s", self.reset)
            return None

    def _used_before(self) -> bool:
        folder = self._store.path.parent
        for name in _USED_DIRS:
            try:
                if any(True for _ in (folder / name).iterdir()):
                    return True
            except OSError:
                continue
        return False

    def state(self) -> ReplayState:
        with self._store.transaction() as db:
            return ReplayState(
                {row[0]: (row[1], row[2]) for row in db.execute("SELECT job_id, keep_until, first_seen FROM seen_jobs")},
                {row[0]: (row[1], row[2], row[3]) for row in db.execute("SELECT model, version, job_id, accepted FROM releases")},
                {row[0]: row[1] for row in db.execute("SELECT name, value FROM ledger_marks")})

    def _write_state(self, state: ReplayState) -> None:
        with self._store.transaction() as db:
            db.executemany("INSERT OR REPLACE INTO seen_jobs (job_id, keep_until, first_seen) VALUES (?, ?, ?)",
                           [(job_id, keep, first) for job_id, (keep, first) in state.jobs.items()])
            db.executemany("INSERT OR REPLACE INTO releases (model, version, job_id, accepted) VALUES (?, ?, ?, ?)",
                           [(model, *release) for model, release in state.releases.items()])
            db.executemany("INSERT OR REPLACE INTO ledger_marks (name, value) VALUES (?, ?)", state.marks.items())

    def _write_copy(self) -> None:
        """The whole ledger to the copy file (atomically, on the disk before this returns)."""
        with self._store.transaction():
            data = self.state().to_json()
        write_atomically(self.copy_path, data, mode=0o600, durable=True)

    def mark(self, name: str) -> Optional[float]:
        with self._store.transaction() as db:
            row = db.execute("SELECT value FROM ledger_marks WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def seen(self, job_id: str) -> bool:
        with self._store.transaction() as db:
            return db.execute("SELECT 1 FROM seen_jobs WHERE job_id = ?", (job_id,)).fetchone() is not None

    def remember(self, job_id: str, keep_until: float, now: float, latest: Optional[float] = None) -> None:
        """Remember a job id until `keep_until`, raise the clock mark to `latest` (default `now`),
        and forget the ids whose time has passed by that mark."""
        with self._store.transaction() as db:
            mark = max(now, latest if latest is not None else now, self.mark(CLOCK_MARK) or now)
            db.execute("INSERT OR REPLACE INTO ledger_marks (name, value) VALUES (?, ?)", (CLOCK_MARK, mark))
            db.execute("DELETE FROM seen_jobs WHERE keep_until < ?", (mark,))
            db.execute("INSERT OR IGNORE INTO seen_jobs (job_id, keep_until, first_seen) VALUES (?, ?, ?)",
                       (job_id, keep_until, now))
        self._write_copy()

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
        self._write_copy()


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
        ledger = (JobLedger(Store(Path(data_dir) / STATE_FILE), clock_skew_s=clock_skew_s)
                  if trusted_key is not None else None)
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
        self._check_validity(job, now, self.ledger.mark(CLOCK_MARK))
        not_before = self.ledger.mark(NOT_BEFORE)
        if first_attempt and not_before is not None and job.issued_at < not_before - self.clock_skew_s:
            raise wire.ProtocolError(
                f"job '{job.job_id}' was issued {_utc(job.issued_at)}, before this device lost its record of the "
                f"jobs it ran ({_utc(not_before)}): it may have run already; deploy again for a new job",
                kind="replayed")
        if first_attempt and self.ledger.seen(job.job_id):
            raise wire.ProtocolError(
                f"job '{job.job_id}' was already received by this device; a job runs once: deploy again "
                "for a new job", kind="replayed")
        if not job.target.includes(self.device_id, self.profile):
            # Before anything is remembered: another device's job leaves this board's record as it was.
            raise wire.ProtocolError(
                f"job is for {job.target.describe()}; this is device '{self.device_id}' "
                f"(profile {self.profile or 'not set'})", kind="wrong_target")
        if record:
            # Remembered before the release check on purpose: a job refused as a downgrade is
            # refused as `replayed` if it comes again, even after the release record is lost.
            self.ledger.remember(job.job_id, job.expires_at + self.clock_skew_s, now, latest=job.issued_at)
        self._check_release(job, now, record)

    def _check_validity(self, job: wire.BenchmarkJob, now: float, clock_mark: Optional[float] = None) -> None:
        if now > job.expires_at + self.clock_skew_s:
            raise wire.ProtocolError(
                f"job expired {_ago(now - job.expires_at)} ago (this device's clock: {_utc(now)}); "
                "deploy again", kind="expired")
        # Ids are forgotten by the latest time seen, so expiry is judged by it too: a clock set
        # back must not revive a job whose id was forgotten while the clock was ahead.
        if clock_mark is not None and clock_mark > job.expires_at + self.clock_skew_s:
            raise wire.ProtocolError(
                f"job expired at {_utc(job.expires_at)}, before {_utc(clock_mark)}, a time this device has already "
                f"seen (its clock now says {_utc(now)}: it was set back); fix the clock and deploy again with "
                "--expires beyond that time", kind="expired")
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


def accept_replay_risk(data_dir: Path, clock_skew_s: float = DEFAULT_CLOCK_SKEW_S) -> str:
    """`edgeopt-agent --accept-replay-risk`: start a new job ledger in place of one damaged beyond repair
    (while no agent runs on `data_dir`); returns what was done, in one line."""
    from .store import lock_data_dir

    lock = lock_data_dir(Path(data_dir))
    try:
        store = Store(Path(data_dir) / STATE_FILE)
        try:
            ledger = JobLedger(store, clock_skew_s=clock_skew_s, accept_replay_risk=True)
        finally:
            store.close()
    finally:
        lock.close()
    if ledger.reset is None:
        return f"the job ledger in {data_dir} is not damaged: nothing was reset"
    return f"started a new job ledger in {data_dir}: {ledger.reset}"


def _ago(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
