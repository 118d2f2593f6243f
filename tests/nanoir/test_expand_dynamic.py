"""A size-1 (or new) dim expanded to the dynamic batch: a ViT's class token,
``cls.expand(x.shape[0], -1, -1)``, which ``nf.expand`` / ``nh.expand`` take with a shape
source (``like``: the tensor whose dim gives the size at run time). One import (the batch
dynamic) runs at batches 1, 3 and 5; every level and format carries it.

Oracles: torch's module in float64 (nf), the nq program in float64 (nh: the exactness
contract), onnxruntime (ONNX QDQ and integer ONNX), the program itself before a write and a
read (``.ne``), a NumPy broadcast written here (streaming).

Mutants seen to fail in a private copy (``/tmp/copy-expand``), each named at its test.
"""

from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.grammar.ne.schema import main_function
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.lowering.analysis.graph import build_graph
from nanoir.lowering.stream_plan import StreamPlanError, stream_plan
from nanoir.runtime.nh import quantize_inputs
from torch import nn
from xdsl.utils.exceptions import VerifyException

import nanoir
from nanoir import qat
from nanoir.testing.programs import examples

torch.set_num_threads(1)

FORMS = ("token", "rank", "two")
"""``token``: ``[1, 1, D]`` to ``[B, 1, D]`` (ViT); ``rank``: ``[1, D]`` to ``[B, 1, D]``
(the batch a new leading dim); ``two``: ``[1, 1, D]`` to ``[B, 2, D]`` (two dims grow)."""

C, L = 3, 5


class ClassToken(nn.Module):
    """A ViT's front on 1-D tokens: a 1x1 conv embeds ``[B, C, L]`` to ``L`` tokens of width
    ``d``, a class token is expanded to the batch and put first, a 1x1 conv mixes the
    channels of every token (a conv, not a linear: `.ne` Gemm rows are 2-D)."""

    def __init__(self, d: int, form: str) -> None:
        super().__init__()
        self.form = form
        self.proj = nn.Conv1d(C, d, 1)
        self.cls = nn.Parameter(torch.randn(1, d) if form == "rank" else torch.randn(1, 1, d))
        self.out = nn.Conv1d(d, d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.proj(x).transpose(1, 2)
        n = 2 if self.form == "two" else 1
        cls = self.cls.expand(x.shape[0], n, -1)
        return self.out(torch.cat([cls, t], 1).transpose(1, 2))


def _model(d: int, form: str) -> ClassToken:
    torch.manual_seed(d)
    return ClassToken(d, form).eval()


@functools.cache
def _imported(d: int, form: str):  # noqa: ANN202
    """The nf program of ``_model(d, form)`` (one torch.export per module; clone to change)."""
    return nanoir.from_torch(_model(d, form), (torch.from_numpy(_inputs(2, 0)),))


def _inputs(batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, C, L)).astype(np.float32)


def _quantized(d: int, form: str, seed: int, bits: int = 8, rounding: str = "trunc"):  # noqa: ANN202
    module = _imported(d, form).clone()
    calib = [_inputs(2, seed + k) for k in (1, 2)]
    nanoir.quantize(module, calib, act_bits=bits, rounding=rounding, progress=False)
    return module


WIDTH = {"token": 8, "rank": 4, "two": 6}
"""The token width per form: three modules, so three torch.exports (cached, ~2 s each)."""

cases = st.tuples(st.sampled_from(FORMS), st.integers(0, 2**16)).map(
    lambda c: (WIDTH[c[0]], c[0], c[1])
)
"""``(d, form, seed)``: the seed draws the inputs (the weights are fixed per form)."""


@settings(max_examples=examples(6), deadline=None)
@given(cases)
def test_nf_matches_torch_at_every_batch(case) -> None:  # noqa: ANN001
    """One import with the batch dynamic, run at batches 1, 3 and 5 in float64: within
    1e-5 of torch's module in float64, and the expand reads its size from the input.
    Mutant: ``movement.expand_sizes`` leaving the grown dims at 1 (the run then fails to
    concatenate a batch-1 token with the batch's tokens, or differs in shape)."""
    d, form, seed = case
    module = _imported(d, form)
    (expand,) = [op for op in module.walk() if isinstance(op, nf.ExpandOp)]
    assert expand.like is not None and "tensor<?x" in str(expand.result.type)
    double = _model(d, form).double()
    for batch in (1, 3, 5):
        x = _inputs(batch, seed + batch).astype(np.float64)
        with torch.no_grad():
            want = double(torch.from_numpy(x)).numpy()
        (got,) = nanoir.run(module, x, dtype=np.float64)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


@settings(max_examples=examples(4), deadline=None)
@given(cases, st.sampled_from((4, 8, 16)), st.sampled_from(("trunc", "half_even", "floor")))
def test_nq_equals_nh(case, bits: int, rounding: str) -> None:  # noqa: ANN001
    """quantize + lower-to-hw: the nh program's numbers are the nq program's bit for bit at
    batches 1 and 3; the token is a constant's codes moved (its fake-quant is the constant's
    own, not joined to the input the size comes from). Mutant: LowerExpand dropping the shape
    source (caught by the ``like`` check, and without it by the run: nh.concat of a one-row
    token with the batch fails)."""
    d, form, seed = case
    module = _quantized(d, form, seed, bits, rounding)
    hw = nanoir.lower_to_hw(module.clone())
    (expand,) = [op for op in hw.walk() if isinstance(op, nh.ExpandOp)]
    assert expand.like is not None and isinstance(expand.input.owner, nh.ConstantOp)
    for batch in (1, 3):
        x = _inputs(batch, seed + 10 + batch)
        (want,) = nanoir.run(module, x, dtype=np.float64)
        (got,) = nanoir.run(hw, x)
        assert got.shape[0] == batch
        np.testing.assert_array_equal(got, want)


@settings(max_examples=examples(3), deadline=None)
@given(cases)
def test_ne_round_trip_both_levels(case) -> None:  # noqa: ANN001
    """`.ne` at the nq and hw levels: written, read and written again gives the same text
    byte for byte, and the read program's outputs equal the written one's at batches 1 and 3.
    Mutant: the nq Expand reader ignoring its runtime input 1 (the node is then refused:
    "takes 1 inputs, got 2")."""
    d, form, seed = case
    module = _quantized(d, form, seed)
    hw = nanoir.lower_to_hw(module.clone())
    xs = [_inputs(b, seed + 20 + b) for b in (1, 3)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, program in (("q.ne", module), ("h.ne", hw)):
            path, again = os.path.join(tmp, name), os.path.join(tmp, "again_" + name)
            nanoir.save(program, path)
            text = open(path).read()
            assert "op_type=Expand" in text
            back = nanoir.load(path)
            nanoir.save(back, again)
            assert open(again).read() == text
            for x in xs:
                (want,) = nanoir.run(program, x)
                (got,) = nanoir.run(back, x)
                np.testing.assert_array_equal(got, want)


def _ort(path: str, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@settings(max_examples=examples(3), deadline=None)
@given(cases)
def test_onnx_qdq_matches_onnxruntime(case) -> None:  # noqa: ANN001
    """The nf program and the nq program (half_even: QDQ's rounding) as ONNX: Expand's shape
    is built from ``Shape(x)``; onnxruntime gives nanoir's nf numbers (within 1e-5 relative)
    and its nq numbers exactly at batches 1 and 3, and both read back to programs with the same
    outputs. Mutants: the writer's ``Shape`` reading dim ``i + 1`` of the source (the channels:
    onnxruntime's Concat then refuses a 3-row token); the reader without ``_symbolic_shape``
    (the Shape of a dynamic dim is refused)."""
    d, form, seed = case
    float_program = _imported(d, form)
    quantized = _quantized(d, form, seed, rounding="half_even")
    with tempfile.TemporaryDirectory() as tmp:
        for name, program, exact in (("f.onnx", float_program, False), ("q.onnx", quantized, True)):
            path = os.path.join(tmp, name)
            nanoir.save(program, path)
            kinds = {n.op_type for n in onnx.load(path).graph.node}
            assert {"Shape", "Expand"} <= kinds
            back = nanoir.load(path)
            for batch in (1, 3):
                x = _inputs(batch, seed + 30 + batch)
                (want,) = nanoir.run(program, x)
                got = _ort(path, x)
                assert got.shape == want.shape
                if exact:
                    np.testing.assert_array_equal(got, want)
                else:
                    bound = 1e-5 * max(1.0, float(np.abs(want).max()))
                    assert float(np.abs(got - want).max()) <= bound
                np.testing.assert_array_equal(nanoir.run(back, x)[0], want)


@settings(max_examples=examples(3), deadline=None)
@given(cases, st.sampled_from((4, 8, 16)))
def test_integer_onnx_matches_nh(case, bits: int) -> None:  # noqa: ANN001
    """The nh program as integer ONNX, run by onnxruntime on the input codes: the same codes
    as nanoir's nh executor at batches 1 and 3. Mutant: the integer writer's old shape, 1 for
    every dynamic dim (the token then stays one row: onnxruntime's Concat refuses the
    batch mismatch, or the codes differ)."""
    d, form, seed = case
    hw = nanoir.lower_to_hw(_quantized(d, form, seed, bits))
    model = export_model(hw)
    onnx.checker.check_model(model, full_check=True)
    session = make_session(model)
    for batch in (1, 3):
        codes = quantize_inputs(main_function(hw), [_inputs(batch, seed + 40 + batch)])
        (want,) = nanoir.run(hw, *codes, raw=True)
        (got,) = run_model(session, codes)
        assert got.shape == np.shape(want)
        np.testing.assert_array_equal(got.astype(np.int64), np.asarray(want).astype(np.int64))


@settings(max_examples=examples(1), deadline=None)
@given(cases)
def test_qat_forward_is_the_nq_program(case) -> None:  # noqa: ANN001
    """nanoir.qat prepares, calibrates and converts the module: its eval forward in float64
    equals the converted nq program at batches 1 and 3. Mutant: the QAT expand step ignoring
    the shape source (the token stays one row)."""
    d, form, seed = case
    prepared = qat.prepare(_model(d, form), (torch.from_numpy(_inputs(2, seed)),))
    qat.calibrate(prepared, [_inputs(2, seed + 1)])
    prepared.eval()
    program = qat.convert(prepared)
    for batch in (1, 3):
        x = _inputs(batch, seed + 50 + batch).astype(np.float64)
        with torch.no_grad():
            got = prepared(torch.from_numpy(x)).numpy()
        (want,) = nanoir.run(program, x)
        np.testing.assert_array_equal(got, want)


STREAMED = """
func.func @main(%x: tensor<?x4x6xf32>, %t: tensor<1x4x6xf32>) -> tensor<?x8x6xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4x6xf32>
  %tq = nq.fake_quant %t {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<1x4x6xf32>
  %g = nf.gather %xq {axis = 2 : i64, indices = array<i64: 0, 2, 4>}
      : tensor<?x4x6xf32> -> tensor<?x4x3xf32>
  %e = nf.expand %tq like %g : tensor<1x4x6xf32> like tensor<?x4x3xf32> -> tensor<?x4x6xf32>
  %s = nf.concat %xq, %e {axis = 1 : i64}
      : (tensor<?x4x6xf32>, tensor<?x4x6xf32>) -> tensor<?x8x6xf32>
  %sq = nq.fake_quant %s {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x8x6xf32>
  func.return %sq : tensor<?x8x6xf32>
}
"""


def _fake_quant(v: np.ndarray, k: int) -> np.ndarray:
    return np.clip(np.trunc(v * 2.0**k), -128, 127) * 2.0**-k


@settings(max_examples=examples(6), deadline=None)
@given(st.integers(1, 4), st.sampled_from((1, 2, 4)), st.integers(0, 99))
def test_streamed_equals_whole(batch: int, step: int, seed: int) -> None:
    """A runtime ``[1, C, L]`` expanded to the batch of a value streamed along M (dim 2)
    with other rows (a strided slice, 3 rows for 6), then joined to ``x`` along the channels:
    the source is shape-only, so the expand's one cache is its input's, and the streamed run
    (steps of 1, 2, 4 rows) equals the whole run at nq and nh, which equals the concat of
    ``x`` and ``t`` broadcast in NumPy. Mutants: ``cache_operands`` keeping the shape source
    (caught by the cache check, and without it by the numbers: streamed != whole); the
    executor's stand-in for the source with batch 1 (the
    concat of a one-row token with the batch fails: an add, broadcasting, would not see it)."""
    module = nanoir.parse(STREAMED)
    rng = np.random.default_rng(seed)
    x, t = rng.standard_normal((batch, 4, 6)) * 3, rng.standard_normal((1, 4, 6)) * 3
    tokens = np.broadcast_to(_fake_quant(t, 5), x.shape)
    want = _fake_quant(np.concatenate([_fake_quant(x, 4), tokens], axis=1), 3)
    hw = nanoir.lower_to_hw(module.clone())
    (node,) = [n for n in build_graph(main_function(hw), 2).nodes if isinstance(n.op, nh.ExpandOp)]
    assert node.inputs == (node.op.input,)
    for program in (module, hw):
        np.testing.assert_array_equal(nanoir.run(program, x, t)[0], want)
        (streamed,) = nanoir.stream(program, [x, t], mem_dim=2, step=step)
        np.testing.assert_array_equal(streamed, want)


def test_a_constant_expanded_to_the_batch_alone_is_not_streamed() -> None:
    """The class token itself has no rows to stream (its input is a constant, the batch its
    only runtime part): stream-plan refuses it, naming the op and the way out."""
    hw = nanoir.lower_to_hw(_quantized(4, "token", 0))
    with pytest.raises(StreamPlanError, match="'nh.expand'(.|\n)*dynamic_batch=False"):
        stream_plan(hw)


def test_parse_print_and_verify() -> None:
    """The ``like`` form prints and parses back; a dim grown to a dynamic size without a
    source, or from a source whose dim is static, is refused by the verifier naming both.
    Mutant: ``check_expand_like`` without its static-source check."""
    good = """
    func.func @f(%x: tensor<?x3x4xf32>, %c: tensor<1x1x8xf32>) -> tensor<?x1x8xf32> {
      %y = nf.expand %c like %x : tensor<1x1x8xf32> like tensor<?x3x4xf32> -> tensor<?x1x8xf32>
      func.return %y : tensor<?x1x8xf32>
    }
    """
    module = nanoir.parse(good)
    assert str(nanoir.parse(str(module))) == str(module)
    with pytest.raises(nanoir.Error, match="shape source"):
        nanoir.parse(good.replace(" like %x", "").replace(" like tensor<?x3x4xf32>", ""))
    static = good.replace("%x: tensor<?x3x4xf32>", "%x: tensor<2x3x4xf32>").replace(
        "like tensor<?x3x4xf32>", "like tensor<2x3x4xf32>"
    )
    with pytest.raises((nanoir.Error, VerifyException), match="nf.expand(.|\n)*dim 0"):
        nanoir.parse(static)
