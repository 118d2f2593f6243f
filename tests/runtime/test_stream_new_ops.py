"""Streaming the ops that emit several rows per firing (ConvTranspose: ``stride`` rows,
nearest upsampling: ``scale`` rows, DepthToSpace: ``block`` rows) and SpaceToDepth (needs and
drops ``block``): streamed == whole bit for bit, caches within the plan, at nf and nq."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.traits import RowStep, StreamingRule
from nanoir.lowering.stream_plan import stream_plan
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import StreamRunner, stream
from torch import nn

import nanoir
from nanoir.frontend import FrontendError, from_torch
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def check_stream(
    module,
    inputs: list,
    step: int,
    raw: bool = False,  # noqa: ANN001
    exact: bool = True,
) -> None:
    """Streamed == whole-tensor (same dtype, same bytes), and caches within the plan (as
    tests/runtime/test_stream.py checks every other op). ``exact=False`` (float32 nf
    programs, whose BLAS sums round differently on other matrix sizes): close."""
    want = run(module, *inputs, raw=raw) if raw else run(module, *inputs)
    runner = StreamRunner(module, raw=raw)
    got = stream(module, inputs, step=step, runner=runner)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if not exact:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            continue
        assert g.tobytes() == w.tobytes(), f"step {step}: {np.flatnonzero(g != w).size} differ"
    plan = stream_plan(module, steps=[(2, step)])
    for key, peak in runner.cache_peaks.items():
        assert peak <= plan.caches[key].rows[2].max
    for value, peak in runner.tensor_peaks.items():
        if 2 in plan.tensors[value].rows:
            assert peak <= plan.tensors[value].rows[2].max


@st.composite
def transposed_case(draw):  # noqa: ANN001, ANN201
    n = draw(st.sampled_from((1, 2)))
    groups = draw(st.integers(1, 2))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    k = [draw(st.integers(1, 4)) for _ in range(n)]
    s = [draw(st.integers(1, 3)) for _ in range(n)]
    d = [draw(st.integers(1, 2)) for _ in range(n)]
    p = [draw(st.integers(0, dd * (kk - 1))) for kk, dd in zip(k, d)]
    op = [draw(st.integers(0, max(ss, dd) - 1)) for ss, dd in zip(s, d)]
    size = [draw(st.integers(1, 6)) for _ in range(n)]
    assume(
        all(
            (L - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1 > 0
            for L, ss, pp, dd, kk, oo in zip(size, s, p, d, k, op)
        )
    )
    cls = nn.ConvTranspose1d if n == 1 else nn.ConvTranspose2d
    model = cls(
        cin, cout, k, stride=s, padding=p, output_padding=op, dilation=d, groups=groups
    ).eval()
    return model, (2, cin, *size)


@settings(max_examples=examples(25))
@given(transposed_case(), st.integers(1, 3), st.integers(0, 999))
@pytest.mark.filterwarnings("ignore")
def test_conv_transpose_streams(case, step: int, seed: int) -> None:  # noqa: ANN001
    model, shape = case
    torch.manual_seed(seed)
    x = torch.randn(shape)
    try:
        module = from_torch(nn.Sequential(model, nn.ReLU()).eval(), x)
    except FrontendError as e:
        raise AssertionError(f"{model}: {e}") from None
    check_stream(module, [x.numpy()], step, exact=False)
    nq = from_torch(nn.Sequential(model, nn.ReLU()).eval(), x)  # (clone() trips on a name)
    nanoir.quantize(nq, [x.numpy()], act_bits=4, weight_bits=4)
    check_stream(nq, [x.numpy()], step)


def test_the_usual_upsampling_deconvs_stream_row_by_row() -> None:
    """k = 2s, p = s/2 and k = s emit s rows per row (no whole-extent fallback)."""
    for k, s, p, op in ((4, 2, 1, 0), (2, 2, 0, 0), (3, 2, 1, 1), (3, 1, 1, 0), (6, 3, 0, 0)):
        model = nn.ConvTranspose1d(2, 2, k, stride=s, padding=p, output_padding=op).eval()
        module = from_torch(model, torch.randn(1, 2, 5))
        (conv,) = [o for o in module.walk() if isinstance(o, nf.ConvTransposeOp)]
        trait = conv.get_trait(StreamingRule)
        step = trait.row_step(conv, 2, [conv.input])
        assert isinstance(step, RowStep) and step.emit == s and step.drop == 1, (k, s, p, op)


@settings(max_examples=examples(20))
@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from(("shuffle", "unshuffle", "upsample")),
)
def test_block_and_upsample_stream(r: int, h: int, w: int, step: int, kind: str) -> None:
    if kind == "shuffle":
        model, x = nn.PixelShuffle(r), torch.randn(2, 2 * r * r, h, w)
    elif kind == "unshuffle":
        model, x = nn.PixelUnshuffle(r), torch.randn(2, 2, h * r, w * r)
    else:
        model, x = nn.Upsample(scale_factor=(r, r + 1)), torch.randn(2, 2, h, w)
    net = nn.Sequential(nn.Conv2d(x.shape[1], x.shape[1], 3, padding=1), model, nn.ReLU())
    module = from_torch(net.eval(), x)
    check_stream(module, [x.numpy()], step, exact=False)
    nq = from_torch(net.eval(), x)
    nanoir.quantize(nq, [x.numpy()])
    check_stream(nq, [x.numpy()], step)
