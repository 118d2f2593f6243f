"""compile_model runs its stages with the cyclic garbage collector paused and leaves it as it
found it (``nanoir.pipeline.paused_gc``; ``benchmarks/bench_compile.py`` shows why: with the
collector on, stream-plan's time per op at 10,000 ops was 4x that at 100).

Mutants caught: ``gc.disable()`` removed from ``paused_gc`` (the stage sees the collector
on), ``gc.enable()`` unconditional (a caller's disabled collector comes back on), the
``finally`` dropped (a failing stage leaves the collector off).
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

import nanoir
from nanoir.errors import Error


class Calibration:
    """Calibration batches that record whether the collector is on when quantize (a stage
    inside compile_model) reads them."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self.seen: list[bool] = []

    def __iter__(self):
        self.seen.append(gc.isenabled())
        yield self.x.numpy()


def test_stages_run_with_the_collector_off_and_it_comes_back_on() -> None:
    assert gc.isenabled()
    x = torch.randn(2, 4)
    calibration = Calibration(x)
    nanoir.compile_model(nn.Linear(4, 2), (x,), calibration, stop="nh")
    assert calibration.seen == [False]
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    x = torch.randn(2, 4)
    gc.disable()
    try:
        nanoir.compile_model(nn.Linear(4, 2), (x,), stop="nf")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_stage_turns_the_collector_back_on() -> None:
    x = torch.randn(2, 4)
    calibration = Calibration(torch.randn(2, 5))  # 5 features, not 4: quantize refuses
    with pytest.raises(Error):
        nanoir.compile_model(nn.Linear(4, 2), (x,), calibration, stop="nh")
    assert calibration.seen == [False]
    assert gc.isenabled()
