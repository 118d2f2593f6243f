"""nh programs as exact integer ONNX (issue 23): onnxruntime, at its default optimization level,
computes the NumPy nh executor's codes bit for bit; the file reads back as the same program;
what has no form, and files changed after writing, are refused with one clear error.

Oracles: the NumPy nh executor (``nanoir.run(hw, codes, raw=True)``), a second executor
written independently of the ONNX graph; onnxruntime runs the graph.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp, RoundingMode, RoundingModeAttr
from nanoir.grammar.ne.schema import main_function
from nanoir.grammar.onnx.exporter import OnnxExportError
from nanoir.grammar.onnx.integer import (
    FUSED_KERNELS,
    IO_KEY,
    KERNELS_KEY,
    PROGRAM_KEY,
    IntegerOnnxError,
    IntegerOnnxImportError,
    export_model,
    fused_kernel_is_exact,
    import_model,
    make_session,
    run_model,
)
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.nh import quantize_inputs
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.utils.exceptions import VerifyException

import nanoir
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program

pytest.importorskip("onnxruntime")


def input_codes(hw: ModuleOp, x: np.ndarray) -> list[np.ndarray]:
    """Float inputs as the nh program's input codes (its argument attributes say how)."""
    return quantize_inputs(main_function(hw), [x])


def _compare(hw: ModuleOp, model: onnx.ModelProto, codes: list[np.ndarray]) -> None:
    """onnxruntime's codes (its default optimization level) are the NumPy executor's; where
    NumPy refuses the input (a value outside its type), onnxruntime refuses it too."""
    try:
        want = nanoir.run(hw, *codes, raw=True)
    except nanoir.Error:  # a value overflows its declared width: no defined result
        with pytest.raises(ExecutionError):
            run_model(make_session(model), codes)
        return
    got = run_model(make_session(model), codes)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == np.shape(w)
        assert np.issubdtype(g.dtype, np.integer)
        g64, w64 = g.astype(np.int64), np.asarray(w).astype(np.int64)
        bad = np.flatnonzero(g64 != w64)
        assert bad.size == 0, (
            f"{bad.size} codes differ; first at {bad[0]}: onnxruntime {g64.flat[bad[0]]}, "
            f"nh {w64.flat[bad[0]]}\n{hw}"
        )


def check_equal(hw: ModuleOp, codes: list[np.ndarray]) -> onnx.ModelProto:
    """Export, check, run in onnxruntime and compare with the NumPy nh executor; a graph
    written with a fused kernel is compared again written with the other fused kernel exact
    here and with none (the graph a machine whose kernels saturate gets)."""
    model = export_model(hw)
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert "Relu" not in ops  # FuseReluClip: see the writer (elementwise.py)
    assert "DequantizeLinear" not in ops  # onnxruntime's QDQ rewrites: see graph.py
    assert {o.domain for o in model.opset_import} == {""}
    assert {n.domain for n in model.graph.node} <= {""}
    _compare(hw, model, codes)
    used = next((p.value for p in model.metadata_props if p.key == KERNELS_KEY), None)
    if used is not None:
        others = [k for k in FUSED_KERNELS if k != used and fused_kernel_is_exact(k)]
        for other in (*others, None):
            again = export_model(hw, fused=other)
            assert any(n.op_type.startswith("QLinear") for n in again.graph.node) == bool(other)
            _compare(hw, again, codes)
    return model


NO_ROW_YET: dict[str, type] = {}
"""Generator kinds whose nh ops the integer writer has no row for yet (it refuses them by
name): left out of the drawn programs until their rows are written."""
NOT_WRITTEN = set(NO_ROW_YET.values())
"""Every nh op without an integer ONNX row."""
KINDS = tuple(k for k in ALL_KINDS if k not in NO_ROW_YET)


def test_every_nh_op_has_a_row_or_is_known() -> None:
    """An op added to nh gets its integer ONNX row, or a line above saying it has none yet
    (then the writer names it): the property tests then draw it as soon as it has one."""
    from nanoir.grammar.onnx.integer.ops import OPS

    missing = {op for op in nh.NH.operations if op not in OPS}
    assert missing == NOT_WRITTEN, {o.name for o in missing ^ NOT_WRITTEN}


def random_hw(
    data: st.DataObject, mode: RoundingMode | None, kinds: tuple[str, ...] = KINDS
) -> tuple[ModuleOp, np.ndarray] | None:
    """A random nh program of ``kinds`` (every op kind by default; lowered from a random nq
    program whose fake-quants all round ``mode``, and some of them unsigned) and a float input
    for it; None when lower-to-hw refuses the program (an unsigned operand it does not take)."""
    module, shape = random_nq_program(data.draw, kinds=kinds)
    for op in module.walk():
        if isinstance(op, FakeQuantOp):
            if mode is not None:
                op.properties["rounding"] = RoundingModeAttr(mode)
            # (a recurrent cell reads signed grids only: lower-to-hw refuses unsigned ones)
            read_by_cell = any(isinstance(u.operation, nf.RecurrentOp) for u in op.result.uses)
            if op.bits.value.data > 1 and not read_by_cell and data.draw(st.integers(0, 3)) == 0:
                op.set_signed(False)
    try:
        module.verify()
        hw = lower_to_hw(module)
    except (LowerToHwError, VerifyException):  # an unsigned operand nq or nh does not take
        return None
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    batch = data.draw(st.sampled_from((1, 2)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    return hw, x


VALID_FLOOR = 0.6
"""The share of drawn programs that must be compared (not refused by lower-to-hw for an
unsigned operand it does not take). The share drawn depends on the example count: at least
80% at 50 and 125 examples (the default profile, and 2.5x), 67% (50 of 75) at 75 (the
thorough profile, 1.5x)."""


@pytest.mark.parametrize("mode", list(RoundingMode))
def test_random_programs_equal_the_nh_executor(mode: RoundingMode) -> None:
    """Random nh programs of every op kind (1/2/4/8-bit, signed and unsigned, per-tensor and
    per-channel exponents) at each rounding mode, 50 per mode under the default profile:
    onnxruntime's codes are the NumPy executor's (also written without the uint8 x int8
    kernels), and the file reads back as the same program text. At least 60% of the drawn
    programs are compared (lower-to-hw may refuse a drawn unsigned operand): a generator that
    drifts into refusals fails here instead of passing on few examples.

    Mutants seen to fail it (in a private copy): floor written as trunc (``Div`` alone), the
    u8 form's offset 127 instead of 128 (zero point still 128), requant's saturation bound one
    too high, a transposed conv's weight not flipped."""
    counts = {"drawn": 0, "valid": 0}

    @settings(max_examples=examples(50), deadline=None)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        drawn = random_hw(data, mode)
        counts["drawn"] += 1  # (a program the generator itself rejected is hypothesis's count)
        if drawn is None:
            return
        hw, x = drawn
        model = check_equal(hw, input_codes(hw, x))
        assert str(import_model(model)) == str(hw)
        counts["valid"] += 1

    run()
    assert counts["valid"] >= VALID_FLOOR * counts["drawn"], counts


def kind_programs_equal(kinds: tuple[str, ...], wanted: tuple[type, ...], floor: float) -> None:
    """Random programs drawn mostly of ``kinds`` (each rounding mode drawn too) that hold an op
    of ``wanted``: onnxruntime's codes are the NumPy executor's. Programs lower-to-hw refuses
    or without such an op are skipped, but counted: at least ``floor`` of those drawn must be
    compared, so a generator that drifts away from the ops fails instead of passing on few."""
    counts = {"drawn": 0, "valid": 0}

    @settings(
        max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        counts["drawn"] += 1
        drawn = random_hw(data, data.draw(st.sampled_from(list(RoundingMode))), kinds)
        if drawn is None or not any(isinstance(op, wanted) for op in drawn[0].walk()):
            return
        check_equal(drawn[0], input_codes(*drawn))
        counts["valid"] += 1

    run()
    assert counts["valid"] >= floor * counts["drawn"], counts


MOVING_KINDS = (
    "conv",
    "relu",
    "upsample_zero",
    "upsample_bilinear",
    "upsample_bicubic",
    "max_unpool",
    "maximum",
)
MOVING_OPS = (
    nh.UpsampleZeroOp,
    nh.UpsampleBilinearOp,
    nh.UpsampleBicubicOp,
    nh.MaxUnpoolOp,
    nh.MaxPoolIndicesOp,
)


def test_upsampling_and_unpooling_equal_the_nh_executor() -> None:
    """Random programs made mostly of the zero-insert, bilinear and bicubic upsamplings and
    the max pool indices / unpool pair (1-D and 2-D, x1 and x2 per dim, every offset): onnxruntime's
    codes are the NumPy executor's (the whole-program test draws them too seldom to catch a
    slip in one of their writers).

    Mutants seen to fail it (private copy): upsample_zero's zeros padded after the code
    instead of before it (offset ignored); upsample_bilinear's weights 1 and 2 instead of 1
    and 3; its edge rows padded with zeros (Pad ``constant``) instead of copied; ArgMax taking
    the last largest code of a window (``select_last_index=1``); max_pool_indices' flat index
    ``row * oh + col`` (the pooled height instead of the input plane's width);
    upsample_bicubic's weights read in reverse order."""
    kind_programs_equal(MOVING_KINDS, MOVING_OPS, floor=0.5)


def test_comparisons_and_selections_equal_the_nh_executor() -> None:
    """Random programs made mostly of selections by a comparison (``where``: eq, ne, lt, le,
    gt, ge of two values or of a value and a constant): onnxruntime's codes are the NumPy
    executor's. Mutant seen to fail it (private copy): Where's branches swapped (the
    predicates' own mutants need ties: ``test_every_predicate_equals_the_nh_executor``)."""
    kind_programs_equal(("where", "where", "conv", "add"), (nh.SelectOp,), floor=VALID_FLOOR)


def test_prelus_equal_the_nh_executor() -> None:
    """Random programs made mostly of PReLUs (constant slopes, per channel and per tensor,
    after convs and adds, 1- to 8-bit, every rounding): onnxruntime's codes are the NumPy
    executor's, in each of the writer's forms (``x * 2**shift + Min(x, 0) * (slope -
    2**shift)`` where its terms are exact, ``Max``/``Min`` otherwise, checked int64).
    Mutants seen to fail it: the excess slope ``slope + 2**shift``; the positive term left
    unscaled."""
    kind_programs_equal(("prelu", "prelu", "conv", "add"), (nh.PReluOp,), floor=VALID_FLOOR)


REDUCING_OPS = (nh.ReduceOp, nh.ArgReduceOp, nh.CumsumOp)


def test_reductions_equal_the_nh_executor() -> None:
    """Random programs made mostly of reductions (sum, max, min over one or two dims),
    argmax / argmin / any / all along a dim, and prefix sums: onnxruntime's codes are the
    NumPy executor's. Mutants seen to fail it (private copy): ArgMax taking the last index
    (``select_last_index=1``); ``all`` read as ``any``; CumSum ``exclusive=1``; ReduceMin
    written for max."""
    kind_programs_equal(
        ("reduce", "arg_reduce", "cumsum", "conv", "reduce"), REDUCING_OPS, floor=VALID_FLOOR
    )


def test_sums_over_the_dynamic_dim_are_checked_as_numpy_checks_them() -> None:
    """A sum and a prefix sum over the dynamic batch dim (their count unknown: i32 results):
    onnxruntime's codes are the NumPy executor's, and a sum past i32 is refused by both (the
    int64 sum checked against the result's type). Kills: the dynamic sum written in int32
    unchecked (wraps to -2**31)."""
    t_in, t_out = "tensor<?x4xi32, #nh.fixed<0, BC>>", "tensor<1x4xi32, #nh.fixed<0, BC>>"
    hw = nanoir.parse(f"""func.func @main(%x: {t_in}) -> ({t_out}, {t_in}) {{
  %s = nh.reduce "sum" %x {{dims = array<i64: 0>}} : {t_in} -> {t_out}
  %c = nh.cumsum %x {{dims = array<i64: 0>}} : {t_in} -> {t_in}
  func.return %s, %c : {t_out}, {t_in}
}}""")
    check_equal(hw, [np.array([[1, -2, 3, 7], [4, 5, -6, 9], [0, 0, 1, -1]], np.int32)])
    model = export_model(hw)
    over = np.array([[1, 2, 3, 2**30], [4, 5, 6, 2**30]], np.int32)
    for run_it in (
        lambda: nanoir.run(hw, over, raw=True),
        lambda: run_model(make_session(model), [over]),
    ):
        with pytest.raises(ExecutionError, match="nh.reduce"):
            run_it()


def test_l2_normalization_equals_the_nh_executor() -> None:
    """Random programs made mostly of L2 normalisations (``F.normalize``: the integer
    algorithm of ``runtime/numerics/l2norm.py``, 1/2/4/8-bit, every rounding mode):
    onnxruntime's codes are the NumPy executor's. Mutant seen to fail it (private copy):
    trunc's nudge not moved by the sign. Two survive it: the shift ``h`` from
    ``(62 - bl) // 2`` (the rows drawn are short: ``h`` sits at its cap either way) and the
    quotient floored instead of rounded half up (the guard bits below the output step hide
    its last bit)."""
    kind_programs_equal(
        ("normalize", "conv", "normalize", "relu"), (nh.NormalizeOp,), floor=VALID_FLOOR
    )


class _Predicates(torch.nn.Module):
    """Every predicate of two computed values (orderings on integer-valued inputs, so codes
    tie), each selecting between them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        r = torch.relu(self.fc(x))
        tests = (x == y, x != y, x < y, x <= y, x > y, x >= y)
        logical = (
            torch.logical_and(x > 0, r),
            torch.logical_or(x < -1, r),
            torch.logical_xor(y, r),
        )
        return tuple(torch.where(t, x, r) for t in (*tests, *logical))


@pytest.mark.parametrize("mode", ["trunc", "half_even"])
def test_every_predicate_equals_the_nh_executor(mode: str) -> None:
    """eq, ne, lt, le, gt, ge of codes at one exponent (inputs whose codes tie), and and / or
    / xor reading each code as non-zero (the operands cast to bool, never from the offset
    uint8 form), in a quantized and lowered program: onnxruntime's codes are the NumPy
    executor's. Mutants seen to fail it (private copy): ``ne`` without its ``Not``; ``lt``
    written as ``LessOrEqual``; a logical operand cast to bool from its uint8 form."""
    rng = np.random.default_rng(0)
    x, y = (rng.integers(-2, 3, (16, 6)).astype(np.float32) for _ in range(2))
    torch.manual_seed(0)
    module = nanoir.from_torch(_Predicates().eval(), (torch.from_numpy(x), torch.from_numpy(y)))
    nanoir.quantize(module, [(x, y)], rounding=mode, progress=False)
    hw = lower_to_hw(module)
    predicates = {op.predicate.data for op in hw.walk() if isinstance(op, nh.CompareOp)}
    assert predicates == {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor"}
    codes = quantize_inputs(main_function(hw), [x, y])
    check_equal(hw, codes)


def _embedding_hw(vocab: int, dim: int, ids: int, bits: int, seed: int) -> ModuleOp:
    """An nf.embedding program of a random table, quantized (``bits``-bit table) and lowered."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((vocab, dim)) * 3
    i, w, y = f"tensor<?x{ids}xf32>", f"tensor<{vocab}x{dim}xf32>", f"tensor<?x{ids}x{dim}xf32>"
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in table)
    module = nanoir.parse(f"""func.func @main(%ids: {i}) -> {y} {{
  %w = nf.constant "emb" dense<[{rows}]> : {w}
  %y = nf.embedding %ids, %w : ({i}, {w}) -> {y}
  func.return %y : {y}
}}""")
    nanoir.quantize(module, [rng.integers(0, vocab, (3, ids))], weight_bits=bits)
    return lower_to_hw(module)


@pytest.mark.parametrize(("vocab", "dim", "ids", "bits"), [(7, 3, 5, 8), (12, 2, 1, 2)])
def test_embedding_gathers_the_tables_codes(vocab: int, dim: int, ids: int, bits: int) -> None:
    """``nh.embedding`` as integer ONNX: onnxruntime's codes are the table constant's codes
    indexed by the ids in NumPy (and the executor's), for every id of the table at least once.

    Mutants seen to fail it (private copy): Gather on axis 1; the ids read one off
    (``Add`` of 1 before the Gather)."""
    hw = _embedding_hw(vocab, dim, ids, bits, seed=vocab * 10 + bits)
    (table,) = [op for op in hw.walk() if isinstance(op, nh.ConstantOp)]
    codes = table.codes().astype(np.int64)
    batch = -(-vocab // ids) + 1
    x = np.random.default_rng(1).permutation(np.resize(np.arange(vocab), batch * ids))
    x = x.reshape(batch, ids)
    model = check_equal(hw, input_codes(hw, x))
    (got,) = run_model(make_session(model), input_codes(hw, x))
    assert np.array_equal(got.astype(np.int64), codes[x])


# --------------------------------------------------------------------------------------------
# Rounding division: every mode, odd and even divisors, int32 and int64
# --------------------------------------------------------------------------------------------


@settings(max_examples=examples(25), deadline=None)
@given(
    mode=st.sampled_from(list(RoundingMode)),
    divisors=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    shift=st.sampled_from([None, 1, 5, 30]),
    wide=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_div_round_is_the_runtimes(
    mode: RoundingMode, divisors: list[int], shift: int | None, wide: bool, seed: int
) -> None:
    """``arith.div_round`` in onnxruntime equals ``quant.div_round`` (the runtime's definition)
    on ties, negatives and values near the dtype's limits, per channel.

    Mutants seen to fail it (private copy): half_even's tie constant 0 for odd divisors (an odd
    divisor then "ties" on remainder 0), floor written as trunc, half_up adding ``d // 2 + 1``."""
    from nanoir.grammar.onnx.integer import arith
    from nanoir.grammar.onnx.integer.graph import Graph
    from nanoir.runtime.numerics.quant import div_round

    # Odd and even divisors side by side (per channel), as an avg pool's window counts are.
    d = np.asarray([2**shift] if shift is not None else [*divisors, 2, 3], dtype=np.int64)
    d = d.reshape(1, -1)
    dtype = np.int64 if wide else np.int32
    limit = 2**62 if wide else 2**31 - 1 - int(d.max())
    rng = np.random.default_rng(seed)
    x = rng.integers(-limit, limit, size=(64, d.shape[1]), dtype=np.int64)
    x[:16] = rng.integers(-3 * int(d.max()), 3 * int(d.max()), size=(16, d.shape[1]))
    x[16:20] = (rng.integers(-9, 9, size=(4, d.shape[1])) * 2 + 1) * d // 2  # ties
    x[20], x[21] = -limit, limit
    x = np.clip(x, -limit, limit)
    g = Graph(onnx)
    y = arith.div_round(g, "x", d, mode, dtype, "y")
    elem = 7 if wide else 6
    graph = onnx.helper.make_graph(
        g.nodes,
        "g",
        [onnx.helper.make_tensor_value_info("x", elem, list(x.shape))],
        [onnx.helper.make_tensor_value_info(y, elem, list(x.shape))],
        g.initializers,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    (got,) = make_session(model).run(None, {"x": x.astype(dtype)})
    assert np.array_equal(got.astype(np.int64), div_round(x, d, mode))


# --------------------------------------------------------------------------------------------
# Networks: the test models, softmax and the norms
# --------------------------------------------------------------------------------------------

MODEL_CONFIGS = [
    ("LeNet5", {"rounding": "trunc"}),
    ("KWSNet", {"rounding": "half_even", "weight_bits": 4, "rules": ("weight@fc=1",)}),
    ("SampleNet", {"rounding": "floor", "unsigned": "auto"}),
    ("MobileNetV2Stack", {"rounding": "half_up", "unsigned": "auto"}),
    ("ResNet18", {"rounding": "trunc", "weight_bits": 4, "rules": ("weight@fc=1",)}),
]


@pytest.mark.parametrize(("name", "options"), MODEL_CONFIGS, ids=[m for m, _ in MODEL_CONFIGS])
def test_test_models_equal_the_nh_executor(name: str, options: dict, tmp_path: Path) -> None:
    """Every test model (one configuration each, together all four rounding modes, 8 and 4/1
    bits, unsigned codes): exports, passes the checker, equals the NumPy executor, and
    ``nanoir.save``/``nanoir.load`` give the same program text."""
    pytest.importorskip("torch")
    from nanoir.testing import import_folded

    module, shape = import_folded(name, batch=1)
    rng = np.random.default_rng(0)
    nanoir.quantize(module, [rng.standard_normal((2, *shape))], bias_correction=False, **options)
    hw = lower_to_hw(module)
    model = check_equal(hw, input_codes(hw, rng.standard_normal((2, *shape)) * 2))
    path = tmp_path / "hw.onnx"
    path.write_bytes(model.SerializeToString())
    assert nanoir.load(path).is_structurally_equivalent(hw)


@pytest.mark.parametrize("mode", ["trunc", "half_even"])
@pytest.mark.parametrize("unsigned", ["never", "auto"])
def test_max_pool_of_byte_codes_pools_floats(mode: str, unsigned: str) -> None:
    """A ResNet stem (conv -> ReLU -> 3x3/2 max pool with padding -> conv): the pool's input
    is held as uint8 bytes for the next ``ConvInteger``; it is pooled in float32 (onnxruntime's
    uint8 ``MaxPool`` is a scalar loop, 9x slower) and equals the NumPy executor, odd sizes and
    the padded border included. (Mutant killed: bytes shifted down by one before the pool.)"""
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.Conv2d(8, 5, 3, padding=1),
    ).eval()
    x = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
    module = nanoir.from_torch(net, (torch.from_numpy(x),))
    nanoir.quantize(module, [x], rounding=mode, unsigned=unsigned, bias_correction=False)
    hw = lower_to_hw(module)
    model = check_equal(hw, input_codes(hw, rng.standard_normal(x.shape) * 2))
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types |= {v.name: v.type.tensor_type.elem_type for v in inferred.graph.input}
    pools = [n for n in model.graph.node if n.op_type == "MaxPool"]
    assert pools
    assert all(types[n.input[0]] == onnx.TensorProto.FLOAT for n in pools)


def _normed_model(channels: int):  # noqa: ANN202 (a torch module, torch imported lazily)
    """GroupNorm, LayerNorm over channels (ConvNeXt's permuted form) and over [C, H, W],
    softmax and log-softmax: each result an output of its own."""
    import torch
    from torch import nn

    class Normed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, channels, 1)
            self.gn = nn.GroupNorm(2, channels)
            self.ln_c = nn.LayerNorm(channels)
            self.ln = nn.LayerNorm([channels, 3, 3])
            with torch.no_grad():
                for norm in (self.gn, self.ln_c):
                    norm.weight.uniform_(-2, 2)
                    norm.bias.uniform_(-1, 1)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            g = self.gn(self.conv(x))
            c = self.ln_c(g.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            y = self.ln(c).flatten(1)
            return g, c, torch.softmax(y, 1), torch.log_softmax(y, 1)

    return Normed().eval()


@pytest.mark.parametrize(
    ("bits", "mode"), [(4, "trunc"), (8, "half_even"), (16, "floor"), (8, "half_up")]
)
def test_norms_and_softmax_equal_the_nh_executor(bits: int, mode: str) -> None:
    """nh.group_norm, nh.layer_norm, nh.softmax and nh.log_softmax (their integer algorithms
    written as int64 ONNX), and 16-bit activations into a conv (its input split into bytes).

    Mutants seen to fail it (private copy): trunc's nudge dropped, the 16-bit split's high
    byte scaled by 255."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(bits)
    model = _normed_model(4)
    x = torch.randn(2, 3, 3, 3)
    module = nanoir.from_torch(model, (x,))
    rng = np.random.default_rng(bits)
    nanoir.quantize(module, [rng.standard_normal((4, 3, 3, 3))], act_bits=bits, rounding=mode)
    hw = lower_to_hw(module)
    names = {op.name for op in hw.walk()}
    assert {"nh.group_norm", "nh.layer_norm", "nh.softmax", "nh.log_softmax"} <= names
    codes = input_codes(hw, rng.standard_normal((3, 3, 3, 3)) * 2)
    check_equal(hw, codes)
    # A coarse guard (2 fraction bits below the output step) makes the rounding of the
    # accumulator, and trunc's and floor's nudge, matter on most codes: still equal.
    for op in hw.walk():
        if isinstance(op, nh.LayerNormOp | nh.GroupNormOp):
            op.properties["guard"] = IntegerAttr(2, i64)
            op.properties["nudge"] = IntegerAttr(3, i64)
    check_equal(hw, codes)


# --------------------------------------------------------------------------------------------
# Files: the flavour, reading back, refusals
# --------------------------------------------------------------------------------------------

SMALL = """\
func.func @main(%x: tensor<?x2x4x4xf32>) -> tensor<?x3x4x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x4x4xf32>
  %w = nf.constant "w" dense<[[[[0.5]], [[-1.0]]], [[[0.25]], [[0.75]]], [[[-0.5]], [[1.0]]]]>
      : tensor<3x2x1x1xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<3x2x1x1xf32>
  %y = nf.conv %xq, %wq : (tensor<?x2x4x4xf32>, tensor<3x2x1x1xf32>) -> tensor<?x3x4x4xf32>
  %r = nf.relu %y : tensor<?x3x4x4xf32>
  %yq = nq.fake_quant %r {bits = 8 : i64, exp = dense<[[[3]], [[4]], [[5]]]> : tensor<3x1x1xi8>,
      rounding = #nq.rounding<half_up>, signed = false} : tensor<?x3x4x4xf32>
  func.return %yq : tensor<?x3x4x4xf32>
}
"""


def small_hw() -> ModuleOp:
    return lower_to_hw(nanoir.parse(SMALL))


def test_save_writes_integer_onnx_for_an_nh_program_and_load_reads_it_back(
    tmp_path: Path,
) -> None:
    """The default flavour of an nh program is integer; the file's io record says what the
    codes mean (bits, signedness, per-channel exponents); load gives the same text."""
    hw = small_hw()
    path = tmp_path / "m.onnx"
    nanoir.save(hw, path)
    model = onnx.load(path)
    props = {p.key: p.value for p in model.metadata_props}
    assert props[PROGRAM_KEY] == str(hw)
    io = json.loads(props[IO_KEY])
    assert io["inputs"][0]["quantize"] == {
        "bits": 8,
        "exp": [4],
        "exp_shape": [1],
        "rounding": "trunc",
    }
    assert (io["inputs"][0]["type"], io["outputs"][0]["type"]) == ("i8", "ui8")
    assert io["outputs"][0]["exp"] == [3, 4, 5] and io["outputs"][0]["layout"] == "BCMD"
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT8
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert str(nanoir.load(path)) == str(hw)
    x = np.random.default_rng(0).normal(size=(2, 2, 4, 4)) * 4
    (y,) = run_model(model, input_codes(hw, x))
    # The oracle, NumPy written here: relu(conv) of the codes, half_up onto 2**-[3, 4, 5].
    xq = np.clip(np.trunc(x * 16), -128, 127)
    w = np.array([[0.5, -1.0], [0.25, 0.75], [-0.5, 1.0]])
    acc = np.maximum(np.einsum("nchw,oc->nohw", xq / 16, w), 0)
    want = np.clip(np.floor(acc * 2.0 ** np.array([3, 4, 5]).reshape(3, 1, 1) + 0.5), 0, 255)
    assert np.array_equal(y, want)


def test_cli_emits_integer_onnx_and_reads_it_back(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """``nanoir-opt --emit=onnx-integer`` writes the file; ``nanoir-opt`` reads it back as the
    nh program; ``--emit=onnx`` (QDQ) on an nh program is refused naming the flavour."""
    from nanoir.cli.opt import main

    src = tmp_path / "hw.mlir"
    src.write_text(str(small_hw()))
    out = tmp_path / "hw.onnx"
    assert main([str(src), "--emit=onnx-integer", "-o", str(out)]) == 0
    assert main([str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(small_hw()).strip()
    assert main([str(src), "--emit=onnx", "-o", str(tmp_path / "q.onnx")]) == 1
    assert "the qdq flavour writes nf/nq programs" in capsys.readouterr().err
    assert not (tmp_path / "q.onnx").exists()


@pytest.mark.parametrize(
    ("program", "flavor", "message"),
    [
        ("nh", "qdq", r"the qdq flavour writes nf/nq programs.*onnx_flavor='integer'"),
        ("nh", "nanoengine", r"the nanoengine flavour writes nf/nq programs"),
        ("nq", "integer", r"integer flavour writes nh programs.*lower-to-hw first"),
        ("nh", "tflite", r"unknown flavour 'tflite' \(known: qdq, nanoengine, integer\)"),
    ],
)
def test_wrong_flavours_are_refused(
    program: str, flavor: str, message: str, tmp_path: Path
) -> None:
    module = small_hw() if program == "nh" else nanoir.parse(SMALL)
    with pytest.raises(OnnxExportError, match=message):
        nanoir.save(module, tmp_path / "m.onnx", onnx_flavor=flavor)
    assert not (tmp_path / "m.onnx").exists()


def test_streamed_and_unknown_ops_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream-planned program is refused with the reason; an nh op without a row is named.

    Mutants seen to fail it (private copy): the stream-plan check removed (the streamed
    program exports silently)."""
    from nanoir.dialects import nh
    from nanoir.grammar.onnx.integer.ops import OPS
    from nanoir.lowering.stream_plan import StreamPlanPass

    from nanoir.context import make_context

    streamed = small_hw()
    StreamPlanPass().apply(make_context(), streamed)
    with pytest.raises(IntegerOnnxError, match=r"streamed program \(stream\..*before stream-plan"):
        export_model(streamed)
    monkeypatch.delitem(OPS, nh.ReluOp)
    with pytest.raises(IntegerOnnxError, match=r"nh\.relu has no integer ONNX form"):
        export_model(small_hw())


def _edited(model: onnx.ModelProto, how: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if how == "constant":  # a weight changed by hand
        init = m.graph.initializer[0]
        a = onnx.numpy_helper.to_array(init).copy()
        a.flat[0] += 1
        init.CopyFrom(onnx.numpy_helper.from_array(a, init.name))
    elif how == "node":  # a node dropped (an optimizer's fusion, say)
        del m.graph.node[len(m.graph.node) // 2]
    elif how == "program":  # the program text edited: another exponent
        for p in m.metadata_props:
            if p.key == PROGRAM_KEY:
                p.value = p.value.replace("#nh.fixed<[3, 4, 5]", "#nh.fixed<[3, 4, 6]", 1)
    elif how == "garbage":
        for p in m.metadata_props:
            if p.key == PROGRAM_KEY:
                p.value = "func.func @main( {"
    return m


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("constant", "its graph is not the one its nh program"),
        ("node", "its graph is not the one its nh program"),
        ("program", "(its graph is not the one|does not parse)"),
        ("garbage", "does not parse"),
    ],
)
def test_edited_files_are_refused(how: str, message: str, tmp_path: Path) -> None:
    """A file changed after nanoir wrote it is refused with one nanoir.Error, whether the graph
    or the embedded program was changed.

    Mutant seen to fail it (private copy): the reader not comparing the graphs."""
    model = export_model(small_hw())
    path = tmp_path / "m.onnx"
    path.write_bytes(_edited(model, how).SerializeToString())
    with pytest.raises(IntegerOnnxImportError, match=message) as info:
        nanoir.load(path)
    assert isinstance(info.value, nanoir.Error)


def test_an_onnxruntime_optimized_file_is_refused(tmp_path: Path) -> None:
    """onnxruntime's own optimized model (fused, constant-folded) is another graph: refused."""
    import onnxruntime

    model = export_model(small_hw())
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    options.log_severity_level = 3
    onnxruntime.InferenceSession(model.SerializeToString(), options)
    with pytest.raises(IntegerOnnxImportError, match="changed after nanoir wrote it"):
        nanoir.load(tmp_path / "opt.onnx")


def _run_graph(g, inputs: dict[str, np.ndarray], output: str, elem: int) -> np.ndarray:  # noqa: ANN001
    graph = onnx.helper.make_graph(
        g.nodes,
        "g",
        [onnx.helper.make_tensor_value_info(k, 7, list(v.shape)) for k, v in inputs.items()],
        [onnx.helper.make_tensor_value_info(output, elem, None)],
        g.initializers,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    (y,) = make_session(model).run(None, inputs)
    return y


def test_isqrt_and_bit_length_are_the_runtimes() -> None:
    """The norms' integer square root and float64 bit length in onnxruntime equal the
    runtime's (``norm.isqrt``, ``norm._bit_length``) next to perfect squares and powers of two,
    where a float64 root rounds up and a float64 value rounds to the next power.

    Mutants seen to fail it (private copy): isqrt without its downward correction, the bit
    length counted from 2**1."""
    import math

    from nanoir.grammar.onnx.integer.algorithms import bit_length_f64, isqrt
    from nanoir.grammar.onnx.integer.graph import Graph
    from nanoir.runtime.numerics import norm

    roots = np.array([0, 1, 2, 3, 2**20 + 7, 2**26 + 1, 2**31 - 1, 2**31], np.int64)
    v = np.concatenate([roots * roots - 1, roots * roots, roots * roots + 1])
    v = v[(v >= 0) & (v <= 2**62)]
    g = Graph(onnx)
    root = isqrt(g, "v", "root")
    assert _run_graph(g, {"v": v}, root, 7).tolist() == [math.isqrt(int(a)) for a in v]
    k = np.arange(62, dtype=np.int64)
    w = np.concatenate([2**k - 1, 2**k, 2**k + 1, (2**k)[30:] - 2**8])
    w = w[w >= 1]
    g = Graph(onnx)
    bits = bit_length_f64(g, "w", "bits")
    assert np.array_equal(_run_graph(g, {"w": w}, bits, 7), norm._bit_length(w))
