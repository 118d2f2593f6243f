"""The nq level of `.ne`: one table row per NanoEngine op type, read by import and export.

Each `NqOp` row says, for one op type, which nf/nq op it is, how its attributes map (`.ne`
name, op property, codec, ONNX default), which ONNX attributes are accepted only at one
value, how its inputs map (float tensors, or an integer constant in position 1), and how
the stream analysis of NanoEngine-PyTorch treats it (`padded`, `join`). `import_nq`
builds an op from a node with `NqOp.build`; `export_nq` writes an op's attributes with
`NqOp.written`. A regular op is its row alone; an op whose mapping the fields cannot say
(Conv's kernel check, Gemm's transposes, Reshape's shape constant, ...) adds a `converter`
and/or a `writer` function next to its row.

    .ne op_type          IR op                    notes
    Q                    nq.fake_quant            bits = bit_len; exp = the int constant in_s[1];
                                                  signed=0 for `signed = false` (nanoir's
                                                  extension: the reference reads signed only)
    Conv                 nf.conv                  kernel_shape checked against the weight
    Gemm                 nf.linear                only alpha = beta = 1, transA = 0, transB = 1;
                                                  input of any rank >= 2 (nf.linear's [..., I];
                                                  ONNX's Gemm is 2-D, its writer checks)
    Add Sub Mul Div      nf.add nf.sub nf.mul nf.div
    Max Min              nf.maximum nf.minimum    two inputs (ONNX allows 1..N)
    Relu Sigmoid Tanh    nf.relu nf.sigmoid nf.tanh
    LeakyRelu            nf.leaky_relu            alpha (default 0.01)
    Clip                 nf.clamp                 min/max as attributes only
    MaxPool              nf.max_pool              one output (no Indices)
    AveragePool          nf.avg_pool              count_include_pad (ONNX default 0)
    GlobalAveragePool    nf.adaptive_avg_pool     output_size all ones
    Concat               nf.concat
    Reshape              nf.reshape               shape from the int constant in_s[1]
    Flatten              nf.reshape               + ne.op_type = "Flatten"
    BatchNormalization   nf.batch_norm            epsilon; momentum is training-only
    Transpose            nf.transpose
    MatMul               nf.matmul
    PRelu                nf.prelu                 1-D slope only, per channel (dim 1) as torch's
                                                  PReLU (ONNX's reader translates ONNX's
                                                  right-aligned slope before this row)
    ConvTranspose        nf.conv_transpose        output_padding; no output_shape/auto_pad
    DepthToSpace         nf.depth_to_space        blocksize; mode DCR (ONNX default) or CRD
    SpaceToDepth         nf.space_to_depth        blocksize; mode=CRD written for torch's
                                                  pixel_unshuffle (ONNX's is DCR only)
    Resize               nf.upsample_nearest      mode=nearest, asymmetric, floor; axes+sizes
    ResizeLinear         nf.upsample_bilinear     mode=linear, half_pixel (x2 only); axes+sizes
                                                  (ONNX: Resize with mode=linear, read and written)
    Slice                nf.gather                one axis; read only (a gather writes Gather)
    UpsampleZero         nf.upsample_zero         offsets, sizes (nanoir's: the Magik Unpool2D
                                                  zero mode; ONNX has no such op)
    MaxPoolIndices       nf.max_pool_indices      kernel_shape, strides (nanoir's: the flat in-plane
                                                  index of each window's max, as floats; ONNX's
                                                  MaxPool Indices output is another encoding)
    MaxUnpoolPlane       nf.max_unpool            sizes = the result's [H, W] (nanoir's: inputs are
                                                  values, in-plane indices; the hw row's name)
    LSTM GRU RNN         nf.recurrent             ONNX's hidden_size, direction (forward or
                                                  bidirectional), layout (1 = batch_first),
                                                  activations (RNN: Tanh or Relu); nanoir's
                                                  num_layers, has_biases, initial_states (h0[,
                                                  c0] in_s after the input), gates/cell/hidden
                                                  = [exp, bits] and rounding (quantized); then
                                                  the weights in torch's flat order (not
                                                  ONNX's W/R/B: the reference does not read
                                                  these rows); unread h_n/c_n not written
    Pad                  nf.pad                   mode (constant/reflect/edge), pads, value as
                                                  attributes (ONNX opset < 11)
    Split                nf.split                 axis, split as attributes (opset < 13); one
                                                  output per piece
    Gather               nf.gather                axis, indices (1-D) as an attribute, or
                                                  ONNX's integer constant input 1
    Embedding            nf.embedding             inputs (indices, table); the indices are a
                                                  program input declared Tensor<int64_t>
    Expand               nf.expand                shape as an attribute (1 = keep the dim), or
                                                  ONNX's integer constant input 1; nanoir's:
                                                  a runtime input 1 is the shape source
                                                  (like), a -1 in shape its size there
    HardSwish            nf.hardswish
    Swish                nf.silu                  alpha=1 only (ONNX opset 24's Swish; the ONNX
                                                  writer spells it Sigmoid + Mul for opset 21)
    Gelu                 nf.gelu                  approximate (none, tanh; ONNX opset 20's)
    HardSigmoid          nf.hardsigmoid           alpha (ONNX's default 0.2), beta (0.5); torch's
                                                  is 1/6 and 0.5
    Softmax, LogSoftmax  nf.softmax,              axis (ONNX opset 13's, default -1); one input
                         nf.log_softmax           (a masked nf.softmax is not written)
    LayerNormalization   nf.layer_norm            axis (opset 17's, default -1: from axis to
                                                  the last dim), epsilon; scale and bias
                                                  inputs (both required)
    GroupNormalization   nf.group_norm            epsilon, num_groups; per-channel scale and
                                                  bias (opset 21's; opset 18's per-group scale
                                                  is refused by the shape check)
    (Identity, and any other op type: see import_nq)

Written attributes are in alphabetical order with defaults spelled out, as the reference
exporter prints them. Importing a node raises `Unsupported` (kept as `nf.custom` with a
warning) when the op cannot express it, `NodeProblem` when the node contradicts itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod

from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.node import (
    AttrMap,
    Converter,
    NodeProblem,
    NodeSpec,
    Unsupported,
    kind_of_const,
)
from nanoir.grammar.ne.nq_families import (
    FAMILY_CLASSES,
    FAMILY_ROWS,
    refusal,
    resize_cubic,
    row_type_for,
)
from nanoir.grammar.ne.schema import NE_OP_TYPE, Attrs, dense_from_const, is_float_dtype
from nanoir.grammar.ne.syntax_tree import AttrValue, ConstTensor, Float
from nanoir.runtime.numerics.kernels import GELU_APPROXIMATIONS, HARDSIGMOID_TORCH
from nanoir.runtime.numerics.movement import expand_shape_operand
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from nanoir.runtime.numerics.shapes import ShapeError, shape_str, shapes_compatible
from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, StringAttr, TensorType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

__all__ = [
    "Fixed",
    "NqOp",
    "NQ_OPS",
    "BY_OP_TYPE",
    "BY_CLASS",
    "row_of",
    "convert_known",
    "default_attrs",
    "flatten_dims",
]

# ---------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------


def _shape(value: SSAValue) -> tuple[int, ...]:
    return nf.tensor_shape(value)


def _rank(value: SSAValue) -> int:
    return len(_shape(value))


@dataclass(frozen=True)
class Fixed:
    """An ONNX attribute nanoir maps only at its default: another value keeps the node as
    nf.custom, saying `why`. Never written."""

    name: str
    value: int | str
    why: str

    def check(self, n: NodeSpec) -> None:
        got = (
            n.name_attr(self.name, self.value)
            if isinstance(self.value, str)
            else n.int(self.name, self.value)
        )
        if got != self.value:
            raise Unsupported(self.why)


@dataclass(frozen=True)
class NqOp:
    """How one `.ne` op type maps to one nf/nq op class, both ways."""

    op_type: str
    cls: type[Operation]
    inputs: tuple[int, int] = (1, 1)
    """How many float tensor inputs (low, high; high -1 = no limit), passed first to `cls`."""
    attrs: tuple[AttrMap, ...] = ()
    """Read in order and passed to `cls` after the inputs; written in order."""
    fixed: tuple[Fixed, ...] = ()
    ignored: tuple[str, ...] = ()
    """ONNX attributes accepted and dropped (training-only ones)."""
    constants: Attrs = ()
    """Written after `attrs` with these values: what the op always means (Gemm's transB=1)."""
    variadic: bool = False
    """The inputs are passed to `cls` as one list (Concat)."""
    check: Callable[[NodeSpec, list[SSAValue], list[object]], None] | None = None
    """Raise Unsupported / NodeProblem for values the op cannot take (inputs, attrs read)."""
    const_input: str | None = None
    """Input 1 is an integer constant: "exp" (Q's exponent), "shape" (Reshape's result shape)."""
    padded: bool = False
    """Has `pads`, which NanoEngine-PyTorch's stream analysis ignores (see reference_result_types)."""
    join: bool = False
    """Joins branches: fires while every input has a row (see reference_result_types)."""
    converter: Converter | None = None
    """Builds the op when the fields above cannot say how."""
    writer: Callable[[Operation], Attrs] | None = None
    """Writes the attributes when the fields above cannot say how."""

    def build(self, n: NodeSpec) -> Operation:
        """The op of a node of this type (unverified); Unsupported / NodeProblem."""
        if self.converter is not None:
            return self.converter(n)
        n.allow(*(a.name for a in self.attrs), *(f.name for f in self.fixed), *self.ignored)
        n.one_output()
        for fixed in self.fixed:
            fixed.check(n)
        values = n.values(*self.inputs)
        args = [a.read(n) for a in self.attrs]
        if self.check is not None:
            self.check(n, values, args)
        if self.variadic:
            return self.cls(values, *args)  # type: ignore[call-arg]
        return self.cls(*values, *args)  # type: ignore[call-arg]

    def written(self, op: Operation) -> Attrs:
        """The attribute list the exporter prints for `op` as a node of this type."""
        if self.writer is not None:
            return self.writer(op)
        return tuple(a.write(op) for a in self.attrs) + self.constants


# ---------------------------------------------------------------------------------------
# Irregular rows: converters and writers
# ---------------------------------------------------------------------------------------


def _q(n: NodeSpec) -> Operation:
    n.allow("bit_len", "rounding", "signed")
    n.one_output()
    if len(n.inputs) != 2:
        raise NodeProblem(f"Q node '{n.name}' takes 2 inputs (data, exponent), got {len(n.inputs)}")
    data, exp = n.inputs
    if not isinstance(data, SSAValue):
        raise NodeProblem(
            f"Q node '{n.name}' quantizes '{data.name}', a {kind_of_const(data)}; expected a float tensor",
            input=0,
        )
    if isinstance(exp, SSAValue) or not isinstance(exp, ConstTensor) or is_float_dtype(exp.dtype):
        raise NodeProblem(
            f"Q node '{n.name}' needs an integer exponent constant as input 1", input=1
        )
    bits = n.int("bit_len")
    try:
        rounding = RoundingMode(n.name_attr("rounding", RoundingMode.TRUNC.value))
    except ValueError:
        known = ", ".join(m.value for m in RoundingMode)
        raise NodeProblem(
            f"rounding of Q node '{n.name}' must be one of {known}", attr="rounding"
        ) from None
    signed = n.flag("signed", 1)  # nanoir's extension: signed=0 is unsigned codes 0..2**b-1
    if not signed and bits == 1:
        raise NodeProblem(
            f"Q node '{n.name}' has signed=0 with bit_len=1: 1-bit codes are ±1 and have no "
            "unsigned form",
            attr="signed",
        )
    return FakeQuantOp(data, bits, dense_from_const(exp), rounding, signed)


def _fake_quant_attrs(op: FakeQuantOp) -> Attrs:
    """bit_len, rounding when not trunc, signed=0 when unsigned: a signed Q prints as the
    reference's (which reads signed codes only), an unsigned one says so."""
    attrs: list[tuple[str, AttrValue]] = [("bit_len", op.bits.value.data)]
    if op.rounding_mode != RoundingMode.TRUNC:
        attrs.append(("rounding", op.rounding_mode.value))
    if not op.is_signed:
        attrs.append(("signed", 0))
    return tuple(attrs)


def _conv(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    n.one_output()
    if n.name_attr("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("auto_pad other than NOTSET")
    values = n.values(2, 3)
    kernel = n.ints("kernel_shape")
    weight = _shape(values[1])
    if kernel is not None and not shapes_compatible(kernel, weight[2:]):
        raise NodeProblem(
            f"kernel_shape {list(kernel)} of Conv node '{n.name}' contradicts its weight of shape {shape_str(weight)}",
            attr="kernel_shape",
        )
    return nf.ConvOp(
        values[0],
        values[1],
        values[2] if len(values) == 3 else None,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        dilations=n.ints("dilations"),
        groups=n.int("group", 1),
    )


def _static(op: Operation, shape: Sequence[int], what: str) -> tuple[int, ...]:
    """`shape` when it has no dynamic dim, else an ExportError about `what` of `op`."""
    if DYNAMIC_INDEX in shape:
        raise ExportError(f"nanoengine export: {op.name} has a dynamic {what} {shape_str(shape)}")
    return tuple(shape)


def _window(values: tuple[int, ...] | None, n: int, default: int) -> tuple[int, ...]:
    return values if values is not None else (default,) * n


def _conv_attrs(op: nf.ConvOp) -> Attrs:
    kernel = _static(op, nf.tensor_shape(op.weight)[2:], "kernel")
    n = len(kernel)
    return (
        ("dilations", _window(array_values(op.dilations), n, 1)),
        ("group", op.groups.value.data),
        ("kernel_shape", kernel),
        ("pads", _window(array_values(op.pads), 2 * n, 0)),
        ("strides", _window(array_values(op.strides), n, 1)),
    )


def _conv_transpose(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "pads", "strides")
    n.one_output()
    if n.name_attr("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("auto_pad other than NOTSET")
    values = n.values(2, 3)
    kernel = n.ints("kernel_shape")
    weight = _shape(values[1])
    if kernel is not None and not shapes_compatible(kernel, weight[2:]):
        raise NodeProblem(
            f"kernel_shape {list(kernel)} of ConvTranspose node '{n.name}' contradicts its weight of shape {shape_str(weight)}",
            attr="kernel_shape",
        )
    return nf.ConvTransposeOp(
        values[0],
        values[1],
        values[2] if len(values) == 3 else None,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        dilations=n.ints("dilations"),
        output_padding=n.ints("output_padding"),
        groups=n.int("group", 1),
    )


def _conv_transpose_attrs(op: nf.ConvTransposeOp) -> Attrs:
    kernel = _static(op, nf.tensor_shape(op.weight)[2:], "kernel")
    n = len(kernel)
    return (
        ("dilations", _window(array_values(op.dilations), n, 1)),
        ("group", op.groups.value.data),
        ("kernel_shape", kernel),
        ("output_padding", _window(array_values(op.output_padding), n, 0)),
        ("pads", _window(array_values(op.pads), 2 * n, 0)),
        ("strides", _window(array_values(op.strides), n, 1)),
    )


def _block(cls: type[nf.DepthToSpaceOp] | type[nf.SpaceToDepthOp]) -> Converter:
    def convert(n: NodeSpec) -> Operation:
        n.allow("blocksize", "mode")
        n.one_output()
        mode = n.name_attr("mode", nf.BlockMode.DCR)
        if mode not in nf.BlockMode.ALL:
            raise NodeProblem(
                f"mode of {n.op_type} node '{n.name}' must be DCR or CRD", attr="mode"
            )
        (x,) = n.values(1, 1)
        return cls(x, n.int("blocksize"), mode)

    return convert


def _block_attrs(op: nf.DepthToSpaceOp | nf.SpaceToDepthOp) -> Attrs:
    attrs: list[tuple[str, AttrValue]] = [("blocksize", op.block.value.data)]
    if isinstance(op, nf.DepthToSpaceOp) or op.mode.data != nf.BlockMode.DCR:
        attrs.append(("mode", op.mode.data))
    return tuple(attrs)


_RESIZE_NEAREST = (
    ("coordinate_transformation_mode", "asymmetric"),
    ("mode", "nearest"),
    ("nearest_mode", "floor"),
)


_RESIZE_LINEAR = (("coordinate_transformation_mode", "half_pixel"), ("mode", "linear"))
"""ONNX's Resize for torch's bilinear upsampling with ``align_corners=False``."""


def _resize_spatial_sizes(n: NodeSpec, x: SSAValue) -> list[int]:
    """A Resize's output sizes of the spatial axes (2..), in order: nanoir writes them as the
    `axes` and `sizes` attributes (nearest and linear alike)."""
    rank = _rank(x)
    axes = n.ints("axes") or tuple(range(2, rank))
    sizes = n.ints("sizes")
    if sizes is None or len(sizes) != len(axes) or sorted(axes) != list(range(2, rank)):
        raise Unsupported("Resize needs sizes for exactly the spatial axes")
    return [sizes[list(axes).index(a)] for a in range(2, rank)]


def _resize(n: NodeSpec) -> Operation:
    if n.name_attr("mode", "nearest") == "linear":
        return _resize_linear(n)
    if n.name_attr("mode", "nearest") == "cubic":
        return resize_cubic(n)
    n.allow("axes", "sizes", *(k for k, _ in _RESIZE_NEAREST))
    n.one_output()
    if len(n.inputs) != 1:
        raise Unsupported(
            "Resize with roi/scales/sizes inputs (nanoir writes axes and sizes as attributes)"
        )
    for key, value in _RESIZE_NEAREST:
        if n.name_attr(key, value) != value:
            raise Unsupported(f"Resize other than nearest/asymmetric/floor ({key})")
    x = n.values(1, 1)[0]
    return nf.UpsampleNearestOp(x, _resize_spatial_sizes(n, x))


def _resize_attrs(op: nf.UpsampleNearestOp) -> Attrs:
    shape = nf.tensor_shape(op.result)
    return (
        ("axes", tuple(range(2, len(shape)))),
        _RESIZE_NEAREST[0],
        _RESIZE_NEAREST[1],
        _RESIZE_NEAREST[2],
        ("sizes", tuple(shape[2:])),
    )


def _resize_linear(n: NodeSpec) -> Operation:
    """Resize linear/half_pixel doubling (or keeping) each spatial axis:
    nf.upsample_bilinear (x2 only: other scales are not dyadic)."""
    n.allow("axes", "sizes", *(k for k, _ in _RESIZE_LINEAR))
    n.one_output()
    if len(n.inputs) != 1:
        raise Unsupported(
            "Resize with roi/scales/sizes inputs (nanoir writes axes and sizes as attributes)"
        )
    if n.name_attr("coordinate_transformation_mode", "half_pixel") != "half_pixel":
        raise Unsupported("Resize linear other than half_pixel (align_corners=False)")
    x = n.values(1, 1)[0]
    return nf.UpsampleBilinearOp(x, _resize_spatial_sizes(n, x))


def _linear_attrs(op: nf.UpsampleBilinearOp) -> Attrs:
    shape = nf.tensor_shape(op.result)
    return (
        ("axes", tuple(range(2, len(shape)))),
        *_RESIZE_LINEAR,
        ("sizes", tuple(shape[2:])),
    )


def _upsample_zero(n: NodeSpec) -> Operation:
    n.allow("offsets", "sizes")
    n.one_output()
    (x,) = n.values(1, 1)
    offsets, sizes = n.ints("offsets"), n.ints("sizes")
    if offsets is None or sizes is None:
        raise Unsupported("UpsampleZero needs offsets and sizes")
    return nf.UpsampleZeroOp(x, sizes, offsets)


def _upsample_zero_attrs(op: nf.UpsampleZeroOp) -> Attrs:
    return (
        ("offsets", tuple(nf.array_values(op.offsets) or ())),
        ("sizes", tuple(nf.tensor_shape(op.result)[2:])),
    )


def _max_pool_indices(n: NodeSpec) -> Operation:
    n.allow("kernel_shape", "strides")
    n.one_output()
    (x,) = n.values(1, 1)
    kernel, strides = n.ints("kernel_shape"), n.ints("strides")
    if kernel is None:
        raise Unsupported("MaxPoolIndices needs kernel_shape")
    return nf.MaxPoolIndicesOp(x, kernel, strides if strides is not None else kernel)


def _max_pool_indices_attrs(op: nf.MaxPoolIndicesOp) -> Attrs:
    return (
        ("kernel_shape", tuple(nf.array_values(op.kernel) or ())),
        ("strides", tuple(nf.array_values(op.strides) or ())),
    )


def _max_unpool(n: NodeSpec) -> Operation:
    n.allow("sizes")
    n.one_output()
    x, indices = n.values(2, 2)
    sizes = n.ints("sizes")
    if sizes is None:
        raise Unsupported("MaxUnpoolPlane needs sizes (the result's [H, W])")
    return nf.MaxUnpoolOp(x, indices, sizes)


def _max_unpool_attrs(op: nf.MaxUnpoolOp) -> Attrs:
    return (("sizes", _static(op, nf.tensor_shape(op.result)[2:], "result plane")),)


_RECURRENT_OP_TYPE = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
_RECURRENT_GRIDS = ("gates", "cell", "hidden")


def _recurrent(n: NodeSpec) -> Operation:
    """LSTM / GRU / RNN: in_s = input, the `initial_states` h0[, c0], then the weights in
    torch's flat order (per layer and direction: w_ih, w_hh[, b_ih, b_hh])."""
    n.allow(
        "activations", "direction", "has_biases", "hidden_size", "initial_states", "layout",
        "num_layers", "rounding", *_RECURRENT_GRIDS,
    )  # fmt: skip
    if n.op_type == "RNN":
        act = n.name_attr("activations", "Tanh")
        if act not in ("Tanh", "Relu"):
            raise Unsupported(f"RNN with activations={act} (nanoir maps Tanh, Relu)")
        mode = "rnn_tanh" if act == "Tanh" else "rnn_relu"
    else:
        mode = n.op_type.lower()
    direction = n.name_attr("direction", "forward")
    if direction not in ("forward", "bidirectional"):
        raise Unsupported(f"{n.op_type} with direction={direction}")
    layout = RecurrentLayout(
        mode,
        n.int("hidden_size"),
        n.int("num_layers", 1),
        direction == "bidirectional",
        n.flag("layout", 0),
        n.flag("has_biases", 1),
    )
    states = n.int("initial_states", 0)
    if not 0 <= states <= (2 if mode == "lstm" else 1):
        raise NodeProblem(
            f"initial_states={states} of {n.op_type} node '{n.name}' is out of range",
            attr="initial_states",
        )
    values = n.values(1 + states, -1)
    x, initial, weights = values[0], values[1 : 1 + states], values[1 + states :]
    if len(_shape(x)) != 3:
        raise NodeProblem(f"{n.op_type} node '{n.name}' reads a rank-{_rank(x)} input, not 3")
    results = [s for s in layout.result_shapes(_shape(x)) if s is not None]
    if not 1 <= n.num_outputs <= len(results):  # unread final states are not written
        raise NodeProblem(
            f"{n.op_type} node '{n.name}' has {n.num_outputs} outputs; {mode} gives 1 to "
            f"{len(results)} (output, h_n[, c_n])"
        )
    elt = x.type.get_element_type()  # type: ignore[attr-defined]
    op = nf.RecurrentOp(
        x,
        weights,
        layout,
        [TensorType(elt, s) for s in results],
        *initial,
    )
    grids = [n.ints(k) for k in _RECURRENT_GRIDS]
    if any(g is not None for g in grids):
        if any(g is None or len(g) != 2 for g in grids):
            raise NodeProblem(
                f"{n.op_type} node '{n.name}' needs gates, cell and hidden = [exp, bits] together"
            )
        for key, grid in zip(_RECURRENT_GRIDS, grids):
            op.properties[key] = DenseArrayBase.from_list(i64, grid)  # type: ignore[arg-type]
        op.properties["rounding"] = StringAttr(n.name_attr("rounding", "trunc"))
    return op


def _recurrent_attrs(op: nf.RecurrentOp) -> Attrs:
    layout = op.layout
    attrs: list[tuple[str, AttrValue]] = []
    if layout.mode.startswith("rnn_"):
        attrs.append(("activations", "Relu" if layout.mode == "rnn_relu" else "Tanh"))
    attrs.append(("direction", "bidirectional" if layout.bidirectional else "forward"))
    grids = {k: array_values(op.properties.get(k)) for k in _RECURRENT_GRIDS}  # type: ignore[arg-type]
    if grids["cell"] is not None:
        attrs.append(("cell", tuple(grids["cell"])))
    if grids["gates"] is not None:
        attrs.append(("gates", tuple(grids["gates"])))
    attrs.append(("has_biases", int(layout.has_biases)))
    if grids["hidden"] is not None:
        attrs.append(("hidden", tuple(grids["hidden"])))
    attrs += [
        ("hidden_size", layout.hidden),
        ("initial_states", int(op.h0 is not None) + int(op.c0 is not None)),
        ("layout", int(layout.batch_first)),
        ("num_layers", layout.layers),
    ]
    if op.rounding is not None:
        attrs.append(("rounding", op.rounding.data))
    return tuple(attrs)


def _pad(n: NodeSpec) -> Operation:
    n.allow("mode", "pads", "value")
    n.one_output()
    if len(n.inputs) != 1:
        raise Unsupported(
            "Pad with pads/constant_value inputs (ONNX opset 11+; nanoir writes mode, pads and "
            "value as attributes)"
        )
    (x,) = n.values(1, 1)
    mode = n.name_attr("mode", nf.PadMode.CONSTANT)
    if mode not in nf.PadMode.ALL:
        raise Unsupported(f"Pad mode {mode} (nanoir maps {', '.join(nf.PadMode.ALL)})")
    pads = n.ints("pads")
    if pads is None:
        raise NodeProblem(f"Pad node '{n.name}' needs attribute 'pads'")
    if len(pads) != 2 * _rank(x):
        raise NodeProblem(
            f"pads of Pad node '{n.name}' has {len(pads)} entries; its input has {_rank(x)} dims, "
            f"so it takes {2 * _rank(x)} (all begins, then all ends)",
            attr="pads",
        )
    return nf.PadOp(x, pads, mode, n.float("value", 0.0))


def _pad_attrs(op: nf.PadOp) -> Attrs:
    return (
        ("mode", op.mode.data),
        ("pads", tuple(array_values(op.pads) or ())),
        ("value", Float.from_value(op.value.value.data)),
    )


def _split(n: NodeSpec) -> Operation:
    """ONNX Split with `split` as an attribute (opset < 13); without it, equal parts."""
    n.allow("axis", "split")
    if len(n.inputs) != 1:
        raise Unsupported(
            "Split with a split input (ONNX opset 13+; nanoir writes split as an attribute)"
        )
    (x,) = n.values(1, 1)
    shape = _shape(x)
    axis = n.int("axis", 0)
    if not -len(shape) <= axis < len(shape):
        raise NodeProblem(
            f"axis {axis} of Split node '{n.name}' is out of range for {len(shape)} dims",
            attr="axis",
        )
    sizes = n.ints("split")
    if sizes is None:
        dim = shape[axis % len(shape)]
        if dim == DYNAMIC_INDEX:
            raise Unsupported("Split of a dynamic dim without split sizes")
        if dim % n.num_outputs:
            raise NodeProblem(
                f"Split node '{n.name}' has no split and {dim} does not divide into "
                f"{n.num_outputs} equal parts"
            )
        sizes = (dim // n.num_outputs,) * n.num_outputs
    if len(sizes) != n.num_outputs:
        raise NodeProblem(
            f"split of Split node '{n.name}' lists {len(sizes)} sizes for {n.num_outputs} outputs",
            attr="split",
        )
    return nf.SplitOp(x, axis, sizes)


def _split_attrs(op: nf.SplitOp) -> Attrs:
    return (("axis", op.axis.value.data), ("split", tuple(array_values(op.sizes) or ())))


def _int_list(n: NodeSpec, key: str, what: str) -> tuple[tuple[int, ...], SSAValue]:
    """`key` as an attribute (`.ne`) or as an integer constant input 1 (ONNX's spelling);
    the data input."""
    if len(n.inputs) == 2 and isinstance(n.inputs[1], ConstTensor) and not n.has(key):
        const = n.inputs[1]
        if is_float_dtype(const.dtype):
            raise NodeProblem(
                f"the {what} of {n.op_type} node '{n.name}' must be integers", input=1
            )
        if len(const.shape) != 1:
            raise Unsupported(f"{n.op_type} with {len(const.shape)}-D {what} (nanoir maps 1-D)")
        values = tuple(int(v) for v in const.to_numpy())
        if not isinstance(n.inputs[0], SSAValue):
            raise Unsupported(f"input 0 '{n.inputs[0].name}' is not a float tensor")
        return values, n.inputs[0]
    (x,) = n.values(1, 1)
    got = n.ints(key)
    if got is None:
        raise NodeProblem(f"{n.op_type} node '{n.name}' needs its {what} ('{key}')")
    return got, x


def _gather(n: NodeSpec) -> Operation:
    """Gather along `axis` with 1-D constant `indices` (negative ones count from the end)."""
    n.allow("axis", "indices")
    n.one_output()
    indices, x = _int_list(n, "indices", "indices")
    shape = _shape(x)
    axis = n.int("axis", 0)
    if not -len(shape) <= axis < len(shape):
        raise NodeProblem(
            f"axis {axis} of Gather node '{n.name}' is out of range for {len(shape)} dims",
            attr="axis",
        )
    size = shape[axis % len(shape)]
    if size == DYNAMIC_INDEX:
        raise Unsupported("Gather along a dynamic dim")
    if any(not -size <= i < size for i in indices):
        raise NodeProblem(
            f"indices {list(indices)} of Gather node '{n.name}' are out of range for {size}"
        )
    return nf.GatherOp(x, axis % len(shape), [i % size for i in indices])


def _gather_attrs(op: nf.GatherOp) -> Attrs:
    return (("axis", op.axis.value.data), ("indices", tuple(array_values(op.indices) or ())))


def _slice(n: NodeSpec) -> Operation:
    """Slice (ONNX: starts, ends, axes, steps as constant inputs 1-4; opset-1 attributes
    starts/ends/axes) along one static axis: nf.gather of those rows (data movement; a
    strided slice to the end streams along its axis). Several axes are refused."""
    n.allow("starts", "ends", "axes", "steps")
    n.one_output()
    keys = ("starts", "ends", "axes", "steps")
    given: dict[str, tuple[int, ...]] = {}
    for key, const in zip(keys, n.inputs[1:]):
        if not isinstance(const, ConstTensor) or is_float_dtype(const.dtype):
            raise Unsupported(f"Slice with a {key} input that is not an integer constant")
        given[key] = tuple(int(v) for v in const.to_numpy().reshape(-1))
    for key in keys:
        if key not in given and n.ints(key) is not None:
            given[key] = tuple(n.ints(key) or ())
    x = n.inputs[0]
    if not isinstance(x, SSAValue):
        raise Unsupported(f"input 0 '{x.name}' is not a float tensor")
    shape = _shape(x)
    if "starts" not in given or "ends" not in given:
        raise NodeProblem(f"Slice node '{n.name}' needs starts and ends")
    axes = given.get("axes", tuple(range(len(given["starts"]))))
    steps = given.get("steps", (1,) * len(axes))
    if not len(axes) == len(steps) == len(given["starts"]) == len(given["ends"]) == 1:
        raise Unsupported("Slice along more than one axis (nanoir maps one per node)")
    axis = axes[0] % len(shape)
    if shape[axis] == DYNAMIC_INDEX:
        raise Unsupported("Slice along a dynamic dim")
    end = min(given["ends"][0], 2**62)  # (INT64_MAX: to the end)
    indices = list(range(*slice(given["starts"][0], end, steps[0]).indices(shape[axis])))
    if not indices:
        raise Unsupported("Slice to an empty tensor")
    return nf.GatherOp(x, axis, indices)


def _expand(n: NodeSpec) -> Operation:
    """Expand to `shape` by ONNX's broadcast (a 1 keeps the input's dim, also a dynamic one).
    nanoir's extension: a runtime tensor as input 1 is the shape source (`nf.expand`'s
    `like`), and a -1 in `shape` grows that dim to the source's size at run time."""
    n.allow("shape")
    n.one_output()
    like = n.inputs[1] if len(n.inputs) == 2 and isinstance(n.inputs[1], SSAValue) else None
    if like is not None:
        x = n.values(2, 2)[0]
        wanted = n.ints("shape")
        if wanted is None:
            raise NodeProblem(f"Expand node '{n.name}' needs its shape ('shape')")
    else:
        wanted, x = _int_list(n, "shape", "shape")
    src = _shape(x)
    rank = max(len(src), len(wanted))
    a = (1,) * (rank - len(src)) + tuple(src)
    b = (1,) * (rank - len(wanted)) + tuple(wanted)
    dims = []
    for d, w in zip(a, b):
        if w == 1 or d == w:
            dims.append(d)
        elif d == 1 and w > 1:
            dims.append(w)
        elif d == 1 and w == -1 and like is not None:
            dims.append(DYNAMIC_INDEX)
        else:
            raise NodeProblem(
                f"Expand node '{n.name}' cannot broadcast {shape_str(src)} to {list(wanted)}"
            )
    return nf.ExpandOp(x, dims, like)


def _expand_attrs(op: nf.ExpandOp) -> Attrs:
    return (("shape", tuple(expand_shape_operand(_shape(op.input), _shape(op.result)))),)


def _hard_sigmoid(n: NodeSpec) -> Operation:
    """ONNX HardSigmoid (defaults alpha 0.2, beta 0.5): nf.hardsigmoid with its alpha and beta;
    an alpha within float32 rounding of 1/6 with beta 0.5 is torch's (its export writes
    float32(1/6))."""
    n.allow("alpha", "beta")
    n.one_output()
    alpha, beta = n.float("alpha", 0.2), n.float("beta", 0.5)
    torch_alpha, torch_beta = HARDSIGMOID_TORCH
    if abs(alpha - torch_alpha) <= 1e-7 and beta == torch_beta:
        alpha = torch_alpha
    (x,) = n.values(1, 1)
    return nf.HardSigmoidOp(x, alpha, beta)


def _hard_sigmoid_attrs(op: nf.HardSigmoidOp) -> Attrs:
    return (
        ("alpha", Float.from_value(op.alpha.value.data)),
        ("beta", Float.from_value(op.beta.value.data)),
    )


def _swish(n: NodeSpec) -> Operation:
    n.allow("alpha")
    n.one_output()
    alpha = n.float("alpha", 1.0)
    if alpha != 1.0:
        raise Unsupported(f"Swish with alpha={alpha} (nf.silu is alpha=1)")
    (x,) = n.values(1, 1)
    return nf.SiluOp(x)


def _gelu(n: NodeSpec) -> Operation:
    n.allow("approximate")
    n.one_output()
    form = n.name_attr("approximate", "none")
    if form not in GELU_APPROXIMATIONS:
        raise NodeProblem(
            f"approximate of Gelu node '{n.name}' must be none or tanh", attr="approximate"
        )
    (x,) = n.values(1, 1)
    return nf.GeluOp(x, form)


def _gelu_attrs(op: nf.GeluOp) -> Attrs:
    return (("approximate", op.approximate.data),)


def _gemm(n: NodeSpec) -> Operation:
    n.allow("alpha", "beta", "transA", "transB")
    n.one_output()
    values = n.values(2, 3)
    if n.int("transA", 0) != 0 or n.int("transB", 0) != 1:
        raise Unsupported("only Gemm with transA=0 and transB=1 is nf.linear")
    if n.float("alpha", 1.0) != 1.0 or (len(values) == 3 and n.float("beta", 1.0) != 1.0):
        raise Unsupported("only Gemm with alpha=1 and beta=1 is nf.linear")
    if _rank(values[0]) < 2 or (len(values) == 3 and _rank(values[2]) != 1):
        raise Unsupported("nf.linear needs an input of rank 2 or more and a 1-D bias")
    return nf.LinearOp(values[0], values[1], values[2] if len(values) == 3 else None)


def _clip(n: NodeSpec) -> Operation:
    n.allow("min", "max")
    n.one_output()
    if len(n.inputs) > 1:
        raise Unsupported("Clip with min/max inputs (only attributes map to nf.clamp)")
    x = n.values(1)[0]
    lo = n.float("min") if n.has("min") else None
    hi = n.float("max") if n.has("max") else None
    if lo is not None and hi is not None and lo > hi:
        raise NodeProblem(f"Clip node '{n.name}' has min {lo} greater than max {hi}", attr="min")
    return nf.ClampOp(x, lo, hi)


def _clamp_attrs(op: nf.ClampOp) -> Attrs:
    attrs: list[tuple[str, AttrValue]] = []
    if op.max is not None:
        attrs.append(("max", Float.from_value(op.max.value.data)))
    if op.min is not None:
        attrs.append(("min", Float.from_value(op.min.value.data)))
    return tuple(attrs)


def _pool_window(n: NodeSpec) -> tuple[tuple[int, ...], bool]:
    if n.name_attr("auto_pad", "NOTSET") != "NOTSET":
        raise Unsupported("auto_pad other than NOTSET")
    kernel = n.ints("kernel_shape")
    if kernel is None:
        raise NodeProblem(f"{n.op_type} node '{n.name}' needs attribute 'kernel_shape'")
    return kernel, n.flag("ceil_mode", 0)


def _max_pool(n: NodeSpec) -> Operation:
    n.allow(
        "auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"
    )
    n.one_output()
    if n.int("storage_order", 0) != 0:
        raise Unsupported("storage_order=1 (it only matters for the Indices output)")
    kernel, ceil_mode = _pool_window(n)
    x = n.values(1)[0]
    return nf.MaxPoolOp(
        x,
        kernel,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        dilations=n.ints("dilations"),
        ceil_mode=ceil_mode,
    )


def _avg_pool(n: NodeSpec) -> Operation:
    n.allow("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")
    n.one_output()
    kernel, ceil_mode = _pool_window(n)
    x = n.values(1)[0]
    return nf.AvgPoolOp(
        x,
        kernel,
        strides=n.ints("strides"),
        pads=n.ints("pads"),
        ceil_mode=ceil_mode,
        count_include_pad=n.flag("count_include_pad", 0),  # ONNX's default, not torch's
    )


def _pool_attrs(op: nf.MaxPoolOp | nf.AvgPoolOp) -> Attrs:
    kernel = array_values(op.kernel) or ()
    n = len(kernel)
    attrs: list[tuple[str, AttrValue]] = [("ceil_mode", int(bool(op.ceil_mode.value.data)))]
    if isinstance(op, nf.AvgPoolOp):
        if op.divisor_override is not None:
            raise ExportError(
                "nanoengine export: nf.avg_pool with divisor_override has no AveragePool form"
            )
        attrs.append(("count_include_pad", int(bool(op.count_include_pad.value.data))))
    else:
        attrs.append(("dilations", _window(array_values(op.dilations), n, 1)))
    attrs += [
        ("kernel_shape", kernel),
        ("pads", _window(array_values(op.pads), 2 * n, 0)),
        ("strides", _window(array_values(op.strides), n, 1)),
    ]
    return tuple(attrs)


def _global_avg_pool(n: NodeSpec) -> Operation:
    n.allow()
    n.one_output()
    x = n.values(1)[0]
    if _rank(x) < 3:
        raise NodeProblem(
            f"GlobalAveragePool node '{n.name}' needs an input of rank 3 or more", input=0
        )
    return nf.AdaptiveAvgPoolOp(x, [1] * (_rank(x) - 2))


def _global_pool_attrs(op: nf.AdaptiveAvgPoolOp) -> Attrs:
    if any(s != 1 for s in array_values(op.output_size) or ()):
        raise ExportError(
            f"nanoengine export: nf.adaptive_avg_pool to {list(array_values(op.output_size) or ())} "
            "has no NanoEngine op (only output size 1, GlobalAveragePool)"
        )
    return ()


def _dims_to_type(x: SSAValue, dims: Sequence[int]) -> Operation:
    if sum(d == DYNAMIC_INDEX for d in dims) > 1:
        raise Unsupported(f"the result {shape_str(dims)} would have more than one dynamic dim")
    return nf.ReshapeOp(x, dims)


def _reshape(n: NodeSpec) -> Operation:
    n.allow("allowzero")
    n.one_output()
    if len(n.inputs) != 2:
        raise NodeProblem(
            f"Reshape node '{n.name}' takes 2 inputs (data, shape), got {len(n.inputs)}"
        )
    x, shape_const = n.inputs
    if not isinstance(x, SSAValue):
        raise Unsupported(f"input 0 '{x.name}' is a {kind_of_const(x)}, not a float tensor")
    if not isinstance(shape_const, ConstTensor) or not shape_const.dtype.startswith("int"):
        raise Unsupported("the shape (input 1) is not a signed integer constant")
    if len(shape_const.shape) != 1:
        raise NodeProblem(f"the shape of Reshape node '{n.name}' must be 1-D", input=1)
    allowzero = n.flag("allowzero", 0)
    wanted = [int(v) for v in shape_const.to_numpy()]
    src = _shape(x)
    if wanted.count(-1) > 1:
        raise NodeProblem(
            f"the shape {wanted} of Reshape node '{n.name}' has more than one -1", input=1
        )
    dims: list[int] = []
    copied: set[int] = set()
    for i, d in enumerate(wanted):
        if d == 0 and not allowzero:
            if i >= len(src):
                raise NodeProblem(
                    f"shape {wanted} of Reshape node '{n.name}' copies dim {i}, which the input lacks",
                    input=1,
                )
            dims.append(src[i])
            copied.add(i)
        elif d < -1:
            raise NodeProblem(f"the shape {wanted} of Reshape node '{n.name}' has {d}", input=1)
        else:
            dims.append(d)
    if -1 in dims:
        # A copied dim is a factor on both sides, so it cancels even when it is dynamic.
        left = [d for i, d in enumerate(src) if i not in copied]
        right = [d for i, d in enumerate(dims) if i not in copied and d != -1]
        if DYNAMIC_INDEX in left or 0 in right:
            dims[dims.index(-1)] = DYNAMIC_INDEX
        else:
            if prod(left) % prod(right):
                raise NodeProblem(
                    f"Reshape node '{n.name}' cannot view {shape_str(src)} as {wanted}", input=1
                )
            dims[dims.index(-1)] = prod(left) // prod(right)
    return _dims_to_type(x, dims)


def _flatten(n: NodeSpec) -> Operation:
    n.allow("axis")
    n.one_output()
    x = n.values(1)[0]
    src = _shape(x)
    axis = n.int("axis", 1)
    if not -len(src) <= axis <= len(src):
        raise NodeProblem(
            f"axis {axis} of Flatten node '{n.name}' is out of range for {shape_str(src)}",
            attr="axis",
        )
    return _dims_to_type(x, flatten_dims(src, axis + len(src) if axis < 0 else axis))  # ONNX


def flatten_dims(src: Sequence[int], axis: int) -> list[int]:
    """ONNX Flatten's result shape: `[prod(src[:axis]), prod(src[axis:])]`, `?` if unknown."""

    def size(dims: Sequence[int]) -> int:
        return DYNAMIC_INDEX if DYNAMIC_INDEX in dims else prod(dims)

    return [size(src[:axis]), size(src[axis:])]


def _flatten_attrs(op: nf.ReshapeOp) -> Attrs:
    src, dst = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
    for axis in range(len(src) + 1):
        if tuple(flatten_dims(src, axis)) == tuple(dst):
            return (("axis", axis),)
    raise ExportError(
        f"nanoengine export: nf.reshape {shape_str(src)} -> {shape_str(dst)} is no Flatten"
    )


def _transpose(n: NodeSpec) -> Operation:
    n.allow("perm")
    n.one_output()
    x = n.values(1)[0]
    perm = n.ints("perm")
    perm = tuple(reversed(range(_rank(x)))) if perm is None else perm
    if sorted(perm) != list(range(_rank(x))):
        raise NodeProblem(
            f"perm {list(perm)} of Transpose node '{n.name}' does not permute {_rank(x)} dims",
            attr="perm",
        )
    return nf.TransposeOp(x, perm)


def _batch_norm_check(n: NodeSpec, values: list[SSAValue], args: list[object]) -> None:
    if args[0] < 0:  # type: ignore[operator]  # epsilon, a float
        raise NodeProblem(
            f"epsilon of BatchNormalization node '{n.name}' is negative", attr="epsilon"
        )


def _norm_eps(n: NodeSpec) -> float:
    eps = n.float("epsilon", 1e-5)
    if eps < 0:
        raise NodeProblem(f"epsilon of {n.op_type} node '{n.name}' is negative", attr="epsilon")
    return eps


def _layer_norm(n: NodeSpec) -> Operation:
    """ONNX LayerNormalization (opset 17): normalised from ``axis`` to the last dim; scale and
    bias of the normalised shape (a missing bias has no nf form)."""
    n.allow("axis", "epsilon", "stash_type")
    n.one_output()
    x, w, b = n.values(3, 3)
    rank = _rank(x)
    axis = n.int("axis", -1)
    if not -rank <= axis < rank:
        raise NodeProblem(f"axis {axis} of node '{n.name}' is out of range", attr="axis")
    return nf.LayerNormOp(x, w, b, rank - axis % rank, _norm_eps(n))


def _layer_norm_attrs(op: nf.LayerNormOp) -> Attrs:
    return (
        ("axis", -op.normalized_dims.value.data),
        ("epsilon", Float.from_value(op.epsilon.value.data)),
    )


def _group_norm(n: NodeSpec) -> Operation:
    """ONNX GroupNormalization (opset 21: per-channel scale and bias)."""
    n.allow("epsilon", "num_groups", "stash_type")
    n.one_output()
    x, w, b = n.values(3, 3)
    return nf.GroupNormOp(x, w, b, n.int("num_groups"), _norm_eps(n))


def _group_norm_attrs(op: nf.GroupNormOp) -> Attrs:
    return (
        ("epsilon", Float.from_value(op.epsilon.value.data)),
        ("num_groups", op.groups.value.data),
    )


def _prelu_check(n: NodeSpec, values: list[SSAValue], args: list[object]) -> None:
    if _rank(values[1]) != 1:
        raise Unsupported("nf.prelu takes a 1-D slope only")


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


NQ_OPS: tuple[NqOp, ...] = (
    NqOp("Q", FakeQuantOp, const_input="exp", converter=_q, writer=_fake_quant_attrs),  # type: ignore[arg-type]
    NqOp("Conv", nf.ConvOp, padded=True, converter=_conv, writer=_conv_attrs),  # type: ignore[arg-type]
    NqOp(
        "Gemm",
        nf.LinearOp,
        converter=_gemm,
        constants=(("alpha", Float("1.0")), ("beta", Float("1.0")), ("transB", 1)),
    ),
    NqOp("Add", nf.AddOp, inputs=(2, 2), join=True),
    NqOp("Sub", nf.SubOp, inputs=(2, 2), join=True),
    NqOp("Mul", nf.MulOp, inputs=(2, 2), join=True),
    NqOp("Div", nf.DivOp, inputs=(2, 2), join=True),
    NqOp("Max", nf.MaximumOp, inputs=(2, 2), join=True),
    NqOp("Min", nf.MinimumOp, inputs=(2, 2), join=True),
    NqOp("Relu", nf.ReluOp),
    NqOp("Sigmoid", nf.SigmoidOp),
    NqOp("Tanh", nf.TanhOp),
    NqOp("LeakyRelu", nf.LeakyReluOp, attrs=(AttrMap("alpha", "alpha", "float", 0.01),)),
    NqOp("Clip", nf.ClampOp, converter=_clip, writer=_clamp_attrs),  # type: ignore[arg-type]
    NqOp("MaxPool", nf.MaxPoolOp, padded=True, converter=_max_pool, writer=_pool_attrs),  # type: ignore[arg-type]
    NqOp("AveragePool", nf.AvgPoolOp, padded=True, converter=_avg_pool, writer=_pool_attrs),  # type: ignore[arg-type]
    NqOp(
        "GlobalAveragePool",
        nf.AdaptiveAvgPoolOp,
        converter=_global_avg_pool,
        writer=_global_pool_attrs,
    ),  # type: ignore[arg-type]
    NqOp(
        "Concat",
        nf.ConcatOp,
        inputs=(1, -1),
        attrs=(AttrMap("axis", "axis", "int"),),
        variadic=True,
        join=True,
    ),
    NqOp("Reshape", nf.ReshapeOp, const_input="shape", converter=_reshape),
    NqOp("Flatten", nf.ReshapeOp, converter=_flatten, writer=_flatten_attrs),  # type: ignore[arg-type]
    NqOp(
        "BatchNormalization",
        nf.BatchNormOp,
        inputs=(5, 5),
        attrs=(AttrMap("epsilon", "epsilon", "float", 1e-5),),
        fixed=(
            Fixed("training_mode", 0, "training_mode=1 or spatial=0"),
            Fixed("spatial", 1, "training_mode=1 or spatial=0"),
        ),
        ignored=("momentum",),
        check=_batch_norm_check,
    ),
    NqOp(
        "Transpose", nf.TransposeOp, attrs=(AttrMap("perm", "perm", "ints"),), converter=_transpose
    ),
    NqOp("MatMul", nf.MatmulOp, inputs=(2, 2)),
    # A 1-D slope is per channel (dim 1), torch's rule, whatever the rank; ONNX aligns a slope
    # from the right, so the ONNX reader translates its slope before reaching this row.
    NqOp("PRelu", nf.PReluOp, inputs=(2, 2), check=_prelu_check),
    NqOp(
        "ConvTranspose",
        nf.ConvTransposeOp,
        padded=True,
        converter=_conv_transpose,
        writer=_conv_transpose_attrs,
    ),  # type: ignore[arg-type]
    NqOp(
        "DepthToSpace", nf.DepthToSpaceOp, converter=_block(nf.DepthToSpaceOp), writer=_block_attrs
    ),  # type: ignore[arg-type]
    NqOp(
        "SpaceToDepth", nf.SpaceToDepthOp, converter=_block(nf.SpaceToDepthOp), writer=_block_attrs
    ),  # type: ignore[arg-type]
    NqOp("Resize", nf.UpsampleNearestOp, converter=_resize, writer=_resize_attrs),  # type: ignore[arg-type]
    # (ONNX's Resize with mode=linear reads through the Resize row, whose converter
    # dispatches to _resize_linear; ONNX export writes ResizeLinear as Resize)
    NqOp("ResizeLinear", nf.UpsampleBilinearOp, converter=_resize_linear, writer=_linear_attrs),  # type: ignore[arg-type]
    NqOp("UpsampleZero", nf.UpsampleZeroOp, converter=_upsample_zero, writer=_upsample_zero_attrs),  # type: ignore[arg-type]
    NqOp("LSTM", nf.RecurrentOp, converter=_recurrent, writer=_recurrent_attrs),  # type: ignore[arg-type]
    NqOp("GRU", nf.RecurrentOp, converter=_recurrent, writer=_recurrent_attrs),  # type: ignore[arg-type]
    NqOp("RNN", nf.RecurrentOp, converter=_recurrent, writer=_recurrent_attrs),  # type: ignore[arg-type]
    NqOp(
        "MaxPoolIndices",
        nf.MaxPoolIndicesOp,
        converter=_max_pool_indices,
        writer=_max_pool_indices_attrs,
    ),  # type: ignore[arg-type]
    NqOp(
        "MaxUnpoolPlane",
        nf.MaxUnpoolOp,
        inputs=(2, 2),
        converter=_max_unpool,
        writer=_max_unpool_attrs,
    ),  # type: ignore[arg-type]
    NqOp("Pad", nf.PadOp, converter=_pad, writer=_pad_attrs),  # type: ignore[arg-type]
    NqOp("HardSwish", nf.HardSwishOp),
    NqOp("Swish", nf.SiluOp, converter=_swish),
    NqOp("Gelu", nf.GeluOp, converter=_gelu, writer=_gelu_attrs),  # type: ignore[arg-type]
    NqOp("HardSigmoid", nf.HardSigmoidOp, converter=_hard_sigmoid, writer=_hard_sigmoid_attrs),  # type: ignore[arg-type]
    NqOp("Split", nf.SplitOp, converter=_split, writer=_split_attrs),  # type: ignore[arg-type]
    NqOp("Gather", nf.GatherOp, converter=_gather, writer=_gather_attrs),  # type: ignore[arg-type]
    NqOp("Embedding", nf.EmbeddingOp, inputs=(2, 2)),  # (indices, table): rows by index
    NqOp("Slice", nf.GatherOp, converter=_slice, writer=_gather_attrs),  # type: ignore[arg-type]
    NqOp("Expand", nf.ExpandOp, converter=_expand, writer=_expand_attrs),  # type: ignore[arg-type]
    NqOp("Softmax", nf.SoftmaxOp, attrs=(AttrMap("axis", "axis", "int", -1),)),
    NqOp("LogSoftmax", nf.LogSoftmaxOp, attrs=(AttrMap("axis", "axis", "int", -1),)),
    NqOp("LayerNormalization", nf.LayerNormOp, converter=_layer_norm, writer=_layer_norm_attrs),  # type: ignore[arg-type]
    NqOp("GroupNormalization", nf.GroupNormOp, converter=_group_norm, writer=_group_norm_attrs),  # type: ignore[arg-type]
    # issue 32's op families (nq_families.py): one class, several op types
    *(
        NqOp(t, cls, inputs=i, converter=c, writer=w)  # type: ignore[arg-type]
        for t, cls, c, w, i in FAMILY_ROWS
    ),
)
"""Every op type the nq level maps; the first row of a class is how export writes it."""

BY_OP_TYPE: dict[str, NqOp] = {row.op_type: row for row in NQ_OPS}
BY_CLASS: dict[type[Operation], NqOp] = {}
for _row in NQ_OPS:
    BY_CLASS.setdefault(_row.cls, _row)


def row_of(op: Operation, op_type: str | None = None) -> NqOp:
    """The row `op` is written by: `op_type`'s (or a recorded `ne.op_type`'s) if it maps
    the op's class (Flatten for a reshape), else the class's first; KeyError for none."""
    if isinstance(op, nf.RecurrentOp):  # one class, three op types: by its mode
        return BY_OP_TYPE[_RECURRENT_OP_TYPE.get(op.mode.data, "LSTM")]
    if isinstance(op, FAMILY_CLASSES):  # one class, an op type per function (or none)
        op_type = row_type_for(op)
        if op_type is None:
            raise refusal(op)
        return BY_OP_TYPE[op_type]
    if op_type is None:
        recorded = op.attributes.get(NE_OP_TYPE)
        op_type = recorded.data if isinstance(recorded, StringAttr) else None
    row = BY_OP_TYPE.get(op_type) if op_type is not None else None
    return row if row is not None and row.cls is type(op) else BY_CLASS[type(op)]


def default_attrs(op: Operation, op_type: str | None = None) -> Attrs:
    """The attribute list the exporter prints for `op` as a node of type `op_type`."""
    return row_of(op, op_type).written(op)


def convert_known(spec: NodeSpec) -> Operation:
    """Build and verify the op for a known op type; Unsupported / NodeProblem otherwise.

    Shape inference failures and verifier errors are NodeProblems: the node's inputs
    do not fit together. Used by the importer and by the exporter's consistency check.
    """
    row = BY_OP_TYPE[spec.op_type]
    try:
        op = row.build(spec)
    except ShapeError as e:
        raise NodeProblem(f"{spec.op_type} node '{spec.name}': {e}") from None
    try:
        op.verify()
    except VerifyException as e:
        op.erase(safe_erase=False)
        raise NodeProblem(
            f"{spec.op_type} node '{spec.name}': {e.args[0] if e.args else e}"
        ) from None
    return op
