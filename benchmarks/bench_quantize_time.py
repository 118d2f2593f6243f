"""Where ``nanoir.quantize``'s time goes on PaddleOCR's PP-OCRv4 recognizer (issue 30 §8).

The recognizer as ``bench_trained.py`` reads it (``rapidocr-onnxruntime==1.4.4``'s
``ch_PP-OCRv4_rec_infer.onnx``, prepared for a static 1x3x48x320 input with its written-out
LayerNorms as ``LayerNormalization``), 12 calibration text lines (``paddle_inputs``, the
calibration seed), one batch each. Each configuration runs in its own worker process, one
thread (OMP/OpenBLAS/MKL and torch), after one untimed ``nanoir.load``; times are the
worker's CPU seconds (``time.process_time``: other load on the machine does not count), per
stage as quantize calls them (the stage functions are wrapped by name; a stage that does not
exist in this version of nanoir shows "—"):

- ``calibrate``: the float program on every batch, twice for ``mse`` (absmax, then the
  candidates' squared errors; since 56cc7c4 the second run takes the convs' outputs the first
  one kept), and the exponents; ``candidate_sse``: the part of it in the ``mse`` candidate
  search;
- ``bias correction``; ``check``: the quantized program against the float outputs (§3).

Each row also gives the program's SHA-256 (of its printed text), so that two versions of
nanoir can be shown to give the same program. Configurations: ``--calibrators``
(``absmax,mse``; ``mse`` is the default), other options at their defaults.

    python benchmarks/bench_quantize_time.py [--calibrators absmax,mse] [--repeat 1]
        [--baseline] [--cache DIR] [--out FILE]

``--baseline`` adds mse with the candidate bounds off (``surviving_candidates`` keeping every
candidate, as before they existed): the same run's baseline, and whether the program is the
same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SHAPE = (1, 3, 48, 320)
CALIBRATION_INPUTS = 12
STAGES = (
    ("calibrate", "nanoir.lowering.quantize.driver", "calibrate"),
    ("candidate_sse", "nanoir.lowering.quantize.calibration", "candidate_sse"),
    ("bias correction", "nanoir.lowering.quantize.driver", "correct_biases"),
    ("check", "nanoir.lowering.quantize.driver", "check_after_quantizing"),
)


def _timed(times: dict[str, float], label: str, fn: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            times[label] = times.get(label, 0.0) + time.process_time() - start

    return wrapped


def worker(path: str, calibration: str, calibrator: str, bounds: str) -> dict[str, Any]:
    import importlib

    import numpy as np
    import torch

    torch.set_num_threads(1)
    import contextlib

    from nanoir.lowering.quantize import full_mse_search

    import nanoir

    # the same-run baseline: every candidate's error computed, as before the bounds
    search = full_mse_search if bounds == "off" else contextlib.nullcontext

    times: dict[str, float] = {}
    for label, module_name, name in STAGES:
        module = importlib.import_module(module_name)
        if hasattr(module, name):
            setattr(module, name, _timed(times, label, getattr(module, name)))
    lines = np.load(calibration)
    batches = [lines[i : i + 1] for i in range(len(lines))]
    nanoir.load(path)  # untimed: first reading (imports, caches)
    program = nanoir.load(path)
    start = time.process_time()
    with search():
        nanoir.quantize(program, batches, calibrator=calibrator, progress=False)
    total = time.process_time() - start
    text = str(program)
    return {
        "calibrator": calibrator + ("" if bounds == "on" else ", every candidate"),
        "seconds": total,
        "stages": times,
        "program": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def run_worker(path: Path, calibration: Path, calibrator: str, bounds: str) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    env["MKL_NUM_THREADS"] = "1"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(path), str(calibration)]
    out = subprocess.run([*cmd, calibrator, bounds], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"worker {calibrator} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _git_commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrators", default="absmax,mse")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration (best)")
    parser.add_argument("--cache", type=Path, default=None, help="wheels, weights")
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also run mse with every candidate's error computed (no bounds): same program?",
    )
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0

    import numpy as np
    from trained.fetch import default_cache, fetch
    from trained.models import CALIBRATION_SEED, PADDLE_FILES, paddle_inputs
    from trained.prepare import prepare

    file, shape = PADDLE_FILES["rec"]
    source = fetch("rapidocr", args.cache or default_cache())[file]
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        prepared = prepare(
            source, shape, Path(folder), enabled=("static-shape", "layernorm-as-op"), probe=False
        )
        calibration = Path(folder) / "calibration.npy"
        lines = paddle_inputs("rec", CALIBRATION_INPUTS, CALIBRATION_SEED)
        np.save(calibration, lines.astype(np.float32))
        configurations = [(c, "on") for c in args.calibrators.split(",") if c]
        if args.baseline:
            configurations.append(("mse", "off"))
        for calibrator, bounds in configurations:
            runs = [
                run_worker(prepared.path, calibration, calibrator, bounds)
                for _ in range(args.repeat)
            ]
            best = min(runs, key=lambda r: r["seconds"])
            rows.append(best)
            print(f"# {best['calibrator']}: {best['seconds']:.2f} s", file=sys.stderr)
    load_after = os.getloadavg()

    lines_out = [
        f"Command: `python benchmarks/bench_quantize_time.py {' '.join(sys.argv[1:])}`".rstrip(),
        f"nanoir {_git_commit()}; load average before {load_before[0]:.2f}, "
        f"after {load_after[0]:.2f} (1 min); CPU seconds, one thread, best of {args.repeat}.",
        "",
        "| calibrator | quantize | " + " | ".join(s[0] for s in STAGES) + " | program |",
        "|---|---:|" + "---:|" * len(STAGES) + "---|",
    ]
    for row in rows:
        cells = [f"{row['stages'][s[0]]:.1f}" if s[0] in row["stages"] else "—" for s in STAGES]
        lines_out.append(
            f"| {row['calibrator']} | {row['seconds']:.1f} | "
            + " | ".join(cells)
            + f" | `{row['program']}` |"
        )
    by = {r["calibrator"]: r for r in rows}
    if "absmax" in by and "mse" in by:
        ratio = by["mse"]["seconds"] / by["absmax"]["seconds"]
        lines_out += ["", f"mse / absmax, same run: {ratio:.2f}x"]
    if "mse" in by and "mse, every candidate" in by:
        old, new = by["mse, every candidate"], by["mse"]
        same = "the same program" if old["program"] == new["program"] else "DIFFERENT programs"
        search = old["stages"].get("candidate_sse", 0.0) / max(
            new["stages"].get("candidate_sse", 0.0), 1e-9
        )
        lines_out.append(
            "mse, every candidate / mse with bounds, same run: "
            f"{old['seconds'] / new['seconds']:.2f}x quantize, {search:.2f}x candidate_sse; " + same
        )
    text = "\n".join(lines_out)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
