"""QAT applies quantize's join rules at every step (issue 20, section 3); 1-bit operands too.

Random torch networks with the patterns that make exponents meet badly (a zero-initialised
residual BatchNorm, a constant branch, concat and split before a conv, residual adds of ranges
decades apart) are prepared, calibrated and trained a few steps with large rates so exponents
drift, then converted. Oracles, none taken from the code under test: the converted nq program
run by nanoir's NumPy interpreter in float64 against the module's torch forward, and the
lowered nh program (integers) against the nq program, both bit for bit. The join condition
(every add/concat operand within 31 bits of the finest once aligned) is written out here.

Needs torch (the ``torch`` extra) and hypothesis (the ``test`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")

from nanoir.dialects import nf  # noqa: E402
from nanoir.dialects.dense import dense_to_numpy  # noqa: E402
from nanoir.dialects.nq import FakeQuantOp  # noqa: E402
from nanoir.runtime.numerics.quant import RoundingMode  # noqa: E402

from nanoir import qat  # noqa: E402

C, H = 4, 4
KINDS = ("zero_residual", "const_branch", "scaled_residual", "concat_conv", "split_conv", "relu")


class Block(torch.nn.Module):
    """One join pattern on a ``[N, 4, H, H]`` map."""

    def __init__(self, kind: str, scale: float, gen: torch.Generator):
        super().__init__()
        self.kind = kind
        half = kind == "split_conv"  # the conv reads and writes half the channels
        self.conv = torch.nn.Conv2d(C // 2 if half else C, C // 2 if half else C, 1)
        self.bn = torch.nn.BatchNorm2d(self.conv.out_channels)
        self.root = torch.nn.Conv2d(C + (C if kind == "concat_conv" else 0), C, 1)
        with torch.no_grad():
            for conv in (self.conv, self.root):
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * 0.5)
                conv.bias.copy_(torch.randn(conv.bias.shape, generator=gen) * 0.1)
            self.conv.weight.mul_(scale)
            if kind == "zero_residual":  # timm's zero-initialised last BN: the branch is 0
                self.bn.weight.zero_()
                self.bn.bias.zero_()
            elif kind == "const_branch":  # a branch that is a constant, whatever the input
                self.conv.weight.zero_()
                self.conv.bias.fill_(0.75)
        self.bn.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind in ("zero_residual", "const_branch", "scaled_residual"):
            return x + self.bn(self.conv(x))
        if self.kind == "concat_conv":
            return self.root(torch.cat([x, self.bn(self.conv(x))], 1))
        if self.kind == "split_conv":
            a, b = torch.split(x, [C // 2, C // 2], 1)
            return self.root(torch.cat([a, self.bn(self.conv(b))], 1))
        return torch.relu(x)


class Net(torch.nn.Module):
    def __init__(self, kinds: list[str], scales: list[float], seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.blocks = torch.nn.Sequential(*[Block(k, s, gen) for k, s in zip(kinds, scales)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def train_hard(q: qat.QATModule, x: np.ndarray, steps: int, seed: int) -> None:
    """Adam steps at a large rate towards a random target: weights and exponents drift."""
    gen = torch.Generator().manual_seed(seed)
    xt = torch.from_numpy(x.astype(np.float32))
    opt = torch.optim.Adam(q.param_groups(0.05))
    q.train()
    for _ in range(steps):
        out = q(xt)
        loss = (out - 4 * torch.randn(out.shape, generator=gen)).square().mean()
        if loss.requires_grad:  # a network of ReLUs has nothing to train
            opt.zero_grad()
            loss.backward()
            opt.step()
    q.eval()


def check_converts_and_lowers(q: qat.QATModule, x: np.ndarray) -> ModuleOp:
    """convert(q) == q.eval() on float64 inputs, it lowers, and nh == nq, all bit for bit."""
    module = qat.convert(q)
    expected = qat.evaluate(q, x)
    (got,) = nanoir.run(module, x)
    assert np.array_equal(got, expected), np.abs(got - expected).max()
    hw = nanoir.lower_to_hw(module.clone())
    (integers,) = nanoir.run(hw, x)
    mismatch = np.flatnonzero(integers != got)
    assert mismatch.size == 0, f"{mismatch.size} nh values differ from nq"
    return module


def code_exps(fq: FakeQuantOp) -> np.ndarray:
    """The grid of the codes: ``k``, or ``-k`` for 1-bit (magnitude ``2**k``)."""
    k = dense_to_numpy(fq.exp).astype(np.int64).reshape(-1)
    return -k if fq.bits.value.data == 1 else k


def check_joins_fit(module: ModuleOp) -> None:
    """Every add/sub/concat operand's codes shifted onto the finest fit 31 bits (1-bit codes
    take a sign bit once shifted), written out from lower-to-hw's alignment rule."""
    for op in module.walk():
        if not isinstance(op, nf.AddOp | nf.SubOp | nf.ConcatOp):
            continue
        fqs = [v.op for v in op.operands if isinstance(getattr(v, "op", None), FakeQuantOp)]
        if len(fqs) < 2:
            continue
        finest = max(int(code_exps(f).max()) for f in fqs)
        for f in fqs:
            shift = finest - int(code_exps(f).min())
            b = f.bits.value.data
            assert b + shift + (1 if b == 1 and shift else 0) <= 31, (op.name, b, shift)


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
    scales=st.lists(st.sampled_from((1.0, 1e-5, 1e4)), min_size=4, max_size=4),
    learner=st.sampled_from(("ema", "lsq")),
    weight_bits=st.sampled_from((1, 2, 4, 8)),
    act_bits=st.sampled_from((1, 4, 8)),
    rounding=st.sampled_from(tuple(m.value for m in RoundingMode)),
    per_channel=st.booleans(),
    unsigned=st.sampled_from(("never", "auto")),
    seed=st.integers(0, 2**16),
)
def test_trained_networks_convert_exactly_and_lower(
    kinds: list[str],
    scales: list[float],
    learner: str,
    weight_bits: int,
    act_bits: int,
    rounding: str,
    per_channel: bool,
    unsigned: str,
    seed: int,
) -> None:
    """Prepare, calibrate, train with large rates, convert: convert == module, lowers, nq == nh.

    Mutants caught (each run in a private copy, each failed this test): ``JoinRules.ties``
    returning no ties (the module keeps a zero branch's exponent 60 while convert ties it:
    convert != module); ``export_exponents`` exporting the learners' own exponents (the
    program no longer lowers: "aligning operands needs 62-bit codes"); ``Rules.join``
    returning at once (refused by lower-to-hw, in QAT and PTQ alike).
    """
    rng = np.random.default_rng(seed)
    model = Net(kinds, scales, seed)
    x = rng.standard_normal((6, C, H, H)).astype(np.float32)
    q = qat.prepare(
        model,
        (torch.from_numpy(x[:2]),),
        weight_bits=weight_bits,
        act_bits=act_bits,
        rounding=rounding,
        weight_per_channel=per_channel,
        act_per_channel=per_channel,
        unsigned=unsigned,
        learner=learner,
        lr=0.5,
    )
    qat.calibrate(q, [x[:3], x[3:]])
    train_hard(q, x, steps=3, seed=seed)
    module = check_converts_and_lowers(q, rng.standard_normal((3, C, H, H)))
    check_joins_fit(module)


def _residual_qat(kind: str, learner: str) -> tuple[qat.QATModule, np.ndarray]:
    """``x + branch(x)`` twice (a ReLU between), prepared and calibrated."""
    model = Net([kind, "relu", kind], [1e-3] * 3, 0)
    x = np.random.default_rng(1).standard_normal((8, C, H, H)).astype(np.float32)
    q = qat.prepare(model, (torch.from_numpy(x[:2]),), learner=learner, lr=0.5)
    qat.calibrate(q, [x])
    return q, x


def _branch_and_shortcut(module: ModuleOp) -> list[tuple[FakeQuantOp, FakeQuantOp]]:
    pairs = []
    for add in module.walk():
        if isinstance(add, nf.AddOp):
            shortcut, branch = (v.op for v in add.operands)  # type: ignore[union-attr]
            assert isinstance(shortcut, FakeQuantOp) and isinstance(branch, FakeQuantOp)
            pairs.append((branch, shortcut))
    assert len(pairs) == 2
    return pairs


@pytest.mark.parametrize("learner", ["ema", "lsq"])
def test_zero_branch_is_tied_whatever_its_learner_says(learner: str) -> None:
    """A zero branch whose learner holds exponent 60 (calibration's answer for a tensor that
    is 0 everywhere) takes the shortcut's exponent in the module's forward and in convert,
    which records the join as quantize does (``origin``); the program lowers.

    Calibration already starts it settled, so the test puts its learner back at 60, as an
    imported state or a drifting learner could. Mutants caught: ``JoinRules.ties`` returning
    none (the module's output differs from convert's); the ``origin`` not carried into
    convert."""
    q, x = _residual_qat("zero_residual", learner)
    for key in ("blocks_0_bn", "blocks_2_bn"):
        q.quantizers[key].set_exponents(60)
    train_hard(q, x, steps=2, seed=3)
    for key in ("blocks_0_bn", "blocks_2_bn"):  # the learners still say 60
        assert q.quantizers[key].int_exponents().tolist() == [60]
    module = check_converts_and_lowers(q, x[:3].astype(np.float64))
    for branch, shortcut in _branch_and_shortcut(module):
        assert code_exps(branch).tolist() == code_exps(shortcut).tolist()
        assert branch.origin is not None and branch.origin.data.startswith("join:%blocks.")


def test_tied_exponents_get_no_gradient() -> None:
    """LSQ: a tied exponent is a function of the learners' exponents with no gradient through
    the tie: a branch (values near 1e-3) whose learner says exponent 40, 35 steps finer than
    the shortcut's, is capped at 31 - 8 bits past it, and its own exponent gets gradient 0;
    untied exponents still learn. Mutant caught: the tie as a straight-through offset
    (``k + (tie - k).detach()``, which passes the tied gradient to the learner)."""
    q, x = _residual_qat("scaled_residual", "lsq")
    q.quantizers["blocks_0_bn"].set_exponents(40)
    shortcut = int(q.quantizers["x"].int_exponents().reshape(-1)[0])
    q.train()
    out = q(torch.from_numpy(x))
    (out - 1).square().mean().backward()
    assert q.quantizers["blocks_0_bn"].last_k.reshape(-1).tolist() == [shortcut + 31 - 8]
    assert q.quantizers["blocks_0_bn"].exponent.grad.abs().sum() == 0
    assert q.quantizers["blocks_2_bn"].exponent.grad.abs().sum() > 0


def test_networks_without_a_join_that_needs_it_are_untouched() -> None:
    """A plain conv stack (the digits parity configuration's shape) gets no tie at any step:
    the rules change nothing, so training is what it was without them."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3), torch.nn.Flatten()
    )
    x = np.random.default_rng(0).standard_normal((8, 1, 8, 8)).astype(np.float32)
    q = qat.prepare(model, (torch.from_numpy(x[:2]),), lr=0.1, bias_correction=False)
    qat.calibrate(q, [x])
    for _ in range(3):
        assert q.joins.ties() == {}
        train_hard(q, x, steps=1, seed=0)


# --------------------------------------------------------------------------------------------
# 1-bit operands in post-training quantize
# --------------------------------------------------------------------------------------------


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=4),
    scales=st.lists(st.sampled_from((1.0, 1e-5, 1e4)), min_size=4, max_size=4),
    one_bit=st.sampled_from(("weight", "act", "both")),
    other_bits=st.sampled_from((2, 4, 8)),
    rounding=st.sampled_from(tuple(m.value for m in RoundingMode)),
    per_channel=st.booleans(),
    calibrator=st.sampled_from(("absmax", "mse")),
    seed=st.integers(0, 2**16),
)
def test_one_bit_operands_lower(
    kinds: list[str],
    scales: list[float],
    one_bit: str,
    other_bits: int,
    rounding: str,
    per_channel: bool,
    calibrator: str,
    seed: int,
) -> None:
    """quantize with 1-bit weights and/or activations at every join: each program lowers,
    nq == nh bit for bit, and every join operand fits 31 bits once aligned.

    Mutants caught: ``Rules.join`` skipping 1-bit operands (as settle did before: a zero
    1-bit branch, magnitude 2**-60, needs 60+ bit alignment); the aligned width of a 1-bit
    code counted without its sign bit; the zero 1-bit weight not growing its magnitude (a
    bias aligned onto 2**-60 products overflows)."""
    rng = np.random.default_rng(seed)
    model = Net(kinds, scales, seed)
    x = rng.standard_normal((6, C, H, H)).astype(np.float32)
    wb = 1 if one_bit in ("weight", "both") else other_bits
    ab = 1 if one_bit in ("act", "both") else other_bits
    module = nanoir.compile_model(
        model,
        (torch.from_numpy(x[:2]),),
        [x[:3], x[3:]],
        stop="nq",
        weight_bits=wb,
        act_bits=ab,
        rounding=rounding,
        weight_per_channel=per_channel,
        act_per_channel=per_channel,
        calibrator=calibrator,
    )
    check_joins_fit(module)
    xs = rng.standard_normal((3, C, H, H))
    (want,) = nanoir.run(module, xs)
    (got,) = nanoir.run(nanoir.lower_to_hw(module.clone()), xs)
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------------------------
# Unsigned codes (quantize's unsigned="auto") in QAT
# --------------------------------------------------------------------------------------------


class ReluNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.conv1 = torch.nn.Conv2d(1, 4, 3)
        self.conv2 = torch.nn.Conv2d(4, 4, 3)
        self.fc = torch.nn.Linear(64, 5)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return self.fc(y.flatten(1))


@pytest.mark.parametrize("learner", ["ema", "lsq"])
@pytest.mark.parametrize("act_bits", [4, 8])
def test_unsigned_auto_mirrors_quantize(learner: str, act_bits: int) -> None:
    """``prepare(..., unsigned="auto")``: calibrate gives quantize's unsigned program (the
    same text), the ReLU outputs' quantizers clamp to ``0..2**b-1`` (a NumPy fake-quant
    written here is the oracle), and after training convert == module, lowers, nq == nh.

    Mutants caught: the quantizer clamping unsigned codes to the signed range (the module's
    output differs from convert's and from the oracle); the EMA target left at the signed
    ``2**(b-1) / max`` (checked below against the unsigned rule written out);
    ``prepare(bias_correction=False)`` not defaulting to ``absmax`` (mse exponents, 4 bits)."""
    model = ReluNet()
    x = np.random.default_rng(0).standard_normal((16, 1, 8, 8)).astype(np.float32)
    options = {"act_bits": act_bits, "unsigned": "auto", "rounding": "half_even"}
    q = qat.prepare(
        model, (torch.from_numpy(x[:2]),), learner=learner, lr=0.5, bias_correction=False, **options
    )
    qat.calibrate(q, [x[:8], x[8:]])
    ptq = nanoir.compile_model(
        model,
        (torch.from_numpy(x[:2]),),
        [x[:8], x[8:]],
        stop="nq",
        bias_correction=False,
        calibrator="absmax",  # what prepare(bias_correction=False) calibrates with
        **options,
    )
    converted = qat.convert(q)
    assert str(converted) == str(ptq)
    unsigned = [op for op in converted.walk() if isinstance(op, FakeQuantOp) and not op.is_signed]
    assert len(unsigned) == 4  # the ReLUs' outputs and the conv outputs they alone read
    relu = q.quantizer(unsigned[0].result.name_hint)
    assert not relu.signed
    # The quantizer against a NumPy fake-quant of unsigned codes.
    v = torch.linspace(-3, 40, 301, dtype=torch.float64)
    k = int(relu.int_exponents().reshape(-1)[0])
    want = np.clip(np.round(v.numpy() * 2.0**k), 0, 2**act_bits - 1) / 2.0**k
    relu.eval()
    assert np.array_equal(relu(v).detach().numpy(), want)
    if learner == "ema":  # one update from a known state: t = 2**b / max(x, 0)
        relu.train()
        relu.scale.fill_(1.0)
        relu(torch.full((4,), -7.0, dtype=torch.float64).index_fill(0, torch.tensor([1]), 5.0))
        target = 2.0**act_bits / 5.0
        target = target * 0.9 if target > 2 else target
        assert relu.scale.item() == pytest.approx(0.5 * 1.0 + 0.5 * target)
    train_hard(q, x, steps=3, seed=1)
    check_converts_and_lowers(q, x[:4].astype(np.float64))


def test_zero_one_bit_weight_grows_its_magnitude_not_the_input_step() -> None:
    """A constant branch ``x + conv(x)`` whose conv weight is 0 (1-bit: calibrated to the
    least magnitude, 2**-60) and whose bias is 0.75: the bias aligned onto 2**-60 products
    overflows i32, and the rule grows the weight's magnitude (``acc:`` origin), leaving the
    input's exponent at its own range (NumPy's absmax rule here) so the shortcut keeps it.

    Mutant caught: the zero 1-bit weight left alone (the input's step grows instead, by
    some 60 places: the shortcut is quantized to 0)."""
    model = Net(["const_branch"], [1.0] * 4, 0)
    x = np.random.default_rng(2).standard_normal((6, C, H, H)).astype(np.float32)
    module = nanoir.compile_model(
        model,
        (torch.from_numpy(x[:2]),),
        [x[:3], x[3:]],
        stop="nq",
        weight_bits=1,
        act_bits=8,
        bias_correction=False,
    )
    fqs = [op for op in module.walk() if isinstance(op, FakeQuantOp)]
    (x_fq,) = [f for f in fqs if f.input.name_hint == "x"]
    absmax = float(np.abs(x.astype(np.float64)).max())
    assert dense_to_numpy(x_fq.exp).tolist() == [7 - int(np.ceil(np.log2(absmax)))]
    assert x_fq.origin is None
    (w_fq,) = [f for f in fqs if f.bits.value.data == 1]
    assert w_fq.origin is not None and w_fq.origin.data.startswith("acc:")
    assert int(dense_to_numpy(w_fq.exp).max()) > -60
    xs = np.random.default_rng(3).standard_normal((3, C, H, H))
    (want,) = nanoir.run(module, xs)
    (got,) = nanoir.run(nanoir.lower_to_hw(module.clone()), xs)
    assert np.array_equal(got, want)
