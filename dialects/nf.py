"""nf: float network ops with PyTorch semantics (NCHW activations, OIHW weights).

The first level of nanoir. Every value is a builtin float tensor (f16, f32 or f64); a dynamic
batch is ``?``. Spatial ops (conv, pools) work over 1 to 3 spatial dims, so a Conv1d on a
``[N, C, L]`` tensor is one ``nf.conv`` and needs no unit dim. Window attributes follow ONNX:
``pads`` lists all begins, then all ends (``[top, left, bottom, right]`` in 2-D); ``strides``,
``pads`` and ``dilations`` are optional and default to 1, 0 and 1.

The runtime (``nanoir.runtime``) is the executable definition of each op; these docstrings
state the same semantics in one line each. Abbreviations: bn = batch normalization.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.traits import (
    ChannelWise,
    Contraction,
    DataMovement,
    Elementwise,
    FloatOnly,
    IntegerAlgorithm,
    LookupTable,
    NonNegativeResult,
    Normalising,
    Quantized,
    Recurrent,
    RowStep,
    SlidingWindow,
    StreamingRule,
    TransposedWindow,
    Weighted,
    WholeAlongAxis,
    WholeExtent,
    always_aligns,
    axis_rows,
    concat_aligns,
    depth_to_space_rows,
    expand_aligns,
    normalised_dims,
    pad_aligns,
    pad_rows,
    reshape_aligns,
    reshape_rows,
    scale_rows,
    source_quantized,
    space_to_depth_rows,
    transpose_aligns,
    transpose_rows,
)
from nanoir.runtime.numerics import compare as compare_numerics
from nanoir.runtime.numerics import kernels
from nanoir.runtime.numerics import l2norm as l2_numerics
from nanoir.runtime.numerics import norm as norm_numerics
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from nanoir.runtime.numerics import reduce as reduce_numerics
from nanoir.runtime.numerics import softmax as softmax_numerics
from nanoir.runtime.numerics import unary as unary_numerics
from nanoir.runtime.numerics.movement import (
    check_indices,
    expand_grown,
    expand_shape,
    gather_shape,
)
from nanoir.runtime.numerics.shapes import (
    DYNAMIC_INDEX,
    ShapeError,
    broadcast_shapes,
    infer_concat_shape,
    infer_conv_shape,
    infer_conv_transpose_shape,
    infer_depth_to_space_shape,
    infer_linear_shape,
    infer_matmul_shape,
    infer_pool_shape,
    infer_space_to_depth_shape,
    shape_str,
    shapes_compatible,
)
from xdsl.dialects.builtin import (
    I64,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, OpResult, SSAValue, Use
from xdsl.irdl import (
    AnyAttr,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParamAttrConstraint,
    ParsePropInAttrDict,
    VarConstraint,
    base,
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
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

FloatElement = base(Float16Type) | base(Float32Type) | base(Float64Type)
FloatTensor = TensorType.constr(FloatElement)
BoolTensor = TensorType.constr(i1)
"""A boolean tensor (``tensor<...xi1>``): a softmax mask."""


def int_array(values: Sequence[int]) -> DenseArrayBase:
    """An ``array<i64: ...>`` attribute, the form every integer-list property uses."""
    return DenseArrayBase.from_list(i64, list(values))


def array_values(attr: DenseArrayBase | None) -> tuple[int, ...] | None:
    """The ints of an optional ``array<i64: ...>`` property."""
    return None if attr is None else tuple(int(v) for v in attr.get_values())


def tensor_shape(value: SSAValue | Attribute) -> tuple[int, ...]:
    """Shape of a tensor-typed value or type."""
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    return t.get_shape()


def check_result_shape(op: IRDLOperation, inferred: Sequence[int], result: SSAValue) -> None:
    """Raise unless the declared result shape may equal the inferred one."""
    declared = tensor_shape(result)
    if not shapes_compatible(inferred, declared):
        raise VerifyException(
            f"{op.name}: result shape {shape_str(declared)} does not match the inferred "
            f"shape {shape_str(inferred)}"
        )


def check_same_element_type(op: IRDLOperation, values: Sequence[SSAValue]) -> None:
    """Raise unless all tensor values share one element type."""
    types = [v.type for v in values]
    elts = {t.get_element_type() for t in types if isinstance(t, TensorType)}
    if len(elts) > 1:
        raise VerifyException(
            f"{op.name}: operands and results mix element types "
            + ", ".join(str(e) for e in sorted(elts, key=str))
        )


def shape_guard(op: IRDLOperation, fn, *args, **kwargs):  # noqa: ANN001, ANN201
    """Call a shape-inference function and turn its ShapeError into a VerifyException."""
    try:
        return fn(*args, **kwargs)
    except ShapeError as e:
        raise VerifyException(f"{op.name}: {e}") from None


# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A named float constant (a torch parameter or buffer; ``name`` keeps its path).

    ```mlir
    %w = nf.constant "conv1.weight" dense<[1.0, -2.5]> : tensor<2xf32>
    ```
    """

    name = "nf.constant"
    T: ClassVar = VarConstraint("T", FloatTensor | BoolTensor)
    sym_name = opt_prop_def(StringAttr, prop_name="name")
    value = prop_def(ParamAttrConstraint(DenseIntOrFPElementsAttr, (T, AnyAttr())))
    result = result_def(T)
    traits = traits_def(Pure(), ConstantLike())

    def __init__(self, value: DenseIntOrFPElementsAttr, name: str | None = None):
        super().__init__(result_types=[value.type], properties=constant_props(value, name))

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        value, props, attrs = parse_named_constant(parser)
        op = cls.create(result_types=[value.type], properties=props, attributes=attrs)
        return op

    def print(self, printer: Printer) -> None:
        print_named_constant(printer, self.sym_name, self.value, self.attributes)


def constant_props(value: Attribute, name: str | None) -> dict[str, Attribute]:
    """Properties of a named constant op (``value`` and, when given, ``name``)."""
    props: dict[str, Attribute] = {"value": value}
    if name is not None:
        props["name"] = StringAttr(name)
    return props


def parse_named_constant(
    parser: Parser,
) -> tuple[DenseIntOrFPElementsAttr, dict[str, Attribute], dict[str, Attribute]]:
    """Parse ``["name"] dense<...> : type [attr-dict]``, the syntax of every constant op."""
    name = parser.parse_optional_str_literal()
    pos = parser.pos
    value = parser.parse_attribute()
    if not isinstance(value, DenseIntOrFPElementsAttr):
        parser.raise_error(
            "expected a dense<...> literal", at_position=pos, end_position=parser.pos
        )
    attrs = parser.parse_optional_attr_dict()
    return value, constant_props(value, name), attrs


def print_named_constant(
    printer: Printer,
    name: StringAttr | None,
    value: Attribute,
    attributes: dict[str, Attribute],
) -> None:
    """Print the syntax :func:`parse_named_constant` reads."""
    if name is not None:
        printer.print_string(" ")
        printer.print_string_literal(name.data)
    printer.print_string(" ")
    printer.print_attribute(value)
    printer.print_op_attributes(attributes)


# --------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------


class UnaryFloatOp(IRDLOperation):
    """Base of elementwise ops whose result has the operand's type."""

    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure(), Elementwise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, input: SSAValue, properties: dict[str, Attribute] | None = None):
        super().__init__(operands=[input], result_types=[input.type], properties=properties or {})


@irdl_op_definition
class ReluOp(UnaryFloatOp):
    """``max(x, 0)``.

    ```mlir
    %y = nf.relu %x : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.relu"
    traits = traits_def(Pure(), Elementwise(), NonNegativeResult(clips_negatives=True))


@irdl_op_definition
class SigmoidOp(UnaryFloatOp):
    """``1 / (1 + exp(-x))``.

    ```mlir
    %y = nf.sigmoid %x : tensor<?x16xf32>
    ```
    """

    name = "nf.sigmoid"
    traits = traits_def(FloatOnly(), LookupTable(kernels.sigmoid), NonNegativeResult())


@irdl_op_definition
class TanhOp(UnaryFloatOp):
    """``tanh(x)``.

    ```mlir
    %y = nf.tanh %x : tensor<?x16xf32>
    ```
    """

    name = "nf.tanh"
    traits = traits_def(FloatOnly(), LookupTable(kernels.tanh))


@irdl_op_definition
class HardSigmoidOp(UnaryFloatOp):
    """ONNX's HardSigmoid, ``clamp(alpha * x + beta, 0, 1)``; by default PyTorch's hardsigmoid
    (``alpha = 1/6, beta = 0.5``, computed as ``clamp(x + 3, 0, 6) / 6``).

    ```mlir
    %y = nf.hardsigmoid %x : tensor<?x16x8x8xf32>
    %z = nf.hardsigmoid %x {alpha = 2.0e-01 : f64} : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.hardsigmoid"
    alpha = prop_def(
        FloatAttr[Float64Type], default_value=FloatAttr(kernels.HARDSIGMOID_TORCH[0], Float64Type())
    )
    beta = prop_def(
        FloatAttr[Float64Type], default_value=FloatAttr(kernels.HARDSIGMOID_TORCH[1], Float64Type())
    )
    traits = traits_def(
        FloatOnly(), LookupTable(kernels.hardsigmoid, ("alpha", "beta")), NonNegativeResult()
    )

    def __init__(
        self,
        input: SSAValue,
        alpha: float = kernels.HARDSIGMOID_TORCH[0],
        beta: float = kernels.HARDSIGMOID_TORCH[1],
    ):
        super().__init__(
            input,
            {
                "alpha": FloatAttr(float(alpha), Float64Type()),
                "beta": FloatAttr(float(beta), Float64Type()),
            },
        )


@irdl_op_definition
class HardSwishOp(UnaryFloatOp):
    """PyTorch's hardswish: ``x * clamp(x + 3, 0, 6) / 6``.

    ```mlir
    %y = nf.hardswish %x : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.hardswish"
    traits = traits_def(FloatOnly(), LookupTable(kernels.hardswish))


@irdl_op_definition
class SiluOp(UnaryFloatOp):
    """SiLU (Swish): ``x * sigmoid(x)``; a lookup table over the input codes at the hw level.

    ```mlir
    %y = nf.silu %x : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.silu"
    traits = traits_def(FloatOnly(), LookupTable(kernels.silu))


@dataclass(frozen=True)
class _GeluTable(LookupTable):
    """GELU's table: its form is a string property, not one of :class:`LookupTable`'s floats."""

    def evaluate(self, op: Operation, x: np.ndarray) -> np.ndarray:
        assert isinstance(op, GeluOp)
        return np.asarray(kernels.gelu(x, op.approximate.data))

    def source(self, op: Operation) -> None:
        return None


@irdl_op_definition
class GeluOp(UnaryFloatOp):
    """GELU, ``x * Phi(x)``: exact (``approximate = "none"``, through erf) or torch's tanh
    approximation (``"tanh"``); a lookup table over the input codes at the hw level.

    ```mlir
    %y = nf.gelu %x {approximate = "tanh"} : tensor<?x16xf32>
    ```
    """

    name = "nf.gelu"
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))
    traits = traits_def(FloatOnly(), _GeluTable(kernels.gelu))

    def __init__(self, input: SSAValue, approximate: str = "none"):
        super().__init__(input, {"approximate": StringAttr(approximate)})

    def verify_(self) -> None:
        if self.approximate.data not in kernels.GELU_APPROXIMATIONS:
            raise VerifyException(
                f"nf.gelu: approximate must be one of {', '.join(kernels.GELU_APPROXIMATIONS)}, "
                f"not {self.approximate.data!r}"
            )


@irdl_op_definition
class ClampOp(UnaryFloatOp):
    """``min(max(x, min), max)``; either bound may be absent (ReLU6, hardtanh).

    ```mlir
    %y = nf.clamp %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.clamp"
    traits = traits_def(Pure(), Elementwise(), NonNegativeResult("min", clips_negatives=True))
    min = opt_prop_def(FloatAttr[Float64Type])
    max = opt_prop_def(FloatAttr[Float64Type])

    def __init__(self, input: SSAValue, min: float | None = None, max: float | None = None):
        props: dict[str, Attribute] = {}
        if min is not None:
            props["min"] = FloatAttr(float(min), Float64Type())
        if max is not None:
            props["max"] = FloatAttr(float(max), Float64Type())
        super().__init__(input, props)

    def verify_(self) -> None:
        if self.min is not None and self.max is not None:
            lo, hi = self.min.value.data, self.max.value.data
            if lo > hi:
                raise VerifyException(f"nf.clamp: min {lo} is greater than max {hi}")


@irdl_op_definition
class LeakyReluOp(UnaryFloatOp):
    """``x if x >= 0 else alpha * x``.

    ```mlir
    %y = nf.leaky_relu %x {alpha = 0.01 : f64} : tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.leaky_relu"
    traits = traits_def(FloatOnly(), LookupTable(kernels.leaky_relu, ("alpha",)))
    alpha = prop_def(FloatAttr[Float64Type])

    def __init__(self, input: SSAValue, alpha: float):
        super().__init__(input, {"alpha": FloatAttr(float(alpha), Float64Type())})


class BinaryFloatOp(IRDLOperation):
    """Base of NumPy-broadcasting binary ops."""

    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        lt, rt = lhs.type, rhs.type
        assert isinstance(lt, TensorType) and isinstance(rt, TensorType)
        shape = broadcast_shapes(lt.get_shape(), rt.get_shape())
        super().__init__(
            operands=[lhs, rhs], result_types=[TensorType(lt.get_element_type(), shape)]
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.lhs, self.rhs, self.result])
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class AddOp(BinaryFloatOp):
    """``lhs + rhs`` with broadcasting.

    ```mlir
    %z = nf.add %x, %b : (tensor<?x16x8x8xf32>, tensor<1xf32>) -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.add"


@irdl_op_definition
class SubOp(BinaryFloatOp):
    """``lhs - rhs`` with broadcasting.

    ```mlir
    %z = nf.sub %x, %y : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    ```
    """

    name = "nf.sub"


@irdl_op_definition
class MulOp(BinaryFloatOp):
    """``lhs * rhs`` with broadcasting.

    ```mlir
    %z = nf.mul %x, %s : (tensor<?x16x8x8xf32>, tensor<16x1x1xf32>) -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.mul"


@irdl_op_definition
class MaximumOp(BinaryFloatOp):
    """Elementwise ``max(lhs, rhs)`` with broadcasting (``torch.maximum``, ONNX ``Max``; the
    Magik manual's ``Max``). Exact at nh on operands aligned to one exponent, as add's.

    ```mlir
    %z = nf.maximum %x, %y : (tensor<?x16x8x8xf32>, tensor<?x16x8x8xf32>) -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.maximum"


@irdl_op_definition
class MinimumOp(BinaryFloatOp):
    """Elementwise ``min(lhs, rhs)`` with broadcasting (``torch.minimum``, ONNX ``Min``).

    ```mlir
    %z = nf.minimum %x, %y : (tensor<?x16xf32>, tensor<?x16xf32>) -> tensor<?x16xf32>
    ```
    """

    name = "nf.minimum"


@irdl_op_definition
class DivOp(BinaryFloatOp):
    """``lhs / rhs`` with broadcasting (float only; lowers to hw only by a power of two).

    ```mlir
    %z = nf.div %x, %d : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
    ```
    """

    name = "nf.div"


@irdl_op_definition
class PReluOp(IRDLOperation):
    """``x if x >= 0 else slope * x`` with ``slope`` of shape ``[C]`` (along dim 1) or ``[1]``.

    ```mlir
    %y = nf.prelu %x, %a : (tensor<?x16x8x8xf32>, tensor<16xf32>) -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.prelu"
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    slope = operand_def(FloatTensor)
    result = result_def(T)
    traits = traits_def(Pure(), ChannelWise())
    assembly_format = "$input `,` $slope attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, slope: SSAValue):
        super().__init__(operands=[input, slope], result_types=[input.type])

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.slope])
        x, s = tensor_shape(self.input), tensor_shape(self.slope)
        if len(s) != 1:
            raise VerifyException(f"nf.prelu: slope must be 1-D ([C] or [1]), got {shape_str(s)}")
        channels = x[1] if len(x) >= 2 else 1
        if s[0] != 1 and channels != DYNAMIC_INDEX and s[0] != channels:
            raise VerifyException(
                f"nf.prelu: slope has {s[0]} entries but the input has {channels} channels"
            )


# --------------------------------------------------------------------------------------------
# Linear algebra and normalization
# --------------------------------------------------------------------------------------------


class _WindowedProductOp(IRDLOperation):
    """Base of nf.conv and nf.conv_transpose: input, weight, optional bias; the window
    properties ``WINDOW`` (each optional) and ``groups``; the shape rule ``INFER``."""

    WINDOW: ClassVar[tuple[str, ...]] = ("strides", "pads", "dilations")
    INFER: ClassVar = staticmethod(infer_conv_shape)

    input = operand_def(FloatTensor)
    weight = operand_def(FloatTensor)
    bias = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    strides = opt_prop_def(DenseArrayBase[I64])
    pads = opt_prop_def(DenseArrayBase[I64])
    dilations = opt_prop_def(DenseArrayBase[I64])
    groups = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, i64))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)"
    )

    def __init__(
        self,
        input: SSAValue,
        weight: SSAValue,
        bias: SSAValue | None = None,
        *,
        groups: int = 1,
        **window: Sequence[int] | None,
    ):
        unknown = set(window) - set(self.WINDOW)
        if unknown:
            raise TypeError(f"{self.name}: unknown properties {sorted(unknown)}")
        shape = self.INFER(tensor_shape(input), tensor_shape(weight), groups=groups, **window)
        in_t = input.type
        assert isinstance(in_t, TensorType)
        props: dict[str, Attribute] = {"groups": IntegerAttr(groups, i64)}
        props.update({k: int_array(v) for k, v in window.items() if v is not None})
        super().__init__(
            operands=[input, weight, bias],
            result_types=[TensorType(in_t.get_element_type(), shape)],
            properties=props,
        )

    def window(self) -> dict[str, tuple[int, ...] | None]:
        """The window properties as tuples (None when absent)."""
        return {k: array_values(getattr(self, k)) for k in self.WINDOW}

    def verify_(self) -> None:
        operands = [self.input, self.weight] + ([self.bias] if self.bias is not None else [])
        check_same_element_type(self, [*operands, self.result])
        shape = shape_guard(
            self,
            self.INFER,
            tensor_shape(self.input),
            tensor_shape(self.weight),
            groups=self.groups.value.data,
            **self.window(),
        )
        if self.bias is not None and tensor_shape(self.bias) != (shape[1],):
            raise VerifyException(
                f"{self.name}: bias shape {shape_str(tensor_shape(self.bias))} does not match "
                f"the {shape[1]} output channels"
            )
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class ConvOp(_WindowedProductOp):
    """N-d grouped convolution (PyTorch ``conv1d``/``conv2d``, ONNX ``Conv``), optional bias.

    ``y[n, o, p] = b[o] + sum_{c, k} x[n, g*C/G + c, p*s + k*d - pad_begin] * w[o, c, k]``.

    ```mlir
    %y = nf.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<?x3x32x32xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<?x16x16x16xf32>
    ```
    """

    name = "nf.conv"
    traits = traits_def(Pure(), SlidingWindow("weight"), Weighted())


@irdl_op_definition
class ConvTransposeOp(_WindowedProductOp):
    """N-d grouped transposed convolution (PyTorch ``conv_transpose1d/2d``, ONNX
    ``ConvTranspose``), weight ``[C, O/g, *K]`` (input channels first), optional bias ``[O]``.

    ``y[n, o, i*s + t*d - pad_begin] += x[n, c, i] * w[c, o mod O/g, t]`` (c in o's group);
    length ``(L-1)*s - pad_begin - pad_end + d*(k-1) + output_padding + 1``.

    ```mlir
    %y = nf.conv_transpose %x, %w {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}
        : (tensor<?x8x4x4xf32>, tensor<8x4x4x4xf32>) -> tensor<?x4x8x8xf32>
    ```
    """

    name = "nf.conv_transpose"
    WINDOW: ClassVar[tuple[str, ...]] = ("strides", "pads", "dilations", "output_padding")
    INFER: ClassVar = staticmethod(infer_conv_transpose_shape)
    output_padding = opt_prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), TransposedWindow("weight"), Weighted(1))


@irdl_op_definition
class LinearOp(IRDLOperation):
    """``y = x @ weight.T + bias`` (PyTorch ``linear``, ONNX ``Gemm`` with transB=1).

    ```mlir
    %y = nf.linear %x, %w, %b
        : (tensor<?x400xf32>, tensor<120x400xf32>, tensor<120xf32>) -> tensor<?x120xf32>
    ```
    """

    name = "nf.linear"
    input = operand_def(FloatTensor)
    weight = operand_def(FloatTensor)
    bias = opt_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), Contraction(), Weighted())
    assembly_format = (
        "$input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)"
    )

    def __init__(self, input: SSAValue, weight: SSAValue, bias: SSAValue | None = None):
        shape = infer_linear_shape(tensor_shape(input), tensor_shape(weight))
        in_t = input.type
        assert isinstance(in_t, TensorType)
        super().__init__(
            operands=[input, weight, bias],
            result_types=[TensorType(in_t.get_element_type(), shape)],
        )

    def verify_(self) -> None:
        operands = [self.input, self.weight] + ([self.bias] if self.bias is not None else [])
        check_same_element_type(self, [*operands, self.result])
        w = tensor_shape(self.weight)
        shape = shape_guard(self, infer_linear_shape, tensor_shape(self.input), w)
        if self.bias is not None and tensor_shape(self.bias) != (w[0],):
            raise VerifyException(
                f"nf.linear: bias shape {shape_str(tensor_shape(self.bias))} does not match "
                f"the {w[0]} output features"
            )
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """``torch.matmul(lhs, rhs)``: batched, broadcasting, 1-D operands promoted.

    ```mlir
    %y = nf.matmul %a, %b : (tensor<?x4x8xf32>, tensor<8x5xf32>) -> tensor<?x4x5xf32>
    ```
    """

    name = "nf.matmul"
    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), Contraction())
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        shape = infer_matmul_shape(tensor_shape(lhs), tensor_shape(rhs))
        lt = lhs.type
        assert isinstance(lt, TensorType)
        super().__init__(
            operands=[lhs, rhs], result_types=[TensorType(lt.get_element_type(), shape)]
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.lhs, self.rhs, self.result])
        shape = shape_guard(
            self, infer_matmul_shape, tensor_shape(self.lhs), tensor_shape(self.rhs)
        )
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class BatchNormOp(IRDLOperation):
    """Inference batch norm over dim 1: ``(x - mean) / sqrt(var + epsilon) * scale + bias``.

    ```mlir
    %y = nf.batch_norm %x, %gamma, %beta, %mean, %var {epsilon = 1.0e-05 : f64}
        : (tensor<?x16x8x8xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
        -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.batch_norm"
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    scale = operand_def(FloatTensor)
    bias = operand_def(FloatTensor)
    mean = operand_def(FloatTensor)
    var = operand_def(FloatTensor)
    result = result_def(T)
    epsilon = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(1e-5, Float64Type()))
    traits = traits_def(Pure(), ChannelWise())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $scale `,` $bias `,` $mean `,` $var attr-dict `:` "
        "functional-type(operands, results)"
    )

    def __init__(
        self,
        input: SSAValue,
        scale: SSAValue,
        bias: SSAValue,
        mean: SSAValue,
        var: SSAValue,
        epsilon: float = 1e-5,
    ):
        super().__init__(
            operands=[input, scale, bias, mean, var],
            result_types=[input.type],
            properties={"epsilon": FloatAttr(float(epsilon), Float64Type())},
        )

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        if len(x) < 2:
            raise VerifyException(f"nf.batch_norm: input must have rank >= 2, got {shape_str(x)}")
        channels = x[1]
        for label, v in (
            ("scale", self.scale),
            ("bias", self.bias),
            ("mean", self.mean),
            ("var", self.var),
        ):
            s = tensor_shape(v)
            if len(s) != 1 or (channels != DYNAMIC_INDEX and s[0] != channels):
                raise VerifyException(
                    f"nf.batch_norm: {label} shape {shape_str(s)} does not match the "
                    f"{shape_str([channels])} channels of the input"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException(f"nf.batch_norm: epsilon {self.epsilon.value.data} is negative")


# --------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------


class PoolOp(IRDLOperation):
    """Base of windowed pools over ``[N, C, *spatial]``."""

    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    kernel = prop_def(DenseArrayBase[I64])
    strides = opt_prop_def(DenseArrayBase[I64])
    pads = opt_prop_def(DenseArrayBase[I64])
    ceil_mode = prop_def(BoolAttr, default_value=BoolAttr.from_bool(False))
    traits = traits_def(Pure(), SlidingWindow("kernel"))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def dilation_values(self) -> tuple[int, ...] | None:
        return None

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        shape = shape_guard(
            self,
            infer_pool_shape,
            tensor_shape(self.input),
            array_values(self.kernel) or (),
            strides=array_values(self.strides),
            pads=array_values(self.pads),
            dilations=self.dilation_values(),
            ceil_mode=bool(self.ceil_mode.value.data),
        )
        check_result_shape(self, shape, self.result)


def _pool_props(
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    ceil_mode: bool,
) -> dict[str, Attribute]:
    props: dict[str, Attribute] = {
        "kernel": int_array(kernel),
        "ceil_mode": BoolAttr.from_bool(ceil_mode),
    }
    if strides is not None:
        props["strides"] = int_array(strides)
    if pads is not None:
        props["pads"] = int_array(pads)
    return props


@irdl_op_definition
class MaxPoolOp(PoolOp):
    """Max over each window; padding counts as -inf (PyTorch ``max_pool*d``, ONNX ``MaxPool``).

    ```mlir
    %y = nf.max_pool %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
        : tensor<?x16x8x8xf32> -> tensor<?x16x4x4xf32>
    ```
    """

    name = "nf.max_pool"
    dilations = opt_prop_def(DenseArrayBase[I64])

    def __init__(
        self,
        input: SSAValue,
        kernel: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        dilations: Sequence[int] | None = None,
        ceil_mode: bool = False,
    ):
        shape = infer_pool_shape(
            tensor_shape(input),
            kernel,
            strides=strides,
            pads=pads,
            dilations=dilations,
            ceil_mode=ceil_mode,
        )
        props = _pool_props(kernel, strides, pads, ceil_mode)
        if dilations is not None:
            props["dilations"] = int_array(dilations)
        in_t = input.type
        assert isinstance(in_t, TensorType)
        super().__init__(
            operands=[input],
            result_types=[TensorType(in_t.get_element_type(), shape)],
            properties=props,
        )

    def dilation_values(self) -> tuple[int, ...] | None:
        return array_values(self.dilations)


@irdl_op_definition
class AvgPoolOp(PoolOp):
    """Mean over each window (PyTorch ``avg_pool*d``: ``count_include_pad`` and
    ``divisor_override`` as there).

    ```mlir
    %y = nf.avg_pool %x {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>}
        : tensor<?x16x8x8xf32> -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.avg_pool"
    count_include_pad = prop_def(BoolAttr, default_value=BoolAttr.from_bool(True))
    divisor_override = opt_prop_def(IntegerAttr[I64])

    def __init__(
        self,
        input: SSAValue,
        kernel: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        pads: Sequence[int] | None = None,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        shape = infer_pool_shape(
            tensor_shape(input), kernel, strides=strides, pads=pads, ceil_mode=ceil_mode
        )
        props = _pool_props(kernel, strides, pads, ceil_mode)
        props["count_include_pad"] = BoolAttr.from_bool(count_include_pad)
        if divisor_override is not None:
            props["divisor_override"] = IntegerAttr(divisor_override, i64)
        in_t = input.type
        assert isinstance(in_t, TensorType)
        super().__init__(
            operands=[input],
            result_types=[TensorType(in_t.get_element_type(), shape)],
            properties=props,
        )

    def verify_(self) -> None:
        super().verify_()
        if self.divisor_override is not None and self.divisor_override.value.data <= 0:
            raise VerifyException(
                f"nf.avg_pool: divisor_override {self.divisor_override.value.data} must be positive"
            )


@irdl_op_definition
class AdaptiveAvgPoolOp(IRDLOperation):
    """PyTorch ``adaptive_avg_pool*d``: window i spans ``[floor(i*L/out), ceil((i+1)*L/out))``.

    Global average pooling is ``output_size`` of all ones.

    ```mlir
    %y = nf.adaptive_avg_pool %x {output_size = array<i64: 1, 1>}
        : tensor<?x512x7x7xf32> -> tensor<?x512x1x1xf32>
    ```
    """

    name = "nf.adaptive_avg_pool"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    output_size = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), WholeExtent())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, output_size: Sequence[int]):
        in_t = input.type
        assert isinstance(in_t, TensorType)
        shape = (*in_t.get_shape()[:2], *output_size)
        super().__init__(
            operands=[input],
            result_types=[TensorType(in_t.get_element_type(), shape)],
            properties={"output_size": int_array(output_size)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x = tensor_shape(self.input)
        size = array_values(self.output_size) or ()
        if len(x) < 3 or len(size) != len(x) - 2:
            raise VerifyException(
                f"nf.adaptive_avg_pool: output_size {list(size)} needs one entry per spatial "
                f"dim of {shape_str(x)}"
            )
        if any(s <= 0 for s in size):
            raise VerifyException(
                f"nf.adaptive_avg_pool: output_size {list(size)} must be positive"
            )
        check_result_shape(self, (*x[:2], *size), self.result)


# --------------------------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenation along ``axis`` (PyTorch ``cat``, ONNX ``Concat``).

    ```mlir
    %y = nf.concat %a, %b {axis = 1 : i64}
        : (tensor<?x8x4x4xf32>, tensor<?x4x4x4xf32>) -> tensor<?x12x4x4xf32>
    ```
    """

    name = "nf.concat"
    inputs = var_operand_def(FloatTensor)
    result = result_def(FloatTensor)
    axis = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), DataMovement(axis_rows, aligns=concat_aligns))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: Sequence[SSAValue], axis: int):
        shape = infer_concat_shape([tensor_shape(v) for v in inputs], axis)
        t = inputs[0].type
        assert isinstance(t, TensorType)
        super().__init__(
            operands=[list(inputs)],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"axis": IntegerAttr(axis, i64)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [*self.inputs, self.result])
        shape = shape_guard(
            self,
            infer_concat_shape,
            [tensor_shape(v) for v in self.inputs],
            self.axis.value.data,
        )
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class SplitOp(IRDLOperation):
    """Split along ``axis`` into pieces of the given ``sizes`` (PyTorch ``split``).

    ```mlir
    %a, %b = nf.split %x {axis = 1 : i64, sizes = array<i64: 8, 4>}
        : (tensor<?x12x4x4xf32>) -> (tensor<?x8x4x4xf32>, tensor<?x4x4x4xf32>)
    ```
    """

    name = "nf.split"
    input = operand_def(FloatTensor)
    results_ = var_result_def(FloatTensor)
    axis = prop_def(IntegerAttr[I64])
    sizes = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(axis_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, axis: int, sizes: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = list(t.get_shape())
        axis_n = axis % len(shape)
        types: list[Attribute] = []
        for s in sizes:
            shape[axis_n] = s
            types.append(TensorType(t.get_element_type(), shape))
        super().__init__(
            operands=[input],
            result_types=[types],
            properties={"axis": IntegerAttr(axis, i64), "sizes": int_array(sizes)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, *self.results_])
        x = tensor_shape(self.input)
        axis = self.axis.value.data
        if not -len(x) <= axis < len(x):
            raise VerifyException(f"nf.split: axis {axis} is out of range for {shape_str(x)}")
        axis %= len(x)
        sizes = array_values(self.sizes) or ()
        if len(sizes) != len(self.results_):
            raise VerifyException(f"nf.split: {len(sizes)} sizes for {len(self.results_)} results")
        if any(s < 0 for s in sizes):
            raise VerifyException(f"nf.split: sizes {list(sizes)} must be non-negative")
        if x[axis] != DYNAMIC_INDEX and sum(sizes) != x[axis]:
            raise VerifyException(
                f"nf.split: sizes {list(sizes)} add up to {sum(sizes)}, but dim {axis} of the "
                f"input is {x[axis]}"
            )
        for size, r in zip(sizes, self.results_):
            expected = list(x)
            expected[axis] = size
            check_result_shape(self, expected, r)


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Reshape (view/flatten) to the result type's shape; at most one result dim is dynamic.

    ```mlir
    %y = nf.reshape %x : tensor<?x16x5x5xf32> -> tensor<?x400xf32>
    ```
    """

    name = "nf.reshape"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), DataMovement(reshape_rows, aligns=reshape_aligns))
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, shape: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        super().__init__(operands=[input], result_types=[TensorType(t.get_element_type(), shape)])

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        if sum(d == DYNAMIC_INDEX for d in y) > 1:
            raise VerifyException(
                f"nf.reshape: result {shape_str(y)} has more than one dynamic dim"
            )
        if DYNAMIC_INDEX not in x and DYNAMIC_INDEX not in y:
            nx, ny = _numel(x), _numel(y)
            if nx != ny:
                raise VerifyException(
                    f"nf.reshape: {shape_str(x)} has {nx} elements but {shape_str(y)} has {ny}"
                )
        elif DYNAMIC_INDEX in x and DYNAMIC_INDEX not in y:
            raise VerifyException(
                f"nf.reshape: a dynamic input {shape_str(x)} cannot become the static "
                f"{shape_str(y)}"
            )
        elif DYNAMIC_INDEX in y:
            known = _numel([d for d in y if d != DYNAMIC_INDEX])
            static_in = _numel([d for d in x if d != DYNAMIC_INDEX])
            if DYNAMIC_INDEX not in x and (known == 0 or static_in % known):
                raise VerifyException(
                    f"nf.reshape: {shape_str(x)} cannot be viewed as {shape_str(y)}"
                )


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permute dims: ``result.shape[i] = input.shape[perm[i]]`` (PyTorch ``permute``).

    ```mlir
    %y = nf.transpose %x {perm = array<i64: 0, 2, 1>} : tensor<?x16x40xf32> -> tensor<?x40x16xf32>
    ```
    """

    name = "nf.transpose"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    perm = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(transpose_rows, aligns=transpose_aligns))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, perm: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = [t.get_shape()[p] for p in perm]
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"perm": int_array(perm)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x = tensor_shape(self.input)
        perm = array_values(self.perm) or ()
        if sorted(perm) != list(range(len(x))):
            raise VerifyException(
                f"nf.transpose: perm {list(perm)} is not a permutation of the {len(x)} dims"
            )
        check_result_shape(self, [x[p] for p in perm], self.result)


class PadMode:
    """The padding modes of ``nf.pad`` (ONNX ``Pad``)."""

    CONSTANT = "constant"
    REFLECT = "reflect"
    EDGE = "edge"
    ALL = (CONSTANT, REFLECT, EDGE)


def check_reflect_pads(op: IRDLOperation, shape: Sequence[int], pads: Sequence[int]) -> None:
    """A reflection repeats no row, so each side of a static dim reflects at most its size - 1
    rows (after negative pads crop it), as torch and onnxruntime require; NumPy's ``reflect``
    would reflect again. A dynamic dim is checked by the kernel when it runs."""
    n = len(shape)
    for d, size in enumerate(shape):
        begin, end = pads[d], pads[n + d]
        kept = size - max(-begin, 0) - max(-end, 0)
        if size != DYNAMIC_INDEX and max(begin, end) > 0 and max(begin, end) >= kept:
            cropped = " after cropping" if kept != size else ""
            raise VerifyException(
                f"{op.name}: reflect pads ({begin}, {end}) on dim {d} of size {kept}{cropped}: "
                f"at most {max(kept - 1, 0)} rows a side reflect (a reflection repeats no row; "
                "torch and onnxruntime refuse more)"
            )


@irdl_op_definition
class PadOp(IRDLOperation):
    """Pad every dim by ``pads`` (all begins, then all ends; ONNX ``Pad``) with ``mode``.

    ```mlir
    %y = nf.pad %x {pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, mode = "constant", value = 0.0 : f64}
        : tensor<?x3x8x8xf32> -> tensor<?x3x10x10xf32>
    ```
    """

    name = "nf.pad"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    pads = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr, default_value=StringAttr(PadMode.CONSTANT))
    value = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(0.0, Float64Type()))
    traits = traits_def(Pure(), DataMovement(pad_rows, aligns=pad_aligns))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self,
        input: SSAValue,
        pads: Sequence[int],
        mode: str = PadMode.CONSTANT,
        value: float = 0.0,
    ):
        t = input.type
        assert isinstance(t, TensorType)
        x = t.get_shape()
        n = len(x)
        shape = [d if d == DYNAMIC_INDEX else d + pads[i] + pads[n + i] for i, d in enumerate(x)]
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={
                "pads": int_array(pads),
                "mode": StringAttr(mode),
                "value": FloatAttr(float(value), Float64Type()),
            },
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x = tensor_shape(self.input)
        pads = array_values(self.pads) or ()
        n = len(x)
        if len(pads) != 2 * n:
            raise VerifyException(
                f"nf.pad: pads has {len(pads)} entries, expected {2 * n} for {shape_str(x)}"
            )
        if self.mode.data not in PadMode.ALL:
            raise VerifyException(
                f"nf.pad: mode {self.mode.data!r} is not one of {', '.join(PadMode.ALL)}"
            )
        if self.mode.data != PadMode.CONSTANT and any(p < 0 for p in pads):
            raise VerifyException(f"nf.pad: negative pads {list(pads)} need mode constant")
        if self.mode.data == PadMode.REFLECT:
            check_reflect_pads(self, x, pads)
        shape = [d if d == DYNAMIC_INDEX else d + pads[i] + pads[n + i] for i, d in enumerate(x)]
        if any(d != DYNAMIC_INDEX and d < 0 for d in shape):
            raise VerifyException(f"nf.pad: pads {list(pads)} remove more than {shape_str(x)} has")
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class UpsampleNearestOp(IRDLOperation):
    """Nearest-neighbour resize of the spatial dims to the result's static sizes
    (PyTorch ``interpolate(mode="nearest")``: source index ``floor(dst * in / out)``).

    ```mlir
    %y = nf.upsample_nearest %x : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.upsample_nearest"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), DataMovement(scale_rows))
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, size: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = (*t.get_shape()[:2], *size)
        super().__init__(operands=[input], result_types=[TensorType(t.get_element_type(), shape)])

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        if len(x) < 3 or len(x) != len(y):
            raise VerifyException(
                f"nf.upsample_nearest: {shape_str(x)} -> {shape_str(y)} must keep the rank "
                f"(>= 3: [N, C, spatial...])"
            )
        if not shapes_compatible(x[:2], y[:2]):
            raise VerifyException(
                f"nf.upsample_nearest: batch and channels must not change: {shape_str(x)} -> "
                f"{shape_str(y)}"
            )
        if any(d == DYNAMIC_INDEX or d <= 0 for d in y[2:]):
            raise VerifyException(
                f"nf.upsample_nearest: result spatial sizes of {shape_str(y)} must be static "
                f"and positive"
            )


def upsample_zero_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Zero upsampling by ``r`` along a spatial dim: each row emits ``r`` rows (its values
    at the offset row, zeros in the others); row by row along batch and channels."""
    x, y = tensor_shape(op.operands[0]), tensor_shape(op.results[0])
    if dim < 2:
        return RowStep()
    if x[dim] == DYNAMIC_INDEX or y[dim] % x[dim]:
        return None
    return RowStep(emit=y[dim] // x[dim], adjust="result_rows")


def check_upsample_zero(
    name: str, x: Sequence[int], y: Sequence[int], offsets: Sequence[int]
) -> None:
    """``[N, C, *S] -> [N, C, *(r S)]`` with an integer ``r`` per spatial dim and
    ``0 <= offset < r``; a message naming the op otherwise."""
    n = len(x) - 2
    ok = len(x) >= 3 and len(y) == len(x) and shapes_compatible(x[:2], y[:2])
    ok = ok and len(offsets) == n
    for s, t, o in zip(x[2:], y[2:], offsets):
        if s == DYNAMIC_INDEX:  # (a .ne nq file's streamed dim): r is known at run time
            ok = ok and t != DYNAMIC_INDEX and o >= 0
        else:
            ok = ok and s != 0 and t % s == 0 and 0 <= o < t // s
    if not ok:
        raise VerifyException(
            f"{name}: {shape_str(x)} -> {shape_str(y)} with offsets {list(offsets)} must "
            "keep batch, channels and rank, scale each static spatial dim by an integer r, "
            "and put each offset in [0, r)"
        )


@irdl_op_definition
class UpsampleZeroOp(IRDLOperation):
    """Zero upsampling (the Magik manual's ``Unpool2D`` mode ``zero``): each value at
    ``offsets`` inside its ``r x r`` output window, zeros elsewhere; the result type gives
    the sizes. What a depthwise ``conv_transpose`` with a one-hot kernel and stride ``r``
    computes, moved instead of multiplied (data movement at every level).

    ```mlir
    %y = nf.upsample_zero %x {offsets = array<i64: 0, 0>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.upsample_zero"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    offsets = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(upsample_zero_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, size: Sequence[int], offsets: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = (*t.get_shape()[:2], *size)
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"offsets": int_array(offsets)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_upsample_zero(self.name, x, y, array_values(self.offsets) or ())


@dataclass(frozen=True)
class BilinearRows(StreamingRule):
    """x2 bilinear upsampling along a scaled dim: a window of three rows (the edge row
    repeated past each end, as ``pads``) emits two; row by row along the other dims."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        x, y = tensor_shape(op.operands[0]), tensor_shape(op.results[0])
        if dim < 2 or x[dim] == y[dim]:
            return RowStep()
        return RowStep(3, 1, 2, pad_begin=1, pad_end=1, adjust="window")


def check_upsample_bilinear(name: str, x: Sequence[int], y: Sequence[int]) -> list[bool]:
    """``[N, C, *S] -> [N, C, *S']`` with each spatial dim kept or doubled: which are
    doubled; a message naming the op otherwise."""
    ok = len(x) >= 3 and len(y) == len(x) and shapes_compatible(x[:2], y[:2])
    # (a dynamic input dim, a .ne nq file's streamed one, is doubled when the result's is
    # static)
    ok = ok and all(
        t in (s, 2 * s) if s != DYNAMIC_INDEX else t != DYNAMIC_INDEX for s, t in zip(x[2:], y[2:])
    )
    if not ok:
        raise VerifyException(
            f"{name}: {shape_str(x)} -> {shape_str(y)} must keep batch, channels and rank "
            "and keep or double each static spatial dim (x2 only)"
        )
    return [t != s for s, t in zip(x[2:], y[2:])]


@irdl_op_definition
class UpsampleBilinearOp(IRDLOperation):
    """x2 bilinear upsampling with ``align_corners=False`` (torch's ``F.interpolate(...,
    mode="bilinear")``, ONNX ``Resize`` linear/half_pixel; the Magik manual's ``Unpool2D``
    mode ``bilinear``) of the spatial dims the result doubles: output ``2i`` is
    ``(x[i-1] + 3 x[i]) / 4``, ``2i + 1`` is ``(3 x[i] + x[i+1]) / 4`` per doubled dim, the edge
    row repeated past the ends (``pads`` of them: 1 each for the whole op; a streamed window
    sets fewer). Dyadic weights: on a quantized input the result is exact, so the output's
    fake-quant is the one rounding (at nh, ``nh.upsample_bilinear``'s integer sum, then a
    requant).

    ```mlir
    %y = nf.upsample_bilinear %x {pads = array<i64: 1, 1, 1, 1>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.upsample_bilinear"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    pads = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), BilinearRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, size: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = (*t.get_shape()[:2], *size)
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"pads": int_array([1] * (2 * len(size)))},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_upsample_bilinear(self.name, x, y)
        if list(array_values(self.pads) or ()) != [1] * (2 * (len(x) - 2)):
            raise VerifyException(f"{self.name}: pads must be 1 per spatial dim and end")


def plane_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Max pooling's indices and max unpooling: row by row along batch and channels; along
    a spatial dim the whole extent, as an index counts absolute positions in its plane
    (``h * W + w``): a window of rows does not know where its rows sit, so these ops are not
    streamed along rows (relabelling the indices per window is open work)."""
    return RowStep() if dim < 2 else None


@dataclass(frozen=True)
class PlaneRows(StreamingRule):
    """:func:`plane_rows` for an op that is not data movement (max pooling's indices)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        return plane_rows(op, dim, runtime)


@dataclass(frozen=True)
class IndexResult(OpTrait):
    """The results are integers held in float (indices, exact below ``2**24``; the 0/1 of a
    comparison): quantize puts no fake-quant on them, lower-to-hw gives them integer codes at
    exponent 0 (``i32`` indices, ``i2`` truth values)."""


def check_plane_op(name: str, x: Sequence[int], y: Sequence[int]) -> None:
    """``[N, C, H, W]`` in and out, batch and channels kept, static planes."""
    if len(x) != 4 or len(y) != 4 or not shapes_compatible(x[:2], y[:2]):
        raise VerifyException(
            f"{name}: {shape_str(x)} -> {shape_str(y)} must be [N, C, H, W] with batch and "
            "channels kept"
        )
    if DYNAMIC_INDEX in (*x[2:], *y[2:]):
        raise VerifyException(f"{name}: {shape_str(x)} -> {shape_str(y)}: static planes only")


@irdl_op_definition
class MaxPoolIndicesOp(IRDLOperation):
    """The indices ``MaxPool2d(return_indices=True)`` gives: the flat in-plane position
    ``h * W + w`` of each window's maximum (ties to the first in row-major window order, as
    torch's CPU kernel), as float values (exact integers). No padding or dilation.

    ```mlir
    %i = nf.max_pool_indices %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
        : tensor<?x16x8x8xf32> -> tensor<?x16x4x4xf32>
    ```
    """

    name = "nf.max_pool_indices"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    kernel = prop_def(DenseArrayBase[I64])
    strides = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), PlaneRows(), IndexResult())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, kernel: Sequence[int], strides: Sequence[int]):
        shape = infer_pool_shape(tensor_shape(input), kernel, strides=strides)
        t = input.type
        assert isinstance(t, TensorType)
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"kernel": int_array(kernel), "strides": int_array(strides)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_plane_op(self.name, x, y)
        kernel, strides = array_values(self.kernel) or (), array_values(self.strides) or ()
        want = shape_guard(self, infer_pool_shape, x, kernel, strides=strides)
        check_result_shape(self, want, self.result)
        if x[2] * x[3] > 2**24:
            raise VerifyException(f"{self.name}: planes over 2**24 elements (float indices)")


@irdl_op_definition
class MaxUnpoolOp(IRDLOperation):
    """Max unpooling (torch's ``MaxUnpool2d``, ONNX ``MaxUnpool``): each value of ``input``
    at its flat in-plane index (``indices``, from ``nf.max_pool_indices``) in the result's
    ``[H, W]`` planes, zeros elsewhere; an index outside the plane is a runtime error. Data
    movement: values keep their grid.

    ```mlir
    %y = nf.max_unpool %p, %i : (tensor<?x16x4x4xf32>, tensor<?x16x4x4xf32>) -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.max_unpool"
    input = operand_def(FloatTensor)
    indices = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), DataMovement(plane_rows, indices=(1,)))
    assembly_format = "$input `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, indices: SSAValue, size: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = (*t.get_shape()[:2], *size)
        super().__init__(
            operands=[input, indices], result_types=[TensorType(t.get_element_type(), shape)]
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_plane_op(self.name, x, y)
        if not shapes_compatible(x, tensor_shape(self.indices)):
            raise VerifyException(
                f"{self.name}: indices {shape_str(tensor_shape(self.indices))} must have the "
                f"input's shape {shape_str(x)}"
            )


class BlockMode:
    """Channel order of DepthToSpace/SpaceToDepth (ONNX's ``mode``): ``CRD`` (column, row,
    depth: channel ``c * r**n + offset``, PyTorch's pixel_shuffle/unshuffle) or ``DCR``
    (``offset * C + c``, ONNX's default)."""

    CRD = "CRD"
    DCR = "DCR"
    ALL = (CRD, DCR)


class _BlockOp(IRDLOperation):
    """Shared by depth_to_space and space_to_depth: ``block`` r and ``mode``."""

    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    block = prop_def(IntegerAttr[I64])
    mode = prop_def(StringAttr, default_value=StringAttr(BlockMode.CRD))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"
    INFER: ClassVar = staticmethod(infer_depth_to_space_shape)

    def __init__(self, input: SSAValue, block: int, mode: str = BlockMode.CRD):
        t = input.type
        assert isinstance(t, TensorType)
        shape = type(self).INFER(t.get_shape(), block)
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"block": IntegerAttr(block, i64), "mode": StringAttr(mode)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        if self.mode.data not in BlockMode.ALL:
            raise VerifyException(f"{self.name}: mode {self.mode.data!r} is not CRD or DCR")
        shape = shape_guard(self, type(self).INFER, tensor_shape(self.input), self.block.value.data)
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class DepthToSpaceOp(_BlockOp):
    """``[N, C*r**n, *S] -> [N, C, *(S*r)]``: ONNX ``DepthToSpace`` in any rank; mode ``CRD``
    is PyTorch's ``pixel_shuffle``.

    ```mlir
    %y = nf.depth_to_space %x {block = 2 : i64} : tensor<?x16x4x4xf32> -> tensor<?x4x8x8xf32>
    ```
    """

    name = "nf.depth_to_space"
    traits = traits_def(Pure(), DataMovement(depth_to_space_rows, aligns=always_aligns))
    INFER: ClassVar = staticmethod(infer_depth_to_space_shape)


@irdl_op_definition
class SpaceToDepthOp(_BlockOp):
    """``[N, C, *(S*r)] -> [N, C*r**n, *S]``, the inverse of depth_to_space in the same mode;
    ``CRD`` is PyTorch's ``pixel_unshuffle``, ``DCR`` ONNX's ``SpaceToDepth``.

    ```mlir
    %y = nf.space_to_depth %x {block = 2 : i64} : tensor<?x4x8x8xf32> -> tensor<?x16x4x4xf32>
    ```
    """

    name = "nf.space_to_depth"
    traits = traits_def(Pure(), DataMovement(space_to_depth_rows))
    INFER: ClassVar = staticmethod(infer_space_to_depth_shape)


def expand_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Expand: row by row along a kept dim; a size-1 dim grown to ``n`` emits ``n`` rows per
    row; new leading dims (the rank grows) take the whole extent."""
    x, y = tensor_shape(op.operands[0]), tensor_shape(op.results[0])
    if len(x) != len(y) or len(x) <= dim:
        return None if len(x) != len(y) else RowStep()
    if x[dim] == y[dim]:
        return RowStep(adjust="result_rows")
    return RowStep(emit=y[dim], adjust="result_rows") if x[dim] == 1 else None


def strided_indices(indices: Sequence[int], size: int) -> tuple[int, int] | None:
    """``(start, step)`` when ``indices`` are every ``step``-th row from ``start`` to the end
    of a dim of ``size`` rows, ``0 <= start < step`` (``x[..., start::step]``, a strided
    slice or one row of a Focus / space-to-depth), else None.

    >>> strided_indices([1, 3, 5], 7), strided_indices([0, 2], 5), strided_indices([2], 4)
    ((1, 2), None, (2, 4))
    """
    if not indices or size == DYNAMIC_INDEX:
        return None
    start = indices[0]
    step = indices[1] - start if len(indices) > 1 else size
    if not 0 <= start < step or list(indices) != list(range(start, size, step)):
        return None
    return start, step


def gather_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Gather: row by row along any dim but its axis. Along the axis, a strided slice to the
    end (:func:`strided_indices`) takes ``step`` rows and emits the one at ``start`` (a last
    partial window fires when it holds that row); other indices take the whole extent (an
    index may point at any row)."""
    shape = tensor_shape(op.operands[0])
    axis = op.properties["axis"].value.data % len(shape)  # type: ignore[attr-defined]
    if axis != dim:
        return RowStep()
    indices = array_values(op.properties["indices"]) or ()  # type: ignore[arg-type]
    strided = strided_indices(indices, shape[axis])
    if strided is None:
        return None
    start, step = strided
    return RowStep(step, step, 1, ceil_mode=shape[axis] % step > start, adjust="indices")


@irdl_op_definition
class ExpandOp(IRDLOperation):
    """Broadcast to the result type's shape (PyTorch ``expand``, ONNX ``Expand``, ``.ne``
    ``Expand``): the input is right-aligned, each of its dims equals the result's or is 1.

    A dim grown from 1 (or new) to a dynamic size (a ViT's class token
    ``cls.expand(x.shape[0], -1, -1)`` to the dynamic batch) takes its size at run time from
    the optional shape source ``like``: the same dim of ``like``, which must be dynamic there
    too; ``like``'s values are never read. Why an operand and not ONNX's shape tensor: nf has
    no integer shape values, and the batch a program runs with is a dim of a value it already
    has (torch's ``sym_size(x, 0)``), so the source names that value and the static dims stay
    in the type, where the verifier checks them as before.

    ```mlir
    %y = nf.expand %x : tensor<?x3x1x6xf32> -> tensor<?x3x5x6xf32>
    %c = nf.expand %cls like %x : tensor<1x1x8xf32> like tensor<?x3x16x16xf32>
        -> tensor<?x1x8xf32>
    ```
    """

    name = "nf.expand"
    input = operand_def(FloatTensor)
    like = opt_operand_def(TensorType)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), DataMovement(expand_rows, shape_only=(1,), aligns=expand_aligns))
    assembly_format = (
        "$input (`like` $like^)? attr-dict `:` type($input) (`like` type($like)^)? "
        "`->` type($result)"
    )

    def __init__(self, input: SSAValue, shape: Sequence[int], like: SSAValue | None = None):
        t = input.type
        assert isinstance(t, TensorType)
        super().__init__(
            operands=[input, [] if like is None else [like]],
            result_types=[TensorType(t.get_element_type(), shape)],
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        check_expand_like(self, self.input, self.like, self.result)


def check_expand_like(
    op: IRDLOperation, input: SSAValue, like: SSAValue | None, result: SSAValue
) -> None:
    """nf.expand / nh.expand: the input broadcasts to the result; a grown dynamic dim needs the
    shape source, whose same dim must be dynamic (a static one would make the result's static)."""
    x, y = tensor_shape(input), tensor_shape(result)
    shape_guard(op, expand_shape, x, y, None if like is None else len(tensor_shape(like)))
    if like is None:
        return
    src = tensor_shape(like)
    for i in expand_grown(x, y):
        if src[i] != DYNAMIC_INDEX:
            raise VerifyException(
                f"{op.name}: dim {i} of the result {shape_str(y)} is dynamic but the shape "
                f"source's is {src[i]} ({shape_str(src)})"
            )


@irdl_op_definition
class GatherOp(IRDLOperation):
    """The slices ``indices`` (constant, in ``[0, size)``) of the input along ``axis``, in
    that order (ONNX ``Gather`` with 1-D indices, ``.ne`` ``Gather``; PyTorch ``x[:, idx]``).

    ```mlir
    %y = nf.gather %x {axis = 1 : i64, indices = array<i64: 2, 0, 0>}
        : tensor<?x4x6xf32> -> tensor<?x3x6xf32>
    ```
    """

    name = "nf.gather"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    axis = prop_def(IntegerAttr[I64])
    indices = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), DataMovement(gather_rows))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, axis: int, indices: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = gather_shape(t.get_shape(), axis, len(indices))
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"axis": IntegerAttr(axis, i64), "indices": int_array(indices)},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x = tensor_shape(self.input)
        axis, indices = self.axis.value.data, array_values(self.indices) or ()
        shape = shape_guard(self, gather_shape, x, axis, len(indices))
        shape_guard(self, check_indices, x, axis, indices)
        check_result_shape(self, shape, self.result)


def embedding_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Embedding: row by row along the indices' dims (each index selects its own table row,
    elementwise); along the table's row dim (the last) the whole extent."""
    return RowStep() if dim < len(tensor_shape(op.operands[0])) else None


def is_index_input(value: SSAValue) -> bool:
    """A function input read as an embedding's indices, and otherwise only compared with a
    constant (a BERT mask ``ids != pad``): integers at run time (torch's int64), so quantize
    puts no fake-quant on it (a fake-quant's grid would move the ids) and lower-to-hw makes it
    an ``i32`` input at exponent 0, which compares with a constant exactly."""
    uses = list(value.uses)
    indexed = [
        u for u in uses if u.operation.name in ("nf.embedding", "nh.embedding") and u.index == 0
    ]
    return bool(indexed) and all(u in indexed or _compared_with_constant(u) for u in uses)


def _compared_with_constant(use: Use) -> bool:
    """``use`` is an operand of a comparison whose other operand is a constant."""
    op = use.operation
    if op.name not in ("nf.compare", "nh.compare") or len(op.operands) != 2:
        return False
    other = op.operands[1 - use.index]
    return isinstance(other, OpResult) and other.op.name in ("nf.constant", "nh.constant")


def lowest_streamed_dim(args: Sequence[SSAValue]) -> int:
    """The lowest dim a stream may cut the inputs along: 2 (dim 0 is the batch, dim 1 the
    channels), or 1 when an input is indices (``[N, L]`` token ids: dim 1 is the sequence, and
    an embedding is elementwise along it)."""
    return 1 if any(len(tensor_shape(a)) >= 2 and is_index_input(a) for a in args) else 2


@irdl_op_definition
class EmbeddingOp(IRDLOperation):
    """Embedding lookup (torch's ``nn.Embedding``/``F.embedding``): row ``indices[...]`` of
    the constant ``[V, D]`` table for each index, so the result is the indices' shape plus
    ``D``. The indices are a runtime value of exact float integers (the program's integer
    input); one outside ``0..V-1`` is a runtime error naming the op. Data movement of the
    table: values keep its grid (quantize gives the table the weight rules, per tensor).

    ```mlir
    %y = nf.embedding %ids, %table : (tensor<?x8xf32>, tensor<100x16xf32>) -> tensor<?x8x16xf32>
    ```
    """

    name = "nf.embedding"
    indices = operand_def(FloatTensor)
    table = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), DataMovement(embedding_rows, indices=(0,)))
    assembly_format = "$indices `,` $table attr-dict `:` functional-type(operands, results)"

    def __init__(self, indices: SSAValue, table: SSAValue):
        t = table.type
        assert isinstance(t, TensorType)
        shape = (*tensor_shape(indices), t.get_shape()[-1])
        super().__init__(
            operands=[indices, table], result_types=[TensorType(t.get_element_type(), shape)]
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.table, self.result])
        check_embedding(self.name, self.indices, self.table, self.result)


def check_embedding(name: str, indices: SSAValue, table: SSAValue, result: SSAValue) -> None:
    """A 2-D static table; the result is the indices' shape plus the table's row."""
    w, i, y = tensor_shape(table), tensor_shape(indices), tensor_shape(result)
    if len(w) != 2 or DYNAMIC_INDEX in w:
        raise VerifyException(f"{name}: the table {shape_str(w)} must be a static [V, D]")
    if not shapes_compatible((*i, w[1]), y):
        raise VerifyException(
            f"{name}: indices {shape_str(i)} and table {shape_str(w)} give "
            f"{shape_str((*i, w[1]))}, not {shape_str(y)}"
        )


@irdl_op_definition
class CustomOp(IRDLOperation):
    """An op nanoir has no semantics for, kept losslessly (e.g. an unknown NanoEngine node
    type): its ``op_type`` and attributes travel through the IR untouched. The interpreter and
    the hw lowering reject it by name.

    ```mlir
    %y = nf.custom %x {op_type = "Gather", attrs = {axis = 0 : i64}}
        : (tensor<?x16xf32>) -> tensor<?x4xf32>
    ```
    """

    name = "nf.custom"
    inputs = var_operand_def()
    results_ = var_result_def()
    op_type = prop_def(StringAttr)
    attrs = prop_def(DictionaryAttr, default_value=DictionaryAttr({}))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"


def _softmax_codes(op: Operation, q: np.ndarray, qin, qout, mask=None) -> np.ndarray:  # noqa: ANN001
    axis = op.properties["axis"].value.data  # type: ignore[attr-defined]
    fn = softmax_numerics.softmax_codes
    if isinstance(op, LogSoftmaxOp):
        return softmax_numerics.log_softmax_codes(
            q, axis, qin.exp, qin.bits, qout.exp, qout.bits, signed=qout.signed
        )
    return fn(q, axis, qin.exp, qin.bits, qout.exp, qout.bits, mask, signed=qout.signed)


def _softmax_bound(op: Operation, qin, qout) -> str | None:  # noqa: ANN001
    shape = tensor_shape(op.operands[0])
    row = shape[op.properties["axis"].value.data % len(shape)]  # type: ignore[attr-defined]
    kind = "log_softmax" if isinstance(op, LogSoftmaxOp) else "softmax"
    return softmax_numerics.bound_error(kind, row, qin.bits, qin.exp, qout.exp)


SOFTMAX_ALGORITHM = IntegerAlgorithm(_softmax_codes, _softmax_bound)
"""Softmax's and log-softmax's integer algorithm (``nanoir.runtime.numerics.softmax``)."""


class _SoftmaxBase(IRDLOperation):
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    result = result_def(T)
    axis = prop_def(IntegerAttr[I64])
    irdl_options = (ParsePropInAttrDict(),)

    def verify_(self) -> None:
        rank = len(tensor_shape(self.input))
        axis = self.axis.value.data
        if not -rank <= axis < max(rank, 1) or rank == 0:
            raise VerifyException(f"{self.name}: axis {axis} is out of range for rank {rank}")


@irdl_op_definition
class SoftmaxOp(_SoftmaxBase):
    """torch's ``softmax(x, axis)``, with an optional boolean ``mask`` (NumPy-broadcast
    against ``x``; True = the position takes part): masked positions contribute nothing and
    output exactly 0, a row with none taking part outputs all 0. Quantized, it is the integer
    algorithm of ``nanoir.runtime.numerics.softmax`` (:class:`IntegerAlgorithm`): i-exp of
    code differences from two tables, an integer sum, one half-up division per element;
    measured worst error against torch's float64 softmax of the quantized input, 8-bit in and
    out, over the property test's domain: one output step (the value 1.0 saturating to
    ``127/128``; below that, half a step).

    ```mlir
    %y = nf.softmax %x {axis = -1 : i64} : (tensor<?x4x8xf32>) -> tensor<?x4x8xf32>
    %z = nf.softmax %s, %m {axis = 3 : i64}
        : (tensor<?x2x8x8xf32>, tensor<8x8xi1>) -> tensor<?x2x8x8xf32>
    ```
    """

    name = "nf.softmax"
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    mask = opt_operand_def(BoolTensor)
    result = result_def(T)
    traits = traits_def(Pure(), WholeAlongAxis(), SOFTMAX_ALGORITHM, NonNegativeResult())
    assembly_format = "$input (`,` $mask^)? attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, axis: int, mask: SSAValue | None = None):
        super().__init__(
            operands=[input, [] if mask is None else [mask]],
            result_types=[input.type],
            properties={"axis": IntegerAttr(axis, i64)},
        )

    def verify_(self) -> None:
        super().verify_()
        if self.mask is not None:
            x, m = tensor_shape(self.input), tensor_shape(self.mask)
            shape = shape_guard(self, broadcast_shapes, x, m)
            if len(m) > len(x) or not shapes_compatible(shape, x):
                raise VerifyException(
                    f"nf.softmax: mask {shape_str(m)} does not broadcast to the input "
                    f"{shape_str(x)}"
                )


@irdl_op_definition
class LogSoftmaxOp(_SoftmaxBase):
    """torch's ``log_softmax(x, axis)``: ``x - max - log(sum(exp(x - max)))``. Quantized, the
    integer algorithm of ``nanoir.runtime.numerics.softmax`` (integer log from the sum's bit
    length and an interpolated table); measured worst error against torch's float64
    log-softmax of the quantized input, 8-bit in and out, over the property test's domain:
    half an output step (plus 2**-20 steps from the integer log).

    ```mlir
    %y = nf.log_softmax %x {axis = 1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
    ```
    """

    name = "nf.log_softmax"
    traits = traits_def(Pure(), WholeAlongAxis(), SOFTMAX_ALGORITHM)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, axis: int):
        super().__init__(
            operands=[input], result_types=[input.type], properties={"axis": IntegerAttr(axis, i64)}
        )


# --------------------------------------------------------------------------------------------
# LayerNorm and GroupNorm (integer algorithm: nanoir.runtime.numerics.norm)
# --------------------------------------------------------------------------------------------


def _constant_codes(op: Operation, index: int) -> tuple[np.ndarray, int] | str:
    """Operand ``index``'s codes and per-tensor exponent, from its fake-quant of a constant."""
    what = ("weight", "bias")[index - 1]
    value = op.operands[index]
    grid = source_quantized(value)
    if isinstance(grid, str):
        return f"its {what} is not quantized per tensor: {grid}"
    fq = value.owner
    src = getattr(fq, "operands", (None,))[0]
    const = getattr(src, "owner", None)
    if not isinstance(const, ConstantOp):
        return f"its {what} is not a fake-quantized constant"
    data = np.asarray(dense_to_numpy(const.value), np.float64)
    return np.rint(data * 2.0**grid.exp).astype(np.int64), grid.exp


def norm_plan_of(
    op: Operation,
    qin: Quantized,
    qout: Quantized,
    g: np.ndarray,
    kg: int,
    c: np.ndarray,
    kc: int,
    shape: tuple[int, ...] | None = None,
) -> norm_numerics.NormPlan:
    """The integer algorithm's plan for ``op`` on these grids and constants (``shape``: the
    input's, by default its static type's)."""
    dims = normalised_dims(op)
    shape = tensor_shape(op.operands[0]) if shape is None else shape
    n = int(np.prod([shape[d] for d in dims], dtype=np.int64))
    if isinstance(op, GroupNormOp):
        n //= op.groups.value.data
    user = next(iter(op.results[0].uses)).operation
    mode = getattr(user, "rounding_mode", "trunc")
    eps = op.epsilon.value.data  # type: ignore[attr-defined]
    in_bits = qin.bits + (0 if qin.signed else 1)
    return norm_numerics.plan_for(
        n, in_bits, qin.exp, eps, g, kg, c, kc, qout.exp, qout.bits, mode, qout.signed
    )


def _norm_bound(op: Operation, qin: Quantized, qout: Quantized) -> str | None:
    weight, bias = _constant_codes(op, 1), _constant_codes(op, 2)
    for part in (weight, bias):
        if isinstance(part, str):
            return part
    assert not isinstance(weight, str) and not isinstance(bias, str)
    shape = tensor_shape(op.operands[0])
    if any(shape[d] == DYNAMIC_INDEX for d in normalised_dims(op)):
        return None  # the plan is made for each run's shape (nq); lower-to-hw refuses it
    try:
        norm_plan_of(op, qin, qout, weight[0], weight[1], bias[0], bias[1])
    except norm_numerics.NormBoundError as e:
        return str(e)
    return None


def _norm_codes(
    op: Operation, q: np.ndarray, qin: Quantized, qout: Quantized, w: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """The nq semantics: the integer algorithm on the codes (int64 inside; the float64 codes,
    weight and bias are exact integers times powers of two)."""
    grids = source_quantized(op.operands[1]), source_quantized(op.operands[2])
    assert not isinstance(grids[0], str) and not isinstance(grids[1], str)
    kg, kc = grids[0].exp, grids[1].exp
    g = np.rint(np.asarray(w, np.float64) * 2.0**kg).astype(np.int64)
    c = np.rint(np.asarray(b, np.float64) * 2.0**kc).astype(np.int64)
    codes = np.rint(q).astype(np.int64)
    try:
        plan = norm_plan_of(op, qin, qout, g, kg, c, kc, codes.shape)
    except norm_numerics.NormBoundError as e:
        raise ValueError(f"{op.name}: {e}") from None
    if isinstance(op, LayerNormOp):
        dims = op.normalized_dims.value.data
        return norm_numerics.layer_norm_codes(codes, dims, g, kg, c, kc, plan)
    assert isinstance(op, GroupNormOp)
    return norm_numerics.group_norm_codes(codes, op.groups.value.data, g, kg, c, kc, plan)


NORM_ALGORITHM = IntegerAlgorithm(_norm_codes, _norm_bound)
"""LayerNorm's and GroupNorm's integer algorithm (``nanoir.runtime.numerics.norm``)."""


class _NormBase(IRDLOperation):
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    weight = operand_def(FloatTensor)
    bias = operand_def(FloatTensor)
    result = result_def(T)
    epsilon = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(1e-5, Float64Type()))
    traits = traits_def(Pure(), Normalising(), NORM_ALGORITHM)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)"
    )

    def check_affine(self, expected: tuple[int, ...]) -> None:
        for label, v in (("weight", self.weight), ("bias", self.bias)):
            if not shapes_compatible(tensor_shape(v), expected):
                raise VerifyException(
                    f"{self.name}: {label} shape {shape_str(tensor_shape(v))} is not "
                    f"{shape_str(expected)}"
                )
        if self.epsilon.value.data < 0:
            raise VerifyException(f"{self.name}: epsilon {self.epsilon.value.data} < 0")


@irdl_op_definition
class LayerNormOp(_NormBase):
    """torch's ``layer_norm`` over the last ``normalized_dims`` dims: ``(x - mean) /
    sqrt(var + epsilon) * weight + bias`` (biased variance; weight and bias of the normalised
    shape; the frontend writes ones and zeros when torch has none). Quantized, the integer
    algorithm of ``nanoir.runtime.numerics.norm`` (:class:`IntegerAlgorithm`: i64 sums of codes
    and squared codes, exact isqrt, one rounding division, exact affine and requant); worst
    error against torch's float64 op on the quantized input, weight and bias, over the
    property test's domain (4/8/16-bit in, 8/16-bit out, every rounding mode): 0.50003 output
    steps for the half modes and 0.999996 for trunc and floor (bound: one step).

    ```mlir
    %y = nf.layer_norm %x, %w, %b {normalized_dims = 1 : i64, epsilon = 1.0e-06 : f64}
        : (tensor<?x8x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x8x8x16xf32>
    ```
    """

    name = "nf.layer_norm"
    normalized_dims = prop_def(IntegerAttr[I64])

    def __init__(
        self, input: SSAValue, weight: SSAValue, bias: SSAValue, dims: int, eps: float = 1e-5
    ):
        super().__init__(
            operands=[input, weight, bias],
            result_types=[input.type],
            properties={
                "normalized_dims": IntegerAttr(dims, i64),
                "epsilon": FloatAttr(float(eps), Float64Type()),
            },
        )

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        dims = self.normalized_dims.value.data
        if not 1 <= dims <= len(x):
            raise VerifyException(
                f"nf.layer_norm: normalized_dims {dims} is not in 1..{len(x)} (the input "
                f"{shape_str(x)})"
            )
        self.check_affine(x[len(x) - dims :])


@irdl_op_definition
class GroupNormOp(_NormBase):
    """torch's ``group_norm`` on ``[N, C, *spatial]``: each of ``groups`` groups of ``C /
    groups`` channels is normalised over its channels and every position, then per-channel
    ``weight`` and ``bias``. Quantized: the integer algorithm of LayerNorm (:class:`LayerNormOp`)
    on each group, with the same measured errors.

    ```mlir
    %y = nf.group_norm %x, %w, %b {groups = 2 : i64}
        : (tensor<?x8x100xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<?x8x100xf32>
    ```
    """

    name = "nf.group_norm"
    groups = prop_def(IntegerAttr[I64])

    def __init__(
        self, input: SSAValue, weight: SSAValue, bias: SSAValue, groups: int, eps: float = 1e-5
    ):
        super().__init__(
            operands=[input, weight, bias],
            result_types=[input.type],
            properties={
                "groups": IntegerAttr(groups, i64),
                "epsilon": FloatAttr(float(eps), Float64Type()),
            },
        )

    def verify_(self) -> None:
        x = tensor_shape(self.input)
        groups = self.groups.value.data
        if len(x) < 2:
            raise VerifyException(f"nf.group_norm: input must have rank >= 2, got {shape_str(x)}")
        if groups < 1 or (x[1] != DYNAMIC_INDEX and x[1] % groups):
            raise VerifyException(
                f"nf.group_norm: {x[1]} channels do not split into {groups} groups"
            )
        self.check_affine((x[1],))


# --------------------------------------------------------------------------------------------
# Recurrent layers (LSTM, GRU, RNN): nanoir.runtime.numerics.recurrent
# --------------------------------------------------------------------------------------------


def operand_codes_grid(value: SSAValue) -> tuple[np.ndarray, int] | str:
    """The exponents (flattened: one, or one per row of a weight) and bits of the fake-quant
    ``value`` comes from, or why there is none (a recurrent op's operands)."""
    fq = value.owner
    if not isinstance(fq, Operation) or fq.name != "nq.fake_quant":
        return f"{value.name_hint or 'an operand'} does not come from a fake-quant"
    bits = fq.properties["bits"].value.data  # type: ignore[attr-defined]
    exps = np.asarray(dense_to_numpy(fq.properties["exp"]), np.int64).reshape(-1)  # type: ignore[arg-type]
    signed = fq.properties.get("signed")
    if bits == 1 or (signed is not None and not signed.value.data):  # type: ignore[attr-defined]
        return f"{value.name_hint or 'an operand'} is 1-bit or unsigned"
    shape = tensor_shape(value)
    if exps.size > 1 and (len(shape) > 2 or exps.size != shape[0]):
        return f"{value.name_hint or 'an operand'} has exponents along a dim other than its rows"
    return exps, bits


@irdl_op_definition
class RecurrentOp(IRDLOperation):
    """torch's ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``mode`` = ``lstm``, ``gru``,
    ``rnn_tanh``, ``rnn_relu``) in eval mode: ``num_layers`` stacked cells, both directions
    when ``bidirectional`` (outputs concatenated, forward first), ``[N, T, F]`` input when
    ``batch_first`` else ``[T, N, F]``; optional initial states ``h0``/``c0``
    ``[L*D, N, H]`` (zeros when absent); ``weights`` in torch's flat order per layer and
    direction (``w_ih``, ``w_hh``, then ``b_ih``, ``b_hh`` when ``has_biases``). Results:
    the sequence ``output``, ``h_n`` and, for an LSTM, ``c_n``.

    Quantized (``gates``, ``cell``, ``hidden`` = ``array<i64: exp, bits>`` and ``rounding``
    set by quantize; the internal quantizers ``<name>.gates``, ``.cell``, ``.hidden``), it is
    the integer cell of ``nanoir.runtime.numerics.recurrent``, as integer LSTM kernels do it
    (CMSIS-NN int8x8_16, TFLite's integer LSTM, Brevitas ``QuantLSTM``): each gate's
    pre-activation (both matmuls and both biases) summed exactly in int64; requantized to the
    ``gates`` grid; sigmoid/tanh by a table over the gate codes into Q0.15; the LSTM cell exact
    at 30 fraction bits, then requantized to the ``cell`` grid (16 bits by default), and read
    by tanh through the gates grid; the hidden state requantized to the ``hidden`` grid (the
    activation width), which the sequence output, ``h_n`` and the next step read. One
    exponent per internal quantizer for every layer and direction. The time loop stays inside
    the op (the state is what a streamed run carries from row to row). The operands come
    through fake-quants (per tensor, or per row for a weight); ``h0``/``c0`` are requantized
    to the hidden and cell grids first.

    ```mlir
    %y, %h, %c = nf.recurrent %x : tensor<?x20x4xf32> weights(%wi, %wh, %bi, %bh
        : tensor<32x4xf32>, tensor<32x8xf32>, tensor<32xf32>, tensor<32xf32>)
        {mode = "lstm", hidden_size = 8 : i64, num_layers = 1 : i64, bidirectional = false,
        batch_first = true, has_biases = true}
        -> tensor<?x20x8xf32>, tensor<1x?x8xf32>, tensor<1x?x8xf32>
    ```
    """

    name = "nf.recurrent"
    input = operand_def(FloatTensor)
    h0 = opt_operand_def(FloatTensor)
    c0 = opt_operand_def(FloatTensor)
    weights = var_operand_def(FloatTensor)
    output = result_def(FloatTensor)
    h_n = result_def(FloatTensor)
    c_n = opt_result_def(FloatTensor)
    mode = prop_def(StringAttr)
    hidden_size = prop_def(IntegerAttr[I64])
    num_layers = prop_def(IntegerAttr[I64])
    bidirectional = prop_def(BoolAttr)
    batch_first = prop_def(BoolAttr)
    has_biases = prop_def(BoolAttr)
    gates = opt_prop_def(DenseArrayBase)
    cell = opt_prop_def(DenseArrayBase)
    hidden = opt_prop_def(DenseArrayBase)
    rounding = opt_prop_def(StringAttr)
    traits = traits_def(Pure(), Recurrent())
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = (
        "$input `:` type($input) (`h0` `(` $h0^ `:` type($h0) `)`)? "
        "(`c0` `(` $c0^ `:` type($c0) `)`)? `weights` `(` $weights `:` type($weights) `)` "
        "attr-dict `->` type(results)"
    )

    INTERNAL: ClassVar[tuple[str, ...]] = ("gates", "cell", "hidden")
    """The internal quantizers, named ``<result name>.<this>`` for rules and exponents."""

    def __init__(
        self,
        input: SSAValue,
        weights: Sequence[SSAValue],
        layout: recurrent_numerics.RecurrentLayout,
        result_types: Sequence[Attribute],
        h0: SSAValue | None = None,
        c0: SSAValue | None = None,
    ):
        super().__init__(
            operands=[input, [] if h0 is None else [h0], [] if c0 is None else [c0], weights],
            result_types=[result_types[0], result_types[1], list(result_types[2:])],
            properties={
                "mode": StringAttr(layout.mode),
                "hidden_size": IntegerAttr(layout.hidden, i64),
                "num_layers": IntegerAttr(layout.layers, i64),
                "bidirectional": BoolAttr.from_bool(layout.bidirectional),
                "batch_first": BoolAttr.from_bool(layout.batch_first),
                "has_biases": BoolAttr.from_bool(layout.has_biases),
            },
        )

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

    def internal_grid(self, which: str) -> recurrent_numerics.Grid | None:
        """The ``gates``, ``cell`` or ``hidden`` grid, if quantize set it."""
        values = array_values(self.properties.get(which))  # type: ignore[arg-type]
        return None if values is None else recurrent_numerics.Grid(*values)

    def verify_(self) -> None:
        mode = self.mode.data
        if mode not in recurrent_numerics.MODES:
            raise VerifyException(
                f"nf.recurrent: mode {mode!r} is not one of {', '.join(recurrent_numerics.MODES)}"
            )
        layout = self.layout
        if layout.hidden < 1 or layout.layers < 1:
            raise VerifyException(
                f"nf.recurrent: hidden_size {layout.hidden} and num_layers {layout.layers} "
                "must be >= 1"
            )
        x = tensor_shape(self.input)
        if len(x) != 3:
            raise VerifyException(f"nf.recurrent: input must be rank 3, got {shape_str(x)}")
        if (self.c0 is not None) != (self.c0 is not None and mode == "lstm"):
            raise VerifyException(f"nf.recurrent: only an lstm takes c0, not {mode}")
        if (self.c_n is not None) != (mode == "lstm"):
            raise VerifyException("nf.recurrent: an lstm has three results, other modes two")
        expected = layout.weight_shapes(x[2])
        got = [tensor_shape(w) for w in self.weights]
        if len(got) != len(expected) or not all(
            shapes_compatible(e, g) for e, g in zip(expected, got)
        ):
            raise VerifyException(
                f"nf.recurrent: weights {', '.join(shape_str(g) for g in got)} are not torch's "
                f"{', '.join(shape_str(e) for e in expected)}"
            )
        out, state, _ = layout.result_shapes(x)
        for label, v in (("h0", self.h0), ("c0", self.c0)):
            if v is not None and not shapes_compatible(tensor_shape(v), state):
                raise VerifyException(
                    f"nf.recurrent: {label} {shape_str(tensor_shape(v))} is not {shape_str(state)}"
                )
        check_result_shape(self, out, self.output)
        check_result_shape(self, state, self.h_n)
        if self.c_n is not None:
            check_result_shape(self, state, self.c_n)
        quantized = [self.properties.get(k) is not None for k in (*self.INTERNAL, "rounding")]
        if any(quantized) and not all(quantized):
            raise VerifyException(
                "nf.recurrent: gates, cell, hidden and rounding are set together or not at all"
            )
        lo, hi = recurrent_numerics.EXP_RANGE
        for which in self.INTERNAL:
            grid = self.internal_grid(which)
            if grid is not None and (not lo <= grid.exp <= hi or not 2 <= grid.bits <= 16):
                raise VerifyException(
                    f"nf.recurrent: {which} = [{grid.exp}, {grid.bits}]: the exponent must lie "
                    f"in {lo}..{hi} and the bits in 2..16"
                )
        if self.rounding is not None and self.rounding.data not in (
            "trunc",
            "floor",
            "half_up",
            "half_even",
        ):
            raise VerifyException(f"nf.recurrent: rounding {self.rounding.data!r} is unknown")


# --------------------------------------------------------------------------------------------
# Elementwise functions by name, comparisons, selection (issue 32: op families)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _UnaryTable(LookupTable):
    """``nf.unary``'s table: its quantized semantics, the function at the nearest point of its
    domain (:func:`nanoir.runtime.numerics.unary.quantized_values`), never NaN."""

    def evaluate(self, op: Operation, x: np.ndarray) -> np.ndarray:
        assert isinstance(op, UnaryOp)
        return unary_numerics.quantized_values(op.fn.data, x, op.param_values())

    def source(self, op: Operation) -> None:
        return None


@dataclass(frozen=True)
class _NonNegativeFunction(NonNegativeResult):
    """``nf.unary`` of a function whose values are ``>= 0`` (exp, sqrt, abs, ...)."""

    def holds(self, op: Operation) -> bool:
        assert isinstance(op, UnaryOp)
        spec = unary_numerics.FUNCTIONS.get(op.fn.data)
        return spec is not None and spec.non_negative


@irdl_op_definition
class UnaryOp(UnaryFloatOp):
    """An elementwise function of one input named by ``fn``, from the one table of
    :mod:`nanoir.runtime.numerics.unary` (``exp``, ``log``, ``sqrt``, ``erf``, ``sin``,
    ``pow``, ``mish``, ``elu``, ...), with its ``params`` in the table's order: torch's
    semantics in float; once quantized, a lookup table over the input codes (the value at the
    nearest point of the function's domain outside it, so never NaN).

    ```mlir
    %y = nf.unary "exp" %x : tensor<?x16xf32>
    %z = nf.unary "pow" %y {params = array<f64: 5.000000e-01>} : tensor<?x16xf32>
    ```
    """

    name = "nf.unary"
    fn = prop_def(StringAttr)
    params = opt_prop_def(DenseArrayBase[Float64Type])
    traits = traits_def(FloatOnly(), _UnaryTable(unary_numerics.evaluate), _NonNegativeFunction())
    assembly_format = "$fn $input attr-dict `:` type($input)"

    def __init__(self, input: SSAValue, fn: str, params: Sequence[float] = ()):
        props: dict[str, Attribute] = {"fn": StringAttr(fn)}
        if params:
            props["params"] = DenseArrayBase.from_list(f64, [float(p) for p in params])
        super().__init__(input, props)

    def param_values(self) -> tuple[float, ...]:
        """The function's parameters (none: an empty tuple)."""
        return () if self.params is None else tuple(float(v) for v in self.params.get_values())

    def verify_(self) -> None:
        reason = unary_numerics.check_params(self.fn.data, self.param_values())
        if reason is not None:
            raise VerifyException(f"nf.unary: {reason}")


COMPARE_PREDICATES = tuple(compare_numerics.PREDICATES)
"""``nf.compare``'s predicates: orderings of the values, and logical ones of their being
non-zero (torch's ``logical_and``/``or``/``xor``)."""


@irdl_op_definition
class CompareOp(IRDLOperation):
    """``lhs <predicate> rhs`` elementwise with broadcasting, as 1.0 (true) or 0.0 (false) in
    the operands' float type (torch's ``eq``, ``lt``, ..., ``logical_and``; its bool tensors
    are these 0/1 values). An integer result: quantize puts no fake-quant on it; at the hw
    level it is codes 0/1 at exponent 0.

    ```mlir
    %m = nf.compare "lt" %x, %t : (tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
    ```
    """

    name = "nf.compare"
    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    predicate = prop_def(StringAttr)
    traits = traits_def(Pure(), Elementwise(), IndexResult(), NonNegativeResult())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$predicate $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, predicate: str):
        lt, rt = lhs.type, rhs.type
        assert isinstance(lt, TensorType) and isinstance(rt, TensorType)
        shape = broadcast_shapes(lt.get_shape(), rt.get_shape())
        super().__init__(
            operands=[lhs, rhs],
            result_types=[TensorType(lt.get_element_type(), shape)],
            properties={"predicate": StringAttr(predicate)},
        )

    def verify_(self) -> None:
        if self.predicate.data not in COMPARE_PREDICATES:
            raise VerifyException(
                f"nf.compare: predicate {self.predicate.data!r} is not one of "
                + ", ".join(COMPARE_PREDICATES)
            )
        check_same_element_type(self, [self.lhs, self.rhs, self.result])
        shape = shape_guard(self, broadcast_shapes, tensor_shape(self.lhs), tensor_shape(self.rhs))
        check_result_shape(self, shape, self.result)


@irdl_op_definition
class WhereOp(IRDLOperation):
    """``lhs`` where ``cond`` is non-zero, else ``rhs``, elementwise with broadcasting
    (torch's ``where``; ``masked_fill(x, m, v)`` is ``where(m, v, x)``). At the hw level both
    values are aligned to one exponent and a code is picked.

    ```mlir
    %y = nf.where %m, %x, %v : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<f32>) -> tensor<?x16xf32>
    ```
    """

    name = "nf.where"
    cond = operand_def(FloatTensor)
    lhs = operand_def(FloatTensor)
    rhs = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, cond: SSAValue, lhs: SSAValue, rhs: SSAValue):
        shape = broadcast_shapes(
            broadcast_shapes(tensor_shape(cond), tensor_shape(lhs)), tensor_shape(rhs)
        )
        t = lhs.type
        assert isinstance(t, TensorType)
        super().__init__(
            operands=[cond, lhs, rhs], result_types=[TensorType(t.get_element_type(), shape)]
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.cond, self.lhs, self.rhs, self.result])
        shape = shape_guard(
            self,
            lambda a, b, c: broadcast_shapes(broadcast_shapes(a, b), c),
            tensor_shape(self.cond),
            tensor_shape(self.lhs),
            tensor_shape(self.rhs),
        )
        check_result_shape(self, shape, self.result)


# --------------------------------------------------------------------------------------------
# Reductions and prefix sums (issue 32)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReduceRows(StreamingRule):
    """A reduction over its ``dims`` property (``nf.reduce``, ``nf.arg_reduce``,
    ``nf.cumsum``; and their nh forms): the whole extent along a reduced dim (the stream
    planner then waits for every row, and refuses a dynamic one), row by row along the
    others."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        dims = array_values(op.properties.get("dims")) or ()  # type: ignore[arg-type]
        return None if dim in dims else RowStep()


def check_reduce_dims(
    name: str, x: Sequence[int], y: Sequence[int], dims: Sequence[int], single: bool = False
) -> None:
    """``dims`` sorted, distinct, within the rank (one of them when ``single``), and the
    result ``y`` the input ``x`` with size 1 at each reduced dim."""
    if list(dims) != sorted(set(dims)) or any(not 0 <= d < len(x) for d in dims):
        raise VerifyException(
            f"{name}: dims {list(dims)} must be sorted, distinct dims of {shape_str(x)}"
        )
    if single and len(dims) != 1:
        raise VerifyException(f"{name}: reduces one dim, got dims {list(dims)}")
    expected = reduce_numerics.reduced_shape(x, dims)
    if not shapes_compatible(expected, y):
        raise VerifyException(
            f"{name}: result {shape_str(y)} is not {shape_str(x)} reduced over {list(dims)} "
            f"(kept as size 1: {shape_str(expected)})"
        )


def _reduced_type(input: SSAValue, dims: Sequence[int]) -> TensorType:
    t = input.type
    assert isinstance(t, TensorType)
    return TensorType(
        t.get_element_type(), reduce_numerics.reduced_shape(t.get_shape(), list(dims))
    )


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """The ``kind`` reduction (``sum``, ``max``, ``min``, ``prod``) over ``dims``, kept with
    size 1 (torch's ``sum``/``amax``/``amin``/``prod`` with ``keepdim=True``). At the hw level
    sum, max and min are exact on codes at one exponent (a sum of ``n`` codes grows by
    ``ceil(log2 n)`` bits, checked against i32).

    ```mlir
    %s = nf.reduce "sum" %x {dims = array<i64: 2>} : tensor<?x16x8xf32> -> tensor<?x16x1xf32>
    ```
    """

    name = "nf.reduce"
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), ReduceRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind $input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, kind: str, dims: Sequence[int]):
        super().__init__(
            operands=[input],
            result_types=[_reduced_type(input, dims)],
            properties={"kind": StringAttr(kind), "dims": int_array(dims)},
        )

    def verify_(self) -> None:
        if self.kind.data not in reduce_numerics.KINDS:
            raise VerifyException(
                f"nf.reduce: kind {self.kind.data!r} is not one of "
                + ", ".join(reduce_numerics.KINDS)
            )
        check_same_element_type(self, [self.input, self.result])
        dims = array_values(self.dims) or ()
        check_reduce_dims(self.name, tensor_shape(self.input), tensor_shape(self.result), dims)


@irdl_op_definition
class ArgReduceOp(IRDLOperation):
    """Along one dim (``dims``, kept with size 1): the index of the first maximum
    (``argmax``) or minimum (``argmin``), or 1.0 where any (``any``) or all (``all``)
    elements are non-zero, else 0.0: integers held in float (torch's int64 indices and
    bools), with no fake-quant; at the hw level the same on codes (``i32`` indices, ``i2``
    truth values, exponent 0).

    ```mlir
    %i = nf.arg_reduce "argmax" %x {dims = array<i64: 1>} : tensor<?x10xf32> -> tensor<?x1xf32>
    ```
    """

    name = "nf.arg_reduce"
    kind = prop_def(StringAttr)
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    traits = traits_def(Pure(), ReduceRows(), IndexResult())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$kind $input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, kind: str, dim: int):
        super().__init__(
            operands=[input],
            result_types=[_reduced_type(input, [dim])],
            properties={"kind": StringAttr(kind), "dims": int_array([dim])},
        )

    def verify_(self) -> None:
        if self.kind.data not in reduce_numerics.ARG_KINDS:
            raise VerifyException(
                f"nf.arg_reduce: kind {self.kind.data!r} is not one of "
                + ", ".join(reduce_numerics.ARG_KINDS)
            )
        check_same_element_type(self, [self.input, self.result])
        dims = array_values(self.dims) or ()
        check_reduce_dims(
            self.name, tensor_shape(self.input), tensor_shape(self.result), dims, single=True
        )


@irdl_op_definition
class CumsumOp(IRDLOperation):
    """Prefix sums along one dim (``dims``; torch's ``cumsum``). At the hw level an exact
    integer prefix sum of codes at one exponent, ``ceil(log2 n)`` bits of growth.

    ```mlir
    %c = nf.cumsum %x {dims = array<i64: 1>} : tensor<?x16xf32>
    ```
    """

    name = "nf.cumsum"
    T: ClassVar = VarConstraint("T", FloatTensor)
    dims = prop_def(DenseArrayBase[I64])
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure(), ReduceRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, input: SSAValue, dim: int):
        super().__init__(
            operands=[input], result_types=[input.type], properties={"dims": int_array([dim])}
        )

    def verify_(self) -> None:
        dims = array_values(self.dims) or ()
        x = tensor_shape(self.input)
        if len(dims) != 1 or not 0 <= dims[0] < max(len(x), 1):
            raise VerifyException(f"nf.cumsum: dims {list(dims)} must be one dim of {shape_str(x)}")


# --------------------------------------------------------------------------------------------
# x2 bicubic upsampling (issue 32: a fixed kernel; nanoir.runtime.numerics.bicubic)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BicubicRows(StreamingRule):
    """x2 bicubic upsampling along a scaled dim: a window of five rows (the edge row repeated
    past each end, as ``pads``) emits two; row by row along the other dims."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        x, y = tensor_shape(op.operands[0]), tensor_shape(op.results[0])
        if dim < 2 or x[dim] == y[dim]:
            return RowStep()
        return RowStep(5, 1, 2, pad_begin=2, pad_end=2, adjust="window")


@irdl_op_definition
class UpsampleBicubicOp(IRDLOperation):
    """x2 bicubic upsampling with ``align_corners=False`` (torch's ``F.interpolate(...,
    mode="bicubic")``: Keys' cubic with ``A = -0.75``, indices clamped to the edges) of the
    spatial dims the result doubles: per doubled dim, output ``2i`` is ``(-9 x[i-2] + 67
    x[i-1] + 225 x[i] - 27 x[i+1]) / 256`` and ``2i + 1`` its mirror image, the edge row
    repeated past the ends (``pads`` of them: 2 each for the whole op). Dyadic weights: on a
    quantized input the result is exact, and the output's fake-quant is the one rounding.

    ```mlir
    %y = nf.upsample_bicubic %x {pads = array<i64: 2, 2, 2, 2>} : tensor<?x16x4x4xf32> -> tensor<?x16x8x8xf32>
    ```
    """

    name = "nf.upsample_bicubic"
    input = operand_def(FloatTensor)
    result = result_def(FloatTensor)
    pads = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), BicubicRows())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, size: Sequence[int]):
        t = input.type
        assert isinstance(t, TensorType)
        shape = (*t.get_shape()[:2], *size)
        super().__init__(
            operands=[input],
            result_types=[TensorType(t.get_element_type(), shape)],
            properties={"pads": int_array([2] * (2 * len(size)))},
        )

    def verify_(self) -> None:
        check_same_element_type(self, [self.input, self.result])
        x, y = tensor_shape(self.input), tensor_shape(self.result)
        check_upsample_bilinear(self.name, x, y)
        if list(array_values(self.pads) or ()) != [2] * (2 * (len(x) - 2)):
            raise VerifyException(f"{self.name}: pads must be 2 per spatial dim and end")


# --------------------------------------------------------------------------------------------
# L2 normalisation (issue 32: integer algorithm, nanoir.runtime.numerics.l2norm)
# --------------------------------------------------------------------------------------------


def l2_plan_of(
    op: Operation, qin: Quantized, qout: Quantized, shape: tuple[int, ...] | None = None
) -> l2_numerics.L2Plan:
    """The integer algorithm's plan for an ``nf.normalize`` on these grids (``shape``: the
    input's, by default its static type's)."""
    assert isinstance(op, NormalizeOp)
    shape = tensor_shape(op.input) if shape is None else shape
    axis = op.axis.value.data % max(len(shape), 1)
    user = next(iter(op.result.uses)).operation
    mode = getattr(user, "rounding_mode", "trunc")
    in_bits = qin.bits + (0 if qin.signed else 1)
    return l2_numerics.l2_plan(
        shape[axis] if shape else 1,
        in_bits,
        qin.exp,
        op.epsilon.value.data,
        qout.exp,
        qout.bits,
        mode,
        qout.signed,
    )


def _l2_bound(op: Operation, qin: Quantized, qout: Quantized) -> str | None:
    assert isinstance(op, NormalizeOp)
    shape = tensor_shape(op.input)
    if shape and shape[op.axis.value.data % len(shape)] == DYNAMIC_INDEX:
        return None  # the plan is made for each run's shape (nq); lower-to-hw refuses it
    try:
        l2_plan_of(op, qin, qout)
    except l2_numerics.L2BoundError as e:
        return str(e)
    return None


def _l2_codes(op: Operation, q: np.ndarray, qin: Quantized, qout: Quantized) -> np.ndarray:
    """The nq semantics: the integer algorithm on the codes (int64 inside)."""
    assert isinstance(op, NormalizeOp)
    codes = np.rint(q).astype(np.int64)
    try:
        plan = l2_plan_of(op, qin, qout, codes.shape)
    except l2_numerics.L2BoundError as e:
        raise ValueError(f"{op.name}: {e}") from None
    axis = op.axis.value.data % max(codes.ndim, 1)
    return l2_numerics.l2_normalize_codes(codes, axis, plan)


L2_ALGORITHM = IntegerAlgorithm(_l2_codes, _l2_bound)
"""L2 normalisation's integer algorithm (``nanoir.runtime.numerics.l2norm``)."""


@irdl_op_definition
class NormalizeOp(IRDLOperation):
    """torch's ``F.normalize(x, p=2, dim=axis, eps=epsilon)``: ``x / max(||x||_2, epsilon)``
    along ``axis``. Quantized, the integer algorithm of ``nanoir.runtime.numerics.l2norm``
    (:class:`IntegerAlgorithm`: an i64 sum of squared codes, an exact isqrt, one rounding
    division and the output requant): within ``1/2 + e`` output steps of torch's float64 op
    on the quantized input for the half modes, one step for trunc and floor (``e`` below
    ``2**(ko - 27)``).

    ```mlir
    %y = nf.normalize %x {axis = 1 : i64, epsilon = 1.0e-12 : f64} : tensor<?x16x8xf32>
    ```
    """

    name = "nf.normalize"
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    result = result_def(T)
    axis = prop_def(IntegerAttr[I64])
    epsilon = prop_def(FloatAttr[Float64Type], default_value=FloatAttr(1e-12, Float64Type()))
    traits = traits_def(Pure(), WholeAlongAxis(), L2_ALGORITHM)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(self, input: SSAValue, axis: int, epsilon: float = 1e-12):
        super().__init__(
            operands=[input],
            result_types=[input.type],
            properties={
                "axis": IntegerAttr(axis, i64),
                "epsilon": FloatAttr(float(epsilon), Float64Type()),
            },
        )

    def verify_(self) -> None:
        rank = len(tensor_shape(self.input))
        axis = self.axis.value.data
        if not -max(rank, 1) <= axis < max(rank, 1):
            raise VerifyException(f"nf.normalize: axis {axis} is out of range for rank {rank}")
        eps = self.epsilon.value.data
        if not eps >= 0:
            raise VerifyException(f"nf.normalize: epsilon {eps} must be >= 0")


NF = Dialect(
    "nf",
    [
        CustomOp,
        ConstantOp,
        ReluOp,
        SigmoidOp,
        TanhOp,
        HardSigmoidOp,
        HardSwishOp,
        SiluOp,
        GeluOp,
        ClampOp,
        LeakyReluOp,
        PReluOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        MaximumOp,
        MinimumOp,
        ConvOp,
        ConvTransposeOp,
        LinearOp,
        MatmulOp,
        BatchNormOp,
        LayerNormOp,
        GroupNormOp,
        MaxPoolOp,
        AvgPoolOp,
        AdaptiveAvgPoolOp,
        ConcatOp,
        SplitOp,
        ReshapeOp,
        TransposeOp,
        PadOp,
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
        UnaryOp,
        CompareOp,
        WhereOp,
        ReduceOp,
        ArgReduceOp,
        CumsumOp,
        UpsampleBicubicOp,
        NormalizeOp,
    ],
    [],
)
