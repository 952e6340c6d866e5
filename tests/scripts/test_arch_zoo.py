"""scripts/arch_zoo.py: the architectures of the published measurements, rebuilt layer for layer without weights."""
import pytest

import arch_zoo

# Quick to build: one of each family; the rest are checked in the slow sweep.
QUICK = ("resnet18", "mobilenet_v2", "shufflenet_v1_g3", "yolox_nano", "yolo11n", "yolov4_tiny", "efficientdet_lite0")


def _check(name):
    arch = arch_zoo.ZOO[name]
    built = arch_zoo.parameters(name)
    # YOLO26 is YOLO11's layers with a one-to-one, DFL-free head: its published counts within 5 %.
    tolerance = 0.05 if name.startswith("yolo26") else 0.015
    assert built == pytest.approx(arch.params, rel=tolerance), f"{name}: {built:.4f} M against {arch.params} M ({arch.where})"


@pytest.mark.parametrize("name", QUICK)
def test_a_definition_has_the_published_parameter_count(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(arch_zoo.ZOO) - set(QUICK)))
def test_every_definition_has_the_published_parameter_count(name):
    _check(name)


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: alexnet"):
        arch_zoo.build("resnet9")
