"""Compile time per stage of ``compile_model``, per nf op, on networks of 100 to 10,000 ops.

Networks (``compile_models.py``): generated chains, residual stacks and dense concatenations
of about 100, 1,000 and 10,000 nf ops (4 channels, 8x8 input: arithmetic is negligible, so
the time is the compiler's); DenseNet-121 (growth 32, blocks 6-12-24-16, 64x64 input, BN
with torch's initial statistics: with random ones lower-to-hw refuses a BN after a concat);
RepVGG-A0 (64x64, the three-branch training form, random BN statistics: its identity-branch
BNs become checked integer affines); ResNet-18 (``nanoir.testing``, 224x224). Each network
is compiled in its own worker process, one thread (OMP/OpenBLAS/MKL and torch), torch warmed
up by exporting a small model first. Stages, timed one after the other as ``compile_model``
runs them:

- ``export``: ``torch.export`` + ``run_decompositions`` (torch's work, not nanoir's);
- ``import``: the rest of ``from_torch`` (ExportedProgram -> nf);
- ``fold-bn``; ``quantize`` (``--calibrator``: absmax by default, as issue 20 specifies this
  benchmark, or mse, quantize's default; with the default bias correction; one calibration
  batch of 1);
  ``lower-to-hw``;
- ``stream-plan`` (``mem_dim`` 2, defaults).

The stages run with the cyclic garbage collector off, as ``compile_model`` runs them
(``nanoir.pipeline.paused_gc``); ``--keep-gc`` leaves it on, as before that change.

Times are the worker's CPU time (``time.process_time``: one thread, so the machine's other
load does not count), except the last column of the first table, torch -> nh wall-clock
seconds (export to lower-to-hw). Columns: nf ops (the function's ops after import, constants
and the return excluded), seconds per stage and microseconds per op per stage; the last table gives, per kind and
stage, the time per op at the largest size over the time per op at the smallest (linear
growth: about 1; the target is within 2x). ``--profile DIR`` writes a cProfile of each
worker to ``DIR/<name>.prof``.

    python benchmarks/bench_compile.py [--sizes 100,1000,10000] [--kinds chain,residual,dense]
        [--models DenseNet121,RepVGGA0,ResNet18] [--calibrator absmax|mse] [--profile DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

EXPORT_LIMIT = 1000
"""Generated networks larger than this are built from a repeated block (see ``worker``)."""
REPEATED_BLOCK = 100
"""The nf ops of that block."""
STAGES = ("export", "import", "fold-bn", "quantize", "lower-to-hw", "stream-plan")
NANOIR_STAGES = STAGES[1:]


def build(name: str) -> tuple[Any, Any]:
    """The model and its example input (batch 1) for a worker's network name."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compile_models import DenseNet121, RepVGGA0, generated

    if name == "DenseNet121":
        torch.manual_seed(0)
        return DenseNet121().eval(), torch.randn(1, 3, 64, 64)
    if name == "RepVGGA0":
        from nanoir.testing import randomize_batch_norm

        torch.manual_seed(0)
        model = randomize_batch_norm(RepVGGA0()).eval()
        return model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    if name == "ResNet18":
        from nanoir.testing import make_test_model

        model = make_test_model("ResNet18")
        return model, torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    kind, ops = name.split(":")
    model = generated(kind, int(ops))
    return model, torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))


def repeat_body(module: Any, times: int) -> None:
    """Repeat the function's body ``times`` times in place, each copy reading the previous
    one's result (the generated networks map ``[N, 4, 8, 8]`` to the same shape); constants
    are copied under new names (``r<i>.<name>``)."""
    from nanoir.dialects import nf
    from xdsl.dialects.builtin import StringAttr
    from xdsl.dialects.func import FuncOp

    func = next(op for op in module.body.block.ops if isinstance(op, FuncOp))
    block = func.body.block
    ret = block.last_op
    body = [op for op in block.ops if op is not ret]
    (out,) = ret.operands
    current = out
    for r in range(1, times):
        mapping = {block.args[0]: current}
        for op in body:
            new = op.clone(value_mapper=mapping)
            if isinstance(new, nf.ConstantOp) and new.sym_name is not None:
                new.properties["name"] = StringAttr(f"r{r}.{new.sym_name.data}")
            block.insert_op_before(new, ret)
        current = mapping[out]
    ret.operands = (current,)


def worker(
    name: str, profile: str | None, keep_gc: bool = False, calibrator: str = "absmax"
) -> dict[str, Any]:
    import cProfile

    import torch

    torch.set_num_threads(1)
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.lower_to_hw import lower_to_hw
    from nanoir.lowering.quantize import quantize
    from nanoir.lowering.stream_plan import StreamPlanPass
    from xdsl.dialects.func import FuncOp

    import nanoir
    from nanoir.frontend.torch_import import export, import_program

    if not keep_gc:
        gc.disable()  # as compile_model's stages run (nanoir.pipeline.paused_gc)
    # Warm torch up (first export, dispatcher caches) on a small model.
    warm, wx = build("chain:10")
    import_program(export(warm, (wx,)))
    kind, _, size = name.partition(":")
    repeats = int(size) // REPEATED_BLOCK if size and int(size) > EXPORT_LIMIT else 1
    times: dict[str, float] = {}
    wall: dict[str, float] = {}
    prof = cProfile.Profile() if profile else None

    def stage(label: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if prof:
            prof.enable()
        start, cpu = time.perf_counter(), time.process_time()
        out = fn(*args, **kwargs)
        times[label] = time.process_time() - cpu
        wall[label] = time.perf_counter() - start
        if prof:
            prof.disable()
        return out

    if repeats > 1:
        # torch.export is quadratic in the parameter count (run_decompositions rebuilds a
        # dict of every parameter per parameter): the large networks repeat an imported
        # block at the nf level instead, and their export and import are not timed.
        model, x = build(f"{kind}:{REPEATED_BLOCK}")
        calibration = [x.numpy()]
        module = import_program(export(model, (x,)))
        repeat_body(module, repeats)
        module.verify()
    else:
        model, x = build(name)
        calibration = [x.numpy()]
        program = stage("export", export, model, (x,))
        module = stage("import", import_program, program)
    func = next(op for op in module.body.block.ops if isinstance(op, FuncOp))
    ops = sum(op.name not in ("nf.constant", "func.return") for op in func.body.block.ops)
    stage("fold-bn", FoldBnPass().apply, nanoir.make_context(), module)
    stage("quantize", quantize, module, calibration, calibrator=calibrator)
    stage("lower-to-hw", lower_to_hw, module)
    stage("stream-plan", StreamPlanPass().apply, nanoir.make_context(), module)
    if prof and profile:
        prof.dump_stats(profile)
    gc.enable()
    return {"name": name, "ops": ops, "times": times, "wall": wall}


def run_worker(
    name: str, profile_dir: str | None, keep_gc: bool, calibrator: str = "absmax"
) -> dict[str, Any]:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name]
    if keep_gc:
        cmd.append("--keep-gc")
    cmd += ["--calibrator", calibrator]
    if profile_dir:
        safe = name.replace(":", "_")
        cmd += ["--profile-file", os.path.join(profile_dir, f"{safe}.prof")]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"worker {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--kinds", default="chain,residual,dense")
    parser.add_argument("--models", default="DenseNet121,RepVGGA0,ResNet18")
    parser.add_argument("--profile", metavar="DIR", help="write a cProfile per worker")
    parser.add_argument("--keep-gc", action="store_true", help="leave the garbage collector on")
    parser.add_argument("--calibrator", default="absmax", choices=("absmax", "mse"))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--profile-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.profile_file, args.keep_gc, args.calibrator)))
        return 0
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    kinds = [k for k in args.kinds.split(",") if k]
    names = [f"{k}:{n}" for k in kinds for n in sizes]
    names += [m for m in args.models.split(",") if m]
    rows = []
    for name in names:
        row = run_worker(name, args.profile, args.keep_gc, args.calibrator)
        rows.append(row)
        t = row["times"]
        print(f"# {name}: {row['ops']} ops, " + ", ".join(f"{s} {t[s]:.2f}s" for s in t))
        sys.stdout.flush()

    print()
    head = " | ".join(STAGES)
    print(f"| network | nf ops | {head} | nanoir total | torch -> nh, wall |")
    print("|---|---:|" + "---:|" * (len(STAGES) + 2))
    for row in rows:
        t = row["times"]
        cells = " | ".join(f"{t[s]:.2f}" if s in t else "—" for s in STAGES)
        nanoir_total = sum(t.get(s, 0.0) for s in NANOIR_STAGES)
        w = row["wall"]
        to_nh = f"{sum(w[s] for s in STAGES if s != 'stream-plan'):.2f}" if "export" in w else "—"
        print(f"| {row['name']} | {row['ops']} | {cells} | {nanoir_total:.2f} | {to_nh} |")

    print()
    print(f"| network | µs per op: {head} |")
    print("|---|" + "---:|" * len(STAGES))
    for row in rows:
        t = row["times"]
        cells = " | ".join(f"{1e6 * t[s] / row['ops']:.0f}" if s in t else "—" for s in STAGES)
        print(f"| {row['name']} | {cells} |")

    if len(sizes) > 1:
        print()
        print(f"| kind: time per op, largest timed size / {sizes[0]} ops | {head} |")
        print("|---|" + "---:|" * len(STAGES))
        by_name = {row["name"]: row for row in rows}
        for kind in kinds:
            small = by_name[f"{kind}:{sizes[0]}"]
            cells = []
            for s in STAGES:
                large = [
                    by_name[f"{kind}:{n}"] for n in sizes if s in by_name[f"{kind}:{n}"]["times"]
                ]
                per_op = [r["times"][s] / r["ops"] for r in (small, large[-1])]
                cells.append(f"{per_op[1] / per_op[0]:.2f} ({large[-1]['ops']})")
            print(f"| {kind} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
