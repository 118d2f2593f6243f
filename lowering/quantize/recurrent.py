"""quantize for recurrent ops (``nf.recurrent``): the internal quantizers and the bias cap.

A recurrent op keeps its time loop inside, so the quantizers of its cell are not SSA values
but the op's own ``gates``, ``cell`` and ``hidden`` grids (``array<i64: exp, bits>``) and
``rounding``. They are named ``<op result name>.gates`` / ``.cell`` / ``.hidden`` for rules
and imported exponents (``lstm\\.cell=16``, ``{"lstm.cell": {"exp": 11, "bits": 16}}``):

- bits: a matching rule's, else the integer LSTM recipe of TFLite / CMSIS-NN: 16 for
  ``gates`` (:data:`GATE_BITS`, at least the activation bits) and ``cell`` (a power-of-two
  fixed point of its own width, as CMSIS-NN's int16 cell state), the activation bits for
  ``hidden`` (``rnn.gates=8`` gives the 8-bit gates of before); a rule that skips one
  leaves the op float inside (nq runs torch's math, lower-to-hw refuses);
- exponents: imported, else NanoEngine's absmax rule over the calibration batches, the float
  cell run on the op's fake-quantized operands: every gate pre-activation (for an LSTM also
  the cell, which tanh reads on the gates grid), every cell state, every hidden state;
- the op's results are its hidden (``output``, ``h_n``) and cell (``c_n``) codes, so their
  fake-quants take those grids (they then change nothing);
- a bias's exponent is capped at its product's (``x W_ih``: input + weight exponent; ``h
  W_hh``: hidden + weight), so the exact pre-activation sum needs only left shifts of bounded
  size;
- what was 0 on every calibration batch (an internal grid, a weight's row: nothing measured)
  takes the exponent of a unit range, or of the weight's live rows (``settle_zero_rows``),
  never 60: the cell's exact sums would shift the other terms past ``2**62``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import int_array, operand_codes_grid
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import source_quantized
from nanoir.lowering.quantize.calibration import as_batches
from nanoir.lowering.quantize.join_rules import ZERO_EXP, unit_range_exps
from nanoir.lowering.quantize.rules import QuantConfig, QuantizeError
from nanoir.lowering.quantize.targets import Target, value_name
from nanoir.runtime.interpreter import compile_function, default_builders
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.recurrent import EXP_RANGE, run_float
from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue

__all__ = [
    "CELL_BITS",
    "DEAD_ROW_STEPS",
    "GATE_BITS",
    "has_recurrent",
    "internal_names",
    "pop_internal",
    "quantize_recurrent",
    "recurrent_bias_cap",
    "settle_zero_rows",
]

CELL_BITS = 16
"""The cell state's default width."""
GATE_BITS = 16
"""The gate pre-activations' default width (at least the activation bits): TFLite's and
CMSIS-NN's integer LSTM keeps them in 16 bits with 8-bit weights and hidden state. On the
CRNN of ``benchmarks/bench_trained.py`` (BiLSTM, T = 32; 64 evaluation lines), 8 -> 16 bits:
strings equal to float 92.2% -> 93.8% with the defaults, 96.9% -> 98.4% with the
recommended options (output SQNR 25.1 -> 26.7 dB, 34.5 -> 37.0 dB)."""
DEAD_ROW_STEPS = 16
"""Steps finer than its weight's coarsest row a recurrent weight's row may take: a row
``2**-16`` of the largest carries nothing a 16-bit gate grid resolves, and each step finer
shifts the row's bias one place further in the cell's exact sums (past ``2**62`` at ~45)."""


def _ops(func: FuncOp) -> list[nf.RecurrentOp]:
    return [op for op in func.body.block.ops if isinstance(op, nf.RecurrentOp)]


def has_recurrent(func: FuncOp) -> bool:
    """Whether ``func`` has a recurrent op (whose cells calibrate on a second pass)."""
    return bool(_ops(func))


def internal_names(op: nf.RecurrentOp) -> dict[str, str]:
    """``{"gates": "<name>.gates", ...}``: the names rules and imported exponents use."""
    base = value_name(op.output, {})
    return {k: f"{base}.{k}" for k in nf.RecurrentOp.INTERNAL}


def pop_internal(func: FuncOp, exponents: dict[str, Any]) -> dict[str, Any]:
    """The imported exponents of internal quantizers, removed from ``exponents``."""
    names = {n for op in _ops(func) for n in internal_names(op).values()}
    return {n: exponents.pop(n) for n in list(exponents) if n in names}


def _bits(config: QuantConfig, name: str, which: str) -> int | None:
    resolved = config.resolve(name, "act")
    if resolved is None:
        return None
    if any(r.matches(name, "act") for r in config.rules):
        return resolved[0]
    if which == "cell":
        return CELL_BITS
    if which == "gates":
        return max(resolved[0], GATE_BITS)
    return resolved[0]


def _constant(value: SSAValue) -> np.ndarray:
    """A (fake-quantized) constant operand's value: the plan folds those without observing."""
    fq = value.owner
    if isinstance(fq, FakeQuantOp):
        x = _constant(fq.input)
        exps = np.asarray(dense_to_numpy(fq.exp), np.int64)
        signed = fq.signed is None or bool(fq.signed.value.data)
        return quant.fake_quant(x, fq.bits.value.data, exps, fq.rounding.data, signed=signed)
    assert isinstance(fq, nf.ConstantOp), "a recurrent operand the plan did not observe"
    return np.asarray(dense_to_numpy(fq.value), np.float64)


def _computing(func: FuncOp, values: set[SSAValue]) -> tuple[FuncOp, dict[SSAValue, SSAValue]]:
    """A function of ``func``'s arguments computing ``values`` only (the ops they depend on,
    cloned in order, returned), and each cloned result's original: the cells are measured
    without running what reads the values being measured (a norm reading a hidden state
    whose grid is still unset, exponent 60, cannot run)."""
    block = func.body.block
    keep: set[Operation] = set()
    stack = [v.owner for v in values if isinstance(v.owner, Operation)]
    while stack:
        op = stack.pop()
        if op not in keep:
            keep.add(op)
            stack.extend(v.owner for v in op.operands if isinstance(v.owner, Operation))
    body = Block(arg_types=[a.type for a in block.args])
    mapping: dict[SSAValue, SSAValue] = dict(zip(block.args, body.args))
    for op in block.ops:
        if op in keep:
            body.add_op(op.clone(value_mapper=mapping))
    outs = [mapping[v] for v in values if v in mapping]
    body.add_op(ReturnOp(*outs))
    sliced = FuncOp(
        func.sym_name.data, ([a.type for a in body.args], [v.type for v in outs]), Region(body)
    )
    return sliced, {new: old for old, new in mapping.items()}


def _absmax(
    func: FuncOp, ops: Sequence[nf.RecurrentOp], calibration: Iterable[Any]
) -> dict[int, dict[str, float]]:
    """Per op, the largest |gate pre-activation|, |cell| and |hidden| over the batches."""
    needed = {v for op in ops for v in op.operands}
    sliced, original = _computing(func, needed)
    plan = compile_function(sliced, default_builders(), np.dtype(np.float64))
    stats = {id(op): dict.fromkeys(nf.RecurrentOp.INTERNAL, 0.0) for op in ops}
    batches = list(as_batches(calibration, [nf.tensor_shape(a) for a in func.body.block.args]))
    if not batches:
        raise QuantizeError("quantize: the calibration data is empty")
    for batch in batches:
        seen: dict[SSAValue, np.ndarray] = dict(zip(func.body.block.args, batch))

        def observe(op: Operation, results: tuple[Any, ...]) -> None:
            for r, x in zip(op.results, results):
                r = original.get(r, r)
                if r in needed:
                    seen[r] = np.asarray(x, np.float64)  # noqa: B023

        plan(*batch, observe=observe)
        for op in ops:
            s = stats[id(op)]
            args = [seen[v] if v in seen else _constant(v) for v in op.operands]
            x, rest = args[0], args[1:]
            h0 = rest.pop(0) if op.h0 is not None else None
            c0 = rest.pop(0) if op.c0 is not None else None

            def look(kind: str, v: np.ndarray, s: dict[str, float] = s) -> None:
                s[kind] = max(s[kind], float(np.abs(v).max()) if v.size else 0.0)
                if kind == "cell":  # tanh(c) reads the cell on the gates grid
                    s["gates"] = max(s["gates"], s["cell"])

            run_float(op.layout, x, h0, c0, rest, observe=look)
    return stats


def _set_result_grid(value: SSAValue, exp: int, bits: int) -> None:
    for use in value.uses:
        if isinstance(use.operation, FakeQuantOp):
            fq = use.operation
            fq.bits = IntegerAttr(bits, i64)
            fq.exp = exp_attr([exp], [1])


def quantize_recurrent(
    func: FuncOp,
    calibration: Iterable[Any] | None,
    config: QuantConfig,
    imported: dict[str, Any],
) -> None:
    """Set every recurrent op's internal grids (module docstring) once its operands and
    results have their fake-quants."""
    ops = _ops(func)
    if not ops:
        return
    todo: list[tuple[nf.RecurrentOp, dict[str, tuple[int, int | None]]]] = []
    missing: list[str] = []
    for op in ops:
        grids: dict[str, tuple[int, int | None]] = {}
        for which, name in internal_names(op).items():
            bits = _bits(config, name, which)
            if bits is None:
                break
            record = imported.get(name)
            exp = None
            if isinstance(record, dict):
                bits = int(record.get("bits", bits))
                exp = int(np.asarray(record["exp"]).reshape(-1)[0])
            elif record is not None:
                exp = int(np.asarray(record).reshape(-1)[0])
            elif calibration is None:
                missing.append(name)
            grids[which] = (bits, exp)
        else:
            todo.append((op, grids))
    if missing:
        raise QuantizeError(
            "quantize: the internal quantizers of recurrent ops need calibration data (or "
            f"imported exponents); none given for {', '.join(missing)}"
        )
    stats = {}
    if any(e is None for _, g in todo for _, e in g.values()):
        assert calibration is not None
        stats = _absmax(func, [op for op, _ in todo], calibration)
    lo, hi = EXP_RANGE
    for op, grids in todo:
        final = {}
        for which, (bits, exp) in grids.items():
            if exp is None:
                # (0 everywhere: nothing measured, a unit range, as the join rules' zero range)
                absmax = stats[id(op)][which] or 1.0
                exp = int(quant.exp_from_absmax(absmax, bits, (lo, hi)))
            elif not lo <= exp <= hi:
                raise QuantizeError(
                    f"quantize: {internal_names(op)[which]} exponent {exp} is outside {lo}..{hi}"
                )
            final[which] = (exp, bits)
            op.properties[which] = int_array([exp, bits])
        op.properties["rounding"] = StringAttr(str(config.rounding))
        _set_result_grid(op.output, *final["hidden"])
        _set_result_grid(op.h_n, *final["hidden"])
        if op.c_n is not None:
            _set_result_grid(op.c_n, *final["cell"])


def settle_zero_rows(targets: Sequence[Target]) -> None:
    """Rows of a recurrent op's weight that were 0 everywhere (exponent 60, nothing measured)
    take the finest exponent of the weight's live rows, else of the other weight of the same
    cell (``w_hh`` for ``w_ih``), else that of a unit range: at 60 their product's grid
    would be 2**-60-fine and the cell's exact sums would shift the bias and the other product
    onto it, past ``2**62`` (a ``RecurrentBoundError`` on every input). Their codes are 0 at
    any exponent. Rows that are nearly 0 (a scale of ``1e-14``) are capped likewise, at
    :data:`DEAD_ROW_STEPS` steps finer than the weight's coarsest row; the other rows keep
    their exponents. ``targets`` are the weights whose exponents quantize chose (not
    imported)."""
    by_value = {t.value: t for t in targets if t.kind == "weight" and t.exps is not None}
    seen: set[SSAValue] = set()
    for v in by_value:
        op = next((u.operation for u in v.uses if isinstance(u.operation, nf.RecurrentOp)), None)
        if op is None or op in seen:
            continue
        seen.add(op)
        per_cell = op.layout.per_cell
        for first in range(0, len(op.weights), per_cell):
            pair = [by_value.get(w) for w in op.weights[first : first + 2]]
            for t, other in (pair, pair[::-1]):
                if t is None or t.bits < 2:
                    continue
                assert t.exps is not None
                zero = t.exps >= ZERO_EXP
                if not zero.any():
                    continue
                fill = unit_range_exps(t.bits)
                for q in (t, other):
                    if q is not None and q.exps is not None and (q.exps < ZERO_EXP).any():
                        fill = int(q.exps[q.exps < ZERO_EXP].max())
                        break
                t.exps = np.where(zero, fill, t.exps)
            for t in pair:
                if t is not None and t.bits > 1 and t.exps is not None and t.exps.size > 1:
                    # A nearly dead row (weights ~0, exponent ~49): its product's grid would
                    # be as fine, and the cell's exact sums would shift its bias onto it.
                    t.exps = np.minimum(t.exps, int(t.exps.min()) + DEAD_ROW_STEPS)


def recurrent_bias_cap(value: SSAValue) -> np.ndarray | None:
    """The exponent cap (one per gate row) of a bias read by a quantized recurrent op: that
    of the product it is added to, or None."""
    for use in value.uses:
        op = use.operation
        if not isinstance(op, nf.RecurrentOp) or op.hidden is None:
            continue
        index = use.index - len(op.operands) + len(op.weights)
        layout = op.layout
        cell, part = divmod(index, layout.per_cell)
        if part < 2:
            continue
        weight = op.weights[cell * layout.per_cell + part - 2]
        grid = operand_codes_grid(weight)
        if cell // layout.dirs == 0 and part == 2:
            q = source_quantized(op.input)  # (through data movement, as the cell reads it)
            source = q if isinstance(q, str) else (np.array([q.exp]), q.bits)
        else:
            hidden = op.internal_grid("hidden")
            assert hidden is not None
            source = (np.array([hidden.exp]), hidden.bits)
        if isinstance(grid, str) or isinstance(source, str):
            return None
        return source[0].reshape(-1)[0] + grid[0]
    return None
