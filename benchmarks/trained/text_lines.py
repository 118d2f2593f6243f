"""Text-line images rendered here with Pillow: what an OCR recognizer or direction classifier
reads, with the string drawn as its label.

Content (:func:`line_text`): English words, numbers (integers, prices, decimals with a
thousands separator) and dates in four spellings, mixed one to three to a line. Drawing
(:func:`render_line`): a font found on the machine (``FONT_DIRS``; Pillow's own default font
when none is), a random size, dark text on a light ground or (``inverted``) light on dark, a
few pixels of margin, then light Gaussian noise. Every draw comes from the ``numpy`` generator
passed in, so a seed gives the same images on a machine with the same fonts.

:func:`fit_line` resizes a line into a model's ``3xHxW`` input as PaddleOCR's recognizer and
classifier do (height ``H``, aspect ratio kept, width capped at ``W``, the rest padded with
the normalised zero), and :func:`code_line` draws the 4-10 character codes (digits and capital
letters) the CRNN trained here reads.
"""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CODE_ALPHABET",
    "FONT_DIRS",
    "code_line",
    "find_fonts",
    "fit_line",
    "line_text",
    "normalise",
    "render_line",
    "text_line_set",
]

FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/local/share/fonts"), Path.home() / ".fonts")
"""Where fonts are looked for (``*.ttf``, ``*.otf``, recursively)."""

WORDS = (
    "total invoice order number amount paid date price receipt account customer name street "
    "city station ticket platform train time open closed hours coffee bread milk water sugar "
    "green market street north south east west exit entrance floor room page chapter figure "
    "table result value report summary balance credit debit card phone email office delivery "
    "weight height width length speed limit parking zone level class grade score energy "
    "battery power signal network print copy scan file folder image photo video music "
    "Monday Friday January April August December London Paris Berlin Tokyo Beijing"
).split()
"""Words a line is made of (a fixed list, so the sets do not depend on a dictionary file)."""

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()

CODE_ALPHABET = string.digits + string.ascii_uppercase
"""The CRNN's characters; its class 0 is CTC's blank, class ``i + 1`` is ``CODE_ALPHABET[i]``."""


@cache
def find_fonts() -> tuple[str, ...]:
    """TrueType/OpenType files on the machine, sorted (empty: Pillow's default font is used).
    Symbol and math fonts are left out: they do not draw Latin text."""
    found: set[str] = set()
    for folder in FONT_DIRS:
        if folder.is_dir():
            for pattern in ("*.ttf", "*.otf"):
                found.update(str(p) for p in folder.rglob(pattern))
    skip = ("math", "symbol", "emoji", "dingbat")
    return tuple(sorted(f for f in found if not any(s in f.lower() for s in skip)))


@cache
def _font(path: str | None, size: int) -> Any:
    from PIL import ImageFont

    if path is None:
        return ImageFont.load_default(size)
    return ImageFont.truetype(path, size)


def _number(rng: np.random.Generator) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return str(int(rng.integers(0, 100000)))
    if kind == 1:
        return f"${rng.uniform(0, 1000):.2f}"
    if kind == 2:
        return f"{rng.uniform(1000, 1e6):,.2f}"
    return f"{int(rng.integers(0, 100))}%"


def _date(rng: np.random.Generator) -> str:
    year, month, day = (
        int(rng.integers(1990, 2031)),
        int(rng.integers(1, 13)),
        int(rng.integers(1, 29)),
    )
    kind = int(rng.integers(4))
    if kind == 0:
        return f"{year}-{month:02d}-{day:02d}"
    if kind == 1:
        return f"{day:02d}/{month:02d}/{year}"
    if kind == 2:
        return f"{day} {MONTHS[month - 1]} {year}"
    return f"{MONTHS[month - 1]} {day}, {year}"


def line_text(rng: np.random.Generator) -> str:
    """One to three items (a word, a number or a date; words are the most common)."""
    items = []
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.choice(3, p=[0.5, 0.25, 0.25])
        if kind == 0:
            word = str(rng.choice(WORDS))
            items.append(word.capitalize() if rng.random() < 0.3 else word)
        elif kind == 1:
            items.append(_number(rng))
        else:
            items.append(_date(rng))
    return " ".join(items)


def render_line(
    text: str,
    rng: np.random.Generator,
    *,
    inverted: bool = False,
    size: tuple[int, int] = (22, 40),
    noise: float = 4.0,
) -> np.ndarray:
    """``text`` drawn as an ``HxWx3`` uint8 RGB image cropped to the text (a margin of a few
    pixels): a random font of the machine and size in ``size`` (px), ground and ink grey levels
    drawn apart by at least 100, swapped with ``inverted``, Gaussian noise of ``noise`` levels."""
    return draw_line(text, rng, inverted=inverted, size=size, noise=noise)[0]


def draw_line(
    text: str,
    rng: np.random.Generator,
    *,
    inverted: bool = False,
    size: tuple[int, int] = (22, 40),
    noise: float = 4.0,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`render_line`'s image and the x coordinate (pixels) of each character's centre
    (the middle of its advance), known from the font."""
    from PIL import Image, ImageDraw

    fonts = find_fonts()
    path = str(rng.choice(fonts)) if fonts else None
    font = _font(path, int(rng.integers(size[0], size[1] + 1)))
    left, top, right, bottom = font.getbbox(text)
    margin = rng.integers(2, 9, size=4)
    width = int(right - left + margin[0] + margin[2])
    height = int(bottom - top + margin[1] + margin[3])
    ground = int(rng.integers(170, 256))
    ink = int(rng.integers(0, ground - 99))
    if inverted:
        ground, ink = 255 - ground, 255 - ink
    tint = rng.integers(-12, 13, size=3)
    image = Image.new("RGB", (width, height), tuple(int(np.clip(ground + t, 0, 255)) for t in tint))
    origin = int(margin[0] - left)
    ImageDraw.Draw(image).text(
        (origin, int(margin[1] - top)), text, fill=(ink, ink, ink), font=font
    )
    pixels = np.asarray(image, np.float64) + rng.normal(0, noise, (height, width, 3))
    advance = np.array([font.getlength(text[:i]) for i in range(len(text) + 1)])
    centers = origin + (advance[:-1] + advance[1:]) / 2
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8), centers


def normalise(pixels: np.ndarray) -> np.ndarray:
    """``HxWx3`` uint8 to ``3xHxW`` float32 in [-1, 1] (PaddleOCR's ``(x/255 - 0.5)/0.5``)."""
    return ((pixels.astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)


def fit_line(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """A rendered line as a ``3 x height x width`` input, PaddleOCR's way: resized to
    ``height`` with its aspect ratio (width capped at ``width``), normalised, and padded on the
    right with 0."""
    from PIL import Image

    h, w = pixels.shape[:2]
    resized_w = max(1, min(width, int(np.ceil(height * w / h))))
    image = Image.fromarray(pixels).resize((resized_w, height), Image.Resampling.BILINEAR)
    out = np.zeros((3, height, width), np.float32)
    out[:, :, :resized_w] = normalise(np.asarray(image))
    return out


def text_line_set(
    count: int, seed: int, height: int, width: int, *, rotated: float = 0.0
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """``count`` lines as inputs ``[count, 3, height, width]``, their texts, and which were
    rotated by 180 degrees (a fraction ``rotated`` of them; the direction classifier's task).
    One line in five is inverted (light text on a dark ground)."""
    rng = np.random.default_rng(seed)
    inputs, texts, flipped = [], [], []
    for _ in range(count):
        text = line_text(rng)
        pixels = render_line(text, rng, inverted=rng.random() < 0.2)
        turn = rng.random() < rotated
        if turn:
            pixels = pixels[::-1, ::-1]
        inputs.append(fit_line(np.ascontiguousarray(pixels), height, width))
        texts.append(text)
        flipped.append(turn)
    return np.stack(inputs), texts, np.array(flipped)


def code_line(
    rng: np.random.Generator,
    height: int,
    width: int,
    lengths: tuple[int, int],
    spacing: int = 0,
) -> tuple[np.ndarray, str, np.ndarray]:
    """A code of ``lengths`` characters of :data:`CODE_ALPHABET` drawn (``spacing`` spaces
    between the characters) and fitted into ``3 x height x width`` (one in five inverted), the
    code, and the x coordinate of each of its characters' centres in the fitted input."""
    code = "".join(rng.choice(list(CODE_ALPHABET), int(rng.integers(lengths[0], lengths[1] + 1))))
    drawn = (" " * spacing).join(code)
    pixels, centers = draw_line(drawn, rng, inverted=rng.random() < 0.2, size=(20, 40))
    h, w = pixels.shape[:2]
    scale = max(1, min(width, int(np.ceil(height * w / h)))) / w  # fit_line's resize
    return fit_line(pixels, height, width), code, centers[:: spacing + 1] * scale
