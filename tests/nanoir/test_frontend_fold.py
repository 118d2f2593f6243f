"""The frontend folds every input-independent subgraph at import (nanoir/frontend/fold.py).

A property test draws random op chains over constants and static dims (arange, pow, sin, cos,
cumsum, repeat, expand, cat, stack, eq, where, masked_fill, arithmetic, casts, type_as,
zeros_like, reshape, permute, slicing, indexing) feeding one input-dependent op, and checks
that nanoir's program equals eager torch bit for bit and holds nothing but constants and that
op: a special case for one op (``arange`` alone) fails it. Then: a subgraph that depends on
the dynamic batch size is refused naming the dim (and folds with ``dynamic_batch=False``);
refusals of input-independent ops say so; random ops fold only when they do not draw;
the fold limits refuse before allocating.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import nanoir
from nanoir.frontend import FrontendError
from nanoir.frontend.fold import Dependence, FoldLimits, fold_program
from nanoir.frontend.torch_import import export
from nanoir.testing.programs import examples

torch.set_num_threads(1)

# -- the random chains ----------------------------------------------------------------------

Op = tuple[str, int, float]
"""An op of a chain: its kind, an integer parameter (a dim, mostly) and a float one."""


def _dim(v: torch.Tensor, k: int) -> int:
    return k % max(v.ndim, 1)


def _float(v: torch.Tensor) -> torch.Tensor:
    return v if v.is_floating_point() else v.float()


STEPS: dict[str, Callable[[torch.Tensor, torch.Tensor, int, float], torch.Tensor]] = {
    "sin": lambda v, x, k, f: _float(v).sin(),
    "cos": lambda v, x, k, f: torch.cos(_float(v) * f),
    "pow_scalar_base": lambda v, x, k, f: torch.pow(100.0, _float(v) / (k + 8)),
    "pow_tensor": lambda v, x, k, f: _float(v) ** 2,
    "cumsum": lambda v, x, k, f: v.cumsum(_dim(v, k)),
    "repeat": lambda v, x, k, f: v.repeat(*[2 if i == _dim(v, k) else 1 for i in range(v.ndim)]),
    "expand": lambda v, x, k, f: v.unsqueeze(0).expand(2, *v.shape),
    "cat": lambda v, x, k, f: torch.cat([v, v * 2], _dim(v, k)),
    "stack": lambda v, x, k, f: torch.stack([v, v + 1], k % (v.ndim + 1)),
    "eq_type_as": lambda v, x, k, f: v.eq(v.reshape(-1)[k % v.numel()]).type_as(x),
    "where": lambda v, x, k, f: torch.where(v > v.reshape(-1)[k % v.numel()], v, v * f),
    "masked_fill": lambda v, x, k, f: _float(v).masked_fill(v.eq(v.reshape(-1)[0]), f),
    "add": lambda v, x, k, f: v + f,
    "sub_rsub": lambda v, x, k, f: 3 - v * f,
    "mul": lambda v, x, k, f: v * f,
    "div": lambda v, x, k, f: _float(v) / (k + 1.5),
    "floor_divide": lambda v, x, k, f: v // (k + 2),
    "to_long": lambda v, x, k, f: v.long(),
    "to_float": lambda v, x, k, f: v.float(),
    "to_double": lambda v, x, k, f: v.to(torch.float64),
    "zeros_like": lambda v, x, k, f: torch.zeros_like(v) + v * f,
    "ones_like_cumsum": lambda v, x, k, f: torch.ones_like(v).cumsum(_dim(v, k)),
    "reshape_flat": lambda v, x, k, f: v.reshape(-1),
    "reshape_pair": lambda v, x, k, f: v.reshape(-1, 2) if v.numel() % 2 == 0 else v,
    "permute": lambda v, x, k, f: v.permute(*reversed(range(v.ndim))),
    "transpose": lambda v, x, k, f: v.transpose(0, -1) if v.ndim >= 2 else v,
    "slice_step": lambda v, x, k, f: v[..., ::2] if v.shape[-1] > 1 else v,
    "flip": lambda v, x, k, f: v.flip(_dim(v, k)),
    "index": lambda v, x, k, f: v[torch.tensor([k % v.shape[0], 0])],
    "clamp": lambda v, x, k, f: v.clamp(min=-f, max=k + f),
}

STARTS: dict[str, Callable[[nn.Module, int, int], torch.Tensor]] = {
    "arange": lambda m, t, c: torch.arange(t * c).reshape(t, c),
    "arange_float_step": lambda m, t, c: torch.arange(0, t, 0.5, dtype=torch.float32),
    "position_ids": lambda m, t, c: torch.arange(t).unsqueeze(1),
    "ones": lambda m, t, c: torch.ones(1, t, c),
    "zeros_full": lambda m, t, c: torch.zeros(t, c) + torch.full((c,), 0.5),
    "parameter": lambda m, t, c: m.p,
    "buffer": lambda m, t, c: m.ids,
}


Chain = tuple[str, list[Op], str]
"""A start, the ops after it, and how the result meets the input (add, mul, add_uncast)."""


class Chains(nn.Module):
    """One output per chain: ``x (op) f(constants)``, ``f`` the drawn chain, its result laid
    out as ``[T, C]`` (cast to x's dtype, or not: ``add_uncast`` adds an integer, bool or
    float32 one as it is). Several chains share one torch.export, the test's cost."""

    def __init__(self, chains: list[Chain], t: int, c: int):
        super().__init__()
        self.chains, self.t, self.c = chains, t, c
        gen = torch.Generator().manual_seed(t * 31 + c)
        self.p = nn.Parameter(torch.randn(t, c, generator=gen, dtype=torch.float64))
        self.register_buffer("ids", torch.randint(0, 5, (t, c), generator=gen))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.chain(x, *chain) for chain in self.chains)

    def chain(self, x: torch.Tensor, start: str, ops: list[Op], final: str) -> torch.Tensor:
        v = STARTS[start](self, self.t, self.c)
        for kind, k, f in ops:
            v = STEPS[kind](v, x, k, f)
        flat = v.reshape(-1)
        if final != "add_uncast":
            flat = flat.to(x.dtype)
        need = self.t * self.c
        if flat.numel() < need:
            flat = flat.repeat(math.ceil(need / flat.numel()))
        pe = flat[:need].reshape(self.t, self.c)
        return x * pe if final == "mul" else x + pe


chain_strategy = st.tuples(
    st.sampled_from(sorted(STARTS)),
    st.lists(
        st.tuples(
            st.sampled_from(sorted(STEPS)),
            st.integers(0, 5),
            st.sampled_from([0.5, -1.25, 2.0, 3.0]),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["add", "mul", "add_uncast"]),
)


def _body_ops(module: Any) -> list[str]:
    func = next(iter(module.ops))
    return [op.name for op in func.body.block.ops]


@settings(max_examples=examples(10), deadline=None)
@given(
    st.lists(chain_strategy, min_size=1, max_size=4),
    st.integers(2, 4),
    st.sampled_from([2, 4]),
    st.integers(0, 2**16),
)
def test_random_input_independent_chains_fold_to_eager_torch(
    chains: list[Chain], t: int, c: int, seed: int
) -> None:
    """Any input-independent chain folds into one constant: the program is constants and
    one input-dependent op per chain, and its results equal eager torch bit for bit
    (float64, the model's dtype; each chain computes in its own dtypes, as torch ran it).
    Kills: a fold special-cased to ``arange`` (the other ops stay and are refused); the
    dependence analysis treating ``type_as(x)`` as reading x's values (refused); a folded
    float32 constant added to the float64 input as float32 (not materialised in its
    consumer's float type)."""
    model = Chains(chains, t, c).eval()
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((2, t, c)))
    with torch.no_grad():
        expected = [y.numpy() for y in model(x)]
    module = nanoir.from_torch(model, (x,))
    ops = _body_ops(module)
    assert set(ops) <= {"nf.constant", "nf.add", "nf.mul", "func.return"}
    assert len(ops) - ops.count("nf.constant") - 1 == len(chains)
    actual = nanoir.run(module, x.numpy(), dtype=np.float64)
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(a, e)


class Float32Sums(nn.Module):
    """A float32 running sum of 0.1 steps: float32 accumulation differs from float64's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (torch.arange(1, 2001, dtype=torch.float32) * 0.1).cumsum(0)


def test_the_fold_computes_in_the_dtypes_torch_recorded() -> None:
    """The folded constant is what eager torch computes in float32, bit for bit. Kills: each
    node run in float64 and its result cast back (the sums round differently)."""
    x, model = torch.zeros(2, 2000), Float32Sums()
    (y,) = nanoir.run(nanoir.from_torch(model, (x,)), x.numpy())
    np.testing.assert_array_equal(y, model(x).numpy())


class BatchArange(nn.Module):
    """Position ids over the batch dim: known only at run time with a dynamic batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.arange(x.shape[0]).unsqueeze(1).sin().to(x.dtype)


def test_a_dynamic_dim_is_named_and_static_folds() -> None:
    """``torch.arange(x.shape[0])`` under the dynamic batch is refused naming dim 0 of input
    'x', saying the op is input-independent otherwise and offering dynamic_batch=False,
    which then folds it. Kills: sym_size counted as a constant (the fold would bake the
    example's batch into the program); the message losing the dim."""
    x = torch.randn(3, 4)
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(BatchArange(), (x,))
    text = str(info.value)
    assert "aten.arange" in text and "dim 0 of input 'x'" in text
    assert "dynamic_batch=False" in text and "input-independent except for the size" in text
    module = nanoir.from_torch(BatchArange(), (x,), dynamic_batch=False)
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_array_equal(y, BatchArange()(x).numpy())


class StaticArange(nn.Module):
    """``torch.arange(x.shape[1])``: dim 1 is static, so this folds under the dynamic batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.arange(x.shape[1], device=x.device).to(x.dtype)


def test_a_static_dim_folds_under_the_dynamic_batch() -> None:
    """Kills: every sym-free arange refused (the batch stays dynamic in the result type)."""
    module = nanoir.from_torch(StaticArange(), (torch.randn(2, 5),))
    assert "?x5" in str(module)
    x = torch.randn(7, 5)
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_array_equal(y, StaticArange()(x).numpy())


class BatchFills(nn.Module):
    """Fills whose shape holds the dynamic batch: a mask of ones over ``[N, T]``, and
    ``*_like`` / ``new_*`` of the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(x.shape[0], x.shape[1])
        twos = torch.ones_like(x) + torch.full_like(x, 1.0)
        return x * mask.unsqueeze(-1) + twos * x.new_ones(x.shape[0], 1, x.shape[2])


def test_fills_of_the_dynamic_batch_expand_a_constant() -> None:
    """A fill that depends on the batch size only through its shape is a constant expanded
    to the batch (nf.expand with the input as the size source), equal to torch at another
    batch size. Kills: the fill handlers removed (refused: input-independent except for the
    size of dim 0 of input 'x')."""
    module = nanoir.from_torch(BatchFills(), (torch.randn(2, 3, 4),))
    assert "nf.expand" in str(module)
    x = torch.randn(5, 3, 4)
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_array_equal(y, BatchFills()(x).numpy())


BATCH_STEPS: dict[str, Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]] = {
    "sin": lambda v, x, k: _float(v).sin(),
    "cos_pow": lambda v, x, k: torch.pow(10.0, _float(v) / 8).cos(),
    "cumsum": lambda v, x, k: v.cumsum(1 + k % (v.ndim - 1)),
    "cat": lambda v, x, k: torch.cat([v, v * 2], 1 + k % (v.ndim - 1)),
    "stack": lambda v, x, k: torch.stack([v, v + 1], 1 + k % v.ndim),
    "where": lambda v, x, k: torch.where(v > k, v, -v),
    "masked_fill": lambda v, x, k: _float(v).masked_fill(v.eq(1), 0.5),
    "type_as": lambda v, x, k: v.type_as(x) * 3,
    "flip": lambda v, x, k: v.flip(1 + k % (v.ndim - 1)),
    "transpose": lambda v, x, k: v.transpose(1, -1),
    "slice": lambda v, x, k: v[:, ::2] if v.shape[1] > 1 else v,
    "permute": lambda v, x, k: v.permute(0, *reversed(range(1, v.ndim))),
    "unsqueeze_view": lambda v, x, k: v.unsqueeze(1).view(v.shape[0], *v.shape[1:]),
}
"""Steps that keep each sample to itself (along dims other than 0), for batch-built values."""


class BatchChain(nn.Module):
    """``x + f(ones(B, T, C)...)``: a value built for the batch (``repeat`` or a fill of
    ``x.shape[0]``), then the drawn steps, then laid out as ``[B, T, C]``."""

    def __init__(self, start: str, ops: list[tuple[str, int]]):
        super().__init__()
        self.start, self.ops = start, ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        if self.start == "repeat":
            v = torch.arange(t * c).view(1, t, c).repeat(b, 1, 1)
        elif self.start == "fill":
            v = torch.ones(b, t, c).cumsum(2)
        else:
            v = torch.zeros_like(x, dtype=torch.bool).logical_not().cumsum(1)
        for kind, k in self.ops:
            v = BATCH_STEPS[kind](v, x, k)
        flat = v.reshape(b, -1).to(x.dtype)
        need = t * c
        if flat.shape[1] < need:
            flat = flat.repeat(1, math.ceil(need / flat.shape[1]))
        return x + flat[:, :need].reshape(b, t, c)


@settings(max_examples=examples(8), deadline=None)
@given(
    st.sampled_from(["repeat", "fill", "zeros_like"]),
    st.lists(st.tuples(st.sampled_from(sorted(BATCH_STEPS)), st.integers(0, 3)), max_size=4),
)
def test_values_built_for_the_batch_fold_at_batch_one(
    start: str, ops: list[tuple[str, int]]
) -> None:
    """What reads the batch size only to replicate itself folds at batch one and is expanded
    to the batch: the program is constants, expands, reshapes/slices and one add, and equals
    eager torch at batch 1 bit for bit, and at batch 3 to 1e-6: torch's own float32 sin, cos
    and pow differ by an ulp between a sample at batch 1 and the same sample at batch 3 (its
    vectorized loop and its scalar tail; three ``cos_pow`` steps, drawn by the explore
    profile). Kills: sample_local ignoring its dims (a cumsum along the batch would fold); the
    batch-one value not expanded (wrong shape at batch 3)."""
    model = BatchChain(start, ops)
    module = nanoir.from_torch(model, (torch.randn(2, 3, 4),))
    assert {"nf.unary", "nf.cumsum", "nf.where", "nf.concat"}.isdisjoint(_body_ops(module))
    for batch in (3, 1):
        x = torch.randn(batch, 3, 4)
        (y,) = nanoir.run(module, x.numpy())
        want = model(x).numpy()
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=0, atol=0 if batch == 1 else 1e-6)


class AlongTheBatch(nn.Module):
    """A cumsum along the batch of a batch-repeated constant: not the same for every
    sample, so not folded (mapped as run-time ops, or refused)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(1, 4).repeat(x.shape[0], 1).cumsum(0)


def test_what_varies_along_the_batch_is_not_folded_at_batch_one() -> None:
    """Kills: a cumsum along dim 0 taken as sample-local (folded at batch one, every row
    would be 1)."""
    try:
        module = nanoir.from_torch(AlongTheBatch(), (torch.randn(2, 4),))
    except FrontendError as e:
        assert "dim 0 of input 'x'" in str(e)
        return
    x = torch.randn(3, 4)
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_array_equal(y, AlongTheBatch()(x).numpy())


class Dropout(nn.Module):
    """dropout of a constant in eval mode is deterministic (tagged random by torch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.dropout(torch.arange(4.0), 0.5, training=False).sin()


class Random(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(4).sin()


def test_random_ops_fold_only_when_they_do_not_draw() -> None:
    """A random op (``nondeterministic_seeded``) runs twice with different seeds: folded when
    both agree (dropout in eval mode), else refused saying so. Kills: the seeds made equal
    (torch.rand would fold into one draw, a silent wrong program)."""
    x = torch.randn(2, 4)
    module = nanoir.from_torch(Dropout(), (x,))
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_array_equal(y, Dropout()(x).numpy())
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(Random(), (x,))
    assert "aten.rand" in str(info.value) and "is random" in str(info.value)


class Huge(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(4096, 4096).cumsum(0).sum(0)[:4]


def test_fold_limits_refuse_before_allocating() -> None:
    """A result larger than the limit is not folded (and, with no handler, refused naming the
    limit); the check reads the recorded shapes, so nothing is allocated. Kills: the limit
    checked after running the op."""
    program = export(Huge(), (torch.randn(2, 4),))
    fold = fold_program(program, FoldLimits(per_result=1 << 20, total=1 << 22))
    ones = next(n for n in program.graph.nodes if str(n.target) == "aten.ones.default")
    assert fold.dependence[ones] == Dependence.CONSTANT and ones not in fold.folded
    assert "more than the 1048576" in fold.unfolded[ones]
    why = fold.why_not_folded(ones)
    assert why is not None and why.startswith("input-independent, but not folded")


def test_a_fill_past_the_limits_is_refused_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: the fill the fold left (over a lowered limit) is refused with the fold's
    reason, not materialised by its handler. Kills: the fill handler building the static
    fill the fold refused."""
    from nanoir.frontend import fold

    monkeypatch.setattr(fold, "MIN_FOLDED", 1 << 10)
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(Huge(), (torch.randn(2, 4),))
    assert "aten.ones" in str(info.value)
    assert "input-independent, but not folded: its result would hold 16777216" in str(info.value)


class Uninitialised(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.empty(4).sin()


def test_uninitialised_memory_is_not_folded() -> None:
    """``torch.empty`` has no value to fold: refused, naming it and why."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(Uninitialised(), (torch.randn(2, 4),))
    assert "uninitialised memory" in str(info.value)


class FoldedWeight(nn.Module):
    """A weight computed from parameters in ``forward`` (``v * 2`` then a weight norm, a
    transposed weight): folded into the constants the ops read, named after the parameter."""

    def __init__(self):
        super().__init__()
        self.v, self.g = nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.ones(4, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch._weight_norm(self.v * 2.0, self.g, 0).t()


def test_a_weight_computed_in_forward_is_folded_and_named() -> None:
    """Kills: folded constants left unnamed (quantize would then give the weight an
    activation's treatment)."""
    x, model = torch.randn(2, 3), FoldedWeight()
    module = nanoir.from_torch(model, (x,))
    assert _body_ops(module) == ["nf.constant", "nf.matmul", "func.return"]
    assert 'nf.constant "v.t"' in str(module)
    (y,) = nanoir.run(module, x.numpy())
    np.testing.assert_allclose(y, model(x).detach().numpy(), rtol=1e-6, atol=1e-6)
