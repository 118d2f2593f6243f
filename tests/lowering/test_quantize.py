"""The quantize pass: where fake-quants go, rules, calibration, bias caps and errors."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.quantize import QuantizeError, QuantRule, quantize
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import ModuleOp

import nanoir

# The constant adds read the relu, not the conv: after a conv, quantize's fold-bn would fold
# them into its bias, and these tests are about constant operands.
NET = """\
func.func @main(%x: tensor<?x2x6x6xf32>) -> tensor<?x3xf32> {
  %w = nf.constant "conv.weight" dense<[[[[0.5, -0.25], [0.125, 1.0]], [[0.75, 0.5], [-1.5, 0.25]]], [[[2.0, -0.5], [0.25, 0.5]], [[-0.25, 0.125], [0.5, 0.75]]]]> : tensor<2x2x2x2xf32>
  %b = nf.constant "conv.bias" dense<[0.3, -0.7]> : tensor<2xf32>
  %c = nf.conv %x, %w, %b : (tensor<?x2x6x6xf32>, tensor<2x2x2x2xf32>, tensor<2xf32>) -> tensor<?x2x5x5xf32>
  %p = nf.constant "offset" dense<[1.9]> : tensor<1xf32>
  %two = nf.constant dense<2.0> : tensor<f32>
  %r = nf.relu %c : tensor<?x2x5x5xf32>
  %a = nf.add %r, %p : (tensor<?x2x5x5xf32>, tensor<1xf32>) -> tensor<?x2x5x5xf32>
  %a2 = nf.add %a, %two : (tensor<?x2x5x5xf32>, tensor<f32>) -> tensor<?x2x5x5xf32>
  %f = nf.reshape %a2 : tensor<?x2x5x5xf32> -> tensor<?x50xf32>
  %fw = nf.constant "fc.weight" dense<0.02> : tensor<3x50xf32>
  %y = nf.linear %f, %fw : (tensor<?x50xf32>, tensor<3x50xf32>) -> tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}
"""


def net() -> ModuleOp:
    return nanoir.parse(NET)


def batches(n: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((4, 2, 6, 6)) * (i + 1) for i in range(n)]


def fake_quants(module: ModuleOp) -> dict[str, FakeQuantOp]:
    out = {}
    for op in module.walk():
        if isinstance(op, FakeQuantOp):
            src = op.input
            name = (
                src.op.sym_name.data
                if hasattr(src, "op")
                and isinstance(src.op, nf.ConstantOp)
                and src.op.sym_name is not None
                else src.name_hint
            )
            out[name] = op
    return out


def exps(op: FakeQuantOp) -> np.ndarray:
    return dense_to_numpy(op.exp).astype(np.int64)


def test_placement() -> None:
    m = net()
    quantize(m, batches(), bias_correction=False)  # (it would add fc.bias)
    m.verify()
    fq = fake_quants(m)
    # Inputs, weights, bias, the named constant and every computing op; not the reshape and
    # not the Python scalar 2.0.
    assert set(fq) == {
        "x",
        "conv.weight",
        "conv.bias",
        "c",
        "offset",
        "a",
        "a2",
        "r",
        "fc.weight",
        "y",
    }
    assert fq["conv.weight"].exp.get_type().get_shape() == (2, 1, 1, 1)
    assert fq["conv.bias"].exp.get_type().get_shape() == (2,)
    assert fq["fc.weight"].exp.get_type().get_shape() == (3, 1)
    assert fq["x"].exp.get_type().get_shape() == (1,)
    for op in m.walk():
        if isinstance(op, nf.ReshapeOp):
            assert not any(isinstance(u.operation, FakeQuantOp) for u in op.result.uses)


def test_quantize_is_idempotent() -> None:
    m = net()
    quantize(m, batches())
    before = str(m)
    quantize(m, batches())
    assert str(m) == before


def test_weight_exponents_follow_the_absmax_rule() -> None:
    m = net()
    quantize(m, batches(), weight_bits=4)
    fq = fake_quants(m)
    # Channel 0 absmax 1.5: 8/1.5 = 5.33 -> k = 2; channel 1 absmax 2.0: 8/2 = 4 -> k = 2.
    assert exps(fq["conv.weight"]).ravel().tolist() == [2, 2]
    # fc weights 0.02 everywhere: 8 / 0.02 = 400 -> k = floor(log2 400) = 8.
    assert exps(fq["fc.weight"]).ravel().tolist() == [8, 8, 8]


def test_activation_exponents_come_from_calibration() -> None:
    data = batches()
    m = net()
    quantize(m, data)
    fq = fake_quants(m)
    absmax = max(np.abs(b).max() for b in data)
    assert exps(fq["x"]).tolist() == quant.exp_from_absmax([absmax], 8).tolist()


def test_per_channel_activations_and_mse() -> None:
    data = batches()
    m = net()
    quantize(m, data, act_per_channel=True, calibrator="mse")
    fq = fake_quants(m)
    assert fq["x"].exp.get_type().get_shape() == (2, 1, 1)
    assert fq["y"].exp.get_type().get_shape() == (3,)
    # MSE-optimal exponents never do worse than the absmax rule on the calibration data.
    x = np.concatenate(data)
    k_mse = exps(fq["x"]).reshape(1, 2, 1, 1)
    k_abs = quant.exp_from_absmax(quant.channel_absmax(x, 1), 8)
    err = lambda k: ((quant.fake_quant(x, 8, k) - x) ** 2).sum(axis=(0, 2, 3))  # noqa: E731
    assert (err(k_mse) <= err(k_abs)).all()


def test_rules_first_match_wins_and_skip() -> None:
    m = net()
    quantize(m, batches(), rules=("weight@fc=1/pt", "conv\\.bias=skip", "fc=2", "^a=4"))
    fq = fake_quants(m)
    assert fq["fc.weight"].bits.value.data == 1
    assert fq["fc.weight"].exp.get_type().get_shape() == (1,)
    assert "conv.bias" not in fq
    assert fq["a"].bits.value.data == 4 and fq["a2"].bits.value.data == 4
    assert fq["y"].bits.value.data == 8


def test_bias_exponent_is_capped_at_the_accumulator() -> None:
    m = net()
    # Biases quantized very finely on their own (16 bits) must not be finer than x + w.
    quantize(m, batches(), bias_bits=16)
    fq = fake_quants(m)
    k_acc = exps(fq["x"]).ravel()[0] + exps(fq["conv.weight"]).ravel()
    assert (exps(fq["conv.bias"]) <= k_acc).all()
    own = quant.exp_from_absmax(np.array([0.3, 0.7]), 16)
    assert (exps(fq["conv.bias"]) == np.minimum(own, k_acc)).all()


def test_imported_exponents() -> None:
    m = net()
    names = {"x": 3, "c": 2, "a": 2, "a2": 2, "r": 2, "y": [1, 2, 3], "offset": 6}
    quantize(m, None, exponents=names, act_per_channel=False)
    fq = fake_quants(m)
    assert exps(fq["x"]).tolist() == [3]
    assert exps(fq["y"]).tolist() == [1, 2, 3]
    assert exps(fq["offset"]).tolist() == [6]
    with pytest.raises(QuantizeError, match="2 exponents given for y, which has 3 channels"):
        quantize(net(), None, exponents={**names, "y": [1, 2]})


def test_errors() -> None:
    with pytest.raises(QuantizeError, match="need calibration data"):
        quantize(net(), None)
    with pytest.raises(QuantizeError, match="act_bits = 3"):
        quantize(net(), batches(), act_bits=3)
    with pytest.raises(QuantizeError, match="unknown tensors: nope"):
        quantize(net(), batches(), exponents={"nope": 1})
    with pytest.raises(QuantizeError, match="must look like REGEX"):
        QuantRule.parse("conv")
    with pytest.raises(QuantizeError, match="not a regex"):
        QuantRule.parse("conv(=4")
    with pytest.raises(QuantizeError, match="calibration data is empty"):
        quantize(net(), [])


def test_quantized_program_output_is_on_its_grid() -> None:
    m = net()
    quantize(m, batches())
    k = exps(fake_quants(m)["y"]).ravel()[0]
    (y,) = nanoir.run(m, batches(1, seed=9)[0])
    codes = y * 2.0**k
    assert np.array_equal(codes, np.trunc(codes))
    assert codes.min() >= -128 and codes.max() <= 127


def test_pass_from_the_command_line(tmp_path) -> None:  # noqa: ANN001
    import json
    import subprocess
    import sys
    from pathlib import Path

    src = tmp_path / "net.mlir"
    src.write_text(NET)
    cal = tmp_path / "cal.npy"
    np.save(cal, np.concatenate(batches()))
    exe = str(Path(sys.executable).parent / "nanoir-opt")
    spec = f'quantize{{calibration="{cal}" batch_size=5 rules="fc=4/pt" act_bits=4 bias_correction=false}}'
    proc = subprocess.run([exe, str(src), "-p", spec], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("nq.fake_quant") == 10
    assert "bits = 4 : i64" in proc.stdout
    qat = tmp_path / "qat.json"
    qat.write_text(json.dumps({"x": 3, "c": 2, "a": 2, "a2": 2, "r": 2, "y": 1, "offset": 6}))
    proc = subprocess.run(
        [exe, str(src), "-p", f'quantize{{exponents="{qat}"}}'], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "exp = dense<3> : tensor<1xi8>" in proc.stdout
    bad = subprocess.run([exe, str(src), "-p", "quantize"], capture_output=True, text=True)
    assert bad.returncode == 1 and "need calibration data" in bad.stderr
    assert "Traceback" not in bad.stderr


def _exhaustive(x: np.ndarray, bits: int, axis: int | None, mode: str) -> np.ndarray:
    """Per channel, the exponent in -40..40 with the least squared error (lowest on ties)."""
    axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    errs = np.stack(
        [np.sum((quant.fake_quant(x, bits, k, mode) - x) ** 2, axis=axes) for k in range(-40, 41)]
    )
    return np.argmin(errs, axis=0).reshape(-1) - 40


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["trunc", "half_even"])
def test_mse_weights_find_the_least_error_exponent(bits: int, mode: str) -> None:
    from nanoir.lowering.quantize import tensor_exps

    rng = np.random.default_rng(bits)
    # Wide, heavy-tailed channels: max |w| is many octaves above mean |w| (the 1-bit optimum),
    # and one channel is nearly all zeros.
    w = rng.standard_t(1.5, size=(6, 512)) * np.array([[1e-3], [0.05], [1], [30], [0.2], [1]])
    w[5, 1:] = 0.0
    k = tensor_exps(w, bits, 0, "mse", quant.RoundingMode(mode)).reshape(-1)
    best = _exhaustive(w, bits, 0, mode)

    def err(e: np.ndarray) -> np.ndarray:
        return np.sum((quant.fake_quant(w, bits, e.reshape(-1, 1), mode) - w) ** 2, axis=1)

    assert np.allclose(err(k), err(best), rtol=0, atol=0), (k, best)


def test_mse_one_bit_activations_start_at_mean_abs() -> None:
    # One outlier puts max |x| 8 octaves above mean |x|: the least-error 1-bit magnitude is
    # near mean |x| (2**-5), outside a +-3 window around the absmax rule's exponent (3).
    m = net()
    data = [np.full((4, 2, 6, 6), 0.01) for _ in range(2)]
    data[0][0, 0, 0, 0] = 8.0
    quantize(m, data, calibrator="mse", rules=("act@^x$=1",))
    k = int(exps(fake_quants(m)["x"])[0])
    x = np.concatenate(data)
    assert k == int(_exhaustive(x, 1, None, "trunc")[0]) == -5


def test_per_tensor_bias_under_per_channel_caps() -> None:
    # A per-tensor bias of a layer whose accumulator exponents differ per channel takes the
    # smallest cap (this crashed before).
    m = net()
    quantize(m, batches(), weight_per_channel=False, rules=("weight@conv=8/pc",))
    fq = fake_quants(m)
    cap = int(exps(fq["x"])[0]) + exps(fq["conv.weight"]).reshape(-1)
    assert exps(fq["conv.bias"]).size == 1 and int(exps(fq["conv.bias"])[0]) <= cap.min()
