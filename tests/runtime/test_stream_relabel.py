"""The stream planner follows the streamed dim through transposes (relabelling): a transpose
that moves M passes its rows on, one in, one out, and its result streams along
``perm.index(M)``. Streamed (``nanoir.stream``, ``nanoir.Streamer``) == whole
(``nanoir.run``) bit for bit at nf, nq and nh, with caches within the plan, on random small
networks that move M to another dim and stream on past it (a conv along the new dim, a linear
over the channels, a transpose back). Before, such a transpose took the whole extent: the
plan's caches below would hold all the rows (asserted: at most a few).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import quantize
from nanoir.lowering.stream_plan import stream_plan
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import StreamRunner, stream
from nanoir.runtime.streamer import Streamer
from torch import nn
from xdsl.dialects.builtin import ModuleOp

from nanoir.frontend import from_torch
from nanoir.testing.programs import examples


class Front1d(nn.Module):
    """``[N, C, T]``: a conv along T, permuted to ``[N, T, C]``, a linear over the channels,
    optionally permuted back and convolved along T again."""

    def __init__(self, c: int, k: int, pad: int, back: bool):
        super().__init__()
        self.conv = nn.Conv1d(c, 4, k, padding=pad)
        self.fc = nn.Linear(4, 3)
        self.back = nn.Conv1d(3, 2, 3, padding=1) if back else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(torch.relu(self.conv(x)).permute(0, 2, 1))
        return y if self.back is None else self.back(y.permute(0, 2, 1))


class Front2d(nn.Module):
    """``[N, C, H, W]`` streamed along H: a conv, then H moved to dim 3 (a conv along both
    dims, H now the last) or to dim 1 (a linear over W, then ReLU)."""

    def __init__(self, to_last: bool):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.to_last = to_last
        self.conv2 = nn.Conv2d(3, 2, (2, 3), padding=(0, 1))
        self.fc = nn.Linear(5, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if self.to_last:
            return self.conv2(y.permute(0, 1, 3, 2))
        return torch.relu(self.fc(y.permute(0, 2, 1, 3)))


@functools.cache
def _exported(kind: str, *args: Any) -> ModuleOp:
    """The nf program of one structure, weights fixed (exports are the slow part: cached)."""
    torch.manual_seed(len(args) + sum(int(a) for a in args))
    if kind == "1d":
        c, k, pad, back, length = args
        return from_torch(Front1d(c, k, pad, back).eval(), (torch.randn(2, c, length),))
    to_last, rows = args
    return from_torch(Front2d(to_last).eval(), (torch.randn(1, 2, rows, 5),))


def _levels(nf: ModuleOp, shape: tuple[int, ...], seed: int) -> list[ModuleOp]:
    """nf, nq calibrated on a batch drawn from ``seed``, nh."""
    nq = nf.clone()
    rng = np.random.default_rng(seed)
    quantize(nq, [rng.standard_normal((2, *shape[1:])).astype(np.float32) * rng.uniform(0.5, 3)])
    return [nf, nq, lower_to_hw(nq.clone())]


def _check(module: ModuleOp, x: np.ndarray, step: int, level: str) -> None:
    (want,) = run(module, x)
    runner = StreamRunner(module)
    (got,) = stream(module, [x], step=step, runner=runner)
    assert got.shape == want.shape and got.dtype == want.dtype
    if level == "nf":  # float32 products summed in another order: 1 ulp seen
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert got.tobytes() == want.tobytes(), f"{level} step {step}"
    plan = stream_plan(module, steps=[(2, step)])
    for key, peak in runner.cache_peaks.items():
        assert peak <= plan.caches[key].rows[2].max
    # no cache waits for the whole input: the transpose streams
    assert max(c.rows[2].max for c in plan.caches.values()) <= 3 + step


@settings(max_examples=examples(3), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.sampled_from([1, 3]),
    k=st.sampled_from([1, 3]),
    pad=st.integers(0, 1),
    back=st.booleans(),
    step=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_a_transpose_moving_m_streams_1d(
    c: int, k: int, pad: int, back: bool, step: int, seed: int
) -> None:
    """Mutants seen to fail it (private copy): the transpose's result keeping M's index
    instead of ``perm.index(M)``, the transpose taking the whole extent again (the cache
    bound), and ``stream()`` joining an output's rows along ``mem_dim`` instead of its own
    axis."""
    shape = (2, c, 9)
    x = np.random.default_rng(seed).standard_normal(shape) * 2
    levels = _levels(_exported("1d", c, k, pad, back, 9), shape, seed)
    for level, module in zip(("nf", "nq", "nh"), levels):
        _check(module, x, step, level)


@settings(max_examples=examples(2), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    to_last=st.booleans(),
    rows=st.sampled_from([3, 5]),
    step=st.integers(1, 2),
    seed=st.integers(0, 99),
)
def test_a_transpose_moving_m_streams_2d(to_last: bool, rows: int, step: int, seed: int) -> None:
    """M moved to the last dim (a 2-D conv then slides along it) or to dim 1 (a linear over
    W). Mutant seen to fail it: a conv whose streamed axis was moved keeping the window rule
    of dim 2 (``node_axes`` asking the trait along the analysed dim, not the input's axis)."""
    shape = (1, 2, rows, 5)
    x = np.random.default_rng(seed).standard_normal(shape) * 2
    for level, module in zip(
        ("nf", "nq", "nh"), _levels(_exported("2d", to_last, rows), shape, seed)
    ):
        _check(module, x, step, level)


def test_streamer_pushes_frames_past_a_transpose() -> None:
    """``nanoir.Streamer`` on the nh program: frames of 0, 1 and 2 rows along dim 2 come out
    along dim 1 (``output_axes``), each row once, equal to the whole run; the empty outputs
    of a warm-up push are shaped ``[N, 0, F]``. Mutant seen to fail it: the Streamer's empty
    outputs cut along ``mem_dim``."""
    hw = _levels(_exported("1d", 2, 3, 1, False, 11), (2, 2, 11), 3)[2]
    x = np.random.default_rng(3).standard_normal((2, 2, 11))
    (want,) = run(hw, x)
    streamer = Streamer(hw)
    assert streamer.output_axes == (1,)
    outs: list[Any] = []
    start = 0
    for size in [0, 1, 2, 0, 3, 1, 2, 2]:
        (y,) = streamer.push(x[:, :, start : start + size])
        assert y is not None and y.shape[0] == 2 and y.shape[2] == 3
        outs.append(y)
        start += size
    outs.append(streamer.flush()[0])
    assert start == 11
    assert np.concatenate(outs, axis=1).tobytes() == want.tobytes()


def test_nanoir_run_stream_spools_rows_along_the_output_axis(tmp_path: Any) -> None:
    """``nanoir-run --stream`` writes an output streamed along dim 1 (past the transpose) as
    the whole run's array. Mutant seen to fail it: the spool cutting every output along
    ``--mem-dim`` (as before ``Streamer.output_axes``)."""
    import nanoir
    from nanoir.cli.run import main

    hw = _levels(_exported("1d", 2, 3, 1, False, 11), (2, 2, 11), 4)[2]
    x = np.random.default_rng(4).standard_normal((2, 2, 11))
    nanoir.save(hw, str(tmp_path / "hw.mlir"))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npy"
    assert (
        main(
            [
                str(tmp_path / "hw.mlir"),
                "--input",
                str(tmp_path / "x.npy"),
                "--stream",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    (want,) = run(hw, x)
    assert np.load(out).tobytes() == want.tobytes()
