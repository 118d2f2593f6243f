"""nq: power-of-two fake quantization, the NanoEngine "Q" level.

A program at this level is nf ops whose operands come through ``nq.fake_quant``. The op's
result is float but holds only values exactly representable with ``bits`` bits at exponent
``exp`` (real value = code * 2**-exp). ``exp`` is an integer tensor broadcast against the input
with NumPy rules: ``[1]`` per tensor, ``[C, 1, 1, 1]`` per output channel of a weight,
``[C, 1, 1]`` (or ``[1, C, 1, 1]``) per channel of an activation, or the full shape.

The rounding modes (``RoundingMode``, from the shared quantization math in
``nanoir.runtime.numerics.quant``) are shared with the nh level; their attribute lives here.
"""

from __future__ import annotations

from typing import ClassVar

from nanoir.dialects.nf import FloatTensor, tensor_shape
from nanoir.dialects.traits import Elementwise
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import (
    ShapeError,
    broadcast_shapes,
    shape_str,
    shapes_compatible,
)
from xdsl.dialects.builtin import (
    I64,
    BoolAttr,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

MAX_BITS = 16
"""Widest fake-quant code the nq level accepts (NanoEngine targets use 1, 2, 4 and 8)."""

MAX_ABS_EXP = 60
"""Exponents are bounded so that ``x * 2**exp`` stays exact and finite in float64."""


@irdl_attr_definition
class RoundingModeAttr(EnumAttribute[RoundingMode]):
    """A rounding mode: ``#nq.rounding<trunc>``."""

    name = "nq.rounding"

    def print_parameter(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(self.data)

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> RoundingMode:
        with parser.in_angle_brackets():
            return parser.parse_str_enum(RoundingMode)


def exp_values(exp: DenseIntOrFPElementsAttr) -> list[int]:
    """The exponents of an ``exp`` attribute, flat, in row-major order."""
    return [int(v) for v in exp.get_values()]


@irdl_op_definition
class FakeQuantOp(IRDLOperation):
    """Quantize to ``bits``-bit codes at exponent ``exp`` and back to float.

    With ``k`` = ``exp`` broadcast against ``x`` and ``b`` = ``bits``:
    ``b > 1``: ``q = clamp(round(x * 2**k), -2**(b-1), 2**(b-1) - 1) / 2**k``, where ``round``
    is ``rounding`` (default ``trunc``, toward zero); ``b == 1``:
    ``q = (x >= 0 ? +1 : -1) * 2**k`` (``2**k`` is the magnitude, not the step).

    ``signed = false`` (optional; absent means signed, so older text prints unchanged) declares
    unsigned codes for a tensor known non-negative: ``q = clamp(round(x * 2**k), 0, 2**b - 1) /
    2**k``, the same step and one more bit of range over ``[0, max]``. It needs ``b > 1``: the
    1-bit code is ``±1`` and has no unsigned form. Python reads it as ``op.is_signed``.

    ```mlir
    %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x3x1x5xf32>
    %w4 = nq.fake_quant %w {bits = 4 : i64, exp = dense<[[[[3]]], [[[2]]]]> : tensor<2x1x1x1xi8>,
        rounding = #nq.rounding<half_even>} : tensor<2x3x3x3xf32>
    %r = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>, signed = false}
        : tensor<?x8xf32>
    ```

    ``origin`` (optional) says why the exponent is not the one the value's own range gives:
    quantize chose it for a join so that the program lowers to integers (``join:%layer1.0``,
    an add or concat; ``input:%conv`` or ``acc:%conv``, a conv's accumulator). ``.mlir`` keeps
    it, the quantization report shows it; ``.ne`` and ONNX drop it (it changes no number).
    """

    name = "nq.fake_quant"
    T: ClassVar = VarConstraint("T", FloatTensor)
    input = operand_def(T)
    result = result_def(T)
    bits = prop_def(IntegerAttr[I64])
    exp = prop_def(DenseIntOrFPElementsAttr)
    rounding = prop_def(RoundingModeAttr, default_value=RoundingModeAttr(RoundingMode.TRUNC))
    origin = opt_prop_def(StringAttr)
    signed = opt_prop_def(BoolAttr)
    traits = traits_def(Pure(), Elementwise(("exp",)))
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input)"

    def __init__(
        self,
        input: SSAValue,
        bits: int,
        exp: DenseIntOrFPElementsAttr,
        rounding: RoundingMode = RoundingMode.TRUNC,
        signed: bool = True,
    ):
        properties: dict[str, Attribute] = {
            "bits": IntegerAttr(bits, i64),
            "exp": exp,
            "rounding": RoundingModeAttr(rounding),
        }
        if not signed:  # signed stays implicit, so default programs print as before
            properties["signed"] = BoolAttr.from_bool(False)
        super().__init__(operands=[input], result_types=[input.type], properties=properties)

    @property
    def rounding_mode(self) -> RoundingMode:
        return self.rounding.data

    @property
    def is_signed(self) -> bool:
        """False when the codes are unsigned (``signed = false``); absent means signed."""
        return self.signed is None or bool(self.signed.value.data)

    def set_signed(self, signed: bool) -> None:
        """Declare the codes signed (drops the property: the default) or unsigned."""
        if signed:
            if "signed" in self.properties:
                del self.properties["signed"]
        else:
            self.properties["signed"] = BoolAttr.from_bool(False)

    def verify_(self) -> None:
        bits = self.bits.value.data
        if not 1 <= bits <= MAX_BITS:
            raise VerifyException(
                f"nq.fake_quant: bits = {bits} is outside the supported 1..{MAX_BITS}"
            )
        if bits == 1 and not self.is_signed:
            raise VerifyException(
                "nq.fake_quant: signed = false needs bits > 1: the 1-bit code is ±1 (its sign is "
                "all it holds), so it has no unsigned form"
            )
        exp_type = self.exp.get_type()
        if not isinstance(exp_type, TensorType) or not isinstance(
            exp_type.get_element_type(), IntegerType
        ):
            raise VerifyException(f"nq.fake_quant: exp must be an integer tensor, got {exp_type}")
        if exp_type.get_element_type().width.data not in (8, 16, 32, 64):
            # Exponents are read as whole bytes (the runtime and the lowering view the data
            # as int8..int64; an i1 "1" would even be stored as -1).
            raise VerifyException(
                f"nq.fake_quant: exp must hold i8, i16, i32 or i64 integers, got {exp_type}"
            )
        x = tensor_shape(self.input)
        e = exp_type.get_shape()
        try:
            joined = broadcast_shapes(x, e)
        except ShapeError:
            joined = None
        if joined is None or not shapes_compatible(x, joined) or len(e) > len(x):
            raise VerifyException(
                f"nq.fake_quant: exp of shape {shape_str(e)} does not broadcast against the "
                f"input {shape_str(x)}"
            )
        bad = [k for k in exp_values(self.exp) if abs(k) > MAX_ABS_EXP]
        if bad:
            raise VerifyException(
                f"nq.fake_quant: exponent {bad[0]} is outside -{MAX_ABS_EXP}..{MAX_ABS_EXP}"
            )


def exp_attr(
    values: list[int] | int, shape: list[int] | None = None, element: IntegerType | None = None
) -> DenseIntOrFPElementsAttr:
    """Build an ``exp`` attribute: ``exp_attr(7)`` is ``dense<7> : tensor<1xi8>``."""
    flat = [values] if isinstance(values, int) else list(values)
    shape = [len(flat)] if shape is None else shape
    elt = element if element is not None else IntegerType(8)
    return DenseIntOrFPElementsAttr.from_list(TensorType(elt, shape), flat)


NQ = Dialect("nq", [FakeQuantOp], [RoundingModeAttr])
