"""The retrieval task and statistics scripts/calibrate_embedding_limits.py calibrates the embedding limits with."""

import numpy as np

import calibrate_embedding_limits as calibrate


def test_docstring_pairs_are_reproducible_distinct_and_never_call_signatures():
    pairs = calibrate.docstring_pairs(300)
    assert pairs == calibrate.docstring_pairs(300)
    names, summaries, bodies = zip(*pairs)
    assert len(set(names)) == len(set(summaries)) == len(set(bodies)) == 300
    assert not set(summaries) & set(bodies)
    assert all(5 <= len(s.split()) <= 40 and "(" not in s.split()[0] for s in summaries)
    assert all(len(b.split()) >= 12 for b in bodies)


def test_per_query_figures_find_the_true_document_and_fp32s_neighbours():
    fp32_order = np.array([[0, 1, 2], [2, 1, 0], [1, 2, 0]])  # query i's truth: document i
    moved = np.array([[1, 0, 2], [2, 1, 0], [1, 0, 2]])
    figures = calibrate.per_query(moved, fp32_order)
    assert figures["r1"].tolist() == [0, 0, 0]
    assert figures["mrr"].tolist() == [0.5, 0.5, 1 / 3]
    assert figures["fp32_top1_kept"].tolist() == [0, 1, 1]
    assert calibrate.per_query(fp32_order, fp32_order)["r1"].tolist() == [1, 0, 0]


def test_bootstrap_drop_separates_a_real_loss_from_none():
    rng = np.random.default_rng(1)
    fp32 = (rng.random(400) < 0.5).astype(float)
    assert calibrate.bootstrap_drop(fp32, fp32) == (0.0, 0.0, 0.0)
    worse = fp32 * (rng.random(400) > 0.3)  # loses about 30 % of FP32's hits, 15 points
    mean, low, high = calibrate.bootstrap_drop(fp32, worse)
    assert 0 < low < mean < high and 0.10 < mean < 0.20
    noisy = np.where(rng.random(400) < 0.05, 1 - fp32, fp32)  # flips both ways: no loss to find
    assert calibrate.bootstrap_drop(fp32, noisy)[1] < 0 < calibrate.bootstrap_drop(fp32, noisy)[2]
