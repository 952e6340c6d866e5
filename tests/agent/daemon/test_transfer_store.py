"""Chunked artifacts on the device: the wire format, and the on-disk store that puts them back together."""
import hashlib
import os

import pytest

from edgeopt_agent import wire
from edgeopt_agent.wire import ArtifactRef, Envelope, ProtocolError
from edgeopt_agent.daemon.chunk_store import ChunkStore, TransferError
from edgeopt_agent.wire import plan_chunks, read_chunk

CHUNK = 1024


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payload(size: int, seed: int = 1) -> bytes:
    return bytes((i * 31 + seed) % 251 for i in range(size))


def artifact(tmp_path, size=5 * CHUNK + 100, seed=1):
    """(file, ArtifactRef with its chunk plan)."""
    path = tmp_path / f"model-{size}-{seed}.onnx"
    path.write_bytes(payload(size, seed))
    plan, length, digest = plan_chunks(path, CHUNK)
    return path, ArtifactRef(sha256=digest, format="onnx", size=length, chunks=plan)


def chunks_of(path, ref):
    return [read_chunk(path, ref.chunks, i) for i in range(ref.chunks.count)]


# --- wire format ----------------------------------------------------------------------------------


def test_plan_chunks_cuts_a_file_into_hashed_pieces(tmp_path):
    path, ref = artifact(tmp_path)
    data = path.read_bytes()
    assert ref.size == len(data) and ref.sha256 == sha(data)
    assert ref.chunks.count == 6 and ref.chunks.length(5, ref.size) == 100
    pieces = chunks_of(path, ref)
    assert b"".join(pieces) == data
    assert [sha(p) for p in pieces] == list(ref.chunks.sha256)


def test_a_chunked_signed_job_round_trips(tmp_path):
    _, ref = artifact(tmp_path)
    signature = wire.Signature("ed25519", "0123456789abcdef", "A" * 86 + "==")
    job = wire.benchmark_job("rpi-01", 1, "j", ref.sha256, "onnx", chunks=ref.chunks, size=ref.size,
                                 signer=lambda body: signature, meta={"precision": "int8"}, runs=5)
    parsed = wire.parse_job(Envelope.decode(job.encode(), expect_device="rpi-01"))
    assert parsed.artifact.chunks == ref.chunks and parsed.artifact.size == ref.size
    assert parsed.signature == signature and parsed.artifact.source == "chunks"
    by_url = wire.benchmark_job("rpi-01", 2, "u", ref.sha256, "onnx", url="https://models.example/m.onnx",
                                    size=ref.size)
    assert wire.parse_job(by_url).artifact.url == "https://models.example/m.onnx"


SHA = "ab" * 32


@pytest.mark.parametrize(
    "artifact_fields, kind, fragment",
    [
        ({"chunks": {"chunk_size": CHUNK, "sha256": [SHA]}}, "invalid_job", "needs its 'size'"),
        ({"size": 3000, "chunks": {"chunk_size": CHUNK, "sha256": [SHA]}}, "invalid_job", "must list 3 chunk hashes"),
        ({"size": 10, "chunks": {"chunk_size": 10, "sha256": [SHA]}}, "invalid_job", "chunk_size"),
        ({"size": 10, "chunks": {"chunk_size": CHUNK, "sha256": ["x"]}}, "invalid_job", "64 lowercase hex"),
        ({"size": 10, "chunks": {"chunk_size": CHUNK}}, "invalid_job", "exactly 'chunk_size' and 'sha256'"),
        ({"size": 2 ** 40, "chunks": {"chunk_size": CHUNK, "sha256": []}}, "artifact_too_large", "use bigger chunks"),
        ({"size": 10, "url": "file:///etc/passwd"}, "invalid_job", "http:// or https://"),
        ({"size": 10, "url": "ftp://host/m.onnx"}, "invalid_job", "http:// or https://"),
        ({"size": 0, "url": "https://host/m.onnx"}, "invalid_job", "'size' must be a positive"),
        ({"size": 10, "url": "https://h/m", "path": "m.onnx"}, "invalid_job", "exactly one"),
    ],
)
def test_bad_chunked_and_url_artifacts_are_refused(artifact_fields, kind, fragment):
    body = {"job_id": "j", "artifact": {"sha256": SHA, "format": "onnx", **artifact_fields}}
    with pytest.raises(ProtocolError, match=fragment) as caught:
        wire.parse_job(Envelope(device_id="rpi-01", seq=1, type="benchmark", body=body))
    assert caught.value.kind == kind and caught.value.job_id == "j"


def test_chunk_and_transfer_messages_round_trip():
    chunk = wire.chunk_message("rpi-01", 3, SHA, 2, b"\x00\x01piece")
    assert wire.parse_topic(wire.chunks_topic("rpi-01")) == ("rpi-01", "chunks")
    parsed = wire.parse_chunk(Envelope.decode(chunk.encode(), expect_device="rpi-01"))
    assert (parsed.artifact_sha256, parsed.index, parsed.data) == (SHA, 2, b"\x00\x01piece")

    body = wire.transfer_body("j", "r" * 32, SHA, 6, [5, 1, 3])
    request = wire.parse_transfer(Envelope("rpi-01", 1, wire.TRANSFER_TYPE, body))
    assert request.missing == (1, 3, 5) and request.chunks == 6 and request.job_id == "j"


@pytest.mark.parametrize(
    "message_type, body, fragment",
    [
        ("chunk", {"artifact_sha256": SHA, "index": 0}, "exactly artifact_sha256, index and data_b64"),
        ("chunk", {"artifact_sha256": SHA, "index": -1, "data_b64": ""}, "'index'"),
        ("chunk", {"artifact_sha256": SHA, "index": 0, "data_b64": "@@"}, "not valid base64"),
        ("result", {"artifact_sha256": SHA, "index": 0, "data_b64": ""}, "expected 'chunk'"),
    ],
)
def test_broken_chunk_messages_are_refused(message_type, body, fragment):
    with pytest.raises(ProtocolError, match=fragment):
        wire.parse_chunk(Envelope("rpi-01", 1, message_type, body))


def test_transfer_requests_name_indices_within_the_artifact():
    body = wire.transfer_body("j", "r", SHA, 3, [0])
    body["missing"] = [3]
    with pytest.raises(ProtocolError, match="indices below 3"):
        wire.parse_transfer(Envelope("rpi-01", 1, wire.TRANSFER_TYPE, body))


# --- the store ------------------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    return ChunkStore(tmp_path / "transfers")


def test_chunks_are_kept_verified_and_put_together(tmp_path, store):
    path, ref = artifact(tmp_path)
    pieces = chunks_of(path, ref)
    assert store.register(ref) == list(range(6))
    for index in (4, 0, 2):
        assert store.put(ref.sha256, index, pieces[index]) is True
    assert store.put(ref.sha256, 2, pieces[2]) is False  # a redelivered chunk is a no-op
    assert store.missing(ref.sha256) == [1, 3, 5] and not store.complete(ref.sha256)
    with pytest.raises(TransferError) as incomplete:
        store.assemble(ref.sha256, tmp_path / "out.onnx")
    assert incomplete.value.kind == "transfer_incomplete"
    for index in (1, 3, 5):
        store.put(ref.sha256, index, pieces[index])
    target = store.assemble(ref.sha256, tmp_path / "artifacts" / "out.onnx")
    assert target.read_bytes() == path.read_bytes()
    assert not (store.root / ref.sha256).exists()  # the chunks are gone once the file is whole
    assert store.partial() == []


def test_received_chunks_survive_a_restart(tmp_path, store):
    path, ref = artifact(tmp_path)
    pieces = chunks_of(path, ref)
    store.register(ref)
    store.put(ref.sha256, 0, pieces[0])
    store.put(ref.sha256, 3, pieces[3])
    again = ChunkStore(store.root)  # a new process
    assert again.register(ref) == [1, 2, 4, 5]
    assert again.progress(ref.sha256) == (2, 6)


def test_a_chunk_that_is_not_the_planned_one_is_not_kept(tmp_path, store):
    path, ref = artifact(tmp_path)
    store.register(ref)
    forged = bytearray(read_chunk(path, ref.chunks, 1))
    forged[0] ^= 0xFF
    with pytest.raises(TransferError, match="not part of the file") as caught:
        store.put(ref.sha256, 1, bytes(forged))
    assert caught.value.kind == "artifact_mismatch"
    with pytest.raises(TransferError, match="beyond its 6 chunks"):
        store.put(ref.sha256, 6, b"x")
    assert store.missing(ref.sha256) == list(range(6))
    assert list((store.root / ref.sha256).glob("*.chunk")) == []


def test_chunks_of_an_artifact_no_job_asked_for_are_refused(store):
    with pytest.raises(TransferError) as caught:
        store.put(SHA, 0, b"data")
    assert caught.value.kind == "unknown_artifact"
    assert not store.root.exists() or list(store.root.iterdir()) == []


def test_chunks_matching_a_forged_plan_fail_the_whole_file_check(tmp_path, store):
    path, ref = artifact(tmp_path)
    forged = bytearray(path.read_bytes())
    forged[10] ^= 0xFF
    forged_path = tmp_path / "forged.onnx"
    forged_path.write_bytes(bytes(forged))
    forged_plan, _, _ = plan_chunks(forged_path, CHUNK)
    claimed = ArtifactRef(sha256=ref.sha256, format="onnx", size=ref.size, chunks=forged_plan)
    store.register(claimed)
    for index, piece in enumerate(chunks_of(forged_path, claimed)):
        store.put(ref.sha256, index, piece)
    target = tmp_path / "artifacts" / "out.onnx"
    with pytest.raises(TransferError, match="not the file the job names") as caught:
        store.assemble(ref.sha256, target)
    assert caught.value.kind == "artifact_mismatch"
    assert not target.parent.exists()  # nothing of it reached the artifacts folder
    assert store.partial() == []  # discarded: a new job starts over


def test_other_chunks_for_the_same_artifact_start_it_over(tmp_path, store):
    path, ref = artifact(tmp_path)
    store.register(ref)
    store.put(ref.sha256, 0, read_chunk(path, ref.chunks, 0))
    bigger, _, _ = plan_chunks(path, 2 * CHUNK)
    assert store.register(ArtifactRef(ref.sha256, "onnx", size=ref.size, chunks=bigger)) == [0, 1, 2]


def test_room_is_checked_before_a_transfer_starts(tmp_path):
    _, ref = artifact(tmp_path)
    store = ChunkStore(tmp_path / "transfers", reserve_bytes=64 * 2 ** 20, free_bytes=lambda folder: 10 * 2 ** 20)
    with pytest.raises(TransferError, match="free some space") as caught:
        store.register(ref)
    assert caught.value.kind == "no_space"
    assert store.partial() == []


def test_only_a_few_incomplete_transfers_are_kept(tmp_path):
    store = ChunkStore(tmp_path / "transfers", keep_partial=2, max_age_s=float("inf"))
    refs = [artifact(tmp_path, seed=seed)[1] for seed in range(4)]
    for number, ref in enumerate(refs):
        store.register(ref)
        folder = store.root / ref.sha256
        os.utime(folder, (1000 + number, 1000 + number))  # make "least recently active" unambiguous
        os.utime(folder / "plan.json", (1000 + number, 1000 + number))
    # The oldest went when the fourth started: two others are kept besides the newest.
    assert store.partial() == [refs[1].sha256, refs[2].sha256, refs[3].sha256]


def test_stale_incomplete_transfers_are_dropped(tmp_path):
    store = ChunkStore(tmp_path / "transfers", max_age_s=60)
    old, new = artifact(tmp_path, seed=1)[1], artifact(tmp_path, seed=2)[1]
    store.register(old)
    for path in (store.root / old.sha256, store.root / old.sha256 / "plan.json"):
        os.utime(path, (1, 1))
    store.register(new)
    assert store.partial() == [new.sha256]
