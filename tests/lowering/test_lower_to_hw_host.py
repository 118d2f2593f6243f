"""lower-to-hw{host=true}: what the engine cannot run stays float on the host, between
nh.to_host and nh.from_host, and the partitioned program equals the nq program bit for bit.

The oracle is the nq program run in float64 (the exactness contract's reference) and, for the
boundary kernels, their formulas written here in NumPy.

kills: a host island run in float32 (the nq level is float64: sums differ in the last bits),
nh.to_host scaling by 2**exp instead of 2**-exp, nh.from_host rounding half to even where
the fake-quant truncates (or saturating to the container instead of the fake-quant's bits),
a fake-quant between two host ops round-tripped through codes with a wrong exponent, an op
that reads a host op's float directly lowered as if it were on a grid (nh would read floats),
a refused op's partly emitted nh ops left in the program, the structural check refusing what
the patterns lower (host=false must change nothing), an exponent refusal (an accumulator
bound) raised instead of put on the host with host=true.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.dialects.functions import find_function
from nanoir.lowering.hw.host import host_reasons
from nanoir.lowering.hw.support import LOWERS_TO
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.host import HOST_BUILDERS
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp, TensorType, f32, i64
from xdsl.ir import Block

import nanoir
from nanoir.target import Target, engine_op_names
from nanoir.testing import TEST_MODELS, make_test_model
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program

KINDS = sorted({m for ops in LOWERS_TO.values() for m in ops})
MODELS = [name for name in TEST_MODELS if name != "ResNet18"]
"""The test networks but the largest (tests/nanoir/test_inspection.py takes every one)."""
"""The nh ops an nf op lowers to (what a test-only target may leave out)."""


def without(*ops: str) -> Target:
    return Target(name="test").with_ops(engine_op_names() - set(ops))


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b)
    )


@pytest.fixture(scope="module")
def quantized() -> dict[str, tuple[ModuleOp, np.ndarray]]:
    programs = {}
    for name in MODELS:
        model = make_test_model(name)
        x = model.make_example_input(3).numpy()  # type: ignore[operator]
        module = nanoir.from_torch(model, (torch.from_numpy(x),))
        nanoir.quantize(module, [x])
        programs[name] = (module, x)
    return programs


@pytest.mark.parametrize("left_out", ["conv", "add", "lut", "avg_pool"])
def test_models_without_an_op_equal_nq_bit_for_bit(quantized, left_out: str) -> None:
    target = without(left_out)
    for name, (module, x) in quantized.items():
        hw = lower_to_hw(module.clone(), target=target, host=True)
        hw.verify()
        func = find_function(hw, None)
        for op, why in host_reasons(func):
            assert why.kind in ("op", "host"), (name, op.name, why)
            if why.kind == "op":
                assert left_out in LOWERS_TO[type(op)], (name, op.name)
        lowered = {op.name for op in func.walk()}
        assert f"nh.{left_out}" not in lowered, name
        assert same(nanoir.run(hw, x), nanoir.run(module, x)), name


def test_nothing_refused_changes_nothing(quantized) -> None:
    """host=true, or an unlimited target, on a program the engine takes whole: the same IR
    as plain lower-to-hw (and no boundary op)."""
    for name, (module, _) in quantized.items():
        plain = str(lower_to_hw(module.clone()))
        target = Target() if name == "LeNet5" else None  # (an unlimited target once)
        assert str(lower_to_hw(module.clone(), target=target, host=True)) == plain, name
        assert "nh.to_host" not in plain


def test_host_false_refuses_naming_the_op_and_the_target(quantized) -> None:
    module, _ = quantized["LeNet5"]
    with pytest.raises(
        LowerToHwError, match=r"'nf.conv' .* lowers to nh.conv, which the target 'test'"
    ):
        lower_to_hw(module.clone(), target=without("conv"))


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), batch=st.sampled_from((1, 2)))
def test_random_programs_with_host_only_ops(data: st.DataObject, batch: int) -> None:
    """A random program of every op kind, a random set of op kinds left out of the target:
    it lowers with host=true and equals the nq program bit for bit (engine and host parts);
    every host op lowers to a left-out op (as its main op, or here as a shift, relayout or
    late bias) or joins an island."""
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    left_out = set(data.draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=4)))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 2.0, 20.0)))
    hw = lower_to_hw(module.clone(), target=without(*left_out), host=True)
    hw.verify()
    func = find_function(hw, None)
    for op, why in host_reasons(func):
        if why.kind == "op":
            assert set(LOWERS_TO[type(op)]) & left_out, (op.name, why)
        elif why.kind == "exponents":  # a shift, relayout or late bias it needs here
            assert any(f"lowers here to nh.{m}," in why.reason for m in left_out), why
        else:
            assert why.kind == "host", (op.name, why)
    emitted = {op.name.removeprefix("nh.") for op in func.walk() if op.name.startswith("nh.")}
    assert not emitted & left_out
    assert same(nanoir.run(hw, x), nanoir.run(module, x))


def _module(text: str) -> ModuleOp:
    return nanoir.parse(text)


PRODUCT = """
func.func @main(%x: tensor<?x4x3xf32>) -> tensor<?x4x1xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4x3xf32>
  %a = nf.relu %xq : tensor<?x4x3xf32>
  %p = nf.reduce "prod" %a {dims = array<i64: 2>} : tensor<?x4x3xf32> -> tensor<?x4x1xf32>
  %pq = nq.fake_quant %p {bits = 4 : i64, exp = dense<7> : tensor<1xi8>, rounding = #nq.rounding<half_up>} : tensor<?x4x1xf32>
  %s = nf.sigmoid %pq : tensor<?x4x1xf32>
  %sq = nq.fake_quant %s {bits = 8 : i64, exp = dense<8> : tensor<1xi8>} : tensor<?x4x1xf32>
  func.return %sq : tensor<?x4x1xf32>
}
"""


def test_an_op_with_no_integer_form_in_the_middle() -> None:
    module = _module(PRODUCT)
    with pytest.raises(LowerToHwError, match="'nf.reduce' .* multiplies codes together"):
        lower_to_hw(module.clone())
    hw = lower_to_hw(module.clone(), host=True)
    names = [op.name for op in find_function(hw, None).body.block.ops]
    # The host op's fake-quant stays on the host; nh.from_host reads its value (on its grid).
    assert names == [
        "nh.relu",
        "nh.to_host",
        "nf.reduce",
        "nq.fake_quant",
        "nh.from_host",
        "nh.lut",
        "func.return",
    ]
    x = np.random.default_rng(0).uniform(0.5, 1.2, (5, 4, 3))
    assert same(nanoir.run(hw, x), nanoir.run(module, x))


OVERFLOW = """
func.func @main(%x: tensor<?x4096xf32>) -> tensor<?x2xf32> {
  %xq = nq.fake_quant %x {bits = 16 : i64, exp = dense<0> : tensor<1xi8>} : tensor<?x4096xf32>
  %w = nf.constant dense<1.0> : tensor<2x4096xf32>
  %wq = nq.fake_quant %w {bits = 16 : i64, exp = dense<14> : tensor<1xi8>} : tensor<2x4096xf32>
  %y = nf.linear %xq, %wq : (tensor<?x4096xf32>, tensor<2x4096xf32>) -> tensor<?x2xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<-20> : tensor<1xi8>} : tensor<?x2xf32>
  func.return %yq : tensor<?x2xf32>
}
"""


def test_an_exponent_refusal_goes_to_the_host() -> None:
    """An accumulator bound past i32 (found only on the exponents) is lower-to-hw's error,
    and with host=true the op runs on the host (kind ``exponents``), its partial nh ops gone."""
    module = _module(OVERFLOW)
    with pytest.raises(LowerToHwError, match="may overflow its i32 accumulator"):
        lower_to_hw(module.clone())
    hw = lower_to_hw(module.clone(), host=True)
    func = find_function(hw, None)
    ((op, why),) = host_reasons(func)
    assert op.name == "nf.linear" and why.kind == "exponents"
    assert "may overflow" in why.reason
    assert not any(o.name == "nh.linear" for o in func.walk())
    x = np.random.default_rng(1).integers(-(2**15), 2**15, (3, 4096)).astype(np.float64)
    assert same(nanoir.run(hw, x), nanoir.run(module, x))


def test_a_stream_buffer_larger_than_the_chip() -> None:
    """With a tiny on-chip buffer, the ops whose stream caches need more run on the host."""
    model = make_test_model("KWSNet")
    x = model.make_example_input(2).numpy()  # type: ignore[operator]
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    nanoir.quantize(module, [x])
    tiny = Target.from_toml("[memory]\nbuffer_bytes = 64\nstream_dim = 2")
    hw = lower_to_hw(module.clone(), target=tiny, host=True)
    kinds = {why.kind for _, why in host_reasons(find_function(hw, None))}
    assert "buffer" in kinds
    assert same(nanoir.run(hw, x), nanoir.run(module, x))


def test_boundary_kernels_against_their_formulas() -> None:
    """nh.to_host: code * 2**-exp (per channel); nh.from_host: the fake-quant's codes,
    trunc and saturation at the bits, not the container, written out here."""
    codes_t = TensorType(IntegerType(8), [2, 3, 2], nh.FixedAttr([4, -2, 0], "BCM"))
    float_t = TensorType(f32, [2, 3, 2])

    block = Block(arg_types=[codes_t, float_t])
    to = nh.ToHostOp.create(operands=[block.args[0]], result_types=[float_t])
    back = nh.FromHostOp.create(
        operands=[block.args[1]],
        result_types=[codes_t],
        properties={"bits": IntegerAttr(5, i64)},
    )
    to.verify()
    back.verify()
    rng = np.random.default_rng(3)
    codes = rng.integers(-128, 128, (2, 3, 2))
    exps = np.array([4, -2, 0]).reshape(1, 3, 1)
    (real,) = HOST_BUILDERS[nh.ToHostOp](to, np.dtype(np.float64))(codes)
    assert np.array_equal(real, codes * 2.0 ** (-exps))
    x = rng.standard_normal((2, 3, 2)) * 8
    (got,) = HOST_BUILDERS[nh.FromHostOp](back, np.dtype(np.float64))(x)
    scaled = x * 2.0**exps
    want = np.clip(np.trunc(scaled), -16, 15)
    assert np.array_equal(got, want)
