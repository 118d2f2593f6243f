"""Lookup tables (``nh.lut``) for 16-bit inputs and per-channel exponents: nq == nh bit for
bit on every input code, the table against torch's function quantized by NumPy here, the
segmented and per-channel kernel against a reference written here, `.ne` round trips,
streamed == whole, and the verifier's located refusals.

Mutants checked (each made the tests named fail, in a private copy):
- the kernel searching with ``side="left"`` (a code on a run's start takes the previous
  run): test_nh_is_nq_on_every_code, test_kernel_matches_a_reference, and the 16-bit cases
  of test_ne_round_trips and test_streamed_is_whole;
- the kernel ignoring ``channels`` (every channel reads sub-table 0):
  test_nh_is_nq_on_every_code, test_kernel_matches_a_reference, test_ne_round_trips,
  test_streamed_is_whole;
- lower-to-hw giving every channel the first channel's output exponent (sub-tables keyed by
  the input exponent only): test_nh_is_nq_on_every_code, test_ne_round_trips,
  test_streamed_is_whole;
- lower-to-hw starting each run one code late (``codes[change] + 1``):
  test_nh_is_nq_on_every_code, test_table_is_torchs_function_quantized (every function);
- the `.ne` Lut row without ``starts``: test_ne_round_trips (16 bits).
- the kernel indexing a ``ui<b>`` input from the signed lowest code (``code_range`` for
  ``value_code_range``): test_nh_is_nq_on_every_code.
- lower-to-hw not moving the input's channel dim to the output's per-channel dim:
  test_output_channels_along_the_last_dim.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.nh import NH_BUILDERS
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    FunctionType,
    IntegerType,
    ModuleOp,
    TensorType,
    f32,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

FUNCTIONS = ("sigmoid", "tanh", "hardswish", "silu", "gelu", "gelu_tanh")
OFFSETS = (0, 1, 0, -1)
"""Per-channel exponents are a base plus these: 4 channels, 3 distinct exponents."""


def torch_fn(name: str, x: torch.Tensor) -> torch.Tensor:
    """The function in torch, the independent oracle."""
    if name.startswith("gelu"):
        return F.gelu(x, approximate="tanh" if name == "gelu_tanh" else "none")
    return {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardswish": F.hardswish}.get(
        name, F.silu
    )(x)


def nf_op(name: str, x):  # noqa: ANN001, ANN201
    if name.startswith("gelu"):
        return nf.GeluOp(x, "tanh" if name == "gelu_tanh" else "none")
    ops = {"sigmoid": nf.SigmoidOp, "tanh": nf.TanhOp, "hardswish": nf.HardSwishOp}
    return ops.get(name, nf.SiluOp)(x)


def exps_of(base: int, per_channel: bool) -> list[int]:
    return [base + o for o in OFFSETS] if per_channel else [base]


def program(
    name: str,
    bits_in: int,
    e_in: list[int],
    bits_out: int,
    k_out: list[int],
    mode: RoundingMode,
    signed: tuple[bool, bool] = (True, True),
) -> ModuleOp:
    """``fake_quant(f(fake_quant(x)))`` on ``[?, 4, 7]``, each exponent list per tensor (one)
    or per channel (four, along dim 1); ``signed`` for the input's and the output's codes."""
    channels = len(OFFSETS)
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, channels, 7))])

    def attr(exps: list[int]):  # noqa: ANN202
        return exp_attr(exps, [channels, 1]) if len(exps) > 1 else exp_attr(exps[0])

    q = FakeQuantOp(block.args[0], bits_in, attr(e_in), mode, signed[0])
    y = nf_op(name, q.results[0])
    out = FakeQuantOp(y.results[0], bits_out, attr(k_out), mode, signed[1])
    block.add_ops([q, y, out, ReturnOp(out.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def every_code(bits: int, e_in: list[int], signed: bool = True) -> np.ndarray:
    """``[N, 4, 7]`` holding every ``bits``-bit code (unsigned: ``0..2**bits-1``) in each
    channel, dequantized."""
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else (0, 2**bits)
    codes = np.arange(lo, hi, dtype=np.float64)
    n = -(-codes.size // 7)
    x = np.repeat(np.resize(codes, n * 7).reshape(n, 1, 7), len(OFFSETS), axis=1)
    return np.ldexp(x, -np.broadcast_to(np.asarray(e_in).reshape(1, -1, 1), (1, len(OFFSETS), 1)))


def quantized(
    v: np.ndarray, bits: int, k: np.ndarray, mode: RoundingMode, signed: bool = True
) -> tuple[np.ndarray, ...]:
    """``v`` on the grid ``2**-k`` at ``bits`` (saturating; unsigned: at ``0..2**bits-1``),
    by NumPy, and a mask of the
    elements off a rounding boundary (within 1e-9 of one, torch's and nanoir's float64 may
    legitimately land on neighbouring codes)."""
    s = np.ldexp(v, k)
    if mode in (RoundingMode.TRUNC, RoundingMode.FLOOR):
        c = np.trunc(s) if mode == RoundingMode.TRUNC else np.floor(s)
        edge = np.abs(s - np.round(s))
    else:
        c = np.floor(s + 0.5) if mode == RoundingMode.HALF_UP else np.round(s)
        edge = np.abs(s - np.floor(s) - 0.5)
    c = (
        np.clip(c, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if signed
        else np.clip(c, 0, 2**bits - 1)
    )
    return np.ldexp(c, -k), edge > 1e-9 * np.maximum(1.0, np.abs(s))


SETTINGS = settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@SETTINGS
@given(
    name=st.sampled_from(FUNCTIONS),
    bits_in=st.sampled_from((2, 4, 8, 16)),
    bits_out=st.sampled_from((2, 4, 8, 16)),
    r_in=st.integers(-1, 3),
    r_out=st.integers(-1, 3),
    mode=st.sampled_from(tuple(RoundingMode)),
    pc_in=st.booleans(),
    pc_out=st.booleans(),
    signed=st.tuples(st.booleans(), st.booleans()),
)
def test_nh_is_nq_on_every_code(
    name: str,
    bits_in: int,
    bits_out: int,
    r_in: int,
    r_out: int,
    mode: RoundingMode,
    pc_in: bool,
    pc_out: bool,
    signed: tuple[bool, bool],
) -> None:
    """Every input code of every channel (inputs up to ``2**r_in``, outputs up to
    ``2**r_out``): the lowered ``nh.lut`` gives nq's float64 numbers bit for bit, and both
    are torch's function quantized here (off a rounding boundary: there, one step); signed
    or unsigned codes in and out."""
    e_in = exps_of(bits_in - 1 - r_in, pc_in)
    k_out = exps_of(bits_out - 1 - r_out, pc_out)
    module = program(name, bits_in, e_in, bits_out, k_out, mode, signed)
    hw = lower_to_hw(module.clone())
    hw.verify()
    (lut,) = [op for op in hw.walk() if isinstance(op, nh.LutOp)]
    assert (lut.starts is not None) == (bits_in > 8)
    assert (lut.channels is not None) == (pc_in or pc_out)
    x = every_code(bits_in, e_in, signed[0])
    (want_nq,) = run(module, x, dtype=np.float64)
    (got_nh,) = run(hw, x)
    np.testing.assert_array_equal(got_nh, want_nq)
    k = np.broadcast_to(np.asarray(k_out).reshape(1, -1, 1), (1, len(OFFSETS), 1))
    f = torch_fn(name, torch.from_numpy(x)).numpy()
    want, clear = quantized(f, bits_out, k, mode, signed[1])
    np.testing.assert_array_equal(got_nh[clear], want[clear])
    assert np.all((np.abs(got_nh - want) <= np.ldexp(1.0, -k))[~clear])


@pytest.mark.parametrize("name", FUNCTIONS)
def test_table_is_torchs_function_quantized(name: str) -> None:
    """16 bits in (exponent 12: -8..8), 8 bits out at exponent 5: the segmented table has
    one run per output change (a few hundred, not 65,536 entries), and expanding its runs
    back over every code gives torch's function quantized here."""
    module = program(name, 16, [12], 8, [5], RoundingMode.HALF_EVEN)
    (lut,) = [op for op in lower_to_hw(module).walk() if isinstance(op, nh.LutOp)]
    table = np.asarray(lut.table.get_values())
    starts = np.asarray(lut.starts.get_values())
    assert starts[0] == -(2**15) and (np.diff(starts) > 0).all()
    assert (table[1:] != table[:-1]).all()  # runs are maximal
    assert len(table) <= 2 * 256
    codes = np.arange(-(2**15), 2**15)
    expanded = table[np.searchsorted(starts, codes, side="right") - 1]
    x = torch.from_numpy(np.ldexp(codes.astype(np.float64), -12))
    want, clear = quantized(torch_fn(name, x).numpy(), 8, np.array(5), RoundingMode.HALF_EVEN)
    got = np.ldexp(expanded.astype(np.float64), -5)
    np.testing.assert_array_equal(got[clear], want[clear])
    assert np.all(np.abs(got - want) <= 2.0**-5)


def reference_lut(x: np.ndarray, table: list[int], starts: list[int] | None, lo: int,
                  channels: list[int] | None, axis: int) -> np.ndarray:  # fmt: skip
    """The lookup by Python loops: split the table into sub-tables, then find each code's
    entry (dense: ``code - lo``; segmented: the last start at or below the code)."""
    if starts is None:
        size = -2 * lo  # every code of the width, lo..-lo-1
        subs = [(None, table[i : i + size]) for i in range(0, len(table), size)]
    else:
        subs, cur = [], None
        for s, v in zip(starts, table):
            if s == lo:
                cur = ([], [])
                subs.append(cur)
            cur[0].append(s)
            cur[1].append(v)
    out = np.empty_like(x)
    for index in np.ndindex(*x.shape):
        sub = subs[channels[index[axis]] if channels else 0]
        code = int(x[index])
        if sub[0] is None:
            out[index] = sub[1][code - lo]
        else:
            out[index] = sub[1][max(i for i, s in enumerate(sub[0]) if s <= code)]
    return out


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data(), width=st.sampled_from((2, 4, 8, 16)), out=st.sampled_from((4, 8)))
def test_kernel_matches_a_reference(data: st.DataObject, width: int, out: int) -> None:
    """A hand-built ``nh.lut`` (random segmented or dense sub-tables, random channel map)
    runs as the loop reference above on random codes, including each run's first code."""
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    olo, ohi = -(2 ** (out - 1)), 2 ** (out - 1) - 1
    n_subs = data.draw(st.integers(1, 3))
    segmented = width > 8 or data.draw(st.booleans())
    table: list[int] = []
    starts: list[int] = []
    for _ in range(n_subs):
        if segmented:
            inner = data.draw(st.lists(st.integers(lo + 1, hi), max_size=6, unique=True))
            starts += [lo, *sorted(inner)]
            table += data.draw(st.lists(st.integers(olo, ohi), min_size=len(inner) + 1,
                                        max_size=len(inner) + 1))  # fmt: skip
        else:
            table += data.draw(st.lists(st.integers(olo, ohi), min_size=hi - lo + 1,
                                        max_size=hi - lo + 1))  # fmt: skip
    channels = [data.draw(st.integers(0, n_subs - 1)) for _ in range(3)]
    channels[0] = n_subs - 1  # every sub-table count is reachable
    props = {"table": nf.int_array(table)}
    if segmented:
        props["starts"] = nf.int_array(starts)
    per_channel = n_subs > 1 or data.draw(st.booleans())
    if per_channel:
        props["channels"] = nf.int_array(channels)
    in_fixed = nh.FixedAttr([3, 4, 5] if per_channel else 3, "BCM")
    t_in = TensorType(IntegerType(width), (DYNAMIC_INDEX, 3, 5), in_fixed)
    t_out = TensorType(IntegerType(out), (DYNAMIC_INDEX, 3, 5), nh.FixedAttr(2, "BCM"))
    block = Block(arg_types=[t_in])
    op = nh.LutOp.create(operands=[block.args[0]], result_types=[t_out], properties=props)
    op.verify()
    probes = [lo, hi, 0, *starts, *[s - 1 for s in starts if s > lo]]
    rest = data.draw(st.lists(st.integers(lo, hi), min_size=2 * 3 * 5, max_size=2 * 3 * 5))
    codes = np.resize(np.array(probes + rest, dtype=np.int64), (len(probes) + len(rest)))
    n = -(-codes.size // 15)
    x = np.resize(codes, n * 15).reshape(n, 3, 5)
    (got,) = NH_BUILDERS[nh.LutOp](op, np.dtype(np.int64))(
        x.astype(np.int16 if width == 16 else np.int8)
    )
    want = reference_lut(x, table, starts if segmented else None, lo,
                         channels if per_channel else None, 1)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(got, dtype=np.int64), want)


def net(seed: int, bits: int) -> tuple[ModuleOp, np.ndarray]:
    """conv -> SiLU -> conv -> GELU quantized at ``bits`` with per-channel activations."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(3, 4, 3, padding=1),
        torch.nn.SiLU(),
        torch.nn.Conv1d(4, 4, 3, padding=1),
        torch.nn.GELU(),
    ).eval()
    module = nanoir.from_torch(model, (torch.randn(2, 3, 11),))
    gen = np.random.default_rng(seed)
    batches = [gen.standard_normal((4, 3, 11)) * 2 for _ in range(3)]
    nanoir.quantize(module, batches, weight_bits=8, act_bits=bits, act_per_channel=True)
    return module, gen.standard_normal((3, 3, 11)) * 2


@pytest.mark.parametrize("bits", (8, 16))
@pytest.mark.parametrize("seed", (0, 1))
def test_ne_round_trips(bits: int, seed: int) -> None:
    """nh `.ne` with per-channel (and, at 16 bits, segmented) tables: text -> IR -> text
    byte for byte, and the IR read back computes the same codes."""
    module, x = net(seed, bits)
    hw = lower_to_hw(module.clone())
    luts = [op for op in hw.walk() if isinstance(op, nh.LutOp)]
    assert len(luts) == 2 and all(op.channels is not None for op in luts)
    assert all((op.starts is not None) == (bits == 16) for op in luts)
    text = export_nanoengine(hw)
    assert "channels=[" in text and ("starts=[" in text) == (bits == 16)
    back = import_nanoengine(text)
    assert export_nanoengine(back) == text
    np.testing.assert_array_equal(run(back, x, raw=True)[0], run(hw, x, raw=True)[0])
    np.testing.assert_array_equal(run(hw, x)[0], run(module, x, dtype=np.float64)[0])


@pytest.mark.parametrize("bits", (8, 16))
@pytest.mark.parametrize("step", (1, 3))
def test_streamed_is_whole(bits: int, step: int) -> None:
    """Per-channel and segmented tables stream row by row: streamed == whole == nq."""
    module, x = net(2, bits)
    hw = lower_to_hw(module.clone())
    (whole,) = run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=step)
    np.testing.assert_array_equal(streamed, whole)
    np.testing.assert_array_equal(whole, run(module, x, dtype=np.float64)[0])


BAD = [
    ("table = array<i64: 1, 2>, starts = array<i64: -7, 0>", "xi16", "<3, BC>",
     "starts must begin with the input's lowest code -32768"),
    ("table = array<i64: 1, 2, 3>, starts = array<i64: -32768, 5, 5>", "xi16", "<3, BC>",
     "starts must increase within a sub-table"),
    ("table = array<i64: 1, 2>, starts = array<i64: -32768>", "xi16", "<3, BC>",
     "1 starts for 2 table entries"),
    ("table = array<i64: 0, 1, 2, 3>", "xi2", "<[1, 2, 1, 2], BC>",
     "per-channel exponents need channels"),
    ("table = array<i64: 0, 1, 2, 3>, channels = array<i64: 0, 0>", "xi2",
     "<[1, 2, 1, 2], BC>", "2 channels for 4 along dim 1"),
    ("table = array<i64: 0, 1, 2, 3>, channels = array<i64: 0, 1, 0, 0>", "xi2",
     "<[1, 2, 1, 2], BC>", "channel sub-table 1 is not one of the 1"),
    ("table = array<i64: 0, 1, 2, 3, 0, 1, 2, 3>", "xi2", "<1, BC>",
     "2 sub-tables need channels to pick them"),
]  # fmt: skip


@pytest.mark.parametrize(("props", "elt", "fixed", "why"), BAD)
def test_verifier_refuses_with_location(props: str, elt: str, fixed: str, why: str) -> None:
    text = f"""\
func.func @main(%x: tensor<?x4{elt}, #nh.fixed{fixed}>) -> tensor<?x4xi8, #nh.fixed<7, BC>> {{
  %y = nh.lut %x {{{props}}} : tensor<?x4{elt}, #nh.fixed{fixed}> -> tensor<?x4xi8, #nh.fixed<7, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<7, BC>>
}}
"""
    with pytest.raises(nanoir.Error) as info:
        nanoir.parse(text)
    message = str(info.value)
    assert why in message and ":2:" in message


@pytest.mark.parametrize("mode", tuple(RoundingMode))
def test_output_channels_along_the_last_dim(mode: RoundingMode) -> None:
    """A per-tensor input and per-channel output exponents along dim 2 of ``[?, 7, 4]`` (a
    transformer's features; the input's layout has its channel dim at 1): lower-to-hw moves
    the input's channel dim there first, and nh == nq bit for bit."""
    block = Block(arg_types=[TensorType(f32, (DYNAMIC_INDEX, 7, 4))])
    q = FakeQuantOp(block.args[0], 8, exp_attr(4), mode)
    y = nf.SiluOp(q.results[0])
    out = FakeQuantOp(y.results[0], 8, exp_attr([5, 6, 7, 5], [1, 4]), mode)
    block.add_ops([q, y, out, ReturnOp(out.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    hw = lower_to_hw(module.clone())
    hw.verify()
    (lut,) = [op for op in hw.walk() if isinstance(op, nh.LutOp)]
    assert lut.channel_axis() == 2 and list(lut.channels.get_values()) == [0, 1, 2, 0]
    x = np.random.default_rng(3).standard_normal((5, 7, 4)) * 4
    np.testing.assert_array_equal(run(hw, x)[0], run(module, x, dtype=np.float64)[0])
