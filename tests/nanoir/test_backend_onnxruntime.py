"""``nanoir.run(..., backend="onnxruntime")`` and ``nanoir-run --backend onnxruntime``: an nh
program run as integer ONNX gives the NumPy executor's values and codes; the session is built
once per module and rebuilt when the module changes; misuse is one clear error."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from nanoir.dialects import nh
from nanoir.runtime.interpreter import run as numpy_run
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.rewriter import Rewriter

import nanoir
from nanoir import backends
from nanoir.cli.run import main
from nanoir.errors import ArgumentError, Error
from nanoir.testing import make_test_model


@pytest.fixture(scope="module")
def kws() -> tuple[ModuleOp, np.ndarray]:
    torch.manual_seed(0)
    model = make_test_model("KWSNet").eval()
    x = model.make_example_input(3)
    hw = nanoir.compile_model(model, (x,), [(x,)], stop="nh", rounding="trunc")
    return hw, x.numpy()


def test_values_and_codes_equal_numpy(kws: tuple[ModuleOp, np.ndarray]) -> None:
    hw, x = kws
    for raw in (False, True):
        want = numpy_run(hw, x, raw=raw)
        got = nanoir.run(hw, x, raw=raw, backend="onnxruntime")
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w)
    assert np.array_equal(nanoir.run(hw, x)[0], numpy_run(hw, x)[0])  # default: numpy


def test_the_session_is_built_once_per_module(
    kws: tuple[ModuleOp, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    hw, x = kws
    from nanoir.grammar.onnx import integer

    exports: list[int] = []
    real = integer.export_model

    def counting(module: ModuleOp) -> Any:
        exports.append(1)
        return real(module)

    monkeypatch.setattr(integer, "export_model", counting)
    backends._SESSIONS.pop(hw, None)
    for _ in range(3):
        nanoir.run(hw, x[:1], backend="onnxruntime")
    assert len(exports) == 1


def test_a_module_changed_in_place_gets_a_new_session(kws: tuple[ModuleOp, np.ndarray]) -> None:
    """A stale session would keep the old weights: the changed module's ONNX run must follow
    the NumPy run of the changed module, whether an op was replaced or a property set in place.
    Mutants that fail it: no invalidation; ops compared but not their attributes."""
    hw, x = kws
    module = hw.clone()
    before = nanoir.run(module, x, raw=True, backend="onnxruntime")
    const = next(
        op
        for op in module.walk()
        if isinstance(op, nh.ConstantOp) and op.value.get_type().get_shape()[0] > 1
    )
    codes = np.array(const.value.get_values()).reshape(const.value.get_type().get_shape())
    flipped = DenseIntOrFPElementsAttr.from_list(const.value.get_type(), (-codes).ravel().tolist())
    new = const.clone()
    new.properties["value"] = flipped
    Rewriter.replace_op(const, new)
    after = nanoir.run(module, x, raw=True, backend="onnxruntime")
    assert np.array_equal(after[0], numpy_run(module, x, raw=True)[0])
    assert not np.array_equal(after[0], before[0])
    # A property set in place (the op kept) counts too: back to the first weights.
    new.properties["value"] = const.value
    again = nanoir.run(module, x, raw=True, backend="onnxruntime")
    assert np.array_equal(again[0], before[0])


def test_misuse_is_one_clear_error(kws: tuple[ModuleOp, np.ndarray]) -> None:
    hw, x = kws
    with pytest.raises(ArgumentError, match="unknown backend 'tvm'"):
        nanoir.run(hw, x, backend="tvm")
    with pytest.raises(ArgumentError, match="dtype= chooses the float type"):
        nanoir.run(hw, x, dtype=np.float64, backend="onnxruntime")
    with pytest.raises(ArgumentError, match="takes 1 inputs, got 2"):
        nanoir.run(hw, x, x, backend="onnxruntime")
    with pytest.raises(ArgumentError, match="runs a module"):
        nanoir.run(next(iter(hw.body.block.ops)), x, backend="onnxruntime")
    nf = nanoir.parse(
        "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %r = nf.relu %x : tensor<2xf32>\n  func.return %r : tensor<2xf32>\n}\n"
    )
    with pytest.raises(ArgumentError, match="at the nf level: lower it first"):
        nanoir.run(nf, np.zeros(2, np.float32), backend="onnxruntime")


def test_missing_onnxruntime_is_named(
    kws: tuple[ModuleOp, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    hw, x = kws
    real_import = builtins.__import__

    def no_ort(name: str, *args: Any, **kw: Any) -> Any:
        if name == "onnxruntime":
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ort)
    module = hw.clone()  # no cached session
    with pytest.raises(Error, match="pip install onnxruntime"):
        nanoir.run(module, x, backend="onnxruntime")


def test_cli_backend(
    kws: tuple[ModuleOp, np.ndarray], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hw, x = kws
    prog, xin = tmp_path / "hw.mlir", tmp_path / "x.npy"
    nanoir.save(hw, prog)
    np.save(xin, x)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    assert main([str(prog), "-i", str(xin), "-o", str(a)]) == 0
    assert main([str(prog), "-i", str(xin), "-o", str(b), "--backend", "onnxruntime"]) == 0
    assert np.array_equal(np.load(a), np.load(b))
    c = tmp_path / "c.npy"
    for extra, message in (
        (["--stream", "-o", str(c)], "--stream runs on the numpy backend"),
        (["--report"], "--report runs on the numpy backend"),
        (["--dtype", "float64", "-o", str(c)], "--dtype chooses the float type"),
    ):
        rc = main([str(prog), "-i", str(xin), "--backend", "onnxruntime", *extra])
        assert rc != 0
        assert message in capsys.readouterr().err
        assert not c.exists()
