"""Unsigned codes for non-negative tensors (issue 20, section 4; DESIGN.md, "Signed and
unsigned codes"): ``nq.fake_quant`` with ``signed = false`` against a NumPy oracle, the
verifiers' refusals, ``quantize(unsigned=...)`` and its rules, and nq == nh bit for bit (and
streamed == whole) on random programs whose fake-quants are unsigned.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import NonNegativeResult
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import QuantRule
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.stream import stream
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

import nanoir
from nanoir.errors import Error
from nanoir.testing.models import import_folded
from nanoir.testing.programs import ALL_KINDS, BASE_KINDS, examples, random_nq_program

# --------------------------------------------------------------------------------------------
# The formula, against NumPy written here
# --------------------------------------------------------------------------------------------


def oracle(x: np.ndarray, bits: int, k: int, mode: str) -> np.ndarray:
    """``clamp(round(x * 2**k), 0, 2**b - 1) / 2**k`` in NumPy (|x * 2**k| < 2**40: the
    half_up sum below is exact)."""
    s = x * 2.0**k
    r = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_up": lambda v: np.floor(v + 0.5),
        "half_even": np.round,
    }[mode](s)
    return np.clip(r, 0, 2**bits - 1) / 2.0**k + 0.0


FQ = """\
func.func @main(%x: tensor<?x6xf32>) -> tensor<?x6xf32> {{
  %q = nq.fake_quant %x {{bits = {bits} : i64, exp = dense<{k}> : tensor<1xi8>,
    rounding = #nq.rounding<{mode}>, signed = false}} : tensor<?x6xf32>
  func.return %q : tensor<?x6xf32>
}}
"""


@settings(max_examples=examples(200), deadline=None)
@given(
    bits=st.sampled_from((2, 4, 8, 16)),
    k=st.integers(-6, 10),
    mode=st.sampled_from([m.value for m in RoundingMode]),
    data=st.lists(st.floats(-300, 300, width=32), min_size=6, max_size=6),
)
def test_unsigned_fake_quant_is_the_formula(bits: int, k: int, mode: str, data: list) -> None:
    """``quant.fake_quant(signed=False)`` and the nq interpreter on ``signed = false`` are the
    formula, ties and saturation at both ends included. Mutants seen failing this test (private
    copy): the unsigned clamp at the signed range, and the nq kernel dropping ``signed``."""
    x = np.array([data, [0.0, -0.0, 2.0**-k / 2, -(2.0**-k) / 2, 1e9, -1e9]], np.float32)
    want = oracle(x.astype(np.float64), bits, k, mode)
    got = quant.fake_quant(x, bits, k, mode, signed=False)
    assert np.array_equal(got, want) and not np.signbit(got).any()
    (y,) = run(nanoir.parse(FQ.format(bits=bits, k=k, mode=mode)), x)
    assert np.array_equal(y, want)


def test_unsigned_codes_and_calibration() -> None:
    """Codes are 0..2**b-1 (int16 for 8-bit: uint8 arithmetic would wrap); absmax gives the
    exponent with 2**b - 1 codes over [0, max] (one finer than signed)."""
    codes = quant.quantize_to_int([-3.0, 0.5, 1000.0], 8, 2, signed=False)
    assert codes.tolist() == [0, 2, 255] and codes.dtype == np.int16
    assert quant.exp_from_absmax([1.0], 8, signed=False).tolist() == [8]  # 255/256 < 1 * 2**8
    assert quant.exp_from_absmax([1.0], 8).tolist() == [7]
    with pytest.raises(ValueError, match="1-bit codes are always signed"):
        quant.fake_quant([1.0], 1, 0, signed=False)


RELU = """\
func.func @main(%x: tensor<?x5xf32>) -> tensor<?x5xf32> {
  %r = nf.relu %x : tensor<?x5xf32>
  %s = nf.sigmoid %x : tensor<?x5xf32>
  %y = nf.add %r, %s : (tensor<?x5xf32>, tensor<?x5xf32>) -> tensor<?x5xf32>
  func.return %y : tensor<?x5xf32>
}
"""


@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_quantize_auto_calibrates_unsigned_exponents(bits: int) -> None:
    """With ``unsigned="auto"`` the ReLU's and the sigmoid's fake-quants are unsigned, with
    the largest ``k`` such that ``max * 2**k <= 2**b`` (Python integers here); the input and
    the sum stay signed. Mutant seen failing (private copy): calibration choosing the
    exponent for signed codes (``signed=`` dropped in ``calibrate``)."""
    x = np.array([[-9.0, 0.3, 2.5, -0.1, 1.75], [0.0, 3.2, -4.0, 0.6, 1.0]], np.float32)
    module = nanoir.parse(RELU)
    nanoir.quantize(module, [x], act_bits=bits, unsigned="auto")
    fqs = {op.input.name_hint: op for op in module.walk() if isinstance(op, FakeQuantOp)}

    def largest_k(m: float) -> int:
        k = -70
        while m * 2.0 ** (k + 1) <= 2**bits:
            k += 1
        return k

    relu_max = float(np.maximum(x, 0).max())
    sigmoid_max = float((1 / (1 + np.exp(-x.astype(np.float64)))).max())
    assert not fqs["r"].is_signed and not fqs["s"].is_signed
    assert fqs["x"].is_signed and fqs["y"].is_signed
    assert int(fqs["r"].exp.get_values()[0]) == largest_k(relu_max)
    assert int(fqs["s"].exp.get_values()[0]) == largest_k(sigmoid_max)


JOIN = """\
func.func @main(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %r = nf.relu %a : tensor<?x4xf32>
  %c = nf.constant "c" dense<[1.5e-4, -9.0e-5, 3.0e-5, 7.5e-5]> : tensor<4xf32>
  %s = nf.add %r, %c : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
"""


def test_joins_count_an_unsigned_operand_as_one_bit_wider() -> None:
    """A 16-bit unsigned ReLU output (coarse) added to a tiny constant (fine): the constant's
    exponent is capped so that the ReLU's codes, 17 signed bits, shift onto it within 31 bits
    (``k_r + 31 - 17``, not the signed ``k_r + 15``), and the sum lowers with nh == nq.
    Mutant seen failing (private copy): ``join_rules.signed_bits`` not adding the sign bit."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4)) * 100.0
    module = nanoir.parse(JOIN)
    nanoir.quantize(module, [x], act_bits=16, unsigned="auto")
    fqs = {op.input.name_hint: op for op in module.walk() if isinstance(op, FakeQuantOp)}
    k_r = int(fqs["r"].exp.get_values()[0])
    relu_max = float(np.maximum(x, 0).max())
    assert relu_max * 2.0**k_r <= 2**16 < relu_max * 2.0 ** (k_r + 1)
    assert not fqs["r"].is_signed
    assert int(fqs["c"].exp.get_values()[0]) == k_r + 31 - 17
    (want,) = run(module, x)
    (got,) = run(lower_to_hw(module.clone()), x)
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


def test_one_bit_unsigned_is_refused_by_the_verifier() -> None:
    with pytest.raises(Error, match="signed = false needs bits > 1"):
        nanoir.parse(FQ.format(bits=1, k=0, mode="trunc"))


NH = """\
func.func @main(%x: tensor<?x4x{t1}, #nh.fixed<3, BC>>) -> tensor<?x4x{t2}, #nh.fixed<3, BC>> {{
  %y = {op} %x : tensor<?x4x{t1}, #nh.fixed<3, BC>> -> tensor<?x4x{t2}, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4x{t2}, #nh.fixed<3, BC>>
}}
"""


@pytest.mark.parametrize(
    ("t1", "t2", "op", "message"),
    [
        ("ui1", "ui1", "nh.reshape", "unsigned nh codes are ui2, ui4, ui8, ui16"),
        ("ui32", "ui32", "nh.reshape", "unsigned nh codes are ui2, ui4, ui8, ui16"),
        ("si8", "si8", "nh.reshape", "nh codes are signless integers"),
        ("ui8", "i8", "nh.reshape", "element type changes from ui8 to i8"),
    ],
)
def test_nh_verifier_refusals(t1: str, t2: str, op: str, message: str) -> None:
    with pytest.raises(Error, match=message):
        nanoir.parse(NH.format(t1=t1, t2=t2, op=op))


def test_nh_unsigned_arithmetic_is_refused_and_bounds_count_a_sign_bit() -> None:
    """An add into ui16 is refused, into i16 accepted; ui8 * ui8 needs i18 (a ui8 operand is
    9 signed bits; i8 * i8 fits i16). Mutant seen failing (private copy): ``signed_bits``
    returning the width."""
    add = """\
func.func @main(%a: tensor<4x{a}, #nh.fixed<0, C>>) -> tensor<4x{r}, #nh.fixed<0, C>> {{
  %y = nh.add %a, %a : (tensor<4x{a}, #nh.fixed<0, C>>, tensor<4x{a}, #nh.fixed<0, C>>)
    -> tensor<4x{r}, #nh.fixed<0, C>>
  func.return %y : tensor<4x{r}, #nh.fixed<0, C>>
}}
"""
    with pytest.raises(Error, match="the result must be signed"):
        nanoir.parse(add.format(a="ui8", r="ui16"))
    nanoir.parse(add.format(a="ui8", r="i16")).verify()
    mul = add.replace("nh.add", "nh.mul")
    nanoir.parse(mul.format(a="i8", r="i16")).verify()
    with pytest.raises(Error, match="may overflow; the exact result needs i18"):
        nanoir.parse(mul.format(a="ui8", r="i16"))


def test_quantize_refusals() -> None:
    module, shape = import_folded("KWSNet")
    cal = [np.random.default_rng(0).standard_normal((2, *shape)).astype(np.float32)]
    with pytest.raises(Error, match="unsigned codes are for activations"):
        nanoir.quantize(module.clone(), cal, rules=("features.0.weight=8u",))
    with pytest.raises(Error, match="at 1 bit"):
        nanoir.quantize(module.clone(), cal, rules=("features.2$=1/u",))
    with pytest.raises(Error, match="is not one of never, auto"):
        nanoir.quantize(module.clone(), cal, unsigned="sometimes")


def test_rule_syntax() -> None:
    assert QuantRule.parse("relu1=8u") == QuantRule("relu1", bits=8, signed=False)
    assert QuantRule.parse("act@.*=u/pc") == QuantRule(
        ".*", kind="act", per_channel=True, signed=False
    )
    assert QuantRule.parse("head=4/s").signed is True
    with pytest.raises(Error, match="must be skip, or BITS"):
        QuantRule.parse("x=8u/u")


# --------------------------------------------------------------------------------------------
# quantize(unsigned=...) on the test models
# --------------------------------------------------------------------------------------------


def _quantized(name: str, **options: object) -> tuple[ModuleOp, list[np.ndarray], np.ndarray]:
    module, shape = import_folded(name)
    rng = np.random.default_rng(0)
    cal = [rng.standard_normal((4, *shape)).astype(np.float32) for _ in range(2)]
    nanoir.quantize(module, cal, **options)
    return module, cal, rng.standard_normal((3, *shape)).astype(np.float32)


@pytest.mark.parametrize("name", ["KWSNet", "MobileNetV2Stack", "LeNet5"])
def test_default_programs_are_unchanged(name: str) -> None:
    """No option (or ``unsigned="never"``) prints no ``signed`` and lowers to no ``ui``
    type; "auto" marks exactly the fake-quants of ``NonNegativeResult`` ops and of values read
    only by a ReLU or a clamp at min >= 0. Mutants seen failing (private copy): auto marking
    every activation (the trait check dropped), auto ignoring values read by a ReLU alone."""
    default, _, _ = _quantized(name)
    never, _, _ = _quantized(name, unsigned="never")
    auto, _, _ = _quantized(name, unsigned="auto")
    assert str(default) == str(never)
    assert "signed" not in str(default) and "xui" not in str(lower_to_hw(default.clone()))
    for op in auto.walk():
        if isinstance(op, FakeQuantOp):
            src = op.input.owner
            trait = src.get_trait(NonNegativeResult) if isinstance(src, Operation) else None
            non_negative = trait is not None and trait.holds(src)  # type: ignore[arg-type]
            # ... or read only by ops that map negatives as 0 (a conv's ReLU)
            clipped = all(
                u.operation.name == "nf.relu"
                or u.operation.name == "nf.clamp"
                and u.operation.min.value.data >= 0
                for u in op.result.uses
            ) and bool(op.result.uses)
            assert op.is_signed != ((non_negative or clipped) and op.bits.value.data > 1)
    assert "signed = false" in str(auto)


@pytest.mark.parametrize(
    ("name", "bits", "calibrator", "rounding"),
    [
        ("KWSNet", 8, "absmax", "trunc"),
        ("KWSNet", 2, "mse", "half_even"),
        ("MobileNetV2Stack", 4, "mse", "half_up"),
        ("LeNet5", 16, "absmax", "floor"),
        ("SampleNet", 8, "mse", "half_even"),
    ],
)
def test_auto_lowers_exactly(name: str, bits: int, calibrator: str, rounding: str) -> None:
    """``unsigned="auto"`` programs lower with ``ui`` types and nh == nq bit for bit. Mutants
    seen failing (private copy): ``nh.requant``'s kernel saturating ui codes at the signed
    range, the lowering giving an unsigned requant a signed type. (``HwValue.bits`` not
    counting the sign bit survives here: test_lowering_counts_an_unsigned_value_as_one_bit_wider
    catches it.)"""
    module, _, x = _quantized(
        name,
        unsigned="auto",
        act_bits=bits,
        weight_bits=min(bits, 8),
        calibrator=calibrator,
        rounding=rounding,
    )
    hw = lower_to_hw(module.clone())
    hw.verify()
    assert "xui" in str(hw)
    assert all(np.array_equal(a, b) for a, b in zip(run(module, x), run(hw, x)))


def test_a_rule_may_ask_unsigned_for_anything_and_the_report_shows_it() -> None:
    """A pooled value read by a linear (not known non-negative, not read by a ReLU alone) made
    unsigned by a rule: negatives saturate to 0 at both levels, and the report marks it
    ``8u*``. Mutant seen failing (private copy): the report taking every unsigned value as
    known non-negative."""
    module, cal, x = _quantized("KWSNet", rules=("pool$=8u",))
    assert all(
        np.array_equal(a, b) for a, b in zip(run(module, x), run(lower_to_hw(module.clone()), x))
    )
    text = str(nanoir.report(module, cal))
    row = next(line for line in text.splitlines() if line.startswith("pool "))
    assert " 8u* " in row and "negatives saturate to 0" in text


# --------------------------------------------------------------------------------------------
# Random programs: nq == nh and streamed == whole with unsigned fake-quants
# --------------------------------------------------------------------------------------------


NORMS = ("nf.layer_norm", "nf.group_norm")


def _make_unsigned(module: ModuleOp, draw: st.DrawFn) -> int:
    """What ``unsigned="auto"`` does (a fake-quant of a ``NonNegativeResult`` op), plus a rule's
    choice on other activations at random; returns how many fake-quants are unsigned."""
    count = 0
    for op in list(module.walk()):
        if not isinstance(op, FakeQuantOp) or op.bits.value.data == 1:
            continue
        src = op.input.owner
        if isinstance(src, Operation) and src.name in ("nf.constant", "nf.batch_norm"):
            continue  # weights stay signed (quantize refuses them); a batch norm refuses
        if any(u.operation.name in NORMS for u in op.result.uses) or (
            isinstance(src, Operation) and src.name in NORMS
        ):
            continue  # lower-to-hw refuses unsigned codes into and out of a norm, naming it
        trait = src.get_trait(NonNegativeResult) if isinstance(src, Operation) else None
        known = trait is not None and trait.holds(src)  # type: ignore[arg-type]
        if known or draw(st.booleans()):
            op.set_signed(False)
            count += 1
    return count


def _check_exact(module: ModuleOp, x: np.ndarray) -> ModuleOp:
    want = run(module, x)
    hw = lower_to_hw(module.clone())
    hw.verify()
    got = run(hw, x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.array_equal(g, w), np.flatnonzero(g != w)[:5]
    for c in run(hw, x, raw=True):
        assert np.issubdtype(np.asarray(c).dtype, np.integer)
    return hw


def _check_stream(module: ModuleOp, x: np.ndarray, step: int) -> None:
    want = run(module, x)
    got = stream(module, [x], step=step)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.tobytes() == w.tobytes()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), kinds=st.sampled_from((BASE_KINDS, ALL_KINDS)))
def test_random_unsigned_programs_lower_and_stream_exactly(
    data: st.DataObject, kinds: tuple[str, ...]
) -> None:
    """Random programs (2/4/8-bit activations, every rounding mode, per tensor and per
    channel) with unsigned fake-quants: nq == nh bit for bit, and streamed == whole at both
    levels. Mutants seen failing (private copy): a lookup table indexed from the signed lowest
    code (in the lowering's table or in the nh kernel), the streaming fast requant and the
    streaming fast fake-quant saturating at the signed range."""
    module, shape = random_nq_program(data.draw, kinds=kinds)
    _make_unsigned(module, data.draw)
    module.verify()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((2, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    hw = _check_exact(module, x)
    step = data.draw(st.integers(1, 4), label="step")
    _check_stream(module, x, step)
    _check_stream(hw, x, step)


# --------------------------------------------------------------------------------------------
# The option through nanoir-opt and compile_model
# --------------------------------------------------------------------------------------------


def test_nanoir_opt_quantize_unsigned_option(tmp_path) -> None:  # noqa: ANN001
    """``quantize{unsigned=auto}`` marks the ReLU's fake-quant, ``unsigned=never`` nothing, and
    a bad value is one located error, not a traceback."""
    import subprocess
    import sys
    from pathlib import Path

    src = tmp_path / "net.mlir"
    src.write_text(RELU)
    cal = tmp_path / "cal.npy"
    np.save(cal, np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32))
    exe = str(Path(sys.executable).parent / "nanoir-opt")

    def opt(option: str) -> subprocess.CompletedProcess[str]:
        spec = f'quantize{{calibration="{cal}" {option}}}'
        return subprocess.run([exe, str(src), "-p", spec], capture_output=True, text=True)

    auto, never, bad = opt("unsigned=auto"), opt("unsigned=never"), opt("unsigned=maybe")
    assert auto.returncode == 0 and never.returncode == 0, auto.stderr + never.stderr
    assert auto.stdout.count("signed = false") == 2  # the ReLU's and the sigmoid's
    assert "signed" not in never.stdout
    assert bad.returncode == 1 and "is not one of never, auto" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_compile_model_passes_unsigned_through() -> None:
    import torch

    from nanoir.testing.models import make_test_model

    model = make_test_model("KWSNet")
    x = model.make_example_input(2)  # type: ignore[operator]
    cal = [np.random.default_rng(0).standard_normal(tuple(x.shape)).astype(np.float32)]
    hw = nanoir.compile_model(model, (x,), cal, stop="nh", unsigned="auto")
    assert "xui8" in str(hw)
    default = nanoir.compile_model(model, (x,), cal, stop="nh")
    assert "xui" not in str(default)
    assert isinstance(x, torch.Tensor)


UNLOWERED = """\
func.func @main(%x: tensor<?x3x6xf32>) -> tensor<?x3x6xf32> {
  %g = nf.constant "g" dense<[1.0, 0.5, 2.0]> : tensor<3xf32>
  %b = nf.constant "b" dense<[0.1, -0.2, 0.3]> : tensor<3xf32>
  %m = nf.constant "m" dense<[0.0, 0.5, -0.5]> : tensor<3xf32>
  %v = nf.constant "v" dense<[1.0, 2.0, 0.5]> : tensor<3xf32>
  %n = nf.batch_norm %x, %g, %b, %m, %v : (tensor<?x3x6xf32>, tensor<3xf32>, tensor<3xf32>,
    tensor<3xf32>, tensor<3xf32>) -> tensor<?x3x6xf32>
  %r = nf.relu %n : tensor<?x3x6xf32>
  %w = nf.constant "w" dense<1.0> : tensor<6xf32>
  %c = nf.constant "c" dense<0.5> : tensor<6xf32>
  %l = nf.layer_norm %r, %w, %c {normalized_dims = 1 : i64} : (tensor<?x3x6xf32>,
    tensor<6xf32>, tensor<6xf32>) -> tensor<?x3x6xf32>
  %lr = nf.relu %l : tensor<?x3x6xf32>
  %s = nf.softmax %lr {axis = 2 : i64} : (tensor<?x3x6xf32>) -> tensor<?x3x6xf32>
  func.return %s : tensor<?x3x6xf32>
}
"""


def test_auto_leaves_signed_what_lower_to_hw_does_not_carry_unsigned() -> None:
    """A batch norm and a layer norm (lower-to-hw refuses unsigned codes out of them, and into
    the integer algorithms, naming the op) keep signed fake-quants under ``unsigned="auto"``
    even where a ReLU alone reads them, and so do the ReLU outputs a layer norm or softmax
    reads: the program lowers (nh == nq). The softmax's output is unsigned (lower-to-hw writes
    its codes unsigned; tests/nanoir/test_softmax_unsigned.py). Mutant seen failing (private
    copy): the guard dropped."""
    module = nanoir.parse(UNLOWERED)
    x = np.random.default_rng(0).standard_normal((4, 3, 6)).astype(np.float32)
    nanoir.quantize(module, [x], unsigned="auto", bias_correction=False)
    fqs = {op.input.name_hint: op for op in module.walk() if isinstance(op, FakeQuantOp)}
    assert fqs["n"].is_signed and fqs["l"].is_signed and not fqs["s"].is_signed
    assert fqs["r"].is_signed and fqs["lr"].is_signed
    (want,) = run(module, x)
    (got,) = run(lower_to_hw(module.clone()), x)
    assert np.array_equal(got, want)


def test_raw_codes_of_an_unsigned_output() -> None:
    """``run(hw, x, raw=True)`` of a ReLU output with unsigned 8-bit codes gives the codes
    ``clip(trunc(relu(x) * 2**k), 0, 255)`` (NumPy here), above 127 included. Mutant seen
    failing (private copy): the interpreter range-checking the ui8 input's codes as i8."""
    text = """\
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = nf.relu %x : tensor<?x8xf32>
  func.return %r : tensor<?x8xf32>
}
"""
    module = nanoir.parse(text)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32) * 3
    nanoir.quantize(module, [x], unsigned="auto")
    fq = next(
        op for op in module.walk() if isinstance(op, FakeQuantOp) and op.input.name_hint == "r"
    )
    k = int(fq.exp.get_values()[0])
    hw = lower_to_hw(module.clone())
    assert "xui8" in str(hw)
    (codes,) = run(hw, x, raw=True)
    want = np.clip(np.trunc(np.maximum(x.astype(np.float64), 0) * 2.0**k), 0, 255)
    assert np.array_equal(codes, want) and codes.max() > 127


ALIGN = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 16 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %xq : tensor<?x4xf32>
  %rq = nq.fake_quant %r {bits = 16 : i64, exp = dense<0> : tensor<1xi8>, signed = SIGNED}
    : tensor<?x4xf32>
  %c = nf.constant "c" dense<[1.5e-4, -9.0e-5, 3.0e-5, 7.5e-5]> : tensor<4xf32>
  %cq = nq.fake_quant %c {bits = 16 : i64, exp = dense<16> : tensor<1xi8>} : tensor<4xf32>
  %s = nf.add %rq, %cq : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %sq = nq.fake_quant %s {bits = 16 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %sq : tensor<?x4xf32>
}
"""


def test_lowering_counts_an_unsigned_value_as_one_bit_wider() -> None:
    """16-bit codes shifted 16 places to meet a finer operand: 32 bits when signed (lowers),
    33 when unsigned (codes up to 65535 << 16 pass i32): refused, naming the 17-bit codes.
    Mutant seen failing (private copy): ``HwLowering.requant`` recording ``b`` instead of
    ``b + 1`` signed bits for an unsigned result."""
    lower_to_hw(nanoir.parse(ALIGN.replace("SIGNED", "true")))
    with pytest.raises(Error, match="needs 33-bit codes.*17-bit codes"):
        lower_to_hw(nanoir.parse(ALIGN.replace("SIGNED", "false")))
