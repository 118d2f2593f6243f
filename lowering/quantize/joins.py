"""Exponents that lower: quantize's choices at joins, so that lower-to-hw never has to refuse them.

A fake-quant's own range picks its exponent; where two quantized values meet, lower-to-hw needs
more. An add, sub or concat aligns its operands to the finest exponent by exact left shifts
(``HwLowering.shift_to``: a ``b``-bit code shifted by ``s`` needs ``b + s`` bits, at most 32,
and an add grows one bit more); a conv or linear sums ``x * w`` codes at ``exp(x) + exp(w)``,
aligns its bias there, and its worst-case accumulator (from the actual weight codes, the input
codes' width after the alignment of its input channels, and the aligned bias) must fit i32
(``lowering.hw.contraction.accumulate``). A tensor that is 0 on every calibration batch (timm's
zero-initialised last BatchNorm of a residual branch) gets exponent 60 and would dictate a
62-bit alignment; an all-zero BN-folded bias likewise, once nothing caps it. :func:`settle`
runs after the fake-quants of activations and weights are placed and before the biases are,
and changes exponents only where a join needs it, always to a coarser grid:

- a value that is 0 on every calibration batch (exponent at the top of the calibration range)
  takes the exponent of what it meets: the other operands' at a join, and, as the input of a
  weighted op with a bias, the one that puts the accumulator on the bias's grid;
- an add/sub/concat operand finer than ``31 - bits`` steps past the coarsest is capped there
  (``16 - bits`` for the per-tensor parts of a concat a lookup table or a lone BN reads);
  per-channel exponents that data movement aligns onto one (channels leaving dim 1, a padded
  channel dim, depth_to_space: ``aligns`` of ``DataMovement``) are capped the same way, at
  ``32 - bits`` steps past the coarsest channel, ``16 - bits`` where a lookup table or a lone
  BN reads the moved codes;
  the parts of a concat read as one grid (by a softmax, a norm, a recurrent op, through data
  movement: ``targets.one_grid_operand``) all take the coarsest part's exponent;
- a value still 0 everywhere takes the exponent of what it is computed from, else a unit
  range (``join_rules.Rules.zero_range``);
- a bias's exponent is capped at its accumulator's, whatever produced the input (looking
  through concat, split and every other data movement);
- where the accumulator bound still does not fit i32, the accumulator's resolution is lowered:
  the input's step when the aligned bias dominates, else the weight's (per output channel).

1-bit operands (a 1-bit exponent is the magnitude ``2**k`` of codes ±1, so its codes sit at
``-k``) follow the same rules on that code exponent, as lower-to-hw aligns them; what differs
for them is in :mod:`nanoir.lowering.quantize.join_rules`, which holds the rules on exponents alone (no
IR), shared with ``nanoir.qat``: this module describes the program to them (:func:`describe`)
and writes their choices back.

Each changed fake-quant gets an ``origin`` (``join:%name`` of the add/concat, ``input:%conv``,
``acc:%conv``), which ``.mlir`` keeps and the quantization report shows. Exponents the user
imported are never changed: lower-to-hw may still refuse them, naming the value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import (
    DataMovement,
    LookupTable,
    aligns_channels,
    grid_operands,
    grid_sources,
)
from nanoir.lowering.quantize.join_rules import (
    ALIGN_BITS,
    BN_INPUT_BITS,
    MAX_ROUNDS,
    MOVE_BITS,
    TABLE_INPUT_BITS,
    ZERO_EXP,
    Derived,
    Join,
    Norm,
    Quant,
    Rules,
    Weighted,
)
from nanoir.lowering.quantize.targets import (
    WEIGHTED,
    Target,
    moved_readers,
    one_grid_operand,
)
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue

__all__ = [
    "ALIGN_BITS",
    "MAX_ROUNDS",
    "ZERO_EXP",
    "describe",
    "describe_derived",
    "describe_norms",
    "get_exps",
    "settle",
    "sources",
]

ALIGNED = nf.AddOp | nf.SubOp | nf.MaximumOp | nf.MinimumOp | nf.CompareOp | nf.WhereOp
"""Binary ops whose operands lower-to-hw aligns to one exponent by exact shifts (a compare's
two operands; a where's two branches, its 0/1 condition aside)."""

Leaf = TypeVar("Leaf")


def _fake_quant(value: SSAValue) -> FakeQuantOp | None:
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return value.op
    return None


def sources(
    value: SSAValue, leaf: Callable[[SSAValue], Leaf | None] = _fake_quant
) -> list[Leaf] | None:
    """The fake-quants (or ``leaf``'s) whose exponents ``value`` carries (``grid_sources``)."""
    return grid_sources(value, leaf)


def get_exps(fq: FakeQuantOp) -> np.ndarray:
    return dense_to_numpy(fq.exp).astype(np.int64)


def describe(
    func: FuncOp,
    quant_of: Callable[[SSAValue], Quant | None],
    bias_of: Callable[[Operation], Quant | None],
) -> tuple[list[Join], list[Weighted]]:
    """``func``'s joins and weighted ops for :class:`~nanoir.lowering.quantize.join_rules.Rules`, in
    program order. ``quant_of`` gives the :class:`Quant` of a quantized value (the same one
    each time; a constant's with its values), ``bias_of`` a weighted op's bias's. A weighted
    op is left out unless its input is quantized and its weight is one quantized constant."""
    joins: list[Join] = []
    weighted: list[Weighted] = []
    for op in func.body.block.ops:
        name = f"%{op.results[0].name_hint or op.name}" if op.results else op.name
        if isinstance(op, ALIGNED | nf.ConcatOp):
            operands = [op.lhs, op.rhs] if isinstance(op, ALIGNED) else op.inputs
            bn = isinstance(op, nf.ConcatOp) and any(
                isinstance(use.operation, nf.BatchNormOp) and use.index == 0
                for use in op.results[0].uses
            )
            parts = [sources(v, quant_of) or [] for v in operands]
            readers = moved_readers(op.results[0]) if isinstance(op, nf.ConcatOp) else []
            one_grid = any(one_grid_operand(reader, i) for reader, i in readers)
            # (a table reads per-channel parts by sub-tables, per-tensor ones aligned)
            tabled = any(r.has_trait(LookupTable) and i == 0 for r, i in readers) and all(
                q.exps.size == 1 for part in parts for q in part
            )
            width = BN_INPUT_BITS if bn else TABLE_INPUT_BITS if tabled else ALIGN_BITS
            joins.append(Join(name, parts, width, one_grid))
        elif aligns_channels(op):
            # Channels that cannot move with their exponents are aligned onto one first.
            moved = [q for v in grid_operands(op) for q in sources(v, quant_of) or []]
            if any(q.exps.size > 1 for q in moved):
                joins.append(Join(name, [moved], _aligned_width(op), moved=True))
        elif isinstance(op, WEIGHTED):
            xs, ws = sources(op.operands[0], quant_of), sources(op.operands[1], quant_of)
            if not xs or not ws or len(ws) != 1 or ws[0].values is None:
                continue
            linear = isinstance(op, nf.LinearOp)
            transposed = isinstance(op, nf.ConvTransposeOp)
            w_shape = nf.tensor_shape(op.operands[1])
            n = len(w_shape) - 2
            weighted.append(
                Weighted(
                    name,
                    xs,
                    ws[0],
                    bias_of(op),
                    out_c=nf.tensor_shape(op.results[0])[-1 if linear else 1],
                    w_size=int(np.prod(w_shape)),
                    groups=1 if linear else op.groups.value.data,
                    linear=linear,
                    transposed=(
                        (
                            tuple(nf.array_values(op.strides) or (1,) * n),
                            tuple(nf.array_values(op.dilations) or (1,) * n),
                        )
                        if transposed
                        else None
                    ),
                    per_group=w_shape[1] if transposed else 0,
                )
            )
    return joins, weighted


def _aligned_width(op: Operation) -> int:
    """Bits the codes data movement ``op`` aligns may take: what reads them, through any
    further data movement, bounds them (a lookup table indexes every code, a lone batch norm's
    affine is checked on every code: 16 bits; else i32)."""
    readers = [(r, i) for result in op.results for r, i in moved_readers(result)]
    if any(r.has_trait(LookupTable) and i == 0 for r, i in readers):
        return TABLE_INPUT_BITS
    if any(isinstance(r, nf.BatchNormOp) and i == 0 for r, i in readers):
        return BN_INPUT_BITS
    return MOVE_BITS


def describe_norms(func: FuncOp, quant_of: Callable[[SSAValue], Quant | None]) -> list[Norm]:
    """``func``'s layer and group norms whose bias and output are quantized (the output's
    :class:`Quant` is its result's, or that of the fake-quant reading it), for the rules'
    bias cap (``join_rules.Rules.norm``)."""
    norms: list[Norm] = []
    for op in func.body.block.ops:
        if not isinstance(op, nf.LayerNormOp | nf.GroupNormOp):
            continue
        b, out = quant_of(op.bias), quant_of(op.result)
        uses = list(op.result.uses)
        if out is None and len(uses) == 1 and isinstance(uses[0].operation, FakeQuantOp):
            out = quant_of(uses[0].operation.result)
        if b is not None and b.values is not None and out is not None:
            norms.append(Norm(f"%{op.result.name_hint or op.name}", b, out))
    return norms


def _quant_read(value: SSAValue, quant_of: Callable[[SSAValue], Quant | None]) -> Quant | None:
    """The :class:`Quant` of ``value`` as its readers see it: its own (a QAT value), or that of
    the fake-quant that alone reads it (quantize's program)."""
    q = quant_of(value)
    uses = list(value.uses)
    if q is None and len(uses) == 1 and isinstance(uses[0].operation, FakeQuantOp):
        q = quant_of(uses[0].operation.result)
    return q


def describe_derived(func: FuncOp, quant_of: Callable[[SSAValue], Quant | None]) -> list[Derived]:
    """``func``'s quantized activations with what each is computed from (its op's first
    operand through data movement), in program order, for the zero-range rule
    (``join_rules.Rules.zero_range``): function inputs, and the results of computing ops but
    recurrent ones (whose results are on the op's own hidden and cell grids)."""
    derived: list[Derived] = []
    for arg in func.body.block.args:
        q = _quant_read(arg, quant_of)
        if q is not None:
            derived.append(Derived(f"%{arg.name_hint or 'input'}", q, []))
    for op in func.body.block.ops:
        if (
            not op.name.startswith("nf.")
            or isinstance(op, nf.ConstantOp | nf.RecurrentOp)
            or op.has_trait(DataMovement)
        ):
            continue
        source = (sources(op.operands[0], quant_of) or []) if op.operands else []
        for r in op.results:
            q = _quant_read(r, quant_of)
            if q is not None and q.values is None:
                derived.append(Derived(f"%{r.name_hint or op.name}", q, source))
    return derived


def _constant_values(value: SSAValue) -> Callable[[], np.ndarray] | None:
    if isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp):
        return lambda: np.asarray(constant_array(value), dtype=np.float64)
    return None


def settle(
    func: FuncOp,
    biases: Sequence[Target],
    fixed: Iterable[FakeQuantOp],
    rounding: quant.RoundingMode,
) -> None:
    """Change exponents (see the module docstring) until every join can lower; set each
    bias target's ``exps`` (from its values, capped at its accumulator's)."""
    fixed = set(fixed)
    quants: dict[FakeQuantOp, Quant] = {}

    def quant_of(value: SSAValue) -> Quant | None:
        fq = _fake_quant(value)
        if fq is None:
            return None
        if fq not in quants:
            quants[fq] = Quant(
                # (signed = false: the join rules count b + 1 signed bits, join_rules.signed_bits)
                fq.bits.value.data,
                get_exps(fq),
                fq.rounding_mode,
                _constant_values(fq.input),
                fq in fixed,
                None if fq.origin is None else fq.origin.data,
                fq.is_signed,
            )
        return quants[fq]

    bias_quants: dict[Operation, tuple[Target, Quant]] = {}
    for t in biases:
        if t.exps is None:
            continue
        q = Quant(t.bits, t.exps.copy(), t.rounding or rounding, _constant_values(t.value))
        for use in t.value.uses:
            if isinstance(use.operation, WEIGHTED) and use.index == 2:
                bias_quants[use.operation] = (t, q)
    joins, weighted = describe(
        func, quant_of, lambda op: bias_quants[op][1] if op in bias_quants else None
    )
    capped = Rules(
        joins, weighted, describe_norms(func, quant_of), describe_derived(func, quant_of)
    ).settle()
    for fq, q in quants.items():
        old = get_exps(fq)
        if (q.exps != old).any():
            fq.exp = exp_attr(q.exps.reshape(-1).tolist(), list(old.shape))
        if fq.origin is None and q.origin is not None:
            fq.origin = StringAttr(q.origin)
    for t, q in bias_quants.values():
        if q in capped:
            t.exps = capped[q]
