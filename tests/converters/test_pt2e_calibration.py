"""TFLite INT8 and ExecuTorch INT8 observe the same traced graph with the same observers: the second takes
the first one's statistics instead of running the calibration samples again, and quantizes to exactly what
its own calibration would have given."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PT2E calibration needs torch")
xq = pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer",
                         reason="needs the executorch extra")
lq = pytest.importorskip("litert_torch.quantize.pt2e_quantizer", reason="needs the tflite extra")

from edgeopt_converters.passes.pt2e_calibration import calibrate_prepared  # noqa: E402


def _model():
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5)).eval()


def test_the_second_format_shares_the_first_ones_calibration_and_quantizes_alike():
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model, example = _model(), torch.randn(1, 3, 32, 32)
    data = [([np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype(np.float32)], 1) for i in range(16)]

    def prepared(quantizer):
        return prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer)

    def xnnpack():
        return xq.XNNPACKQuantizer().set_global(xq.get_symmetric_quantization_config(is_per_channel=True))

    shared, counted = {}, []
    litert = prepared(lq.PT2EQuantizer().set_global(lq.get_symmetric_quantization_config(is_per_channel=True)))
    assert calibrate_prepared(torch, litert, iter(data), counted.append, shared, 16) == "calibrated"
    assert counted == [1] * 16 and len(shared) == 1

    def no_samples():
        pytest.fail("the shared statistics should stand in for the samples")
        yield

    taking = prepared(xnnpack())
    assert calibrate_prepared(torch, taking, no_samples(), counted.append, shared, 16).startswith("observer statistics shared")
    assert counted[-1] == 16, "progress still counts the samples"
    own = prepared(xnnpack())
    calibrate_prepared(torch, own, iter(data), None, None)
    sample = torch.from_numpy(data[3][0][0])
    assert torch.equal(convert_pt2e(taking)(sample), convert_pt2e(own)(sample))
