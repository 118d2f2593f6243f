"""Hostile checkpoints for nanoir.qat.train (round 7): a damaged optimizer state or NaN weights
are one QATError before anything is restored (they failed mid-epoch, after the module and
generators were loaded). Needs torch (the ``torch`` extra)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402


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
    q = qat.prepare(nanoir.parse(program), (), weight_bits=4, learner="ema")
    qat.calibrate(q, [np.random.default_rng(4).standard_normal((4, 1, 6, 6))])
    return q


def _state(q: qat.QATModule) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in q.state_dict().items()}


@pytest.fixture(scope="module")
def saved(program: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real checkpoint after one epoch (Adam, the default optimizer)."""
    path = tmp_path_factory.mktemp("ck") / "good.pt"
    qat.train(_prepared(program), _loader(), epochs=1, checkpoint=path)
    return torch.load(path, weights_only=True)


def _edited(saved: dict[str, Any], edit: Any) -> dict[str, Any]:
    state = copy.deepcopy(saved)
    edit(state)
    return state


def _moment(s: dict[str, Any], key: str, value: Any) -> None:
    s["optimizer"]["state"][0][key] = value


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: _moment(s, "exp_avg", torch.zeros(7)), "another optimizer's state: The size"),
        (lambda s: s["optimizer"]["state"][0].pop("exp_avg_sq"), "another optimizer's state"),
        (lambda s: s["optimizer"]["param_groups"][0].update(lr="abc"), r"\[0\]\.lr is 'abc'"),
        (lambda s: s["optimizer"]["param_groups"][0].update(betas=(0.9,)), "betas is .0.9,."),
        (lambda s: s["model"]["params.0_weight"].fill_(np.nan), "params.0_weight holds NaN"),
    ],
    ids=["moment-shape", "moment-missing", "lr-text", "betas-short", "weight-nan"],
)
def test_a_damaged_optimizer_state_is_one_error_and_changes_nothing(
    program: str, saved: dict[str, Any], edit: Any, message: str, tmp_path: Path
) -> None:
    """Adam's load_state_dict takes a moment of another shape, a missing moment, a text
    learning rate or one beta; the first step then raised RuntimeError/KeyError/TypeError/
    ValueError (a traceback) with the module, optimizer and generators already restored from
    the file. NaN weights failed the first forward the same way. Now one QATError, and the
    module's state is what it was (the oracle: its tensors before the call) and so is
    torch's generator.

    Mutants seen to fail it (private copy): the _check_optimizer call removed (the four
    optimizer cases), the NaN check in _check_model removed (weight-nan)."""
    path = tmp_path / "c.pt"
    torch.save(_edited(saved, edit), path)
    q = _prepared(program)
    before, rng = _state(q), torch.get_rng_state()
    with pytest.raises(qat.QATError, match=message):
        qat.train(q, _loader(), epochs=2, checkpoint=path)
    after = _state(q)
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)
    assert torch.equal(rng, torch.get_rng_state())


def test_an_intact_checkpoint_still_resumes_as_the_uninterrupted_run(
    program: str, tmp_path: Path
) -> None:
    """The optimizer check (a step of a copy) must not move the generators or the weights:
    one epoch, then a resumed second, equals two epochs in one call bit for bit (oracle: the
    uninterrupted run's state).

    Mutant seen to fail it (private copy): the probe loading the file's state without a copy
    (its step updated the moments the real optimizer then loaded; test_qat_resume's
    bit-for-bit test fails too)."""
    torch.manual_seed(5)
    whole = _prepared(program)
    qat.train(whole, _loader(), epochs=2)
    torch.manual_seed(5)
    part = _prepared(program)
    path = tmp_path / "c.pt"
    qat.train(part, _loader(), epochs=1, checkpoint=path)
    resumed = _prepared(program)
    qat.train(resumed, _loader(), epochs=2, checkpoint=path)
    want, got = _state(whole), _state(resumed)
    assert all(np.array_equal(want[k], got[k]) for k in want)
