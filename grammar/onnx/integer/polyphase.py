"""A convolution of zero-inserted codes as one convolution of the small input per output phase.

An ``nh.upsample_zero`` by ``r`` (code 0 between the samples) read only by an ``nh.conv`` of
stride and dilation 1 (Magik's zero unpooling before a conv) makes each output row ``y = r q +
a`` read the input only through the taps ``u`` with ``y + u - pad`` at a sample: ``u = r t +
(offset - a + pad)``. So output phase ``a`` is a convolution of the small input by those taps
of the kernel, ``ceil(K / r)`` or so of ``K``: one conv with ``r**n`` times the output channels
(channel ``o`` then its phases, so groups keep their channels together) and the shorter kernel,
then the phases interleaved back (``DepthToSpace`` in CRD order, else a ``Transpose``) and
cropped at the end. Every sum is the original's without its zero terms, so its bound and the
kernel the writer picks for it still hold; the zeros are never made (the trained CRNN's
unpooling and conv, alone: 0.47 ms against 0.26 ms, one thread)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.grammar.onnx.integer.common import (
    constant_codes,
    out_name,
    per_output_bound,
    sole_reader,
)
from nanoir.grammar.onnx.integer.graph import DEPTH_TO_SPACE_FORMS, I32_MAX, Graph
from nanoir.runtime.numerics.shapes import window_params
from xdsl.dialects.builtin import DYNAMIC_INDEX


@dataclass(frozen=True)
class Phases:
    """The phase convolution standing for ``upsample_zero`` then ``conv``."""

    up: nh.UpsampleZeroOp
    ratios: tuple[int, ...]
    weight: np.ndarray
    """``[O * prod(ratios), C / groups, *phase kernel]``: channel ``o``'s phases in row-major
    order of their offsets."""
    bias: np.ndarray | None
    pads: list[int]
    sizes: tuple[int, ...]
    """The conv's output sizes."""
    lengths: tuple[int, ...]
    """The phase conv's output sizes."""


def _taps(r: int, offset: int, pad: int, k: int) -> list[dict[int, int]]:
    """Per phase ``a``: its taps as ``{t: u}``, input sample ``q + t`` times kernel tap ``u``."""
    taps = []
    for a in range(r):
        c = offset - a + pad
        taps.append({t: r * t + c for t in range(-(c // r), (k - 1 - c) // r + 1)})
    return taps


def phases(g: Graph, op: nh.ConvOp) -> Phases | None:
    """The phase form of ``op`` when its input is zero-inserted codes it alone reads, its
    stride and dilation are 1, its weight and bias constants, its sums within int32 (a wider
    one is checked at run time, and a cropped phase must not count) and the phase kernel is
    smaller; else None."""
    up = op.input.owner
    if not isinstance(up, nh.UpsampleZeroOp) or sole_reader(up.result) is not op:
        return None
    w = constant_codes(op.weight)
    bias = None if op.bias is None else constant_codes(op.bias)
    if w is None or (op.bias is not None and bias is None):
        return None
    if max(per_output_bound(w, 0, g.bound(up.input), 0, 0, bias)) > I32_MAX:
        return None
    n = w.ndim - 2
    kernel, strides, pads, dil = window_params(
        n, w.shape[2:], array_values(op.strides), array_values(op.pads), array_values(op.dilations)
    )
    small = tensor_shape(up.input)[2:]
    if any(s != 1 for s in strides) or any(d != 1 for d in dil) or DYNAMIC_INDEX in small:
        return None
    big = tensor_shape(up.result)[2:]
    ratios = tuple(b // s for s, b in zip(small, big))
    offsets = list(array_values(up.offsets) or ())
    taps = [_taps(r, o, p, k) for r, o, p, k in zip(ratios, offsets, pads[:n], kernel)]
    first = [min(t for phase in dim for t in phase) for dim in taps]
    last = [max(t for phase in dim for t in phase) for dim in taps]
    short = [b - a + 1 for a, b in zip(first, last)]
    if math.prod(short) >= math.prod(kernel):
        return None
    sizes = tuple(b + p0 + p1 - k + 1 for b, p0, p1, k in zip(big, pads[:n], pads[n:], kernel))
    # first <= 0: tap 0 is phase (offset + pad) % r's, at t = -((offset + pad) // r)
    begin = [-t for t in first]
    end = [
        max(0, -(-y // r) - s - b + k - 1)
        for y, r, s, b, k in zip(sizes, ratios, small, begin, short)
    ]
    lengths = tuple(s + b + e - k + 1 for s, b, e, k in zip(small, begin, end, short))
    outs, per = w.shape[:2]
    v = np.zeros((outs, *ratios, per, *short), np.int64)
    for phase in itertools.product(*(range(r) for r in ratios)):
        for ts in itertools.product(*(taps[d][a].items() for d, a in enumerate(phase))):
            at = tuple(t - f for (t, _), f in zip(ts, first))
            us = tuple(u for _, u in ts)
            v[(slice(None), *phase, slice(None), *at)] = w[(slice(None), slice(None), *us)]
    return Phases(
        up=up,
        ratios=ratios,
        weight=v.reshape(outs * math.prod(ratios), per, *short),
        bias=None if bias is None else np.repeat(bias.reshape(-1), math.prod(ratios)),
        pads=begin + end,
        sizes=sizes,
        lengths=lengths,
    )


def interleave(g: Graph, op: nh.ConvOp, p: Phases, x: str, form: str) -> str:
    """The phase conv's result ``x`` (in ``form``) as the conv's: phases interleaved into the
    spatial dims, then cropped to the conv's output."""
    base = out_name(g, op) + "_ph"
    n = len(p.ratios)
    outs = p.weight.shape[0] // math.prod(p.ratios)
    if n == 2 and len(set(p.ratios)) == 1 and form in DEPTH_TO_SPACE_FORMS:
        y = g.node("DepthToSpace", [x], base, blocksize=p.ratios[0], mode="CRD")
    else:
        split = [0, outs, *p.ratios, *p.lengths]
        y = g.node("Reshape", [x, g.const(split, np.int64)], base + "_r")
        perm = [0, 1, *(i for d in range(n) for i in (2 + n + d, 2 + d))]
        y = g.node("Transpose", [y], base + "_t", perm=perm)
        fine = [0, outs, *(r * k for r, k in zip(p.ratios, p.lengths))]
        y = g.node("Reshape", [y, g.const(fine, np.int64)], base)
    if tuple(r * k for r, k in zip(p.ratios, p.lengths)) == p.sizes:
        return y
    begin, end = g.const([0] * n, np.int64), g.const(list(p.sizes), np.int64)
    axes = g.const(list(range(2, 2 + n)), np.int64)
    return g.node("Slice", [y, begin, end, axes], base + "_c")
