"""nanoir.inspect agrees with lower-to-hw: on every test model and on random programs, under
targets that take everything, lack op kinds, code widths or rounding modes, or have a tiny
on-chip buffer.

Agreement (issue 34 §2): every op inspect marks ``host`` (before quantizing) is put on the
host by ``lower-to-hw{host=true}`` (after calibrating) for the same reason, and lower-to-hw
without host refuses the first of them with that reason; every op lower-to-hw puts on the
host that inspect did not is a refusal found on the calibrated exponents (kind
``exponents``), which inspect reports as "engine, subject to exponents".

kills: inspect reading the float program as if every value were quantized at 8 bits (a rule
giving 4-bit codes would then disagree), a host island's reader not joining it in inspect
(lower-to-hw puts it on the host), the stream-buffer check run on different widths in the two
(an nf value counted at 32 bits), inspect ignoring the target's rounding modes, JSON or DOT
output dropping the device (each mutant run: inspect's host rule ignoring the fake-quant
that ends an island, and inspect skipping the island rule, fail the agreement).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects.functions import describe, find_function
from nanoir.lowering.hw.host import host_reasons
from nanoir.lowering.hw.support import LOWERS_TO, function_ops
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from xdsl.dialects.builtin import IntAttr, ModuleOp

import nanoir
from nanoir.inspection import Inspection, inspect
from nanoir.target import Target, engine_op_names
from nanoir.testing import TEST_MODELS, make_test_model
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program

INDEX = "test.index"
KINDS = sorted({m for ops in LOWERS_TO.values() for m in ops})


def without(*ops: str) -> Target:
    return Target(name="test").with_ops(engine_op_names() - set(ops))


TARGETS = {
    "example": Target.example(),
    "no conv": without("conv"),
    "no add, lut": without("add", "lut", "mul"),
    "4-bit codes": Target.from_toml("[engine]\nactivation_bits = [4]", "four"),
    "floor only": Target.from_toml("[engine]\nrounding = ['floor']", "floor"),
    "tiny buffer": Target.from_toml("[memory]\nbuffer_bytes = 200", "tiny"),
}


def partition(nq: ModuleOp, target: Target) -> dict[int, tuple[str, str]]:
    """lower-to-hw{host=true}'s host ops by their position among the ops inspect asks."""
    tagged = nq.clone()
    for i, op in enumerate(function_ops(find_function(tagged, None))):
        op.attributes[INDEX] = IntAttr(i)
    hw = lower_to_hw(tagged, target=target, host=True)
    found = {}
    for op, why in host_reasons(find_function(hw, None)):
        index = op.attributes[INDEX]
        assert isinstance(index, IntAttr)
        found[index.data] = (why.reason, why.kind)
    return found


def check_agreement(before: Inspection, nq: ModuleOp, target: Target) -> None:
    host = {p.index: (p.why, p.kind) for p in before.host}
    lowered = partition(nq, target)
    for i, why in host.items():
        assert lowered.get(i) == why, (i, before.ops[i].op.name, why, lowered.get(i))
    for i, (reason, kind) in lowered.items():
        if i not in host:
            assert kind == "exponents", (i, reason, kind)
            assert before.ops[i].device == "engine"
    if host:
        first = before.ops[min(host)]
        with pytest.raises(LowerToHwError) as refused:
            lower_to_hw(nq.clone(), target=target)
        message = str(refused.value)
        if not any(k == "exponents" and i < first.index for i, (_, k) in lowered.items()):
            assert f"{describe(nq_op(nq, first.index))} {first.why}" in message


def nq_op(nq: ModuleOp, index: int):
    return function_ops(find_function(nq, None))[index]


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[ModuleOp, ModuleOp, np.ndarray]]:
    found = {}
    for name in TEST_MODELS:
        model = make_test_model(name)
        x = model.make_example_input(2).numpy()  # type: ignore[operator]
        nf = nanoir.from_torch(model, (torch.from_numpy(x),))
        nanoir.fold_bn(nf)  # (quantize folds them: the same ops, one for one)
        nq = nf.clone()
        nanoir.quantize(nq, [x])
        ops_nf = [op.name for op in function_ops(find_function(nf, None))]
        assert ops_nf == [op.name for op in function_ops(find_function(nq, None))]
        found[name] = (nf, nq, x)
    return found


@pytest.mark.parametrize("target_name", sorted(TARGETS))
def test_inspect_before_quantizing_agrees_with_lower_to_hw(models, target_name: str) -> None:
    target = TARGETS[target_name]
    names = list(models)
    # every model under the example and a restricted target; the rest share them out
    chosen = (
        names
        if target_name in ("example", "no conv", "no add, lut")
        else names[:: 2 if "bit" in target_name else 3]
    )
    refused = 0
    for name in chosen:
        nf, nq, _ = models[name]
        before = inspect(nf, target)
        assert before.level == "nf"
        check_agreement(before, nq, target)
        refused += len(before.host)
    assert refused or target_name == "example"  # each restricted target refuses something


def test_the_kinds_inspect_reports(models) -> None:
    nf, _, _ = models["SampleNet"]
    assert {p.kind for p in inspect(nf, TARGETS["4-bit codes"]).host} == {"bits"}
    assert {p.kind for p in inspect(nf, TARGETS["floor only"]).host} <= {"mode", "host"}
    no_conv = inspect(nf, TARGETS["no conv"])
    assert {p.op.name for p in no_conv.host if p.kind == "op"} == {"nf.conv"}
    assert all(p.why.startswith("reads the float result") for p in no_conv.host if p.kind == "host")
    four = inspect(nf, TARGETS["4-bit codes"], act_bits=4, weight_bits=4)
    assert not four.host  # quantize's options: 4-bit activations, which the target takes


@settings(max_examples=examples(30), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs_agree(data: st.DataObject) -> None:
    module, _ = random_nq_program(data.draw, kinds=ALL_KINDS)
    left_out = set(data.draw(st.lists(st.sampled_from(KINDS), min_size=0, max_size=3)))
    target = without(*left_out)
    check_agreement(inspect(module, target), module, target)


ISLAND = """
func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %d = nf.div %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %n = nf.relu %d : tensor<?x4xf32>
  %m = nf.maximum %n, %xq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %mq = nq.fake_quant %m {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %mq : tensor<?x4xf32>
  %s = nf.maximum %r, %xq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %s : tensor<?x4xf32>
}
"""


def test_a_host_island_grows_through_unquantized_readers() -> None:
    """An op reading a host op's float directly (no fake-quant between) joins the island, in
    inspect as in lower-to-hw; the fake-quant ends it."""
    module = nanoir.parse(ISLAND)
    before = inspect(module)
    assert [(p.op.name, p.device, p.kind) for p in before.ops] == [
        ("nf.div", "host", "shape"),
        ("nf.relu", "host", "host"),
        ("nf.maximum", "host", "host"),
        ("nf.relu", "engine", ""),
        ("nf.maximum", "engine", ""),
    ]
    check_agreement(before, module, Target())
    hw = lower_to_hw(module.clone(), host=True)
    x = np.random.default_rng(0).uniform(1, 2, (3, 4))
    assert np.array_equal(nanoir.run(hw, x, x + 1)[0], nanoir.run(module, x, x + 1)[0])


def test_outputs_table_json_dot_and_the_partitioned_program(models) -> None:
    nf, nq, x = models["LeNet5"]
    result = inspect(nf, TARGETS["no conv"])
    text = str(result)
    assert "host" in text and "lowers to nh.conv, which the target 'test' does not take" in text
    data = json.loads(result.to_json())
    assert data["host"] == len(result.host) and data["target"]["name"] == "test"
    assert [r["device"] for r in data["ops"]] == [p.device for p in result.ops]
    dot = result.to_dot()
    assert dot.count('fillcolor = "#fce5cd"') == len(result.host)
    assert dot.count('fillcolor = "#cfe2f3"') == len(result.engine)
    hw = lower_to_hw(nq.clone(), target=TARGETS["no conv"], host=True)
    after = inspect(hw)
    assert after.level == "nh"
    assert [p.why for p in after.host] == [p.why for p in result.host]
    assert {p.device for p in after.ops} == {"engine", "host", "boundary"}
    assert 'fillcolor = "#e6e6e6"' in nanoir.dot.to_dot(hw)  # a partitioned program colours itself


def test_bad_arguments() -> None:
    with pytest.raises(nanoir.Error, match="module must be a program"):
        inspect("x")  # type: ignore[arg-type]
    with pytest.raises(nanoir.Error, match="target must be"):
        inspect(nanoir.parse("func.func @main() {\n func.return\n}"), 3)  # type: ignore[arg-type]
    with pytest.raises(nanoir.Error, match="unknown option"):
        inspect(nanoir.parse("func.func @main() {\n func.return\n}"), act_bitz=4)


def test_the_cli(tmp_path, models) -> None:
    from nanoir.cli.opt import main

    nf, _, _ = models["LeNet5"]
    program = tmp_path / "lenet.mlir"
    program.write_text(str(nf))
    target = tmp_path / "t.toml"
    target.write_text(
        'name = "noconv"\n[engine]\nops = ["relu", "max_pool", "linear", "reshape", "requant", "constant"]\n'
    )
    out = tmp_path / "inspect.json"
    assert main([str(program), "--hw-target", str(target), "--inspect=json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["target"]["name"] == "noconv" and data["host"] >= 1


def test_quantize_asks_before_calibrating() -> None:
    """quantize(target=...) refuses an op the engine cannot run before it reads one batch
    (kills: the check moved after calibration, or run on the quantized program only)."""

    class Product(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x).prod(dim=2, keepdim=True)

    x = torch.rand(2, 3, 4)
    module = nanoir.from_torch(Product(), (x,))

    def never():
        raise AssertionError("calibration data was read")
        yield x.numpy()

    with pytest.raises(LowerToHwError, match=r"quantize: 'nf.reduce' .* multiplies codes"):
        nanoir.quantize(module.clone(), never(), target=Target.example())
    nanoir.quantize(module, [x.numpy()], target=Target.example(), host=True)
    hw = lower_to_hw(module.clone(), target=Target.example(), host=True)
    assert np.array_equal(nanoir.run(hw, x.numpy())[0], nanoir.run(module, x.numpy())[0])
