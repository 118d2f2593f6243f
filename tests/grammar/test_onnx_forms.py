"""Issue 32 §2: ONNX op forms as real exporters write them, against onnxruntime.

HardSigmoid with any alpha/beta (Paddle writes 0.2); the LayerNorm older exporters write out
(ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) fused into one nf.layer_norm;
Gemm with a constant operand either side; Pow by a constant; ReduceMean/ReduceSum over any
axes; Cast to the same float type; Sum/Mean/Max/Min of any number of inputs; Sqrt and Exp.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

F32 = np.float32


def graph_model(
    nodes: list[onnx.NodeProto],
    x_shape: list[int | str],
    consts: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    outputs: tuple[str, ...] = ("y",),
    extra_inputs: dict[str, list[int | str]] | None = None,
) -> bytes:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    for name, shape in (extra_inputs or {}).items():
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def compare(data: bytes, *xs: np.ndarray, rtol: float = 1e-5, atol: float = 1e-5) -> object:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), xs)}
    want = session.run(None, feeds)
    module = import_onnx_bytes(data, "forms.onnx")
    got = nanoir.run(module, *xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=atol)
    return module


def ops_of(module: object) -> list[str]:
    return [
        op.name
        for op in module.walk()  # type: ignore[attr-defined]
        if op.name.startswith("nf.") and op.name != "nf.constant"
    ]


RNG = np.random.default_rng(0)


# ---------------------------------------------------------------------------------------
# HardSigmoid
# ---------------------------------------------------------------------------------------


@settings(max_examples=examples(30), deadline=None)
@given(
    alpha=st.one_of(st.just(0.2), st.just(1 / 6), st.floats(0.0625, 2.0, width=32)),
    beta=st.one_of(st.just(0.5), st.floats(-1.0, 1.5, width=32)),
    seed=st.integers(0, 2**16),
)
def test_hard_sigmoid_of_any_alpha_beta_equals_onnxruntime(
    alpha: float, beta: float, seed: int
) -> None:
    """Kills: alpha/beta ignored (torch's 1/6 used for Paddle's 0.2), the old refusal, beta
    dropped."""
    data = graph_model(
        [helper.make_node("HardSigmoid", ["x"], ["y"], alpha=alpha, beta=beta)], [2, 3, 5]
    )
    x = (np.random.default_rng(seed).standard_normal((2, 3, 5)) * 4).astype(F32)
    compare(data, x, rtol=1e-6, atol=1e-6)


def test_paddle_hard_sigmoid_quantizes_lowers_and_round_trips_in_ne() -> None:
    """Paddle's HardSigmoid (alpha 0.2) after a conv: its lookup table at nh equals nq bit for
    bit (the table uses alpha/beta), and the nq program written to `.ne` reads back with the
    same alpha. Kills: a table evaluated at torch's 1/6 (nq != onnxruntime), the `.ne` writer
    writing torch's alpha."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(F32) * 0.3
    data = graph_model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.2, beta=0.5),
        ],
        ["N", 3, 6, 6],
        {"w": w},
    )
    x = RNG.standard_normal((2, 3, 6, 6)).astype(F32)
    module = compare(data, x)
    (op,) = [o for o in module.walk() if isinstance(o, nf.HardSigmoidOp)]  # type: ignore[attr-defined]
    assert abs(op.alpha.value.data - 0.2) < 1e-7
    nanoir.quantize(module, [x.astype(np.float64)], progress=False)
    (nq,) = nanoir.run(module, x)
    (nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(np.asarray(nh), np.asarray(nq))
    again = import_nanoengine(export_nanoengine(module))
    (op,) = [o for o in again.walk() if isinstance(o, nf.HardSigmoidOp)]
    assert abs(op.alpha.value.data - 0.2) < 1e-7


# ---------------------------------------------------------------------------------------
# The LayerNorm written out
# ---------------------------------------------------------------------------------------


def layer_norm_nodes(
    squared: str = "Pow",
    affine: bool = True,
    axes: list[int] = (-1,),
    opset: int = 17,  # type: ignore[assignment]
) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """Paddle's (and torch < opset 17's) LayerNorm, node for node."""
    consts: dict[str, np.ndarray] = {"two": np.array(2.0, F32), "eps": np.array(0.25, F32)}
    reduce_kw: dict[str, object] = {}
    reduce_in: list[str] = []
    if opset >= 18:
        consts["axes"] = np.array(axes, np.int64)
        reduce_in = ["axes"]
    else:
        reduce_kw = {"axes": list(axes)}
    nodes = [
        helper.make_node("ReduceMean", ["x", *reduce_in], ["m"], **reduce_kw),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["p"])
        if squared == "Pow"
        else helper.make_node("Mul", ["d", "d"], ["p"]),
        helper.make_node("ReduceMean", ["p", *reduce_in], ["v"], **reduce_kw),
        helper.make_node("Add", ["v", "eps"], ["e"]),
        helper.make_node("Sqrt", ["e"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n" if affine else "y"]),
    ]
    if affine:
        consts["gamma"] = RNG.uniform(0.5, 1.5, 8).astype(F32)
        consts["beta"] = RNG.standard_normal(8).astype(F32)
        nodes += [
            helper.make_node("Mul", ["n", "gamma"], ["g"]),
            helper.make_node("Add", ["g", "beta"], ["y"]),
        ]
    return nodes, consts


@pytest.mark.parametrize(
    ("squared", "affine", "opset"),
    [
        ("Pow", True, 11),
        ("Pow", True, 17),
        ("Mul", True, 13),
        ("Pow", False, 17),
        ("Pow", True, 18),
    ],
)
def test_the_written_out_layer_norm_is_one_nf_layer_norm(
    squared: str, affine: bool, opset: int
) -> None:
    """Kills: the pattern left as nine ops (the issue's refusal at Sqrt), the fusion taking the
    variance without eps, gamma and beta swapped, an opset-18 axes input not read."""
    nodes, consts = layer_norm_nodes(squared, affine, opset=opset)
    data = graph_model(nodes, ["N", 5, 8], consts, opset=opset)
    x = (RNG.standard_normal((3, 5, 8)) * 2 + 1).astype(F32)
    module = compare(data, x, rtol=1e-4, atol=1e-5)
    assert ops_of(module) == ["nf.layer_norm"]


def test_a_layer_norm_pattern_that_is_not_one_reads_node_by_node() -> None:
    """The same nodes normalising dim 1 of `[N, 5, 8]` (not the last dims) are no
    nf.layer_norm: read one by one (ReduceMean, Sqrt, ...), still equal to onnxruntime; an
    intermediate that is also a graph output keeps its own op. Kills: a fusion that ignores
    the axes, or drops a value another node or the graph reads."""
    nodes, consts = layer_norm_nodes(axes=[1])
    data = graph_model(nodes, ["N", 5, 8], consts)
    x = RNG.standard_normal((2, 5, 8)).astype(F32)
    module = compare(data, x, rtol=1e-4, atol=1e-5)
    assert "nf.layer_norm" not in ops_of(module)
    nodes, consts = layer_norm_nodes()
    data = graph_model(nodes, ["N", 5, 8], consts, outputs=("y", "v"))
    module = compare(data, x, rtol=1e-4, atol=1e-5)
    assert "nf.layer_norm" not in ops_of(module)


# ---------------------------------------------------------------------------------------
# Gemm, Pow, reductions, Cast, variadic ops, Sqrt/Exp
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, [], [1], [5], [1, 5], [3, 5], [3, 1]])
def test_gemm_with_a_constant_weight(trans_a: int, trans_b: int, c_shape: list[int] | None) -> None:
    """ONNX's default transB=0 (torch's addmm, TF converters), any transA, alpha/beta and C's
    broadcast shapes: nf.linear (+ an add where C is not one value per column). Kills: B
    not transposed for transB=0, beta applied to a bias folded twice, C of shape [M, 1]
    read as a per-column bias."""
    b = RNG.standard_normal((5, 4) if trans_b else (4, 5)).astype(F32)
    consts = {"b": b}
    inputs = ["x", "b"]
    if c_shape is not None:
        consts["c"] = RNG.standard_normal(c_shape).astype(F32)
        inputs.append("c")
    node = helper.make_node(
        "Gemm", inputs, ["y"], transA=trans_a, transB=trans_b, alpha=1.5, beta=0.5
    )
    shape = [4, 3] if trans_a else [3, 4]
    module = compare(graph_model([node], shape, consts), RNG.standard_normal(shape).astype(F32))
    assert "nf.linear" in ops_of(module)


def test_gemm_with_a_constant_a_and_a_runtime_b() -> None:
    """`Y = A' @ x'` with A constant: nf.linear of the transposed input, transposed back."""
    a = RNG.standard_normal((2, 3)).astype(F32)
    node = helper.make_node("Gemm", ["a", "x"], ["y"], transB=1, alpha=2.0)
    module = compare(graph_model([node], [4, 3], {"a": a}), RNG.standard_normal((4, 3)).astype(F32))
    assert "nf.linear" in ops_of(module)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 0.5, 3.0, -1.0])
def test_pow_by_a_constant(exponent: float) -> None:
    """2 is x * x, 0.5 a square root, others nf.unary pow. Kills: Pow read as a binary op of
    two tensors (refused), 0.5 as x * x."""
    data = graph_model(
        [helper.make_node("Pow", ["x", "e"], ["y"])], [2, 6], {"e": np.array(exponent, F32)}
    )
    x = RNG.uniform(0.25, 3.0, (2, 6)).astype(F32)
    compare(data, x, rtol=1e-5)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("axes", [[1], [2, 3], [1, 3], [-1], [1, 2, 3]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_over_any_axes_with_a_dynamic_batch(
    op: str, axes: list[int], keepdims: int
) -> None:
    """Kills: a mean over non-spatial axes refused, keepdims=0 keeping the dims, a sum read
    as a mean."""
    opset = 13 if op == "ReduceSum" else 17
    consts = {"a": np.array(axes, np.int64)} if op == "ReduceSum" else {}
    attrs = {} if op == "ReduceSum" else {"axes": axes}
    node = helper.make_node(op, ["x", *consts], ["y"], keepdims=keepdims, **attrs)
    compare(
        graph_model([node], ["N", 3, 4, 5], consts, opset=opset),
        RNG.standard_normal((2, 3, 4, 5)).astype(F32),
    )


def test_a_mean_over_the_dynamic_batch_is_refused_naming_it() -> None:
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[0, 1])
    with pytest.raises(OnnxImportError, match=r"whose dim 0 is dynamic.*input_shapes"):
        import_onnx_bytes(graph_model([node], ["N", 3]))


@pytest.mark.parametrize(
    ("to", "refused"),
    [
        (TensorProto.FLOAT, None),
        (TensorProto.DOUBLE, None),
        (TensorProto.BOOL, None),
        (TensorProto.FLOAT16, "casts a runtime f32 tensor to FLOAT16, which rounds"),
        (TensorProto.INT64, "casts a runtime f32 tensor to INT64, which is not a float type"),
    ],
)
def test_cast_of_a_runtime_tensor(to: int, refused: str | None) -> None:
    """To the same or a wider float type: nothing (exact); to BOOL: a comparison with 0 (1/0
    values, equal to onnxruntime's true/false); narrowing or to integers: refused by name.
    Kills: a widening cast refused (the issue's list), a bool cast keeping the values."""
    model = onnx.load_model_from_string(
        graph_model([helper.make_node("Cast", ["x"], ["y"], to=to)], [2, 3])
    )
    model.graph.output[0].type.tensor_type.elem_type = to
    data = model.SerializeToString()
    x = RNG.standard_normal((2, 3)).astype(F32)
    x[0, 0] = 0.0
    if refused is not None:
        with pytest.raises(OnnxImportError, match=refused):
            import_onnx_bytes(data)
        return
    module = compare(data, x)
    assert ops_of(module) == ([] if to != TensorProto.BOOL else ["nf.compare"])


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic_ops_of_any_number_of_inputs(op: str, count: int) -> None:
    names = ["x", "b", "c"][:count]
    extra = {"b": [2, 3], "c": [1, 3]}
    data = graph_model(
        [helper.make_node(op, names, ["y"])], [2, 3], extra_inputs={k: extra[k] for k in names[1:]}
    )
    xs = [RNG.standard_normal(s).astype(F32) for s in ([2, 3], [2, 3], [1, 3])[:count]]
    compare(data, *xs)


@pytest.mark.parametrize("op", ["Sqrt", "Exp", "Erf", "Log", "Neg", "Abs", "Softplus"])
def test_elementwise_functions(op: str) -> None:
    """The functions of nf.unary (another session's op family) read through their rows."""
    data = graph_model([helper.make_node(op, ["x"], ["y"])], [2, 5])
    compare(data, RNG.uniform(0.1, 2.0, (2, 5)).astype(F32), rtol=1e-5)


# ---------------------------------------------------------------------------------------
# The HardSwish written out
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("opset", "last"), [(11, "Div"), (13, "Mul"), (9, "Div")])
def test_the_written_out_hard_swish_is_one_nf_hardswish(opset: int, last: str) -> None:
    """paddle2onnx's `Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)` (or times 1/6; Clip's bounds as
    attributes before opset 11) is one nf.hardswish, which quantizes to a lookup table and
    lowers with nq == nh. Kills: the pattern left as Div by 6, which lower-to-hw refuses
    (6's reciprocal is not dyadic: the PaddleOCR models stopped there)."""
    consts = {"three": np.array(3.0, F32), "six": np.array(6.0 if last == "Div" else 1 / 6, F32)}
    clip = (
        helper.make_node("Clip", ["a"], ["c"], min=0.0, max=6.0)
        if opset < 11
        else helper.make_node("Clip", ["a", "zero", "six_max"], ["c"])
    )
    if opset >= 11:
        consts.update({"zero": np.array(0.0, F32), "six_max": np.array(6.0, F32)})
    nodes = [
        helper.make_node("Add", ["x", "three"], ["a"]),
        clip,
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node(last, ["m", "six"], ["y"]),
    ]
    data = graph_model(nodes, ["N", 4, 5], consts, opset=opset)
    x = (RNG.standard_normal((2, 4, 5)) * 4).astype(F32)
    module = compare(data, x, rtol=1e-6, atol=1e-6)
    assert ops_of(module) == ["nf.hardswish"]
    nanoir.quantize(module, [x.astype(np.float64)], progress=False)
    (nq,) = nanoir.run(module, x)
    (nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(np.asarray(nh), np.asarray(nq))


def test_a_hard_swish_pattern_of_other_constants_reads_node_by_node() -> None:
    """`x * Clip(x + 2, 0, 6) / 6` is no HardSwish: read as its ops, equal to onnxruntime.
    Kills: a fusion that does not check the constants."""
    consts = {"two": np.array(2.0, F32), "six": np.array(6.0, F32), "zero": np.array(0.0, F32)}
    nodes = [
        helper.make_node("Add", ["x", "two"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["y"]),
    ]
    module = compare(
        graph_model(nodes, [2, 5], consts), (RNG.standard_normal((2, 5)) * 4).astype(F32)
    )
    assert "nf.hardswish" not in ops_of(module)
