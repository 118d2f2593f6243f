"""Exact integer oracles for tests, written apart from :mod:`nanoir.runtime.numerics` (in
Python integers, so they cannot share its mistakes)."""

from __future__ import annotations

import numpy as np


def requant_oracle(x: np.ndarray, shift: int, mode: str, lo: int, hi: int) -> np.ndarray:
    """``x * 2**-shift`` rounded by ``mode`` and saturated to ``lo..hi``, int64."""
    out = []
    for v in np.asarray(x).reshape(-1).tolist():
        if shift <= 0:
            r = v * 2**-shift
        else:
            d = 2**shift
            q, rem = divmod(v, d)  # floor division: v = q d + rem, 0 <= rem < d
            if mode == "floor":
                r = q
            elif mode == "trunc":
                r = q + (1 if rem and v < 0 else 0)
            elif mode == "half_up":
                r = q + (1 if 2 * rem >= d else 0)
            else:  # half_even
                r = q + (1 if 2 * rem > d or 2 * rem == d and q % 2 else 0)
        out.append(min(max(r, lo), hi))
    return np.array(out, dtype=np.int64).reshape(np.shape(x))
