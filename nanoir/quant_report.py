"""The per-layer quantization report: how much each fake-quant costs, measured on data.

For every ``nq.fake_quant`` of a quantized program: its bits (``8u``: unsigned codes
``0..2**b-1``; ``8u*``: unsigned on a value not known non-negative, a rule's choice, where
negative values saturate to 0) and exponent(s), the saturation
rate (the share of values clipped at the code range), the SQNR of the quantized value against
its own input (the error this fake-quant adds), and the SQNR against the same tensor in the
float program (the error accumulated up to here); and the SQNR of each program output against
the float program's. A value read only by a ReLU (or a clamp at 0) is measured as the ReLU
reads it, ``max(v, 0)`` on every side, and its bits show ``+`` (``8u+``): an error on its
negatives reaches nothing, and unsigned codes saturate them by design. The float program is the quantized one with every fake-quant removed
and every bias that quantize's bias correction changed given back its float value (the
``nq.uncorrected`` attribute the correction leaves on the constant), so "vs float" compares
against the float network quantize was given, not against the corrected biases.

A recurrent op quantized inside (``nf.recurrent``) adds a row per internal quantizer,
``<op>.gates``, ``<op>.cell`` (an LSTM's) and ``<op>.hidden`` (kind ``internal``), before the
rows of its results: every gate pre-activation, cell and hidden state of every step, layer and
direction of the integer cell, measured against the exact value it requantizes and against the
float cell's value at the same step (the float program's op on its float operands).

SQNR = 10 log10(sum(reference²) / sum((quantized - reference)²)), in dB; ``inf`` when exact.

``QuantReport.plot("report.png")`` (or ``nanoir-run --report --plot report.png``) draws the
rows as one figure: both SQNRs, the saturation rate and the exponents per layer, so the layer
that costs accuracy shows at a glance. It needs matplotlib: the ``plot`` extra
(``pip install nanoir[plot]``), imported on first use, rendering headless (Agg).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, OpResult, SSAValue

from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import Weighted, negatives_unread, non_negative_result
from nanoir.errors import batches_argument
from nanoir.layer_table import (
    PLOT_FORMATS,
    Cell,
    LayerTable,
    PlotUnavailableError,
    figure_class,
    require_matplotlib,
    write_figure,
)
from nanoir.lowering.quantize import internal_names, restore_uncorrected
from nanoir.runtime.interpreter import (
    Plan,
    compile_function,
    default_builders,
    find_function,
)
from nanoir.runtime.nf import recurrent_grids
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics import recurrent as recurrent_numerics

__all__ = [
    "PLOT_FORMATS",
    "PlotUnavailableError",
    "QuantReport",
    "ReportRow",
    "float_twin",
    "plot_report",
    "report",
    "report_figure",
    "require_matplotlib",
    "sqnr_db",
]


def sqnr_db(signal_power: float, noise_power: float) -> float:
    """``10 log10(signal / noise)``; ``inf`` for no noise (and for no signal and no noise)."""
    if noise_power == 0:
        return math.inf
    if signal_power == 0:
        return -math.inf
    return 10.0 * math.log10(signal_power / noise_power)


@dataclass
class _Acc:
    count: int = 0
    saturated: int = 0
    signal: float = 0.0
    noise: float = 0.0
    float_signal: float = 0.0
    float_noise: float = 0.0

    def add_local(
        self, x: np.ndarray, q: np.ndarray, bits: int, exp: np.ndarray, signed: bool = True
    ) -> None:
        self.count += x.size
        if bits > 1:
            e = exp.reshape(()) if exp.size == 1 else exp  # a scalar's exponent is [k]
            raw = quant.round_to_int(np.ldexp(x, np.broadcast_to(e, x.shape)), "trunc")
            lo, hi = quant.qmin(bits, signed=signed), quant.qmax(bits, signed=signed)
            self.saturated += int(((raw < lo) | (raw > hi)).sum())
        self.signal += float(np.sum(x * x))
        self.noise += float(np.sum((q - x) ** 2))

    def add_float(self, f: np.ndarray, q: np.ndarray) -> None:
        self.float_signal += float(np.sum(f * f))
        self.float_noise += float(np.sum((q - f) ** 2))


@dataclass
class ReportRow:
    """The figures of one quantized tensor."""

    name: str
    kind: str
    bits: int
    exps: list[int]
    saturation: float
    sqnr: float
    """Quantized value against its own float input (this fake-quant's error), dB."""
    sqnr_vs_float: float
    """Quantized value against the float program's tensor (error accumulated so far), dB."""
    origin: str = ""
    """Why the exponent is not the one the value's own range gives (the fake-quant's
    ``origin``: quantize chose it for a join so that the program lowers), else empty."""
    sqnr_own: float | None = None
    """With an ``origin``: the SQNR (as ``sqnr``) at the exponent the value's own range on
    this data would have given (the absmax rule), so the cost of the join shows."""
    signed: bool = True
    """False for unsigned codes (``signed = false``)."""
    known_non_negative: bool = True
    """For unsigned codes: whether the value is non-negative by construction (its producer's
    ``NonNegativeResult`` trait) or read only by ops that map negatives as 0 (a ReLU); False
    when a rule asked unsigned codes anyway."""
    after_relu: bool = False
    """The value is read only by ops that map negatives as 0 (a ReLU, a clamp with min >= 0):
    the row measures what they read, ``max(v, 0)`` of the quantized, input and float values,
    since an error on the negatives (unsigned codes saturating them, ``trunc``'s rounding
    offset moving them) reaches nothing."""

    @property
    def bits_text(self) -> str:
        """``8``, ``8u`` (unsigned) or ``8u*`` (unsigned, not known non-negative), and ``+``
        when measured after the ReLU that reads it (:attr:`after_relu`)."""
        relu = "+" if self.after_relu else ""
        if self.signed:
            return f"{self.bits}{relu}"
        return f"{self.bits}u" + ("" if self.known_non_negative else "*") + relu

    @property
    def exp_text(self) -> str:
        lo, hi = min(self.exps), max(self.exps)
        return str(lo) if lo == hi else f"{lo}..{hi} ({len(self.exps)} ch)"


def _report_cell(column: int, value: Cell) -> str:
    """The report's own forms: the saturation as a percentage, SQNRs to 0.1 dB."""
    if value is None:
        return ""
    if column == 4 and isinstance(value, float):
        return f"{100 * value:.2f}%"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


@dataclass
class QuantReport:
    """Per-tensor rows and the SQNR of each output against the float program."""

    rows: list[ReportRow] = field(default_factory=list)
    output_sqnr: list[float] = field(default_factory=list)

    def table(self) -> LayerTable:
        """The rows as nanoir's per-layer table (``nanoir.layer_table``): text, rich, JSON."""
        columns = ["tensor", "kind", "bits", "exp", "saturated", "SQNR dB", "vs float dB"]
        keys = ["tensor", "kind", "bits", "exp", "saturation", "sqnr_db", "sqnr_vs_float_db"]
        joined = any(r.origin for r in self.rows)
        if joined:  # two more columns, only when quantize chose an exponent for a join
            columns += ["own-range SQNR dB", "origin"]
            keys += ["own_range_sqnr_db", "origin"]
        rows: list[list[Cell]] = [
            [r.name, r.kind, r.bits_text, r.exp_text, r.saturation, r.sqnr, r.sqnr_vs_float]
            + ([r.sqnr_own, r.origin] if joined else [])
            for r in self.rows
        ]
        notes = []
        if any(not r.signed and not r.known_non_negative for r in self.rows):
            notes.append(
                "u* unsigned codes on a value not known non-negative: negatives saturate to 0"
            )
        if any(r.after_relu for r in self.rows):
            notes.append("+ read only by a ReLU: measured on max(value, 0), what the ReLU reads")
        for i, s in enumerate(self.output_sqnr):
            notes.append(f"output {i}: SQNR {s:.1f} dB against the float program")
        return LayerTable(columns, rows, left=2, notes=notes, cells=_report_cell, keys=keys)

    def __str__(self) -> str:
        return self.table().text()

    def figure(self, *, title: str | None = None) -> Any:
        """The report as a matplotlib ``Figure`` (see :func:`report_figure`)."""
        return report_figure(self, title=title)

    def plot(self, path: str | os.PathLike[str], *, title: str | None = None) -> None:
        """Draw the report to ``path`` (``.png``, ``.svg``, ``.pdf``; see :func:`plot_report`)."""
        plot_report(self, path, title=title)


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


def report_figure(rep: QuantReport, *, title: str | None = None) -> Any:
    """The report as a matplotlib ``Figure`` (three panels sharing the layer axis): SQNR
    against the layer's own input and against the float program (dB, ``inf`` drawn at the top
    and marked "exact"), the saturation rate (%), and the exponents (a dot per tensor, the
    range of per-channel ones as a bar). The row with the lowest SQNR against its own input
    (the fake-quant that adds the most error) is marked in red on the axis."""
    fig_cls = figure_class()
    rows = rep.rows
    n = max(len(rows), 1)
    fig = fig_cls(figsize=(max(6.0, 0.55 * n + 2.5), 7.5), layout="constrained")
    ax_sqnr, ax_sat, ax_exp = fig.subplots(3, 1, sharex=True, height_ratios=[3, 1.4, 1.6])
    xs = np.arange(len(rows))
    finite = [v for r in rows for v in (r.sqnr, r.sqnr_vs_float) if math.isfinite(v)]
    top = max(finite, default=40.0) + 10.0
    bottom = min(0.0, min(finite, default=0.0) - 5.0)
    width = 0.4
    local = [_finite_or(r.sqnr, top if r.sqnr > 0 else bottom) for r in rows]
    vs_float = [_finite_or(r.sqnr_vs_float, top if r.sqnr_vs_float > 0 else bottom) for r in rows]
    ax_sqnr.bar(xs - width / 2, local, width, label="vs its own input (this layer's error)")
    ax_sqnr.bar(xs + width / 2, vs_float, width, label="vs the float program (accumulated)")
    for x, r in zip(xs, rows):
        exact = [
            dx for dx, v in ((-width / 2, r.sqnr), (width / 2, r.sqnr_vs_float)) if v == math.inf
        ]
        if exact:  # one mark over the pair when both are exact
            ax_sqnr.text(
                x + sum(exact) / len(exact), top, "exact", ha="center", va="bottom", fontsize=7
            )
    for i, s in enumerate(rep.output_sqnr):
        if math.isfinite(s):
            ax_sqnr.axhline(s, color="gray", linestyle="--", linewidth=0.8)
            ax_sqnr.text(
                len(rows) - 0.5, s, f"output {i}: {s:.1f} dB", ha="right", va="bottom", fontsize=8
            )
    ax_sqnr.set_ylim(bottom, top + 8)
    ax_sqnr.set_ylabel("SQNR (dB)")
    ax_sqnr.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8)
    ax_sqnr.grid(axis="y", alpha=0.3)
    fig.suptitle(title or "per-layer quantization error")

    ax_sat.bar(xs, [100 * r.saturation for r in rows], 0.6, color="tab:red")
    ax_sat.set_ylabel("saturated (%)")
    ax_sat.grid(axis="y", alpha=0.3)

    for x, r in zip(xs, rows):
        lo, hi = min(r.exps), max(r.exps)
        if lo != hi:
            ax_exp.vlines(x, lo, hi, color="tab:green", linewidth=4, alpha=0.5)
        ax_exp.plot([x], [float(np.median(r.exps))], "o", color="tab:green")
    ax_exp.set_ylabel("exponent")
    ax_exp.grid(axis="y", alpha=0.3)
    ax_exp.set_xticks(xs)
    ax_exp.set_xticklabels(
        [f"{r.name} ({r.kind}, {r.bits_text}b)" for r in rows], rotation=45, ha="right", fontsize=8
    )
    ax_exp.set_xlim(-0.6, len(rows) - 0.4)
    if rows:
        worst = min(range(len(rows)), key=lambda i: rows[i].sqnr)
        if math.isfinite(rows[worst].sqnr):
            ax_exp.get_xticklabels()[worst].set_color("tab:red")
    return fig


def plot_report(
    rep: QuantReport, path: str | os.PathLike[str], *, title: str | None = None
) -> None:
    """Write ``report_figure(rep)`` to ``path`` (``.png``, ``.svg`` or ``.pdf`` by the suffix),
    atomically; a special file such as ``/dev/stdout`` is written through (PNG unless its name
    has one of those suffixes), never replaced."""
    write_figure(report_figure(rep, title=title), path)


def _name(op: FakeQuantOp, index: int) -> tuple[str, str]:
    src = op.input
    if isinstance(src, OpResult) and isinstance(src.op, nf.ConstantOp):
        name = src.op.sym_name.data if src.op.sym_name is not None else f"const{index}"
        kind = "const"
        for use in op.result.uses:
            if use.operation.has_trait(Weighted) and use.index in (1, 2):
                kind = "weight" if use.index == 1 else "bias"
        return name, kind
    return src.name_hint or f"%{index}", "act"


def float_twin(
    module: ModuleOp, function: str | None = None
) -> tuple[ModuleOp, dict[FakeQuantOp, SSAValue]]:
    """A copy of ``module`` without fake-quants and with the biases bias correction changed
    back at their float values (``restore_uncorrected``), and where each fake-quant's input went."""
    twin = module.clone()
    func = find_function(module, function)
    twin_func = find_function(twin, function)
    mapping: dict[FakeQuantOp, SSAValue] = {}
    originals = [op for op in func.walk() if isinstance(op, FakeQuantOp)]
    copies = [op for op in twin_func.walk() if isinstance(op, FakeQuantOp)]
    for orig, copy in zip(originals, copies, strict=True):
        mapping[orig] = copy.input
        copy.result.replace_all_uses_with(copy.input)
        copy.detach()
        copy.erase()
    restore_uncorrected(twin_func)
    return twin, mapping


def _own_sqnr(op: FakeQuantOp, exps: np.ndarray, xs: list[np.ndarray]) -> float:
    """SQNR of ``op`` on ``xs`` at the exponents the absmax rule gives them (per channel
    where ``exps`` is), instead of the exponents quantize chose for a join."""
    rank = xs[0].ndim
    k = exps.reshape((1,) * (rank - exps.ndim) + exps.shape) if exps.ndim < rank else exps
    axes = tuple(i for i in range(rank) if k.shape[i] == 1)
    absmax = np.max([np.max(np.abs(x), axis=axes, keepdims=True) for x in xs], axis=0)
    bits, signed = op.bits.value.data, op.is_signed
    if not signed:  # unsigned codes cover [0, max]
        absmax = np.max([np.max(np.maximum(x, 0), axis=axes, keepdims=True) for x in xs], axis=0)
    own = np.clip(quant.exp_from_absmax(absmax, bits, signed=signed), *quant.CALIB_EXP_RANGE)
    signal = sum(float(np.sum(x * x)) for x in xs)
    noise = sum(
        float(np.sum((quant.fake_quant(x, bits, own, op.rounding_mode, signed=signed) - x) ** 2))
        for x in xs
    )
    return sqnr_db(signal, noise)


def _quantized_cells(func: Operation) -> list[nf.RecurrentOp]:
    """The recurrent ops whose nq semantics is the integer cell (internal grids set and
    every operand quantized): those with internal rows."""
    return [
        op
        for op in func.walk()
        if isinstance(op, nf.RecurrentOp)
        and op.gates is not None
        and not isinstance(recurrent_grids(op), str)
    ]


def _operands(op: Operation, plan: Plan, seen: dict[SSAValue, np.ndarray]) -> list[np.ndarray]:
    """``op``'s operand values in a run of ``plan``: observed, or folded constants."""
    return [
        seen[v] if v in seen else np.asarray(plan.constants[plan.slot_of[v]], np.float64)
        for v in op.operands
    ]


def _split_states(op: nf.RecurrentOp, args: list[Any]) -> tuple[Any, Any, Any, list[Any]]:
    x, rest = args[0], list(args[1:])
    h0 = rest.pop(0) if op.h0 is not None else None
    c0 = rest.pop(0) if op.c0 is not None else None
    return x, h0, c0, rest


def _measure_cell(
    op: nf.RecurrentOp,
    q_args: list[np.ndarray],
    f_args: list[np.ndarray],
    accs: dict[str, _Acc],
) -> None:
    """Run ``op``'s integer cell on its quantized operands and torch's float cell on the
    float program's operands, pairing each internal requantization with the float value of
    the same kind at the same step (both loops run layer, direction, step in one order)."""
    floats: dict[str, list[np.ndarray]] = {k: [] for k in nf.RecurrentOp.INTERNAL}
    x, h0, c0, weights = _split_states(op, f_args)
    recurrent_numerics.run_float(
        op.layout, x, h0, c0, weights, observe=lambda kind, v: floats[kind].append(v)
    )
    grids = recurrent_grids(op)
    assert not isinstance(grids, str)
    coded = []
    for a, (exps, _) in zip(q_args, grids):
        k = exps.reshape((-1,) + (1,) * (a.ndim - 1)) if exps.size > 1 else exps.reshape(())
        coded.append(recurrent_numerics.Coded(np.rint(a * 2.0**k).astype(np.int64), exps))
    internal = {k: op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL}
    taken = dict.fromkeys(floats, 0)

    def look(kind: str, exact: np.ndarray, q: np.ndarray) -> None:
        grid = internal[kind]
        assert grid is not None
        accs[kind].add_local(exact, q, grid.bits, np.array([grid.exp]))
        f = floats[kind][taken[kind]]
        taken[kind] += 1
        accs[kind].add_float(np.broadcast_to(f, q.shape), q)

    x, h0, c0, weights = _split_states(op, coded)
    assert op.rounding is not None
    recurrent_numerics.run_codes(
        op.layout, x, h0, c0, weights, *internal.values(), op.rounding.data, observe=look
    )  # type: ignore[arg-type]


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def report(module: ModuleOp, data: Iterable[Any], *, function: str | None = None) -> QuantReport:
    """Measure every fake-quant of a quantized program on ``data`` (an iterable of batches,
    each an array or a tuple of arrays, one per input)."""
    func = find_function(module, function)
    batches_argument("data", data)
    twin, mapping = float_twin(module, function)
    twin_func = find_function(twin, function)
    builders = default_builders()
    qplan: Plan = compile_function(func, builders, np.dtype(np.float64))
    fplan: Plan = compile_function(twin_func, builders, np.dtype(np.float64))
    fqs = [op for op in func.walk() if isinstance(op, FakeQuantOp)]
    exps = {op: dense_to_numpy(op.exp).astype(np.int64) for op in fqs}
    accs = {op: _Acc() for op in fqs}
    relu_read = {op for op in fqs if negatives_unread(op.result)}
    """Fake-quants read only by a ReLU (or a clamp at 0): measured after it."""
    twin_values = {v: op for op, v in mapping.items()}
    cells = _quantized_cells(func)
    twin_cells = {
        op: twin
        for op, twin in zip(
            (c for c in func.walk() if isinstance(c, nf.RecurrentOp)),
            (c for c in twin_func.walk() if isinstance(c, nf.RecurrentOp)),
            strict=True,
        )
        if op in cells
    }
    cell_accs = {op: {k: _Acc() for k in nf.RecurrentOp.INTERNAL} for op in cells}
    q_needed = {v for op in cells for v in op.operands}
    f_needed = {v for op in cells for v in twin_cells[op].operands}
    out_signal: list[float] = []
    out_noise: list[float] = []
    seen: dict[FakeQuantOp, list[np.ndarray]] = {}
    """The inputs of fake-quants with an origin, for the SQNR at their own-range exponent."""

    for batch in data:
        items = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
        inputs = tuple(_to_numpy(x) for x in items[: len(func.body.block.args)])
        # Values waiting for the fake-quant that reads them (freed as soon as it ran).
        pending: dict[SSAValue, np.ndarray] = {
            arg: x
            for arg, x in zip(func.body.block.args, inputs)
            if any(isinstance(u.operation, FakeQuantOp) for u in arg.uses)
        }
        quantized: dict[FakeQuantOp, tuple[np.ndarray, np.ndarray]] = {}
        q_seen = {a: x for a, x in zip(func.body.block.args, inputs) if a in q_needed}
        f_seen = {a: x for a, x in zip(twin_func.body.block.args, inputs) if a in f_needed}

        def observe_q(op: Operation, results: tuple[Any, ...]) -> None:
            if isinstance(op, FakeQuantOp):
                quantized[op] = (pending[op.input], results[0])
            for r, value in zip(op.results, results):
                if any(isinstance(u.operation, FakeQuantOp) for u in r.uses):
                    pending[r] = value
                if r in q_needed:
                    q_seen[r] = np.asarray(value, np.float64)  # noqa: B023

        floats: dict[FakeQuantOp, np.ndarray] = {
            twin_values[arg]: x
            for arg, x in zip(twin_func.body.block.args, inputs)
            if arg in twin_values
        }

        def observe_f(op: Operation, results: tuple[Any, ...]) -> None:
            for r, value in zip(op.results, results):
                if r in twin_values:
                    floats[twin_values[r]] = value
                if r in f_needed:
                    f_seen[r] = np.asarray(value, np.float64)  # noqa: B023

        q_out = qplan(*inputs, observe=observe_q)
        f_out = fplan(*inputs, observe=observe_f)
        for op in cells:
            q_args = _operands(op, qplan, q_seen)
            f_args = _operands(twin_cells[op], fplan, f_seen)
            _measure_cell(op, q_args, f_args, cell_accs[op])
        for op, (x, q) in quantized.items():
            if op.origin is not None:
                seen.setdefault(op, []).append(x)
            if op in relu_read:  # what the ReLU reading it sees
                x, q = np.maximum(x, 0.0), np.maximum(q, 0.0)
            accs[op].add_local(x, q, op.bits.value.data, exps[op], op.is_signed)
            if op in floats:
                f = floats[op]
                accs[op].add_float(np.maximum(f, 0.0) if op in relu_read else f, q)
        for i, (q, f) in enumerate(zip(q_out, f_out)):
            if len(out_signal) <= i:
                out_signal.append(0.0)
                out_noise.append(0.0)
            out_signal[i] += float(np.sum(np.asarray(f) ** 2))
            out_noise[i] += float(np.sum((np.asarray(q) - np.asarray(f)) ** 2))

    # Fake-quants of constants ran while compiling: measure them from the folded values.
    for op in fqs:
        if accs[op].count == 0 and op.input in qplan.slot_of:
            slot_in, slot_out = qplan.slot_of[op.input], qplan.slot_of[op.result]
            if slot_in in qplan.constants and slot_out in qplan.constants:
                x, q = qplan.constants[slot_in], qplan.constants[slot_out]
                accs[op].add_local(x, q, op.bits.value.data, exps[op], op.is_signed)
                accs[op].add_float(x, q)
                if op.origin is not None:
                    seen[op] = [x]

    result = QuantReport()
    cell_rows: dict[Operation, list[ReportRow]] = {}
    for op in cells:  # placed before the first row of the op's results
        names = internal_names(op)
        for which, a in cell_accs[op].items():
            grid = op.internal_grid(which)
            if a.count and grid is not None:  # (an RNN has no cell; rnn_relu no gate table)
                cell_rows.setdefault(op, []).append(
                    ReportRow(
                        name=names[which],
                        kind="internal",
                        bits=grid.bits,
                        exps=[grid.exp],
                        saturation=a.saturated / a.count,
                        sqnr=sqnr_db(a.signal, a.noise),
                        sqnr_vs_float=sqnr_db(a.float_signal, a.float_noise),
                    )
                )
    for i, op in enumerate(fqs):
        source = op.input.owner
        if source in cell_rows:
            result.rows += cell_rows.pop(source)  # type: ignore[arg-type]
        name, kind = _name(op, i)
        a = accs[op]
        origin = op.origin.data if op.origin is not None else ""
        result.rows.append(
            ReportRow(
                name=name,
                kind=kind,
                bits=op.bits.value.data,
                exps=exps[op].reshape(-1).tolist(),
                saturation=a.saturated / a.count if a.count else 0.0,
                sqnr=sqnr_db(a.signal, a.noise),
                sqnr_vs_float=sqnr_db(a.float_signal, a.float_noise),
                origin=origin,
                sqnr_own=_own_sqnr(op, exps[op], seen[op]) if origin and seen.get(op) else None,
                signed=op.is_signed,
                known_non_negative=op.is_signed
                or non_negative_result(op.input)
                or negatives_unread(op.result),
                after_relu=op in relu_read,
            )
        )
    for rows in cell_rows.values():  # results not quantized: at the end
        result.rows += rows
    result.output_sqnr = [sqnr_db(s, n) for s, n in zip(out_signal, out_noise)]
    return result
