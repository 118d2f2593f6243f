"""`.ne` Gemm rows for nf.linear / nh.linear on inputs of rank 3 and 4 (`[B, N, C]`, as in
every transformer), with and without a bias.

nf.linear contracts the last dim of an input of any rank; the nq reader used to keep such a
Gemm node as nf.custom (it took only a 2-D input), so a saved quantized transformer loaded
back had no runtime kernel. Now, at the nq and hw levels: save -> load -> save is byte for
byte, the loaded program has the linear (no nf.custom, no import warning), runs to the same
numbers as the program that was saved, and stays near torch's float output.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from torch import nn

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def _round_trip(module, path: Path):
    """Save, load (no warning), save again: the loaded module and both texts."""
    nanoir.save(module, path)
    first = path.read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = nanoir.load(path)
    again = path.with_name("again.ne")
    nanoir.save(back, again)
    return back, first, again.read_text()


def _compile(shape: tuple[int, ...], bias: bool, seed: int, stop: str):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(shape[-1], 3, bias=bias)).eval()
    x = torch.randn(*shape)
    # calibrated on x itself with absmax: nothing saturates, so torch's float output is an
    # oracle up to a few quantization steps
    module = nanoir.compile_model(
        net, (x,), [x.numpy()], stop=stop, bias_correction=False, calibrator="absmax"
    )
    with torch.no_grad():
        want = net(x).numpy().astype(np.float64)
    return module, x.numpy(), want


def _near(got: np.ndarray, want: np.ndarray) -> bool:
    """Within 5% of the output's range (8-bit codes, trunc rounding, no saturation)."""
    return bool(np.abs(got - want).max() <= 0.05 * (1.0 + np.abs(want).max()))


@pytest.mark.parametrize("shape", [(2, 5, 8), (2, 3, 4, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_nq_linear_nd_round_trips_and_runs(tmp_path: Path, shape, bias: bool) -> None:
    """nq level. Mutants (run in a private copy), each failing this test: the Gemm
    converter's rank check back at `!= 2` (all four cases: the nf.custom import warning);
    the converter dropping the bias operand (both bias=True cases: the second text differs)."""
    module, x, want = _compile(shape, bias, seed=len(shape), stop="nq")
    back, first, second = _round_trip(module, tmp_path / "m.ne")
    assert first == second
    names = [op.name for op in back.walk()]
    assert "nf.custom" not in names
    (linear,) = [op for op in back.walk() if isinstance(op, nf.LinearOp)]
    assert (linear.bias is not None) == bias
    (got,) = nanoir.run(back, x)
    (ref,) = nanoir.run(module, x)
    assert got.shape == (*shape[:-1], 3) and np.array_equal(got, ref)
    # torch's float linear, independent of nanoir: 8-bit fake-quant stays close
    assert _near(got, want)


@pytest.mark.parametrize("shape", [(2, 5, 8), (2, 3, 4, 6)])
def test_hw_linear_nd_round_trips_and_runs(tmp_path: Path, shape) -> None:
    """hw level: the integer program round-trips byte for byte and runs to the same codes,
    near torch's. A guard: the hw reader already took these (the rank mutant passes it)."""
    hw, x, want = _compile(shape, True, seed=7, stop="nh")
    back, first, second = _round_trip(hw, tmp_path / "h.ne")
    assert first == second
    assert any(isinstance(op, nh.LinearOp) for op in back.walk())
    (got,) = nanoir.run(back, x, raw=True)
    (ref,) = nanoir.run(hw, x, raw=True)
    assert got.dtype == ref.dtype and got.tobytes() == ref.tobytes()
    (real,) = nanoir.run(back, x)
    assert real.shape == (*shape[:-1], 3) and _near(real, want)


@settings(
    max_examples=examples(6),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    lead=st.lists(st.integers(1, 4), min_size=2, max_size=3),
    features=st.integers(1, 6),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_nq_linear_any_rank_round_trips(tmp_path: Path, lead, features, bias, seed) -> None:
    """Property: any leading dims (rank 3 or 4), feature count and bias round-trip byte for
    byte at nq and run equal. Mutant: the rank check back at `!= 2` fails it (checked)."""
    shape = (*lead, features)
    module, x, want = _compile(shape, bias, seed, stop="nq")
    back, first, second = _round_trip(module, tmp_path / "p.ne")
    assert first == second
    (got,) = nanoir.run(back, x)
    (ref,) = nanoir.run(module, x)
    assert np.array_equal(got, ref)
    assert _near(got, want)
