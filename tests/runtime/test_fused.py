"""The fused kernels of the whole-tensor nh executor (``nanoir.runtime.fused``), bit for bit
against plain integer references written here: an int64 conv over explicit windows, int64
products and sums, and the rounding modes on integers (floor division and its remainder).

Every test checks that the fused kernel ran (a fused step replaced the chain), so none passes
on the unfused kernels alone. The edge tests put a product's whole bound at and past 2**24,
where float32 stops holding every integer, in every rounding mode; the property tests draw
chains (conv 1-d/2-d with any geometry, linear, add/sub, requant of narrow codes, then
requant, relu, clamp and widening requants) with per-tensor and per-channel shifts of both
signs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.dialects.nh import code_range, fixed_type
from nanoir.dialects.nq import RoundingModeAttr
from nanoir.runtime.fused import exact_chunks
from nanoir.runtime.interpreter import Plan, compile_module
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FunctionType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from nanoir.testing.programs import examples

D = DYNAMIC_INDEX
MODES = list(RoundingMode)
F32 = 2**24

# --------------------------------------------------------------------------------------------
# Plain integer references
# --------------------------------------------------------------------------------------------


def shift_round(v: np.ndarray, s: np.ndarray, mode: RoundingMode) -> np.ndarray:
    """``v * 2**-s`` rounded by ``mode`` on int64 (``s <= 0``: an exact left shift)."""
    v, s = np.broadcast_arrays(np.asarray(v, np.int64), np.asarray(s, np.int64))
    right = np.maximum(s, 0)
    q = v >> right  # floor
    r = v - (q << right)  # 0 <= r < 2**s
    twice, unit = 2 * r, np.int64(1) << right
    if mode is RoundingMode.TRUNC:
        q = q + ((v < 0) & (r != 0))
    elif mode is RoundingMode.HALF_UP:
        q = q + (twice >= unit) * (s > 0)
    elif mode is RoundingMode.HALF_EVEN:
        q = q + ((twice > unit) | ((twice == unit) & (q % 2 == 1))) * (s > 0)
    return np.where(s < 0, v << np.maximum(-s, 0), q)


def conv_ref(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    groups: int,
) -> np.ndarray:
    """An int64 conv, one output position at a time over its explicit window."""
    n = x.ndim - 2
    xp = np.pad(x.astype(np.int64), [(0, 0), (0, 0), *((pads[i], pads[n + i]) for i in range(n))])
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - dilations[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
    o_ch, cg = w.shape[:2]
    y = np.zeros((x.shape[0], o_ch, *out), np.int64)
    for pos in np.ndindex(*out):
        index = tuple(
            slice(p * s, p * s + d * (kk - 1) + 1, d)
            for p, s, d, kk in zip(pos, strides, dilations, k)
        )
        window = xp[(slice(None), slice(None), *index)]  # [N, C, *K]
        for o in range(o_ch):
            g = o // (o_ch // groups)
            part = window[:, g * cg : (g + 1) * cg]
            y[(slice(None), o, *pos)] = (part * w[o].astype(np.int64)).reshape(len(x), -1).sum(1)
    if b is not None:
        y += b.astype(np.int64).reshape(o_ch, *([1] * n))
    return y


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


def ints(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, [int(v) for v in values])


def constant(codes: np.ndarray, width: int, exp: int | Sequence[int], layout: str) -> nh.ConstantOp:
    storage, dtype = (8, "<i1") if width <= 8 else (32, "<i4")
    data = np.ascontiguousarray(codes, dtype=dtype)
    attr = DenseIntOrFPElementsAttr(
        TensorType(IntegerType(storage), data.shape), BytesAttr(data.tobytes())
    )
    return nh.ConstantOp(attr, fixed_type(width, data.shape, exp, layout))


def program(
    arg_types: Sequence[Attribute],
    body: Callable[[list[SSAValue]], list[Operation]],
    extra_result: int | None = None,
) -> ModuleOp:
    """``func @main(args) { body; return <last result> [, <result of op extra_result>] }``."""
    block = Block(arg_types=list(arg_types))
    ops = body(list(block.args))
    block.add_ops(ops)
    results = [ops[-1].results[0]]
    if extra_result is not None:
        results.append(ops[extra_result].results[0])
    block.add_op(ReturnOp(*results))
    ftype = FunctionType.from_lists(list(arg_types), [r.type for r in results])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    module.verify()
    return module


def fused_kernels(plan: Plan) -> int:
    """How many steps of the plan run a fused kernel (``nanoir.runtime.fused``)."""
    return sum(
        getattr(s.kernel, "__module__", "") == "nanoir.runtime.fused" for s in plan.fused or []
    )


def run_fused(module: ModuleOp, *inputs: np.ndarray) -> list[np.ndarray]:
    """Run ``module`` raw, checking that its first runtime op (the producer) ran fused; also
    run it op by op (``observe``), which must give the same arrays."""
    plan = compile_module(module)
    assert plan.fused is not None
    assert getattr(plan.fused[0].kernel, "__module__", "") == "nanoir.runtime.fused"
    got = plan(*inputs)
    unfused = plan(*inputs, observe=lambda op, r: None)
    for g, u in zip(got, unfused):
        assert g.dtype == u.dtype and g.shape == u.shape and g.tobytes() == u.tobytes()
    return got


Stage = tuple[str, Any]
"""A chain op after the producer: ("requant", (shifts, mode, bits, signed)), ("relu", None),
("clamp", (min, max))."""


def chain_ops(
    value: SSAValue, exps: np.ndarray, stages: Sequence[Stage], layout: str
) -> list[Operation]:
    """The chain's ops after ``value``, whose exponents are ``exps`` (one per channel)."""
    ops: list[Operation] = []
    shape = value.type.get_shape()  # type: ignore[union-attr]
    for kind, arg in stages:
        t = value.type
        if kind == "requant":
            shifts, mode, bits, signed = arg
            shifts = np.asarray(shifts, np.int64)
            new = exps - shifts
            per = len(set(new.tolist())) > 1 or len(set(exps.tolist())) > 1
            t = fixed_type(bits, shape, new.tolist() if per else int(new[0]), layout, signed=signed)
            one = len(set(shifts.tolist())) == 1
            props = {
                "shift": ints(shifts[:1] if one else shifts),
                "rounding": RoundingModeAttr(mode),
            }
            ops.append(nh.RequantOp.create(operands=[value], result_types=[t], properties=props))
            exps = np.broadcast_to(new, exps.shape)
        elif kind == "relu":
            ops.append(nh.ReluOp.create(operands=[value], result_types=[t]))
        else:
            bounds = (("min", arg[0]), ("max", arg[1]))
            props = {k: IntegerAttr(v, i64) for k, v in bounds if v is not None}
            ops.append(nh.ClampOp.create(operands=[value], result_types=[t], properties=props))
        value = ops[-1].results[0]
    return ops


def chain_refs(
    stages: Sequence[Stage], axis: int, rank: int
) -> list[Callable[[np.ndarray], np.ndarray]]:
    """The integer reference of each chain op (per-channel shifts along ``axis``)."""
    refs: list[Callable[[np.ndarray], np.ndarray]] = []
    for kind, arg in stages:
        if kind == "relu":
            refs.append(lambda v: np.maximum(v, 0))
        elif kind == "clamp":
            refs.append(lambda v, arg=arg: np.clip(v, arg[0], arg[1]))
        else:
            shifts, mode, bits, signed = arg
            lo, hi = code_range(bits, signed)
            shape = [1] * rank
            shape[axis] = -1
            s = np.asarray(shifts, np.int64).reshape(shape)
            refs.append(lambda v, s=s, m=mode, lo=lo, hi=hi: np.clip(shift_round(v, s, m), lo, hi))
    return refs


def apply(refs: Sequence[Callable[[np.ndarray], np.ndarray]], v: np.ndarray) -> np.ndarray:
    for ref in refs:
        v = ref(v)
    return v


# --------------------------------------------------------------------------------------------
# exact_chunks
# --------------------------------------------------------------------------------------------


@given(
    st.integers(1, 4),
    st.integers(1, 60),
    st.integers(1, 200),
    st.integers(200, 5000),
    st.integers(0, 2**32 - 1),
)
def test_exact_chunks_are_exact_and_greedy(
    rows: int, inner: int, x_bound: int, limit: int, seed: int
) -> None:
    """Consecutive chunks covering the reduction, each within the limit for every row, and
    each as long as it can be (the next column would pass the limit).

    kills (run): a chunk one column too long (the reach compared with ``x_bound`` to spare);
    also checked: a chunk cut before its limit, a single term past the limit not refused."""
    w = np.random.default_rng(seed).integers(0, 60, (rows, inner))
    chunks = exact_chunks(w, x_bound, limit)
    if int(w.max()) * x_bound > limit:
        assert chunks is None
        return
    assert chunks is not None
    assert chunks[0][0] == 0 and chunks[-1][1] == inner
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    for k0, k1 in chunks:
        assert k1 > k0
        assert int(w[:, k0:k1].sum(axis=1).max()) * x_bound <= limit
        if k1 < inner:
            assert int(w[:, k0 : k1 + 1].sum(axis=1).max()) * x_bound > limit


# --------------------------------------------------------------------------------------------
# The bound's edge
# --------------------------------------------------------------------------------------------

EDGES = [
    F32 - 1,
    F32,
    F32 + 1,
    F32 + 2**9 - 1,
    F32 + 2**9 + 1,
    F32 + 2**10 - 1,
    F32 + 2**10 + 2**9 + 1,
    2**26 + 2**11 + 1,
    2**26 + 2**12 - 1,
]
"""Whole bounds ``128 * sum|w| + bias + offset``, reached exactly by one output. At 2**24 + 1
float32 loses the last bit, which no 16-bit code after a 10-bit shift can show (an
equivalent mutant there); the values after it sit where that loss crosses a rounding
boundary of some mode, and the 2**26 ones need several float32 chunks."""


def edge_case(value: int, mode: RoundingMode, split: str) -> tuple[np.ndarray, int, int, int]:
    """Weight magnitudes summing to ``S``, a bias and the shift with ``128 * S + bias +
    offset == value`` (offset: half_up's ``2**(shift-1)``); ``split="bias"`` puts all past
    ``2**24 - 2**13`` into the bias, so that the products alone stay within float32's range."""
    shift = 10 if value < 2**25 else 12
    offset = 2 ** (shift - 1) if mode is RoundingMode.HALF_UP else 0
    total, bias = divmod(value - offset, 128)
    if split == "bias":
        total = min(total, (F32 - 2**13) // 128)
        bias = value - offset - 128 * total
    terms = -(-total // 127)
    mags = np.full(terms, total // terms)
    mags[: total - int(mags.sum())] += 1
    assert int(mags.sum()) == total and int(mags.max()) <= 127
    return mags, bias, shift, offset


@pytest.mark.parametrize("split", ["products", "bias"])
@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
@pytest.mark.parametrize("value", EDGES)
def test_linear_at_the_bound_edge(value: int, mode: RoundingMode, split: str) -> None:
    """``nh.linear -> requant`` where row 0's sum (every product +128 * |w|) plus bias and
    offset is exactly ``value`` (most of it in the products, or past ``2**24 - 2**13`` in
    the bias) and row 1 mixes signs: equal to the int64 reference.

    kills (each run): float32 trusted up to 2**24 + 2**12 (the ``wide`` threshold), the bias
    and offset left out of that bound, the chunks summed in float32 instead of float64,
    half_up's offset not added before flooring, half_up rounded by ``rint``."""
    mags, bias, shift, offset = edge_case(value, mode, split)
    k = len(mags)
    rng = np.random.default_rng(value % 1000)
    w = np.stack([-mags, mags * rng.choice([-1, 1], k)])
    b = np.array([bias, -bias])
    x = np.full((2, k), -128)
    x[1] = rng.integers(-128, 128, k)

    def body(a: list[SSAValue]) -> list[Operation]:
        wc, bc = constant(w, 8, 0, "CC"), constant(b, 32, 0, "C")
        lin = nh.LinearOp.create(
            operands=[a[0], wc.result, bc.result], result_types=[fixed_type(32, [D, 2], 0, "BC")]
        )
        stage: Stage = ("requant", ([shift], mode, 16, True))
        return [wc, bc, lin, *chain_ops(lin.results[0], np.zeros(2, np.int64), [stage], "BC")]

    (got,) = run_fused(program([fixed_type(8, [D, k], 0, "BC")], body), x.astype(np.int8))
    acc = x.astype(np.int64) @ w.T.astype(np.int64) + b
    assert int(acc[0, 0]) + offset == value
    want = np.clip(shift_round(acc, np.int64(shift), mode), -(2**15), 2**15 - 1)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
@pytest.mark.parametrize(
    "value", [F32 - 1, F32, F32 + 2**10 - 1, F32 + 2**9 + 1, 2**26 + 2**12 - 1]
)
@pytest.mark.parametrize("path", ["rows", "im2col"])
def test_conv_at_the_bound_edge(value: int, mode: RoundingMode, path: str) -> None:
    """``nh.conv -> requant -> relu`` on one 3x3 window whose products are all +128 * |w|:
    by kernel rows (stride 1) and by im2col (stride 2), in one float32 sum or in chunks."""
    mags, bias, shift, _ = edge_case(value, mode, "products")
    channels = -(-len(mags) // 9)
    w = np.zeros(channels * 9, np.int64)
    w[: len(mags)] = -mags
    w = w.reshape(1, channels, 3, 3)
    x = np.full((1, channels, 3, 3), -128)
    strides = [1, 1] if path == "rows" else [2, 2]

    def body(a: list[SSAValue]) -> list[Operation]:
        wc, bc = constant(w, 8, 0, "CCDD"), constant(np.array([bias]), 32, 0, "C")
        conv = nh.ConvOp.create(
            operands=[a[0], wc.result, bc.result],
            result_types=[fixed_type(32, [D, 1, 1, 1], 0, "BCMD")],
            properties={"strides": ints(strides)},
        )
        stages: list[Stage] = [("requant", ([shift], mode, 16, True)), ("relu", None)]
        return [wc, bc, conv, *chain_ops(conv.results[0], np.zeros(1, np.int64), stages, "BCMD")]

    module = program([fixed_type(8, [D, channels, 3, 3], 0, "BCMD")], body)
    (got,) = run_fused(module, x.astype(np.int8))
    acc = conv_ref(x, w, np.array([bias]), strides, [0] * 4, [1, 1], 1)
    want = np.maximum(np.clip(shift_round(acc, np.int64(shift), mode), -(2**15), 2**15 - 1), 0)
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------------------------
# Random chains
# --------------------------------------------------------------------------------------------


@st.composite
def stages(draw: st.DrawFn, channels: int) -> list[Stage]:
    """A requant (any mode, shifts of both signs, one or per channel) and what may follow."""
    per = draw(st.booleans()) and channels > 1
    n = channels if per else 1
    first = draw(st.lists(st.integers(-4, 20), min_size=n, max_size=n))
    signed = draw(st.booleans())
    bits = draw(st.sampled_from([2, 4, 8, 16]))
    out: list[Stage] = [("requant", (first, draw(st.sampled_from(MODES)), bits, signed))]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["relu", "clamp", "requant"]))
        lo, hi = code_range(bits, signed)
        if kind == "relu":
            out.append(("relu", None))
        elif kind == "clamp":
            mn = draw(st.one_of(st.none(), st.integers(lo, hi)))
            mx = draw(st.one_of(st.none(), st.integers(lo, hi)))
            if mn is not None and mx is not None and mn > mx:
                mn, mx = mx, mn
            out.append(("clamp", (mn, mx)))
        else:
            wider = draw(st.sampled_from([b for b in (4, 8, 16) if b >= bits] or [16]))
            left = draw(st.lists(st.integers(-(wider - bits), 0), min_size=n, max_size=n))
            out.append(("requant", (left, draw(st.sampled_from(MODES)), wider, signed)))
            bits = wider
    return out


def draw_codes(rng: np.random.Generator, bits: int, shape: Sequence[int]) -> np.ndarray:
    """Codes favouring the extremes (a third of them)."""
    lo, hi = code_range(bits)
    c = rng.integers(lo, hi + 1, size=tuple(shape))
    return np.where(rng.random(tuple(shape)) < 0.33, rng.choice([lo, hi], size=tuple(shape)), c)


@st.composite
def conv_chains(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.sampled_from([1, 2]))
    groups = draw(st.sampled_from([1, 1, 2]))
    cg = draw(st.sampled_from([1, 3, 17]))  # 17 * 2 taps: kernel rows in one product
    og = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(n)]
    strides = [draw(st.integers(1, 2)) for _ in range(n)]
    dilations = [draw(st.integers(1, 2)) for _ in range(n)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * n)]
    # at least one output position: the padded size holds the dilated kernel
    size = [
        draw(st.integers(max(3, dilations[i] * (kernel[i] - 1) + 1 - pads[i] - pads[n + i]), 7))
        for i in range(n)
    ]
    return dict(
        n=n,
        groups=groups,
        cin=groups * cg,
        cout=groups * og,
        kernel=kernel,
        strides=strides,
        dilations=dilations,
        pads=pads,
        size=size,
        bias=draw(st.booleans()),
        batch=draw(st.sampled_from([1, 2])),
        stages=draw(stages(groups * og)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@settings(max_examples=examples(60), deadline=None)
@given(conv_chains())
def test_conv_chains_equal_integer_reference(case: dict[str, Any]) -> None:
    """Any geometry (1-d and 2-d, groups, strides, dilations, pads; kernel rows or im2col)
    and any chain: equal to the int64 conv and the integer chain.

    kills (each run): a relu not narrowing the clip, a widening requant's ``2**-s`` not
    applied, a kernel row's view ignoring the dilation (starting ``r`` rows in, not ``r *
    dh``), the phase split of strided taps reading the next phase."""
    rng = np.random.default_rng(case["seed"])
    n, cin, cout, groups = case["n"], case["cin"], case["cout"], case["groups"]
    layout, wlayout = ("BCM", "CCD") if n == 1 else ("BCMD", "CCDD")
    x = draw_codes(rng, 8, [case["batch"], cin, *case["size"]])
    w = draw_codes(rng, 8, [cout, cin // groups, *case["kernel"]])
    b = rng.integers(-(2**16), 2**16, cout) if case["bias"] else None
    acc = conv_ref(x, w, b, case["strides"], case["pads"], case["dilations"], groups)
    out_shape = [D, cout, *acc.shape[2:]]
    if 0 in acc.shape[2:]:
        return

    def body(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, wlayout)
        ops: list[Operation] = [wc]
        operands = [a[0], wc.result]
        if b is not None:
            bc = constant(b, 32, 0, "C")
            ops.append(bc)
            operands.append(bc.result)
        props = {
            "strides": ints(case["strides"]),
            "pads": ints(case["pads"]),
            "dilations": ints(case["dilations"]),
            "groups": IntegerAttr(groups, i64),
        }
        conv = nh.ConvOp.create(
            operands=operands, result_types=[fixed_type(32, out_shape, 0, layout)], properties=props
        )
        chain = chain_ops(conv.results[0], np.zeros(cout, np.int64), case["stages"], layout)
        return [*ops, conv, *chain]

    module = program([fixed_type(8, [D, cin, *case["size"]], 0, layout)], body)
    (got,) = run_fused(module, x.astype(np.int8))
    assert np.array_equal(got, apply(chain_refs(case["stages"], 1, n + 2), acc))


@settings(max_examples=examples(40), deadline=None)
@given(
    st.sampled_from([2, 3]),
    st.integers(1, 40),
    st.integers(1, 5),
    st.booleans(),
    st.data(),
    st.integers(0, 2**32 - 1),
)
def test_linear_chains_equal_integer_reference(
    rank: int, inner: int, out: int, bias: bool, data: st.DataObject, seed: int
) -> None:
    """``nh.linear`` over 2-d and 3-d inputs, then any chain (shifts along the last dim)."""
    rng = np.random.default_rng(seed)
    lead = [2] if rank == 2 else [2, 3]
    x = draw_codes(rng, 8, [*lead, inner])
    w = draw_codes(rng, 8, [out, inner])
    b = rng.integers(-(2**16), 2**16, out) if bias else None
    layout = "BC" if rank == 2 else "BMC"
    chain = data.draw(stages(out))

    def body(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, "CC")
        ops: list[Operation] = [wc]
        operands = [a[0], wc.result]
        if b is not None:
            bc = constant(b, 32, 0, "C")
            ops.append(bc)
            operands.append(bc.result)
        lin = nh.LinearOp.create(
            operands=operands, result_types=[fixed_type(32, [D, *lead[1:], out], 0, layout)]
        )
        return [*ops, lin, *chain_ops(lin.results[0], np.zeros(out, np.int64), chain, layout)]

    module = program([fixed_type(8, [D, *lead[1:], inner], 0, layout)], body)
    (got,) = run_fused(module, x.astype(np.int8))
    acc = x.astype(np.int64) @ w.T.astype(np.int64) + (0 if b is None else b)
    assert np.array_equal(got, apply(chain_refs(chain, rank - 1, rank), acc))


@settings(max_examples=examples(40), deadline=None)
@given(
    st.sampled_from(["add", "sub", "requant"]),
    st.sampled_from([8, 16]),
    st.booleans(),
    st.data(),
    st.integers(0, 2**32 - 1),
)
def test_elementwise_chains_equal_integer_reference(
    kind: str, bits: int, broadcast: bool, data: st.DataObject, seed: int
) -> None:
    """``nh.add``/``nh.sub`` (a lower-rank operand broadcast or not) and a requant of
    narrow codes, each with any chain: the float32 sum or codes, scaled and rounded there."""
    rng = np.random.default_rng(seed)
    shape = [2, 3, 4, 5]
    a = draw_codes(rng, bits, shape)
    b_shape = [3, 1, 5] if broadcast else shape
    b = draw_codes(rng, bits, b_shape)
    chain = data.draw(stages(3))
    t_a = fixed_type(bits, [D, 3, 4, 5], 0, "BCMD")
    t_b = fixed_type(
        bits, [3, 1, 5] if broadcast else [D, 3, 4, 5], 0, "CMD" if broadcast else "BCMD"
    )

    def body(args: list[SSAValue]) -> list[Operation]:
        if kind == "requant":
            return chain_ops(args[0], np.zeros(3, np.int64), chain, "BCMD")
        op = (nh.AddOp if kind == "add" else nh.SubOp).create(
            operands=args, result_types=[fixed_type(bits * 2, [D, 3, 4, 5], 0, "BCMD")]
        )
        return [op, *chain_ops(op.results[0], np.zeros(3, np.int64), chain, "BCMD")]

    if kind == "requant":
        module = program([t_a], body)
        (got,) = run_fused(module, a.astype(np.int16 if bits == 16 else np.int8))
        v = a.astype(np.int64)
    else:
        module = program([t_a, t_b], body)
        dt = np.int16 if bits == 16 else np.int8
        (got,) = run_fused(module, a.astype(dt), b.astype(dt))
        v = a + b if kind == "add" else a - b
    assert np.array_equal(got, apply(chain_refs(chain, 1, 4), v.astype(np.int64)))


# --------------------------------------------------------------------------------------------
# What is not fused
# --------------------------------------------------------------------------------------------


def test_a_value_read_twice_or_returned_is_not_fused_away() -> None:
    """A requant whose result is also a program result, and an accumulator read by two
    ops, keep their values: the chain stops there (the product fuses with nothing).

    kills (each run): fuse_steps absorbing a step whose result is returned, or is read by
    two ops (the second requant would read nothing)."""
    w = np.array([[3, -2], [1, 5]])
    t_x = fixed_type(8, [D, 2], 0, "BC")
    t_acc = fixed_type(32, [D, 2], 0, "BC")

    def returned(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, "CC")
        lin = nh.LinearOp.create(operands=[a[0], wc.result], result_types=[t_acc])
        stages: list[Stage] = [("requant", ([1], RoundingMode.FLOOR, 8, True)), ("relu", None)]
        return [wc, lin, *chain_ops(lin.results[0], np.zeros(2, np.int64), stages, "BC")]

    x = np.array([[100, -7], [-128, 127]], np.int8)
    module = program([t_x], returned, extra_result=2)  # the requant's result is returned too
    relu, requant = run_fused(module, x)
    acc = x.astype(np.int64) @ w.T
    want = np.clip(acc >> 1, -128, 127)
    assert np.array_equal(requant, want) and np.array_equal(relu, np.maximum(want, 0))

    def read_twice(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, "CC")
        lin = nh.LinearOp.create(operands=[a[0], wc.result], result_types=[t_acc])
        twice = nh.AddOp.create(
            operands=[lin.results[0], lin.results[0]],
            result_types=[fixed_type(32, [D, 2], 0, "BC")],
        )
        return [wc, lin, twice]

    plan = compile_module(program([t_x], read_twice))
    assert fused_kernels(plan) == 0
    assert np.array_equal(plan(x)[0], 2 * acc)

    def two_requants(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, "CC")
        lin = nh.LinearOp.create(operands=[a[0], wc.result], result_types=[t_acc])
        one = chain_ops(
            lin.results[0],
            np.zeros(2, np.int64),
            [("requant", ([1], RoundingMode.FLOOR, 8, True))],
            "BC",
        )
        two = chain_ops(
            lin.results[0],
            np.zeros(2, np.int64),
            [("requant", ([2], RoundingMode.FLOOR, 8, True))],
            "BC",
        )
        return [wc, lin, *one, *two]

    plan = compile_module(program([t_x], two_requants, extra_result=2))
    assert fused_kernels(plan) == 0
    by_two, by_one = plan(x)
    assert np.array_equal(by_one, want) and np.array_equal(by_two, np.clip(acc >> 2, -128, 127))


def test_a_product_that_could_pass_i32_is_not_fused() -> None:
    """A worst case past i32 (the unfused conv checks its accumulator at run time and says
    which value did not fit): no fused kernel, and the check still fires."""
    k = 2**17 + 1  # 128 * 128 * k > 2**31
    w = np.full((1, k), -128)
    t_x = fixed_type(8, [D, k], 0, "BC")

    def body(a: list[SSAValue]) -> list[Operation]:
        wc = constant(w, 8, 0, "CC")
        t_acc = fixed_type(32, [D, 1], 0, "BC")
        lin = nh.LinearOp.create(operands=[a[0], wc.result], result_types=[t_acc])
        stage: Stage = ("requant", ([20], RoundingMode.TRUNC, 8, True))
        return [wc, lin, *chain_ops(lin.results[0], np.zeros(1, np.int64), [stage], "BC")]

    plan = compile_module(program([t_x], body))
    assert fused_kernels(plan) == 0
    with pytest.raises(Exception, match="does not fit i32"):
        plan(np.full((1, k), -128, np.int8))
