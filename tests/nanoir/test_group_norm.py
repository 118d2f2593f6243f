"""GroupNorm at every level, and the `.ne` and ONNX forms of both norms: torch -> nf (float64
against torch), the integer algorithm against a float64 oracle written here, nq == nh bit for
bit, `.ne` round trips at the nq and hw levels, ONNX nf vs onnxruntime (and the nq refusal),
streamed == whole (GroupNorm takes the whole streamed dim).

Mutants seen to fail these tests in a private copy (/tmp/copy-layernorm) are named in the
test that caught them.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes
from nanoir.grammar.onnx.importer import import_onnx_bytes
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.numerics import norm
from torch import nn

import nanoir
from nanoir.testing.programs import examples

MODES = ("trunc", "floor", "half_up", "half_even")


class _Block(nn.Module):
    """A ConvTasNet-style 1-D (or 2-D) block: conv, GroupNorm, PReLU-free tail."""

    def __init__(self, c: int, groups: int, spatial: int, eps: float):
        super().__init__()
        conv = nn.Conv1d if spatial == 1 else nn.Conv2d
        self.conv = conv(2, c, 1)
        self.gn = nn.GroupNorm(groups, c, eps=eps)
        with torch.no_grad():
            self.gn.weight.uniform_(-2, 2)
            self.gn.bias.uniform_(-1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(self.conv(x))


def _shape(spatial: int, length: int) -> tuple[int, ...]:
    return (2, 2, length) if spatial == 1 else (2, 2, length, 3)


@settings(max_examples=examples(10), deadline=None)
@given(
    groups=st.integers(1, 3),
    per=st.integers(1, 3),
    spatial=st.sampled_from([1, 2]),
    length=st.integers(1, 6),
    eps=st.sampled_from([1e-5, 1e-8, 0.1]),
)
def test_nf_matches_torch(groups: int, per: int, spatial: int, length: int, eps: float) -> None:
    """nf (float64 kernel) vs torch in float64 within 1e-5 * max(1, max |torch|); N,C,L and
    NCHW."""
    torch.manual_seed(0)
    model = _Block(groups * per, groups, spatial, eps).eval()
    x = torch.randn(*_shape(spatial, length))
    module = nanoir.from_torch(model, (x,))
    assert "nf.group_norm" in {op.name for op in module.walk()}
    (y,) = nanoir.run(module, x.numpy(), dtype=np.float64)
    expected = model.double()(x.double()).detach().numpy()
    assert np.abs(y - expected).max() <= 1e-5 * max(1.0, float(np.abs(expected).max()))


def _oracle(q, k, groups, g, kg, c, kc, eps):  # noqa: ANN001, ANN202
    """torch's group_norm, float64, on dequantized codes (written here)."""
    x = q.astype(np.float64) * 2.0**-k
    rows = x.reshape(x.shape[0], groups, -1)
    mu = rows.mean(axis=2, keepdims=True)
    var = ((rows - mu) ** 2).mean(axis=2, keepdims=True)
    y = ((rows - mu) / np.sqrt(var + eps)).reshape(x.shape)
    channel = (-1,) + (1,) * (x.ndim - 2)
    return y * (g * 2.0**-kg).reshape(channel) + (c * 2.0**-kc).reshape(channel)


@settings(max_examples=examples(150), deadline=None)
@given(
    groups=st.integers(1, 4),
    per=st.integers(1, 4),
    length=st.integers(1, 40),
    in_bits=st.sampled_from([4, 8, 16]),
    out_bits=st.sampled_from([8, 16]),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**32 - 1),
)
def test_integer_algorithm_within_one_output_step(
    groups: int, per: int, length: int, in_bits: int, out_bits: int, mode: str, seed: int
) -> None:
    """Per-channel weight and bias broadcast per group: within one output step of torch.

    Mutant caught: group_norm_codes reshaping the weight along the last dim instead of the
    channels."""
    rng = np.random.default_rng(seed)
    c = groups * per
    q = rng.integers(-(2 ** (in_bits - 1)), 2 ** (in_bits - 1), (2, c, length))
    k = int(rng.integers(-2, in_bits))
    g, kg = rng.integers(-128, 128, c), int(rng.integers(4, 9))
    b, kc = rng.integers(-128, 128, c), int(rng.integers(2, 9))
    f = _oracle(q, k, groups, g, kg, b, kc, 1e-5)
    amax = float(np.abs(f).max())
    ko = min(int(np.floor(np.log2((2 ** (out_bits - 1) - 1) / amax))), 40) if amax > 0 else 0
    n = per * length
    plan = norm.plan_for(n, in_bits, k, 1e-5, g, kg, b, kc, ko, out_bits, mode)
    y = norm.group_norm_codes(q, groups, g, kg, b, kc, plan)
    lo, hi = -(2 ** (out_bits - 1)), 2 ** (out_bits - 1) - 1
    assert np.abs(y - np.clip(f * 2.0**ko, lo, hi)).max() <= 1.0


def _quantized(groups: int, per: int, spatial: int, length: int, bits: int, mode: str, seed: int):  # noqa: ANN202
    torch.manual_seed(seed)
    model = _Block(groups * per, groups, spatial, 1e-5).eval()
    x = torch.randn(*_shape(spatial, length))
    module = nanoir.from_torch(model, (x,))
    calib = [torch.randn(*_shape(spatial, length)).numpy() * 2 for _ in range(2)]
    nanoir.quantize(module, calib, act_bits=bits, rounding=mode)
    return module, x.numpy()


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.integers(1, 3),
    per=st.integers(1, 3),
    spatial=st.sampled_from([1, 2]),
    length=st.integers(2, 6),
    bits=st.sampled_from([4, 8, 16]),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 1000),
)
def test_nq_equals_nh_and_ne_round_trips(
    groups: int, per: int, spatial: int, length: int, bits: int, mode: str, seed: int
) -> None:
    """quantize, lower-to-hw: nh == nq bit for bit; both levels' `.ne` text reads back and
    writes the same bytes, and the read programs compute the same.

    Mutants caught: the hw GroupNorm row without nudge; nh.group_norm's kernel taking the
    groups as 1."""
    module, x = _quantized(groups, per, spatial, length, bits, mode, seed)
    hw = lower_to_hw(module.clone())
    assert "nh.group_norm" in {op.name for op in hw.walk()}
    (yq,) = nanoir.run(module, x)
    (yh,) = nanoir.run(hw, x)
    assert np.array_equal(yq, yh)
    for program, expected in ((module, yq), (hw, yh)):
        text = export_nanoengine(program)
        back = import_nanoengine(text)
        assert export_nanoengine(back) == text
        assert np.array_equal(nanoir.run(back, x)[0], expected)


def test_onnx_nf_matches_onnxruntime_and_reads_back() -> None:
    """LayerNormalization (opset 17) and GroupNormalization (opset 21): onnxruntime equals nf
    within 1e-5 relative; the file reads back to the same ops."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 1), nn.GroupNorm(2, 4), nn.LayerNorm(3)).eval()
    x = torch.randn(2, 2, 5, 3)
    module = nanoir.from_torch(model, (x,))
    (y,) = nanoir.run(module, x.numpy())
    data = export_onnx_bytes(module)
    session = ort.InferenceSession(data)
    (yo,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert np.abs(yo - y).max() <= 1e-5 * max(1.0, float(np.abs(y).max()))
    back = import_onnx_bytes(data)
    names = [op.name for op in back.walk() if op.name.endswith("_norm")]
    assert names == ["nf.group_norm", "nf.layer_norm"]
    assert np.abs(nanoir.run(back, x.numpy())[0] - y).max() <= 1e-6


def test_onnx_refuses_quantized_norms_naming_the_op() -> None:
    """An nq program's norm is its integer algorithm: the QDQ writer refuses it by name; the
    nanoengine flavour (opset 17) refuses GroupNorm even in float.

    Mutant caught: the writer's integer-algorithm refusal skipped."""
    model = nn.Sequential(nn.Conv1d(2, 4, 1), nn.GroupNorm(2, 4)).eval()
    x = torch.randn(2, 2, 5)
    module = nanoir.from_torch(model, (x,))
    with pytest.raises(OnnxExportError, match="nf.group_norm has no ONNX op at opset 17"):
        export_onnx_bytes(module, flavor="nanoengine")
    nanoir.quantize(module, [x.numpy()], rounding="half_even")
    with pytest.raises(OnnxExportError, match=r"nf\.group_norm between fake-quants"):
        export_onnx_bytes(module)


def test_streamed_equals_whole() -> None:
    """GroupNorm over (C/G, L) needs the whole streamed dim: the plan takes it at once and
    the streamed run equals the whole one.

    Mutant caught: Normalising streaming the normalised dims row by row too."""
    module, x = _quantized(2, 2, 2, 6, 8, "trunc", 0)
    hw = lower_to_hw(module)
    (whole,) = nanoir.run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=1)
    assert np.array_equal(whole, streamed)
