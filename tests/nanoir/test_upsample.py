"""The Magik manual's ``Unpool2D`` modes: ``zero`` (a depthwise transposed conv by a one-hot
kernel, imported as ``nf.upsample_zero``: data movement) and ``bilinear`` (x2,
``align_corners=False``: ``nf.upsample_bilinear``, an integer sum with one rounding at nh).
nf equals torch; nq equals NumPy's own upsampling of the quantized input (then the output's
fake-quant, for bilinear); nh == nq bit for bit; streamed == whole along rows and columns;
``.ne`` rows at both levels and ONNX (vs onnxruntime) round trip."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh, nq
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.stream import stream
from torch import nn

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.magik_models import Unpool2d
from nanoir.testing.programs import examples

torch.set_num_threads(1)


def _net(mode: str) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), Unpool2d(4, mode), nn.Conv2d(4, 2, 1))


def test_a_transposed_conv_that_is_not_one_hot_stays_one() -> None:
    """A conv_transpose that is not one-hot stays a transposed conv (bilinear resizing of any
    size and ``align_corners``: tests/nanoir/test_resize.py)."""
    x = torch.randn(2, 3, 4, 4)
    weight = torch.ones(3, 1, 1, 1)
    weight[1] = 0.5  # not one-hot 1.0: a real transposed conv
    conv = nn.ConvTranspose2d(3, 3, 1, stride=2, output_padding=1, groups=3, bias=False)
    conv.weight.data = weight
    names = [op.name for op in from_torch(conv.eval(), (x,)).walk()]
    assert "nf.conv_transpose" in names and "nf.upsample_zero" not in names


def _program(mode: str, c: int, h: int, w: int, scale: tuple[int, int], offsets: list[int]) -> str:
    out = f"tensor<?x{c}x{h * scale[0]}x{w * scale[1]}xf32>"
    x = f"tensor<?x{c}x{h}x{w}xf32>"
    props = (
        f"{{offsets = array<i64: {offsets[0]}, {offsets[1]}>}}"
        if mode == "zero"
        else "{pads = array<i64: 1, 1, 1, 1>}"
    )
    return f"""func.func @main(%x: {x}) -> {out} {{
  %y = nf.upsample_{mode} %x {props} : {x} -> {out}
  func.return %y : {out}
}}"""


def _identity(c: int, h: int, w: int) -> str:
    x = f"tensor<?x{c}x{h}x{w}xf32>"
    return f"""func.func @main(%x: {x}) -> {x} {{
  %y = nf.reshape %x : {x} -> {x}
  func.return %y : {x}
}}"""


def _fake_quant(v: np.ndarray, fq: nq.FakeQuantOp) -> np.ndarray:
    """NumPy's own fake-quant of ``v`` at the op's exponent, bits, signedness and rounding."""
    k = np.array([int(e) for e in fq.exp.get_values()], dtype=np.int64)
    k = k.reshape((1, -1, 1, 1) if k.size > 1 else ())
    bits = fq.bits.value.data
    signed = fq.signed is None or bool(fq.signed.value.data)
    if bits == 1:
        return np.ldexp(np.where(v >= 0, 1.0, -1.0), k)
    rounding = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_even": np.rint,
        "half_up": lambda s: np.floor(s + 0.5),
    }[str(fq.rounding.data)]
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return np.ldexp(np.clip(rounding(np.ldexp(v, k)), lo, hi), -k)


@settings(max_examples=examples(12))
@given(
    st.sampled_from(("zero", "bilinear")),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from(((2, 2), (1, 2), (2, 1), (3, 2))),
    st.data(),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    st.booleans(),
    st.sampled_from(("never", "auto")),
    st.integers(1, 3),
)
def test_nq_equals_numpy_and_nh_and_streams(
    mode: str,
    c: int,
    h: int,
    w: int,
    scale: tuple[int, int],
    data: st.DataObject,
    bits: int,
    rounding: str,
    per_channel: bool,
    unsigned: str,
    step: int,
) -> None:
    """nq == NumPy's zero-stuffing of the quantized input / torch's float64 bilinear of it,
    fake-quantized in the test at the output's grid; nh == nq bit for bit; the nh and nq
    programs streamed along dim 2 and dim 3 == their whole runs. Mutants seen to fail it:
    ``LowerUpsampleBilinear`` with exponent growth ``n`` instead of ``2n``, and the
    ``BilinearRows`` window with ``pad_end=0``."""
    if mode == "bilinear":
        scale = (min(scale[0], 2), scale[1])
    offsets = [data.draw(st.integers(0, s - 1)) for s in scale]
    x = np.random.default_rng(h * 16 + w).standard_normal((2, c, h, w)) * 2
    options = dict(act_bits=bits, rounding=rounding, act_per_channel=per_channel)
    identity = nanoir.parse(_identity(c, h, w))
    nanoir.quantize(identity, [x.astype(np.float32)], unsigned=unsigned, **options)
    (xq,) = run(identity, x, dtype=np.float64)
    module = nanoir.parse(_program(mode, c, h, w, scale, offsets))
    nanoir.quantize(module, [x.astype(np.float32)], unsigned=unsigned, **options)
    (q,) = run(module, x, dtype=np.float64)
    if mode == "zero":
        want = np.zeros((2, c, h * scale[0], w * scale[1]))
        want[:, :, offsets[0] :: scale[0], offsets[1] :: scale[1]] = xq
    else:
        size = (h * scale[0], w * scale[1])
        up = F.interpolate(torch.from_numpy(xq), size=size, mode="bilinear", align_corners=False)
        (fq,) = [
            o
            for o in module.walk()
            if isinstance(o, nq.FakeQuantOp)
            and getattr(o.operands[0].owner, "name", "") == "nf.upsample_bilinear"
        ]
        want = _fake_quant(up.numpy(), fq)
    assert np.array_equal(q, want)
    hw = lower_to_hw(module.clone())
    kind = nh.UpsampleZeroOp if mode == "zero" else nh.UpsampleBilinearOp
    assert any(isinstance(o, kind) for o in hw.walk())
    (got,) = run(hw, x)
    assert got.tobytes() == q.tobytes()
    (codes,) = run(hw, x, raw=True)
    for dim in (2, 3):
        (streamed,) = stream(hw, [x], mem_dim=dim, step=step, raw=True)
        assert streamed.tobytes() == codes.tobytes()
        (streamed_q,) = stream(module, [x], mem_dim=dim, step=step, dtype=np.float64)
        assert streamed_q.tobytes() == q.tobytes()


@pytest.mark.parametrize("mode", ["zero", "bilinear"])
def test_unpool_modes_torch_ne_and_onnx(mode: str, tmp_path: pathlib.Path) -> None:
    """nf (float64) == torch (float64); the zero mode's one-hot conv_transpose is imported
    as nf.upsample_zero (no transposed conv left), bilinear as nf.upsample_bilinear. ``.ne``
    at the nq and hw levels prints back byte for byte and computes the same; the float
    program written to ONNX (``UpsampleZero`` as the one-hot ConvTranspose, bilinear as
    Resize linear/half_pixel) gives onnxruntime's results equal to nanoir's, up to float32
    rounding. Mutants seen to fail it: ``bilinear_sum``'s weights 1, 3 swapped for the odd
    rows; the nq row writing ``half_pixel`` as ``asymmetric``."""
    import onnxruntime as ort

    net = _net(mode).eval()
    x = torch.randn(2, 3, 5, 6)
    module = from_torch(net, (x,))
    names = [op.name for op in module.walk()]
    assert f"nf.upsample_{mode}" in names and "nf.conv_transpose" not in names
    (y,) = run(module, x.double().numpy(), dtype=np.float64)
    want = net.double()(x.double()).detach().numpy()
    net.float()
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    path = str(tmp_path / "f.onnx")
    nanoir.save(module, path)
    session = ort.InferenceSession(path)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    (want,) = run(module, x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    nanoir.quantize(module, [x.numpy()], weight_bits=4)
    hw = lower_to_hw(module.clone())
    for level, program in (("nq", module), ("hw", hw)):
        first, second = tmp_path / f"{level}.ne", tmp_path / f"{level}2.ne"
        nanoir.save(program, str(first))
        back = nanoir.load(str(first))
        nanoir.save(back, str(second))
        assert first.read_bytes() == second.read_bytes()
        (a,) = run(program, x.numpy())
        (b,) = run(back, x.numpy())
        assert a.tobytes() == b.tobytes()
