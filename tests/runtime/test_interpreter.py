"""The NumPy executor: every nf op wired to its kernel with the right attributes (against
torch), fake-quant broadcasting, constant folding at compile time, freeing, and errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.runtime.interpreter import ExecutionError, compile_module, run
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue

torch = pytest.importorskip("torch")
F = torch.nn.functional
D = DYNAMIC_INDEX


def program(
    arg_shapes: Sequence[Sequence[int]],
    body: Callable[[list[SSAValue]], list[Operation]],
) -> ModuleOp:
    """``func @main(args) { body; return <last op's results> }``."""
    block = Block(arg_types=[TensorType(f32, s) for s in arg_shapes])
    ops = body(list(block.args))
    block.add_ops(ops)
    results = list(ops[-1].results)
    block.add_op(ReturnOp(*results))
    ftype = FunctionType.from_lists([a.type for a in block.args], [r.type for r in results])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    module.verify()
    return module


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got: np.ndarray, want: torch.Tensor) -> None:
    want_np = want.detach().numpy()
    assert got.shape == want_np.shape
    np.testing.assert_allclose(got, want_np, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want_np).max()))


def torch_pads(pads: Sequence[int]) -> list[int]:
    """ONNX spatial pads (begins, ends) to F.pad's last-dim-first pairs."""
    n = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(n)):
        out += [pads[i], pads[n + i]]
    return out


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "strides", "pads", "dilations", "groups"),
    [
        ((2, 3, 9, 8), (4, 3, 3, 3), [2, 1], [1, 0, 2, 1], [1, 2], 1),
        ((1, 6, 7, 7), (6, 1, 3, 3), None, [1, 1, 1, 1], None, 6),
        ((3, 4, 5, 6), (6, 2, 2, 3), [1, 2], None, None, 2),
        ((2, 5, 23), (7, 5, 4), [3], [2, 1], [2], 1),
    ],
)
def test_conv(x_shape, w_shape, strides, pads, dilations, groups) -> None:  # noqa: ANN001
    n = len(x_shape) - 2
    module = program(
        [(D, *x_shape[1:]), w_shape, (w_shape[0],)],
        lambda a: [
            nf.ConvOp(
                a[0], a[1], a[2], strides=strides, pads=pads, dilations=dilations, groups=groups
            )
        ],
    )
    x, w, b = rand(*x_shape), rand(*w_shape, seed=1), rand(w_shape[0], seed=2)
    (got,) = run(module, x, w, b)
    xt = F.pad(torch.from_numpy(x), torch_pads(pads or [0] * 2 * n))
    conv = F.conv1d if n == 1 else F.conv2d
    want = conv(
        xt,
        torch.from_numpy(w),
        torch.from_numpy(b),
        stride=strides or 1,
        dilation=dilations or 1,
        groups=groups,
    )
    close(got, want)


def test_linear_matmul_batch_norm() -> None:
    x, w, b = rand(3, 10), rand(4, 10, seed=1), rand(4, seed=2)
    (y,) = run(program([(D, 10), (4, 10), (4,)], lambda a: [nf.LinearOp(*a)]), x, w, b)
    close(y, F.linear(*map(torch.from_numpy, (x, w, b))))
    a3, m = rand(2, 3, 5), rand(5, 4, seed=3)
    (y,) = run(program([(2, 3, 5), (5, 4)], lambda a: [nf.MatmulOp(*a)]), a3, m)
    close(y, torch.matmul(torch.from_numpy(a3), torch.from_numpy(m)))
    xs = rand(2, 4, 3, 3)
    g, bb, mu = rand(4, seed=4), rand(4, seed=5), rand(4, seed=6)
    var = np.abs(rand(4, seed=7)) + 0.1
    module = program(
        [(D, 4, 3, 3), (4,), (4,), (4,), (4,)], lambda a: [nf.BatchNormOp(*a, epsilon=1e-3)]
    )
    (y,) = run(module, xs, g, bb, mu, var)
    t = [torch.from_numpy(v) for v in (xs, mu, var, g, bb)]
    close(y, F.batch_norm(t[0], t[1], t[2], t[3], t[4], training=False, eps=1e-3))


@pytest.mark.parametrize(
    ("make", "reference"),
    [
        (lambda x: nf.ReluOp(x), F.relu),
        (lambda x: nf.SigmoidOp(x), torch.sigmoid),
        (lambda x: nf.TanhOp(x), torch.tanh),
        (lambda x: nf.HardSigmoidOp(x), F.hardsigmoid),
        (lambda x: nf.HardSwishOp(x), F.hardswish),
        (lambda x: nf.ClampOp(x, 0.0, 6.0), F.relu6),
        (lambda x: nf.ClampOp(x, None, 0.5), lambda t: torch.clamp(t, max=0.5)),
        (lambda x: nf.LeakyReluOp(x, 0.2), lambda t: F.leaky_relu(t, 0.2)),
    ],
)
def test_unary(make, reference) -> None:  # noqa: ANN001
    x = rand(2, 3, 4, 5) * 5
    (y,) = run(program([(D, 3, 4, 5)], lambda a: [make(a[0])]), x)
    close(y, reference(torch.from_numpy(x)))


@pytest.mark.parametrize(
    ("op", "reference"),
    [(nf.AddOp, torch.add), (nf.SubOp, torch.sub), (nf.MulOp, torch.mul), (nf.DivOp, torch.div)],
)
def test_binary_broadcasting(op, reference) -> None:  # noqa: ANN001
    x, c = rand(2, 3, 4, 5), rand(3, 1, 1, seed=1) + 3
    (y,) = run(program([(D, 3, 4, 5), (3, 1, 1)], lambda a: [op(a[0], a[1])]), x, c)
    close(y, reference(torch.from_numpy(x), torch.from_numpy(c)))


def test_prelu() -> None:
    x, s = rand(2, 3, 4), rand(3, seed=1)
    (y,) = run(program([(D, 3, 4), (3,)], lambda a: [nf.PReluOp(a[0], a[1])]), x, s)
    close(y, F.prelu(torch.from_numpy(x), torch.from_numpy(s)))


def test_pools() -> None:
    x = rand(2, 3, 9, 7)
    xt = torch.from_numpy(x)
    (y,) = run(
        program(
            [(D, 3, 9, 7)],
            lambda a: [
                nf.MaxPoolOp(
                    a[0],
                    [3, 2],
                    strides=[2, 2],
                    pads=[1, 1, 1, 1],
                    dilations=[1, 2],
                    ceil_mode=True,
                )
            ],
        ),
        x,
    )
    close(y, F.max_pool2d(xt, [3, 2], [2, 2], [1, 1], dilation=[1, 2], ceil_mode=True))
    (y,) = run(
        program(
            [(D, 3, 9, 7)],
            lambda a: [
                nf.AvgPoolOp(
                    a[0],
                    [3, 3],
                    strides=[2, 2],
                    pads=[1, 1, 1, 1],
                    ceil_mode=True,
                    count_include_pad=False,
                )
            ],
        ),
        x,
    )
    close(y, F.avg_pool2d(xt, 3, 2, 1, ceil_mode=True, count_include_pad=False))
    (y,) = run(
        program([(D, 3, 9, 7)], lambda a: [nf.AvgPoolOp(a[0], [2, 2], divisor_override=3)]), x
    )
    close(y, F.avg_pool2d(xt, 2, 1, divisor_override=3))
    (y,) = run(program([(D, 3, 9, 7)], lambda a: [nf.AdaptiveAvgPoolOp(a[0], [4, 3])]), x)
    close(y, F.adaptive_avg_pool2d(xt, [4, 3]))
    x1 = rand(2, 3, 17)
    (y,) = run(program([(D, 3, 17)], lambda a: [nf.MaxPoolOp(a[0], [4], strides=[3])]), x1)
    close(y, F.max_pool1d(torch.from_numpy(x1), 4, 3))


def test_data_movement() -> None:
    a, b = rand(2, 3, 4, 4), rand(2, 5, 4, 4, seed=1)
    at, bt = torch.from_numpy(a), torch.from_numpy(b)

    def cat_then(make: Callable[[SSAValue], Operation]) -> ModuleOp:
        def body(args: list[SSAValue]) -> list[Operation]:
            c = nf.ConcatOp(args, axis=1)
            return [c, make(c.result)]

        return program([(D, 3, 4, 4), (D, 5, 4, 4)], body)

    cat = torch.cat([at, bt], 1)
    (y,) = run(cat_then(lambda c: nf.ReshapeOp(c, [D, 128])), a, b)
    close(y, cat.reshape(2, 128))
    (y,) = run(cat_then(lambda c: nf.TransposeOp(c, [0, 2, 3, 1])), a, b)
    close(y, cat.permute(0, 2, 3, 1))
    (y,) = run(cat_then(lambda c: nf.PadOp(c, [0, 0, 1, 2, 0, 0, 0, 1], value=-1.5)), a, b)
    close(y, F.pad(cat, [2, 1, 1, 0], value=-1.5))
    (y,) = run(cat_then(lambda c: nf.PadOp(c, [0, 0, 1, 1, 0, 0, 1, 1], mode="reflect")), a, b)
    close(y, F.pad(cat, [1, 1, 1, 1], mode="reflect"))
    (y,) = run(cat_then(lambda c: nf.UpsampleNearestOp(c, [8, 12])), a, b)
    close(y, F.interpolate(cat, size=[8, 12], mode="nearest"))
    p, q = run(cat_then(lambda c: nf.SplitOp(c, axis=1, sizes=[6, 2])), a, b)
    tp, tq = torch.split(cat, [6, 2], 1)
    close(p, tp)
    close(q, tq)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_fake_quant_per_channel_exponents(bits: int) -> None:
    exps = [3, -1, 0, 5]
    module = program([(D, 4, 3)], lambda a: [FakeQuantOp(a[0], bits, exp_attr(exps, [4, 1]))])
    x = rand(2, 4, 3) * 4
    (y,) = run(module, x)
    assert y.dtype == np.float64  # quantized programs run in float64
    for c, k in enumerate(exps):
        want = quant.fake_quant(x[:, c, :].astype(np.float64), bits, k)
        assert np.array_equal(y[:, c, :], want)


def test_constants_fold_at_compile_time_and_values_are_freed() -> None:
    def body(a: list[SSAValue]) -> list[Operation]:
        from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr

        w = np.full((4, 3, 1, 1), 0.3, dtype="<f4")
        const = nf.ConstantOp(
            DenseIntOrFPElementsAttr(TensorType(f32, w.shape), BytesAttr(w.tobytes())), name="w"
        )
        wq = FakeQuantOp(const.result, 4, exp_attr(3))
        conv = nf.ConvOp(a[0], wq.result)
        relu = nf.ReluOp(conv.result)
        neg = nf.SubOp(relu.result, conv.result)
        return [const, wq, conv, relu, neg]

    module = program([(D, 3, 5, 5)], body)
    plan = compile_module(module)
    assert [s.op.name for s in plan.steps] == ["nf.conv", "nf.relu", "nf.sub"]
    freed = [slot for step in plan.steps for slot in step.free]
    assert len(freed) == len(set(freed))
    result_slots = set(plan.result_slots)
    assert not result_slots & set(freed)
    # The input, the conv and the relu values are all dropped once used for the last time.
    assert len(freed) == 3
    x = rand(2, 3, 5, 5)
    (y,) = plan(x)
    conv = (x.astype(np.float64) * 0.25).sum(
        axis=1, keepdims=True
    )  # 0.3 quantized to 4 bits at 2**-3 is 0.25
    want = np.broadcast_to(np.maximum(conv, 0) - conv, (2, 4, 5, 5))
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_bad_inputs_are_reported() -> None:
    module = program([(D, 3, 4)], lambda a: [nf.ReluOp(a[0])])
    with pytest.raises(ExecutionError, match="takes 1 inputs, got 2"):
        run(module, rand(1, 3, 4), rand(1, 3, 4))
    with pytest.raises(ExecutionError, match=r"input 0 has shape \(1, 4, 4\), expected \?x3x4"):
        run(module, rand(1, 4, 4))


def test_given_results_replace_their_kernels() -> None:
    """``Plan.__call__(given={op: results})`` uses those results for ``op`` and what reads
    it, and runs the other kernels as usual. Kills: ``given`` ignored; the given results
    used for every op."""
    from nanoir.dialects.functions import find_function
    from nanoir.runtime.interpreter import compile_function, default_builders

    import nanoir

    module = nanoir.parse(
        "func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
        "  %a = nf.relu %x : tensor<2xf32>\n"
        "  %b = nf.add %a, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n"
        "  func.return %b : tensor<2xf32>\n}\n"
    )
    func = find_function(module, None)
    plan = compile_function(func, default_builders(), np.dtype(np.float64))
    relu = next(op for op in func.walk() if isinstance(op, nf.ReluOp))
    x = np.array([-1.0, 2.0])
    assert plan(x)[0].tolist() == [-1.0, 4.0]
    seen: list[str] = []
    (y,) = plan(
        x, observe=lambda op, r: seen.append(op.name), given={relu: (np.array([5.0, 7.0]),)}
    )
    assert y.tolist() == [4.0, 9.0] and seen == ["nf.relu", "nf.add"]
