"""The benchmark's columns: what is run on a subject and measured against its float reference.

A :class:`Column` is one of three kinds:

- ``float``: the nanoir float program itself (prepared, BN folded): shows that reading the file
  (and the prepare edits) kept the network;
- ``nanoir``: ``nanoir.quantize(program, calibration, **options)`` (plus ``per_model`` options
  for a per-model rule column), the nq program run on the evaluation inputs (float64
  fake-quant semantics), and the nh program (``lower_to_hw``) run on the same inputs and
  compared with it bit for bit;
- ``ort``: onnxruntime's ``quantize_static`` (``ort_baseline``) of the float ONNX file
  nanoir reads (``options={"file": "shipped"}``: of the file as shipped, where they differ).

:func:`run_column` gives a :class:`Cell`: the task measures, the CPU seconds of quantizing,
nq == nh, and, where the output collapses (constant, or SQNR below :data:`COLLAPSE_DB`) or on
request, where the SQNR against float is lost along the network (``nanoir.report``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trained.models import Subject, batches
from trained.ort_baseline import float_ops, ort_quantize, run_file

__all__ = ["COLLAPSE_DB", "Cell", "Column", "LayerLoss", "run_column"]

COLLAPSE_DB = 6.0
"""An output below this SQNR against float (or constant) has collapsed (issue 30's floor)."""

REPORT_INPUTS = 4
"""Evaluation inputs ``nanoir.report`` measures on (the per-layer figures)."""


@dataclass(frozen=True)
class Column:
    name: str
    """The command-line key (``--columns defaults,recommended``)."""
    title: str
    kind: str = "nanoir"
    options: Mapping[str, Any] = field(default_factory=dict)
    """``nanoir.quantize`` options, the same for every model."""
    per_model: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Extra options by model name (a per-model rule set), over ``options``."""


@dataclass
class LayerLoss:
    """Where the SQNR against float is lost, from ``nanoir.report`` rows in program order."""

    path: list[tuple[str, float]]
    """Activation rows (name, SQNR against float), sampled along the network."""
    fall_row: str
    fall_db: float
    """The largest fall below every earlier activation's SQNR against float, and where."""
    local_row: str
    local_db: float
    """The row whose own quantizer loses most (lowest SQNR against its own input)."""
    output_db: list[float]


@dataclass
class Cell:
    measures: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None
    """CPU seconds of quantizing (nanoir.quantize or quantize_static)."""
    nq_nh: str = ""
    """nanoir columns: ``yes`` (bit for bit, with the number of values), ``NO``, or why not."""
    error: str = ""
    """Why the column could not be measured (a nanoir.Error from quantize, say)."""
    layers: LayerLoss | None = None
    notes: list[str] = field(default_factory=list)


def nanoir_outputs(program: Any, x: np.ndarray, size: int) -> list[np.ndarray]:
    """Every output of ``program`` on ``x``, run ``size`` inputs at a time, concatenated."""
    import nanoir

    runs = [[np.asarray(y) for y in nanoir.run(program, b)] for b in batches(x, size)]
    return [np.concatenate([r[i] for r in runs]) for i in range(len(runs[0]))]


def nq_equals_nh(program: Any, subject: Subject, outputs: list[np.ndarray]) -> str:
    """Lower ``program`` (nq) to nh, run it on every evaluation input, and compare with the nq
    ``outputs`` bit for bit."""
    import nanoir

    try:
        hw = nanoir.lower_to_hw(program.clone())
    except nanoir.Error as error:
        return "lower_to_hw refused: " + str(error).splitlines()[0][:160]
    got = nanoir_outputs(hw, subject.evaluation, subject.batch)
    same = all(np.array_equal(a, b) for a, b in zip(outputs, got))
    values = sum(a.size for a in outputs)
    return f"yes ({values:,} values)" if same else "NO"


def layer_loss(program: Any, subject: Subject) -> LayerLoss:
    import nanoir

    data = batches(subject.evaluation[:REPORT_INPUTS], subject.batch)
    report = nanoir.report(program, data)
    acts = [r for r in report.rows if r.kind == "act" and not math.isnan(r.sqnr_vs_float)]
    fall, fall_row = 0.0, ""
    floor = math.inf
    for row in acts:
        if floor - row.sqnr_vs_float > fall and math.isfinite(floor):
            fall, fall_row = floor - row.sqnr_vs_float, row.name
        floor = min(floor, row.sqnr_vs_float)
    step = max(1, len(acts) // 12)
    path = [(r.name, r.sqnr_vs_float) for r in acts[::step]]
    if acts and path[-1][0] != acts[-1].name:
        path.append((acts[-1].name, acts[-1].sqnr_vs_float))
    local = min(report.rows, key=lambda r: r.sqnr)
    return LayerLoss(
        path, fall_row, fall, f"{local.name} ({local.kind})", local.sqnr, report.output_sqnr
    )


def collapsed(measures: Mapping[str, float]) -> bool:
    return bool(measures.get("constant")) or measures.get("SQNR dB", math.inf) < COLLAPSE_DB


def run_column(
    model: str,
    subject: Subject,
    column: Column,
    measure: Callable[[list[np.ndarray], list[np.ndarray]], dict[str, float]],
    work: Path,
    *,
    layers: bool = False,
) -> Cell:
    """Measure ``column`` on ``subject`` (see the module); ``layers``: the per-layer figures
    for every quantized nanoir column, not only the collapsed ones."""
    import nanoir

    cell = Cell()
    if column.kind == "float":
        outputs = nanoir_outputs(subject.program, subject.evaluation, subject.batch)
        cell.measures = measure(subject.reference, outputs)
        return cell
    if column.kind == "ort":
        source, batch = subject.onnx_float, subject.batch
        if column.options.get("file") == "shipped":
            if subject.onnx_shipped is None:
                cell.error = "n/a (the export is the file)"
                return cell
            source, batch = subject.onnx_shipped, 16
        try:
            qdq, cell.seconds = ort_quantize(
                source, batches(subject.calibration, batch), work / f"ort-{column.name}"
            )
        except Exception as error:  # onnxruntime raises anything; the cell says what
            cell.error = f"quantize_static failed: {type(error).__name__}: {error}"[:300]
            return cell
        outputs = run_file(qdq, batches(subject.evaluation, batch))
        cell.measures = measure(subject.reference, outputs)
        left = float_ops(qdq)
        if left:
            cell.notes.append("left float by onnxruntime: " + ", ".join(left))
        return cell
    options = dict(column.options) | dict(column.per_model.get(model, {}))
    program = subject.program.clone()
    start = time.process_time()
    try:
        nanoir.quantize(program, batches(subject.calibration, subject.batch), **options)
    except nanoir.Error as error:
        cell.error = "quantize refused: " + str(error).splitlines()[0][:200]
        return cell
    cell.seconds = time.process_time() - start
    outputs = nanoir_outputs(program, subject.evaluation, subject.batch)
    cell.measures = measure(subject.reference, outputs)
    cell.nq_nh = nq_equals_nh(program, subject, outputs)
    if layers or collapsed(cell.measures):
        cell.layers = layer_loss(program, subject)
    return cell
