"""Data movement (on whichever form the value has), resampling, gathers, embeddings and max
unpooling by a max pool's indices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.grammar.onnx.integer.common import (
    Writer,
    out_name,
    refuse,
    sole_reader,
    spatial,
    static_shape,
)
from nanoir.grammar.onnx.integer.graph import (
    DEPTH_TO_SPACE_FORMS,
    FORM_DTYPE,
    Graph,
    natural_dtype,
    zero_point,
)
from nanoir.grammar.onnx.integer.polyphase import phases
from nanoir.runtime.numerics import bicubic, kernels, movement
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue


def _pad_value(g: Graph, v: SSAValue, form: str, code: int) -> str:
    if form == "f32":
        return g.const(code, np.float32)
    if form == "u8":
        return g.const(code + zero_point(v), np.uint8)
    if form == "i8":
        return g.const(code, np.int8)
    if form == "f64":
        return g.const(code, np.float64)
    if form == "i64":
        return g.const(code, np.int64)
    if form == "in":
        return g.const(code, natural_dtype(v))
    return g.const(code, np.int32)


def _moved(
    g: Graph, op: Operation, x: SSAValue, make: Callable[[str, str], str | list[str]]
) -> None:
    """Apply ``make(name, form)`` to ``x`` in its first form; the results keep that form
    (a graph input's ``in`` form is first converted to float32, or int32 if not exact)."""
    form = g.first_form(x)
    if form == "in":
        form = "f32" if g.float_exact(x) else "i32"
    names = make(g.get(x, form), form)
    for r, name in zip(op.results, names if isinstance(names, list) else [names]):
        if form == "u8" and nh.is_unsigned(r) != nh.is_unsigned(x):
            raise AssertionError("data movement changed signedness")
        g.put(r, form, name)
        g.set_bound(r, g.bound(x))


def concat(g: Graph, op: nh.ConcatOp) -> None:
    forms = [g.first_form(v) for v in op.inputs]
    same = len(set(forms)) == 1 and forms[0] != "in"
    form = forms[0] if same else "f32" if all(g.float_exact(v) for v in op.inputs) else "i32"
    if form == "u8" and not all(
        nh.is_unsigned(v) == nh.is_unsigned(op.result) and nh.width_of(op.result) <= 8
        for v in op.inputs
    ):
        form = "i32"
    y = g.node(
        "Concat", [g.get(v, form) for v in op.inputs], out_name(g, op), axis=op.axis.value.data
    )
    g.put(op.result, form, y)
    g.set_bound(op.result, max(g.bound(v) for v in op.inputs))


def reshape(g: Graph, op: nh.ReshapeOp) -> None:
    shape = g.const(static_shape(tensor_shape(op.result)), np.int64)
    _moved(g, op, op.input, lambda x, f: g.node("Reshape", [x, shape], out_name(g, op)))


def transpose(g: Graph, op: nh.TransposeOp) -> None:
    perm = list(array_values(op.perm) or ())
    _moved(g, op, op.input, lambda x, f: g.node("Transpose", [x], out_name(g, op), perm=perm))


def pad(g: Graph, op: nh.PadOp) -> None:
    pads = g.const(list(array_values(op.pads) or ()), np.int64)
    mode = op.mode.data

    def make(x: str, form: str) -> str:
        inputs = [x, pads]
        if mode == "constant":
            inputs.append(_pad_value(g, op.input, form, op.value.value.data))
        return g.node("Pad", inputs, out_name(g, op), mode=mode)

    _moved(g, op, op.input, make)


def split(g: Graph, op: nh.SplitOp) -> None:
    sizes = g.const(list(array_values(op.sizes) or ()), np.int64)
    axis = op.axis.value.data
    n = len(op.results)

    def make(x: str, form: str) -> list[str]:
        names = g.node("Split", [x, sizes], out_name(g, op), outputs=n, axis=axis)
        return names if isinstance(names, list) else [names]

    _moved(g, op, op.input, make)


def upsample_nearest(g: Graph, op: nh.UpsampleNearestOp) -> None:
    """``Resize`` (nearest, floor) for integer factors, which onnxruntime runs 30 times faster
    than ``Gather``; a ``Gather`` per dim of the pixels torch picks otherwise."""
    x_shape, y_shape = tensor_shape(op.input), tensor_shape(op.result)
    picks = []
    for i, (size, want) in enumerate(zip(x_shape[2:], y_shape[2:])):
        index = np.arange(size, dtype=np.int64).reshape(1, 1, size)
        chosen = kernels.upsample_nearest(index, size=[want]).reshape(-1)
        if not np.array_equal(chosen, np.arange(size)):
            picks.append((2 + i, chosen))

    spatial = list(x_shape[2:])
    factors = [w // s if s and w % s == 0 else 0 for s, w in zip(spatial, y_shape[2:])]
    repeats = (
        DYNAMIC_INDEX not in x_shape[1:]
        and all(f >= 1 for f in factors)
        and all(
            np.array_equal(chosen, np.arange(len(chosen)) // factors[axis - 2])
            for axis, chosen in picks
        )
    )

    def make(x: str, form: str) -> str:
        base = out_name(g, op)
        if repeats and picks and form in ("f32", "u8", "i32"):
            # each element k times per dim (integer factors: exact scales), as torch picks
            scales = g.const([1.0, 1.0, *map(float, factors)], np.float32, base + "_k")
            return g.node(
                "Resize",
                [x, "", scales],
                base,
                mode="nearest",
                coordinate_transformation_mode="asymmetric",
                nearest_mode="floor",
            )
        for axis, chosen in picks:
            x = g.node("Gather", [x, g.const(chosen, np.int64)], base, axis=axis)
        return x if picks else g.node("Identity", [x], base)

    _moved(g, op, op.input, make)


def _block(g: Graph, op: nh.DepthToSpaceOp | nh.SpaceToDepthOp) -> None:
    """The kernels' reshape / transpose / reshape, batch dim copied (Reshape's 0)."""
    block, mode = op.block.value.data, op.mode.data
    x_shape = tensor_shape(op.input)
    n = len(x_shape) - 2
    if any(d == DYNAMIC_INDEX for d in x_shape[1:]):
        raise refuse(op, "has dynamic channels or spatial sizes")
    channels, spatial = x_shape[1], list(x_shape[2:])
    if isinstance(op, nh.DepthToSpaceOp):
        c = channels // block**n
        if mode == "CRD":
            inter = [0, c, *(block,) * n, *spatial]
            offsets, first = list(range(2, 2 + n)), 1
        else:
            inter = [0, *(block,) * n, c, *spatial]
            offsets, first = list(range(1, 1 + n)), 1 + n
        sp = list(range(2 + n, 2 + 2 * n))
        perm = [0, first] + [a for pair in zip(sp, offsets) for a in pair]
        final = [0, c, *(s * block for s in spatial)]
    else:
        small = [s // block for s in spatial]
        inter = [0, channels, *(v for s in small for v in (s, block))]
        sp = [2 + 2 * i for i in range(n)]
        offsets = [3 + 2 * i for i in range(n)]
        perm = [0, 1, *offsets, *sp] if mode == "CRD" else [0, *offsets, 1, *sp]
        final = [0, channels * block**n, *small]

    def make(x: str, form: str) -> str:
        base = out_name(g, op)
        y = g.node("Reshape", [x, g.const(inter, np.int64)], base + "_r")
        y = g.node("Transpose", [y], base + "_t", perm=perm)
        return g.node("Reshape", [y, g.const(final, np.int64)], base)

    _moved(g, op, op.input, make)


def upsample_zero(g: Graph, op: nh.UpsampleZeroOp) -> None:
    """Each spatial dim ``d`` reshaped to ``(d, 1)``, the 1 padded with code-0 rows to the
    ratio ``r`` (``offset`` before, ``r - 1 - offset`` after), then merged back: one Pad.
    Two spatial dims of one ratio are instead a ``Pad`` of the channels to ``r * r`` blocks,
    the codes in the block of their offsets, and a ``DepthToSpace`` (onnxruntime's ``Pad``
    of a unit inner dim goes element by element: 0.24 ms against 0.10 ms for the trained
    CRNN's 32x8x64 bytes). Nothing when a conv alone reads it in its phase form
    (:mod:`.polyphase`)."""
    reader = sole_reader(op.result)
    if isinstance(reader, nh.ConvOp) and phases(g, reader) is not None:
        return
    shape = tensor_shape(op.input)
    small = spatial(op, shape)
    big = spatial(op, tensor_shape(op.result))
    offsets = list(array_values(op.offsets) or ())
    n = len(small)
    ratios = {b // d for d, b in zip(small, big)}
    blocked = n == 2 and len(ratios) == 1 and shape[1] != DYNAMIC_INDEX
    inter = [0, 0, *(v for d in small for v in (d, 1))]
    begin = [0] * (2 + 2 * n)
    end = [0] * (2 + 2 * n)
    for i, (d, b, o) in enumerate(zip(small, big, offsets)):
        begin[3 + 2 * i] = o
        end[3 + 2 * i] = b // d - 1 - o

    def make(x: str, form: str) -> str:
        base = out_name(g, op)
        zero = _pad_value(g, op.input, form, 0)
        if blocked and form in DEPTH_TO_SPACE_FORMS:
            (r,) = ratios
            block = offsets[0] * r + offsets[1]
            pads = [0, block * shape[1], 0, 0, 0, (r * r - 1 - block) * shape[1], 0, 0]
            y = g.node("Pad", [x, g.const(pads, np.int64), zero], base + "_p", mode="constant")
            return g.node("DepthToSpace", [y], base, blocksize=r, mode="DCR")
        y = g.node("Reshape", [x, g.const(inter, np.int64)], base + "_r")
        y = g.node("Pad", [y, g.const(begin + end, np.int64), zero], base + "_p", mode="constant")
        return g.node("Reshape", [y, g.const([0, 0, *big], np.int64)], base)

    _moved(g, op, op.input, make)


def _doubled(
    g: Graph,
    op: nh.UpsampleBilinearOp | nh.UpsampleBicubicOp,
    window: int,
    pair: Callable[[list[str], str], list[str]],
    growth: int,
) -> None:
    """An x2 upsampling of fixed integer weights in int32 (the verifier fits the sum in the
    result's width): per doubled dim, ``window`` slices of the edge-padded rows, the even and
    odd output rows that ``pair`` weighs from them, interleaved by Unsqueeze / Concat /
    Reshape; each doubled dim multiplies the codes' bound by ``growth``."""
    sizes = spatial(op, tensor_shape(op.input))
    want = spatial(op, tensor_shape(op.result))
    pads = list(array_values(op.pads) or ())
    n = len(sizes)
    base = out_name(g, op)
    y = g.get(op.input, "i32")
    doubled = 0
    for i in range(n):
        if sizes[i] == want[i]:
            continue
        doubled += 1
        axis = 2 + i
        edge = [0] * (4 + 2 * n)
        edge[axis], edge[2 + n + axis] = pads[i], pads[n + i]
        if pads[i] or pads[n + i]:
            y = g.node("Pad", [y, g.const(edge, np.int64)], base + "_e", mode="edge")
        m = sizes[i] + pads[i] + pads[n + i] - (window - 1)
        ax = g.const([axis], np.int64)
        rows = [
            g.node(
                "Slice", [y, g.const([k], np.int64), g.const([k + m], np.int64), ax], base + "_s"
            )
            for k in range(window)
        ]
        even_odd = pair(rows, base)
        after = g.const([axis + 1], np.int64)
        halves = [g.node("Unsqueeze", [v, after], base + "_u") for v in even_odd]
        y = g.node("Concat", halves, base + "_c", axis=axis + 1)
        sizes[i] = 2 * m
        y = g.node("Reshape", [y, g.const([0] * axis + sizes[i:], np.int64)], base + "_i")
    y = g.node("Identity", [y], base)
    g.put(op.result, "i32", y)
    g.set_bound(op.result, g.bound(op.input) * growth**doubled)


def upsample_bilinear(g: Graph, op: nh.UpsampleBilinearOp) -> None:
    """The runtime's ``bilinear_sum``: the rows ``lo, mid, hi`` of each three-row window make
    ``lo + 3 mid`` and ``3 mid + hi`` (:func:`_doubled`)."""

    def pair(rows: list[str], base: str) -> list[str]:
        lo, mid, hi = rows
        mid3 = g.node("Mul", [mid, g.const(3, np.int32)], base + "_m")
        return [
            g.node("Add", [lo, mid3], base + "_even"),
            g.node("Add", [mid3, hi], base + "_odd"),
        ]

    _doubled(g, op, 3, pair, 4)


def upsample_bicubic(g: Graph, op: nh.UpsampleBicubicOp) -> None:
    """The runtime's ``bicubic_sum``: the rows ``r0 .. r4`` of each five-row window weigh
    ``bicubic.EVEN`` and ``bicubic.ODD`` (256ths; :func:`_doubled`)."""

    def pair(rows: list[str], base: str) -> list[str]:
        out = []
        for name, weights in (("_even", bicubic.EVEN), ("_odd", bicubic.ODD)):
            terms = [
                g.node("Mul", [r, g.const(w, np.int32)], base + "_w")
                for w, r in zip(weights, rows)
                if w
            ]
            total = terms[0]
            for t in terms[1:]:
                total = g.node("Add", [total, t], base + name)
            out.append(total)
        return out

    _doubled(g, op, 5, pair, 328)


def embedding(g: Graph, op: nh.EmbeddingOp) -> None:
    """``Gather`` of the table's codes (float32 where exact) by the indices on axis 0. An index outside the
    table is an onnxruntime error, as it is the executor's: a negative one is first moved past
    the table (``Gather`` would count it from the end, a silently wrong row)."""
    rows = tensor_shape(op.table)[0]
    idx = _no_negative(g, g.get(op.indices, "i32"), rows, np.int32, out_name(g, op) + "_i")
    form = "f32" if g.float_exact(op.table) else "i32"
    y = g.node("Gather", [g.get(op.table, form), idx], out_name(g, op), axis=0)
    g.put(op.result, form, y)
    g.set_bound(op.result, g.bound(op.table))


def max_pool_indices(g: Graph, op: nh.MaxPoolIndicesOp) -> None:
    """The runtime's window argmax: the ``kh * kw`` strided Slices of each window position
    stacked on a last axis, ``ArgMax`` (the first largest, as NumPy's), then the flat in-plane
    index ``(oy * sh + a // kw) * W + ox * sw + a % kw``."""
    (kh, kw), (sh, sw) = array_values(op.kernel) or (), array_values(op.strides) or ()
    _, width = spatial(op, tensor_shape(op.input))
    oh, ow = spatial(op, tensor_shape(op.result))
    base = out_name(g, op)
    x = g.get(op.input, "f32" if g.float_exact(op.input) else "i32")
    axes, steps, last = (
        g.const([2, 3], np.int64),
        g.const([sh, sw], np.int64),
        g.const([4], np.int64),
    )
    windows = []
    for i in range(kh):
        for j in range(kw):
            starts = g.const([i, j], np.int64)
            ends = g.const([i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1], np.int64)
            w = g.node("Slice", [x, starts, ends, axes, steps], base + "_w")
            windows.append(g.node("Unsqueeze", [w, last], base + "_u"))
    stacked = g.node("Concat", windows, base + "_c", axis=4)
    arg = g.node("ArgMax", [stacked], base + "_a", axis=4, keepdims=0)
    k = g.const(kw, np.int64)
    rows = g.node(
        "Add",
        [
            g.const((np.arange(oh) * sh).reshape(oh, 1), np.int64),
            g.node("Div", [arg, k], base + "_dy"),
        ],
        base + "_y",
    )
    cols = g.node(
        "Add",
        [g.const(np.arange(ow) * sw, np.int64), g.node("Mod", [arg, k], base + "_dx")],
        base + "_x",
    )
    flat = g.node(
        "Add", [g.node("Mul", [rows, g.const(width, np.int64)], base + "_r"), cols], base + "_f"
    )
    g.put(op.result, "i32", g.node("Cast", [flat], base, to=6))
    g.set_bound(op.result, int(np.prod(tensor_shape(op.input)[2:])) - 1)


def _no_negative(g: Graph, idx: str, past: int, dtype: Any, name: str) -> str:
    """``idx`` with each negative index replaced by ``past`` (one past the end): ``Gather`` and
    ``ScatterElements`` count negative indices from the end, where the executor refuses
    them; out of range, onnxruntime refuses them too."""
    negative = g.node("Less", [idx, g.const(0, dtype)], name + "_neg")
    return g.node("Where", [negative, g.const(past, dtype), idx], name + "_pos")


def max_unpool(g: Graph, op: nh.MaxUnpoolOp) -> None:
    """``ScatterElements`` of the codes (float32 where exact) into code-0 planes at their flat indices.
    Equal indices (overlapping pool windows) are the one case ONNX leaves unordered; the
    codes there are the same input position's, so equal, when the indices are a max pool's."""
    size = spatial(op, tensor_shape(op.result))
    base = out_name(g, op)
    form = "f32" if g.float_exact(op.input) else "i32"
    x = g.get(op.input, form)
    per_plane = int(np.prod(spatial(op, tensor_shape(op.input))))  # -1: undetermined at N=0
    flat = g.const([0, 0, per_plane], np.int64)
    idx = g.node("Cast", [g.get(op.indices, "i32")], base + "_i", to=7)
    if not isinstance(op.indices.owner, nh.MaxPoolIndicesOp):  # a max pool's are in the plane
        idx = _no_negative(g, idx, int(np.prod(size)), np.int64, base + "_in")
    idx = g.node("Reshape", [idx, flat], base + "_if")
    upd = g.node("Reshape", [x, flat], base + "_xf")
    nc = g.node(
        "Slice",
        [g.node("Shape", [x], base + "_sh"), g.const([0], np.int64), g.const([2], np.int64)],
        base + "_nc",
    )
    shape = g.node("Concat", [nc, g.const([int(np.prod(size))], np.int64)], base + "_shape", axis=0)
    zeros = g.node("Expand", [g.const(0, FORM_DTYPE[form]), shape], base + "_z")
    y = g.node("ScatterElements", [zeros, idx, upd], base + "_s", axis=2)
    y = g.node("Reshape", [y, g.const([0, 0, *size], np.int64)], base)
    g.put(op.result, form, y)
    g.set_bound(op.result, g.bound(op.input))


def expand(g: Graph, op: nh.ExpandOp) -> None:
    """``Expand``; a dim grown to a dynamic size reads the shape source's, ``Shape(like,
    start=i, end=i+1)``, joined with the other sizes by a Concat."""
    dims = [1 if d == DYNAMIC_INDEX else d for d in tensor_shape(op.result)]
    if op.like is None:
        shape = g.const(dims, np.int64)
    else:
        like = g.get(op.like, g.first_form(op.like))
        grown = set(movement.expand_grown(tensor_shape(op.input), tensor_shape(op.result)))
        base = out_name(g, op)
        pieces = [
            g.node("Shape", [like], f"{base}_dim{i}", start=i, end=i + 1)
            if i in grown
            else g.const([d], np.int64)
            for i, d in enumerate(dims)
        ]
        shape = g.node("Concat", pieces, base + "_shape", axis=0)
    _moved(g, op, op.input, lambda x, f: g.node("Expand", [x, shape], out_name(g, op)))


def gather(g: Graph, op: nh.GatherOp) -> None:
    indices = g.const(list(array_values(op.indices) or ()), np.int64)
    axis = op.axis.value.data
    _moved(g, op, op.input, lambda x, f: g.node("Gather", [x, indices], out_name(g, op), axis=axis))


WRITERS: dict[type[Operation], Writer] = {
    nh.ConcatOp: concat,
    nh.ReshapeOp: reshape,
    nh.TransposeOp: transpose,
    nh.PadOp: pad,
    nh.SplitOp: split,
    nh.UpsampleNearestOp: upsample_nearest,
    nh.DepthToSpaceOp: _block,
    nh.SpaceToDepthOp: _block,
    nh.UpsampleZeroOp: upsample_zero,
    nh.UpsampleBilinearOp: upsample_bilinear,
    nh.UpsampleBicubicOp: upsample_bicubic,
    nh.EmbeddingOp: embedding,
    nh.MaxPoolIndicesOp: max_pool_indices,
    nh.MaxUnpoolOp: max_unpool,
    nh.ExpandOp: expand,
    nh.GatherOp: gather,
}
