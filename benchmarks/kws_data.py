"""Synthetic keyword spotting: tones and chirps as 40x64 log-mel-like features, 12 keywords.

A "keyword" is a short sequence of spectral tracks (a tone holds a mel band, a chirp sweeps
from one band to another, two tracks may sound together). Each example shifts its keyword's
bands by up to 2, stretches it in time by 0.8-1.2, starts it anywhere that fits in the 64
frames, scales its loudness, and adds background noise of random level; the feature is
``log(noise + energy)`` per band and frame, standardised. Nothing is downloaded: the data is
a NumPy function of its seed, so the benchmark's figures can be reproduced anywhere.

    x, y = make_kws(5000, seed=0)   # x float32 [5000, 40, 64], y int64 [5000] in 0..11
"""

from __future__ import annotations

import numpy as np

BANDS, FRAMES, CLASSES = 40, 64, 12

# Each keyword: segments of (start band, end band, share of the duration); parallel tracks
# are separate lists sounding over the same time.
KEYWORDS: tuple[tuple[tuple[tuple[float, float, float], ...], ...], ...] = (
    (((8, 8, 1.0),),),  # low tone
    (((30, 30, 1.0),),),  # high tone
    (((8, 30, 1.0),),),  # up chirp
    (((30, 8, 1.0),),),  # down chirp
    (((19, 19, 1.0),),),  # mid tone
    (((10, 28, 0.5), (28, 10, 0.5)),),  # up then down
    (((28, 10, 0.5), (10, 28, 0.5)),),  # down then up
    (((10, 10, 1.0),), ((28, 28, 1.0),)),  # two tones together
    (((15, 25, 0.4), (25, 25, 0.2), (15, 25, 0.4)),),  # two short up chirps
    (((10, 10, 0.5), (28, 28, 0.5)),),  # low tone then high tone
    (((28, 28, 0.5), (10, 10, 0.5)),),  # high tone then low tone
    (((15, 22, 1.0),),),  # slow mid chirp
)


def _track(segments: tuple[tuple[float, float, float], ...], length: int) -> np.ndarray:
    """The band of a track at each of ``length`` frames (piecewise linear)."""
    out = []
    for i, (a, b, share) in enumerate(segments):
        n = max(int(round(share * length)), 1)
        if i == len(segments) - 1:
            n = max(length - len(out), 1)
        out.extend(np.linspace(a, b, n))
    return np.asarray(out[:length], dtype=np.float64)


def make_kws(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``count`` examples, classes balanced in turn: float32 ``[count, 40, 64]`` features and
    int64 labels."""
    rng = np.random.default_rng(seed)
    y = np.arange(count, dtype=np.int64) % CLASSES
    rng.shuffle(y)
    bands = np.arange(BANDS, dtype=np.float64)[:, None]
    x = np.empty((count, BANDS, FRAMES), dtype=np.float32)
    for i, label in enumerate(y):
        noise = rng.uniform(0.05, 0.6) * rng.exponential(1.0, size=(BANDS, FRAMES))
        length = int(round(rng.uniform(0.8, 1.2) * 40))
        start = int(rng.integers(0, FRAMES - length + 1))
        shift = rng.uniform(-2.0, 2.0)
        loud = rng.uniform(0.5, 2.0)
        width = rng.uniform(1.0, 2.0)
        energy = np.zeros((BANDS, FRAMES))
        for segments in KEYWORDS[label]:
            centre = _track(segments, length) + shift
            env = np.sin(np.linspace(0.0, np.pi, length)) ** 0.5  # soft onset and release
            energy[:, start : start + length] += (
                loud * env * np.exp(-0.5 * ((bands - centre) / width) ** 2)
            )
        x[i] = np.log(noise + energy + 1e-3)
    x = (x - x.mean()) / x.std()
    return x.astype(np.float32), y
