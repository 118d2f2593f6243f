"""The check at the end of quantize: no output is destroyed without a word (issue 30 §3).

A quantized network can compute nothing useful and still quantize without an error: truncation
shrinks every gated product (hardswish, SE, SiLU) a little, the shrink compounds along the
network, and an output ends constant or at 0 dB against float, which only ``nanoir.report``
showed. So quantize runs the quantized program once on each calibration batch and compares its
outputs with the float program's, which calibration already computed (``calibrate``'s
``outputs``: no extra float run). An output is *collapsed* when, over all calibration batches,

- it is all zero while the float output is not;
- every input gives the same output while the float outputs differ by at least one step of
  the output's grid (a classifier answering ``[0.5, 0.5]`` to everything);
- or its SQNR against float is below ``min_sqnr`` (default :data:`MIN_SQNR_DB`, 6 dB: the
  error has a quarter of the signal's power).

Each collapsed output gives one :class:`~nanoir.errors.QuantizationWarning` (``strict``: one
:class:`QuantizeError`) naming the output, its SQNR, the layer where SQNR against float falls
most (found only then: the float program runs once more beside the quantized one, op by op, as
``nanoir.report`` measures it), and what to try. Silent networks pay one quantized run of the
calibration data.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import negatives_unread
from nanoir.lowering.quantize.bias_correction import restore_uncorrected
from nanoir.lowering.quantize.calibration import as_batches
from nanoir.lowering.quantize.rules import QuantizeError
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.interpreter import compile_function, default_builders
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, OpResult, SSAValue

from nanoir.errors import ArgumentError, QuantizationWarning, bool_argument

__all__ = [
    "MIN_SQNR_DB",
    "Collapse",
    "check_after_quantizing",
    "check_quantized",
    "finite_energies",
    "float_outputs",
    "min_sqnr_argument",
    "report_collapses",
]

MIN_SQNR_DB = 6.0
"""Default least SQNR (dB) of a quantized output against float before quantize warns."""

LOCATE_BATCHES = 4
"""Where an output collapsed, the layer where SQNR falls is measured on this many of the
calibration batches (the first ones): locating runs the float and the quantized program side
by side, two more runs per batch; the report measures on as many inputs."""

Batch = Sequence[np.ndarray]
Outputs = list[np.ndarray]

_MOVEMENT = (nf.ReshapeOp, nf.TransposeOp, nf.PadOp, nf.UpsampleNearestOp)
"""Data movement between an output and the fake-quant that sets its grid."""


def min_sqnr_argument(value: object) -> float:
    """``min_sqnr`` as a float (dB; ``-inf`` turns the SQNR test off), else ArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ArgumentError(f"quantize: min_sqnr must be a number of dB, got {value!r}")
    if math.isnan(value) or value == math.inf:
        raise ArgumentError(f"quantize: min_sqnr must be a number of dB below inf, got {value}")
    return float(value)


@dataclass
class _Output:
    """What the check gathers about one output over the calibration batches."""

    signal: float = 0.0
    noise: float = 0.0
    q_zero: bool = True
    f_zero: bool = True
    q_first: np.ndarray | None = None
    q_same: bool = True
    f_lo: np.ndarray | None = None
    f_hi: np.ndarray | None = None
    samples: int = 0

    def add(self, q: np.ndarray, f: np.ndarray) -> None:
        finite = np.isfinite(q) & np.isfinite(f)
        qf, ff = np.where(finite, q, 0.0), np.where(finite, f, 0.0)
        self.signal += float(np.sum(ff * ff))
        self.noise += float(np.sum((qf - ff) ** 2))
        self.q_zero &= not qf.any()
        self.f_zero &= not ff.any()
        rows_q = q.reshape(1, -1) if q.ndim == 0 else q.reshape(q.shape[0], -1)
        rows_f = f.reshape(1, -1) if f.ndim == 0 else f.reshape(f.shape[0], -1)
        if self.q_first is None:
            self.q_first = rows_q[0].copy()
            self.f_lo, self.f_hi = rows_f.min(axis=0), rows_f.max(axis=0)
        elif self.q_first.shape != rows_q.shape[1:] or self.f_lo.shape != rows_f.shape[1:]:
            self.q_same = False  # rows of another size: no sample-wise comparison
            return
        else:
            self.f_lo = np.minimum(self.f_lo, rows_f.min(axis=0))
            self.f_hi = np.maximum(self.f_hi, rows_f.max(axis=0))
        self.q_same &= bool(np.array_equal(rows_q, np.broadcast_to(self.q_first, rows_q.shape)))
        self.samples += rows_q.shape[0]

    @property
    def sqnr(self) -> float:
        return sqnr_db(self.signal, self.noise)

    def float_spread(self) -> float:
        if self.f_lo is None or self.f_hi is None or not self.f_lo.size:
            return 0.0
        spread = np.where(np.isfinite(self.f_hi - self.f_lo), self.f_hi - self.f_lo, 0.0)
        return float(spread.max())


@dataclass
class Collapse:
    """One collapsed output: what the warning says."""

    index: int
    name: str
    sqnr: float
    how: str
    """``all zero``, ``constant``, ``low SQNR``, or ``fails`` (the quantized program cannot run
    on a calibration batch: ``notes`` says why)."""
    layer: str | None = None
    layer_op: str | None = None
    layer_sqnr: float | None = None
    upstream_sqnr: float | None = None
    notes: list[str] = field(default_factory=list)

    def message(self, min_sqnr: float) -> str:
        sqnr = f"{self.sqnr:.1f} dB"
        if self.how == "all zero":
            what = f"is all zero on the calibration data (SQNR {sqnr} against float)"
        elif self.how == "constant":
            what = (
                "is the same for every calibration input while the float output varies "
                f"(SQNR {sqnr} against float)"
            )
        else:
            what = f"has SQNR {sqnr} against float on the calibration data (below {min_sqnr:g} dB)"
        text = f"quantize: output {self.name} {what}"
        tensor = "that tensor"
        if self.layer is not None:
            assert self.layer_sqnr is not None
            if self.upstream_sqnr is None:
                text += (
                    f"; SQNR against float is {_db(self.layer_sqnr)} already at {self.layer} "
                    f"({self.layer_op}), the first quantized tensor on its path"
                )
            else:
                text += (
                    f"; SQNR against float falls most at {self.layer} ({self.layer_op}): "
                    f"{_db(self.upstream_sqnr)} -> {_db(self.layer_sqnr)}"
                )
            tensor = f"'act@^{re.escape(self.layer)}$=16'"
        return (
            text + f'. Try rounding="half_even" if the hardware rounds, a rule giving {tensor} '
            "more bits, or quantization-aware training (nanoir.qat)"
        )


def sqnr_db(signal: float, noise: float) -> float:
    """``10 log10(signal / noise)``: ``inf`` without noise, ``-inf`` without signal."""
    if noise == 0:
        return math.inf
    return -math.inf if signal == 0 else 10.0 * math.log10(signal / noise)


def _db(x: float) -> str:
    return "exact" if x == math.inf else f"{x:.1f} dB"


def _output_name(value: SSAValue, index: int) -> str:
    return f"{index} (%{value.name_hint})" if value.name_hint else str(index)


def _grid_step(value: SSAValue) -> float:
    """The coarsest step of the grid ``value`` (an output) is on; 0 when no fake-quant sets it."""
    while isinstance(value, OpResult) and isinstance(value.op, _MOVEMENT):
        value = value.op.operands[0]
    if not (isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp)):
        return 0.0
    fq = value.op
    k = dense_to_numpy(fq.exp).astype(np.int64)
    if fq.bits.value.data == 1:  # codes +-2**k
        return float(2.0 ** (int(k.max()) + 1))
    return float(2.0 ** -int(k.min()))


def float_outputs(func: FuncOp, batches: Sequence[Batch]) -> list[Outputs]:
    """The float program's outputs on ``batches``, for a quantized ``func`` whose calibration
    did not run the float program (every activation exponent imported)."""
    twin, _ = _float_twin(func)
    plan = compile_function(twin, default_builders(), np.dtype(np.float64))
    return [[np.asarray(y, np.float64) for y in plan(*batch)] for batch in batches]


def check_quantized(
    func: FuncOp,
    batches: Sequence[Batch],
    floats: Sequence[Outputs],
    min_sqnr: float = MIN_SQNR_DB,
) -> list[Collapse]:
    """The collapsed outputs of the quantized ``func`` on ``batches`` against ``floats`` (the
    float program's outputs on the same batches, in order). A batch the quantized program
    cannot run on gives one collapse, ``fails``, with the :class:`ExecutionError`'s message."""
    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    outputs = list(ret.operands)
    plan = compile_function(func, default_builders(), np.dtype(np.float64))
    gathered = [_Output() for _ in outputs]
    for b, (batch, f_out) in enumerate(zip(batches, floats, strict=True)):
        try:
            q_out = plan(*batch)
        except ExecutionError as e:
            return [Collapse(-1, "", -math.inf, "fails", notes=[f"batch {b}: {e}"])]
        for g, q, f in zip(gathered, q_out, f_out, strict=True):
            g.add(np.asarray(q, np.float64), np.asarray(f, np.float64))
    found = []
    for i, (value, g) in enumerate(zip(outputs, gathered)):
        how = None
        if g.q_zero and not g.f_zero:
            how = "all zero"
        elif g.q_same and g.samples >= 2 and g.float_spread() >= max(_grid_step(value), 1e-300):
            how = "constant"
        elif g.sqnr < min_sqnr:
            how = "low SQNR"
        if how is not None:
            found.append(Collapse(i, _output_name(value, i), g.sqnr, how))
    if found:
        _locate(func, batches, [outputs[c.index] for c in found], found)
    return found


def _float_twin(func: FuncOp) -> tuple[FuncOp, dict[FakeQuantOp, SSAValue]]:
    """A copy of ``func`` without fake-quants and with corrected biases at their float values
    (``restore_uncorrected``), and the twin's value at each fake-quant's input."""
    twin = func.clone()
    pairs = zip(
        [op for op in func.walk() if isinstance(op, FakeQuantOp)],
        [op for op in twin.walk() if isinstance(op, FakeQuantOp)],
        strict=True,
    )
    mapping: dict[FakeQuantOp, SSAValue] = {}
    for orig, copy in pairs:
        mapping[orig] = copy.input
        copy.result.replace_all_uses_with(copy.input)
        copy.detach()
        copy.erase()
    restore_uncorrected(twin)
    return twin, mapping


def _is_activation(fq: FakeQuantOp) -> bool:
    return not (isinstance(fq.input, OpResult) and isinstance(fq.input.op, nf.ConstantOp))


def _layer_name(fq: FakeQuantOp, index: int) -> str:
    return fq.input.name_hint or fq.result.name_hint or f"fake-quant {index}"


def _locate(
    func: FuncOp, batches: Sequence[Batch], outputs: list[SSAValue], found: list[Collapse]
) -> None:
    """For each collapsed output, the activation fake-quant upstream of it whose SQNR against
    float (on the first :data:`LOCATE_BATCHES` batches) is lowest below that of the nearest quantized activations it reads (the first one
    on ties; one that reads none, a program input's, falls by 0: only if nothing falls
    after it is it named)."""
    acts = [op for op in func.walk() if isinstance(op, FakeQuantOp) and _is_activation(op)]
    if not acts:
        return
    twin, mapping = _float_twin(func)
    fplan = compile_function(twin, default_builders(), np.dtype(np.float64))
    qplan = compile_function(func, default_builders(), np.dtype(np.float64))
    wanted: dict[SSAValue, list[FakeQuantOp]] = {}
    for op in acts:
        wanted.setdefault(mapping[op], []).append(op)
    twin_args = list(twin.body.block.args)
    relu_read = {op for op in acts if negatives_unread(op.result)}
    signal = dict.fromkeys(acts, 0.0)
    noise = dict.fromkeys(acts, 0.0)
    is_act = set(acts)
    for batch in batches[:LOCATE_BATCHES]:
        seen: dict[FakeQuantOp, np.ndarray] = {}
        for arg, x in zip(twin_args, batch):
            for op in wanted.get(arg, ()):
                seen[op] = np.asarray(x, np.float64)

        def observe_f(op: Operation, results: tuple[object, ...]) -> None:
            for r, value in zip(op.results, results):
                for fq in wanted.get(r, ()):
                    seen[fq] = np.asarray(value, np.float64)  # noqa: B023

        def observe_q(op: Operation, results: tuple[object, ...]) -> None:
            if op in is_act:
                assert isinstance(op, FakeQuantOp)
                f, q = seen.pop(op), np.asarray(results[0], np.float64)  # noqa: B023
                if op in relu_read:
                    f, q = np.maximum(f, 0.0), np.maximum(q, 0.0)
                s, n = finite_energies(f, q)
                signal[op] += s
                noise[op] += n

        try:
            fplan(*batch, observe=observe_f)
            qplan(*batch, observe=observe_q)
        except ExecutionError:
            return
    sqnr = {op: sqnr_db(signal[op], noise[op]) for op in acts}
    upstream = _nearest_upstream(func, is_act)
    order = {op: i for i, op in enumerate(acts)}
    for collapse, output in zip(found, outputs):
        ancestors = _ancestors(output, is_act)
        chosen, drop = None, -math.inf
        for op in acts:  # program order: the first on ties
            if op not in ancestors:
                continue
            ups = upstream.get(op.input, frozenset())
            above = min((sqnr[u] for u in ups), default=sqnr[op])
            d = min(above, 300.0) - max(sqnr[op], -300.0)
            if d > drop:
                chosen, drop = op, d
                collapse.upstream_sqnr = above if ups else None
        if chosen is not None:
            collapse.layer = _layer_name(chosen, order[chosen])
            owner = chosen.input.owner
            collapse.layer_op = owner.name if isinstance(owner, Operation) else "input"
            collapse.layer_sqnr = sqnr[chosen]


def finite_energies(f: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """``sum(f²)`` and ``sum((q − f)²)`` over the positions where both are finite: BLAS dot
    products, with no boolean mask or copies unless a value is not finite (this runs on every
    activation of every batch when an output collapsed)."""
    f, q = f.ravel(), q.ravel()
    d = q - f
    s, n = float(np.dot(f, f)), float(np.dot(d, d))
    if math.isfinite(s) and math.isfinite(n):
        return s, n
    ok = np.isfinite(f) & np.isfinite(q)
    f, d = f[ok], q[ok] - f[ok]
    return float(np.dot(f, f)), float(np.dot(d, d))


def _nearest_upstream(func: FuncOp, acts: set[FakeQuantOp]) -> dict[SSAValue, frozenset]:
    """Per value, the activation fake-quants it is computed from with no other such
    fake-quant between (program order is an order of definitions)."""
    up: dict[SSAValue, frozenset] = {}
    for op in func.walk():
        if isinstance(op, FakeQuantOp):
            up[op.result] = frozenset((op,)) if op in acts else frozenset()
            continue
        reads = frozenset().union(*(up.get(v, frozenset()) for v in op.operands))
        for r in op.results:
            up[r] = reads
    return up


def _ancestors(value: SSAValue, acts: set[FakeQuantOp]) -> set[FakeQuantOp]:
    """Every activation fake-quant ``value`` is computed from."""
    found: set[FakeQuantOp] = set()
    seen: set[Operation] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        op = v.owner
        if not isinstance(op, Operation) or op in seen:
            continue
        seen.add(op)
        if op in acts:
            assert isinstance(op, FakeQuantOp)
            found.add(op)
        stack.extend(op.operands)
    return found


def check_after_quantizing(
    func: FuncOp,
    calibration: Sequence[object],
    floats: list[Outputs],
    *,
    min_sqnr: float = MIN_SQNR_DB,
    strict: bool = False,
) -> None:
    """quantize's last step: check the quantized ``func`` on the ``calibration`` batches
    against ``floats``, the float outputs calibration kept (computed here where it kept none),
    and warn or raise (:func:`report_collapses`)."""
    min_sqnr = min_sqnr_argument(min_sqnr)
    strict = bool_argument("strict", strict)
    shapes = [nf.tensor_shape(a) for a in func.body.block.args]
    batches = list(as_batches(calibration, shapes))
    if len(floats) != len(batches):
        floats = float_outputs(func, batches)
    report_collapses(check_quantized(func, batches, floats, min_sqnr), min_sqnr, strict=strict)


def report_collapses(found: Sequence[Collapse], min_sqnr: float, *, strict: bool) -> None:
    """Warn once per collapsed output (:class:`QuantizationWarning`), or with ``strict`` raise
    one :class:`QuantizeError` naming them all."""
    messages = [
        f"quantize: the quantized program cannot run on the calibration data ({c.notes[0]})"
        if c.how == "fails"
        else c.message(min_sqnr)
        for c in found
    ]
    if not messages:
        return
    if strict:
        raise QuantizeError("\n".join(m + " (strict: an error)" for m in messages))
    for m in messages:
        warnings.warn(QuantizationWarning(m), stacklevel=4)
