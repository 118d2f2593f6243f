"""Lone batch norms that always lower: quantize makes their affine dyadic.

A batch norm that fold-bn cannot fold (after a concat, as in DenseNet's BN-ReLU-conv) is
lowered by searching an integer affine that reproduces, on every input code, the nq kernel's
float64 ``x * A + B`` with ``A = g / sqrt(v + eps)`` (``lowering.hw.channel_wise``). ``A`` is
irrational in general, and where the exact value sits on a rounding boundary the float64
rounding decides: with 8-bit parameters, the input code equal to the quantized mean gives
exactly the quantized bias, which is on the output grid one time in eight, and whether float64
lands a hair below or on it is what the integer affine must reproduce. No affine within i32
may (DenseNet-121 with random statistics: ``features.0.layers.4.norm1``, an 11-bit input, the
only affine that matches needs a 21-bit multiplier).

So for a program it quantizes, quantize writes each such BN's affine in a form the float64
kernel computes exactly (:func:`make_dyadic`): ``scale = M 2**-e``, ``bias = N 2**-(x + e)``
(``x`` the input's exponent as lower-to-hw aligns it), ``mean = 0``, ``var = 1``,
``epsilon = 0``, with ``M`` as fine as i32 admits (``bits(x) + bits(M) + 1 <= 32``, 24 bits at
most: the constants are float32) and ``|c M + N|`` within i32 for every code. The kernel's
``x * A + B`` then rounds nowhere, and lower-to-hw takes the affine as it is
(``channel_wise.exact_affine``: no search over the codes, so no bound on the input's width).
``A`` moves by at most ``2**-(e+1)`` (``2**-20`` of it on DenseNet's 11-bit inputs), far below
what the parameters' own 8-bit fake-quants cost (it is computed from the fake-quantized
parameters, as the nq kernel computes it), so accuracy is unchanged. This is the least change
that always lowers: the BN stays one op and one requant at nh, and its output keeps one
rounding (a rewrite into a fake-quantized per-channel mul and add, or a depthwise 1x1 conv,
would round the scale to the weights' bits and add a rounding or a bias cap). Programs that
lowered before change only where the float64 rounding of a value next to a rounding boundary
differs. nq's float BN semantics are unchanged for imported programs (``.ne``
BatchNormalization rows). Exponents the user imported (``quantize{exponents=...}``,
``nanoir.qat.convert``) leave the BN as it is: its affine is then searched as before, and
lower-to-hw may refuse it, naming the channel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy, numpy_to_dense
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import DataMovement, aligns_channels, grid_operands
from nanoir.lowering.quantize.join_rules import aligned_bits
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.accumulator import ACC_LIMIT
from xdsl.dialects.builtin import Float32Type, Float64Type, FloatAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

__all__ = [
    "FLOAT32_BITS",
    "Grid",
    "Leaf",
    "carried_grid",
    "dyadic_affine",
    "fake_quant_grid",
    "input_grid",
    "make_dyadic",
]

FLOAT32_BITS = 24
"""Significant bits of a float32: the snapped scale and bias stay exact in the constants."""
EXPONENTS = np.arange(-32, 63)
"""The exponents ``e`` of ``M = A 2**e`` tried (lower-to-hw's ``AFFINE_EXPONENTS``)."""


def _fake_quant(value: SSAValue) -> FakeQuantOp | None:
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return value.op
    return None


Grid = tuple[np.ndarray, int]
"""Code exponents (one, or one per channel of dim 1) and signed bits (0: not usable)."""
Leaf = Callable[[SSAValue], "Grid | None"]
"""The grid of a quantized value (a fake-quant's result; a QAT quantizer's value), or None for
a value that is not one (the walk goes on through data movement)."""


def fake_quant_grid(value: SSAValue) -> Grid | None:
    """The grid of a fake-quant's result (bits 0 for a 1-bit one: no affine reads it)."""
    fq = _fake_quant(value)
    if fq is None:
        return None
    bits = fq.bits.value.data
    exps = dense_to_numpy(fq.exp).astype(np.int64).reshape(-1)
    return exps, (bits + (0 if fq.is_signed else 1)) if bits > 1 else 0


def input_grid(bn: nf.BatchNormOp, leaf: Leaf = fake_quant_grid) -> Grid | None:
    """The BN input's code exponents, one per channel, and bits as lower-to-hw carries them
    (:func:`carried_grid`); None where they cannot be known here (the BN is then left as it
    is). ``nanoir.qat`` passes its quantizers' grids as ``leaf``."""
    channels = nf.tensor_shape(bn.input)[1]
    grid = carried_grid(bn.input, leaf)
    if grid is None or grid[0].size not in (1, channels):
        return None
    return np.broadcast_to(grid[0], (channels,)).copy(), grid[1]


def carried_grid(value: SSAValue, leaf: Leaf = fake_quant_grid) -> Grid | None:
    """The grid ``value`` has at the hw level, as lower-to-hw's data-movement patterns carry
    it: a quantized value's own (``leaf``, b > 1); a split's part of its input's (per-channel
    exponents sliced along the channels); a channel concat's (per-tensor parts aligned to the
    finest where no part is per channel, else each part's side by side); a per-tensor grid
    (or per-channel exponents that are all equal) through any other data movement (LeViT's
    linear -> flatten(0, 1) -> BatchNorm1d); per-channel exponents a reshape, transpose,
    expand or a pad with zeros aligns (``aligns`` of ``DataMovement``) as one, the finest,
    with the bits the shifts add (a depth_to_space: the finest of each result channel's
    gathered ones). None for anything else (a pad with another value, a part not
    quantized)."""
    own = leaf(value)
    if own is not None:
        return own if own[1] >= 2 else None
    op = value.op if isinstance(value, OpResult) else None
    if op is None or not op.has_trait(DataMovement):
        return None
    rank = len(nf.tensor_shape(value))
    if isinstance(op, nf.SplitOp) and op.axis.value.data % rank == 1:
        grid = carried_grid(op.input, leaf)
        if grid is None or grid[0].size == 1:
            return grid
        if grid[0].size != nf.tensor_shape(op.input)[1]:
            return None
        start = sum(nf.tensor_shape(r)[1] for r in op.results[: list(op.results).index(value)])
        return grid[0][start : start + nf.tensor_shape(value)[1]], grid[1]
    if isinstance(op, nf.ConcatOp) and op.axis.value.data % rank == 1:
        parts = [carried_grid(v, leaf) for v in op.inputs]
        grids = [p for p in parts if p is not None]
        if len(grids) < len(parts):
            return None
        widths = [nf.tensor_shape(v)[1] for v in op.inputs]
        if any(g[0].size not in (1, n) for g, n in zip(grids, widths)):
            return None
        if any(g[0].size > 1 for g in grids):  # lower-to-hw keeps them per channel
            exps = [np.broadcast_to(g[0], (n,)) for g, n in zip(grids, widths)]
            return np.concatenate(exps), max(g[1] for g in grids)
        target = max(int(g[0][0]) for g in grids)
        bits = max(aligned_bits(g[1], target - int(g[0][0])) for g in grids)
        return np.array([target], dtype=np.int64), bits
    moved = grid_operands(op)
    grid = carried_grid(moved[0], leaf) if len(moved) == 1 else None
    if grid is None:
        return None
    exps, bits = grid
    if (exps == exps[0]).all():  # one exponent moves with any codes, never shifted
        return exps[:1], bits
    if isinstance(op, nf.DepthToSpaceOp):
        # Each result channel gathers r**n input channels, aligned onto their finest first
        # (``LowerBlock``): CRD gathers neighbours, DCR every C-th.
        gathered = op.block.value.data ** (len(nf.tensor_shape(value)) - 2)
        groups = (
            exps.reshape(-1, gathered) if op.mode.data == "CRD" else exps.reshape(gathered, -1).T
        )
        finest = groups.max(axis=1)
        return finest, aligned_bits(bits, int((finest[:, None] - groups).max()))
    padded = isinstance(op, nf.PadOp) and op.mode.data == "constant" and op.value.value.data
    if aligns_channels(op) and not padded:
        # Aligned onto the finest exponent first (not so simply where a pad's value is a
        # code too).
        finest = int(exps.max())
        return np.array([finest], dtype=np.int64), aligned_bits(bits, finest - int(exps.min()))
    return None


def _signed_bits(m: np.ndarray) -> np.ndarray:
    """Signed bits of each integer (as float64) as ``bits_of_codes`` counts one code:
    ``bit_length(|m|) + 1``, at least 2 (one more than needed for ``-2**k``)."""
    return np.maximum(np.frexp(np.abs(m))[1] + 1, 2)


def dyadic_affine(
    a: np.ndarray, b: np.ndarray, x_exps: np.ndarray, x_bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per channel ``(e, M, N)``: the finest ``e`` with ``M = round(a 2**e)`` of at most
    ``min(31 - x_bits, 24)`` signed bits and ``|c M + N|`` within i32 for every ``x_bits``-bit
    code ``c``, ``N = round(b 2**(x + e))`` kept to 24 significant bits. None if a channel has
    none (or its parameters are not finite)."""
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return None
    lo, hi = quant.qmin(x_bits), quant.qmax(x_bits)
    m_bits = min(32 - x_bits - 1, FLOAT32_BITS)
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.rint(a[:, None] * np.ldexp(1.0, EXPONENTS)[None, :])
        n = np.rint(b[:, None] * np.ldexp(1.0, x_exps[:, None] + EXPONENTS[None, :]))
        # N to 24 significant bits (float32): rounded on a coarser grid where it is wider.
        extra = np.maximum(np.frexp(np.abs(n))[1] - FLOAT32_BITS, 0)
        n = np.ldexp(np.rint(np.ldexp(n, -extra)), extra)
        worst = np.maximum(np.abs(lo * m + n), np.abs(hi * m + n))
        ok = (_signed_bits(m) <= m_bits) & (worst <= ACC_LIMIT) & np.isfinite(n)
    if not ok.any(axis=1).all():
        return None
    pick = ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)  # the finest that fits
    rows = np.arange(len(a))
    return EXPONENTS[pick], m[rows, pick], n[rows, pick]


def _param_reals(value: SSAValue) -> np.ndarray | None:
    """A BN parameter as the nq kernel reads it: a float constant, or its fake-quant's values."""
    fq = _fake_quant(value)
    if fq is None:
        data = constant_array(value)
        return None if data is None else np.asarray(data, dtype=np.float64)
    data = constant_array(fq.input)
    if data is None:
        return None
    k = dense_to_numpy(fq.exp).astype(np.int64)
    return quant.fake_quant(
        np.asarray(data, dtype=np.float64),
        fq.bits.value.data,
        k.reshape(k.shape if k.size > 1 else (1,)),
        fq.rounding_mode,
        signed=fq.is_signed,
    )


def _read_only_by_fake_quants(op: Operation) -> bool:
    uses = list(op.results[0].uses)
    return bool(uses) and all(isinstance(u.operation, FakeQuantOp) for u in uses)


def make_dyadic(func: FuncOp, fixed: set[FakeQuantOp]) -> int:
    """Give every lone BN read only by fake-quants a dyadic affine (the module docstring);
    returns how many were changed. A BN whose input or output fake-quants are in ``fixed``
    (imported exponents) is left as it is."""
    changed = 0
    for bn in [op for op in func.body.block.ops if isinstance(op, nf.BatchNormOp)]:
        if not _read_only_by_fake_quants(bn):
            continue
        readers = [u.operation for u in bn.result.uses]
        grid = input_grid(bn)
        if grid is None or any(r in fixed for r in readers):
            continue
        if isinstance(bn.input, OpResult) and bn.input.op in fixed:
            continue
        x_exps, x_bits = grid
        channels = len(x_exps)
        reals = [_param_reals(v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
        if any(p is None or p.size != channels for p in reals):
            continue
        g, beta, mean, var = (p.reshape(-1) for p in reals)  # type: ignore[union-attr]
        with np.errstate(all="ignore"):
            a = g / np.sqrt(var + bn.epsilon.value.data)  # the nq kernel's own float64 steps
            b = beta - mean * a
        found = dyadic_affine(a, b, x_exps, x_bits)
        if found is None:
            continue
        e, m, n = found
        scale = np.ldexp(m, -e)
        shift = np.ldexp(n, -(x_exps + e))
        types = [v.type for v in (bn.scale, bn.bias, bn.mean, bn.var)]
        if not all(
            isinstance(t, TensorType) and isinstance(t.element_type, Float32Type | Float64Type)
            for t in types
        ):
            continue
        written = [
            _write_param(bn, i, values)
            for i, values in enumerate((scale, shift, np.zeros(channels), np.ones(channels)), 1)
        ]
        bn.operands = [bn.input, *written]
        bn.properties["epsilon"] = FloatAttr(0.0, Float64Type())
        changed += 1
    return changed


def _write_param(bn: nf.BatchNormOp, index: int, values: np.ndarray) -> SSAValue:
    """The constant holding ``values`` for the BN's operand ``index``: its own constant,
    rewritten in place (it keeps its name; its fake-quant goes), where nothing else reads it;
    else a new constant."""
    old = bn.operands[index]
    fq = _fake_quant(old)
    source = fq.input if fq is not None else old
    const = source.owner
    element = old.type.element_type  # type: ignore[attr-defined]
    dense = numpy_to_dense(values.reshape(nf.tensor_shape(old)), element)
    only_reader = len(list(old.uses)) == 1 and (fq is None or len(list(source.uses)) == 1)
    if isinstance(const, nf.ConstantOp) and only_reader:
        const.properties["value"] = dense
        if fq is not None:
            bn.operands = [*bn.operands[:index], source, *bn.operands[index + 1 :]]
            fq.detach()
            fq.erase()
        return source
    new = nf.ConstantOp(dense)
    new.result.name_hint = old.name_hint
    Rewriter.insert_op(new, InsertPoint.before(bn))
    return new.result
