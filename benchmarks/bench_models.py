"""Whole networks: nanoir's float (nf) and integer (nh) executors against torch eager fp32.

For each model (ResNet-18 at 1x3x224x224, LeNet-5, the KWS net) the same seeded weights run
through:

- ``torch``: ``model(x)`` in eval mode, float32 (the baseline);
- ``nf``: ``nanoir.from_torch`` + ``fold-bn``, compiled once, float32 NumPy;
- ``nh``: the same program quantized to 8 bits (per-channel weights) and lowered to integer
  nh ops, run on int8 input codes (ResNet-18 only by default: ``--nh-all`` for every model).

Each (model, implementation) pair runs in its own worker process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 and ``torch.set_num_threads(1)``:
torch's and OpenBLAS's thread pools slow each other down when alternated in one process.
Times are the best of ``--repeat`` runs after one warm-up; compilation is not timed.

    python benchmarks/bench_models.py [--repeat 5] [--nh-all]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

MODELS = {
    "ResNet18": {"shape": (1, 3, 224, 224)},
    "LeNet5": {},
    "KWSNet": {},
}


def _input(name: str) -> Any:
    import torch

    from nanoir.testing import make_test_model

    model = make_test_model(name)
    shape = MODELS[name].get("shape")
    if shape is None:
        x = model.make_example_input(1)
    else:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    return model, x


def worker(name: str, impl: str, repeat: int) -> dict[str, float]:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    model, x = _input(name)
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
        if impl == "nh":
            rng = np.random.default_rng(1)
            calibration = [xn + 0.1 * rng.standard_normal(xn.shape) for _ in range(2)]
            nanoir.quantize(module, calibration)
            nanoir.lower_to_hw(module)
            from nanoir.runtime.nh import quantize_inputs

            plan = compile_module(module)
            (xn,) = quantize_inputs(plan.func, [xn])
            xn = xn.astype(np.int8)
        else:
            plan = compile_module(module)

        def call() -> object:
            return plan(xn)

    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return {"ms": min(times) * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nh-all", action="store_true", help="time nh for every model")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeat)))
        return 0
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    rows = []
    for name in MODELS:
        impls = ["torch", "nf"] + (["nh"] if name == "ResNet18" or args.nh_all else [])
        ms = {}
        for impl in impls:
            out = subprocess.run(
                [sys.executable, __file__, "--worker", name, impl, "--repeat", str(args.repeat)],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            ms[impl] = json.loads(out.stdout.strip().splitlines()[-1])["ms"]
        rows.append((name, ms))
    print("| model | torch fp32 ms | nf ms | nf / torch | nh int8 ms | nh / torch |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ms in rows:
        nh = f"{ms['nh']:.2f} | {ms['nh'] / ms['torch']:.2f}" if "nh" in ms else "— | —"
        print(
            f"| {name} | {ms['torch']:.2f} | {ms['nf']:.2f} | {ms['nf'] / ms['torch']:.2f} | {nh} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
