"""Products of two runtime values lower at every activation width (``quantize.products``).

``nh.matmul`` sums ``inner`` products of two activation codes into i32 (``nh.mul``: one);
lower-to-hw refuses it when ``inner * max|a| * max|b|`` passes ``2**31 - 1``. Under
``act_bits=16`` every attention block (``q @ k^T``, ``p @ v``) did, and a product of two
unsigned 16-bit codes; two 8-bit operands do once ``inner`` passes 2**17 (``2**16`` with an
unsigned operand). quantize now narrows the wider operand, one
allowed width at a time, until the bound fits. The bound and the minimality of the narrowing
are computed here from the fake-quants' bits, not by the code under test; nq == nh bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import DataMovement, grid_operands
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import OpResult, SSAValue

import nanoir
from nanoir.testing.programs import examples

torch = pytest.importorskip("torch")
nn = torch.nn

LIMIT = 2**31 - 1
WIDTHS = (2, 4, 8, 16)  # what NanoEngine holds above 1 bit


class _Attention(nn.Module):
    """One attention head: ``softmax(q k^T / sqrt(d)) v``, optionally gated (``v * v``)."""

    def __init__(self, d: int, gated: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.scale, self.gated = 1 / math.sqrt(d), gated

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.v(x)
        if self.gated:
            v = v * v
        p = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) * self.scale, -1)
        return p @ v


def _grids(value: SSAValue) -> list[FakeQuantOp]:
    """The fake-quants whose grids reach ``value`` through data movement (written here)."""
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return [value.op]
    assert isinstance(value, OpResult) and value.op.has_trait(DataMovement), value
    return [fq for v in grid_operands(value.op) for fq in _grids(v)]


def _code_bound(bits: int, signed: bool) -> int:
    return 1 if bits == 1 else 2 ** (bits - 1 if signed else bits)


def _check_products(program: ModuleOp, widest: int) -> int:
    """Every matmul's and runtime product's bound fits, and each narrowed operand is narrowed
    no further than needed: one allowed width wider (at most ``widest``) it would not fit.
    Returns how many fake-quants were narrowed."""
    narrowed: set[int] = set()
    for op in program.walk():
        if not isinstance(op, nf.MatmulOp | nf.MulOp):
            continue
        if any(isinstance(o.owner, nf.ConstantOp) for o in op.operands):
            continue  # (a product with a float constant: a scale)
        inner = nf.tensor_shape(op.lhs)[-1] if isinstance(op, nf.MatmulOp) else 1
        sides = [_grids(op.lhs), _grids(op.rhs)]
        bounds = [max(_code_bound(fq.bits.value.data, fq.is_signed) for fq in s) for s in sides]
        assert inner * bounds[0] * bounds[1] <= LIMIT, (inner, bounds)
        for i, side in enumerate(sides):
            for fq in side:
                if fq.origin is None or not fq.origin.data.startswith("acc:"):
                    continue
                narrowed.add(id(fq))
                bits = fq.bits.value.data
                assert bits < widest
                wider = min(w for w in WIDTHS if w > bits)
                grown = _code_bound(wider, fq.is_signed)
                other = grown if fq in sides[1 - i] else bounds[1 - i]  # (one grid, both sides)
                assert inner * grown * other > LIMIT, (inner, bits, bounds)
    return len(narrowed)


def _equal_levels(program: ModuleOp, inputs: list[np.ndarray]) -> None:
    hw = lower_to_hw(program.clone())
    for x in inputs:
        for want, got in zip(run(program, x, dtype=np.float64), run(hw, x), strict=True):
            bad = np.flatnonzero(want != got)
            assert bad.size == 0, f"{bad.size} differ: nq {want.flat[bad[0]]} nh {got.flat[bad[0]]}"


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seq=st.integers(1, 9),
    d=st.integers(1, 12),
    act_bits=st.sampled_from((4, 8, 16)),
    gate_bits=st.sampled_from((None, 16)),
    gated=st.booleans(),
    unsigned=st.sampled_from(("never", "auto")),
    rounding=st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    seed=st.integers(0, 2**16),
)
def test_attention_lowers_at_every_width(
    seq: int,
    d: int,
    act_bits: int,
    gate_bits: int | None,
    gated: bool,
    unsigned: str,
    rounding: str,
    seed: int,
) -> None:
    """An attention head (``q @ k^T`` through a transpose, ``p @ v`` with ``p`` a softmax,
    ``v`` optionally a 16-bit gated product) quantized at 4, 8 or 16 bits lowers, nq == nh on
    the calibration batches and a fresh one, every matmul's bound fits i32 and no operand is
    narrower than it must be. Kills: ``narrow_operands`` not called (16 bits: lower-to-hw
    refuses), data movement not walked (``k`` through its transpose), an unsigned code bound
    as signed (``p @ v`` under ``unsigned="auto"`` one width too wide), narrowing both
    operands at once (minimality)."""
    torch.manual_seed(seed)
    net = _Attention(d, gated).eval()
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((2, seq, d)).astype(np.float32) for _ in range(2)]
    program = nanoir.from_torch(net, (torch.from_numpy(batches[0]),))
    with torch.no_grad():
        want = net(torch.from_numpy(batches[0])).numpy()
    np.testing.assert_allclose(run(program, batches[0])[0], want, rtol=1e-4, atol=1e-5)
    nanoir.quantize(
        program,
        batches,
        act_bits=act_bits,
        gate_bits=gate_bits,
        unsigned=unsigned,
        rounding=rounding,
        progress=False,
    )
    _check_products(program, max(act_bits, gate_bits or 0))
    _equal_levels(program, [*batches, rng.standard_normal((3, seq, d)).astype(np.float32)])


def test_sixteen_bit_attention_narrows_one_operand_of_each_matmul() -> None:
    """Under ``act_bits=16`` both matmuls of a 5-token head pass i32 at 16 x 16 bits
    (``5 * 2**30``); one operand of each is narrowed to 8 and the rest stay 16. Kills: no
    narrowing (lower-to-hw refuses), narrowing to 4 (minimality)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 8)).astype(np.float32)
    program = nanoir.from_torch(_Attention(8, False).eval(), (torch.from_numpy(x[:2]),))
    nanoir.quantize(program, [x[:2], x[2:]], act_bits=16, progress=False)
    assert _check_products(program, 16) == 2
    acts = [
        op
        for op in program.walk()
        if isinstance(op, FakeQuantOp) and not isinstance(op.input.owner, nf.ConstantOp)
    ]
    narrowed = [op.bits.value.data for op in acts if op.origin is not None]
    assert narrowed == [8, 8]
    assert {op.bits.value.data for op in acts if op.origin is None} == {16}
    _equal_levels(program, [x])


@pytest.mark.parametrize(("inner", "unsigned"), [(2**17 + 3, "never"), (70_000, "auto")])
def test_a_long_eight_bit_contraction_narrows(inner: int, unsigned: str) -> None:
    """``relu(x) @ v`` over ``inner`` terms at 8 bits: past ``2**17`` terms (signed codes)
    or ``2**16`` (the ReLU's codes unsigned, ``unsigned="auto"``) 8 x 8 bits pass i32; one
    operand becomes 4-bit and the program lowers. Kills: an unsigned code bounded as signed
    (70 000 terms would seem to fit)."""

    class LongMix(nn.Module):
        def forward(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) @ v

    rng = np.random.default_rng(1)
    batches = [
        (rng.standard_normal((1, 1, inner)), rng.standard_normal((1, inner, 2))) for _ in range(2)
    ]
    example = tuple(torch.from_numpy(a.astype(np.float32)) for a in batches[0])
    program = nanoir.from_torch(LongMix(), example)
    nanoir.quantize(program, batches, unsigned=unsigned, progress=False)
    assert _check_products(program, 8) == 1
    hw = lower_to_hw(program.clone())
    for inputs in batches:
        want = run(program, *inputs, dtype=np.float64)[0]
        assert np.array_equal(want, run(hw, *inputs)[0])


def test_widths_a_rule_names_are_kept_and_refused_at_quantize() -> None:
    """Rules name 16 bits for every activation: quantize does not narrow the user's widths
    and refuses, naming the matmul and its operands, instead of making a program lower-to-hw
    refuses. Kills: rule-named bits narrowed like the options'."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((4, 5, 8)).astype(np.float32)
    program = nanoir.from_torch(_Attention(8, False).eval(), (torch.from_numpy(x[:2]),))
    with pytest.raises(nanoir.Error, match=r"nf\.matmul %matmul sums 8 products.*16 bits, a rule"):
        nanoir.quantize(program, [x[:2], x[2:]], rules=[r"act@.*=16"], progress=False)


def test_a_product_of_two_unsigned_sixteen_bit_codes_narrows() -> None:
    """``relu(a(x)) * relu(b(x))`` under ``act_bits=16, unsigned="auto"``: two unsigned
    16-bit codes make a 33-bit product (lower-to-hw: "'nf.mul' needs 33-bit products"; drawn
    by ``test_programs_quantize_makes_lower`` once it drew 16 bits); one operand is narrowed
    to 8 bits, the product lowers and equals nq; signed 16 x 16 bits fit and stay. Kills:
    ``nf.mul`` not counted as a product (``_terms`` None)."""

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.a(x)) * torch.relu(self.b(x))

    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    for unsigned, narrowed in (("auto", 1), ("never", 0)):
        program = nanoir.from_torch(Gate().eval(), (torch.from_numpy(x[:2]),))
        nanoir.quantize(program, [x[:3], x[3:]], act_bits=16, unsigned=unsigned, progress=False)
        assert _check_products(program, 16) == narrowed
        _equal_levels(program, [x])


class _ConvPRelu(nn.Module):
    def __init__(self, slopes: list[float]) -> None:
        super().__init__()
        self.conv, self.prelu = nn.Conv2d(3, len(slopes), 1), nn.PReLU(len(slopes))
        with torch.no_grad():
            self.prelu.weight.copy_(torch.tensor(slopes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prelu(self.conv(x))


def _prelu_bound(x_fq: FakeQuantOp, slope_fq: FakeQuantOp) -> tuple[int, int]:
    """``(bound, shift)`` of ``nh.prelu``, written here: ``max|x|`` times the larger of
    ``2**shift`` (the positive side, shifted) and the slope codes moved to ``shift``."""
    values = np.asarray(constant_array(slope_fq.input), np.float64).reshape(-1)
    exps = np.broadcast_to(dense_to_numpy(slope_fq.exp).astype(np.int64).reshape(-1), values.shape)
    codes = quant.quantize_to_int(values, slope_fq.bits.value.data, exps, slope_fq.rounding_mode)
    shift = max(int(exps.max()), 0)
    moved = np.abs(codes.astype(np.int64)) << (shift - exps)
    x_max = _code_bound(x_fq.bits.value.data, x_fq.is_signed)
    return x_max * max(2**shift, int(moved.max(initial=0))), shift


@pytest.mark.parametrize(
    "slopes", [[0.25, 0.1, 0.2, 0.3], [0.25, 0.0, 0.2], [0.25, 1e-4], [1e-7, 0.3], [3.0, 0.3]]
)
@pytest.mark.parametrize("act_bits", [8, 16])
@pytest.mark.parametrize("rounding", ["trunc", "half_even"])
def test_a_prelu_slope_fits_i32(slopes: list[float], act_bits: int, rounding: str) -> None:
    """Conv -> PReLU: the slope, a named constant, is quantized at ``act_bits``; at 16 bits a
    slope of 0.3 took exponent 16 and every PReLU needed 33-bit results ("'nf.prelu' needs
    33-bit results, more than i32"; drawn by ``test_programs_quantize_makes_lower`` once it
    drew 16 bits). The slope's exponents are capped where the bound (computed here) passes
    i32, no further than needed, and the program lowers and equals nq; at 8 bits, and at 16
    with a slope of 3 (exponent 13), nothing is capped. Kills: ``cap_slopes`` not called,
    capped one step too far."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    program = nanoir.from_torch(_ConvPRelu(slopes).eval(), (torch.from_numpy(x[:2]),))
    nanoir.quantize(
        program,
        [x[:2], x[2:]],
        act_bits=act_bits,
        rounding=rounding,
        progress=False,
    )
    (prelu,) = [op for op in program.walk() if isinstance(op, nf.PReluOp)]
    x_fq, slope_fq = (v.owner for v in prelu.operands)
    assert isinstance(x_fq, FakeQuantOp) and isinstance(slope_fq, FakeQuantOp)
    bound, shift = _prelu_bound(x_fq, slope_fq)
    assert bound <= LIMIT
    capped = slope_fq.origin is not None and slope_fq.origin.data.startswith("acc:")
    assert capped == (act_bits == 16 and max(slopes) < 1)  # (0.3 at 16 bits: exponent 16)
    if capped:  # one exponent finer at the top would not fit
        exps = dense_to_numpy(slope_fq.exp).astype(np.int64)
        finer = FakeQuantOp(
            slope_fq.input,
            slope_fq.bits.value.data,
            exp_attr(
                np.where(exps == shift, shift + 1, exps).reshape(-1).tolist(), list(exps.shape)
            ),
            slope_fq.rounding_mode,
        )
        assert _prelu_bound(x_fq, finer)[0] > LIMIT
    _equal_levels(program, [x])


def test_an_embedding_table_read_by_both_operands_narrows() -> None:
    """``e @ e^T`` of an embedding's rows under ``weight_bits=16``: both operands carry the
    table's grid (a constant, not an activation), and 16 x 16 bits over 6 terms pass i32
    (quantize refused: "no operand can be narrower"; drawn by the explore profile). The
    table is narrowed to 8 bits, and the program lowers and equals nq. Kills: only
    activations narrowed."""

    class EmbeddingGram(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10, 6)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            e = self.emb(ids)
            return e @ e.transpose(1, 2)

    torch.manual_seed(0)
    ids = np.random.default_rng(0).integers(0, 10, (4, 5))
    program = nanoir.from_torch(EmbeddingGram().eval(), (torch.from_numpy(ids[:2]),))
    nanoir.quantize(program, [ids[:2], ids[2:]], weight_bits=16, progress=False)
    assert _check_products(program, 16) == 1
    (table,) = [
        op
        for op in program.walk()
        if isinstance(op, FakeQuantOp) and isinstance(op.input.owner, nf.ConstantOp)
    ]
    assert table.bits.value.data == 8
    _equal_levels(program, [ids])


class _Bicubic(nn.Module):
    def __init__(self, scale: tuple[float, float], relu: bool) -> None:
        super().__init__()
        self.conv, self.scale, self.relu = nn.Conv2d(3, 4, 1), scale, relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = torch.relu(y) if self.relu else y
        return nn.functional.interpolate(y, scale_factor=self.scale, mode="bicubic")


@pytest.mark.parametrize("scale", [(2.0, 2.0), (2.0, 1.0)])
@pytest.mark.parametrize("unsigned", ["never", "auto"])
@pytest.mark.parametrize("act_bits", [8, 16])
def test_a_bicubic_input_fits_its_grown_sum(
    scale: tuple[float, float], unsigned: str, act_bits: int
) -> None:
    """x2 bicubic upsampling grows its input's codes by 9 bits per doubled dim (weights in
    256ths summing to 328 in magnitude): at ``act_bits=16`` two doubled dims need 34 bits
    ("'nf.upsample_bicubic' needs 34-bit sums, more than i32"; found by an ad-hoc run of
    16-bit programs). The input is narrowed exactly when its signed bits (``b + 1`` unsigned)
    plus ``9 n`` pass 32 (computed here), the program lowers and equals nq. Kills:
    ``narrow_grown_inputs`` not called, doubled dims not counted (one doubled dim narrowed)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    program = nanoir.from_torch(
        _Bicubic(scale, unsigned == "auto").eval(), (torch.from_numpy(x[:2]),)
    )
    nanoir.quantize(program, [x[:2], x[2:]], act_bits=act_bits, unsigned=unsigned, progress=False)
    (up,) = [op for op in program.walk() if isinstance(op, nf.UpsampleBicubicOp)]
    (fq,) = _grids(up.input)
    doubled = sum(s == 2.0 for s in scale)
    signed_bits = fq.bits.value.data + (0 if fq.is_signed else 1)
    assert signed_bits + 9 * doubled <= 32
    narrowed = fq.origin is not None and fq.origin.data.startswith("acc:")
    wide = act_bits + (0 if fq.is_signed else 1)  # the options' width, signed bits
    assert narrowed == (wide + 9 * doubled > 32)
    _equal_levels(program, [x])


@pytest.mark.parametrize("spec", ["16", "16u"])
def test_a_rule_named_bicubic_input_is_refused_at_quantize(spec: str) -> None:
    """A rule names the bicubic upsampling's input's bits (16, signed or unsigned: 16 or 17
    signed bits, plus 9 for each of two doubled dims, past 32): quantize keeps the user's
    width and refuses, naming the op, the input with its bits and the rule, as it refuses a
    matmul's (``narrow_operands``, the same loop), instead of accepting a program lower-to-hw
    refuses ("'nf.upsample_bicubic' needs 34-bit sums", issue 31 §3). Without the rule the
    input is narrowed and the program lowers, nq == nh. Kills: ``narrow_grown_inputs``
    leaving a rule-named width silently (no refusal)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((4, 3, 5, 5)).astype(np.float32)
    model = _Bicubic((2.0, 2.0), False).eval()
    program = nanoir.from_torch(model, (torch.from_numpy(x[:2]),))
    with pytest.raises(
        nanoir.Error, match=r"nf\.upsample_bicubic %\w+ grows .*\bconv \(16 bits, a rule\)"
    ):
        nanoir.quantize(program, [x[:2], x[2:]], rules=[f"act@^conv$={spec}"], progress=False)
    program = nanoir.from_torch(model, (torch.from_numpy(x[:2]),))
    nanoir.quantize(program, [x[:2], x[2:]], act_bits=16, progress=False)
    _equal_levels(program, [x])
