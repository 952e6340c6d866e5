"""PyTorch -> ONNX FP32 (torch.onnx's exporter)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from edgeopt_agent.errors import UserError, require

from ..tensors import InputSpec
from ._quiet import captured_output, log
from .base import Step, StepContext, StepResult, option


@dataclass(frozen=True)
class OnnxExportOptions:
    opset: int = option(18, "ONNX opset of the export")
    dynamic_batch: bool = option(True, "export the batch dimension as dynamic when the model allows it")


def example_args(specs: Sequence[InputSpec]):
    torch = require("torch", "convert")
    generator = torch.Generator().manual_seed(0)
    args = []
    for spec in specs:
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            args.append(torch.randn(spec.shape, generator=generator).to(dtype))
        else:
            args.append(torch.zeros(spec.shape, dtype=dtype))
    return tuple(args)


class ExportOnnx(Step):
    """The source model as one self-contained ONNX FP32 file."""

    name = "export-onnx"
    Options = OnnxExportOptions
    from_source = True

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        source, specs = ctx.source, ctx.specs
        if source.kind == "onnx":
            self._copy_onnx(source.onnx_path, output)
            return StepResult(output, {"dynamic_batch": any(s.shape[0] == -1 for s in source.input_specs[:1])})
        torch = require("torch", "convert")
        require("onnxscript", "convert", "ONNX export")
        args = example_args(specs)
        names = [s.name for s in specs]
        if self.options.dynamic_batch:
            try:
                self._export(torch, source, args, names, output, dynamic=True)
                return StepResult(output, {"dynamic_batch": True})
            except Exception as exc:  # the model pins its batch size (e.g. x.view(1, -1))
                log.info("export with a dynamic batch dimension failed (%s); exporting with fixed shapes", exc)
        try:
            self._export(torch, source, args, names, output, dynamic=False)
        except Exception as exc:
            raise UserError(
                f"ONNX export of {source.description} with inputs "
                f"{', '.join(s.describe() for s in specs)} failed: {_first_line(exc)}"
            ) from exc
        return StepResult(output, {"dynamic_batch": False})

    @staticmethod
    def _copy_onnx(path: Path, output: Path) -> None:
        """One self-contained file, with weights the source kept in external data files inlined."""
        onnx = require("onnx", "convert")
        model = onnx.load(str(path))  # resolves external data relative to the model's folder
        try:
            onnx.save(model, str(output))
        except ValueError as exc:  # protobuf's 2 GB limit
            raise UserError(f"{path} is too large to store in one ONNX file ({exc}); models over 2 GB are not supported yet") from None

    def _export(self, torch, source, args, names, output, dynamic):
        # TorchScript modules can only go through the TorchScript-based exporter.
        use_dynamo = source.kind != "torchscript"
        kwargs = dict(input_names=names, output_names=None, opset_version=self.options.opset)
        if use_dynamo:
            if dynamic:
                batch = torch.export.Dim("batch", min=1, max=4096)
                kwargs["dynamic_shapes"] = tuple({0: batch} for _ in args)
            kwargs.update(dynamo=True, verbose=False, optimize=True, external_data=False)
        else:
            if dynamic:
                kwargs["dynamic_axes"] = {n: {0: "batch"} for n in names}
            kwargs.update(dynamo=False)
        with captured_output("torch.onnx.export"):
            result = torch.onnx.export(source.module, args, str(output), **kwargs)
        if use_dynamo and result is not None and not output.exists():
            result.save(str(output))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
