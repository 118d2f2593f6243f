"""Reflect pads at least as wide as their dim are refused (issue 31 §2 item 10): torch and
onnxruntime refuse them, NumPy's ``reflect`` reflects again. Every small case is tried, and
the verifiers accept exactly the reflections the oracles accept (torch for ``nf.pad``;
onnxruntime, whose ``Pad`` crops first as ``nh.pad`` does, for negative pads), with the
oracles' values. Where nothing reflects (zero pads, crops) both are accepted: torch refuses
any empty dim and onnxruntime some crops to fewer than 2 rows, neither a reflection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from nanoir.runtime.interpreter import ExecutionError

import nanoir

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

SIZES = (0, 1, 2, 3, 4)


def nf_pad(size: int, begin: int, end: int) -> str:
    out = size + begin + end
    t, u = f"tensor<1x1x{size}xf32>", f"tensor<1x1x{out}xf32>"
    return (
        f"func.func @main(%x: {t}) -> {u} {{\n"
        f'  %y = nf.pad %x {{pads = array<i64: 0, 0, {begin}, 0, 0, {end}>, mode = "reflect"}}'
        f" : {t} -> {u}\n  func.return %y : {u}\n}}\n"
    )


def nh_pad(size: int, begin: int, end: int) -> str:
    out = size + begin + end
    t = f"tensor<1x1x{size}xi8, #nh.fixed<0, BCM>>"
    u = f"tensor<1x1x{out}xi8, #nh.fixed<0, BCM>>"
    return (
        f"func.func @main(%x: {t}) -> {u} {{\n"
        f'  %y = nh.pad %x {{pads = array<i64: 0, 0, {begin}, 0, 0, {end}>, mode = "reflect"}}'
        f" : {t} -> {u}\n  func.return %y : {u}\n}}\n"
    )


def parsed(text: str) -> object | None:
    """The module, or None when the verifier refuses it."""
    try:
        return nanoir.parse(text)
    except nanoir.Error as e:  # the verifier's message, located
        assert "reflect pads" in str(e), e
        return None


def torch_reflect(x: np.ndarray, begin: int, end: int) -> np.ndarray | None:
    try:
        return torch.nn.functional.pad(torch.from_numpy(x), (begin, end), mode="reflect").numpy()
    except (RuntimeError, ValueError):
        return None


def ort_reflect(x: np.ndarray, begin: int, end: int) -> np.ndarray | None:
    h = onnx.helper
    graph = h.make_graph(
        [h.make_node("Pad", ["x", "p"], ["y"], mode="reflect")],
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [h.make_tensor("p", onnx.TensorProto.INT64, [6], [0, 0, begin, 0, 0, end])],
    )
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its refusal is the answer, not news
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    try:
        session = ort.InferenceSession(model.SerializeToString(), options)
        return session.run(None, {"x": x})[0]
    except Exception:  # onnxruntime's refusal (its Fail / InvalidArgument)
        return None


def test_nf_pad_refuses_what_torch_refuses() -> None:
    """kills: no reflect check in nf.pad's verifier; the bound off by one (pad <= size)."""
    for size, begin, end in itertools.product(SIZES, range(5), range(5)):
        x = np.arange(size, dtype=np.float32).reshape(1, 1, size) + 1
        module = parsed(nf_pad(size, begin, end))
        if max(begin, end) == 0:  # nothing reflects (torch refuses any empty dim)
            assert module is not None
            continue
        want = torch_reflect(x, begin, end)
        assert (module is None) == (want is None), (size, begin, end)
        if module is not None:
            (got,) = nanoir.run(module, x)
            assert np.array_equal(got, want), (size, begin, end)


def test_nh_pad_refuses_what_onnxruntime_refuses_after_cropping() -> None:
    """Negative pads crop first (ONNX ``Pad``), so the bound is the cropped size.
    kills: no reflect check in nh.pad's verifier; the bound taken before cropping."""
    for size, begin, end in itertools.product(SIZES, range(-2, 5), range(-2, 5)):
        if size + min(begin, 0) + min(end, 0) < 0:
            continue  # crops more than the dim has: refused for that, by both
        x = np.arange(size, dtype=np.int8).reshape(1, 1, size) + 1
        module = parsed(nh_pad(size, begin, end))
        if max(begin, end) <= 0:  # a crop, nothing reflects (onnxruntime refuses some)
            assert module is not None
            continue
        want = ort_reflect(x.astype(np.float32), begin, end)
        assert (module is None) == (want is None), (size, begin, end)
        if module is not None:
            (got,) = nanoir.run(module, x, raw=True)
            assert np.array_equal(got, want), (size, begin, end)


def test_a_dynamic_dim_is_checked_when_the_program_runs() -> None:
    """The verifier cannot see a dynamic dim's size; the kernel refuses it at run time, naming
    the op. kills: the kernel's check (NumPy reflects again: [2, 1, 2, 1, 2])."""
    t = "tensor<?x2xf32>"
    module = nanoir.parse(
        f"func.func @main(%x: {t}) -> {t} {{\n"
        f'  %y = nf.pad %x {{pads = array<i64: 3, 0, 0, 0>, mode = "reflect"}} : {t} -> {t}\n'
        f"  func.return %y : {t}\n}}\n"
    )
    (ok,) = nanoir.run(module, np.ones((4, 2), dtype=np.float32))  # 4 rows: 3 may reflect
    assert ok.shape == (7, 2)
    with pytest.raises(ExecutionError, match=r"nf.pad failed.*reflect pads \(3, 0\) on dim 0"):
        nanoir.run(module, np.ones((3, 2), dtype=np.float32))
