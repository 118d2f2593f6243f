"""lower-to-hw patterns rooted at ``nq.fake_quant``, tried in this order:

- ``FoldConstantFakeQuant``: a fake-quant of a constant is evaluated now into integer codes
  (``nh.constant``): the weights' and biases' "init" work is done by the compiler;
- ``QuantizeInput``: a function input becomes the codes of its fake-quant (the quantization
  is recorded in the argument attributes ``nq.bits``/``nq.exp``/``nq.rounding``);
- ``FuseAvgPoolFakeQuant``: ``fake_quant(avg_pool(x))`` is one exact integer division (trunc
  and floor modes): ``trunc(trunc(S / n) / 2**s) == trunc(S / (n 2**s))``, the same for floor;
  to 1 bit, the sign of ``floor(S / n)``, which is the sign of ``S``;
- ``FuseLookupTableFakeQuant``: ``fake_quant(f(x))`` for an elementwise float-only ``f``
  (trait ``LookupTable``: sigmoid, tanh, hardswish, SiLU, GELU, ...) on an input of at most
  16 bits is a table computed from the same float64 kernels (dense up to 8 bits, segmented
  above; one sub-table per distinct pair of per-channel exponents);
- ``RequantFakeQuant``: any other fake-quant is ``nh.requant`` (shift = exp in - exp out, with
  the fake-quant's rounding and saturation: the same function on the same rational).

A fake-quant with ``signed = false`` gives unsigned ``ui<b>`` codes (saturating at
``0..2**b-1``) in each of these; the lowered value then counts ``b + 1`` signed bits for every
bound downstream (``HwValue.bits``). A folded unsigned constant keeps its codes in a signed
container one bit wider.

    %w = nf.constant "w" dense<...>                      %w = nh.constant "w" dense<[[...]]> : i4 <[2, 3]>
    %wq = nq.fake_quant %w {bits = 4, exp = [2, 3]}      %p = nh.avg_pool %xq {kernel = [3, 3], rounding = trunc}
    %p = nf.avg_pool %xq {kernel = [3, 3]}          ─▶   %pq = nh.requant %p {shift = [2], rounding = trunc} : i8 <3>
    %pq = nq.fake_quant %p {bits = 8, exp = 3}           %s = nh.lut %pq {table = [...]} : i8 <6>
    %s = nf.sigmoid %pq
    %sq = nq.fake_quant %s {bits = 8, exp = 6}

``LowerConstant`` records nothing: a float constant is read by a fake-quant or, unquantized,
by an op that uses it at the exponent where it is exact (``x + 2``).
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values, int_array
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.dialects.traits import LookupTable, weight_reader
from nanoir.lowering.hw.codes import (
    bits_of_bound,
    container_width,
    expand,
    float_constant_of,
)
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    HwValue,
)
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f64,
    i64,
)
from xdsl.ir import Attribute, BlockArgument, Operation, OpResult
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


def fake_quant_params(op: FakeQuantOp) -> tuple[int, RoundingMode, np.ndarray, np.ndarray]:
    """``(bits, mode, k, nh_exp)``: the nh exponent is ``-k`` for 1 bit (``2**k`` is then the
    magnitude), ``k`` otherwise."""
    bits, mode = op.bits.value.data, op.rounding_mode
    k = dense_to_numpy(op.exp).astype(np.int64)
    return bits, mode, k, -k if bits == 1 else k


def producer_of(op: FakeQuantOp) -> Operation | None:
    src = op.input
    return src.op if isinstance(src, OpResult) else None


class LowerConstant(HwPattern):
    """``nf.constant``: nothing yet; its readers quantize it (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.ConstantOp, rewriter: PatternRewriter) -> None:
        self.begin(op, rewriter)


def reduce_constant_exps(hw: HwLowering, op: Operation, exps: np.ndarray, rank: int) -> np.ndarray:
    """Exponents of a constant, one per channel along one dim (dim 0 of most weights, dim 1
    of a transposed conv's ``[C, O/g, *K]``), or one in all."""
    flat = exps.reshape(-1)
    if flat.size == 0 or (flat == flat[0]).all():
        return np.array(int(flat[0]) if flat.size else 0).reshape((1,) * max(rank, 1))
    for axis in range(exps.ndim):
        along = np.moveaxis(exps, axis, 0).reshape(exps.shape[axis], -1)
        if (along == along[:, :1]).all():
            shape = [1] * exps.ndim
            shape[axis] = exps.shape[axis]
            return along[:, 0].reshape(shape)
    raise hw.fail(
        op,
        "has exponents that vary along more than one dim; the hw level supports per-tensor "
        "or per-channel exponents",
    )


class FoldConstantFakeQuant(HwPattern):
    """``fake_quant(constant)`` → ``nh.constant`` of the codes, named after the constant."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        data = float_constant_of(op.input)
        if data is None or op.result in self.hw.values:
            return
        hw = self.begin(op, rewriter)
        bits, mode, k, nh_exp = fake_quant_params(op)
        signed = op.is_signed
        codes = quant.quantize_to_int(data, bits, k, mode, signed=signed).astype(np.int64)
        exps = reduce_constant_exps(
            hw, op, np.broadcast_to(expand(nh_exp, data.ndim), codes.shape), codes.ndim
        )
        reader = weight_reader(op.result)
        if codes.ndim == 0:
            codes, exps = codes.reshape(1), exps.reshape(1)
        src = op.input
        assert isinstance(src, OpResult) and isinstance(src.op, nf.ConstantOp)
        name = src.op.sym_name.data if src.op.sym_name is not None else None
        role, layout = ("weight", reader.layout(codes.ndim)) if reader else ("const", None)
        bits = bits if signed else bits + 1  # ui<b> codes as signed constants
        hw.set(op.result, hw.make_constant(codes, exps, role, name, bits, layout))


class QuantizeInput(HwPattern):
    """``fake_quant(%arg)`` → a new nh function input holding the codes."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        arg = op.input
        if (
            not isinstance(arg, BlockArgument)
            or arg in self.hw.values
            or op.result in self.hw.values
        ):
            return
        hw = self.begin(op, rewriter)
        bits, mode, _, nh_exp = fake_quant_params(op)
        others = [u.operation for u in arg.uses if u.operation is not op]
        if others:
            raise hw.fail(
                others[0], "reads a function input before its fake-quant; hw inputs are codes"
            )
        t = arg.type
        assert isinstance(t, TensorType)
        shape = t.get_shape()
        exps = nh_exp.reshape((1,) * (len(shape) - nh_exp.ndim) + nh_exp.shape)
        try:
            new_t = hw.result_type(shape, exps, container_width(bits), None, op.is_signed)
        except ValueError as e:
            raise hw.fail(op, f"cannot be a hw input: {e}") from None
        block = arg.block
        new_arg = rewriter.insert_block_argument(block, len(block.args), new_t)
        if arg.name_hint:
            new_arg.name_hint = arg.name_hint
        hw.new_args.append(new_arg)
        hw.arg_attrs.append(
            DictionaryAttr(
                {
                    "nq.bits": IntegerAttr(bits, i64),
                    "nq.exp": op.exp,
                    "nq.rounding": RoundingModeAttr(mode),
                }
            )
        )
        hw.input_index[arg] = len(hw.new_args) - 1
        # An unsigned input is ui<bits> (the runtime quantizes it as its type says).
        hw.set(op.result, HwValue(new_arg, exps, bits + (0 if op.is_signed else 1)))


class FuseAvgPoolFakeQuant(HwPattern):
    """``fake_quant(avg_pool(x))`` → ``nh.avg_pool`` (one exact division) + ``nh.requant``."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        pool = producer_of(op)
        if (
            not isinstance(pool, nf.AvgPoolOp | nf.AdaptiveAvgPoolOp)
            or op.input in self.hw.values
            or op.result in self.hw.values
        ):
            return
        hw = self.begin(op, rewriter)
        bits, mode, _, nh_exp = fake_quant_params(op)
        x = hw.get(pool, pool.input)
        in_shape = nf.tensor_shape(pool.input)
        props: dict[str, Attribute]
        if isinstance(pool, nf.AdaptiveAvgPoolOp):
            out = array_values(pool.output_size) or ()
            spatial = in_shape[2:]
            if any(s == DYNAMIC_INDEX or s % o for s, o in zip(spatial, out)):
                raise hw.fail(
                    pool, "has windows of different sizes (input not divisible by the output size)"
                )
            kernel = [s // o for s, o in zip(spatial, out)]
            props = {"kernel": int_array(kernel), "strides": int_array(kernel)}
        else:
            props = {k: v for k, v in pool.properties.items()}
        out_exps, pool_mode = expand(nh_exp, x.rank), mode
        if bits == 1:
            # A 1-bit result is the mean's sign. The nq kernel divides an exact window sum S
            # by a positive count, keeping its sign, and floor(S / n) >= 0 exactly when
            # S >= 0: the codes are pooled on their own grid, rounding toward -inf.
            out_exps, pool_mode = x.exps, RoundingMode.FLOOR
        varying = [i for i, d in enumerate(out_exps.shape) if d > 1]
        if varying and hw.layout_of(x).find("C") != varying[0]:
            # per-channel means of a value laid out with its channels elsewhere (a pool over a
            # batch-first RNN's [N, T, H] output, whose channels for the pool are T): the
            # codes renamed onto the pool's channel dim, as their exponents will vary along it
            x = hw.channels_at(pool, x, varying[0])
        finer = np.maximum(x.exps, out_exps)
        if (finer != x.exps).any():
            # A finer output grid: shift the codes left first, so one division remains.
            x = hw.shift_to(pool, x, finer)
        # The mean of binary i1 codes (±1) can be 0: it is taken on i2 codes.
        x = hw.with_zero(x)
        override = props.get("divisor_override")
        window = int(np.prod(array_values(props["kernel"]) or ()))  # type: ignore[arg-type]
        if isinstance(override, IntegerAttr) and 0 < override.value.data < window:
            # A divisor smaller than the window: the "mean" can leave the input's code range,
            # so the codes move to a container that holds it first.
            bits_needed = bits_of_bound(np.array([x.max_abs * -(-window // override.value.data)]))
            x = HwValue(hw.widen(x, container_width(bits_needed)).value, x.exps, bits_needed)
        pooled_exps = x.exps
        props["rounding"] = RoundingModeAttr(pool_mode)
        if pool_mode not in (RoundingMode.TRUNC, RoundingMode.FLOOR) and (x.exps != out_exps).any():
            # Rounding the mean and then shifting it would round twice (exact only for trunc
            # and floor, whose roundings compose): divide by n * 2**shift in one rounding.
            pooled_exps = np.broadcast_to(
                out_exps, np.broadcast_shapes(x.exps.shape, out_exps.shape)
            )
            shift = x.exps - pooled_exps
            props["shift"] = int_array(hw.shift_list(pool, shift, hw.layout_of(x), x.rank))
        t = hw.result_type(
            nf.tensor_shape(pool.result),
            pooled_exps,
            hw.declared(x),
            hw.layout_of(x),
            hw.signed(x),  # the mean of ui<b> codes is a ui<b> code
        )
        new = nh.AvgPoolOp.create(operands=[x.value], result_types=[t], properties=props)
        hw.emit(new, pool.result.name_hint)
        pooled = HwValue(new.result, np.asarray(pooled_exps).copy(), x.bits)
        hw.set(
            op.result,
            hw.requant(op, pooled, bits, nh_exp, mode, op.result.name_hint, op.is_signed),
        )


class FuseLookupTableFakeQuant(HwPattern):
    """``fake_quant(f(x))``, ``f`` float-only and elementwise → ``nh.lut``: ``f`` evaluated
    (the same float64 kernel nq runs) on every code ``x`` can take, quantized as the
    fake-quant does, so nh == nq by construction.

    Up to 8-bit inputs the table is dense (one entry per code of the declared type, 256 at
    most). Wider inputs get the segmented form (``starts``): a dense i16 table would be
    65,536 entries (128 KiB of i16) per op and per channel exponent, while the fake-quant's
    output of sigmoid/tanh/SiLU/GELU changes at most ``2**bits_out`` times per monotone
    piece, so at 8 bits out a few hundred runs cover every code. Only the codes the input
    can take (its bound) are evaluated (at most ``MAX_TABLE_CODES``); the first and last
    runs extend to the type's end codes, which the input never holds.

    Per-channel exponents, in or out, give one sub-table per distinct ``(exp in, exp out)``
    pair, and ``channels`` maps each channel to its sub-table (along the input layout's
    channel dim; an output varying along another dim moves the input's channels there).
    """

    MAX_TABLE_CODES = 2**LookupTable.MAX_INPUT_BITS + 1

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        producer = producer_of(op)
        if (
            producer is None
            or not producer.has_trait(LookupTable)
            or op.input in self.hw.values
            or op.result in self.hw.values
        ):
            return
        hw = self.begin(op, rewriter)
        bits, mode, k, nh_exp = fake_quant_params(op)
        x = hw.get(producer, producer.operands[0])
        others = [u for u in producer.results[0].uses if u.operation is not op]
        if others:
            raise hw.fail(
                producer,
                "is used other than by one fake-quant; its float result has no integer form",
            )
        rank = x.rank
        k_full = expand(k, rank)
        x = HwValue(x.value, expand(x.exps, rank), x.bits, x.codes)
        varying = sorted({i for e in (x.exps, k_full) for i, d in enumerate(e.shape) if d > 1})
        if len(varying) > 1:
            raise hw.fail(
                producer,
                f"has exponents that vary along dims {varying}; a lookup table takes one "
                "channel dim",
            )
        if varying and hw.layout_of(x).find("C") != varying[0]:
            x = hw.channels_at(producer, x, varying[0])
        width = hw.declared(x)
        lo, hi = nh.value_code_range(x.value)  # ui<b> inputs: codes 0..2**b-1
        reach_lo, reach_hi = max(lo, -x.max_abs), min(hi, x.max_abs)
        if width > 8 and reach_hi - reach_lo + 1 > self.MAX_TABLE_CODES:
            raise hw.fail(
                producer,
                f"has no integer form and its i{width} input can take "
                f"{reach_hi - reach_lo + 1} codes; a lookup table covers at most "
                f"{self.MAX_TABLE_CODES} (a 16-bit input)",
            )
        codes = np.array([-1, 1]) if width == 1 else np.arange(lo, hi + 1)
        if width > 8:
            codes = np.arange(reach_lo, reach_hi + 1)
        lut = producer.get_trait(LookupTable)
        assert lut is not None
        # One sub-table per distinct (exp in, exp out) pair, in channel order.
        channel_count = x.shape[varying[0]] if varying else 1
        e_in = np.broadcast_to(x.exps.reshape(-1), (channel_count,))
        e_out = np.broadcast_to(k_full.reshape(-1), (channel_count,))
        pairs: dict[tuple[int, int], int] = {}
        channels = [pairs.setdefault((int(a), int(b)), len(pairs)) for a, b in zip(e_in, e_out)]
        table: list[int] = []
        starts: list[int] = []
        for e, kc in pairs:
            values = lut.evaluate(producer, np.ldexp(codes.astype(np.float64), -e))
            sub = quant.quantize_to_int(
                values, bits, np.array([kc]), mode, signed=op.is_signed
            ).astype(np.int64)
            if width <= 8:
                table += sub.tolist()
                continue
            change = np.flatnonzero(sub[1:] != sub[:-1]) + 1
            run_starts = np.concatenate([[lo], codes[change]])
            table += sub[np.concatenate([[0], change])].tolist()
            starts += run_starts.tolist()
        props: dict[str, Attribute] = {"table": int_array(table)}
        if starts:
            props["starts"] = int_array(starts)
        if varying:
            props["channels"] = int_array(channels)
        source = lut.source(producer)
        if source is not None:
            props["function"] = StringAttr(source[0])
            if source[1]:
                props["params"] = DenseArrayBase.from_list(f64, list(source[1]))
        out_exps = expand(nh_exp, rank)
        t = hw.result_type(x.shape, out_exps, container_width(bits), hw.layout_of(x), op.is_signed)
        new = nh.LutOp.create(operands=[x.value], result_types=[t], properties=props)
        hw.emit(new, op.result.name_hint)
        hw.set(op.result, HwValue(new.result, out_exps, bits + (0 if op.is_signed else 1)))


class RequantFakeQuant(HwPattern):
    """``fake_quant(v)`` of a lowered value → ``nh.requant`` (or nothing, when the identity)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        if op.result in hw.values:
            return
        bits, mode, _, nh_exp = fake_quant_params(op)
        name = op.result.name_hint or op.input.name_hint
        hv = hw.get(op, op.input)
        hw.set(op.result, hw.requant(op, hv, bits, nh_exp, mode, name, op.is_signed))
