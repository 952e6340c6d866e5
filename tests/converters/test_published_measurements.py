"""device_profiles/published/: every published board measurement loads, names its source and a rebuilt architecture."""
import csv
from collections import Counter

import pytest

from arch_zoo import ZOO
from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.published import (COLUMNS, PublishedDataError, bundled_folder, load_measurements,
                                               runtime_pairs, split_of)

BOARDS = ("rpi4", "rpi5", "jetson-nano", "jetson-orin-nano")


@pytest.fixture(scope="module")
def rows():
    return load_measurements()


def test_every_row_validates_and_the_set_covers_the_boards_and_runtimes_asked_for(rows):
    assert len(rows) >= 40
    per_board = Counter(r.board for r in rows)
    assert all(per_board[b] >= 5 for b in BOARDS), per_board
    assert {"onnxruntime", "tflite", "ncnn", "executorch", "tensorrt"} <= {r.runtime for r in rows}
    for r in rows:
        assert r.model in ZOO, f"{r.where}: {r.model} has no definition in scripts/arch_zoo.py"
        assert len(r.input) == 4 and r.input[0] == 1, r.where
        assert r.latency_ms > 0 and r.published and r.locator, r.where
        assert r.source.title and r.source.url.startswith("https://") and r.source.date, r.where


def test_each_source_is_used_and_every_split_is_the_rule_fixed_before_fitting(rows):
    with open(bundled_folder() / "sources.csv", newline="") as handle:
        ids = {row["id"] for row in csv.DictReader(handle)}
    assert ids == {r.source.id for r in rows}
    assert all(r.split == split_of(r.board, r.model, r.shape_text) for r in rows)
    groups = {r.group: r.split for r in rows}
    assert set(groups.values()) == {"train", "heldout"}  # both sides exist, whole groups on one side


def _write(tmp_path, **changes):
    """The first bundled row with `changes`, as a user's CSV."""
    with open(bundled_folder() / "measurements.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    row.update(changes)
    if "split" not in changes:
        row["split"] = split_of(row["board"], row["model"], row["input"])
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    return path


@pytest.mark.parametrize("changes, message", [
    ({"board": "rpi9"}, "board 'rpi9' is not one of"),
    ({"runtime": "tvm"}, "runtime 'tvm' is not one of"),
    ({"latency_ms": "-3"}, "latency_ms must be above 0"),
    ({"latency_ms": "fast"}, "latency_ms 'fast' is not a number"),
    ({"input": "224x224x"}, "is not a shape"),
    ({"source": "my-blog"}, "source 'my-blog' is not in sources.csv"),
    ({"locator": ""}, "'locator' is empty"),
])
def test_a_bad_row_is_refused_with_its_file_line_and_column(tmp_path, changes, message):
    with pytest.raises(PublishedDataError, match=message) as caught:
        load_measurements([_write(tmp_path, **changes)], bundled=False)
    assert "mine.csv:2" in str(caught.value)


def test_a_split_other_than_the_rules_is_refused(tmp_path):
    path = _write(tmp_path)
    with open(path, newline="") as handle:
        row = list(csv.DictReader(handle))[0]
    flipped = {"train": "heldout", "heldout": "train"}[row["split"]]
    with pytest.raises(PublishedDataError, match="is not the rule's"):
        load_measurements([_write(tmp_path, split=flipped)], bundled=False)


def test_a_users_own_rows_and_sources_load_beside_the_bundled_ones(tmp_path):
    (tmp_path / "sources.csv").write_text("id,title,url,date,notes\nmy-lab,My lab's Pi 5,https://example.org/pi5,"
                                          "2026-01-02,measured with edgeopt bench\n")
    mine = load_measurements([_write(tmp_path, source="my-lab", latency_ms="12.5")])
    assert mine[-1].source.title == "My lab's Pi 5" and mine[-1].latency_ms == 12.5
    assert len(mine) == len(load_measurements()) + 1


def test_runtime_pairs_compare_each_runtime_as_deployed_on_the_same_model_and_board(rows):
    pairs = runtime_pairs(rows)
    assert pairs
    for a, b in pairs:
        assert a.group == b.group and a.published_precision == b.published_precision and a.runtime != b.runtime
    # ncnn measured with 4 and 1 threads on a Pi 5: only its 4-thread row stands for ncnn
    ncnn = [x for p in pairs for x in p if x.runtime == "ncnn" and x.board == "rpi5" and x.model == "efficientnet_b0"]
    assert ncnn and {x.threads for x in ncnn} == {4}


def test_bundled_priors_cite_published_sources_and_jetsons_state_their_cpus_peaks():
    sources = {r.source.id for r in load_measurements()}
    for board in ("rpi4", "rpi5", "jetson-nano", "jetson-orin-nano"):
        profile = load_profile(board)
        assert profile.priors, board
        for prior in profile.priors:
            assert prior.rows >= 1 and set(prior.sources) <= sources, (board, prior.runtime)
    for board in ("jetson-nano", "jetson-orin-nano"):
        assert load_profile(board).cpu_peak_tops["fp32"] < load_profile(board).peak_tops["fp32"]


def test_the_pis_have_int8_rows_of_the_runtimes_edgeopt_deploys_with_their_sources_fp32_beside_them(rows):
    """INT8 evidence for a Pi 4 and a Pi 5: TFLite on both (XNNPACK, FP32 and INT8 of the same models from one
    source), ExecuTorch and ONNX Runtime on the Pi 5, ncnn's own INT8 models on both (marked as such)."""
    int8 = [r for r in rows if r.precision == "int8" and r.board in ("rpi4", "rpi5")]
    have = {(r.board, r.runtime) for r in int8}
    assert {("rpi4", "tflite"), ("rpi5", "tflite"), ("rpi5", "executorch"), ("rpi5", "onnxruntime"),
            ("rpi4", "ncnn"), ("rpi5", "ncnn")} <= have
    assert all(r.published_precision == "int8" for r in int8)
    assert all("edgeopt does not build" in r.settings for r in int8 if r.runtime == "ncnn")
    floats = {(r.group, r.runtime, r.threads, r.source.id) for r in rows if r.published_precision == "fp32"}
    tflite = [r for r in int8 if r.runtime == "tflite"]
    assert tflite and all((r.group, r.runtime, r.threads, r.source.id) in floats for r in tflite)
    # both sides of the split hold INT8 rows of each Pi, so the INT8 priors have held-out rows to be judged on
    for board in ("rpi4", "rpi5"):
        assert {r.split for r in int8 if r.board == board} == {"train", "heldout"}


def test_the_pis_profiles_hold_int8_priors_and_a_checked_transfer():
    for board, runtimes in (("rpi4", ("tflite", "ncnn")), ("rpi5", ("tflite", "executorch", "ncnn"))):
        profile = load_profile(board)
        for runtime in runtimes:
            prior = profile.prior(runtime, "int8")
            assert prior is not None and prior.rows >= 3, (board, runtime)
        check = profile.transfer("int8", "fp32")
        assert check is not None and check.heldout_rows >= 1 and check.median_error_pct is not None, board
