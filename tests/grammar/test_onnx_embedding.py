"""ONNX (QDQ flavour) of ``nf.embedding``: written as standard ``Gather(table, ids, axis=0)``
with the token ids an int64 graph input, run by onnxruntime equal to nanoir's nf and nq runs
and to a NumPy oracle (the table, or its fake-quant, indexed by the ids), and read back as
``nf.embedding`` (also from the nanoengine flavour, which writes the same Gather). Before,
the writer wrote the ``.ne`` row's op type ``Embedding``, which ONNX has no op for
(``onnx.checker`` refused the file), and the reader refused int64 inputs.

Mutants seen to fail it (private copy): the writer's index input declared float (the writer's
onnx.checker refuses float indices); Gather's ``axis=0`` replaced by ``axis=1``; the reader not
mapping the Gather (int64 input refused again); the reader's table check accepting a runtime
table (the refusal test).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.onnx.exporter import export_onnx_bytes
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes

import nanoir
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")


def _program(ids: int, vocab: int, dim: int, table: np.ndarray) -> str:
    i, w, y = f"tensor<?x{ids}xf32>", f"tensor<{vocab}x{dim}xf32>", f"tensor<?x{ids}x{dim}xf32>"
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in table)
    return f"""func.func @main(%ids: {i}) -> {y} {{
  %w = nf.constant "emb" dense<[{rows}]> : {w}
  %y = nf.embedding %ids, %w : ({i}, {w}) -> {y}
  func.return %y : {y}
}}"""


def _numpy_fake_quant(x: np.ndarray, bits: int, k: np.ndarray, rounding: str) -> np.ndarray:
    """A power-of-two fake-quant written here: signed codes at step ``2**-k`` (``k`` one
    exponent, or one per row)."""
    mode = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_up": lambda v: np.floor(v + 0.5),
        "half_even": np.round,
    }[rounding]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return np.clip(mode(np.ldexp(x, k)), lo, hi) * np.exp2(-k.astype(np.float64))


def _ort(data: bytes, ids: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    (y,) = session.run(None, {name: ids})
    return np.asarray(y, np.float64)


@settings(max_examples=examples(12), deadline=None)
@given(
    vocab=st.integers(1, 9),
    dim=st.integers(1, 4),
    length=st.integers(1, 5),
    batch=st.integers(1, 3),
    bits=st.sampled_from([None, 4, 8, 16]),
    rounding=st.sampled_from(["trunc", "half_even"]),
    seed=st.integers(0, 2**16),
)
def test_embedding_is_gather_in_onnxruntime(vocab, dim, length, batch, bits, rounding, seed):
    """nf (bits None) or nq (the table quantized at ``bits``): the file is Gather on axis 0
    of the table by an int64 graph input; onnxruntime (float32) equals nanoir's run and the
    NumPy oracle on fresh ids; the file reads back as nf.embedding with the same results."""
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 2, (vocab, dim)).astype(np.float32).astype(np.float64)
    module = nanoir.parse(_program(length, vocab, dim, table))
    want = table
    if bits is not None:
        calib = [rng.integers(0, vocab, (2, length)) for _ in range(2)]
        nanoir.quantize(module, calib, weight_bits=bits, rounding=rounding, bias_correction=False)
        (fq,) = [op for op in module.walk() if isinstance(op, FakeQuantOp)]
        k = np.asarray([int(e) for e in fq.exp.get_values()]).reshape(-1, 1)  # per row or one
        want = _numpy_fake_quant(table, bits, k, rounding)
    data = export_onnx_bytes(module)
    model = onnx.load_model_from_string(data)
    (gather,) = [n for n in model.graph.node if n.op_type == "Gather"]
    (graph_input,) = model.graph.input
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert gather.input[1] == graph_input.name
    assert [a.i for a in gather.attribute if a.name == "axis"] in ([], [0])
    ids = rng.integers(0, vocab, (batch, length)).astype(np.int64)
    expected = want[ids]
    got_ort = _ort(data, ids)
    (got_nanoir,) = nanoir.run(module, ids)
    np.testing.assert_array_equal(got_nanoir, expected)
    np.testing.assert_array_equal(got_ort, expected.astype(np.float32))
    back = import_onnx_bytes(data)
    assert [op.name for op in back.walk() if isinstance(op, nf.EmbeddingOp)] == ["nf.embedding"]
    (got_back,) = nanoir.run(back, ids)
    np.testing.assert_array_equal(got_back, expected.astype(np.float32))
    # The nanoengine flavour (opset 17, Q for the table) writes the same Gather.
    (got_ne,) = nanoir.run(import_onnx_bytes(export_onnx_bytes(module, "nanoengine")), ids)
    np.testing.assert_array_equal(got_ne, expected.astype(np.float32))


def test_text_cnn_qdq_runs_in_onnxruntime() -> None:
    """The Embedding -> Conv1d text classifier (a torch import, ``half_even`` so QDQ can
    write its activations), quantized at 8 bits: onnxruntime's outputs equal the nq run
    element for element, and the file reads back to a program computing the same."""
    import torch

    from nanoir.testing.magik_models import TEXT_VOCAB, make_magik_model

    net = make_magik_model("TextCNN")
    rng = np.random.default_rng(0)
    ids0 = torch.from_numpy(rng.integers(0, TEXT_VOCAB, (2, 12)))
    module = nanoir.from_torch(net, (ids0,))
    calib = [rng.integers(0, TEXT_VOCAB, (4, 12)) for _ in range(2)]
    nanoir.quantize(module, calib, rounding="half_even")
    data = export_onnx_bytes(module)
    ids = rng.integers(0, TEXT_VOCAB, (5, 12)).astype(np.int64)
    (want,) = nanoir.run(module, ids)
    session = ort.InferenceSession(
        data,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["QDQPropagationTransformer", "DoubleQDQPairsRemover"],
    )
    (got,) = session.run(None, {session.get_inputs()[0].name: ids})
    np.testing.assert_array_equal(got, want.astype(np.float32))
    (back,) = nanoir.run(import_onnx_bytes(data), ids)
    np.testing.assert_array_equal(back, want.astype(np.float32))


def _gather_model(table_is_input: bool, extra_use: bool) -> bytes:
    h = onnx.helper
    ids = h.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["N", 3])
    inputs = [ids]
    inits = []
    if table_is_input:
        inputs.append(h.make_tensor_value_info("table", onnx.TensorProto.FLOAT, [4, 2]))
    else:
        inits.append(onnx.numpy_helper.from_array(np.ones((4, 2), np.float32), "table"))
    nodes = [h.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    outputs = [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3, 2])]
    if extra_use:
        nodes.append(h.make_node("Identity", ["ids"], ["ids_out"]))
        outputs.append(h.make_tensor_value_info("ids_out", onnx.TensorProto.INT64, ["N", 3]))
    graph = h.make_graph(nodes, "g", inputs, outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    return model.SerializeToString()


def test_gather_by_int64_input_is_read_only_as_an_embedding() -> None:
    """A Gather of a constant table by an int64 input reads as nf.embedding; of a runtime
    table, or with the ids read by another node too, it is refused with the reason."""
    module = import_onnx_bytes(_gather_model(False, False))
    assert [op.name for op in module.walk() if isinstance(op, nf.EmbeddingOp)] == ["nf.embedding"]
    with pytest.raises(OnnxImportError, match="only as an embedding, of a constant 2-D table"):
        import_onnx_bytes(_gather_model(True, False))
    with pytest.raises(OnnxImportError, match="INT64.*only as the indices of Gather"):
        import_onnx_bytes(_gather_model(False, True))
