"""Pure helpers of lower-to-hw on codes and exponents (no IR is built here).

A value of the nq program that lowers is a dyadic rational ``code * 2**-exp``: these functions
pick containers for codes (``container_width``), count the bits codes need
(``bits_of_codes``, ``bits_of_bound``), find the exponent where float constants are integers
(``dyadic_exponent``), and spell exponents and codes as nh attributes (``fixed``,
``dense_int``). Exponent arrays broadcast against the tensor: ones except the channel axis
(``expand`` makes the leading unit dims explicit).

    fixed(np.array([[3], [4]]), 3, "BCM")   ->  #nh.fixed<[3, 4], BCM>
    dense_int(np.array([1, -2]))            ->  dense<[1, -2]> : tensor<2xi8>
    dyadic_exponent(np.array([0.75]))       ->  2      (0.75 = 3 * 2**-2)
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, IntegerType, TensorType
from xdsl.ir import OpResult, SSAValue

WIDTHS = (2, 4, 8, 16, 32)


def expand(a: np.ndarray, rank: int) -> np.ndarray:
    """Prepend unit dims up to ``rank`` (NumPy's right-aligned broadcasting, made explicit)."""
    a = np.asarray(a)
    return a.reshape((1,) * (rank - a.ndim) + a.shape) if a.ndim < rank else a


def container_width(bits: int) -> int:
    """The narrowest nh element width holding ``bits``-bit signed codes."""
    if bits <= 1:
        return 1
    for w in WIDTHS:
        if bits <= w:
            return w
    raise ValueError(f"{bits} bits do not fit i32")


def constant_layout(rank: int, role: str) -> str:
    """Layout of a constant: weights ``CC`` + ``D``s (a weight reader's ``Weighted`` trait
    may say otherwise), vectors ``C``, others ``C`` + ``D``s."""
    if role == "weight":
        return "CC" + "D" * (rank - 2)
    return "C" + "D" * (rank - 1)


def fixed(exps: np.ndarray, rank: int, layout: str) -> nh.FixedAttr:
    """The ``#nh.fixed`` encoding of exponents shaped for a tensor of ``rank`` dims."""
    flat = exps.reshape(-1)
    if flat.size == 0 or (flat == flat[0]).all():
        return nh.FixedAttr(int(flat[0]) if flat.size else 0, layout)
    axis = layout.find("C")
    full = exps.reshape((1,) * (rank - exps.ndim) + exps.shape)
    varying = [i for i, d in enumerate(full.shape) if d > 1]
    if varying != [axis]:
        raise ValueError(
            f"exponents vary along dims {varying}, not only the channel dim {axis} "
            f"of layout {layout}"
        )
    return nh.FixedAttr([int(e) for e in full.reshape(-1)], layout)


def dense_int(codes: np.ndarray) -> DenseIntOrFPElementsAttr:
    """Integer codes as a dense attribute of the narrowest of i8/i16/i32 holding them."""
    storage = (
        8
        if codes.size == 0 or (codes.min() >= -128 and codes.max() <= 127)
        else (16 if codes.min() >= -(2**15) and codes.max() < 2**15 else 32)
    )
    dtype = {8: "<i1", 16: "<i2", 32: "<i4"}[storage]
    a = np.ascontiguousarray(codes, dtype=dtype)
    return DenseIntOrFPElementsAttr(
        TensorType(IntegerType(storage), a.shape), BytesAttr(a.tobytes())
    )


def bits_of_codes(codes: np.ndarray) -> int:
    """Signed bits the given codes need (2 for the binary ±1 codes)."""
    if codes.size == 0:
        return 2
    lo, hi = int(codes.min()), int(codes.max())
    if set(np.unique(codes).tolist()) <= {-1, 1} and lo < 0 < hi:
        return 2
    need = max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1
    return max(need, 2)


def bits_of_bound(bound: np.ndarray) -> int:
    """Signed bits needed for values of magnitude at most ``max(bound)``."""
    worst = max((int(v) for v in np.asarray(bound).reshape(-1)), default=0)
    return max(worst.bit_length() + 1, 2)


def dyadic_exponent(values: np.ndarray, limit: int = 60) -> int | None:
    """The smallest ``k`` in ``[-limit, limit]`` making every ``v * 2**k`` an integer, if any."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.isfinite(v).all():
        return None
    for k in range(-limit, limit + 1):
        scaled = np.ldexp(v, k)
        if np.array_equal(scaled, np.round(scaled)) and np.abs(scaled).max(initial=0) < 2**31:
            return k
    return None


def float_constant_of(value: SSAValue) -> np.ndarray | None:
    """The data of an ``nf.constant`` result in float64, or None for any other value."""
    if isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp):
        return dense_to_numpy(value.op.value).astype(np.float64)
    return None
