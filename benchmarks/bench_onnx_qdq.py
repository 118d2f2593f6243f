"""The QDQ file in onnxruntime against nanoir's executors: speed and bit-exact outputs.

For each test model (nanoir.testing: LeNet-5, KWS net, MobileNetV2 block stack, ResNet-18 at
32x32, and the sample net), imported with ``from_torch``, BN folded and quantized with
``rounding="half_even"`` (``--bits``, 8 by default; per-channel weights), the program is written with
``nanoir.grammar.onnx.exporter`` (``nanoir.save(m, "m.onnx")``) and run by:

- ``ort``: onnxruntime's CPU provider, one thread, all graph optimizations except the two
  that fail on valid opset-21 QDQ in onnxruntime 1.32 (QDQ propagation around a Reshape,
  issue #27845; the Clip -> int4 QuantizeLinear fusion);
- ``nq``: nanoir's NumPy executor on the nq program (float64, compiled once);
- ``nh``: the program lowered to integers (``nanoir.lower_to_hw``) and run by the same
  executor on int8 input codes (timed to the output codes; compared dequantized). Should
  lower-to-hw refuse a program (it used to refuse average pooling rounded half to even), ``nh``
  is its trunc-quantized twin, the same ops and shapes, timed for speed only (marked †).

"exact" counts output elements equal bit for bit (ORT's float32 against the executor's
value cast to float32), over ``--batches`` random batches. Times are the best of
``--repeat`` runs after a warm-up; compilation and session creation are not timed.

    python benchmarks/bench_onnx_qdq.py [--batch 8] [--batches 4] [--repeat 7] [--bits 8]
        [--ort-level all|basic|none]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

MODELS = ["LeNet5", "KWSNet", "MobileNetV2Stack", "ResNet18", "SampleNet"]
ORT_DISABLED = ["QDQPropagationTransformer", "ClipQuantRewrite"]


def best_ms(call: Callable[[], object], repeat: int) -> float:
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def quantized(name: str, rounding: str, batch: int, bits: int = 8) -> tuple[Any, tuple[int, ...]]:
    import nanoir
    from nanoir.testing import import_folded

    module, shape = import_folded(name, batch=2)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((batch, *shape)).astype(np.float32) for _ in range(2)]
    nanoir.quantize(
        module, calibration, rounding=rounding, weight_bits=bits, bias_bits=bits, act_bits=bits
    )
    return module, shape


def nh_plan(module: Any) -> Callable[[np.ndarray], list[np.ndarray]]:
    from nanoir.runtime.interpreter import compile_module
    from nanoir.runtime.nh import dequantize_outputs, quantize_inputs

    import nanoir

    hw = module.clone()
    nanoir.lower_to_hw(hw)
    plan = compile_module(hw)

    def run(x: np.ndarray) -> list[np.ndarray]:
        (codes,) = quantize_inputs(plan.func, [x])
        return plan(codes.astype(np.int8))

    def values(x: np.ndarray) -> list[np.ndarray]:
        return dequantize_outputs(plan.func, run(x))

    run.values = values  # type: ignore[attr-defined]  # the outputs as real values

    return run


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import onnxruntime as ort
    from nanoir.grammar.onnx.exporter import export_onnx_bytes
    from nanoir.runtime.interpreter import compile_module

    module, shape = quantized(name, "half_even", args.batch, args.bits)
    data = export_onnx_bytes(module)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }[args.ort_level]
    # int4: onnxruntime 1.32's QDQ selector actions drop the Q/DQ around MaxPool and give it
    # int4 codes, which its MaxPool does not take (INVALID_GRAPH), and its Relu -> Q rewrite
    # drops a Relu before an int4 QuantizeLinear (wrong outputs): disable them too
    int4 = ["QDQSelectorActionTransformer", "ReluQuantRewrite"]
    disabled = ORT_DISABLED + (int4 if args.bits <= 4 and not args.all_int4_fusions else [])
    session = ort.InferenceSession(
        data, options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )
    input_name = session.get_inputs()[0].name
    nq = compile_module(module)
    try:
        nh, nh_same = nh_plan(module), True
    except Exception:  # a program lower-to-hw refuses: time the trunc twin
        twin, _ = quantized(name, "trunc", args.batch, args.bits)
        nh, nh_same = nh_plan(twin), False
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((args.batch, *shape)).astype(np.float32) for _ in range(args.batches)]
    total = exact_nq = exact_nh = 0
    for x in xs:
        (got,) = session.run(None, {input_name: x})
        (want,) = nq(x)
        total += got.size
        exact_nq += int(np.sum(got == np.asarray(want).astype(np.float32)))
        if nh_same:
            (hw,) = nh.values(x)  # type: ignore[attr-defined]
            exact_nh += int(np.sum(got == np.asarray(hw).astype(np.float32)))
    x = xs[0]
    return {
        "name": name,
        "bytes": len(data),
        "ort": best_ms(lambda: session.run(None, {input_name: x}), args.repeat),
        "nq": best_ms(lambda: nq(x), args.repeat),
        "nh": best_ms(lambda: nh(x), args.repeat),
        "nh_same": nh_same,
        "total": total,
        "exact_nq": exact_nq,
        "exact_nh": exact_nh if nh_same else None,
        "shape": (args.batch, *shape),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument(
        "--ort-level",
        choices=["all", "basic", "none"],
        default="all",
        help="onnxruntime's graph optimization level (all: every fusion but the broken ones)",
    )
    parser.add_argument(
        "--all-int4-fusions",
        action="store_true",
        help="at 4 bits, keep ORT's Relu->Q rewrite and QDQ selector actions (they break)",
    )
    parser.add_argument(
        "--bits", type=int, default=8, help="weight, bias and activation bits (4: int4 QDQ)"
    )
    args = parser.parse_args()
    import onnxruntime as ort

    print(
        f"onnxruntime {ort.__version__} (optimizations: {args.ort_level}), {args.bits} bits, "
        f"batch {args.batch}, {args.batches} batches"
    )
    print(
        "| model (input) | ORT ms | nq ms | nh ms | nh / ORT | ORT == nq | ORT == nh |\n"
        "|---|---:|---:|---:|---:|---:|---:|"
    )
    rows = []
    for name in args.models:
        r = measure(name, args)
        rows.append(r)
        shape = "x".join(str(d) for d in r["shape"])
        nh_note = "" if r["nh_same"] else "†"
        eq_nh = f"{r['exact_nh']}/{r['total']}" if r["exact_nh"] is not None else "— (the twin's)"
        print(
            f"| {name} ({shape}) | {r['ort']:.2f} | {r['nq']:.2f} | {r['nh']:.2f}{nh_note} "
            f"| {r['nh'] / r['ort']:.2f} | {r['exact_nq']}/{r['total']} | {eq_nh} |",
            flush=True,
        )
    if not all(r["nh_same"] for r in rows):
        print("† the trunc-quantized twin (lower-to-hw refused the program): speed only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
