"""0-d runtime values lower to nh (lowering/hw/scalars.py): a function of a scalar input, a
full reduction to a scalar, comparisons and selects of scalars. Inside, nh computes on
one-element vectors; the function's 0-d inputs and results stay 0-d (layout ``""``), so the
caller sees torch's shapes.

Each program: nf against torch in float64 (the oracle), then quantized on its own input,
lowered, and nq == nh bit for bit, with the same (0-d) output shapes.

Mutants checked (each made the tests named fail; applied in place and restored):
- the reshape back to ``[]`` before the return dropped (nh returns ``[1]``):
  test_scalar_programs_lower (shape differs);
- a reshape to ``[]`` of a ``[1, 1]`` value erased instead of made a reshape to ``[1]``:
  test_scalar_programs_lower (a vector plus a sum: the sum broadcasts as ``[1, 1]``, the
  result takes a wrong shape);
- the 0-d input's reshape to ``[1]`` not inserted: test_scalar_programs_lower (scalar where:
  the 0-d input reaches a select pattern);
- the empty layout refused again in ``#nh.fixed``: test_fixed_prints_and_parses_the_0d_layout.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects.nh import FixedAttr
from torch import nn

import nanoir

torch.set_num_threads(1)


def _probe(fn):
    return type("Probe", (nn.Module,), {"forward": lambda self, *xs: fn(*xs)})()


PROGRAMS = {
    "exp of a scalar": (lambda x: torch.exp(x), [()]),
    "sigmoid times 2": (lambda x: torch.sigmoid(x) * 2, [()]),
    "scalar compare": (lambda x, y: (x > y).float(), [(), ()]),
    "scalar where": (lambda x: torch.where(x > 0, x, torch.tensor(0.5)), [()]),
    "masked_fill of a scalar": (lambda x: x.masked_fill(x < 0, -1.0), [()]),
    "vector >= scalar": (lambda x, y: (x >= y).float(), [(5,), ()]),
    "sum of a vector": (lambda x: x.sum(), [(6,)]),
    "sum of a matrix": (lambda x: x.sum(), [(3, 4)]),
    "a vector plus a sum": (lambda v, m: v + m.sum(), [(5,), (3, 4)]),
    "amax of a matrix": (lambda x: x.amax(), [(3, 4)]),
    "amin over both dims": (lambda x: x.amin((0, 1)), [(3, 4)]),
    "argmax of a vector": (lambda x: x.argmax().float(), [(7,)]),
    "an element": (lambda x: torch.exp(x[1, 2]), [(3, 4)]),
    "a scalar and a vector out": (lambda x: (x.sum(), x * 2), [(4,)]),
    "a scalar repeated": (lambda x: x.repeat(3), [()]),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_scalar_programs_lower(name: str) -> None:
    fn, shapes = PROGRAMS[name]
    rng = np.random.default_rng(len(name))
    xs = [rng.normal(size=s).astype(np.float32) for s in shapes]
    probe = _probe(fn)
    module = nanoir.from_torch(probe, tuple(torch.from_numpy(x) for x in xs), dynamic_batch=False)
    with torch.no_grad():
        out = fn(*(torch.from_numpy(x).double() for x in xs))
    want = [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    got = nanoir.run(module, *xs)
    for g, w in zip(got, want, strict=True):
        assert np.shape(g) == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    nanoir.quantize(module, [tuple(xs)], progress=False)
    nq = nanoir.run(module, *xs)
    hw = nanoir.lower_to_hw(module.clone())
    nh = nanoir.run(hw, *xs)
    for a, b, w in zip(nq, nh, want, strict=True):
        assert np.shape(a) == np.shape(b) == w.shape
        assert np.asarray(a, np.float64).tobytes() == np.asarray(b, np.float64).tobytes()


def test_fixed_prints_and_parses_the_0d_layout() -> None:
    """A 0-d nh value's layout is empty, printed ``""``; the printed program parses back."""
    module = nanoir.from_torch(_probe(torch.exp), (torch.tensor(0.3),), dynamic_batch=False)
    nanoir.quantize(module, [np.float32(0.3)], progress=False)
    hw = nanoir.lower_to_hw(module)
    text = str(hw)
    assert ', "">>' in text
    again = nanoir.parse(text)
    assert str(again) == text
    x = np.array(0.3, np.float32)
    assert nanoir.run(again, x)[0].tobytes() == nanoir.run(hw, x)[0].tobytes()
    assert FixedAttr.layout_error("") is None
    assert FixedAttr.layout_error("XB") is not None
