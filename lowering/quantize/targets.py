"""Where quantize puts fake-quants: every float input, weight, bias, named constant and
computing op's result, not after data movement (the ``DataMovement`` trait), each with the bits,
per-channel choice and rule name its :class:`QuantConfig` gives; per tensor, whatever the
options say, where an op reads the value on one grid (:func:`needs_one_grid`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import (
    DataMovement,
    IntegerAlgorithm,
    NonNegativeResult,
    Weighted,
    grid_operands,
    negatives_unread,
    non_negative_result,
    weight_reader,
)
from nanoir.lowering.quantize.gates import intermediate_bits
from nanoir.lowering.quantize.products import narrow_grown_inputs, narrow_operands
from nanoir.lowering.quantize.rules import (
    QuantConfig,
    QuantizeError,
)
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue


@dataclass
class Target:
    """One tensor to fake-quantize."""

    value: SSAValue
    kind: str
    name: str
    bits: int
    per_channel: bool
    exps: np.ndarray | None = None
    """Exponents shaped to broadcast against the value (without the batch dim)."""
    rounding: RoundingMode | None = None
    """This tensor's rounding, if imported exponents say (else the config's)."""
    rule_name: str = ""
    """The name rules match (``name`` before it was made unique)."""
    weight_axis: int = 0
    """A weight's output-channel axis: 0 (conv, linear), 1 (conv_transpose's ``[C, O/g, *K]``)."""
    signed: bool = True
    """False: unsigned codes ``0..2**b-1`` (``unsigned="auto"`` or a rule's ``u``)."""
    origin: str = ""
    """Why its bits or exponents are not what the options and its range give (``acc:%matmul``,
    ``acc:%prelu``: ``products``); the fake-quant's ``origin``, which the report shows."""

    @property
    def channel_axis(self) -> int | None:
        rank = len(nf.tensor_shape(self.value))
        if not self.per_channel or rank == 0:
            return None
        if self.kind == "act":
            return 1 if rank >= 2 else None
        return self.weight_axis if self.kind == "weight" else 0


def value_name(value: SSAValue, index: dict[SSAValue, int]) -> str:
    """The name rules match against: a constant's ``name``, else the SSA name hint."""
    if isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp):
        if value.op.sym_name is not None:
            return value.op.sym_name.data
    if value.name_hint:
        return value.name_hint
    return f"%{index.setdefault(value, len(index))}"


def _empty(value: SSAValue) -> bool:
    """A tensor of no elements (``x[:, :0]``): one exponent, as no channel has values."""
    return 0 in nf.tensor_shape(value)


def _is_float_tensor(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, TensorType) and not isinstance(t.get_element_type(), IntegerType)


def _already_quantized(value: SSAValue) -> bool:
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return True
    return any(isinstance(use.operation, FakeQuantOp) for use in value.uses)


WEIGHTED = tuple(op for op in nf.NF.operations if op.has_trait(Weighted))
"""Ops whose operand 1 is a weight and operand 2 a bias (the ``Weighted`` trait)."""


def _weight_axis(value: SSAValue) -> int:
    """A weight's output-channel axis, as the op that reads it says (``Weighted``)."""
    reader = weight_reader(value)
    return reader.channel_axis if reader is not None else 0


def _unpool_indices(value: SSAValue) -> bool:
    """An input read only as nf.max_unpool's indices (torch's max_unpool2d of indices given
    to the program): positions in a plane, rounded to a fake-quant's step they land
    elsewhere. lower-to-hw refuses such an unpool, naming it; nq computes it exactly."""
    uses = list(value.uses)
    return bool(uses) and all(
        isinstance(u.operation, nf.MaxUnpoolOp) and u.index == 1 for u in uses
    )


def _refuse_indices_read_otherwise(arg: SSAValue, name: str) -> None:
    """A ``QuantizeError`` for an input read as an embedding's indices (integers) and also
    by an op other than a comparison with a constant: its one fake-quant would move the ids
    wherever its grid cannot hold them, silently. (Compared with a constant, as a BERT mask
    ``ids != pad``, the ids stay integers: ``nf.is_index_input``.)"""
    uses = list(arg.uses)
    if not any(isinstance(u.operation, nf.EmbeddingOp) and u.index == 0 for u in uses):
        return
    other = next(u.operation for u in uses if not isinstance(u.operation, nf.EmbeddingOp))
    hint = next((r.name_hint for r in other.results if r.name_hint), None)
    raise QuantizeError(
        f"quantize: input {name} is an embedding's indices (integers) and is also read by "
        f"{other.name}{f' (%{hint})' if hint else ''}; "
        "a fake-quant would move the indices, so quantize gives an index input none, and the "
        "indices may otherwise be read only by comparisons with a constant (a mask "
        "'ids != pad'): give the other reader its own float input"
    )


SHORT_DYADIC_BITS = 16
"""A scalar whose code at its dyadic exponent fits this many signed bits stays float: its
product with a 16-bit code still fits i32 (``0.5``, ``3``, ``1 + 2**-12``). A decimal such as
``0.3`` or ``32**-0.5`` is, in float32, a 24-bit mantissa."""


def _short_dyadic(v: float) -> bool:
    """``v = c * 2**-k`` with ``|c| < 2**(SHORT_DYADIC_BITS - 1)`` and ``|k| <= 60`` (the
    exponents lower-to-hw gives an unquantized constant, ``codes.dyadic_exponent``)."""
    if not np.isfinite(v):
        return False
    for k in range(-60, 61):
        c = np.ldexp(v, k)
        if c == np.round(c):
            return abs(c) < 2 ** (SHORT_DYADIC_BITS - 1)
    return False


SCALAR_READERS = (nf.MulOp, nf.AddOp, nf.SubOp)


def scalar_factor(value: SSAValue) -> bool:
    """An unnamed float scalar constant that an ``nf.mul``, ``nf.add`` or ``nf.sub`` reads and
    that is no short dyadic (:data:`SHORT_DYADIC_BITS`): unquantized, its float32 mantissa
    would need a product wider than i32 (``x * 32**-0.5``), or a shift of the other operand
    onto its exponent that is (``x + 1e-3``). quantize gives it a weight's fake-quant (per
    tensor, weight bits), as it gives attention's scale (a named constant); QAT mirrors it
    through :func:`find_targets`. A 0 added or subtracted gets one too (0 exactly)."""
    assert isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp)
    if value.op.sym_name is not None or int(np.prod(nf.tensor_shape(value))) != 1:
        return False
    if not any(isinstance(u.operation, SCALAR_READERS) for u in value.uses):
        return False
    v = float(dense_to_numpy(value.op.value).astype(np.float64).reshape(-1)[0])
    if v == 0:  # exact at any exponent; lower-to-hw's -60 is too far to align an add onto
        return any(isinstance(u.operation, nf.AddOp | nf.SubOp) for u in value.uses)
    return not _short_dyadic(v)


def _infinite_constant(value: SSAValue) -> None:
    """An infinite constant (a causal mask ``full(-inf).triu(1)`` added to attention scores)
    stays float: no grid holds an infinity, and what reads it saturates there (``x + -inf``
    is ``-inf``, which the result's fake-quant makes its lowest code; calibration reads its
    finite values). NaN, or a conv's or linear's weight or bias, is a ``QuantizeError``."""
    assert isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp)
    name = value_name(value, {})
    if np.isnan(dense_to_numpy(value.op.value)).any():
        raise QuantizeError(f"quantize: constant {name} holds NaN, which has no code")
    for use in value.uses:
        if use.operation.has_trait(Weighted) or isinstance(use.operation, nf.EmbeddingOp):
            raise QuantizeError(
                f"quantize: constant {name} holds an infinity and is a weight or bias of "
                f"{use.operation.name}; no grid holds an infinity"
            )
    return None


def _constant_kind(value: SSAValue) -> str | None:
    """weight, bias, const (another named constant) or None (leave float)."""
    assert isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp)
    if not np.isfinite(dense_to_numpy(value.op.value)).all():
        return _infinite_constant(value)
    for use in value.uses:
        if use.operation.has_trait(Weighted):
            if use.index == 1:
                return "weight"
            if use.index == 2:
                return "bias"
        if isinstance(use.operation, nf.EmbeddingOp) and use.index == 1:
            return "weight"  # an embedding's table: weight rules, per tensor (see add)
        if isinstance(use.operation, nf.RecurrentOp) and value in use.operation.weights:
            return (
                "weight" if len(nf.tensor_shape(value)) == 2 else "bias"
            )  # w_ih, w_hh / b_ih, b_hh
    if value.op.sym_name is None and int(np.prod(nf.tensor_shape(value))) <= 1:
        # A Python scalar such as ``x + 2``: lower-to-hw uses a short dyadic one exactly;
        # one that is not (``x * 32**-0.5``, ``x + 1e-3``) gets a weight's fake-quant.
        return "const" if scalar_factor(value) else None
    if all(isinstance(u.operation, nf.DivOp) and u.index == 1 for u in value.uses):
        # A divisor (``x / self.scale``): lower-to-hw multiplies by its dyadic reciprocal
        # exactly; a fake-quant would make it a runtime value, which it cannot divide by.
        return None
    return "const"


def _signed(
    config: QuantConfig, value: SSAValue, name: str, unique: str, kind: str, bits: int
) -> bool:
    """Signed or unsigned codes: a rule's ``u``/``s``, else, under ``unsigned="auto"``,
    unsigned for an activation known non-negative (``NonNegativeResult``) or read only by ops
    that map negatives as 0 (a conv output read by its ReLU alone: ``negatives_unread``; then
    the ReLU's input, not only its output, gets the extra bit). A rule may ask unsigned for any
    activation (negative values then saturate to 0; the report marks it)."""
    asked = config.resolve_signed(name, "act" if kind == "const" else kind)
    if asked is False:
        if kind != "act":
            raise QuantizeError(
                f"quantize: a rule asks unsigned codes for {kind} {unique}; unsigned codes are "
                "for activations (the results of ops and function inputs)"
            )
        if bits == 1:
            raise QuantizeError(
                f"quantize: a rule asks unsigned codes for {unique} at 1 bit; the 1-bit code is "
                "±1 and has no unsigned form"
            )
        return False
    if asked is None and config.unsigned == "auto" and kind == "act" and bits > 1:
        if _unsigned_unlowered(value):
            return True
        return not (non_negative_result(value) or negatives_unread(value))
    return True


ONE_GRID_OPERANDS: dict[type[Operation], tuple[int, ...]] = {
    nf.MatmulOp: (0, 1),
    nf.EmbeddingOp: (1,),
}
"""Operands (by index) that ops without a trait saying so read on one per-tensor grid: both
of a matmul's (``nh.matmul``), an embedding's table (its rows are gathered)."""


def one_grid_operand(op: Operation, index: int) -> bool:
    """Whether ``op`` reads operand ``index`` on one per-tensor grid: an integer algorithm's input (softmax, log-softmax, the norms, normalize:
    ``IntegerAlgorithm``), a recurrent op's input and initial states (its integer cell reads
    them per tensor and signed), and :data:`ONE_GRID_OPERANDS`."""
    if op.has_trait(IntegerAlgorithm):
        return index == 0
    if isinstance(op, nf.RecurrentOp):
        return op.operands[index] not in op.weights
    return index in ONE_GRID_OPERANDS.get(type(op), ())


def moved_readers(value: SSAValue) -> list[tuple[Operation, int]]:
    """``(op, operand index)`` of every op that reads ``value``, and of every op reading the
    data movement it goes through (a concat, split, transpose, reshape, an embedding's table
    ... carries the grid on to its readers; an expand's shape source and an embedding's ids
    carry nothing: ``grid_operands``): what the grid of ``value`` must suit."""
    found: list[tuple[Operation, int]] = []
    todo, seen = [value], set[SSAValue]()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            op = use.operation
            found.append((op, use.index))
            if op.has_trait(DataMovement) and op.operands[use.index] in grid_operands(op):
                todo.extend(op.results)
    return found


def needs_one_grid(value: SSAValue) -> bool:
    """Whether ``value`` must be quantized per tensor whatever ``act_per_channel`` says: an
    op reads it (through data movement) on one grid (:func:`one_grid_operand`), or it is the
    result of an integer algorithm (whose output grid is one per-tensor fake-quant) or of a
    recurrent op (its hidden and cell grids are one exponent each). lower-to-hw refuses
    per-channel exponents there."""
    op = value.owner
    if isinstance(op, Operation) and (
        op.has_trait(IntegerAlgorithm) or isinstance(op, nf.RecurrentOp)
    ):
        return True
    return any(one_grid_operand(reader, i) for reader, i in moved_readers(value))


def _unsigned_unlowered(value: SSAValue) -> bool:
    """Whether lower-to-hw refuses unsigned codes for this value: into an op defined by an
    integer algorithm (softmax, layer/group norm) or a recurrent op, directly or through data
    movement (a ReLU's output transposed into an LSTM), out of one whose result can be
    negative (log-softmax, the norms; softmax's, ``NonNegativeResult``, is written as
    unsigned codes), out of a batch norm (whose affine is searched for signed codes).
    ``unsigned="auto"`` leaves those signed so that its programs lower (a rule's ``u`` still
    asks, and lower-to-hw then names the op)."""
    op = value.owner
    if isinstance(op, nf.BatchNormOp) or (
        isinstance(op, Operation)
        and op.has_trait(IntegerAlgorithm)
        and not op.has_trait(NonNegativeResult)
    ):
        return True
    return any(
        reader.has_trait(IntegerAlgorithm) or isinstance(reader, nf.RecurrentOp)
        for reader, _ in moved_readers(value)
    )


def _refuse_one_bit_into_recurrent(value: SSAValue, name: str, kind: str) -> None:
    """A ``QuantizeError`` if a recurrent op reads ``value`` (an operand, or through data
    movement), which would get 1-bit codes: the integer cell has no 1-bit form (lower-to-hw
    would refuse it), and giving it more bits than asked is the user's choice, by a rule."""
    for reader, _ in moved_readers(value):
        if isinstance(reader, nf.RecurrentOp):
            op = value_name(reader.output, {})
            raise QuantizeError(
                f"quantize: {name} would get 1-bit codes ({kind}_bits or a rule), and "
                f"nf.recurrent ({op}) reads it, whose integer cell takes 2 bits or more; "
                f"give it more with a rule (e.g. '{kind}@^{re.escape(name)}$=8')"
            )


def find_targets(func: FuncOp, config: QuantConfig) -> list[Target]:
    """The tensors of ``func`` to quantize, in program order.

    Rules match a tensor's name (:func:`value_name`); ``Target.name`` is that name made unique
    in program order as the IR printer does (``relu``, ``relu_1``, ...), so imported
    exponents name every tensor unambiguously.
    """
    names: dict[SSAValue, int] = {}
    used: set[str] = set()
    targets: list[Target] = []
    runtime: dict[SSAValue, bool] = {}  # intermediate_bits' memo

    def add(value: SSAValue, kind: str) -> None:
        if not _is_float_tensor(value) or _already_quantized(value):
            return
        name = unique = value_name(value, names)
        i = 0
        while unique in used:
            i += 1
            unique = f"{name}_{i}"
        used.add(unique)
        rule_kind = "act" if kind == "const" else kind
        factor = kind == "const" and scalar_factor(value)
        wider = intermediate_bits(value, config, runtime) if kind == "act" else None
        resolved = config.resolve(name, "weight" if factor else rule_kind, wider)
        if resolved is None:
            return
        bits, per_channel = resolved
        if bits == 1:
            _refuse_one_bit_into_recurrent(value, unique, rule_kind)
        if kind == "const" or kind != "bias" and needs_one_grid(value) or _empty(value):
            per_channel = False  # (an embedding table's rows are gathered: one exponent)
        targets.append(
            Target(
                value,
                rule_kind if kind != "const" else "const",
                unique,
                bits,
                per_channel,
                rule_name=name,
                weight_axis=_weight_axis(value) if kind == "weight" else 0,
                signed=_signed(config, value, name, unique, kind, bits),
            )
        )

    block = func.body.block
    for arg in block.args:
        if not nf.is_index_input(arg) and not _unpool_indices(arg):  # integer indices get
            _refuse_indices_read_otherwise(arg, value_name(arg, names))
            add(arg, "act")  # no fake-quant
    for op in block.ops:
        if isinstance(op, nf.ConstantOp):
            kind = _constant_kind(op.result)
            if kind is not None:
                add(op.result, kind)
        elif op.name.startswith("nf.") and not (
            op.has_trait(DataMovement) or op.has_trait(nf.IndexResult)
        ):  # (nor after indices: integers, read only by the op they index)
            # (data movement keeps its inputs' grid: no fake-quant after it)
            for r in op.results:
                add(r, "act")
    narrow_operands(func, targets, config)
    narrow_grown_inputs(func, targets, config)
    return targets
