"""Issue 19, items 5 and 6: what the ONNX reader refuses to read or compute.

- External data is read only from the model's folder: a model read from stdin or from bytes
  with no folder has none, and its external tensors are refused, never looked for in the
  working directory.
- The constant folder bounds its work before computing: all of one model's folded results
  hold at most `fold_budget(file size)` bytes (16 times the file, at least 32 MiB; issue 32
  replaced the fixed 2^20 elements per result), a shape operand at most 64 entries. Hostile
  files of a few hundred KB that asked for gigabytes are refused naming the node; the bound is
  checked on the work (tracemalloc's peak of the refusal), not on a clock.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from nanoir.grammar.onnx.fold import FOLD_FLOOR, MAX_SHAPE_ENTRIES, fold_budget
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir

MiB = 1 << 20


def model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    x_shape: list[int] = [2, 3],  # noqa: B006
) -> onnx.ModelProto:
    """`y = Add(x, w)` after `nodes` (whose results nothing needs to read)."""
    graph = helper.make_graph(
        [*nodes, helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1.0, -2.0, 4.0], np.float32), "w"), *inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


X = np.arange(6, dtype=np.float32).reshape(2, 3)
WANT = X + np.array([1.0, -2.0, 4.0], np.float32)


# ---------------------------------------------------------------------------------------
# 5. External data: from the model's folder only
# ---------------------------------------------------------------------------------------


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """`m.onnx` with its initializer 'w' in `w.bin` beside it."""
    path = tmp_path / "m.onnx"
    onnx.save_model(model([]), path, save_as_external_data=True, location="w.bin", size_threshold=0)
    assert (tmp_path / "w.bin").exists()
    return path


def test_external_data_beside_a_file_is_read(external: Path) -> None:
    (y,) = nanoir.run(nanoir.load(external), X)
    np.testing.assert_array_equal(y, WANT)


def test_bytes_with_external_data_and_no_folder_are_refused(
    external: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The working directory holds `w.bin`, yet bytes read with no folder are refused, naming
    the tensor and its location. Mutant killed: no check (the tensor was read from the working
    directory and the model computed `WANT`)."""
    monkeypatch.chdir(external.parent)
    with pytest.raises(OnnxImportError, match=r"tensor 'w' is stored as external data \('w.bin'\)"):
        import_onnx_bytes(external.read_bytes(), "<bytes>")


def test_an_external_constant_node_tensor_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Constant node's tensor stored as external data is refused like an initializer.
    Mutant killed: checking the initializers only."""
    (tmp_path / "c.bin").write_bytes(np.ones(3, np.float32).tobytes())
    tensor = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[3])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "c.bin"), ("offset", "0"), ("length", "12")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    node = helper.make_node("Constant", [], ["c"], name="const", value=tensor)
    m = model([node, helper.make_node("Add", ["x", "c"], ["unused"], name="use")])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OnnxImportError, match=r"tensor 'c' is stored as external data"):
        import_onnx_bytes(m.SerializeToString())


def run_opt(args: list[str], stdin: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from nanoir.cli.opt import main; sys.exit(main())"
    with stdin.open("rb") as f:
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            stdin=f,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def test_nanoir_opt_from_stdin_refuses_external_data(external: Path) -> None:
    """`nanoir-opt --input-format=onnx < m.onnx` in the model's folder (which also holds a
    file named `stdin`, the name nanoir-opt gives its input): one error line naming the
    tensor, no traceback, no output. By path, the same model reads. Mutants killed: no check
    in the reader; nanoir-opt taking the folder of an existing file named like its input."""
    (external.parent / "stdin").write_bytes(b"")
    done = run_opt(["--input-format=onnx"], external, external.parent)
    assert done.returncode != 0
    assert "tensor 'w' is stored as external data" in done.stderr
    assert "Traceback" not in done.stderr and "nf.add" not in done.stdout
    by_path = run_opt([str(external)], external, external.parent)
    assert by_path.returncode == 0 and "nf.add" in by_path.stdout


# ---------------------------------------------------------------------------------------
# 6. The constant folder's bounds
# ---------------------------------------------------------------------------------------


def const_of_shape(name: str, dtype: type = np.int64) -> onnx.NodeProto:
    """`ConstantOfShape` of ones, of the shape `shape_const(name, ...)` gives."""
    value = numpy_helper.from_array(np.ones(1, dtype), "v")
    return helper.make_node("ConstantOfShape", [f"{name}_shape"], [name], name=name, value=value)


def shape_const(name: str, dims: list[int]) -> onnx.NodeProto:
    return helper.make_node(
        "Constant",
        [],
        [f"{name}_shape"],
        name=f"{name}_c",
        value=numpy_helper.from_array(np.array(dims, np.int64), "t"),
    )


def refused(m: onnx.ModelProto, message: str, peak_mib: int = 64) -> None:
    """The model is refused with `message`, and reading it allocated at most `peak_mib` MiB
    (the work is bounded before computing: the unbounded fold needs gigabytes)."""
    data = m.SerializeToString()
    tracemalloc.start()
    try:
        with pytest.raises(OnnxImportError, match=message) as info:
            import_onnx_bytes(data, "hostile.onnx")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(info.value, nanoir.Error)
    assert peak < peak_mib * MiB, f"peak {peak / MiB:.0f} MiB"


def test_a_concat_of_one_constant_2000_times_is_refused() -> None:
    """2,000 x 64 Ki int64 (1 GiB) from a 64 Ki ConstantOfShape: refused at the Concat, before
    concatenating. Mutants killed: no bound on folding, and the bound checked on the computed
    result instead (same message, peak 1,001 MiB)."""
    nodes = [shape_const("c", [1 << 16]), const_of_shape("c")]
    nodes.append(helper.make_node("Concat", ["c"] * 2000, ["cat"], name="cat", axis=0))
    refused(
        model(nodes),
        r"'cat' \(Concat\): it computes from constants only .* its constant result "
        r"\(1048576000 bytes\)",
    )


def test_a_gather_of_64ki_indices_is_refused() -> None:
    """A Gather of 64 Ki indices (a 512 KiB file) into a `[256, 4096]` constant asks for
    2^28 elements: refused at the Gather. Mutants killed: Gather's size taken as its data's,
    and the bound checked on the computed result (same message, peak 258 MiB)."""
    nodes = [shape_const("d", [256, 4096]), const_of_shape("d", np.int8)]
    nodes.append(helper.make_node("Gather", ["d", "idx"], ["g"], name="gather", axis=0))
    idx = numpy_helper.from_array(np.zeros(1 << 16, np.int64), "idx")
    refused(model(nodes, [idx]), r"'gather' \(Gather\): .*its constant result \(268435456 bytes\)")


def test_a_constant_of_shape_of_2_24_as_a_reshape_shape_is_refused() -> None:
    """`ConstantOfShape([2^24])` of int64 ones (128 MiB) used as a Reshape's shape: refused at
    the ConstantOfShape, beyond the 32 MiB a small file may fold into."""
    nodes = [shape_const("s", [1 << 24]), const_of_shape("s")]
    nodes.append(helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"))
    refused(model(nodes), r"'s' \(ConstantOfShape\): .*its constant result \(134217728 bytes\)")


@pytest.mark.parametrize("op_type", ["Reshape", "Expand", "Tile"])
def test_a_shape_operand_of_65_entries_is_refused(op_type: str) -> None:
    """A shape operand of MAX_SHAPE_ENTRIES + 1 entries is refused naming the node; one of
    MAX_SHAPE_ENTRIES is not refused for its length. Mutants killed: no shape-operand bound,
    `>=` for `>`."""
    assert MAX_SHAPE_ENTRIES == 64
    ones = numpy_helper.from_array(np.ones(65, np.int64), "shape")
    node = helper.make_node(op_type, ["x", "shape"], ["r"], name="big")
    refused(model([node], [ones]), rf"'big' \({op_type}\): its shape operand 'shape' has 65")
    if op_type == "Reshape":
        dims = np.ones(64, np.int64)
        dims[-1] = 6
        fits = numpy_helper.from_array(dims, "shape")
        node = helper.make_node("Reshape", ["x", "shape"], ["r"], name="big")
        import_onnx_bytes(model([node], [fits]).SerializeToString())  # reads


def test_a_constant_of_shape_with_65_dims_is_refused() -> None:
    nodes = [shape_const("s", [1] * 65), const_of_shape("s")]
    refused(model(nodes), r"'s' \(ConstantOfShape\): its shape operand 's_shape' has 65")


def test_folds_of_exactly_the_budget_are_read() -> None:
    """The budget is inclusive: a small file folds exactly FOLD_FLOOR bytes (two int8 fills
    of half of it), and one byte more is refused, naming the node that passes it. Mutants
    killed: `>=` for `>`, no running total (each result checked alone)."""
    half = FOLD_FLOOR // 2
    nodes = [shape_const("a", [half]), const_of_shape("a", np.int8)]
    nodes += [shape_const("b", [half]), const_of_shape("b", np.int8)]
    data = model(nodes).SerializeToString()
    assert fold_budget(len(data)) == FOLD_FLOOR
    (y,) = nanoir.run(import_onnx_bytes(data), X)
    np.testing.assert_array_equal(y, WANT)
    nodes += [shape_const("c", [1]), const_of_shape("c", np.int8)]
    refused(model(nodes), r"'c' \(ConstantOfShape\).*would bring the model's folded", 64)
