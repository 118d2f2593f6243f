"""Time the exact integer ``nh.conv`` kernel against ``torch.nn.functional.conv2d`` in float32.

Layers: every distinct conv of ResNet-18 at a 1x3x224x224 input (as in ``bench_kernels.py``),
with int8 codes: activations in -128..127 (declared i8, so the kernel's bound is 128), weights
a constant with per-channel exponents whose codes reach +-127 in every channel, as calibration
makes them, and an i32 bias (BN folded into the conv). Each layer is a compiled one-op nh
program (``nanoir.runtime.interpreter``), timed through the plan, so input checking is included.
``nh conv+requant`` adds the per-channel ``nh.requant`` to i8 that a lowered layer runs next.
torch gets the same values as float32 tensors (``F.conv2d(x, w, b)``, eager).

Each implementation runs in its own worker process with
OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 and ``torch.set_num_threads(1)``. The
workers also check that the nh result equals torch's float64 conv of the same codes exactly.

    python benchmarks/bench_nh_conv.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# (name, C_in, C_out, H=W, kernel, stride, pad)
LAYERS: list[tuple[str, int, int, int, int, int, int]] = [
    ("conv1 7x7/2", 3, 64, 224, 7, 2, 3),
    ("layer1 3x3", 64, 64, 56, 3, 1, 1),
    ("layer2.0 3x3/2", 64, 128, 56, 3, 2, 1),
    ("layer2 3x3", 128, 128, 28, 3, 1, 1),
    ("layer2.0 down 1x1/2", 64, 128, 56, 1, 2, 0),
    ("layer3.0 3x3/2", 128, 256, 28, 3, 2, 1),
    ("layer3 3x3", 256, 256, 14, 3, 1, 1),
    ("layer3.0 down 1x1/2", 128, 256, 28, 1, 2, 0),
    ("layer4.0 3x3/2", 256, 512, 14, 3, 2, 1),
    ("layer4 3x3", 512, 512, 7, 3, 1, 1),
    ("layer4.0 down 1x1/2", 256, 512, 14, 1, 2, 0),
]
# How often each layer occurs in ResNet-18, to weigh the whole-network total.
COUNTS = [1, 4, 1, 3, 1, 1, 3, 1, 1, 3, 1]


def best_ms(f: Callable[[], object], repeat: int) -> float:
    f()
    times: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def layer_data(cin: int, cout: int, hw: int, k: int, seed: int) -> tuple[Any, Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, cin, hw, hw)).astype(np.int8)
    w = rng.standard_normal((cout, cin, k, k))
    w = np.round(w / np.abs(w).max(axis=(1, 2, 3), keepdims=True) * 127).astype(np.int8)
    b = rng.integers(-(2**20), 2**20, cout).astype(np.int32)
    return x, w, b


def nh_program(x: Any, w: Any, b: Any, s: int, p: int, requant: bool) -> Any:
    """``func @main(%x: i8) { conv(x, w, b) [-> requant to i8] }`` with constant w and b."""
    from nanoir.dialects import nh
    from xdsl.dialects.builtin import (
        BytesAttr,
        DenseArrayBase,
        DenseIntOrFPElementsAttr,
        FunctionType,
        IntegerType,
        ModuleOp,
        TensorType,
        i64,
    )
    from xdsl.dialects.func import FuncOp, ReturnOp
    from xdsl.ir import Block, Region

    def constant(codes: Any, storage: int, width: int, exp: Any, layout: str) -> nh.ConstantOp:
        data = DenseIntOrFPElementsAttr(
            TensorType(IntegerType(storage), codes.shape), BytesAttr(codes.tobytes())
        )
        return nh.ConstantOp(data, nh.fixed_type(width, codes.shape, exp, layout))

    cout, cin, k, _ = w.shape
    hw = x.shape[-1]
    out = (hw + 2 * p - k) // s + 1
    w_exps = [7 + (o % 3) for o in range(cout)]
    acc_exps = [4 + e for e in w_exps]
    block = Block(arg_types=[nh.fixed_type(8, [1, cin, hw, hw], 4, "BCMD")])
    wc = constant(w, 8, 8, w_exps, "CCDD")
    bc = constant(b, 32, 32, acc_exps, "C")
    conv = nh.ConvOp.create(
        operands=[block.args[0], wc.result, bc.result],
        result_types=[nh.fixed_type(32, [1, cout, out, out], acc_exps, "BCMD")],
        properties={
            "strides": DenseArrayBase.from_list(i64, [s, s]),
            "pads": DenseArrayBase.from_list(i64, [p] * 4),
        },
    )
    ops: list[Any] = [wc, bc, conv]
    if requant:
        ops.append(
            nh.RequantOp.create(
                operands=[conv.result],
                result_types=[nh.fixed_type(8, [1, cout, out, out], 4, "BCMD")],
                properties={"shift": DenseArrayBase.from_list(i64, [e - 4 for e in acc_exps])},
            )
        )
    block.add_ops([*ops, ReturnOp(ops[-1].results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [ops[-1].results[0].type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    module.verify()
    return module


def worker(impl: str, repeat: int) -> dict[str, float]:
    import numpy as np

    results: dict[str, float] = {}
    for i, (name, cin, cout, hw, k, s, p) in enumerate(LAYERS):
        x, w, b = layer_data(cin, cout, hw, k, seed=i)
        if impl == "torch":
            import torch
            import torch.nn.functional as F

            torch.set_num_threads(1)
            xt, wt, bt = (torch.from_numpy(a.astype(np.float32)) for a in (x, w, b))
            with torch.no_grad():
                results[name] = best_ms(lambda: F.conv2d(xt, wt, bt, stride=s, padding=p), repeat)
            continue
        from nanoir.runtime.interpreter import compile_module

        plan = compile_module(nh_program(x, w, b, s, p, requant=False))
        results[name] = best_ms(lambda: plan(x), repeat)
        plan_rq = compile_module(nh_program(x, w, b, s, p, requant=True))
        results[name + " [requant]"] = best_ms(lambda: plan_rq(x), repeat)
        import torch
        import torch.nn.functional as F

        (got,) = plan(x)
        want = F.conv2d(
            *(torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)), stride=s, padding=p
        ).numpy()
        if not np.array_equal(got, want):
            raise SystemExit(f"{name}: nh.conv differs from the float64 reference")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--worker", choices=["nh", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.repeat)))
        return

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    timings = {}
    for impl in ("nh", "torch"):
        cmd = [sys.executable, __file__, "--worker", impl, "--repeat", str(args.repeat)]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        timings[impl] = json.loads(out)

    nh_t, torch_t = timings["nh"], timings["torch"]
    print(
        "| layer | nh conv ms | nh conv+requant ms | torch fp32 ms | ratio conv | ratio conv+requant |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, *_ in LAYERS:
        n, r, t = nh_t[name], nh_t[name + " [requant]"], torch_t[name]
        print(f"| {name} | {n:.2f} | {r:.2f} | {t:.2f} | {n / t:.2f} | {r / t:.2f} |")
    total = {
        key: sum(c * table[layer[0] + suffix] for c, layer in zip(COUNTS, LAYERS))
        for key, table, suffix in (("n", nh_t, ""), ("r", nh_t, " [requant]"), ("t", torch_t, ""))
    }
    print(
        f"| ResNet-18 convs, weighted by count | {total['n']:.1f} | {total['r']:.1f} | "
        f"{total['t']:.1f} | {total['n'] / total['t']:.2f} | {total['r'] / total['t']:.2f} |"
    )


if __name__ == "__main__":
    main()
