"""fold-bn's affine fold: a constant per-channel ``* s`` / ``+ t`` / ``- t`` after a conv or
linear layer goes into the layer's weight and bias (torch's FrozenBatchNorm2d and PaddleOCR's
learnable affine blocks export so). The oracle is the torch module itself; the program must
equal it after the fold, and the fold must happen exactly where it is exact.

kills: the scale applied to the bias but not the weight (or the reverse), ``sub`` folded as
``add``, a constant varying along a spatial dim (or along the batch) taken as per-channel, a
layer with a second reader folded, the constant read along the wrong dim of a linear result.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf

import nanoir
from nanoir.testing.programs import examples

torch.set_num_threads(1)

#: shapes a per-channel constant is written in, for ``c`` channels of a rank-``r`` result
#: (conv: channel dim 1; linear: the last dim).
CONV_SHAPES = ["scalar", "(1,)", "(c,1,1)", "(1,c,1,1)"]
LINEAR_SHAPES = ["scalar", "(1,)", "(c,)", "(1,c)"]


def shaped(rng: np.random.Generator, spec: str, c: int) -> torch.Tensor | float:
    if spec == "scalar":
        return float(rng.uniform(0.5, 2.0) * rng.choice([-1, 1]))
    shape = eval(spec, {"c": c})  # noqa: S307 - the specs above
    return torch.from_numpy(rng.uniform(-2, 2, shape).astype(np.float32))


class Affine(torch.nn.Module):
    """``layer`` then the affine steps ``(op, constant)`` in order."""

    def __init__(self, layer: torch.nn.Module, steps: list[tuple[str, torch.Tensor | float]]):
        super().__init__()
        self.layer = layer
        self.steps = steps
        for i, (_, c) in enumerate(steps):
            if isinstance(c, torch.Tensor):
                self.register_buffer(f"c{i}", c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer(x)
        for i, (op, c) in enumerate(self.steps):
            c = getattr(self, f"c{i}", c)
            if op == "mul":
                y = y * c
            elif op == "rmul":
                y = c * y
            elif op == "add":
                y = y + c
            elif op == "radd":
                y = c + y
            else:
                y = y - c
        return y


def count(program: object, kinds: tuple[type, ...]) -> int:
    return sum(isinstance(op, kinds) for op in program.walk())  # type: ignore[attr-defined]


AFFINE_OPS = (nf.MulOp, nf.AddOp, nf.SubOp)


@settings(max_examples=examples(30), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    conv=st.booleans(),
    shapes=st.lists(st.integers(0, 3), min_size=1, max_size=3),
    ops=st.lists(st.sampled_from(["mul", "rmul", "add", "radd", "sub"]), min_size=3, max_size=3),
    bias=st.booleans(),
    groups=st.sampled_from([1, 2]),
)
def test_folded_program_equals_torch_and_has_no_affine_op_left(
    seed: int, conv: bool, shapes: list[int], ops: list[str], bias: bool, groups: int
) -> None:
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed % 2**31)
    c = 4
    if conv:
        layer: torch.nn.Module = torch.nn.Conv2d(4, c, 3, padding=1, groups=groups, bias=bias)
        x = torch.randn(2, 4, 5, 6)
        specs = CONV_SHAPES
    else:
        layer = torch.nn.Linear(6, c, bias=bias)
        x = torch.randn(2, 3, 6)  # a rank-3 linear result: the channel is the last dim
        specs = LINEAR_SHAPES
    steps = [(op, shaped(rng, specs[s], c)) for op, s in zip(ops, shapes, strict=False)]
    model = Affine(layer, steps).eval()
    program = nanoir.from_torch(model, (x,))
    nanoir.fold_bn(program)
    assert count(program, AFFINE_OPS) == 0
    (got,) = nanoir.run(program, x.numpy())
    want = model(x).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize(
    ("shape", "why"),
    # batch 4 = channels 4: a batch-wise constant has as many values as channels
    [((1, 1, 5, 1), "varies along a spatial dim"), ((4, 1, 1, 1), "varies along the batch")],
)
def test_a_constant_that_is_not_per_channel_stays(shape: tuple[int, ...], why: str) -> None:
    torch.manual_seed(0)
    s = torch.linspace(0.5, 2.0, int(np.prod(shape))).reshape(shape)
    model = Affine(torch.nn.Conv2d(3, 4, 3, padding=1), [("mul", s)]).eval()
    x = torch.randn(4, 3, 5, 6)
    program = nanoir.from_torch(model, (x,), dynamic_batch=False)
    nanoir.fold_bn(program)
    assert count(program, (nf.MulOp,)) == 1, why
    np.testing.assert_allclose(
        nanoir.run(program, x.numpy())[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def test_a_linear_constant_along_the_wrong_dim_stays() -> None:
    """``[N, L, out] * s[L, 1]`` scales the sequence position, not the output feature."""
    torch.manual_seed(0)
    model = Affine(torch.nn.Linear(6, 4), [("mul", torch.linspace(0.5, 2, 3).reshape(3, 1))])
    x = torch.randn(2, 3, 6)
    program = nanoir.from_torch(model.eval(), (x,))
    nanoir.fold_bn(program)
    assert count(program, (nf.MulOp,)) == 1
    np.testing.assert_allclose(
        nanoir.run(program, x.numpy())[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5
    )


class TwoReaders(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return y * 2.0 + y


def test_a_layer_read_twice_is_not_folded() -> None:
    torch.manual_seed(0)
    model = TwoReaders().eval()
    x = torch.randn(1, 3, 4, 4)
    program = nanoir.from_torch(model, (x,))
    nanoir.fold_bn(program)
    assert count(program, (nf.MulOp,)) == 1
    np.testing.assert_allclose(
        nanoir.run(program, x.numpy())[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5
    )


def test_constant_minus_layer_is_not_folded() -> None:
    """``t - conv(x)`` negates the layer: not the ``b - t`` form the fold writes."""
    torch.manual_seed(0)
    model = Affine(torch.nn.Conv2d(3, 4, 1), [("mul", 1.0)]).eval()

    class Flip(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 3.0 - model(x)

    x = torch.randn(1, 3, 4, 4)
    program = nanoir.from_torch(Flip(), (x,))
    nanoir.fold_bn(program)
    np.testing.assert_allclose(
        nanoir.run(program, x.numpy())[0], Flip()(x).detach().numpy(), rtol=1e-5, atol=1e-5
    )


class FrozenBatchNorm2d(torch.nn.Module):
    """torchvision's frozen bn (detection backbones): ``x * scale + shift`` with buffers."""

    def __init__(self, c: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        w, b = torch.rand(c, generator=g) + 0.5, torch.randn(c, generator=g)
        mean, var = torch.randn(c, generator=g), torch.rand(c, generator=g) + 0.5
        scale = w * (var + 1e-5).rsqrt()
        self.register_buffer("scale", scale.reshape(1, -1, 1, 1))
        self.register_buffer("shift", (b - mean * scale).reshape(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.shift


def test_frozen_batch_norm_folds_and_quantize_sees_one_layer() -> None:
    """Through ``nanoir.quantize`` (which folds): one conv, no affine op, nq == nh."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), FrozenBatchNorm2d(8, 1), torch.nn.ReLU()
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    program = nanoir.from_torch(model, (x,))
    nanoir.quantize(program, [x.numpy()])
    assert count(program, AFFINE_OPS) == 0
    assert count(program, (nf.ConvOp,)) == 1
    hw = nanoir.lower_to_hw(program.clone())
    np.testing.assert_array_equal(nanoir.run(hw, x.numpy())[0], nanoir.run(program, x.numpy())[0])
