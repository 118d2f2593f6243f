"""The join rules of quantize on exponents alone: NumPy arrays and a small graph, no IR.

:mod:`nanoir.lowering.quantize.joins` describes a quantized program as this graph and applies
the rules (post-training quantize, ``settle``); ``nanoir.qat`` describes the program its module
interprets the same way and applies them to its learned exponents at every forward, so the
module, its ``convert`` and lower-to-hw agree. Why each rule exists is in quantize_joins'
docstring; here is only what they compute.

A :class:`Quant` is one fake-quant: bits, exponents (as ``nq.fake_quant`` stores them) and,
for a constant, its values. The rules work on *code exponents*, the grid of the integer codes
lower-to-hw aligns: ``k`` for b > 1, ``-k`` for 1-bit (a 1-bit exponent is the magnitude
``2**k`` of codes ±1). "Lowering" a code exponent is always a coarser grid: a larger step for
b > 1, a larger magnitude for 1-bit. 1-bit operands follow the same rules with two
differences, both from lower-to-hw: a 1-bit code shifted by ``s > 0`` places needs ``s + 2``
bits (``HwLowering.shift_to``), and a 1-bit tensor is never "0 everywhere" (its codes are ±1,
so its calibrated exponent of -60 is the least magnitude, not an unmeasured step: it is not
given its neighbour's exponent, only capped where alignment needs it). A 1-bit weight's codes
are ±1 at every exponent, so the accumulator rule changes it only where it was 0 everywhere
(exponent -60, the least magnitude: nothing was measured) and the aligned bias dominates: its
magnitude grows to the least one that fits, which costs less than the input's step (the input
feeds other ops too, and a real 1-bit weight's magnitude is the layer's gain, never changed). A
1-bit bias is not capped at its accumulator (as quantize's final bias cap), only aligned.
Unsigned codes (``signed = false``, ``0..2**b-1``) count ``b + 1`` signed bits, as
lower-to-hw counts them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from nanoir.dialects.traits import LookupTable
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.accumulator import ACC_LIMIT, transposed_bound_terms

__all__ = [
    "ALIGN_BITS",
    "TABLE_INPUT_BITS",
    "MAX_ROUNDS",
    "MOVE_BITS",
    "NORM_BIAS_GUARD",
    "ZERO_EXP",
    "Derived",
    "Join",
    "Norm",
    "Quant",
    "Rules",
    "Weighted",
    "aligned_bits",
    "code_exps",
    "signed_bits",
    "unit_range_exps",
]

ZERO_EXP = quant.CALIB_EXP_RANGE[1]
"""The exponent calibration gives a tensor that is 0 everywhere (nothing to measure)."""
EXP_FLOOR = quant.CALIB_EXP_RANGE[0]
"""The exponent calibration gives a 1-bit tensor that is 0 everywhere (the least magnitude)."""
ALIGN_BITS = 31
"""Bits an aligned add/concat operand may take: i32 with one bit of growth for the sum."""
BN_INPUT_BITS = 16
"""Bits the aligned parts of a concat read by a lone batch norm may take: its integer affine
multiplies them (``lowering/quantize/batch_norm.py`` needs ``bits(x) + bits(M) + 1 <= 32`` with a
useful ``M``; the exhaustive search takes at most 16-bit inputs)."""
TABLE_INPUT_BITS = LookupTable.MAX_INPUT_BITS
"""Bits the aligned parts of a per-tensor concat read by a lookup table may take: lower-to-hw
indexes a table by every code its input can hold, at most ``2**16 + 1`` of them (the segmented
16-bit form). At 16-bit activations every part then takes the coarsest part's exponent."""
MOVE_BITS = 32
"""Bits per-channel codes that data movement aligns onto one exponent may take (``aligns`` of
``DataMovement``: a transpose or reshape moving the channels, a pad of the channel dim,
depth_to_space), and those a conv or linear aligns onto its finest input channel (per group):
i32, the widest ``HwLowering.shift_to`` makes."""
MAX_ROUNDS = 64
NORM_BIAS_GUARD = 16
"""Steps finer than a layer/group norm's output step its bias may take: the integer algorithm
adds the bias on a grid at most ``runtime.numerics.norm._MAX_GUARD`` (24) steps finer than the
output, so a finer bias (a zero-initialised bias after a QAT step, exponent ~60) has no plan."""


@dataclass(eq=False)
class Quant:
    """One fake-quant: ``exps`` as ``nq.fake_quant`` stores them (int64, its ``exp`` shape).

    ``values`` are a constant's (float64; or a function that reads them, called at most once,
    only if a rule needs the codes), for a weight's or bias's codes; ``fixed`` exponents
    (imported by the user) are never changed; ``origin`` is the first rule that changed them.
    """

    bits: int
    exps: np.ndarray
    rounding: quant.RoundingMode = quant.RoundingMode.TRUNC
    values: np.ndarray | Callable[[], np.ndarray] | None = None
    fixed: bool = False
    origin: str | None = None
    signed: bool = True
    """False: unsigned codes ``0..2**b-1``, which lower-to-hw counts as ``b + 1`` signed bits."""

    def array(self) -> np.ndarray:
        """The constant's values (read now if they were given as a function)."""
        assert self.values is not None, "only a constant has values"
        if callable(self.values):
            self.values = np.asarray(self.values(), dtype=np.float64)
        return self.values


@dataclass(eq=False)
class Join:
    """An add, sub or concat: the fake-quants each operand carries (through data movement)."""

    name: str
    operands: list[list[Quant]]
    width: int = ALIGN_BITS
    """Bits an operand may take once aligned (:data:`BN_INPUT_BITS` for a concat read by a
    lone batch norm, :data:`TABLE_INPUT_BITS` for one a lookup table reads on one grid,
    :data:`MOVE_BITS` for data movement read by neither)."""
    one_grid: bool = False
    """A concat read as one per-tensor grid (by a softmax, a norm, a recurrent op: the
    ``IntegerAlgorithm`` input ``source_quantized`` finds through data movement): every part
    takes one exponent."""
    moved: bool = False
    """Data movement that aligns its one operand's per-channel exponents onto one (``aligns``
    of ``DataMovement``): its channels are the parts, aligned within ``width`` bits
    (:data:`MOVE_BITS`, or :data:`TABLE_INPUT_BITS` / :data:`BN_INPUT_BITS` where a lookup
    table or a lone batch norm reads the aligned codes)."""


@dataclass(eq=False)
class Norm:
    """A layer or group norm (an integer algorithm): its bias ``b`` and output ``out``."""

    name: str
    b: Quant
    out: Quant


@dataclass(eq=False)
class Derived:
    """An activation ``out`` (an op's result or a function input) and the quantized values it
    is computed from: its op's first operand, looking through data movement (empty for a
    function input). The zero-range rule reads it (:meth:`Rules.zero_range`)."""

    name: str
    out: Quant
    source: list[Quant]


@dataclass(eq=False)
class Weighted:
    """A conv, conv_transpose or linear: input parts ``xs``, a constant weight ``w`` (values
    set, ``w_size`` elements) and an optional bias ``b`` (values set). ``groups`` is the
    conv's (1 for linear); ``transposed`` the (strides, dilations) of a conv_transpose, whose
    weight is ``[C, O/g, *K]`` with ``per_group = O/g`` exponents along axis 1."""

    name: str
    xs: list[Quant]
    w: Quant
    b: Quant | None
    out_c: int
    w_size: int
    groups: int = 1
    linear: bool = False
    transposed: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    per_group: int = 0


def code_exps(q: Quant) -> np.ndarray:
    """The exponents of ``q``'s integer codes: ``k``, or ``-k`` for 1-bit."""
    return -q.exps if q.bits == 1 else q.exps


def signed_bits(q: Quant) -> int:
    """The signed bits ``q``'s codes take in lower-to-hw's bounds (``HwValue.bits``)."""
    return q.bits + (0 if q.signed else 1)


def aligned_bits(bits: int, shift: int) -> int:
    """Bits of ``bits``-bit codes shifted left ``shift`` places (as ``HwLowering.shift_to``
    counts them: a 1-bit code ±1 shifted is ±2**s, ``s + 2`` bits)."""
    return bits + shift + (1 if bits == 1 and shift > 0 else 0)


def _width(q: Quant) -> int:
    """Bits a join operand takes once shifted (at least once: 1-bit codes grow a sign bit)."""
    return 2 if q.bits == 1 else signed_bits(q)


def unit_range_exps(bits: int, signed: bool = True) -> int:
    """The exponent of a range of 1 (absmax 1), for ``bits``-bit codes: the zero-range rule's
    last resort for a value that was 0 on every calibration batch and meets nothing."""
    return int(quant.exp_from_absmax(np.array([1.0]), bits, signed=signed)[0])


def _zero(q: Quant) -> np.ndarray:
    """Where ``q`` was 0 on every calibration batch (never for 1-bit: its codes are ±1)."""
    return q.exps >= ZERO_EXP if q.bits > 1 else np.zeros(q.exps.shape, dtype=bool)


def _zero_weight(q: Quant) -> np.ndarray:
    """Where the constant ``q`` (a weight) is 0 in every element of its exponent's channel:
    by its values, so that a zero channel a rule already moved off 60 (a settle before bias
    correction, when the bias was still 0) is still seen as one."""
    zero = _zero(q)
    if q.values is None or q.bits < 2:
        return zero
    magnitude = np.abs(q.array())
    if q.exps.size == 1:
        return np.full(q.exps.shape, not magnitude.any())
    if q.exps.ndim != magnitude.ndim:
        return zero
    axes = tuple(i for i, n in enumerate(q.exps.shape) if n == 1)
    return zero | (magnitude.max(axis=axes, keepdims=True) == 0).reshape(q.exps.shape)


@dataclass
class Rules:
    """One application of the rules to a graph (:meth:`settle`); ``changed`` during a round."""

    joins: Sequence[Join]
    weighted: Sequence[Weighted]
    norms: Sequence[Norm] = ()
    derived: Sequence[Derived] = ()
    changed: bool = False
    bias_exps: dict[Quant, np.ndarray] = field(default_factory=dict)
    """Each bias's exponents after :meth:`settle`: its own, capped at its accumulators'."""
    unmeasured: dict[Quant, np.ndarray] = field(default_factory=dict)
    """Per 1-bit weight, where it was at the calibration floor when the rules first saw it."""

    def settle(self) -> dict[Quant, np.ndarray]:
        """Change exponents until every join can lower (or nothing more can change); returns
        :attr:`bias_exps`."""
        biases = list(dict.fromkeys(wt.b for wt in self.weighted if wt.b is not None))
        for _ in range(MAX_ROUNDS):
            self.changed = False
            for j in self.joins:
                self.join(j)
            self.bias_exps = {b: b.exps.copy() for b in biases}
            for wt in self.weighted:
                self.accumulate(wt)
            for n in self.norms:
                self.norm(n)
            for d in self.derived:
                self.zero_range(d)
            if not self.changed:
                break
        return self.bias_exps

    def lower(self, q: Quant, cap: np.ndarray | int, origin: str) -> None:
        """Cap ``q``'s code exponents at ``cap`` (broadcast), recording ``origin`` if they moved."""
        old = q.exps
        cap_ = np.broadcast_to(cap, old.shape) if np.ndim(cap) else cap
        if q.bits == 1:
            new = np.minimum(np.maximum(old, -np.asarray(cap_)), quant.CALIB_EXP_RANGE[1])
        else:
            new = np.maximum(np.minimum(old, cap_), quant.CALIB_EXP_RANGE[0])
        if (new != old).any():
            q.exps = np.asarray(new, dtype=np.int64).reshape(old.shape)
            if q.origin is None:
                q.origin = origin
            self.changed = True

    # -- add / sub / concat -------------------------------------------------------------------

    def join(self, j: Join) -> None:
        if len(j.operands) < (1 if j.moved else 2) or any(
            not g or any(q.fixed for q in g) for g in j.operands
        ):
            return
        where = f"join:{j.name}"
        everything = list(dict.fromkeys(q for g in j.operands for q in g))
        # A part that is 0 everywhere takes the finest exponent of the others: no shift.
        codes = {q: code_exps(q) for q in everything}
        zero = {q: _zero(q) for q in everything}
        live = [q for q in everything if not zero[q].all()]
        if j.moved:
            # Its channels are the parts; dead ones (exponent 60) are left to the zero-range
            # and accumulator rules (they take their source's or group's exponent), and
            # capped once measured.
            if live:
                cap = min(int(codes[q][~zero[q]].min()) + j.width - _width(q) for q in live)
                for q in live:
                    self.lower(q, np.where(zero[q], q.exps, cap), where)
            return
        for q in everything:
            if zero[q].any():
                others = [int(codes[o].max()) for o in live if o is not q]
                if others:
                    self.lower(q, np.where(zero[q], max(others), q.exps), where)
        # Every operand's (or moved channel's) shift onto the finest must fit: bits + (finest -
        # own) <= 31 (16 for a lone batch norm's or a lookup table's input).
        cap = min(int(code_exps(q).min()) + j.width - _width(q) for q in everything)
        for q in everything:
            self.lower(q, cap, where)
        if j.one_grid:
            # One grid for all: the coarsest part's, which holds every part's range.
            coarsest = min(int(code_exps(q).min()) for q in everything)
            for q in everything:
                self.lower(q, coarsest, where)

    # -- values 0 on every calibration batch ---------------------------------------------------

    def zero_range(self, d: Derived) -> None:
        """An activation still 0 everywhere (exponent 60, nothing measured) once the joins and
        accumulators had their say takes the exponent of what it is computed from (per channel
        where both are per channel alike; else the finest of the source's live exponents),
        or, where that is 0 everywhere too (or it is a function input), the exponent of a
        unit range. 60 would leave an op reading it shifting codes 55 places (a clamp or an
        average pool aligning its input onto its output grid, a recurrent cell summing its
        input's products with its hidden state's), or a norm's epsilon past i64."""
        out = d.out
        if out.fixed or out.bits < 2 or out.values is not None:
            return
        zero = _zero(out)
        if not zero.any():
            return
        live = [q for q in d.source if not _zero(q).all()]
        fill: np.ndarray | int = unit_range_exps(out.bits, out.signed)
        if len(live) == 1 and live[0].exps.size == out.exps.size > 1:
            own = code_exps(live[0]).reshape(out.exps.shape)
            finest = int(own[~_zero(live[0]).reshape(out.exps.shape)].max())
            fill = np.where(_zero(live[0]).reshape(out.exps.shape), finest, own)
        elif live:
            fill = max(int(code_exps(q)[~_zero(q)].max()) for q in live)
        self.lower(out, np.where(zero, fill, out.exps), f"zero:{d.name}")

    # -- layer / group norm ------------------------------------------------------------------

    def norm(self, n: Norm) -> None:
        """A norm's non-zero bias at most :data:`NORM_BIAS_GUARD` steps finer than its output
        (a zero one stays: the algorithm adds nothing, at any exponent)."""
        b, out = n.b, n.out
        if b.fixed or b.bits < 2 or out.bits < 2 or b.exps.size != 1 or out.exps.size != 1:
            return
        cap = int(out.exps.reshape(-1)[0]) + NORM_BIAS_GUARD
        if int(b.exps.reshape(-1)[0]) <= cap:
            return
        if not quant.quantize_to_int(b.array(), b.bits, b.exps, b.rounding).any():
            return
        self.lower(b, cap, f"norm:{n.name}")

    # -- conv / linear ------------------------------------------------------------------------

    def accumulate(self, wt: Weighted) -> None:  # noqa: C901 - the rule, step by step
        xs, fw, bias = wt.xs, wt.w, wt.b
        exact: dict[bytes, np.ndarray] = {}
        if fw.bits == 1:
            self.unmeasured.setdefault(fw, fw.exps.reshape(-1) <= EXP_FLOOR)
        x_adjustable = not any(f.fixed for f in xs)
        if bias is not None and x_adjustable and all(_zero(f).all() for f in xs):
            self._settle_zero_input(wt, bias)
            if all(_zero(f).all() for f in xs):
                # Left to the zero-range rule this round: bounds at exponent 60 would coarsen
                # the input for an accumulator it will not have.
                return
        if bias is not None and fw.bits > 1 and not fw.fixed and _zero_weight(fw).any():
            self._settle_zero_weight(wt, bias)
        if x_adjustable and len(xs) == 1 and xs[0].exps.size > 1 and xs[0].bits > 1:
            # Channels that are 0 everywhere take the finest exponent of their group's
            # others: summed channels are aligned to the finest, and 60 would dictate it.
            self._settle_zero_channels(wt, xs[0])
        if x_adjustable:
            self._fit_aligned_input(wt)
        for _ in range(MAX_ROUNDS):
            kx, x_bits = self._x_exps(wt)
            kw = self._w_per_out(wt)
            acc = kx + kw
            max_abs = 2 ** (x_bits - 1)
            bias_part = np.zeros(len(acc), dtype=object)
            late = np.ones(len(acc), dtype=object)
            if bias is not None:
                own = self.bias_exps[bias]
                if bias.bits > 1:
                    own = np.minimum(own.reshape(-1), acc if own.size > 1 else acc.min())
                    self.bias_exps[bias] = own.reshape(self.bias_exps[bias].shape)
                k = np.broadcast_to(self.bias_exps[bias].reshape(-1), acc.shape)
                kb = -k if bias.bits == 1 else k
                codes = quant.quantize_to_int(
                    bias.array().reshape(-1), bias.bits, k, bias.rounding
                ).astype(np.int64)
                codes = np.broadcast_to(codes, acc.shape)
                bias_part = np.array(
                    [abs(int(c)) * 2 ** int(max(a - e, 0)) for c, a, e in zip(codes, acc, kb)],
                    dtype=object,
                )
                late = np.array([2 ** int(max(e - a, 0)) for a, e in zip(acc, kb)], dtype=object)
            # Codes of at most 2**(b-1) each bound the sums without reading the weights; the
            # actual codes (as lower-to-hw counts them) only when that bound does not fit.
            per_out = wt.w_size // max(len(acc), 1)
            loose = np.full(len(acc), per_out * 2 ** (fw.bits - 1), dtype=object)
            if all(int(v) <= ACC_LIMIT for v in loose * max_abs * late + bias_part):
                return
            key = fw.exps.tobytes()
            if key not in exact:
                exact[key] = self._terms(wt)
            sums = exact[key].astype(object) * max_abs * late
            worst = sums + bias_part
            over = np.array([int(v) > ACC_LIMIT for v in worst])
            if not over.any():
                return
            excess = max(int(v) for v in worst) / ACC_LIMIT
            step = max(1, math.floor(math.log2(excess)))
            bias_dominant = any(int(bp) > int(s) for bp, s, o in zip(bias_part, sums, over) if o)
            finest = max(int(code_exps(f).max()) for f in xs)
            spread = finest - min(int(code_exps(f).min()) for f in xs)
            if bias_dominant and self._unmeasured_weight(wt, over):
                # A 1-bit weight that was 0 everywhere (the least magnitude, 2**-60): its
                # magnitude is free, and the least one that fits costs less than the input.
                self.lower(fw, self._lower_channels(wt, over, step, code=True), f"acc:{wt.name}")
            elif bias_dominant and self._coarsen_own_channels(wt, worst, bias_part, sums):
                # Per-channel weights: the channels whose aligned bias dominates take a larger
                # step of their own (a nearly dead channel, weights ~0 at exponent ~49, had
                # an accumulator 2**-55-fine); the input is shared by every channel and reader.
                pass
            elif x_adjustable and (bias_dominant or spread > 0):
                # The aligned bias, or the input's finest channels (or concat parts) shifted
                # onto the others, dominate: a larger step for the finest part of the input.
                for f in xs:
                    self.lower(
                        f,
                        finest - (step if bias_dominant else min(step, spread)),
                        f"acc:{wt.name}",
                    )
            elif not fw.fixed and fw.bits > 1:
                if fw.exps.size == 1:
                    self.lower(fw, int(fw.exps.reshape(-1)[0]) - step, f"acc:{wt.name}")
                else:
                    self.lower(fw, self._lower_channels(wt, over, step), f"acc:{wt.name}")
            else:
                return

    def _fit_aligned_input(self, wt: Weighted) -> None:
        """The input's codes aligned onto its finest channel (per group) or part must fit i32
        (``MOVE_BITS``), whatever the weights: the accumulator bound below lowers a spread only
        while it overflows, and an all-zero weight bounds every sum by 0. Dead channels
        (exponent 60) are left to :meth:`_settle_zero_channels` and the zero-range rule."""
        xs = wt.xs
        if len(xs) == 1 and not wt.linear and xs[0].exps.size % wt.groups == 0:
            f = xs[0]
            codes = code_exps(f).reshape(wt.groups, -1)
            zero = _zero(f).reshape(wt.groups, -1)
            caps = [
                int(c[~z].min()) + MOVE_BITS - _width(f) if (~z).any() else ZERO_EXP
                for c, z in zip(codes, zero)
            ]
            cap = np.where(zero, codes, np.array(caps, dtype=np.int64)[:, None])
            self.lower(f, cap.reshape(f.exps.shape), f"input:{wt.name}")
            return
        live = [f for f in xs if not _zero(f).all()]
        if live:
            cap = min(int(code_exps(f)[~_zero(f)].min()) + MOVE_BITS - _width(f) for f in live)
            for f in live:
                self.lower(f, np.where(_zero(f), code_exps(f), cap), f"input:{wt.name}")

    def _settle_zero_input(self, wt: Weighted, bias: Quant) -> None:
        """An input 0 on every calibration batch: the accumulator is the bias alone, put on
        the bias's grid (the bias added unshifted) where the bias is not 0. A bias of zeros
        has no grid (exponent 60, nothing measured), and an input computed from a value that
        is itself still 0 everywhere is left to the zero-range rule this round (it takes its
        source's exponent): the bias's grid, up to 57 steps finer, is more than the input's
        producer (an average pool, a clamp) can shift its operand onto."""
        k = self.bias_exps[bias].reshape(-1)
        codes = quant.quantize_to_int(bias.array().reshape(-1), bias.bits, k, bias.rounding)
        kw = self._w_per_out(wt)
        live = np.broadcast_to(codes != 0, kw.shape)
        if not live.any():
            return
        need = int(np.min((np.broadcast_to(code_exps(Quant(bias.bits, k)), kw.shape) - kw)[live]))
        derived = {id(d.out): d for d in self.derived}
        for f in wt.xs:
            d = derived.get(id(f))
            if d is not None and d.source and all(_zero(q).all() for q in d.source):
                continue
            self.lower(f, need, f"input:{wt.name}")

    def _coarsen_own_channels(
        self, wt: Weighted, worst: np.ndarray, bias_part: np.ndarray, sums: np.ndarray
    ) -> bool:
        """Lower the exponents of a per-channel weight (b > 1, not imported) where the
        accumulator bound is over i32 and the aligned bias dominates, each by the steps its
        own excess asks (at least one); False if none can move (at the calibration floor).

        Each step halves that channel's accumulator resolution and its aligned bias, and
        costs only that channel's weight resolution: a nearly dead channel (weights ~0,
        exponent ~49) loses nothing, where coarsening the input would cost every channel."""
        fw = wt.w
        if fw.fixed or fw.bits < 2 or fw.exps.size == 1:
            return False
        steps = np.array(
            [
                max(1, math.floor(math.log2(int(v) / ACC_LIMIT)))
                if int(v) > ACC_LIMIT and int(bp) > int(s)
                else 0
                for v, bp, s in zip(worst, bias_part, sums)
            ],
            dtype=np.int64,
        )
        if wt.transposed is not None:  # [O/g] exponents, shared by the groups
            steps = steps.reshape(wt.groups, -1).max(axis=0)
        old = fw.exps.reshape(-1)
        new = np.maximum(old - steps, quant.CALIB_EXP_RANGE[0])
        if (new == old).all():
            return False
        self.lower(fw, new.reshape(fw.exps.shape), f"acc:{wt.name}")
        return True

    def _settle_zero_weight(self, wt: Weighted, bias: Quant) -> None:
        """Weight channels that are 0 everywhere put their accumulator on the bias's grid.

        Exponent 60 (nothing measured) would make the accumulator 2**-60-fine, and its bias,
        aligned there, would push the input's step up for every channel (or, with the input at
        the calibration floor, not fit at all); a zero weight's codes are 0 at any step."""
        fw = wt.w
        kx, _ = self._x_exps(wt)
        kb = np.broadcast_to(
            code_exps(Quant(bias.bits, self.bias_exps[bias])).reshape(-1), kx.shape
        )
        need = kb - kx  # per output channel: the weight exponent that puts acc at the bias's
        zero = _zero_weight(fw).reshape(-1)
        if fw.exps.size == 1:
            cap = np.array([need.min()])
        elif wt.transposed is not None:
            cap = need.reshape(wt.groups, -1).min(axis=0)  # [O/g] exponents, shared by groups
        else:
            cap = need
        old = fw.exps.reshape(-1)
        self.lower(fw, np.where(zero, cap, old).reshape(fw.exps.shape), f"acc:{wt.name}")

    def _settle_zero_channels(self, wt: Weighted, fx: Quant) -> None:
        flat = fx.exps.reshape(-1)
        if flat.size % wt.groups:
            return
        per_group = flat.reshape(wt.groups, -1).copy()
        for g in per_group:
            live = g[g < ZERO_EXP]
            if live.size and live.size < g.size:
                g[g >= ZERO_EXP] = live.max()
        self.lower(fx, per_group.reshape(fx.exps.shape), f"input:{wt.name}")

    @staticmethod
    def _hit(wt: Weighted, over: np.ndarray) -> np.ndarray:
        """The weight's exponents (flat) behind the output channels ``over``."""
        size = wt.w.exps.size
        if size == 1:
            return np.array([over.any()])
        return over.reshape(-1, size).any(axis=0) if wt.transposed is not None else over

    def _unmeasured_weight(self, wt: Weighted, over: np.ndarray) -> bool:
        """Whether every weight channel behind ``over`` is a 1-bit one that was 0 everywhere
        (at the floor when first seen: growing it once does not make it measured)."""
        fw = wt.w
        if fw.bits != 1 or fw.fixed:
            return False
        floor = self.unmeasured.setdefault(fw, fw.exps.reshape(-1) <= EXP_FLOOR)
        return bool(floor[self._hit(wt, over)].all())

    @classmethod
    def _lower_channels(
        cls, wt: Weighted, over: np.ndarray, step: int, code: bool = False
    ) -> np.ndarray:
        """The weight's code exponents (``code``) or exponents, ``step`` lower where ``over``."""
        kw = code_exps(wt.w) if code else wt.w.exps
        flat = kw.reshape(-1) - np.where(cls._hit(wt, over), step, 0)
        return flat.reshape(kw.shape)

    @staticmethod
    def _w_per_out(wt: Weighted) -> np.ndarray:
        kw = code_exps(wt.w).reshape(-1)
        if wt.transposed is not None:
            return np.tile(np.broadcast_to(kw, (wt.per_group,)), wt.groups)
        return np.broadcast_to(kw, (wt.out_c,)).copy()

    @staticmethod
    def _x_exps(wt: Weighted) -> tuple[np.ndarray, int]:
        """Per output channel input code exponent after lower-to-hw's alignment, and the bits."""
        xs, out_c = wt.xs, wt.out_c
        codes = [code_exps(f) for f in xs]
        per_tensor = all(c.size == 1 for c in codes)
        finest = max(int(c.max()) for c in codes)
        coarsest = min(int(c.min()) for c in codes)
        if per_tensor or len(xs) > 1 or wt.linear:
            # One exponent: concat parts (and linear features) aligned to the finest.
            bits = max(
                aligned_bits(signed_bits(f), finest - int(c.min())) for f, c in zip(xs, codes)
            )
            return np.full(out_c, finest), bits
        kx = codes[0].reshape(-1)
        if kx.size % wt.groups:
            return np.full(out_c, finest), aligned_bits(signed_bits(xs[0]), finest - coarsest)
        per_group = kx.reshape(wt.groups, -1)
        shift = int((per_group.max(axis=1, keepdims=True) - per_group).max())
        return np.repeat(per_group.max(axis=1), out_c // wt.groups), aligned_bits(
            signed_bits(xs[0]), shift
        )

    @staticmethod
    def _terms(wt: Weighted) -> np.ndarray:
        """``sum |w codes|`` per output channel, as lower-to-hw bounds it."""
        fw = wt.w
        codes = quant.quantize_to_int(fw.array(), fw.bits, fw.exps, fw.rounding).astype(np.int64)
        if wt.transposed is not None:
            strides, dils = wt.transposed
            shape = codes.shape
            grouped = codes.reshape(wt.groups, shape[0] // wt.groups, shape[1], *shape[2:])
            return np.concatenate([transposed_bound_terms(g, strides, dils) for g in grouped])
        return np.abs(codes).reshape(codes.shape[0], -1).sum(axis=1)
