"""quantize on values calibration cannot measure: infinite constants (a causal mask
``full(-inf).triu(1)`` added to attention scores: folded into the softmax's boolean mask, or
a selection whose fake-quant picks the lowest code; NaN or an infinite weight is one clear
error) and empty tensors (``x[:, :0]`` concatenated: one exponent, from nothing measured).
Oracles: torch (float64) and NumPy written here; nh == nq bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.frontend import from_torch

torch.set_num_threads(1)
T, D = 6, 8


class _CausalScores(nn.Module):
    """TinyLlama-style causal attention probabilities: scores plus a ``-inf`` upper
    triangle (``add``), minus a ``+inf`` one (``sub``) or ``masked_fill(-inf)``, softmax."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(D, D), nn.Linear(D, D)
        self.how = how
        self.register_buffer("causal", torch.full((T, T), float("-inf")).triu(1))
        self.register_buffer("future", torch.ones(T, T).triu(1) != 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.25
        if self.how == "add":
            scores = scores + self.causal
        elif self.how == "sub":
            scores = scores - (-self.causal)
        else:
            scores = scores.masked_fill(self.future, float("-inf"))
        return torch.softmax(scores, -1)


@pytest.mark.parametrize("how", ["add", "sub", "masked_fill"])
def test_causal_mask_of_infinities_is_the_softmax_mask(how: str) -> None:
    """quantize takes the ``-inf`` mask (it raised a bare ValueError on the constant): the
    softmax reads the scores with a boolean mask, so every future position's probability is
    exactly 0 at nq and nh, as torch's; the others are torch's within 8-bit steps (each
    row sums to 1 within its codes); nh == nq bit for bit.
    kills: fold_infinite_masks not called (ValueError); _softmax_mask declined (masked
    positions get the weight of the scores' lowest code: not 0)."""
    torch.manual_seed(0)
    net = _CausalScores(how).eval()
    x = torch.randn(5, T, D)
    module = from_torch(net, (x,))
    nanoir.quantize(module, [torch.randn(8, T, D).numpy() for _ in range(2)])
    (softmax,) = [op for op in module.walk() if isinstance(op, nf.SoftmaxOp)]
    assert softmax.mask is not None
    want = net.double()(x.double()).detach().numpy()
    (got,) = run(module, x.numpy(), dtype=np.float64)
    future = np.triu(np.ones((T, T), dtype=bool), 1)
    assert (want[:, future] == 0).all() and (got[:, future] == 0).all()
    assert np.abs(got - want).max() < 0.1
    (hw,) = run(lower_to_hw(module.clone()), x.numpy())
    assert np.array_equal(hw, got)


def _hex(c: np.ndarray) -> str:
    """A ``dense<"0x...">`` blob of float32 values (infinities and NaN included)."""
    return '"0x' + np.asarray(c, "<f4").tobytes().hex().upper() + '"'


def _program(body: str, constant: str, shape: str = "4x4") -> str:
    t = f"tensor<?x{shape}xf32>"
    return f"""func.func @main(%x: {t}) -> {t} {{
  %c = nf.constant "mask" dense<{constant}> : tensor<{shape}xf32>
  {body}
  func.return %y : {t}
}}"""


def test_infinite_constant_read_by_a_relu_becomes_a_selection() -> None:
    """``relu(x + C)`` with ``C`` 0 / ``-inf`` / 0.5 (no softmax to mask): a selection of
    ``x + C'`` and the infinity, whose fake-quant picks the lowest code, so the ReLU gives
    exactly 0 at the infinities (torch: relu(-inf) = 0) and NumPy's fake-quant of
    ``relu(xq + 0.5)`` elsewhere; nh == nq.
    kills: the finite part C' dropped (x instead of x + 0.5); fold_infinite_masks not called."""
    rng = np.random.default_rng(3)
    c = np.where(rng.random((4, 4)) < 0.4, -np.inf, np.where(rng.random((4, 4)) < 0.5, 0.0, 0.5))
    dense = _hex(c)
    t = "tensor<?x4x4xf32>"
    body = (
        f"%s = nf.add %x, %c : ({t}, tensor<4x4xf32>) -> {t}\n"
        f"  %y = nf.relu %s : {t}"
    )  # fmt: skip
    module = nanoir.parse(_program(body, dense))
    nanoir.quantize(module, [rng.standard_normal((8, 4, 4))], act_bits=8, bias_correction=False)
    x = rng.standard_normal((6, 4, 4))
    (got,) = run(module, x, dtype=np.float64)
    masked = np.broadcast_to(np.isinf(c), got.shape)
    assert (got[masked] == 0).all()
    want = np.maximum(x + np.where(np.isinf(c), 0.0, c), 0.0)
    assert np.abs(got - want)[~masked].max() < 0.1
    (hw,) = run(lower_to_hw(module.clone()), x)
    assert np.array_equal(hw, got)


@pytest.mark.parametrize(
    ("constant", "reader", "message"),
    [
        (np.nan, "nf.add", "constant mask holds NaN"),
        (-np.inf, "nf.linear", "constant mask holds an infinity and is a weight"),
    ],
)
def test_nan_or_infinite_weight_is_one_clear_error(
    constant: float, reader: str, message: str
) -> None:
    """A NaN constant, or an infinity in a linear's weight: one nanoir.Error naming it."""
    t = "tensor<?x4x4xf32>"
    if reader == "nf.add":
        body = f"%y = nf.add %x, %c : ({t}, tensor<4x4xf32>) -> {t}"
    else:
        body = f"%y = nf.linear %x, %c : ({t}, tensor<4x4xf32>) -> {t}"
    c = np.eye(4)
    c[0, 1] = constant
    module = nanoir.parse(_program(body, _hex(c)))
    with pytest.raises(nanoir.Error, match=message):
        nanoir.quantize(module, [np.ones((2, 4, 4))])


_EMPTY = """func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %w = nf.constant "w" dense<[[0.5, -0.25, 1.0, 0.75], [0.125, 0.25, -0.375, 0.5], [1.0, 1.0, 1.0, 1.0], [0.0, 0.5, 0.0, -0.5]]> : tensor<4x4xf32>
  %y = nf.linear %x, %w : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  %a, %b = nf.split %y {axis = 1 : i64, sizes = array<i64: 4, 0>} : (tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x0xf32>)
  %r = nf.relu %b : tensor<?x0xf32>
  %c = nf.concat %a, %r {axis = 1 : i64} : (tensor<?x4xf32>, tensor<?x0xf32>) -> tensor<?x4xf32>
  func.return %c : tensor<?x4xf32>
}"""


@pytest.mark.parametrize("calibrator", ["absmax", "mse"])
@pytest.mark.parametrize("act_per_channel", [False, True])
@pytest.mark.parametrize("act_bits", [1, 8])
def test_empty_intermediate_quantizes(
    calibrator: str, act_per_channel: bool, act_bits: int
) -> None:
    """``x W^T`` split into its 4 columns and an empty part, which a ReLU reads and a concat
    joins back: quantize does not crash (it raised "absmax of an empty tensor"), the empty
    tensor gets one exponent (per tensor: it has no channel), and the output is NumPy's
    fake-quant of ``xq Wq^T`` at the program's exponents; nh == nq.
    kills: the empty guard in calibration's observe_absmax dropped (ValueError); _empty
    dropped from the per-tensor choice; lower-to-hw's shift_list reading the first shift of
    an empty part (split of per-channel exponents: IndexError)."""
    module = nanoir.parse(_EMPTY)
    rng = np.random.default_rng(5)
    nanoir.quantize(
        module,
        [rng.standard_normal((8, 4))],
        calibrator=calibrator,
        act_per_channel=act_per_channel,
        act_bits=act_bits,
        weight_bits=8,
        bias_correction=False,
    )
    fqs = {
        op.input.name_hint: op
        for op in module.walk()
        if op.name == "nq.fake_quant" and op.input.name_hint in ("x", "w", "y", "r")
    }
    assert len(fqs["r"].exp.get_values()) == 1
    w = np.array(
        [[0.5, -0.25, 1.0, 0.75], [0.125, 0.25, -0.375, 0.5], [1, 1, 1, 1], [0, 0.5, 0, -0.5]]
    )
    x = rng.standard_normal((6, 4))
    xq, wq = _fake_quant(x, fqs["x"]), _fake_quant(w, fqs["w"])
    want = _fake_quant(xq @ wq.T, fqs["y"])
    (got,) = run(module, x, dtype=np.float64)
    assert np.array_equal(got, want)
    (hw,) = run(lower_to_hw(module.clone()), x)
    assert np.array_equal(hw, got)


def _fake_quant(x: np.ndarray, op: object) -> np.ndarray:
    """A fake-quant written here (signed codes; 1 bit: ``±2**k``) at ``op``'s bits,
    exponents (shaped as its ``exp``) and rounding."""
    bits = op.bits.value.data  # type: ignore[attr-defined]
    exp = op.exp  # type: ignore[attr-defined]
    k = np.asarray(exp.get_values(), np.int64).reshape(exp.type.get_shape())
    if bits == 1:
        return np.ldexp(np.where(x >= 0, 1.0, -1.0), k)
    mode = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_even": np.rint,
        "half_up": lambda v: np.floor(v + 0.5),
    }[str(op.rounding.data)]  # type: ignore[attr-defined]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return np.ldexp(np.clip(mode(np.ldexp(x, k)), lo, hi), -k)
