"""A lone batch norm in the QAT module: the dyadic affine ``quantize`` gives it.

``quantize`` rewrites a batch norm that fold-bn could not fold (after a concat) into a dyadic
affine that lower-to-hw always lowers (:mod:`nanoir.lowering.quantize.batch_norm`), from the
fake-quantized parameters and the input's grid; ``nanoir.qat.convert`` does the same on the
module's exponents. So the module computes that affine too: at every forward, from the
parameters as fake-quantized at this step and the input quantizers' exponents as applied,
``A = g / sqrt(v + eps)`` and ``B = b - m A`` (float64, as the nq kernel), then
``batch_norm.dyadic_affine``'s ``A' = M 2**-e`` and ``B' = N 2**-(x + e)``, and
``y = x A' + B'``. The gradient is the float BN's (straight through the rounding of ``A``
and ``B``). Where ``quantize`` would leave the BN as it is (an input that is not a
fake-quant, a per-tensor one moved by data movement, a split's part or a channel concat of
those; parameters that are not one per channel, no affine that fits), so does the module.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import torch

from nanoir.dialects import nf
from nanoir.lowering.quantize import bn_input_grid, dyadic_affine

__all__ = ["BatchNormStep", "input_grid"]

Grid = Callable[[], tuple[np.ndarray, int] | None]


class Quantizers(Protocol):
    """What a BN step reads of the module that owns the quantizers (a ``QATModule``): the
    targets by value, the quantizers by key, and each quantized value's key by slot."""

    targets: Mapping[Any, Any]
    quantizers: Any
    quant_of: Mapping[int, str]


class BatchNormStep:
    """``nf.batch_norm``: the float BN, or, with ``grid`` (set by the module that owns the
    quantizers) giving the input's per-channel code exponents and bits, the dyadic affine."""

    def __init__(self, op: nf.BatchNormOp):
        self.eps = op.epsilon.value.data
        self.grid: Grid | None = None

    def __call__(
        self, x: torch.Tensor, scale: Any, bias: Any, mean: Any, var: Any
    ) -> tuple[torch.Tensor]:
        a = scale / torch.sqrt(var + self.eps)
        shift = bias - mean * a
        grid = None if self.grid is None else self.grid()
        if grid is not None and all(t.numel() == len(grid[0]) for t in (scale, bias, mean, var)):
            snapped = _snapped(scale, bias, mean, var, self.eps, *grid)
            if snapped is not None:
                sa, sb = (torch.from_numpy(v).to(a.dtype).to(a.device) for v in snapped)
                a = a + (sa - a).detach()  # straight through the rounding of A and B
                shift = shift + (sb - shift).detach()
        spread = (x.shape[1],) + (1,) * (x.dim() - 2)
        return (x * a.reshape(spread) + shift.reshape(spread),)


def _snapped(
    scale: torch.Tensor,
    bias: torch.Tensor,
    mean: torch.Tensor,
    var: torch.Tensor,
    eps: float,
    x_exps: np.ndarray,
    x_bits: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(A', B')`` as ``batch_norm.make_dyadic`` computes them, or None."""
    g, b, m, v = (t.detach().cpu().double().reshape(-1).numpy() for t in (scale, bias, mean, var))
    with np.errstate(all="ignore"):
        a = g / np.sqrt(v + eps)  # the nq kernel's own float64 steps
        shift = b - m * a
    found = dyadic_affine(a, shift, x_exps, x_bits)
    if found is None:
        return None
    e, mm, nn_ = found
    return np.ldexp(mm, -e), np.ldexp(nn_, -(x_exps + e))


def input_grid(module: Quantizers, op: nf.BatchNormOp, in_slot: int, out_slot: int) -> Grid:
    """The BN input's code exponents per channel and bits at this forward, as quantize's
    ``bn_input_grid`` reads them from the converted program (through splits, channel concats
    and, per tensor, any other data movement), on the quantizers' exponents as applied; None
    where quantize would not rewrite the BN (its output not quantized)."""
    keys: dict[Any, str | None] = {}

    def leaf(value: Any) -> tuple[np.ndarray, int] | None:
        if value not in keys:  # (the quantizers exist once the module is built)
            keys[value] = _key_of(module, value)
        key = keys[value]
        if key is None:
            return None
        q = module.quantizers[key]
        if q.last_k is None or q.bits < 2:
            return np.zeros(1, np.int64), 0
        k = q.last_k.reshape(-1).long().cpu().numpy().astype(np.int64)
        return k, q.bits + (0 if q.signed else 1)

    def grid() -> tuple[np.ndarray, int] | None:
        if out_slot not in module.quant_of:
            return None
        return bn_input_grid(op, leaf)

    return grid


def _key_of(module: Quantizers, value: Any) -> str | None:
    """The key of the quantizer of ``value``'s target, if it has one."""
    t = module.targets.get(value)
    if t is None:
        return None
    for key, q in module.quantizers.items():
        if q.name == t.name:
            return key
    return None
