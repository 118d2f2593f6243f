"""The streaming executor's fast paths (``nanoir.runtime.stream_fast``) give the general
path's results bit for bit: random programs of every op kind, at the nq and nh levels, with
random batches and steps, streamed with and without them (and against the whole run)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime import stream as stream_module
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import requant_codes
from nanoir.runtime.stream import StreamRunner, stream
from nanoir.runtime.stream_fast import RowBuffer, fast_requant
from xdsl.dialects.builtin import ModuleOp

from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program


def _streamed(module: ModuleOp, x: np.ndarray, step: int, fast: bool) -> tuple[list[Any], int]:
    old = stream_module.FAST_PATHS
    stream_module.FAST_PATHS = fast
    try:
        runner = StreamRunner(module, raw=True)
    finally:
        stream_module.FAST_PATHS = old
    taken = sum(r.fast is not None for r in runner.runs)
    FUSED_TAKEN[0] += sum(getattr(r, "chain_fused", None) is not None for r in runner.runs)
    return stream(module, [x], step=step, runner=runner), taken


FUSED_TAKEN = [0]


def _set_roundings(module: ModuleOp, draw: Any) -> None:
    """Every nh.requant gets a drawn rounding mode (the lowering always picks one)."""
    from nanoir.runtime.numerics.quant import RoundingMode

    for op in module.walk():
        if op.name == "nh.requant":
            mode = draw(st.sampled_from(list(RoundingMode)), label="rounding")
            op.properties["rounding"] = type(op.properties["rounding"])(mode)


FAST_TAKEN = [0]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_equals_general(data: st.DataObject) -> None:
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    batch = data.draw(st.sampled_from((1, 2, 5)), label="batch")
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 4.0)))
    step = data.draw(st.integers(1, 5), label="step")
    hw = lower_to_hw(module.clone())
    _set_roundings(hw, data.draw)
    for level in (module, hw):
        fast, taken = _streamed(level, x, step, True)
        general, _ = _streamed(level, x, step, False)
        FAST_TAKEN[0] += taken
        whole = run(level, x, raw=True)
        for f, g, w in zip(fast, general, whole):
            assert f.dtype == g.dtype and f.shape == g.shape == w.shape
            assert f.tobytes() == g.tobytes()
            assert np.array_equal(f, w)  # (dtype: test_stream.py checks it, not raw)


def test_fast_paths_were_taken() -> None:
    """Run after the property test (file order): the random programs did exercise the fast
    conv (1-d nh convs with one group)."""
    if FAST_TAKEN[0] == 0:
        pytest.skip("run alone: nothing counted")
    assert FAST_TAKEN[0] > 0
    assert FUSED_TAKEN[0] > 0


def test_row_buffer_is_the_cache() -> None:
    """Random appends, takes and drops: a RowBuffer holds what the chunk cache holds."""
    rng = np.random.default_rng(0)
    buf = RowBuffer(np.dtype(np.float64))
    cache = stream_module._Cache(2)
    seen = np.zeros((2, 3, 0))
    for _ in range(300):
        n = int(rng.integers(0, 4))
        a = rng.standard_normal((2, 3, n))
        buf.append(a)
        cache.append(a)
        seen = np.concatenate([seen, a], axis=2)
        assert (buf.base, buf.end, buf.held()) == (cache.base, cache.end, cache.held())
        if buf.held():
            start = int(rng.integers(buf.base, buf.end))
            stop = int(rng.integers(start, buf.end + 1))
            got = np.ascontiguousarray(buf.take(start, stop).transpose(0, 2, 1))
            assert got.tobytes() == cache.take(start, stop).tobytes()
            assert got.tobytes() == seen[:, :, start:stop].tobytes()
        row = buf.base + int(rng.integers(0, 4))
        buf.drop_before(row)
        cache.drop_before(row)


REQUANT = """\
func.func @main(%x: tensor<?x4x?xi32, #nh.fixed<{exp_in}, BCM>>) -> tensor<?x4x?xi8, #nh.fixed<{exp_out}, BCM>> {{
  %y = nh.requant %x {{shift = array<i64: {shift}>, rounding = #nq.rounding<{mode}>}} : tensor<?x4x?xi32, #nh.fixed<{exp_in}, BCM>> -> tensor<?x4x?xi8, #nh.fixed<{exp_out}, BCM>>
  func.return %y : tensor<?x4x?xi8, #nh.fixed<{exp_out}, BCM>>
}}
"""


@pytest.mark.parametrize("mode", ["trunc", "floor", "half_up", "half_even"])
@pytest.mark.parametrize("shifts", [[0], [1], [5], [30], [2, 7, 0, 12], [3, 3, 9, 4]])
def test_fast_requant_is_requant_codes(mode: str, shifts: list[int]) -> None:
    """Every rounding mode and shift (per tensor, per channel), int8..int32 inputs at the
    extremes: the fast requant equals ``requant_codes``, or is not taken."""
    import nanoir

    per_channel = len(shifts) > 1
    exp_out = "[1, 1, 1, 1]" if per_channel else "1"
    exp_in = (
        "[" + ", ".join(str(1 + s) for s in shifts) + "]" if per_channel else str(1 + shifts[0])
    )
    text = REQUANT.format(
        exp_in=exp_in, exp_out=exp_out, shift=", ".join(map(str, shifts)), mode=mode
    )
    module = nanoir.parse(text)
    (op,) = [op for op in module.walk() if op.name == "nh.requant"]
    kernel = fast_requant(op)
    shift = np.asarray(shifts).reshape(1, -1, 1) if per_channel else np.asarray(shifts[0])
    rng = np.random.default_rng(len(shifts) + shifts[0])
    for dtype in (np.int8, np.int16, np.int32, np.int64):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
        x = rng.integers(lo, hi, (3, 4, 9), endpoint=True).astype(dtype)
        x[0, :, 0], x[0, :, 1] = lo, hi
        want = requant_codes(x, shift, 8, mode)
        if kernel is None:
            continue
        (got,) = kernel(x)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        last = fast_requant(op, channel_last=True)
        assert last is not None
        (got,) = last(np.ascontiguousarray(x.transpose(0, 2, 1)))
        assert got.transpose(0, 2, 1).tobytes() == want.tobytes()


FAKE_QUANT = """\
func.func @main(%x: tensor<?x3x?xf32>) -> tensor<?x3x?xf32> {{
  %y = nq.fake_quant %x {{bits = {bits} : i64, exp = dense<{exp}> : tensor<{shape}xi8>, rounding = #nq.rounding<{mode}>}} : tensor<?x3x?xf32>
  func.return %y : tensor<?x3x?xf32>
}}
"""


@pytest.mark.parametrize("mode", ["trunc", "floor", "half_up", "half_even"])
@pytest.mark.parametrize("bits", [1, 2, 8, 16])
@pytest.mark.parametrize("exp", [[0], [5], [-3], [2, -1, 7]])
def test_fast_fake_quant_is_fake_quant(mode: str, bits: int, exp: list[int]) -> None:
    """Every mode, width and exponent (per tensor, per channel), on ties, infinities, signed
    zeros, tiny negatives and large values, float32 and float64: the fast kernel equals
    ``quant.fake_quant`` bit for bit (or is not taken), and a NaN still raises."""
    from nanoir.runtime.numerics.quant import fake_quant
    from nanoir.runtime.stream_fast import fast_fake_quant

    import nanoir

    per_channel = len(exp) > 1
    text = FAKE_QUANT.format(
        bits=bits,
        exp=[[[e] for e in exp]] if per_channel else exp[0],
        shape="1x3x1" if per_channel else "1",
        mode=mode,
    )
    module = nanoir.parse(text)
    (op,) = [op for op in module.walk() if op.name == "nq.fake_quant"]
    k = np.asarray(exp).reshape(1, -1, 1) if per_channel else np.asarray(exp)
    rng = np.random.default_rng(bits)
    special = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-300, -1e-300, np.inf, -np.inf]
    special += [1e300, 1.7e308, -1.7e308, 1e-310, -1e-310, 5e-324, -5e-324, 0.49999999999999994]
    for dtype in (np.float32, np.float64):
        kernel = fast_fake_quant(op, np.dtype(dtype))
        if kernel is None:
            assert bits == 1
            continue
        x = rng.standard_normal((2, 3, 24)) * 50
        x[0, 0, : len(special)] = special
        x[1, 2, : len(special)] = np.ldexp(np.asarray(special), -exp[-1])
        with np.errstate(over="ignore"):
            x = x.astype(dtype)
        (got,) = kernel(x)
        want = fake_quant(x, bits, k, mode).astype(dtype, copy=False)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        x[0, 1, 3] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            kernel(x)


AVG_POOL = """\
func.func @main(%x: tensor<?x4x?xi8, #nh.fixed<{exp_in}, BCM>>) -> tensor<?x4x?xi{bits}, #nh.fixed<{exp_out}, BCM>> {{
  %y = nh.avg_pool %x {{kernel = array<i64: {k}>, strides = array<i64: {k}>{shift}, rounding = #nq.rounding<{mode}>}} : tensor<?x4x?xi8, #nh.fixed<{exp_in}, BCM>> -> tensor<?x4x?xi{bits}, #nh.fixed<{exp_out}, BCM>>
  func.return %y : tensor<?x4x?xi{bits}, #nh.fixed<{exp_out}, BCM>>
}}
"""


@pytest.mark.parametrize("mode", ["trunc", "floor", "half_up", "half_even"])
@pytest.mark.parametrize("k", [1, 3, 25])
@pytest.mark.parametrize("shifts", [[], [2], [0, 1, 3, 2]])
def test_fast_avg_pool_is_avg_pool(mode: str, k: int, shifts: list[int]) -> None:
    """Windows that tile the rows, every rounding mode, shifts per tensor and per channel,
    codes at the extremes: the fast avg pool equals the general kernel bit for bit, and
    declines a window that is not whole windows."""
    from nanoir.runtime.interpreter import default_builders
    from nanoir.runtime.stream_fast import fast_avg_pool

    import nanoir

    per_channel = len(shifts) > 1
    exp_in = "[4, 4, 4, 4]" if per_channel else "4"
    exp_out = (
        "[" + ", ".join(str(4 - s) for s in shifts) + "]"
        if per_channel
        else str(4 - (shifts[0] if shifts else 0))
    )
    shift = f", shift = array<i64: {', '.join(map(str, shifts))}>" if shifts else ""
    text = AVG_POOL.format(exp_in=exp_in, exp_out=exp_out, shift=shift, mode=mode, k=k, bits=8)
    module = nanoir.parse(text)
    (op,) = [op for op in module.walk() if op.name == "nh.avg_pool"]
    kernel = fast_avg_pool(op, 2)
    assert kernel is not None
    general = default_builders()[type(op)](op, np.dtype(np.float64))
    rng = np.random.default_rng(k + len(shifts))
    for count in (1, 2, 5):
        x = rng.integers(-128, 127, (3, 4, count * k), endpoint=True).astype(np.int8)
        x[0, :, :k], x[1, :, :k] = -128, 127
        for view in (x, np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)):
            got = kernel(view)
            assert got is not None
            (want,) = general(view)
            assert got[0].dtype == want.dtype and got[0].tobytes() == want.tobytes()
    if k > 1:
        assert kernel(x[:, :, : k + 1]) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_clip_is_maximum_then_minimum(dtype: Any) -> None:
    """The fast kernels' one-call saturation gives what ``maximum`` then ``minimum`` did."""
    from nanoir.runtime import stream_fast

    a = (np.random.default_rng(0).standard_normal((16, 7, 5)) * 300).round().astype(dtype)
    lo, hi = (dtype(-128), dtype(127)) if dtype is not np.int32 else (-128, 127)
    want = np.minimum(np.maximum(a, lo), hi)
    got = a.copy()
    assert stream_fast._clip(got, lo, hi, out=got) is got
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
