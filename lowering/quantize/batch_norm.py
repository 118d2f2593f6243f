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

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy, numpy_to_dense
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.quantize.join_rules import aligned_bits
from nanoir.lowering.quantize.joins import sources
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.accumulator import ACC_LIMIT
from xdsl.dialects.builtin import Float32Type, Float64Type, FloatAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

__all__ = ["FLOAT32_BITS", "dyadic_affine", "input_grid", "make_dyadic"]

FLOAT32_BITS = 24
"""Significant bits of a float32: the snapped scale and bias stay exact in the constants."""
EXPONENTS = np.arange(-32, 63)
"""The exponents ``e`` of ``M = A 2**e`` tried (lower-to-hw's ``AFFINE_EXPONENTS``)."""


def _fake_quant(value: SSAValue) -> FakeQuantOp | None:
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return value.op
    return None


def _grid_of(fq: FakeQuantOp, channels: int) -> tuple[np.ndarray, int] | None:
    """Per-channel code exponents and signed bits of an activation fake-quant (b > 1)."""
    bits = fq.bits.value.data
    exps = dense_to_numpy(fq.exp).astype(np.int64).reshape(-1)
    if bits < 2 or exps.size not in (1, channels):
        return None
    return np.broadcast_to(exps, (channels,)).copy(), bits + (0 if fq.is_signed else 1)


def input_grid(bn: nf.BatchNormOp) -> tuple[np.ndarray, int] | None:
    """The BN input's per-channel code exponents and bits as lower-to-hw carries them: a
    fake-quant's own, a per-tensor one's moved by data movement (a reshape), or a channel
    concat's (per-tensor parts aligned to the finest, per-channel parts kept). None for anything
    else (the BN is then left as it is)."""
    channels = nf.tensor_shape(bn.input)[1]
    fq = _fake_quant(bn.input)
    if fq is not None:
        return _grid_of(fq, channels)
    op = bn.input.op if isinstance(bn.input, OpResult) else None
    if not isinstance(op, nf.ConcatOp):
        # a per-tensor fake-quant moved by data movement (LeViT's linear -> flatten(0, 1) ->
        # BatchNorm1d): the codes keep its exponent and bits; per-channel exponents moved
        # to other channels are left alone
        leaves = sources(bn.input)
        if leaves is None or len(leaves) != 1 or dense_to_numpy(leaves[0].exp).size != 1:
            return None
        return _grid_of(leaves[0], channels)
    rank = len(nf.tensor_shape(op.result))
    if op.axis.value.data % rank != 1:
        return None
    parts = []
    for v in op.inputs:
        part_fq = _fake_quant(v)
        grid = None if part_fq is None else _grid_of(part_fq, nf.tensor_shape(v)[1])
        if grid is None or part_fq is None:
            return None
        parts.append((grid, dense_to_numpy(part_fq.exp).size > 1))
    if any(per_channel for _, per_channel in parts):  # lower-to-hw keeps them per channel
        return (
            np.concatenate([g[0] for g, _ in parts]),
            max(g[1] for g, _ in parts),
        )
    target = max(int(g[0][0]) for g, _ in parts)
    bits = max(aligned_bits(g[1], target - int(g[0][0])) for g, _ in parts)
    return np.full(channels, target, dtype=np.int64), bits


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
