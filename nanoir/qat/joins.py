"""quantize's join rules in the QAT module: every forward ties exponents at joins as quantize
would for the same exponents, so that ``convert`` is the module's program and lowers.

``quantize`` settles calibrated exponents where values meet (add, sub, concat, a conv's
accumulator and bias; :mod:`nanoir.lowering.quantize.joins`) but uses imported ones as given,
and ``convert`` imports the module's. So the module applies the same rules itself
(:class:`JoinRules`, on :mod:`nanoir.lowering.quantize.join_rules`): at the start of each forward, the
rules run on every quantizer's current integer exponent (the learner's: EMA scale or rounded
LSQ exponent, before this step's EMA update) and the weights' and biases' current values.

The choice: a tied exponent is a function of the learners' exponents, recomputed every step,
with no gradient through the tie. Where the rules changed an exponent (a zero branch given its
neighbour's exponent, an operand capped 31 bits past the coarsest at a join, a bias capped at
its accumulator, an input or weight step grown so the accumulator fits i32), the quantizer uses
the tied value and its own exponent gets no gradient there; its learner keeps learning (EMA)
or keeps its value (LSQ) and takes over again when the tie lifts. Where the rules changed
nothing, the quantizer uses its learner's exponent of this step as before (so a network with
no join that needs a rule trains exactly as without them). In eval mode nothing updates, so
the module's exponents are exactly the settled ones ``export_exponents`` and ``convert`` give.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
from torch import nn
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue

from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.quantize import (
    Quant,
    Rules,
    Target,
    describe,
    describe_derived,
    describe_norms,
)

__all__ = ["JoinRules"]


class JoinRules:
    """The QAT program described to the join rules once; :meth:`settle` per forward.

    ``key_of`` maps each quantized value (a target's) to its quantizer's key, ``param_key``
    a named constant's name to its parameter's key.
    """

    def __init__(
        self,
        func: FuncOp,
        targets: Mapping[SSAValue, Target],
        key_of: Mapping[SSAValue, str],
        quantizers: nn.ModuleDict,
        params: nn.ParameterDict,
        param_key: Mapping[str, str],
    ):
        self.quantizers, self.params = quantizers, params
        self.quants: dict[str, Quant] = {}
        self.loaders: dict[str, Callable[[], np.ndarray] | None] = {}

        def quant(value: SSAValue) -> Quant:
            key = key_of[value]
            if key not in self.quants:
                q = quantizers[key]
                self.loaders[key] = self._loader(value, param_key)
                self.quants[key] = Quant(
                    q.bits, q.int_exponents(), q.rounding, self.loaders[key], signed=q.signed
                )
            return self.quants[key]

        def quant_of(value: SSAValue) -> Quant | None:
            t = targets.get(value)
            return None if t is None or t.kind == "bias" or value not in key_of else quant(value)

        def bias_of(op: Operation) -> Quant | None:
            if len(op.operands) < 3 or op.operands[2] not in key_of:
                return None
            self.biases.add(key_of[op.operands[2]])
            return quant(op.operands[2])

        self.biases: set[str] = set()

        self.joins, self.weighted = describe(func, quant_of, bias_of)
        self.norms = describe_norms(func, quant_of)
        self.derived = describe_derived(func, quant_of)
        self.origins: dict[str, str] = {}
        """Why the latest :meth:`settle` changed a quantizer's exponents (``join:%add``, as
        quantize's ``origin`` attribute), by key."""
        self.calibrated: dict[str, tuple[np.ndarray, str]] = {}
        """Exponents ``calibrate`` took from quantize where a join rule chose them, with
        that rule's origin: kept while the exponents stay (the learners start settled)."""

    def _loader(
        self, value: SSAValue, param_key: Mapping[str, str]
    ) -> Callable[[], np.ndarray] | None:
        """How to read a constant's current values (float64), as ``convert`` writes them."""
        if not isinstance(value, OpResult) or not isinstance(value.op, nf.ConstantOp):
            return None
        op = value.op
        key = None if op.sym_name is None else param_key.get(op.sym_name.data)
        if key is not None:
            param = self.params[key]
            return lambda: param.detach().cpu().numpy().astype(np.float64)
        fixed = np.asarray(dense_to_numpy(op.value), dtype=np.float64)
        return lambda: fixed

    def settle(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(own, settled)``: each described quantizer's current integer exponents, and
        the same after the rules (a bias's capped at its accumulators')."""
        own = {}
        for key, q in self.quants.items():
            own[key] = q.exps = self.quantizers[key].int_exponents()
            q.origin = None
            q.values = self.loaders[key]
        capped = Rules(self.joins, self.weighted, self.norms, self.derived).settle()
        settled = {key: q.exps for key, q in self.quants.items()}
        self.origins = {key: q.origin for key, q in self.quants.items() if q.origin is not None}
        for key, (start, origin) in self.calibrated.items():
            if key not in self.origins and np.array_equal(settled.get(key), start):
                self.origins[key] = origin
        for key, q in self.quants.items():
            if q in capped:
                settled[key] = capped[q].reshape(q.exps.shape)
        return own, settled

    def ties(self, biases: bool = True) -> dict[str, np.ndarray]:
        """The exponents the rules changed, by quantizer key: the settled exponent where it
        differs from the learner's, NaN elsewhere (:meth:`Quantizer.forward`'s ``tie``).
        Without ``biases`` (training): a bias is then capped by the module's forward at the
        accumulator of this step's exponents, as before the rules (NanoEngine's order)."""
        own, settled = self.settle()
        return {
            key: np.where(settled[key] != own[key], settled[key], np.nan)
            for key in own
            if (settled[key] != own[key]).any() and (biases or key not in self.biases)
        }

    def calibrate(self, targets: Iterable[Target]) -> None:
        """Remember which of quantize's ``targets`` (just inserted, exponents set) a join
        rule chose (their fake-quant's ``origin``), by quantizer key."""
        by_name = {q.name: key for key, q in self.quantizers.items()}
        self.calibrated = {}
        for t in targets:
            key = by_name.get(t.name)
            for use in t.value.uses:
                fq = use.operation
                if key is not None and isinstance(fq, FakeQuantOp) and fq.origin is not None:
                    exps = np.asarray(t.exps, dtype=np.int64)
                    self.calibrated[key] = (
                        exps.reshape(self.quantizers[key].exp_shape),
                        fq.origin.data,
                    )
