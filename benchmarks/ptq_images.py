"""Smooth, natural-looking random images for the PTQ benchmark (``bench_ptq.py``).

Post-training quantization is calibrated on data, so white noise would mislead it: real images
are dominated by low spatial frequencies, their channels are correlated, and their values sit
in a bounded range. Each image here is a colour field (a random per-channel tint) plus a sum of
a few low-frequency random waves plus blurred noise (a 1/f-like spectrum), squashed into
[0, 1] like pixel intensities and normalised with ImageNet's per-channel mean and standard
deviation, as a torchvision/timm preprocessing pipeline would. Seeded: the same seed gives the
same images on every machine (NumPy's PCG64).

    calibration, evaluation = benchmark_images((3, 64, 64))  # 32 and 64 float32 images
"""

from __future__ import annotations

import numpy as np

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "benchmark_images", "smooth_images"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _blurred_noise(rng: np.random.Generator, shape: tuple[int, int], slope: float) -> np.ndarray:
    """Noise with most of its power at low frequencies: white noise shaped in the Fourier
    domain by a ``1/f**slope`` amplitude (natural images are near ``slope = 1``; steeper is
    smoother), so the result has structure at every scale."""
    h, w = shape
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fy * fy + fx * fx)
    amplitude = np.maximum(f, 1.0 / max(h, w)) ** -slope
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) * amplitude
    spectrum[0, 0] = 0.0
    field = np.fft.irfft2(spectrum, s=(h, w))
    return field / (field.std() + 1e-12)


def _image(rng: np.random.Generator, channels: int, h: int, w: int) -> np.ndarray:
    """One image in [0, 1], ``[channels, h, w]``."""
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    luminance = 0.6 * _blurred_noise(rng, (h, w), 1.3)
    for _ in range(4):  # a few low-frequency waves: gradients, stripes, blobs
        fy, fx = rng.uniform(-3, 3, size=2)
        luminance += rng.uniform(0.2, 0.6) * np.sin(
            2 * np.pi * (fy * yy + fx * xx) + rng.uniform(0, 2 * np.pi)
        )
    tint = rng.uniform(0.3, 0.7, size=channels)
    image = np.empty((channels, h, w))
    for c in range(channels):  # channels share the structure, each with its own colour
        own = 0.3 * _blurred_noise(rng, (h, w), 1.8)
        image[c] = tint[c] + 0.18 * (luminance + own) * rng.uniform(0.7, 1.3)
    return 1.0 / (1.0 + np.exp(-4.0 * (image - 0.5)))  # a soft clip into (0, 1)


def smooth_images(
    count: int, shape: tuple[int, int, int], seed: int = 0, normalize: bool = True
) -> np.ndarray:
    """``count`` images of ``shape`` = (channels, height, width), float32, seeded.

    With ``normalize`` each channel is standardised with ImageNet's mean and std (3 channels;
    any other channel count uses their averages).
    """
    channels, h, w = shape
    rng = np.random.default_rng(seed)
    images = np.stack([_image(rng, channels, h, w) for _ in range(count)])
    if normalize:
        if channels == 3:
            mean, std = np.array(IMAGENET_MEAN), np.array(IMAGENET_STD)
        else:
            mean = np.full(channels, np.mean(IMAGENET_MEAN))
            std = np.full(channels, np.mean(IMAGENET_STD))
        images = (images - mean[:, None, None]) / std[:, None, None]
    return images.astype(np.float32)


def benchmark_images(
    shape: tuple[int, int, int], calibration: int = 32, evaluation: int = 64, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The benchmark's calibration and evaluation images: disjoint draws of one generator."""
    images = smooth_images(calibration + evaluation, shape, seed)
    return images[:calibration], images[calibration:]
