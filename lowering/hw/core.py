"""What every lower-to-hw pattern shares: the values being built, and the exact moves on them.

The lowering is a conversion in the MLIR sense: one forward sweep over the nq function, one
``RewritePattern`` per op (or per fusion rooted at a fake-quant). A pattern reads the lowered
form of its operands from the shared ``HwLowering`` state (an ``HwValue``: the nh SSA value,
its exponents, the signed bits its codes need, the codes when constant), inserts nh ops before
the nq op and records the lowered form of the nq result. The nq ops stay until the sweep ends
(later patterns still read their operands and attributes, e.g. a bias's constant name), then
the pass replaces every nq value by its nh value and erases the nq ops. An op no pattern
lowers is reported by name (``ReportUnlowered``, the last pattern).

    %r = nf.relu %xq : tensor<?x4xf32>          %r = nh.relu %xq : tensor<?x4xi8, #nh.fixed<5, "BC">>
                                           ─▶   (%xq: the lowered fake-quant, exponent 5)

Exponents (``exps``) are NumPy arrays broadcastable against the value: ones except along the
channel axis. Layouts (``BCMD``, weights ``CCDD``, vectors ``C``) come from
``nanoir.dialects.functions.runtime_layout`` and ``constant_layout``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.functions import describe, runtime_layout
from nanoir.dialects.nf import int_array
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.dialects.traits import IntegerAlgorithm, LookupTable, Quantized
from nanoir.lowering.hw.codes import (
    bits_of_codes,
    constant_layout,
    container_width,
    dense_int,
    dyadic_exponent,
    expand,
    fixed,
    float_constant_of,
)
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DictionaryAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error


class LowerToHwError(DiagnosticException, Error):
    """The program has no exact integer form; the message names the op and the reason."""


@dataclass
class HwValue:
    """An nh SSA value and what the lowering knows about it."""

    value: SSAValue
    exps: np.ndarray
    """Exponents broadcastable against the value (ones except the channel axis)."""
    bits: int
    """Signed bits its codes need (1 = binary ±1; ``b + 1`` for unsigned ``ui<b>`` codes, so
    every bound below, computed as if signed, covers ``0..2**b-1``)."""
    codes: np.ndarray | None = None
    """The codes, when the value is a compile-time constant."""

    @property
    def shape(self) -> tuple[int, ...]:
        t = self.value.type
        assert isinstance(t, TensorType)
        return t.get_shape()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def max_abs(self) -> int:
        if self.codes is not None and self.codes.size:
            return int(np.abs(self.codes).max())
        return 1 if self.bits == 1 else 2 ** (self.bits - 1)


def value_label(hv: HwValue) -> str:
    """``%name`` of a lowered value for messages (its nq name), or ``a value``."""
    return f"%{hv.value.name_hint}" if hv.value.name_hint else "a value"


class HwLowering:
    """The state of lowering one nq function: the lowered values and the insertion point."""

    def __init__(self, func: FuncOp, *, allow_overflow: bool = False):
        self.func = func
        self.allow_overflow = allow_overflow
        self.values: dict[SSAValue, HwValue] = {}
        """The lowered form of each nq value lowered so far."""
        self.new_args: list[BlockArgument] = []
        """The function's nh inputs (the codes of its inputs' fake-quants), in order."""
        self.arg_attrs: list[DictionaryAttr] = []
        self.input_index: dict[SSAValue, int] = {}
        self.late_bias: HwValue | None = None
        self.acc_bits = 32
        self.rewriter: PatternRewriter | None = None

    # -- building ----------------------------------------------------------------------------

    def fail(self, op: Operation, reason: str) -> LowerToHwError:
        return LowerToHwError(f"lower-to-hw: {describe(op)} {reason}")

    def emit(self, op: Operation, name: str | None = None) -> Operation:
        """Insert ``op`` before the nq op being lowered, naming its first result."""
        assert self.rewriter is not None, "emit outside a pattern"
        self.rewriter.insert(op)
        if name and op.results:
            try:
                op.results[0].name_hint = name
            except ValueError:
                pass
        return op

    def set(self, nq_value: SSAValue, hv: HwValue) -> None:
        """Record ``hv`` as the lowered form of ``nq_value``."""
        self.values[nq_value] = hv

    def get(self, op: Operation, value: SSAValue) -> HwValue:
        """The lowered form of an operand, or an error saying why there is none."""
        if value in self.values:
            return self.values[value]
        data = float_constant_of(value)
        if data is not None:
            return self.float_constant(op, data)
        src = value.op.name if isinstance(value, OpResult) else "a function argument"
        raise self.fail(
            op,
            f"reads a float value from {src} that is not quantized; insert "
            "nq.fake_quant (or run quantize) before lowering to hw",
        )

    def float_constant(self, op: Operation, data: np.ndarray) -> HwValue:
        """An unquantized float constant used at the exponent where it is exact (``x + 2``)."""
        k = dyadic_exponent(data)
        if k is None:
            raise self.fail(
                op,
                f"uses a float constant {data.reshape(-1)[:4].tolist()} that "
                "is not a dyadic rational; quantize it first",
            )
        codes = np.ldexp(data, k).astype(np.int64)
        if codes.ndim == 0:
            codes = codes.reshape(1)
        return self.make_constant(codes, np.array(k).reshape((1,) * codes.ndim), "const", None)

    def make_constant(
        self,
        codes: np.ndarray,
        exps: np.ndarray,
        role: str,
        name: str | None,
        bits: int | None = None,
        layout: str | None = None,
    ) -> HwValue:
        bits = bits_of_codes(codes) if bits is None else bits
        width = container_width(bits)
        exps_full = expand(np.asarray(exps, dtype=np.int64), codes.ndim)
        varying = [i for i, d in enumerate(exps_full.shape) if d > 1]
        if layout is None and (role == "weight" or not varying):
            layout = constant_layout(codes.ndim, role)
        elif layout is None:
            layout = "".join("C" if i == varying[0] else "D" for i in range(codes.ndim))
        t = TensorType(IntegerType(width), codes.shape, fixed(exps_full, codes.ndim, layout))
        op = nh.ConstantOp(dense_int(codes), t, name=name)
        self.emit(op, name.replace(".", "_") if name else None)
        return HwValue(op.result, exps_full, bits, codes)

    def result_type(
        self,
        shape: Sequence[int],
        exps: np.ndarray,
        width: int,
        layout: str | None = None,
        signed: bool = True,
    ) -> TensorType:
        layout = layout or runtime_layout(len(shape))
        elt = IntegerType(width, Signedness.SIGNLESS if signed else Signedness.UNSIGNED)
        return TensorType(elt, shape, fixed(exps, len(shape), layout))

    @staticmethod
    def signed(hv: HwValue) -> bool:
        """False when ``hv``'s nh type holds unsigned codes (``ui<b>``); data movement keeps it."""
        return not nh.is_unsigned(hv.value)

    @staticmethod
    def declared(hv: HwValue) -> int:
        """The element width in ``hv``'s nh type (what the verifier reasons about)."""
        t = hv.value.type
        assert isinstance(t, TensorType) and isinstance(t.get_element_type(), IntegerType)
        return t.get_element_type().width.data

    @staticmethod
    def layout_of(hv: HwValue) -> str:
        t = hv.value.type
        assert isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr)
        return t.encoding.layout.data

    def runtime_layout_for(self, shape: Sequence[int], *hvs: HwValue) -> str:
        """The layout of the first runtime operand of the result's rank, else the default."""
        for hv in hvs:
            if hv.codes is None and hv.rank == len(shape):
                return self.layout_of(hv)
        return runtime_layout(len(shape))

    # -- exact moves -------------------------------------------------------------------------

    def shift_to(self, op: Operation, hv: HwValue, exps: np.ndarray) -> HwValue:
        """Move ``hv`` onto finer exponents by an exact left shift (i32 result)."""
        rank = max(hv.rank, exps.ndim)
        current = expand(hv.exps, rank)
        target = np.broadcast_to(
            expand(exps, rank), np.broadcast_shapes(current.shape, expand(exps, rank).shape)
        )
        shift = target - current
        if (shift == 0).all():
            flat = np.asarray(target).reshape(-1)
            if hv.exps.size > 1 and (flat == flat[0]).all():
                # Equal per-channel exponents asked for as one: one (the nh type already
                # says so, see fixed), as after a shift below.
                return HwValue(hv.value, np.full((1,) * rank, flat[0], np.int64), hv.bits, hv.codes)
            return hv
        if (shift < 0).any():
            raise self.fail(op, "would need a right shift to align operands (inexact)")
        bits = hv.bits + int(shift.max()) + (1 if hv.bits == 1 else 0)
        if bits > 32:
            raise self.fail(
                op,
                f"aligning operands needs {bits}-bit codes, more than i32: "
                f"{value_label(hv)} (exponent {int(current.min())}, {hv.bits}-bit codes) "
                f"would shift onto exponent {int(target.max())}; the operand at exponent "
                f"{int(target.max())} needs an exponent of at most "
                f"{int(current.min()) + 32 - hv.bits} (or {value_label(hv)} a finer one)",
            )
        if hv.codes is not None:
            codes = expand(hv.codes, rank).astype(np.int64) << shift
            return self.make_constant(codes, target, "const", None)
        if rank != hv.rank:
            raise self.fail(op, "broadcasts a runtime value of lower rank; not supported on hw")
        layout = self.layout_of(hv)
        width = max(container_width(bits), self.declared(hv))
        t = self.result_type(hv.shape, target, width, layout)
        shifts = self.shift_list(op, -shift, layout, rank)
        req = nh.RequantOp.create(
            operands=[hv.value], result_types=[t], properties={"shift": int_array(shifts)}
        )
        self.emit(req, hv.value.name_hint)
        flat = np.asarray(target).reshape(-1)
        flat = flat if flat.size else np.zeros(1, np.int64)  # (an empty part: any one)
        if (flat == flat[0]).all():
            # One exponent in all: keep it per-tensor (as the nh type says), so that ops
            # needing per-tensor exponents (relayout, lookup tables, matmul) accept it.
            return HwValue(req.result, np.full((1,) * rank, flat[0], dtype=np.int64), bits)
        return HwValue(req.result, np.asarray(target).copy(), bits)

    def shift_list(self, op: Operation, shift: np.ndarray, layout: str, rank: int) -> list[int]:
        """Shifts as ``nh.requant`` takes them: one, or one per channel of ``layout``."""
        flat = shift.reshape(-1)
        if flat.size == 0 or (flat == flat[0]).all():  # (no channel: an empty tensor)
            return [int(flat[0]) if flat.size else 0]
        axis = layout.find("C")
        full = shift.reshape((1,) * (rank - shift.ndim) + shift.shape)
        if [i for i, d in enumerate(full.shape) if d > 1] != [axis]:
            raise self.fail(op, "needs shifts that vary along a non-channel dim")
        return [int(s) for s in full.reshape(-1)]

    def requant(
        self,
        op: Operation,
        hv: HwValue,
        bits: int,
        nh_exp: np.ndarray,
        mode: RoundingMode,
        name: str | None,
        signed: bool = True,
    ) -> HwValue:
        """``hv`` requantized to ``bits`` at ``nh_exp``, as a fake-quant of its value does
        (``signed=False``: to unsigned ``ui<bits>`` codes, saturating at ``0..2**bits-1``)."""
        rank = hv.rank
        out_exps = (
            nh_exp.reshape((1,) * (rank - nh_exp.ndim) + nh_exp.shape)
            if (nh_exp.ndim <= rank)
            else nh_exp
        )
        same_kind = (
            signed and self.signed(hv)
            if signed
            else (not self.signed(hv) and self.declared(hv) == bits and hv.codes is None)
        )
        fits = hv.bits <= (bits if signed else bits + 1)
        if (hv.exps == out_exps).all() and fits and same_kind and hv.bits != 1 and bits != 1:
            # Already on this grid and within range: the fake-quant is the identity. The value
            # still takes the fake-quant's exponents: per-channel exponents that are all equal
            # become per-tensor ones (the nh type already says so, see fixed), so that ops
            # needing per-tensor exponents (lookup tables, matmul) accept the result.
            if out_exps.size < hv.exps.size:
                return HwValue(hv.value, out_exps.copy(), hv.bits, hv.codes)
            return hv
        if hv.codes is not None:
            # A constant expression: requantize now.
            real_shift = hv.exps - out_exps
            codes = quant.requant(hv.codes, real_shift, bits, mode, signed=signed)
            # Unsigned constant codes are kept in a signed container one bit wider.
            return self.make_constant(
                codes.astype(np.int64), out_exps, "const", None, bits + (0 if signed else 1)
            )
        layout = self.layout_of(hv)
        varying = [i for i, d in enumerate(np.shape(out_exps)) if d > 1]
        if len(varying) == 1 and layout.find("C") != varying[0]:
            # Per-channel exponents along a dim the layout does not call C (a per-channel
            # fake-quant along dim 1 of a linear's [B, M, C] result): name that dim C first.
            hv = self.channels_at(op, hv, varying[0])
            layout = self.layout_of(hv)
        try:
            t = self.result_type(hv.shape, out_exps, container_width(bits), layout, signed)
        except ValueError as e:
            raise self.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        shift = hv.exps - out_exps
        req = nh.RequantOp.create(
            operands=[hv.value],
            result_types=[t],
            properties={
                "shift": int_array(self.shift_list(op, shift, layout, rank)),
                "rounding": RoundingModeAttr(mode),
            },
        )
        self.emit(req, name)
        result: SSAValue = req.result
        if container_width(bits) != bits and bits > 1:
            # nh.requant saturates at its container's width (a 3-bit code in i4): the
            # fake-quant's own bounds are a clamp after it (exact: nested saturations).
            low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
            bound = nh.ClampOp.create(
                operands=[result],
                result_types=[t],
                properties={"min": IntegerAttr(low, i64), "max": IntegerAttr(high, i64)},
            )
            self.emit(bound, name)
            result = bound.result
        return HwValue(result, out_exps, bits if signed else bits + 1)

    def widen(self, hv: HwValue, width: int) -> HwValue:
        """The same codes in a wider signed container (a zero-shift requant); unsigned
        ``ui<b>`` codes become signed ``i<width>`` ones (``width > b``)."""
        if self.declared(hv) == width and self.signed(hv):
            return hv
        t = self.result_type(hv.shape, hv.exps, width, self.layout_of(hv))
        req = nh.RequantOp.create(
            operands=[hv.value], result_types=[t], properties={"shift": int_array([0])}
        )
        self.emit(req, hv.value.name_hint)
        return HwValue(req.result, hv.exps, hv.bits)

    def algorithm_grids(self, op: Operation) -> tuple[Quantized, Quantized]:
        """The input and output grids of an ``IntegerAlgorithm`` op, or the refusal naming
        the op: it needs both fake-quants and an exact run of its algorithm."""
        trait = op.get_trait(IntegerAlgorithm)
        assert trait is not None
        grids = trait.quantization(op)
        if isinstance(grids, str):
            raise self.fail(op, f"has no integer form here: {grids}")
        reason = trait.bound_error(op, grids)
        if reason is not None:
            raise self.fail(op, f"cannot run its integer algorithm exactly: {reason}")
        return grids

    def with_zero(self, hv: HwValue) -> HwValue:
        """``hv`` in a container that holds the code 0: ``i1`` codes are only -1 and +1, so an
        op whose result can be 0 on them (relu, clamp, an average) reads them as ``i2`` codes
        (a zero-shift requant); any other value is returned as it is."""
        if self.declared(hv) != 1:
            return hv
        return HwValue(self.widen(hv, 2).value, hv.exps, 2)

    def relayout(self, op: Operation, hv: HwValue, layout: str) -> HwValue:
        """The same codes under another layout name (a no-op reshape); they need one
        exponent (per-channel ones that are all equal count)."""
        if (hv.exps != hv.exps.flat[0]).any():
            raise self.fail(op, "needs per-tensor exponents here")
        one = np.full((1,) * max(hv.rank, 1), hv.exps.flat[0], dtype=np.int64)
        t = self.result_type(hv.shape, one, self.declared(hv), layout, self.signed(hv))
        new = nh.ReshapeOp.create(operands=[hv.value], result_types=[t])
        self.emit(new, hv.value.name_hint)
        return HwValue(new.result, one, hv.bits, hv.codes)

    def channels_at(self, op: Operation, hv: HwValue, axis: int) -> HwValue:
        """``hv`` under a layout whose channel dim (its first ``C``) is ``axis``: exponents
        that vary along another dim are first aligned to the finest (exact left shifts),
        then the dims are renamed (``BMC`` -> ``BCD`` for ``axis`` 1)."""
        layout = self.layout_of(hv)
        if layout.find("C") == axis:
            return hv
        if (hv.exps != hv.exps.flat[0]).any():
            hv = self.shift_to(op, hv, np.array(hv.exps.max()).reshape((1,) * hv.rank))
        letters = ["D" if c == "C" else c for c in layout]
        letters[axis] = "C"
        return self.relayout(op, hv, "".join(letters))


class HwPattern(RewritePattern):
    """A lower-to-hw pattern: ``match_and_rewrite`` calls ``self.begin(op, rewriter)`` once it
    matches, emits nh ops through the returned state and records the result with ``set``."""

    def __init__(self, hw: HwLowering):
        self.hw = hw

    def begin(self, op: Operation, rewriter: PatternRewriter) -> HwLowering:
        """Start lowering ``op``: nh ops go before it, and the walker counts it as rewritten
        (recording a lowered value is this conversion's rewrite, even with no op emitted)."""
        self.hw.rewriter = rewriter
        rewriter.has_done_action = True
        return self.hw


def fused_into_fake_quant(op: Operation) -> bool:
    """Whether ``op`` is lowered by the fake-quant(s) reading it: an average pool (one exact
    division), a batch norm (a checked integer affine) or a float-only elementwise op (a
    lookup table), read by fake-quants only."""
    fused = isinstance(op, nf.AvgPoolOp | nf.AdaptiveAvgPoolOp | nf.BatchNormOp) or op.has_trait(
        LookupTable
    )
    return bool(
        fused
        and op.results
        and op.results[0].uses
        and all(isinstance(u.operation, FakeQuantOp) for u in op.results[0].uses)
    )


class ReportUnlowered(RewritePattern):
    """The last pattern: an op that no other pattern lowered has no exact integer form."""

    def __init__(self, hw: HwLowering):
        self.hw = hw

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if fused_into_fake_quant(op):
            return  # lowered together with the fake-quant that reads it
        raise self.hw.fail(
            op,
            "has no integer lowering"
            + (
                " (it is float-only: quantize its result with a fake-quant to get a lookup table)"
                if op.has_trait(LookupTable)
                else ""
            ),
        )
