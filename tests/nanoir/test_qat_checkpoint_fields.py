"""A QAT checkpoint whose hyper-parameters or learner state training would fail on, or turn into
NaN, is refused before anything is restored (tracker issue 31 §2.11).

``load_state_dict`` takes any value for a rate, a beta or a step, and Adam's step takes a NaN
or infinite rate without a word: the weights became NaN and the next forward raised a bare
``ValueError`` with the module already holding the file's weights. Each case below writes a
real checkpoint with one field damaged and resumes from it: one ``QATError`` naming the file and
the field, and the module's weights and exponents, the optimizer (its state and every group's
hyper-parameters, where the cosine schedule writes), and torch's, NumPy's and Python's
generators are what they were before the call (the oracle: copies taken before it).

Needs torch (the ``torch`` extra).
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402

OPTIONS: dict[str, Any] = {"weight_bits": 4, "learner": "ema", "rules": ("3.weight=4/lsq:0.05",)}
LR = 1e-3


@pytest.fixture(scope="module")
def program() -> str:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(32, 3))
    return str(nanoir.from_torch(model.eval(), (torch.zeros(2, 1, 6, 6),)))


def _loader() -> DataLoader:
    gen = np.random.default_rng(3)
    x = torch.from_numpy(gen.standard_normal((8, 1, 6, 6)).astype(np.float32))
    y = torch.from_numpy(gen.integers(0, 3, 8))
    return DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True, num_workers=0)


def _prepared(program: str) -> qat.QATModule:
    q = qat.prepare(nanoir.parse(program), (), **OPTIONS)
    qat.calibrate(q, [np.random.default_rng(4).standard_normal((4, 1, 6, 6))])
    return q


@pytest.fixture(scope="module")
def saved(program: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real checkpoint after one epoch: Adam, the cosine schedule, ema and lsq learners."""
    path = tmp_path_factory.mktemp("ck") / "good.pt"
    qat.train(_prepared(program), _loader(), epochs=1, checkpoint=path, cosine=True)
    return torch.load(path, weights_only=True)


def _group(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["optimizer"]["param_groups"][0].update({key: value})


def _moment(key: str, value: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    def edit(s: dict[str, Any]) -> None:
        entry = s["optimizer"]["state"][0]
        entry[key] = value(entry[key])

    return edit


def _schedule(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["scheduler"].update({key: value})


def _model(key: str, value: float) -> Callable[[dict[str, Any]], None]:
    return lambda s: s["model"][key].fill_(value)


NAN, INF = float("nan"), float("inf")
CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "lr-nan": (_group("lr", NAN), r"param_groups\[0\]\.lr is nan; expected a finite"),
    "lr-inf": (_group("lr", INF), r"param_groups\[0\]\.lr is inf; expected a finite"),
    "lr-negative": (_group("lr", -1.0), r"\.lr = -1\.0 is refused by Adam"),
    "betas-out-of-range": (_group("betas", (5, -1)), r"\.betas = \(5, -1\) is refused by Adam"),
    "beta-nan": (_group("betas", (NAN, 0.999)), r"\.betas\[0\] is nan"),
    "eps-nan": (_group("eps", NAN), r"\.eps is nan"),
    "weight-decay-negative": (_group("weight_decay", -1.0), r"weight_decay = -1\.0 is refused"),
    "initial-lr-inf": (_group("initial_lr", INF), r"\.initial_lr is inf"),
    "amsgrad-text": (_group("amsgrad", "yes"), r"\.amsgrad is 'yes'"),
    "step-nan": (_moment("step", lambda t: torch.full_like(t, NAN)), r"state\[0\]\.step is not"),
    "step-negative": (_moment("step", lambda t: torch.full_like(t, -3.0)), r"\.step is -3\.0"),
    "step-fraction": (_moment("step", lambda t: torch.full_like(t, 1.5)), r"count of steps"),
    "moment-inf": (_moment("exp_avg", lambda t: torch.full_like(t, INF)), r"exp_avg is not fin"),
    "second-moment-negative": (
        _moment("exp_avg_sq", lambda t: torch.full_like(t, -1.0)),
        r"first step from its state gives non-finite",
    ),
    "schedule-period-zero": (_schedule("T_max", 0), r"scheduler T_max is 0"),
    "schedule-base-lr-nan": (_schedule("base_lrs", [NAN, LR]), r"scheduler base_lrs is nan"),
    "schedule-eta-negative": (_schedule("eta_min", -1.0), r"scheduler eta_min is -1\.0"),
    "schedule-epoch": (_schedule("last_epoch", -7), r"scheduler last_epoch is -7"),
    "schedule-groups": (_schedule("base_lrs", [LR]), r"base_lrs has 1 values"),
    "exponent-inf": (_model("quantizers.3_weight.exponent", INF), r"3_weight\.exponent holds inf"),
    "ema-scale-zero": (_model("quantizers.0_weight.scale", 0.0), r"0_weight\.scale holds a scale"),
    "weight-inf": (_model("params.0_weight", -INF), r"params\.0_weight holds inf"),
    "rng-damaged": (  # passes the checks; restoring it fails after the optimizer was loaded
        lambda s: s["rng"].update(torch=torch.zeros(3, dtype=torch.uint8)),
        r"cannot be restored",
    ),
}


def _snapshot(q: qat.QATModule, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {
        "module": {k: v.detach().clone() for k, v in q.state_dict().items()},
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, through dicts, lists, tuples, tensors and arrays."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and torch.equal(a.isnan(), b.isnan())
            and bool((a.nan_to_num() == b.nan_to_num()).all())
        )
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b or (a != a and b != b)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_field_is_one_error_and_changes_nothing(
    program: str, saved: dict[str, Any], case: str, tmp_path: Path
) -> None:
    """kills (each run on a private copy, each failing its cases): no finiteness check of
    hyper-parameters (lr-nan, lr-inf, eps-nan, beta-nan, initial-lr-inf: a bare ValueError
    mid-epoch, or accepted); no per-field constructor check (lr-negative,
    betas-out-of-range, weight-decay-negative: accepted, or only the group named); the step
    check removed (step-*); the probe step's finiteness check removed
    (second-moment-negative); the schedule checks removed (schedule-*); the model's inf
    and scale checks removed (exponent-inf, ema-scale-zero, weight-inf); ``_restore``
    without its rollback (rng-damaged: the optimizer keeps the file's state); ``train`` not
    putting back the groups the cosine schedule marked (every case: ``initial_lr`` stays)."""
    edit, message = CASES[case]
    state = copy.deepcopy(saved)
    edit(state)
    path = tmp_path / "damaged.pt"
    torch.save(state, path)
    content = path.read_bytes()
    q = _prepared(program)
    optimizer = torch.optim.Adam(q.param_groups(LR), lr=LR)
    random.seed(7)
    np.random.seed(7)
    before = _snapshot(q, optimizer)
    with pytest.raises(qat.QATError) as info:
        qat.train(q, _loader(), epochs=2, checkpoint=path, cosine=True, optimizer=optimizer)
    assert re.search(message, str(info.value)), str(info.value)
    assert str(path) in str(info.value)
    after = _snapshot(q, optimizer)
    changed = [k for k in before if not _same(before[k], after[k])]
    assert not changed, changed
    assert path.read_bytes() == content


def test_the_intact_checkpoint_still_resumes(
    program: str, saved: dict[str, Any], tmp_path: Path
) -> None:
    """The checks refuse only damage: the undamaged file resumes and trains to finite
    weights (the bit-for-bit resume is ``test_qat_resume``'s). Mutant: a check that refuses
    every state (e.g. ``step`` required to be 0) fails it."""
    path = tmp_path / "good.pt"
    torch.save(saved, path)
    q = _prepared(program)
    losses = qat.train(q, _loader(), epochs=2, checkpoint=path, cosine=True)
    assert len(losses) == 2 and all(np.isfinite(losses))
    assert all(bool(torch.isfinite(v).all()) for v in q.state_dict().values())
