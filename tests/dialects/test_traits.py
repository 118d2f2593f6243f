"""Op traits (``nanoir.dialects.traits``): every op has the facts the passes ask for, and an op
that declares them is planned by stream-plan with no table to edit."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects import nf, nh
from nanoir.dialects.functions import find_function, level_of, runtime_layout
from nanoir.dialects.nf import NF
from nanoir.dialects.nh import NH
from nanoir.dialects.nq import NQ
from nanoir.dialects.traits import (
    ChannelWise,
    Contraction,
    DataMovement,
    Elementwise,
    FloatOnly,
    IntegerAlgorithm,
    LookupTable,
    Normalising,
    RowStep,
    SlidingWindow,
    StreamingRule,
    Weighted,
    WholeAlongAxis,
    WholeExtent,
    scale_rows,
)
from nanoir.lowering.stream_plan import StreamPlanError, stream_plan
from nanoir.runtime.nf import NF_BUILDERS
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import ConstantLike, Pure

import nanoir

ALL_OPS = [*NF.operations, *NQ.operations, *NH.operations]
NOT_STREAMED = {nf.CustomOp}
"""Ops with no streaming rule on purpose: ``nf.custom`` is opaque (constants never stream)."""


def arg(*shape: int) -> SSAValue:
    return Block(arg_types=[TensorType(f32, shape)]).args[0]


def op_id(op: type[Operation]) -> str:
    return op.name


@pytest.mark.parametrize("op", ALL_OPS, ids=op_id)
def test_every_op_streams_or_says_why_not(op: type[Operation]) -> None:
    rules = op.get_traits_of_type(StreamingRule)
    if op.has_trait(ConstantLike) or op in NOT_STREAMED:
        assert not rules
        return
    assert len(rules) == 1, f"{op.name}: one streaming rule, got {rules}"


@pytest.mark.parametrize("op", [o for o in ALL_OPS if o.has_trait(LookupTable)], ids=op_id)
def test_lookup_table_ops_are_float_only_unary_elementwise(op: type[Operation]) -> None:
    assert op.has_trait(FloatOnly) and op.has_trait(Elementwise)
    assert op.name.startswith("nf.")
    defn = op.get_irdl_definition()
    assert len(defn.operands) == 1 and len(defn.results) == 1


def test_the_lookup_tables() -> None:
    lut = {o.name for o in ALL_OPS if o.has_trait(LookupTable)}
    assert lut == {
        "nf.sigmoid",
        "nf.tanh",
        "nf.hardsigmoid",
        "nf.hardswish",
        "nf.leaky_relu",
        "nf.silu",
        "nf.gelu",
        "nf.unary",
    }
    assert {o.name for o in ALL_OPS if o.has_trait(FloatOnly)} == lut


@pytest.mark.parametrize(
    "op",
    [
        nf.SigmoidOp(arg(4)),
        nf.TanhOp(arg(4)),
        nf.HardSigmoidOp(arg(4)),
        nf.HardSwishOp(arg(4)),
        nf.LeakyReluOp(arg(4), 0.125),
        nf.SiluOp(arg(4)),
        nf.GeluOp(arg(4)),
        nf.GeluOp(arg(4), "tanh"),
    ],
    ids=lambda o: o.name,
)
def test_a_lookup_table_is_the_interpreters_kernel(op: Operation) -> None:
    x = np.linspace(-6, 6, 97)
    lut = op.get_trait(LookupTable)
    assert lut is not None
    (expected,) = NF_BUILDERS[type(op)](op, np.dtype(np.float64))(x)
    np.testing.assert_array_equal(lut.evaluate(op, x), expected)


def test_data_movement_is_what_quantize_leaves_unquantized() -> None:
    moving = {o.name for o in NF.operations if o.has_trait(DataMovement)}
    assert moving == {
        "nf.reshape",
        "nf.transpose",
        "nf.split",
        "nf.concat",
        "nf.pad",
        "nf.upsample_nearest",
        "nf.upsample_zero",
        "nf.max_unpool",
        "nf.embedding",
        "nf.depth_to_space",
        "nf.space_to_depth",
        "nf.expand",
        "nf.gather",
    }
    assert {o.name for o in NH.operations if o.has_trait(DataMovement)} == {
        "nh.reshape",
        "nh.concat",
        "nh.transpose",
        "nh.pad",
        "nh.split",
        "nh.upsample_nearest",
        "nh.upsample_zero",
        "nh.max_unpool",
        "nh.embedding",
        "nh.depth_to_space",
        "nh.space_to_depth",
        "nh.expand",
        "nh.gather",
    }


def test_the_other_facts() -> None:
    def named(trait: type) -> set[str]:
        return {o.name for o in ALL_OPS if o.has_trait(trait)}

    assert named(SlidingWindow) == {
        "nf.conv",
        "nh.conv",
        "nf.max_pool",
        "nh.max_pool",
        "nf.avg_pool",
        "nh.avg_pool",
        "nf.conv_transpose",
        "nh.conv_transpose",
    }
    assert named(Contraction) == {"nf.linear", "nh.linear", "nf.matmul", "nh.matmul"}
    assert named(ChannelWise) == {"nf.batch_norm", "nf.prelu", "nh.prelu"}
    softmax = {"nf.softmax", "nf.log_softmax", "nh.softmax", "nh.log_softmax"}
    l2 = {"nf.normalize", "nh.normalize"}
    assert named(WholeAlongAxis) == softmax | l2
    norms = {"nf.layer_norm", "nf.group_norm", "nh.layer_norm", "nh.group_norm"}
    assert named(Normalising) == norms
    assert named(WholeExtent) - named(WholeAlongAxis) - norms == {"nf.adaptive_avg_pool"}
    assert {"nf.normalize"} <= named(IntegerAlgorithm)
    assert {"nf.softmax", "nf.log_softmax"} <= named(IntegerAlgorithm)
    assert {"nf.layer_norm", "nf.group_norm"} <= named(IntegerAlgorithm)
    assert {
        "nf.relu",
        "nf.add",
        "nf.div",
        "nq.fake_quant",
        "nh.requant",
        "nh.lut",
        "nh.add",
    } <= named(Elementwise)


def test_sliding_window_geometry() -> None:
    x, weight = arg(1, 3, 20, 9), arg(4, 3, 3, 2)
    conv = nf.ConvOp(x, weight, strides=[2, 1], pads=[1, 0, 1, 0], dilations=[3, 1])
    trait = conv.get_trait(SlidingWindow)
    assert trait is not None
    g = trait.geometry(conv)
    assert (g.kernel, g.strides, g.pads, g.dilations) == ((3, 2), (2, 1), (1, 0, 1, 0), (3, 1))
    assert g.field(0) == 7 and g.field(1) == 2
    step = trait.row_step(conv, 2, [x])
    assert step == RowStep(need=7, drop=2, pad_begin=1, pad_end=1, adjust="window")
    assert trait.row_step(conv, 2, [x, weight]) is None  # a runtime weight: the whole extent


# --------------------------------------------------------------------------------------------
# A new op, defined here, streams by its traits alone
# --------------------------------------------------------------------------------------------


@irdl_op_definition
class SquareOp(IRDLOperation):
    """``x * x``: a test op that is elementwise."""

    name = "test.square"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())


@irdl_op_definition
class StretchOp(IRDLOperation):
    """Each row repeated as many times as the result is longer: a test op that moves data and
    emits several rows per firing."""

    name = "test.stretch"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), DataMovement(scale_rows))


@irdl_op_definition
class OpaqueOp(IRDLOperation):
    name = "test.opaque"
    input = operand_def(TensorType)
    result = result_def(TensorType)


def one_function(*ops: type[IRDLOperation], length: int = 6) -> ModuleOp:
    t = TensorType(f32, [1, 2, length])
    block = Block(arg_types=[t])
    value: SSAValue = block.args[0]
    for cls in ops:
        out = TensorType(f32, [1, 2, length * (3 if cls is StretchOp else 1)])
        length *= 3 if cls is StretchOp else 1
        op = cls.create(operands=[value], result_types=[out])
        block.add_op(op)
        value = op.results[0]
    block.add_op(ReturnOp(value))
    func = FuncOp("main", FunctionType.from_lists([t], [value.type]), Region(block))
    return ModuleOp([func])


def test_a_new_op_is_planned_by_its_traits() -> None:
    module = one_function(SquareOp, StretchOp, SquareOp)
    plan = stream_plan(module)
    ops = list(find_function(module).body.block.ops)
    square, stretch, last = ops[0], ops[1], ops[2]
    assert plan.tensors[square.results[0]].rows[2].max == 1
    assert plan.tensors[stretch.results[0]].rows[2].max == 3  # 3 rows per firing
    assert plan.tensors[last.results[0]].rows[2].sum == 3
    assert plan.caches[(last, stretch.results[0])].rows[2].max == 3
    assert plan.tensor_shape(stretch.results[0]) == (-1, 2, 3)


def test_an_op_without_traits_is_named() -> None:
    with pytest.raises(StreamPlanError, match="'test.opaque' has no streaming rule"):
        stream_plan(one_function(SquareOp, OpaqueOp))


# --------------------------------------------------------------------------------------------
# Functions: the level of a program, the runtime layout
# --------------------------------------------------------------------------------------------


def test_level_of() -> None:
    nf_program = nanoir.parse("""
    func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %y = nf.relu %x : tensor<?x4xf32>
      func.return %y : tensor<?x4xf32>
    }""")
    assert level_of(find_function(nf_program)) == "nf"
    nq_program = nanoir.parse("""
    func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %y = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
      func.return %y : tensor<?x4xf32>
    }""")
    assert level_of(find_function(nq_program)) == "nq"
    nh_program = nanoir.parse("""
    func.func @main(%x: tensor<?x4xi8, #nh.fixed<4, BC>>) -> tensor<?x4xi8, #nh.fixed<4, BC>> {
      func.return %x : tensor<?x4xi8, #nh.fixed<4, BC>>
    }""")
    assert level_of(find_function(nh_program)) == "nh"


def test_runtime_layout() -> None:
    assert [runtime_layout(r) for r in range(6)] == ["", "B", "BC", "BCM", "BCMD", "BCMDD"]
    assert nh.FixedAttr(0, runtime_layout(5)).layout.data == "BCMDD"


def test_weighted_ops_name_their_weight_channel_axis() -> None:
    """conv and linear weights run their output channels along dim 0, a transposed conv's
    ``[C, O/g, *K]`` along dim 1; quantize and lower-to-hw read the axis from the trait."""
    axes = {o.name: o.get_trait(Weighted).channel_axis for o in ALL_OPS if o.has_trait(Weighted)}
    assert axes == {
        "nf.conv": 0,
        "nh.conv": 0,
        "nf.linear": 0,
        "nh.linear": 0,
        "nf.conv_transpose": 1,
        "nh.conv_transpose": 1,
    }
    assert Weighted(0).layout(4) == "CCDD"
    assert Weighted(1).layout(3) == "DCD"
