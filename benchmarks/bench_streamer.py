"""An hour of audio frames through ``nanoir.Streamer``: flat memory and per-frame latency.

The KWS net's feature stack (``nanoir.testing.KWSNet`` without its pooled classifier: 4 Conv1d
+ BN + ReLU stages, stride 2, dilations 2 and 4; BN folded, 8-bit, lowered to nh) with its time
dim made dynamic, so the stream has no end. Frames (``[1, 40, 1]``, one 10 ms MFCC frame
each) are pushed one at a time:

- latency: each ``push`` timed with ``perf_counter_ns`` (no tracing), p50/p99/max reported;
- memory: a second pass with ``tracemalloc`` on; the traced peak over the frames up to 10% and
  over the frames from 10% to 100% of the stream (the issue's bar: within 1 MB).

The streamed rows are checked against the whole-tensor run on the first 2000 frames.

``--ratio`` measures instead what a push costs against one whole run (issue 33 §4): the whole
KWS test model (``nanoir.testing.KWSNet`` on ``[N, 40, 49]``, BN folded, 8-bit, nh, raw codes)
through a ``Streamer`` built once (``reset()`` per stream: every push of the 49 frames and the
``flush()``) against its compiled whole-tensor plan, both on the same codes and checked equal
bit for bit; CPU time of one thread, best of ``--repeat`` with the runs interleaved, for batch
16 with 4 frames a push and batch 1 with one frame a push (targets: <= 1.0x and <= 3x). The
last column is the same stream through the ``StreamRunner`` alone (``nanoir.runtime.stream``,
which the ``Streamer`` wraps with its per-push checks of shape, dtype and stream state).
The model's one output is a whole-stream result (pooled class scores), so the ``Streamer``
gathers rows before running them (``nanoir.Streamer``'s ``gather``; ``--gather 0`` runs each
push at once, as the runner-alone column does).

    python benchmarks/bench_streamer.py [--frames 360000]
    python benchmarks/bench_streamer.py --ratio [--repeat 21] [--gather 0]
"""

from __future__ import annotations

import argparse
import os
import re
import time
import tracemalloc

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


def build() -> object:
    """The KWS feature stack at the nh level, with a dynamic time dim."""
    import torch
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.lowering.quantize import quantize

    import nanoir
    from nanoir.context import make_context
    from nanoir.frontend import from_torch
    from nanoir.testing import make_test_model

    torch.set_num_threads(1)
    model = make_test_model("KWSNet")
    features = model.features.eval()  # type: ignore[union-attr]
    module = from_torch(features, (torch.randn(2, 40, 49),))
    FoldBnPass().apply(make_context(), module)
    rng = np.random.default_rng(0)
    quantize(module, [rng.standard_normal((8, 40, 49)).astype(np.float32)])
    text = str(lower_to_hw(module))
    # Runtime tensors are [?, C, T] (dynamic batch): make T dynamic too.
    text = re.sub(r"tensor<\?x(\d+)x\d+x(i\d+|f32)", r"tensor<?x\1x?x\2", text)
    return nanoir.parse(text)


RATIO_CASES = ((16, 4, 1.0), (1, 1, 3.0))
"""(batch, frames per push, target ratio) of ``--ratio``."""


def ratio(repeat: int, gather: int | None = None) -> None:
    """Streamed / whole through a Streamer built once (see the module docstring); ``gather``
    as ``nanoir.Streamer`` takes it (None: its default)."""
    import torch
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.lowering.quantize import quantize
    from nanoir.runtime.interpreter import compile_module
    from nanoir.runtime.nh import quantize_inputs
    from nanoir.runtime.stream import StreamRunner

    import nanoir
    from nanoir.context import make_context
    from nanoir.frontend import from_torch
    from nanoir.testing import make_test_model

    torch.set_num_threads(1)
    model = make_test_model("KWSNet")
    module = from_torch(model, (model.make_example_input(2),))  # type: ignore[operator]
    FoldBnPass().apply(make_context(), module)
    rng = np.random.default_rng(0)
    quantize(module, [rng.standard_normal((8, 40, 49)).astype(np.float32)])
    hw = lower_to_hw(module)
    plan = compile_module(hw)
    streamer = nanoir.Streamer(hw, raw=True, gather=gather)
    runner = StreamRunner(hw, raw=True)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"Streamer.gather: {streamer.gather} rows (None: about GATHER_ELEMENTS values)")
    print(
        "| batch | frames a push | pushes | whole ms | streamed ms | per push µs | ratio | target "
        "| runner alone ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    missed = []
    for batch, step, target in RATIO_CASES:
        x = np.random.default_rng(batch).standard_normal((batch, 40, 49))
        (codes,) = quantize_inputs(plan.func, [x])
        chunks = [codes[:, :, t : t + step] for t in range(0, 49, step)]

        def streamed() -> list[np.ndarray]:
            streamer.reset()
            out = [streamer.push(c)[0] for c in chunks]
            return [*out, streamer.flush()[0]]

        def bare() -> list[np.ndarray]:
            runner.reset()
            out = [runner.push(c)[0] for c in chunks]
            return [*out, runner.finish()[0]]

        want = plan(codes)[0]
        for fn in (streamed, bare):
            got = [y for y in fn() if y is not None]
            assert np.concatenate(got, axis=-1).tobytes() == want.tobytes()
        whole_t: list[float] = []
        stream_t: list[float] = []
        bare_t: list[float] = []
        for _ in range(repeat):
            for fn, times in (
                (lambda: plan(codes), whole_t),
                (streamed, stream_t),
                (bare, bare_t),
            ):
                start = time.process_time()
                fn()
                times.append(time.process_time() - start)
        whole, stream = min(whole_t) * 1e3, min(stream_t) * 1e3
        r = stream / whole
        if r > target:
            missed.append(f"batch {batch}, {step} a push: {r:.2f}x (> {target})")
        print(
            f"| {batch} | {step} | {len(chunks)} + flush | {whole:.3f} | {stream:.3f} | "
            f"{stream / (len(chunks) + 1) * 1e3:.0f} | {r:.2f} | <= {target} | "
            f"{min(bare_t) * 1e3:.3f} |",
            flush=True,
        )
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("Targets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))


def main() -> None:
    from nanoir.runtime.interpreter import run

    import nanoir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=360_000)
    p.add_argument("--ratio", action="store_true")
    p.add_argument("--repeat", type=int, default=21)
    p.add_argument("--gather", type=int, default=None, help="Streamer's gather (--ratio)")
    args = p.parse_args()
    if args.ratio:
        ratio(args.repeat, args.gather)
        return
    hw = build()
    rng = np.random.default_rng(1)
    frames = rng.standard_normal((2000, 1, 40, 1)).astype(np.float32)

    # Exactness on a prefix: the streamed rows equal the whole-tensor run's.
    check = nanoir.Streamer(hw, raw=True)
    pieces = [check.push(f)[0] for f in frames]
    pieces.append(check.flush()[0])
    whole = run(hw, np.concatenate(list(frames), axis=2), raw=True)[0]
    assert np.concatenate(pieces, axis=2).tobytes() == whole.tobytes()

    streamer = nanoir.Streamer(hw, raw=True)
    n = args.frames
    lat = np.empty(n, dtype=np.int64)
    start = time.perf_counter()
    for t in range(n):
        f = frames[t % len(frames)]
        t0 = time.perf_counter_ns()
        streamer.push(f)
        lat[t] = time.perf_counter_ns() - t0
    total = time.perf_counter() - start

    streamer.reset()
    tracemalloc.start()
    peaks = []
    tenth = n // 10
    for t in range(n):
        streamer.push(frames[t % len(frames)])
        if t + 1 in (tenth, n):
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.reset_peak()
    tracemalloc.stop()

    us = lat / 1e3
    print(f"frames: {n} ({n / 100 / 60:.1f} minutes of 10 ms frames), warm-up {streamer.warmup}")
    print("| figure | value |")
    print("|---|---:|")
    print(f"| per-frame latency p50 | {np.percentile(us, 50):.0f} µs |")
    print(f"| per-frame latency p99 | {np.percentile(us, 99):.0f} µs |")
    print(f"| per-frame latency max | {us.max():.0f} µs |")
    print(f"| frames per second | {n / total:.0f} |")
    print(f"| traced peak, frames up to 10% | {peaks[0] / 2**20:.3f} MiB |")
    print(f"| traced peak, frames 10% to 100% | {peaks[1] / 2**20:.3f} MiB |")
    print(f"| difference | {(peaks[1] - peaks[0]) / 2**10:+.1f} KiB |")


if __name__ == "__main__":
    main()
