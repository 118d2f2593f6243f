"""Average pooling lowers exactly in every rounding mode: the mean rounded onto a coarser
grid is one division by ``n * 2**shift`` (``nh.avg_pool``'s ``shift``), since rounding the
mean and then shifting it would round twice (exact only for trunc and floor). Hypothesis over
1-D/2-D windows, strides, pads, ``count_include_pad``, ``ceil_mode``, ``divisor_override``,
per-tensor and per-channel exponents on both sides, coarser and finer outputs, 2/4/8 bits and
a dynamic batch: nq (float64) == nh bit for bit, and streamed == whole."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import stream
from xdsl.utils.exceptions import VerifyException

import nanoir
from nanoir.testing.programs import examples

MODES = ("trunc", "floor", "half_up", "half_even")


def _exp(values: list[int], rank: int) -> str:
    """A fake-quant's ``exp`` attribute: one, or per channel shaped ``[1, C, 1...]``."""
    if len(values) == 1:
        return f"dense<{values[0]}> : tensor<1xi8>"
    inner = ", ".join(f"[{'[' * (rank - 3)}{v}{']' * (rank - 3)}]" for v in values)
    dims = "x".join(["1", str(len(values))] + ["1"] * (rank - 2))
    return f"dense<[[{inner}]]> : tensor<{dims}xi8>" if rank > 2 else ""


@st.composite
def pool_program(draw):  # noqa: ANN001, ANN201
    n = draw(st.sampled_from((1, 2)))
    channels = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(n)]
    strides = [draw(st.integers(1, 3)) for _ in range(n)]
    pads = [draw(st.integers(0, k // 2)) for k in kernel] * 2
    sizes = [draw(st.integers(k, k + 6)) for k in kernel]
    ceil = draw(st.booleans())
    include = draw(st.booleans())
    override = draw(st.sampled_from((None, None, 3, 4)))
    bits_in, bits_out = draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((2, 4, 8)))
    mode = draw(st.sampled_from(MODES))
    exps_in = (
        draw(st.lists(st.integers(0, 5), min_size=1, max_size=1))
        if draw(st.booleans())
        else draw(st.lists(st.integers(0, 5), min_size=channels, max_size=channels))
    )
    exps_out = (
        draw(st.lists(st.integers(-2, 6), min_size=1, max_size=1))
        if draw(st.booleans())
        else draw(st.lists(st.integers(-2, 6), min_size=channels, max_size=channels))
    )
    rank = n + 2
    x_t = f"tensor<?x{channels}x{'x'.join(map(str, sizes))}xf32>"
    props = [f"kernel = array<i64: {', '.join(map(str, kernel))}>"]
    props.append(f"strides = array<i64: {', '.join(map(str, strides))}>")
    props.append(f"pads = array<i64: {', '.join(map(str, pads))}>")
    if ceil:
        props.append("ceil_mode = true")
    if not include:
        props.append("count_include_pad = false")
    if override is not None:
        props.append(f"divisor_override = {override} : i64")
    # The output shape: let the verifier's own rule (shared with the kernels) compute it.
    from nanoir.runtime.numerics.shapes import infer_pool_shape

    try:
        out = infer_pool_shape(
            (-1, channels, *sizes), kernel, strides=strides, pads=pads, ceil_mode=ceil
        )
    except ValueError:
        from hypothesis import assume

        assume(False)
    y_t = f"tensor<?x{channels}x{'x'.join(map(str, out[2:]))}xf32>"
    rounding = f"rounding = #nq.rounding<{mode}>"
    text = f"""\
func.func @main(%x: {x_t}) -> {y_t} {{
  %xq = nq.fake_quant %x {{bits = {bits_in} : i64, exp = {_exp(exps_in, rank)}, {rounding}}} : {x_t}
  %p = nf.avg_pool %xq {{{", ".join(props)}}} : {x_t} -> {y_t}
  %pq = nq.fake_quant %p {{bits = {bits_out} : i64, exp = {_exp(exps_out, rank)}, {rounding}}} : {y_t}
  func.return %pq : {y_t}
}}
"""
    return text, (channels, *sizes)


@settings(max_examples=examples(80), deadline=None)
@given(pool_program(), st.integers(1, 3), st.integers(0, 2**16), st.integers(1, 3))
def test_avg_pool_lowers_exactly_in_every_rounding_mode(
    case,  # noqa: ANN001
    batch: int,
    seed: int,
    step: int,
) -> None:
    text, shape = case
    module = nanoir.parse(text)
    x = np.random.default_rng(seed).standard_normal((batch, *shape)) * 4
    want = run(module, x, dtype=np.float64)
    hw = lower_to_hw(module.clone())
    hw.verify()
    got = run(hw, x)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
    codes = run(hw, x, raw=True)
    streamed = stream(hw, [x], step=step, raw=True)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(codes, streamed))


def test_the_shift_is_one_rounding() -> None:
    """half_even of the mean 2.5 codes at exp 0 onto exp -1 (units of 2): 2.5 / 2 = 1.25 -> 1;
    rounding twice would give round(round(2.5) / 2) = round(2 / 2) = 1 too, but 3.5 / 2 = 1.75
    -> 2 while round(round(3.5) / 2) = round(4 / 2) = 2, and 1.5 / 2 = 0.75 -> 1 while
    round(round(1.5) / 2) = round(2 / 2) = 1; 5.5 / 2 = 2.75 -> 3 but twice: round(6 / 2) = 3;
    the case that differs: 2.5 at exp 0 onto exp -2 (units of 4): 0.625 -> 1, twice:
    round(2) = 2, then 2 / 4 = 0.5 -> 0 (half to even)."""
    text = """\
func.func @main(%x: tensor<?x1x2xf32>) -> tensor<?x1x1xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<0> : tensor<1xi8>, rounding = #nq.rounding<half_even>} : tensor<?x1x2xf32>
  %p = nf.avg_pool %xq {kernel = array<i64: 2>} : tensor<?x1x2xf32> -> tensor<?x1x1xf32>
  %pq = nq.fake_quant %p {bits = 8 : i64, exp = dense<-2> : tensor<1xi8>, rounding = #nq.rounding<half_even>} : tensor<?x1x1xf32>
  func.return %pq : tensor<?x1x1xf32>
}
"""
    module = nanoir.parse(text)
    x = np.array([[[2.0, 3.0]]])  # mean 2.5
    (want,) = run(module, x, dtype=np.float64)
    assert want.item() == 4.0  # 2.5 / 4 = 0.625 rounds to 1 unit of 4
    hw = lower_to_hw(module.clone())
    (pool,) = [op for op in hw.walk() if isinstance(op, nh.AvgPoolOp)]
    assert list(nh.array_values(pool.shift) or ()) == [2]
    (got,) = run(hw, x)
    assert got.item() == 4.0


def test_a_negative_shift_is_refused() -> None:
    text = """\
func.func @main(%x: tensor<?x1x4xi8, #nh.fixed<2, BCM>>) -> tensor<?x1x2xi8, #nh.fixed<3, BCM>> {
  %p = nh.avg_pool %x {kernel = array<i64: 2>, strides = array<i64: 2>, shift = array<i64: -1>} : tensor<?x1x4xi8, #nh.fixed<2, BCM>> -> tensor<?x1x2xi8, #nh.fixed<3, BCM>>
  func.return %p : tensor<?x1x2xi8, #nh.fixed<3, BCM>>
}
"""
    with pytest.raises((VerifyException, nanoir.Error), match="must be >= 0"):
        nanoir.parse(text)


def test_a_shifted_pool_round_trips_through_ne(tmp_path) -> None:  # noqa: ANN001
    """The ``.ne`` hw level writes ``shift`` as an AveragePool attribute and reads it back."""
    text = """\
func.func @main(%x: tensor<?x2x6xf32>) -> tensor<?x2x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[[4], [5]]]> : tensor<1x2x1xi8>, rounding = #nq.rounding<half_up>} : tensor<?x2x6xf32>
  %p = nf.avg_pool %xq {kernel = array<i64: 2>, strides = array<i64: 2>} : tensor<?x2x6xf32> -> tensor<?x2x3xf32>
  %pq = nq.fake_quant %p {bits = 4 : i64, exp = dense<2> : tensor<1xi8>, rounding = #nq.rounding<half_up>} : tensor<?x2x3xf32>
  func.return %pq : tensor<?x2x3xf32>
}
"""
    hw = lower_to_hw(nanoir.parse(text))
    (pool,) = [op for op in hw.walk() if isinstance(op, nh.AvgPoolOp)]
    assert list(nh.array_values(pool.shift) or ()) == [2, 3]
    nanoir.save(hw, tmp_path / "p.ne")
    back = nanoir.load(tmp_path / "p.ne")
    nanoir.save(back, tmp_path / "q.ne")
    assert (tmp_path / "p.ne").read_bytes() == (tmp_path / "q.ne").read_bytes()
    assert "shift=[2, 3]" in (tmp_path / "p.ne").read_text()
    x = np.random.default_rng(0).standard_normal((3, 2, 6)) * 3
    assert run(back, x, raw=True)[0].tobytes() == run(hw, x, raw=True)[0].tobytes()
