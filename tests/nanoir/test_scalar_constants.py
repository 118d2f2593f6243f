"""Python scalars in a program (``x * 32**-0.5``, ``x + 1e-3``): quantize gives one that is no
short dyadic a weight's fake-quant, so the program lowers (issue 20: programs nanoir quantized
lower); a short dyadic (``x * 0.5``) keeps its exact float path, text unchanged.

Oracles: NumPy in the test (its own fake-quant and its own test for a short dyadic), the nh
program for nq's exactness, the QAT module in eval mode for convert.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import ConstantOp
from nanoir.dialects.nq import FakeQuantOp

import nanoir
from nanoir import qat
from nanoir.testing.programs import examples

torch.set_num_threads(1)

ROUNDINGS = ("trunc", "floor", "half_up", "half_even")


def _program(c: np.float32, op: str, scalar_first: bool) -> str:
    x, s = ("%x", "tensor<?x4xf32>"), ("%c", "tensor<f32>")
    (a, ta), (b, tb) = (s, x) if scalar_first else (x, s)
    return f"""func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {{
  %c = nf.constant dense<{float(c)!r}> : tensor<f32>
  %y = nf.{op} {a}, {b} : ({ta}, {tb}) -> tensor<?x4xf32>
  func.return %y : tensor<?x4xf32>
}}"""


def _short_dyadic(c: float) -> bool:
    """The test's own: ``c = n / 2**d`` exactly, ``|n| < 2**15`` (in lowest terms, ``d`` an
    exponent of at most 60 either way)."""
    f = Fraction(c)
    d = f.denominator.bit_length() - 1
    if f.denominator != 2**d:
        return False
    n, shift = f.numerator, 0
    while n and n % 2 == 0 and shift < 60:
        n //= 2
        shift += 1
    return d <= 60 and abs(n) < 2**15


def _round(v: np.ndarray, mode: str) -> np.ndarray:
    return {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_up": lambda s: np.floor(s + 0.5),
        "half_even": np.round,
    }[mode](v)


def _fq(v: np.ndarray, bits: int, k: int, mode: str) -> np.ndarray:
    """Signed fake-quant to ``bits`` at step ``2**-k`` (1 bit: ±1 codes of magnitude ``2**k``,
    NanoEngine's rule)."""
    s = np.asarray(v, np.float64) * 2.0**k
    if bits == 1:
        return np.where(s >= 0, 1.0, -1.0) * 2.0**k
    top = 2 ** (bits - 1)
    return np.clip(_round(s, mode), -top, top - 1) * 2.0**-k


def _reader(module: nanoir.ModuleOp, value) -> FakeQuantOp | None:  # noqa: ANN001
    fqs = [u.operation for u in value.uses if isinstance(u.operation, FakeQuantOp)]
    assert len(fqs) <= 1
    return fqs[0] if fqs else None


def _scalar(module) -> ConstantOp:  # noqa: ANN001
    (c,) = [op for op in module.walk() if isinstance(op, ConstantOp)]
    return c


def _step_exp(c: float, bits: int) -> int:
    """Absmax's exponent for ``c`` (the step of one weight code): ``2**(b-1)`` codes (1 at 1
    bit) cover ``|c|``."""
    top = 1 if bits == 1 else 2 ** (bits - 1)
    return int(np.floor(np.log2(top / abs(c))))


scalars = st.one_of(
    st.sampled_from([32**-0.5, 0.3, -0.3, 1 / 3, 1e-30, -1e30, 1e-3, 7e6, 0.5, 2.0, -3.0, 0.0]),
    st.floats(1e-38, 1e38).flatmap(lambda v: st.sampled_from([v, -v])),
    st.integers(-(2**14), 2**14).flatmap(
        lambda n: st.integers(-20, 20).map(lambda e: float(np.ldexp(n, e)))
    ),
).map(np.float32)


@settings(max_examples=examples(60), deadline=None)
@given(
    c=scalars,
    op=st.sampled_from(["mul", "add", "sub"]),
    scalar_first=st.booleans(),
    weight_bits=st.sampled_from([1, 2, 4, 8, 16]),
    rounding=st.sampled_from(ROUNDINGS),
    correct=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_scalar_quantizes_and_lowers(
    c: np.float32,
    op: str,
    scalar_first: bool,
    weight_bits: int,
    rounding: str,
    correct: bool,
    seed: int,
) -> None:
    """quantize then lower_to_hw works and nq == nh bit for bit. A short dyadic keeps no
    fake-quant; any other scalar gets one per tensor at the weight bits, rounding to the
    nearest code with bias correction (as constants do) and by ``rounding`` without; its
    value is within one weight step of ``c`` (where its exponent is not clamped at ±60); without
    bias correction a product is the test's own fake-quant of (input code x scalar code).
    Mutants run in a private copy, each failing this test: scalar_factor returning False
    (33-bit products / aligning refusals), the scalar's bits resolved as an activation's
    (bits check), SHORT_DYADIC_BITS = 0 (a short dyadic quantized), SCALAR_READERS without
    add/sub (``x + 1e-3`` refused).
    """
    if op != "mul" and c != 0 and _short_dyadic(float(c)):
        # Known, left alone: a short dyadic added on its exact float path lowers only while
        # the sum's alignment fits i32 (x + 2**30 or x + 2**-40 at 8 bits does not).
        assume(2.0**-10 <= abs(float(c)) <= 2.0**10)
    x = np.random.default_rng(seed).standard_normal((6, 4)).astype(np.float32) * 3
    module = nanoir.parse(_program(c, op, scalar_first))
    nanoir.quantize(
        module, [x], weight_bits=weight_bits, rounding=rounding, bias_correction=correct
    )
    hw = nanoir.lower_to_hw(module.clone())
    (y_nq,) = nanoir.run(module, x)
    (y_nh,) = nanoir.run(hw, x)
    np.testing.assert_array_equal(y_nq, y_nh)
    fq = _reader(module, _scalar(module).result)
    if _short_dyadic(float(c)) and not (c == 0 and op != "mul"):
        assert fq is None, f"short dyadic {c!r} got a fake-quant"
        return
    assert fq is not None, f"{c!r} left float"
    assert fq.bits.value.data == weight_bits
    k = dense_to_numpy(fq.exp).reshape(-1)
    assert k.size == 1
    k = int(k[0])
    mode = "half_even" if correct else rounding
    assert fq.rounding.data.value == mode
    q_c = float(_fq(np.float64(c), weight_bits, k, mode))
    if c != 0 and -50 < _step_exp(float(c), weight_bits) < 50:
        assert abs(q_c - float(c)) <= 2.0 ** -_step_exp(float(c), weight_bits)
    if op == "mul" and not correct:
        arg = next(o for o in module.walk() if isinstance(o, FakeQuantOp)).input
        fx = _reader(module, arg)
        (fy,) = [
            o
            for o in module.walk()
            if isinstance(o, FakeQuantOp) and getattr(o.input.owner, "name", "") == "nf.mul"
        ]
        assert fx is not None and fx.input is arg
        kx, ky = (int(dense_to_numpy(f.exp).reshape(-1)[0]) for f in (fx, fy))
        want = _fq(_fq(x, 8, kx, rounding) * q_c, 8, ky, rounding)
        np.testing.assert_array_equal(y_nq, want)


def test_a_zero_added_lowers() -> None:
    """``x + 0.0`` and ``x - 0.0``: lower-to-hw put the float 0 at exponent -60 and refused to
    align ``x`` onto it (66-bit codes); quantized, it lowers, and nq == nh == the test's own
    fake-quant of ``x`` at the output's exponent. Mutant: scalar_factor's zero case removed
    (refused again; the property test draws it too rarely under the default profile)."""
    x = np.linspace(-3, 3, 24).reshape(6, 4).astype(np.float32)
    for op in ("add", "sub"):
        module = nanoir.parse(_program(np.float32(0.0), op, False))
        nanoir.quantize(module, [x], bias_correction=False)
        (y_nh,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x)
        (y_nq,) = nanoir.run(module, x)
        np.testing.assert_array_equal(y_nq, y_nh)
        fqs = [o for o in module.walk() if isinstance(o, FakeQuantOp)]
        kx, ky = (int(dense_to_numpy(f.exp).reshape(-1)[0]) for f in (fqs[0], fqs[-1]))
        want = _fq(_fq(x, 8, kx, "trunc"), 8, ky, "trunc")
        np.testing.assert_array_equal(y_nq, want)


HALF_NQ = """builtin.module {
  func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %x_1 = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
    %c = nf.constant dense<5.000000e-01> : tensor<f32>
    %y = nf.mul %x_1, %c : (tensor<?x4xf32>, tensor<f32>) -> tensor<?x4xf32>
    %y_1 = nq.fake_quant %y {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<?x4xf32>
    func.return %y_1 : tensor<?x4xf32>
  }
}"""

HALF_NH = """builtin.module {
  func.func @main(%x: tensor<?x4xi8, #nh.fixed<5, BC>> {nq.bits = 8 : i64, nq.exp = dense<5> : \
tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x4xi8, #nh.fixed<6, BC>> {
    %0 = nh.constant dense<1> : tensor<1xi8> -> tensor<1xi2, #nh.fixed<1, C>>
    %y = nh.mul %x, %0 : (tensor<?x4xi8, #nh.fixed<5, BC>>, tensor<1xi2, #nh.fixed<1, C>>) -> \
tensor<?x4xi16, #nh.fixed<6, BC>>
    %y_1 = nh.requant %y {shift = array<i64: 0>} : tensor<?x4xi16, #nh.fixed<6, BC>> -> \
tensor<?x4xi8, #nh.fixed<6, BC>>
    func.return %y_1 : tensor<?x4xi8, #nh.fixed<6, BC>>
  }
}"""


def test_a_short_dyadic_keeps_its_exact_path() -> None:
    """``x * 0.5``: the nq and nh texts are those quantize and lower-to-hw printed before
    scalars were quantized (at 36d515a). Mutant: SHORT_DYADIC_BITS = 0 (0.5 gets a
    fake-quant and the text changes)."""
    module = nanoir.parse(_program(np.float32(0.5), "mul", False).replace("0.5>", "5.000000e-01>"))
    x = np.linspace(-3, 3, 24).reshape(6, 4).astype(np.float32)
    nanoir.quantize(module, [x])
    assert str(module) == HALF_NQ
    assert str(nanoir.lower_to_hw(module.clone())) == HALF_NH


class _Scaled(torch.nn.Module):
    def __init__(self, c: float, op: str) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.c, self.op = c, op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (a scalar right after the linear would be folded into it by fold-bn's affine fold)
        y = torch.relu(self.fc(x))
        return y * self.c if self.op == "mul" else y + self.c


@settings(max_examples=examples(3), deadline=None)
@given(
    c=st.sampled_from([0.3, 32**-0.5, -1e-3, 0.5, 1e-30]),
    op=st.sampled_from(["mul", "add"]),
    weight_bits=st.sampled_from([2, 4, 8]),
    correct=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_qat_mirrors_the_scalar(
    c: float, op: str, weight_bits: int, correct: bool, seed: int
) -> None:
    """nanoir.qat.prepare on ``fc(x) * c`` (or ``+ c``): its eval forward in float64 equals the
    converted program bit for bit, which lowers with nq == nh, and the scalar carries a
    fake-quant at the weight bits within one weight step of ``c`` (none on a short dyadic).
    Mutants (private copy), each failing it: QAT giving the unnamed scalar no quantizer (a
    KeyError in convert), SHORT_DYADIC_BITS = 0."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    model = _Scaled(c, op).eval()
    q = qat.prepare(model, (torch.from_numpy(x),), weight_bits=weight_bits, bias_correction=correct)
    qat.calibrate(q, [x])
    q.eval()
    program = qat.convert(q)
    held = rng.standard_normal((5, 8))
    with torch.no_grad():
        got = q(torch.from_numpy(held)).numpy()
    (want,) = nanoir.run(program, held)
    np.testing.assert_array_equal(got, want)
    (y_nh,) = nanoir.run(nanoir.lower_to_hw(program.clone()), held)
    np.testing.assert_array_equal(want, y_nh)
    consts = [op_ for op_ in program.walk() if isinstance(op_, ConstantOp) and op_.sym_name is None]
    (scalar,) = [s for s in consts if int(np.prod(s.result.type.get_shape())) <= 1]
    fq = _reader(program, scalar.result)
    if _short_dyadic(float(np.float32(c))):
        assert fq is None
    else:
        assert fq is not None and fq.bits.value.data == weight_bits
        q_c = float(
            _fq(
                np.float64(np.float32(c)),
                weight_bits,
                int(dense_to_numpy(fq.exp).reshape(-1)[0]),
                fq.rounding.data.value,
            )
        )
        if abs(c) > 2.0**-40:
            assert abs(q_c - c) <= 2.0 ** -_step_exp(c, weight_bits)


def test_the_reach_reproduction_lowers() -> None:
    """benchmarks/reach_results.md's defect 2 (Swin's ``q * 32**-0.5``): compile_model's
    defaults to nh, nq == nh. Mutant: scalar_factor returning False (refused: 33-bit
    products)."""

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 32**-0.5

    x = np.random.default_rng(0).standard_normal((4, 16, 8)).astype(np.float32)
    nq = nanoir.compile_model(Scale(), (torch.from_numpy(x),), [x], stop="nq")
    hw = nanoir.lower_to_hw(nq.clone())
    np.testing.assert_array_equal(nanoir.run(nq, x)[0], nanoir.run(hw, x)[0])
    (y,) = nanoir.run(nq, x)
    assert np.abs(y - x * 32**-0.5).max() <= 2.0**-4  # steps: x 2**-5, scale 2**-10, y 2**-6


def test_a_quantized_scalar_reads_back(tmp_path) -> None:  # noqa: ANN001
    """A fake-quantized scalar has a rank-0 exponent (its input is rank 0): the program's
    ``.mlir`` text parses back (the verifier refused the ``tensor<1xi8>`` exponent quantize and
    ``qat.convert`` gave it) and its ``.ne`` file at the nq level reads back and runs equal
    (was: "exp of shape 1 does not broadcast against the input scalar"). Mutant seen to fail
    it: ``_insert`` keeping the exponent's shape [1] for a scalar."""
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    torch.manual_seed(0)
    model = _Scaled(32**-0.5, "mul").eval()
    nq = nanoir.compile_model(model, (torch.from_numpy(x),), [x], stop="nq")
    q = qat.prepare(model, (torch.from_numpy(x),))
    qat.calibrate(q, [x])
    for program in (nq, qat.convert(q)):
        assert any(_reader(program, s.result) for s in program.walk() if isinstance(s, ConstantOp))
        assert str(nanoir.parse(str(program))) == str(program)
        path = tmp_path / "scaled.ne"
        nanoir.save(program, str(path))
        np.testing.assert_array_equal(
            nanoir.run(nanoir.load(str(path)), x)[0], nanoir.run(program, x)[0]
        )
