"""``nh.upsample_zero`` in integer ONNX (``movement.upsample_zero``): two spatial dims of one
ratio are a ``Pad`` of the channels and a ``DepthToSpace``, anything else one ``Pad`` of
unit dims. Each form against an oracle written here (the codes placed with NumPy strides) and
the NumPy executor, at every offset, and between convs (the uint8 form)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.nh import quantize_inputs
from torch import nn

import nanoir
from nanoir.testing.magik_models import Unpool2d
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")
torch.set_num_threads(1)


def _program(dtype: str, shape: list[int], ratios: list[int], offsets: list[int]) -> str:
    big = [*shape[:2], *(d * r for d, r in zip(shape[2:], ratios))]
    layout = "BCMD"[: len(shape)]
    t_in = f"tensor<?x{'x'.join(map(str, shape[1:]))}x{dtype}, #nh.fixed<3, {layout}>>"
    t_out = f"tensor<?x{'x'.join(map(str, big[1:]))}x{dtype}, #nh.fixed<3, {layout}>>"
    return (
        f"func.func @main(%x: {t_in}) -> {t_out} {{\n"
        f"  %y = nh.upsample_zero %x {{offsets = array<i64: {', '.join(map(str, offsets))}>}}"
        f" : {t_in} -> {t_out}\n"
        f"  func.return %y : {t_out}\n}}\n"
    )


def _ops(model) -> list[str]:  # noqa: ANN001
    return [n.op_type for n in model.graph.node]


@settings(max_examples=examples(25), deadline=None)
@given(
    dtype=st.sampled_from(["i8", "ui8", "i4", "i16"]),
    dims=st.sampled_from([(3, 4, 5), (1, 1, 1), (2, 7, 3), (5, 6)]),
    ratios=st.sampled_from([(2, 2), (3, 3), (2, 1), (1, 3), (1, 1), (2,), (4,)]),
    batch=st.integers(1, 3),
    data=st.data(),
)
def test_zeros_between_the_codes(
    dtype: str,
    dims: tuple[int, ...],
    ratios: tuple[int, ...],
    batch: int,
    data: st.DataObject,
) -> None:
    """Each code at its offsets of its window, zeros elsewhere, 1-D and 2-D, every offset,
    over a dynamic batch. Kills: the offsets' block read column-major (``offsets[1] * r +
    offsets[0]``); the DepthToSpace mode ``CRD``; the zeros before the codes."""
    spatial = dims[1:]
    if len(spatial) != len(ratios):
        ratios = ratios[: len(spatial)] + (2,) * (len(spatial) - len(ratios))
    offsets = [data.draw(st.integers(0, r - 1)) for r in ratios]
    shape = [batch, dims[0], *spatial]
    module = nanoir.parse(_program(dtype, shape, list(ratios), offsets))
    bits = int(dtype.lstrip("ui"))
    lo, hi = (0, 2**bits) if dtype.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.integers(lo, hi, shape)
    x = x.astype(np.uint8 if dtype == "ui8" else np.int16 if bits > 8 else np.int8)
    want = np.zeros([batch, dims[0], *(d * r for d, r in zip(spatial, ratios))], x.dtype)
    want[(..., *(slice(o, None, r) for o, r in zip(offsets, ratios)))] = x
    model = export_model(module)
    (got,) = run_model(make_session(model), [x])
    assert np.array_equal(got, want)
    assert np.array_equal(got, nanoir.run(module, x, raw=True)[0])
    assert ("DepthToSpace" in _ops(model)) == (len(ratios) == 2 and ratios[0] == ratios[1])


@pytest.mark.parametrize("rounding", ["half_even", "trunc", "half_up"])
def test_an_unpooling_between_convs(rounding: str) -> None:
    """Magik's zero ``Unpool2D`` between convs (its codes kept as bytes, the CRNN's form):
    written as ``DepthToSpace``, and onnxruntime's codes are the NumPy executor's at batch 1
    and 4."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), Unpool2d(8, "zero"), nn.Conv2d(8, 4, 3, padding=1)
    ).eval()
    x = np.random.default_rng(1).standard_normal((4, 3, 7, 9)).astype(np.float32)
    module = nanoir.from_torch(net, (torch.from_numpy(x),))
    nanoir.quantize(module, [x], rounding=rounding, progress=False)
    hw = lower_to_hw(module)
    assert any(op.name == "nh.upsample_zero" for op in hw.walk())
    model = export_model(hw)
    assert "DepthToSpace" in _ops(model)
    session = make_session(model)
    for batch in (1, 4):
        (codes,) = quantize_inputs(
            next(op for op in hw.walk() if op.name == "func.func"), [x[:batch]]
        )
        (want,) = nanoir.run(hw, codes, raw=True)
        (got,) = run_model(session, [codes])
        assert np.array_equal(got, want)
