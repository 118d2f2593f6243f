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
- an add/sub/concat operand finer than ``31 - bits`` steps past the coarsest is capped there;
- a bias's exponent is capped at its accumulator's, whatever produced the input (looking
  through concat, split and every other data movement);
- where the accumulator bound still does not fit i32, the accumulator's resolution is lowered:
  the input's step when the aligned bias dominates, else the weight's (per output channel).

Each changed fake-quant gets an ``origin`` (``join:%name`` of the add/concat, ``input:%conv``,
``acc:%conv``), which ``.mlir`` keeps and the quantization report shows. Exponents the user
imported are never changed: lower-to-hw may still refuse them, naming the value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import DataMovement
from nanoir.lowering.hw.codes import ACC_LIMIT
from nanoir.lowering.hw.contraction import transposed_bound_terms
from nanoir.lowering.quantize_targets import WEIGHTED, Target
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, OpResult, SSAValue

ZERO_EXP = quant.CALIB_EXP_RANGE[1]
"""The exponent calibration gives a tensor that is 0 everywhere (nothing to measure)."""
ALIGN_BITS = 31
"""Bits an aligned add/concat operand may take: i32 with one bit of growth for the sum."""
MAX_ROUNDS = 64


def sources(value: SSAValue) -> list[FakeQuantOp] | None:
    """The fake-quants whose exponents ``value`` carries, looking through data movement
    (a concat carries all its parts'); None if some part is not a fake-quant's."""
    if isinstance(value, OpResult):
        op = value.op
        if isinstance(op, FakeQuantOp):
            return [op]
        if op.has_trait(DataMovement) and op.operands:
            found: list[FakeQuantOp] = []
            for operand in op.operands if isinstance(op, nf.ConcatOp) else op.operands[:1]:
                part = sources(operand)
                if part is None:
                    return None
                found += [f for f in part if f not in found]
            return found
    return None


def get_exps(fq: FakeQuantOp) -> np.ndarray:
    return dense_to_numpy(fq.exp).astype(np.int64)


def _bits(fq: FakeQuantOp) -> int:
    return fq.bits.value.data


class Settler:
    """The state of one :func:`settle`: which fake-quants may change, and why they did."""

    def __init__(self, fixed: Iterable[FakeQuantOp]):
        self.fixed = set(fixed)
        self.changed = False

    def adjustable(self, fqs: Sequence[FakeQuantOp]) -> bool:
        return all(f not in self.fixed and _bits(f) > 1 for f in fqs)

    def lower(self, fq: FakeQuantOp, cap: np.ndarray | int, origin: str) -> None:
        """Cap ``fq``'s exponents at ``cap`` (broadcast), recording ``origin`` if they moved."""
        old = get_exps(fq)
        new = np.minimum(old, np.broadcast_to(cap, old.shape) if np.ndim(cap) else cap)
        new = np.maximum(new, quant.CALIB_EXP_RANGE[0])
        if (new != old).any():
            fq.exp = exp_attr(new.reshape(-1).tolist(), list(old.shape))
            if fq.origin is None:
                fq.origin = StringAttr(origin)
            self.changed = True

    # -- add / sub / concat -------------------------------------------------------------------

    def join(self, op: Operation, operands: Sequence[SSAValue]) -> None:
        groups = [sources(v) for v in operands]
        if any(g is None or not g for g in groups):
            return
        groups_ = [g for g in groups if g is not None]
        if len(groups_) < 2 or not all(self.adjustable(g) for g in groups_):
            return
        where = f"join:%{op.results[0].name_hint or op.name}"
        # A part that is 0 everywhere takes the finest exponent of the others: no shift.
        everything = list(dict.fromkeys(f for g in groups_ for f in g))
        exps_of = {f: get_exps(f) for f in everything}
        live = [f for f in everything if not (exps_of[f] >= ZERO_EXP).all()]
        for f in everything:
            exps = exps_of[f]
            if (exps >= ZERO_EXP).any():
                others = [int(exps_of[o].max()) for o in live if o is not f]
                if others:
                    self.lower(f, np.where(exps >= ZERO_EXP, max(others), exps), where)
        # Every operand's shift onto the finest must fit: bits + (finest - own) <= 31.
        cap = min(int(get_exps(f).min()) + ALIGN_BITS - _bits(f) for f in everything)
        for f in everything:
            self.lower(f, cap, where)

    # -- conv / linear ------------------------------------------------------------------------

    def weighted(self, op: Operation, bias: Target | None, config_rounding: quant.RoundingMode):
        xs, ws = sources(op.operands[0]), sources(op.operands[1])
        if not xs or not ws or len(ws) != 1:
            return
        fw = ws[0]
        if _bits(fw) == 1 or any(_bits(f) == 1 for f in xs):
            return
        if not isinstance(fw.input, OpResult) or not isinstance(fw.input.op, nf.ConstantOp):
            return
        name = f"%{op.results[0].name_hint or op.name}"
        w_shape = nf.tensor_shape(fw.input)
        exact: dict[bytes, np.ndarray] = {}
        b = None if bias is None else constant_array(bias.value)
        x_adjustable = self.adjustable(xs)
        if (
            b is not None
            and bias is not None
            and x_adjustable
            and all((get_exps(f) >= ZERO_EXP).all() for f in xs)
        ):
            # An input that is 0 everywhere: put the accumulator on the bias's grid.
            assert bias.exps is not None
            kw = self._w_per_out(op, fw)
            need = int(np.min(bias.exps.reshape(-1) - kw))
            for f in xs:
                self.lower(f, need, f"input:{name}")
        if x_adjustable and len(xs) == 1 and get_exps(xs[0]).size > 1:
            # Channels that are 0 everywhere take the finest exponent of their group's
            # others: summed channels are aligned to the finest, and 60 would dictate it.
            self._settle_zero_channels(op, xs[0], name)
        for _ in range(MAX_ROUNDS):
            kx, x_bits = self._x_exps(op, xs)
            kw = self._w_per_out(op, fw)
            acc = kx + kw
            max_abs = 2 ** (x_bits - 1)
            bias_part = np.zeros(len(acc), dtype=object)
            late = np.ones(len(acc), dtype=object)
            if b is not None and bias is not None:
                assert bias.exps is not None
                if bias.bits > 1:
                    bias.exps = np.minimum(
                        bias.exps.reshape(-1), acc if bias.exps.size > 1 else acc.min()
                    ).reshape(bias.exps.shape)
                kb = np.broadcast_to(bias.exps.reshape(-1), acc.shape)
                codes = quant.quantize_to_int(
                    b.astype(np.float64).reshape(-1),
                    bias.bits,
                    kb,
                    bias.rounding or config_rounding,
                ).astype(np.int64)
                codes = np.broadcast_to(codes, acc.shape)
                bias_part = np.array(
                    [abs(int(c)) * 2 ** int(max(a - k, 0)) for c, a, k in zip(codes, acc, kb)],
                    dtype=object,
                )
                late = np.array([2 ** int(max(k - a, 0)) for a, k in zip(acc, kb)], dtype=object)
            # Codes of at most 2**(b-1) each bound the sums without reading the weights; the
            # actual codes (as lower-to-hw counts them) only when that bound does not fit.
            per_out = int(np.prod(w_shape)) // max(len(acc), 1)
            loose = np.full(len(acc), per_out * 2 ** (_bits(fw) - 1), dtype=object)
            if all(int(v) <= ACC_LIMIT for v in loose * max_abs * late + bias_part):
                return
            key = get_exps(fw).tobytes()
            if key not in exact:
                exact[key] = self._terms(op, fw)
            sums = exact[key].astype(object) * max_abs * late
            worst = sums + bias_part
            over = np.array([int(v) > ACC_LIMIT for v in worst])
            if not over.any():
                return
            excess = max(int(v) for v in worst) / ACC_LIMIT
            step = max(1, math.floor(math.log2(excess)))
            bias_dominant = any(int(bp) > int(s) for bp, s, o in zip(bias_part, sums, over) if o)
            finest = max(int(get_exps(f).max()) for f in xs)
            spread = finest - min(int(get_exps(f).min()) for f in xs)
            if x_adjustable and (bias_dominant or spread > 0):
                # The aligned bias, or the input's finest channels (or concat parts) shifted
                # onto the others, dominate: a larger step for the finest part of the input.
                for f in xs:
                    self.lower(
                        f, finest - (step if bias_dominant else min(step, spread)), f"acc:{name}"
                    )
            elif self.adjustable([fw]):
                kw_fq = get_exps(fw)
                if kw_fq.size == 1:
                    self.lower(fw, int(kw_fq.reshape(-1)[0]) - step, f"acc:{name}")
                else:
                    lowered = self._lower_channels(op, kw_fq, over, step)
                    self.lower(fw, lowered, f"acc:{name}")
            else:
                return

    def _settle_zero_channels(self, op: Operation, fx: FakeQuantOp, name: str) -> None:
        kx = get_exps(fx)
        flat = kx.reshape(-1)
        groups = op.groups.value.data if isinstance(op, nf.ConvOp | nf.ConvTransposeOp) else 1
        if flat.size % groups:
            return
        per_group = flat.reshape(groups, -1).copy()
        for g in per_group:
            live = g[g < ZERO_EXP]
            if live.size and live.size < g.size:
                g[g >= ZERO_EXP] = live.max()
        self.lower(fx, per_group.reshape(kx.shape), f"input:{name}")

    @staticmethod
    def _lower_channels(op: Operation, kw: np.ndarray, over: np.ndarray, step: int) -> np.ndarray:
        if isinstance(op, nf.ConvTransposeOp):
            per_group = kw.size
            hit = over.reshape(-1, per_group).any(axis=0)
        else:
            hit = over
        flat = kw.reshape(-1) - np.where(hit, step, 0)
        return flat.reshape(kw.shape)

    @staticmethod
    def _w_per_out(op: Operation, fw: FakeQuantOp) -> np.ndarray:
        kw = get_exps(fw).reshape(-1)
        out_c = nf.tensor_shape(op.results[0])[1 if not isinstance(op, nf.LinearOp) else -1]
        if isinstance(op, nf.ConvTransposeOp):
            groups = op.groups.value.data
            per_group = nf.tensor_shape(op.weight)[1]
            return np.tile(np.broadcast_to(kw, (per_group,)), groups)
        return np.broadcast_to(kw, (out_c,)).copy()

    @staticmethod
    def _x_exps(op: Operation, xs: Sequence[FakeQuantOp]) -> tuple[np.ndarray, int]:
        """Per output channel input exponent after lower-to-hw's alignment, and the bits."""
        out_c = nf.tensor_shape(op.results[0])[1 if not isinstance(op, nf.LinearOp) else -1]
        per_tensor = all(get_exps(f).size == 1 for f in xs)
        finest = max(int(get_exps(f).max()) for f in xs)
        coarsest = min(int(get_exps(f).min()) for f in xs)
        if per_tensor or len(xs) > 1 or isinstance(op, nf.LinearOp):
            # One exponent: concat parts (and linear features) aligned to the finest.
            bits = max(_bits(f) + finest - int(get_exps(f).min()) for f in xs)
            return np.full(out_c, finest), bits
        kx = get_exps(xs[0]).reshape(-1)
        groups = op.groups.value.data if isinstance(op, nf.ConvOp | nf.ConvTransposeOp) else 1
        if kx.size % groups:
            return np.full(out_c, finest), _bits(xs[0]) + finest - coarsest
        per_group = kx.reshape(groups, -1)
        shift = int((per_group.max(axis=1, keepdims=True) - per_group).max())
        return np.repeat(per_group.max(axis=1), out_c // groups), _bits(xs[0]) + shift

    @staticmethod
    def _terms(op: Operation, fw: FakeQuantOp) -> np.ndarray:
        """``sum |w codes|`` per output channel, as lower-to-hw bounds it."""
        w = constant_array(fw.input)
        assert w is not None
        w = w.astype(np.float64)
        codes = quant.quantize_to_int(w, _bits(fw), get_exps(fw), fw.rounding_mode).astype(np.int64)
        if isinstance(op, nf.ConvTransposeOp):
            groups = op.groups.value.data
            shape = nf.tensor_shape(op.weight)
            n = len(shape) - 2
            strides = tuple(nf.array_values(op.strides) or (1,) * n)
            dils = tuple(nf.array_values(op.dilations) or (1,) * n)
            grouped = codes.reshape(groups, shape[0] // groups, shape[1], *shape[2:])
            return np.concatenate([transposed_bound_terms(g, strides, dils) for g in grouped])
        return np.abs(codes).reshape(codes.shape[0], -1).sum(axis=1)


def settle(
    func: FuncOp,
    biases: Sequence[Target],
    fixed: Iterable[FakeQuantOp],
    rounding: quant.RoundingMode,
) -> None:
    """Change exponents (see the module docstring) until every join can lower; set each
    bias target's ``exps`` (from its values, capped at its accumulator's)."""
    settler = Settler(fixed)
    own = {id(t): None if t.exps is None else t.exps.copy() for t in biases}
    users: dict[Operation, Target] = {}
    for t in biases:
        for use in t.value.uses:
            if isinstance(use.operation, WEIGHTED) and use.index == 2:
                users[use.operation] = t
    for _ in range(MAX_ROUNDS):
        settler.changed = False
        for op in func.body.block.ops:
            if isinstance(op, nf.AddOp | nf.SubOp):
                settler.join(op, [op.lhs, op.rhs])
            elif isinstance(op, nf.ConcatOp):
                settler.join(op, list(op.inputs))
        for t in biases:
            k = own[id(t)]
            t.exps = None if k is None else k.copy()
        for op in func.body.block.ops:
            if isinstance(op, WEIGHTED):
                bias = users.get(op)
                settler.weighted(
                    op, bias if bias is not None and bias.exps is not None else None, rounding
                )
        if not settler.changed:
            return
