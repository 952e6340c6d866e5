"""Turns one job message into one result body. Bad input becomes an error result, never an exception.

Checks run cheapest first and before anything is loaded: envelope, job schema, admission (when the
agent has a trusted key: the whole job signed by it, not expired, for this device, not seen before,
not a downgrade; see admission.py), the bench options against the agent's limits,
the paths (only under ``<data_dir>/models/``), then the artifact's bytes (copied, inline,
received in chunks or downloaded) against its sha256, into a copy only the worker writes. Only
then is the benchmark engine imported and run; it loads the runtime and the model in a child
process, so the daemon itself never holds numpy or onnxruntime.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .. import wire
from ..errors import UserError
from ..signing import TrustedKey
from .admission import Admission
from .artifact_transfer import Transfers
from .artifacts import artifact_path, held, materialize, model_path
from .download import download, download_deadline_s

log = logging.getLogger(__name__)

# A job is started at most this often: a job that keeps killing the agent itself gets an error.
MAX_ATTEMPTS = 2
# Where the benchmark child extracts a multi-file artifact while loading it; swept at the agent's
# start and before each extraction (edgeopt_agent.extraction_folders).
BUNDLES_DIR = "bundles"


@dataclass(frozen=True)
class BenchLimits:
    """The most a job may ask of the board, in seconds (the agent config's max_* settings)."""

    timeout_s: float = 1800.0  # the whole benchmark child process
    max_duration_s: float = 600.0  # each of the warm-up and measured phases
    idle_s: float = 60.0  # the idle power baseline, taken before the child starts

    def check(self, options: Dict[str, Any]) -> None:
        for name, limit in (("timeout_s", self.timeout_s), ("max_duration_s", self.max_duration_s),
                            ("idle_s", self.idle_s)):
            value = options.get(name)
            if value is not None and value > limit:
                raise wire.ProtocolError(
                    f"bench option '{name}' is {value:g} s, over this agent's limit of {limit:g} s",
                    kind="invalid_job",
                )


class JobHandler:
    def __init__(self, device_id: str, data_dir: Path, sensors: Any = None,
                 trusted_key: Optional[TrustedKey] = None, transfers: Optional[Transfers] = None,
                 limits: BenchLimits = BenchLimits(), admission: Optional[Admission] = None):
        """With `trusted_key`, only jobs signed by it are run (`admission` decides; by default one
        that keeps its ledger in the data dir's state file); `transfers` receives chunked artifacts."""
        self.device_id = device_id
        self.data_dir = Path(data_dir)
        self.sensors = sensors
        self.admission = admission or Admission.for_data_dir(device_id, self.data_dir, trusted_key)
        self.transfers = transfers or Transfers(device_id, self.data_dir, self.admission)
        self.limits = limits

    def handle(self, payload: bytes, attempts: int = 1) -> Dict[str, Any]:
        request_id: Optional[str] = None
        job_type: Optional[str] = None
        job_id: Optional[str] = None
        meta: Optional[Dict[str, Any]] = None
        try:
            request_id, job_type = _peek(payload)
            envelope = wire.Envelope.decode(payload, expect_device=self.device_id)
            job = wire.parse_job(envelope)
            job_id, meta = job.job_id, job.meta
            if attempts > MAX_ATTEMPTS:
                raise wire.ProtocolError(
                    f"job was interrupted {attempts - 1} times (agent restart or crash while it ran); "
                    "not trying it again",
                    kind="interrupted",
                )
            self.admission.admit(job, attempts)  # before a single byte of the artifact is touched
            log.info("running job %s (%s)", job_id, job.artifact.describe())
            result = self._run_benchmark(job)
            return wire.result_body(job_id, job_type, request_id, result=result, meta=meta)
        except wire.ProtocolError as exc:
            error = wire.error_info(exc.kind, str(exc))
            job_id = exc.job_id or job_id
        except UserError as exc:  # refused by the engine before its child process started
            from ..bench.failures import classify

            error = classify(exc)
        except OSError as exc:
            error = wire.error_info("io_error", f"{exc.strerror or exc}: {exc.filename}")
        except Exception as exc:  # a bug in the agent: answer, log the traceback, keep running
            log.exception("job %s failed inside the agent", job_id)
            error = wire.error_info("internal_error", f"{type(exc).__name__}: {exc}")
        log.warning("job %s answered with error %s: %s", job_id or request_id or "?", error["kind"], error["message"])
        return wire.result_body(job_id, job_type, request_id, error=error, meta=meta)

    def _run_benchmark(self, job: wire.BenchmarkJob) -> Dict[str, Any]:
        self.limits.check(job.bench)
        options = dict(job.bench)
        if options.get("input_file"):
            options["input_file"] = str(model_path(self.data_dir, options["input_file"], "input file"))
        artifact = self._artifact_file(job)
        # TensorRT engines built on this board are cached beside the agent's state.
        options["engine_cache_dir"] = str(self.data_dir / "engines")
        options["bundle_dir"] = str(self.data_dir / BUNDLES_DIR)
        from ..bench import BenchmarkSpec, run_benchmark

        try:
            spec = BenchmarkSpec.from_dict(dict(options, artifact=str(artifact)))
        except UserError as exc:
            raise wire.ProtocolError(str(exc), kind="invalid_job") from None
        return run_benchmark(spec, sensors=self.sensors)

    def _artifact_file(self, job: wire.BenchmarkJob) -> Path:
        """The job's artifact as a worker-owned local file whose sha256 has been checked."""
        ref = job.artifact
        if ref.chunks is not None:
            return self.transfers.fetch(job)
        if ref.url is not None:
            target = artifact_path(self.data_dir, ref)
            if held(target, ref.sha256):
                return target
            return download(ref, target, deadline_s=download_deadline_s(ref.size))
        return materialize(ref, self.data_dir)


def _peek(payload: bytes) -> Tuple[Optional[str], Optional[str]]:
    """The message id and type of a job, if it is readable at all (to address an error answer)."""
    try:
        data = json.loads(payload[: wire.MAX_MESSAGE_BYTES].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    message_id, message_type = data.get("id"), data.get("type")
    return (
        message_id if isinstance(message_id, str) and len(message_id) <= 64 else None,
        message_type if isinstance(message_type, str) and len(message_type) <= 64 else None,
    )
