"""lower-to-hw patterns for sums of products: conv, conv_transpose, linear, matmul (trait ``Contraction`` or
``SlidingWindow`` with a weight).

Codes are summed exactly into i32 at ``exp(x) + exp(w)``; a quantized bias is shifted left
onto that exponent (or, when it is on a finer grid, the sums are shifted left onto the bias's
after the contraction and the bias is added there). A static worst-case bound of each
accumulator (from the actual weight codes and the input's width) must fit i32, unless the pass
runs with ``allow-overflow``.

    %xq = nq.fake_quant %x {bits = 8, exp = 5}         %acc = nh.conv %xq, %wq, %bq : ... -> i32 <[9, 8]>
    %y = nf.conv %xq, %wq, %bq                   ─▶    %y = nh.requant %acc {shift = [5, 4]} -> i8 <4>
    %yq = nq.fake_quant %y {bits = 8, exp = 4}
    (%wq at exps [4, 3]; %bq, an nh.constant, aligned to [9, 8] at compile time)
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.functions import runtime_layout
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.hw.codes import (
    bits_of_bound,
    dense_int,
    fixed,
)
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    HwValue,
    value_label,
)
from nanoir.runtime.numerics.accumulator import ACC_LIMIT, transposed_bound_terms
from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Attribute, Operation, OpResult, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


def accumulate(
    hw: HwLowering,
    op: Operation,
    x: HwValue,
    w: HwValue,
    bias: SSAValue | None,
    out_c: int,
    channel_axis: int,
    rank: int,
    bound_terms: np.ndarray,
    w_exps: np.ndarray | None = None,
) -> tuple[np.ndarray, SSAValue | None, np.ndarray]:
    """Accumulator exponents per output channel, the aligned i32 bias, and the bound.

    ``w_exps`` are the weight's exponents per output channel when they are not its own
    exponents along dim 0 (a transposed conv's repeat per group)."""
    if w.codes is None:
        raise hw.fail(op, "has a runtime weight; only constant weights lower to hw")
    if w_exps is None and w.exps.size in (1, out_c):
        w_exps = np.broadcast_to(w.exps.reshape(-1), (out_c,))
    if w_exps is None:
        raise hw.fail(op, "has weight exponents that are not per output channel")
    x_flat = x.exps.reshape(-1)
    if x_flat.size == 1:
        x_per_out = np.full(out_c, int(x_flat[0]))
    else:
        groups = op.groups.value.data if isinstance(op, nf.ConvOp | nf.ConvTransposeOp) else 1
        per_group = x_flat.reshape(groups, -1)
        if (per_group != per_group[:, :1]).any():
            raise hw.fail(
                op,
                "sums input channels with different exponents; "
                "requantize its input to one exponent",
            )
        x_per_out = np.repeat(per_group[:, 0], out_c // groups)
    acc_exps = (x_per_out + w_exps).astype(np.int64)
    bound = bound_terms.astype(object) * x.max_abs
    bias_value = None
    if bias is not None:
        b = hw.get(op, bias)
        if b.codes is None:
            raise hw.fail(op, "has a runtime bias; only constant biases lower to hw")
        b_exps = np.broadcast_to(b.exps.reshape(-1), (out_c,))
        shift = acc_exps - b_exps
        if (shift < 0).any():
            # The bias is on a finer grid than the products: shift the sums left onto it
            # after the contraction and add the bias there (see add_late_bias).
            finer = np.maximum(acc_exps, b_exps)
            scale = [2 ** int(d) for d in (finer - acc_exps)]
            aligned = bound * scale + np.abs(b.codes.reshape(-1)).astype(object)
            worst = max((int(v) for v in aligned), default=0)
            if worst > ACC_LIMIT and not hw.allow_overflow:
                raise hw.fail(
                    op,
                    f"may overflow i32 once aligned to its bias: worst case "
                    f"|acc| = {worst} > {ACC_LIMIT}; {_exponents_text(x, w, b, acc_exps)}",
                )
            shape = [1] * rank
            shape[channel_axis] = out_c
            hw.late_bias = b
            # The bound of the sums themselves: add_late_bias counts the shift's bits.
            return acc_exps.reshape(shape), None, np.asarray(bound)
        codes = b.codes.reshape(-1).astype(object) * [2 ** int(s) for s in shift]
        if any(abs(int(c)) > ACC_LIMIT for c in codes):
            raise hw.fail(
                op,
                "has a bias that does not fit i32 at the accumulator exponent; "
                + _exponents_text(x, w, b, acc_exps),
            )
        codes = np.array([int(c) for c in codes], dtype=np.int64)
        bound = bound + np.abs(codes).astype(object)
        t = TensorType(IntegerType(32), [out_c], fixed(acc_exps, 1, "C"))
        name = None
        if isinstance(bias, OpResult) and isinstance(bias.op, FakeQuantOp):
            src = bias.op.input
            if (
                isinstance(src, OpResult)
                and isinstance(src.op, nf.ConstantOp)
                and src.op.sym_name is not None
            ):
                name = src.op.sym_name.data
        const = nh.ConstantOp(dense_int(codes), t, name=name)
        hw.emit(const)
        bias_value = const.result
    worst = max((int(v) for v in bound), default=0)
    if worst > ACC_LIMIT and not hw.allow_overflow:
        raise hw.fail(
            op,
            f"may overflow its i32 accumulator: worst case |acc| = {worst} "
            f"> {ACC_LIMIT} (input codes up to {x.max_abs}); "
            + _exponents_text(x, w, None if bias is None else hw.get(op, bias), acc_exps),
        )
    shape = [1] * rank
    shape[channel_axis] = out_c
    return acc_exps.reshape(shape), bias_value, np.asarray(bound)


def _exps_text(exps: np.ndarray) -> str:
    lo, hi = int(np.min(exps)), int(np.max(exps))
    return str(lo) if lo == hi else f"{lo}..{hi}"


def _exponents_text(x: HwValue, w: HwValue, b: HwValue | None, acc: np.ndarray) -> str:
    """Which exponents to change: the accumulator is at exp(input) + exp(weight)."""
    parts = (
        f"the accumulator is at exponent {_exps_text(acc)} = input {value_label(x)} "
        f"({_exps_text(x.exps)}) + weight {value_label(w)} ({_exps_text(w.exps)})"
    )
    if b is not None:
        parts += f", the bias {value_label(b)} at {_exps_text(b.exps)}"
    return parts + ": a smaller input or weight exponent (a larger step) lowers the bound"


def add_late_bias(
    hw: HwLowering, op: nf.ConvOp | nf.ConvTransposeOp | nf.LinearOp, acc: HwValue, axis: int
) -> HwValue:
    """``acc << s + bias`` when the bias is finer than the products (exact, checked)."""
    b, hw.late_bias = hw.late_bias, None
    if b is None:
        return acc
    assert b.codes is not None
    rank = acc.rank
    shape = [1] * rank
    shape[axis] = -1
    b_exps = np.broadcast_to(b.exps.reshape(-1), (acc.exps.size,)).reshape(shape)
    target = np.maximum(acc.exps, b_exps)
    shifted = hw.shift_to(op, acc, target)
    codes = b.codes.reshape(shape).astype(np.int64) << (target - b_exps)
    bias = hw.make_constant(codes, target, "const", None)
    t = hw.result_type(acc.shape, target, 32, hw.layout_of(acc))
    new = nh.AddOp.create(operands=[shifted.value, bias.value], result_types=[t])
    hw.emit(new, op.result.name_hint)
    return HwValue(new.result, target, min(max(shifted.bits, bias.bits) + 1, 32))


class LowerConv(HwPattern):
    """``nf.conv`` → ``nh.conv`` into i32 (input channel groups aligned to one exponent)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ConvOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        x, w = hw.get(op, op.input), hw.get(op, op.weight)
        x = align_groups(hw, op, x, op.groups.value.data)
        out_shape = nf.tensor_shape(op.result)
        out_c = out_shape[1]
        terms = (
            np.abs(w.codes).reshape(out_c, -1).sum(axis=1)
            if w.codes is not None
            else np.zeros(out_c)
        )
        acc_exps, bias, bound = accumulate(hw, op, x, w, op.bias, out_c, 1, len(out_shape), terms)
        hw.acc_bits = bits_of_bound(bound)
        t = hw.result_type(out_shape, acc_exps, 32)
        props: dict[str, Attribute] = {"groups": op.groups}
        for key in ("strides", "pads", "dilations"):
            if getattr(op, key) is not None:
                props[key] = getattr(op, key)
        new = nh.ConvOp.create(
            operands=[x.value, w.value] + ([bias] if bias else []),
            result_types=[t],
            properties=props,
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, add_late_bias(hw, op, HwValue(new.result, acc_exps, hw.acc_bits), 1))


def align_groups(hw: HwLowering, op: Operation, x: HwValue, groups: int) -> HwValue:
    """Channels summed together must share an exponent: align each group of input channels
    to its finest one (exact left shifts)."""
    if x.exps.size <= 1:
        return x
    per_group = x.exps.reshape(groups, -1)
    if (per_group == per_group[:, :1]).all():
        return x
    target = np.repeat(per_group.max(axis=1), per_group.shape[1])
    return hw.shift_to(op, x, target.reshape(x.exps.shape))


class LowerConvTranspose(HwPattern):
    """``nf.conv_transpose`` → ``nh.conv_transpose`` into i32: weight ``[C, O/g, *K]`` with
    its exponents along dim 1, repeated for each group; input groups aligned as for conv."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ConvTransposeOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        x, w = hw.get(op, op.input), hw.get(op, op.weight)
        groups = op.groups.value.data
        x = align_groups(hw, op, x, groups)
        out_shape = nf.tensor_shape(op.result)
        out_c = out_shape[1]
        w_shape = nf.tensor_shape(op.weight)
        per_group = w_shape[1]
        if w.exps.size != 1 and not (w.exps.ndim >= 2 and w.exps.shape[1] == w.exps.size):
            raise hw.fail(op, "has weight exponents that are not per output channel (dim 1)")
        w_exps = np.tile(np.broadcast_to(w.exps.reshape(-1), (per_group,)), groups)
        n = len(w_shape) - 2
        strides = tuple(nf.array_values(op.strides) or (1,) * n)
        dils = tuple(nf.array_values(op.dilations) or (1,) * n)
        if w.codes is not None:
            in_per_group = w_shape[0] // groups
            grouped = w.codes.reshape(groups, in_per_group, per_group, *w_shape[2:])
            terms = np.concatenate([transposed_bound_terms(g, strides, dils) for g in grouped])
        else:
            terms = np.zeros(out_c)
        acc_exps, bias, bound = accumulate(
            hw, op, x, w, op.bias, out_c, 1, len(out_shape), terms, w_exps
        )
        hw.acc_bits = bits_of_bound(bound)
        t = hw.result_type(out_shape, acc_exps, 32)
        props: dict[str, Attribute] = {"groups": op.groups}
        for key in ("strides", "pads", "dilations", "output_padding"):
            if getattr(op, key) is not None:
                props[key] = getattr(op, key)
        new = nh.ConvTransposeOp.create(
            operands=[x.value, w.value] + ([bias] if bias else []),
            result_types=[t],
            properties=props,
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, add_late_bias(hw, op, HwValue(new.result, acc_exps, hw.acc_bits), 1))


class LowerLinear(HwPattern):
    """``nf.linear`` → ``nh.linear`` into i32 (features aligned to one exponent first)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.LinearOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        x, w = hw.get(op, op.input), hw.get(op, op.weight)
        out_shape = nf.tensor_shape(op.result)
        out_c = out_shape[-1]
        if x.exps.size != 1:
            # Features are summed together: bring them to the finest exponent first (exact).
            x = hw.shift_to(op, x, np.array(x.exps.max()).reshape((1,) * x.rank))
        terms = np.abs(w.codes).sum(axis=1) if w.codes is not None else np.zeros(out_c)
        rank = len(out_shape)
        acc_exps, bias, bound = accumulate(hw, op, x, w, op.bias, out_c, rank - 1, rank, terms)
        hw.acc_bits = bits_of_bound(bound)
        layout = "BC" if rank == 2 else "B" + "M" * (rank - 2) + "C"
        t = hw.result_type(out_shape, acc_exps, 32, layout)
        if hw.layout_of(x) != layout and x.rank == rank:
            x = hw.relayout(op, x, layout)
        new = nh.LinearOp.create(
            operands=[x.value, w.value] + ([bias] if bias else []), result_types=[t]
        )
        hw.emit(new, op.result.name_hint)
        hw.set(
            op.result, add_late_bias(hw, op, HwValue(new.result, acc_exps, hw.acc_bits), rank - 1)
        )


class LowerMatmul(HwPattern):
    """``nf.matmul`` of two per-tensor operands → ``nh.matmul`` into i32."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MatmulOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a, b = hw.get(op, op.lhs), hw.get(op, op.rhs)
        if a.exps.size != 1 or b.exps.size != 1:
            raise hw.fail(op, "needs per-tensor exponents on both operands")
        inner = nf.tensor_shape(op.lhs)[-1]
        worst = inner * a.max_abs * b.max_abs
        if worst > ACC_LIMIT and not hw.allow_overflow:
            raise hw.fail(op, f"may overflow its i32 accumulator: worst case |acc| = {worst}")
        exps = np.array(int(a.exps.reshape(-1)[0] + b.exps.reshape(-1)[0]))
        out_shape = nf.tensor_shape(op.result)
        layout = hw.layout_of(a) if a.rank == len(out_shape) else runtime_layout(len(out_shape))
        t = hw.result_type(out_shape, exps, 32, layout)
        new = nh.MatmulOp.create(operands=[a.value, b.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps.reshape((1,) * len(out_shape)), 32))
