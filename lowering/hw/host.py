"""Engine or host, op by op: the part of lower-to-hw that asks :mod:`.support` first, and
with ``host=true`` keeps what the engine cannot run as float host islands.

Every nf op is asked :func:`~nanoir.lowering.hw.support.refusal` (and the stream-buffer and
host-island rules) before any pattern runs; with ``host=false`` (the default) a refusal is
lower-to-hw's error, naming the op, with ``host=true`` the op stays on the host. A pattern
that fails on the calibrated exponents (an accumulator bound, an alignment past i32) is an
error with ``host=false`` and, with ``host=true``, puts the op on the host too (its ``nh``
ops already emitted are taken back), as does an nh op the pattern emits that the target
does not take.

A host island is the nq program's own ops, kept as they are: the nf op (marked
``nh.host = "<reason>"`` and ``nh.host_kind = "<what the engine lacks>"``), and the constants and fake-quants of constants it reads. Its
boundary:

- an engine value a host op reads goes through ``nh.to_host`` (codes to reals, exact);
- an engine value a host op reads that is a fake-quant's (or moved from one) is that
  fake-quant again on the host after ``nh.to_host`` (the identity on its grid): an op whose
  nq kernel reads its operands' grids from the IR (softmax, a norm, a recurrent cell) finds it;
- a fake-quant of a host op's float result stays on the host, and ``nh.from_host`` (its own
  bits, rounding, signedness and exponents) brings its value onto the engine, exactly; a host
  op reading it reads the float fake-quant (no round trip through codes);
- an op reading a host op's float result directly (no fake-quant between) joins the island.

Run in float64 (the executor does, for a program with host ops), each island computes what
the nq level computes, and both boundary ops are exact, so the partitioned program equals
the nq program bit for bit.

    %y = nf.custom "Erf" %xq           %xf = nh.to_host %xq : ...i8, #nh.fixed<5>> -> ...xf32
    %yq = nq.fake_quant %y {exp = 4}  ─▶  %y = nf.custom "Erf" %xf {nh.host = "has no integer lowering"}
    %z = nf.relu %yq                     %yq = nh.from_host %y {bits = 8} : ...xf32 -> ...i8, #nh.fixed<4>>
                                         %z = nh.relu %yq
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.functions import describe, runtime_layout
from nanoir.dialects.nq import FakeQuantOp, RoundingModeAttr
from nanoir.dialects.traits import DataMovement, grid_operands
from nanoir.lowering.hw.codes import container_width, expand
from nanoir.lowering.hw.core import HwLowering, HwValue, LowerToHwError, fused_into_fake_quant
from nanoir.lowering.hw.fake_quant import fake_quant_params
from nanoir.lowering.hw.support import (
    QuantizedView,
    Refusal,
    buffer_refusals,
    is_placed_op,
    reads_host_value,
    refusal,
)
from xdsl.dialects.builtin import IntegerAttr, StringAttr, TensorType, i64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern
from xdsl.rewriter import InsertPoint, Rewriter

from nanoir.target import Target

__all__ = ["HOST_ATTR", "HOST_KIND_ATTR", "EngineOrHost", "host_ops", "host_reasons"]

HOST_ATTR = "nh.host"
"""The attribute naming why an op of a partitioned program runs on the host."""
HOST_KIND_ATTR = "nh.host_kind"
"""Beside it, what the engine lacks (``Refusal.kind``: ``op``, ``bits``, ``mode``, ``shape``,
``buffer``, ``host``, or ``exponents`` for a refusal found on the calibrated exponents)."""


def host_ops(func: FuncOp) -> list[Operation]:
    """The host ops of a partitioned function (those lower-to-hw marked), in program order."""
    return [op for op in func.body.block.ops if HOST_ATTR in op.attributes]


def host_reasons(func: FuncOp) -> list[tuple[Operation, Refusal]]:
    """``(op, why)`` for every host op of a partitioned function."""
    found = []
    for op in host_ops(func):
        reason, kind = op.attributes[HOST_ATTR], op.attributes.get(HOST_KIND_ATTR)
        found.append(
            (
                op,
                Refusal(
                    reason.data if isinstance(reason, StringAttr) else str(reason),
                    kind.data if isinstance(kind, StringAttr) else "exponents",
                ),
            )
        )
    return found


def _reason(error: LowerToHwError, op: Operation) -> str:
    """A pattern's message without ``lower-to-hw: 'nf.conv' (%c) `` (it names ``op``)."""
    text = str(error.args[0] if error.args else error).removeprefix("lower-to-hw: ")
    return text.removeprefix(describe(op) + " ")


class EngineOrHost(RewritePattern):
    """Wraps lower-to-hw's patterns: the structural question first, then the patterns, and
    with ``host`` the host islands (see the module docstring)."""

    def __init__(
        self,
        hw: HwLowering,
        patterns: RewritePattern,
        func: FuncOp,
        target: Target | None,
        host: bool,
    ):
        self.hw = hw
        self.patterns = patterns
        self.target = target
        self.host = host
        self.view = QuantizedView()
        self.host_set: set[Operation] = set()
        self.reasons: dict[Operation, Refusal] = {}
        self.buffers = buffer_refusals(func, self.view, target)
        self.on_host: dict[SSAValue, SSAValue] = {}
        """Engine values a host op reads, and their ``nh.to_host``."""
        self.deferred: set[Operation] = set()
        """Ops lowered with the fake-quant that reads them (not yet lowered)."""
        self.kept_quants: set[Operation] = set()
        """Fake-quants the host runs: those read by ``nh.from_host``, and their copies on
        ``nh.to_host`` values."""

    # -- the walk ----------------------------------------------------------------------------

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, ReturnOp) and self.host_set:
            self._return(op, rewriter)
        elif is_placed_op(op):
            self._nf_op(op, rewriter)
        elif isinstance(op, FakeQuantOp) and self.host:
            self._fake_quant(op, rewriter)
        else:
            self.patterns.match_and_rewrite(op, rewriter)

    def _nf_op(self, op: Operation, rewriter: PatternRewriter) -> None:
        why = (
            reads_host_value(op, self.view, self.host_set)
            or refusal(op, self.view, self.target)
            or self.buffers.get(op)
        )
        if why is not None:
            if not self.host:
                raise self.hw.fail(op, why.reason)
            rewriter.has_done_action = True
            self.keep(op, why)
            return
        if fused_into_fake_quant(op):
            self.deferred.add(op)
        before = op.prev_op
        try:
            self._rewrite_for_target(op, before, rewriter)
        except LowerToHwError as e:
            if not self.host:
                raise
            self._undo(before, op)
            rewriter.has_done_action = True
            self.keep(op, Refusal(_reason(e, op), "exponents"))

    def _rewrite_for_target(
        self, op: Operation, before: Operation | None, rewriter: PatternRewriter
    ) -> None:
        """Lower ``op`` by the patterns; a ``LowerToHwError`` when it lowered to nh ops the
        target does not take (the ops added after ``before``)."""
        self.patterns.match_and_rewrite(op, rewriter)
        missing = self._missing_ops(before, op)
        if missing is not None:
            name = self.target.name if self.target else ""
            raise self.hw.fail(
                op, f"lowers here to nh.{missing}, which the target {name!r} does not take"
            )

    def _fake_quant(self, op: FakeQuantOp, rewriter: PatternRewriter) -> None:
        producer = op.input.owner
        if isinstance(producer, Operation) and producer in self.host_set:
            rewriter.has_done_action = True
            self.from_host(op)
            return
        before = op.prev_op
        try:
            self._rewrite_for_target(op, before, rewriter)
        except LowerToHwError as e:
            if not (isinstance(producer, Operation) and producer in self.deferred):
                raise  # (a fake-quant of an input, a constant or an engine op's result)
            self._undo(before, op)
            rewriter.has_done_action = True
            self.keep(producer, Refusal(_reason(e, producer), "exponents"))
            self.from_host(op)

    def _return(self, op: ReturnOp, rewriter: PatternRewriter) -> None:
        results = [
            v if self.view.is_host_float(v, self.host_set) else self.hw.get(op, v).value
            for v in op.arguments
        ]
        rewriter.replace(op, ReturnOp(*results))

    def _missing_ops(self, before: Operation | None, op: Operation) -> str | None:
        """The first nh op emitted for ``op`` (between ``before`` and it) that the target
        does not take, if any."""
        if self.target is None:
            return None
        for new in self._emitted(before, op):
            mnemonic = new.name.removeprefix("nh.")
            if new.name.startswith("nh.") and not self.target.takes_op(mnemonic):
                return mnemonic
        return None

    @staticmethod
    def _emitted(before: Operation | None, op: Operation) -> list[Operation]:
        block = op.parent_block()
        assert block is not None
        first = before.next_op if before is not None else block.first_op
        emitted = []
        while first is not None and first is not op:
            emitted.append(first)
            first = first.next_op
        return emitted

    def _undo(self, before: Operation | None, op: Operation) -> None:
        """Take back what a failed pattern emitted for ``op`` (and what it recorded)."""
        for new in reversed(self._emitted(before, op)):
            new.detach()
            new.erase(safe_erase=False)
        for r in op.results:
            self.hw.values.pop(r, None)
        self.hw.late_bias = None

    # -- the island --------------------------------------------------------------------------

    def keep(self, op: Operation, why: Refusal) -> None:
        """Keep ``op`` on the host: engine values it reads go through ``nh.to_host``."""
        self.host_set.add(op)
        self.reasons[op] = why
        op.attributes[HOST_ATTR] = StringAttr(why.reason)
        op.attributes[HOST_KIND_ATTR] = StringAttr(why.kind)
        for i, v in enumerate(op.operands):
            if self.view.is_host_float(v, self.host_set) or self.view.is_constant(v):
                continue  # a host float, or a constant the host computes itself
            owner = v.owner
            if isinstance(owner, FakeQuantOp) and owner.input.owner in self.host_set:
                continue  # a fake-quant of a host float: the host quantizes it itself
            if v not in self.on_host:
                self.on_host[v] = self._to_host(op, v)
            op.operands[i] = self.on_host[v]

    def _to_host(self, op: Operation, v: SSAValue) -> SSAValue:
        """``v``'s reals on the host (``nh.to_host`` of its codes) and, when ``v`` is a
        fake-quant's value (or a data movement of a per-tensor one), that fake-quant again on
        them: the identity on values already on its grid, and what an op whose nq kernel reads
        its operand's grid from the IR (an integer algorithm, a recurrent cell) looks for."""
        hv = self.hw.values.get(v)
        if hv is None:
            raise self.hw.fail(op, f"reads %{v.name_hint or '?'}, which has no nh value")
        t = v.type
        assert isinstance(t, TensorType)
        new = nh.ToHostOp.create(operands=[hv.value], result_types=[t])
        Rewriter.insert_op(new, InsertPoint.before(op))
        if v.name_hint:
            new.result.name_hint = v.name_hint
        source = source_fake_quant(v)
        if source is None or (
            source.result is not v and source.exp.get_type().element_count() != 1
        ):
            return new.result
        again = FakeQuantOp(
            new.result, source.bits.value.data, source.exp, source.rounding_mode,
            signed=source.is_signed,
        )  # fmt: skip
        Rewriter.insert_op(again, InsertPoint.before(op))
        if v.name_hint:
            again.result.name_hint = v.name_hint
        self.kept_quants.add(again)
        return again.result

    def from_host(self, op: FakeQuantOp) -> None:
        """A fake-quant of a host float: its codes come onto the engine by ``nh.from_host``."""
        bits, mode, _, nh_exp = fake_quant_params(op)
        shape = TensorType.get_shape(op.result.type)  # type: ignore[arg-type]
        rank = len(shape)
        exps = expand(nh_exp, rank)
        varying = [i for i, d in enumerate(exps.shape) if d > 1]
        layout = layout_with_channels(rank, varying[0] if varying else None)
        signed = op.is_signed
        t = self.hw.result_type(shape, exps, container_width(bits), layout, signed)
        # It reads the fake-quant's value (on its grid already: requantized exactly), so the
        # fake-quant stays on the host, the sole reader of the host op an integer algorithm
        # looks for.
        new = nh.FromHostOp.create(
            operands=[op.result],
            result_types=[t],
            properties={"bits": IntegerAttr(bits, i64), "rounding": RoundingModeAttr(mode)},
        )
        Rewriter.insert_op(new, InsertPoint.after(op))
        self.kept_quants.add(op)
        if op.result.name_hint:
            new.result.name_hint = op.result.name_hint
        self.hw.set(op.result, HwValue(new.result, np.asarray(exps), bits + (0 if signed else 1)))

    def kept_ops(self) -> set[Operation]:
        """The nq ops the host islands keep: host ops and the nq ops they read."""
        kept: set[Operation] = set()
        todo = [*self.host_set, *self.kept_quants]
        while todo:
            op = todo.pop()
            if op in kept:
                continue
            kept.add(op)
            for v in op.operands:
                if isinstance(v, OpResult) and not v.op.name.startswith("nh."):
                    todo.append(v.op)
        return kept


def source_fake_quant(value: SSAValue) -> FakeQuantOp | None:
    """The fake-quant ``value`` comes from, looking back through data movement."""
    for _ in range(10_000):
        owner = value.owner
        if isinstance(owner, FakeQuantOp):
            return owner
        if not isinstance(owner, Operation) or not owner.has_trait(DataMovement):
            return None
        sources = grid_operands(owner)
        if not sources:
            return None
        value = sources[0]
    return None


def layout_with_channels(rank: int, axis: int | None) -> str:
    """The runtime layout of ``rank`` dims with its channel dim at ``axis`` (``fixed`` needs
    per-channel exponents along the layout's ``C``)."""
    layout = runtime_layout(rank)
    if axis is None or layout.find("C") == axis:
        return layout
    letters = ["D" if c == "C" else c for c in layout]
    letters[axis] = "C"
    return "".join(letters)
