"""1-bit activations lower to nh programs that run and compute the nq numbers (issue 19, 13).

A 1-bit code is -1 or +1 (``i1`` has no 0), so an op whose result can be 0 on such codes (a
relu, a clamp with a bound between them, an average of them) must carry its result in a wider
container. The property test sets activations of random programs of every op kind to 1 bit;
the fixed cases check the three ops against NumPy written here.

Mutants each test catches (applied in a private copy, each failed):
- ``HwLowering.with_zero`` returning its value unchanged: every test below (the nh program
  raises "does not fit i1");
- ``LowerRelu`` / ``LowerClamp`` / ``FuseAvgPoolFakeQuant`` without their ``with_zero`` call:
  ``test_relu_of_one_bit_codes`` and ``test_conv1d_relu_at_act_bits_1`` /
  ``test_clamp_of_one_bit_codes`` / ``test_average_of_one_bit_codes``, and the property test;
- the 1-bit average pooled with the fake-quant's own rounding (trunc) instead of floor:
  ``test_average_to_one_bit`` (the mean -1/3 truncates to 0, whose sign is +1, not -1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import OpResult

import nanoir
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program


def lower_and_compare(nq_module: ModuleOp, x: np.ndarray) -> list[np.ndarray]:
    """The nh program's outputs, after checking they equal the nq program's bit for bit."""
    want = run(nq_module, x, dtype=np.float64)
    hw = lower_to_hw(nq_module.clone())
    hw.verify()
    got = run(hw, x)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        bad = np.flatnonzero(g != w)
        assert bad.size == 0, (
            f"{bad.size} mismatches; first: nh {g.flat[bad[0]]}, nq {w.flat[bad[0]]}"
        )
    return got


def to_one_bit(module: ModuleOp, draw: st.DrawFn) -> int:
    """Make activation fake-quants (not those of constants) 1-bit: all of them, or a drawn
    subset; returns how many changed."""
    every = draw(st.booleans())
    changed = 0
    for op in module.walk():
        if not isinstance(op, FakeQuantOp):
            continue
        src = op.input
        if isinstance(src, OpResult) and isinstance(src.op, nf.ConstantOp):
            continue
        if every or draw(st.booleans()):
            op.properties["bits"] = IntegerAttr(1, i64)
            changed += 1
    return changed


@settings(max_examples=examples(80), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_with_one_bit_activations(data: st.DataObject) -> None:
    """Random programs of every op kind, activations 1-bit: the nh program runs and equals the
    nq program (5 of 200 random programs raised "does not fit i1" at run time before).
    Softmax is left out: its output is non-negative, 1-bit codes (±1) cannot hold it, and
    lower-to-hw refuses a 1-bit softmax output, naming the op; so are LayerNorm and GroupNorm
    (their integer algorithm writes 2 bits or more; a 1-bit output is refused the same way),
    normalize (the same algorithm), and the recurrent cell (its input and states are read on
    signed grids of 2 bits or more; 1-bit operands are refused naming the op)."""
    left_out = ("softmax", "layer_norm", "group_norm", "normalize", "recurrent")
    module, shape = random_nq_program(
        data.draw, kinds=tuple(k for k in ALL_KINDS if k not in left_out)
    )
    to_one_bit(module, data.draw)
    module.verify()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((2, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    lower_and_compare(module, x)


def one_op_program(shape: str, body: str, out_shape: str | None = None) -> ModuleOp:
    """``%xq``: the input quantized to 1 bit, magnitude 2**-1 (codes ±1 at exponent 1)."""
    out_shape = out_shape or shape
    return nanoir.parse(
        f"""\
func.func @main(%x: tensor<{shape}xf32>) -> tensor<{out_shape}xf32> {{
  %xq = nq.fake_quant %x {{bits = 1 : i64, exp = dense<-1> : tensor<1xi8>}} : tensor<{shape}xf32>
  {body}
  func.return %y : tensor<{out_shape}xf32>
}}
"""
    )


SIGNS = np.array([[[0.3, -2.0, -0.1, 4.0, 0.0, -7.0]]])
"""Inputs whose 1-bit codes are [+1, -1, -1, +1, +1, -1] (0 quantizes to +1)."""
HALF = np.where(SIGNS >= 0, 0.5, -0.5)
"""Their 1-bit values: sign * 2**-1."""


def test_relu_of_one_bit_codes() -> None:
    module = one_op_program("?x1x6", "%y = nf.relu %xq : tensor<?x1x6xf32>")
    (y,) = lower_and_compare(module, SIGNS)
    np.testing.assert_array_equal(y, np.maximum(HALF, 0.0))


def test_clamp_of_one_bit_codes() -> None:
    """A ReLU6-like clamp, bounds whole codes on the input's grid: -1 codes become 0."""
    module = one_op_program(
        "?x1x6", "%y = nf.clamp %xq {min = 0.0 : f64, max = 4.0 : f64} : tensor<?x1x6xf32>"
    )
    (y,) = lower_and_compare(module, SIGNS)
    np.testing.assert_array_equal(y, np.clip(HALF, 0.0, 4.0))


AVG = (
    "%p = nf.avg_pool %xq {kernel = array<i64: 3>, strides = array<i64: 3>} : tensor<?x1x6xf32> -> tensor<?x1x2xf32>\n"
    "  %y = nq.fake_quant %p {bits = BITS : i64, exp = dense<EXP> : tensor<1xi8>} : "
    "tensor<?x1x2xf32>"
)


def test_average_of_one_bit_codes() -> None:
    """The mean of (+1, -1, -1) and (+1, +1, -1) codes at 4 bits, exponent 1 (trunc): the
    means ±1/6 truncate to 0 (codes no i1 holds)."""
    module = one_op_program("?x1x6", AVG.replace("BITS", "4").replace("EXP", "1"), "?x1x2")
    (y,) = lower_and_compare(module, SIGNS)
    means = HALF.reshape(1, 1, 2, 3).mean(axis=-1)
    np.testing.assert_array_equal(y, np.trunc(means * 2) / 2)
    assert (y == 0).all()


def test_average_to_one_bit() -> None:
    """The same means quantized to 1 bit: their signs, -1/6 -> -1 and +1/6 -> +1 (times
    2**-2); they lowered to an error before."""
    module = one_op_program("?x1x6", AVG.replace("BITS", "1").replace("EXP", "-2"), "?x1x2")
    (y,) = lower_and_compare(module, SIGNS)
    means = HALF.reshape(1, 1, 2, 3).mean(axis=-1)
    np.testing.assert_array_equal(y, np.where(means >= 0, 0.25, -0.25))
    assert (y < 0).any() and (y > 0).any()


def test_conv1d_relu_at_act_bits_1() -> None:
    """The reported case: ``Conv1d -> ReLU`` quantized with ``act_bits=1`` lowered, and its nh
    program raised at run time (the ReLU reads the conv's 1-bit codes); now it runs, and the
    ReLU's 1-bit fake-quant gives +1 everywhere (the sign of a value >= 0)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv1d(2, 3, 3), torch.nn.ReLU()).eval()
    x = torch.randn(4, 2, 10)
    nq = nanoir.compile_model(model, (x,), [x.numpy()], stop="nq", act_bits=1)
    relu = [op for op in nq.walk() if isinstance(op, nf.ReluOp)]
    assert len(relu) == 1 and isinstance(relu[0].input.owner, FakeQuantOp)
    assert relu[0].input.owner.bits.value.data == 1
    xs = np.random.default_rng(1).standard_normal((4, 2, 10))
    (y,) = lower_and_compare(nq, xs)
    assert y.shape == (4, 3, 8) and len(np.unique(y)) == 1 and y.flat[0] > 0


EQUAL_PER_CHANNEL_THEN_TRANSPOSE = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x6x2xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<[[1], [1]]> : tensor<2x1xi8>} : tensor<?x2x3xf32>
  %t = nf.transpose %xq {perm = array<i64: 0, 2, 1>} : tensor<?x2x3xf32> -> tensor<?x3x2xf32>
  %y = nf.concat %t, %t {axis = 1 : i64} : (tensor<?x3x2xf32>, tensor<?x3x2xf32>) -> tensor<?x6x2xf32>
  func.return %y : tensor<?x6x2xf32>
}
"""


def test_equal_per_channel_exponents_through_a_transpose_then_concat() -> None:
    """Found by the property test above (not a 1-bit case): per-channel exponents that are all
    equal, moved off the channel dim by a transpose, then joined along the channels, raised a
    bare NumPy broadcasting ValueError in the lowering (a zero-shift ``shift_to`` kept the
    per-channel exponents it was asked to make one). Mutant caught: ``shift_to`` returning
    its value unchanged when no shift is needed."""
    x = np.random.default_rng(3).standard_normal((2, 2, 3)) * 3
    (y,) = lower_and_compare(nanoir.parse(EQUAL_PER_CHANNEL_THEN_TRANSPOSE), x)
    q = np.clip(np.trunc(x * 2), -8, 7) / 2
    t = q.transpose(0, 2, 1)
    np.testing.assert_array_equal(y, np.concatenate([t, t], axis=1))
