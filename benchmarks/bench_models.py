"""Whole networks: nanoir's float (nf) and integer (nh) executors against torch eager fp32.

For each model of ``nanoir.testing.TEST_MODELS`` (ResNet-18 at 3x224x224) and the Magik CRNN
with its recurrent heads (:data:`RECURRENT`), and each batch size
(``--batch``, default 1 and 16) the same seeded weights run through:

- ``torch``: ``model(x)`` in eval mode, float32 (the baseline);
- ``nf``: ``nanoir.from_torch`` + ``fold-bn``, compiled once, float32 NumPy;
- ``nh``: the same program quantized to 8 bits (per-channel weights) and lowered to integer
  nh ops, run on int8 input codes by the NumPy executor;
- ``nh-ort``: that nh program as exact integer ONNX (``nanoir.run(..., backend="onnxruntime")``)
  in onnxruntime with one intra-op thread; its codes are checked equal to ``nh``'s.

Targets: ResNet-18 at batch 1, nh via onnxruntime <= 0.9x torch fp32 (issue 23) and NumPy nh
<= 1.0x torch fp32 (issue 33); nh via onnxruntime faster than NumPy nh on every model at every
batch size.

Each (model, implementation) pair runs in its own worker process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 and ``torch.set_num_threads(1)``:
torch's and OpenBLAS's thread pools slow each other down when alternated in one process.
Times are the best of ``--repeat`` calls after one warm-up; compilation is not timed. The
clock is the process's CPU time (``--clock cpu``, the default: one thread, so it is the time
the work takes, and other jobs on a shared machine inflate it far less than wall time) or
``--clock wall``. ``--runs N`` repeats the whole table N times (the implementations of a row
interleaved in each) and reports, per cell, the median of the N runs' bests; the load average
is printed before and after.

    python benchmarks/bench_models.py [--repeat 5] [--runs 3] [--batch 1 16] [--models ResNet18 ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

SHAPES = {"ResNet18": (3, 224, 224)}
"""Per-sample input shapes that differ from the model's own example input."""

IMPLS = ("torch", "nf", "nh", "nh-ort")
RECURRENT = ("MagikCRNN-lstm-zero", "MagikCRNN-gru-zero")
"""The Magik manual's CRNN with its bidirectional LSTM (and GRU) head: nh.recurrent in
integer ONNX (issue 33 §2)."""


def _input(name: str, batch: int) -> Any:
    import torch

    from nanoir.testing import make_test_model

    if name in RECURRENT:
        from nanoir.testing.magik_models import MAGIK_INPUTS, make_magik_model

        shape = MAGIK_INPUTS[name][1:]
        return make_magik_model(name), torch.randn(
            batch, *shape, generator=torch.Generator().manual_seed(0)
        )

    model = make_test_model(name)
    shape = SHAPES.get(name)
    if shape is None:
        x = model.make_example_input(batch)
    else:
        x = torch.randn(batch, *shape, generator=torch.Generator().manual_seed(0))
    return model, x


def worker(name: str, impl: str, repeat: int, batch: int, clock: str = "cpu") -> dict[str, Any]:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    model, x = _input(name, batch)
    check = None
    if impl == "torch":

        def call() -> object:
            with torch.no_grad():
                return model(x)
    else:
        from nanoir.lowering.fold_bn import FoldBnPass
        from nanoir.runtime.interpreter import compile_module

        import nanoir

        module = nanoir.from_torch(model, (torch.cat([x, x]),))
        FoldBnPass().apply(nanoir.make_context(), module)
        xn = x.numpy()
        if impl.startswith("nh"):
            rng = np.random.default_rng(1)
            calibration = [xn + 0.1 * rng.standard_normal(xn.shape) for _ in range(2)]
            nanoir.quantize(module, calibration)
            nanoir.lower_to_hw(module)
            from nanoir.runtime.nh import quantize_inputs

            plan = compile_module(module)
            (xn,) = quantize_inputs(plan.func, [xn])
            xn = xn.astype(np.int8)
            if impl == "nh-ort":
                from nanoir.grammar.onnx.integer import export_model, make_session, run_model

                session = make_session(export_model(module), threads=1)
                check = all(
                    np.array_equal(a, b) for a, b in zip(run_model(session, [xn]), plan(xn))
                )

                def call() -> object:
                    return run_model(session, [xn])
            else:

                def call() -> object:
                    return plan(xn)
        else:
            plan = compile_module(module)

            def call() -> object:
                return plan(xn)

    now = time.process_time if clock == "cpu" else time.perf_counter
    call()
    times = []
    for _ in range(repeat):
        start = now()
        call()
        times.append(now() - start)
    return {"ms": min(times) * 1e3, "equal": check}


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "—"


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    from nanoir.testing import TEST_MODELS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    models = [*TEST_MODELS, *RECURRENT]
    parser.add_argument("--models", nargs="+", default=models, choices=models)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--worker", nargs=3, metavar=("MODEL", "IMPL", "B"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, impl, batch = args.worker
        print(json.dumps(worker(name, impl, args.repeat, int(batch), args.clock)))
        return 0
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    print(f"clock: {args.clock}; best of {args.repeat} per run; median of {args.runs} run(s)")
    print(f"load average before: {_load()}")
    rows = [(name, batch) for name in args.models for batch in args.batch]
    got: dict[tuple[str, int, str], list[float]] = {}
    equal: dict[tuple[str, int], bool | None] = {}
    for _ in range(args.runs):
        for name, batch in rows:
            for impl in args.impls:
                cmd = [sys.executable, __file__, "--repeat", str(args.repeat)]
                out = subprocess.run(
                    [*cmd, "--clock", args.clock, "--worker", name, impl, str(batch)],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
                result = json.loads(out.stdout.strip().splitlines()[-1])
                got.setdefault((name, batch, impl), []).append(result["ms"])
                if impl == "nh-ort":
                    equal[(name, batch)] = equal.get((name, batch), True) and result["equal"]
    print(f"load average after: {_load()}")
    print()
    print(
        "| model | batch | torch fp32 ms | nf ms | nh NumPy ms | nh onnxruntime ms | "
        "nh NumPy / torch | nh ort / torch | nh ort / nh NumPy | codes equal |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    failed = []
    for name, batch in rows:
        ms = {
            impl: statistics.median(got[(name, batch, impl)])
            for impl in IMPLS
            if (name, batch, impl) in got
        }
        same = equal.get((name, batch))
        t, nf, nh, ort = (ms.get(k) for k in IMPLS)
        cells = [f"{v:.2f}" if v is not None else "—" for v in (t, nf, nh, ort)]
        print(
            f"| {name} | {batch} | {' | '.join(cells)} | {_ratio(nh, t)} | {_ratio(ort, t)} | "
            f"{_ratio(ort, nh)} | {'yes' if same else 'NO' if same is False else '—'} |",
            flush=True,
        )
        if ort is not None and nh is not None and ort >= nh:
            failed.append(f"{name} batch {batch}: nh via onnxruntime not faster than NumPy")
        if name == "ResNet18" and batch == 1 and ort is not None and t and ort > 0.9 * t:
            failed.append(f"ResNet18 batch 1: nh via onnxruntime {ort / t:.2f}x torch (> 0.9)")
        if name == "ResNet18" and batch == 1 and nh is not None and t and nh > t:
            failed.append(f"ResNet18 batch 1: NumPy nh {nh / t:.2f}x torch (> 1.0)")
        if same is False:
            failed.append(f"{name} batch {batch}: onnxruntime codes differ from NumPy's")
    print()
    print("Targets: " + ("all met" if not failed else "MISSED: " + "; ".join(failed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
