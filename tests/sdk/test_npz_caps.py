"""User array files (.npy/.npz) are size-checked before anything is inflated.

A deflated .npz of a few hundred KB can declare gigabytes; numpy.load allocates and inflates
whatever the file declares. Every reader (calibration/evaluation data on the host, a job's or
`edgeopt bench --input` file on the board) goes through edgeopt_agent.arrays.read_arrays, which
checks the zip directory's declared size and the .npy header's shape x itemsize against a cap.
"""
import io
import zipfile

import numpy as np
import pytest

from edgeopt_agent.arrays import MAX_ARRAY_BYTES_ENV, ArrayFileTooLarge, read_arrays
from edgeopt_agent.bench.inputs import file_feeds
from edgeopt_agent.errors import UserError
from edgeopt_agent.runners.base import TensorInfo
from edgeopt_agent.runners.errors import InputError
from edgeopt_converters.source.tensors import InputSpec, load_dataset

MiB = 1 << 20


def deflated_zeros(path, members):
    """An .npz whose float32 members are all zeros: `members` name -> bytes of data (deflates ~1000x)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, size in members.items():
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                          "shape": (size // 4,)})
            archive.writestr(name + ".npy", header.getvalue() + bytes(size))
    return path


def lying_header(path, shape):
    """An .npz whose one member's .npy header declares `shape` float32 but holds 16 bytes."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(16))
    return path


def test_a_deflated_member_over_the_cap_is_refused_from_the_zip_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_ARRAY_BYTES_ENV, str(4 * MiB))
    bomb = deflated_zeros(tmp_path / "calib.npz", {"input": 64 * MiB})
    assert bomb.stat().st_size < MiB  # the file is small; what it declares is not
    with pytest.raises(UserError) as caught:
        load_dataset(bomb, [InputSpec("input", (-1, 16))], "calibration", allow_labels=False)
    message = str(caught.value)
    assert "member 'input.npy'" in message and "64.0 MiB" in message and "cap of 4.0 MiB" in message
    assert "declared in the zip directory" in message and MAX_ARRAY_BYTES_ENV in message and "\n" not in message


def test_a_header_declaring_more_than_the_cap_is_refused_before_allocating(tmp_path):
    # 2^36 float32 = 256 GiB declared, 16 bytes present: numpy.load would try to allocate it all.
    bomb = lying_header(tmp_path / "eval.npz", (1 << 36,))
    with pytest.raises(ArrayFileTooLarge, match=r"member 'x\.npy' holds 256\.0 GiB .*by its \.npy header \(shape \[68719476736\] x 4 "
                                                r"bytes.*cap of 4\.0 GiB"):
        read_arrays(bomb, "evaluation data file")


def test_members_together_over_the_cap_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_ARRAY_BYTES_ENV, str(MiB))
    path = deflated_zeros(tmp_path / "two.npz", {"a": 600 * 1024, "b": 600 * 1024})
    with pytest.raises(ArrayFileTooLarge, match=r"member 'b\.npy' .*after 600\.0 KiB .* of earlier members"):
        read_arrays(path)


def test_a_header_larger_than_the_zip_entry_is_refused(tmp_path):
    """The zip directory says what may be inflated; a header claiming more data than that is a lie."""
    path = lying_header(tmp_path / "short.npz", (1000,))
    with pytest.raises(UserError, match="not a readable .npy/.npz array file .*declares .* bytes in the zip directory"):
        load_dataset(path, [InputSpec("x", (-1,))], "calibration", allow_labels=False)


def test_a_bench_input_file_over_the_cap_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_ARRAY_BYTES_ENV, str(4 * MiB))
    bomb = deflated_zeros(tmp_path / "inputs.npz", {"input": 32 * MiB})
    with pytest.raises(InputError, match=r"input file .*member 'input\.npy' holds 32\.0 MiB .*cap of 4\.0 MiB"):
        file_feeds(str(bomb), [TensorInfo("input", (1, 16), "float32")], batch=1)


def test_a_plain_npy_over_the_cap_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_ARRAY_BYTES_ENV, "1000")
    np.save(tmp_path / "big.npy", np.zeros(1000, dtype=np.float32))
    with pytest.raises(InputError, match=r"its array holds 3\.9 KiB \(4000 bytes\) by its \.npy header .*cap of 1000 bytes"):
        file_feeds(str(tmp_path / "big.npy"), [TensorInfo("x", (1000,), "float32")], batch=None)


def test_a_bad_cap_setting_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv(MAX_ARRAY_BYTES_ENV, "lots")
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(UserError, match=f"\\${MAX_ARRAY_BYTES_ENV} is 'lots'; give .* positive integer"):
        read_arrays(tmp_path / "a.npy")


@pytest.mark.parametrize("array", [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4)),
    np.array(3.5),
    np.zeros((0, 5), dtype=np.uint8),
    np.array([True, False]),
    np.arange(6, dtype=">i4"),
], ids=["f32", "fortran", "scalar", "empty", "bool", "big-endian"])
def test_what_numpy_reads_is_read_the_same(tmp_path, array):
    np.save(tmp_path / "a.npy", array)
    np.savez_compressed(tmp_path / "a.npz", first=array, second=array[..., None] if array.ndim else array)
    is_npz, plain = read_arrays(tmp_path / "a.npy")
    assert not is_npz and plain[""].dtype == array.dtype and np.array_equal(plain[""], array)
    is_npz, packed = read_arrays(tmp_path / "a.npz")
    with np.load(tmp_path / "a.npz") as expected:
        assert is_npz and sorted(packed) == sorted(expected.files)
        for key in expected.files:
            assert packed[key].shape == expected[key].shape and np.array_equal(packed[key], expected[key])


def test_pickled_arrays_are_still_refused(tmp_path):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="Python objects"):
        read_arrays(tmp_path / "objects.npy")


def streamed_zeros(path, name, size):
    """An .npz with one float32 member of `size` zero bytes, deflated as it is written (no `size` in memory)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (size // 4,)})
    info = zipfile.ZipInfo(name + ".npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open(info, "w", force_zip64=True) as member:
            member.write(header.getvalue())
            for _ in range(size // MiB):
                member.write(bytes(MiB))
    return path


def test_a_small_file_declaring_far_more_than_it_can_hold_is_refused_under_the_cap(tmp_path, monkeypatch):
    """Under the 4 GiB cap a file of under a megabyte could still make the reader inflate half a gigabyte:
    what its members declare together is bounded by its own size first."""
    bomb = streamed_zeros(tmp_path / "calib.npz", "input", 512 * MiB)
    assert bomb.stat().st_size < MiB
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda *a, **k: pytest.fail("a member was inflated"))
    with pytest.raises(ArrayFileTooLarge) as caught:
        read_arrays(bomb, "calibration file")
    message = str(caught.value)
    assert "declare 512.0 MiB" in message and "64x its size" in message and "numpy.savez" in message
    assert "\n" not in message


def test_a_real_compressed_file_within_the_floor_is_read(tmp_path):
    data = np.zeros((1024, 1024, 16), dtype=np.float32)  # 64 MiB of zeros: deflates about 1000:1
    np.savez_compressed(tmp_path / "masks.npz", masks=data)
    _, arrays = read_arrays(tmp_path / "masks.npz")
    assert arrays["masks"].shape == data.shape
