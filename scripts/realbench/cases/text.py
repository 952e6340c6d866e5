"""Sentence embeddings: all-MiniLM-L6-v2 judged by retrieval on Python's own docstrings."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from realbench.case import Case, TaskResult, not_worse
from realbench.inputs import SENTENCES
from realbench.retrieval import SEQ, docstring_pairs, recall_at_1, tokenize


RETRIEVAL_PAIRS = 800


TRANSFORMER_KEEPS = (f"queries whose own document ranks first (recall@1: {RETRIEVAL_PAIRS} Python docstring summaries "
                     f"searched against their bodies, scripts/retrieval_set.py) not fewer than FP32's (McNemar, per query)")


def transformer(work: Path) -> Case:
    """all-MiniLM-L6-v2 from its safetensors (transformers, the bench extra) with mean pooling + L2 norm."""
    import torch

    from corpus_models import minilm

    arrays = tokenize(SENTENCES)
    path = work / "minilm.onnx"
    feed = tuple(torch.from_numpy(arrays[k][:1]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    torch.onnx.export(minilm(), feed, str(path), input_names=list(arrays), output_names=["sentence_embedding"],
                      dynamic_axes={k: {0: "batch"} for k in list(arrays) + ["sentence_embedding"]}, opset_version=17,
                      dynamo=False)

    pairs = docstring_pairs(RETRIEVAL_PAIRS)
    texts = tokenize([p[1] for p in pairs] + [p[2] for p in pairs])  # the queries, then their documents

    def task(ref, got):
        hits = [recall_at_1(out[0][:RETRIEVAL_PAIRS], out[0][RETRIEVAL_PAIRS:]) for out in (ref, got)]
        cos = (ref[0] * got[0]).sum(1) / np.linalg.norm(ref[0], axis=1) / np.linalg.norm(got[0], axis=1)
        kept, said = not_worse(*hits)
        return TaskResult(f"retrieval recall@1 {hits[1].mean():.3f} (FP32 {hits[0].mean():.3f}; {said}); cosine to FP32 "
                          f"on its {2 * RETRIEVAL_PAIRS} texts mean {cos.mean():.4f}, worst {cos.min():.4f}", kept,
                          TRANSFORMER_KEEPS)

    calib = {k: v[::2] for k, v in arrays.items()}
    return Case("transformer", f"all-MiniLM-L6-v2, {SEQ} tokens", path, [f"1,{SEQ}"] * 3, ["int64"] * 3, calib, arrays,
                "embedding", task, task_data=texts)
