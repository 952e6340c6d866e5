"""The TensorRT engine build: planned on the host, performed by the agent on the board.

An engine is specific to the GPU and TensorRT version it was built with, so the host never builds
one: it ships the ONNX (FP32, or QDQ INT8 in TensorRT's layout) and the job tells the agent to build.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from edgeopt_agent.errors import UserError

from .base import Step, StepContext, StepResult, option


@dataclass(frozen=True)
class TensorrtEngineOptions:
    precision: str = option("fp16", "the engine's precision: fp32, fp16 or int8 (int8 needs a QDQ ONNX)")
    workspace_mib: int = option(1024, "builder workspace")


class BuildTensorrtEngine(Step):
    name = "build-tensorrt-engine"
    Options = TensorrtEngineOptions
    on_target = True

    def label(self) -> str:
        return f"build a TensorRT {self.options.precision.upper()} engine (on the target)"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        raise UserError("a TensorRT engine is built on the board by edgeopt-agent (deploy the ONNX artifact); "
                        "it cannot be built on the host")
