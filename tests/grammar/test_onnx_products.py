"""The ONNX reader's products (issue 30 §7): ``Div(x, c)`` by a constant that is no power of
two is ``Mul(x, 1/c)`` (the factor quantized like a weight; lower-to-hw refused the division:
"reciprocal is not a dyadic rational"), and torch's hardswish written out in the other forms
exporters use (the division before the product; ``Mul(x, HardSigmoid(x))`` with torch's alpha
and beta) is one ``nf.hardswish``. Paddle's SE gate (``HardSigmoid`` alpha 0.2, times another
tensor, or even times its own input) is not.

Each graph: nanoir's float program against onnxruntime (the oracle), the ops it reads, then
quantized, lowered, and nq == nh bit for bit.

Mutants seen to fail it (applied in place and restored):
- ``_reciprocal`` in ``forms.py`` returning None (divisions stay): test_division_by_a_constant
  (``Div(x, 6)`` stays; lower-to-hw refuses it);
- the division-first branch of ``_match_hard_swishes`` dropped: test_hardswish_forms
  ("x * (clip / 6)" reads as clamp, mul, mul);
- ``_fuse_gate``'s alpha check dropped: test_not_hardswish ("Paddle's gate on x": read as a
  hardswish, onnxruntime disagrees).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from nanoir.grammar.onnx.importer import import_onnx_bytes
from onnx import TensorProto, helper, numpy_helper

import nanoir

ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

F32 = np.float32
CONSTS = {
    "three": np.array(3.0, F32),
    "zero": np.array(0.0, F32),
    "six": np.array(6.0, F32),
    "sixth": np.array(1 / 6, F32),
}


def graph_model(nodes: list[onnx.NodeProto], consts: dict[str, np.ndarray]) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def ops_of(module: object) -> list[str]:
    return [
        op.name
        for op in module.walk()  # type: ignore[attr-defined]
        if op.name.startswith("nf.") and op.name != "nf.constant"
    ]


def checked(nodes: list[onnx.NodeProto], consts: dict[str, np.ndarray], seed: int = 0) -> object:
    """The module, after: float against onnxruntime, and nq == nh once quantized."""
    data = graph_model(nodes, consts)
    x = (np.random.default_rng(seed).standard_normal((2, 3, 4, 4)) * 4).astype(F32)
    (want,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    module = import_onnx_bytes(data, "products.onnx")
    (got,) = nanoir.run(module, x)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)
    nanoir.quantize(module, [x], progress=False)
    (nq,) = nanoir.run(module, x)
    (nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)  # type: ignore[attr-defined]
    assert np.asarray(nq, np.float64).tobytes() == np.asarray(nh, np.float64).tobytes()
    return module


@pytest.mark.parametrize(
    ("divisor", "divisions"),
    [(6.0, 0), (0.3, 0), (np.array([1.0, 3.0, 6.0]).reshape(1, 3, 1, 1), 0), (8.0, 1), (-0.25, 1)],
)
def test_division_by_a_constant(divisor: float | np.ndarray, divisions: int) -> None:
    consts = {"d": np.asarray(divisor, F32)}
    module = checked(
        [helper.make_node("Div", ["x", "d"], ["q"]), helper.make_node("Relu", ["q"], ["y"])],
        consts,
    )
    assert ops_of(module).count("nf.div") == divisions
    assert ops_of(module).count("nf.mul") == 1 - divisions


def _relu6_plus_3() -> list[onnx.NodeProto]:
    return [
        helper.make_node("Add", ["x", "three"], ["a"]),
        helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
    ]


HARDSWISH_FORMS = {
    "(x * clip) / 6": [
        *_relu6_plus_3(),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Div", ["m", "six"], ["y"]),
    ],
    "x * (clip / 6)": [
        *_relu6_plus_3(),
        helper.make_node("Div", ["c", "six"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["y"]),
    ],
    "(clip * 1/6) * x": [
        *_relu6_plus_3(),
        helper.make_node("Mul", ["sixth", "c"], ["s"]),
        helper.make_node("Mul", ["s", "x"], ["y"]),
    ],
    "x * HardSigmoid(x)": [
        helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["x", "h"], ["y"]),
    ],
    "HardSigmoid(x) * x": [
        helper.make_node("HardSigmoid", ["x"], ["h"], alpha=float(F32(1 / 6)), beta=0.5),
        helper.make_node("Mul", ["h", "x"], ["y"]),
    ],
}


@pytest.mark.parametrize("name", HARDSWISH_FORMS)
def test_hardswish_forms(name: str) -> None:
    assert ops_of(checked(HARDSWISH_FORMS[name], CONSTS)) == ["nf.hardswish"]


NOT_HARDSWISH = {
    "Paddle's gate on x": [
        helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["x", "h"], ["y"]),
    ],
    "Paddle's SE gate on another tensor": [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("HardSigmoid", ["x"], ["h"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["r", "h"], ["y"]),
    ],
    "torch's gate on another tensor": [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["r", "h"], ["y"]),
    ],
    "x * (clip / 5)": [
        *_relu6_plus_3(),
        helper.make_node("Div", ["c", "five"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["y"]),
    ],
}


@pytest.mark.parametrize("name", NOT_HARDSWISH)
def test_not_hardswish(name: str) -> None:
    module = checked(NOT_HARDSWISH[name], {**CONSTS, "five": np.array(5.0, F32)}, seed=1)
    assert "nf.hardswish" not in ops_of(module)
