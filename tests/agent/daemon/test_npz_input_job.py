"""A job whose input file is an .npz bomb is answered `bad_input`; the agent inflates nothing."""
import io
import zipfile

import numpy as np
from harness import QUICK_BENCH, write_tiny_onnx

from edgeopt_agent import wire
from edgeopt_agent.daemon.jobs import JobHandler

DEVICE = "dev-npz"


def test_an_npz_bomb_as_input_file_is_a_bad_input_answer(tmp_path):
    data_dir = tmp_path / "data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    header = io.BytesIO()  # the header declares 2^36 float32 (256 GiB); 16 bytes follow it
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 36,)})
    with zipfile.ZipFile(data_dir / "models" / "inputs.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(16))
    job = wire.benchmark_job(DEVICE, 1, "bomb", sha, "onnx", path="models/tiny.onnx",
                             **dict(QUICK_BENCH, input_file="models/inputs.npz"))
    body = JobHandler(DEVICE, data_dir).handle(job.encode())
    assert body["ok"] is False and body["error"]["kind"] == "bad_input", body["error"]
    assert "member 'x.npy' holds 256.0 GiB" in body["error"]["message"]
    assert "cap of 4.0 GiB" in body["error"]["message"]
