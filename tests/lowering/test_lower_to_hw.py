"""lower-to-hw keeps every number: run(nq, float64) == run(nh) * 2**-exp, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects.nf import NF
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.interpreter import run
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import (
    ALL_KINDS,
    BASE_KINDS,
    INDEX_KINDS,
    examples,
    program_inputs,
    random_nq_program,
)


def check_exact(nq_module: ModuleOp, inputs: list[np.ndarray]) -> ModuleOp:
    want = run(nq_module, *inputs, dtype=np.float64)
    hw = lower_to_hw(nq_module.clone())
    hw.verify()
    # Float inputs are quantized as the argument attributes say; outputs come back as
    # code * 2**-exp.
    got = run(hw, *inputs)
    codes = run(hw, *inputs, raw=True)
    assert all(np.issubdtype(np.asarray(c).dtype, np.integer) for c in codes)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        mismatch = np.flatnonzero(g != w)
        assert mismatch.size == 0, (
            f"{mismatch.size} mismatches; first at {mismatch[0]}: nh {g.flat[mismatch[0]]} "
            f"vs nq {w.flat[mismatch[0]]}"
        )
    return hw


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), batch=st.sampled_from((1, 3)))
def test_random_programs_lower_exactly(data: st.DataObject, batch: int) -> None:
    module, shape = random_nq_program(data.draw)
    module.verify()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    check_exact(module, [x])


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), batch=st.sampled_from((1, 3)))
def test_random_programs_of_every_op_lower_exactly(data: st.DataObject, batch: int) -> None:
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    module.verify()
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    check_exact(module, [x])


NEW_KINDS = {
    "prelu": "nf.prelu",
    "batch_norm": "nf.batch_norm",
    "transpose": "nf.transpose",
    "pad": "nf.pad",
    "split": "nf.split",
    "upsample": "nf.upsample_nearest",
    "sub": "nf.sub",
    "div": "nf.div",
    "matmul": "nf.matmul",
    "adaptive_avgpool": "nf.adaptive_avg_pool",
    "hardsigmoid": "nf.hardsigmoid",
    "leaky_relu": "nf.leaky_relu",
    "depth_to_space": "nf.depth_to_space",
    "space_to_depth": "nf.space_to_depth",
    "channel_shuffle": "nf.reshape",
    "linear": "nf.linear",
    "conv_transpose": "nf.conv_transpose",
    "mul_branches": "nf.mul",
    "add_constant": "nf.add",
    "matmul_branches": "nf.matmul",
    "silu": "nf.silu",
    "gelu": "nf.gelu",
    "softmax": "nf.softmax",
    "layer_norm": "nf.layer_norm",
    "group_norm": "nf.group_norm",
    "expand": "nf.expand",
    "gather": "nf.gather",
    "maximum": "nf.maximum",
    "upsample_zero": "nf.upsample_zero",
    "upsample_bilinear": "nf.upsample_bilinear",
    "max_unpool": "nf.max_unpool",
    "unary": "nf.unary",
    "where": "nf.where",
    "reduce": "nf.reduce",
    "arg_reduce": "nf.arg_reduce",
    "cumsum": "nf.cumsum",
    "normalize": "nf.normalize",
    "upsample_bicubic": "nf.upsample_bicubic",
    "recurrent": "nf.recurrent",
    "embedding": "nf.embedding",
}


def test_every_kind_is_generated() -> None:
    assert set(ALL_KINDS) | set(INDEX_KINDS) == set(BASE_KINDS) | set(NEW_KINDS)


def test_every_nf_op_is_generated() -> None:
    """Every op of the nf dialect but ``nf.custom`` (no semantics) is in some program of
    ``ALL_KINDS``: an op added to the dialect fails here until the generator draws it."""
    seen: set[str] = set()

    @settings(max_examples=20, database=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def collect(kind: str, data: st.DataObject) -> None:
        module, _ = random_nq_program(data.draw, max_ops=3, kinds=(kind,))
        seen.update(op.name for op in module.walk())

    for kind in sorted(set(ALL_KINDS) | set(INDEX_KINDS)):
        collect(kind)
    assert {op.name for op in NF.operations} - {"nf.custom"} - NOT_GENERATED - seen == set()
    assert NOT_GENERATED <= {op.name for op in NF.operations}  # the list is kept short


NOT_GENERATED: set[str] = set()
"""Ops the generator does not draw yet (an op added to nf gets a generator kind, or is named
here with the reason until it does)."""


@pytest.mark.parametrize("kind", sorted(NEW_KINDS))
@settings(
    max_examples=examples(15),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_each_new_op_lowers_exactly(kind: str, data: st.DataObject) -> None:
    """Programs of one new op kind (plus the fake-quants it needs): the op is there and the
    nh program computes the nq program's numbers."""
    module, shape = random_nq_program(data.draw, max_ops=3, kinds=(kind,))
    assume(any(op.name == NEW_KINDS[kind] for op in module.walk()))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    scale = data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    hw = check_exact(module, program_inputs(module, rng, 2, scale))
    assert not any(op.name.startswith(("nf.", "nq.")) for op in hw.walk())


LINEAR_OF_RANK_3 = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x2x2xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<EXP_X> : tensor<SHAPE_Xxi8>} : tensor<?x2x3xf32>
  %w = nf.constant "w" dense<[[0.5, 1.0, -0.5], [0.25, 0.5, 1.0]]> : tensor<2x3xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<2x3xf32>
  %y = nf.linear %xq, %wq : (tensor<?x2x3xf32>, tensor<2x3xf32>) -> tensor<?x2x2xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<EXP_Y> : tensor<SHAPE_Yxi8>} : tensor<?x2x2xf32>
  func.return %yq : tensor<?x2x2xf32>
}
"""
"""``nn.Linear`` over the last dim of a rank-3 value, as ``quantize(act_per_channel=True)``
makes it (per-channel exponents along dim 1 before and after); the random-program
generator's ``linear`` kind draws such programs at random."""


def test_linear_of_a_per_channel_value() -> None:
    text = LINEAR_OF_RANK_3.replace("EXP_X", "[[2], [3]]").replace("SHAPE_X", "2x1")
    text = text.replace("EXP_Y", "3").replace("SHAPE_Y", "1")
    check_exact(nanoir.parse(text), [np.random.default_rng(0).standard_normal((2, 2, 3))])


def test_per_channel_fake_quant_of_a_linear_of_rank_3() -> None:
    text = LINEAR_OF_RANK_3.replace("EXP_X", "2").replace("SHAPE_X", "1")
    text = text.replace("EXP_Y", "[[3], [4]]").replace("SHAPE_Y", "2x1")
    check_exact(nanoir.parse(text), [np.random.default_rng(0).standard_normal((2, 2, 3))])


def test_linear_of_equal_per_channel_exponents() -> None:
    text = LINEAR_OF_RANK_3.replace("EXP_X", "[[2], [2]]").replace("SHAPE_X", "2x1")
    text = text.replace("EXP_Y", "3").replace("SHAPE_Y", "1")
    check_exact(nanoir.parse(text), [np.random.default_rng(0).standard_normal((2, 2, 3))])


def test_per_channel_fake_quant_of_a_linear_with_per_feature_exponents() -> None:
    """Per-channel weight exponents that differ (as quantize's weight_per_channel gives) and a
    per-channel fake-quant of the rank-3 result (act_per_channel)."""
    text = LINEAR_OF_RANK_3.replace("EXP_X", "2").replace("SHAPE_X", "1")
    text = text.replace("EXP_Y", "[[3], [4]]").replace("SHAPE_Y", "2x1")
    text = text.replace(
        "exp = dense<4> : tensor<1xi8>} : tensor<2x3xf32>",
        "exp = dense<[[4], [5]]> : tensor<2x1xi8>} : tensor<2x3xf32>",
    )
    check_exact(nanoir.parse(text), [np.random.default_rng(0).standard_normal((2, 2, 3))])


def test_batch_norm_of_a_linear_of_rank_3() -> None:
    text = LINEAR_OF_RANK_3.replace("EXP_X", "2").replace("SHAPE_X", "1")
    text = text.replace("EXP_Y", "3").replace("SHAPE_Y", "1")
    bn = """\
  %g = nf.constant "g" dense<[1.0, 2.0]> : tensor<2xf32>
  %b = nf.constant "b" dense<[0.5, -0.5]> : tensor<2xf32>
  %m = nf.constant "m" dense<[0.25, 0.0]> : tensor<2xf32>
  %v = nf.constant "v" dense<[1.0, 0.25]> : tensor<2xf32>
  %n = nf.batch_norm %yq, %g, %b, %m, %v : (tensor<?x2x2xf32>, tensor<2xf32>, tensor<2xf32>, \
tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x2xf32>
  %nq = nq.fake_quant %n {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x2xf32>
  func.return %nq : tensor<?x2x2xf32>
"""
    text = text.replace("  func.return %yq : tensor<?x2x2xf32>\n", bn)
    check_exact(nanoir.parse(text), [np.random.default_rng(0).standard_normal((2, 2, 3))])


def test_constructed_overflow_is_caught() -> None:
    # 8-bit inputs (|code| <= 128) times 300 weights of code 127 overflow i32 only when the
    # sum is long enough: 128 * 127 * 300 * 512 > 2**31.
    text = """\
func.func @main(%x: tensor<?x512x300xf32>) -> tensor<?x4x300xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x512x300xf32>
  %w = nf.constant "w" dense<127.0> : tensor<4x512x300xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<0> : tensor<1xi8>} : tensor<4x512x300xf32>
  %c = nf.conv %xq, %wq {pads = array<i64: 150, 149>} : (tensor<?x512x300xf32>, tensor<4x512x300xf32>) -> tensor<?x4x300xf32>
  func.return %c : tensor<?x4x300xf32>
}
"""
    module = nanoir.parse(text)
    with pytest.raises(
        LowerToHwError,
        match=r"'nf.conv' \(%c\) may overflow its i32 "
        r"accumulator: worst case \|acc\| = 2496921600",
    ):
        lower_to_hw(module)


def test_unsupported_ops_are_named() -> None:
    text = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.sigmoid %xq : tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
"""
    with pytest.raises(
        LowerToHwError,
        match=r"'nf.sigmoid' \(%s\) has no integer lowering "
        r"\(it is float-only",
    ):
        lower_to_hw(nanoir.parse(text))
    unquantized = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %r = nf.relu %x : tensor<?x4xf32>
  func.return %r : tensor<?x4xf32>
}
"""
    with pytest.raises(
        LowerToHwError,
        match=r"'nf.relu' \(%r\) reads a float value from "
        r"a function argument that is not quantized",
    ):
        lower_to_hw(nanoir.parse(unquantized))


MODELS = ["LeNet5", "KWSNet", "SampleNet", "MobileNetV2Stack", "ResNet18"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("config", ["8-bit", "4/1-bit"])
def test_test_models_lower_exactly(name: str, config: str) -> None:
    pytest.importorskip("torch")
    from nanoir.lowering.quantize import quantize

    from nanoir.testing import import_folded

    module, shape = import_folded(name)
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((4, *shape)) for _ in range(2)]
    options = (
        {}
        if config == "8-bit"
        else {"weight_bits": 4, "rules": ("weight@(fc|classifier|linear)=1",)}
    )
    quantize(module, calibration, **options)
    x = rng.standard_normal((3, *shape))
    check_exact(module, [x])


def test_table_covers_every_code_of_the_input_type(tmp_path) -> None:  # noqa: ANN001
    """A sum of two 4-bit values needs 5 bits but is declared i8: its table has 256 entries,
    and the program runs the same from the command line."""
    import subprocess
    import sys
    from pathlib import Path

    text = """\
func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x4xf32>
  %s = nf.add %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %t = nf.sigmoid %s : tensor<?x4xf32>
  %tq = nq.fake_quant %t {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x4xf32>
  func.return %tq : tensor<?x4xf32>
}
"""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((5, 4)) * 2, rng.standard_normal((5, 4)) * 2
    hw = check_exact(nanoir.parse(text), [x, y])
    tables = [op for op in hw.walk() if op.name == "nh.lut"]
    assert len(tables) == 1 and len(tables[0].table.get_values()) == 256
    src, hw_file = tmp_path / "p.mlir", tmp_path / "hw.mlir"
    src.write_text(text)
    hw_file.write_text(str(hw))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    exe = str(Path(sys.executable).parent / "nanoir-run")
    outs = []
    for program in (src, hw_file):
        out = tmp_path / f"{program.stem}.npy"
        proc = subprocess.run(
            [
                exe,
                str(program),
                "-i",
                str(tmp_path / "x.npy"),
                "-i",
                str(tmp_path / "y.npy"),
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(np.load(out))
    assert np.array_equal(outs[0], outs[1])


def test_concat_of_per_tensor_values_along_channels() -> None:
    text = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x4x3xf32> {
  %a = nq.fake_quant %x {bits = 8 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x2x3xf32>
  %b = nq.fake_quant %a {bits = 4 : i64, exp = dense<[[2], [2]]> : tensor<2x1xi8>} : tensor<?x2x3xf32>
  %c = nf.concat %a, %b {axis = 1 : i64} : (tensor<?x2x3xf32>, tensor<?x2x3xf32>) -> tensor<?x4x3xf32>
  func.return %c : tensor<?x4x3xf32>
}
"""
    x = np.random.default_rng(1).standard_normal((3, 2, 3)) * 4
    check_exact(nanoir.parse(text), [x])


def test_equal_per_channel_exponents_then_per_tensor_feed_a_table() -> None:
    """A per-tensor fake-quant after per-channel exponents that are all equal is an identity,
    but its result is per-tensor: a lookup table may read it."""
    text = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %a = nq.fake_quant %x {bits = 8 : i64, exp = dense<[[3], [3]]> : tensor<2x1xi8>} : tensor<?x2x3xf32>
  %b = nq.fake_quant %a {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x2x3xf32>
  %s = nf.sigmoid %b : tensor<?x2x3xf32>
  %t = nq.fake_quant %s {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x2x3xf32>
  func.return %t : tensor<?x2x3xf32>
}
"""
    x = np.random.default_rng(2).standard_normal((3, 2, 3)) * 4
    hw = check_exact(nanoir.parse(text), [x])
    assert [op.name for op in hw.walk() if op.name.startswith("nh.")] == ["nh.lut"]


def _dense(a: np.ndarray) -> str:
    return str(a.astype(np.float64).tolist())


def _weighted_program(
    op: str, x_bits: int, w: np.ndarray, bias: np.ndarray | None = None, bias_exp: int = 0
) -> str:
    """``op`` (linear, or a 1-D conv whose window is the whole input) of an ``x_bits``-bit
    input at exponent 0 with 8-bit weights ``w`` at exponent 0 and an optional 8-bit bias."""
    out_c = w.shape[0]
    if op == "linear":
        x_t, y_t = f"tensor<?x{w.shape[1]}xf32>", f"tensor<?x{out_c}xf32>"
    else:
        x_t, y_t = f"tensor<?x{w.shape[1]}x{w.shape[2]}xf32>", f"tensor<?x{out_c}x1xf32>"
    w_t = "tensor<" + "x".join(map(str, w.shape)) + "xf32>"
    lines = [
        f"func.func @main(%x: {x_t}) -> {y_t} {{",
        f"  %xq = nq.fake_quant %x {{bits = {x_bits} : i64, exp = dense<0> : tensor<1xi8>}} : {x_t}",
        f'  %w = nf.constant "w" dense<{_dense(w)}> : {w_t}',
        f"  %wq = nq.fake_quant %w {{bits = 8 : i64, exp = dense<0> : tensor<1xi8>}} : {w_t}",
    ]
    operands, types = "%xq, %wq", f"{x_t}, {w_t}"
    if bias is not None:
        b_t = f"tensor<{out_c}xf32>"
        lines += [
            f'  %b = nf.constant "b" dense<{_dense(bias)}> : {b_t}',
            f"  %bq = nq.fake_quant %b {{bits = 8 : i64, exp = dense<{bias_exp}> : "
            f"tensor<1xi8>}} : {b_t}",
        ]
        operands, types = operands + ", %bq", types + f", {b_t}"
    name = "nf.linear" if op == "linear" else "nf.conv"
    lines += [f"  %y = {name} {operands} : ({types}) -> {y_t}", f"  func.return %y : {y_t}", "}"]
    return "\n".join(lines) + "\n"


def _alternating(out_c: int, n: int) -> np.ndarray:
    """``out_c`` rows of ``n`` (even) extreme 8-bit weights of alternating sign: the sum of
    their magnitudes is 127.5 * n, their signed sum only -n / 2 (or +n / 2)."""
    row = np.resize([127.0, -128.0], n)
    return np.stack([row if c % 2 == 0 else -row - 1 for c in range(out_c)])


@pytest.mark.parametrize("op", ["linear", "conv"])
@pytest.mark.parametrize("n", [514, 516])
def test_accumulator_bound_sums_weight_magnitudes(op: str, n: int) -> None:
    """16-bit inputs (|code| <= 32768) times n alternating 127/-128 weights: the worst case is
    32768 * 127.5 * n, just under 2**31 - 1 for n = 514 (the program lowers and runs exactly
    at that worst case) and just over for n = 516 (an error). A bound from the signed sum of
    the weights would be tiny and accept both."""
    w = _alternating(2, n)
    if op == "conv":
        w = w.reshape(2, 2, n // 2)  # the window covers the whole input: one output position
    module = nanoir.parse(_weighted_program(op, 16, w))
    worst = 32768 * 255 * (n // 2)
    if worst > 2**31 - 1:
        with pytest.raises(
            LowerToHwError,
            match=rf"'{'nf.linear' if op == 'linear' else 'nf.conv'}"
            rf"' \(%y\) may overflow its i32 accumulator: "
            rf"worst case \|acc\| = {worst} > 2147483647",
        ):
            lower_to_hw(module)
        return
    # The largest |acc| the inputs can reach: each code of the weight's sign, at its extreme.
    flat = w.reshape(2, -1)[0]
    extreme = np.where(flat > 0, 32767.0, -32768.0).reshape((1, *w.shape[1:]))
    random = np.random.default_rng(3).integers(-32768, 32768, (2, *w.shape[1:])).astype(float)
    hw = check_exact(module, [np.concatenate([extreme, -extreme - 1, random])])
    acc = [o for o in hw.walk() if o.name in ("nh.linear", "nh.conv")]
    assert len(acc) == 1


@pytest.mark.parametrize("op", ["linear", "conv"])
@pytest.mark.parametrize("n", [2, 3])
def test_bias_on_a_finer_grid_bounds_the_shifted_sums(op: str, n: int) -> None:
    """A bias at exponent 16, finer than the products (exponent 0): the sums are shifted left
    by 16 before it is added, which overflows i32 for 3 weights of 8-bit inputs but not for 2:
    (127 + 128) * 128 * 2**16 + 128 = 2139095168; with a third 127, 3204448384."""
    w = _alternating(1, 4)[:, :n]
    if op == "conv":
        w = w.reshape(1, 1, n)
    bias = np.array([-128 / 2**16])
    module = nanoir.parse(_weighted_program(op, 8, w, bias, bias_exp=16))
    worst = int(np.abs(w).sum()) * 128 * 2**16 + 128
    if worst > 2**31 - 1:
        with pytest.raises(
            LowerToHwError,
            match=rf"may overflow i32 once aligned to its bias: "
            rf"worst case \|acc\| = {worst} > 2147483647",
        ):
            lower_to_hw(module)
        return
    flat = w.reshape(-1)
    extreme = np.where(flat > 0, 127.0, -128.0).reshape((1, *w.shape[1:]))
    hw = check_exact(module, [np.concatenate([extreme, -extreme - 1])])
    assert any(o.name == "nh.add" for o in hw.walk())  # the bias was added after the shift


def test_batch_norm_without_a_fake_quant_is_named() -> None:
    text = """\
func.func @main(%x: tensor<?x2x3xf32>) -> tensor<?x2x3xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x2x3xf32>
  %g = nf.constant "bn.weight" dense<[1.0, 3.0]> : tensor<2xf32>
  %b = nf.constant "bn.bias" dense<0.5> : tensor<2xf32>
  %m = nf.constant "bn.running_mean" dense<0.0> : tensor<2xf32>
  %v = nf.constant "bn.running_var" dense<2.0> : tensor<2xf32>
  %y = nf.batch_norm %xq, %g, %b, %m, %v : (tensor<?x2x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3xf32>
  %r = nf.relu %y : tensor<?x2x3xf32>
  func.return %r : tensor<?x2x3xf32>
}
"""
    with pytest.raises(
        LowerToHwError,
        match=r"'nf.batch_norm' \(%y\) has no integer lowering "
        r"unless only fake-quants read it",
    ):
        lower_to_hw(nanoir.parse(text))
    fused = text.replace(
        "%r = nf.relu %y : tensor<?x2x3xf32>",
        "%r = nq.fake_quant %y {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x3xf32>",
    )
    hw = check_exact(nanoir.parse(fused), [np.linspace(-9, 9, 12).reshape(2, 2, 3)])
    assert [op.name for op in hw.walk()].count("nh.requant") == 1
