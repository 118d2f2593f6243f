"""Issue 31 §1.2: every op the ONNX reader maps, read at each opset with that opset's meaning.

Each case is one node at one opset, run by onnxruntime (the oracle) and by nanoir on the same
random input; their results are equal within float32 rounding. The definitions that changed
between opsets (ONNX's operator changelog) each have cases on both sides of the change:
Softmax/LogSoftmax's 2-D flattening before 13, Flatten, Clip's attributes before 11, Pad's
attributes before 11 and axes from 18, Split's attribute before 13 and num_outputs from 18,
Squeeze/Unsqueeze's attribute before 13, the reductions' axes attribute before 13 (ReduceSum)
or 18 (the others), Slice's attributes before 10, BatchNormalization's `spatial` before 9,
Gemm's optional C from 11, Dropout's ratio attribute before 12, and opsets below 7 (upgraded
with onnx.version_converter, with a warning).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from nanoir.grammar.onnx.importer import OnnxImportError, OnnxImportWarning, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)


def one_node(
    op_type: str,
    opset: int,
    x_shape: list[int],
    constants: dict[str, np.ndarray] | None = None,
    inputs: list[str] | None = None,
    outputs: int = 1,
    **attrs: object,
) -> bytes:
    """A model of one node reading ``x`` and the named constants (initializers), in the order
    ``inputs`` gives ('' for an absent optional input)."""
    constants = constants or {}
    names = inputs if inputs is not None else ["x", *constants]
    outs = [f"y{i}" for i in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outs, name="n", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model.SerializeToString()


def assert_same(data: bytes, shape: list[int], seed: int = 0) -> None:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = nanoir.run(import_onnx_bytes(data, "opset.onnx"), x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-5, atol=2e-6)


I64 = np.int64
F32 = np.float32


def _cases() -> list[tuple[str, bytes, list[int]]]:
    cases: list[tuple[str, bytes, list[int]]] = []

    def add(label: str, data: bytes, shape: list[int]) -> None:
        cases.append((label, data, shape))

    for opset in (11, 12, 13):  # before 13: flattened to 2-D at axis (default 1)
        for op in ("Softmax", "LogSoftmax"):
            for axis in (None, 0, 1, 2, -1, -2):
                attrs = {} if axis is None else {"axis": axis}
                add(f"{op}-{opset} axis {axis}", one_node(op, opset, [2, 3, 4], **attrs), [2, 3, 4])
    for opset in (9, 11, 13, 21):
        for axis in (0, 1, 2, 3) + ((-1, -3) if opset >= 11 else ()):
            add(
                f"Flatten-{opset} axis {axis}",
                one_node("Flatten", opset, [2, 3, 2, 2], axis=axis),
                [2, 3, 2, 2],
            )
    add("Clip-6 min max", one_node("Clip", 6, [2, 5], min=-0.5, max=0.75), [2, 5])
    add("Clip-6 min only", one_node("Clip", 6, [2, 5], min=-0.5), [2, 5])
    add("Clip-6 defaults", one_node("Clip", 6, [2, 5]), [2, 5])
    lo, hi = np.array(-0.25, F32), np.array(0.5, F32)
    add("Clip-11 inputs", one_node("Clip", 11, [2, 5], {"lo": lo, "hi": hi}), [2, 5])
    add(
        "Clip-13 max only", one_node("Clip", 13, [2, 5], {"hi": hi}, inputs=["x", "", "hi"]), [2, 5]
    )
    for mode in ("constant", "reflect", "edge"):
        add(
            f"Pad-2 {mode}",
            one_node("Pad", 2, [1, 2, 3, 4], mode=mode, pads=[0, 0, 1, 2, 0, 0, 2, 1], value=1.5),
            [1, 2, 3, 4],
        )
        add(
            f"Pad-10 {mode}",
            one_node("Pad", 10, [1, 2, 3, 4], mode=mode, pads=[0, 0, 1, 0, 0, 1, 0, 2]),
            [1, 2, 3, 4],
        )
        pads = np.array([0, 0, 1, 2, 0, 0, 2, 1], I64)
        add(
            f"Pad-11 {mode}",
            one_node("Pad", 11, [1, 2, 3, 4], {"pads": pads}, mode=mode),
            [1, 2, 3, 4],
        )
        add(
            f"Pad-18 axes {mode}",
            one_node(
                "Pad",
                18,
                [1, 2, 3, 4],
                {
                    "pads": np.array([1, 2, 2, 1], I64),
                    "v": np.array(0.5, F32),
                    "axes": np.array([-1, 2], I64),
                },
                mode=mode,
            ),
            [1, 2, 3, 4],
        )
    add("Split-11 split", one_node("Split", 11, [2, 6], outputs=2, axis=1, split=[2, 4]), [2, 6])
    add("Split-11 equal", one_node("Split", 11, [2, 6], outputs=3, axis=1), [2, 6])
    add(
        "Split-13 input",
        one_node("Split", 13, [2, 6], {"s": np.array([5, 1], I64)}, outputs=2, axis=1),
        [2, 6],
    )
    add(
        "Split-18 num_outputs",
        one_node("Split", 18, [2, 7], outputs=3, axis=1, num_outputs=3),
        [2, 7],
    )
    add("Squeeze-11 attr", one_node("Squeeze", 11, [2, 1, 3, 1], axes=[1, -1]), [2, 1, 3, 1])
    add("Squeeze-11 no axes", one_node("Squeeze", 11, [2, 1, 3, 1]), [2, 1, 3, 1])
    add(
        "Squeeze-13 input",
        one_node("Squeeze", 13, [2, 1, 3, 1], {"a": np.array([3], I64)}),
        [2, 1, 3, 1],
    )
    add("Unsqueeze-11 attr", one_node("Unsqueeze", 11, [2, 3], axes=[0, 3]), [2, 3])
    add(
        "Unsqueeze-13 input",
        one_node("Unsqueeze", 13, [2, 3], {"a": np.array([1, -1], I64)}),
        [2, 3],
    )
    for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        for opset in (11, 13, 18):
            as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
            for axes, keep in (([1], 1), ([1, 2], 0), ([-1], 0), (None, 1)):
                consts = {"a": np.array(axes, I64)} if as_input and axes is not None else {}
                attrs = {} if as_input or axes is None else {"axes": axes}
                add(
                    f"{op}-{opset} axes {axes} keepdims {keep}",
                    one_node(op, opset, [2, 3, 4], consts, keepdims=keep, **attrs),
                    [2, 3, 4],
                )
        if op != "ReduceMean":
            continue
    add(
        "ReduceSum-13 noop_with_empty_axes",
        one_node("ReduceSum", 13, [2, 3], keepdims=1, noop_with_empty_axes=1),
        [2, 3],
    )
    for opset in (9, 10):
        add(
            f"Slice-{opset}",
            one_node("Slice", 9, [3, 5, 4], starts=[1, 0], ends=[3, -1], axes=[0, 2])
            if opset == 9
            else one_node(
                "Slice",
                10,
                [3, 5, 4],
                {
                    "s": np.array([1, 0], I64),
                    "e": np.array([3, -1], I64),
                    "a": np.array([0, 2], I64),
                },
            ),
            [3, 5, 4],
        )
    add(
        "Slice-13 steps",
        one_node(
            "Slice",
            13,
            [3, 9],
            {
                "s": np.array([8], I64),
                "e": np.array([0], I64),
                "a": np.array([1], I64),
                "st": np.array([-3], I64),
            },
        ),
        [3, 9],
    )
    rng = np.random.default_rng(5)
    stats = {
        "scale": rng.uniform(0.5, 1.5, 3).astype(F32),
        "bias": rng.standard_normal(3).astype(F32),
        "mean": rng.standard_normal(3).astype(F32),
        "var": rng.uniform(0.5, 2, 3).astype(F32),
    }
    for opset in (7, 9, 14, 15):
        attrs = {"spatial": 1} if opset == 7 else {}
        add(
            f"BatchNormalization-{opset}",
            one_node("BatchNormalization", opset, [2, 3, 4, 4], stats, epsilon=1e-3, **attrs),
            [2, 3, 4, 4],
        )
    b = rng.standard_normal((4, 5)).astype(F32)
    for opset in (7, 9, 11, 13):
        for ta, tb in ((0, 0), (0, 1), (1, 0), (1, 1)):
            a_shape = [3, 4] if not ta else [4, 3]
            bw = b if not tb else np.ascontiguousarray(b.T)
            c = (
                rng.standard_normal(5).astype(F32)
                if (ta + tb) % 2
                else rng.standard_normal((3, 5)).astype(F32)
            )
            consts = {"b": bw, "c": c} if opset < 11 or ta == tb else {"b": bw}
            add(
                f"Gemm-{opset} transA {ta} transB {tb}",
                one_node("Gemm", opset, a_shape, consts, transA=ta, transB=tb, alpha=0.5, beta=2.0),
                a_shape,
            )
    add("Dropout-7", one_node("Dropout", 7, [2, 3], ratio=0.3), [2, 3])
    add("Dropout-10", one_node("Dropout", 10, [2, 3], ratio=0.3), [2, 3])
    add(
        "Dropout-13 inputs",
        one_node("Dropout", 13, [2, 3], {"r": np.array(0.3, F32), "t": np.array(False)}),
        [2, 3],
    )
    return cases


CASES = _cases()


@pytest.mark.parametrize(("label", "data", "shape"), CASES, ids=[c[0] for c in CASES])
def test_each_op_at_each_opset_equals_onnxruntime(
    label: str, data: bytes, shape: list[int]
) -> None:
    """Kills: Softmax-11 read with opset 13's one axis (every value differed, up to 0.42;
    LogSoftmax up to 2.1), Unsqueeze-11's axes attribute ignored (the old reader read axes
    from the input only), ReduceSum-11's axes attribute ignored, Gemm's transposes or scales
    dropped, Pad-18's axes ignored, Slice-9's attributes ignored."""
    assert_same(data, shape)


def test_softmax_11_of_the_issue() -> None:
    """A rank-3 Softmax/LogSoftmax with the default axis at opset 11 normalises the last two
    dims together. The issue's values (every value differed) equal onnxruntime now."""
    for op in ("Softmax", "LogSoftmax"):
        data = one_node(op, 11, [2, 3, 4])
        x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32) * 3
        (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        (got,) = nanoir.run(import_onnx_bytes(data), x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        if op == "Softmax":
            np.testing.assert_allclose(np.asarray(got).sum(axis=(1, 2)), 1, rtol=1e-5)


def test_a_dynamic_dim_in_a_flattened_softmax_is_refused_by_name() -> None:
    """Softmax-11 over dims 1.. of `[N, ?, 4]` cannot be flattened statically: refused naming
    the dims and how to give static shapes; with input_shapes it reads."""
    data = one_node("Softmax", 11, ["N", "T", 4])
    with pytest.raises(
        OnnxImportError, match=r"normalises dims 1\.\. of \[\?, \?, 4\].*input_shapes"
    ):
        import_onnx_bytes(data)
    module = import_onnx_bytes(data, input_shapes={"x": (None, 3, 4)})
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(nanoir.run(module, x)[0], want, rtol=1e-5, atol=1e-6)


def test_dropout_mask_read_or_training_is_refused() -> None:
    data = one_node("Dropout", 13, [2, 3], {"r": np.array(0.3, F32), "t": np.array(True)})
    with pytest.raises(OnnxImportError, match="training_mode is true"):
        import_onnx_bytes(data)
    mask = one_node("Dropout", 10, [2, 3], outputs=2)
    with pytest.raises(OnnxImportError, match="mask output 'y1' is read"):
        import_onnx_bytes(mask)


def test_opsets_below_7_are_upgraded_with_a_warning() -> None:
    """An opset-6 model (Add with the old `broadcast` attribute, a Relu) is upgraded to opset 7
    by onnx.version_converter, with a warning saying so, and equals onnxruntime. Kills: the
    old refusal of opsets below 7."""
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"], broadcast=1),
            helper.make_node("Relu", ["s"], ["y"]),
        ],
        "old",
        [  # (before IR 4, an initializer is a graph input too)
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        [numpy_helper.from_array(np.array([0.5, -1.0, 2.0, 0.25], F32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    data = model.SerializeToString()
    with pytest.warns(
        OnnxImportWarning, match="opset 6 is older than nanoir reads; the model was upgraded"
    ):
        module = import_onnx_bytes(data, "old.onnx")
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(F32)
    want = np.maximum(x + np.array([0.5, -1.0, 2.0, 0.25], F32), 0)
    np.testing.assert_allclose(nanoir.run(module, x)[0], want, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert onnx.load_model_from_string(data).opset_import[0].version == 6
