"""quantize's join and accumulator rules at two edges no other test reached (issue 31, section
5): 1-bit codes shifted onto a much finer grid, and a per-tensor bias added to accumulators of
different exponents. Each program is quantized by calibration, must lower, and its nh run must
equal its nq run in float64 bit for bit; the exponents quantize chose are checked against the
rules written out here:

- an add or concat operand shifted ``s`` places onto the finest operand's grid takes ``b + s``
  bits, and a 1-bit one (codes ±1, so ±2**s) ``s + 2``; each must fit 31 bits (i32 with one bit
  of growth for the sum), so the finer operand's exponent is made coarser until it does;
- a bias's exponent is capped at its accumulator's (input exponent + weight exponent, per output
  channel or gate row), and a per-tensor bias at the smallest of them.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects.dense import dense_to_numpy
from nanoir.lowering.quantize import quantize

import nanoir


def fmt(a: np.ndarray) -> str:
    """A float array as an MLIR dense literal (dyadic values print exactly)."""
    return np.array2string(
        np.asarray(a, np.float64), separator=", ", threshold=10**6, floatmode="unique"
    ).replace("\n", "")


def exps(module) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Each fake-quant's exponents, by the name of the value it quantizes."""
    return {
        op.input.name_hint: np.asarray(dense_to_numpy(op.exp), np.int64).reshape(-1)
        for op in module.walk()
        if op.name == "nq.fake_quant"
    }


def lowers_exactly(module, *inputs: np.ndarray) -> None:  # noqa: ANN001
    hw = nanoir.lower_to_hw(module.clone())
    want = nanoir.run(module, *inputs, dtype=np.float64)
    for got, w in zip(nanoir.run(hw, *inputs), want, strict=True):
        np.testing.assert_array_equal(got, w)


def test_one_bit_operand_shifted_onto_a_fine_grid_takes_two_more_bits():
    """``x`` is 1-bit (magnitude 2**4: code exponent -4), ``y`` 8-bit with values near 2**-30
    (calibrated exponent 37): the add aligns ``x`` onto ``y``'s grid. A shift of ``s`` places
    makes ±2**s, ``s + 2`` bits, so ``s <= 29`` and ``y`` is capped at exponent -4 + 29 = 25
    (an 8-bit ``y`` shifted would take ``8 + s``: no cap below 37).

    kills: a 1-bit operand counted as 1 bit wide in the join rule (``_width``: the cap became
    26, a shift of 30 places, 32 bits)."""
    text = """func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %s = nf.add %x, %y : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}"""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 4)) * 8).astype(np.float32)
    y = (rng.standard_normal((8, 4)) * 2.0**-30).astype(np.float32)
    module = nanoir.parse(text)
    quantize(module, [(x, y)], rules=["act@^x$=1"], calibrator="absmax")
    got = exps(module)
    assert got["x"].tolist() == [4] and got["y"].tolist() == [25]
    lowers_exactly(module, x, y)


def test_one_bit_concat_part_bounds_the_accumulator_with_two_more_bits():
    """A linear layer reads ``concat(x, y)``: ``x`` 1-bit (code exponent -4), ``y`` 8-bit and
    ever finer (2**-8 .. 2**-15). The concat aligns ``x`` onto ``y``'s grid (``s + 2`` bits),
    and the accumulator's bound uses those bits; each program lowers (lower-to-hw counts the
    same bits) and nq == nh.

    kills: the accumulator rule counting a shifted 1-bit code as ``s + 1`` bits
    (``aligned_bits``): its bound was half lower-to-hw's, which refused the program
    (``|acc| = 2150105088 > 2**31 - 1``)."""
    rng = np.random.default_rng(1)
    w = np.round(rng.uniform(-1, 1, (3, 8)) * 64) / 64
    text = f"""func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x3xf32> {{
  %c = nf.concat %x, %y {{axis = 1 : i64}} : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x8xf32>
  %w = nf.constant "fc.weight" dense<{fmt(w)}> : tensor<3x8xf32>
  %l = nf.linear %c, %w : (tensor<?x8xf32>, tensor<3x8xf32>) -> tensor<?x3xf32>
  func.return %l : tensor<?x3xf32>
}}"""
    for scale in range(8, 16):
        module = nanoir.parse(text)
        x = (rng.standard_normal((8, 4)) * 8).astype(np.float32)
        y = (rng.standard_normal((8, 4)) * 2.0**-scale).astype(np.float32)
        quantize(module, [(x, y)], rules=["act@^x$=1"], calibrator="absmax")
        lowers_exactly(module, x, y)


def test_per_tensor_bias_takes_the_smallest_accumulator_exponent():
    """Per-channel weights at exponents 7, 11 and 15 on an input at 5: accumulators at 12, 16,
    20. A per-tensor bias (``bias@.*=8/pt``) whose own exponent is finer (values near 1e-3)
    is capped at 12, the smallest, so every channel adds it by a left shift.

    kills: the per-tensor cap taking the largest accumulator exponent (``acc.max()``) in
    both places that apply it, the join rules' accumulator rule and quantize's final cap
    (``_capped_bias_exps``); either one alone is covered by the other, which no test can
    see."""
    rng = np.random.default_rng(2)
    w = np.round(rng.uniform(-1, 1, (3, 4)) * 64) / 64 * np.array([[1.0], [1 / 16], [1 / 256]])
    b = np.array([1e-3, -2e-3, 5e-4])
    text = f"""func.func @main(%x: tensor<?x4xf32>) -> tensor<?x3xf32> {{
  %w = nf.constant "fc.weight" dense<{fmt(w)}> : tensor<3x4xf32>
  %b = nf.constant "fc.bias" dense<{fmt(b)}> : tensor<3xf32>
  %l = nf.linear %x, %w, %b : (tensor<?x4xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  func.return %l : tensor<?x3xf32>
}}"""
    module = nanoir.parse(text)
    x = rng.uniform(-3.9, 3.9, (8, 4)).astype(np.float32)
    quantize(module, [x], rules=["bias@.*=8/pt"], calibrator="absmax", bias_correction=False)
    got = exps(module)
    assert got["x"].tolist() == [5] and got["w"].tolist() == [7, 11, 15]
    assert got["b"].tolist() == [12]
    lowers_exactly(module, x)


def test_per_tensor_recurrent_bias_takes_the_smallest_product_exponent():
    """An LSTM whose weight rows have exponents 7..15: a per-tensor bias is capped at the
    smallest exponent of the product it is added to (``x W_ih``: input + weight, ``h W_hh``:
    hidden + weight).

    kills: the per-tensor bias cap taking the largest of the per-row caps (``cap.max()``, for
    a recurrent op's bias: nothing else caps it)."""
    rng = np.random.default_rng(3)
    h, rows = 2, 8
    scale = np.array([1, 1 / 16, 1 / 256, 1, 1 / 16, 1 / 256, 1, 1 / 4]).reshape(-1, 1)
    wi = np.round(rng.uniform(-1, 1, (rows, 3)) * 64) / 64 * scale
    wh = np.round(rng.uniform(-1, 1, (rows, h)) * 64) / 64 * scale
    bi = np.round(rng.uniform(-1, 1, rows) * 1024) / 1024 * 1e-2
    bh = np.round(rng.uniform(-1, 1, rows) * 1024) / 1024 * 1e-2
    t, st = "tensor<?x5x3xf32>", f"tensor<1x?x{h}xf32>"
    wt = f"tensor<{rows}x3xf32>, tensor<{rows}x{h}xf32>, tensor<{rows}xf32>, tensor<{rows}xf32>"
    text = f"""func.func @main(%x: {t}) -> tensor<?x5x{h}xf32> {{
  %wi = nf.constant "r.weight_ih_l0" dense<{fmt(wi)}> : tensor<{rows}x3xf32>
  %wh = nf.constant "r.weight_hh_l0" dense<{fmt(wh)}> : tensor<{rows}x{h}xf32>
  %bi = nf.constant "r.bias_ih_l0" dense<{fmt(bi)}> : tensor<{rows}xf32>
  %bh = nf.constant "r.bias_hh_l0" dense<{fmt(bh)}> : tensor<{rows}xf32>
  %y, %hn, %cn = nf.recurrent %x : {t} weights(%wi, %wh, %bi, %bh : {wt}) {{mode = "lstm", hidden_size = {h} : i64, num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true}} -> tensor<?x5x{h}xf32>, {st}, {st}
  func.return %y : tensor<?x5x{h}xf32>
}}"""
    module = nanoir.parse(text)
    x = rng.uniform(-3.9, 3.9, (4, 5, 3)).astype(np.float32)
    quantize(module, [x], rules=["bias@.*=8/pt"], calibrator="absmax", bias_correction=False)
    got = exps(module)
    op = next(o for o in module.walk() if o.name == "nf.recurrent")
    hidden = int(np.asarray(op.hidden.get_values())[0])  # type: ignore[union-attr]
    own = {k: int(np.floor(np.log2(128 / np.abs(v).max()))) for k, v in (("bi", bi), ("bh", bh))}
    assert got["bi"].tolist() == [min(own["bi"], int((got["x"][0] + got["wi"]).min()))]
    assert got["bh"].tolist() == [min(own["bh"], int((hidden + got["wh"]).min()))]
    assert got["bi"][0] < own["bi"]  # the cap applies here
    lowers_exactly(module, x)


def _zero_weight_conv_after_spread_channels(groups: int) -> str:
    """``x`` (2 channels) -> 1x1 conv scaling channel 1 by 2**-20 -> relu -> a 1x1 conv with
    all-zero weights (``groups`` 1: it sums both channels; 2: depthwise, no sum)."""
    w1 = np.array([1.0, 2.0**-20]).reshape(2, 1, 1, 1)
    w2 = np.zeros((2, 2 // groups, 1, 1))
    return f"""func.func @main(%x: tensor<?x2x3x3xf32>) -> tensor<?x2x3x3xf32> {{
  %w1 = nf.constant "c1.weight" dense<{fmt(w1)}> : tensor<2x1x1x1xf32>
  %c1 = nf.conv %x, %w1 {{groups = 2 : i64}} : (tensor<?x2x3x3xf32>, tensor<2x1x1x1xf32>) -> tensor<?x2x3x3xf32>
  %r = nf.relu %c1 : tensor<?x2x3x3xf32>
  %w2 = nf.constant "c2.weight" dense<{fmt(w2)}> : tensor<2x{2 // groups}x1x1xf32>
  %c2 = nf.conv %r, %w2 {{groups = {groups} : i64}} : (tensor<?x2x3x3xf32>, tensor<2x{2 // groups}x1x1xf32>) -> tensor<?x2x3x3xf32>
  func.return %c2 : tensor<?x2x3x3xf32>
}}"""


def test_conv_input_channels_aligned_within_i32_even_with_zero_weights():
    """A conv sums its input channels aligned onto the finest one: ``b``-bit codes shifted ``s``
    places take ``b + s`` bits, at most 32 (i32). Here 16-bit per-channel codes (signed: 16
    bits) of channels ``2**20`` apart in range: calibrated exponents ``k0`` and ``k1 = k0 + 20``
    (absmax of each channel of ``relu(x)`` and ``relu(x) * 2**-20``, computed here), so the
    finer channel is capped at ``k0 + 32 - 16``. The conv's weights are all 0, so no
    accumulator bound asks for it; the cap holds anyway and the program lowers, nq == nh.
    A depthwise conv (groups 2) aligns nothing and keeps both exponents.

    kills: the accumulator rule alone bounding the input alignment (lower-to-hw refused:
    "aligning operands needs 36-bit codes"), found by ``test_calibrated_programs_lower_exactly``
    (act_bits 16, per-channel activations, a zero-weight conv after a lone BN)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 2, 3, 3)).astype(np.float32)
    absmax = np.maximum(x, 0).max(axis=(0, 2, 3)) * np.array([1.0, 2.0**-20])
    k = np.floor(np.log2((2**15 - 1) / absmax)).astype(np.int64)  # 16-bit signed, truncation
    assert k[1] - k[0] == 20
    for groups, want in ((1, [k[0], k[0] + 16]), (2, k.tolist())):
        module = nanoir.parse(_zero_weight_conv_after_spread_channels(groups))
        quantize(
            module,
            [x],
            act_bits=16,
            act_per_channel=True,
            unsigned="never",
            calibrator="absmax",
            bias_correction=False,
            progress=False,
        )
        assert exps(module)["r"].tolist() == list(want), groups
        lowers_exactly(module, x)
