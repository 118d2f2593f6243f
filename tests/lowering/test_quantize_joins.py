"""Calibrated exponents always lower (issue 20, sections 1-3): quantize settles every join.

Random float programs with the patterns that once made lower-to-hw refuse what quantize chose
(branches that are exactly 0 or constant, concat and split before a conv, residual adds of
ranges decades apart, deep concatenations, all-zero and huge biases, a concat into a batch
norm fold-bn cannot fold, with random statistics: its concat's parts are aligned within
16 bits, ``join_rules.BN_INPUT_BITS``) are quantized by
calibration in every rounding mode, 2/4/8 bits, per tensor and per channel; each one lowers,
and nq == nh bit for bit. The oracle is the nq program run in float64 (NumPy), independent of
the lowering; exponents are checked against rules written out here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.lowering.quantize import quantize
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    ModuleOp,
    TensorType,
    f32,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue

import nanoir
from nanoir.testing.programs import examples

C, H = 4, 3


def _check_exact(nq_module: ModuleOp, inputs: list[np.ndarray]) -> None:
    """nh run == nq run in float64, bit for bit (as tests/lowering/test_lower_to_hw.py)."""
    want = run(nq_module, *inputs, dtype=np.float64)
    hw = lower_to_hw(nq_module.clone())
    hw.verify()
    got = run(hw, *inputs)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        mismatch = np.flatnonzero(g != w)
        assert mismatch.size == 0, f"{mismatch.size} mismatches; nh {g.flat[mismatch[0]]} vs nq"


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.ops: list[Operation] = []
        self.n = 0

    def add(self, op: Operation, name: str | None = None) -> SSAValue:
        self.ops.append(op)
        if name:
            op.results[0].name_hint = name
        return op.results[0]

    def constant(self, data: np.ndarray, name: str) -> SSAValue:
        a = np.ascontiguousarray(data, dtype="<f4")
        attr = DenseIntOrFPElementsAttr(TensorType(f32, a.shape), BytesAttr(a.tobytes()))
        return self.add(nf.ConstantOp(attr, name=name))

    def conv(self, x: SSAValue, cout: int, weight: str, bias: str, scale: float) -> SSAValue:
        """A 1x1 conv: weights random, zero or (per channel) partly zero; bias as drawn."""
        self.n += 1
        cin = nf.tensor_shape(x)[1]
        w = self.rng.standard_normal((cout, cin, 1, 1)) * 0.5
        if weight == "zero":
            w[:] = 0
        elif weight == "zero_channel":
            w[0] = 0
        b = {
            "none": None,
            "zero": np.zeros(cout),
            "small": self.rng.standard_normal(cout) * 0.1,
            "huge": self.rng.standard_normal(cout) * 1e4,
        }[bias]
        wc = self.constant(w * scale, f"c{self.n}.weight")
        bc = None if b is None else self.constant(b, f"c{self.n}.bias")
        return self.add(nf.ConvOp(x, wc, bc), f"c{self.n}")


@st.composite
def float_programs(draw: st.DrawFn) -> ModuleOp:
    """A float (nf) program on ``[N, 4, 3, 3]`` built from the join patterns."""
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**32 - 1))))
    block = Block(arg_types=[TensorType(f32, [DYNAMIC_INDEX, C, H, H])])
    values: list[SSAValue] = [block.args[0]]
    weights = st.sampled_from(("random", "random", "zero", "zero_channel"))
    biases = st.sampled_from(("none", "zero", "small", "huge"))
    scales = st.sampled_from((1.0, 1e-5, 1e-3, 1e3))
    for _ in range(draw(st.integers(1, 6))):
        v = values[draw(st.integers(0, len(values) - 1))]
        kind = draw(
            st.sampled_from(
                (
                    "conv",
                    "residual",
                    "concat_conv",
                    "split_conv",
                    "deep_concat",
                    "scale",
                    "concat_bn",
                )
            )
        )
        if kind == "conv":
            y = b.conv(v, C, draw(weights), draw(biases), draw(scales))
            values.append(b.add(nf.ReluOp(y)) if draw(st.booleans()) else y)
        elif kind == "residual":
            # v + branch(v): the branch may be 0, a constant, or decades off v's range.
            y = b.conv(v, C, draw(weights), draw(biases), draw(scales))
            cls = nf.AddOp if draw(st.booleans()) else nf.SubOp
            values.append(b.add(cls(v, y), f"join{len(values)}"))
        elif kind == "concat_conv":
            y = b.conv(v, C, draw(weights), draw(biases), draw(scales))
            cat = b.add(nf.ConcatOp([v, y], 1))
            values.append(b.conv(cat, C, draw(weights), draw(biases), 1.0))
        elif kind == "split_conv":
            split = nf.SplitOp(v, 1, [C // 2, C // 2])
            b.ops.append(split)
            halves = list(split.results)
            y = b.conv(halves[1], C // 2, draw(weights), draw(biases), draw(scales))
            cat = b.add(nf.ConcatOp([halves[0], y], 1))
            values.append(b.conv(cat, C, draw(weights), draw(biases), 1.0))
        elif kind == "scale":
            # v * a named per-channel constant (zero, tiny or ordinary), joined back to v.
            k = draw(st.sampled_from((0.0, 1e-6, 1.0)))
            c = b.rng.uniform(0.5, 1.5, (1, C, 1, 1)) * k
            if draw(st.booleans()):
                c[0, 0] = 0.0
            b.n += 1
            y = b.add(nf.MulOp(v, b.constant(c, f"s{b.n}")), f"s{b.n}")
            values.append(b.add(nf.AddOp(v, y), f"join{len(values)}"))
        elif kind == "concat_bn":
            # DenseNet's pre-activation: concat -> BN (fold-bn cannot fold it) -> ReLU -> conv,
            # random statistics (lowering/quantize/batch_norm.py makes its affine dyadic).
            y = b.conv(v, C, draw(weights), draw(biases), draw(scales))
            cat = b.add(nf.ConcatOp([v, y], 1))
            b.n += 1
            stats = (
                b.rng.uniform(0.5, 1.5, 2 * C),
                b.rng.standard_normal(2 * C) * 0.5,
                b.rng.standard_normal(2 * C),
                b.rng.uniform(0.5, 3.0, 2 * C),
            )
            params = [
                b.constant(s, f"bn{b.n}.{p}")
                for s, p in zip(stats, ("weight", "bias", "running_mean", "running_var"))
            ]
            bn = b.add(nf.BatchNormOp(cat, *params), f"bn{b.n}")
            values.append(b.conv(b.add(nf.ReluOp(bn)), C, draw(weights), draw(biases), 1.0))
        else:
            # DenseNet-like: each new map is concatenated with everything before it.
            feats = [v]
            for _ in range(draw(st.integers(2, 4))):
                cat = b.add(nf.ConcatOp(feats, 1)) if len(feats) > 1 else feats[0]
                feats.append(b.conv(cat, 2, draw(weights), draw(biases), draw(scales)))
            values.append(b.conv(b.add(nf.ConcatOp(feats, 1)), C, "random", draw(biases), 1.0))
    block.add_ops(b.ops)
    sinks = [v for v in values[1:] if not v.uses] or [values[-1]]
    block.add_op(ReturnOp(*sinks))
    ftype = FunctionType.from_lists([block.args[0].type], [v.type for v in sinks])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


@st.composite
def program_texts(draw: st.DrawFn) -> str:
    """:func:`float_programs` as text (what a failing example prints)."""
    return str(draw(float_programs()))


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=st.data(),
    rounding=st.sampled_from(tuple(RoundingMode)),
    act_bits=st.sampled_from((2, 4, 8, 16)),
    weight_bits=st.sampled_from((2, 4, 8, 16)),
    weight_per_channel=st.booleans(),
    act_per_channel=st.booleans(),
    calibrator=st.sampled_from(("absmax", "mse")),
    seed=st.integers(0, 2**16),
)
def test_calibrated_programs_lower_exactly(
    data: st.DataObject,
    rounding: RoundingMode,
    act_bits: int,
    weight_bits: int,
    weight_per_channel: bool,
    act_per_channel: bool,
    calibrator: str,
    seed: int,
) -> None:
    """Every program that quantizes lowers, and nq == nh.

    Mutants caught (run in a private copy): ``settle`` returning at once, and
    ``Settler.join`` returning at once (a zero residual branch: "aligning operands needs
    62-bit codes"); the accumulator loop returning before it lowers anything (a huge bias:
    "may overflow"); a concat read by a lone BN aligned within 31 bits, not 16 (under the
    thorough profile: "'nf.batch_norm' (%bn2) has 30-bit input codes"). ``sources`` not looking through concat/split is caught by
    tests/lowering/test_proof_models.py (CSPTransition and MagikFront with fresh BN).
    """
    # (drawn as its text: hypothesis prints a failing draw, and its pretty-printer walks an
    # xDSL module's object graph for minutes and gigabytes; the text is the program)
    module = nanoir.parse(data.draw(program_texts()))
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((2, C, H, H)) for _ in range(2)]
    quantize(
        module,
        batches,
        rounding=rounding,
        act_bits=act_bits,
        weight_bits=weight_bits,
        weight_per_channel=weight_per_channel,
        act_per_channel=act_per_channel,
        calibrator=calibrator,
        progress=False,
    )
    _check_exact(module, [rng.standard_normal((3, C, H, H))])


def _residual_with_zero_branch() -> ModuleOp:
    """``x + conv(x)`` whose conv has zero weights and bias: the branch is exactly 0."""
    b = _Builder(np.random.default_rng(0))
    block = Block(arg_types=[TensorType(f32, [DYNAMIC_INDEX, C, H, H])])
    x = b.add(nf.ReluOp(block.args[0]), "x")
    y = b.conv(x, C, "zero", "zero", 1.0)
    s = b.add(nf.AddOp(x, y), "layer1.0")
    block.add_ops(b.ops)
    block.add_op(ReturnOp(s))
    ftype = FunctionType.from_lists([block.args[0].type], [s.type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def _fq_of(module: ModuleOp, name: str) -> FakeQuantOp:
    return next(
        op for op in module.walk() if isinstance(op, FakeQuantOp) and op.input.name_hint == name
    )


def test_zero_branch_takes_the_shortcut_exponent() -> None:
    """The zero branch's fake-quant takes the shortcut's exponent (absmax of relu(x) on the
    batch, computed here with NumPy), says so in ``origin``, and the add lowers exactly."""
    module = _residual_with_zero_branch()
    x = np.random.default_rng(1).standard_normal((4, C, H, H))
    quantize(module, [x], progress=False)
    own = int(np.floor(np.log2(128 / np.abs(np.maximum(x, 0)).max())))
    assert int(dense_to_numpy(_fq_of(module, "x").exp).reshape(-1)[0]) == own
    branch = _fq_of(module, "c1")
    assert int(dense_to_numpy(branch.exp).reshape(-1)[0]) == own
    assert branch.origin is not None and branch.origin.data == "join:%layer1.0"
    assert _fq_of(module, "x").origin is None
    _check_exact(module, [x])
    text = str(module)
    assert 'origin = "join:%layer1.0"' in text
    assert 'origin = "join:%layer1.0"' in str(nanoir.parse(text))


def test_zero_weight_puts_its_accumulator_on_the_bias_grid() -> None:
    """The thorough profile's minimal failing program of test_calibrated_programs_lower_exactly:
    ``c2(concat(x, c1(x)))``, both convs with zero weights (exponent 60), c1 without a bias
    (bias correction adds one), c2 with biases ~1e4; 2 bits, floor, per-channel weights.
    Before, the bias aligned at ``exp(x) + 60`` dominated c2's accumulator, so the input's step
    was raised to the calibration floor (exponent -60) and c1's corrected bias then did not fit
    i32 ("has a bias that does not fit i32"). Now the zero weights take the exponent that puts
    the accumulator on the bias's grid: x keeps its own absmax exponent (NumPy here) and
    nq == nh. Mutant seen to fail it: ``_settle_zero_weight`` not called (x at exponent -60,
    not its own -1)."""
    b = _Builder(np.random.default_rng(0))
    block = Block(arg_types=[TensorType(f32, [DYNAMIC_INDEX, C, H, H])])
    x = block.args[0]
    x.name_hint = "x"
    c1 = b.conv(x, C, "zero", "none", 1.0)
    cat = b.add(nf.ConcatOp([x, c1], 1))
    bias = b.constant(np.array([-4364.35254, -11698.0195, 17393.6797, -4959.10742]), "c2.bias")
    w2 = b.constant(np.zeros((C, 2 * C, 1, 1)), "c2.weight")
    c2 = b.add(nf.ConvOp(cat, w2, bias), "c2")
    block.add_ops(b.ops)
    block.add_op(ReturnOp(c2))
    ftype = FunctionType.from_lists([x.type], [c2.type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    data = np.random.default_rng(3).standard_normal((2, C, H, H))
    quantize(
        module,
        [data],
        rounding=RoundingMode.FLOOR,
        act_bits=2,
        weight_bits=2,
        weight_per_channel=True,
        calibrator="absmax",
        progress=False,
    )
    own = int(np.floor(np.log2(2 / np.abs(data).max())))
    assert int(dense_to_numpy(_fq_of(module, "x").exp).reshape(-1)[0]) == own
    _check_exact(module, [np.random.default_rng(4).standard_normal((3, C, H, H))])


def test_imported_exponents_are_refused_with_the_value_named() -> None:
    """Exponents the user imports are used as given: the join then cannot lower, and the
    refusal names the operand and the exponent to change. Mutant caught: the add's
    ``check_alignment`` skipped (``shift_to``'s message names only the shifted operand)."""
    module = _residual_with_zero_branch()
    x = np.random.default_rng(1).standard_normal((4, C, H, H))
    quantize(module, [x], exponents={"c1": 60}, progress=False)
    assert int(dense_to_numpy(_fq_of(module, "c1").exp).reshape(-1)[0]) == 60
    with pytest.raises(LowerToHwError, match=r"%c1.*exponent 60"):
        lower_to_hw(module)


def test_report_shows_the_origin_and_the_own_range_sqnr() -> None:
    """The report's row of a fake-quant with an origin shows it, and the SQNR at the exponent
    its own range gives (recomputed here with NumPy: absmax rule, trunc); rows without an
    origin have none. Mutant caught: the report ignoring ``origin`` (empty, no own SQNR)."""
    b = _Builder(np.random.default_rng(0))
    block = Block(arg_types=[TensorType(f32, [DYNAMIC_INDEX, C, H, H])])
    x = b.add(nf.ReluOp(block.args[0]), "x")
    y = b.conv(x, C, "random", "none", 1e-8)  # a branch ~2**-27 of x
    s = b.add(nf.AddOp(x, y), "join")
    block.add_ops(b.ops)
    block.add_op(ReturnOp(s))
    ftype = FunctionType.from_lists([block.args[0].type], [s.type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    data = np.random.default_rng(1).standard_normal((4, C, H, H))
    quantize(module, [data], progress=False)
    _check_exact(module, [data])
    rows = {r.name: r for r in nanoir.report(module, [data]).rows}
    branch = rows["c1"]
    assert branch.origin == "join:%join"
    assert rows["x"].origin == "" and rows["x"].sqnr_own is None
    # The conv's float output, by NumPy from the quantized program's own inputs.
    fq = _fq_of(module, "c1")
    conv = run(_without(module, fq), data, dtype=np.float64)[0]
    own = int(np.clip(np.floor(np.log2(128 / np.abs(conv).max())), -60, 60))
    assert own > int(dense_to_numpy(fq.exp).reshape(-1)[0])
    q = np.clip(np.trunc(conv * 2.0**own), -128, 127) * 2.0**-own
    want = 10 * np.log10(np.sum(conv**2) / np.sum((q - conv) ** 2))
    assert branch.sqnr_own == pytest.approx(want, rel=1e-9)
    assert "origin" in str(nanoir.report(module, [data])).splitlines()[0]


def _without(module: ModuleOp, fq: FakeQuantOp) -> ModuleOp:
    """A copy of ``module`` returning the input of ``fq`` (the branch's conv before it)."""
    copy = module.clone()
    ops = list(copy.walk())
    target = next(
        op for op in ops if isinstance(op, FakeQuantOp) and op.input.name_hint == fq.input.name_hint
    )
    func = next(op for op in ops if isinstance(op, FuncOp))
    ret = func.body.block.last_op
    assert isinstance(ret, ReturnOp)
    ret.operands = [target.input]
    func.function_type = FunctionType.from_lists(
        list(func.function_type.inputs), [target.input.type]
    )
    return copy


def test_dead_channel_takes_its_group_exponent() -> None:
    """A per-channel activation whose channel 0 is 0 on every batch (a dead ReLU channel)
    feeding a conv: that channel takes the finest exponent of the others (their own absmax
    exponents, computed here with NumPy), the others keep theirs, and nq == nh. Mutant
    caught: ``_settle_zero_channels`` skipped (the accumulator loop then leaves channel 0
    finer than the others: their codes are shifted onto it)."""
    b = _Builder(np.random.default_rng(0))
    block = Block(arg_types=[TensorType(f32, [DYNAMIC_INDEX, C, H, H])])
    x = b.add(nf.ReluOp(block.args[0]), "x")
    y = b.conv(x, C, "random", "small", 1.0)
    block.add_ops(b.ops)
    block.add_op(ReturnOp(y))
    ftype = FunctionType.from_lists([block.args[0].type], [y.type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    data = np.random.default_rng(1).standard_normal((4, C, H, H))
    data[:, 0] = -np.abs(data[:, 0])  # channel 0 of relu(x) is 0 everywhere
    quantize(module, [data], act_per_channel=True, progress=False)
    absmax = np.maximum(data, 0).max(axis=(0, 2, 3))
    own = np.floor(np.log2(128 / absmax[1:])).astype(int)
    fq = _fq_of(module, "x")
    got = dense_to_numpy(fq.exp).reshape(-1).tolist()
    assert got == [int(own.max())] + own.tolist()
    assert fq.origin is not None and fq.origin.data == "input:%c1"
    _check_exact(module, [data])
