"""Unsigned codes in ONNX QDQ (issue 20 section 4).

A `signed = false` fake-quant is standard QDQ with unsigned codes and zero point 0: uint4 for
2-4 bits, uint8 for 5-8, uint16 for 9-16, the same power-of-two scale; a width narrower than
its code type adds a Clip to the narrow range (as signed odd widths do). The reader maps
uint4/uint8/uint16 QDQ with zero point 0 back to `signed = false` and refuses a non-zero
zero point naming the node. Oracles: onnxruntime, and NumPy written here.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from nanoir.runtime.numerics.quant import RoundingMode
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import IntegerAttr, ModuleOp

import nanoir
from nanoir.testing.models import import_folded
from nanoir.testing.programs import BASE_KINDS, examples, random_nq_program

ort = pytest.importorskip("onnxruntime")

# onnxruntime 1.32 graph optimizers that fail on valid opset-21 QDQ (see test_onnx_export.py),
# and DoubleQDQPairsRemover: it merges Q(step 1) -> DQ -> Q(step 1/8) -> DQ into one pair at
# the fine step, so the coarse rounding is lost (measured here: 0.53125 where the chain gives
# sigmoid(0) = 0.5; with every optimizer off onnxruntime agrees with nanoir).
ORT_DISABLED = [
    "QDQPropagationTransformer",
    "ClipQuantRewrite",
    "ReluQuantRewrite",
    "QDQSelectorActionTransformer",
    "DoubleQDQPairsRemover",
]


def run_ort(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(
        data, providers=["CPUExecutionProvider"], disabled_optimizers=ORT_DISABLED
    )
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs, strict=True)))


def one_quantizer(bits: int, signed: bool, exp: int = 2) -> ModuleOp:
    extra = "" if signed else ", signed = false"
    return nanoir.parse(f"""
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {{
  %u = nq.fake_quant %x {{bits = {bits} : i64, exp = dense<{exp}> : tensor<1xi8>,
      rounding = #nq.rounding<half_even>{extra}}} : tensor<?x8xf32>
  func.return %u : tensor<?x8xf32>
}}""")


def zero_point_types(data: bytes) -> set[int]:
    model = onnx.load_model_from_string(data)
    return {t.data_type for t in model.graph.initializer if "zero" in t.name}


def numpy_fake_quant(x: np.ndarray, bits: int, exp: int, signed: bool) -> np.ndarray:
    """QuantizeLinear's half-to-even rounding, saturated to the nq code range."""
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return (np.clip(np.round(x.astype(np.float64) * 2.0**exp), lo, hi) / 2.0**exp).astype(
        np.float32
    )


UINT = {4: TensorProto.UINT4, 8: TensorProto.UINT8, 16: TensorProto.UINT16}
INT = {4: TensorProto.INT4, 8: TensorProto.INT8, 16: TensorProto.INT16}


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 7, 8, 12, 16])
def test_activation_qdq_equals_numpy_and_onnxruntime(bits: int, signed: bool) -> None:
    """Every width, both signs: onnxruntime == nanoir.run == NumPy element for element over
    inputs beyond both ends of the range; the zero point is uint for unsigned codes.
    Mutants killed (private copy): unsigned written with int codes (negative values survive,
    and the zero point type differs); the Clip kept only for 2-3 bits, as before this change
    (5, 7 and 12 bits saturate at the container's 255/127/32767: 5-bit signed was wrong too)."""
    module = one_quantizer(bits, signed)
    data = export_onnx_bytes(module)
    onnx.checker.check_model(onnx.load_model_from_string(data), full_check=True)
    width = 4 if bits <= 4 else 8 if bits <= 8 else 16
    assert zero_point_types(data) == {(INT if signed else UINT)[width]}
    x = np.linspace(-(2.0**bits), 2.0**bits, 64, dtype=np.float32).reshape(8, 8)
    x[0, :3] = [0.375, 0.625, 0.125]  # halves of a step at exp 2: half-to-even ties
    want = numpy_fake_quant(x, bits, 2, signed)
    (ours,) = nanoir.run(module, x)
    (theirs,) = run_ort(data, x)
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(theirs, want)
    back = import_onnx_bytes(data)
    np.testing.assert_array_equal(nanoir.run(back, x)[0], want)
    fqs = [op for op in back.walk() if isinstance(op, FakeQuantOp)]
    assert [op.is_signed for op in fqs] == [signed]


@pytest.mark.parametrize("bits", [4, 8, 16])
def test_full_width_unsigned_reads_back_as_it_was(bits: int) -> None:
    """import(export(m)) prints as m for the code types' own widths (narrower ones come back
    as the container's fake-quant and a clamp). Kills: the reader dropping `signed = false`."""
    module = one_quantizer(bits, signed=False)
    back = import_onnx_bytes(export_onnx_bytes(module))
    for op in back.walk():  # the reader's record of node names, which fresh IR has not
        for key in [k for k in op.attributes if k.startswith("ne.")]:
            del op.attributes[key]
    assert str(back) == str(module)


def test_unsigned_weights_are_uint_codes() -> None:
    """A constant's unsigned fake-quant (trunc: constants are written as nanoir's codes, any
    rounding) is a uint8 initializer read by DequantizeLinear; both runs equal NumPy."""
    w = np.array([[0.3, 1.7, 2.2], [0.0, 3.9, 0.6]], np.float32)
    module = nanoir.parse(f"""
func.func @main(%x: tensor<?x3xf32>) -> tensor<?x2xf32> {{
  %q = nq.fake_quant %x {{bits = 8 : i64, exp = dense<3> : tensor<1xi8>,
      rounding = #nq.rounding<half_even>}} : tensor<?x3xf32>
  %w = nf.constant "w" dense<{w.tolist()}> : tensor<2x3xf32>
  %wq = nq.fake_quant %w {{bits = 8 : i64, exp = dense<6> : tensor<1xi8>, signed = false}}
      : tensor<2x3xf32>
  %y = nf.linear %q, %wq : (tensor<?x3xf32>, tensor<2x3xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}}""")
    data = export_onnx_bytes(module)
    model = onnx.load_model_from_string(data)
    codes = {t.name: t for t in model.graph.initializer if t.name.endswith("codes")}
    assert [t.data_type for t in codes.values()] == [TensorProto.UINT8]
    (stored,) = [numpy_helper.to_array(t) for t in codes.values()]
    np.testing.assert_array_equal(stored, np.clip(np.trunc(w * 64), 0, 255))  # 3.9*64 > 255
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(4, 3)
    xq = np.clip(np.round(x * 8), -128, 127) / 8
    want = (xq @ (np.clip(np.trunc(w * 64), 0, 255) / 64).T).astype(np.float32)
    np.testing.assert_allclose(nanoir.run(module, x)[0], want, rtol=1e-6)
    np.testing.assert_array_equal(run_ort(data, x)[0], nanoir.run(module, x)[0])
    back = import_onnx_bytes(data)
    assert "signed = false" in str(back)
    np.testing.assert_array_equal(nanoir.run(back, x)[0], nanoir.run(module, x)[0])


def qdq_model(zero: np.ndarray, elem: int | None = None) -> bytes:
    zp = (
        numpy_helper.from_array(zero, "zp")
        if elem is None
        else helper.make_tensor("zp", elem, [], [int(zero)])
    )
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="ql"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0.25, np.float32), "s"), zp],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("zero", "elem", "bits"),
    [(np.array(0, np.uint8), None, 8), (np.array(0, np.uint16), None, 16), (0, 21, 4)],
)
def test_uint_qdq_written_by_others_reads_unsigned(zero: object, elem: int | None, bits: int):
    """uint8/uint16/uint4 QDQ with zero point 0 (not written by nanoir): `signed = false`
    at exp 2, equal to onnxruntime. Kills: the reader taking uint codes as signed."""
    data = qdq_model(np.asarray(zero), elem)
    module = import_onnx_bytes(data)
    (fq,) = [op for op in module.walk() if isinstance(op, FakeQuantOp)]
    assert (fq.bits.value.data, fq.is_signed) == (bits, False)
    x = np.linspace(-(2**bits) / 4, 2**bits / 4 + 3, 16, dtype=np.float32).reshape(2, 8)
    np.testing.assert_array_equal(nanoir.run(module, x)[0], run_ort(data, x)[0])
    np.testing.assert_array_equal(nanoir.run(module, x)[0], numpy_fake_quant(x, bits, 2, False))


@pytest.mark.parametrize(("zero", "elem"), [(np.array(3, np.uint8), None), (5, 21)])
def test_nonzero_uint_zero_point_is_refused_naming_the_node(zero: object, elem: int | None):
    with pytest.raises(OnnxImportError, match="'ql'.*zero point 'zp' is not 0"):
        import_onnx_bytes(qdq_model(np.asarray(zero), elem))


def test_nanoengine_flavour_refuses_unsigned() -> None:
    """NanoEngine's Q reads signed codes: writing an unsigned one there would be silently
    wrong, so it is an error naming the op."""
    module = one_quantizer(8, signed=False)
    (fq,) = [op for op in module.walk() if isinstance(op, FakeQuantOp)]
    fq.properties["rounding"] = RoundingModeAttr(RoundingMode.TRUNC)
    with pytest.raises(OnnxExportError, match="'u' has unsigned codes"):
        export_onnx_bytes(module, "nanoengine")


def test_quantize_unsigned_auto_model_runs_bit_for_bit_in_onnxruntime() -> None:
    """A test network quantized with `unsigned="auto"` at half_even: its ReLU outputs are
    uint8 QDQ; onnxruntime equals nanoir's nq run element for element, and the file reads
    back to the same outputs."""
    module, shape = import_folded("SampleNet")
    rng = np.random.default_rng(0)
    cal = [rng.standard_normal((4, *shape)).astype(np.float32) for _ in range(2)]
    nanoir.quantize(module, cal, rounding="half_even", unsigned="auto")
    assert "signed = false" in str(module)
    data = export_onnx_bytes(module)
    assert TensorProto.UINT8 in zero_point_types(data)
    x = rng.standard_normal((3, *shape)).astype(np.float32)
    want = nanoir.run(module, x)
    for got, w in zip(run_ort(data, x), want, strict=True):
        np.testing.assert_array_equal(got, w)
    for got, w in zip(nanoir.run(import_onnx_bytes(data), x), want, strict=True):
        np.testing.assert_array_equal(got, w)


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_random_programs_with_unsigned_quantizers(data: st.DataObject) -> None:
    """Random nq programs, every quantizer half_even, a drawn subset of them (b > 1) unsigned:
    the QDQ export is refused (an OnnxExportError naming the op) or runs in onnxruntime equal
    to nanoir's nq run element for element and reads back to the same outputs."""
    module, shape = random_nq_program(data.draw, kinds=BASE_KINDS)
    for op in module.walk():
        if isinstance(op, FakeQuantOp):
            op.properties["rounding"] = RoundingModeAttr(RoundingMode.HALF_EVEN)
            if op.bits.value.data == 1 and not isinstance(op.input.owner, nf.ConstantOp):
                op.properties["bits"] = IntegerAttr(2, 64)  # 1-bit activations have no QDQ
            if op.bits.value.data > 1 and data.draw(st.booleans()):
                op.set_signed(False)
    module.verify()
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal((2, *shape[1:]))
    x = (x * data.draw(st.sampled_from((0.5, 4.0)))).astype(np.float32)
    want = nanoir.run(module, x)
    try:
        blob = export_onnx_bytes(module)
    except OnnxExportError as e:
        assert str(e).startswith("onnx export")
        return
    for got, w in zip(run_ort(blob, x), want, strict=True):
        np.testing.assert_array_equal(got, w)
    for got, w in zip(nanoir.run(import_onnx_bytes(blob), x), want, strict=True):
        np.testing.assert_array_equal(got, w)
