"""The ops defined by an integer algorithm: softmax, log-softmax, LayerNorm, GroupNorm and L2
normalisation (:mod:`nanoir.runtime.numerics.softmax`, :mod:`nanoir.runtime.numerics.norm`,
:mod:`nanoir.runtime.numerics.l2norm`) step by step in int64 (softmax in float64, exact
for its integers): table lookups are `Gather`, bit lengths count the powers of two at most the
value (``ReduceSum`` of a comparison), the norms' integer square root is the float64 root
floored and corrected by one either way, as the runtime's ``isqrt`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values, tensor_shape
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.arith import clip, div_round
from nanoir.grammar.onnx.integer.common import (
    Writer,
    constant_codes,
    out_name,
    refuse,
    static_shape,
    table_lookup,
)
from nanoir.grammar.onnx.integer.graph import Graph
from nanoir.runtime.numerics.softmax import (
    _MANTISSA,
    EXP_FRAC,
    LN2,
    LN_FRAC,
    LN_TABLE,
    LN_TABLE_BITS,
    LO_FRAC,
    exp_values,
)
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

MAX_EXP_TABLE = 2**17
"""Largest combined exp table (``len(hi) * len(lo)`` entries, 65,536 for 16-bit inputs)
written as one ``Gather``; larger ones (wider inputs) gather ``hi`` and ``lo`` apart."""


def _exp_codes(g: Graph, op: Any, mask: str | None, dtype: type) -> tuple[str, str, str]:
    """``(neg, e, S)`` of ``nanoir.runtime.numerics.softmax._exp_codes`` in ``dtype`` (int64,
    or float64: every value is an integer below ``2**52``, exact in both): the code distances
    to the row max (clipped to the tables), the i-exp values and the row sums."""
    base = out_name(g, op)
    axis = op.axis.value.data
    hi = np.asarray(array_values(op.exp_hi), dtype=np.int64)
    lo = np.asarray(array_values(op.exp_lo), dtype=np.int64)
    i64 = np.int64
    q = g.get(op.input, "f64" if dtype is np.float64 else "i64")
    shape = tensor_shape(op.input)  # (the distances' shape: the tables' indices)
    if mask is not None:
        lowest = g.const(np.iinfo(np.int64).min // 4, dtype)
        qm = g.node("Where", [mask, q, lowest], base + "_qm")
        top = g.node("ReduceMax", [qm, g.const([axis], i64)], base + "_top0", keepdims=1)
        whole = g.node("ReduceMax", [q], base + "_all", keepdims=0)
        whole = g.node("Max", [whole, g.const(0, dtype)], base + "_all0")
        none = g.node("Equal", [top, lowest], base + "_none")
        top = g.node("Where", [none, whole, top], base + "_top")
    else:
        top = g.node("ReduceMax", [q, g.const([axis], i64)], base + "_top", keepdims=1)
    neg = g.node("Sub", [top, q], base + "_neg")
    neg = clip(g, neg, 0, len(hi) * len(lo) - 1, dtype, base + "_negc")

    def index(x: str, name: str) -> str:
        return x if dtype is np.int64 else g.node("Cast", [x], name, to=6)

    if len(hi) * len(lo) <= MAX_EXP_TABLE:  # one table: exp_values at every distance
        table = exp_values(np.arange(len(hi) * len(lo), dtype=np.int64), hi, lo)
        table_name = g.const(table, dtype, base + "_exp")
        e = table_lookup(g, table_name, index(neg, base + "_ni"), shape, base + "_e")
    else:
        m = g.const(len(lo), dtype)
        i = g.node("Div", [neg, m], base + "_i")
        if dtype is np.float64:  # len(lo) is a power of two: the quotient is exact
            i = g.node("Floor", [i], base + "_if")
        j = g.node("Sub", [neg, g.node("Mul", [i, m], base + "_im")], base + "_j")
        prod = g.node(
            "Mul",
            [
                table_lookup(
                    g,
                    g.const(hi, dtype, base + "_hi"),
                    index(i, base + "_ii"),
                    shape,
                    base + "_ehi",
                ),
                table_lookup(
                    g,
                    g.const(lo, dtype, base + "_lo"),
                    index(j, base + "_ji"),
                    shape,
                    base + "_elo",
                ),
            ],
            base + "_prod",
        )
        rounded = g.node("Add", [prod, g.const(2 ** (LO_FRAC - 1), dtype)], base + "_pr")
        e = g.node("Div", [rounded, g.const(2**LO_FRAC, dtype)], base + "_e")  # >= 0: floor
        if dtype is np.float64:
            e = g.node("Floor", [e], base + "_ef")
    if mask is not None:
        e = g.node("Where", [mask, e, g.const(0, dtype)], base + "_em")
    s = g.node("ReduceSum", [e, g.const([axis], i64)], base + "_s", keepdims=1)
    return neg, e, s


def _saturated(g: Graph, op: Any, y: str, dtype: type = np.int64) -> None:
    bits, signed = op.bits.value.data, not nh.is_unsigned(op.result)
    lo_c, hi_c = nh.code_range(bits, signed)
    if dtype is np.float64:
        g.put(op.result, "f64", clip(g, y, lo_c, hi_c, dtype, out_name(g, op)))
    else:
        y = clip(g, y, lo_c, hi_c, dtype, out_name(g, op) + "_yc")
        g.put(op.result, "i32", g.node("Cast", [y], out_name(g, op), to=6))
    g.set_bound(op.result, max(-lo_c, hi_c))


def softmax(g: Graph, op: nh.SoftmaxOp) -> None:
    """``nanoir.runtime.numerics.softmax.softmax_codes`` in float64: its integers stay below
    ``2**52`` (the op's verifier checks :func:`~nanoir.runtime.numerics.softmax.bound_error`),
    so every sum and product is exact, and ``Floor`` of the quotient of two such integers is
    the floor division (a quotient within half an ulp of an integer it is not would need a
    numerator of ``2**53``). onnxruntime runs int64 ``Div`` as a scalar loop: 2 ms of the
    PP-OCRv4 recognizer's 6,625-way softmax against a fraction of that in float64."""
    base = out_name(g, op)
    k_out = nh.fixed_of(op.result).exp_list[0]
    f64 = np.float64
    mask = None
    if op.mask is not None:
        mask = g.const(dense_to_numpy(op.mask).astype(bool), np.bool_, base + "_mask")
    _, e, s = _exp_codes(g, op, mask, f64)
    num2 = g.node("Mul", [e, g.const(2 ** (max(k_out, 0) + 1), f64)], base + "_n2")
    den = s if k_out >= 0 else g.node("Mul", [s, g.const(2**-k_out, f64)], base + "_den")
    safe = g.node("Max", [den, g.const(1, f64)], base + "_safe")  # den >= 0
    quotient = g.node(
        "Div",
        [
            g.node("Add", [num2, safe], base + "_n3"),
            g.node("Mul", [safe, g.const(2, f64)], base + "_d2"),
        ],
        base + "_yq",
    )
    y = g.node("Floor", [quotient], base + "_y")
    if mask is not None:  # a fully masked row sums to 0: its codes are 0
        positive = g.node("Greater", [den, g.const(0, f64)], base + "_pos")
        y = g.node("Mul", [y, g.node("Cast", [positive], base + "_keep", to=11)], base + "_y0")
    _saturated(g, op, y, f64)


def _ln_fixed(g: Graph, s: str, base: str) -> str:
    """``nanoir.runtime.numerics.softmax.ln_fixed`` of ``s >= 1`` (int64, below ``2**53``)."""
    i64 = np.int64
    pow2 = g.const(2 ** np.arange(63, dtype=np.int64), i64, base + "_pow2")
    # The bit length: how many powers of two are <= s.
    wide = g.node("Unsqueeze", [s, g.const([-1], i64)], base + "_su")
    ge = g.node("Cast", [g.node("GreaterOrEqual", [wide, pow2], base + "_ge")], base + "_gec", to=7)
    n = g.node("ReduceSum", [ge, g.const([-1], i64)], base + "_n", keepdims=0)
    up = g.node(
        "Max",
        [g.node("Sub", [g.const(_MANTISSA, i64), n], base + "_up0"), g.const(0, i64)],
        base + "_up",
    )
    down = g.node(
        "Max",
        [g.node("Sub", [n, g.const(_MANTISSA, i64)], base + "_dn0"), g.const(0, i64)],
        base + "_dn",
    )
    scaled = g.node("Mul", [s, g.node("Gather", [pow2, up], base + "_pu", axis=0)], base + "_sc")
    mant = g.node(
        "Div", [scaled, g.node("Gather", [pow2, down], base + "_pd", axis=0)], base + "_m"
    )
    rest_bits = _MANTISSA - 1 - LN_TABLE_BITS
    f = g.node("Sub", [mant, g.const(2 ** (_MANTISSA - 1), i64)], base + "_f")
    i = g.node("Div", [f, g.const(2**rest_bits, i64)], base + "_i")
    r = g.node(
        "Sub", [f, g.node("Mul", [i, g.const(2**rest_bits, i64)], base + "_ir")], base + "_r"
    )
    table = g.const(LN_TABLE, i64, base + "_ln")
    t0 = g.node("Gather", [table, i], base + "_t0", axis=0)
    i1 = g.node(
        "Min",
        [g.node("Add", [i, g.const(1, i64)], base + "_i1"), g.const(len(LN_TABLE) - 1, i64)],
        base + "_i1c",
    )
    t1 = g.node("Gather", [table, i1], base + "_t1", axis=0)
    slope = g.node("Mul", [g.node("Sub", [t1, t0], base + "_dt"), r], base + "_sl")
    interp = g.node(
        "Div",
        [
            g.node("Add", [slope, g.const(2 ** (rest_bits - 1), i64)], base + "_ia"),
            g.const(2**rest_bits, i64),
        ],
        base + "_ip",
    )  # >= 0: floor
    whole = g.node(
        "Mul",
        [g.node("Sub", [n, g.const(1 + EXP_FRAC, i64)], base + "_e2"), g.const(LN2, i64)],
        base + "_w",
    )
    return g.node("Add", [g.node("Add", [whole, t0], base + "_w0"), interp], base + "_ln")


def log_softmax(g: Graph, op: nh.LogSoftmaxOp) -> None:
    """``nanoir.runtime.numerics.softmax.log_softmax_codes`` in int64."""
    base = out_name(g, op)
    k_in, k_out = nh.fixed_of(op.input).exp_list[0], nh.fixed_of(op.result).exp_list[0]
    i64 = np.int64
    neg, _, s = _exp_codes(g, op, None, i64)
    # d = q - max, unclipped (the tables' clip applies to their index only).
    q = g.get(op.input, "i64")
    top = g.node("ReduceMax", [q, g.const([op.axis.value.data], i64)], base + "_top2", keepdims=1)
    d = g.node("Sub", [q, top], base + "_d")
    c = max(k_in - k_out, LN_FRAC - k_out, 0)
    a, b = k_out - k_in + c, k_out - LN_FRAC + c
    big = g.node(
        "Sub",
        [
            g.node("Mul", [d, g.const(2**a, i64)], base + "_da"),
            g.node("Mul", [_ln_fixed(g, s, base + "_lnS"), g.const(2**b, i64)], base + "_lb"),
        ],
        base + "_big",
    )
    y = div_round(g, big, np.asarray(2**c), RoundingMode.HALF_UP, i64, base + "_y")
    _saturated(g, op, y)


def _div_half_up(g: Graph, num: str, den: str, base: str) -> str:
    """``div_round(num, den, half_up)`` for a run-time ``den > 0``, without overflow:
    ``q = floor(num / den)``, ``r = num - q den``, ``q + (2 r >= den)``."""
    r = g.node("Mod", [num, den], base + "_r")
    q = g.node("Div", [g.node("Sub", [num, r], base + "_f"), den], base + "_q")
    up = g.node(
        "GreaterOrEqual",
        [g.node("Mul", [r, g.const(2, np.int64)], base + "_2r"), den],
        base + "_up",
    )
    return g.node("Add", [q, g.node("Cast", [up], base + "_upc", to=7)], base)


def bit_length_f64(g: Graph, v: str, base: str) -> str:
    """``frexp(float64(v))[1]`` of ``v >= 1`` (the bit length, or one more where the float
    rounds up to a power of two), as the runtime's ``_bit_length``: how many powers of two
    (exact doubles) are at most the double."""
    pow2 = g.const(2.0 ** np.arange(64), np.float64, base + "_p2f")
    dv = g.node(
        "Unsqueeze",
        [g.node("Cast", [v], base + "_dv", to=11), g.const([-1], np.int64)],
        base + "_dvu",
    )
    ge = g.node("Cast", [g.node("GreaterOrEqual", [dv, pow2], base + "_ge")], base + "_gec", to=7)
    return g.node("ReduceSum", [ge, g.const([-1], np.int64)], base, keepdims=0)


def isqrt(g: Graph, w: str, base: str) -> str:
    """``nanoir.runtime.numerics.norm.isqrt``: the float64 root, floored, then corrected by
    one either way (exact for ``0 <= w <= 2**62``)."""
    i64 = np.int64
    root = g.node("Sqrt", [g.node("Cast", [w], base + "_wf", to=11)], base + "_sq")
    s = g.node("Cast", [g.node("Floor", [root], base + "_fl")], base + "_s0", to=7)
    # The corrections add a comparison's 0/1 (onnxruntime's Where is slow).
    one = g.const(1, i64)
    too_big = g.node("Greater", [g.node("Mul", [s, s], base + "_ss"), w], base + "_big")
    s = g.node("Sub", [s, g.node("Cast", [too_big], base + "_bi", to=7)], base + "_s1")
    s1 = g.node("Add", [s, one], base + "_sp")
    fits = g.node("LessOrEqual", [g.node("Mul", [s1, s1], base + "_s11"), w], base + "_fit")
    return g.node("Add", [s, g.node("Cast", [fits], base + "_fi", to=7)], base)


def _norm(g: Graph, op: nh.LayerNormOp | nh.GroupNormOp) -> None:
    """``nanoir.runtime.numerics.norm.normalize_codes`` in int64, rows of ``n`` codes."""
    base = out_name(g, op)
    i64 = np.int64
    n, big = op.reduced(), op.max_shift.value.data
    eps, guard, nudge = op.eps_term.value.data, op.guard.value.data, op.nudge.value.data
    out_exp = nh.fixed_of(op.result).exp_list[0]
    kg, kc = nh.fixed_of(op.weight).exp_list[0], nh.fixed_of(op.bias).exp_list[0]
    if guard > 62:
        raise refuse(op, f"has guard {guard}: its rounding shift leaves int64")
    shape = tensor_shape(op.input)
    rank = len(shape)
    if any(d == DYNAMIC_INDEX for d in shape[1:]):
        raise refuse(op, "has dynamic sizes past the batch dim")
    x = g.get(op.input, "i64")
    rows = g.node("Reshape", [x, g.const([-1, n], i64)], base + "_rows")
    axis1 = g.const([1], i64)
    s1 = g.node("ReduceSum", [rows, axis1], base + "_s1", keepdims=1)
    s2 = g.node(
        "ReduceSum", [g.node("Mul", [rows, rows], base + "_qq"), axis1], base + "_s2", keepdims=1
    )
    v = g.node(
        "Sub",
        [
            g.node("Mul", [s2, g.const(n, i64)], base + "_ns2"),
            g.node("Mul", [s1, s1], base + "_s11"),
        ],
        base + "_v",
    )
    bl = bit_length_f64(
        g, g.node("Add", [v, g.const((eps >> (2 * big)) + 1, i64)], base + "_ve"), base + "_bl"
    )
    h = g.node(
        "Div", [g.node("Sub", [g.const(61, i64), bl], base + "_h0"), g.const(2, i64)], base + "_h1"
    )
    h = clip(g, h, 0, big, i64, base + "_h")
    pow2 = g.const(2 ** np.arange(63, dtype=np.int64), i64, base + "_p2")
    two_h = g.node("Mul", [h, g.const(2, i64)], base + "_2h")
    vs = g.node("Mul", [v, g.node("Gather", [pow2, two_h], base + "_4h", axis=0)], base + "_vs")
    down = g.node("Sub", [g.const(2 * big, i64), two_h], base + "_dn")
    eps_h = g.node(
        "Div",
        [g.const(eps, i64), g.node("Gather", [pow2, down], base + "_pd", axis=0)],
        base + "_eh",
    )
    sigma = g.node(
        "Max",
        [isqrt(g, g.node("Add", [vs, eps_h], base + "_w"), base + "_isq"), g.const(1, i64)],
        base + "_sig",
    )
    d = g.node("Sub", [g.node("Mul", [rows, g.const(n, i64)], base + "_nq"), s1], base + "_d")
    frac = out_exp + guard - kg
    hf = g.node("Add", [h, g.const(frac, i64)], base + "_hf")
    up = clip(g, hf, 0, 62, i64, base + "_upc")
    num = g.node("Mul", [d, g.node("Gather", [pow2, up], base + "_pu", axis=0)], base + "_num")
    extra = clip(g, g.node("Sub", [up, hf], base + "_ex0"), 0, 31, i64, base + "_ex")
    den = g.node(
        "Mul", [sigma, g.node("Gather", [pow2, extra], base + "_pe", axis=0)], base + "_den"
    )
    z = _div_half_up(g, num, den, base + "_z")
    z = g.node("Reshape", [z, g.const(static_shape(shape), i64)], base + "_zs")
    if isinstance(op, nh.GroupNormOp):
        affine = (-1,) + (1,) * (rank - 2)
    else:
        affine = tuple(tensor_shape(op.weight))

    def operand(v: SSAValue, scale: int, label: str) -> str:
        codes = constant_codes(v)
        if codes is not None:
            return g.const(codes.reshape(affine) * scale, i64, base + label)
        y = g.node("Reshape", [g.get(v, "i64"), g.const(affine, i64)], base + label + "r")
        return g.node("Mul", [y, g.const(scale, i64)], base + label) if scale != 1 else y

    acc = g.node("Mul", [z, operand(op.weight, 1, "_g")], base + "_zg")
    acc = g.node(
        "Add", [acc, operand(op.bias, 2 ** max(out_exp + guard - kc, 0), "_c")], base + "_acc"
    )
    mode = op.rounding.data
    if mode is RoundingMode.FLOOR:
        acc = g.node("Add", [acc, g.const(nudge, i64)], base + "_nudge")
    elif mode is RoundingMode.TRUNC:
        moved = g.node(
            "Mul", [g.node("Sign", [acc], base + "_sgn"), g.const(nudge, i64)], base + "_nm"
        )
        acc = g.node("Add", [acc, moved], base + "_nudge")
    y = div_round(g, acc, np.asarray(2**guard), mode, i64, base + "_y")
    lo, hi = nh.code_range(op.bits.value.data, not nh.is_unsigned(op.result))
    y = clip(g, y, lo, hi, i64, base + "_yc")
    g.put(op.result, "i32", g.node("Cast", [y], base, to=6))


def normalize(g: Graph, op: nh.NormalizeOp) -> None:
    """``nanoir.runtime.numerics.l2norm.l2_normalize_codes`` in int64 along the op's axis:
    ``S2``, the row's shift ``h`` from its bit length, ``sigma = isqrt(S2 4**h)`` (at least
    the epsilon term), ``q 2**(h + k + P) / sigma`` rounded half up, the nudge of trunc and
    floor, and the requant by ``P``. 1-bit results take the sign rule."""
    plan = op.plan()
    base = out_name(g, op)
    i64 = np.int64
    big, guard = plan.max_shift, plan.guard
    if plan.out_exp + guard < 0 or big + plan.out_exp + guard > 62:
        raise refuse(op, f"scales its codes by 2**{plan.out_exp + guard}..: outside int64")
    axis = op.axis.value.data % len(tensor_shape(op.input))
    q = g.get(op.input, "i64")
    s2 = g.node(
        "ReduceSum",
        [g.node("Mul", [q, q], base + "_qq"), g.const([axis], i64)],
        base + "_s2",
        keepdims=1,
    )
    floor_eps = plan.eps_term >> (2 * big)
    floored = g.node("Max", [s2, g.const(floor_eps + 1, i64)], base + "_s2f")
    bl = bit_length_f64(g, g.node("Add", [floored, g.const(1, i64)], base + "_s2p"), base + "_bl")
    h = g.node(
        "Div", [g.node("Sub", [g.const(61, i64), bl], base + "_h0"), g.const(2, i64)], base + "_h1"
    )
    h = clip(g, h, 0, big, i64, base + "_h")  # (61 - bl < 0 rounds either way to 0 here)
    pow2 = g.const(2 ** np.arange(63, dtype=np.int64), i64, base + "_p2")
    two_h = g.node("Mul", [h, g.const(2, i64)], base + "_2h")
    scaled = g.node(
        "Mul", [s2, g.node("Gather", [pow2, two_h], base + "_4h", axis=0)], base + "_w0"
    )
    down = g.node("Sub", [g.const(2 * big, i64), two_h], base + "_dn")
    eps_h = g.node(
        "Div",
        [g.const(plan.eps_term, i64), g.node("Gather", [pow2, down], base + "_pd", axis=0)],
        base + "_eh",
    )
    w = g.node("Max", [scaled, eps_h], base + "_w")
    sigma = g.node("Max", [isqrt(g, w, base + "_isq"), g.const(1, i64)], base + "_sig")
    up = g.node("Add", [h, g.const(plan.out_exp + guard, i64)], base + "_up")
    num = g.node("Mul", [q, g.node("Gather", [pow2, up], base + "_pu", axis=0)], base + "_num")
    acc = _div_half_up(g, num, sigma, base + "_acc")
    if plan.rounding is RoundingMode.FLOOR:
        acc = g.node("Add", [acc, g.const(plan.nudge, i64)], base + "_nudge")
    elif plan.rounding is RoundingMode.TRUNC:
        moved = g.node(
            "Mul", [g.node("Sign", [acc], base + "_sgn"), g.const(plan.nudge, i64)], base + "_nm"
        )
        acc = g.node("Add", [acc, moved], base + "_nudge")
    if plan.out_bits == 1:  # the sign rule: acc >= 0 is +1, else -1
        nonneg = g.node("GreaterOrEqual", [acc, g.const(0, i64)], base + "_ge")
        y = g.node(
            "Sub",
            [
                g.node(
                    "Mul",
                    [g.node("Cast", [nonneg], base + "_gec", to=7), g.const(2, i64)],
                    base + "_2",
                ),
                g.const(1, i64),
            ],
            base + "_y",
        )
    else:
        y = div_round(g, acc, np.asarray(2**guard), plan.rounding, i64, base + "_y")
        lo, hi = nh.code_range(plan.out_bits, plan.out_signed)
        y = clip(g, y, lo, hi, i64, base + "_yc")
    g.put(op.result, "i32", g.node("Cast", [y], base, to=6))


WRITERS: dict[type[Operation], Writer] = {
    nh.SoftmaxOp: softmax,
    nh.LogSoftmaxOp: log_softmax,
    nh.LayerNormOp: _norm,
    nh.GroupNormOp: _norm,
    nh.NormalizeOp: normalize,
}
