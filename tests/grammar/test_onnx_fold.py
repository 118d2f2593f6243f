"""Issue 32 §1 (ONNX): every input-independent subgraph is evaluated at import, whatever its
ops, and the work is bounded relative to what the file holds.

The oracle is onnxruntime running the same file; the generator below draws random chains of
integer (and float) ops over constants and the static dims of a graph input, by family
(elementwise arithmetic, casts, data movement, reductions, ranges and fills, comparisons and
selects, data-dependent sizes), so that a folder that special-cases a few ops fails it.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.fold import FOLD_FLOOR, FOLD_RATIO, fold_budget
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")

MiB = 1 << 20


class Chain:
    """A graph under construction: int64 values (name -> NumPy value, used only to draw
    valid operands: the expected result is onnxruntime's)."""

    def __init__(self, draw: st.DrawFn, opset: int) -> None:
        self.draw = draw
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.pool: dict[str, np.ndarray] = {}
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def const(self, value: np.ndarray) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], result: np.ndarray, **attrs: object) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        self.pool[out] = np.asarray(result, np.int64)
        return out

    def pick(self, ok=lambda v: True) -> tuple[str, np.ndarray] | None:  # noqa: ANN001
        names = [k for k, v in self.pool.items() if ok(v)]
        if not names:
            return None
        name = self.draw(st.sampled_from(sorted(names)))
        return name, self.pool[name]

    def small(self, n: int = 1) -> np.ndarray:
        return np.asarray(self.draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n)))


def _vector(v: np.ndarray) -> bool:
    return v.ndim == 1 and 1 <= v.size <= 16


def _binary(c: Chain) -> None:
    a = c.pick(_vector)
    if a is None:
        return
    name, av = a
    op = c.draw(st.sampled_from(["Add", "Sub", "Mul", "Max", "Min", "Div", "Mod"]))
    other = c.pick(lambda v: v.shape == av.shape or v.size == 1)
    if op in ("Div", "Mod") or other is None or c.draw(st.booleans()):
        b = np.abs(c.small(av.size if c.draw(st.booleans()) else 1)) + 1
        bname = c.const(b.astype(np.int64))
    else:
        bname, b = other
    if op == "Div":
        value = np.trunc(av / b)
    elif op == "Mod":
        value = np.mod(av, b)
    else:
        value = {
            "Add": np.add,
            "Sub": np.subtract,
            "Mul": np.multiply,
            "Max": np.maximum,
            "Min": np.minimum,
        }[op](av, b)
    out = c.node(op, [name, bname], value)
    if op == "Mul":  # keep magnitudes small: clip (an int Clip from opset 12)
        lo, hi = c.const(np.array(-1000, np.int64)), c.const(np.array(1000, np.int64))
        c.node("Clip", [out, lo, hi], np.clip(value, -1000, 1000))


def _unary(c: Chain) -> None:
    a = c.pick(lambda v: v.size <= 16)
    if a is None:
        return
    name, av = a
    op = c.draw(st.sampled_from(["Neg", "Abs", "Sign", "Identity"]))
    value = {"Neg": -av, "Abs": np.abs(av), "Sign": np.sign(av), "Identity": av}[op]
    c.node(op, [name], value)


def _casts(c: Chain) -> None:
    """int64 -> int32 -> int64, or through float: x * 0.5 floored or ceiled, or its sqrt."""
    a = c.pick(lambda v: v.size <= 16)
    if a is None:
        return
    name, av = a
    if c.draw(st.booleans()):
        mid = c.fresh("cast")
        c.nodes.append(helper.make_node("Cast", [name], [mid], to=TensorProto.INT32))
        c.node("Cast", [mid], av, to=TensorProto.INT64)
        return
    as_float, half, scaled, rounded = (
        c.fresh("f"),
        c.const(np.float32(0.5)),
        c.fresh("h"),
        c.fresh("r"),
    )
    op = c.draw(st.sampled_from(["Floor", "Ceil", "Sqrt"]))
    c.nodes += [
        helper.make_node("Cast", [name], [as_float], to=TensorProto.FLOAT),
        helper.make_node(
            "Abs" if op == "Sqrt" else "Mul",
            [as_float] if op == "Sqrt" else [as_float, half],
            [scaled],
        ),
        helper.make_node(op, [scaled], [rounded]),
    ]
    f = av.astype(np.float32)
    value = {"Floor": np.floor(f * 0.5), "Ceil": np.ceil(f * 0.5), "Sqrt": np.sqrt(np.abs(f))}[op]
    c.node("Cast", [rounded], value.astype(np.int64), to=TensorProto.INT64)


def _movement(c: Chain) -> None:
    op = c.draw(
        st.sampled_from(
            [
                "Gather",
                "Slice",
                "Concat",
                "Unsqueeze",
                "Squeeze",
                "Expand",
                "Tile",
                "Reshape",
                "Transpose",
            ]
        )
    )
    a = c.pick(_vector)
    if a is None:
        return
    name, av = a
    n = av.size
    if op == "Gather":
        idx = np.asarray(c.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=4)), np.int64)
        if c.draw(st.booleans()):
            idx = idx[:1].reshape(())
        c.node("Gather", [name, c.const(idx)], np.take(av, idx), axis=0)
    elif op == "Slice":
        b, e = sorted(c.draw(st.lists(st.integers(-n - 1, n + 1), min_size=2, max_size=2)))
        if not av[b:e].size:
            return
        c.node("Slice", [name, c.const(np.array([b])), c.const(np.array([e]))], av[b:e])
    elif op == "Concat":
        other = c.pick(_vector)
        assert other is not None
        c.node("Concat", [name, other[0]], np.concatenate([av, other[1]]), axis=0)
    elif op == "Unsqueeze":
        scalar = c.pick(lambda v: v.ndim == 0)
        if scalar is None:
            return
        c.node("Unsqueeze", [scalar[0], c.const(np.array([0]))], scalar[1].reshape(1))
    elif op == "Squeeze":
        if n != 1:
            return
        c.node("Squeeze", [name, c.const(np.array([0]))], av.reshape(()))
    elif op == "Expand":
        if n != 1:
            return
        k = c.draw(st.integers(1, 5))
        c.node("Expand", [name, c.const(np.array([k]))], np.repeat(av, k))
    elif op == "Tile":
        k = c.draw(st.integers(1, 3))
        c.node("Tile", [name, c.const(np.array([k]))], np.tile(av, k))
    elif op == "Reshape":
        mid = c.fresh("col")
        c.nodes.append(helper.make_node("Reshape", [name, c.const(np.array([-1, 1]))], [mid]))
        c.node("Reshape", [mid, c.const(np.array([-1]))], av.reshape(-1))
    else:
        c.node("Transpose", [name], av, perm=[0])


def _axes(c: Chain) -> list[str]:
    """Axes [0] as an input (opset 18+), or none (they are an attribute, `_axes_attr`)."""
    return [c.const(np.array([0]))] if c.opset >= 18 else []


def _axes_attr(c: Chain) -> dict[str, object]:
    return {} if c.opset >= 18 else {"axes": [0]}


def _reductions(c: Chain) -> None:
    a = c.pick(_vector)
    if a is None:
        return
    name, av = a
    op = c.draw(
        st.sampled_from(
            [
                "ReduceSum",
                "ReduceProd",
                "ReduceMax",
                "ReduceMin",
                "ArgMax",
                "CumSum",
                "Shape",
                "Size",
            ]
        )
    )
    value = {
        "ReduceSum": av.sum(keepdims=True),
        "ReduceProd": np.clip(av, -3, 3).prod(keepdims=True),
        "ReduceMax": av.max(keepdims=True),
        "ReduceMin": av.min(keepdims=True),
        "ArgMax": np.argmax(av, keepdims=True),
        "CumSum": np.cumsum(av),
        "Shape": np.array(av.shape),
        "Size": np.array(av.size),
    }[op]
    if op == "ReduceSum":
        c.node(op, [name, c.const(np.array([0]))], value, keepdims=1)
    elif op == "ReduceProd":
        lo, hi = c.const(np.array(-3, np.int64)), c.const(np.array(3, np.int64))
        clipped = c.fresh("clip")
        c.nodes.append(helper.make_node("Clip", [name, lo, hi], [clipped]))
        c.node(op, [clipped, *_axes(c)], value, **_axes_attr(c), keepdims=1)
    elif op in ("ReduceMax", "ReduceMin"):
        c.node(op, [name, *_axes(c)], value, **_axes_attr(c), keepdims=1)
    elif op == "ArgMax":
        c.node(op, [name], value, axis=0, keepdims=1)
    elif op == "CumSum":
        c.node(op, [name, c.const(np.array(0))], value)
    else:
        c.node(op, [name], value)


def _ranges_and_fills(c: Chain) -> None:
    """Range(0, n, 1) and ConstantOfShape([n]) of a value computed in the chain (clipped to
    0..6), as position ids and masks are built."""
    a = c.pick(lambda v: v.size == 1)
    if a is None:
        return
    name, av = a
    scalar = name
    if av.ndim:
        scalar = c.fresh("s")
        c.nodes.append(
            helper.make_node("Reshape", [name, c.const(np.array([], np.int64))], [scalar])
        )
    lo, hi = c.const(np.array(0, np.int64)), c.const(np.array(6, np.int64))
    k = int(np.clip(av.reshape(()), 0, 6))
    clipped = c.fresh("n")
    c.nodes.append(helper.make_node("Clip", [scalar, lo, hi], [clipped]))
    if c.draw(st.booleans()):
        start, step = c.draw(st.integers(-3, 3)), c.draw(st.integers(1, 2))
        value = np.arange(start, k, step)
        if not value.size:
            return
        c.node("Range", [c.const(np.array(start)), clipped, c.const(np.array(step))], value)
    else:
        if k == 0:
            return
        fill = c.draw(st.integers(-4, 4))
        dims = c.fresh("dims")
        c.nodes.append(helper.make_node("Unsqueeze", [clipped, c.const(np.array([0]))], [dims]))
        c.node(
            "ConstantOfShape",
            [dims],
            np.full(k, fill),
            value=numpy_helper.from_array(np.array([fill], np.int64)),
        )


def _selects(c: Chain) -> None:
    """Equal / Greater / Less then Where, and NonZero (a size only the data decides)."""
    a = c.pick(_vector)
    if a is None:
        return
    name, av = a
    if c.draw(st.booleans()):
        nz = c.fresh("nz")
        c.nodes.append(helper.make_node("NonZero", [name], [nz]))
        found = np.flatnonzero(av)
        if not found.size:
            return
        c.node("Reshape", [nz, c.const(np.array([-1]))], found)
        return
    b = c.pick(lambda v: v.shape == av.shape or v.size == 1)
    assert b is not None
    cmp = c.draw(st.sampled_from(["Equal", "Greater", "Less"]))
    mask = c.fresh("mask")
    c.nodes.append(helper.make_node(cmp, [name, b[0]], [mask]))
    truth = {"Equal": np.equal, "Greater": np.greater, "Less": np.less}[cmp](av, b[1])
    other = c.const(c.small(1).astype(np.int64))
    c.node("Where", [mask, name, other], np.where(truth, av, np.int64(0)))


FAMILIES = (_binary, _unary, _casts, _movement, _reductions, _ranges_and_fills, _selects)


@st.composite
def folded_models(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """A model whose output is ``x + Cast(chain)``: ``x`` a ``[1]`` input, ``chain`` an int64
    vector computed from constants and the static dims of a second input ``s``."""
    opset = draw(st.sampled_from([13, 17, 21]))
    c = Chain(draw, opset)
    dims = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    c.nodes.append(helper.make_node("Shape", ["s"], ["shape0"]))
    c.pool["shape0"] = np.asarray(dims)
    for _ in range(draw(st.integers(1, 8))):
        draw(st.sampled_from(FAMILIES))(c)
    result = c.pick(_vector)
    assert result is not None  # shape0 at least
    as_float = c.fresh("f")
    c.nodes += [
        helper.make_node("Cast", [result[0]], [as_float], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", as_float], ["y"]),
    ]
    graph = helper.make_graph(
        c.nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, dims),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        c.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString(), dims


@settings(max_examples=examples(60), deadline=None)
@given(case=folded_models(), x=st.floats(-4, 4, width=32))
def test_random_input_independent_chains_fold_as_onnxruntime_computes(
    case: tuple[bytes, list[int]], x: float
) -> None:
    """Random op chains over constants and static dims (every family above, opsets 13, 17
    and 21) fold to what onnxruntime computes, exactly (integers).

    Kills: a folder that knows a fixed list of ops (the old one's: Shape, Gather, Concat,
    Cast, Slice, ... but no arithmetic: `Mul` of two shape constants stopped a CRNN; run as a
    mutant, it fails at the first Neg)."""
    data, dims = case
    xs = np.array([x], np.float32)
    s = np.zeros(dims, np.float32)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": xs, "s": s})
    module = import_onnx_bytes(data, "chain.onnx")
    (got,) = nanoir.run(module, xs, s)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_a_shape_multiplication_of_a_crnn_folds() -> None:
    """The PyTorch-exported CRNN's `Mul` of two int64 shape constants (`Shape -> Gather ->
    Mul -> Unsqueeze -> Concat -> Reshape`) folds; the Reshape is read with the product.
    Kills: an integer Mul missing from the folder (the issue's CRNN refusal)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["c"], axis=0),
        helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
        helper.make_node("Mul", ["c", "h"], ["ch"]),
        helper.make_node("Unsqueeze", ["ch", "zero"], ["ch1"]),
        helper.make_node("Concat", ["minus1", "ch1", "last"], ["dims"], axis=0),
        helper.make_node("Reshape", ["x", "dims"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array([5], np.int64), "last"),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (got,) = nanoir.run(import_onnx_bytes(data), x)
    np.testing.assert_array_equal(got, x.reshape(-1, 12, 5))


def _weight_fill_model(rows: int, cols: int) -> bytes:
    """``y = MatMul(x, ConstantOfShape([rows, cols], 0.5))``: a weight written as a fill."""
    graph = helper.make_graph(
        [
            helper.make_node(
                "ConstantOfShape",
                ["dims"],
                ["w"],
                value=numpy_helper.from_array(np.array([0.5], np.float32)),
            ),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "fill",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([rows, cols], np.int64), "dims")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_1_2_million_element_weight_fill_folds() -> None:
    """A 1.2 M-element float weight written as a `ConstantOfShape` (a file of ~200 bytes)
    folds and computes as onnxruntime does. Kills: the old fixed bound of 2^20 elements."""
    data = _weight_fill_model(1200, 1000)
    assert len(data) < 300
    x = np.random.default_rng(1).standard_normal((1, 1200)).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (got,) = nanoir.run(import_onnx_bytes(data), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)


def test_a_600_kb_file_cannot_fold_into_gigabytes() -> None:
    """A 600 KB initializer tiled 10,000 times (6 GB) is refused at the Tile, naming it and
    the file's budget, before anything is computed (tracemalloc's peak stays below 64 MiB).
    Kills: the bound taken on the computed result, a budget not relative to the file (a
    fixed 2^30 would compute 6 GB here only after the 1 GB check... and a floor above
    the 32 MiB the file may use)."""
    table = np.ones(150_000, np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Tile", ["t", "reps"], ["big"], name="tile"),
            helper.make_node("Add", ["x", "one"], ["y"]),
        ],
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(table, "t"),
            numpy_helper.from_array(np.array([10_000], np.int64), "reps"),
            numpy_helper.from_array(np.ones(2, np.float32), "one"),
        ],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    assert 550_000 < len(data) < 650_000
    assert fold_budget(len(data)) == FOLD_FLOOR
    tracemalloc.start()
    try:
        with pytest.raises(
            OnnxImportError, match=r"'tile' \(Tile\): it computes from constants only"
        ) as info:
            import_onnx_bytes(data, "hostile.onnx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"nanoir folds at most {FOLD_FLOOR} bytes for this file" in str(info.value)
    assert peak < 64 * MiB


def test_a_larger_file_may_fold_more() -> None:
    """The budget is relative: a fill of 40 MiB is refused from a tiny file (floor 32 MiB)
    and read when the file holds 3 MiB (budget 48 MiB). Kills: a fixed bound."""
    small = _weight_fill_model(1024, 10 * 1024)
    with pytest.raises(OnnxImportError, match="would bring the model's folded constants"):
        import_onnx_bytes(small, "small.onnx")
    model = onnx.load_model_from_string(small)
    model.graph.initializer.append(
        numpy_helper.from_array(np.zeros(3 * MiB // 4, np.float32), "pad")
    )
    big = model.SerializeToString()
    assert fold_budget(len(big)) >= FOLD_RATIO * 3 * MiB > 40 * MiB
    module = import_onnx_bytes(big, "big.onnx")
    x = np.ones((1, 1024), np.float32)
    (got,) = nanoir.run(module, x)
    np.testing.assert_array_equal(got, np.full((1, 10 * 1024), 512.0, np.float32))


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (
            helper.make_node("RandomUniform", [], ["r"], shape=[2], name="n"),
            "its values are random",
        ),
        (
            helper.make_node("Softmax", ["c"], ["r"], name="n", axis=0),
            "computes Softmax as opset 13 defines it, not as opset 11",
        ),
    ],
)
def test_a_refused_fold_says_the_node_is_input_independent(node: onnx.NodeProto, why: str) -> None:
    """A node computed from constants only that nanoir does not evaluate is refused saying
    so: it is an input-independent subgraph, and why it is not folded. Kills: Softmax-11 on
    constants folded with opset 13's meaning (onnx.reference implements the newest only)."""
    graph = helper.make_graph(
        [node, helper.make_node("Add", ["x", "r"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(2, np.float32), "c")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]).SerializeToString()
    with pytest.raises(OnnxImportError) as info:
        import_onnx_bytes(data, "m.onnx")
    message = str(info.value)
    assert "'n' (" in message and "it computes from constants only" in message
    assert why in message
