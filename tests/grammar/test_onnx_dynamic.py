"""Issue 32 §2: dynamic dims as real exporters write them, and static input shapes.

PaddleOCR's recognizer is declared ``?x3x48x?`` and computes reshapes from ``Shape`` (its
``Reshape(x, Concat(Slice(Shape(x), 0, 2), [-1]))``); torch writes ``Gather(Shape(x), 0)``.
Where such a shape only feeds reshapes that keep the batch, the batch stays dynamic; any
other use of a dynamic dim is refused naming the dim and how to give static shapes
(``nanoir.load(path, input_shapes=...)``, ``--input-shape`` on nanoir-opt and nanoir-run).
Oracle: onnxruntime on the same file at several batch sizes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

RNG = np.random.default_rng(0)
I64 = np.int64


def model(
    nodes: list[onnx.NodeProto],
    x_shape: list[int | str],
    consts: dict[str, np.ndarray],
    y_shape: list[int | str] | None = None,
) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def paddle_recognizer_head(x_shape: list[int | str]) -> bytes:
    """Conv, then PaddleOCR's sequence head: `Reshape(c, Concat(Slice(Shape(c), 0, 2), [-1]))`
    (Shape cast to int32 and back, as paddle2onnx writes it), Transpose, MatMul, Softmax."""
    consts = {
        "w": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "zero": np.array([0], I64),
        "two": np.array([2], I64),
        "minus1": np.array([-1], np.int32),
        "fc": RNG.standard_normal((4, 5)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["c"], ["shape"]),
        helper.make_node("Cast", ["shape"], ["shape32"], to=TensorProto.INT32),
        helper.make_node("Slice", ["shape32", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "minus1"], ["dims32"], axis=0),
        helper.make_node("Cast", ["dims32"], ["dims"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["c", "dims"], ["seq"]),
        helper.make_node("Transpose", ["seq"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["t", "fc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    return model(nodes, x_shape, consts)


def run_ort(data: bytes, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_a_shape_that_keeps_the_batch_leaves_it_dynamic() -> None:
    """`?x3x8x16`: the Shape feeds a Reshape keeping dim 0 (through Cast, Slice, Concat,
    Cast): read with the batch dynamic, equal to onnxruntime at batch 1 and 3. Kills: a
    Shape of a dynamic tensor refused (the issue), the batch entry read as a static 1."""
    data = paddle_recognizer_head(["N", 3, 8, 16])
    module = import_onnx_bytes(data, "rec.onnx")
    assert module.body.block.ops.first.args[0].type.get_shape()[0] < 0  # type: ignore[union-attr]
    for batch in (1, 3):
        x = RNG.standard_normal((batch, 3, 8, 16)).astype(np.float32)
        (got,) = nanoir.run(module, x)
        np.testing.assert_allclose(got, run_ort(data, x), rtol=1e-5, atol=1e-6)


def test_a_dynamic_width_is_refused_naming_it_and_input_shapes_read_it() -> None:
    """`?x3x8x?` (PaddleOCR's recognizer): the reshape merges the dynamic width: refused,
    naming the dim, the graph input's declared shape and the way out; with input_shapes
    (batch left dynamic) it reads and equals onnxruntime. Kills: input_shapes ignored."""
    data = paddle_recognizer_head(["N", 3, 8, "W"])
    with pytest.raises(OnnxImportError) as info:
        import_onnx_bytes(data, "rec.onnx")
    message = str(info.value)
    assert "graph input 'x' is declared [?, 3, 8, ?]" in message
    assert "input_shapes={'x': (1, 3, 8, 32)}" in message and "--input-shape x=1x3x8x32" in message
    module = import_onnx_bytes(data, "rec.onnx", input_shapes={"x": (None, 3, 8, 16)})
    x = RNG.standard_normal((2, 3, 8, 16)).astype(np.float32)
    np.testing.assert_allclose(nanoir.run(module, x)[0], run_ort(data, x), rtol=1e-5, atol=1e-6)


def test_torch_s_gather_of_the_batch_keeps_it() -> None:
    """torch's `x.view(x.size(0), -1)`: `Gather(Shape(x), 0)` -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["dims"], axis=0),
        helper.make_node("Reshape", ["x", "dims"], ["y"]),
    ]
    consts = {"zero": np.array(0, I64), "axes": np.array([0], I64), "minus1": np.array([-1], I64)}
    data = model(nodes, ["batch", 2, 3], consts)
    module = import_onnx_bytes(data)
    for batch in (1, 4):
        x = RNG.standard_normal((batch, 2, 3)).astype(np.float32)
        np.testing.assert_array_equal(nanoir.run(module, x)[0], run_ort(data, x))


def test_arithmetic_on_the_batch_is_refused_naming_the_dim() -> None:
    """`Reshape(x, [N * 2, -1])` merges the batch: refused naming `dim 0 of 'x'` and the
    way out. Kills: a product of a dynamic entry computed as if it were 1 or -1."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Mul", ["n", "two"], ["n2"]),
        helper.make_node("Unsqueeze", ["n2", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["dims"], axis=0),
        helper.make_node("Reshape", ["x", "dims"], ["y"]),
    ]
    consts = {
        "zero": np.array(0, I64),
        "two": np.array(2, I64),
        "axes": np.array([0], I64),
        "minus1": np.array([-1], I64),
    }
    data = model(nodes, ["N", 2, 3], consts)
    with pytest.raises(
        OnnxImportError, match=r"#2 \(Mul\): it computes with dim 0 of 'x' \[\?, 2, 3\]"
    ):
        import_onnx_bytes(data)
    module = import_onnx_bytes(data, input_shapes={"x": [2, 2, 3]})
    x = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(nanoir.run(module, x)[0], run_ort(data, x))


def test_resize_sizes_from_a_shape_keep_the_batch() -> None:
    """torch's `interpolate(size=...)`: Resize's sizes `Concat(Slice(Shape(x), 0, 2), [6, 8])`
    with a dynamic batch reads (the batch and channel entries keep their dims)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest"),
    ]
    consts = {"zero": np.array([0], I64), "two": np.array([2], I64), "hw": np.array([6, 8], I64)}
    data = model(nodes, ["N", 2, 3, 4], consts)
    module = import_onnx_bytes(data)
    x = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(nanoir.run(module, x)[0], run_ort(data, x))


def test_a_minus_one_declared_dim_is_dynamic() -> None:
    """Paddle's classifier declares its input `[-1, 3, ?, ?]` and its output `[-1, 2]`; with
    input_shapes giving batch 1 the graph computes `1x2`: a dynamic dim, not an error."""
    consts = {"w": RNG.standard_normal((2, 3)).astype(np.float32)}
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w"], ["y"], transB=1),
    ]
    data = model(nodes, [-1, 3, "H", "W"], consts, y_shape=[-1, 2])
    module = import_onnx_bytes(data, input_shapes={"x": (1, 3, 8, 8)})
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(nanoir.run(module, x)[0], run_ort(data, x), rtol=1e-5, atol=1e-6)
    assert import_onnx_bytes(data).body.block.ops.first.args[0].type.get_shape()[0] < 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"image": (1, 3, 8, 8)}, "input_shapes names 'image', which is no graph input"),
        ({"x": (1, 3, 8)}, "input_shapes gives 'x' 3 dims; the graph declares"),
        ({"x": (1, 4, 8, 8)}, "input_shapes gives 'x' dim 1 the size 4"),
    ],
)
def test_input_shapes_that_do_not_fit_the_file_are_refused(shapes: dict, message: str) -> None:
    data = paddle_recognizer_head(["N", 3, 8, "W"])
    with pytest.raises(OnnxImportError, match=message):
        import_onnx_bytes(data, input_shapes=shapes)


@pytest.mark.parametrize("bad", [[1, 3], {"x": "1x3"}, {"x": (1, -2)}, {"x": (1.5,)}, {3: (1,)}])
def test_input_shapes_of_the_wrong_type_are_argument_errors(bad: object) -> None:
    with pytest.raises(nanoir.Error, match="input_shapes"):
        import_onnx_bytes(paddle_recognizer_head(["N", 3, 8, "W"]), input_shapes=bad)  # type: ignore[arg-type]


def test_load_and_the_clis_take_input_shapes(tmp_path: Path) -> None:
    """`nanoir.load(path, input_shapes=...)`, `nanoir-opt --input-shape x=...` and
    `nanoir-run --input-shape x=...` read the recognizer head; a malformed spec and a spec for
    an .mlir input are one-line errors (exit 1)."""
    path = tmp_path / "rec.onnx"
    path.write_bytes(paddle_recognizer_head(["N", 3, 8, "W"]))
    module = nanoir.load(path, input_shapes={"x": (2, 3, 8, 16)})
    assert module.body.block.ops.first.args[0].type.get_shape() == (2, 3, 8, 16)  # type: ignore[union-attr]
    with pytest.raises(nanoir.Error, match="no .onnx file"):
        nanoir.load(tmp_path / "m.mlir", input_shapes={"x": (1,)})
    opt = [sys.executable, "-m", "nanoir.cli.opt", str(path), "--input-shape", "x=?x3x8x16"]
    done = subprocess.run(opt, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "tensor<?x3x8x16xf32>" in done.stdout
    x = RNG.standard_normal((2, 3, 8, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run = [sys.executable, "-m", "nanoir.cli.run", str(path), "--input-shape", "x=2x3x8x16"]
    run += ["-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")]
    done = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(
        np.load(tmp_path / "y.npy"), run_ort(path.read_bytes(), x), rtol=1e-5, atol=1e-6
    )
    bad = subprocess.run(opt[:-1] + ["x=1by3"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "expected NAME=D1xD2x..." in bad.stderr
    (tmp_path / "m.mlir").write_text("")
    mlir = [
        sys.executable,
        "-m",
        "nanoir.cli.opt",
        str(tmp_path / "m.mlir"),
        "--input-shape",
        "x=1",
    ]
    done = subprocess.run(mlir, capture_output=True, text=True, timeout=300)
    assert (
        done.returncode == 1 and "--input-shape gives the shapes of an .onnx input" in done.stderr
    )
