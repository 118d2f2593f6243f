"""``MaxUnpool2d`` by the indices of ``MaxPool2d(return_indices=True)`` (a MaxPool/MaxUnpool
decoder): nf equals torch; the indices are a runtime value at nq (no fake-quant on them) and
nh (``i32`` at exponent 0); nq == nh bit for bit; streamed == whole along batch (the indices
count absolute positions in a plane, so the spatial dims take the whole extent); an index
outside the plane is a clear runtime error."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh, nq
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import ExecutionError, run
from nanoir.runtime.stream import stream

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.magik_models import UnpoolDecoder
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def test_decoder_equals_torch_and_lowers_exactly(tmp_path: pathlib.Path) -> None:
    """nf == torch (float64); at 8- and 4-bit weights nq == nh bit for bit, no fake-quant
    reads or follows the indices, the nh indices are i32 at exponent 0; the nh program
    streamed along rows (the indices ops taking the whole extent) equals its whole run; its
    ``.ne`` (hw level) reads back byte for byte (the nq level's rows are tested in
    tests/grammar/test_ne_unpool_rows.py). Mutant seen to fail it: ``quantize_targets`` putting a fake-quant on the indices (IndexResult
    ignored)."""
    torch.manual_seed(0)
    net = UnpoolDecoder().eval()
    x = torch.randn(2, 3, 6, 8)
    module = from_torch(net, (x,))
    (y,) = run(module, x.double().numpy(), dtype=np.float64)
    np.testing.assert_allclose(y, net.double()(x.double()).detach().numpy(), atol=1e-12)
    net.float()
    for bits in (8, 4):
        q = module.clone()
        nanoir.quantize(q, [x.numpy()], weight_bits=bits)
        for op in q.walk():
            if isinstance(op, nq.FakeQuantOp):
                assert getattr(op.input.owner, "name", "") != "nf.max_pool_indices"
        (a,) = run(q, x.numpy(), dtype=np.float64)
        hw = lower_to_hw(q.clone())
        (b,) = run(hw, x.numpy())
        assert a.tobytes() == b.tobytes()
        (indices,) = [o for o in hw.walk() if isinstance(o, nh.MaxPoolIndicesOp)]
        assert nh.width_of(indices.result) == 32
    path = tmp_path / "hw.ne"  # the hw level's MaxPoolIndices / MaxUnpoolPlane rows
    nanoir.save(hw, str(path))
    back = nanoir.load(str(path))
    nanoir.save(back, str(tmp_path / "hw2.ne"))
    assert path.read_bytes() == (tmp_path / "hw2.ne").read_bytes()
    assert run(back, x.numpy())[0].tobytes() == b.tobytes()
    (codes,) = run(hw, x.numpy(), raw=True)
    for step in (1, 2):  # (the pool's indices and the unpool take the whole extent of rows)
        (streamed,) = stream(hw, [x.numpy()], step=step, raw=True)
        assert streamed.tobytes() == codes.tobytes()


def _program(c: int, h: int, w: int, k: int) -> str:
    x = f"tensor<?x{c}x{h}x{w}xf32>"
    p = f"tensor<?x{c}x{h // k}x{w // k}xf32>"
    return f"""func.func @main(%x: {x}) -> ({x}, {p}) {{
  %p = nf.max_pool %x {{kernel = array<i64: {k}, {k}>, strides = array<i64: {k}, {k}>}} : {x} -> {p}
  %i = nf.max_pool_indices %x {{kernel = array<i64: {k}, {k}>, strides = array<i64: {k}, {k}>}}
      : {x} -> {p}
  %y = nf.max_unpool %p, %i : ({p}, {p}) -> {x}
  func.return %y, %i : {x}, {p}
}}"""


@settings(max_examples=examples(12))
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from((1, 2, 3)),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    st.booleans(),
    st.sampled_from(("never", "auto")),
)
def test_pool_unpool_nq_equals_numpy_and_nh(
    c: int,
    hp: int,
    wp: int,
    k: int,
    bits: int,
    rounding: str,
    per_channel: bool,
    unsigned: str,
) -> None:
    """max_pool -> indices -> max_unpool: nq's indices are torch's (float64
    ``max_pool2d(return_indices=True)`` of the quantized input: ties, common at 1-2 bits, go
    to the first maximum) and its unpool torch's ``max_unpool2d`` of the pool's fake-quantized
    result; nh == nq bit for bit.
    Mutant seen to fail it: ``max_pool_indices`` taking the last maximum of a window."""
    h, w = hp * k, wp * k
    x = np.random.default_rng(c * 9 + h).standard_normal((2, c, h, w)) * 2
    module = nanoir.parse(_program(c, h, w, k))
    options = dict(act_bits=bits, rounding=rounding, act_per_channel=per_channel)
    nanoir.quantize(module, [x.astype(np.float32)], unsigned=unsigned, **options)
    y, i = run(module, x, dtype=np.float64)
    xt = torch.from_numpy(_fake_quant_of(module, x, None))
    pooled, want_i = torch.nn.functional.max_pool2d(xt, k, return_indices=True)
    pooled = torch.from_numpy(_fake_quant_of(module, pooled.numpy(), "nf.max_pool"))
    want_y = torch.nn.functional.max_unpool2d(pooled, want_i, k, output_size=(h, w))
    assert np.array_equal(i, want_i.double().numpy())
    assert np.array_equal(y, want_y.numpy())
    hw = lower_to_hw(module.clone())
    got_y, got_i = run(hw, x)
    assert got_y.tobytes() == y.tobytes() and np.array_equal(got_i, i)


def _fake_quant_of(module: object, x: np.ndarray, after: str | None) -> np.ndarray:
    """NumPy's own fake-quant of ``x`` by the program's fake-quant of the result of op
    ``after`` (None: of the input)."""
    (fq,) = [
        o
        for o in module.walk()  # type: ignore[attr-defined]
        if isinstance(o, nq.FakeQuantOp) and getattr(o.input.owner, "name", None) == after
    ]
    k = np.array([int(e) for e in fq.exp.get_values()], dtype=np.int64)
    k = k.reshape((1, -1, 1, 1) if k.size > 1 else ())
    bits = fq.bits.value.data
    signed = fq.signed is None or bool(fq.signed.value.data)
    if bits == 1:
        return np.ldexp(np.where(x >= 0, 1.0, -1.0), k)
    rounding = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_even": np.rint,
        "half_up": lambda s: np.floor(s + 0.5),
    }[str(fq.rounding.data)]
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return np.ldexp(np.clip(rounding(np.ldexp(x, k)), lo, hi), -k)


def test_an_index_outside_the_plane_is_a_runtime_error() -> None:
    """Indices from elsewhere (here: made up past the plane) stop the run with the op's name."""
    x = "tensor<?x1x2x2xf32>"
    module = nanoir.parse(
        f"""func.func @main(%p: {x}, %i: {x}) -> tensor<?x1x4x4xf32> {{
  %y = nf.max_unpool %p, %i : ({x}, {x}) -> tensor<?x1x4x4xf32>
  func.return %y : tensor<?x1x4x4xf32>
}}"""
    )
    p = np.ones((1, 1, 2, 2))
    (y,) = run(module, p, np.array([0.0, 5, 10, 15]).reshape(1, 1, 2, 2))
    assert y.reshape(-1).tolist() == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
    with pytest.raises(ExecutionError, match="nf.max_unpool.*16 is outside the 16-element"):
        run(module, p, np.array([0.0, 5, 10, 16]).reshape(1, 1, 2, 2))
