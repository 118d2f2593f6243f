"""Hostile programs and command lines (round 7): an unpooling by indices the program is
given; binary ONNX asked for on a terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects import nq

import nanoir
from nanoir.cli.opt import main as nanoir_opt

_UNPOOL = """
func.func @main(%x: tensor<?x1x8x8xf32>, %i: tensor<?x1x8x8xf32>) -> tensor<?x1x32x32xf32> {
  %y = nf.max_unpool %x, %i : (tensor<?x1x8x8xf32>, tensor<?x1x8x8xf32>)
      -> tensor<?x1x32x32xf32>
  func.return %y : tensor<?x1x32x32xf32>
}"""


def test_unpooling_indices_given_to_the_program_get_no_fake_quant() -> None:
    """torch's ``F.max_unpool2d(x, indices)`` with the indices a program input: quantize gave
    them an 8-bit activation fake-quant (exp -3 for positions up to 1023: steps of 8), so the
    values landed on other positions, colliding (53 of 64 kept, a silently wrong result).
    Now the indices, like an embedding's, get none: nq scatters at the given positions (the
    oracle: NumPy's scatter of x, whose values are on the grid, written here); lower-to-hw
    still refuses such an unpool, naming it.

    Mutant seen to fail it (private copy): _unpool_indices returning False."""
    rng = np.random.default_rng(0)
    x = rng.integers(-60, 60, (2, 1, 8, 8)) / 16  # on a 4-fractional-bit grid, |x| < 4
    x[x == 0] = 1 / 16
    i = np.stack([rng.permutation(1024)[:64] for _ in range(2)]).reshape(2, 1, 8, 8)
    module = nanoir.parse(_UNPOOL)
    nanoir.quantize(module, [(x, i.astype(np.float64))], bias_correction=False)
    quantized = [op.input for op in module.walk() if isinstance(op, nq.FakeQuantOp)]
    assert [v.name_hint for v in quantized] == ["x"]
    want = np.zeros((2, 1, 1024))
    np.put_along_axis(want, i.reshape(2, 1, 64), x.reshape(2, 1, 64), axis=2)
    (got,) = nanoir.run(module, x, i.astype(np.float64))
    assert np.array_equal(got.reshape(2, 1, 1024), want)
    with pytest.raises(
        nanoir.Error, match=r"lower-to-hw: 'nf.max_unpool' \(%y\) unpools by indices that are not"
    ):
        nanoir.lower_to_hw(module)


_HW = """
func.func @main(%x: tensor<?x4xi8, #nh.fixed<0, BC>>) -> tensor<?x4xi32, #nh.fixed<0, BC>> {
  %w = nh.constant "w" dense<[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]>
      : tensor<4x4xi8> -> tensor<4x4xi2, #nh.fixed<0, CD>>
  %y = nh.linear %x, %w : (tensor<?x4xi8, #nh.fixed<0, BC>>, tensor<4x4xi2, #nh.fixed<0, CD>>)
      -> tensor<?x4xi32, #nh.fixed<0, BC>>
  func.return %y : tensor<?x4xi32, #nh.fixed<0, BC>>
}"""


@pytest.mark.parametrize("target", ["onnx-integer", "onnx"])
def test_binary_onnx_is_not_written_to_a_terminal(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nanoir-opt hw.mlir --emit=onnx-integer`` in a terminal wrote the protobuf's bytes
    to it (a screen of garbage, maybe terminal escapes). Now one error saying to give -o; a
    pipe (not a terminal) still gets the model, and so does -o (oracle: the file's first
    bytes are ONNX's ir_version field, 0x08).

    Mutant seen to fail it (private copy): the isatty check in cli/opt.py removed."""
    source = tmp_path / "hw.mlir"
    source.write_text(_HW)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert nanoir_opt([str(source), f"--emit={target}"]) == 1
    assert (
        "writes binary ONNX, which a terminal cannot show: give -o FILE" in capsys.readouterr().err
    )
    if target == "onnx-integer":
        out = tmp_path / "hw.onnx"
        assert nanoir_opt([str(source), f"--emit={target}", "-o", str(out)]) == 0
        assert out.read_bytes()[:1] == b"\x08"


_TWO_STREAMS = """
func.func @main(%a: tensor<?x2x?xf32>, %b: tensor<?x2x?xf32>) -> tensor<?x2x?xf32> {
  %y = nf.add %a, %b : (tensor<?x2x?xf32>, tensor<?x2x?xf32>) -> tensor<?x2x?xf32>
  func.return %y : tensor<?x2x?xf32>
}"""


def test_a_stream_input_that_never_came_is_an_error_at_flush() -> None:
    """Two streamed inputs (a recurrent op's sequence and its h0, or an add's operands), one
    pushed and the other never: flush() returned 0 rows of output, silently, where ``run``
    refuses a missing input. Now flush says which input got no rows and leaves the stream
    open, so its rows can still come; then the rows equal a + b (oracle: NumPy).

    Mutant seen to fail it (private copy): the missing-input check in Streamer.flush
    removed (0 rows returned)."""
    streamer = nanoir.Streamer(nanoir.parse(_TWO_STREAMS), 2)
    a = np.arange(12.0).reshape(1, 2, 6)
    b = np.full((1, 2, 6), 0.5)
    got = [streamer.push(a[:, :, t : t + 2], None)[0] for t in range(0, 6, 2)]
    with pytest.raises(nanoir.Error, match="flush: input 1 got no rows in this stream, input 0"):
        streamer.flush()
    got.append(streamer.push(None, b)[0])
    got.append(streamer.flush()[0])
    assert np.array_equal(np.concatenate(got, axis=2), a + b)
