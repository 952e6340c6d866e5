"""Real models from the corpus: edgeopt's recommended artifact against onnxruntime's and Olive's quantizers.

For each model (realbench.cases; `scripts/corpus.py fetch --all` first) and on this machine, in one
interleaved timing run per model:
  edgeopt    `edgeopt.convert(..., device="x86-64")` (`--device`) on the ONNX file, or on a PyTorch source
             (`scripts/realbench/sources.py:FACTORY` with `--weights`, the package's own nn.Module), in a child
             process stopped after --convert-timeout seconds: its recommended artifact (FP32 when nothing
             quantized passes), and its best INT8 whatever the verdict. The baselines quantize edgeopt's FP32
             ONNX, or the case's own FP32 export when edgeopt did not finish (or with --no-edgeopt)
  static     onnxruntime `quantize_static` with defaults on the FP32 ONNX (same calibration data)
  dynamic    onnxruntime `quantize_dynamic` with defaults
  weight-only onnxruntime's MatMulNBits quantizer (INT8 and INT4 blocks of 32), where a graph has
             MatMuls with constant weights
  olive      Microsoft Olive (`olive-ai`, the bench extra): OnnxStaticQuantization and
             OnnxDynamicQuantization with defaults, the better of the two by verdict then speed
Every artifact is judged by edgeopt's accuracy verdicts (same output kinds, same evaluation data,
and the same ground truth where a model's data has it) plus the case's task judgement
(realbench.case.TaskResult): a figure and whether the artifact keeps the task, by the one-line criterion
each case states (its *_KEEPS constant). After the table: the done-when per model (realbench.done_when).
--json writes the results as data (realbench.results), which the done-when check and
scripts/bench_report.py (the BENCHMARKS.md tables) read.

    .venv/bin/python scripts/bench_real_models.py [--models detector,untuned,...] [--json out.json]
        [--device rpi4] [--convert-timeout 900] [--no-edgeopt]
"""
import os
import sys

from realbench.cli import main

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    sys.exit(main())
