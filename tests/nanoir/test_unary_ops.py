"""``nf.unary``, the one op for the elementwise functions of one input (issue 32 §3), through
every level: torch -> nf (float64, against torch) -> nq (the quantized semantics: the
function at the nearest point of its domain, then the output fake-quant) -> nh (the lookup
table, bit for bit, and against a quantizer written here over torch's function) -> `.ne` ->
streaming.

Mutants checked (each made the tests named fail; applied in place and restored):
- ``exp`` in the table as ``np.exp2``: test_nf_matches_torch, test_every_code_is_torchs_function;
- the domain of ``log`` dropped (``(-inf, inf)``: NaN reaches the table):
  test_out_of_domain_codes_saturate (a ValueError from the table);
- ``softplus`` ignoring ``threshold``: test_nf_matches_torch (the threshold case);
- the nq kernel evaluating torch's semantics where a fake-quant reads the result (NaN then
  fake-quantized): test_out_of_domain_codes_saturate (nq raises);
- the `.ne` row of Elu writing no alpha: test_ne_round_trips.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import unary as unary_numerics
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

SELU = (1.6732632423543772, 1.0507009873554805)

TORCH: dict[str, tuple[object, tuple[float, ...]]] = {
    "abs": (torch.abs, ()),
    "neg": (torch.neg, ()),
    "sign": (torch.sign, ()),
    "floor": (torch.floor, ()),
    "ceil": (torch.ceil, ()),
    "round": (torch.round, ()),
    "round_decimals": (lambda x, d: torch.round(x, decimals=int(d)), (1.0,)),
    "trunc": (torch.trunc, ()),
    "frac": (torch.frac, ()),
    "fmod": (torch.fmod, (0.75,)),
    "remainder": (torch.remainder, (-0.75,)),
    "exp": (torch.exp, ()),
    "exp2": (torch.exp2, ()),
    "expm1": (torch.expm1, ()),
    "log": (torch.log, ()),
    "log2": (torch.log2, ()),
    "log10": (torch.log10, ()),
    "log1p": (torch.log1p, ()),
    "sqrt": (torch.sqrt, ()),
    "rsqrt": (torch.rsqrt, ()),
    "reciprocal": (torch.reciprocal, ()),
    "pow": (torch.pow, (1.5,)),
    "scalar_pow": (lambda x, b: torch.pow(b, x), (3.0,)),
    "sin": (torch.sin, ()),
    "cos": (torch.cos, ()),
    "tan": (torch.tan, ()),
    "asin": (torch.asin, ()),
    "acos": (torch.acos, ()),
    "atan": (torch.atan, ()),
    "sinh": (torch.sinh, ()),
    "cosh": (torch.cosh, ()),
    "asinh": (torch.asinh, ()),
    "acosh": (torch.acosh, ()),
    "atanh": (torch.atanh, ()),
    "sinc": (torch.sinc, ()),
    "erf": (torch.erf, ()),
    "erfc": (torch.erfc, ()),
    "lgamma": (torch.lgamma, ()),
    "i0": (torch.i0, ()),
    "logit": (torch.logit, ()),
    "logit_eps": (lambda x, e: torch.logit(x, e), (0.05,)),
    "mish": (F.mish, ()),
    "softplus": (lambda x, b, t: F.softplus(x, b, t), (2.0, 3.0)),
    "elu": (lambda x, a, s, i: torch.ops.aten.elu(x, a, s, i), (0.5, 1.5, 2.0)),
    "selu": (F.selu, ()),
    "celu": (lambda x, a: F.celu(x, a), (0.7,)),
    "log_sigmoid": (F.logsigmoid, ()),
    "hardshrink": (lambda x, lam: F.hardshrink(x, lam), (0.5,)),
    "softshrink": (lambda x, lam: F.softshrink(x, lam), (0.5,)),
    "tanhshrink": (F.tanhshrink, ()),
    "softsign": (F.softsign, ()),
    "threshold": (lambda x, t, v: F.threshold(x, t, v), (0.25, -2.0)),
}
"""Each table function as torch computes it, with the parameters the tests use: the oracle."""

DOMAINS: dict[str, tuple[float, float]] = {
    "log": (0, math.inf),
    "log2": (0, math.inf),
    "log10": (0, math.inf),
    "log1p": (-1, math.inf),
    "sqrt": (0, math.inf),
    "rsqrt": (0, math.inf),
    "pow": (0, math.inf),  # (exponent 1.5)
    "asin": (-1, 1),
    "acos": (-1, 1),
    "acosh": (1, math.inf),
    "atanh": (-1, 1),
    "logit": (0, 1),
}
"""Where torch's function is real: outside, the quantized semantics is its value at the
nearest point of this interval (written here again, independently of the table)."""


def test_the_oracle_covers_the_table() -> None:
    assert set(TORCH) == set(unary_numerics.FUNCTIONS)


def torch_values(fn: str, x: np.ndarray) -> np.ndarray:
    op, params = TORCH[fn]
    with torch.no_grad():
        return op(torch.tensor(x, dtype=torch.float64), *params).numpy()  # type: ignore[operator]


@pytest.mark.parametrize("fn", sorted(TORCH))
def test_nf_matches_torch(fn: str) -> None:
    """The float kernel is torch's function in float64 (NaN where torch gives NaN), on values
    across the domains' edges and both signs, and the threshold of softplus."""
    x = np.concatenate([np.linspace(-4, 4, 81), [-1.0, 0.0, 1.0, 0.5, -0.5, 30.0, -30.0]])
    got = unary_numerics.evaluate(fn, x, TORCH[fn][1])
    want = torch_values(fn, x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


class _Every(nn.Module):
    """Every function of :data:`FRONTEND` on the input, one output each."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(TORCH[fn][0](x, *TORCH[fn][1]) for fn in FRONTEND)  # type: ignore[operator]


FRONTEND = [f for f in sorted(TORCH) if f not in ("logit_eps", "round_decimals", "elu")]
DECOMPOSED = ("hardshrink", "softshrink", "softsign", "tanhshrink")
"""torch.export writes these as other ATen ops (abs, where, div, tanh, ...)."""


def test_frontend_maps_each_function_to_one_unary_op() -> None:
    """Each torch function imports as one ``nf.unary`` of that name (the ones torch.export
    decomposes, as the ops it writes), equal to torch in float64 with a dynamic batch."""
    model = _Every().double().eval()
    gen = torch.Generator().manual_seed(0)
    example = torch.rand(2, 3, 5, dtype=torch.float64, generator=gen) * 4 - 2
    module = nanoir.from_torch(model, (example,))
    names = [op.fn.data for op in module.walk() if isinstance(op, nf.UnaryOp)]
    for fn in FRONTEND:
        if fn not in DECOMPOSED:
            assert fn in names, fn
    for n in (1, 3):
        x = torch.rand(n, 3, 5, dtype=torch.float64, generator=gen) * 4 - 2
        got = run(module, x.numpy(), dtype=np.float64)
        for fn, g, w in zip(FRONTEND, got, model(x)):
            np.testing.assert_allclose(
                g, w.numpy(), rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=fn
            )


def program(
    fn: str, bits_in: int, k_in: int, bits_out: int, k_out: int, mode: RoundingMode
) -> ModuleOp:
    """``fake_quant(unary(fake_quant(x)))`` on ``[?, 7]``."""
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, 7))])
    q = FakeQuantOp(block.args[0], bits_in, exp_attr(k_in), mode)
    y = nf.UnaryOp(q.results[0], fn, TORCH[fn][1])
    out = FakeQuantOp(y.results[0], bits_out, exp_attr(k_out), mode)
    block.add_ops([q, y, out, ReturnOp(out.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def quantized(
    v: np.ndarray, bits: int, k: int, mode: RoundingMode
) -> tuple[np.ndarray, np.ndarray]:
    """``v`` on the grid ``2**-k`` with ``bits`` (saturating; ±inf to the ends), by NumPy; and
    a mask of the elements off a rounding boundary (by 1e-9: there float64 functions of torch
    and NumPy may land a last bit apart)."""
    s = np.ldexp(v, k)
    with np.errstate(invalid="ignore"):
        if mode == RoundingMode.TRUNC:
            c, edge = np.trunc(s), np.abs(s - np.round(s))
        elif mode == RoundingMode.FLOOR:
            c, edge = np.floor(s), np.abs(s - np.round(s))
        else:
            c = np.floor(s + 0.5) if mode == RoundingMode.HALF_UP else np.round(s)
            edge = np.abs(s - np.floor(s) - 0.5)
    c = np.clip(c, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    clear = ~np.isfinite(s) | (edge > 1e-9 * np.maximum(1.0, np.abs(np.nan_to_num(s))))
    return np.ldexp(c, -k), clear


@settings(max_examples=examples(60), deadline=None)
@given(
    fn=st.sampled_from(sorted(TORCH)),
    bits_in=st.sampled_from((2, 4, 8)),
    k_in=st.integers(-1, 6),
    bits_out=st.sampled_from((4, 8)),
    k_out=st.integers(-2, 6),
    mode=st.sampled_from(tuple(RoundingMode)),
)
def test_every_code_is_torchs_function(
    fn: str, bits_in: int, k_in: int, bits_out: int, k_out: int, mode: RoundingMode
) -> None:
    """On every input code: nh (the table) == nq bit for bit, and both are torch's function
    at the nearest point of its domain, quantized by a rounding written here (at most one
    step apart on an exact rounding boundary)."""
    module = program(fn, bits_in, k_in, bits_out, k_out, mode)
    codes = np.arange(-(2 ** (bits_in - 1)), 2 ** (bits_in - 1), dtype=np.float64)
    x = np.resize(np.ldexp(codes, -k_in), (-(-codes.size // 7)) * 7).reshape(-1, 7)
    (nq,) = run(module, x)
    hw = lower_to_hw(module.clone())
    (nh,) = run(hw, x)
    assert nq.tobytes() == nh.tobytes()
    lo, hi = DOMAINS.get(fn, (-math.inf, math.inf))
    with np.errstate(all="ignore"):
        want, clear = quantized(torch_values(fn, np.clip(x, lo, hi)), bits_out, k_out, mode)
    np.testing.assert_array_equal(nq[clear], want[clear])
    assert np.all(np.abs(nq - want)[~clear] <= np.ldexp(1.0, -k_out))


def test_out_of_domain_codes_saturate() -> None:
    """log of negative codes is log(0) = -inf: the output's lowest code at nq and nh alike;
    sqrt of negative codes is 0 (torch: NaN at nf, which has no code)."""
    for fn, want in (("log", -(2**7) * 2.0**-4), ("sqrt", 0.0)):
        module = program(fn, 8, 4, 8, 4, RoundingMode.HALF_EVEN)
        x = np.full((1, 7), -1.5)
        (nq,) = run(module, x)
        (nh,) = run(lower_to_hw(module.clone()), x)
        np.testing.assert_array_equal(nq, np.full((1, 7), want))
        np.testing.assert_array_equal(nh, nq)


class _Stream(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.erf(F.mish(self.conv(x))) + torch.exp(-x.abs()).sum(1, keepdim=True)


def test_streamed_equals_whole() -> None:
    """A conv, then table functions: streamed along time equals the whole run, at nh."""
    model = _Stream().eval()
    x = torch.randn(2, 3, 12)
    module = nanoir.from_torch(model, (x,))
    nanoir.quantize(module, [x.numpy()], progress=False)
    hw = lower_to_hw(module)
    want = run(hw, x.numpy())
    got = nanoir.stream(hw, [x.numpy()], step=1)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()


def test_ne_round_trips() -> None:
    """Functions with an ONNX name write their row (Elu's alpha, Shrink's bias and lambd) and
    read back equal; a function with none (rsqrt) is refused naming it."""
    for fn, params in (("elu", (0.5, 1.0, 1.0)), ("softshrink", (0.25,)), ("erf", ())):
        block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, 7))])
        y = nf.UnaryOp(block.args[0], fn, params)
        block.add_ops([y, ReturnOp(y.results[0])])
        ftype = FunctionType.from_lists([block.args[0].type], [y.results[0].type])
        module = ModuleOp([FuncOp("main", ftype, Region(block))])
        back = import_nanoengine(export_nanoengine(module))
        (op,) = [o for o in back.walk() if isinstance(o, nf.UnaryOp)]
        assert (op.fn.data, op.param_values()) == (fn, params)
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, 7))])
    y = nf.UnaryOp(block.args[0], "rsqrt")
    block.add_ops([y, ReturnOp(y.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [y.results[0].type])
    with pytest.raises(nanoir.Error, match="nf.unary 'rsqrt' has no NanoEngine"):
        export_nanoengine(ModuleOp([FuncOp("main", ftype, Region(block))]))


def test_parameters_that_would_be_nan_are_refused() -> None:
    """fmod by 0 (NaN everywhere) is refused by the frontend, naming the op."""

    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fmod(x, 0.0)

    with pytest.raises(nanoir.Error, match="fmod's divisor must not be 0"):
        nanoir.from_torch(Bad(), (torch.randn(2, 3),))
