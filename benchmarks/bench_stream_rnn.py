"""The keyword-spotting CRNN (``nanoir.testing.stream_proof_models.KWSCRNN``: conv front end,
permute, GRU, per-frame linear) streamed one frame at a time at nh through ``nanoir.Streamer``.

- latency: per frame, the streamed push (median and 99th percentile over ``--frames``
  frames, after a warm-up) against the whole-sequence run (``nanoir.run`` on the same
  ``--frames`` frames: its time per frame, and its whole time, which is what answering for
  the newest frame costs without streaming); the streamed rows are checked equal to the
  whole run's bit for bit;
- memory: ``--long`` frames (100,000 by default) pushed one at a time, the process's
  resident set size (``/proc/self/statm``) and the Python heap (``tracemalloc``, on a
  shorter run of ``--traced`` frames, since tracing slows every allocation) sampled along
  the way: flat, since the Streamer holds only the plan's caches and the GRU's state.

BLAS runs on one thread.

    python benchmarks/bench_stream_rnn.py [--frames 2000] [--long 100000] [--traced 5000]
        [--out benchmarks/stream_rnn_results.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

MELS = 10


def build() -> object:
    """The CRNN at nh (BN folded, calibrated on random frames)."""
    import torch
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.lowering.quantize import quantize

    from nanoir.testing.stream_proof_models import import_streaming, make_stream_proof_model

    torch.set_num_threads(1)
    nq = import_streaming(make_stream_proof_model("KWSCRNN"), MELS)
    rng = np.random.default_rng(0)
    quantize(nq, [rng.standard_normal((4, MELS, 200)).astype(np.float32)])
    return lower_to_hw(nq.clone())


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def latency(hw: object, frames: int) -> dict[str, float]:
    import nanoir

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, MELS, frames)).astype(np.float32)
    streamer = nanoir.Streamer(hw)
    for t in range(50):  # warm-up (kernels built, caches filled)
        streamer.push(x[:, :, t : t + 1])
    streamer.reset()
    times, outs = [], []
    for t in range(frames):
        start = time.perf_counter()
        (y,) = streamer.push(x[:, :, t : t + 1])
        times.append(time.perf_counter() - start)
        outs.append(y)
    outs.append(streamer.flush()[0])
    start = time.perf_counter()
    (whole,) = nanoir.run(hw, x)
    whole_s = time.perf_counter() - start
    assert np.concatenate(outs, axis=1).tobytes() == whole.tobytes(), "streamed != whole"
    ms = np.asarray(times) * 1e3
    return {
        "median": float(np.median(ms)),
        "p99": float(np.percentile(ms, 99)),
        "whole_ms": whole_s * 1e3,
        "whole_per_frame": whole_s * 1e3 / frames,
    }


def memory(hw: object, frames: int, samples: int = 10) -> list[tuple[int, float]]:
    import nanoir

    rng = np.random.default_rng(2)
    block = rng.standard_normal((1, MELS, 1000)).astype(np.float32)
    streamer = nanoir.Streamer(hw)
    out: list[tuple[int, float]] = []
    every = max(1, frames // samples)
    for t in range(frames):
        streamer.push(block[:, :, t % 1000 : t % 1000 + 1])
        if (t + 1) % every == 0:
            out.append((t + 1, rss_mib()))
    return out


def traced(hw: object, frames: int, samples: int = 5) -> list[tuple[int, float]]:
    import nanoir

    rng = np.random.default_rng(3)
    block = rng.standard_normal((1, MELS, 1000)).astype(np.float32)
    streamer = nanoir.Streamer(hw)
    for t in range(100):
        streamer.push(block[:, :, t : t + 1])
    tracemalloc.start()
    out: list[tuple[int, float]] = []
    every = max(1, frames // samples)
    for t in range(frames):
        streamer.push(block[:, :, t % 1000 : t % 1000 + 1])
        if (t + 1) % every == 0:
            out.append((t + 1, tracemalloc.get_traced_memory()[0] / 2**10))
    tracemalloc.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--long", type=int, default=100_000)
    parser.add_argument("--traced", type=int, default=5000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    hw = build()
    lat = latency(hw, args.frames)
    heap = traced(hw, args.traced)
    start = time.perf_counter()
    rss = memory(hw, args.long)
    long_s = time.perf_counter() - start
    lines = [
        "# Streamed keyword-spotting CRNN (conv front end + GRU), nh, one frame per push",
        "",
        f"`python benchmarks/bench_stream_rnn.py --frames {args.frames} --long {args.long} "
        f"--traced {args.traced}`; {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, one BLAS thread, on a shared machine.",
        "",
        "KWSCRNN: 10 mels, two Conv1d(k=3, pad=1)+BN+ReLU of 12 channels, permute, GRU(12 -> 16, "
        "batch_first), Linear(16 -> 5); 8-bit, trunc.",
        "",
        "## Latency",
        "",
        "| run | per frame (ms) |",
        "|---|---|",
        f"| streamed push, median | {lat['median']:.3f} |",
        f"| streamed push, 99th percentile | {lat['p99']:.3f} |",
        f"| whole-sequence run of {args.frames} frames, per frame | {lat['whole_per_frame']:.3f} |",
        f"| whole-sequence run of {args.frames} frames (the newest frame's answer "
        f"without streaming) | {lat['whole_ms']:.1f} |",
        "",
        f"Streamed rows == whole run bit for bit on the {args.frames} frames.",
        "",
        f"## Memory over {args.long:,} frames",
        "",
        "| frames pushed | resident set (MiB) |",
        "|---|---|",
        *(f"| {n:,} | {m:.1f} |" for n, m in rss),
        "",
        f"({args.long:,} frames in {long_s:.0f} s, {long_s / args.long * 1e3:.2f} ms per frame.)",
        "",
        f"Python heap traced over {args.traced:,} frames (after 100):",
        "",
        "| frames pushed | traced heap (KiB) |",
        "|---|---|",
        *(f"| {n:,} | {k:.1f} |" for n, k in heap),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
