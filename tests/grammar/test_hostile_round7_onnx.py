"""Hostile inputs to integer ONNX and the onnxruntime backend (round 7): codes outside an
input's nh type, embedding and unpooling indices outside their table or plane (negative ones
too, which ONNX's Gather and ScatterElements count from the end), and malformed ONNX LSTM /
GRU / RNN weights. Each is one nanoir.Error, the same as the NumPy executor's, never a
silently wrong result or onnxruntime's own exception."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from nanoir.grammar.onnx.integer import PROGRAM_KEY, export_model, make_session, run_model
from nanoir.runtime.base import ExecutionError
from onnx import TensorProto, helper

import nanoir
from nanoir.testing.programs import examples

ort = pytest.importorskip("onnxruntime")


def _identity(kind: str) -> str:
    """An nh program whose i32 result is its input's codes (a linear layer of the identity)."""
    t = f"tensor<?x4x{kind}, #nh.fixed<0, BC>>"
    w = "tensor<4x4xi2, #nh.fixed<0, CD>>"
    return f"""
func.func @main(%x: {t}) -> tensor<?x4xi32, #nh.fixed<0, BC>> {{
  %w = nh.constant "w" dense<[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]>
      : tensor<4x4xi8> -> {w}
  %y = nh.linear %x, %w : ({t}, {w}) -> tensor<?x4xi32, #nh.fixed<0, BC>>
  func.return %y : tensor<?x4xi32, #nh.fixed<0, BC>>
}}"""


_RANGES = {"i1": (-1, 1), "i2": (-2, 1), "i4": (-8, 7), "ui4": (0, 15), "i8": (-128, 127)}
_PROGRAMS = {kind: nanoir.parse(_identity(kind)) for kind in _RANGES}


@given(
    kind=st.sampled_from(sorted(_RANGES)),
    codes=st.lists(st.integers(-9, 16) | st.integers(-130, 260), min_size=4, max_size=4),
)
@example(kind="i4", codes=[100, -3, 0, 7])
@example(kind="i1", codes=[1, -1, 0, 1])
@example(kind="i4", codes=[-8, 7, 0, 1])
@settings(max_examples=examples(25), deadline=None)
def test_codes_outside_the_inputs_type_are_refused_as_numpy_does(kind: str, codes: list) -> None:
    """An i4 input travels as int8, so onnxruntime took any code up to 127 (an i1 input also
    0) and computed with codes the nh program never holds: silently other outputs than the
    NumPy executor's error. Now both refuse the same codes with the same message, and valid
    codes give the identity's output (oracle: the codes themselves, and the range written
    here).

    Mutants seen to fail it (private copy): the _check_codes call in session.run_model
    removed (i4 code 100 runs); an int8 array taken unlooked-at into any int8 input (i4
    code 100 runs)."""
    hw = _PROGRAMS[kind]
    x = np.array([codes], dtype=np.int64)
    lo, hi = _RANGES[kind]
    bad = (x < lo) | (x > hi) | ((x == 0) & (kind == "i1"))
    if bad.any():
        with pytest.raises(nanoir.Error, match=r"input 0 has code -?\d+ at index \(0, \d\)"):
            nanoir.run(hw, x, raw=True)
        native = x.astype(np.uint8 if kind.startswith("u") else np.int8)
        if np.array_equal(native, x):  # the graph input's dtype holds it: only nanoir refuses
            for given_codes in (x, native):  # (in the exchange dtype too: no check skipped)
                with pytest.raises(nanoir.Error, match=rf"outside {kind} "):
                    nanoir.run(hw, given_codes, raw=True, backend="onnxruntime")
        else:
            with pytest.raises(nanoir.Error, match="input 0 has code"):
                nanoir.run(hw, x, raw=True, backend="onnxruntime")
    else:
        (got,) = nanoir.run(hw, x, raw=True, backend="onnxruntime")
        assert np.array_equal(got, x)


_TABLE = np.array([[-36, -37, -8], [-14, 27, -50], [-11, 59, 15], [-5, 46, 9], [5, 51, 30]])
_EMBED = nanoir.parse(
    f"""
func.func @main(%ids: tensor<?x3xi32, #nh.fixed<0, BC>>) -> tensor<?x3x3xi8, #nh.fixed<5, BCM>> {{
  %t = nh.constant "t" dense<{_TABLE.tolist()}> : tensor<5x3xi8> -> tensor<5x3xi8, #nh.fixed<5, CD>>
  %e = nh.embedding %ids, %t : (tensor<?x3xi32, #nh.fixed<0, BC>>,
      tensor<5x3xi8, #nh.fixed<5, CD>>) -> tensor<?x3x3xi8, #nh.fixed<5, BCM>>
  func.return %e : tensor<?x3x3xi8, #nh.fixed<5, BCM>>
}}"""
)


@pytest.mark.parametrize("bad", [-1, -5, 5, 1000], ids=str)
def test_an_embedding_index_outside_the_table_is_the_executors_error(bad: int) -> None:
    """Gather counts a negative index from the end: onnxruntime gave the table's last row for
    id -1 where the executor refuses it (a silently wrong result); an index past the end
    escaped as onnxruntime's InvalidArgument. Now the backend raises the executor's error,
    and the written file itself refuses a negative id in plain onnxruntime (no wrap). Valid
    ids give the table's rows (oracle: NumPy indexing of the codes).

    Mutants seen to fail it (private copy): _no_negative returning idx unchanged (-1, -5
    run); the executor's re-run in backends.run removed (the message names no table);
    run_model catching no onnxruntime exception (its InvalidArgument escapes)."""
    ids = np.array([[0, bad, 2], [4, 3, 1]])
    for backend in ("numpy", "onnxruntime"):
        with pytest.raises(ExecutionError, match=rf"index {bad} is outside the table's 5 rows"):
            nanoir.run(_EMBED, ids, raw=True, backend=backend)
    session = make_session(export_model(_EMBED))
    with pytest.raises(ExecutionError, match="onnxruntime failed to run the model: Gather"):
        run_model(session, [ids.astype(np.int32)])
    good = np.array([[0, 4, 2], [4, 3, 1]])
    (got,) = nanoir.run(_EMBED, good, raw=True, backend="onnxruntime")
    assert np.array_equal(got, _TABLE[good])


_UNPOOL = nanoir.parse(
    """
func.func @main(%x: tensor<?x1x2x2xi8, #nh.fixed<0, BCMD>>, %i: tensor<?x1x2x2xi32, #nh.fixed<0, BCMD>>)
    -> tensor<?x1x4x4xi8, #nh.fixed<0, BCMD>> {
  %y = nh.max_unpool %x, %i : (tensor<?x1x2x2xi8, #nh.fixed<0, BCMD>>,
      tensor<?x1x2x2xi32, #nh.fixed<0, BCMD>>) -> tensor<?x1x4x4xi8, #nh.fixed<0, BCMD>>
  func.return %y : tensor<?x1x4x4xi8, #nh.fixed<0, BCMD>>
}"""
)


@given(st.lists(st.integers(-3, 17), min_size=4, max_size=4, unique=True))
@example([-1, 0, 1, 2])
@example([0, 5, 10, 15])
@settings(max_examples=examples(15), deadline=None)
def test_max_unpool_indices_given_at_run_time(indices: list) -> None:
    """Indices outside the 4x4 plane: the executor refuses them; ScatterElements wrapped a
    negative one (index -1 wrote the last position) and raised its own exception for one
    past the end. Now both backends raise the executor's error, and in-plane indices give a
    NumPy scatter of the codes (oracle written here).

    Mutants seen to fail it (private copy): _no_negative returning idx unchanged; the
    executor's re-run in backends.run removed; run_model catching no onnxruntime exception."""
    x = np.array([[[[1, 2], [3, 4]]]])
    i = np.array(indices).reshape(1, 1, 2, 2)
    if any(not 0 <= v < 16 for v in indices):
        for backend in ("numpy", "onnxruntime"):
            with pytest.raises(ExecutionError, match="is outside the 16-element plane"):
                nanoir.run(_UNPOOL, x, i, raw=True, backend=backend)
        return
    want = np.zeros(16, dtype=np.int64)
    want[indices] = [1, 2, 3, 4]
    (got,) = nanoir.run(_UNPOOL, x, i, raw=True, backend="onnxruntime")
    assert np.array_equal(got.reshape(-1), want)


def _recurrent(op: str, hidden: int, w: list[int], r: list[int], b: list[int] | None) -> bytes:
    inits = [
        helper.make_tensor("W", TensorProto.FLOAT, w, np.full(int(np.prod(w)), 0.1).tolist()),
        helper.make_tensor("R", TensorProto.FLOAT, r, np.full(int(np.prod(r)), 0.1).tolist()),
    ]
    inputs = ["X", "W", "R"]
    if b is not None:
        inits.append(helper.make_tensor("B", TensorProto.FLOAT, b, np.zeros(np.prod(b)).tolist()))
        inputs.append("B")
    attrs = {"linear_before_reset": 1} if op == "GRU" else {}
    node = helper.make_node(op, inputs, ["Y"], hidden_size=hidden, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 1, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("op", "hidden", "w", "r", "b", "message"),
    [
        (
            "RNN",
            2,
            [1, 6, 3],
            [1, 2, 2],
            None,
            r"its W has shape \[1, 6, 3\], expected \[1, 2, 3\]",
        ),
        (
            "GRU",
            1,
            [1, 6, 3],
            [1, 3, 1],
            None,
            r"its W has shape \[1, 6, 3\], expected \[1, 3, 3\]",
        ),
        (
            "LSTM",
            2,
            [1, 6, 3],
            [1, 8, 2],
            None,
            r"its W has shape \[1, 6, 3\], expected \[1, 8, 3\]",
        ),
        ("GRU", 2, [6, 3], [1, 6, 2], None, r"its W has shape \[6, 3\], expected \[1, 6, 3\]"),
        (
            "GRU",
            2,
            [1, 6, 3],
            [1, 6, 3],
            None,
            r"its R has shape \[1, 6, 3\], expected \[1, 6, 2\]",
        ),
        ("GRU", 2, [1, 6, 3], [1, 6, 2], [1, 5], r"its B has shape \[1, 5\], expected \[1, 12\]"),
        ("GRU", 0, [1, 6, 3], [1, 6, 2], None, r"hidden_size 0"),
    ],
    ids=["rnn-gru-rows", "gru-hidden-small", "lstm-short", "w-rank-2", "r-cols", "b-len", "h0"],
)
def test_recurrent_weights_of_the_wrong_shape_are_refused(op, hidden, w, r, b, message) -> None:  # noqa: ANN001
    """ONNX fixes W [D, G*H, F], R [D, G*H, H] and B [D, 2*G*H]; onnxruntime refuses any
    other shape (the oracle, checked here). The reader took the first rows of a larger W (an
    RNN of a GRU's weights ran as a smaller layer), and other shapes failed with a bare
    IndexError. Now one OnnxImportError names the input and the shape expected.

    Mutant seen to fail it (private copy): the shape loop in read_recurrent removed
    (rnn-gru-rows reads; the others are IndexErrors or verifier messages)."""
    data = _recurrent(op, hidden, w, r, b)
    with pytest.raises(Exception, match="W|R|B|hidden"):  # noqa: B017, PT011
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        session.run(None, {"X": np.zeros((4, 1, 3), np.float32)})
    with pytest.raises(OnnxImportError, match=f"cannot read this {op} node: {message}"):
        import_onnx_bytes(data, "m.onnx")


def test_the_backend_runs_the_function_asked_for_or_refuses() -> None:
    """A module with @main and @helper (its first weight -2): ``function="helper"`` with the
    onnxruntime backend ran @main's ONNX model (the session exports the main function) and
    returned @main's codes as @helper's, silently. Now it is refused naming @helper; @main
    (by name or by default) still equals NumPy (oracle: the input codes, the first times -2 for
    @helper by NumPy here).

    Mutant seen to fail it (private copy): the main-function check in backends._session
    removed (@helper returns @main's codes)."""
    body = _identity("i8").strip()
    helper = body.replace("@main", "@helper").replace("[[1, 0, 0, 0]", "[[-2, 0, 0, 0]")
    module = nanoir.parse(f"builtin.module {{\n{body}\n{helper}\n}}")
    x = np.array([[3, -4, 5, 6]])
    (want,) = nanoir.run(module, x, raw=True, function="helper")
    assert np.array_equal(want, [[-6, -4, 5, 6]])
    with pytest.raises(nanoir.Error, match="runs the module's main function .*not @helper"):
        nanoir.run(module, x, raw=True, function="helper", backend="onnxruntime")
    for function in ("main", None):
        (got,) = nanoir.run(module, x, raw=True, function=function, backend="onnxruntime")
        assert np.array_equal(got, x)


_CAUSAL = """
func.func @main(%x: tensor<?x4x4xf32>) -> tensor<?x4x4xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4x4xf32>
  %m = nf.constant dense<[[true, false, false, false], [true, true, false, false],
      [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %s = nf.softmax %q, %m {axis = -1 : i64} : (tensor<?x4x4xf32>, tensor<4x4xi1>)
      -> tensor<?x4x4xf32>
  %y = nq.fake_quant %s {bits = 8 : i64, exp = dense<7> : tensor<1xi8>, signed = false}
      : tensor<?x4x4xf32>
  func.return %y : tensor<?x4x4xf32>
}"""


def test_a_splat_mask_edited_into_the_program_is_refused_before_it_is_written(
    tmp_path: Path,
) -> None:
    """Round 6 bounded the constants' codes by the file's size; a softmax's mask is an
    attribute, not a constant, and the writer stores it whole: the metadata's program edited
    to a causal mask ``dense<true> : tensor<10000x10000xi1>`` (a 3 KB file) cost 3.8 s and
    ~700 MB of writing before the graphs were found to differ. Now the mask counts with the
    constants: one error, before writing. The unedited file reads back (the oracle: its
    program's text).

    Mutant seen to fail it (private copy): dense attributes left out of
    _check_constant_size (the error is then the later 'its graph is not the one')."""
    hw = nanoir.lower_to_hw(nanoir.parse(_CAUSAL))
    text = str(hw)
    model = export_model(hw)
    path = tmp_path / "causal.onnx"
    path.write_bytes(model.SerializeToString())
    assert str(nanoir.load(path)) == text
    mask = re.search(r"mask = dense<.*?> : tensor<4x4xi1>", text, re.S)
    assert mask is not None
    size = 2000
    edited = (
        text.replace(mask.group(0), "MASK")
        .replace("4x4x", f"{size}x{size}x")
        .replace("MASK", f"mask = dense<true> : tensor<{size}x{size}xi1>")
    )
    for p in model.metadata_props:
        if p.key == PROGRAM_KEY:
            p.value = edited
    path.write_bytes(model.SerializeToString())
    with pytest.raises(nanoir.Error, match=r"4000000 constant codes, more than a file of"):
        nanoir.load(path)


@pytest.mark.parametrize("backend", ["numpy", "onnxruntime"])
def test_max_unpool_of_an_empty_batch(backend: str) -> None:
    """A batch of 0 (torch's max_unpool2d gives a [0, 1, 4, 4] result): the kernel reshaped
    the indices to [N, C, -1] and the ONNX writer wrote Reshape [0, 0, -1], both undetermined
    with no elements ('cannot reshape array of size 0'). Now the in-plane size is given and
    the result is empty of the unpooled shape (oracle: torch's shape, written here).

    Mutants seen to fail it (private copy): -1 again in unpool.max_unpool (numpy); -1 again
    in the writer's Reshape (onnxruntime)."""
    empty = np.zeros((0, 1, 2, 2), np.int64)
    (got,) = nanoir.run(_UNPOOL, empty, empty, raw=True, backend=backend)
    assert got.shape == (0, 1, 4, 4)


def test_raw_codes_come_in_the_executors_dtype() -> None:
    """A ui8 output: the NumPy executor returns int16 codes (quant.code_dtype: uint8
    arithmetic wraps around), onnxruntime's graph output is uint8, and raw=True returned it
    as is: ``codes - 200`` then wrapped (a silently wrong result downstream). Now the
    backend returns the executor's dtype (oracle: the codes minus 200 computed in int64).

    Mutant seen to fail it (private copy): backends.run returning onnxruntime's outputs
    unconverted."""
    text = _identity("i8").replace(
        "-> tensor<?x4xi32, #nh.fixed<0, BC>> {", "-> tensor<?x4xui8, #nh.fixed<0, BC>> {"
    )
    text = text.replace(
        "  func.return %y : tensor<?x4xi32, #nh.fixed<0, BC>>",
        "  %r = nh.requant %y {shift = array<i64: 0>} : tensor<?x4xi32, #nh.fixed<0, BC>>"
        " -> tensor<?x4xui8, #nh.fixed<0, BC>>\n  func.return %r : tensor<?x4xui8, #nh.fixed<0, BC>>",
    )
    module = nanoir.parse(text)
    x = np.array([[100, 7, 0, 127]])
    (want,) = nanoir.run(module, x, raw=True)
    (got,) = nanoir.run(module, x, raw=True, backend="onnxruntime")
    assert got.dtype == want.dtype == np.int16
    assert np.array_equal(got - 200, x.astype(np.int64) - 200)
