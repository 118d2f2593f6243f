"""The PTQ benchmark (``benchmarks/bench_ptq.py``) kept from rotting, in a few seconds.

Its machinery runs end to end on the smallest network (the 2-D KWS net): onnxruntime's
quantize_static and nanoir both give finite, useful output SQNRs, and the nanoir program it
scores lowers to an nh program with the same outputs. The parts it builds on are checked
against independent oracles: the SQNR formula on a known noise, the images' statistics
(ImageNet-normalised, smooth, seeded, disjoint), and the timm architectures' parameter counts
against the counts timm publishes (``results/results-imagenet.csv``), which a wrong width,
expansion, kernel or squeeze-excitation size would change.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import torch  # noqa: E402
from nanoir.grammar.onnx.integer import u8s8_is_exact  # noqa: E402

import nanoir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_ptq  # noqa: E402
from ptq_images import benchmark_images  # noqa: E402
from ptq_models import PTQ_MODELS, input_shape, make_ptq_model  # noqa: E402

TIMM_PARAMS_M = {
    "MobileNetV2": 3.50,
    "MobileNetV3-Large": 5.48,
    "EfficientNet-Lite0": 4.65,
    "MnasNet": 4.38,
    "LCNet": 2.95,
    "ResNet-18": 11.69,
    "RegNetX-002": 2.68,
    "VoVNet-19": 6.54,
    "RepVGG-A0": 9.11,
}
"""param_count (millions) of mobilenetv2_100, mobilenetv3_large_100, efficientnet_lite0,
mnasnet_100, lcnet_100, resnet18, regnetx_002, ese_vovnet19b_dw and repvgg_a0 in timm's
results/results-imagenet.csv."""


def test_sqnr_of_a_known_noise() -> None:
    """10% relative noise is 20 dB; exact is inf (mutant: the ratio inverted)."""
    ref = np.random.default_rng(0).standard_normal(1000)
    assert bench_ptq.sqnr_db(ref, ref * 1.1) == pytest.approx(20.0)
    assert bench_ptq.sqnr_db(ref, ref) == math.inf


def test_images_are_normalised_smooth_seeded_and_disjoint() -> None:
    """Mutants seen to fail it: the normalisation dropped; white noise in place of the 1/f
    noise (neighbour correlation 0.63)."""
    calibration, evaluation = benchmark_images((3, 32, 32))
    assert calibration.shape == (32, 3, 32, 32) and evaluation.shape == (64, 3, 32, 32)
    assert calibration.dtype == np.float32
    again, _ = benchmark_images((3, 32, 32))
    assert np.array_equal(calibration, again)
    assert not np.isin(evaluation[:, 0, 0, 0], calibration[:, 0, 0, 0]).any()
    # Pixel values in [0, 1] normalised with ImageNet's mean and std.
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    pixels = evaluation * std[:, None, None] + mean[:, None, None]
    assert pixels.min() >= 0 and pixels.max() <= 1 and pixels.std() > 0.1
    # Natural-looking: neighbouring pixels are strongly correlated (white noise: 0).
    a, b = evaluation[..., :-1].ravel(), evaluation[..., 1:].ravel()
    assert np.corrcoef(a, b)[0, 1] > 0.8


@pytest.mark.parametrize("name", sorted(TIMM_PARAMS_M))
def test_timm_architectures_have_timms_parameter_counts(name: str) -> None:
    """Mutant seen to fail it: MobileNetV3's squeeze-excitation reduced from the block's
    input channels instead of the expanded ones."""
    model = PTQ_MODELS[name].build()
    count = sum(p.numel() for p in model.parameters()) / 1e6
    assert round(count, 2) == TIMM_PARAMS_M[name]


def test_every_network_runs_at_the_benchmark_size() -> None:
    """Deep nets keep a spatial size >= 1 at 64x64 (torch refuses otherwise)."""
    for name in PTQ_MODELS:
        model = make_ptq_model(name)
        with torch.no_grad():
            y = model(torch.zeros(2, *input_shape(name, 64)))
        assert torch.isfinite(y).all(), name


def test_benchmark_runs_on_the_kws_net() -> None:
    """Both tools give useful SQNRs (KWS-2D at 8 bits: ORT MinMax 37.6 dB, nanoir absmax/trunc
    15.3, mse/half_even 34.7 when written), half_even well above trunc, nq == nh.

    Mutants seen to fail it (in a private copy): every configuration run with quantize's
    defaults (config options dropped); ORT scoring its float model instead of the QDQ one.
    """
    lines: list[str] = []
    (result,) = bench_ptq.main(["--models", "KWS-2D", "--nh"], emit=lines.append)
    text = "\n".join(lines)
    assert "| KWS-2D |" in text and "median gap" in text
    # 8-bit codes cannot come near float32's ~130 dB: a finite SQNR below 60 dB means the
    # quantized model ran (at 8 bits the ideal uniform quantizer gives about 50 dB).
    assert 25 < result.ort < 60 and 0 < result.ort_symmetric < 60
    if u8s8_is_exact():  # (without VNNI, onnxruntime's int8 x int8 kernels saturate pair sums:
        # 8.7 dB on an AVX2-only AMD EPYC, the same run's uint8 activations 37.5 dB)
        assert 25 < result.ort_symmetric
    for config in ("absmax/trunc", "mse/half_even"):
        score = result.nanoir[config]
        assert score is not None and 8 < score < 60
    ran = [config for config, score in result.nanoir.items() if score is not None]
    assert all(8 < result.nanoir[c] < 60 and result.nh[c] == "yes" for c in ran)  # type: ignore[operator]
    assert result.nanoir["mse/half_even"] > result.nanoir["absmax/trunc"] + 6  # type: ignore[operator]


def test_scored_program_lowers_to_the_same_outputs() -> None:
    """The program the benchmark scores (folded, then quantized) equals its nh program bit
    for bit, checked here without the benchmark's own comparison."""
    calibration, evaluation = bench_ptq.model_images("KWS-2D", 64)
    model = make_ptq_model("KWS-2D")
    folded = nanoir.compile_model(model, (torch.from_numpy(calibration[:2]),), stop="folded")
    nanoir.quantize(folded, bench_ptq.batches(calibration))
    hw = nanoir.lower_to_hw(folded.clone())
    (want,) = nanoir.run(folded, evaluation[:8])
    (got,) = nanoir.run(hw, evaluation[:8])
    assert np.array_equal(np.asarray(want), np.asarray(got))
    scored = bench_ptq.nanoir_outputs(folded, evaluation[:8])
    assert np.array_equal(scored, np.asarray(want))
