"""quantize with a target refuses what lower-to-hw would refuse for reasons visible before
calibration (``lowering/hw/support.py: check_before_calibrating``), before any calibration
batch is read: a network that cannot lower costs no calibration (issue 30 §7).

The proof is a count, not a clock: each calibration batch is an object that counts how often
its array is taken (``__array__``, which every reading of a batch goes through); a refusal
that comes before calibration leaves the count at 0.

Mutant seen to fail it (``driver.check_before_calibrating`` replaced by a no-op in a
private run): quantize then calibrates (9 reads of the 3 batches) and refuses nothing; the
division by a runtime value is refused only later, by lower-to-hw.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import nanoir
from nanoir.target import Target

torch.set_num_threads(1)


class CountedBatch:
    """A calibration batch that counts how often its array is read."""

    reads = 0

    def __init__(self, array: np.ndarray):
        self.array = array

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        CountedBatch.reads += 1
        return self.array if dtype is None else self.array.astype(dtype)


class DividesByItsSigmoid(nn.Module):
    """``conv(x) / sigmoid(conv(x))``: a division by a runtime value, which no integer
    engine op computes (lower-to-hw refuses it whatever the exponents)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y / torch.sigmoid(y)


class Lowers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _batches(n: int) -> list[CountedBatch]:
    rng = np.random.default_rng(0)
    return [CountedBatch(rng.standard_normal((1, 2, 6, 6)).astype(np.float32)) for _ in range(n)]


def _program(model: nn.Module) -> object:
    torch.manual_seed(0)
    return nanoir.from_torch(model.eval(), torch.zeros(1, 2, 6, 6))


def test_unlowerable_op_is_refused_before_any_batch_is_read() -> None:
    program = _program(DividesByItsSigmoid())
    CountedBatch.reads = 0
    with pytest.raises(nanoir.Error) as refused:
        nanoir.quantize(program, _batches(3), target=Target.example())
    message = str(refused.value)
    assert message.startswith("quantize:"), message
    assert "divides by a runtime value" in message, message
    assert CountedBatch.reads == 0


def test_a_lowerable_network_reads_its_batches() -> None:
    """The counter counts: the same batches are read when nothing is refused (else the test
    above could pass with a counter that never moves)."""
    program = _program(Lowers())
    CountedBatch.reads = 0
    nanoir.quantize(program, _batches(3), target=Target.example())
    assert CountedBatch.reads >= 3
    nanoir.lower_to_hw(program, target=Target.example())
