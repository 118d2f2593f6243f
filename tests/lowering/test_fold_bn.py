"""fold-bn: the folding equations (against the NumPy kernels and torch, in float64) and the
pass (what it folds, what it leaves, names, dtypes, and the program's output before and after)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.lowering.fold_bn import (
    FoldBnPass,
    batch_norm_affine,
    fold_batch_norm,
)
from nanoir.runtime.numerics import kernels
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    ModuleOp,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Region, SSAValue

from nanoir.context import make_context

torch.set_num_threads(1)


def bn_params(rng: np.random.Generator, c: int) -> tuple[np.ndarray, ...]:
    """scale, bias, mean, var: var well away from zero, scale of either sign."""
    return (
        rng.uniform(-2.0, 2.0, c),
        rng.normal(0, 1, c),
        rng.normal(0, 1, c),
        rng.uniform(0.1, 3.0, c),
    )


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 6), eps=st.sampled_from([0.0, 1e-5, 1e-3]))
def test_affine_form_equals_torch_batch_norm(seed: int, c: int, eps: float) -> None:
    rng = np.random.default_rng(seed)
    scale, bias, mean, var = bn_params(rng, c)
    x = rng.normal(0, 2, (2, c, 3))
    a, b = batch_norm_affine(scale, bias, mean, var, eps)
    expected = F.batch_norm(
        *(torch.from_numpy(v) for v in (x, mean, var, scale, bias)), training=False, eps=eps
    ).numpy()
    np.testing.assert_allclose(a[:, None] * x + b[:, None], expected, rtol=1e-12, atol=1e-12)


@st.composite
def conv_cases(draw: st.DrawFn) -> dict[str, object]:
    spatial = draw(st.integers(1, 2))
    groups = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilations = [draw(st.integers(1, 2)) for _ in range(spatial)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * spatial)]
    sizes = [d * (k - 1) + 1 + draw(st.integers(0, 4)) for k, d in zip(kernel, dilations)]
    return {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "batch": draw(st.integers(1, 2)),
        "in_per_group": draw(st.integers(1, 3)),
        "out_per_group": draw(st.integers(1, 3)),
        "groups": groups,
        "kernel": kernel,
        "sizes": sizes,
        "strides": [draw(st.integers(1, 2)) for _ in range(spatial)],
        "dilations": dilations,
        "pads": pads,
        "bias": draw(st.booleans()),
        "eps": draw(st.sampled_from([1e-5, 1e-3])),
    }


@given(case=conv_cases())
def test_folded_conv_equals_conv_then_batch_norm(case: dict) -> None:
    rng = np.random.default_rng(case["seed"])
    g = case["groups"]
    c_in, c_out = case["in_per_group"] * g, case["out_per_group"] * g
    x = rng.normal(0, 1, (case["batch"], c_in, *case["sizes"]))
    w = rng.normal(0, 1, (c_out, case["in_per_group"], *case["kernel"]))
    b = rng.normal(0, 1, c_out) if case["bias"] else None
    scale, bn_bias, mean, var = bn_params(rng, c_out)
    window = dict(strides=case["strides"], pads=case["pads"], dilations=case["dilations"], groups=g)

    expected = kernels.batch_norm(
        kernels.conv(x, w, b, **window), scale, bn_bias, mean, var, case["eps"]
    )
    new_w, new_b = fold_batch_norm(w, b, scale, bn_bias, mean, var, case["eps"])
    actual = kernels.conv(x, new_w, new_b, **window)
    assert new_w.dtype == np.float64 and new_w.shape == w.shape and new_b.shape == (c_out,)
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-9)


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 3),
    i=st.integers(1, 5),
    o=st.integers(1, 5),
    bias=st.booleans(),
)
def test_folded_linear_equals_linear_then_batch_norm(
    seed: int, n: int, i: int, o: int, bias: bool
) -> None:
    rng = np.random.default_rng(seed)
    x, w = rng.normal(0, 1, (n, i)), rng.normal(0, 1, (o, i))
    b = rng.normal(0, 1, o) if bias else None
    scale, bn_bias, mean, var = bn_params(rng, o)
    expected = kernels.batch_norm(kernels.linear(x, w, b), scale, bn_bias, mean, var, 1e-5)
    new_w, new_b = fold_batch_norm(w, b, scale, bn_bias, mean, var, 1e-5)
    np.testing.assert_allclose(kernels.linear(x, new_w, new_b), expected, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------

F32 = Float32Type()


def constant(block: Block, array: np.ndarray, name: str | None, elt: Attribute = F32) -> SSAValue:
    dtype = "<f2" if isinstance(elt, Float16Type) else "<f4"
    data = np.asarray(array, dtype)
    attr = DenseIntOrFPElementsAttr(TensorType(elt, data.shape), BytesAttr(data.tobytes()))
    op = nf.ConstantOp(attr, name=name)
    op.result.name_hint = name
    block.add_op(op)
    return op.result


class Net:
    """A one-function module built op by op, with the arrays that went into it."""

    def __init__(self, input_shape: tuple[int, ...], elt: Attribute = F32, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.elt = elt
        self.block = Block(arg_types=[TensorType(elt, input_shape)])
        self.x = self.block.args[0]
        self.arrays: dict[str, np.ndarray] = {}

    def const(self, name: str | None, shape: tuple[int, ...], low: float | None = None) -> SSAValue:
        array = (
            self.rng.uniform(low, low + 2.0, shape)
            if low is not None
            else self.rng.normal(0, 1, shape)
        )
        value = constant(self.block, array, name, self.elt)
        if name is not None:  # what the IR holds, after rounding to the element type
            self.arrays[name] = named_constants_of(value)
        return value

    def bn(self, input: SSAValue, prefix: str, c: int) -> SSAValue:
        op = nf.BatchNormOp(
            input,
            self.const(f"{prefix}.weight", (c,)),
            self.const(f"{prefix}.bias", (c,)),
            self.const(f"{prefix}.running_mean", (c,)),
            self.const(f"{prefix}.running_var", (c,), 0.2),
        )
        self.block.add_op(op)
        return op.result

    def add(self, op: nf.IRDLOperation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def module(self, *outputs: SSAValue) -> ModuleOp:
        self.block.add_op(ReturnOp(*outputs))
        func = FuncOp("main", (self.block.arg_types, [v.type for v in outputs]), Region(self.block))
        module = ModuleOp([func])
        module.verify()
        return module


def fold(module: ModuleOp) -> ModuleOp:
    FoldBnPass().apply(make_context(), module)
    module.verify()
    return module


def ops_of(module: ModuleOp, kind: type) -> list:
    return [op for op in module.walk() if isinstance(op, kind)]


def named_constants_of(value: SSAValue) -> np.ndarray:
    op = value.owner
    assert isinstance(op, nf.ConstantOp)
    dtype = "<f2" if isinstance(op.value.get_element_type(), Float16Type) else "<f4"
    return np.frombuffer(op.value.data.data, dtype).reshape(op.value.get_shape())


def named_constants(module: ModuleOp) -> dict[str, np.ndarray]:
    return {
        op.sym_name.data: named_constants_of(op.result)
        for op in ops_of(module, nf.ConstantOp)
        if op.sym_name is not None
    }


def run(module: ModuleOp, x: np.ndarray) -> list[np.ndarray]:
    from nanoir.runtime.interpreter import run as run_program

    return run_program(module, x)


def conv_bn_net(bias: bool = True, elt: Attribute = F32) -> tuple[Net, ModuleOp]:
    net = Net((2, 3, 6, 6), elt)
    b = net.const("conv1.bias", (4,)) if bias else None
    y = net.add(nf.ConvOp(net.x, net.const("conv1.weight", (4, 3, 3, 3)), b, pads=[1, 0, 1, 2]))
    return net, net.module(net.bn(y, "bn1", 4))


@pytest.mark.parametrize("bias", [True, False])
def test_conv_bn_is_folded_into_named_constants(bias: bool) -> None:
    net, module = conv_bn_net(bias)
    x = np.random.default_rng(1).normal(0, 1, (2, 3, 6, 6)).astype(np.float32)
    before = run(module, x)
    fold(module)
    assert not ops_of(module, nf.BatchNormOp)
    (conv,) = ops_of(module, nf.ConvOp)
    assert nf.array_values(conv.pads) == (1, 0, 1, 2)
    a = net.arrays
    w, b = fold_batch_norm(
        a["conv1.weight"],
        a.get("conv1.bias"),
        a["bn1.weight"],
        a["bn1.bias"],
        a["bn1.running_mean"],
        a["bn1.running_var"],
        1e-5,
    )
    consts = named_constants(module)
    assert set(consts) == {"conv1.weight", "conv1.bias"}  # old weight and bn params erased
    np.testing.assert_array_equal(consts["conv1.weight"], w.astype(np.float32))
    np.testing.assert_array_equal(consts["conv1.bias"], b.astype(np.float32))
    assert conv.weight.name_hint == "conv1.weight"
    assert conv.bias is not None and conv.bias.name_hint == "conv1.bias"
    after = run(module, x)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-5 * np.abs(before[0]).max())


def test_linear_bn_is_folded() -> None:
    net = Net((3, 5))
    y = net.add(nf.LinearOp(net.x, net.const("fc.weight", (4, 5)), net.const("fc.bias", (4,))))
    module = net.module(net.bn(y, "bn", 4))
    x = np.random.default_rng(2).normal(0, 1, (3, 5)).astype(np.float32)
    before = run(module, x)
    fold(module)
    assert not ops_of(module, nf.BatchNormOp)
    assert set(named_constants(module)) == {"fc.weight", "fc.bias"}
    np.testing.assert_allclose(run(module, x)[0], before[0], rtol=1e-5, atol=1e-5)


def test_folded_constants_keep_the_element_type() -> None:
    net, module = conv_bn_net(elt=Float16Type())
    fold(module)
    (conv,) = ops_of(module, nf.ConvOp)
    assert conv.weight.type == TensorType(Float16Type(), (4, 3, 3, 3))
    assert conv.bias is not None and conv.bias.type == TensorType(Float16Type(), (4,))


def test_lone_batch_norm_stays() -> None:
    net = Net((2, 4, 5))
    module = net.module(net.bn(net.add(nf.ReluOp(net.x)), "bn", 4))
    text = str(module)
    fold(module)
    assert str(module) == text


def test_conv_with_another_use_is_not_folded() -> None:
    net = Net((2, 3, 6, 6))
    y = net.add(nf.ConvOp(net.x, net.const("conv.weight", (4, 3, 1, 1))))
    module = net.module(net.bn(y, "bn", 4), y)
    text = str(module)
    fold(module)
    assert str(module) == text


def test_non_constant_weight_is_not_folded() -> None:
    block = Block(arg_types=[TensorType(F32, (2, 3, 4)), TensorType(F32, (4, 3, 1))])
    x, w = block.args
    conv = nf.ConvOp(x, w)
    block.add_op(conv)
    params = [constant(block, np.ones(4), f"bn.{n}") for n in ("weight", "bias", "mean", "var")]
    bn = nf.BatchNormOp(conv.result, *params)
    block.add_ops([bn, ReturnOp(bn.result)])
    func = FuncOp("main", (block.arg_types, [bn.result.type]), Region(block))
    module = ModuleOp([func])
    fold(module)
    assert len(ops_of(module, nf.BatchNormOp)) == 1


def test_bn_on_a_3d_linear_result_is_not_folded() -> None:
    """bn normalizes dim 1; on ``[N, L, out]`` that is L, not the linear's output feature."""
    net = Net((2, 4, 5))
    y = net.add(nf.LinearOp(net.x, net.const("fc.weight", (6, 5))))
    module = net.module(net.bn(y, "bn", 4))
    fold(module)
    assert len(ops_of(module, nf.BatchNormOp)) == 1


def test_shared_weight_stays_for_its_other_user() -> None:
    net = Net((2, 3, 6, 6))
    w = net.const("conv.weight", (4, 3, 1, 1))
    folded = net.add(nf.ConvOp(net.x, w))
    plain = net.add(nf.ConvOp(net.x, w))
    module = net.module(net.bn(folded, "bn", 4), plain)
    x = np.random.default_rng(3).normal(0, 1, (2, 3, 6, 6)).astype(np.float32)
    before = run(module, x)
    fold(module)
    assert not ops_of(module, nf.BatchNormOp)
    after = run(module, x)
    for a, b in zip(after, before):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())


def test_unrelated_dead_ops_are_kept() -> None:
    """The pass only folds: it is not a dead-code elimination."""
    net, module = conv_bn_net()
    func = ops_of(module, FuncOp)[0]
    dead = nf.ReluOp(func.body.block.args[0])
    func.body.block.insert_op_before(dead, func.body.block.first_op)
    fold(module)
    assert ops_of(module, nf.ReluOp)


def test_shared_bn_parameters_and_attributes() -> None:
    """bn parameters may share one constant; the layer's own attributes survive the fold."""
    net = Net((2, 3, 4))
    ones = net.const("ones", (4,), low=1.0)
    conv = nf.ConvOp(net.x, net.const("conv.weight", (4, 3, 1)))
    conv.attributes["note"] = nf.StringAttr("keep me")
    y = net.add(conv)
    bn = nf.BatchNormOp(y, ones, ones, ones, ones)
    module = net.module(net.add(bn))
    x = np.random.default_rng(4).normal(0, 1, (2, 3, 4)).astype(np.float32)
    before = run(module, x)
    fold(module)
    (new_conv,) = ops_of(module, nf.ConvOp)
    assert new_conv.attributes["note"] == nf.StringAttr("keep me")
    assert set(named_constants(module)) == {"conv.weight", "conv.bias"}
    np.testing.assert_allclose(run(module, x)[0], before[0], rtol=1e-5, atol=1e-5)
