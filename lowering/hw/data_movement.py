"""lower-to-hw patterns for ops that move codes and keep their exponents: max pool, concat,
reshape, transpose, pad, split, nearest upsampling, expand, gather.

A max pool picks codes (one exponent per channel, unchanged); concat joins codes (along the
channel dim per-channel exponents concatenate, otherwise every part is first aligned to the
finest exponent by exact left shifts); reshape keeps codes in order (per-channel exponents
stay when the channels stay in dim 1, else they are aligned first). Transpose, pad, split and
upsample move codes the way their nf op moves values (the same NumPy kernels); exponents move
with them, and are first aligned to one where they could not (channels leaving dim 1, a
padded channel dim, a non-zero pad value, which becomes a code at the value's exponent).

    %p = nf.max_pool %xq {kernel = [2, 2]}   ─▶   %p = nh.max_pool %xq {kernel = [2, 2]} : i8 <[5, 4]>
    %c = nf.concat %aq, %bq {axis = 1}       ─▶   %c = nh.concat %aq, %bq {axis = 1} : i8 <[5, 4, 3]>
    %r = nf.reshape %c : -> tensor<?x48xf32> ─▶   %c2 = nh.requant %c {shift = [0, -1, -2]} : i16 <5>
                                                  %r = nh.reshape %c2 : tensor<?x48xi16, <5, "BC">>
    %a, %b = nf.split %xq {axis = 1, sizes = [3, 1]} ─▶ %a, %b = nh.split %xq {axis = 1, sizes = [3, 1]}
    %p = nf.pad %xq {pads = [0, 0, 1, 1], value = 0.5} ─▶ %p = nh.pad %xq {pads = [0, 0, 1, 1], value = 16} : i8 <5>
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.functions import runtime_layout
from nanoir.dialects.nf import PadMode, array_values
from nanoir.dialects.nh import block_moved_exps
from nanoir.lowering.hw.codes import (
    bits_of_codes,
    container_width,
    dyadic_exponent,
    expand,
)
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    HwValue,
)
from nanoir.lowering.hw.elementwise import check_alignment
from nanoir.runtime.numerics import movement
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerMaxPool(HwPattern):
    """``nf.max_pool`` → ``nh.max_pool`` with the same window."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.MaxPoolOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        t = hw.result_type(
            nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        props = {k: v for k, v in op.properties.items()}
        new = nh.MaxPoolOp.create(operands=[a.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))


class LowerConcat(HwPattern):
    """``nf.concat`` → ``nh.concat``, parts aligned to one exponent unless per channel."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ConcatOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        parts = [hw.get(op, v) for v in op.inputs]
        axis = op.axis.value.data % len(nf.tensor_shape(op.result))
        rank = parts[0].rank
        layouts = {hw.layout_of(p) for p in parts if p.codes is None}
        layout = layouts.pop() if len(layouts) == 1 else runtime_layout(rank)
        per_channel_axis = layout.find("C") == axis and any(p.exps.size > 1 for p in parts)
        if per_channel_axis:
            full = [
                np.broadcast_to(
                    p.exps.reshape((1,) * (rank - p.exps.ndim) + p.exps.shape),
                    [1] * axis + [p.shape[axis]] + [1] * (rank - axis - 1),
                )
                for p in parts
            ]
            exps = np.concatenate(full, axis=axis)
        else:
            # one grid per element position the parts share: per tensor, or per channel along
            # a dim the concat does not join (each channel aligned onto its finest exponent)
            target = _shared_exponents(parts, rank, axis)
            if target is None:
                raise hw.fail(op, "joins per-channel exponents along a non-channel dim")
            check_alignment(hw, op, parts, target)
            parts = [hw.shift_to(op, p, target) for p in parts]
            exps = target
        bits = max(p.bits for p in parts)
        kinds = {(hw.declared(p), hw.signed(p)) for p in parts}
        if len(kinds) == 1:  # one element type (ui<b> stays unsigned)
            width, signed = kinds.pop()
        else:  # signed, as wide as the widest part needs (a ui<b> part takes b + 1 bits)
            width = max(container_width(p.bits) for p in parts)
            width, signed = max(width, *(hw.declared(p) for p in parts)), True
            parts = [hw.widen(p, width) for p in parts]
        t = hw.result_type(nf.tensor_shape(op.result), exps, width, layout, signed)
        new = nh.ConcatOp.create(
            operands=[p.value for p in parts],
            result_types=[t],
            properties={"axis": IntegerAttr(axis, i64)},
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, bits))


def _shared_exponents(parts: list[HwValue], rank: int, axis: int) -> np.ndarray | None:
    """The finest exponent of every part at each position, broadcast over the parts, when
    none varies along the concat's ``axis`` (per tensor, or per channel on another dim);
    None when their exponents do not broadcast so."""
    full = [p.exps.reshape((1,) * (rank - p.exps.ndim) + p.exps.shape) for p in parts]
    try:
        shape = np.broadcast_shapes(*(f.shape for f in full))
    except ValueError:
        return None
    if shape[axis] != 1:
        return None
    return np.maximum.reduce([np.broadcast_to(f, shape) for f in full]).astype(np.int64)


class LowerReshape(HwPattern):
    """``nf.reshape`` → ``nh.reshape`` (per-channel exponents only when channels stay); a
    reshape of a constant is the constant in the new shape (an ``nh.constant`` with a
    constant's layout: a conv bias written as ``Reshape(bias, [1, C, 1, 1])`` + ``Add``, as
    paddle2onnx writes one, must not become a runtime tensor, which `.ne` cannot compute at
    init)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ReshapeOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        out_shape = nf.tensor_shape(op.result)
        if a.codes is not None:
            hw.set(op.result, reshaped_constant(hw, op, a, out_shape))
            return
        if a.exps.size != 1:
            if a.rank >= 2 and len(out_shape) >= 2 and a.shape[1] == out_shape[1]:
                exps = a.exps  # channels stay in dim 1
            else:
                a = hw.shift_to(op, a, np.array(a.exps.max()).reshape((1,) * a.rank))
                exps = a.exps
        else:
            exps = a.exps
        exps = (
            exps.reshape((1,) * len(out_shape))
            if exps.size == 1
            else exps.reshape((1, -1) + (1,) * (len(out_shape) - 2))
        )
        t = hw.result_type(out_shape, exps, hw.declared(a), None, hw.signed(a))
        new = nh.ReshapeOp.create(operands=[a.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, a.bits, None))


def reshaped_constant(hw: HwLowering, op: Operation, a: HwValue, shape: tuple[int, ...]) -> HwValue:
    """The constant ``a`` in ``shape``, named as it was: its exponents move with its codes
    (one per element of the dim they vary along), aligned to one by exact left shifts only
    where they would vary along several dims."""
    assert a.codes is not None
    source = a.value.owner
    name = source.sym_name.data if isinstance(source, nh.ConstantOp) and source.sym_name else None
    exps = np.broadcast_to(expand(a.exps, a.rank), a.shape).reshape(shape)
    varying = [i for i in range(len(shape)) if (exps != exps.take([0], axis=i)).any()]
    if len(varying) > 1:
        a = hw.shift_to(op, a, np.array(a.exps.max()).reshape((1,) * a.rank))
        assert a.codes is not None
        exps = np.broadcast_to(expand(a.exps, a.rank), a.shape).reshape(shape)
    keep = tuple(slice(None) if i in varying[:1] else slice(0, 1) for i in range(len(shape)))
    return hw.make_constant(a.codes.reshape(shape), exps[keep], "const", name, a.bits)


def per_tensor(hw: HwLowering, op: Operation, a: HwValue) -> HwValue:
    """``a`` on one exponent (its finest), by exact left shifts, if it has several."""
    if a.exps.size == 1:
        return a
    return hw.shift_to(op, a, np.array(a.exps.max()).reshape((1,) * a.rank))


class LowerTranspose(HwPattern):
    """``nf.transpose`` → ``nh.transpose``; per-channel exponents must stay on dim 1 (else
    they are aligned to one first)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.TransposeOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        perm = list(array_values(op.perm) or ())
        moved = np.transpose(expand(a.exps, a.rank), perm)
        if [i for i, d in enumerate(moved.shape) if d > 1] not in ([], [1]) or (
            a.exps.size > 1 and hw.layout_of(a).find("C") != 1
        ):
            a = per_tensor(hw, op, a)
            moved = np.transpose(expand(a.exps, a.rank), perm)
        t = hw.result_type(nf.tensor_shape(op.result), moved, hw.declared(a), None, hw.signed(a))
        new = nh.TransposeOp.create(
            operands=[a.value], result_types=[t], properties={"perm": op.perm}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, moved, a.bits))


class LowerPad(HwPattern):
    """``nf.pad`` → ``nh.pad``; a constant pad value becomes a code (on a grid fine enough,
    in a container wide enough); padding the channel dim needs one exponent."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.PadOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        pads = list(array_values(op.pads) or ())
        mode, value = op.mode.data, op.value.value.data
        axis = hw.layout_of(a).find("C")
        constant = mode == PadMode.CONSTANT
        if a.exps.size > 1 and (constant and value != 0 or pads[axis] or pads[a.rank + axis]):
            a = per_tensor(hw, op, a)
        code, bits = 0, a.bits
        if constant:
            needed = dyadic_exponent(np.array([value]))
            if needed is None:
                raise hw.fail(op, f"pads with {value}, which is not a dyadic rational")
            if needed > int(a.exps.max()):
                a = hw.shift_to(op, a, np.array(needed).reshape((1,) * a.rank))
            code = int(np.ldexp(value, int(a.exps.max()))) if value != 0 else 0
            bits = max(a.bits, bits_of_codes(np.array([code])))
            if bits > 32:
                raise hw.fail(op, f"pads with {value}, a {bits}-bit code, more than i32")
            lo, hi = nh.value_code_range(a.value)
            if not lo <= code <= hi:  # (a ui<b> value's bits already count a sign bit)
                a = hw.widen(a, max(container_width(bits), hw.declared(a)))
            elif code == 0 and any(pads):
                a = hw.with_zero(a)  # i1 codes are only -1 and +1: padding with 0 needs i2
        t = hw.result_type(
            nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        new = nh.PadOp.create(
            operands=[a.value],
            result_types=[t],
            properties={"pads": op.pads, "mode": op.mode, "value": IntegerAttr(code, i64)},
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, bits))


class LowerSplit(HwPattern):
    """``nf.split`` → ``nh.split``; per-channel exponents split along with the channels."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.SplitOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        axis = op.axis.value.data % a.rank
        sizes = list(array_values(op.sizes) or ())
        full = expand(a.exps, a.rank)
        pieces, start = [], 0
        for size in sizes:
            pieces.append(
                full if full.shape[axis] == 1 else np.take(full, range(start, start + size), axis)
            )
            start += size
        layout = hw.layout_of(a)
        types = [
            hw.result_type(nf.tensor_shape(r), e, hw.declared(a), layout, hw.signed(a))
            for r, e in zip(op.results, pieces)
        ]
        new = nh.SplitOp.create(
            operands=[a.value],
            result_types=types,
            properties={"axis": IntegerAttr(axis, i64), "sizes": op.sizes},
        )
        hw.emit(new)
        for old, res, e in zip(op.results, new.results, pieces):
            if old.name_hint:
                res.name_hint = old.name_hint
            hw.set(old, HwValue(res, e, a.bits))


class LowerUpsampleNearest(HwPattern):
    """``nf.upsample_nearest`` → ``nh.upsample_nearest``: the same pixels, codes unchanged."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.UpsampleNearestOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        t = hw.result_type(
            nf.tensor_shape(op.result), a.exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        new = nh.UpsampleNearestOp.create(operands=[a.value], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, a.exps, a.bits))


class LowerBlock(HwPattern):
    """``nf.depth_to_space`` / ``nf.space_to_depth`` → their nh ops: codes moved as the nf
    op moves values; a per-channel exponent is first aligned to the finest one (exact)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(
        self, op: nf.DepthToSpaceOp | nf.SpaceToDepthOp, rewriter: PatternRewriter
    ) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        to_space = isinstance(op, nf.DepthToSpaceOp)
        block, mode = op.block.value.data, op.mode.data
        exps = block_moved_exps(to_space, expand(a.exps, a.rank), block, mode)
        if exps is None:
            # One result channel gathers channels of different exponents: align each such
            # group to its finest exponent first (exact left shifts).
            shape = expand(a.exps, a.rank).shape
            e = a.exps.reshape(-1)
            m = block ** (a.rank - 2)
            if mode == "CRD":
                target = np.repeat(e.reshape(-1, m).max(axis=1), m)
            else:
                target = np.tile(e.reshape(m, -1).max(axis=0), m)
            a = hw.shift_to(op, a, target.reshape(shape))
            exps = block_moved_exps(to_space, expand(a.exps, a.rank), block, mode)
            assert exps is not None
        t = hw.result_type(
            nf.tensor_shape(op.result), exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        cls = nh.DepthToSpaceOp if to_space else nh.SpaceToDepthOp
        new = cls.create(
            operands=[a.value], result_types=[t], properties={"block": op.block, "mode": op.mode}
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, a.bits))


class LowerExpand(HwPattern):
    """``nf.expand`` → ``nh.expand``: codes broadcast, exponents with them; where the rank
    grows, per-channel exponents are first aligned to one (the channel dim moves). A shape
    source stays one, as the nh value it lowered to (its codes and exponents unused)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ExpandOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        shape = nf.tensor_shape(op.result)
        lead = len(shape) - a.rank
        if lead:
            a = per_tensor(hw, op, a)
        full = expand(a.exps, a.rank)
        exps = full.reshape((1,) * lead + full.shape)
        layout = hw.layout_of(a) if not lead and op.like is None else None  # (else runtime)
        t = hw.result_type(shape, exps, hw.declared(a), layout, hw.signed(a))
        like = [] if op.like is None else [hw.get(op, op.like).value]  # (its shape alone)
        new = nh.ExpandOp.create(operands=[a.value, *like], result_types=[t])
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, a.bits))


class LowerGather(HwPattern):
    """``nf.gather`` → ``nh.gather``: the same slices; per-channel exponents along the
    gathered axis are gathered with their channels."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.GatherOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        a = hw.get(op, op.input)
        axis = op.axis.value.data % a.rank
        indices = list(array_values(op.indices) or ())
        full = expand(a.exps, a.rank)
        exps = full if full.shape[axis] == 1 else movement.gather(full, axis, indices)
        t = hw.result_type(
            nf.tensor_shape(op.result), exps, hw.declared(a), hw.layout_of(a), hw.signed(a)
        )
        new = nh.GatherOp.create(
            operands=[a.value],
            result_types=[t],
            properties={"axis": IntegerAttr(axis, i64), "indices": op.indices},
        )
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, exps, a.bits))
