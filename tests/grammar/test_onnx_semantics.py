"""Issue 19, items 1-4 and the QDQ default axis: what an ONNX file means, read as ONNX says.

Oracles are onnxruntime (running the same bytes), torch and NumPy written here; nothing takes
its expected value from nanoir. The mutants each test kills are named in its docstring.
"""

from __future__ import annotations

import io
import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.ne.node import NodeSpec
from nanoir.grammar.ne.nq import convert_known
from nanoir.grammar.onnx.exporter import export_onnx_bytes
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Block

import nanoir
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")


def model(
    nodes: list[onnx.NodeProto],
    x_shape: list[int | str],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    out_type: int = TensorProto.FLOAT,
    opset: int = 17,
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", out_type, None)],
        list(inits),
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return m.SerializeToString()


def run_ort(data: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    return np.asarray(session.run(None, {name: x})[0])


def run_nanoir(data: bytes, x: np.ndarray) -> np.ndarray:
    (y,) = nanoir.run(import_onnx_bytes(data, "m.onnx"), x)
    return np.asarray(y)


# ---------------------------------------------------------------------------------------
# 1. PRelu: ONNX aligns the slope from the right
# ---------------------------------------------------------------------------------------


@st.composite
def prelu_case(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """An input shape and a slope shape that broadcasts to it unidirectionally (ONNX). Dims
    are mostly 1 or 3, so that the channel count often equals a later dim (where aligning
    the slope on the wrong side still verifies but computes the wrong thing)."""
    rank = draw(st.integers(1, 4))
    x_shape = [draw(st.sampled_from([1, 3, 3, 2])) for _ in range(rank)]
    slope_rank = draw(st.integers(0, rank))
    tail = x_shape[rank - slope_rank :]
    slope = [d if draw(st.booleans()) else 1 for d in tail]
    return x_shape, slope


def per_channel_or_scalar(x_shape: list[int], slope: list[int]) -> bool:
    """The issue's rule, written independently: once aligned to the right, the slope is 1
    on every dim but dim 1 (torch's channel dim)."""
    aligned = [1] * (len(x_shape) - len(slope)) + slope
    return all(d == 1 for i, d in enumerate(aligned) if i != 1)


@settings(max_examples=examples(60), deadline=None)
@given(case=prelu_case(), seed=st.integers(0, 2**16))
def test_prelu_reads_as_onnx_broadcasts_or_is_refused(
    case: tuple[list[int], list[int]], seed: int
) -> None:
    """Random ranks, input shapes and (valid ONNX) slope shapes: nanoir's result equals
    onnxruntime's exactly, or the file is refused, naming the node, the slope's shape and the
    input's, exactly when the slope is not per channel or a scalar.

    Mutants killed: the reader passing the slope straight to the per-channel row (the old
    behaviour: `[1,3,2,3]` with slope `[3]` differed by 30.4), a 1-D `[C]` slope taken per
    channel on any rank >= 2, and the slope aligned from the left (torch's rule)."""
    x_shape, slope_shape = case
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(x_shape) * 8).astype(np.float32)
    slope = rng.uniform(-3, 3, slope_shape).astype(np.float32)
    data = model(
        [helper.make_node("PRelu", ["x", "s"], ["y"], name="act")],
        x_shape,
        [numpy_helper.from_array(slope, "s")],
    )
    want = run_ort(data, x)
    if per_channel_or_scalar(x_shape, slope_shape):
        np.testing.assert_array_equal(run_nanoir(data, x), want)
    else:
        with pytest.raises(OnnxImportError) as info:
            run_nanoir(data, x)
        message = str(info.value)
        assert "'act' (PRelu)" in message
        assert f"slope 's' of shape {slope_shape}" in message
        assert f"the input's shape {x_shape}" in message


def test_prelu_of_the_issue_is_refused_by_name() -> None:
    """`[1,3,2,3]` with a `[3]` slope: ONNX applies the slope along the last dim; nanoir used
    to apply it per channel (max |diff| 30.4). Now refused, naming node and both shapes."""
    data = model(
        [helper.make_node("PRelu", ["x", "s"], ["y"], name="p")],
        [1, 3, 2, 3],
        [numpy_helper.from_array(np.array([0.1, -2.0, 3.0], np.float32), "s")],
    )
    with pytest.raises(OnnxImportError, match=r"'p' \(PRelu\).*slope 's' of shape \[3\]") as e:
        import_onnx_bytes(data, "m.onnx")
    assert "the input's shape [1, 3, 2, 3]" in str(e.value)


@pytest.mark.parametrize("source_shape", [[3], [1, 3]])
def test_prelu_slope_computed_in_the_graph_reads_per_channel(source_shape: list[int]) -> None:
    """A slope that is no constant but a float Reshape's result of shape `[C, 1, 1]` (as
    nanoir's own export writes, from `[C]`; or from `[1, C]`) reads per channel: the result
    equals onnxruntime's. Mutants killed: reshaping such a slope to `[1]`, and bypassing the
    Reshape when its source is not `[C]`."""
    slope = np.array([0.5, -2.0, 3.0], np.float32)
    data = model(
        [
            helper.make_node("Reshape", ["s", "shape"], ["sr"], name="reshape"),
            helper.make_node("PRelu", ["x", "sr"], ["y"], name="p"),
        ],
        [2, 3, 2, 2],
        [
            numpy_helper.from_array(slope.reshape(source_shape), "s"),
            numpy_helper.from_array(np.array([3, 1, 1], np.int64), "shape"),
        ],
    )
    x = (np.random.default_rng(1).standard_normal((2, 3, 2, 2)) * 4).astype(np.float32)
    np.testing.assert_array_equal(run_nanoir(data, x), run_ort(data, x))


# ---------------------------------------------------------------------------------------
# 2. Flatten: a negative axis counts from the end (axis + rank)
# ---------------------------------------------------------------------------------------


def flatten_numpy(x: np.ndarray, axis: int) -> np.ndarray:
    a = axis + x.ndim if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))


@settings(max_examples=examples(30), deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=5), data=st.data())
def test_flatten_every_axis_agrees_with_onnxruntime_and_numpy(
    shape: list[int], data: st.DataObject
) -> None:
    """Every axis -rank..rank: the ONNX reader's result equals onnxruntime's (values and
    shape), and the shared `.ne`/ONNX row gives NumPy's `[prod(dims[:a]), prod(dims[a:])]`
    with a = axis + rank for a negative axis. Mutant killed: `axis % (rank + 1)` (axis -1 on
    `[2,3,4,5]` gave `[120, 1]`, not `[24, 5]`)."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank))
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    data_bytes = model([helper.make_node("Flatten", ["x"], ["y"], name="f", axis=axis)], shape)
    want = run_ort(data_bytes, x)
    got = run_nanoir(data_bytes, x)
    assert got.shape == want.shape == flatten_numpy(x, axis).shape
    np.testing.assert_array_equal(got, want)
    block = Block(arg_types=[TensorType(f32, shape)])
    op = convert_known(NodeSpec("f", "Flatten", (("axis", axis),), (block.args[0],), 1))
    assert list(op.results[0].type.get_shape()) == list(flatten_numpy(x, axis).shape)


def test_flatten_axis_minus_one_of_the_issue() -> None:
    """axis -1 on `[2,3,4,5]` is `[24, 5]` (ONNX), through the `.ne`/ONNX row."""
    block = Block(arg_types=[TensorType(f32, [2, 3, 4, 5])])
    op = convert_known(NodeSpec("f", "Flatten", (("axis", -1),), (block.args[0],), 1))
    assert list(op.results[0].type.get_shape()) == [24, 5]


# ---------------------------------------------------------------------------------------
# 3. PReLU written by nanoir and by torch reads back
# ---------------------------------------------------------------------------------------


def prelu_net() -> object:
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.PReLU(3)).eval()
    with torch.no_grad():
        net[1].weight.copy_(torch.tensor([0.25, -0.5, 2.0]))
    return net


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's TorchScript exporter
def test_torch_export_of_prelu_reads_and_equals_torch() -> None:
    """torch's ONNX export of `nn.PReLU(C)` writes the slope `[C, 1, 1]`; it reads, per
    channel, and equals torch. Mutant killed: the old 1-D-only reader (refused it)."""
    torch = pytest.importorskip("torch")
    net = prelu_net()
    x = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32) * 4
    buffer = io.BytesIO()
    torch.onnx.export(net, (torch.from_numpy(x),), buffer, dynamo=False, opset_version=17)
    slopes = [list(i.dims) for i in onnx.load_from_string(buffer.getvalue()).graph.initializer]
    assert [3, 1, 1] in slopes  # what torch writes (else this test tests nothing new)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    (got,) = nanoir.run(import_onnx_bytes(buffer.getvalue(), "torch.onnx"), x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("flavor", ["qdq", "nanoengine"])
def test_nanoir_export_of_prelu_round_trips(flavor: str) -> None:
    """nanoir writes a per-channel slope reshaped to `[C, 1, 1]` (ONNX broadcasting); it
    reads back to nf.prelu with the same per-channel slopes and outputs bit for bit, with no
    leftover reshape. Mutant killed: the old reader (refused its own export)."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32) * 4
    module = nanoir.from_torch(prelu_net(), torch.from_numpy(x))
    data = export_onnx_bytes(module, flavor)  # type: ignore[arg-type]
    assert "Reshape" in [n.op_type for n in onnx.load_from_string(data).graph.node]
    back = import_onnx_bytes(data, "round.onnx")
    np.testing.assert_array_equal(nanoir.run(back, x)[0], nanoir.run(module, x)[0])
    assert "nf.reshape" not in str(back)
    if flavor == "qdq":
        np.testing.assert_allclose(run_ort(data, x), nanoir.run(module, x)[0], rtol=1e-6)


# ---------------------------------------------------------------------------------------
# 4. Graphs onnxruntime rejects are refused; output_dtype=INT8 QDQ reads
# ---------------------------------------------------------------------------------------


def relu_then(nodes: list[onnx.NodeProto], **kw: object) -> bytes:
    return model([helper.make_node("Relu", ["x"], ["r"], name="first"), *nodes], [1, 3], **kw)


W = numpy_helper.from_array(np.ones((1, 3), np.float32), "w")
INVALID = {
    "tensor defined twice": (
        relu_then(
            [
                helper.make_node("Sigmoid", ["x"], ["y"], name="a"),
                helper.make_node("Relu", ["r"], ["y"], name="b"),
            ]
        ),
        r"'b' \(Relu\): it defines 'y', which is already the output of node 'a'",
    ),
    "node redefines an input": (
        relu_then(
            [
                helper.make_node("Relu", ["r"], ["x"], name="again"),
                helper.make_node("Relu", ["x"], ["y"], name="c"),
            ]
        ),
        r"'again' \(Relu\): it defines 'x', which is already a graph input",
    ),
    "node redefines an initializer": (
        relu_then(
            [
                helper.make_node("Relu", ["r"], ["w"], name="again"),
                helper.make_node("Add", ["x", "w"], ["y"], name="add"),
            ],
            inits=[W],
        ),
        r"'again' \(Relu\): it defines 'w', which is already an initializer",
    ),
    "output element type": (
        relu_then([helper.make_node("Relu", ["r"], ["y"], name="c")], out_type=TensorProto.DOUBLE),
        r"not valid ONNX.*elem type",
    ),
    "opset 99": (
        relu_then([helper.make_node("Relu", ["r"], ["y"], name="c")], opset=99),
        r"opset 99 is newer than any ONNX defines",
    ),
}


@pytest.mark.parametrize("what", list(INVALID))
def test_graphs_onnxruntime_rejects_are_refused(what: str) -> None:
    """Each graph is rejected by onnxruntime (checked here) and refused by the reader with
    one OnnxImportError naming the tensor or node. Mutants killed: no definition check (the
    last definition silently won), no checker/strict type inference, no upper opset bound."""
    data, message = INVALID[what]
    with pytest.raises(Exception):  # noqa: B017  onnxruntime's own error types
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    with pytest.raises(OnnxImportError, match=message) as info:
        import_onnx_bytes(data, "m.onnx")
    assert isinstance(info.value, nanoir.Error)


def test_a_declared_shape_inference_disagrees_with_is_not_refused_by_the_checker() -> None:
    """A value_info shape that disagrees with the inferred one is no reason to refuse (the
    checker's strict mode would): the model reads and equals onnxruntime. Mutant killed:
    `onnx.checker.check_model(model, full_check=True)` as it is."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="a"),
        helper.make_node("Sigmoid", ["r"], ["y"], name="b"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    got = run_nanoir(data.SerializeToString(), x)
    np.testing.assert_allclose(
        got, 1 / (1 + np.exp(-np.maximum(x.astype(np.float64), 0))), rtol=1e-6
    )


def test_a_graph_output_declared_without_a_type_reads() -> None:
    """onnxruntime reads a graph output declared with no type; so does nanoir, though
    `onnx.checker` requires one (an element type UNDEFINED, which onnxruntime refuses, is
    refused: the checker misses it). Mutants killed: checking the model as declared (refused:
    "Field 'type' of 'value_info' is required"); no check of UNDEFINED."""

    def data(out: onnx.ValueInfoProto) -> bytes:
        graph = helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"], name="r")],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [out],
        )
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 17)]
        ).SerializeToString()

    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    untyped = data(helper.make_empty_tensor_value_info("y"))
    np.testing.assert_array_equal(run_ort(untyped, x), np.maximum(x, 0))
    np.testing.assert_array_equal(run_nanoir(untyped, x), np.maximum(x, 0))
    undefined = data(helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None))
    with pytest.raises(Exception):  # noqa: B017  onnxruntime's own error types
        run_ort(undefined, x)
    with pytest.raises(OnnxImportError, match="graph output 'y' has element type UNDEFINED"):
        run_nanoir(undefined, x)


def test_quantize_linear_with_output_dtype_int8_reads() -> None:
    """`QuantizeLinear(output_dtype=INT8)` (no zero point) -> `DequantizeLinear`: int8 codes,
    half to even, equal to onnxruntime. Mutant killed: the DequantizeLinear taking ONNX's
    default uint8 (it was refused: "quantizes to uint8")."""
    nodes = [
        helper.make_node(
            "QuantizeLinear", ["x", "s"], ["q"], name="ql", output_dtype=TensorProto.INT8
        ),
        helper.make_node("DequantizeLinear", ["q", "s"], ["y"], name="dq"),
    ]
    data = model(nodes, [2, 8], [numpy_helper.from_array(np.float32(2.0**-3), "s")], opset=21)
    x = np.linspace(-20, 20, 16, dtype=np.float32).reshape(2, 8)
    want = np.clip(np.round(x.astype(np.float64) * 8), -128, 127) / 8
    np.testing.assert_array_equal(run_ort(data, x), want)
    np.testing.assert_array_equal(run_nanoir(data, x), want)


# ---------------------------------------------------------------------------------------
# Per-channel QDQ without an axis attribute: ONNX's default axis is 1
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [[2, 3, 4, 4], [3, 3, 3, 3]])
def test_per_channel_qdq_without_axis_uses_axis_1(shape: list[int]) -> None:
    """Per-channel scales `[C]` and no `axis` attribute: the scales go along dim 1, as in
    onnxruntime and the NumPy written here. With `[3,3,3,3]` a wrong default axis (0, -1)
    gives wrong values rather than an error. Mutant killed (issue 19's mutation gap):
    `attrs.get("axis", 1)` -> `attrs.get("axis", 0)` and -> `-1` in `_qdq_params`."""
    scales = np.array([2.0**-2, 2.0**-5, 2.0**-1], np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="ql"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq"),
    ]
    inits = [
        numpy_helper.from_array(scales, "s"),
        numpy_helper.from_array(np.zeros(3, np.int8), "z"),
    ]
    data = model(nodes, shape, inits, opset=17)
    x = (np.random.default_rng(5).standard_normal(shape) * 40).astype(np.float32)
    per_channel = scales.astype(np.float64).reshape(1, 3, 1, 1)
    want = np.clip(np.round(x / per_channel), -128, 127) * per_channel
    np.testing.assert_array_equal(run_ort(data, x), want)
    np.testing.assert_array_equal(run_nanoir(data, x), want)
