"""Streamed vs whole-tensor time for the KWS net (``nanoir.testing.KWSNet``, 40 x 49 frames).

The net is imported from torch, BN-folded, quantized on random calibration data (nq, run in
float64) and lowered to integers (nh, raw codes). For each batch size and step, one process
times (best of ``--repeat``, the two interleaved so that load on the machine hits both alike):

- whole: the compiled whole-tensor plan on the full input (``compile_module(...)(x)``);
- streamed: ``stream(module, [x], step=step, runner=runner)`` with a runner built once (its
  kernels compiled once, as the plan's are), i.e. every step of the stream plus ``finish()``.

Both results are checked to be equal bit for bit. BLAS runs on one thread.

    python benchmarks/bench_stream.py [--repeat 7] [--batches 1,16,64,256] [--steps 1,4,16,49]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


def build() -> tuple[object, object]:
    """The KWS net at the nq and nh levels."""
    import torch
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.lowering.quantize import quantize

    from nanoir.context import make_context
    from nanoir.frontend import from_torch
    from nanoir.testing import make_test_model

    torch.set_num_threads(1)
    model = make_test_model("KWSNet")
    module = from_torch(model, (model.make_example_input(2),))  # type: ignore[operator]
    FoldBnPass().apply(make_context(), module)
    rng = np.random.default_rng(0)
    quantize(module, [rng.standard_normal((8, 40, 49)).astype(np.float32)])
    return module, lower_to_hw(module.clone())


def best_pair(f: Callable[[], object], g: Callable[[], object], repeat: int) -> tuple[float, float]:
    f(), g()
    tf: list[float] = []
    tg: list[float] = []
    for _ in range(repeat):
        for fn, times in ((f, tf), (g, tg)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return min(tf) * 1e3, min(tg) * 1e3


def main() -> None:
    from nanoir.runtime.interpreter import compile_module, find_function
    from nanoir.runtime.nh import quantize_inputs
    from nanoir.runtime.stream import StreamRunner, stream

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--batches", default="1,16,64,256")
    p.add_argument("--steps", default="1,4,16,49")
    args = p.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    nq, nh = build()
    print("| level | batch | step | steps run | whole ms | streamed ms | per step ms | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for level, module in (("nq", nq), ("nh", nh)):
        plan = compile_module(module)  # type: ignore[arg-type]
        runner = StreamRunner(module, raw=True)  # type: ignore[arg-type]
        for batch in batches:
            x = np.random.default_rng(batch).standard_normal((batch, 40, 49))
            if level == "nh":
                x = quantize_inputs(find_function(module), [x])[0]  # type: ignore[arg-type]
            want = plan(x)[0]
            for step in steps:
                got = stream(module, [x], step=step, runner=runner)[0]  # type: ignore[arg-type]
                assert got.tobytes() == want.tobytes(), (level, batch, step)
                whole, streamed = best_pair(
                    lambda: plan(x),
                    lambda: stream(module, [x], step=step, runner=runner),  # type: ignore[arg-type]
                    args.repeat,
                )
                n = -(-49 // step) + 1  # the steps with rows, and finish()
                print(
                    f"| {level} | {batch} | {step} | {n} | {whole:.2f} | {streamed:.2f} | "
                    f"{streamed / n:.3f} | {streamed / whole:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
