"""Writing ONNX (`grammar/onnx/exporter.py`): standard QDQ (opset 21) and NanoEngine-PyTorch's
form (opset 17 + `t2e.qmodel::Q`).

Every written model passes `onnx.checker` and reads back (`nanoir.load`, the ONNX reader) to a
program whose outputs equal the original's bit for bit. The QDQ file runs in onnxruntime, and
its outputs equal nanoir's nq run element for element (measured: the test models at
half_even, and small programs covering int4 / 2-bit / 16-bit / per-channel activations, 1-bit
and trunc-rounded weights, and the Pad/Resize/Split/Concat/Clip/Transpose/GlobalAveragePool
translations). Quantizers a flavour cannot express are a `nanoir.Error` naming the op, and
no file is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes, export_onnx_model
from nanoir.grammar.onnx.importer import OnnxImportWarning, import_onnx_bytes
from nanoir.runtime.numerics.quant import RoundingMode
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import IntegerAttr

import nanoir
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program

ort = pytest.importorskip("onnxruntime")

HALF_EVEN = "rounding = #nq.rounding<half_even>"
ORT_DISABLED = [
    "QDQPropagationTransformer",
    "ClipQuantRewrite",
    "ReluQuantRewrite",
    "QDQSelectorActionTransformer",
    "DoubleQDQPairsRemover",
]


def ort_session(data: bytes) -> object:
    """An onnxruntime CPU session. Five of onnxruntime 1.32's graph optimizers fail on valid
    opset-21 QDQ, so they are disabled (see BENCHMARKS.md): QDQ propagation around a Reshape
    ('output_dtype INT8 does not match y_zero_point type UINT8', onnxruntime issue #27845),
    the Clip -> QuantizeLinear rewrite on int4 ('Unexpected data type ... y_zero_point of 22'),
    the Relu -> QuantizeLinear rewrite (drops a Relu before an int4 Q: wrong outputs) and the
    QDQ selector actions (give MaxPool int4 codes: INVALID_GRAPH) and the double-QDQ remover
    (merges Q(step 1) -> DQ -> Q(step 1/8) -> DQ into one pair at the fine step, losing the
    coarse rounding: wrong outputs)."""
    return ort.InferenceSession(
        data, providers=["CPUExecutionProvider"], disabled_optimizers=ORT_DISABLED
    )


def run_ort(data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    session = ort_session(data)
    names = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    return session.run(None, dict(zip(names, inputs)))  # type: ignore[attr-defined]


def assert_same_everywhere(module: object, *inputs: np.ndarray, tmp_path: Path) -> None:
    """QDQ: checker, ORT == nanoir's nq run element for element, file reads back bit for bit."""
    expected = nanoir.run(module, *inputs)
    data = export_onnx_bytes(module)  # type: ignore[arg-type]
    onnx.checker.check_model(onnx.load_model_from_string(data), full_check=True)
    got = run_ort(data, *inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e.astype(np.float32))
    path = tmp_path / "m.onnx"
    nanoir.save(module, path)  # type: ignore[arg-type]
    assert path.read_bytes() == data
    back = nanoir.run(nanoir.load(path), *inputs)
    for b, e in zip(back, expected):
        np.testing.assert_array_equal(b, e)


# ---------------------------------------------------------------------------------------
# The test models at half_even
# ---------------------------------------------------------------------------------------


def quantized_test_model(name: str, rounding: str, bits: int = 8) -> tuple[object, np.ndarray]:
    pytest.importorskip("torch")
    from nanoir.testing import import_folded

    module, shape = import_folded(name)
    rng = np.random.default_rng(0)
    nanoir.quantize(
        module,
        [rng.standard_normal((8, *shape)).astype(np.float32)],
        rounding=rounding,
        weight_bits=bits,
        bias_bits=bits,
        act_bits=bits,
    )
    return module, rng.standard_normal((5, *shape)).astype(np.float32)


@pytest.mark.parametrize(
    ("name", "bits"), [("LeNet5", 8), ("KWSNet", 8), ("MobileNetV2Stack", 8), ("LeNet5", 4)]
)
def test_test_models_qdq_equal_nq_in_onnxruntime(name: str, bits: int, tmp_path: Path) -> None:
    module, x = quantized_test_model(name, "half_even", bits)
    assert_same_everywhere(module, x, tmp_path=tmp_path)
    model = export_onnx_model(module)  # type: ignore[arg-type]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 21)]
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert "Q" not in ops
    batch = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param == "N"  # a dynamic batch stays symbolic


def test_test_model_nanoengine_flavour_reads_back(tmp_path: Path) -> None:
    module, x = quantized_test_model("LeNet5", "trunc")
    path = tmp_path / "ne.onnx"
    nanoir.save(module, path, onnx_flavor="nanoengine")  # type: ignore[arg-type]
    model = onnx.load(path)
    onnx.checker.check_model(model)
    assert sorted((o.domain, o.version) for o in model.opset_import) == [
        ("", 17),
        ("t2e.qmodel", 1),
    ]
    qs = [n for n in model.graph.node if n.op_type == "Q"]
    assert qs and all(n.domain == "t2e.qmodel" for n in qs)
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    inits = {i.name: i for i in model.graph.initializer}
    k_shapes = set()
    for n in qs:
        k = inits[n.input[1]]
        assert k.data_type == onnx.TensorProto.INT8
        k_shapes.add(tuple(k.dims))
        assert [a.name for a in n.attribute] == ["bit_len"]
    assert {(1,), (6, 1, 1, 1), (6,), (120, 1)} <= k_shapes  # torch-broadcast exponents
    expected = nanoir.run(module, x)
    back = nanoir.run(nanoir.load(path), x)
    np.testing.assert_array_equal(back[0], expected[0])


# ---------------------------------------------------------------------------------------
# Small programs: code widths, per-channel, 1-bit weights, op translations
# ---------------------------------------------------------------------------------------


def _dense(a: np.ndarray) -> str:
    return f"dense<{json.dumps(a.tolist())}>"


def widths_program() -> str:
    w = np.random.default_rng(1).standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = np.asarray([0.3, -0.7], np.float32)
    return f"""\
func.func @main(%x: tensor<?x3x4x4xf32>) -> (tensor<?x2x4x4xf32>, tensor<?x2x4x4xf32>) {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<[[[5]], [[4]], [[6]]]> : tensor<3x1x1xi8>, {HALF_EVEN}}} : tensor<?x3x4x4xf32>
  %w = nf.constant "w" {_dense(w)} : tensor<2x3x3x3xf32>
  %wq = nq.fake_quant %w {{bits = 1 : i64, exp = dense<[[[[-2]]], [[[-3]]]]> : tensor<2x1x1x1xi8>}} : tensor<2x3x3x3xf32>
  %b = nf.constant "b" {_dense(b)} : tensor<2xf32>
  %bq = nq.fake_quant %b {{bits = 3 : i64, exp = dense<[2, 3]> : tensor<2xi8>, rounding = #nq.rounding<floor>}} : tensor<2xf32>
  %y = nf.conv %xq, %wq, %bq {{pads = array<i64: 1, 1, 1, 1>}} : (tensor<?x3x4x4xf32>, tensor<2x3x3x3xf32>, tensor<2xf32>) -> tensor<?x2x4x4xf32>
  %yq = nq.fake_quant %y {{bits = 16 : i64, exp = dense<6> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x2x4x4xf32>
  %r = nf.relu %yq : tensor<?x2x4x4xf32>
  %rq = nq.fake_quant %r {{bits = 4 : i64, exp = dense<[[[1]], [[2]]]> : tensor<2x1x1xi8>, {HALF_EVEN}}} : tensor<?x2x4x4xf32>
  %s = nq.fake_quant %yq {{bits = 2 : i64, exp = dense<0> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x2x4x4xf32>
  func.return %rq, %s : tensor<?x2x4x4xf32>, tensor<?x2x4x4xf32>
}}
"""


DATA_MOVEMENT = f"""\
func.func @main(%x: tensor<?x2x5xf32>) -> (tensor<?x2x16xf32>, tensor<?x16x2xf32>, tensor<?x2x1xf32>) {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x2x5xf32>
  %p = nf.pad %xq {{pads = array<i64: 0, 0, 1, 0, 0, 2>, value = 0.5 : f64}} : tensor<?x2x5xf32> -> tensor<?x2x8xf32>
  %u = nf.upsample_nearest %p : tensor<?x2x8xf32> -> tensor<?x2x16xf32>
  %a, %b = nf.split %u {{axis = 1 : i64, sizes = array<i64: 1, 1>}} : (tensor<?x2x16xf32>) -> (tensor<?x1x16xf32>, tensor<?x1x16xf32>)
  %c = nf.concat %b, %a {{axis = 1 : i64}} : (tensor<?x1x16xf32>, tensor<?x1x16xf32>) -> tensor<?x2x16xf32>
  %cl = nf.clamp %c {{min = -1.0 : f64, max = 1.5 : f64}} : tensor<?x2x16xf32>
  %cq = nq.fake_quant %cl {{bits = 4 : i64, exp = dense<2> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x2x16xf32>
  %t = nf.transpose %c {{perm = array<i64: 0, 2, 1>}} : tensor<?x2x16xf32> -> tensor<?x16x2xf32>
  %g = nf.adaptive_avg_pool %u {{output_size = array<i64: 1>}} : tensor<?x2x16xf32> -> tensor<?x2x1xf32>
  %gq = nq.fake_quant %g {{bits = 8 : i64, exp = dense<5> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x2x1xf32>
  func.return %cq, %t, %gq : tensor<?x2x16xf32>, tensor<?x16x2xf32>, tensor<?x2x1xf32>
}}
"""


def test_code_widths_per_channel_and_constants(tmp_path: Path) -> None:
    """int8 per-channel, int16 and int4 per-channel activations; a 2-bit activation as Clip +
    int4; 1-bit weights (±1 int8 codes at scale 2**k) and floor-rounded 3-bit biases (codes
    computed by nanoir, so any rounding is exact)."""
    module = nanoir.parse(widths_program())
    x = np.random.default_rng(2).standard_normal((3, 3, 4, 4)).astype(np.float32) * 2
    assert_same_everywhere(module, x, tmp_path=tmp_path)
    model = export_onnx_model(module)
    inits = {i.name: i for i in model.graph.initializer}
    codes = onnx.numpy_helper.to_array(inits["w_codes"])
    assert codes.dtype == np.int8 and set(np.unique(codes)) <= {-1, 1}
    scale = onnx.numpy_helper.to_array(inits[model.graph.node[1].input[1]])
    types = {
        n.output[0]: inits[n.input[2]].data_type
        for n in model.graph.node
        if n.op_type == "QuantizeLinear"
    }
    assert sorted(types.values()) == sorted(
        [
            onnx.TensorProto.INT8,
            onnx.TensorProto.INT16,
            onnx.TensorProto.INT4,
            onnx.TensorProto.INT4,
        ]
    )
    assert scale.dtype == np.float32
    assert any(n.op_type == "Clip" for n in model.graph.node)  # the 2-bit range


def test_data_movement_translations(tmp_path: Path) -> None:
    """Pad, Resize, Split, Clip take constant inputs in opset 21; Transpose, Concat and
    GlobalAveragePool as the .ne rows write them."""
    module = nanoir.parse(DATA_MOVEMENT)
    x = np.random.default_rng(3).standard_normal((2, 2, 5)).astype(np.float32)
    assert_same_everywhere(module, x, tmp_path=tmp_path)
    ops = [n.op_type for n in export_onnx_model(module).graph.node]
    for op in ("Pad", "Resize", "Split", "Concat", "Clip", "Transpose", "GlobalAveragePool"):
        assert op in ops


def test_linear_of_a_rank_3_value_is_matmul_and_add(tmp_path: Path) -> None:
    w = np.random.default_rng(7).standard_normal((3, 6)).astype(np.float32)
    module = nanoir.parse(
        f"""\
func.func @main(%x: tensor<?x4x6xf32>) -> tensor<?x4x3xf32> {{
  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x4x6xf32>
  %w = nf.constant "w" {_dense(w)} : tensor<3x6xf32>
  %wq = nq.fake_quant %w {{bits = 8 : i64, exp = dense<[[6], [7], [5]]> : tensor<3x1xi8>}} : tensor<3x6xf32>
  %b = nf.constant "b" dense<[0.25, -0.5, 0.125]> : tensor<3xf32>
  %y = nf.linear %xq, %wq, %b : (tensor<?x4x6xf32>, tensor<3x6xf32>, tensor<3xf32>) -> tensor<?x4x3xf32>
  %yq = nq.fake_quant %y {{bits = 8 : i64, exp = dense<3> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x4x3xf32>
  func.return %yq : tensor<?x4x3xf32>
}}
"""
    )
    x = np.random.default_rng(8).standard_normal((2, 4, 6)).astype(np.float32)
    assert_same_everywhere(module, x, tmp_path=tmp_path)
    ops = [n.op_type for n in export_onnx_model(module).graph.node]
    assert "MatMul" in ops and "Gemm" not in ops
    _with_rounding(module, RoundingMode.TRUNC, None)
    with pytest.raises(OnnxExportError, match="rank-3 value has no NanoEngine op"):
        export_onnx_bytes(module, "nanoengine")


def test_returned_input_and_twice_returned_value_get_identity(tmp_path: Path) -> None:
    module = nanoir.parse(
        f"""\
func.func @main(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {{
  %q = nq.fake_quant %x {{bits = 8 : i64, exp = dense<3> : tensor<1xi8>, {HALF_EVEN}}} : tensor<?x4xf32>
  func.return %q, %q, %x : tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}}
"""
    )
    x = np.random.default_rng(4).standard_normal((3, 4)).astype(np.float32)
    assert_same_everywhere(module, x, tmp_path=tmp_path)


# ---------------------------------------------------------------------------------------
# Refusals: a clear nanoir.Error naming the op, and no file written
# ---------------------------------------------------------------------------------------


def one_quantizer(bits: int, rounding: str) -> str:
    return f"""\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {{
  %q = nq.fake_quant %x {{bits = {bits} : i64, exp = dense<3> : tensor<1xi8>, rounding = #nq.rounding<{rounding}>}} : tensor<?x4xf32>
  %r = nf.relu %q : tensor<?x4xf32>
  func.return %r : tensor<?x4xf32>
}}
"""


@pytest.mark.parametrize(
    ("bits", "rounding", "flavor", "message"),
    [
        (
            8,
            "trunc",
            "qdq",
            r"'q' of an activation rounds trunc.*QuantizeLinear rounds half to even.*onnx_flavor='nanoengine'",
        ),
        (8, "floor", "qdq", r"rounds floor.*onnx-nanoengine"),
        (4, "half_up", "qdq", r"rounds half_up"),
        (
            1,
            "half_even",
            "qdq",
            r"'q' is a 1-bit \(sign rule\) activation.*onnx_flavor='nanoengine'",
        ),
        (
            8,
            "half_even",
            "nanoengine",
            r"nanoengine flavour.*'q' rounds half_even.*truncates.*onnx_flavor='qdq'",
        ),
        (4, "floor", "nanoengine", r"rounds floor"),
    ],
)
def test_refusals_are_clear_and_write_nothing(
    bits: int, rounding: str, flavor: str, message: str, tmp_path: Path
) -> None:
    module = nanoir.parse(one_quantizer(bits, rounding))
    path = tmp_path / "m.onnx"
    with pytest.raises(OnnxExportError, match=message) as info:
        nanoir.save(module, path, onnx_flavor=flavor)
    assert isinstance(info.value, nanoir.Error)
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_trunc_and_1_bit_activations_write_in_the_nanoengine_flavour(tmp_path: Path) -> None:
    for bits in (1, 2, 8):
        module = nanoir.parse(one_quantizer(bits, "trunc"))
        path = tmp_path / f"m{bits}.onnx"
        nanoir.save(module, path, onnx_flavor="nanoengine")
        onnx.checker.check_model(onnx.load(path))
        x = np.random.default_rng(bits).standard_normal((6, 4)).astype(np.float32)
        np.testing.assert_array_equal(nanoir.run(nanoir.load(path), x)[0], nanoir.run(module, x)[0])


def test_nanoengine_flavour_per_channel_activation_k_is_1_c_1_1(tmp_path: Path) -> None:
    module = nanoir.parse(
        """\
func.func @main(%x: tensor<?x3x2x2xf32>) -> tensor<?x3x2x2xf32> {
  %q = nq.fake_quant %x {bits = 4 : i64, exp = dense<[[[1]], [[2]], [[3]]]> : tensor<3x1x1xi8>} : tensor<?x3x2x2xf32>
  func.return %q : tensor<?x3x2x2xf32>
}
"""
    )
    path = tmp_path / "pc.onnx"
    nanoir.save(module, path, onnx_flavor="nanoengine")
    model = onnx.load(path)
    (k,) = model.graph.initializer
    assert list(k.dims) == [1, 3, 1, 1] and k.data_type == onnx.TensorProto.INT8
    x = np.random.default_rng(5).standard_normal((2, 3, 2, 2)).astype(np.float32) * 4
    np.testing.assert_array_equal(nanoir.run(nanoir.load(path), x)[0], nanoir.run(module, x)[0])


def test_other_refusals() -> None:
    per_two_dims = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi8>, rounding = #nq.rounding<half_even>} : tensor<?x2x3xf32>
  func.return %q : tensor<?x2x3xf32>
}
"""
    with pytest.raises(OnnxExportError, match="varying along more than one dim"):
        export_onnx_bytes(nanoir.parse(per_two_dims))
    with pytest.raises(OnnxExportError, match="unknown flavour 'tflite'"):
        export_onnx_bytes(nanoir.parse(one_quantizer(8, "trunc")), "tflite")
    two_bit_per_channel = one_quantizer(2, "half_even").replace(
        "dense<3> : tensor<1xi8>", "dense<[1, 2, 3, 4]> : tensor<4xi8>"
    )
    with pytest.raises(OnnxExportError, match="2-bit activation quantizer with per-channel"):
        export_onnx_bytes(nanoir.parse(two_bit_per_channel))


# ---------------------------------------------------------------------------------------
# nanoir-opt --emit=onnx / onnx-nanoengine
# ---------------------------------------------------------------------------------------


def nanoir_opt(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "nanoir.cli.opt", *args], capture_output=True, timeout=120
    )


def test_cli_emit_onnx(tmp_path: Path) -> None:
    (tmp_path / "he.mlir").write_text(one_quantizer(8, "half_even"))
    (tmp_path / "tr.mlir").write_text(one_quantizer(8, "trunc"))
    done = nanoir_opt(str(tmp_path / "he.mlir"), "--emit=onnx", "-o", str(tmp_path / "he.onnx"))
    assert done.returncode == 0, done.stderr
    module = nanoir.parse(one_quantizer(8, "half_even"))
    assert (tmp_path / "he.onnx").read_bytes() == export_onnx_bytes(module)
    stdout = nanoir_opt(str(tmp_path / "tr.mlir"), "--emit=onnx-nanoengine")
    assert stdout.returncode == 0, stdout.stderr
    assert stdout.stdout == export_onnx_bytes(nanoir.parse(one_quantizer(8, "trunc")), "nanoengine")
    refused = nanoir_opt(str(tmp_path / "tr.mlir"), "--emit=onnx", "-o", str(tmp_path / "tr.onnx"))
    assert refused.returncode == 1
    assert b"rounds trunc" in refused.stderr and b"Traceback" not in refused.stderr
    assert not (tmp_path / "tr.onnx").exists()


README_ONNX = Path(__file__).resolve().parents[2] / "examples" / "readme_model.onnx"


def test_reference_export_round_trips_in_the_nanoengine_flavour(tmp_path: Path) -> None:
    """NanoEngine-PyTorch's own file (examples/readme_model.onnx): read, written back in its
    flavour (same op types in the same order, opset 17 + t2e.qmodel 1, IR version 8), read
    again to the same outputs; QDQ refuses its trunc activations."""
    with pytest.warns(OnnxImportWarning, match="training_mode=1"):
        module = nanoir.load(README_ONNX)
    path = tmp_path / "again.onnx"
    nanoir.save(module, path, onnx_flavor="nanoengine")
    ref, ours = onnx.load(README_ONNX), onnx.load(path)
    assert ours.ir_version == ref.ir_version == 8
    assert sorted((o.domain, o.version) for o in ours.opset_import) == sorted(
        (o.domain, o.version) for o in ref.opset_import
    )

    def op_types(model: onnx.ModelProto) -> list[str]:
        return [n.op_type for n in model.graph.node if n.op_type not in ("Constant", "Identity")]

    assert op_types(ours) == op_types(ref)
    x = np.random.default_rng(6).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(nanoir.run(nanoir.load(path), x)[0], nanoir.run(module, x)[0])
    with pytest.raises(OnnxExportError, match="rounds trunc"):
        nanoir.save(module, tmp_path / "qdq.onnx")
    assert not (tmp_path / "qdq.onnx").exists()


# ---------------------------------------------------------------------------------------
# Random programs of every op kind
# ---------------------------------------------------------------------------------------


def _with_rounding(module: object, mode: RoundingMode, one_bit_acts_to: int | None) -> None:
    """Every quantizer of `module` rounds `mode`; 1-bit activations become wider if asked."""
    for op in module.walk():  # type: ignore[attr-defined]
        if isinstance(op, FakeQuantOp):
            op.properties["rounding"] = RoundingModeAttr(mode)
            constant = isinstance(op.input.owner, nf.ConstantOp)
            if one_bit_acts_to and op.bits.value.data == 1 and not constant:
                op.properties["bits"] = IntegerAttr(one_bit_acts_to, 64)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_random_programs_write_or_refuse_and_read_back(data: st.DataObject) -> None:
    """Random nq programs (`ALL_KINDS`), all quantizers half_even (qdq; 1-bit activations made
    2-bit) or trunc (nanoengine): the export is an OnnxExportError, or a file that passes the
    checker and reads back to the same outputs bit for bit; the QDQ file runs in onnxruntime.
    (A PRelu with a per-channel slope is written with the slope reshaped to [C, 1, ...], as
    ONNX broadcasts, and reads back per channel: issue 19 item 3.)"""
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal((2, *shape[1:]))
    x = (x * data.draw(st.sampled_from((0.5, 4.0)))).astype(np.float32)
    for flavor, mode in (("qdq", RoundingMode.HALF_EVEN), ("nanoengine", RoundingMode.TRUNC)):
        _with_rounding(module, mode, 2 if flavor == "qdq" else None)
        want = nanoir.run(module, x)
        try:
            data_bytes = export_onnx_bytes(module, flavor)  # type: ignore[arg-type]
        except OnnxExportError as e:
            assert str(e).startswith("onnx export")
            continue
        model = onnx.load_model_from_string(data_bytes)
        onnx.checker.check_model(model)
        if flavor == "qdq":
            got = run_ort(data_bytes, x)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w.astype(np.float32))
        back = nanoir.run(import_onnx_bytes(data_bytes), x)
        for b, w in zip(back, want):
            np.testing.assert_array_equal(b, w)


# ---------------------------------------------------------------------------------------
# Issue 32 §2: the writer writes back what the reader reads
# ---------------------------------------------------------------------------------------


class _Recurrent(torch.nn.Module):
    """A recurrent layer's sequence and final state (and, with `states`, initial states)."""

    def __init__(self, rnn: torch.nn.Module, states: bool = False) -> None:
        super().__init__()
        self.rnn = rnn
        self.states = states

    def forward(self, x, h0=None, c0=None):  # noqa: ANN001, ANN201
        if not self.states:
            y, h = self.rnn(x)
        elif c0 is not None:
            y, h = self.rnn(x, (h0, c0))
        else:
            y, h = self.rnn(x, h0)
        return y, (h[0] if isinstance(h, tuple) else h)


RECURRENT_CASES = {
    "lstm-2-layers-bi": (lambda: torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True), False, 0),
    "gru-batch-first": (lambda: torch.nn.GRU(3, 4, batch_first=True), True, 0),
    "rnn-relu-bi-nobias": (
        lambda: torch.nn.RNN(3, 4, nonlinearity="relu", bidirectional=True, bias=False),
        False,
        0,
    ),
    "rnn-tanh-2-layers": (lambda: torch.nn.RNN(3, 4, num_layers=2), False, 0),
    "lstm-initial-states": (lambda: torch.nn.LSTM(3, 4, num_layers=2), False, 2),
    "gru-initial-state-bi": (lambda: torch.nn.GRU(3, 4, bidirectional=True), False, 1),
}


@pytest.mark.parametrize("case", list(RECURRENT_CASES))
@pytest.mark.parametrize("flavor", ["qdq", "nanoengine"])
def test_recurrent_layers_are_written_as_onnx_defines_them(case: str, flavor: str) -> None:
    """nf.recurrent is written as ONNX's LSTM/GRU/RNN (W/R/B in ONNX's gate order, one node
    per layer, Y transposed to nf's layout): the file passes onnx.checker's full check, runs
    in onnxruntime as torch computes, and reads back to the same values. Kills: the old
    writer's `.ne` attributes (has_biases, num_layers: refused by onnx.checker), RNN's
    activations written as a string, the gate permutation not inverted (LSTM's f and o
    swapped), a layer's initial states not sliced from h0."""
    make, batch_first, states = RECURRENT_CASES[case]
    torch.manual_seed(0)
    model = _Recurrent(make(), states=bool(states)).eval()
    x = torch.randn(2, 5, 3) if batch_first else torch.randn(5, 2, 3)
    rnn = model.rnn
    layers_dirs = rnn.num_layers * (2 if rnn.bidirectional else 1)
    initial = [torch.randn(layers_dirs, 2, 4) for _ in range(states)]
    module = nanoir.from_torch(model, (x, *initial), dynamic_batch=batch_first and not states)
    data = export_onnx_bytes(module, flavor)
    written = onnx.load_model_from_string(data)
    onnx.checker.check_model(written, full_check=True)
    kinds = [n.op_type for n in written.graph.node if n.op_type in ("LSTM", "GRU", "RNN")]
    assert len(kinds) == rnn.num_layers
    with torch.no_grad():
        want = [t.numpy() for t in model(x, *initial)]
    session = ort_session(data)
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), (x, *initial))}  # type: ignore[attr-defined]
    got = session.run(None, feeds)  # type: ignore[attr-defined]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    back = import_onnx_bytes(data)
    for g, w in zip(nanoir.run(back, x.numpy(), *(a.numpy() for a in initial)), want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)


def test_a_quantized_recurrent_layer_is_refused_naming_why() -> None:
    """The quantized cell is nanoir's integer algorithm: no ONNX float op computes it."""
    torch.manual_seed(0)
    model = _Recurrent(torch.nn.GRU(3, 4)).eval()
    x = torch.randn(5, 2, 3)
    module = nanoir.from_torch(model, x, dynamic_batch=False)
    nanoir.quantize(module, [x.numpy().astype(np.float64)], progress=False)
    with pytest.raises(
        OnnxExportError, match="nf.recurrent between fake-quants is an integer cell"
    ):
        export_onnx_bytes(module, "nanoengine")


def test_reshape_allowzero_is_written_back() -> None:
    """A Reshape read with allowzero=1 to `[2, 0, 3]` (a dim of size 0) is written with
    allowzero=1: without it, ONNX's 0 copies the input's dim 1 (2) and onnxruntime refuses
    the reshape. Kills: the writer dropping allowzero (the issue)."""
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "s"], ["r"], allowzero=1),
            helper.make_node("Relu", ["r"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([2, 0, 3], np.int64), "s")],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    written = export_onnx_bytes(import_onnx_bytes(data))
    onnx.checker.check_model(onnx.load_model_from_string(written), full_check=True)
    x = np.zeros((0, 2, 3), np.float32)
    (y,) = run_ort(written, x)
    assert y.shape == (2, 0, 3)


class _Comparisons(torch.nn.Module):
    """Every predicate of nf.compare, two of them logical, and a where reading one."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tests = (x == y, x != y, x < y, x <= y, x > y, x >= y)
        logical = (torch.logical_and(x, y), torch.logical_or(x, y), torch.logical_xor(x, y))
        return (
            *(t.float() + 0.5 * x for t in (*tests, *logical)),
            torch.where(x > y, x, 2.0 * y),
        )


def test_comparisons_and_where_write_bool_casts(tmp_path: Path) -> None:
    """nf.compare (1/0 in its float type) is ONNX's bool comparison cast back to float, its
    logical predicates read operands cast to bool, ``ne`` is ``Not(Equal)``, and Where's
    condition is cast to bool; the written file passes the full checker (it failed it:
    "Add ... has unsupported type: tensor(bool)") and onnxruntime equals torch and nanoir.
    Kills: a predicate mapped to the wrong ONNX op; no Not for ``ne``; logical operands
    not cast."""
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (4, 6)).astype(np.float32)
    y = rng.integers(-2, 3, (4, 6)).astype(np.float32)
    module = nanoir.from_torch(_Comparisons(), (torch.from_numpy(x), torch.from_numpy(y)))
    assert {op.predicate.data for op in module.walk() if isinstance(op, nf.CompareOp)} == {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "and",
        "or",
        "xor",
    }
    want = [t.numpy() for t in _Comparisons()(torch.from_numpy(x), torch.from_numpy(y))]
    data = export_onnx_bytes(module)
    onnx.checker.check_model(onnx.load_model_from_string(data), full_check=True)
    for got, w in zip(run_ort(data, x, y), want, strict=True):
        np.testing.assert_array_equal(got, w)
    assert_same_everywhere(module, x, y, tmp_path=tmp_path)
