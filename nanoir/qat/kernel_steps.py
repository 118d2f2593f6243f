"""QAT steps whose forward value is nanoir's own NumPy kernel (``runtime/nf.py``, so
``convert`` is bit for bit) and whose gradient is torch's autograd of the same function
written in torch: the ``nf.unary`` family, comparisons, selection, reductions, arg
reductions, prefix sums, x2 bilinear and bicubic upsampling, zero upsampling, embedding.

Why the value is not torch's: torch and NumPy round transcendental and interpolating
arithmetic differently in the last bit, and the nq program runs nanoir's kernel. An op's
result is a fake-quant's input in QAT, so ``nf.unary`` computes its quantized semantics
(the nearest point of its domain outside it, never NaN; ``unary.quantized_values``).
Comparisons and arg reductions are piecewise constant: no gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.qat.quantizer import QATError
from nanoir.runtime.nf import NF_BUILDERS
from nanoir.runtime.numerics import unary as unary_numerics

__all__ = ["KERNEL_STEPS", "TORCH_UNARY", "kernel_step"]

Step = Callable[..., tuple[torch.Tensor, ...]]
TorchFn = Callable[..., torch.Tensor]


class _KernelForward(torch.autograd.Function):
    """Value from a NumPy function of all inputs, gradient (to each float input that needs
    one) from a torch function of them; none without one (piecewise constant ops)."""

    @staticmethod
    def forward(ctx: Any, np_fn: Any, torch_fn: Any, *xs: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(*xs)
        ctx.torch_fn = torch_fn
        y = np_fn(*[x.detach().cpu().numpy() for x in xs])
        dtype = next((x.dtype for x in xs if x.is_floating_point()), torch.float32)
        out = torch.from_numpy(np.ascontiguousarray(y)).to(dtype)
        if torch_fn is None:
            ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        xs = ctx.saved_tensors
        grads: list[Any] = [None] * len(xs)
        wanted = [i for i, x in enumerate(xs) if ctx.needs_input_grad[2 + i]]
        if ctx.torch_fn is None or not wanted:
            return (None, None, *grads)
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(i in wanted) for i, x in enumerate(xs)]
            y = ctx.torch_fn(*leaves)
            if not y.requires_grad:  # (only a selection's condition asked: none)
                return (None, None, *grads)
            found = torch.autograd.grad(y, [leaves[i] for i in wanted], g, allow_unused=True)
        for i, d in zip(wanted, found):  # (outside a domain torch's derivative is NaN)
            grads[i] = None if d is None else torch.nan_to_num(d, nan=0.0)
        return (None, None, *grads)


def kernel_step(op: Any, torch_fn: TorchFn | None, np_fn: Any = None) -> Step:
    """The step of ``op``: nanoir's kernel for it (or ``np_fn``), ``torch_fn`` for the
    gradient."""
    if np_fn is None:
        kernel = NF_BUILDERS[type(op)](op, np.dtype(np.float64))
        np_fn = lambda *xs: kernel(*xs)[0]  # noqa: E731
    return lambda *xs: (_KernelForward.apply(np_fn, torch_fn, *xs),)


TORCH_UNARY: dict[str, TorchFn] = {
    **{
        name: getattr(torch, name)
        for name in (
            "abs",
            "neg",
            "sign",
            "floor",
            "ceil",
            "round",
            "trunc",
            "frac",
            "exp",
            "exp2",
            "expm1",
            "log",
            "log2",
            "log10",
            "log1p",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "sin",
            "cos",
            "tan",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "asinh",
            "acosh",
            "atanh",
            "sinc",
            "erf",
            "erfc",
            "lgamma",
            "i0",
        )
    },  # fmt: skip
    "logit": torch.logit,
    "logit_eps": lambda x, eps: torch.logit(x, eps),
    "celu": lambda x, alpha: F.celu(x, alpha),
    "hardshrink": lambda x, lambd: F.hardshrink(x, lambd),
    "softshrink": lambda x, lambd: F.softshrink(x, lambd),
    "threshold": lambda x, threshold, value: F.threshold(x, threshold, value),
    "round_decimals": lambda x, d: torch.round(x, decimals=int(d)),
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "pow": torch.pow,
    "scalar_pow": lambda x, base: torch.pow(base, x),
    "mish": F.mish,
    "softplus": lambda x, beta, threshold: F.softplus(x, beta, threshold),
    "elu": lambda x, alpha, scale, input_scale: torch.ops.aten.elu(x, alpha, scale, input_scale),
    "selu": F.selu,
    "log_sigmoid": F.logsigmoid,
    "tanhshrink": F.tanhshrink,
    "softsign": F.softsign,
}
"""``nf.unary``'s functions (``unary.FUNCTIONS``) as torch computes them, for the gradient;
a function missing here is refused by name when QAT builds its step."""


def _unary(op: nf.UnaryOp) -> Step:
    fn, params = op.fn.data, tuple(op.param_values())
    if fn not in TORCH_UNARY:
        raise QATError(f"nanoir.qat: nf.unary {fn!r} has no torch gradient here")
    torch_fn = TORCH_UNARY[fn]
    return kernel_step(
        op,
        lambda x: torch_fn(x, *params),
        lambda x: unary_numerics.quantized_values(fn, np.asarray(x, np.float64), params),
    )


def _reduce(op: nf.ReduceOp) -> Step:
    kind, dims = op.kind.data, tuple(array_values(op.dims) or ())

    def torch_fn(x: torch.Tensor) -> torch.Tensor:
        if kind == "sum":
            return x.sum(dims, keepdim=True)
        if kind == "max":
            return x.amax(dims, keepdim=True)
        if kind == "min":
            return x.amin(dims, keepdim=True)
        for d in dims:  # prod: one dim at a time (torch's prod takes one)
            x = x.prod(d, keepdim=True)
        return x

    return kernel_step(op, torch_fn)


def _cumsum(op: nf.CumsumOp) -> Step:
    (dim,) = array_values(op.dims) or (0,)
    return kernel_step(op, lambda x: torch.cumsum(x, dim))


def _resize(op: nf.UpsampleBilinearOp | nf.UpsampleBicubicOp) -> Step:
    """x2 linear or cubic upsampling of the doubled dims (half-pixel, edges repeated):
    ``F.interpolate`` to the result's size (a kept dim maps onto itself) on 2 spatial dims,
    a 1-D signal as one row; 3 for linear (trilinear)."""
    out = tuple(nf.tensor_shape(op.result)[2:])
    cubic = isinstance(op, nf.UpsampleBicubicOp)
    if len(out) not in ((1, 2) if cubic else (1, 2, 3)):
        raise QATError(f"nanoir.qat: {op.name} of {len(out)} spatial dims has no torch step")
    mode = "bicubic" if cubic else ("bilinear", "bilinear", "trilinear")[len(out) - 1]

    def torch_fn(x: torch.Tensor) -> torch.Tensor:
        if len(out) == 1:  # (one row: its height maps onto itself)
            y = F.interpolate(x.unsqueeze(2), size=(1, *out), mode=mode, align_corners=False)
            return y.squeeze(2)
        return F.interpolate(x, size=out, mode=mode, align_corners=False)

    return kernel_step(op, torch_fn)


def _upsample_zero(op: nf.UpsampleZeroOp) -> Step:
    out, offsets = nf.tensor_shape(op.result)[2:], array_values(op.offsets) or ()

    def torch_fn(x: torch.Tensor) -> torch.Tensor:
        y = x.new_zeros((*x.shape[:2], *out))
        picks = [slice(o, None, n // m) for o, n, m in zip(offsets, out, x.shape[2:])]
        y[(Ellipsis, *picks)] = x
        return y

    return kernel_step(op, torch_fn)


KERNEL_STEPS: dict[type, Callable[[Any], Step]] = {
    nf.UnaryOp: _unary,
    nf.CompareOp: lambda op: kernel_step(op, None),
    nf.ArgReduceOp: lambda op: kernel_step(op, None),
    nf.WhereOp: lambda op: kernel_step(op, lambda c, a, b: torch.where(c != 0, a, b)),
    nf.ReduceOp: _reduce,
    nf.CumsumOp: _cumsum,
    nf.UpsampleBilinearOp: _resize,
    nf.UpsampleBicubicOp: _resize,
    nf.UpsampleZeroOp: _upsample_zero,
    nf.EmbeddingOp: lambda op: kernel_step(op, lambda i, t: F.embedding(i.long(), t)),
}
"""The steps of this module by op class (``steps.build_step`` reads it)."""
