"""The hw level of NanoEngine text (`.ne`): how an nh program is written, and read back.

`export_hw` writes nh IR in this form and `import_hw` reads it; this module holds what
both sides share: the op table (`HW_OPS`, one row per op type) and the constant data layout.
The value codecs (`exp`, `name`, property kinds) and naming are `schema`'s, shared with
the nq level. A file is at the hw level when its node outputs are integer tensors
(`Tensor<int8_t>`, ...); the nq level declares them `Tensor<Any>`.

Tensors. Every nh value is a declared tensor whose dtype names its element width and whose
`shape:LAYOUT=[...]` is its whole shape (`-1` for a dynamic dim such as the batch) and its
`#nh.fixed` layout:

    i1  i2  i4  i8  i16  i32        (nh element width)
    int1_t int2_t int4_t int8_t int16_t int32_t   (.ne dtype of the tensor declaration)

    let Conv_n1_o0: Tensor<int32_t> = {shape:BCMD=[-1, 16, 6, 3]};

Unsigned codes (`ui2 ui4 ui8 ui16`, from `signed = false` fake-quants) are declared
`uint2_t uint4_t uint8_t uint16_t`: nanoir's extension, as `signed=0` on `Q` (NanoEngine's
tensors hold signed codes; the reference reads neither).

Its exponent(s) are the `exp` attribute of the node that computes it: `exp=7` per tensor,
`exp=[9, 8, 9]` per channel along the first `C` of the layout, each from -128 to 127
(NanoEngine stores exponents as int8; so do a Q's exponent constant's values). Every node states `exp`, also
where the op determines it (a conv's accumulator): a reader never has to derive an exponent,
and the importer checks the stated ones with the nh verifiers. A node with several outputs
(Split: one per result, each a declared tensor `<node>_o<i>`) states `exp` as a list of its
outputs' exps in `out_s` order, each spelled as above, always a list even for one output:

    attr=[axis=1, exp=[6, [5, 4]], split=[3, 2]], ... out_s=[Split_n1_o0, Split_n1_o1]

Constants (`nh.constant`) are a data constant read by an init `Unpack` node whose output is
the typed tensor:

    let conv1_weight: Tensor<uint8_t> = {shape=[216], data=0x1f87...} ;
    let Unpack_n1: init Node = {
        op_type=Unpack,
        attr=[bit_len=4, exp=[3, 2, ...], name=[conv1, weight]],
        in_s=[conv1_weight],
        out_s=[Unpack_n1_o0]
    };
    let Unpack_n1_o0: Tensor<int4_t>  = {shape:CCDD=[16, 3, 3, 3]};

- `bit_len` is the codes' width (that of the output). 1/2/4-bit codes are packed as
  NanoEngine packs them (`quant.pack_bits`: `8 // bit_len` codes per byte, first code in the
  most significant field, two's complement, a 1-bit `-1` is bit 1; the last byte padded with
  zeros): `Tensor<uint8_t>` of `ceil(n * bit_len / 8)` bytes, `shape=[bytes]`. 8/16/32-bit
  codes are `Tensor<int8_t>` / `int16_t` / `int32_t` of the tensor's shape (so an i32 bias
  is `int32_t`, whatever the IR stores it in).
- `name`: the IR name (`nh.constant "conv1.weight"`) when the data constant's name does not
  give it back. A data constant is named after its IR name with characters outside
  `[A-Za-z0-9_]` made `_`; `Constant_n<k>_o0` means an unnamed constant. The attribute holds
  the `.`-separated parts as names and numbers (`[layers, 0, weight]` is `layers.0.weight`),
  or, for names not made of such parts, the UTF-8 bytes as a nested list (`[[97, 45, 98]]`).
- `storage`: the IR storage width of the codes (`dense<...> : tensor<...xi16>`), only when
  it is not the narrowest of i8/i16/i32 that holds them (what lower-to-hw picks).

Inputs. A function argument is a float program input quantized by a runtime `Q` node, as in
NanoEngine: `in_s=[input, exponent constant]` with `bit_len` (= `nq.bits`), `rounding` (=
`nq.rounding`, written when not `trunc`, always set on import), `signed=0` when the argument
is unsigned (`ui<b>`, its output declared `uint<b>_t`; the two must agree), and the exponent
constant's data is `nq.exp` exactly (dtype and shape included). The argument's nh type is
the Q output's declaration plus the node's `exp`. Only Q takes an exponent as a constant
input (NanoEngine's Q signature); everywhere else an `exp` attribute keeps each node
self-contained. Outputs are the tensors computed by non-Q runtime nodes that no node reads,
in declaration order; a result that is also read elsewhere, is returned twice or is an
argument goes through an `Identity` node (the output is its input; it creates no op).

Ops (nh op <-> `.ne` op type; attributes beside `exp`, in alphabetical order):

    nh.constant    Unpack        bit_len, name, storage (see above); init node
    nh.conv        Conv          dilations, group, pads, strides; kernel_shape (derived)
    nh.conv_transpose  ConvTranspose  dilations, group, output_padding, pads, strides;
                                 kernel_shape (derived); weight [C, O/g, *K], layout DC(D...)
    nh.linear      Gemm          alpha=1.0, beta=1.0, transB=1 (fixed: Gemm's meaning of linear)
    nh.matmul      MatMul
    nh.add/sub/mul Add/Sub/Mul
    nh.requant     Requant       rounding, shift; bit_len (derived: the output width)
    nh.lut         Lut           channels (each channel's sub-table), function and params (the
                                 float function the table evaluates, when recorded), starts
                                 (segmented form), table
    nh.relu        Relu
    nh.clamp       Clip          max, min (integer codes)
    nh.max_pool    MaxPool       ceil_mode, dilations, kernel_shape, pads, strides
    nh.avg_pool    AveragePool   ceil_mode, count_include_pad, divisor_override, kernel_shape,
                                 pads, rounding, shift (onto a coarser exponent), strides
    nh.concat      Concat        axis
    nh.reshape     Reshape       + in_s[1], an int64_t shape constant (-1 = dynamic dim)
    nh.prelu       PRelu         shift (the slope's exponent; in_s[1] is the slope's codes)
    nh.transpose   Transpose     perm
    nh.pad         Pad           mode (constant, reflect or edge: a name), pads, value (an
                                 integer code); ONNX opset < 11's attribute form
    nh.split       Split         axis, split (the sizes; opset < 13's attribute form); several
                                 outputs, `exp` per output (see above)
    nh.depth_to_space  DepthToSpace  blocksize, mode (DCR or CRD)
    nh.space_to_depth  SpaceToDepth  blocksize, mode
    nh.gather      Gather        axis, indices (1-D, constant)
    nh.embedding   Embedding     in_s (indices, table): rows of the table's codes by index; the
                                 indices are a program input declared Tensor<int64_t>, read as
                                 it is (no Q node)
    nh.recurrent   Recurrent     mode, hidden_size, num_layers, bidirectional, batch_first,
                                 has_biases, gates/cell/hidden = [exp, bits], rounding,
                                 sigmoid_table, tanh_table; initial_states (derived) = how many
                                 of in_s after the input are h0[, c0], then the weights in
                                 torch's flat order; out_s output[, h_n[, c_n]]: unread final
                                 states are not written (typed from the hidden/cell grids on
                                 import); results declared BMC (batch-first output) or BDC
                                 (time-major output, final states): dim 0 is called B
    nh.expand      Expand        shape (derived: the result's dims, 1 where the input's is kept,
                                 -1 where it grows to the shape source's size: `like`, in_s[1])
    nh.layer_norm  LayerNorm     bit_len, eps_term, guard, max_shift, normalized_dims, nudge,
                                 rounding (the plan of nanoir.runtime.numerics.norm); in_s[1]
                                 and in_s[2] are the weight's and bias's codes
    nh.group_norm  GroupNorm     bit_len, eps_term, groups, guard, max_shift, nudge, rounding
    nh.upsample_nearest  Resize  axes, coordinate_transformation_mode=asymmetric, mode=nearest,
                                 nearest_mode=floor, sizes (all derived / fixed)
    (argument)     Q             bit_len, rounding, signed (0 for ui<b>) + in_s[1], the
                                 exponent constant
    (alias)        Identity      -

Attributes that mirror a property are written exactly when the op has that property (an
absent one means the nh op's default, not ONNX's), so the IR comes back with the same
properties. Derived and fixed attributes are always written and checked on import. Lists are
`[...]`, flags `0`/`1`, rounding modes and other string properties names (`half_even`,
`constant`; the `name` codec of `schema`).

Ops whose operands are all constants (or computed from constants only) are init nodes, the
others runtime nodes. Nodes are declared in the IR's op order, so a program whose constants
sit between its runtime ops has alternating `// init node` and `// runtime_node` sections;
the importer rebuilds that order (see `import_hw`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import tensor_shape
from nanoir.grammar.ne.node import AttrMap
from nanoir.grammar.ne.schema import HW_DTYPES
from nanoir.grammar.ne.syntax_tree import AttrValue, ConstTensor, Float
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.movement import expand_shape_operand
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    IntegerType,
    TensorType,
)
from xdsl.ir import Operation

__all__ = [
    "PACKED_WIDTHS",
    "UNNAMED_CONSTANT",
    "HwOp",
    "HW_OPS",
    "BY_CLASS",
    "BY_OP_TYPE",
    "constant_data",
    "codes_from_data",
    "default_storage",
    "dense_codes",
    "storage_width",
]

PACKED_WIDTHS = (1, 2, 4)
"""Widths whose constant codes are stored packed, several to a byte."""

UNNAMED_CONSTANT = re.compile(r"Constant_n[0-9]+_o0")
"""Data constants named like this hold an unnamed `nh.constant` (the exporter's numbering)."""


# ---------------------------------------------------------------------------------------
# The op table
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HwOp:
    """How one nh op class is written as a node."""

    cls: type[Operation]
    op_type: str
    props: tuple[AttrMap, ...] = ()
    """Attributes that are nh properties: written exactly when the op has the property."""
    derived: tuple[tuple[str, Callable[[Operation], AttrValue]], ...] = ()
    """Attributes computed from the op: always written, recomputed and compared on import."""
    const_input: str | None = None
    """"shape" (Reshape): in_s ends with an int64_t constant holding the result shape (ONNX)."""
    multi_output: bool = False
    """One output per result (Split): `exp` lists the outputs' exps, in out_s order."""


_WINDOW = (AttrMap("pads", "pads", "ints"), AttrMap("strides", "strides", "ints"))

HW_OPS: tuple[HwOp, ...] = (
    HwOp(
        nh.ConvOp,
        "Conv",
        props=(
            AttrMap("dilations", "dilations", "ints"),
            AttrMap("group", "groups", "int"),
            *_WINDOW,
        ),
        derived=(("kernel_shape", lambda op: tensor_shape(op.operands[1])[2:]),),
    ),
    HwOp(
        nh.ConvTransposeOp,
        "ConvTranspose",
        props=(
            AttrMap("dilations", "dilations", "ints"),
            AttrMap("group", "groups", "int"),
            AttrMap("output_padding", "output_padding", "ints"),
            *_WINDOW,
        ),
        derived=(("kernel_shape", lambda op: tensor_shape(op.operands[1])[2:]),),
    ),
    HwOp(
        nh.LinearOp,
        "Gemm",
        derived=(
            ("alpha", lambda op: Float("1.0")),
            ("beta", lambda op: Float("1.0")),
            ("transB", lambda op: 1),
        ),
    ),
    HwOp(nh.MatmulOp, "MatMul"),
    HwOp(nh.AddOp, "Add"),
    HwOp(nh.SubOp, "Sub"),
    HwOp(nh.MulOp, "Mul"),
    HwOp(nh.MaximumOp, "Max"),
    HwOp(nh.MinimumOp, "Min"),
    HwOp(
        nh.RequantOp,
        "Requant",
        props=(AttrMap("rounding", "rounding", "rounding"), AttrMap("shift", "shift", "ints")),
        derived=(("bit_len", lambda op: nh.width_of(op.results[0])),),
    ),
    HwOp(
        nh.LutOp,
        "Lut",
        props=(
            AttrMap("channels", "channels", "ints"),
            AttrMap("function", "function", "name"),
            AttrMap("params", "params", "floats"),
            AttrMap("starts", "starts", "ints"),
            AttrMap("table", "table", "ints"),
        ),
    ),
    HwOp(nh.ReluOp, "Relu"),
    HwOp(nh.ClampOp, "Clip", props=(AttrMap("max", "max", "int"), AttrMap("min", "min", "int"))),
    HwOp(
        nh.MaxPoolOp,
        "MaxPool",
        props=(
            AttrMap("ceil_mode", "ceil_mode", "flag"),
            AttrMap("dilations", "dilations", "ints"),
            AttrMap("kernel_shape", "kernel", "ints"),
            *_WINDOW,
        ),
    ),
    HwOp(
        nh.AvgPoolOp,
        "AveragePool",
        props=(
            AttrMap("ceil_mode", "ceil_mode", "flag"),
            AttrMap("count_include_pad", "count_include_pad", "flag"),
            AttrMap("divisor_override", "divisor_override", "int"),
            AttrMap("kernel_shape", "kernel", "ints"),
            AttrMap("rounding", "rounding", "rounding"),
            AttrMap("shift", "shift", "ints"),
            *_WINDOW,
        ),
    ),
    HwOp(nh.ConcatOp, "Concat", props=(AttrMap("axis", "axis", "int"),)),
    HwOp(nh.ReshapeOp, "Reshape", const_input="shape"),
    HwOp(
        nh.DepthToSpaceOp,
        "DepthToSpace",
        props=(AttrMap("blocksize", "block", "int"), AttrMap("mode", "mode", "name")),
    ),
    HwOp(
        nh.SpaceToDepthOp,
        "SpaceToDepth",
        props=(AttrMap("blocksize", "block", "int"), AttrMap("mode", "mode", "name")),
    ),
    HwOp(nh.PReluOp, "PRelu", props=(AttrMap("shift", "shift", "int"),)),
    HwOp(nh.TransposeOp, "Transpose", props=(AttrMap("perm", "perm", "ints"),)),
    HwOp(
        nh.PadOp,
        "Pad",
        props=(
            AttrMap("mode", "mode", "name"),
            AttrMap("pads", "pads", "ints"),
            AttrMap("value", "value", "int"),
        ),
    ),
    HwOp(
        nh.SplitOp,
        "Split",
        props=(AttrMap("axis", "axis", "int"), AttrMap("split", "sizes", "ints")),
        multi_output=True,
    ),
    HwOp(
        nh.UpsampleNearestOp,
        "Resize",
        derived=(
            ("axes", lambda op: tuple(range(2, len(tensor_shape(op.results[0]))))),
            ("coordinate_transformation_mode", lambda op: "asymmetric"),
            ("mode", lambda op: "nearest"),
            ("nearest_mode", lambda op: "floor"),
            ("sizes", lambda op: tuple(tensor_shape(op.results[0])[2:])),
        ),
    ),
    HwOp(nh.UpsampleZeroOp, "UpsampleZero", props=(AttrMap("offsets", "offsets", "ints"),)),
    HwOp(
        nh.MaxPoolIndicesOp,
        "MaxPoolIndices",
        props=(AttrMap("kernel_shape", "kernel", "ints"), AttrMap("strides", "strides", "ints")),
    ),
    HwOp(nh.MaxUnpoolOp, "MaxUnpoolPlane"),
    HwOp(nh.EmbeddingOp, "Embedding"),
    HwOp(  # in_s: input, initial_states (h0[, c0]), weights in torch's flat order
        nh.RecurrentOp,
        "Recurrent",
        props=(
            AttrMap("mode", "mode", "name"),
            AttrMap("hidden_size", "hidden_size", "int"),
            AttrMap("num_layers", "num_layers", "int"),
            AttrMap("bidirectional", "bidirectional", "flag"),
            AttrMap("batch_first", "batch_first", "flag"),
            AttrMap("has_biases", "has_biases", "flag"),
            AttrMap("gates", "gates", "ints"),
            AttrMap("cell", "cell", "ints"),
            AttrMap("hidden", "hidden", "ints"),
            AttrMap("rounding", "rounding", "name"),
            AttrMap("sigmoid_table", "sigmoid_table", "ints"),
            AttrMap("tanh_table", "tanh_table", "ints"),
        ),
        derived=(("initial_states", lambda op: int(op.h0 is not None) + int(op.c0 is not None)),),
        multi_output=True,
    ),  # in_s (indices, table): rows of the table by index
    HwOp(nh.UpsampleBilinearOp, "UpsampleBilinear", props=(AttrMap("pads", "pads", "ints"),)),
    HwOp(
        nh.GatherOp,
        "Gather",
        props=(AttrMap("axis", "axis", "int"), AttrMap("indices", "indices", "ints")),
    ),
    HwOp(
        nh.SoftmaxOp,
        "Softmax",
        props=(
            AttrMap("axis", "axis", "int"),
            AttrMap("bit_len", "bits", "int"),
            AttrMap("exp_hi", "exp_hi", "ints"),
            AttrMap("exp_lo", "exp_lo", "ints"),
            AttrMap("mask", "mask", "mask"),
        ),
    ),
    HwOp(
        nh.LogSoftmaxOp,
        "LogSoftmax",
        props=(
            AttrMap("axis", "axis", "int"),
            AttrMap("bit_len", "bits", "int"),
            AttrMap("exp_hi", "exp_hi", "ints"),
            AttrMap("exp_lo", "exp_lo", "ints"),
        ),
    ),
    HwOp(
        nh.LayerNormOp,
        "LayerNorm",
        props=(
            AttrMap("bit_len", "bits", "int"),
            AttrMap("eps_term", "eps_term", "int"),
            AttrMap("guard", "guard", "int"),
            AttrMap("max_shift", "max_shift", "int"),
            AttrMap("normalized_dims", "normalized_dims", "int"),
            AttrMap("nudge", "nudge", "int"),
            AttrMap("rounding", "rounding", "rounding"),
        ),
    ),
    HwOp(
        nh.GroupNormOp,
        "GroupNorm",
        props=(
            AttrMap("bit_len", "bits", "int"),
            AttrMap("eps_term", "eps_term", "int"),
            AttrMap("groups", "groups", "int"),
            AttrMap("guard", "guard", "int"),
            AttrMap("max_shift", "max_shift", "int"),
            AttrMap("nudge", "nudge", "int"),
            AttrMap("rounding", "rounding", "rounding"),
        ),
    ),
    # issue 32's op families
    HwOp(nh.CompareOp, "Compare", props=(AttrMap("predicate", "predicate", "name"),)),
    HwOp(nh.SelectOp, "Where"),
    HwOp(
        nh.ReduceOp,
        "Reduce",
        props=(AttrMap("axes", "dims", "ints"), AttrMap("kind", "kind", "name")),
    ),
    HwOp(
        nh.ArgReduceOp,
        "ArgReduce",
        props=(AttrMap("axes", "dims", "ints"), AttrMap("kind", "kind", "name")),
    ),
    HwOp(nh.CumsumOp, "CumSum", props=(AttrMap("axes", "dims", "ints"),)),
    HwOp(nh.UpsampleBicubicOp, "UpsampleBicubic", props=(AttrMap("pads", "pads", "ints"),)),
    HwOp(
        nh.NormalizeOp,
        "Normalize",
        props=(
            AttrMap("axis", "axis", "int"),
            AttrMap("bit_len", "bits", "int"),
            AttrMap("eps_term", "eps_term", "int"),
            AttrMap("guard", "guard", "int"),
            AttrMap("max_shift", "max_shift", "int"),
            AttrMap("nudge", "nudge", "int"),
            AttrMap("rounding", "rounding", "rounding"),
        ),
    ),
    HwOp(
        nh.ExpandOp,
        "Expand",
        derived=(
            (
                "shape",
                lambda op: tuple(
                    expand_shape_operand(tensor_shape(op.operands[0]), tensor_shape(op.results[0]))
                ),
            ),
        ),
    ),
)
"""Every nh op except `nh.constant` (written as `Unpack`, see the module docstring)."""

BY_CLASS: dict[type[Operation], HwOp] = {spec.cls: spec for spec in HW_OPS}
BY_OP_TYPE: dict[str, HwOp] = {spec.op_type: spec for spec in HW_OPS}


# ---------------------------------------------------------------------------------------
# Constant data
# ---------------------------------------------------------------------------------------


def constant_data(name: str, codes: np.ndarray, width: int) -> ConstTensor:
    """The data constant holding `width`-bit codes: packed for 1/2/4 bits, else int8/16/32_t.

    >>> constant_data("w", np.array([[1, -1], [-8, 7]]), 4)
    ConstTensor(name='w', dtype='uint8_t', shape=(2,), data=b'\\x1f\\x87', hex_upper=False)
    """
    if width in PACKED_WIDTHS:
        data = quant.pack_bits(codes, width)
        return ConstTensor(name, "uint8_t", (len(data),), data)
    return ConstTensor.from_numpy(name, np.asarray(codes, dtype=np.int64), HW_DTYPES[width])


def codes_from_data(const: ConstTensor, width: int, shape: tuple[int, ...]) -> np.ndarray:
    """The int64 codes of a data constant for a `width`-bit tensor of `shape`; ValueError
    saying what the data should have been."""
    count = math.prod(shape)
    if width in PACKED_WIDTHS:
        size = math.ceil(count * width / 8)
        if const.dtype != "uint8_t" or const.shape != (size,):
            raise ValueError(
                f"{count} packed {width}-bit codes are Tensor<uint8_t> of shape [{size}], got "
                f"Tensor<{const.dtype}> of shape {list(const.shape)}"
            )
        return quant.unpack_bits(const.data, width, count).astype(np.int64).reshape(shape)
    if const.dtype != HW_DTYPES[width] or const.shape != shape:
        raise ValueError(
            f"{width}-bit codes of shape {list(shape)} are Tensor<{HW_DTYPES[width]}> of that shape, got "
            f"Tensor<{const.dtype}> of shape {list(const.shape)}"
        )
    return const.to_numpy().astype(np.int64)


_STORAGE_DTYPES = {8: "<i1", 16: "<i2", 32: "<i4", 64: "<i8"}


def default_storage(codes: np.ndarray) -> int:
    """The narrowest of i8/i16/i32/i64 that holds `codes` (lower-to-hw stores constants so)."""
    for bits in (8, 16, 32):
        if codes.size == 0 or (
            int(codes.min()) >= -(2 ** (bits - 1)) and int(codes.max()) < 2 ** (bits - 1)
        ):
            return bits
    return 64


def dense_codes(codes: np.ndarray, storage: int) -> DenseIntOrFPElementsAttr:
    """`dense<codes> : tensor<...xi<storage>>`, the value of an `nh.constant`."""
    lo, hi = -(2 ** (storage - 1)), 2 ** (storage - 1) - 1
    if codes.size and (int(codes.min()) < lo or int(codes.max()) > hi):
        raise ValueError(f"the codes do not fit i{storage} storage")
    a = np.ascontiguousarray(codes, dtype=_STORAGE_DTYPES[storage])
    return DenseIntOrFPElementsAttr(
        TensorType(IntegerType(storage), a.shape), BytesAttr(a.tobytes())
    )


def storage_width(value: DenseIntOrFPElementsAttr) -> int:
    """The element width an `nh.constant` stores its codes in."""
    t = value.get_type()
    assert isinstance(t, TensorType) and isinstance(t.get_element_type(), IntegerType)
    return t.get_element_type().width.data
