"""What the engine can take, decided from a program's structure alone: lower-to-hw and
``nanoir.inspect`` ask the same functions, so the two cannot disagree.

A *structural* refusal is certain whatever the exponents calibration chooses: an op with no
integer form (``nf.custom``, a product reduction), a form the engine lacks (an nh op the
:class:`~nanoir.target.Target` does not list, a code width or rounding mode it does not
take, unsigned codes where it has none), a shape or operand the integer form cannot take (a
runtime weight, a division by a runtime value, a sum over a dynamic dim), or stream caches
larger than the on-chip buffer. It needs only where the fake-quants are, with their bits,
signedness and rounding (not their exponents), which a :class:`View` answers:

- :class:`QuantizedView`: an nq program, from its ``nq.fake_quant`` ops (lower-to-hw);
- :class:`PlannedView`: a float (nf) program and quantize's placement (``find_targets``),
  before anything is calibrated (``nanoir.inspect``, and ``quantize``'s check).

:func:`refusal` is the per-op question (``None``: the engine takes it, subject to the
exponents :data:`CONDITIONS` names: accumulator bounds, alignment within i32, an integer
algorithm's bounds); :func:`buffer_refusals` the stream caches; :func:`reads_host_value` the
rule that joins host islands (an op reading a host op's float result without a fake-quant in
between runs on the host too). lower-to-hw runs :func:`refusal` before its patterns: with
``host=false`` a refusal is its error, with ``host=true`` the op stays on the host.

    nf.reduce "prod" %x     -> Refusal("multiplies codes together: ...", "op")
    nf.conv %x, %w (a target without "conv")
                            -> Refusal("lowers to nh.conv, which the target ... does not take", "op")
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array
from nanoir.dialects.functions import describe
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import (
    DataMovement,
    IntegerAlgorithm,
    LookupTable,
    grid_operands,
    normalised_dims,
)
from nanoir.lowering.analysis.plan import plan_function
from nanoir.lowering.analysis.rules import StreamPlanError
from nanoir.lowering.hw.codes import container_width, dyadic_exponent, float_constant_of
from nanoir.lowering.hw.core import LowerToHwError
from nanoir.runtime.numerics.reduce import sum_bits
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from nanoir.target import Target

__all__ = [
    "CONDITIONS",
    "LOWERS_TO",
    "Grid",
    "PlannedView",
    "QuantizedView",
    "Refusal",
    "View",
    "buffer_refusals",
    "check_before_calibrating",
    "conditions",
    "function_ops",
    "is_placed_op",
    "placement",
    "planned_view",
    "reads_host_value",
    "refusal",
]


@dataclass(frozen=True)
class Refusal:
    """Why an op runs on the host: ``reason`` as lower-to-hw says it after the op's name,
    ``kind`` what the engine lacks: ``op`` (no integer form, or an nh op the target lacks),
    ``bits``, ``mode`` (rounding or signedness), ``shape`` (an operand or shape the integer
    form cannot take), ``buffer`` (stream caches), ``host`` (reads a host island's float
    value), ``exponents`` (found only while lowering, with the calibrated exponents)."""

    reason: str
    kind: str

    @property
    def structural(self) -> bool:
        """Known before calibrating (every kind but ``exponents``)."""
        return self.kind != "exponents"


@dataclass(frozen=True)
class Grid:
    """Where a value's codes are, without the exponents: bits, signedness, rounding."""

    bits: int
    signed: bool
    rounding: str


# ---------------------------------------------------------------------------------------------
# Views: an nq program, or an nf program with quantize's placement
# ---------------------------------------------------------------------------------------------


class View(Protocol):
    """What the structural checks know of each value."""

    def grid(self, value: SSAValue) -> Grid | None:
        """The grid ``value``'s codes are on (its fake-quant's, looking back through data
        movement), or None for a float value (an accumulator, an unquantized constant)."""
        ...

    def result_grid(self, value: SSAValue) -> Grid | None:
        """The grid of the fake-quant(s) that read ``value`` (the op's result grid), or None."""
        ...

    def only_quantized(self, value: SSAValue) -> bool:
        """Whether fake-quants alone read ``value``."""
        ...

    def float_constant(self, value: SSAValue) -> np.ndarray | None:
        """The data of an unquantized float constant operand, else None."""
        ...

    def is_constant(self, value: SSAValue) -> bool:
        """Whether ``value`` is computed from constants only (a weight, not a runtime value)."""
        ...

    def is_host_float(self, value: SSAValue, host: set[Operation]) -> bool:
        """Whether an op reading ``value`` reads a host op's float result (no fake-quant
        between them)."""
        ...


def _is_constant(value: SSAValue, memo: dict[SSAValue, bool]) -> bool:
    """Computed from constants only (no function input upstream)."""
    todo = [value]
    order: list[SSAValue] = []
    while todo:
        v = todo.pop()
        if v in memo:
            continue
        if isinstance(v, BlockArgument):
            memo[v] = False
            continue
        assert isinstance(v, OpResult)
        pending = [o for o in v.op.operands if o not in memo]
        if pending:
            order.append(v)
            todo.append(v)
            todo.extend(pending)
            continue
        memo[v] = all(memo[o] for o in v.op.operands)
    return memo[value]


class QuantizedView:
    """The structural facts of an nq program: its fake-quants say where the codes are."""

    def __init__(self) -> None:
        self.memo: dict[SSAValue, bool] = {}

    def grid(self, value: SSAValue) -> Grid | None:
        seen = 0
        while isinstance(value, OpResult) and seen < 10_000:
            op = value.op
            if isinstance(op, FakeQuantOp):
                return Grid(op.bits.value.data, op.is_signed, str(op.rounding_mode.value))
            if not op.has_trait(DataMovement):
                return None
            sources = grid_operands(op)
            if not sources:
                return None
            value, seen = sources[0], seen + 1
        return None

    def result_grid(self, value: SSAValue) -> Grid | None:
        for use in value.uses:
            if isinstance(use.operation, FakeQuantOp):
                return self.grid(use.operation.result)
        return None

    def only_quantized(self, value: SSAValue) -> bool:
        uses = list(value.uses)
        return bool(uses) and all(isinstance(u.operation, FakeQuantOp) for u in uses)

    def float_constant(self, value: SSAValue) -> np.ndarray | None:
        return float_constant_of(value)

    def is_constant(self, value: SSAValue) -> bool:
        return _is_constant(value, self.memo)

    def is_host_float(self, value: SSAValue, host: set[Operation]) -> bool:
        return isinstance(value, OpResult) and value.op in host


class PlannedView:
    """The structural facts of a float program as quantize will place its fake-quants:
    ``grids`` maps each value that gets one to its grid (``find_targets``, no exponents)."""

    def __init__(self, grids: Mapping[SSAValue, Grid]):
        self.grids = grids
        self.memo: dict[SSAValue, bool] = {}

    def grid(self, value: SSAValue) -> Grid | None:
        seen = 0
        while seen < 10_000:
            if value in self.grids:
                return self.grids[value]
            if not isinstance(value, OpResult) or not value.op.has_trait(DataMovement):
                return None
            sources = grid_operands(value.op)
            if not sources:
                return None
            value, seen = sources[0], seen + 1
        return None

    def result_grid(self, value: SSAValue) -> Grid | None:
        return self.grids.get(value)

    def only_quantized(self, value: SSAValue) -> bool:
        return value in self.grids  # quantize redirects every use to the fake-quant

    def float_constant(self, value: SSAValue) -> np.ndarray | None:
        return None if value in self.grids else float_constant_of(value)

    def is_constant(self, value: SSAValue) -> bool:
        return _is_constant(value, self.memo)

    def is_host_float(self, value: SSAValue, host: set[Operation]) -> bool:
        return isinstance(value, OpResult) and value.op in host and value not in self.grids


# ---------------------------------------------------------------------------------------------
# The tables: what each nf op lowers to, and what its lowering still depends on
# ---------------------------------------------------------------------------------------------

_SAME_NAME = (
    nf.ConvOp, nf.ConvTransposeOp, nf.LinearOp, nf.MatmulOp, nf.AddOp, nf.SubOp, nf.MaximumOp,
    nf.MinimumOp, nf.MulOp, nf.ReluOp, nf.ClampOp, nf.PReluOp, nf.MaxPoolOp, nf.AvgPoolOp,
    nf.ConcatOp, nf.ReshapeOp, nf.TransposeOp, nf.PadOp, nf.SplitOp, nf.UpsampleNearestOp,
    nf.UpsampleZeroOp, nf.UpsampleBilinearOp, nf.UpsampleBicubicOp, nf.MaxPoolIndicesOp,
    nf.MaxUnpoolOp, nf.EmbeddingOp, nf.DepthToSpaceOp, nf.SpaceToDepthOp, nf.ExpandOp,
    nf.GatherOp, nf.SoftmaxOp, nf.LogSoftmaxOp, nf.LayerNormOp, nf.GroupNormOp, nf.RecurrentOp,
    nf.CompareOp, nf.ReduceOp, nf.ArgReduceOp, nf.CumsumOp, nf.NormalizeOp,
)  # fmt: skip

LOWERS_TO: dict[type[Operation], tuple[str, ...]] = {
    **{cls: (cls.name.removeprefix("nf."),) for cls in _SAME_NAME},
    nf.DivOp: ("mul",),
    nf.AdaptiveAvgPoolOp: ("avg_pool",),
    nf.BatchNormOp: ("mul", "add"),
    nf.WhereOp: ("select",),
    **{cls: ("lut",) for cls in nf.NF.operations if cls.has_trait(LookupTable)},
}
"""The nh ops (mnemonics) each nf op with an integer form lowers to; an nf op missing here has
none (``nf.custom``). Every lowered op is also requantized (``nh.requant``) and reads constants
(``nh.constant``); a pattern may add a shift or a relayout (``nh.requant``, ``nh.reshape``)."""

FUSED: tuple[type[Operation], ...] = (
    nf.AvgPoolOp,
    nf.AdaptiveAvgPoolOp,
    nf.BatchNormOp,
    *(cls for cls in nf.NF.operations if cls.has_trait(LookupTable)),
)
"""Ops lower-to-hw lowers together with the fake-quant that reads them (one exact division,
a checked integer affine, a lookup table): their result must be read by fake-quants alone."""

_ACC = "its i32 accumulator bound (from the weight codes and the input's exponent)"
_ALIGN = "aligning its operands' exponents within i32"
_ALGORITHM = "its integer algorithm's bounds, on input and output grids of one exponent each"

CONDITIONS: dict[type[Operation], str] = {
    nf.ConvOp: _ACC,
    nf.ConvTransposeOp: _ACC,
    nf.LinearOp: _ACC,
    nf.MatmulOp: "its i32 accumulator bound, on operands of one exponent each",
    nf.AddOp: _ALIGN,
    nf.SubOp: _ALIGN,
    nf.MaximumOp: _ALIGN,
    nf.MinimumOp: _ALIGN,
    nf.ConcatOp: _ALIGN,
    nf.WhereOp: _ALIGN,
    nf.CompareOp: _ALIGN,
    nf.MulOp: "its products within i32",
    nf.DivOp: "its products within i32",
    nf.PReluOp: "its products within i32",
    nf.BatchNormOp: "an integer affine within i32 that reproduces its fake-quant's rounding",
    nf.SoftmaxOp: _ALGORITHM,
    nf.LogSoftmaxOp: _ALGORITHM,
    nf.LayerNormOp: _ALGORITHM,
    nf.GroupNormOp: _ALGORITHM,
    nf.NormalizeOp: _ALGORITHM,
    nf.RecurrentOp: "its internal grids (quantize's) and accumulator bounds",
    nf.ReduceOp: "its sum within i32",
    nf.CumsumOp: "its sum within i32",
    nf.UpsampleBilinearOp: "its sums within i32",
    nf.UpsampleBicubicOp: "its sums within i32",
    nf.ClampOp: "its bounds as whole codes within i32",
    nf.PadOp: "its pad value as a code within i32",
}
"""What the lowering of each op still checks once the exponents are known (inspect's
"engine, subject to exponents: ..."); any op may also need exponents moved by exact shifts."""


def conditions(op: Operation) -> str:
    """What ``op``'s lowering checks on the calibrated exponents (for inspect's table); empty
    for an op that only carries them (data movement, relu ...)."""
    return CONDITIONS.get(type(op), "")


def is_placed_op(op: Operation) -> bool:
    """An nf op the engine-or-host question is asked of (not a constant, not a fake-quant)."""
    return op.name.startswith("nf.") and not isinstance(op, nf.ConstantOp)


# ---------------------------------------------------------------------------------------------
# Per-op structural checks (the patterns' refusals that do not depend on exponents)
# ---------------------------------------------------------------------------------------------

Check = Callable[[Operation, "View"], "str | None"]

NO_FORM = ("has no integer", "multiplies codes")
"""How a check's reason starts when the op has no integer form at all (kind ``op``); any
other reason is an operand or shape the form cannot take (kind ``shape``)."""


def _runtime(view: View, value: SSAValue | None) -> bool:
    return value is not None and not view.is_constant(value)


def _weighted(op: Operation, view: View) -> str | None:
    weight, bias = op.operands[1], op.operands[2] if len(op.operands) > 2 else None
    if _runtime(view, weight):
        return "has a runtime weight; only constant weights lower to hw"
    if _runtime(view, bias):
        return "has a runtime bias; only constant biases lower to hw"
    return None


def _prelu(op: Operation, view: View) -> str | None:
    if _runtime(view, op.operands[1]):
        return "has a runtime slope; only a constant slope lowers to hw"
    return None


def _batch_norm(op: Operation, view: View) -> str | None:
    if any(_runtime(view, v) for v in op.operands[1:]):
        return "has a runtime parameter; only constant parameters lower to hw"
    grid = view.result_grid(op.results[0])
    if grid is not None and not grid.signed:
        return (
            "is fake-quantized to unsigned codes (signed = false); its integer affine is "
            "searched for signed codes only: quantize its output signed"
        )
    return None


def _div(op: Operation, view: View) -> str | None:
    divisor = view.float_constant(op.operands[1])
    if divisor is None:
        return (
            "divides by a runtime value; only division by a constant "
            "with a dyadic reciprocal (a power of two) lowers to hw"
        )
    with np.errstate(all="ignore"):
        inverse = 1.0 / divisor
        exact = np.array_equal(divisor * inverse, np.ones_like(inverse))
    if dyadic_exponent(inverse) is None or not exact:
        return f"divides by {divisor.reshape(-1)[:4].tolist()}, whose reciprocal is not a dyadic rational"
    return None


def _clamp(op: Operation, view: View) -> str | None:
    bounds = [b.value.data for b in (op.min, op.max) if b is not None]  # type: ignore[attr-defined]
    if bounds and dyadic_exponent(np.array(bounds)) is None:
        # On no grid; read by fake-quants alone, it clamps at the bounds' codes after them.
        grid = view.result_grid(op.results[0])
        if not view.only_quantized(op.results[0]) or grid is None or grid.bits == 1:
            return (
                f"clamps at {bounds}, which are not dyadic rationals (read by fake-quants "
                "alone of 2 bits or more, it would clamp at the bounds' codes)"
            )
    return None


def _pad(op: Operation, view: View) -> str | None:
    mode, value = op.mode.data, op.value.value.data  # type: ignore[attr-defined]
    if mode == nf.PadMode.CONSTANT and dyadic_exponent(np.array([value])) is None:
        return f"pads with {value}, which is not a dyadic rational"
    return None


def _adaptive_pool(op: Operation, view: View) -> str | None:
    out = nf.array_values(op.output_size) or ()  # type: ignore[attr-defined]
    spatial = nf.tensor_shape(op.operands[0])[2:]
    if any(s == DYNAMIC_INDEX or s % o for s, o in zip(spatial, out)):
        return "has windows of different sizes (input not divisible by the output size)"
    return None


def _embedding(op: Operation, view: View) -> str | None:
    ids = op.operands[0]
    if not isinstance(ids, BlockArgument) or not nf.is_index_input(ids):
        return (
            "reads indices that are not a function input read only as indices (computed or "
            "fake-quantized indices have no integer form)"
        )
    return None


def _max_unpool(op: Operation, view: View) -> str | None:
    if not isinstance(op.operands[1].owner, nf.MaxPoolIndicesOp):
        return (
            "unpools by indices that are not nf.max_pool_indices' result (indices given to "
            "the program have no integer form: unpool by a max pool's indices in the program)"
        )
    return None


def _algorithm(op: Operation, view: View) -> str | None:
    """An integer algorithm needs its input on a grid and its result read by one fake-quant
    of at least ``min_bits`` (the exponents' part, one per tensor, is checked while lowering)."""
    trait = op.get_trait(IntegerAlgorithm)
    assert trait is not None
    if view.grid(op.operands[0]) is None:
        return "has no integer form here: its input is not quantized"
    out = view.result_grid(op.results[0])
    if out is None or not view.only_quantized(op.results[0]):
        return "has no integer form here: its result is not read by one fake-quant alone"
    if out.bits < trait.min_bits:
        return (
            f"has no integer form here: its output fake-quant has {out.bits} bits "
            f"(at least {trait.min_bits})"
        )
    return None


def _softmax(op: Operation, view: View) -> str | None:
    reason = _algorithm(op, view)
    if reason is None and isinstance(op, nf.SoftmaxOp) and op.mask is not None:
        if constant_array(op.mask) is None:
            return "has a mask computed at run time; nh.softmax takes a constant mask"
    return reason


def _norm(op: Operation, view: View) -> str | None:
    reason = _algorithm(op, view)
    if reason is not None:
        return reason
    shape = nf.tensor_shape(op.operands[0])
    if any(shape[d] == DYNAMIC_INDEX for d in normalised_dims(op)):
        return "normalises over a dynamic dim; nh needs its size"
    grids = (view.grid(op.operands[0]), view.result_grid(op.results[0]))
    if any(g is not None and not g.signed for g in grids):
        return "has unsigned codes, which lower-to-hw does not carry yet"
    return None


def _normalize(op: Operation, view: View) -> str | None:
    reason = _algorithm(op, view)
    if reason is not None:
        return reason
    shape = nf.tensor_shape(op.operands[0])
    if shape and shape[op.axis.value.data % len(shape)] == DYNAMIC_INDEX:  # type: ignore[attr-defined]
        return "normalises over a dynamic dim; nh needs its size"
    if not shape:
        return "normalises a 0-d value (nh values have a rank)"
    return None


def _reduce(op: Operation, view: View) -> str | None:
    kind = op.kind.data  # type: ignore[attr-defined]
    if kind == "prod":
        return (
            "multiplies codes together: a product of n codes needs n times their bits, "
            "which no integer form holds"
        )
    if kind != "sum":
        return None
    dims = tuple(nf.array_values(op.dims) or ())  # type: ignore[attr-defined]
    shape = nf.tensor_shape(op.operands[0])
    if DYNAMIC_INDEX in [shape[d] for d in dims]:
        return (
            f"sums over a dynamic dim ({[d for d in dims if shape[d] == DYNAMIC_INDEX]}): the "
            "accumulator's bound is known only at run time (import with static shapes)"
        )
    grid = view.grid(op.operands[0])
    if grid is None:
        return None
    least = grid.bits + (0 if grid.signed else 1)  # the fewest bits its codes can need
    n = math.prod(shape[d] for d in dims)
    bits = sum_bits(max(least, 2), n)
    if bits > 32:
        return (
            f"sums {n} codes of {least} bits: the accumulator needs {bits} bits, more than "
            "i32 (quantize its input to fewer bits, or sum fewer elements)"
        )
    return None


CHECKS: dict[type[Operation], Check] = {
    nf.ConvOp: _weighted,
    nf.ConvTransposeOp: _weighted,
    nf.LinearOp: _weighted,
    nf.PReluOp: _prelu,
    nf.BatchNormOp: _batch_norm,
    nf.DivOp: _div,
    nf.ClampOp: _clamp,
    nf.PadOp: _pad,
    nf.AdaptiveAvgPoolOp: _adaptive_pool,
    nf.EmbeddingOp: _embedding,
    nf.MaxUnpoolOp: _max_unpool,
    nf.SoftmaxOp: _softmax,
    nf.LogSoftmaxOp: _softmax,
    nf.LayerNormOp: _norm,
    nf.GroupNormOp: _norm,
    nf.NormalizeOp: _normalize,
    nf.ReduceOp: _reduce,
}
"""Per nf op class, its structural refusal (the pattern's own words), or None."""


def _fused(op: Operation, view: View) -> str | None:
    """A fused op whose result some non-fake-quant reads keeps a float result."""
    if view.only_quantized(op.results[0]):
        return None
    if isinstance(op, nf.BatchNormOp):
        return (
            "has no integer lowering unless only fake-quants read it (its "
            "scale 1/sqrt(var + eps) is not dyadic): quantize its result, "
            "or fold it into a conv (fold-bn)"
        )
    if op.has_trait(LookupTable) and view.result_grid(op.results[0]) is not None:
        return "is used other than by one fake-quant; its float result has no integer form"
    return "has no integer lowering" + (
        " (it is float-only: quantize its result with a fake-quant to get a lookup table)"
        if op.has_trait(LookupTable)
        else ""
    )


def _target_refusal(op: Operation, view: View, target: Target) -> Refusal | None:
    """What the target lacks: the nh ops, the code widths, signedness or rounding."""
    missing = [m for m in LOWERS_TO[type(op)] if not target.takes_op(m)]
    if missing:
        return Refusal(
            f"lowers to nh.{missing[0]}, which the target {target.name!r} does not take", "op"
        )
    weighted = type(op) in _WEIGHTED
    weight = op.operands[1] if len(op.operands) > 1 and weighted else None
    for i, v in enumerate(op.operands):
        grid = view.grid(v)
        if grid is None or (weighted and i == 2):
            continue  # (a bias is aligned into the i32 accumulator when compiling)
        is_weight = v is weight
        if not target.takes_bits(grid.bits, weight=is_weight):
            widths = sorted(target.weight_bits if is_weight else target.activation_bits)
            what = "weights" if is_weight else "codes"
            return Refusal(
                f"reads {grid.bits}-bit {what} (%{v.name_hint or '?'}), wider than the target "
                f"{target.name!r} takes ({', '.join(map(str, widths))})",
                "bits",
            )
        if not grid.signed and not target.unsigned:
            return Refusal(
                f"reads unsigned codes (%{v.name_hint or '?'}), which the target {target.name!r} "
                "does not take",
                "mode",
            )
    for r in op.results:
        grid = view.result_grid(r)
        if grid is None:
            continue
        if not target.takes_bits(grid.bits):
            widths = ", ".join(map(str, sorted(target.activation_bits)))
            return Refusal(
                f"gives {grid.bits}-bit codes, wider than the target {target.name!r} takes "
                f"({widths})",
                "bits",
            )
        if not grid.signed and not target.unsigned:
            return Refusal(
                f"gives unsigned codes, which the target {target.name!r} does not take", "mode"
            )
        offline = op.has_trait(
            LookupTable
        )  # a table's rounding is the compiler's, not the engine's
        if not offline and grid.rounding not in target.rounding:
            modes = ", ".join(sorted(target.rounding))
            return Refusal(
                f"is requantized rounding {grid.rounding}, which the target {target.name!r} does "
                f"not do ({modes})",
                "mode",
            )
    return None


_WEIGHTED = (nf.ConvOp, nf.ConvTransposeOp, nf.LinearOp)


def refusal(op: Operation, view: View, target: Target | None = None) -> Refusal | None:
    """Why ``op`` (an nf op of a quantized or placed program) cannot run on the engine,
    whatever the exponents; None when it can, subject to :func:`conditions`."""
    cls = type(op)
    if cls not in LOWERS_TO:
        return Refusal("has no integer lowering", "op")
    if cls in FUSED:
        reason = _fused(op, view)
        if reason is not None:
            return Refusal(reason, "op")
    check = CHECKS.get(cls)
    reason = check(op, view) if check is not None else None
    if reason is not None:
        return Refusal(reason, "op" if reason.startswith(NO_FORM) else "shape")
    if target is not None:
        return _target_refusal(op, view, target)
    return None


def reads_host_value(op: Operation, view: View, host: set[Operation]) -> Refusal | None:
    """``op`` reads a host op's float result with no fake-quant between them: it joins that
    host island (its codes would have no grid on the engine)."""
    for v in op.operands:
        if view.is_host_float(v, host):
            owner = v.owner
            assert isinstance(owner, Operation)
            return Refusal(f"reads the float result of the host op {describe(owner)}", "host")
    return None


# ---------------------------------------------------------------------------------------------
# Stream buffers
# ---------------------------------------------------------------------------------------------


def _bytes(shape: Iterable[int], bits: int) -> int:
    elements = math.prod(max(d, 1) for d in shape)  # the batch (-1) counts one sample
    return -(-elements * bits // 8)


def cache_bytes(func: FuncOp, view: View, mem_dim: int) -> dict[Operation, int] | None:
    """Per op of ``func`` (not fake-quants), the bytes of its stream caches for one sample
    (the plan's cache shapes, at the cached values' code widths, packed); None when the
    program does not stream along ``mem_dim``."""
    try:
        plan = plan_function(func, mem_dim)
    except StreamPlanError:
        return None
    sizes: dict[Operation, int] = {}
    for (op, value), cache in plan.caches.items():
        if isinstance(op, FakeQuantOp):
            continue
        grid = view.grid(value)
        bits = grid.bits if grid is not None else _element_bits(value)
        sizes[op] = sizes.get(op, 0) + _bytes(cache.shape, bits)
    return sizes


def _element_bits(value: SSAValue) -> int:
    """A value's element width as its type says (an nh value's container; f32 for floats)."""
    t = value.type
    if isinstance(t, TensorType):
        element = t.get_element_type()
        width = getattr(getattr(element, "width", None), "data", None)
        if isinstance(width, int):
            return container_width(width) if width <= 32 else width
    return 32


def buffer_refusals(func: FuncOp, view: View, target: Target | None) -> dict[Operation, Refusal]:
    """The ops whose stream caches need more than the target's on-chip buffer (none when the
    target has no buffer bound or the program does not stream along its ``stream_dim``)."""
    if target is None or target.buffer_bytes is None:
        return {}
    sizes = cache_bytes(func, view, target.stream_dim)
    if sizes is None:
        return {}
    return {
        op: Refusal(
            f"needs {n} bytes of stream buffer along dim {target.stream_dim}, more than the "
            f"{target.buffer_bytes} bytes on chip of the target {target.name!r}",
            "buffer",
        )
        for op, n in sizes.items()
        if n > target.buffer_bytes and is_placed_op(op)
    }


def function_ops(func: FuncOp) -> list[Operation]:
    """The ops of ``func`` the engine-or-host question is asked of, in program order."""
    return [op for op in func.body.block.ops if is_placed_op(op) and not isinstance(op, ReturnOp)]


def placement(
    func: FuncOp, view: View, target: Target | None
) -> list[tuple[Operation, Refusal | None]]:
    """Every op of ``func`` with why it runs on the host (None: on the engine, subject to
    :func:`conditions`), asked in program order as lower-to-hw asks them (``hw/host.py``):
    a host island's float read directly, then :func:`refusal`, then the stream buffers."""
    buffers = buffer_refusals(func, view, target)
    host: set[Operation] = set()
    placed: list[tuple[Operation, Refusal | None]] = []
    for op in function_ops(func):
        why = reads_host_value(op, view, host) or refusal(op, view, target) or buffers.get(op)
        if why is not None:
            host.add(op)
        placed.append((op, why))
    return placed


def planned_view(targets: Iterable[object], rounding: object) -> PlannedView:
    """quantize's placement as a view: each target (``find_targets``: its ``value``,
    ``bits``, ``signed`` and ``rounding``, else ``rounding``, the options') becomes a grid."""
    grids: dict[SSAValue, Grid] = {}
    for t in targets:
        mode = getattr(t, "rounding", None) or rounding
        grids[t.value] = Grid(t.bits, t.signed, str(getattr(mode, "value", mode)))  # type: ignore[attr-defined]
    return PlannedView(grids)


def check_before_calibrating(
    func: FuncOp, targets: Iterable[object], rounding: object, target: Target
) -> None:
    """quantize's question before it calibrates: an op ``target`` cannot run, whatever the
    exponents, is refused now, naming it (:class:`LowerToHwError`), so a network that cannot
    lower costs no calibration. ``quantize(host=True)`` does not ask (the host runs it)."""
    for op, why in placement(func, planned_view(targets, rounding), target):
        if why is not None:
            raise LowerToHwError(
                f"quantize: {describe(op)} cannot run on the engine {target.name!r}: "
                f"{why.reason} (quantize and lower with host=True to run it on the host; "
                "nanoir.inspect lists every such op)"
            )
