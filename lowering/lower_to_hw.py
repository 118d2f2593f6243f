"""lower-to-hw: nq (nf ops on fake-quantized values) → nh (integer codes, shifts, requant).

The exactness contract (DESIGN.md): running the nq program in float64 and the nh program on
integers, then scaling each nh result by ``2**-exp``, gives bit-identical numbers. Every value
of the nq program that the lowering maps is a dyadic rational ``code * 2**-exp`` with a static
exponent per tensor or per channel, and each rule below computes the same rational exactly:

- a fake-quant of a constant is evaluated now into integer codes (``nh.constant``): the
  weights' and biases' "init" work is done by the compiler;
- a fake-quant of a runtime value becomes ``nh.requant`` (shift = exp in - exp out, with the
  fake-quant's rounding and saturation — the same function on the same rational);
- conv / linear / matmul of codes are exact integer sums into i32 at ``exp(x) + exp(w)``; a
  quantized bias is shifted left onto that exponent; a static worst-case bound of each
  accumulator (from the actual weight codes and the input's width) must fit i32;
- add / sub align both operands to the finer exponent by exact left shifts; mul adds exponents;
  a float constant operand (``x + 2``) is used at the exponent where it is an integer;
- relu, clamp, max pool, concat and reshape move codes (concat and per-channel reshapes first
  align to one exponent by left shifts);
- ``fake_quant(avg_pool(x))`` is one exact integer division (trunc and floor modes);
- ``fake_quant(f(x))`` for an elementwise float-only ``f`` (sigmoid, tanh, hardswish, ...) on
  an input of at most 8 bits is a lookup table computed from the same float64 kernels.

Anything else is reported by name with the reason (``LowerToHwError``). The function's inputs
become the codes of their first fake-quant (the quantization is recorded in the argument
attributes ``nq.bits``/``nq.exp``/``nq.rounding`` so runners can quantize float inputs), and
runtime tensors get ``BCMD`` layouts (``BCM``, ``BC`` for lower ranks), weights ``CCDD``.

    %xq = nq.fake_quant %x {bits = 8, exp = 5}         %acc = nh.conv %x, %w, %b : ... -> i32 <[9, 8]>
    %y = nf.conv %xq, %wq, %bq               ─▶        %y = nh.requant %acc {shift = [5, 4]} -> i8 <4>
    %yq = nq.fake_quant %y {bits = 8, exp = 4}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.functions import runtime_layout
from nanoir.dialects.nf import array_values, int_array
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.dialects.traits import LookupTable
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX
from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import (
    Attribute,
    Block,
    BlockArgument,
    Operation,
    OpResult,
    Region,
    SSAValue,
)
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

ACC_LIMIT = 2**31 - 1
WIDTHS = (2, 4, 8, 16, 32)


class LowerToHwError(DiagnosticException, Error):
    """The program has no exact integer form; the message names the op and the reason."""


def describe(op: Operation) -> str:
    """``'nf.conv' (%c)``: an op and its first result's name, for diagnostics."""
    name = op.results[0].name_hint if op.results and op.results[0].name_hint else None
    return f"'{op.name}'" + (f" (%{name})" if name else "")


def _expand(a: np.ndarray, rank: int) -> np.ndarray:
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
    """Layout of a constant: weights ``CC`` + ``D``s, vectors ``C``, others ``C`` + ``D``s."""
    if role == "weight":
        return "CC" + "D" * (rank - 2)
    return "C" + "D" * (rank - 1)


# --------------------------------------------------------------------------------------------
# Values being built: codes with exponents
# --------------------------------------------------------------------------------------------


@dataclass
class HwValue:
    """An nh SSA value and what the lowering knows about it."""

    value: SSAValue
    exps: np.ndarray
    """Exponents broadcastable against the value (ones except the channel axis)."""
    bits: int
    """Signed bits its codes need (1 = binary ±1)."""
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


def _fixed(exps: np.ndarray, rank: int, layout: str) -> nh.FixedAttr:
    """The ``#nh.fixed`` encoding of exponents shaped for a tensor of ``rank`` dims."""
    flat = exps.reshape(-1)
    if flat.size == 0 or (flat == flat[0]).all():
        return nh.FixedAttr(int(flat[0]) if flat.size else 0, layout)
    axis = layout.find("C")
    full = exps.reshape((1,) * (rank - exps.ndim) + exps.shape)
    varying = [i for i, d in enumerate(full.shape) if d > 1]
    if varying != [axis]:
        raise ValueError(f"exponents vary along dims {varying}, not only the channel dim {axis} "
                         f"of layout {layout}")
    return nh.FixedAttr([int(e) for e in full.reshape(-1)], layout)


def _dense_int(codes: np.ndarray) -> DenseIntOrFPElementsAttr:
    storage = 8 if codes.size == 0 or (codes.min() >= -128 and codes.max() <= 127) else (
        16 if codes.min() >= -(2**15) and codes.max() < 2**15 else 32)
    dtype = {8: "<i1", 16: "<i2", 32: "<i4"}[storage]
    a = np.ascontiguousarray(codes, dtype=dtype)
    return DenseIntOrFPElementsAttr(TensorType(IntegerType(storage), a.shape),
                                    BytesAttr(a.tobytes()))


def _bits_of_codes(codes: np.ndarray) -> int:
    if codes.size == 0:
        return 2
    lo, hi = int(codes.min()), int(codes.max())
    if set(np.unique(codes).tolist()) <= {-1, 1} and lo < 0 < hi:
        return 2
    need = max(hi.bit_length(), (-lo - 1).bit_length() if lo < 0 else 0) + 1
    return max(need, 2)


def _bits_of_bound(bound: np.ndarray) -> int:
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


# --------------------------------------------------------------------------------------------
# The lowering
# --------------------------------------------------------------------------------------------


class HwLowering:
    """Translate one nq function into a new nh function, op by op."""

    def __init__(self, func: FuncOp, *, allow_overflow: bool = False):
        self.func = func
        self.allow_overflow = allow_overflow
        self.block = Block()
        self.values: dict[SSAValue, HwValue] = {}
        self.floats: dict[SSAValue, np.ndarray] = {}
        """Float constants not (yet) quantized, by nq value."""
        self.arg_attrs: list[DictionaryAttr] = []
        self.input_index: dict[SSAValue, int] = {}
        self.late_bias: HwValue | None = None
        self.acc_bits = 32
        self.handlers: dict[type[Operation], Callable[[Any], None]] = {
            nf.ConstantOp: self.constant,
            FakeQuantOp: self.fake_quant,
            nf.ConvOp: self.conv,
            nf.LinearOp: self.linear,
            nf.MatmulOp: self.matmul,
            nf.AddOp: self.add_sub,
            nf.SubOp: self.add_sub,
            nf.MulOp: self.mul,
            nf.DivOp: self.div,
            nf.ReluOp: self.relu,
            nf.ClampOp: self.clamp,
            nf.MaxPoolOp: self.max_pool,
            nf.ConcatOp: self.concat,
            nf.ReshapeOp: self.reshape,
        }

    # -- helpers -----------------------------------------------------------------------------

    def fail(self, op: Operation, reason: str) -> LowerToHwError:
        return LowerToHwError(f"lower-to-hw: {describe(op)} {reason}")

    def emit(self, op: Operation, name: str | None = None) -> Operation:
        self.block.add_op(op)
        if name and op.results:
            try:
                op.results[0].name_hint = name
            except ValueError:
                pass
        return op

    def get(self, op: Operation, value: SSAValue) -> HwValue:
        """The lowered form of an operand, or an error saying why there is none."""
        if value in self.values:
            return self.values[value]
        if value in self.floats:
            return self.float_constant(op, value)
        src = value.op.name if isinstance(value, OpResult) else "a function argument"
        raise self.fail(op, f"reads a float value from {src} that is not quantized; insert "
                            "nq.fake_quant (or run quantize) before lowering to hw")

    def float_constant(self, op: Operation, value: SSAValue,
                       data: np.ndarray | None = None) -> HwValue:
        """An unquantized float constant used at the exponent where it is exact (``x + 2``)."""
        if data is None:
            data = self.floats[value]
        k = dyadic_exponent(data)
        if k is None:
            raise self.fail(op, f"uses a float constant {data.reshape(-1)[:4].tolist()} that "
                                "is not a dyadic rational; quantize it first")
        codes = np.ldexp(data, k).astype(np.int64)
        if codes.ndim == 0:
            codes = codes.reshape(1)
        return self.make_constant(codes, np.array(k).reshape((1,) * codes.ndim), "const", None)

    def make_constant(self, codes: np.ndarray, exps: np.ndarray, role: str,
                      name: str | None, bits: int | None = None) -> HwValue:
        bits = _bits_of_codes(codes) if bits is None else bits
        width = container_width(bits)
        exps_full = _expand(np.asarray(exps, dtype=np.int64), codes.ndim)
        varying = [i for i, d in enumerate(exps_full.shape) if d > 1]
        if role == "weight" or not varying:
            layout = constant_layout(codes.ndim, role)
        else:
            layout = "".join("C" if i == varying[0] else "D" for i in range(codes.ndim))
        t = TensorType(IntegerType(width), codes.shape, _fixed(exps_full, codes.ndim, layout))
        op = nh.ConstantOp(_dense_int(codes), t, name=name)
        self.emit(op, name.replace(".", "_") if name else None)
        return HwValue(op.result, exps_full, bits, codes)

    def result_type(self, shape: Sequence[int], exps: np.ndarray, width: int,
                    layout: str | None = None) -> TensorType:
        layout = layout or runtime_layout(len(shape))
        return TensorType(IntegerType(width), shape, _fixed(exps, len(shape), layout))

    @staticmethod
    def declared(hv: HwValue) -> int:
        """The element width in ``hv``'s nh type (what the verifier reasons about)."""
        t = hv.value.type
        assert isinstance(t, TensorType) and isinstance(t.get_element_type(), IntegerType)
        return t.get_element_type().width.data

    def layout_of(self, hv: HwValue) -> str:
        t = hv.value.type
        assert isinstance(t, TensorType) and isinstance(t.encoding, nh.FixedAttr)
        return t.encoding.layout.data

    def shift_to(self, op: Operation, hv: HwValue, exps: np.ndarray) -> HwValue:
        """Move ``hv`` onto finer exponents by an exact left shift (i32 result)."""
        rank = max(hv.rank, exps.ndim)
        current = _expand(hv.exps, rank)
        target = np.broadcast_to(_expand(exps, rank), np.broadcast_shapes(
            current.shape, _expand(exps, rank).shape))
        shift = target - current
        if (shift == 0).all():
            return hv
        if (shift < 0).any():
            raise self.fail(op, "would need a right shift to align operands (inexact)")
        bits = hv.bits + int(shift.max()) + (1 if hv.bits == 1 else 0)
        if bits > 32:
            raise self.fail(op, f"aligning operands needs {bits}-bit codes, more than i32")
        if hv.codes is not None:
            codes = _expand(hv.codes, rank).astype(np.int64) << shift
            return self.make_constant(codes, target, "const", None)
        if rank != hv.rank:
            raise self.fail(op, "broadcasts a runtime value of lower rank; not supported on hw")
        layout = self.layout_of(hv)
        width = max(container_width(bits), self.declared(hv))
        t = self.result_type(hv.shape, target, width, layout)
        shifts = self._shift_list(op, -shift, layout, rank)
        req = nh.RequantOp.create(operands=[hv.value], result_types=[t],
                                  properties={"shift": int_array(shifts)})
        self.emit(req, hv.value.name_hint)
        return HwValue(req.result, np.asarray(target).copy(), bits)

    def _shift_list(self, op: Operation, shift: np.ndarray, layout: str, rank: int) -> list[int]:
        flat = shift.reshape(-1)
        if (flat == flat[0]).all():
            return [int(flat[0])]
        axis = layout.find("C")
        full = shift.reshape((1,) * (rank - shift.ndim) + shift.shape)
        if [i for i, d in enumerate(full.shape) if d > 1] != [axis]:
            raise self.fail(op, "needs shifts that vary along a non-channel dim")
        return [int(s) for s in full.reshape(-1)]

    # -- ops ---------------------------------------------------------------------------------

    def constant(self, op: nf.ConstantOp) -> None:
        self.floats[op.result] = dense_to_numpy(op.value).astype(np.float64)

    def fake_quant(self, op: FakeQuantOp) -> None:
        bits, mode = op.bits.value.data, op.rounding_mode
        k = dense_to_numpy(op.exp).astype(np.int64)
        nh_exp = -k if bits == 1 else k
        src = op.input
        name = op.result.name_hint or src.name_hint
        if src in self.floats:
            data = self.floats[src]
            codes = quant.quantize_to_int(data, bits, k, mode).astype(np.int64)
            exps = self._reduce_exps(op, np.broadcast_to(_expand(nh_exp, data.ndim), codes.shape),
                                     codes.ndim)
            role = "weight" if any(
                isinstance(u.operation, nf.ConvOp | nf.LinearOp) and u.index == 1
                for u in op.result.uses) else "const"
            if codes.ndim == 0:
                codes, exps = codes.reshape(1), exps.reshape(1)
            const_name = src.op.sym_name.data if isinstance(src, OpResult) and isinstance(
                src.op, nf.ConstantOp) and src.op.sym_name is not None else None
            self.values[op.result] = self.make_constant(codes, exps, role, const_name, bits)
            return
        if isinstance(src, BlockArgument) and src not in self.values:
            self.values[op.result] = self.input_codes(op, src, bits, k, nh_exp, mode)
            return
        producer = src.op if isinstance(src, OpResult) else None
        if isinstance(producer, nf.AvgPoolOp | nf.AdaptiveAvgPoolOp) and src not in self.values:
            self.values[op.result] = self.avg_pool_requant(producer, op, bits, nh_exp, mode)
            return
        if producer is not None and src not in self.values and producer.has_trait(LookupTable):
            self.values[op.result] = self.lookup_table(producer, op, bits, k, nh_exp, mode)
            return
        hv = self.get(op, src)
        self.values[op.result] = self.requant(op, hv, bits, nh_exp, mode, name)

    def _reduce_exps(self, op: Operation, exps: np.ndarray, rank: int) -> np.ndarray:
        """Exponents of a constant, one per channel (dim 0) or one in all."""
        flat = exps.reshape(-1)
        if flat.size == 0 or (flat == flat[0]).all():
            return np.array(int(flat[0]) if flat.size else 0).reshape((1,) * max(rank, 1))
        per_channel = exps.reshape(exps.shape[0], -1)
        if (per_channel != per_channel[:, :1]).any():
            raise self.fail(op, "has exponents that vary along more than the first dim; the hw "
                                "level supports per-tensor or per-channel exponents")
        return per_channel[:, 0].reshape((exps.shape[0],) + (1,) * (rank - 1))

    def input_codes(self, op: FakeQuantOp, arg: BlockArgument, bits: int, k: np.ndarray,
                    nh_exp: np.ndarray, mode: RoundingMode) -> HwValue:
        """A function input arrives as the codes of its fake-quant."""
        others = [u.operation for u in arg.uses if u.operation is not op]
        if others:
            raise self.fail(others[0], "reads a function input before its fake-quant; hw "
                                       "inputs are codes")
        t = arg.type
        assert isinstance(t, TensorType)
        shape = t.get_shape()
        exps = nh_exp.reshape((1,) * (len(shape) - nh_exp.ndim) + nh_exp.shape)
        try:
            new_t = self.result_type(shape, exps, container_width(bits))
        except ValueError as e:
            raise self.fail(op, f"cannot be a hw input: {e}") from None
        new_arg = self.block.insert_arg(new_t, len(self.block.args))
        if arg.name_hint:
            new_arg.name_hint = arg.name_hint
        self.arg_attrs.append(DictionaryAttr({
            "nq.bits": IntegerAttr(bits, i64),
            "nq.exp": op.exp,
            "nq.rounding": RoundingModeAttr(mode),
        }))
        self.input_index[arg] = len(self.block.args) - 1
        return HwValue(new_arg, exps, bits)

    def requant(self, op: Operation, hv: HwValue, bits: int, nh_exp: np.ndarray,
                mode: RoundingMode, name: str | None) -> HwValue:
        rank = hv.rank
        out_exps = nh_exp.reshape((1,) * (rank - nh_exp.ndim) + nh_exp.shape) if (
            nh_exp.ndim <= rank) else nh_exp
        if (hv.exps == out_exps).all() and hv.bits <= bits and hv.bits != 1 and bits != 1:
            # Already on this grid and within range: the fake-quant is the identity. The value
            # still takes the fake-quant's exponents: per-channel exponents that are all equal
            # become per-tensor ones (the nh type already says so, see _fixed), so that ops
            # needing per-tensor exponents (lookup tables, matmul) accept the result.
            if out_exps.size < hv.exps.size:
                return HwValue(hv.value, out_exps.copy(), hv.bits, hv.codes)
            return hv
        if hv.codes is not None:
            # A constant expression: requantize now.
            real_shift = hv.exps - out_exps
            codes = quant.requant(hv.codes, real_shift, bits, mode).astype(np.int64)
            return self.make_constant(codes, out_exps, "const", None, bits)
        layout = self.layout_of(hv)
        try:
            t = self.result_type(hv.shape, out_exps, container_width(bits), layout)
        except ValueError as e:
            raise self.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        shift = hv.exps - out_exps
        req = nh.RequantOp.create(
            operands=[hv.value], result_types=[t],
            properties={"shift": int_array(self._shift_list(op, shift, layout, rank)),
                        "rounding": RoundingModeAttr(mode)},
        )
        self.emit(req, name)
        return HwValue(req.result, out_exps, bits)

    def _accumulate(self, op: Operation, x: HwValue, w: HwValue, bias: SSAValue | None,
                    out_c: int, channel_axis: int, rank: int,
                    bound_terms: np.ndarray) -> tuple[np.ndarray, SSAValue | None, np.ndarray]:
        """Accumulator exponents per output channel, the aligned i32 bias, and the bound."""
        if w.codes is None:
            raise self.fail(op, "has a runtime weight; only constant weights lower to hw")
        w_exps = np.broadcast_to(w.exps.reshape(-1), (out_c,)) if w.exps.size in (1, out_c) \
            else None
        if w_exps is None:
            raise self.fail(op, "has weight exponents that are not per output channel")
        x_flat = x.exps.reshape(-1)
        if x_flat.size == 1:
            x_per_out = np.full(out_c, int(x_flat[0]))
        else:
            groups = op.groups.value.data if isinstance(op, nf.ConvOp) else 1
            per_group = x_flat.reshape(groups, -1)
            if (per_group != per_group[:, :1]).any():
                raise self.fail(op, "sums input channels with different exponents; "
                                    "requantize its input to one exponent")
            x_per_out = np.repeat(per_group[:, 0], out_c // groups)
        acc_exps = (x_per_out + w_exps).astype(np.int64)
        bound = bound_terms.astype(object) * x.max_abs
        bias_value = None
        if bias is not None:
            b = self.get(op, bias)
            if b.codes is None:
                raise self.fail(op, "has a runtime bias; only constant biases lower to hw")
            b_exps = np.broadcast_to(b.exps.reshape(-1), (out_c,))
            shift = acc_exps - b_exps
            if (shift < 0).any():
                # The bias is on a finer grid than the products: shift the sums left onto it
                # after the convolution and add the bias there (see _add_late_bias).
                finer = np.maximum(acc_exps, b_exps)
                scale = [2 ** int(d) for d in (finer - acc_exps)]
                aligned = bound * scale + np.abs(b.codes.reshape(-1)).astype(object)
                worst = max((int(v) for v in aligned), default=0)
                if worst > ACC_LIMIT and not self.allow_overflow:
                    raise self.fail(op, f"may overflow i32 once aligned to its bias: worst case "
                                        f"|acc| = {worst} > {ACC_LIMIT}")
                shape = [1] * rank
                shape[channel_axis] = out_c
                self.late_bias = b
                # The bound of the sums themselves: _add_late_bias counts the shift's bits.
                return acc_exps.reshape(shape), None, np.asarray(bound)
            codes = b.codes.reshape(-1).astype(object) * [2 ** int(s) for s in shift]
            if any(abs(int(c)) > ACC_LIMIT for c in codes):
                raise self.fail(op, "has a bias that does not fit i32 at the accumulator "
                                    "exponent")
            codes = np.array([int(c) for c in codes], dtype=np.int64)
            bound = bound + np.abs(codes).astype(object)
            t = TensorType(IntegerType(32), [out_c], _fixed(acc_exps, 1, "C"))
            name = None
            if isinstance(bias, OpResult) and isinstance(bias.op, FakeQuantOp):
                src = bias.op.input
                if isinstance(src, OpResult) and isinstance(src.op, nf.ConstantOp) and \
                        src.op.sym_name is not None:
                    name = src.op.sym_name.data
            const = nh.ConstantOp(_dense_int(codes), t, name=name)
            self.emit(const)
            bias_value = const.result
        worst = max((int(v) for v in bound), default=0)
        if worst > ACC_LIMIT and not self.allow_overflow:
            raise self.fail(op, f"may overflow its i32 accumulator: worst case |acc| = {worst} "
                                f"> {ACC_LIMIT} (input codes up to {x.max_abs})")
        shape = [1] * rank
        shape[channel_axis] = out_c
        return acc_exps.reshape(shape), bias_value, np.asarray(bound)

    def conv(self, op: nf.ConvOp) -> None:
        x, w = self.get(op, op.input), self.get(op, op.weight)
        groups = op.groups.value.data
        if x.exps.size > 1:
            per_group = x.exps.reshape(groups, -1)
            if (per_group != per_group[:, :1]).any():
                # Channels summed together must share an exponent: align each group to its
                # finest one (exact left shifts).
                target = np.repeat(per_group.max(axis=1), per_group.shape[1])
                x = self.shift_to(op, x, target.reshape(x.exps.shape))
        out_shape = nf.tensor_shape(op.result)
        out_c = out_shape[1]
        terms = np.abs(w.codes).reshape(out_c, -1).sum(axis=1) if w.codes is not None else \
            np.zeros(out_c)
        acc_exps, bias, bound = self._accumulate(op, x, w, op.bias, out_c, 1, len(out_shape),
                                                 terms)
        self.acc_bits = _bits_of_bound(bound)
        t = self.result_type(out_shape, acc_exps, 32)
        props: dict[str, Attribute] = {"groups": op.groups}
        for key in ("strides", "pads", "dilations"):
            if getattr(op, key) is not None:
                props[key] = getattr(op, key)
        new = nh.ConvOp.create(operands=[x.value, w.value] + ([bias] if bias else []),
                               result_types=[t], properties=props)
        self.emit(new, op.result.name_hint)
        self.values[op.result] = self._add_late_bias(
            op, HwValue(new.result, acc_exps, self.acc_bits), 1)

    def linear(self, op: nf.LinearOp) -> None:
        x, w = self.get(op, op.input), self.get(op, op.weight)
        out_shape = nf.tensor_shape(op.result)
        out_c = out_shape[-1]
        if x.exps.size != 1:
            # Features are summed together: bring them to the finest exponent first (exact).
            x = self.shift_to(op, x, np.array(x.exps.max()).reshape((1,) * x.rank))
        terms = np.abs(w.codes).sum(axis=1) if w.codes is not None else np.zeros(out_c)
        rank = len(out_shape)
        acc_exps, bias, bound = self._accumulate(op, x, w, op.bias, out_c, rank - 1, rank,
                                                 terms)
        self.acc_bits = _bits_of_bound(bound)
        layout = "BC" if rank == 2 else "B" + "M" * (rank - 2) + "C"
        t = self.result_type(out_shape, acc_exps, 32, layout)
        if self.layout_of(x) != layout and x.rank == rank:
            x = self.relayout(op, x, layout)
        new = nh.LinearOp.create(operands=[x.value, w.value] + ([bias] if bias else []),
                                 result_types=[t])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = self._add_late_bias(
            op, HwValue(new.result, acc_exps, self.acc_bits), rank - 1)

    def _add_late_bias(self, op: nf.ConvOp | nf.LinearOp, acc: HwValue, axis: int) -> HwValue:
        """``acc << s + bias`` when the bias is finer than the products (exact, checked)."""
        b, self.late_bias = self.late_bias, None
        if b is None:
            return acc
        rank = acc.rank
        shape = [1] * rank
        shape[axis] = -1
        b_exps = np.broadcast_to(b.exps.reshape(-1), (acc.exps.size,)).reshape(shape)
        target = np.maximum(acc.exps, b_exps)
        shifted = self.shift_to(op, acc, target)
        codes = b.codes.reshape(shape).astype(np.int64) << (target - b_exps)
        bias = self.make_constant(codes, target, "const", None)
        t = self.result_type(acc.shape, target, 32, self.layout_of(acc))
        new = nh.AddOp.create(operands=[shifted.value, bias.value], result_types=[t])
        self.emit(new, op.result.name_hint)
        return HwValue(new.result, target, min(max(shifted.bits, bias.bits) + 1, 32))

    def relayout(self, op: Operation, hv: HwValue, layout: str) -> HwValue:
        """The same codes under another layout name (a no-op reshape)."""
        if hv.exps.size != 1:
            raise self.fail(op, "needs per-tensor exponents here")
        t = self.result_type(hv.shape, hv.exps, self.declared(hv), layout)
        new = nh.ReshapeOp.create(operands=[hv.value], result_types=[t])
        self.emit(new, hv.value.name_hint)
        return HwValue(new.result, hv.exps, hv.bits, hv.codes)

    def matmul(self, op: nf.MatmulOp) -> None:
        a, b = self.get(op, op.lhs), self.get(op, op.rhs)
        if a.exps.size != 1 or b.exps.size != 1:
            raise self.fail(op, "needs per-tensor exponents on both operands")
        inner = nf.tensor_shape(op.lhs)[-1]
        worst = inner * a.max_abs * b.max_abs
        if worst > ACC_LIMIT and not self.allow_overflow:
            raise self.fail(op, f"may overflow its i32 accumulator: worst case |acc| = {worst}")
        exps = np.array(int(a.exps.reshape(-1)[0] + b.exps.reshape(-1)[0]))
        out_shape = nf.tensor_shape(op.result)
        layout = self.layout_of(a) if a.rank == len(out_shape) else runtime_layout(len(out_shape))
        t = self.result_type(out_shape, exps, 32, layout)
        new = nh.MatmulOp.create(operands=[a.value, b.value], result_types=[t])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, exps.reshape((1,) * len(out_shape)), 32)

    def _runtime_layout_for(self, shape: Sequence[int], *hvs: HwValue) -> str:
        for hv in hvs:
            if hv.codes is None and hv.rank == len(shape):
                return self.layout_of(hv)
        return runtime_layout(len(shape))

    def add_sub(self, op: nf.AddOp | nf.SubOp) -> None:
        """Exact sum: both operands shifted left onto the finer exponent, one bit of growth."""
        a, b = self.get(op, op.lhs), self.get(op, op.rhs)
        out_shape = nf.tensor_shape(op.result)
        rank = len(out_shape)
        target = np.maximum(_expand(a.exps, rank), _expand(b.exps, rank))
        a2, b2 = self.shift_to(op, a, target), self.shift_to(op, b, target)
        bits = max(a2.bits, b2.bits, 2) + 1
        width = min(max(self.declared(a2), self.declared(b2), 2) + 1, 32)
        layout = self._runtime_layout_for(out_shape, a2, b2)
        try:
            t = self.result_type(out_shape, target, container_width(width), layout)
        except ValueError as e:
            raise self.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        cls = nh.AddOp if isinstance(op, nf.AddOp) else nh.SubOp
        new = cls.create(operands=[a2.value, b2.value], result_types=[t])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, target, bits)

    def mul(self, op: nf.MulOp) -> None:
        self.product(op, self.get(op, op.lhs), self.get(op, op.rhs))

    def product(self, op: nf.MulOp | nf.DivOp, a: HwValue, b: HwValue) -> None:
        """Exact product of codes; exponents add."""
        out_shape = nf.tensor_shape(op.result)
        rank = len(out_shape)
        exps = _expand(a.exps, rank) + _expand(b.exps, rank)
        bits = (1 if a.bits == 1 else a.bits) + (1 if b.bits == 1 else b.bits)
        if a.bits == 1 and b.bits == 1:
            bits = 2
        if bits > 32:
            raise self.fail(op, f"needs {bits}-bit products, more than i32")
        width = min(self.declared(a) + self.declared(b), 32)
        layout = self._runtime_layout_for(out_shape, a, b)
        try:
            t = self.result_type(out_shape, exps, container_width(width), layout)
        except ValueError as e:
            raise self.fail(op, f"has exponents the hw level cannot carry: {e}") from None
        new = nh.MulOp.create(operands=[a.value, b.value], result_types=[t])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, exps, bits)

    def div(self, op: nf.DivOp) -> None:
        """Division by a constant whose reciprocal is dyadic (a power of two): a product."""
        if op.rhs not in self.floats:
            raise self.fail(op, "divides by a runtime value; only division by a constant "
                                "with a dyadic reciprocal (a power of two) lowers to hw")
        inverse = 1.0 / self.floats[op.rhs]
        if dyadic_exponent(inverse) is None or not np.array_equal(
                self.floats[op.rhs] * inverse, np.ones_like(inverse)):
            raise self.fail(op, f"divides by {self.floats[op.rhs].reshape(-1)[:4].tolist()}, "
                                "whose reciprocal is not a dyadic rational")
        a = self.get(op, op.lhs)
        b = self.float_constant(op, op.rhs, inverse)
        self.product(op, a, b)

    def relu(self, op: nf.ReluOp) -> None:
        a = self.get(op, op.input)
        new = nh.ReluOp.create(operands=[a.value], result_types=[a.value.type])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, a.exps, a.bits)

    def clamp(self, op: nf.ClampOp) -> None:
        """Clamp on codes, on a grid fine enough that both bounds are whole codes."""
        a = self.get(op, op.input)
        bounds = [b.value.data for b in (op.min, op.max) if b is not None]
        needed = dyadic_exponent(np.array(bounds)) if bounds else None
        if bounds and needed is None:
            raise self.fail(op, f"clamps at {bounds}, which are not dyadic rationals")
        common = int(a.exps.max()) if needed is None else max(int(a.exps.max()), needed)
        if a.exps.size > 1 or common != int(a.exps.max()) or bounds and (a.exps != common).any():
            a = self.shift_to(op, a, np.array(common).reshape((1,) * a.rank))
        props: dict[str, Attribute] = {}
        for key, bound in (("min", op.min), ("max", op.max)):
            if bound is not None:
                props[key] = IntegerAttr(int(np.ldexp(bound.value.data, common)), i64)
        new = nh.ClampOp.create(operands=[a.value], result_types=[a.value.type],
                                properties=props)
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, a.exps, a.bits)

    def max_pool(self, op: nf.MaxPoolOp) -> None:
        a = self.get(op, op.input)
        t = self.result_type(nf.tensor_shape(op.result), a.exps, self.declared(a),
                             self.layout_of(a))
        props = {k: v for k, v in op.properties.items()}
        new = nh.MaxPoolOp.create(operands=[a.value], result_types=[t], properties=props)
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, a.exps, a.bits)

    def avg_pool_requant(self, pool: nf.AvgPoolOp | nf.AdaptiveAvgPoolOp, fq: FakeQuantOp,
                         bits: int, nh_exp: np.ndarray, mode: RoundingMode) -> HwValue:
        """``fake_quant(avg_pool(x))`` as one exact integer division (trunc/floor)."""
        if mode not in (RoundingMode.TRUNC, RoundingMode.FLOOR):
            raise self.fail(pool, f"is rounded with {mode.value} by its fake-quant; only trunc "
                                  "and floor make average pooling exact on integers")
        if bits == 1:
            raise self.fail(fq, "quantizes an average to 1 bit; not supported on hw")
        x = self.get(pool, pool.input)
        in_shape = nf.tensor_shape(pool.input)
        props: dict[str, Attribute]
        if isinstance(pool, nf.AdaptiveAvgPoolOp):
            out = array_values(pool.output_size) or ()
            spatial = in_shape[2:]
            if any(s == DYNAMIC_INDEX or s % o for s, o in zip(spatial, out)):
                raise self.fail(pool, "has windows of different sizes (input not divisible by "
                                      "the output size)")
            kernel = [s // o for s, o in zip(spatial, out)]
            props = {"kernel": int_array(kernel), "strides": int_array(kernel)}
        else:
            props = {k: v for k, v in pool.properties.items()}
        out_exps = _expand(nh_exp, x.rank)
        finer = np.maximum(x.exps, out_exps)
        if (finer != x.exps).any():
            # A finer output grid: shift the codes left first, so one division remains.
            x = self.shift_to(pool, x, finer)
        t = self.result_type(nf.tensor_shape(pool.result), x.exps, self.declared(x),
                             self.layout_of(x))
        props["rounding"] = RoundingModeAttr(mode)
        new = nh.AvgPoolOp.create(operands=[x.value], result_types=[t], properties=props)
        self.emit(new, pool.result.name_hint)
        pooled = HwValue(new.result, x.exps, x.bits)
        # trunc(trunc(S / n) / 2**s) == trunc(S / (n 2**s)), and the same for floor.
        return self.requant(fq, pooled, bits, nh_exp, mode, fq.result.name_hint)

    def lookup_table(self, producer: Operation, fq: FakeQuantOp, bits: int, k: np.ndarray,
                     nh_exp: np.ndarray, mode: RoundingMode) -> HwValue:
        """``fake_quant(f(x))`` for an elementwise float-only ``f`` as an exact table."""
        x = self.get(producer, producer.operands[0])
        width = self.declared(x)  # the table covers every code the input's type can hold
        if width > 8:
            raise self.fail(producer, f"has no integer form and its i{width} input is too "
                                      "wide for a lookup table (at most i8)")
        if x.exps.size != 1 or nh_exp.size != 1:
            raise self.fail(producer, "needs per-tensor exponents for a lookup table")
        others = [u for u in producer.results[0].uses if u.operation is not fq]
        if others:
            raise self.fail(producer, "is used other than by one fake-quant; its float result "
                                      "has no integer form")
        lo, hi = (-1, 1) if width == 1 else (quant.qmin(width), quant.qmax(width))
        codes = np.array([-1, 1]) if width == 1 else np.arange(lo, hi + 1)
        e_in = int(x.exps.reshape(-1)[0])
        reals = np.ldexp(codes.astype(np.float64), -e_in)
        lut = producer.get_trait(LookupTable)
        assert lut is not None
        values = lut.evaluate(producer, reals)
        table = quant.quantize_to_int(values, bits, k.reshape(-1)[:1], mode).astype(np.int64)
        out_exps = np.asarray(nh_exp).reshape((1,) * x.rank)
        t = self.result_type(x.shape, out_exps, container_width(bits), self.layout_of(x))
        new = nh.LutOp.create(operands=[x.value], result_types=[t],
                              properties={"table": int_array(table.tolist())})
        self.emit(new, fq.result.name_hint)
        return HwValue(new.result, out_exps, bits)

    def concat(self, op: nf.ConcatOp) -> None:
        parts = [self.get(op, v) for v in op.inputs]
        axis = op.axis.value.data % len(nf.tensor_shape(op.result))
        rank = parts[0].rank
        layouts = {self.layout_of(p) for p in parts if p.codes is None}
        layout = layouts.pop() if len(layouts) == 1 else runtime_layout(rank)
        per_channel_axis = layout.find("C") == axis and any(p.exps.size > 1 for p in parts)
        if per_channel_axis:
            full = [np.broadcast_to(p.exps.reshape((1,) * (rank - p.exps.ndim) + p.exps.shape),
                                    [1] * axis + [p.shape[axis]] + [1] * (rank - axis - 1))
                    for p in parts]
            exps = np.concatenate(full, axis=axis)
        else:
            target = parts[0].exps.reshape(-1).max()
            for p in parts:
                if p.exps.size != 1:
                    raise self.fail(op, "joins per-channel exponents along a non-channel dim")
                target = max(target, p.exps.reshape(-1)[0])
            parts = [self.shift_to(op, p, np.array(target).reshape((1,) * rank)) for p in parts]
            exps = np.array(target).reshape((1,) * rank)
        bits = max(p.bits for p in parts)
        width = max(self.declared(p) for p in parts)
        t = self.result_type(nf.tensor_shape(op.result), exps, width, layout)
        if len({self.declared(p) for p in parts}) > 1:
            parts = [self.widen(op, p, width) for p in parts]
        new = nh.ConcatOp.create(operands=[p.value for p in parts], result_types=[t],
                                 properties={"axis": IntegerAttr(axis, i64)})
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, exps, bits)

    def widen(self, op: Operation, hv: HwValue, width: int) -> HwValue:
        if self.declared(hv) == width:
            return hv
        t = self.result_type(hv.shape, hv.exps, width, self.layout_of(hv))
        req = nh.RequantOp.create(operands=[hv.value], result_types=[t],
                                  properties={"shift": int_array([0])})
        self.emit(req, hv.value.name_hint)
        return HwValue(req.result, hv.exps, hv.bits)

    def reshape(self, op: nf.ReshapeOp) -> None:
        a = self.get(op, op.input)
        out_shape = nf.tensor_shape(op.result)
        if a.exps.size != 1:
            if a.rank >= 2 and len(out_shape) >= 2 and a.shape[1] == out_shape[1]:
                exps = a.exps  # channels stay in dim 1
            else:
                a = self.shift_to(op, a, np.array(a.exps.max()).reshape((1,) * a.rank))
                exps = a.exps
        else:
            exps = a.exps
        exps = exps.reshape((1,) * len(out_shape)) if exps.size == 1 else exps.reshape(
            (1, -1) + (1,) * (len(out_shape) - 2))
        t = self.result_type(out_shape, exps, self.declared(a))
        new = nh.ReshapeOp.create(operands=[a.value], result_types=[t])
        self.emit(new, op.result.name_hint)
        self.values[op.result] = HwValue(new.result, exps, a.bits, None)

    # -- driver ------------------------------------------------------------------------------

    def run(self) -> FuncOp:
        block = self.func.body.block
        results: list[SSAValue] = []
        for op in block.ops:
            if isinstance(op, ReturnOp):
                results = [self.get(op, v).value for v in op.arguments]
                continue
            if isinstance(op, FakeQuantOp) and op.result in self.values:
                continue
            fused = isinstance(op, nf.AvgPoolOp | nf.AdaptiveAvgPoolOp) or op.has_trait(LookupTable)
            if fused and all(isinstance(u.operation, FakeQuantOp) for u in op.results[0].uses) \
                    and op.results[0].uses:
                continue  # lowered together with the fake-quant that reads it
            handler = self.handlers.get(type(op))
            if handler is None:
                raise self.fail(op, "has no integer lowering"
                                + (" (it is float-only: quantize its result with a "
                                   "fake-quant to get a lookup table)" if op.has_trait(LookupTable)
                                   else ""))
            handler(op)
        missing = [a for a in block.args if a not in self.input_index]
        if missing:
            raise LowerToHwError("lower-to-hw: function input "
                                 f"%{missing[0].name_hint or missing[0].index} is never "
                                 "fake-quantized; hw inputs are codes")
        order = sorted(block.args, key=lambda a: self.input_index[a])
        if [a.index for a in order] != list(range(len(block.args))):
            raise LowerToHwError("lower-to-hw: function inputs are quantized out of order")
        ftype = FunctionType.from_lists([a.type for a in self.block.args],
                                        [r.type for r in results])
        self.block.add_op(ReturnOp(*results))
        return FuncOp(self.func.sym_name.data, ftype, Region(self.block),
                      arg_attrs=ArrayAttr(self.arg_attrs))


def lower_to_hw(module: ModuleOp, *, allow_overflow: bool = False) -> ModuleOp:
    """Lower every function of an nq program to nh, in place; returns the module."""
    from xdsl.transforms.dead_code_elimination import region_dce

    for op in list(module.body.block.ops):
        if isinstance(op, FuncOp):
            new = HwLowering(op, allow_overflow=allow_overflow).run()
            # Constants that were only stepping stones (a bias before its alignment) go away.
            region_dce(new.body)
            module.body.block.insert_op_before(new, op)
            op.detach()
            op.erase(safe_erase=False)
    return module


@dataclass(frozen=True)
class LowerToHwPass(ModulePass):
    """Lower a quantized (nq) program to integer nh ops, exactly."""

    name = "lower-to-hw"

    allow_overflow: bool = False
    """Accept accumulators whose worst case may exceed i32 (otherwise an error)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_to_hw(op, allow_overflow=self.allow_overflow)


__all__ = ["LowerToHwError", "LowerToHwPass", "lower_to_hw"]
