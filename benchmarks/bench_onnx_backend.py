"""nh programs in NumPy and through the onnxruntime backend, per rounding mode (issue 33 §1).

For each model and each configuration the network is compiled once to nh and saved as
``.mlir``; then each executor runs that program in its own process (one thread:
``OMP_NUM_THREADS=1``, onnxruntime ``intra_op_num_threads=1``, ``torch.set_num_threads(1)``),
on one input (batch 1), best of ``--repeat`` CPU times (``time.process_time``) after two
warm-up runs:

- ``numpy``: the NumPy nh executor (``nanoir.runtime.interpreter.compile_module``);
- ``ort``: the program as exact integer ONNX in onnxruntime (``make_session`` + ``run_model``,
  what ``nanoir.run(..., backend="onnxruntime")`` does), its codes checked equal to NumPy's.

Configurations: ``trunc`` = ``compile_model``'s defaults (8 bits, mse, trunc, bias correction);
``half_even`` = the recommended ``rounding="half_even", unsigned="auto"``. A program the integer
ONNX writer refuses is reported by name with the writer's reason. Models: the test models
(ResNet-18 at 3x224x224, as bench_models.py) and the op-proof, proof and Magik networks, or
``--models``; ``--trained det cls ...`` adds bench_trained.py's networks (their wheels in its
cache; their first evaluation input), with a third executor, ``qdq``: onnxruntime running its
own ``quantize_static`` QDQ model of the network (bench_trained's baseline) at its default
optimization level, the reference of issue 33's half_even target; ``--mlir NAME=PATH`` adds an
nh program saved elsewhere (its input is drawn from N(0, 1) in its argument's shape, batch 1).
The load average is printed with the table.

    python benchmarks/bench_onnx_backend.py [--repeat 5] [--models ResNet18 KWSNet ...]
        [--configs trunc half_even] [--trained det cls rec] [--mlir NAME=PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIGS: dict[str, dict[str, Any]] = {
    "trunc": {},
    "half_even": {"rounding": "half_even", "unsigned": "auto"},
}
SHAPES = {"ResNet18": (3, 224, 224)}
"""Per-sample input shapes that differ from the model's own example input."""


def _registries() -> dict[str, tuple[str, str]]:
    """Model name -> (module of its registry, its ``make_*`` function)."""
    from nanoir.testing import MAGIK_MODELS, OP_PROOF_MODELS, PROOF_MODELS, TEST_MODELS

    found = {name: ("models", "make_test_model") for name in TEST_MODELS}
    found |= {name: ("op_proof_models", "make_op_proof_model") for name in OP_PROOF_MODELS}
    found |= {name: ("proof_models", "make_proof_model") for name in PROOF_MODELS}
    found |= {name: ("magik_models", "make_magik_model") for name in MAGIK_MODELS}
    return found


def _example(name: str) -> tuple[Any, Any]:
    """The seeded model and a batch-1 input for it."""
    import importlib

    import torch

    module, make = _registries()[name]
    registry = importlib.import_module(f"nanoir.testing.{module}")
    model = getattr(registry, make)(name)
    generator = torch.Generator().manual_seed(0)
    if name in SHAPES:
        return model, torch.randn(1, *SHAPES[name], generator=generator)
    if hasattr(model, "make_example_input"):
        return model, model.make_example_input(1)
    shape = registry.MAGIK_INPUTS[name]
    if name == "TextCNN":
        return model, torch.randint(0, registry.TEXT_VOCAB, (1, *shape[1:]), generator=generator)
    return model, torch.randn(1, *shape[1:], generator=generator)


def compile_worker(name: str, config: str, out: str) -> dict[str, Any]:
    """Compile ``name`` in ``config`` to nh; save the program and its float input."""
    import numpy as np
    import torch

    import nanoir

    torch.manual_seed(0)
    model, x = _example(name)
    if x.dtype.is_floating_point:
        calibration = [
            (x + 0.1 * torch.randn(x.shape, generator=torch.Generator().manual_seed(s)))
            for s in (1, 2)
        ]
    else:
        calibration = [x]
    start = time.process_time()
    hw = nanoir.compile_model(
        model, (x,), [c.numpy() for c in calibration], stop="nh", **CONFIGS[config]
    )
    Path(out).write_text(str(hw))
    np.save(out + ".npy", x.numpy())
    return {"compile_s": time.process_time() - start}


def trained_worker(name: str, configs: list[str], folder: str) -> dict[str, Any]:
    """Build bench_trained's ``name``; save its nh program per config, its input and
    onnxruntime's QDQ model of it into ``folder``."""
    import numpy as np

    import nanoir

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from trained.fetch import default_cache
    from trained.models import MODELS, batches
    from trained.ort_baseline import ort_quantize

    out = Path(folder)
    subject = MODELS[name].build(default_cache(), out / "work", lambda _: None)
    x = subject.evaluation[:1]
    calibration = batches(subject.calibration, subject.batch)
    for config in configs:
        module = subject.program.clone()
        nanoir.quantize(module, calibration, **CONFIGS[config])
        program = out / f"{name}-{config}.mlir"
        program.write_text(str(nanoir.lower_to_hw(module)))
        np.save(str(program) + ".npy", x)
    qdq, _ = ort_quantize(subject.onnx_float, calibration, out / "qdq")
    np.save(str(qdq) + ".npy", x)
    return {"qdq": str(qdq)}


def qdq_worker(path: str, repeat: int) -> dict[str, Any]:
    """Time onnxruntime on its own QDQ model (one thread, default optimization level)."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {session.get_inputs()[0].name: np.load(path + ".npy").astype(np.float32)}
    for _ in range(2):
        session.run(None, feeds)
    times = []
    for _ in range(repeat):
        start = time.process_time()
        session.run(None, feeds)
        times.append(time.process_time() - start)
    return {"ms": min(times) * 1e3}


def run_worker(program: str, executor: str, repeat: int) -> dict[str, Any]:
    """Time one executor on a saved nh program (and check its codes equal NumPy's)."""
    import numpy as np
    from nanoir.runtime.interpreter import compile_module
    from nanoir.runtime.nh import quantize_inputs

    import nanoir

    module = nanoir.load(program)
    x = np.load(program + ".npy")
    plan = compile_module(module)
    codes = quantize_inputs(plan.func, [x])
    if executor == "numpy":

        def call() -> object:
            return plan(*codes)
    else:
        from nanoir.grammar.onnx.integer import export_model, make_session, run_model

        try:
            session = make_session(export_model(module), threads=1)
        except nanoir.Error as e:
            return {"refused": str(e)}
        got = run_model(session, codes)
        want = plan(*codes)
        if not all(np.array_equal(a, np.asarray(b)) for a, b in zip(got, want)):
            return {"refused": "codes differ from NumPy's"}

        def call() -> object:
            return run_model(session, codes)

    for _ in range(2):
        call()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return {"ms": min(times) * 1e3}


def _worker(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        return {"refused": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--mlir", nargs="*", default=[], metavar="NAME=PATH")
    parser.add_argument("--trained", nargs="*", default=[], metavar="NAME")
    parser.add_argument("--keep", metavar="DIR", help="keep the programs in DIR")
    parser.add_argument("--compile", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--run", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--qdq", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile:
        print(json.dumps(compile_worker(*args.compile)))
        return 0
    if args.build:
        print(json.dumps(trained_worker(args.build[0], args.configs, args.build[1])))
        return 0
    if args.qdq:
        print(json.dumps(qdq_worker(args.qdq, args.repeat)))
        return 0
    if args.run:
        import torch

        torch.set_num_threads(1)
        print(json.dumps(run_worker(args.run[0], args.run[1], args.repeat)))
        return 0
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    names = args.models if args.models is not None else list(_registries())
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| model | config | nh NumPy ms | nh onnxruntime ms | ort / NumPy | ort QDQ ms |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        jobs = [(n, c, None) for n in names for c in args.configs]
        jobs += [(spec.split("=", 1)[0], "given", spec.split("=", 1)[1]) for spec in args.mlir]
        rep = ["--repeat", str(args.repeat)]
        for name in args.trained:
            folder = Path(tmp) / name
            built = _worker(["--configs", *args.configs, "--build", name, str(folder)], env)
            if "refused" in built:
                print(f"| {name} | — | — | — | build failed: {built['refused']} | — |")
                continue
            qdq = _worker([*rep, "--qdq", built["qdq"]], env)
            qdq_ms = f"{qdq['ms']:.2f}" if "ms" in qdq else qdq.get("refused", "—")
            for config in args.configs:
                jobs.append((name, config, str(folder / f"{name}-{config}.mlir"), qdq_ms))
        for job in jobs:
            name, config, given = job[:3]
            qdq_cell = job[3] if len(job) > 3 else "—"
            program = given or str(Path(tmp) / f"{name}-{config}.mlir")
            if given is None:
                built = _worker(["--compile", name, config, program], env)
                if "refused" in built:
                    print(f"| {name} | {config} | — | — | compile failed: {built['refused']} | — |")
                    continue
            elif not Path(program + ".npy").exists():
                _save_input(program)
            numpy_ms = _worker([*rep, "--run", program, "numpy"], env)
            ort = _worker([*rep, "--run", program, "ort"], env)
            if "refused" in ort:
                cells = f"{numpy_ms.get('ms', 0):.2f} | — | refused: {ort['refused']}"
            else:
                ratio = ort["ms"] / numpy_ms["ms"]
                cells = f"{numpy_ms['ms']:.2f} | {ort['ms']:.2f} | {ratio:.2f}"
            print(f"| {name} | {config} | {cells} | {qdq_cell} |", flush=True)
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


def _save_input(program: str) -> None:
    """A batch-1 N(0, 1) float input in the shape of the program's first argument."""
    import numpy as np
    from nanoir.dialects.functions import find_function

    import nanoir

    func = find_function(nanoir.load(program), None)
    shape = [1 if d < 0 else d for d in func.args[0].type.get_shape()]  # type: ignore[attr-defined]
    np.save(program + ".npy", np.random.default_rng(0).standard_normal(shape))


if __name__ == "__main__":
    sys.exit(main())
