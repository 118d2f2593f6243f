"""``aten.adaptive_max_pool1d`` / ``2d`` in the frontend: a max pool (kernel = stride =
``L / o``) where the output size divides the input size, nearest upsampling where the input
size divides the output size, refused with the reason otherwise. nf == torch exactly (a max
picks an input value), nq == nh after quantizing.

Mutants checked (each made a test here fail, in a private copy):
- the kernel taken as ``o`` instead of ``L / o``: test_nf_equals_torch;
- the upsampling branch dropped (a 1-element pool only): test_nf_equals_torch;
- sizes that divide neither way accepted as a pool of ``L // o``: test_other_sizes_are_refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.frontend.errors import FrontendError
from nanoir.testing.programs import examples

torch.set_num_threads(1)


@st.composite
def exact_sizes(draw):  # noqa: ANN001, ANN201
    """(input size, output size) where one divides the other."""
    if draw(st.booleans()):
        o = draw(st.integers(1, 5))
        return o * draw(st.integers(1, 4)), o
    length = draw(st.integers(1, 4))
    return length, length * draw(st.integers(1, 3))


@settings(max_examples=examples(15), deadline=None)
@given(
    dims=st.lists(exact_sizes(), min_size=1, max_size=2),
    channels=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_nf_equals_torch(dims: list[tuple[int, int]], channels: int, seed: int) -> None:
    cls = nn.AdaptiveMaxPool1d if len(dims) == 1 else nn.AdaptiveMaxPool2d
    out = [o for _, o in dims]
    model = nn.Sequential(cls(out[0] if len(out) == 1 else tuple(out))).eval()
    gen = torch.Generator().manual_seed(seed)
    shape = [channels, *(length for length, _ in dims)]
    module = nanoir.from_torch(model, (torch.randn([2, *shape], generator=gen),))
    for batch in (1, 3):
        x = torch.randn([batch, *shape], generator=gen)
        with torch.no_grad():
            want = model(x).numpy()
        (got,) = run(module, x.numpy())
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("length", "out"), [(16, 5), (7, 3), (4, 6)])
def test_other_sizes_are_refused(length: int, out: int) -> None:
    model = nn.Sequential(nn.AdaptiveMaxPool1d(out)).eval()
    with pytest.raises(FrontendError, match=rf"adaptive max pooling of {length} to {out}"):
        nanoir.from_torch(model, (torch.randn(2, 3, length),))


def test_a_text_cnn_head_quantizes_and_lowers_exactly() -> None:
    """Conv1d -> ReLU -> AdaptiveMaxPool1d(1) -> Linear, as text CNNs end: nq == nh."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(4, 6, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveMaxPool1d(2),
        nn.Flatten(),
        nn.Linear(12, 3),
    ).eval()
    module = nanoir.from_torch(model, (torch.randn(2, 4, 10),))
    rng = np.random.default_rng(0)
    nanoir.quantize(module, [rng.standard_normal((4, 4, 10)) for _ in range(3)])
    x = rng.standard_normal((3, 4, 10))
    hw = lower_to_hw(module.clone())
    np.testing.assert_array_equal(run(hw, x)[0], run(module, x, dtype=np.float64)[0])
