"""nanoir.qat under torch.distributed: 2 CPU processes (gloo), one set of exponents.

One spawn runs every scenario on both ranks (process start dominates the cost); the parent
runs the single-process oracles with the same code on the ranks' batches put together. The
data is float64 and the nets small, so every fake-quantized forward is exact in float64 and
does not depend on how a batch is split; each rank calibrates on one batch, so every sum the
calibration reduces (mse errors, bias-correction errors) adds in the order one process adds
them, and the single-process run must equal the ranks bit for bit (no near-tie can flip).

Needs torch (the ``torch`` extra).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402
from nanoir.testing.ddp import run_ranks  # noqa: E402

EMA_EPOCHS, LSQ_STEPS = 2, 2


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def _calibration(rank: int) -> np.ndarray:
    """Rank 1's batch is 3x rank 0's range: exponents from one rank alone differ."""
    return np.random.default_rng(10 + rank).standard_normal((4, 1, 6, 6)) * (1 + 2 * rank)


def _dataset() -> TensorDataset:
    """16 samples of growing range, so the ema learner's result depends on their order."""
    gen = np.random.default_rng(7)
    x = gen.standard_normal((16, 1, 6, 6)) * (1 + np.arange(16) / 4).reshape(-1, 1, 1, 1)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(gen.integers(0, 3, 16)))


def _sampler(rank: int) -> DistributedSampler:
    return DistributedSampler(_dataset(), num_replicas=2, rank=rank, shuffle=True, seed=3)


def _lsq_batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = np.random.default_rng(20 + rank)
    x = gen.standard_normal((4, 1, 6, 6)) * (1 + 2 * rank)
    return torch.from_numpy(x), torch.from_numpy(gen.integers(0, 3, 4))


def _program() -> str:
    """The net imported once, as text: a torch.export costs seconds under load, and the
    ranks start from the very same constants (the text reads back bit for bit)."""
    return str(nanoir.from_torch(_model(), (torch.zeros(2, 1, 6, 6),)))


def _snapshot(q: Any) -> dict[str, Any]:
    core = q.module if isinstance(q, nn.parallel.DistributedDataParallel) else q
    return {
        "exponents": qat.export_exponents(q),
        "state": {k: v.detach().numpy().copy() for k, v in core.state_dict().items()},
        "program": str(qat.convert(q)),
    }


def _lsq_optimizer(q: qat.QATModule) -> torch.optim.Optimizer:
    return torch.optim.SGD(q.param_groups(0.05), lr=0.05)


def _worker(rank: int, world: int, out: str, text: str) -> None:
    """Every scenario on this rank; the results go to ``out/rank{rank}.pkl``."""
    results: dict[str, Any] = {}
    x = _calibration(rank)
    program = nanoir.parse(text)
    # absmax calibration, then ema statistics at optimizer rate 0 from a DistributedSampler
    q = qat.prepare(program, (), weight_bits=4, learner="ema", lr=0.5, calibrator="absmax")
    qat.calibrate(q, [x])
    results["absmax"] = _snapshot(q)
    loader = DataLoader(_dataset(), batch_size=2, sampler=_sampler(rank))
    ddp = nn.parallel.DistributedDataParallel(q)  # a wrapped module is taken as it is
    qat.train(ddp, loader, epochs=EMA_EPOCHS, lr=0.0)
    results["ema"] = _snapshot(ddp)
    # the mse calibrator, with bias correction (its sums are reduced too)
    q = qat.prepare(program, (), weight_bits=4, calibrator="mse")
    qat.calibrate(q, [x])
    results["mse"] = _snapshot(q)
    # lsq: exponents are parameters, averaged by DDP's gradients (a bare module: train wraps it)
    q = qat.prepare(program, (), weight_bits=4, learner="lsq", lr=0.05)
    qat.calibrate(q, [x])
    qat.train(q, [_lsq_batch(rank)] * LSQ_STEPS, epochs=1, optimizer=_lsq_optimizer(q))
    results["lsq"] = _snapshot(q)
    qat.save_exponents(nn.parallel.DistributedDataParallel(q), Path(out) / f"exps{rank}.json")
    with open(Path(out) / f"rank{rank}.pkl", "wb") as f:
        pickle.dump(results, f)


def _single_process(text: str) -> dict[str, Any]:
    """The oracle: one process, the ranks' batches put together."""
    results: dict[str, Any] = {}
    program = nanoir.parse(text)
    both = [_calibration(0), _calibration(1)]
    q = qat.prepare(program, (), weight_bits=4, learner="ema", lr=0.5, calibrator="absmax")
    qat.calibrate(q, both)
    results["absmax"] = _snapshot(q)
    dataset = _dataset()
    for epoch in range(EMA_EPOCHS):
        orders = []
        for rank in (0, 1):
            sampler = _sampler(rank)
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        steps = []
        for i in range(0, len(orders[0]), 2):
            idx = orders[0][i : i + 2] + orders[1][i : i + 2]
            steps.append(dataset[idx])
        qat.train(q, steps, epochs=1, lr=0.0)
    results["ema"] = _snapshot(q)
    q = qat.prepare(program, (), weight_bits=4, calibrator="mse")
    qat.calibrate(q, both)
    results["mse"] = _snapshot(q)
    q = qat.prepare(program, (), weight_bits=4, learner="lsq", lr=0.05)
    qat.calibrate(q, both)
    (x0, y0), (x1, y1) = _lsq_batch(0), _lsq_batch(1)
    batch = (torch.cat([x0, x1]), torch.cat([y0, y1]))
    qat.train(q, [batch] * LSQ_STEPS, epochs=1, optimizer=_lsq_optimizer(q))
    results["lsq"] = _snapshot(q)
    # rank 0's batch alone: the reduction must matter for this data
    q = qat.prepare(program, (), weight_bits=4, learner="ema", lr=0.5, calibrator="absmax")
    qat.calibrate(q, both[:1])
    results["rank0_alone"] = _snapshot(q)
    return results


def test_two_ranks_hold_one_set_of_exponents(tmp_path: Path) -> None:
    """2 ranks (gloo): after absmax and mse calibration, ema steps at optimizer rate 0 from a
    DistributedSampler, and lsq steps through DDP, both ranks hold the same state and
    convert to the same program; calibration and ema equal one process on both ranks'
    batches bit for bit, lsq (DDP averages gradients, one process sums them in another
    order) to 1e-6.

    Mutants, each failing this test: no all-reduce in ``Quantizer._update_ema`` (ema
    exponents differ across ranks); ``distributed.reducer`` returning None (calibration
    differs across ranks); the mse errors not merged (``_merge`` skips ``sse``: the mse
    program differs from one process's); bias correction's sums not reduced; ``train`` not
    wrapping a bare module (the lsq exponents differ across ranks); ``train`` not calling
    ``set_epoch`` (epoch 2 repeats epoch 1's order: ema scales differ from the oracle's);
    calibration's absmax reduced by a sum across ranks instead of a max (``_merge``: the
    "absmax" scenario ran the default mse calibrator before, whose candidates hid it).
    """
    text = _program()
    # The oracle runs while the ranks do (CI's 2 cores).
    oracle = run_ranks(_worker, 2, str(tmp_path), text, meanwhile=lambda: _single_process(text))
    ranks = []
    for rank in (0, 1):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as f:
            ranks.append(pickle.load(f))
    for scenario in ("absmax", "ema", "mse", "lsq"):
        r0, r1, one = ranks[0][scenario], ranks[1][scenario], oracle[scenario]
        assert r0["program"] == r1["program"], scenario
        assert r0["exponents"] == r1["exponents"], scenario
        assert r0["state"].keys() == r1["state"].keys() == one["state"].keys()
        for key in r0["state"]:
            assert np.array_equal(r0["state"][key], r1["state"][key]), (scenario, key)
        if scenario == "lsq":
            assert r0["exponents"] == one["exponents"]
            for key in r0["state"]:
                np.testing.assert_allclose(
                    r0["state"][key], one["state"][key], rtol=0, atol=1e-6, err_msg=key
                )
            continue
        differ = [k for k in one["exponents"] if r0["exponents"].get(k) != one["exponents"][k]]
        assert not differ, (
            scenario,
            [(r0["exponents"].get(k), one["exponents"][k]) for k in differ],
        )
        assert r0["program"] == one["program"], scenario
        for key in r0["state"]:
            assert np.array_equal(r0["state"][key], one["state"][key]), (scenario, key)
    assert oracle["rank0_alone"]["exponents"] != oracle["absmax"]["exponents"]
    assert (tmp_path / "exps0.json").read_text() == (tmp_path / "exps1.json").read_text()
