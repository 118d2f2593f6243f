"""`.ne` at the nq level for ConvTranspose, DepthToSpace (CRD and DCR), SpaceToDepth and
Resize (nearest): text -> IR -> text byte for byte, IR -> text -> IR structurally equal,
and the imported program computes what the exported one does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def _round_trips(module, x: np.ndarray) -> str:  # noqa: ANN001
    text = export_nanoengine(module)
    imported = import_nanoengine(text)
    assert export_nanoengine(imported) == text  # text -> IR -> text
    again = import_nanoengine(export_nanoengine(imported))
    assert again.is_structurally_equivalent(imported)  # IR -> text -> IR
    want, got = run(module, x), run(imported, x)
    assert all(w.tobytes() == g.tobytes() for w, g in zip(want, got))
    return text


@settings(max_examples=examples(15))
@given(
    st.sampled_from((1, 2)),
    st.integers(1, 2),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(0, 2),
    st.integers(0, 1),
    st.integers(1, 2),
    st.integers(1, 5),
    st.booleans(),
)
@pytest.mark.filterwarnings("ignore")
def test_conv_transpose_round_trips(
    n: int, groups: int, k: int, s: int, p: int, op: int, d: int, size: int, quantized: bool
) -> None:
    assume(p <= d * (k - 1) and op < max(s, d) and (size - 1) * s - 2 * p + d * (k - 1) + op >= 0)
    cls = nn.ConvTranspose1d if n == 1 else nn.ConvTranspose2d
    model = nn.Sequential(
        cls(
            2 * groups,
            2 * groups,
            k,
            stride=s,
            padding=p,
            output_padding=op,
            dilation=d,
            groups=groups,
        ),
        nn.ReLU(),
    ).eval()
    x = torch.randn(2, 2 * groups, *(size,) * n)
    module = from_torch(model, x)
    if quantized:
        nanoir.quantize(module, [x.numpy()])
    text = _round_trips(module, x.numpy())
    assert "op_type=ConvTranspose" in text and "output_padding=" in text


@settings(max_examples=examples(15))
@given(
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 4),
    st.sampled_from(("CRD", "DCR")),
    st.booleans(),
)
def test_depth_to_space_space_to_depth_and_resize_round_trip(
    r: int, scale: int, size: int, mode: str, quantized: bool
) -> None:
    x = torch.randn(2, 2 * r * r, size, size + 1)
    module = from_torch(
        nn.Sequential(nn.Conv2d(2 * r * r, 2 * r * r, 1), nn.Upsample(scale_factor=scale)).eval(), x
    )
    # DepthToSpace then SpaceToDepth in `mode`, appended to the imported program.
    func = next(iter(module.ops))
    ret = func.body.block.last_op
    up = ret.operands[0]
    d2s = nf.DepthToSpaceOp(up, r, mode)
    s2d = nf.SpaceToDepthOp(d2s.result, r, mode)
    func.body.block.insert_ops_before([d2s, s2d], ret)
    ret.operands = [s2d.result]
    module.verify()
    if quantized:
        nanoir.quantize(module, [x.numpy()])
    text = _round_trips(module, x.numpy())
    assert "op_type=DepthToSpace" in text and f"mode={mode}" in text
    assert "op_type=Resize" in text and "nearest_mode=floor" in text
    assert "op_type=SpaceToDepth" in text


def test_onnx_defaults_read_as_onnx_says() -> None:
    """DepthToSpace and SpaceToDepth without ``mode`` are DCR (ONNX's default)."""
    x = torch.randn(1, 8, 2, 2)
    module = from_torch(nn.PixelShuffle(2).eval(), x)
    text = export_nanoengine(module).replace("blocksize=2, mode=CRD", "blocksize=2")
    (op,) = [o for o in import_nanoengine(text).walk() if isinstance(o, nf.DepthToSpaceOp)]
    assert op.mode.data == "DCR"


class _Net(nn.Module):
    """conv, relu, PixelShuffle(r), nearest upsample by `scale`, PixelUnshuffle(r), conv."""

    def __init__(self, c: int, r: int, scale: int):
        super().__init__()
        self.first, self.last, self.r, self.scale = (
            nn.Conv2d(c, c * r * r, 3, padding=1),
            nn.Conv2d(c * r * r, 4, 1),
            r,
            scale,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.pixel_shuffle(torch.relu(self.first(x)), self.r)
        y = F.interpolate(y, scale_factor=self.scale)
        return self.last(F.pixel_unshuffle(y, self.r))


@settings(max_examples=examples(10))
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.booleans())
def test_hw_level_block_ops_and_resize_round_trip(
    r: int, scale: int, size: int, per_channel: bool
) -> None:
    """nh.depth_to_space, nh.space_to_depth and nh.upsample_nearest as DepthToSpace,
    SpaceToDepth and Resize nodes of an integer program."""
    from nanoir.lowering.lower_to_hw import lower_to_hw

    x = torch.randn(2, 2, size, size + 1)
    module = from_torch(_Net(2, r, scale).eval(), x)
    nanoir.quantize(module, [x.numpy()], act_per_channel=per_channel)
    try:
        hw = lower_to_hw(module)
    except nanoir.Error as e:  # far-apart per-channel exponents merged: a clear diagnostic
        assume(not ("more than i32" in str(e) and per_channel))
        raise
    text = export_nanoengine(hw)
    imported = import_nanoengine(text)
    assert export_nanoengine(imported) == text
    assert import_nanoengine(text).is_structurally_equivalent(imported)
    for op_type in ("DepthToSpace", "SpaceToDepth", "Resize"):
        assert f"op_type={op_type}" in text
    want, got = run(hw, x.numpy(), raw=True), run(imported, x.numpy(), raw=True)
    assert all(w.tobytes() == g.tobytes() for w, g in zip(want, got))
