"""Hostile checkpoints for nanoir.qat.train (round 6): a damaged file is one QATError and the
module, optimizer and generators are left as they were; special paths are refused, not read.

Needs torch (the ``torch`` extra)."""

from __future__ import annotations

import os
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
    """A real checkpoint after one epoch with the cosine schedule."""
    path = tmp_path_factory.mktemp("ck") / "good.pt"
    qat.train(_prepared(program), _loader(), epochs=1, checkpoint=path, cosine=True)
    return torch.load(path, weights_only=True)


def _float_model_as_int(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v.to(torch.int64) if v.is_floating_point() else v for k, v in state.items()}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: {"scheduler": "x"}, "damaged schedule state"),
        (lambda s: {"scheduler": [1]}, "damaged schedule state"),
        (lambda s: {"scheduler": {**s["scheduler"], "T_max": "abc"}}, "damaged schedule state"),
        (lambda s: {"losses": ["a"]}, r"damaged \(epoch, losses, rng\)"),
        (lambda s: {"epoch": True}, r"damaged \(epoch, losses, rng\)"),
        (lambda s: {"model": _float_model_as_int(s["model"])}, r"another model: .*int64 there"),
    ],
    ids=["sched-str", "sched-list", "sched-value", "losses-str", "epoch-bool", "model-dtype"],
)
def test_a_damaged_checkpoint_is_one_error_and_changes_nothing(
    program: str, saved: dict[str, Any], edit: Any, message: str, tmp_path: Path
) -> None:
    """A checkpoint edited by hand: its schedule state a string, a list, or a dict whose T_max
    is text; a loss that is text; epoch True; float weights saved as int64. Each was accepted:
    the schedule's load_state_dict raised ValueError/TypeError (a traceback) after the optimizer
    and generators were already restored, or failed mid-epoch; float('a') raised after the
    module was loaded; int64 weights were cast into the float ones. Now one QATError and the
    module unchanged (the oracle: its state tensors before the call).

    Mutants seen to fail it (private copy): _same_kind returning True (sched-*), the losses'
    type check removed (losses-str), the bool check removed (epoch-bool), the dtype
    comparison removed from _check_model (model-dtype)."""
    path = tmp_path / "c.pt"
    torch.save({**saved, **edit(saved)}, path)
    q = _prepared(program)
    before = _state(q)
    with pytest.raises(qat.QATError, match=message):
        qat.train(q, _loader(), epochs=2, checkpoint=path, cosine=True)
    after = _state(q)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_special_checkpoint_paths_are_refused_without_reading(program: str, tmp_path: Path) -> None:
    """A FIFO (reading would block forever), /dev/null, a directory: one nanoir.Error each,
    and the FIFO is still a FIFO (not replaced by a regular file).

    A regression test (these passed before this round): mutant seen to fail it, the
    regular-file check in checkpoint._read removed (the FIFO read hangs; the test times out
    under ``timeout``)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    q = _prepared(program)
    for path, message in [
        (fifo, "is not a regular file"),
        ("/dev/null", "is not a regular file"),
        (tmp_path, "it is a directory"),
    ]:
        with pytest.raises(nanoir.Error, match=message):
            qat.train(q, _loader(), epochs=1, checkpoint=path)
    assert fifo.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
