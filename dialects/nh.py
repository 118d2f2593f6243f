"""nh: the hardware level — integer tensors with static fixed-point exponents and layouts.

Every nh value is a builtin tensor of signless integers (interpreted as two's complement) whose
encoding is ``#nh.fixed<EXP, LAYOUT>``: the real value of a code ``v`` is ``v * 2**-exp``.
``EXP`` is one integer (per tensor) or a list with one entry per channel, where the channel
axis is the first ``C`` of ``LAYOUT``. Layout letters (one per dim) name what each dim is:
``B`` batch, ``C`` channel, ``M`` the streamed ("memory") dim, ``D`` the rest. Runtime tensors
are ``BCMD`` (``BCM`` for 1-D signals, ``BC`` after flattening), conv weights ``CCDD`` and
vectors ``C`` (DESIGN.md).

Element widths: ``i2``/``i4``/``i8``/``i16`` data, ``i32`` accumulators, and ``i1`` for binary
data whose codes are ``-1`` and ``+1`` (NanoEngine's 1-bit: sign times ``2**k``, so a 1-bit
value quantized with exponent ``k`` has codes ``±1`` at nh exponent ``-k``). Unsigned data
(``nq.fake_quant`` with ``signed = false``) is ``ui2``/``ui4``/``ui8``/``ui16`` (xDSL's
unsigned ``IntegerType``), codes ``0..2**b-1``: as signed operands of arithmetic they take
``b + 1`` bits (:func:`signed_bits`); there is no ``ui1`` or ``ui32``. Constants keep
their codes in ``i8``/``i16``/``i32`` storage; the result type carries the logical width.

Every integer op is exact: it is defined on mathematical integers, and its verifier proves
statically that the result fits its declared width (or the op saturates, as ``nh.requant``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import ClassVar

import numpy as np
from nanoir.dialects.nf import (
    BicubicRows,
    BilinearRows,
    PlaneRows,
    ReduceRows,
    array_values,
    check_embedding,
    check_expand_like,
    check_plane_op,
    check_reduce_dims,
    check_reflect_pads,
    check_result_shape,
    check_upsample_bilinear,
    check_upsample_zero,
    embedding_rows,
    expand_rows,
    gather_rows,
    parse_named_constant,
    plane_rows,
    print_named_constant,
    shape_guard,
    tensor_shape,
    upsample_zero_rows,
)
from nanoir.dialects.nq import MAX_ABS_EXP, MAX_BITS, RoundingMode, RoundingModeAttr
from nanoir.dialects.traits import (
    ChannelWise,
    Contraction,
    DataMovement,
    Elementwise,
    Normalising,
    Recurrent,
    SlidingWindow,
    TransposedWindow,
    Weighted,
    WholeAlongAxis,
    axis_rows,
    depth_to_space_rows,
    pad_rows,
    reshape_rows,
    scale_rows,
    space_to_depth_rows,
    transpose_rows,
)
from nanoir.runtime.numerics import bicubic as bicubic_numerics
from nanoir.runtime.numerics import compare as compare_numerics
from nanoir.runtime.numerics import kernels, movement
from nanoir.runtime.numerics import l2norm as l2_numerics
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from nanoir.runtime.numerics import reduce as reduce_numerics
from nanoir.runtime.numerics.movement import check_indices, gather_shape
from nanoir.runtime.numerics.reduce import sum_bits
from nanoir.runtime.numerics.shapes import (
    DYNAMIC_INDEX,
    broadcast_shapes,
    infer_concat_shape,
    infer_conv_shape,
    infer_conv_transpose_shape,
    infer_linear_shape,
    infer_matmul_shape,
    infer_pool_shape,
    shape_str,
)
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float64Type,
    IntAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    opt_result_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

LAYOUT_LETTERS = "BCMD"
DATA_WIDTHS = (1, 2, 4, 8, 16)
ACC_WIDTH = 32
WIDTHS = (*DATA_WIDTHS, ACC_WIDTH)
EXP_MIN, EXP_MAX = -128, 127
"""Range of a fixed-point exponent: NanoEngine stores exponents as ``int8``."""


def code_range(width: int, signed: bool = True) -> tuple[int, int]:
    """Smallest and largest code of an ``i<width>`` nh value (``i1`` holds ``-1`` and ``+1``);
    ``signed=False``: of a ``ui<width>`` value, ``0..2**width-1``."""
    if not signed:
        return 0, 2**width - 1
    if width == 1:
        return -1, 1
    return -(2 ** (width - 1)), 2 ** (width - 1) - 1


def is_unsigned(value: SSAValue | Attribute) -> bool:
    """Whether an nh value (or tensor type) holds unsigned codes (``ui<b>``)."""
    t = value.type if isinstance(value, SSAValue) else value
    elt = t.get_element_type() if isinstance(t, TensorType) else None
    return isinstance(elt, IntegerType) and elt.signedness.data == Signedness.UNSIGNED


def value_code_range(value: SSAValue | Attribute) -> tuple[int, int]:
    """Smallest and largest code of an nh value (or tensor type), signed or unsigned."""
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType) and isinstance(t.get_element_type(), IntegerType)
    return code_range(t.get_element_type().width.data, not is_unsigned(t))


def signed_bits(value: SSAValue) -> int:
    """Bits a value's codes need as signed integers: its width, one more when unsigned."""
    return width_of(value) + (1 if is_unsigned(value) else 0)


def type_text(value: SSAValue) -> str:
    """``i8`` or ``ui8``: a value's element type for messages."""
    return ("ui" if is_unsigned(value) else "i") + str(width_of(value))


@irdl_attr_definition
class FixedAttr(ParametrizedAttribute):
    """Fixed-point exponent(s) and layout of an nh tensor: ``#nh.fixed<7, BCMD>``,
    ``#nh.fixed<[5, 6, 6], CCDD>`` (per channel along the first ``C``)."""

    name = "nh.fixed"
    exps: ArrayAttr[IntAttr]
    per_channel: BoolAttr
    layout: StringAttr

    def __init__(self, exp: int | Sequence[int], layout: str):
        per_channel = not isinstance(exp, int)
        exps = [exp] if isinstance(exp, int) else list(exp)
        super().__init__(
            ArrayAttr(IntAttr(int(e)) for e in exps),
            BoolAttr.from_bool(per_channel),
            StringAttr(layout),
        )

    @staticmethod
    def layout_error(layout: str) -> str | None:
        """Why ``layout`` is not a valid layout string, or None (``""``: a 0-d value's, which
        nh has only where a function takes or returns one, written ``#nh.fixed<5, "">``)."""
        if any(c not in LAYOUT_LETTERS for c in layout):
            return f"layout {layout!r} must be a string of the letters {LAYOUT_LETTERS}"
        if "B" in layout[1:]:
            return f"layout {layout!r} may have B only as its first letter"
        return None

    @staticmethod
    def exp_error(exp: int) -> str | None:
        """Why ``exp`` cannot be an exponent, or None."""
        if not EXP_MIN <= exp <= EXP_MAX:
            return (
                f"exponent {exp} is outside {EXP_MIN}..{EXP_MAX} (NanoEngine stores "
                "exponents as int8)"
            )
        return None

    def verify(self) -> None:
        error = self.layout_error(self.layout.data)
        if error:
            raise VerifyException(f"#nh.fixed: {error}")
        for e in self.exps.data:
            error = self.exp_error(e.data)
            if error:
                raise VerifyException(f"#nh.fixed: {error}")
        if not self.per_channel.value.data and len(self.exps.data) != 1:
            raise VerifyException("#nh.fixed: a per-tensor exponent is a single integer")
        if self.per_channel.value.data and self.channel_axis is None:
            raise VerifyException(
                f"#nh.fixed: per-channel exponents need a C in the layout {self.layout.data!r}"
            )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        def exponent() -> int:
            start = parser.pos
            exp = parser.parse_integer(context_msg=" (fixed-point exponent)")
            error = cls.exp_error(exp)
            if error:
                parser.raise_error(error, at_position=start, end_position=parser.pos)
            return exp

        with parser.in_angle_brackets():
            if parser.parse_optional_punctuation("[") is not None:
                exps = parser.parse_comma_separated_list(parser.Delimiter.NONE, exponent)
                parser.parse_punctuation("]")
                per_channel = True
            else:
                exps = [exponent()]
                per_channel = False
            parser.parse_punctuation(",")
            start = parser.pos
            layout = parser.parse_optional_str_literal()
            if layout is None:
                layout = parser.parse_identifier(" (layout letters, e.g. BCMD)")
            error = cls.layout_error(layout)
            if error is None and per_channel and "C" not in layout:
                error = f"per-channel exponents need a C in the layout {layout!r}"
            if error:
                parser.raise_error(error, at_position=start, end_position=parser.pos)
        return (
            ArrayAttr(IntAttr(e) for e in exps),
            BoolAttr.from_bool(per_channel),
            StringAttr(layout),
        )

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            values = [e.data for e in self.exps.data]
            if self.per_channel.value.data:
                with printer.in_square_brackets():
                    printer.print_list(values, printer.print_int)
            else:
                printer.print_int(values[0])
            printer.print_string(", ")
            printer.print_string(self.layout.data or '""')

    @property
    def exp_list(self) -> list[int]:
        return [e.data for e in self.exps.data]

    @property
    def is_per_channel(self) -> bool:
        return bool(self.per_channel.value.data)

    @property
    def channel_axis(self) -> int | None:
        """The dim the per-channel exponents run along (the first ``C``), if any."""
        index = self.layout.data.find("C")
        return None if index < 0 else index

    def exp_array(self, rank: int | None = None) -> np.ndarray:
        """Exponents shaped to broadcast against the tensor (``[1]*rank`` per tensor)."""
        rank = len(self.layout.data) if rank is None else rank
        exps = np.asarray(self.exp_list, dtype=np.int64)
        shape = [1] * rank
        if self.is_per_channel:
            axis = self.channel_axis
            assert axis is not None
            shape[axis] = len(exps)
        return exps.reshape(shape)

    def strides(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Element strides of a dense tensor of ``shape`` stored in this layout's dim order."""
        strides: list[int] = []
        step = 1
        for d in reversed(shape):
            strides.append(step)
            step *= d
        return tuple(reversed(strides))

    def offsets(self, shape: Sequence[int]) -> Iterator[int]:
        """Every element's offset in storage order (row-major over the layout's dims)."""
        total = 1
        for d in shape:
            total *= d
        yield from range(total)


def fixed_type(
    element_width: int,
    shape: Sequence[int],
    exp: int | Sequence[int],
    layout: str,
    signed: bool = True,
) -> TensorType:
    """``tensor<shape x i<width>, #nh.fixed<exp, layout>>`` (``ui<width>`` if not signed)."""
    elt = IntegerType(element_width, Signedness.SIGNLESS if signed else Signedness.UNSIGNED)
    return TensorType(elt, shape, FixedAttr(exp, layout))


def fixed_of(value: SSAValue) -> FixedAttr:
    """The encoding of a verified nh value."""
    t = value.type
    assert isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr)
    return t.encoding


def width_of(value: SSAValue) -> int:
    """The element width of a verified nh value."""
    t = value.type
    assert isinstance(t, TensorType) and isinstance(t.get_element_type(), IntegerType)
    return t.get_element_type().width.data


def check_nh_value(op: IRDLOperation, value: SSAValue, label: str) -> tuple[int, FixedAttr]:
    """Check that ``value`` is a well-formed nh tensor; return its width and encoding."""
    return check_nh_type(op.name, value.type, label)


def check_nh_type(where: str, t: Attribute, label: str) -> tuple[int, FixedAttr]:
    """Check that ``t`` is a well-formed nh tensor type; return its width and encoding.

    Errors read ``{where}: {label} ...``.
    """
    if not isinstance(t, TensorType):
        raise VerifyException(f"{where}: {label} must be a tensor, got {t}")
    elt = t.get_element_type()
    if not isinstance(elt, IntegerType):
        raise VerifyException(
            f"{where}: {label} has element type {elt}; the nh level holds only integers"
        )
    width = elt.width.data
    unsigned = elt.signedness.data == Signedness.UNSIGNED
    if unsigned and width not in DATA_WIDTHS[1:]:
        raise VerifyException(
            f"{where}: {label} has element type {elt}; unsigned nh codes are "
            + ", ".join(f"ui{w}" for w in DATA_WIDTHS[1:])
            + " (1-bit codes are ±1, accumulators signed i32)"
        )
    if elt.signedness.data == Signedness.SIGNED:
        raise VerifyException(
            f"{where}: {label} has element type {elt}; nh codes are signless integers "
            f"(two's complement), e.g. i{width}, or unsigned (ui{width})"
        )
    if width not in WIDTHS:
        raise VerifyException(
            f"{where}: {label} is i{width}; nh allows " + ", ".join(f"i{w}" for w in WIDTHS)
        )
    enc = t.encoding
    if not isinstance(enc, FixedAttr):
        raise VerifyException(
            f"{where}: {label} of type {t} lacks the #nh.fixed<exp, layout> encoding"
        )
    shape = t.get_shape()
    if len(enc.layout.data) != len(shape):
        raise VerifyException(
            f"{where}: {label} has rank {len(shape)} but layout {enc.layout.data!r}"
        )
    if enc.is_per_channel:
        axis = enc.channel_axis
        assert axis is not None
        if shape[axis] != len(enc.exp_list):
            raise VerifyException(
                f"{where}: {label} has {len(enc.exp_list)} per-channel exponents but "
                f"{shape_str([shape[axis]])} channels along dim {axis}"
            )
    return width, enc


QUANTIZED_INPUT_ATTRS = ("nq.bits", "nq.exp", "nq.rounding")
_EXP_DTYPES = {8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}
"""The argument attributes saying how a float input becomes an nh argument's codes (written
by lower-to-hw and the .ne importer, read by the runtime)."""


def verify_hw_function(func: Operation) -> None:
    """Check what the runtime needs from a ``func.func`` holding an integer (nh) program.

    Every argument with ``nq.*`` attributes is quantized from float by the runtime, so it must
    have all of :data:`QUANTIZED_INPUT_ATTRS`: ``nq.bits`` in 1..16, ``nq.exp`` an integer
    tensor (i8..i64) of exponents within the nq range that broadcasts against the argument,
    ``nq.rounding`` a ``#nq.rounding<...>``, and the argument must be an nh tensor as wide as
    the codes (``i1`` exactly for 1 bit) whose ``#nh.fixed`` exponents are ``nq.exp``
    (``-nq.exp`` for 1 bit: the 1-bit code ``±1`` stands for ``±2**exp``).
    """
    from xdsl.dialects.func import FuncOp

    if not isinstance(func, FuncOp) or func.arg_attrs is None:
        return
    inputs = func.function_type.inputs.data
    for i, d in enumerate(func.arg_attrs.data):
        keys = sorted(k for k in d.data if k.startswith("nq."))
        if not keys or i >= len(inputs):
            continue
        what = f"func.func: argument {i} of @{func.sym_name.data}"
        unknown = [k for k in keys if k not in QUANTIZED_INPUT_ATTRS]
        if unknown:
            raise VerifyException(
                f"{what} has the unknown attribute {unknown[0]} (a quantized input takes "
                f"{', '.join(QUANTIZED_INPUT_ATTRS)})"
            )
        missing = [k for k in QUANTIZED_INPUT_ATTRS if k not in keys]
        if missing:
            raise VerifyException(
                f"{what} has {', '.join(keys)} but no {' or '.join(missing)}; a quantized "
                f"input needs all of {', '.join(QUANTIZED_INPUT_ATTRS)}"
            )
        bits_attr, exp, rounding = (d.data[k] for k in QUANTIZED_INPUT_ATTRS)
        if not isinstance(bits_attr, IntegerAttr) or not isinstance(bits_attr.type, IntegerType):
            raise VerifyException(f"{what}: nq.bits must be an integer, got {bits_attr}")
        bits = bits_attr.value.data
        if not 1 <= bits <= MAX_BITS:
            raise VerifyException(f"{what}: nq.bits = {bits} is outside 1..{MAX_BITS}")
        if not isinstance(rounding, RoundingModeAttr):
            raise VerifyException(
                f"{what}: nq.rounding must be a rounding mode (#nq.rounding<trunc>, ...), "
                f"got {rounding}"
            )
        exp_type = exp.get_type() if isinstance(exp, DenseIntOrFPElementsAttr) else None
        exp_elt = exp_type.get_element_type() if isinstance(exp_type, TensorType) else None
        if not isinstance(exp_elt, IntegerType) or exp_elt.width.data not in (8, 16, 32, 64):
            raise VerifyException(
                f"{what}: nq.exp must be a dense tensor of i8, i16, i32 or i64 exponents, got {exp}"
            )
        assert isinstance(exp, DenseIntOrFPElementsAttr) and isinstance(exp_type, TensorType)
        width, fixed = check_nh_type(what, inputs[i], "its type")
        if (bits == 1) != (width == 1) or bits > width:
            raise VerifyException(
                f"{what}: {bits}-bit codes (nq.bits) do not match the element type i{width}"
            )
        k = np.frombuffer(exp.data.data, dtype=_EXP_DTYPES[exp_elt.width.data]).astype(np.int64)
        if k.size != math.prod(exp_type.get_shape()):
            raise VerifyException(
                f"{what}: nq.exp holds {k.size} values for the shape "
                f"{shape_str(exp_type.get_shape())}"
            )
        bad = k[np.abs(k) > MAX_ABS_EXP]
        if bad.size:
            raise VerifyException(
                f"{what}: nq.exp {int(bad[0])} is outside -{MAX_ABS_EXP}..{MAX_ABS_EXP}"
            )
        shape = list(inputs[i].get_shape())  # type: ignore[union-attr]
        e_shape = list(exp_type.get_shape())
        if len(e_shape) > len(shape) or any(
            e not in (1, x) and x != DYNAMIC_INDEX
            for e, x in zip(reversed(e_shape), reversed(shape))
        ):
            raise VerifyException(
                f"{what}: nq.exp of shape {shape_str(e_shape)} does not broadcast against "
                f"the argument {shape_str(shape)}"
            )
        nh_exp = (-k if bits == 1 else k).reshape([1] * (len(shape) - len(e_shape)) + e_shape)
        try:
            a, b = np.broadcast_arrays(fixed.exp_array(len(shape)), nh_exp)
            same = bool(np.array_equal(a, b))
        except ValueError:
            same = False
        if not same:
            expected = "-nq.exp" if bits == 1 else "nq.exp"
            raise VerifyException(
                f"{what}: its exponents {exps_text(fixed.exp_array())} are not {expected} "
                f"= {exps_text(nh_exp)}"
            )


def broadcast_exps(op: IRDLOperation, values: Sequence[SSAValue], rank: int) -> list[np.ndarray]:
    """The exponents of each value, right-aligned to ``rank`` as NumPy broadcasting does."""
    out = []
    for v in values:
        e = fixed_of(v).exp_array()
        out.append(e.reshape((1,) * (rank - e.ndim) + e.shape))
    return out


def exps_text(e: np.ndarray) -> str:
    flat = sorted(set(int(x) for x in e.ravel()))
    return str(flat[0]) if len(flat) == 1 else str(e.ravel().tolist())


def check_exps_equal(op: IRDLOperation, what: str, a: np.ndarray, b: np.ndarray) -> None:
    """Raise unless two (broadcastable) exponent arrays agree everywhere."""
    try:
        x, y = np.broadcast_arrays(a, b)
    except ValueError:
        raise VerifyException(
            f"{op.name}: {what}: exponents {exps_text(a)} and {exps_text(b)} do not line up"
        ) from None
    if not np.array_equal(x, y):
        raise VerifyException(
            f"{op.name}: {what}: exponents {exps_text(a)} and {exps_text(b)} differ"
        )


def check_fits(op: IRDLOperation, needed: int, result: SSAValue) -> None:
    """Raise unless the result is at least ``needed`` bits wide (or an i32 accumulator)."""
    width = width_of(result)
    if width < min(needed, ACC_WIDTH):
        raise VerifyException(
            f"{op.name}: result i{width} may overflow; the exact result needs i{needed}"
        )


# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """Integer codes computed at compile time (weights, biases), stored in i8/i16/i32.

    ```mlir
    %w = nh.constant "conv1.weight" dense<[[1, -2]]> : tensor<1x2xi8>
        -> tensor<1x2xi4, #nh.fixed<[3], CC>>
    ```
    """

    name = "nh.constant"
    sym_name = opt_prop_def(StringAttr, prop_name="name")
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike())

    def __init__(
        self, value: DenseIntOrFPElementsAttr, result_type: TensorType, name: str | None = None
    ):
        props: dict[str, Attribute] = {"value": value}
        if name is not None:
            props["name"] = StringAttr(name)
        super().__init__(result_types=[result_type], properties=props)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value, props, attrs = parse_named_constant(parser)
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        return cls.create(result_types=[result_type], properties=props, attributes=attrs)

    def print(self, printer: Printer) -> None:
        print_named_constant(printer, self.sym_name, self.value, self.attributes)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def codes(self) -> np.ndarray:
        """The stored codes as a read-only NumPy array of the storage dtype."""
        storage = self.value.get_type()
        assert isinstance(storage, TensorType)
        elt = storage.get_element_type()
        assert isinstance(elt, IntegerType)
        dtype = {8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}[elt.width.data]
        return np.frombuffer(self.value.data.data, dtype=dtype).reshape(storage.get_shape())

    def verify_(self) -> None:
        width, _ = check_nh_value(self, self.result, "result")
        storage = self.value.get_type()
        assert isinstance(storage, TensorType)
        elt = storage.get_element_type()
        if not isinstance(elt, IntegerType) or elt.width.data not in (8, 16, 32, 64):
            raise VerifyException(
                f"nh.constant: storage element type {elt} must be i8, i16, i32 or i64"
            )
        if storage.get_shape() != tensor_shape(self.result):
            raise VerifyException(
                f"nh.constant: data shape {shape_str(storage.get_shape())} differs from the "
                f"result shape {shape_str(tensor_shape(self.result))}"
            )
        codes = self.codes()
        if codes.size:
            lo, hi = value_code_range(self.result)
            bad = codes[(codes < lo) | (codes > hi) | ((codes == 0) & (width == 1))]
            if bad.size:
                allowed = "-1 or +1" if width == 1 else f"{lo}..{hi}"
                raise VerifyException(
                    f"nh.constant: code {int(bad.flat[0])} does not fit "
                    f"{type_text(self.result)} ({allowed})"
                )


# --------------------------------------------------------------------------------------------
# Arithmetic into accumulators
# --------------------------------------------------------------------------------------------


def _input_exps_per_out(op: IRDLOperation, x: SSAValue, groups: int, out_c: int) -> np.ndarray:
    """The input's exponent for each output channel: input channels of one group are summed
    together, so they must share one exponent."""
    fx = fixed_of(x)
    if not fx.is_per_channel:
        return np.full(out_c, fx.exp_list[0], dtype=np.int64)
    if fx.channel_axis != 1:
        raise VerifyException(f"{op.name}: input channels must be dim 1 of its layout")
    x_exps = np.asarray(fx.exp_list, dtype=np.int64).reshape(groups, -1)
    if (x_exps != x_exps[:, :1]).any():
        raise VerifyException(
            f"{op.name}: input channels summed together have different exponents "
            f"{fx.exp_list}; requantize them to one exponent first"
        )
    return np.repeat(x_exps[:, 0], out_c // groups)


def _conv_like_exps(op: IRDLOperation, x: SSAValue, w: SSAValue, groups: int) -> np.ndarray:
    """Output exponents per output channel: ``exp_x[group(o)] + exp_w[o]``."""
    out_c = tensor_shape(w)[0]
    w_exps = np.broadcast_to(np.asarray(fixed_of(w).exp_list, dtype=np.int64), (out_c,))
    return _input_exps_per_out(op, x, groups, out_c) + w_exps


def _check_accumulator(
    op: IRDLOperation,
    expected: np.ndarray,
    result: SSAValue,
    bias: SSAValue | None,
    channel_axis: int,
) -> None:
    width, fr = check_nh_value(op, result, "result")
    if width != ACC_WIDTH:
        raise VerifyException(f"{op.name}: result must be an i32 accumulator, got i{width}")
    rank = len(tensor_shape(result))
    shape = [1] * rank
    shape[channel_axis] = len(expected)
    check_exps_equal(
        op,
        "result exponent must be input + weight exponent",
        expected.reshape(shape),
        fr.exp_array(),
    )
    if bias is not None:
        bw, fb = check_nh_value(op, bias, "bias")
        if bw != ACC_WIDTH:
            raise VerifyException(f"{op.name}: bias must be i32 (aligned to the accumulator)")
        check_exps_equal(
            op,
            "bias must be aligned to the accumulator exponent",
            np.asarray(fb.exp_list),
            expected,
        )


def _conv_transpose_exps(op: IRDLOperation, x: SSAValue, w: SSAValue, groups: int) -> np.ndarray:
    """Output exponents of a transposed conv: ``exp_x[group(o)] + exp_w[o mod O/g]``.

    Its weight is ``[C, O/g, *K]``, so per-channel weight exponents run along dim 1 (layout
    ``DC`` + ``D``s) and repeat for each group.
    """
    fw = fixed_of(w)
    per_group = tensor_shape(w)[1]
    if fw.is_per_channel and fw.channel_axis != 1:
        raise VerifyException(
            f"{op.name}: per-channel weight exponents must run along dim 1 (the output "
            f"channels of a [C, O/g, *K] weight), layout {fw.layout.data!r}"
        )
    w_exps = np.broadcast_to(np.asarray(fw.exp_list, dtype=np.int64), (per_group,))
    return _input_exps_per_out(op, x, groups, per_group * groups) + np.tile(w_exps, groups)


class _WindowedProductOp(IRDLOperation):
    """Base of nh.conv and nh.conv_transpose: input, weight, optional bias into an i32
    accumulator; the window properties ``WINDOW`` (each optional) and ``groups``; the shape
    rule ``INFER`` and the accumulator exponents ``EXPS``."""

    WINDOW: ClassVar[tuple[str, ...]] = ("strides", "pads", "dilations")
    INFER: ClassVar = staticmethod(infer_conv_shape)
    EXPS: ClassVar = staticmethod(_conv_like_exps)

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    strides = opt_prop_def(DenseArrayBase[I64])
    pads = opt_prop_def(DenseArrayBase[I64])
    dilations = opt_prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)"
    )

    def window(self) -> dict[str, tuple[int, ...] | None]:
        """The window properties as tuples (None when absent)."""
        return {k: array_values(getattr(self, k)) for k in self.WINDOW}

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        check_nh_value(self, self.weight, "weight")
        groups = self.groups.value.data
        shape = shape_guard(
            self,
            self.INFER,
            tensor_shape(self.input),
            tensor_shape(self.weight),
            groups=groups,
            **self.window(),
        )
        check_result_shape(self, shape, self.result)
        expected = self.EXPS(self, self.input, self.weight, groups)
        _check_accumulator(self, expected, self.result, self.bias, 1)


@irdl_op_definition
class ConvOp(_WindowedProductOp):
    """Integer N-d grouped convolution into i32:
    ``acc[n, o, p] = b[o] + sum_{c, k} x[n, g*C/G + c, p*s + k*d - pad] * w[o, c, k]``
    (zero padding), exact; ``exp(acc)[o] = exp(x) + exp(w)[o]`` and the bias is aligned to it.

    ```mlir
    %acc = nh.conv %x, %w, %b {pads = array<i64: 1, 1, 1, 1>}
        : (tensor<?x3x8x8xi8, #nh.fixed<7, BCMD>>, tensor<16x3x3x3xi4, #nh.fixed<3, CCDD>>,
           tensor<16xi32, #nh.fixed<10, C>>) -> tensor<?x16x8x8xi32, #nh.fixed<10, BCMD>>
    ```
    """

    name = "nh.conv"
    traits = traits_def(Pure(), SlidingWindow("weight"), Weighted())


@irdl_op_definition
class ConvTransposeOp(_WindowedProductOp):
    """Integer N-d grouped transposed convolution into i32 (weight ``[C, O/g, *K]``):
    ``acc[n, o, i*s + t*d - pad] += x[n, c, i] * w[c, o mod O/g, t]`` (c in o's group) plus
    ``b[o]``, exact; ``exp(acc)[o] = exp(x) + exp(w)[o mod O/g]`` and the bias is aligned to it.

    ```mlir
    %acc = nh.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<?x8x4x4xi8, #nh.fixed<5, BCMD>>, tensor<8x4x4x4xi4, #nh.fixed<3, DCDD>>)
        -> tensor<?x4x8x8xi32, #nh.fixed<8, BCMD>>
    ```
    """

    name = "nh.conv_transpose"
    WINDOW: ClassVar[tuple[str, ...]] = ("strides", "pads", "dilations", "output_padding")
    INFER: ClassVar = staticmethod(infer_conv_transpose_shape)
    EXPS: ClassVar = staticmethod(_conv_transpose_exps)
    output_padding = opt_prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), TransposedWindow("weight"), Weighted(1))


@irdl_op_definition
class LinearOp(IRDLOperation):
    """Integer ``acc = x @ w.T + b`` into i32, exact; ``exp(acc)[o] = exp(x) + exp(w)[o]``.

    ```mlir
    %acc = nh.linear %x, %w : (tensor<?x400xi8, #nh.fixed<4, BC>>,
        tensor<120x400xi8, #nh.fixed<[7, ...], CC>>) -> tensor<?x120xi32, #nh.fixed<[11, ...], BC>>
    ```
    """

    name = "nh.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Contraction(), Weighted())
    assembly_format = (
        "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)"
    )

    def verify_(self) -> None:
        _, fx = check_nh_value(self, self.input, "input")
        check_nh_value(self, self.weight, "weight")
        shape = shape_guard(
            self, infer_linear_shape, tensor_shape(self.input), tensor_shape(self.weight)
        )
        check_result_shape(self, shape, self.result)
        if fx.is_per_channel:
            raise VerifyException(
                "nh.linear: input features are summed together, so the input needs one "
                f"exponent, got {fx.exp_list}"
            )
        fr = (
            fixed_of(self.result)
            if isinstance(self.result.type, TensorType)
            and isinstance(self.result.type.encoding, FixedAttr)
            else None
        )
        if fr is not None and fr.is_per_channel and fr.channel_axis != len(shape) - 1:
            raise VerifyException(
                "nh.linear: per-channel result exponents must run along the last dim "
                f"(layout {fr.layout.data!r})"
            )
        expected = _conv_like_exps(self, self.input, self.weight, 1)
        _check_accumulator(self, expected, self.result, self.bias, len(shape) - 1)


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """Integer ``torch.matmul(lhs, rhs)`` into i32, exact; per-tensor exponents add.

    ```mlir
    %acc = nh.matmul %a, %b : (tensor<?x4x8xi8, #nh.fixed<4, BMC>>,
        tensor<8x5xi8, #nh.fixed<6, CC>>) -> tensor<?x4x5xi32, #nh.fixed<10, BMC>>
    ```
    """

    name = "nh.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Contraction())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        _, fa = check_nh_value(self, self.lhs, "lhs")
        _, fb = check_nh_value(self, self.rhs, "rhs")
        width, fr = check_nh_value(self, self.result, "result")
        shape = shape_guard(
            self, infer_matmul_shape, tensor_shape(self.lhs), tensor_shape(self.rhs)
        )
        check_result_shape(self, shape, self.result)
        if fa.is_per_channel or fb.is_per_channel or fr.is_per_channel:
            raise VerifyException("nh.matmul: operands and result need per-tensor exponents")
        if width != ACC_WIDTH:
            raise VerifyException(f"nh.matmul: result must be an i32 accumulator, got i{width}")
        expected = fa.exp_list[0] + fb.exp_list[0]
        if fr.exp_list[0] != expected:
            raise VerifyException(
                f"nh.matmul: result exponent {fr.exp_list[0]} must be {fa.exp_list[0]} + "
                f"{fb.exp_list[0]} = {expected}"
            )


class AlignedBinaryOp(IRDLOperation):
    """Base of exact elementwise add/sub on operands at one common exponent."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        wa, _ = check_nh_value(self, self.lhs, "lhs")
        wb, _ = check_nh_value(self, self.rhs, "rhs")
        check_nh_value(self, self.result, "result")
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)
        ea, eb, er = broadcast_exps(self, [self.lhs, self.rhs, self.result], len(shape))
        check_exps_equal(self, "operands must be aligned to one exponent", ea, eb)
        check_exps_equal(self, "the result keeps the operands' exponent", ea, er)
        wa, wb = signed_bits(self.lhs), signed_bits(self.rhs)  # ui<b> operands take b + 1
        if is_unsigned(self.result):
            raise VerifyException(
                f"{self.name}: the result must be signed, got {type_text(self.result)}"
            )
        check_fits(self, max(max(wa, wb), 2) + 1, self.result)


@irdl_op_definition
class AddOp(AlignedBinaryOp):
    """Exact ``lhs + rhs`` with broadcasting; operands share one exponent, kept by the result.

    ```mlir
    %z = nh.add %a, %b : (tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>,
        tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>) -> tensor<?x16x1x3xi16, #nh.fixed<7, BCMD>>
    ```
    """

    name = "nh.add"


@irdl_op_definition
class SubOp(AlignedBinaryOp):
    """Exact ``lhs - rhs`` with broadcasting; operands share one exponent, kept by the result.

    ```mlir
    %z = nh.sub %a, %b : (tensor<?x16xi8, #nh.fixed<7, BC>>,
        tensor<?x16xi8, #nh.fixed<7, BC>>) -> tensor<?x16xi16, #nh.fixed<7, BC>>
    ```
    """

    name = "nh.sub"


class AlignedSelectOp(IRDLOperation):
    """Base of elementwise max/min: operands at one common exponent, kept by the result; the
    result picks one operand's code, so it only needs to hold both operands' code ranges."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        check_nh_value(self, self.lhs, "lhs")
        check_nh_value(self, self.rhs, "rhs")
        check_nh_value(self, self.result, "result")
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)
        ea, eb, er = broadcast_exps(self, [self.lhs, self.rhs, self.result], len(shape))
        check_exps_equal(self, "operands must be aligned to one exponent", ea, eb)
        check_exps_equal(self, "the result keeps the operands' exponent", ea, er)
        (la, ha), (lb, hb) = value_code_range(self.lhs), value_code_range(self.rhs)
        lo, hi = value_code_range(self.result)
        if lo > min(la, lb) or hi < max(ha, hb):
            raise VerifyException(
                f"{self.name}: result {type_text(self.result)} cannot hold the codes of "
                f"{type_text(self.lhs)} and {type_text(self.rhs)}"
            )


@irdl_op_definition
class MaximumOp(AlignedSelectOp):
    """Exact elementwise ``max(lhs, rhs)`` of codes at one exponent, with broadcasting.

    ```mlir
    %z = nh.maximum %a, %b : (tensor<?x16xi8, #nh.fixed<7, BC>>,
        tensor<?x16xi16, #nh.fixed<7, BC>>) -> tensor<?x16xi16, #nh.fixed<7, BC>>
    ```
    """

    name = "nh.maximum"


@irdl_op_definition
class MinimumOp(AlignedSelectOp):
    """Exact elementwise ``min(lhs, rhs)`` of codes at one exponent, with broadcasting.

    ```mlir
    %z = nh.minimum %a, %b : (tensor<?x16xi8, #nh.fixed<7, BC>>,
        tensor<?x16xi8, #nh.fixed<7, BC>>) -> tensor<?x16xi8, #nh.fixed<7, BC>>
    ```
    """

    name = "nh.minimum"


@irdl_op_definition
class MulOp(IRDLOperation):
    """Exact ``lhs * rhs`` with broadcasting; exponents add: ``exp(r) = exp(lhs) + exp(rhs)``.

    ```mlir
    %z = nh.mul %a, %s : (tensor<?x16x4x4xi8, #nh.fixed<7, BCMD>>,
        tensor<16x1x1xi8, #nh.fixed<[5, ...], CMD>>) -> tensor<?x16x4x4xi16, #nh.fixed<[12, ...], BCMD>>
    ```
    """

    name = "nh.mul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        wa, _ = check_nh_value(self, self.lhs, "lhs")
        wb, _ = check_nh_value(self, self.rhs, "rhs")
        check_nh_value(self, self.result, "result")
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)
        ea, eb, er = broadcast_exps(self, [self.lhs, self.rhs, self.result], len(shape))
        check_exps_equal(self, "result exponent must be lhs + rhs exponent", ea + eb, er)
        if is_unsigned(self.result):
            raise VerifyException(
                f"nh.mul: the result must be signed, got {type_text(self.result)}"
            )
        check_fits(self, signed_bits(self.lhs) + signed_bits(self.rhs), self.result)


# --------------------------------------------------------------------------------------------
# Requantization and tables
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class RequantOp(IRDLOperation):
    """Shift to a new exponent and saturate:
    ``y = clamp(round(x * 2**-shift), lo, hi)`` with ``round`` = ``rounding`` (``trunc`` toward
    zero by default; ``floor`` = arithmetic shift; ``half_up`` adds ``2**(shift-1)`` first;
    ``half_even``), exact on integers; a negative ``shift`` is an exact left shift. ``lo, hi``
    are ``-2**(b-1), 2**(b-1)-1`` for an ``i<b>`` result; an ``i1`` result is
    ``x >= 0 ? +1 : -1``. ``shift = exp(x) - exp(y)``, per tensor or per channel.

    ```mlir
    %y = nh.requant %acc {shift = array<i64: 3>}
        : tensor<?x16x1x3xi32, #nh.fixed<10, BCMD>> -> tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>
    ```
    """

    name = "nh.requant"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    shift = prop_def(DenseArrayBase[I64])
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        check_nh_value(self, self.result, "result")
        check_result_shape(self, tensor_shape(self.input), self.result)
        _check_shift(self, self.shift, self.input, self.result)


def _check_shift(op: IRDLOperation, shift: DenseArrayBase, x: SSAValue, y: SSAValue) -> np.ndarray:
    """Check a ``shift`` property (one, or one per channel) against ``exp(x) - exp(y)``;
    the shifts shaped to broadcast over ``x``."""
    fx, fy = fixed_of(x), fixed_of(y)
    shifts = np.asarray(array_values(shift) or (), dtype=np.int64)
    rank = len(tensor_shape(x))
    if fx.is_per_channel or fy.is_per_channel:
        axis = (fx if fx.is_per_channel else fy).channel_axis
        assert axis is not None
        channels = len((fx if fx.is_per_channel else fy).exp_list)
        if len(shifts) not in (1, channels):
            raise VerifyException(f"{op.name}: {len(shifts)} shifts for {channels} channels")
        shape = [1] * rank
        shape[axis] = len(shifts)
        shifts = shifts.reshape(shape)
    elif len(shifts) != 1:
        raise VerifyException(f"{op.name}: per-tensor exponents take one shift, got {len(shifts)}")
    check_exps_equal(
        op,
        "shift must equal input exponent - result exponent",
        fx.exp_array(rank) - fy.exp_array(rank),
        shifts,
    )
    return shifts


@irdl_op_definition
class LutOp(IRDLOperation):
    """Table lookup, the exact lowering of float-only elementwise ops: ``y = T[x]`` where ``T``
    is the sub-table of ``x``'s channel.

    ``table`` holds one or more sub-tables back to back, in one of two forms:

    - dense (no ``starts``): a sub-table has one entry per code of the input type, entry
      ``x - lo`` for code ``x`` (``lo`` its smallest code; ``i1``: index 0 is -1, 1 is +1);
    - segmented (``starts``, one per entry): entry ``i`` holds the value of every input code
      from ``starts[i]`` up to the next start of its sub-table; each sub-table starts with
      ``lo``, so an entry whose start is ``lo`` begins a sub-table. An i16 input's dense table
      would have 65,536 entries per sub-table; the quantized output of a smooth function
      changes at only a few hundred codes at 8 bits out, so lower-to-hw writes wide inputs
      this way (a binary search over the starts).

    ``channels`` (one per channel along the per-channel axis, the first ``C`` of the layout)
    gives each channel's sub-table: per-channel input or result exponents need their own
    table per distinct pair of exponents. Without it there is one sub-table.

    ``function`` and ``params`` (optional) name the float function the table evaluates: the
    nf op's name without ``nf.`` and its float properties, as lower-to-hw writes them. The
    table alone is the semantics; a writer with a faster form of that function (the integer
    ONNX writer's float ops) uses it only after checking it gives the table at every code.

    ```mlir
    %y = nh.lut %x {table = array<i64: 0, 0, 1, 1>}
        : tensor<?x16xi2, #nh.fixed<1, BC>> -> tensor<?x16xi8, #nh.fixed<7, BC>>
    %z = nh.lut %w {table = array<i64: -1, 0, 1>, starts = array<i64: -32768, -5, 9>}
        : tensor<?x16xi16, #nh.fixed<10, BC>> -> tensor<?x16xi2, #nh.fixed<0, BC>>
    ```
    """

    name = "nh.lut"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    table = prop_def(DenseArrayBase[I64])
    starts = opt_prop_def(DenseArrayBase[I64])
    channels = opt_prop_def(DenseArrayBase[I64])
    function = opt_prop_def(StringAttr)
    params = opt_prop_def(DenseArrayBase[Float64Type])
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def sub_tables(self) -> int:
        """How many sub-tables ``table`` holds (the verifier checks the forms)."""
        win = width_of(self.input)
        if self.starts is not None:
            lo, _ = value_code_range(self.input)
            return sum(1 for s in array_values(self.starts) or () if s == lo)
        entries = 2 if win == 1 else 2**win
        return len(array_values(self.table) or ()) // entries

    def channel_axis(self) -> int | None:
        """The dim ``channels`` runs along: the per-channel axis of the input or result, else
        the input layout's first ``C``."""
        fx, fy = fixed_of(self.input), fixed_of(self.result)
        per = fx if fx.is_per_channel else fy
        return per.channel_axis

    def verify_(self) -> None:
        win, fx = check_nh_value(self, self.input, "input")
        wout, fy = check_nh_value(self, self.result, "result")
        check_result_shape(self, tensor_shape(self.input), self.result)
        table = array_values(self.table) or ()
        lo, hi = value_code_range(self.input)
        if self.starts is None:
            if win > 16:
                raise VerifyException(
                    f"nh.lut: a dense table over i{win} codes is too large; give starts"
                )
            entries = 2 if win == 1 else hi - lo + 1
            if not table or len(table) % entries:
                raise VerifyException(
                    f"nh.lut: table has {len(table)} entries, an i{win} input needs {entries} "
                    "per sub-table"
                )
        else:
            starts = array_values(self.starts) or ()
            if len(starts) != len(table):
                raise VerifyException(
                    f"nh.lut: {len(starts)} starts for {len(table)} table entries"
                )
            if not starts or starts[0] != lo:
                raise VerifyException(
                    f"nh.lut: starts must begin with the input's lowest code {lo}"
                )
            for a, b in zip(starts, starts[1:]):
                if not (b == lo or a < b <= hi):
                    raise VerifyException(
                        f"nh.lut: starts must increase within a sub-table and stay within "
                        f"i{win} codes (got {a} then {b})"
                    )
        if self.params is not None and self.function is None:
            raise VerifyException("nh.lut: params without the function they belong to")
        if self.params is not None and not all(map(math.isfinite, self.params.get_values())):
            raise VerifyException("nh.lut: params must be finite")
        subs = self.sub_tables()
        if fx.is_per_channel and fy.is_per_channel and fx.channel_axis != fy.channel_axis:
            raise VerifyException("nh.lut: input and result exponents run along different dims")
        if self.channels is None:
            if fx.is_per_channel or fy.is_per_channel:
                raise VerifyException(
                    "nh.lut: per-channel exponents need channels (each channel's sub-table)"
                )
            if subs != 1:
                raise VerifyException(f"nh.lut: {subs} sub-tables need channels to pick them")
        else:
            axis = self.channel_axis()
            if axis is None:
                raise VerifyException(
                    "nh.lut: channels needs per-channel input or result exponents"
                )
            extent = tensor_shape(self.input)[axis]
            chosen = array_values(self.channels) or ()
            if len(chosen) != extent:
                raise VerifyException(
                    f"nh.lut: {len(chosen)} channels for {shape_str([extent])} along dim {axis}"
                )
            bad_channel = [c for c in chosen if not 0 <= c < subs]
            if bad_channel:
                raise VerifyException(
                    f"nh.lut: channel sub-table {bad_channel[0]} is not one of the {subs}"
                )
        olo, ohi = value_code_range(self.result)
        bad = [v for v in table if not olo <= v <= ohi or (wout == 1 and v == 0)]
        if bad:
            raise VerifyException(
                f"nh.lut: table entry {bad[0]} does not fit {type_text(self.result)}"
            )


# --------------------------------------------------------------------------------------------
# Exponent-preserving ops
# --------------------------------------------------------------------------------------------


class SameTypeOp(IRDLOperation):
    """Base of ops whose result has the operand's nh type."""

    T: ClassVar = VarConstraint("T", AnyAttr())
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")


@irdl_op_definition
class ReluOp(SameTypeOp):
    """``max(x, 0)`` on codes.

    ```mlir
    %y = nh.relu %x : tensor<?x16x1x3xi8, #nh.fixed<7, BCMD>>
    ```
    """

    name = "nh.relu"


@irdl_op_definition
class ClampOp(SameTypeOp):
    """``min(max(x, min), max)`` on codes (bounds are codes at the tensor's exponent).

    ```mlir
    %y = nh.clamp %x {min = 0 : i64, max = 96 : i64} : tensor<?x16x4x4xi8, #nh.fixed<4, BCMD>>
    ```
    """

    name = "nh.clamp"
    min = opt_prop_def(IntegerAttr[I64])
    max = opt_prop_def(IntegerAttr[I64])

    def verify_(self) -> None:
        super().verify_()
        if (
            self.min is not None
            and self.max is not None
            and (self.min.value.data > self.max.value.data)
        ):
            raise VerifyException(
                f"nh.clamp: min {self.min.value.data} is greater than max {self.max.value.data}"
            )


@irdl_op_definition
class MaxPoolOp(IRDLOperation):
    """Max over each window of codes (padding never wins), exponent unchanged.

    ```mlir
    %y = nh.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
        : tensor<?x16x8x8xi8, #nh.fixed<4, BCMD>> -> tensor<?x16x4x4xi8, #nh.fixed<4, BCMD>>
    ```
    """

    name = "nh.max_pool"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = opt_prop_def(DenseArrayBase[I64])
    pads = opt_prop_def(DenseArrayBase[I64])
    dilations = opt_prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    traits = traits_def(Pure(), SlidingWindow("kernel"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        _pool_verify(self, array_values(self.dilations), same_width=True)


@irdl_op_definition
class AvgPoolOp(IRDLOperation):
    """Window mean on codes: ``y = round(sum(window) / (n * 2**shift), rounding)`` computed
    exactly on integers (``n`` = window size, or the in-bounds count when ``count_include_pad``
    is false, or ``divisor_override``); exponent unchanged, or lowered by ``shift`` (one, or one
    per channel, each >= 0: ``shift = exp(x) - exp(y)``), so that a mean rounded onto a coarser
    grid is rounded once (exact for every rounding mode, not only trunc and floor).

    ```mlir
    %y = nh.avg_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
        : tensor<?x16x8x8xi8, #nh.fixed<4, BCMD>> -> tensor<?x16x4x4xi8, #nh.fixed<4, BCMD>>
    ```
    """

    name = "nh.avg_pool"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = opt_prop_def(DenseArrayBase[I64])
    pads = opt_prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))
    divisor_override = opt_prop_def(IntegerAttr[I64])
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    shift = opt_prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), SlidingWindow("kernel"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        _pool_verify(self, None, same_width=True, shift=self.shift)
        if self.divisor_override is not None and self.divisor_override.value.data <= 0:
            raise VerifyException(
                f"nh.avg_pool: divisor_override {self.divisor_override.value.data} must be positive"
            )


def _pool_verify(
    op: MaxPoolOp | AvgPoolOp,
    dilations: tuple[int, ...] | None,
    same_width: bool,
    shift: DenseArrayBase | None = None,
) -> None:
    wx, fx = check_nh_value(op, op.input, "input")
    wy, fy = check_nh_value(op, op.result, "result")
    shape = shape_guard(
        op,
        infer_pool_shape,
        tensor_shape(op.input),
        array_values(op.kernel) or (),
        strides=array_values(op.strides),
        pads=array_values(op.pads),
        dilations=dilations,
        ceil_mode=bool(op.ceil_mode.value.data),
    )
    check_result_shape(op, shape, op.result)
    if same_width and (wx != wy or is_unsigned(op.input) != is_unsigned(op.result)):
        raise VerifyException(
            f"{op.name}: result {type_text(op.result)} must have the input's type "
            f"{type_text(op.input)}"
        )
    if not same_width and is_unsigned(op.result) and not is_unsigned(op.input):
        raise VerifyException(
            f"{op.name}: an unsigned result {type_text(op.result)} needs an unsigned input, got "
            f"{type_text(op.input)}"
        )
    if shift is None:
        check_exps_equal(op, "pooling keeps the exponent", fx.exp_array(), fy.exp_array())
    elif (_check_shift(op, shift, op.input, op.result) < 0).any():
        raise VerifyException(f"{op.name}: shift {list(array_values(shift) or ())} must be >= 0")


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenate along ``axis``; operands share one exponent, or the axis is the channel
    axis and the per-channel exponents concatenate too.

    ```mlir
    %y = nh.concat %a, %b {axis = 1 : i64} : (tensor<?x8x4x4xi8, #nh.fixed<5, BCMD>>,
        tensor<?x4x4x4xi8, #nh.fixed<5, BCMD>>) -> tensor<?x12x4x4xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), DataMovement(axis_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        widths = [check_nh_value(self, v, f"input {i}")[0] for i, v in enumerate(self.inputs)]
        wy, fy = check_nh_value(self, self.result, "result")
        axis = self.axis.value.data
        shape = shape_guard(self, infer_concat_shape, [tensor_shape(v) for v in self.inputs], axis)
        check_result_shape(self, shape, self.result)
        if is_unsigned(self.result):
            signed_in = [i for i, v in enumerate(self.inputs) if not is_unsigned(v)]
            if signed_in:
                raise VerifyException(
                    f"nh.concat: an unsigned result {type_text(self.result)} needs unsigned "
                    f"inputs; input {signed_in[0]} is {type_text(self.inputs[signed_in[0]])}"
                )
        else:  # a ui<b> input in a signed result needs b + 1 bits
            widths = [signed_bits(v) for v in self.inputs]
        if wy < max(widths):
            raise VerifyException(
                f"nh.concat: result {type_text(self.result)} is narrower than an input "
                f"i{max(widths)}"
            )
        axis %= len(shape)
        exps = [fixed_of(v).exp_array() for v in self.inputs]
        rank = len(shape)
        if fy.channel_axis == axis and fy.is_per_channel:
            # Joining along the channel axis: the result's exponents are the inputs', in order.
            full = np.concatenate(
                [
                    np.broadcast_to(
                        e, [1] * axis + [tensor_shape(v)[axis]] + [1] * (rank - axis - 1)
                    )
                    for e, v in zip(exps, self.inputs)
                ],
                axis=axis,
            )
            check_exps_equal(
                self, "result exponents must be the inputs' concatenated", full, fy.exp_array()
            )
            return
        for i, e in enumerate(exps):
            check_exps_equal(self, f"input {i} must share the result exponent", e, fy.exp_array())


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Reshape to the result type's shape, codes unchanged; exponents per tensor, or per
    channel when the channel count is unchanged.

    ```mlir
    %y = nh.reshape %x : tensor<?x16x5x5xi8, #nh.fixed<4, BCMD>> -> tensor<?x400xi8, #nh.fixed<4, BC>>
    ```
    """

    name = "nh.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(reshape_rows))
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        wx, fx = check_nh_value(self, self.input, "input")
        wy, fy = check_nh_value(self, self.result, "result")
        if wx != wy or is_unsigned(self.input) != is_unsigned(self.result):
            raise VerifyException(
                f"nh.reshape: element type changes from {type_text(self.input)} to "
                f"{type_text(self.result)}"
            )
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        if DYNAMIC_INDEX not in x and DYNAMIC_INDEX not in y and int(np.prod(x)) != int(np.prod(y)):
            raise VerifyException(
                f"nh.reshape: {shape_str(x)} and {shape_str(y)} have different element counts"
            )
        if fx.is_per_channel != fy.is_per_channel or fx.exp_list != fy.exp_list:
            raise VerifyException(
                f"nh.reshape: exponents change from {fx.exp_list} to {fy.exp_list}"
            )


@irdl_op_definition
class PReluOp(IRDLOperation):
    """``y = x > 0 ? x << shift : x * slope`` on codes: ``slope`` is a constant ``[C]`` or
    ``[1]`` of codes at exponent ``shift`` (>= 0), so both sides land on ``exp(x) + shift``.

    ```mlir
    %y = nh.prelu %x, %a {shift = 2 : i64} : (tensor<?x4x8x8xi8, #nh.fixed<5, BCMD>>,
        tensor<4xi4, #nh.fixed<2, C>>) -> tensor<?x4x8x8xi16, #nh.fixed<7, BCMD>>
    ```
    """

    name = "nh.prelu"
    input = operand_def(TensorType)
    slope = operand_def(TensorType)
    result = result_def(TensorType)
    shift = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), ChannelWise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input `,` $slope attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        _, fx = check_nh_value(self, self.input, "input")
        _, fs = check_nh_value(self, self.slope, "slope")
        _, fy = check_nh_value(self, self.result, "result")
        shift = self.shift.value.data
        if shift < 0:
            raise VerifyException(f"nh.prelu: shift {shift} must be >= 0")
        s = tensor_shape(self.slope)
        if len(s) != 1:
            raise VerifyException(f"nh.prelu: slope must be 1-D ([C] or [1]), got {shape_str(s)}")
        check_exps_equal(
            self, "the slope's exponent is the shift", fs.exp_array(1), np.array([shift])
        )
        x = tensor_shape(self.input)
        check_result_shape(self, x, self.result)
        check_exps_equal(
            self,
            "the result's exponent is the input's plus the shift",
            fx.exp_array(len(x)) + shift,
            fy.exp_array(len(x)),
        )


def _check_moved(
    op: IRDLOperation, x: SSAValue, y: SSAValue, move: np.ndarray | None = None
) -> None:
    """Data movement keeps the element width, and the exponents (``move``: as they move)."""
    wx, fx = check_nh_value(op, x, "input")
    wy, fy = check_nh_value(op, y, "result")
    if wx != wy or is_unsigned(x) != is_unsigned(y):
        raise VerifyException(
            f"{op.name}: element type changes from {type_text(x)} to {type_text(y)}"
        )
    rank = len(tensor_shape(y))
    want = fx.exp_array(len(tensor_shape(x))) if move is None else move
    check_exps_equal(op, "data movement keeps the exponents", want, fy.exp_array(rank))


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permute dims (``result.shape[i] = input.shape[perm[i]]``), codes and exponents moved.

    ```mlir
    %y = nh.transpose %x {perm = array<i64: 0, 1, 3, 2>}
        : tensor<?x4x6x8xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x8x6xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.transpose"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(transpose_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        perm = list(array_values(self.perm) or ())
        if sorted(perm) != list(range(len(x))):
            raise VerifyException(
                f"nh.transpose: perm {perm} is not a permutation of the {len(x)} dims"
            )
        check_result_shape(self, [x[p] for p in perm], self.result)
        check_nh_value(self, self.input, "input")
        moved = np.transpose(fixed_of(self.input).exp_array(len(x)), perm)
        _check_moved(self, self.input, self.result, moved)


@irdl_op_definition
class PadOp(IRDLOperation):
    """Pad every dim by ``pads`` (all begins, then all ends; negative crops) with ``mode``:
    ``constant`` (the code ``value``), ``reflect`` or ``edge``; exponents unchanged.

    ```mlir
    %y = nh.pad %x {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "constant", value = 0 : i64}
        : tensor<?x4x6x6xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x8x8xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.pad"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    pads = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr, default_value=StringAttr("constant"))
    value = prop_def(IntegerAttr[I64], default_value=IntegerAttr(0, i64))
    traits = traits_def(Pure(), DataMovement(pad_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        pads = list(array_values(self.pads) or ())
        n = len(x)
        if len(pads) != 2 * n:
            raise VerifyException(
                f"nh.pad: pads has {len(pads)} entries, expected {2 * n} for {shape_str(x)}"
            )
        if self.mode.data not in ("constant", "reflect", "edge"):
            raise VerifyException(f"nh.pad: unknown mode {self.mode.data!r}")
        if self.mode.data == "reflect":
            check_reflect_pads(self, x, pads)
        check_result_shape(
            self,
            [d if d == DYNAMIC_INDEX else d + pads[i] + pads[n + i] for i, d in enumerate(x)],
            self.result,
        )
        check_nh_value(self, self.result, "result")
        lo, hi = value_code_range(self.result)
        if self.mode.data == "constant" and not lo <= self.value.value.data <= hi:
            raise VerifyException(
                f"nh.pad: value {self.value.value.data} is not "
                f"{'a' if is_unsigned(self.result) else 'an'} {type_text(self.result)} code"
            )
        _check_moved(self, self.input, self.result)


@irdl_op_definition
class SplitOp(IRDLOperation):
    """Split along ``axis`` into pieces of ``sizes``; per-channel exponents split with them.

    ```mlir
    %a, %b = nh.split %x {axis = 1 : i64, sizes = array<i64: 3, 1>}
        : (tensor<?x4x6xi8, #nh.fixed<5, BCM>>)
        -> (tensor<?x3x6xi8, #nh.fixed<5, BCM>>, tensor<?x1x6xi8, #nh.fixed<5, BCM>>)
    ```
    """

    name = "nh.split"
    input = operand_def(TensorType)
    results_ = var_result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    sizes = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(axis_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        axis = self.axis.value.data
        if not -len(x) <= axis < len(x):
            raise VerifyException(f"nh.split: axis {axis} is out of range for {shape_str(x)}")
        axis %= len(x)
        sizes = list(array_values(self.sizes) or ())
        if len(sizes) != len(self.results_):
            raise VerifyException(f"nh.split: {len(sizes)} sizes for {len(self.results_)} results")
        if x[axis] != DYNAMIC_INDEX and sum(sizes) != x[axis]:
            raise VerifyException(f"nh.split: sizes {sizes} do not add up to {x[axis]}")
        check_nh_value(self, self.input, "input")
        e = fixed_of(self.input).exp_array(len(x))
        start = 0
        for size, r in zip(sizes, self.results_):
            check_result_shape(self, [size if i == axis else d for i, d in enumerate(x)], r)
            piece = e if e.shape[axis] == 1 else np.take(e, range(start, start + size), axis)
            _check_moved(self, self.input, r, piece)
            start += size


@irdl_op_definition
class UpsampleNearestOp(IRDLOperation):
    """Nearest-neighbour resize of the spatial dims to the result's sizes, as
    ``nf.upsample_nearest`` picks the pixels; codes and exponents unchanged.

    ```mlir
    %y = nh.upsample_nearest %x : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>
        -> tensor<?x4x6x6xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.upsample_nearest"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(scale_rows))
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        if (
            len(x) < 3
            or len(x) != len(y)
            or list(x[:2]) != list(y[:2])
            or any(d == DYNAMIC_INDEX or d <= 0 for d in y[2:])
        ):
            raise VerifyException(
                f"nh.upsample_nearest: {shape_str(x)} -> {shape_str(y)} must "
                "keep batch, channels and rank, with static spatial sizes"
            )
        _check_moved(self, self.input, self.result)


@irdl_op_definition
class UpsampleZeroOp(IRDLOperation):
    """``nf.upsample_zero`` on codes: each code at ``offsets`` of its window, code 0
    elsewhere (a 0 at any exponent); exponents unchanged (an ``i1`` input, whose codes are
    only -1 and +1, is widened to ``i2`` first).

    ```mlir
    %y = nh.upsample_zero %x {offsets = array<i64: 0, 0>} : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>
        -> tensor<?x4x6x6xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.upsample_zero"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    offsets = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(upsample_zero_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_upsample_zero(self.name, x, y, array_values(self.offsets) or ())
        _check_moved(self, self.input, self.result)
        if width_of(self.result) == 1 and not is_unsigned(self.result):
            raise VerifyException(f"{self.name}: i1 codes cannot hold the zeros (use i2)")


@irdl_op_definition
class UpsampleBilinearOp(IRDLOperation):
    """``nf.upsample_bilinear`` on codes, exact: the sum with integer weights 1 and 3 per
    doubled dim (``4**n`` times the value, ``n`` doubled dims), so the result's exponent is
    the input's plus ``2 n`` and its codes need ``2 n`` more bits; the output fake-quant's
    requant is the one rounding.

    ```mlir
    %y = nh.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>}
        : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi16, #nh.fixed<9, BCMD>>
    ```
    """

    name = "nh.upsample_bilinear"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    pads = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), BilinearRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        doubled = sum(check_upsample_bilinear(self.name, x, y))
        if list(array_values(self.pads) or ()) != [1] * (2 * (len(x) - 2)):
            raise VerifyException(f"{self.name}: pads must be 1 per spatial dim and end")
        _, fx = check_nh_value(self, self.input, "input")
        _, fy = check_nh_value(self, self.result, "result")
        want = fx.exp_array(len(x)) + 2 * doubled
        what = f"the result's exponent is the input's + {2 * doubled}"
        check_exps_equal(self, what, want, fy.exp_array(len(y)))
        if is_unsigned(self.result):
            raise VerifyException(f"{self.name}: the result must be signed")
        check_fits(self, max(signed_bits(self.input), 2) + 2 * doubled, self.result)


@irdl_op_definition
class MaxPoolIndicesOp(IRDLOperation):
    """``nf.max_pool_indices`` on codes (the order of codes is the order of values, so the
    same window positions win): ``i32`` indices at exponent 0.

    ```mlir
    %i = nh.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
        : tensor<?x4x6x6xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x3x3xi32, #nh.fixed<0, BCMD>>
    ```
    """

    name = "nh.max_pool_indices"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), PlaneRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_plane_op(self.name, x, y)
        check_nh_value(self, self.input, "input")
        _, fy = check_nh_value(self, self.result, "result")
        if width_of(self.result) != 32 or is_unsigned(self.result) or (fy.exp_array(4) != 0).any():
            raise VerifyException(f"{self.name}: the indices are i32 at exponent 0")


@irdl_op_definition
class MaxUnpoolOp(IRDLOperation):
    """``nf.max_unpool`` on codes: each code at its index, code 0 elsewhere; exponents
    unchanged. The indices are integers at exponent 0 wide enough for the plane (``i32``, as
    ``nh.max_pool_indices`` gives them: they count positions, they are not activations).

    ```mlir
    %y = nh.max_unpool %p, %i : (tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>>,
        tensor<?x4x3x3xi32, #nh.fixed<0, BCMD>>) -> tensor<?x4x6x6xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.max_unpool"
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(plane_rows))
    assembly_format = "$input `,` $indices attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_plane_op(self.name, x, y)
        _check_moved(self, self.input, self.result)
        if width_of(self.result) == 1 and not is_unsigned(self.result):
            raise VerifyException(f"{self.name}: i1 codes cannot hold the zeros (use i2)")
        _, fi = check_nh_value(self, self.indices, "indices")
        if (fi.exp_array(4) != 0).any():
            raise VerifyException(f"{self.name}: the indices are at exponent 0")
        plane = math.prod(y[2:])
        if value_code_range(self.indices)[1] < plane - 1:
            raise VerifyException(
                f"{self.name}: {type_text(self.indices)} indices cannot hold index {plane - 1} "
                f"of the {plane}-element plane (nh.max_pool_indices gives i32)"
            )


@irdl_op_definition
class EmbeddingOp(IRDLOperation):
    """``nf.embedding`` on codes: row ``indices[...]`` of the constant table's codes (one
    exponent for the whole table), the indices ``i32`` at exponent 0 (the program's input).

    ```mlir
    %y = nh.embedding %ids, %table : (tensor<?x8xi32, #nh.fixed<0, BC>>,
        tensor<100x16xi8, #nh.fixed<5, CC>>) -> tensor<?x8x16xi8, #nh.fixed<5, BCD>>
    ```
    """

    name = "nh.embedding"
    indices = operand_def(TensorType)
    table = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(embedding_rows))
    assembly_format = "$indices `,` $table attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        check_embedding(self.name, self.indices, self.table, self.result)
        _, fi = check_nh_value(self, self.indices, "indices")
        if (
            width_of(self.indices) != 32
            or is_unsigned(self.indices)
            or (fi.exp_array(len(tensor_shape(self.indices))) != 0).any()
        ):
            raise VerifyException(f"{self.name}: the indices are i32 at exponent 0")
        wt, ft = check_nh_value(self, self.table, "table")
        wy, fy = check_nh_value(self, self.result, "result")
        if wt != wy or is_unsigned(self.table) != is_unsigned(self.result):
            raise VerifyException(
                f"{self.name}: element type changes from {type_text(self.table)} to "
                f"{type_text(self.result)}"
            )
        te = ft.exp_array(2)
        if te.size != 1 and not (te == te.reshape(-1)[0]).all():
            raise VerifyException(f"{self.name}: the table has one exponent (per tensor)")
        rank = len(tensor_shape(self.result))
        want = np.full((1,) * rank, int(te.reshape(-1)[0]))
        check_exps_equal(self, "data movement keeps the exponents", want, fy.exp_array(rank))


def block_moved_exps(to_space: bool, exps: np.ndarray, block: int, mode: str) -> np.ndarray | None:
    """The exponents (``[1, C, 1...]`` or all ones) after depth_to_space (``to_space``) or
    space_to_depth, moved by the same kernel as the codes; None where one result channel
    would mix input channels of different exponents."""
    if exps.size == 1:
        return exps
    rank = exps.ndim
    if not to_space:
        spread = np.broadcast_to(exps, (*exps.shape[:2], *(block,) * (rank - 2)))
        return kernels.space_to_depth(np.ascontiguousarray(spread), block, mode)
    moved = kernels.depth_to_space(exps, block, mode)
    first = moved[(Ellipsis, *(slice(0, 1),) * (rank - 2))]
    return first if (moved == first).all() else None


class _BlockOp(IRDLOperation):
    """nh.depth_to_space / nh.space_to_depth: the nf op's codes moved; per-channel
    exponents move with their channels (:func:`block_moved_exps`)."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    block = prop_def(IntegerAttr[I64])
    mode = prop_def(StringAttr, default_value=StringAttr("CRD"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        if self.mode.data not in ("CRD", "DCR"):
            raise VerifyException(f"{self.name}: mode {self.mode.data!r} is not CRD or DCR")
        rank = len(tensor_shape(self.input))
        moved = block_moved_exps(
            isinstance(self, DepthToSpaceOp),
            fixed_of(self.input).exp_array(rank),
            self.block.value.data,
            self.mode.data,
        )
        if moved is None:
            raise VerifyException(f"{self.name}: merges channels of different exponents")
        _check_moved(self, self.input, self.result, moved)


@irdl_op_definition
class DepthToSpaceOp(_BlockOp):
    """``nf.depth_to_space`` on codes (ONNX DepthToSpace; CRD = PixelShuffle).

    ```mlir
    %y = nh.depth_to_space %x {block = 2 : i64} : tensor<?x8x3x3xi8, #nh.fixed<5, BCMD>>
        -> tensor<?x2x6x6xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.depth_to_space"
    traits = traits_def(Pure(), DataMovement(depth_to_space_rows))


@irdl_op_definition
class SpaceToDepthOp(_BlockOp):
    """``nf.space_to_depth`` on codes (ONNX SpaceToDepth = DCR; CRD = PixelUnshuffle).

    ```mlir
    %y = nh.space_to_depth %x {block = 2 : i64} : tensor<?x2x6x6xi8, #nh.fixed<5, BCMD>>
        -> tensor<?x8x3x3xi8, #nh.fixed<5, BCMD>>
    ```
    """

    name = "nh.space_to_depth"
    traits = traits_def(Pure(), DataMovement(space_to_depth_rows))


@irdl_op_definition
class ExpandOp(IRDLOperation):
    """``nf.expand`` on codes: broadcast to the result type's shape; exponents broadcast with
    the codes (right-aligned, as the data). A dim grown to a dynamic size takes the same dim
    of the shape source ``like`` (any nh value; only its shape is read), as ``nf.expand``.

    ```mlir
    %y = nh.expand %x : tensor<?x4x1xi8, #nh.fixed<5, BCM>> -> tensor<?x4x6xi8, #nh.fixed<5, BCM>>
    %c = nh.expand %cls like %x : tensor<1x1x8xi8, #nh.fixed<7>>
        like tensor<?x3x16x16xi8, #nh.fixed<5, BCMD>> -> tensor<?x1x8xi8, #nh.fixed<7>>
    ```
    """

    name = "nh.expand"
    input = operand_def(TensorType)
    like = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(expand_rows, shape_only=(1,)))
    assembly_format = (
        "$input (`like` $like^)? attr-dict `:` type($input) (`like` type($like)^)? "
        "`->` type($result)"
    )

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_expand_like(self, self.input, self.like, self.result)
        check_nh_value(self, self.input, "input")
        e = fixed_of(self.input).exp_array(len(x))
        _check_moved(self, self.input, self.result, e.reshape((1,) * (len(y) - len(x)) + e.shape))


@irdl_op_definition
class GatherOp(IRDLOperation):
    """``nf.gather`` on codes: the slices ``indices`` along ``axis``; per-channel exponents
    along ``axis`` are gathered with their channels.

    ```mlir
    %y = nh.gather %x {axis = 1 : i64, indices = array<i64: 2, 0>}
        : tensor<?x4x6xi8, #nh.fixed<[5, 4, 3, 2], BCM>> -> tensor<?x2x6xi8, #nh.fixed<[3, 5], BCM>>
    ```
    """

    name = "nh.gather"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    indices = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(gather_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        axis, indices = self.axis.value.data, list(array_values(self.indices) or ())
        shape = shape_guard(self, gather_shape, x, axis, len(indices))
        shape_guard(self, check_indices, x, axis, indices)
        check_result_shape(self, shape, self.result)
        check_nh_value(self, self.input, "input")
        e = fixed_of(self.input).exp_array(len(x))
        axis %= len(x)
        moved = e if e.shape[axis] == 1 else movement.gather(e, axis, indices)
        _check_moved(self, self.input, self.result, moved)


# --------------------------------------------------------------------------------------------
# Ops defined by an integer algorithm: softmax, log-softmax (nanoir.runtime.numerics.softmax)
# --------------------------------------------------------------------------------------------


class _SoftmaxCodesOp(IRDLOperation):
    """Base of nh.softmax and nh.log_softmax: the integer algorithm of
    ``nanoir.runtime.numerics.softmax`` over ``axis``, with its i-exp tables as properties
    (built for the input fake-quant's bits, which may be narrower than the input's width;
    a code difference past the tables' reach reads their last entry)."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    bits = prop_def(IntegerAttr[I64])
    """Output bits (the result saturates to them; its width may be wider)."""
    exp_hi = prop_def(DenseArrayBase[I64])
    exp_lo = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), WholeAlongAxis())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        win, fx = check_nh_value(self, self.input, "input")
        wout, fy = check_nh_value(self, self.result, "result")
        check_result_shape(self, tensor_shape(self.input), self.result)
        rank = len(tensor_shape(self.input))
        axis = self.axis.value.data
        if rank == 0 or not -rank <= axis < rank:
            raise VerifyException(f"{self.name}: axis {axis} is out of range for rank {rank}")
        if fx.is_per_channel or fy.is_per_channel:
            raise VerifyException(f"{self.name}: input and result need per-tensor exponents")
        bits = self.bits.value.data
        if not 2 <= bits <= wout:
            raise VerifyException(f"{self.name}: bits {bits} do not fit the result's i{wout}")
        hi, lo = array_values(self.exp_hi) or (), array_values(self.exp_lo) or ()
        if not hi or len(lo) == 0 or len(lo) & (len(lo) - 1):
            raise VerifyException(
                f"{self.name}: exp tables of {len(hi)} and {len(lo)} entries (both non-empty, "
                "the low table's size a power of two)"
            )
        if any(not 0 <= v <= 2**30 for v in hi) or any(not 0 <= v <= 2**22 for v in lo):
            raise VerifyException(
                f"{self.name}: exp table entries must lie in 0..2**30 (high) and 0..2**22 (low)"
            )


@irdl_op_definition
class SoftmaxOp(_SoftmaxCodesOp):
    """Integer softmax over ``axis``: ``d = max - x`` (masked positions excluded),
    ``e = floor((exp_hi[d >> m] * exp_lo[d & (2**m - 1)] + 2**21) / 2**22)`` (``2**m`` =
    ``len(exp_lo)``; ``e <= 2**30``), ``S = sum(e)`` in i64 (``<= N * 2**30``), then
    ``y = sat_bits(floor((e * 2**k + S/2) / S))`` with ``k`` the result's exponent (half up);
    a fully masked row gives 0. ``mask`` (optional, i1, NumPy-broadcast against the input;
    true = takes part) is a compile-time constant.

    ```mlir
    %y = nh.softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: ...>,
        exp_lo = array<i64: ...>} : tensor<?x10xi8, #nh.fixed<4, BC>> -> tensor<?x10xi8, #nh.fixed<7, BC>>
    ```
    """

    name = "nh.softmax"
    mask = opt_prop_def(DenseIntOrFPElementsAttr)

    def verify_(self) -> None:
        super().verify_()
        if self.mask is None:
            return
        t = self.mask.get_type()
        elt = t.get_element_type()  # type: ignore[union-attr]
        if not isinstance(elt, IntegerType) or elt.width.data != 1:
            raise VerifyException(f"nh.softmax: mask must hold i1, not {elt}")
        x, m = tensor_shape(self.input), tuple(t.get_shape())  # type: ignore[union-attr]
        try:
            shape = broadcast_shapes(x, m)
        except Exception:
            shape = None
        if shape is None or len(m) > len(x) or tuple(shape) != tuple(x):
            raise VerifyException(
                f"nh.softmax: mask {shape_str(m)} does not broadcast to the input {shape_str(x)}"
            )


@irdl_op_definition
class LogSoftmaxOp(_SoftmaxCodesOp):
    """Integer log-softmax over ``axis``: ``e`` and ``S`` as ``nh.softmax``, then
    ``y = sat_bits(floor(((x - max) * 2**a - ln30(S) * 2**b + 2**(c-1)) / 2**c))`` with
    ``ln30(S) = round(ln(S / 2**30) * 2**30)`` from the bit length of ``S`` and a 1025-entry
    table of ``ln(1 + f)``, interpolated (``nanoir.runtime.numerics.softmax.ln_fixed``), and
    ``c = max(k_in - k, 30 - k, 0)``, ``a = k - k_in + c``, ``b = k - 30 + c``; every
    intermediate below ``2**52``.

    ```mlir
    %y = nh.log_softmax %x {axis = 1 : i64, bits = 8 : i64, exp_hi = array<i64: ...>,
        exp_lo = array<i64: ...>} : tensor<?x10xi8, #nh.fixed<4, BC>> -> tensor<?x10xi8, #nh.fixed<3, BC>>
    ```
    """

    name = "nh.log_softmax"


# --------------------------------------------------------------------------------------------
# LayerNorm and GroupNorm, integer algorithm (nanoir.runtime.numerics.norm)
# --------------------------------------------------------------------------------------------


class _NormCodesOp(IRDLOperation):
    """Base of nh.layer_norm and nh.group_norm: the integer algorithm of
    ``nanoir.runtime.numerics.norm`` with its static plan as properties."""

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    bits = prop_def(IntegerAttr[I64])
    """Output bits (the result saturates to them; its width may be wider)."""
    max_shift = prop_def(IntegerAttr[I64])
    eps_term = prop_def(IntegerAttr[I64])
    guard = prop_def(IntegerAttr[I64])
    nudge = prop_def(IntegerAttr[I64])
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    traits = traits_def(Pure(), Normalising())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)"
    )

    def reduced(self) -> int:
        """Codes per normalised group (static)."""
        raise NotImplementedError

    def verify_(self) -> None:
        for label, v in (("input", self.input), ("weight", self.weight), ("bias", self.bias)):
            _, f = check_nh_value(self, v, label)
            if f.is_per_channel:
                raise VerifyException(f"{self.name}: {label} needs a per-tensor exponent")
        wout, fy = check_nh_value(self, self.result, "result")
        if fy.is_per_channel:
            raise VerifyException(f"{self.name}: result needs a per-tensor exponent")
        check_result_shape(self, tensor_shape(self.input), self.result)
        bits = self.bits.value.data
        if not 2 <= bits <= wout:
            raise VerifyException(f"{self.name}: bits {bits} do not fit the result's i{wout}")
        for name in ("max_shift", "eps_term", "guard", "nudge"):
            value = getattr(self, name).value.data
            if not 0 <= value < 2**62:
                raise VerifyException(f"{self.name}: {name} {value} is not in 0..2**62")
        if self.max_shift.value.data > 30:
            raise VerifyException(f"{self.name}: max_shift {self.max_shift.value.data} > 30")


@irdl_op_definition
class LayerNormOp(_NormCodesOp):
    """Integer LayerNorm over the last ``normalized_dims`` dims (``n`` codes per row): i64
    ``S1 = sum x``, ``S2 = sum x**2``, ``V = n S2 - S1**2``; per row ``h = clamp((61 -
    bitlen(V + (eps_term >> 2 max_shift) + 1)) // 2, 0, max_shift)``, ``sigma = max(isqrt(V
    4**h + (eps_term >> 2 (max_shift - h))), 1)``; per element ``z = round_half_up((n x - S1)
    2**(h + F) / sigma)`` with ``F = k_out + guard - k_w``, ``acc = z w + b 2**(k_out + guard
    - k_b)`` (i64), moved by ``nudge`` (up for floor, away from zero for trunc), then
    ``sat_bits(round(acc 2**-guard))`` with ``rounding``. Every intermediate below 2**62.

    ```mlir
    %y = nh.layer_norm %x, %w, %b {normalized_dims = 1 : i64, bits = 8 : i64,
        max_shift = 30 : i64, eps_term = 11258999 : i64, guard = 24 : i64, nudge = 3 : i64}
        : (tensor<?x4x16xi8, #nh.fixed<4, BCD>>, tensor<16xi8, #nh.fixed<6, C>>,
           tensor<16xi8, #nh.fixed<7, C>>) -> tensor<?x4x16xi8, #nh.fixed<5, BCD>>
    ```
    """

    name = "nh.layer_norm"
    normalized_dims = prop_def(IntegerAttr[I64])

    def reduced(self) -> int:
        shape = tensor_shape(self.input)
        return int(np.prod(shape[len(shape) - self.normalized_dims.value.data :]))

    def verify_(self) -> None:
        super().verify_()
        x = tensor_shape(self.input)
        dims = self.normalized_dims.value.data
        if not 1 <= dims <= len(x) or DYNAMIC_INDEX in x[len(x) - dims :]:
            raise VerifyException(
                f"nh.layer_norm: normalized_dims {dims} must name static trailing dims of "
                f"{shape_str(x)}"
            )
        for label, v in (("weight", self.weight), ("bias", self.bias)):
            if tensor_shape(v) != x[len(x) - dims :]:
                raise VerifyException(
                    f"nh.layer_norm: {label} shape {shape_str(tensor_shape(v))} is not the "
                    f"normalised shape {shape_str(x[len(x) - dims :])}"
                )


@irdl_op_definition
class GroupNormOp(_NormCodesOp):
    """Integer GroupNorm of ``[N, C, *spatial]``: ``nh.layer_norm``'s algorithm on each group
    of ``C / groups`` channels and every position, per-channel ``weight`` and ``bias``.

    ```mlir
    %y = nh.group_norm %x, %w, %b {groups = 2 : i64, bits = 8 : i64, max_shift = 30 : i64,
        eps_term = 0 : i64, guard = 24 : i64, nudge = 3 : i64}
        : (tensor<?x8x100xi8, #nh.fixed<4, BCM>>, tensor<8xi8, #nh.fixed<6, C>>,
           tensor<8xi8, #nh.fixed<7, C>>) -> tensor<?x8x100xi8, #nh.fixed<5, BCM>>
    ```
    """

    name = "nh.group_norm"
    groups = prop_def(IntegerAttr[I64])

    def reduced(self) -> int:
        shape = tensor_shape(self.input)
        return int(np.prod(shape[1:])) // self.groups.value.data

    def verify_(self) -> None:
        super().verify_()
        x = tensor_shape(self.input)
        groups = self.groups.value.data
        if len(x) < 2 or DYNAMIC_INDEX in x[1:] or groups < 1 or x[1] % groups:
            raise VerifyException(
                f"nh.group_norm: {shape_str(x)} does not split into {groups} groups of static "
                "channels and positions"
            )
        for label, v in (("weight", self.weight), ("bias", self.bias)):
            if tensor_shape(v) != (x[1],):
                raise VerifyException(
                    f"nh.group_norm: {label} shape {shape_str(tensor_shape(v))} is not [{x[1]}]"
                )


# --------------------------------------------------------------------------------------------
# Recurrent layers, integer cell (nanoir.runtime.numerics.recurrent)
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class RecurrentOp(IRDLOperation):
    """The integer LSTM / GRU / RNN of ``nf.recurrent`` (same operands, results and layout
    properties) on codes: per step, each gate's pre-activation ``x W_ih + b_ih + h W_hh +
    b_hh`` summed exactly in i64 (terms left-shifted to the finest exponent; past ``2**62`` is
    a runtime error); requantized (``rounding``, saturated) to ``gates = [exp, bits]``; then
    ``sigmoid_table`` / ``tanh_table`` (one Q0.15 entry per gate code, ``qmin`` first); the
    LSTM cell ``f c + i g`` exact at 30 fraction bits, requantized to ``cell = [exp, bits]``,
    and ``tanh`` of it read through the gates grid; the hidden state (``o tanh(c)``, GRU ``(1 -
    z) n + z h``, RNN ``tanh(a)`` or ``relu(a)``) requantized to ``hidden = [exp, bits]`` (the
    results' exponent). ``h0``/``c0`` are requantized to those grids first.

    ```mlir
    %y, %h = nh.recurrent %x : tensor<?x20x4xi8, #nh.fixed<5, BCM>>
        weights(%wi, %wh : tensor<24x4xi8, #nh.fixed<7, CD>>, tensor<24x8xi8, #nh.fixed<7, CD>>)
        {mode = "gru", hidden_size = 8 : i64, num_layers = 1 : i64, bidirectional = false,
        batch_first = true, has_biases = false, gates = array<i64: 5, 8>,
        cell = array<i64: 32, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", sigmoid_table = array<i64: ...>,
        tanh_table = array<i64: ...>}
        -> tensor<?x20x8xi8, #nh.fixed<7, BMC>>, tensor<1x?x8xi8, #nh.fixed<7, BDC>>
    ```

    The results' layouts are :meth:`result_layouts`'s.
    """

    name = "nh.recurrent"
    input = operand_def(TensorType)
    h0 = opt_operand_def(TensorType)
    c0 = opt_operand_def(TensorType)
    weights = var_operand_def(TensorType)
    output = result_def(TensorType)
    h_n = result_def(TensorType)
    c_n = opt_result_def(TensorType)
    mode = prop_def(StringAttr)
    hidden_size = prop_def(IntegerAttr[I64])
    num_layers = prop_def(IntegerAttr[I64])
    bidirectional = prop_def(BoolAttr)
    batch_first = prop_def(BoolAttr)
    has_biases = prop_def(BoolAttr)
    gates = prop_def(DenseArrayBase[I64])
    cell = prop_def(DenseArrayBase[I64])
    hidden = prop_def(DenseArrayBase[I64])
    rounding = prop_def(StringAttr)
    sigmoid_table = prop_def(DenseArrayBase[I64])
    tanh_table = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Recurrent())
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "$input `:` type($input) (`h0` `(` $h0^ `:` type($h0) `)`)? "
        "(`c0` `(` $c0^ `:` type($c0) `)`)? `weights` `(` $weights `:` type($weights) `)` "
        "attr-dict `->` type(results)"
    )

    @staticmethod
    def result_layouts(batch_first: bool) -> tuple[str, str]:
        """The layouts of the sequence output and of the final states: ``BMC`` (batch, time,
        features) and ``BDC`` (``[L*D, N, H]``), a time-major output ``BDC``. A runtime
        tensor's layout starts with B, which names its dim 0 (what the ``.ne`` format needs to
        tell runtime tensors from init ones, and what a time-major input, ``BCM``, already
        does); C is the feature dim, which per-channel consumers look up."""
        return ("BMC" if batch_first else "BDC"), "BDC"

    @property
    def layout(self) -> recurrent_numerics.RecurrentLayout:
        return recurrent_numerics.RecurrentLayout(
            self.mode.data,
            self.hidden_size.value.data,
            self.num_layers.value.data,
            bool(self.bidirectional.value.data),
            bool(self.batch_first.value.data),
            bool(self.has_biases.value.data),
        )

    def grid(self, which: str) -> recurrent_numerics.Grid:
        """The ``gates``, ``cell`` or ``hidden`` grid (``[exp, bits]``)."""
        exp, bits = array_values(self.properties[which])  # type: ignore[arg-type, misc]
        return recurrent_numerics.Grid(exp, bits)

    def verify_(self) -> None:
        mode = self.mode.data
        if mode not in recurrent_numerics.MODES:
            raise VerifyException(f"nh.recurrent: mode {mode!r} is unknown")
        layout = self.layout
        x = tensor_shape(self.input)
        if len(x) != 3:
            raise VerifyException(f"nh.recurrent: input must be rank 3, got {shape_str(x)}")
        for label, v in (("input", self.input), ("output", self.output), ("h_n", self.h_n)):
            _, fx = check_nh_value(self, v, label)
            if fx.is_per_channel or is_unsigned(v):
                raise VerifyException(f"nh.recurrent: {label} needs signed per-tensor codes")
        if (self.c_n is not None) != (mode == "lstm") or (self.c0 is not None and mode != "lstm"):
            raise VerifyException("nh.recurrent: only an lstm has c0 and c_n")
        expected = layout.weight_shapes(x[2])
        got = [tensor_shape(w) for w in self.weights]
        if len(got) != len(expected) or any(tuple(e) != tuple(g) for e, g in zip(expected, got)):
            raise VerifyException(
                f"nh.recurrent: weights {', '.join(shape_str(g) for g in got)} are not "
                f"{', '.join(shape_str(e) for e in expected)}"
            )
        out, state, _ = layout.result_shapes(x)
        check_result_shape(self, out, self.output)
        check_result_shape(self, state, self.h_n)
        gates = self.grid("gates")
        for name in ("sigmoid_table", "tanh_table"):
            table = array_values(self.properties[name]) or ()  # type: ignore[arg-type]
            if len(table) != 2**gates.bits or any(abs(v) >= 2**15 for v in table):
                raise VerifyException(
                    f"nh.recurrent: {name} must have 2**{gates.bits} entries below 2**15 in "
                    f"magnitude, got {len(table)}"
                )
        hidden = self.grid("hidden")
        for label, v in (("output", self.output), ("h_n", self.h_n)):
            if fixed_of(v).exp_list != [hidden.exp] or width_of(v) < hidden.bits:
                raise VerifyException(
                    f"nh.recurrent: {label} is not on the hidden grid [{hidden.exp}, {hidden.bits}]"
                )
        if self.c_n is not None and fixed_of(self.c_n).exp_list[0] != self.grid("cell").exp:
            raise VerifyException("nh.recurrent: c_n is not on the cell grid")


# --------------------------------------------------------------------------------------------
# Comparisons and selection (issue 32)
# --------------------------------------------------------------------------------------------

COMPARE_PREDICATES = tuple(compare_numerics.PREDICATES)
"""``nh.compare``'s predicates (``nf.compare``'s): orderings of codes at one exponent, and
logical ones of the codes being non-zero."""


@irdl_op_definition
class CompareOp(IRDLOperation):
    """``lhs <predicate> rhs`` on codes, with broadcasting: ``1`` (true) or ``0`` (false)
    at exponent 0. The orderings (``eq`` ... ``ge``) compare operands aligned to one exponent
    (then codes compare as their values do); ``and``/``or``/``xor`` read each code as
    non-zero or zero, at any exponents.

    ```mlir
    %m = nh.compare "lt" %x, %t : (tensor<?x16xi8, #nh.fixed<5, BC>>,
        tensor<1xi8, #nh.fixed<5, C>>) -> tensor<?x16xi2, #nh.fixed<0, BC>>
    ```
    """

    name = "nh.compare"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    predicate = prop_def(StringAttr)
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$predicate $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        check_nh_value(self, self.lhs, "lhs")
        check_nh_value(self, self.rhs, "rhs")
        width, fr = check_nh_value(self, self.result, "result")
        if self.predicate.data not in COMPARE_PREDICATES:
            raise VerifyException(
                f"nh.compare: predicate {self.predicate.data!r} is not one of "
                + ", ".join(COMPARE_PREDICATES)
            )
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)
        if self.predicate.data not in compare_numerics.LOGICAL:
            ea, eb = broadcast_exps(self, [self.lhs, self.rhs], len(shape))
            check_exps_equal(self, "operands must be aligned to one exponent", ea, eb)
        if width < 2 or fr.is_per_channel or fr.exp_list != [0]:
            raise VerifyException(
                f"nh.compare: the result holds 0 and 1 at exponent 0 (i2 or wider), got "
                f"{type_text(self.result)} at exponent {exps_text(fr.exp_array())}"
            )


@irdl_op_definition
class SelectOp(IRDLOperation):
    """``lhs`` where the code of ``cond`` is non-zero, else ``rhs``, with broadcasting:
    ``lhs`` and ``rhs`` at one exponent, kept by the result, which holds both code ranges.

    ```mlir
    %y = nh.select %m, %x, %v : (tensor<?x16xi2, #nh.fixed<0, BC>>,
        tensor<?x16xi8, #nh.fixed<5, BC>>, tensor<1xi8, #nh.fixed<5, C>>)
        -> tensor<?x16xi8, #nh.fixed<5, BC>>
    ```
    """

    name = "nh.select"
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def verify_(self) -> None:
        check_nh_value(self, self.cond, "cond")
        check_nh_value(self, self.lhs, "lhs")
        check_nh_value(self, self.rhs, "rhs")
        check_nh_value(self, self.result, "result")
        shape = shape_guard(
            self,
            lambda a, b, c: broadcast_shapes(broadcast_shapes(a, b), c),
            tensor_shape(self.cond),
            tensor_shape(self.lhs),
            tensor_shape(self.rhs),
        )
        check_result_shape(self, shape, self.result)
        ea, eb, er = broadcast_exps(self, [self.lhs, self.rhs, self.result], len(shape))
        check_exps_equal(self, "lhs and rhs must be aligned to one exponent", ea, eb)
        check_exps_equal(self, "the result keeps the operands' exponent", ea, er)
        (la, ha), (lb, hb) = value_code_range(self.lhs), value_code_range(self.rhs)
        lo, hi = value_code_range(self.result)
        if lo > min(la, lb) or hi < max(ha, hb):
            raise VerifyException(
                f"nh.select: result {type_text(self.result)} cannot hold the codes of "
                f"{type_text(self.lhs)} and {type_text(self.rhs)}"
            )


# --------------------------------------------------------------------------------------------
# Reductions and prefix sums (issue 32)
# --------------------------------------------------------------------------------------------


def _check_not_per_channel_along(op: IRDLOperation, value: SSAValue, dims: Sequence[int]) -> None:
    """Codes of different exponents do not add or order: no per-channel exponents along a
    reduced dim."""
    f = fixed_of(value)
    if f.is_per_channel and f.channel_axis in dims:
        raise VerifyException(
            f"{op.name}: the input's per-channel exponents run along reduced dim "
            f"{f.channel_axis}; align them to one exponent first"
        )


def _reduced_count(shape: Sequence[int], dims: Sequence[int]) -> int | None:
    sizes = [shape[d] for d in dims]
    return None if DYNAMIC_INDEX in sizes else math.prod(sizes)


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """``sum``, ``max`` or ``min`` of codes over ``dims`` (kept with size 1), exponents kept:
    exact; a sum of ``n`` codes of ``b`` signed bits needs ``b + ceil(log2 n)`` bits (a
    dynamic ``n``: the result is ``i32`` and the kernel checks it).

    ```mlir
    %s = nh.reduce "sum" %x {dims = array<i64: 2>}
        : tensor<?x16x8xi8, #nh.fixed<5, BCM>> -> tensor<?x16x1xi16, #nh.fixed<5, BCM>>
    ```
    """

    name = "nh.reduce"
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ReduceRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind $input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        width, _ = check_nh_value(self, self.result, "result")
        kind = self.kind.data
        if kind not in ("sum", "max", "min"):
            raise VerifyException(f"nh.reduce: kind {kind!r} is not one of sum, max, min")
        dims = array_values(self.dims) or ()
        x = tensor_shape(self.input)
        check_reduce_dims(self.name, x, tensor_shape(self.result), dims)
        _check_not_per_channel_along(self, self.input, dims)
        ea, er = broadcast_exps(self, [self.input, self.result], len(x))
        check_exps_equal(self, "the result keeps the input's exponents", ea, er)
        if kind == "sum":
            if is_unsigned(self.result):
                raise VerifyException("nh.reduce: a sum's result must be signed")
            n = _reduced_count(x, dims)
            needed = ACC_WIDTH if n is None else sum_bits(signed_bits(self.input), n)
            check_fits(self, needed, self.result)
            return
        (lo_in, hi_in), (lo, hi) = value_code_range(self.input), value_code_range(self.result)
        if lo > lo_in or hi < hi_in:
            raise VerifyException(
                f"nh.reduce: result {type_text(self.result)} cannot hold the codes of "
                f"{type_text(self.input)}"
            )


@irdl_op_definition
class ArgReduceOp(IRDLOperation):
    """Along one dim (``dims``, kept with size 1): the index of the first largest
    (``argmax``) or smallest (``argmin``) code, or 1 where any (``any``) or all (``all``)
    codes are non-zero, else 0; integers at exponent 0.

    ```mlir
    %i = nh.arg_reduce "argmax" %x {dims = array<i64: 1>}
        : tensor<?x10xi8, #nh.fixed<4, BC>> -> tensor<?x1xi32, #nh.fixed<0, BC>>
    ```
    """

    name = "nh.arg_reduce"
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ReduceRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind $input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        width, fr = check_nh_value(self, self.result, "result")
        kind = self.kind.data
        if kind not in reduce_numerics.ARG_KINDS:
            raise VerifyException(
                f"nh.arg_reduce: kind {kind!r} is not one of "
                + ", ".join(reduce_numerics.ARG_KINDS)
            )
        dims = array_values(self.dims) or ()
        x = tensor_shape(self.input)
        check_reduce_dims(self.name, x, tensor_shape(self.result), dims, single=True)
        if kind in ("argmax", "argmin"):
            _check_not_per_channel_along(self, self.input, dims)
        n = _reduced_count(x, dims)
        needed = ACC_WIDTH if n is None and kind in ("argmax", "argmin") else 2
        if kind in ("argmax", "argmin") and n is not None:
            needed = max(n - 1, 1).bit_length() + 1
        if fr.is_per_channel or fr.exp_list != [0] or width < needed:
            raise VerifyException(
                f"nh.arg_reduce: the result holds {kind}'s integers at exponent 0 (i{needed} "
                f"or wider), got {type_text(self.result)} at exponent {exps_text(fr.exp_array())}"
            )


@irdl_op_definition
class CumsumOp(IRDLOperation):
    """Prefix sums of codes along one dim (``dims``), exponents kept: exact, ``ceil(log2
    n)`` bits of growth over ``n`` codes (a dynamic ``n``: ``i32``, checked by the kernel).

    ```mlir
    %c = nh.cumsum %x {dims = array<i64: 1>}
        : tensor<?x16xi8, #nh.fixed<5, BC>> -> tensor<?x16xi16, #nh.fixed<5, BC>>
    ```
    """

    name = "nh.cumsum"
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ReduceRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        check_nh_value(self, self.result, "result")
        dims = array_values(self.dims) or ()
        x = tensor_shape(self.input)
        if len(dims) != 1 or not 0 <= dims[0] < max(len(x), 1):
            raise VerifyException(f"nh.cumsum: dims {list(dims)} must be one dim of {shape_str(x)}")
        check_result_shape(self, x, self.result)
        _check_not_per_channel_along(self, self.input, dims)
        ea, er = broadcast_exps(self, [self.input, self.result], len(x))
        check_exps_equal(self, "the result keeps the input's exponents", ea, er)
        if is_unsigned(self.result):
            raise VerifyException("nh.cumsum: the result must be signed")
        n = _reduced_count(x, dims) if x else 1
        needed = ACC_WIDTH if n is None else sum_bits(signed_bits(self.input), n)
        check_fits(self, needed, self.result)


@irdl_op_definition
class UpsampleBicubicOp(IRDLOperation):
    """``nf.upsample_bicubic`` on codes, exact: the sum with the integer weights ``-9, 67,
    225, -27`` (and mirrored) per doubled dim (``256**n`` times the value, ``n`` doubled
    dims), so the result's exponent is the input's plus ``8 n`` and its codes need ``9 n``
    more bits; the output fake-quant's requant is the one rounding.

    ```mlir
    %y = nh.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>}
        : tensor<?x4x3x3xi8, #nh.fixed<5, BCMD>> -> tensor<?x4x6x6xi32, #nh.fixed<21, BCMD>>
    ```
    """

    name = "nh.upsample_bicubic"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    pads = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), BicubicRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        doubled = sum(check_upsample_bilinear(self.name, x, y))
        if list(array_values(self.pads) or ()) != [2] * (2 * (len(x) - 2)):
            raise VerifyException(f"{self.name}: pads must be 2 per spatial dim and end")
        _, fx = check_nh_value(self, self.input, "input")
        _, fy = check_nh_value(self, self.result, "result")
        want = fx.exp_array(len(x)) + bicubic_numerics.EXP_STEP * doubled
        what = f"the result's exponent is the input's + {bicubic_numerics.EXP_STEP * doubled}"
        check_exps_equal(self, what, want, fy.exp_array(len(y)))
        if is_unsigned(self.result):
            raise VerifyException(f"{self.name}: the result must be signed")
        grown = max(signed_bits(self.input), 2) + bicubic_numerics.GROWTH_BITS * doubled
        check_fits(self, grown, self.result)


@irdl_op_definition
class NormalizeOp(IRDLOperation):
    """Integer L2 normalisation along ``axis`` (``n`` codes per row; the algorithm of
    ``nanoir.runtime.numerics.l2norm``): i64 ``S2 = sum x**2``; per row ``h = clamp((61 -
    bitlen(max(S2, (eps_term >> 2 max_shift) + 1) + 1)) // 2, 0, max_shift)``, ``sigma =
    max(isqrt(max(S2 4**h, eps_term >> 2 (max_shift - h))), 1)``; per element ``acc =
    round_half_up(x 2**(h + exp(result) + guard) / sigma)``, moved by ``nudge`` (trunc: away
    from zero, floor: up), then requantized by ``guard`` with ``rounding``, saturating to
    ``bits``.

    ```mlir
    %y = nh.normalize %x {axis = 1 : i64, bits = 8 : i64, max_shift = 30 : i64,
        eps_term = 0 : i64, guard = 24 : i64, nudge = 3 : i64, rounding = #nq.rounding<trunc>}
        : tensor<?x16xi8, #nh.fixed<4, BC>> -> tensor<?x16xi8, #nh.fixed<7, BC>>
    ```
    """

    name = "nh.normalize"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    bits = prop_def(IntegerAttr[I64])
    max_shift = prop_def(IntegerAttr[I64])
    eps_term = prop_def(IntegerAttr[I64])
    guard = prop_def(IntegerAttr[I64])
    nudge = prop_def(IntegerAttr[I64])
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    traits = traits_def(Pure(), WholeAlongAxis())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        _, fx = check_nh_value(self, self.input, "input")
        wout, fy = check_nh_value(self, self.result, "result")
        if fx.is_per_channel or fy.is_per_channel:
            raise VerifyException("nh.normalize: input and result need per-tensor exponents")
        x = tensor_shape(self.input)
        check_result_shape(self, x, self.result)
        axis = self.axis.value.data
        if not -max(len(x), 1) <= axis < max(len(x), 1):
            raise VerifyException(f"nh.normalize: axis {axis} is out of range for {shape_str(x)}")
        if x and x[axis % len(x)] == DYNAMIC_INDEX:
            raise VerifyException("nh.normalize: the normalised dim must be static")
        bits = self.bits.value.data
        if not 2 <= bits <= wout + (1 if is_unsigned(self.result) else 0):
            raise VerifyException(f"nh.normalize: bits {bits} do not fit the result's i{wout}")
        for name in ("max_shift", "eps_term", "guard", "nudge"):
            value = getattr(self, name).value.data
            if not 0 <= value < 2**62:
                raise VerifyException(f"nh.normalize: {name} {value} is not in 0..2**62")
        if self.max_shift.value.data > 30:
            raise VerifyException(f"nh.normalize: max_shift {self.max_shift.value.data} > 30")
        if fy.exp_list[0] + self.guard.value.data > 31:
            raise VerifyException(
                "nh.normalize: the result's exponent plus guard pass 31 (i64 overflow)"
            )

    def plan(self) -> l2_numerics.L2Plan:
        """The integer algorithm's plan these properties and types spell."""
        x = tensor_shape(self.input)
        return l2_numerics.L2Plan(
            x[self.axis.value.data % len(x)] if x else 1,
            self.max_shift.value.data,
            self.eps_term.value.data,
            self.guard.value.data,
            fixed_of(self.result).exp_list[0],
            self.bits.value.data,
            RoundingMode(self.rounding.data),
            self.nudge.value.data,
            not is_unsigned(self.result),
        )


# ---------------------------------------------------------------------------------------------
# Host islands: the boundary between the engine's codes and the host's floats
# ---------------------------------------------------------------------------------------------


def _check_float_twin(op: IRDLOperation, codes: SSAValue, value: SSAValue, label: str) -> None:
    """``value`` is a float tensor of ``codes``' shape (the other side of a host boundary)."""
    t = value.type
    if not isinstance(t, TensorType) or isinstance(t.get_element_type(), IntegerType):
        raise VerifyException(f"{op.name}: the {label} must be a float tensor, got {t}")
    if tuple(t.get_shape()) != tuple(tensor_shape(codes)):
        raise VerifyException(
            f"{op.name}: the {label} has shape {shape_str(t.get_shape())}, the codes "
            f"{shape_str(tensor_shape(codes))}"
        )


@irdl_op_definition
class ToHostOp(IRDLOperation):
    """Hand engine codes to the host as the real values they stand for:
    ``y = x * 2**-exp`` (per tensor or per channel, from ``x``'s ``#nh.fixed`` type), exact
    (a code of at most 32 bits times a power of two is a float64). The host island after it
    runs the nq program's own ops in float64, so it computes what the nq level computes.

    ```mlir
    %f = nh.to_host %x : tensor<?x8x4x4xi8, #nh.fixed<5, BCMD>> -> tensor<?x8x4x4xf32>
    ```
    """

    name = "nh.to_host"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        check_nh_value(self, self.input, "input")
        _check_float_twin(self, self.input, self.result, "result")


@irdl_op_definition
class FromHostOp(IRDLOperation):
    """Take a host island's float result back onto the engine as ``bits``-bit codes, as the
    fake-quant it replaces quantizes it: ``q = clamp(round(x * 2**exp), lo, hi)`` with
    ``round`` = ``rounding``, ``exp`` and the code range (signed ``i<w>``, unsigned ``ui<w>``)
    from the result's type; ``bits = 1``: ``q = x >= 0 ? +1 : -1``. Its codes are the
    fake-quant's codes, so the engine after it computes what the nq level computes.

    ```mlir
    %q = nh.from_host %f {bits = 8 : i64, rounding = #nq.rounding<trunc>}
        : tensor<?x8x4x4xf32> -> tensor<?x8x4x4xi8, #nh.fixed<4, BCMD>>
    ```
    """

    name = "nh.from_host"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    bits = prop_def(IntegerAttr[I64])
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        width, _ = check_nh_value(self, self.result, "result")
        _check_float_twin(self, self.result, self.input, "input")
        bits = self.bits.value.data
        if not 1 <= bits <= MAX_BITS:
            raise VerifyException(f"{self.name}: bits = {bits} is outside 1..{MAX_BITS}")
        if (bits == 1) != (width == 1) or bits > width:
            raise VerifyException(
                f"{self.name}: {bits}-bit codes do not fit the result's element type "
                f"{'u' if is_unsigned(self.result) else ''}i{width}"
            )


NH = Dialect(
    "nh",
    [
        ConstantOp,
        LayerNormOp,
        GroupNormOp,
        ConvOp,
        ConvTransposeOp,
        LinearOp,
        MatmulOp,
        AddOp,
        SubOp,
        MulOp,
        MaximumOp,
        MinimumOp,
        RequantOp,
        LutOp,
        ReluOp,
        ClampOp,
        MaxPoolOp,
        AvgPoolOp,
        ConcatOp,
        ReshapeOp,
        PReluOp,
        TransposeOp,
        PadOp,
        SplitOp,
        UpsampleNearestOp,
        UpsampleZeroOp,
        UpsampleBilinearOp,
        MaxPoolIndicesOp,
        MaxUnpoolOp,
        EmbeddingOp,
        DepthToSpaceOp,
        SpaceToDepthOp,
        ExpandOp,
        GatherOp,
        SoftmaxOp,
        LogSoftmaxOp,
        RecurrentOp,
        CompareOp,
        SelectOp,
        ReduceOp,
        ArgReduceOp,
        CumsumOp,
        UpsampleBicubicOp,
        NormalizeOp,
        ToHostOp,
        FromHostOp,
    ],
    [FixedAttr],
)
