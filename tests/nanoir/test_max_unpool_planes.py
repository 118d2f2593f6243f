"""Max pool indices on planes wider than a code (issue 31 §2.8): the indices count positions in
the input plane, so a plane of more than 128 elements has indices that an int8 code cannot
hold. They stay ``i32`` at nh whatever the codes' width, run in NumPy and in onnxruntime, and
go through ``.ne``; torch's ``max_pool2d(return_indices=True)`` / ``max_unpool2d`` on the
dequantized input is the oracle, on planes up to 2**16 elements."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from nanoir.dialects import nh
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.nh import quantize_inputs

import nanoir

torch.set_num_threads(1)


def _program(c: int, h: int, w: int, k: int) -> str:
    x = f"tensor<?x{c}x{h}x{w}xf32>"
    p = f"tensor<?x{c}x{h // k}x{w // k}xf32>"
    window = f"kernel = array<i64: {k}, {k}>, strides = array<i64: {k}, {k}>"
    return f"""func.func @main(%x: {x}) -> ({x}, {p}) {{
  %p = nf.max_pool %x {{{window}}} : {x} -> {p}
  %i = nf.max_pool_indices %x {{{window}}} : {x} -> {p}
  %y = nf.max_unpool %p, %i : ({p}, {p}) -> {x}
  func.return %y, %i : {x}, {p}
}}"""


@pytest.mark.parametrize(
    ("h", "w", "bits"),
    [(12, 12, 8), (16, 16, 2), (30, 34, 8), (256, 256, 8), (128, 512, 4)],
    ids=["144", "256-2bit", "1020", "65536", "65536-wide-4bit"],
)
def test_indices_address_the_whole_plane(h: int, w: int, bits: int, tmp_path: pathlib.Path) -> None:
    """On planes of 144 to 2**16 elements the nh indices are torch's indices of the quantized
    input and the unpooled codes torch's unpooling of its pooled codes, in NumPy, in
    onnxruntime and after a hw ``.ne`` round trip; nq == nh.

    Kills: ``max_pool_indices`` returning its indices in the codes' dtype (int8: index 128
    wraps to -128, "index -128 is outside the 256-element plane")."""
    k = 2
    rng = np.random.default_rng(h * w + bits)
    x = rng.standard_normal((2, 2, h, w))
    module = nanoir.parse(_program(2, h, w, k))
    nanoir.quantize(module, [x.astype(np.float32)], act_bits=bits)
    hw = lower_to_hw(module.clone())
    (index_op,) = [op for op in hw.walk() if isinstance(op, nh.MaxPoolIndicesOp)]
    assert nh.width_of(index_op.result) == 32

    (codes,) = quantize_inputs(next(iter(hw.body.block.ops)), [x])  # type: ignore[arg-type]
    xt = torch.from_numpy(np.asarray(codes, dtype=np.float64))  # codes order like values
    pooled, want_i = torch.nn.functional.max_pool2d(xt, k, return_indices=True)
    want_y = torch.nn.functional.max_unpool2d(pooled, want_i, k, output_size=(h, w))
    assert int(want_i.max()) > 127  # the case the issue names: past an int8 code

    y, i = nanoir.run(hw, x, raw=True)
    assert np.array_equal(i, want_i.numpy()) and i.dtype == np.int32
    assert np.array_equal(y, want_y.numpy())
    y_ort, i_ort = nanoir.run(hw, x, raw=True, backend="onnxruntime")
    assert np.array_equal(i_ort, i) and np.array_equal(y_ort, y)
    y_nq, _ = nanoir.run(module, x, dtype=np.float64)
    assert nanoir.run(hw, x)[0].tobytes() == y_nq.tobytes()

    path = tmp_path / "hw.ne"
    nanoir.save(hw, str(path))
    back = nanoir.run(nanoir.load(str(path)), x, raw=True)
    assert np.array_equal(back[0], y) and np.array_equal(back[1], i)


def _nh_unpool(index_type: str) -> str:
    p = "tensor<?x1x8x8xi8, #nh.fixed<3, BCMD>>"
    i = f"tensor<?x1x8x8x{index_type}, #nh.fixed<0, BCMD>>"
    y = "tensor<?x1x16x16xi8, #nh.fixed<3, BCMD>>"
    return f"""func.func @main(%p: {p}, %i: {i}) -> {y} {{
  %y = nh.max_unpool %p, %i : ({p}, {i}) -> {y}
  func.return %y : {y}
}}"""


def test_indices_too_narrow_for_the_plane_are_refused() -> None:
    """A hand-written ``nh.max_unpool`` whose indices cannot address its plane (i8 on 256
    elements) is refused by the verifier, naming both; i16 indices address it and run, in
    NumPy and onnxruntime, as torch's ``max_unpool2d``.

    Kills: the verifier not checking the indices' width (the i8 program then verified)."""
    with pytest.raises(nanoir.Error, match=r"i8 indices cannot hold index 255 of the 256"):
        nanoir.parse(_nh_unpool("i8"))
    module = nanoir.parse(_nh_unpool("i16"))
    rng = np.random.default_rng(0)
    p = rng.integers(-128, 128, (2, 1, 8, 8)).astype(np.int8)
    i = rng.permutation(256)[:64].reshape(1, 1, 8, 8).repeat(2, 0).astype(np.int16)
    want = torch.nn.functional.max_unpool2d(
        torch.from_numpy(p.astype(np.float64)), torch.from_numpy(i.astype(np.int64)), 2
    )
    for backend in ("numpy", "onnxruntime"):
        (y,) = nanoir.run(module, p, i, raw=True, backend=backend)
        assert np.array_equal(y, want.numpy())
