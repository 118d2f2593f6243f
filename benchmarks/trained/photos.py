"""Inputs made from the photos scikit-image ships (``skimage.data``, no download): text drawn on
them for the text detector, and face / non-face crops for MTCNN.

- :func:`text_scenes`: a random square crop of a photo resized to the detector's size, with
  two to six lines of ``text_lines.line_text`` drawn on it (a font of the machine, 12-36 px,
  ink dark on a light area or light on a dark one, some lines on a filled box as signs and
  labels are), light noise;
- :func:`face_box`: the face in ``astronaut()``, located by the float O-Net: the best of a
  coarse grid of square windows, moved by its own box regression and squared;
- :func:`face_crops`: crops jittered around that box (centre moved by up to ``jitter`` of the
  side, side scaled by 0.8-1.25: faces, part faces) and random square crops of the other
  photos (non-faces), half and half, as ``[N, size, size, 3]`` uint8 RGB.

Needs scikit-image (the ``bench`` extra), imported on first use.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from trained.text_lines import _font, find_fonts, line_text

__all__ = ["SCENE_PHOTOS", "face_box", "face_crops", "photo", "text_scenes"]

SCENE_PHOTOS = (
    "astronaut",
    "camera",
    "chelsea",
    "coffee",
    "rocket",
    "brick",
    "grass",
    "gravel",
    "moon",
    "clock",
    "coins",
    "horse",
    "hubble_deep_field",
    "immunohistochemistry",
    "retina",
    "cat",
)
"""Photos (bundled with scikit-image) the detector's scenes and MTCNN's non-faces are cut
from; ``astronaut`` is left out of the non-faces (it holds the face)."""


@cache
def photo(name: str) -> np.ndarray:
    """``skimage.data.<name>()`` as ``HxWx3`` uint8 RGB (grey photos repeated, alpha dropped)."""
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.dtype != np.uint8:
        image = (255 * (image.astype(np.float64) / max(float(image.max()), 1))).astype(np.uint8)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def _square_crop(image: np.ndarray, rng: np.random.Generator, smallest: int) -> np.ndarray:
    h, w = image.shape[:2]
    side = int(rng.integers(min(smallest, h, w), min(h, w) + 1))
    y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    return image[y : y + side, x : x + side]


def _resize(image: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.BILINEAR))


def text_scenes(count: int, seed: int, size: int = 256) -> np.ndarray:
    """``count`` photos with text, ``[count, size, size, 3]`` uint8 RGB."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    fonts = find_fonts()
    scenes = []
    for _ in range(count):
        name = str(rng.choice(SCENE_PHOTOS))
        image = Image.fromarray(_resize(_square_crop(photo(name), rng, size), size))
        draw = ImageDraw.Draw(image)
        for _ in range(int(rng.integers(2, 7))):
            text = line_text(rng)
            font = _font(str(rng.choice(fonts)) if fonts else None, int(rng.integers(12, 37)))
            left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
            x = int(rng.integers(0, max(1, size - (right - left))))
            y = int(rng.integers(0, max(1, size - (bottom - top))))
            area = np.asarray(image)[y : y + bottom, x : x + right]
            light = float(area.mean()) > 128 if area.size else True
            if rng.random() < 0.3:  # a sign or label: text on a filled box
                fill = int(rng.integers(200, 256)) if light else int(rng.integers(0, 60))
                pad = int(rng.integers(2, 8))
                draw.rectangle(
                    (x + left - pad, y + top - pad, x + right + pad, y + bottom + pad),
                    fill=(fill,) * 3,
                )
            ink = int(rng.integers(0, 70)) if light else int(rng.integers(190, 256))
            tint = rng.integers(-20, 21, size=3)
            draw.text(
                (x, y), text, font=font, fill=tuple(int(np.clip(ink + t, 0, 255)) for t in tint)
            )
        pixels = np.asarray(image, np.float64) + rng.normal(0, 3.0, (size, size, 3))
        scenes.append(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))
    return np.stack(scenes)


def _window(image: np.ndarray, x: float, y: float, side: float, size: int) -> np.ndarray:
    """The square ``side`` at ``(x, y)`` (top left) resized to ``size``, outside filled black
    (as MTCNN pads crops at the border)."""
    from PIL import Image

    box = (int(round(x)), int(round(y)), int(round(x + side)), int(round(y + side)))
    crop = Image.fromarray(image).crop(box)  # PIL fills outside the image with 0
    return np.asarray(crop.resize((size, size), Image.Resampling.BILINEAR))


def face_box(onet: Any) -> tuple[float, float, float]:
    """``(x, y, side)`` of the face in ``astronaut()``, by the float O-Net (see the module)."""
    import torch

    from trained.mtcnn import mtcnn_input

    image = photo("astronaut")
    windows = [
        (x, y, s)
        for s in (64, 96, 128, 160)
        for y in range(0, 512 - s + 1, 16)
        for x in range(0, 512 - s + 1, 16)
    ]
    crops = np.stack([_window(image, x, y, s, 48) for x, y, s in windows])
    with torch.no_grad():
        probability, boxes, _ = onet(torch.from_numpy(mtcnn_input(crops)))
    best = int(torch.argmax(probability[:, 1]))
    x, y, s = windows[best]
    dx1, dy1, dx2, dy2 = (float(v) * s for v in boxes[best])
    x1, y1, x2, y2 = x + dx1, y + dy1, x + s + dx2, y + s + dy2
    side = max(x2 - x1, y2 - y1)
    return (x1 + x2 - side) / 2, (y1 + y2 - side) / 2, side


def face_crops(
    box: tuple[float, float, float], count: int, seed: int, size: int, jitter: float = 0.25
) -> np.ndarray:
    """``count`` crops of ``size`` px: even indices jittered around the face ``box``, odd ones
    random squares of the other photos."""
    rng = np.random.default_rng(seed)
    face = photo("astronaut")
    others = [n for n in SCENE_PHOTOS if n != "astronaut"]
    x, y, side = box
    crops = []
    for i in range(count):
        if i % 2 == 0:
            s = side * float(rng.uniform(0.8, 1.25))
            cx = x + side / 2 + float(rng.uniform(-jitter, jitter)) * side
            cy = y + side / 2 + float(rng.uniform(-jitter, jitter)) * side
            crops.append(_window(face, cx - s / 2, cy - s / 2, s, size))
        else:
            crops.append(_resize(_square_crop(photo(str(rng.choice(others))), rng, 48), size))
    return np.stack(crops)
