"""QAT's fake quantizer: the exact fake-quant forward with NanoEngine's straight-through
backward (``fake_quant_value``, an autograd function), and :class:`Quantizer`, one per
fake-quant, holding its exponent learner (``ema``: NanoEngine's moving average of the absolute
maximum; ``lsq``: a learned continuous exponent). The semantics are in ``nanoir.qat``'s
docstring.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from nanoir.errors import ArgumentError, Error
from nanoir.lowering.quantize import checked_bits
from nanoir.qat.distributed import all_reduce_max
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode

__all__ = [
    "EXP_HI",
    "EXP_LO",
    "QATError",
    "Quantizer",
    "fake_quant_value",
    "floor_log2",
    "round_codes",
]

EXP_LO, EXP_HI = quant.CALIB_EXP_RANGE
LN2 = math.log(2.0)


class QATError(ValueError, Error):
    """The model or the options cannot be prepared, trained or converted as asked."""


# --------------------------------------------------------------------------------------------
# The fake-quant function (exact forward, STE backward)
# --------------------------------------------------------------------------------------------


_POW2_LIMIT = 64
_POW2 = {
    dt: torch.tensor([2.0**i for i in range(-_POW2_LIMIT, _POW2_LIMIT + 1)], dtype=dt)
    for dt in (torch.float32, torch.float64)
}
"""Exact powers of two ``2**-64 .. 2**64`` (Python floats), looked up by exponent."""


def _pow2(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``2**k`` for an integer-valued tensor ``|k| <= 64``, exactly (a table lookup, not a
    float exp2)."""
    table = _POW2.get(dtype)
    if table is None:
        table = _POW2[torch.float64].to(dtype)
    return table[k.detach().to(torch.int64) + _POW2_LIMIT]


def tensor_argument(name: str, value: object) -> torch.Tensor:
    """``value`` if it is a float torch tensor, else :class:`ArgumentError` naming ``name``."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        what = (
            f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        )
        raise ArgumentError(f"{name} must be a float torch.Tensor, got {what}")
    return value


def mode_argument(mode: object) -> RoundingMode:
    """``mode`` as a :class:`RoundingMode` (its name is taken too), else :class:`ArgumentError`:
    the rounding is chosen by identity below, so a plain string must not fall through."""
    try:
        return RoundingMode(mode)
    except ValueError:
        raise ArgumentError(
            f"mode must be one of {', '.join(m.value for m in RoundingMode)}, got {mode!r}"
        ) from None


def round_codes(v: torch.Tensor, mode: RoundingMode) -> torch.Tensor:
    """:func:`nanoir.runtime.numerics.quant.round_to_int` in torch: integer-valued, by ``mode``."""
    tensor_argument("v", v)
    mode = mode_argument(mode)
    if mode is RoundingMode.TRUNC:
        return torch.trunc(v)
    if mode is RoundingMode.FLOOR:
        return torch.floor(v)
    if mode is RoundingMode.HALF_EVEN:
        return torch.round(v)
    f = torch.floor(v)  # half_up, as quant.round_to_int: v - floor(v) is exact
    return f + ((v - f) >= 0.5).to(v.dtype)


def fake_quant_value(
    x: torch.Tensor, bits: int, k: torch.Tensor, mode: RoundingMode, signed: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, inside)``: :func:`nanoir.runtime.numerics.quant.fake_quant` in torch, and where the clamp
    left the rounded code unchanged (all True for 1-bit). ``k`` holds integers; ``signed=False``
    clamps to the unsigned codes ``0..2**b-1``."""
    tensor_argument("x", x)
    if not isinstance(k, torch.Tensor):
        raise ArgumentError(f"k must be a torch.Tensor of integers, got {type(k).__name__}")
    mode = mode_argument(mode)
    scale = _pow2(k, x.dtype)
    if bits == 1:
        q = torch.where(x >= 0, scale, -scale)
        return q, torch.ones_like(x, dtype=torch.bool)
    v = x * scale
    codes = round_codes(v, mode)
    if mode is RoundingMode.FLOOR:
        codes = torch.where((x < 0) & (v == 0), -1.0, codes)
    clamped = codes.clamp(
        float(quant.qmin(bits, signed=signed)), float(quant.qmax(bits, signed=signed))
    )
    inside = clamped == codes
    return (clamped + 0.0) / scale, inside  # dividing by a power of two is exact


def _sum_to(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum a broadcast gradient back to ``shape``."""
    while g.dim() > len(shape):
        g = g.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and g.shape[i] != 1:
            g = g.sum(i, keepdim=True)
    return g


class _FakeQuant(torch.autograd.Function):
    """Exact fake-quant forward; STE with clamp mask for ``x``; LSQ gradient for ``k``."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        k: torch.Tensor,
        bits: int,
        mode: RoundingMode,
        clip_1bit: torch.Tensor | None,
        grad_scale: float,
        signed: bool = True,
    ) -> torch.Tensor:
        q, inside = fake_quant_value(x, bits, k, mode, signed)
        if bits == 1:
            bound = 1.0 if clip_1bit is None else clip_1bit.to(x.dtype)
            inside = x.abs() <= bound
        ctx.save_for_backward(x, q, inside)
        ctx.bits, ctx.k_shape, ctx.grad_scale = bits, k.shape, grad_scale
        return q

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        x, q, inside = ctx.saved_tensors
        grad_x = g * inside if ctx.needs_input_grad[0] else None
        grad_k = None
        if ctx.needs_input_grad[1]:
            if ctx.bits == 1:
                dq = LN2 * q
            else:
                dq = -LN2 * torch.where(inside, q - x, q)
            grad_k = _sum_to(g * dq, ctx.k_shape) * ctx.grad_scale
        return grad_x, grad_k, None, None, None, None, None


# --------------------------------------------------------------------------------------------
# Quantizers (one per fake-quant of ``quantize``)
# --------------------------------------------------------------------------------------------


def floor_log2(s: torch.Tensor) -> torch.Tensor:
    """``floor(log2 s)`` for ``s > 0``, exactly (from the binary exponent, as
    :func:`nanoir.runtime.numerics.quant.exp_from_absmax` does)."""
    tensor_argument("s", s)
    _, e = torch.frexp(s)
    return (e - 1).to(s.dtype)


class Quantizer(nn.Module):
    """The fake-quant of one tensor, with its exponent learner (``ema`` or ``lsq``).

    ``exp_shape`` broadcasts against the value without the batch dim (``[1]`` per tensor,
    ``[C, 1, 1, 1]`` for a conv weight, ``[C, 1, 1]`` for a per-channel activation).
    """

    def __init__(
        self,
        name: str,
        kind: str,
        bits: int,
        exp_shape: Sequence[int],
        axis: int | None,
        rounding: RoundingMode,
        learner: str,
        lr: float,
        per_channel_elements: int,
        signed: bool = True,
    ):
        if not isinstance(name, str):
            raise ArgumentError(f"Quantizer: name must be a str, got {type(name).__name__}")
        if kind not in ("act", "weight", "bias", "const"):
            raise ArgumentError(f"Quantizer: kind must be act, weight, bias or const, got {kind!r}")
        bits = checked_bits(bits, f"Quantizer {name!r} asks for {{bits}} bits")
        if learner not in ("ema", "lsq"):
            raise ArgumentError(f"Quantizer: learner must be ema or lsq, got {learner!r}")
        rounding = mode_argument(rounding)
        if not signed and bits == 1:
            raise ArgumentError(f"Quantizer {name!r}: 1-bit codes (±1) have no unsigned form")
        super().__init__()
        self.signed = bool(signed)
        # The largest code's exponent: 2**(b-1) signed, 2**b unsigned (codes 0..2**b-1).
        top = bits if not signed else bits - 1
        self.name, self.kind, self.bits = name, kind, bits
        self.exp_shape, self.axis = tuple(exp_shape), axis
        self.rounding, self.learner, self.lr = rounding, learner, lr
        self.n = max(per_channel_elements, 1)
        if learner == "ema":
            init = 2.0**top if bits > 1 else self.n**-0.5
            self.register_buffer("scale", torch.full(self.exp_shape, init, dtype=torch.float64))
        else:
            init_k = float(top) if bits > 1 else math.floor(math.log2(self.n**-0.5))
            self.exponent = nn.Parameter(torch.full(self.exp_shape, init_k, dtype=torch.float32))
        self.last_k: torch.Tensor | None = None
        """The integer exponents of the latest forward (what a bias cap reads)."""

    def extra_repr(self) -> str:
        return (
            f"{self.name!r}, {self.kind}, bits={self.bits}, shape={list(self.exp_shape)}, "
            f"{self.rounding}, {self.learner}, lr={self.lr}" + ("" if self.signed else ", unsigned")
        )

    # -- exponents -------------------------------------------------------------------------

    def exponents(self) -> torch.Tensor:
        """The current integer exponents (float tensor of integers; a graph for ``lsq``)."""
        if self.learner == "ema":
            return floor_log2(self.scale).clamp(EXP_LO, EXP_HI)
        k = self.exponent
        k = k + (torch.round(k) - k).detach()  # straight-through rounding
        return k.clamp(EXP_LO, EXP_HI)

    def int_exponents(self) -> np.ndarray:
        return self.exponents().detach().cpu().numpy().astype(np.int64).reshape(self.exp_shape)

    @torch.no_grad()
    def set_exponents(self, k: np.ndarray | Sequence[int] | int) -> None:
        """Start from integer exponents ``k`` (ema: ``s = 2**(k + 1/2)``, halfway in log2
        between the exponent's switching points, so the moving average keeps ``k`` until
        the statistics move; lsq: ``e = k``)."""
        kt = torch.as_tensor(np.asarray(k, dtype=np.float64)).reshape(self.exp_shape)
        if self.learner == "ema":
            self.scale.copy_(torch.exp2(kt + 0.5))
        else:
            self.exponent.copy_(kt)

    @torch.no_grad()
    def _update_ema(self, x: torch.Tensor) -> None:
        """NanoEngine's ``DyQuantize._update_scale`` (see the module docstring)."""
        # Unsigned codes cover [0, max]: only the positive part sets the range.
        a = (x.detach().abs() if self.signed else x.detach().clamp(min=0)).to(torch.float64)
        if self.axis is None:
            a = a.amax().reshape(self.exp_shape)
        else:
            dims = [d for d in range(a.dim()) if d != self.axis]
            a = a.amax(dim=dims, keepdim=True) if dims else a
            a = a.reshape(self.exp_shape)
        a = all_reduce_max(a)  # under torch.distributed: every rank's data, one exponent
        t = a.clone() if self.bits == 1 else 2.0 ** (self.bits - (1 if self.signed else 0)) / a
        t = torch.where(t > 2, t * 0.9, t)
        t = torch.where(t < 0.5, t / 0.9, t)
        updated = (1 - self.lr) * self.scale + self.lr * t
        self.scale.copy_(torch.where(a < 1e-6, self.scale, updated))

    # -- forward ---------------------------------------------------------------------------

    def forward(
        self, x: torch.Tensor, cap: torch.Tensor | None = None, tie: np.ndarray | None = None
    ) -> torch.Tensor:
        """Fake-quantize ``x``; ``cap`` (code exponents) bounds a bias's exponents; ``tie``
        (exponents, NaN where free) replaces the learner's exponents where a join rule set
        them (``nanoir.qat.joins``: no gradient flows to the learner there)."""
        if self.learner == "ema" and self.training:
            self._update_ema(x)
        k = self.exponents()
        if tie is not None:
            t = torch.from_numpy(np.asarray(tie, dtype=np.float64)).to(k.dtype).reshape(k.shape)
            k = torch.where(torch.isnan(t), k, t)
        if cap is not None:
            cap = cap.min() if k.numel() == 1 else cap  # as quantize: a per-tensor bias
            k = torch.minimum(k, cap.to(k.dtype).reshape(k.shape))
        self.last_k = k.detach()
        clip = None
        if self.bits == 1 and self.learner == "lsq":
            clip = _pow2(k.detach() + 1, x.dtype)
        qmax = quant.qmax(self.bits, signed=self.signed)
        grad_scale = 1.0 / math.sqrt(self.n * qmax)
        return _FakeQuant.apply(
            x, k.to(x.dtype), self.bits, self.rounding, clip, grad_scale, self.signed
        )
