"""Task measures of a quantized model against the float model, in NumPy.

- :func:`sqnr_db`: output SQNR, ``10 log10(sum(ref²) / sum((value - ref)²))``;
- :func:`ctc_greedy`: CTC's greedy (best path) decoding: the argmax per step, repeats merged,
  blanks dropped; :func:`strings_equal`, the fraction of inputs decoded to the same sequence;
- :func:`label_agreement`: the fraction of argmax labels that agree;
- :func:`mask_iou`: intersection over union of two maps thresholded (``>`` threshold), per
  image, averaged (two empty masks agree: 1);
- :func:`decision_agreement`: the fraction of face / no-face decisions (probability of class 1
  above 0.5) that agree, over every position of the map.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "ctc_greedy",
    "decision_agreement",
    "label_agreement",
    "mask_iou",
    "sqnr_db",
    "strings_equal",
]


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    """SQNR of ``value`` against ``reference`` in dB (float64); ``inf`` when equal, ``-inf``
    when the reference is all zero and the value is not."""
    reference = np.asarray(reference, np.float64)
    noise = float(np.sum((np.asarray(value, np.float64) - reference) ** 2))
    signal = float(np.sum(reference**2))
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal else -math.inf


def ctc_greedy(scores: np.ndarray, blank: int = 0) -> tuple[int, ...]:
    """Best-path decoding of ``[T, classes]`` scores: argmax per step, runs of one class
    merged, blanks dropped."""
    best = np.argmax(scores, axis=-1)
    keep = np.ones(len(best), bool)
    keep[1:] = best[1:] != best[:-1]
    return tuple(int(c) for c in best[keep] if c != blank)


def strings_equal(reference: np.ndarray, value: np.ndarray, blank: int = 0) -> float:
    """Fraction of the ``[N, T, classes]`` inputs whose greedy decodings are equal."""
    same = [ctc_greedy(r, blank) == ctc_greedy(v, blank) for r, v in zip(reference, value)]
    return float(np.mean(same))


def label_agreement(reference: np.ndarray, value: np.ndarray) -> float:
    """Fraction of rows of ``[N, classes]`` with the same argmax."""
    return float(np.mean(np.argmax(reference, -1) == np.argmax(value, -1)))


def mask_iou(reference: np.ndarray, value: np.ndarray, threshold: float = 0.3) -> float:
    """Mean over the images of ``[N, ...]`` of the IoU of ``reference > threshold`` and
    ``value > threshold``."""
    scores = []
    for r, v in zip(reference, value):
        a, b = r > threshold, v > threshold
        union = int(np.sum(a | b))
        scores.append(1.0 if union == 0 else int(np.sum(a & b)) / union)
    return float(np.mean(scores))


def decision_agreement(reference: np.ndarray, value: np.ndarray) -> float:
    """Fraction of positions whose decisions ``p(face) > 0.5`` agree; the probabilities are
    channel 1 of ``[N, 2, ...]``."""
    return float(np.mean((reference[:, 1] > 0.5) == (value[:, 1] > 0.5)))
