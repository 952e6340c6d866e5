"""The agent's side of deploy, in-process: chunked artifacts asked for, received and run; signatures
checked before a byte of the artifact is fetched; artifacts downloaded by URL."""
import functools
import hashlib
import http.server
import json
import subprocess
import sys
import threading
import time

import pytest
from harness import QUICK_BENCH, FleetKey, wait_until

from edgeopt_agent import signing, wire
from edgeopt_agent.daemon.admission import Admission
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.daemon.artifact_transfer import Transfers
from edgeopt_agent.errors import UserError
from edgeopt_agent.wire import plan_chunks, read_chunk


def crypto(module):
    return pytest.importorskip(f"cryptography.hazmat.primitives.{module}",
                               reason="signatures need the cryptography package (agent extra)")

DEVICE = "dev-1"
CHUNK = 1024
META = {"model": "matmul", "model_sha256": "0" * 64, "artifact_key": "onnx-fp32", "format": "onnx",
        "precision": "fp32", "accuracy_drop_points": 0.25, "manifest_sha256": "1" * 64}


def write_matmul_onnx(path, columns=256) -> bytes:
    """y = x @ W with W float[4, columns] (about 4 KB of weights): several 1 KiB chunks."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.linspace(-1, 1, 4 * columns, dtype=np.float32).reshape(4, columns), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, columns])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path.read_bytes()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(path on the 'host', its chunk plan, size, sha256)."""
    path = tmp_path_factory.mktemp("host") / "matmul.onnx"
    write_matmul_onnx(path)
    plan, size, sha = plan_chunks(path, CHUNK)
    assert plan.count >= 4
    return path, plan, size, sha


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "agent-data"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    crypto("asymmetric.ed25519")
    return FleetKey(folder, "trusted"), FleetKey(folder, "other")


def chunked_job(model, job_id="j1", signer=None, meta=META, **bench):
    _, plan, size, sha = model
    return wire.benchmark_job(DEVICE, 1, job_id, sha, "onnx", chunks=plan, size=size, signer=signer,
                                  meta=meta, **dict(QUICK_BENCH, **bench))


def tampered(job, **changes):
    """The same job message with some fields of its body changed after it was signed."""
    body = json.loads(json.dumps(job.body))
    body.update(changes)
    return wire.Envelope(job.device_id, job.seq, job.type, body)


def chunk_payload(model, index, data=None):
    path, plan, _, sha = model
    data = read_chunk(path, plan, index) if data is None else data
    return wire.chunk_message(DEVICE, index + 1, sha, index, data).encode()


class Agent:
    """A JobHandler and its Transfers, with the transfer messages it sends recorded."""

    def __init__(self, data_dir, trusted=None, idle_timeout_s=30.0):
        self.requests = []
        admission = Admission.for_data_dir(DEVICE, data_dir, trusted)
        self.transfers = Transfers(DEVICE, data_dir, admission, request=self.requests.append,
                                   idle_timeout_s=idle_timeout_s)
        self.handler = JobHandler(DEVICE, data_dir, transfers=self.transfers, admission=admission)
        self.answer = None
        self._thread = None

    def start_job(self, envelope):
        """Run the job on a worker thread, as the daemon does."""
        self._thread = threading.Thread(target=lambda: setattr(self, "answer", self.handler.handle(envelope.encode())))
        self._thread.start()

    def finish(self, timeout=60):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the job did not finish"
        return self.answer


def artifacts_in(data_dir):
    folder = data_dir / "artifacts"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def chunks_held(data_dir):
    return sorted(p.name for p in (data_dir / "transfers").rglob("*.chunk"))


# --- chunked transfer -----------------------------------------------------------------------------


def test_a_chunked_job_asks_once_for_its_chunks_then_runs(model, data_dir):
    agent = Agent(data_dir)
    job = chunked_job(model)
    agent.transfers.job_arrived(job.encode())
    _, plan, _, sha = model
    assert agent.requests == [wire.transfer_body("j1", job.id, sha, plan.count, range(plan.count))]
    agent.start_job(job)  # the worker waits for the chunks
    for index in reversed(range(plan.count)):
        agent.transfers.chunk_arrived(chunk_payload(model, index))
    answer = agent.finish()
    assert answer["ok"] is True, answer["error"]
    assert answer["result"]["latency_ms"]["p50"] > 0 and answer["meta"] == META
    assert len(agent.requests) == 1  # the worker did not ask a second time
    assert artifacts_in(data_dir) == [f"{sha}.onnx"] and chunks_held(data_dir) == []

    again = chunked_job(model, job_id="j2")  # the board holds the file now: nothing is missing
    agent.transfers.job_arrived(again.encode())
    assert agent.requests[-1]["missing"] == []
    assert agent.handler.handle(again.encode())["ok"] is True


def test_after_a_restart_the_worker_asks_for_what_is_still_missing(model, data_dir):
    before = Agent(data_dir)
    job = chunked_job(model)
    before.transfers.job_arrived(job.encode())
    for index in (0, 2):
        before.transfers.chunk_arrived(chunk_payload(model, index))

    after = Agent(data_dir)  # a new process finds the job in its inbox and the two chunks on disk
    after.start_job(job)
    _, plan, _, _ = model
    missing = [i for i in range(plan.count) if i not in (0, 2)]
    wait_until(lambda: after.requests)
    assert [r["missing"] for r in after.requests] == [missing]
    for index in missing:
        after.transfers.chunk_arrived(chunk_payload(model, index))
    assert after.finish()["ok"] is True


def test_a_damaged_stored_artifact_is_asked_for_again(model, data_dir):
    agent = Agent(data_dir)
    _, plan, _, sha = model
    stored = data_dir / "artifacts" / f"{sha}.onnx"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"bit rot")
    job = chunked_job(model)
    agent.transfers.job_arrived(job.encode())
    assert agent.requests[0]["missing"] == []  # judged by its name on arrival...
    agent.start_job(job)
    wait_until(lambda: len(agent.requests) == 2)  # ...and by its sha256 before use
    assert agent.requests[1]["missing"] == list(range(plan.count))
    for index in range(plan.count):
        agent.transfers.chunk_arrived(chunk_payload(model, index))
    assert agent.finish()["ok"] is True
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == sha


def test_a_stalled_transfer_fails_and_keeps_what_arrived(model, data_dir):
    agent = Agent(data_dir, idle_timeout_s=0.5)
    job = chunked_job(model)
    agent.transfers.job_arrived(job.encode())
    agent.transfers.chunk_arrived(chunk_payload(model, 1))
    answer = agent.handler.handle(job.encode())
    assert answer["ok"] is False and answer["error"]["kind"] == "transfer_incomplete"
    assert "received 1 of" in answer["error"]["message"] and "deploy again" in answer["error"]["message"]
    assert chunks_held(data_dir) == ["000001.chunk"] and artifacts_in(data_dir) == []


def test_a_chunk_that_is_not_the_listed_one_is_dropped_and_asked_for_again(model, data_dir):
    agent = Agent(data_dir, idle_timeout_s=60)
    job = chunked_job(model)
    agent.transfers.job_arrived(job.encode())
    agent.start_job(job)
    agent.transfers.chunk_arrived(chunk_payload(model, 0, data=b"\x00" * CHUNK))
    wait_until(lambda: len(agent.requests) == 2)
    assert agent.requests[1]["missing"] == [0] and agent.requests[1]["request_id"] == job.id
    for index in range(model[1].count):
        agent.transfers.chunk_arrived(chunk_payload(model, index))
    answer = agent.finish()
    assert answer["ok"] is True, answer["error"]  # the forged chunk did not fail the real transfer


def test_chunks_for_another_device_or_garbage_are_dropped(model, data_dir):
    agent = Agent(data_dir)
    agent.transfers.job_arrived(chunked_job(model).encode())
    other = wire.chunk_message("dev-2", 1, model[3], 0, read_chunk(model[0], model[1], 0)).encode()
    too_big = json.dumps(dict(json.loads(chunk_payload(model, 0)), ts=10 ** 400)).encode()
    for payload in (other, b"{not json", json.dumps({"hello": 1}).encode(), b"[" * 5000, too_big):
        agent.transfers.chunk_arrived(payload)  # dropped, never raised: a raise would leave it unacknowledged
    assert chunks_held(data_dir) == []


# --- signatures -----------------------------------------------------------------------------------


def test_an_agent_with_a_trusted_key_runs_what_that_key_signed(model, data_dir, keys):
    trusted, _ = keys
    agent = Agent(data_dir, trusted.trusted)
    _, plan, size, sha = model
    job = chunked_job(model, signer=trusted.sign_job)
    agent.transfers.job_arrived(job.encode())
    assert len(agent.requests) == 1
    for index in range(plan.count):
        agent.transfers.chunk_arrived(chunk_payload(model, index))
    answer = agent.handler.handle(job.encode())
    assert answer["ok"] is True, answer["error"]


@pytest.mark.parametrize("case, kind, fragment", [
    ("unsigned", "unsigned_job", "only runs signed jobs"),
    ("other key", "signature_invalid", "but this agent trusts key"),
    ("forged key id", "signature_invalid", "changed after signing"),
    ("meta changed", "signature_invalid", "changed after signing"),
    ("sha changed", "signature_invalid", "changed after signing"),
])
def test_unsigned_or_wrongly_signed_artifacts_are_refused_before_any_byte_is_fetched(model, data_dir, keys, case,
                                                                                   kind, fragment):
    trusted, other = keys
    signer = {"unsigned": None, "other key": other.sign_job}.get(case, trusted.sign_job)
    if case == "forged key id":  # signed by another key that claims to be the trusted one
        signer = lambda body: wire.Signature("ed25519", trusted.trusted.key_id, other.sign_job(body).value)  # noqa: E731
    job = chunked_job(model, signer=signer)
    if case == "meta changed":
        job = tampered(job, meta=dict(META, precision="int8"))
    if case == "sha changed":
        job = tampered(job, artifact=dict(job.body["artifact"], sha256="f" * 64))
    agent = Agent(data_dir, trusted.trusted)
    agent.transfers.job_arrived(job.encode())
    answer = agent.handler.handle(job.encode())
    assert answer["ok"] is False and answer["error"]["kind"] == kind, answer["error"]
    assert fragment in answer["error"]["message"]
    assert agent.requests == []  # not a single chunk asked for
    assert not (data_dir / "transfers").exists() and artifacts_in(data_dir) == []


def test_signatures_cover_artifacts_by_path_and_inline_too(model, data_dir, keys):
    trusted, _ = keys
    path, _, size, sha = model
    (data_dir / "models").mkdir(parents=True)
    (data_dir / "models" / "m.onnx").write_bytes(path.read_bytes())
    handler = JobHandler(DEVICE, data_dir, trusted_key=trusted.trusted)
    by_path = wire.benchmark_job(DEVICE, 1, "p", sha, "onnx", path="models/m.onnx", size=size, meta=META,
                                     signer=trusted.sign_job, **QUICK_BENCH)
    assert handler.handle(by_path.encode())["ok"] is True
    unsigned = wire.benchmark_job(DEVICE, 2, "u", sha, "onnx", path="models/m.onnx", meta=META, **QUICK_BENCH)
    assert handler.handle(unsigned.encode())["error"]["kind"] == "unsigned_job"
    # Correctly signed facts, other bytes: the sha256 check that follows the signature catches it.
    inline = wire.benchmark_job(DEVICE, 3, "i", sha, "onnx", data=b"other bytes", size=size, meta=META,
                                    signer=trusted.sign_job, **QUICK_BENCH)
    assert handler.handle(inline.encode())["error"]["kind"] == "artifact_mismatch"
    assert artifacts_in(data_dir) == [f"{sha}.onnx"]  # only the copy the by-path job ran, unchanged
    assert hashlib.sha256((data_dir / "artifacts" / f"{sha}.onnx").read_bytes()).hexdigest() == sha


def test_without_a_trusted_key_unsigned_artifacts_still_run(model, data_dir):
    agent = Agent(data_dir)
    job = chunked_job(model)
    agent.transfers.job_arrived(job.encode())
    for index in range(model[1].count):
        agent.transfers.chunk_arrived(chunk_payload(model, index))
    assert agent.handler.handle(job.encode())["ok"] is True


def test_a_trusted_key_file_must_be_an_ed25519_public_key(tmp_path):
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key")
    ec = tmp_path / "ec.pub"
    ec_keys, serialization = crypto("asymmetric.ec"), crypto("serialization")
    ec.write_bytes(ec_keys.generate_private_key(ec_keys.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for path in (garbage, ec):
        with pytest.raises(UserError, match="not an Ed25519 public key"):
            signing.load_public_key(path)
    with pytest.raises(UserError, match="cannot read trusted key"):
        signing.load_public_key(tmp_path / "missing.pub")


PROBE = """
import json, sys
from pathlib import Path
from edgeopt_agent import wire
from edgeopt_agent.daemon.agent import Agent
from edgeopt_agent.daemon.config import build_config
agent = Agent(build_config({"device_id": "probe", "data_dir": sys.argv[1], "trusted_key": sys.argv[2]}))
agent.send_telemetry()
telemetry = json.loads(agent.outbox.pending()[0].payload)["body"]["agent"]
status = agent._status(wire.ONLINE, "connected", 1)
idle = "cryptography" in sys.modules
answer = agent.jobs.handle(Path(sys.argv[3]).read_bytes())
print(json.dumps({"idle": idle, "after_job": "cryptography" in sys.modules, "answer": answer["error"],
                  "telemetry": [telemetry["signatures"], telemetry["trusted_key_id"]],
                  "status": json.loads(status.payload)["body"]}))
"""


def test_the_daemon_says_signatures_are_on(tmp_path, keys):
    trusted, _ = keys
    job = tmp_path / "job.json"
    # Signed correctly, for a file the board does not have: the signature is checked, then the file.
    job.write_bytes(wire.benchmark_job("probe", 1, "j", "a" * 64, "onnx", path="models/m.onnx", size=10, meta=META,
                                           signer=trusted.sign_job).encode())
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "data"), str(trusted.public_path), str(job)],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["idle"] is True  # loaded at start: the board signs everything it sends with its device key
    assert report["answer"]["kind"] == "missing_artifact"
    assert report["telemetry"] == ["required", trusted.trusted.key_id]
    assert report["status"]["signatures"] == "required" and report["status"]["trusted_key_id"] == trusted.trusted.key_id


# --- download by URL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(tmp_path_factory, model):
    """A local HTTP server over a folder holding the model, a different file and nothing else."""
    root = tmp_path_factory.mktemp("web")
    (root / "model.onnx").write_bytes(model[0].read_bytes())
    (root / "other.onnx").write_bytes(b"x" * model[2])
    (root / "longer.onnx").write_bytes(model[0].read_bytes() + b"tail")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def url_job(model, url, **kwargs):
    _, _, size, sha = model
    return wire.benchmark_job(DEVICE, 1, "web", sha, "onnx", url=url, size=size, meta=META,
                                  **dict(QUICK_BENCH, **kwargs))


def test_an_artifact_is_downloaded_checked_and_kept(model, data_dir, web):
    handler = JobHandler(DEVICE, data_dir)
    answer = handler.handle(url_job(model, f"{web}/model.onnx").encode())
    assert answer["ok"] is True, answer["error"]
    assert artifacts_in(data_dir) == [f"{model[3]}.onnx"]
    assert hashlib.sha256((data_dir / "artifacts" / f"{model[3]}.onnx").read_bytes()).hexdigest() == model[3]


@pytest.mark.parametrize("name, kind, fragment", [
    ("other.onnx", "artifact_mismatch", "the job expects"),
    ("longer.onnx", "artifact_mismatch", "sent more than"),
    ("missing.onnx", "download_failed", "HTTP 404"),
])
def test_a_download_that_is_not_the_artifact_is_refused_and_not_kept(model, data_dir, web, name, kind, fragment):
    answer = JobHandler(DEVICE, data_dir).handle(url_job(model, f"{web}/{name}").encode())
    assert answer["error"]["kind"] == kind and fragment in answer["error"]["message"]
    assert artifacts_in(data_dir) == []  # no partial download left either


def test_an_unreachable_server_is_a_download_error(model, data_dir):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    answer = JobHandler(DEVICE, data_dir).handle(url_job(model, f"http://127.0.0.1:{port}/m.onnx").encode())
    assert answer["error"]["kind"] == "download_failed"


def test_a_signed_url_artifact_is_checked_before_the_download(model, data_dir, web, keys):
    trusted, other = keys
    handler = JobHandler(DEVICE, data_dir, trusted_key=trusted.trusted)
    _, _, size, sha = model
    wrong = wire.benchmark_job(DEVICE, 1, "w", sha, "onnx", url=f"{web}/model.onnx", size=size, meta=META,
                                   signer=other.sign_job, **QUICK_BENCH)
    assert handler.handle(wrong.encode())["error"]["kind"] == "signature_invalid"
    assert artifacts_in(data_dir) == []
    right = wire.benchmark_job(DEVICE, 2, "r", sha, "onnx", url=f"{web}/model.onnx", size=size, meta=META,
                                   signer=trusted.sign_job, **QUICK_BENCH)
    assert handler.handle(right.encode())["ok"] is True


@pytest.mark.parametrize("what, head, message, within_s", [
    ("body", b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", "too slow", 5),
    ("headers", b"HTTP/1.1 200 OK\r\nX-Padding: ", r"sent 0 of \d+ bytes in 0.5 s; too slow", 3),  # the line never ends
])
def test_a_server_that_trickles_is_given_up_on_at_the_deadline(model, data_dir, what, head, message, within_s):
    from edgeopt_agent.daemon.artifacts import ArtifactDeliveryError
    from edgeopt_agent.daemon.download import download

    stop = threading.Event()
    _, _, size, sha = model

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.wfile.write(head % size if b"%d" in head else head)
            while not stop.is_set():  # one byte at a time, each well inside the per-read timeout
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.05)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ref = wire.ArtifactRef(sha256=sha, format="onnx", size=size, url=f"http://127.0.0.1:{server.server_address[1]}/m")
    started = time.monotonic()
    try:
        with pytest.raises(ArtifactDeliveryError, match=message) as caught:
            download(ref, data_dir / "artifacts" / "m.onnx", timeout_s=5, deadline_s=0.5)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
    assert caught.value.kind == "download_failed" and time.monotonic() - started < within_s
    assert artifacts_in(data_dir) == []
