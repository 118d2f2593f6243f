"""Hostile arguments to nanoir.qat.prepare and train are one nanoir error naming the argument,
never a torch traceback (tracker issue 31 §2.12).

``train(lr=nan | -1 | "0.1" | inf)`` went into Adam (a NaN or infinite rate turned every weight
into NaN a step later, a text or negative one raised torch's own error), ``prepare(lr=nan)``
into the exponent learners, a batch of another shape into a convolution, and a rule string was
iterated character by character (``prepare(rules="fc.weight=1")``: "rule 'f' must look
like ..."). The oracles are written here: which values are rates, which batches fit the
program, from the values drawn, never by asking the code under test.

Needs torch (the ``torch`` extra) and hypothesis (the ``test`` extra).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")

from nanoir.lowering.quantize import QuantRule  # noqa: E402
from torch import nn  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402
from nanoir.errors import ArgumentError  # noqa: E402

ROWS, CLASSES = 4, 3
FLOAT32_MAX = 3.4028234663852886e38


@pytest.fixture(scope="module")
def program() -> str:
    """Conv2d(1 -> 2, 3x3) -> ReLU -> Flatten -> Linear(32 -> 3), input [?, 1, 6, 6]."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32, CLASSES))
    return str(nanoir.from_torch(model.eval(), (torch.zeros(2, 1, 6, 6),)))


@pytest.fixture(scope="module")
def prepared(program: str) -> tuple[qat.QATModule, dict[str, torch.Tensor]]:
    """One calibrated module and its state, put back before each use."""
    q = qat.prepare(nanoir.parse(program), (), weight_bits=4)
    qat.calibrate(q, [np.random.default_rng(4).standard_normal((4, 1, 6, 6))])
    return q, {k: v.detach().clone() for k, v in q.state_dict().items()}


def _fresh(prepared: tuple[qat.QATModule, dict[str, torch.Tensor]]) -> qat.QATModule:
    q, state = prepared
    q.load_state_dict(state)
    return q


def _unchanged(q: qat.QATModule, state: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(v, state[k]) for k, v in q.state_dict().items())


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = np.random.default_rng(5)
    x = torch.from_numpy(gen.standard_normal((ROWS, 1, 6, 6)).astype(np.float32))
    return x, torch.arange(ROWS) % CLASSES


HOSTILE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(1e30, 1e300),
    st.integers(-(10**40), 10**40),
    st.booleans(),
    st.none(),
    st.text(max_size=6),
    st.binary(max_size=4),
    st.complex_numbers(max_magnitude=10, allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            "0.1",
            np.float64("nan"),
            np.float32(0.01),
            np.int64(-1),
            np.bool_(True),
            Fraction(1, 100),
            [0.1],
            (0.1,),
            {"lr": 0.1},
            torch.tensor(0.1),
        ]
    ),
)


def _is_rate(v: object, positive: bool = False, top: float = FLOAT32_MAX) -> bool:
    """The oracle: a real number (int, float, NumPy real, Fraction; not a bool), finite,
    >= 0 (> 0 when ``positive``) and at most ``top``."""
    if isinstance(v, bool | np.bool_) or not isinstance(
        v, int | float | np.integer | np.floating | Fraction
    ):
        return False
    f = float(v)
    return math.isfinite(f) and (f > 0 if positive else f >= 0) and f <= top


@settings(max_examples=examples(60), deadline=None)
@given(lr=HOSTILE)
def test_train_takes_finite_rates_only(
    prepared: tuple[qat.QATModule, dict[str, torch.Tensor]], lr: Any
) -> None:
    """A rate is taken (one epoch trains, or stops with a QATError naming the divergence
    for a rate that makes a weight infinite); anything else is one ArgumentError naming
    ``lr`` and the module is not changed. Never another exception.

    kills: ``rate_argument`` without its finiteness check (nan/inf reach Adam: the weights
    go NaN and the next forward raises a bare ValueError); without its sign check (Adam's
    own ValueError); without the float32 bound (torch's RuntimeError "cannot be converted
    to type float without overflow"); ``_check_diverged`` removed (the forward after a
    1e30 step fails inside)."""
    q = _fresh(prepared)
    state = {k: v.clone() for k, v in q.state_dict().items()}
    batches = [_batch()] * 2
    try:
        losses = qat.train(q, batches, epochs=1, lr=lr)
    except ArgumentError as e:
        assert not _is_rate(lr), e
        assert "lr" in str(e)
        assert _unchanged(q, state)
    except qat.QATError as e:
        assert _is_rate(lr) and float(lr) > 1.0, e  # only a huge rate diverges
        assert "diverged" in str(e)
    else:
        assert _is_rate(lr)
        assert len(losses) == 1 and math.isfinite(losses[0])


@settings(max_examples=examples(40), deadline=None)
@given(lr=HOSTILE, learner=st.sampled_from(["ema", "lsq"]))
def test_prepare_takes_learner_rates_only(program: str, lr: Any, learner: str) -> None:
    """``prepare(lr=...)``: a positive finite rate, at most 1 for ``ema`` (a moving
    average's weight: above 1 the scale can turn negative); else one ArgumentError naming
    ``lr``. None keeps the learner's default. kills: no check in ``_config`` (nan, -1 and
    '0.1' were accepted and the learner's update made the exponents NaN)."""
    top = 1.0 if learner == "ema" else FLOAT32_MAX
    try:
        q = qat.prepare(nanoir.parse(program), (), weight_bits=4, learner=learner, lr=lr)
    except ArgumentError as e:
        assert lr is not None and not _is_rate(lr, positive=True, top=top), e
        assert "lr" in str(e)
    else:
        assert lr is None or _is_rate(lr, positive=True, top=top)
        if lr is not None:
            assert {v.lr for v in q.quantizers.values()} == {float(lr)}


def test_the_issues_values_are_refused_naming_lr(
    program: str, prepared: tuple[qat.QATModule, dict[str, torch.Tensor]]
) -> None:
    """The reproducers as the issue lists them."""
    q = _fresh(prepared)
    for lr in (float("nan"), -1, "0.1", float("inf")):
        with pytest.raises(ArgumentError, match=r"nanoir\.qat\.train: lr must be"):
            qat.train(q, [_batch()], epochs=1, lr=lr)
    with pytest.raises(ArgumentError, match=r"nanoir\.qat\.prepare: lr must be"):
        qat.prepare(nanoir.parse(program), (), lr=float("nan"))


# -- rules ------------------------------------------------------------------------------------


def _bits(q: qat.QATModule) -> dict[str, int]:
    return {v.name: v.bits for v in q.quantizers.values()}


def test_one_rule_string_is_one_rule(program: str) -> None:
    """``rules="0.weight=2"`` is the rule ``("0.weight=2",)``, as ``nanoir.quantize`` reads
    ``rules=`` (and a ``QuantRule`` alone too): the same bits for every tensor, the named
    weight at 2. kills: the single-string case removed from ``rules_argument`` (the string
    is iterated: "rule '0' must look like ...")."""
    one = qat.prepare(nanoir.parse(program), (), weight_bits=4, rules="0.weight=2")
    seq = qat.prepare(nanoir.parse(program), (), weight_bits=4, rules=("0.weight=2",))
    rule = qat.prepare(nanoir.parse(program), (), weight_bits=4, rules=QuantRule("0.weight", 2))
    assert _bits(one) == _bits(seq) == _bits(rule)
    assert _bits(one)["0.weight"] == 2 and _bits(one)["3.weight"] == 4


RULE_ITEMS = st.one_of(
    st.sampled_from(["0.weight=2", "3.weight=8/lsq:0.05", "act@.*=ema:0.5", "x=skip"]),
    st.text(alphabet="0.w=/:@xlsqema38", max_size=8),
    st.integers(-3, 3),
    st.none(),
    st.binary(max_size=3),
    st.just(QuantRule("3.weight", 8)),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    rules=st.one_of(
        RULE_ITEMS,
        st.lists(RULE_ITEMS, max_size=3),
        st.lists(RULE_ITEMS, max_size=3).map(tuple),
        st.sampled_from([{"0.weight": 2}, {"0.weight=2"}, 2.5]),
    )
)
def test_rules_are_one_rule_or_a_sequence_of_them(program: str, rules: Any) -> None:
    """A string or ``QuantRule`` is one rule; a list or tuple of them is taken in order;
    None is no rule; anything else (a number, bytes, a dict, an unordered set, an item that
    is not a rule) is one ArgumentError naming ``rules``; a string the grammar refuses is
    quantize's own QuantizeError naming the rule. Never another exception. kills: the
    item check in ``rules_argument`` removed (AttributeError: 'int' object has no
    attribute 'split')."""
    single = isinstance(rules, str | QuantRule)
    items = [rules] if single else rules
    shaped = rules is None or single or isinstance(rules, list | tuple)
    all_rules = shaped and all(isinstance(r, str | QuantRule) for r in items or [])
    try:
        qat.prepare(nanoir.parse(program), (), weight_bits=4, rules=rules)
    except ArgumentError as e:
        assert not all_rules, e
        assert "rules" in str(e)
    except nanoir.Error as e:  # the rule grammar (quantize's QuantizeError)
        assert all_rules and any(isinstance(r, str) for r in items), e
    else:
        assert all_rules


# -- batches ----------------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[Any, bool]:
    """A training batch for the [?, 1, 6, 6] -> [?, 3] program and whether it is valid
    (the oracle, from what was drawn)."""
    valid = True
    rows = draw(st.sampled_from([ROWS, 1, 0]))
    valid &= rows > 0
    shape = [rows, 1, 6, 6]
    change = draw(st.sampled_from(["none", "rank-", "rank+", "channels", "width"]))
    if change == "rank-":
        shape = shape[:-1]
    elif change == "rank+":
        shape = [*shape, 1]
    elif change == "channels":
        shape[1] = 3
    elif change == "width":
        shape[3] = 5
    valid &= change == "none"
    dtype = draw(st.sampled_from(["float32", "float64", "int64", "bool", "complex64"]))
    valid &= dtype != "complex64"
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    if dtype.startswith("float") and x.size and draw(st.booleans()):
        x.reshape(-1)[0] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        valid = False
    as_torch = draw(st.booleans())
    xin: Any = torch.from_numpy(x) if as_torch else x
    target_kind = draw(
        st.sampled_from(["ok", "range", "ignored", "length", "rank", "probs", "text"])
    )
    n = shape[0] if shape else 0
    if target_kind == "ok":
        y: Any = torch.arange(n) % CLASSES
    elif target_kind == "range":
        y = torch.full((n,), draw(st.sampled_from([CLASSES, -1, 99])))
        valid &= n == 0  # no row holds the bad class
    elif target_kind == "ignored":
        y = torch.full((n,), -100)
    elif target_kind == "length":
        y = torch.zeros(n + 1, dtype=torch.int64)
        valid = False
    elif target_kind == "rank":
        y = torch.zeros((n, 1), dtype=torch.int64)
        valid = False
    elif target_kind == "probs":
        cols = draw(st.sampled_from([CLASSES, CLASSES + 1]))
        y = torch.full((n, cols), 1.0 / cols)
        valid &= cols == CLASSES
    else:
        y = "cat"
        valid = False
    structure = draw(st.sampled_from(["pair", "list", "bare", "triple", "single"]))
    if structure == "pair":
        batch: Any = (xin, y)
    elif structure == "list":
        batch = [xin, y]
    elif structure == "bare":
        batch = xin
    elif structure == "triple":
        batch = (xin, xin, y)
    else:
        batch = (xin,)
    valid &= structure in ("pair", "list")
    return batch, valid


@settings(max_examples=examples(80), deadline=None)
@given(drawn=batches())
def test_a_batch_that_does_not_fit_is_one_error_before_any_step(
    prepared: tuple[qat.QATModule, dict[str, torch.Tensor]], drawn: tuple[Any, bool]
) -> None:
    """A batch of the program's input shape (rows >= 1, real, finite) with a target of
    class indices in range (or -100) or class probabilities shaped as the output trains;
    any other is one ArgumentError naming the batch, before its step (the module keeps its
    state). Never a torch error.

    kills: ``training_batch`` not called (torch's conv error for a wrong shape, its
    IndexError for a class out of range, a bare tensor unpacked along its rows); its
    finiteness check removed (NaN reaches the fake-quant: bare ValueError); the label
    range check removed (torch's IndexError)."""
    batch, valid = drawn
    q = _fresh(prepared)
    state = {k: v.clone() for k, v in q.state_dict().items()}
    try:
        losses = qat.train(q, [batch], epochs=1)
    except ArgumentError as e:
        assert not valid, e
        assert "data batch 0 (epoch 0)" in str(e)
        assert _unchanged(q, state)
    else:
        assert valid
        assert len(losses) == 1


def test_other_train_arguments_are_named(
    prepared: tuple[qat.QATModule, dict[str, torch.Tensor]],
) -> None:
    """loss_fn, optimizer, cosine and progress of the wrong kind, and a loss_fn returning
    no scalar with a gradient: each one ArgumentError naming it. kills: each check removed
    (TypeError "'int' object is not callable", AttributeError on ``zero_grad``, a truthy
    string taken as cosine, AttributeError on ``backward``)."""
    q = _fresh(prepared)
    cases = [
        ({"loss_fn": 5}, "loss_fn must be callable"),
        ({"optimizer": "adam"}, "optimizer must be a torch.optim.Optimizer"),
        ({"cosine": "yes"}, "cosine must be True or False"),
        ({"progress": 2}, "progress must be True or False"),
        ({"loss_fn": lambda out, y: "x"}, "loss_fn must return a scalar"),
        ({"loss_fn": lambda out, y: out.detach().sum()}, "loss_fn must return a scalar"),
        ({"loss_fn": lambda out, y: out.sum(1)}, "loss_fn must return a scalar"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ArgumentError, match=message):
            qat.train(q, [_batch()], epochs=1, **kwargs)


def test_the_module_refuses_an_input_of_another_shape(
    prepared: tuple[qat.QATModule, dict[str, torch.Tensor]],
) -> None:
    """A custom training loop calling the module directly: an input of another shape is
    a QATError naming the input and both shapes, not torch's conv error. kills: the shape
    check in ``QATModule.forward`` removed (RuntimeError from conv2d)."""
    q = _fresh(prepared)
    with pytest.raises(
        qat.QATError, match=r"input 0 has shape 4x1x6x5; the program takes \?x1x6x6"
    ):
        q(torch.zeros(4, 1, 6, 5))
