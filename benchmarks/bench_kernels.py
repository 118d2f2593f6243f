"""Time ``nanoir.runtime.numerics.kernels.conv`` against ``torch.nn.functional.conv2d``, one thread each.

Layers: every distinct conv of ResNet-18 at a 1x3x224x224 input, plus a few MobileNetV2
depthwise convs. Each implementation runs in its own worker process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1, because torch's and OpenBLAS's thread
pools interfere when they share a process. ``--depthwise`` also times the depthwise
alternatives that ``conv`` does not use (a multiply-accumulate per tap, einsum).

    python benchmarks/bench_kernels.py [--repeat 7] [--depthwise]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

# OpenBLAS reads its thread count when NumPy loads: the workers get the variables in their
# environment from the start. torch is imported by the torch worker only.
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

# (name, C_in, C_out, H=W, kernel, stride, pad, groups)
LAYERS: list[tuple[str, int, int, int, int, int, int, int]] = [
    ("conv1 7x7/2", 3, 64, 224, 7, 2, 3, 1),
    ("layer1 3x3", 64, 64, 56, 3, 1, 1, 1),
    ("layer2.0 3x3/2", 64, 128, 56, 3, 2, 1, 1),
    ("layer2 3x3", 128, 128, 28, 3, 1, 1, 1),
    ("layer2.0 down 1x1/2", 64, 128, 56, 1, 2, 0, 1),
    ("layer3.0 3x3/2", 128, 256, 28, 3, 2, 1, 1),
    ("layer3 3x3", 256, 256, 14, 3, 1, 1, 1),
    ("layer3.0 down 1x1/2", 128, 256, 28, 1, 2, 0, 1),
    ("layer4.0 3x3/2", 256, 512, 14, 3, 2, 1, 1),
    ("layer4 3x3", 512, 512, 7, 3, 1, 1, 1),
    ("layer4.0 down 1x1/2", 256, 512, 14, 1, 2, 0, 1),
]
# How often each layer occurs in ResNet-18, to weigh the whole-network total.
COUNTS = [1, 4, 1, 3, 1, 1, 3, 1, 1, 3, 1]
DEPTHWISE: list[tuple[str, int, int, int, int, int, int, int]] = [
    ("mbv2 dw 32@112", 32, 32, 112, 3, 1, 1, 32),
    ("mbv2 dw 96@112/2", 96, 96, 112, 3, 2, 1, 96),
    ("mbv2 dw 144@56", 144, 144, 56, 3, 1, 1, 144),
    ("mbv2 dw 384@14", 384, 384, 14, 3, 1, 1, 384),
]


def best_ms(f: Callable[[], object], repeat: int) -> float:
    f()
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def worker(impl: str, repeat: int, depthwise_variants: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    results: dict[str, float] = {}
    for name, cin, cout, hw, k, s, p, g in LAYERS + DEPTHWISE:
        x = rng.standard_normal((1, cin, hw, hw)).astype(np.float32)
        w = rng.standard_normal((cout, cin // g, k, k)).astype(np.float32)
        if impl == "torch":
            import torch
            import torch.nn.functional as F

            torch.set_num_threads(1)
            xt, wt = torch.from_numpy(x), torch.from_numpy(w)
            with torch.no_grad():
                results[name] = best_ms(
                    lambda: F.conv2d(xt, wt, stride=s, padding=p, groups=g), repeat
                )
        else:
            from nanoir.runtime.numerics.kernels import conv

            results[name] = best_ms(
                lambda: conv(x, w, strides=(s, s), pads=(p, p, p, p), groups=g), repeat
            )
            if depthwise_variants and g > 1:
                results[name + " [mac]"] = best_ms(lambda: _depthwise_mac(x, w, s, p), repeat)
                results[name + " [einsum]"] = best_ms(lambda: _depthwise_einsum(x, w, s, p), repeat)
    return results


def _depthwise_mac(
    x: NDArray[np.float32], w: NDArray[np.float32], s: int, p: int
) -> NDArray[np.float32]:
    """Depthwise conv as one multiply-accumulate per kernel tap (the alternative not taken)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    o = (xp.shape[-1] - k) // s + 1
    y = np.zeros((x.shape[0], x.shape[1], o, o), x.dtype)
    tmp = np.empty_like(y)
    for i in range(k):
        for j in range(k):
            view = xp[:, :, i : i + s * (o - 1) + 1 : s, j : j + s * (o - 1) + 1 : s]
            np.multiply(view, w[:, 0, i, j][:, None, None], out=tmp)
            y += tmp
    return y


def _depthwise_einsum(
    x: NDArray[np.float32], w: NDArray[np.float32], s: int, p: int
) -> NDArray[np.float32]:
    """Depthwise conv as einsum over a sliding window view (the other alternative not taken)."""
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    view = sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return np.einsum("nchwij,cij->nchw", view, w[:, 0], optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--depthwise", action="store_true", help="also time depthwise alternatives")
    parser.add_argument("--worker", choices=["numpy", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat, args.depthwise)))
        return

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    timings = {}
    for impl in ("numpy", "torch"):
        cmd = [sys.executable, __file__, "--worker", impl, "--repeat", str(args.repeat)]
        if args.depthwise:
            cmd.append("--depthwise")
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        timings[impl] = json.loads(out)

    print("| layer | numpy ms | torch ms | ratio |")
    print("|---|---:|---:|---:|")
    for name, *_ in LAYERS + DEPTHWISE:
        n, t = timings["numpy"][name], timings["torch"][name]
        print(f"| {name} | {n:.2f} | {t:.2f} | {n / t:.2f} |")
        for variant in ("mac", "einsum"):
            key = f"{name} [{variant}]"
            if key in timings["numpy"]:
                print(
                    f"| {name} ({variant}, not used) | {timings['numpy'][key]:.2f} | | {timings['numpy'][key] / t:.2f} |"
                )
    total_n = sum(c * timings["numpy"][layer[0]] for c, layer in zip(COUNTS, LAYERS))
    total_t = sum(c * timings["torch"][layer[0]] for c, layer in zip(COUNTS, LAYERS))
    print(
        f"| ResNet-18 convs, weighted by count | {total_n:.1f} | {total_t:.1f} | {total_n / total_t:.2f} |"
    )


if __name__ == "__main__":
    main()
