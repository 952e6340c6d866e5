"""A model built with torchvision: where torchvision is missing, or is a build for another torch (the
default index's CUDA build beside the CPU torch edgeopt pins fails at import with `operator
torchvision::nms does not exist`), convert says so in one line that names the fix."""
import sys

import pytest

from edgeopt.cli.main import main
from edgeopt_converters.source.user_code import matching_torchvision

FACTORY_IMPORTING_AT_TOP = """
import torchvision


def build():
    return torchvision.models.mobilenet_v2(weights=None)
"""

FACTORY_IMPORTING_INSIDE = """
def build():
    from torchvision.models import mobilenet_v2

    return mobilenet_v2(weights=None)
"""

# What torchvision 0.28.0 from the default index does beside torch 2.13.0+cpu: its C++ operators
# do not load, and its meta registrations fail while it is imported (same exception, same words).
BROKEN_TORCHVISION = """
raise RuntimeError("operator torchvision::nms does not exist")
"""


def _convert(tmp_path, capsys, factory):
    model = tmp_path / "mobilenet.py"
    model.write_text(factory)
    code = main(["convert", f"{model}:build", "--device", "x86-64", "-o", str(tmp_path / "out"),
                 "--input-shape", "1,3,224,224", "--no-timing"])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")], err


@pytest.fixture
def broken_torchvision(tmp_path, monkeypatch):
    package = tmp_path / "site" / "torchvision"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(BROKEN_TORCHVISION)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    yield
    sys.modules.pop("torchvision", None)


@pytest.mark.parametrize("factory", [FACTORY_IMPORTING_AT_TOP, FACTORY_IMPORTING_INSIDE], ids=["at top", "in build()"])
def test_a_torchvision_built_for_another_torch_names_the_fix(tmp_path, capsys, broken_torchvision, factory):
    code, errors, err = _convert(tmp_path, capsys, factory)
    assert code == 2 and len(errors) == 1, err
    assert "cannot run beside torch" in errors[0] and "operator torchvision::nms does not exist" in errors[0]
    assert "EDGEOPT_TORCHVISION=1 bash scripts/setup.sh" in errors[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("factory", [FACTORY_IMPORTING_AT_TOP, FACTORY_IMPORTING_INSIDE], ids=["at top", "in build()"])
def test_a_missing_torchvision_names_the_release_to_install(tmp_path, capsys, monkeypatch, factory):
    monkeypatch.setitem(sys.modules, "torchvision", None)  # importing it fails as if it were not installed
    code, errors, err = _convert(tmp_path, capsys, factory)
    assert code == 2 and len(errors) == 1, err
    assert "imports torchvision, which is not installed: install torchvision 0." in errors[0]
    assert "EDGEOPT_TORCHVISION=1 bash scripts/setup.sh" in errors[0]


def test_another_import_error_is_not_blamed_on_torchvision(tmp_path, capsys):
    code, errors, err = _convert(tmp_path, capsys, "import not_a_module_anywhere\n")
    assert code == 2 and len(errors) == 1, err
    assert "No module named 'not_a_module_anywhere'" in errors[0] and "torchvision" not in errors[0]


@pytest.mark.parametrize("torch, vision", [("2.13.0+cpu", "0.28.0"), ("2.14.1", "0.29.1"), ("2.5.1+cu124", "0.20.1")])
def test_the_torchvision_made_with_each_torch(torch, vision):
    assert matching_torchvision(torch) == vision
