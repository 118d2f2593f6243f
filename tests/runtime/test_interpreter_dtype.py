"""The float type a program runs in: the one it declares (issue 31 §1 item 4).

An ONNX model on ``double`` inputs is an nf program of ``f64`` values; run in float32, an
``Add`` near 1e200 gave ``inf`` where onnxruntime is finite, and every result came back as
float32. The oracle is onnxruntime, running the same file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.runtime.interpreter import compile_module, declared_float_dtype
from nanoir.runtime.streamer import Streamer

import nanoir
from nanoir.testing.programs import examples

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper, TensorProto = onnx.helper, onnx.TensorProto

BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
UNARY = ("Relu", "Neg", "Abs", "Sqrt", "Exp")


def model_file(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inputs: dict[str, int],
    output_type: int,
    shape: tuple[int, ...],
    initializers: tuple[onnx.TensorProto, ...] = (),
) -> Path:
    """A one-output ONNX model of ``nodes`` (inputs by name and element type), saved."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, list(shape)) for n, t in inputs.items()],
        [helper.make_tensor_value_info("y", output_type, list(shape))],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


def both(path: Path, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The model's output from nanoir (default dtype) and from onnxruntime."""
    (got,) = nanoir.run(nanoir.load(path), *feeds.values())
    (want,) = ort.InferenceSession(str(path)).run(None, feeds)
    return np.asarray(got), np.asarray(want)


def test_double_add_near_1e200_is_finite(tmp_path: Path) -> None:
    """The issue's reproducer. kills: nf programs always compiled in float32 (inf, float32)."""
    node = helper.make_node("Add", ["a", "b"], ["y"])
    path = model_file(tmp_path, [node], {"a": TensorProto.DOUBLE, "b": TensorProto.DOUBLE},
                      TensorProto.DOUBLE, (3,))  # fmt: skip
    a = np.array([1e200, 1.0, -3e300])
    b = np.array([1e200, 1e-12, 1e300])
    got, want = both(path, {"a": a, "b": b})
    assert got.dtype == np.float64 and np.isfinite(got).all()
    assert np.array_equal(got, want)  # 1 + 1e-12 too: float32 would give 1.0


@settings(max_examples=examples(25), deadline=None)
@given(
    st.lists(st.sampled_from(BINARY + UNARY), min_size=1, max_size=4),
    st.integers(0, 2**32 - 1),
    st.sampled_from((1e-200, 1e-30, 1.0, 1e30, 1e200)),
)
def test_double_chains_equal_onnxruntime(ops: list[str], seed: int, scale: float) -> None:
    """Chains of double elementwise ops at magnitudes float32 cannot hold (or holds only
    roughly) equal onnxruntime's float64 results, inf and NaN where it has them, to 1e-10:
    float32 is ~6e-8 off at best, while two float64 libraries differ by an ulp or two per op,
    which a chain amplifies by its condition number (Exp(Exp(Exp(x))) near 1.5e90 multiplies
    the last input's error by its argument, ~208: 1.7e-13 apart, drawn by the explore profile).
    kills: nf programs always compiled in float32."""
    rng = np.random.default_rng(seed)
    feeds = {"a": rng.standard_normal((2, 3)) * scale, "b": rng.standard_normal((2, 3)) * scale}
    nodes, last = [], "a"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [last, "b"] if op in BINARY else [last], [out]))
        last = out
    if not any(op in BINARY for op in ops):
        del feeds["b"]
    with tempfile.TemporaryDirectory() as tmp:  # (hypothesis: no function-scoped tmp_path)
        inputs = dict.fromkeys(feeds, TensorProto.DOUBLE)
        path = model_file(Path(tmp), nodes, inputs, TensorProto.DOUBLE, (2, 3))
        with np.errstate(all="ignore"):
            got, want = both(path, feeds)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=0, equal_nan=True)


def test_a_double_table_read_by_float_ids() -> None:
    """Token ids are f32 (nf's convention), the table they read f64: the program declares f64
    values, so it runs in float64 (the ids are exact either way).
    kills: the declared type read from the arguments only (inf)."""
    module = nanoir.parse(
        "func.func @main(%ids: tensor<2xf32>) -> tensor<2x1xf64> {\n"
        '  %t = nf.constant "t" dense<[[1.0e+300], [1.0]]> : tensor<2x1xf64>\n'
        "  %y = nf.embedding %ids, %t : (tensor<2xf32>, tensor<2x1xf64>) -> tensor<2x1xf64>\n"
        "  func.return %y : tensor<2x1xf64>\n}\n"
    )
    (y,) = nanoir.run(module, np.array([0, 1], dtype=np.float32))
    assert y.dtype == np.float64 and y.tolist() == [[1e300], [1.0]]


def test_float_programs_keep_float32_and_dtype_still_overrides(tmp_path: Path) -> None:
    """An f32 program runs in float32 as before; ``dtype=`` chooses either way (the API
    kept). kills: every nf program run in float64; dtype= ignored for f64 programs."""
    node = helper.make_node("Add", ["a", "a"], ["y"])
    f32 = model_file(tmp_path, [node], {"a": TensorProto.FLOAT}, TensorProto.FLOAT, (2,))
    module = nanoir.load(f32)
    (y,) = nanoir.run(module, np.array([1.0, 2.0]))
    assert y.dtype == np.float32
    (y,) = nanoir.run(module, np.array([1.0, 2.0]), dtype=np.float64)
    assert y.dtype == np.float64
    f64 = model_file(tmp_path, [node], {"a": TensorProto.DOUBLE}, TensorProto.DOUBLE, (2,))
    with np.errstate(over="ignore"):  # 1e200 -> float32: inf, as asked
        (y,) = nanoir.run(nanoir.load(f64), np.array([1e200, 1.0]), dtype=np.float32)
    assert y.dtype == np.float32 and np.isinf(y[0])


def test_half_programs_run_in_float32() -> None:
    """f16 programs run in float32 and return float32 (float32 holds every f16 value, so
    the inputs are exact; the results are not rounded back to f16: documented in
    declared_float_dtype). kills: f16 programs run in float16 (65504 + 65504 = inf)."""
    module = nanoir.parse(
        "func.func @main(%a: tensor<2xf16>) -> tensor<2xf16> {\n"
        "  %y = nf.add %a, %a : (tensor<2xf16>, tensor<2xf16>) -> tensor<2xf16>\n"
        "  func.return %y : tensor<2xf16>\n}\n"
    )
    (y,) = nanoir.run(module, np.array([65504.0, 1.0], dtype=np.float16))
    assert y.dtype == np.float32 and y.tolist() == [131008.0, 2.0]
    assert declared_float_dtype(module.body.block.first_op) == np.float32


def test_quantized_programs_stay_float64_and_the_streamer_follows() -> None:
    """nq programs run in float64 whatever they declare (the exactness reference), and the
    streaming executor compiles an f64 program in float64 as ``run`` does.
    kills: the Streamer keeping float32 for f64 programs."""
    module = nanoir.parse(
        "func.func @main(%x: tensor<?x1x4x2xf64>) -> tensor<?x1x4x2xf64> {\n"
        "  %y = nf.add %x, %x : (tensor<?x1x4x2xf64>, tensor<?x1x4x2xf64>) -> tensor<?x1x4x2xf64>\n"
        "  func.return %y : tensor<?x1x4x2xf64>\n}\n"
    )
    assert compile_module(module).dtype == np.float64
    x = np.full((1, 1, 4, 2), 1e200)
    s = Streamer(module)
    rows = [y for chunk in np.split(x, 4, axis=2) for y in s.push(chunk) if y is not None]
    rows += [y for y in s.flush() if y is not None]
    got = np.concatenate(rows, axis=2)
    assert got.dtype == np.float64 and np.array_equal(got, x + x)
    q = nanoir.parse(
        "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %y = nq.fake_quant %x {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<2xf32>\n"
        "  func.return %y : tensor<2xf32>\n}\n"
    )
    assert compile_module(q).dtype == np.float64
