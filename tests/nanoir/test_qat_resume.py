"""nanoir.qat.train(checkpoint=...): an interrupted and resumed run equals the uninterrupted one.

Needs torch (the ``torch`` extra).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402

EPOCHS = 3
OPTIONS: dict[str, Any] = {"weight_bits": 4, "learner": "ema", "rules": ("4.weight=4/lsq:0.05",)}


@pytest.fixture(scope="module")
def program() -> str:
    """A conv/BN/linear net imported once (torch.export is the slow part)."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3)
    )
    return str(nanoir.from_torch(model.eval(), (torch.zeros(2, 1, 6, 6),)))


def _loader() -> DataLoader:
    gen = np.random.default_rng(3)
    x = torch.from_numpy(gen.standard_normal((24, 1, 6, 6)).astype(np.float32))
    y = torch.from_numpy(gen.integers(0, 3, 24))
    return DataLoader(TensorDataset(x, y), batch_size=6, shuffle=True, num_workers=0)


def _prepared(program: str) -> qat.QATModule:
    q = qat.prepare(nanoir.parse(program), (), **OPTIONS)
    qat.calibrate(q, [np.random.default_rng(4).standard_normal((8, 1, 6, 6))])
    return q


class Interrupted(Exception):
    pass


def _interrupting_loss(after: int) -> Any:
    """Cross entropy that raises after ``after`` batches (a run killed mid-epoch)."""
    calls = [0]

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if calls[0] > after:
            raise Interrupted
        return nn.functional.cross_entropy(out, y)

    return loss


def _state(q: qat.QATModule) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in q.state_dict().items()}


def test_resumed_run_equals_the_uninterrupted_one(program: str, tmp_path: Path) -> None:
    """3 epochs (Adam, cosine schedule, ema and lsq learners, a shuffling DataLoader) in one
    call, against a call killed in epoch 3 and a fresh module resumed from its checkpoint
    with the global generators scrambled: every state tensor and every epoch's loss equal
    bit for bit, and the folder holds only the checkpoint (no temporary file).

    Mutants, each failing this test: the optimizer's state not restored
    (``load_checkpoint`` skips ``optimizer.load_state_dict``); torch's generator not restored
    (a different shuffle); the schedule's state not restored; resuming at the saved epoch
    minus one; the checkpoint saved before the epoch's last step."""
    torch.manual_seed(1)
    whole = _prepared(program)
    losses = qat.train(whole, _loader(), epochs=EPOCHS, cosine=True, lr=1e-2)

    torch.manual_seed(1)
    path = tmp_path / "qat.pt"
    first = _prepared(program)
    loader = _loader()
    with pytest.raises(Interrupted):  # killed after 2 epochs and 2 of the third's 4 batches
        qat.train(
            first,
            loader,
            epochs=EPOCHS,
            cosine=True,
            lr=1e-2,
            checkpoint=path,
            loss_fn=_interrupting_loss(2 * 4 + 2),
        )
    assert [p.name for p in tmp_path.iterdir()] == ["qat.pt"]

    torch.manual_seed(99)  # a new process: other generators, a module fresh from prepare
    np.random.seed(99)
    random.seed(99)
    resumed = qat.prepare(nanoir.parse(program), (), **OPTIONS)
    got = qat.train(resumed, loader, epochs=EPOCHS, cosine=True, lr=1e-2, checkpoint=path)
    assert got == losses
    want, have = _state(whole), _state(resumed)
    assert want.keys() == have.keys()
    for key in want:
        assert np.array_equal(want[key], have[key]), key
    assert qat.export_exponents(resumed) == qat.export_exponents(whole)
    assert [p.name for p in tmp_path.iterdir()] == ["qat.pt"]
    # A finished run resumes to nothing: the same losses, the same state.
    assert qat.train(resumed, loader, epochs=EPOCHS, cosine=True, lr=1e-2, checkpoint=path) == got
    assert all(np.array_equal(v, _state(resumed)[k]) for k, v in have.items())


def _refused(q: qat.QATModule, path: Path, match: str, **options: Any) -> None:
    before = _state(q)
    content = path.read_bytes()
    with pytest.raises(qat.QATError, match=match) as info:
        qat.train(q, _loader(), epochs=EPOCHS, checkpoint=path, **options)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content  # the file is left as it was
    assert all(np.array_equal(v, _state(q)[k]) for k, v in before.items())  # q untouched


def test_a_foreign_or_damaged_checkpoint_is_one_clear_error(program: str, tmp_path: Path) -> None:
    """Garbage, a torch file of something else, a truncated checkpoint, another model's,
    another optimizer's, more epochs than asked and a cosine mismatch: each one QATError
    naming the file, the file and the module unchanged. Mutant: ``_check_model`` not
    called (``load_state_dict``'s size mismatch escapes as a RuntimeError, after the
    optimizer's state was loaded)."""
    q = _prepared(program)
    good = tmp_path / "good.pt"
    qat.train(q, _loader(), epochs=1, checkpoint=good)
    q = _prepared(program)

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint\n")
    _refused(q, bad, "is not a nanoir.qat checkpoint")
    torch.save({"weights": torch.zeros(3)}, bad)
    _refused(q, bad, "is not a nanoir.qat checkpoint")
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    _refused(q, bad, "is not a nanoir.qat checkpoint")

    # per-tensor weight exponents: the same keys and optimizer groups, other shapes
    other = qat.prepare(nanoir.parse(program), (), weight_per_channel=False, **OPTIONS)
    qat.train(other, _loader(), epochs=1, checkpoint=tmp_path / "other.pt")
    _refused(q, tmp_path / "other.pt", r"another model: \S+ is \[1\] there, \[4, 1, 1, 1\] here")
    other = qat.prepare(nanoir.parse(program), (), weight_bits=4)  # no lsq exponent
    qat.train(other, _loader(), epochs=1, checkpoint=tmp_path / "other2.pt")
    _refused(q, tmp_path / "other2.pt", "another model: it lacks quantizers.4_weight.exponent")
    sgd = torch.optim.SGD(q.param_groups(0.1), lr=0.1, momentum=0.9)
    _refused(q, good, "another optimizer's state", optimizer=sgd)
    _refused(q, good, "saved with cosine=False", cosine=True)
    with pytest.raises(qat.QATError, match="1 epochs done, more than epochs=0"):
        qat.train(q, _loader(), epochs=0, checkpoint=good)
    with pytest.raises(nanoir.Error, match=re.escape(str(tmp_path))):  # a folder
        qat.train(q, _loader(), epochs=1, checkpoint=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.pt",
        "good.pt",
        "other.pt",
        "other2.pt",
    ]


class _GlobalRandomBatches:
    """Batches whose order each epoch comes from Python's ``random`` and whose input noise
    from NumPy's global generator (as data pipelines and augmentations draw them): a resumed
    run equals the uninterrupted one only if the checkpoint restores both."""

    def __init__(self) -> None:
        gen = np.random.default_rng(5)
        self.x = gen.standard_normal((24, 1, 6, 6)).astype(np.float32)
        self.y = gen.integers(0, 3, 24)

    def __iter__(self):  # noqa: ANN204
        order = list(range(4))
        random.shuffle(order)
        for i in order:
            rows = slice(6 * i, 6 * i + 6)
            noise = np.random.normal(0.0, 0.1, self.x[rows].shape).astype(np.float32)
            yield torch.from_numpy(self.x[rows] + noise), torch.from_numpy(self.y[rows])


def test_resume_restores_the_python_and_numpy_generators(program: str, tmp_path: Path) -> None:
    """A run whose data reads Python's ``random`` (the batch order) and NumPy's global
    generator (noise), killed in epoch 3 and resumed in a fresh module with both generators
    scrambled, equals the uninterrupted run: every epoch's loss and every state tensor.

    kills: Python's ``random`` state not restored from the checkpoint (``_set_rng_state``
    skipping ``random.setstate``); NumPy's global state not restored (skipping
    ``np.random.set_state``). Neither is read by the test above, whose data shuffles with
    torch's generator only."""

    def seeded() -> None:
        torch.manual_seed(1)
        np.random.seed(1)
        random.seed(1)

    seeded()
    whole = _prepared(program)
    seeded()
    losses = qat.train(whole, _GlobalRandomBatches(), epochs=EPOCHS, lr=1e-2)

    path = tmp_path / "qat.pt"
    seeded()
    first = _prepared(program)
    seeded()
    with pytest.raises(Interrupted):
        qat.train(
            first,
            _GlobalRandomBatches(),
            epochs=EPOCHS,
            lr=1e-2,
            checkpoint=path,
            loss_fn=_interrupting_loss(2 * 4 + 2),
        )
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    resumed = qat.prepare(nanoir.parse(program), (), **OPTIONS)
    got = qat.train(resumed, _GlobalRandomBatches(), epochs=EPOCHS, lr=1e-2, checkpoint=path)
    assert got == losses
    want, have = _state(whole), _state(resumed)
    assert all(np.array_equal(want[k], have[k]) for k in want), [
        k for k in want if not np.array_equal(want[k], have[k])
    ]
