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
fake-quant, a per-tensor one moved by data movement, or a channel concat of fake-quants,
parameters that are not one per channel, no
affine that fits), so does the module.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import torch
from xdsl.ir import Operation

from nanoir.dialects import nf
from nanoir.dialects.traits import DataMovement
from nanoir.lowering.quantize import aligned_bits, dyadic_affine

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
    """The BN input's code exponents per channel and bits at this forward, as
    ``batch_norm.input_grid`` reads them from the converted program: the input's own
    quantizer (a per-tensor one also through data movement, e.g. a reshape), or a channel
    concat's parts' (per-tensor parts aligned to the finest), as
    applied; None where quantize would not rewrite the BN (its output not quantized)."""
    channels = nf.tensor_shape(op.input)[1]
    concat = op.input.owner if isinstance(op.input.owner, nf.ConcatOp) else None
    parts: list[Any] = [op.input]
    moved = False
    if concat is not None and concat.axis.value.data % len(nf.tensor_shape(concat.result)) == 1:
        parts = list(concat.inputs)
    elif concat is not None:
        parts = []
    else:  # a quantized value moved by data movement (a reshape): per-tensor exponents only
        v = op.input
        while (
            module.targets.get(v) is None
            and isinstance(v.owner, Operation)
            and v.owner.has_trait(DataMovement)
            and not isinstance(v.owner, nf.ConcatOp)
            and v.owner.operands
        ):
            v, moved = v.owner.operands[0], True
        parts = [v]
    keys: list[str | None] = []

    def grid() -> tuple[np.ndarray, int] | None:
        if out_slot not in module.quant_of or not parts:
            return None
        if not keys:  # (the quantizers exist once the module is built)
            keys.extend(_key_of(module, v) for v in parts)
        found = []
        for v, key in zip(parts, keys):
            q = None if key is None else module.quantizers[key]
            if q is None or q.last_k is None or q.bits < 2:
                return None
            k = q.last_k.reshape(-1).long().cpu().numpy().astype(np.int64)
            n = channels if moved else nf.tensor_shape(v)[1]
            if k.size not in (1, n) or (moved and k.size != 1):
                return None
            found.append((np.broadcast_to(k, (n,)).copy(), q.bits + (0 if q.signed else 1), k.size))
        if len(found) > 1 and all(size == 1 for _, _, size in found):
            target = max(int(k[0]) for k, _, _ in found)
            bits = max(aligned_bits(b, target - int(k[0])) for k, b, _ in found)
            return np.full(channels, target, dtype=np.int64), bits
        return np.concatenate([k for k, _, _ in found]), max(b for _, b, _ in found)

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
