"""Quantization-aware training (QAT): learnable power-of-two exponents in torch, handed to nq.

    qat = nanoir.qat.prepare(model, (x,), weight_bits=4, rules=("fc.weight=1",))
    nanoir.qat.calibrate(qat, batches)          # exponents start from the PTQ result
    nanoir.qat.train(qat, loader, epochs=15)    # or any torch training loop
    module = nanoir.qat.convert(qat)            # nf + nq.fake_quant; nanoir.run == qat.eval()
    hw = nanoir.lower_to_hw(module.clone())

How it works: :func:`prepare` imports the model with the torch frontend, folds batch norm
(``fold-bn``) and builds a :class:`QATModule`, an ``nn.Module`` that interprets that folded nf
program with torch ops. Its parameters are the program's named constants (the folded weights
and biases, and any other named parameter); the fake-quants sit where
:func:`nanoir.lowering.quantize.find_targets` puts them for the same options, so the placement,
bits, per-channel axes, ``skip`` rules, rounding and the bias exponent cap are ``quantize``'s by
construction (a ``conv_transpose`` weight ``[C, O/g, *K]`` has its exponents per output channel
along axis 1, the same for every group, and its bias cap tiles them per group). :func:`convert` writes the trained constants back into the nf program and runs
``quantize`` with the learned exponents.

**Batch norm** is folded before QAT: the module trains the folded conv/linear weights and
biases, and evaluates the same function in training and eval mode (no batch statistics; the
forward differs only by the exponent learners' updates). This is what the deployed integer
program computes, so there is no train/deploy mismatch; the price is that BN's normalisation
no longer helps the optimiser, which matters little when fine-tuning a trained float net.

**Forward** (the nq semantics, :func:`nanoir.runtime.numerics.quant.fake_quant`): with exponent ``k``,
b > 1: ``clamp(round(x * 2**k), -2**(b-1), 2**(b-1) - 1) / 2**k`` with the rounding mode
(trunc, floor, half_up, half_even); b = 1: ``(x >= 0 ? 1 : -1) * 2**k``. In float64 every
operation is exact where ``nanoir.run`` is exact, so ``qat.eval()(x.double())`` equals
``nanoir.run(convert(qat), x)`` bit for bit. Ops the exactness does not cover (``sigmoid``,
``tanh``: transcendental) take their forward value from nanoir's own NumPy kernel (the
gradient is torch's).

**Backward**: values pass straight through (STE) with NanoEngine's mask: b > 1, where the
clamp did not change the rounded code; b = 1, where ``|x| <= 1`` (NanoEngine's rule; the
``lsq`` learner uses ``|x| <= 2**(k+1)``, which follows the scale).

**Exponent learners**, per tensor and per rule (``learner=`` and ``lr=`` options, or
``/ema:LR``, ``/lsq:LR`` in a rule; see :class:`~nanoir.lowering.quantize.QuantRule`):

- ``ema`` (NanoEngine's ``DyQuantize``): a float scale ``s`` per tensor or channel, exponent
  ``k = floor(log2 s)``. Init: b > 1, ``s = 2**(b-1)``; b = 1, ``s = n**-0.5`` with ``n`` the
  elements per channel. Each training forward, before quantizing: ``a = absmax`` (per channel
  over the other dims, batch included, or global), target ``t = 2**(b-1) / a`` (b > 1) or
  ``t = a`` (b = 1); ``t *= 0.9`` where ``t > 2``, ``t /= 0.9`` where ``t < 0.5``;
  ``s = (1 - lr) s + lr t`` except where ``a < 1e-6`` (kept). No gradient.
- ``lsq`` (learned): a continuous exponent parameter ``e`` (``-log2`` of the step; b = 1:
  ``log2`` of the magnitude), ``k = round(e)`` with a straight-through gradient, and the LSQ
  gradient of the fake-quant with respect to ``k``: b > 1, ``-ln2 (q - x)`` inside the range and
  ``-ln2 q`` where clamped; b = 1, ``ln2 q``; scaled by LSQ's ``1 / sqrt(n qmax)``. ``lr`` is the
  learning rate of ``e`` in :meth:`QATModule.param_groups` (and :func:`train`).

Exponents are clamped to ``CALIB_EXP_RANGE`` (-60..60), as ``quantize`` does.

Imports torch (the ``torch`` extra); ``import nanoir`` does not import this module.
Abbreviations: ema = exponential moving average, lsq = learned step size quantization
(Esser et al. 2020), ste = straight-through estimator, ptq = post-training quantization.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    ModuleOp,
    TensorType,
)
from xdsl.dialects.func import ReturnOp
from xdsl.ir import OpResult, SSAValue

from nanoir.context import make_context
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import FakeQuantOp
from nanoir.errors import Error
from nanoir.frontend import from_torch
from nanoir.lowering import quantize as qz
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.runtime.interpreter import find_function
from nanoir.runtime.nf import NF_BUILDERS
from nanoir.runtime.numerics import kernels, quant
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import window_params

__all__ = [
    "QATError",
    "QATModule",
    "Quantizer",
    "calibrate",
    "convert",
    "evaluate",
    "export_exponents",
    "float_program",
    "prepare",
    "save_exponents",
    "train",
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


def round_codes(v: torch.Tensor, mode: RoundingMode) -> torch.Tensor:
    """:func:`nanoir.runtime.numerics.quant.round_to_int` in torch: integer-valued, by ``mode``."""
    if mode is RoundingMode.TRUNC:
        return torch.trunc(v)
    if mode is RoundingMode.FLOOR:
        return torch.floor(v)
    if mode is RoundingMode.HALF_EVEN:
        return torch.round(v)
    f = torch.floor(v)  # half_up, as quant.round_to_int: v - floor(v) is exact
    return f + ((v - f) >= 0.5).to(v.dtype)


def fake_quant_value(
    x: torch.Tensor, bits: int, k: torch.Tensor, mode: RoundingMode
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, inside)``: :func:`nanoir.runtime.numerics.quant.fake_quant` in torch, and where the clamp
    left the rounded code unchanged (all True for 1-bit). ``k`` holds integers."""
    scale = _pow2(k, x.dtype)
    if bits == 1:
        q = torch.where(x >= 0, scale, -scale)
        return q, torch.ones_like(x, dtype=torch.bool)
    v = x * scale
    codes = round_codes(v, mode)
    if mode is RoundingMode.FLOOR:
        codes = torch.where((x < 0) & (v == 0), -1.0, codes)
    clamped = codes.clamp(float(quant.qmin(bits)), float(quant.qmax(bits)))
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
    ) -> torch.Tensor:
        q, inside = fake_quant_value(x, bits, k, mode)
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
        return grad_x, grad_k, None, None, None, None


# --------------------------------------------------------------------------------------------
# Quantizers (one per fake-quant of ``quantize``)
# --------------------------------------------------------------------------------------------


def floor_log2(s: torch.Tensor) -> torch.Tensor:
    """``floor(log2 s)`` for ``s > 0``, exactly (from the binary exponent, as
    :func:`nanoir.runtime.numerics.quant.exp_from_absmax` does)."""
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
    ):
        super().__init__()
        self.name, self.kind, self.bits = name, kind, bits
        self.exp_shape, self.axis = tuple(exp_shape), axis
        self.rounding, self.learner, self.lr = rounding, learner, lr
        self.n = max(per_channel_elements, 1)
        if learner == "ema":
            init = 2.0 ** (bits - 1) if bits > 1 else self.n**-0.5
            self.register_buffer("scale", torch.full(self.exp_shape, init, dtype=torch.float64))
        else:
            init_k = float(bits - 1) if bits > 1 else math.floor(math.log2(self.n**-0.5))
            self.exponent = nn.Parameter(torch.full(self.exp_shape, init_k, dtype=torch.float32))
        self.last_k: torch.Tensor | None = None
        """The integer exponents of the latest forward (what a bias cap reads)."""

    def extra_repr(self) -> str:
        return (
            f"{self.name!r}, {self.kind}, bits={self.bits}, shape={list(self.exp_shape)}, "
            f"{self.rounding}, {self.learner}, lr={self.lr}"
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
        a = x.detach().abs().to(torch.float64)
        if self.axis is None:
            a = a.amax().reshape(self.exp_shape)
        else:
            dims = [d for d in range(a.dim()) if d != self.axis]
            a = a.amax(dim=dims, keepdim=True) if dims else a
            a = a.reshape(self.exp_shape)
        t = a.clone() if self.bits == 1 else 2.0 ** (self.bits - 1) / a
        t = torch.where(t > 2, t * 0.9, t)
        t = torch.where(t < 0.5, t / 0.9, t)
        updated = (1 - self.lr) * self.scale + self.lr * t
        self.scale.copy_(torch.where(a < 1e-6, self.scale, updated))

    # -- forward ---------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, cap: torch.Tensor | None = None) -> torch.Tensor:
        """Fake-quantize ``x``; ``cap`` (code exponents) bounds a bias's exponents."""
        if self.learner == "ema" and self.training:
            self._update_ema(x)
        k = self.exponents()
        if cap is not None:
            cap = cap.min() if k.numel() == 1 else cap  # as quantize: a per-tensor bias
            k = torch.minimum(k, cap.to(k.dtype).reshape(k.shape))
        self.last_k = k.detach()
        clip = None
        if self.bits == 1 and self.learner == "lsq":
            clip = _pow2(k.detach() + 1, x.dtype)
        qmax = quant.qmax(self.bits)
        grad_scale = 1.0 / math.sqrt(self.n * qmax)
        return _FakeQuant.apply(x, k.to(x.dtype), self.bits, self.rounding, clip, grad_scale)


# --------------------------------------------------------------------------------------------
# The module: an interpreter of the folded nf program in torch
# --------------------------------------------------------------------------------------------

Step = Callable[..., tuple[torch.Tensor, ...]]


def _key(name: str, taken: set[str]) -> str:
    """A ``ModuleDict``/``ParameterDict`` key for a tensor name (no dots, unique)."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "_"
    key, i = base, 1
    while key in taken:
        key, i = f"{base}_{i}", i + 1
    taken.add(key)
    return key


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _target_shape(value: SSAValue) -> list[int]:
    return [-1 if d == DYNAMIC_INDEX else d for d in _shape(value)]


class _NumpyForward(torch.autograd.Function):
    """Value from a NumPy kernel (nanoir's definition), gradient from a torch function."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, np_fn: Any, torch_fn: Any) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.torch_fn = torch_fn
        y = np_fn(x.detach().cpu().numpy())
        return torch.from_numpy(np.ascontiguousarray(y)).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(ctx.torch_fn(xd), xd, g)
        return grad, None, None


def _exact_unary(np_fn: Any, torch_fn: Any) -> Step:
    return lambda x: (_NumpyForward.apply(x, np_fn, torch_fn),)


def _window_geometry(op: Any, x: torch.Tensor, dilations: Any) -> Any:
    """kernel, strides, dilations, begins, ends (with ceil overhang), out: nanoir's geometry."""
    kernel, strides, pads, dil = qz_window(op, dilations)
    dummy = np.empty((1, 1, *x.shape[2:]), dtype=np.float32)
    return kernels._pool_geometry(
        dummy,
        kernel,
        strides,
        pads,
        dil,  # noqa: SLF001
        bool(op.ceil_mode.value.data),
    )


def qz_window(op: Any, dilations: Any) -> Any:

    kernel = array_values(op.kernel) or ()
    return window_params(
        len(kernel), kernel, array_values(op.strides), array_values(op.pads), dilations
    )


def _torch_pad_spatial(
    x: torch.Tensor, begins: Sequence[int], ends: Sequence[int], value: float
) -> torch.Tensor:
    if not any(begins) and not any(ends):
        return x
    pads: list[int] = []
    for b, e in zip(reversed(begins), reversed(ends)):
        pads += [b, e]
    return F.pad(x, pads, value=value)


def _crop(y: torch.Tensor, out: Sequence[int]) -> torch.Tensor:
    return y[(Ellipsis, *(slice(0, o) for o in out))]


_POOL = {
    "max": {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d},
    "avg": {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d},
}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _build_step(op: Any) -> Step:  # noqa: C901 - one branch per op, as the runtime's table
    """The torch forward of one nf op (the semantics of ``runtime/nf.py``)."""
    if isinstance(op, nf.ReluOp):
        return lambda x: (torch.relu(x),)
    if isinstance(op, nf.SigmoidOp):
        return _exact_unary(kernels.sigmoid, torch.sigmoid)
    if isinstance(op, nf.TanhOp):
        return _exact_unary(kernels.tanh, torch.tanh)
    if isinstance(op, nf.HardSigmoidOp):
        return lambda x: (torch.clamp(x + 3, 0, 6) / 6,)
    if isinstance(op, nf.HardSwishOp):
        return lambda x: (x * torch.clamp(x + 3, 0, 6) / 6,)
    if isinstance(op, nf.ClampOp):
        lo = None if op.min is None else op.min.value.data
        hi = None if op.max is None else op.max.value.data
        return lambda x: (torch.clamp(x, lo, hi),)
    if isinstance(op, nf.LeakyReluOp):
        alpha = op.alpha.value.data
        return lambda x: (torch.where(x > 0, x, x * alpha),)
    if isinstance(op, nf.PReluOp):

        def prelu(x: torch.Tensor, slope: torch.Tensor) -> tuple[torch.Tensor]:
            channels = x.shape[1] if x.dim() >= 2 else 1
            s = (
                slope.reshape(())
                if slope.numel() == 1
                else slope.reshape((channels,) + (1,) * (x.dim() - 2))
            )
            return (torch.where(x > 0, x, x * s),)

        return prelu
    for cls, fn in (
        (nf.AddOp, torch.add),
        (nf.SubOp, torch.sub),
        (nf.MulOp, torch.mul),
        (nf.DivOp, torch.div),
    ):
        if isinstance(op, cls):
            return (lambda f: lambda a, b: (f(a, b),))(fn)
    if isinstance(op, nf.ConvOp):
        strides = list(array_values(op.strides) or ())
        pads = list(array_values(op.pads) or ())
        dilations = list(array_values(op.dilations) or ())
        groups = op.groups.value.data
        n = len(_shape(op.weight)) - 2
        strides = strides or [1] * n
        dilations = dilations or [1] * n
        pads = pads or [0] * (2 * n)
        begins, ends = pads[:n], pads[n:]
        conv = _CONV[n]

        def run_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> Any:
            if begins == ends:
                return (conv(x, w, b, strides, begins, dilations, groups),)
            x = _torch_pad_spatial(x, begins, ends, 0.0)
            return (conv(x, w, b, strides, 0, dilations, groups),)

        return run_conv
    if isinstance(op, nf.ConvTransposeOp):
        return _conv_transpose_step(op)
    if isinstance(op, nf.LinearOp):
        return lambda x, w, b=None: (F.linear(x, w, b),)
    if isinstance(op, nf.MatmulOp):
        return lambda a, b: (torch.matmul(a, b),)
    if isinstance(op, nf.BatchNormOp):
        eps = op.epsilon.value.data

        def bn(x: torch.Tensor, scale: Any, bias: Any, mean: Any, var: Any) -> Any:
            a = scale / torch.sqrt(var + eps)
            shift = bias - mean * a
            spread = (x.shape[1],) + (1,) * (x.dim() - 2)
            return (x * a.reshape(spread) + shift.reshape(spread),)

        return bn
    if isinstance(op, nf.MaxPoolOp):
        dil_attr = array_values(op.dilations)

        def max_pool(x: torch.Tensor) -> Any:
            kernel, strides, dil, begins, ends, out = _window_geometry(op, x, dil_attr)
            xp = _torch_pad_spatial(x, begins, ends, -math.inf)
            y = _POOL["max"][len(kernel)](xp, kernel, strides, 0, dil)
            return (_crop(y, out),)

        return max_pool
    if isinstance(op, nf.AvgPoolOp):
        include_pad = bool(op.count_include_pad.value.data)
        divisor = None if op.divisor_override is None else op.divisor_override.value.data
        declared = list(array_values(op.pads) or ())

        def avg_pool(x: torch.Tensor) -> Any:
            kernel, strides, _, begins, ends, out = _window_geometry(op, x, None)
            xp = _torch_pad_spatial(x, begins, ends, 0.0)
            n = len(kernel)
            # The window sums (exact on a quantized grid), then nanoir's divisors.
            total = _crop(
                _POOL["avg"][n](
                    xp,
                    kernel,
                    strides,
                    0,
                    False,
                    True,
                    **({"divisor_override": 1} if n > 1 else {}),
                ),
                out,
            )
            if n == 1:
                total = total * kernel[0]
            if divisor is not None:
                return (total / divisor,)
            ends_declared = declared[n:] if declared else [0] * n
            d = np.ones((), dtype=np.int64)
            for i in range(n):
                d = np.multiply.outer(
                    d,
                    kernels._avg_divisor_1d(  # noqa: SLF001
                        x.shape[2 + i],
                        kernel[i],
                        strides[i],
                        begins[i],
                        ends_declared[i],
                        out[i],
                        include_pad,
                    ),
                )
            return (total / torch.from_numpy(d.astype(np.float64)).to(x.dtype),)

        return avg_pool
    if isinstance(op, nf.AdaptiveAvgPoolOp):
        size = array_values(op.output_size) or ()

        def adaptive(x: torch.Tensor) -> Any:
            n = x.dim() - 2
            sizes = (size,) * n if isinstance(size, int) else tuple(size)
            y, count = x, np.ones((), dtype=np.int64)
            for i, o in enumerate(sizes):
                axis, length = 2 + i, x.shape[2 + i]
                o = length if o is None else o
                ranges = kernels.adaptive_pool_ranges(length, o)
                y = torch.cat(
                    [y.narrow(axis, a, b - a).sum(axis, keepdim=True) for a, b in ranges], axis
                )
                count = count * np.array([b - a for a, b in ranges]).reshape(
                    (o,) + (1,) * (n - 1 - i)
                )
            return (y / torch.from_numpy(np.asarray(count, dtype=np.float64)).to(x.dtype),)

        return adaptive
    if isinstance(op, nf.ConcatOp):
        axis = op.axis.value.data
        return lambda *xs: (torch.cat(xs, axis),)
    if isinstance(op, nf.SplitOp):
        axis, sizes = op.axis.value.data, list(array_values(op.sizes) or ())
        return lambda x: tuple(torch.split(x, sizes, axis))
    if isinstance(op, nf.ReshapeOp):
        shape = _target_shape(op.result)
        return lambda x: (x.reshape(shape),)
    if isinstance(op, nf.TransposeOp):
        perm = list(array_values(op.perm) or ())
        return lambda x: (x.permute(perm),)
    if isinstance(op, nf.PadOp | nf.UpsampleNearestOp | nf.DepthToSpaceOp | nf.SpaceToDepthOp):
        return _gather_step(op)
    raise QATError(f"nanoir.qat: {op.name} has no torch forward")


_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _conv_transpose_step(op: nf.ConvTransposeOp) -> Step:
    """``nf.conv_transpose`` (weight ``[C, O/g, *K]``, asymmetric ``pads``,
    ``output_padding``): torch's transposed conv without padding, then the pads cropped
    (and ``output_padding`` beyond the last input row added as zeros), then the bias."""
    n = len(_shape(op.weight)) - 2
    strides = list(array_values(op.strides) or ()) or [1] * n
    dilations = list(array_values(op.dilations) or ()) or [1] * n
    pads = list(array_values(op.pads) or ()) or [0] * (2 * n)
    groups = op.groups.value.data
    out = _shape(op.result)[2:]
    conv_t = _CONV_T[n]

    def run(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> Any:
        y = conv_t(x, w, None, strides, 0, 0, groups, dilations)
        for i in range(n):
            begin, length = pads[i], out[i]
            have = y.shape[2 + i] - begin
            y = y.narrow(2 + i, begin, min(have, length))
            if have < length:  # output_padding past the full output: zero rows
                extra = [0, 0] * (n - 1 - i) + [0, length - have]
                y = F.pad(y, extra)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * n)
        return (y,)

    return run


def _gather_step(op: Any) -> Step:
    """Pad and nearest upsampling. A constant pad is ``F.pad``; the other modes and the
    upsample are a gather whose indices come from nanoir's own NumPy kernel run on the
    element indices, so they pick exactly the elements the runtime picks."""

    if isinstance(op, nf.PadOp) and op.mode.data == "constant":
        pads = list(array_values(op.pads) or ())
        rank, value = len(pads) // 2, op.value.value.data
        torch_pads: list[int] = []
        for d in reversed(range(rank)):
            torch_pads += [pads[d], pads[rank + d]]
        return lambda x: (F.pad(x, torch_pads, value=value),)
    kernel = NF_BUILDERS[type(op)](op, np.dtype(np.float64))

    def gather(x: torch.Tensor) -> Any:
        index = np.arange(int(np.prod(x.shape[1:])), dtype=np.float64).reshape((1, *x.shape[1:]))
        (src,) = kernel(index)
        src = np.asarray(src).astype(np.int64)
        if src.shape[0] != 1:
            raise QATError(f"nanoir.qat: {op.name} along the batch dim has no torch forward")
        idx = torch.from_numpy(src.reshape(1, -1)).expand(x.shape[0], -1)
        return (torch.gather(x.flatten(1), 1, idx).reshape((x.shape[0], *src.shape[1:])),)

    return gather


_THROUGH = (nf.ReshapeOp, nf.PadOp, nf.UpsampleNearestOp)
"""Ops a bias cap looks through to find a layer input's fake-quant (as ``quantize``)."""


class QATModule(nn.Module):
    """A trainable torch module computing a folded nf program with ``quantize``'s fake-quants.

    ``params`` holds the named constants (keys are the names with dots replaced; see
    :meth:`tensor`), ``quantizers`` one :class:`Quantizer` per fake-quant. Inputs are torch
    tensors or NumPy arrays; the module computes in the inputs' float dtype (float32 for
    training, float64 for the bit-exact check against ``nanoir.run(convert(...))``).
    """

    def __init__(self, module: ModuleOp, config: qz.QuantConfig, function: str | None = None):
        super().__init__()

        self.nf_module = module
        self.config = config
        self.function = function
        func = find_function(module, function)
        self._func_name = func.sym_name.data
        targets = qz.find_targets(func, config)
        self.targets = {t.value: t for t in targets}
        self.params = nn.ParameterDict()
        self.quantizers = nn.ModuleDict()
        self._param_key: dict[str, str] = {}
        self._const_buffers: dict[int, str] = {}
        taken_p: set[str] = set()
        taken_q: set[str] = set()

        slot: dict[SSAValue, int] = {}

        def slot_of(v: SSAValue) -> int:
            return slot.setdefault(v, len(slot))

        self._arg_slots = [slot_of(a) for a in func.body.block.args]
        self._steps: list[tuple[str, Any, list[int], list[int]]] = []
        self._quant_of: dict[int, str] = {}  # slot -> quantizer key (non-bias)
        self._bias_of: dict[int, str] = {}  # bias slot -> quantizer key
        self._bias_users: dict[str, list[tuple[int, int, int, int, bool]]] = {}
        source: dict[int, str] = {}  # slot -> quantizer key it comes from
        self._result_slots: list[int] = []
        self._nbuf = 0

        def add_quantizer(t: qz.Target) -> str:
            key = _key(t.name, taken_q)
            shape = qz.exp_shape(t)  # noqa: SLF001
            vshape = [d for d in _shape(t.value)]
            if t.kind == "act":
                vshape = vshape[1:]
            total = int(np.prod([max(d, 1) for d in vshape])) if vshape else 1
            channels = int(np.prod(shape))
            learner, lr = config.resolve_learner(
                t.rule_name or t.name, "act" if t.kind == "const" else t.kind
            )
            self.quantizers[key] = Quantizer(
                t.name,
                t.kind,
                t.bits,
                shape,
                t.channel_axis,
                config.rounding,
                learner,
                lr,
                total // channels,
            )
            return key

        for arg in func.body.block.args:
            if arg in self.targets:
                key = add_quantizer(self.targets[arg])
                self._quant_of[slot_of(arg)] = key
                source[slot_of(arg)] = key
        for op in func.body.block.ops:
            if isinstance(op, ReturnOp):
                self._result_slots = [slot_of(v) for v in op.arguments]
                continue
            if isinstance(op, FakeQuantOp):
                raise QATError("nanoir.qat: the program is already quantized (nq.fake_quant)")
            outs = [slot_of(r) for r in op.results]
            if isinstance(op, nf.ConstantOp):
                value = np.array(dense_to_numpy(op.value), dtype=np.float32)
                t = self.targets.get(op.result)
                if op.sym_name is not None and value.dtype.kind == "f":
                    key = _key(op.sym_name.data, taken_p)
                    self._param_key[op.sym_name.data] = key
                    self.params[key] = nn.Parameter(torch.from_numpy(value))
                    self._steps.append(("param", key, [], outs))
                else:
                    name = f"const{self._nbuf}"
                    self._nbuf += 1
                    self.register_buffer(
                        name, torch.from_numpy(np.array(dense_to_numpy(op.value), dtype=np.float64))
                    )
                    self._steps.append(("buffer", name, [], outs))
                if t is not None:
                    key = add_quantizer(t)
                    if t.kind == "bias":
                        self._bias_of[outs[0]] = key
                        self._bias_users[key] = []
                    else:
                        self._quant_of[outs[0]] = key
                        source[outs[0]] = key
                continue
            args = [slot_of(v) for v in op.operands]
            self._steps.append(("op", _build_step(op), args, outs))
            if isinstance(op, _THROUGH) and args[0] in source:
                source[outs[0]] = source[args[0]]
            if isinstance(op, qz.WEIGHTED) and len(args) > 2:
                bkey = self._bias_of.get(args[2])
                if bkey is not None:
                    groups = op.groups.value.data if not isinstance(op, nf.LinearOp) else 1
                    transposed = isinstance(op, nf.ConvTransposeOp)
                    out_c = _shape(op.result)[1] if transposed else _shape(op.weight)[0]
                    self._bias_users[bkey].append((args[0], args[1], out_c, groups, transposed))
            for r, o in zip(op.results, outs):
                if r in self.targets:
                    key = add_quantizer(self.targets[r])
                    self._quant_of[o] = key
                    source[o] = key
        self._source = source

    # -- names -----------------------------------------------------------------------------

    def tensor(self, name: str) -> nn.Parameter:
        """The parameter of the named constant ``name`` (e.g. ``conv1.weight``)."""
        return self.params[self._param_key[name]]

    def quantizer(self, name: str) -> Quantizer:
        """The quantizer of the tensor ``name`` (a constant's name or an SSA name)."""
        for q in self.quantizers.values():
            if q.name == name:
                return q  # type: ignore[return-value]
        raise KeyError(name)

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimizer groups: the constants at ``lr``; each ``lsq`` exponent at its rule's
        ``lr``; (``ema`` scales are buffers, updated by the forward)."""
        groups: list[dict[str, Any]] = [{"params": list(self.params.values()), "lr": lr}]
        for q in self.quantizers.values():
            if q.learner == "lsq":
                groups.append({"params": [q.exponent], "lr": q.lr})
        return groups

    # -- forward ---------------------------------------------------------------------------

    def _cap(self, key: str, slots: list[Any]) -> torch.Tensor | None:
        """The bias cap of ``quantize`` (min over the layers using the bias)."""
        q = self.quantizers[key]
        if q.bits <= 1:
            return None
        cap = None
        for x_slot, w_slot, out_c, groups, transposed in self._bias_users[key]:
            kx_key, kw_key = self._source.get(x_slot), self._source.get(w_slot)
            if kx_key is None or kw_key is None:
                continue
            qx, qw = self.quantizers[kx_key], self.quantizers[kw_key]
            if qx.last_k is None or qw.last_k is None:
                continue
            kw = qw.last_k.cpu().numpy().astype(np.int64)
            if transposed and kw.size > 1:  # [O/g] along axis 1, the same per group
                kw = np.tile(kw.reshape(-1), groups)
            c = qz.accumulator_cap(
                qx.bits, qx.last_k.cpu().numpy().astype(np.int64), qw.bits, kw, out_c, groups
            )
            if c is not None:
                cap = c if cap is None else np.minimum(cap, c)
        return None if cap is None else torch.from_numpy(np.asarray(cap, dtype=np.float64))

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != len(self._arg_slots):
            raise QATError(
                f"nanoir.qat: the program takes {len(self._arg_slots)} inputs, got {len(inputs)}"
            )
        xs = [torch.as_tensor(x) for x in inputs]
        dtype = next((x.dtype for x in xs if x.is_floating_point()), torch.float32)
        slots: dict[int, Any] = {}
        for s, x in zip(self._arg_slots, xs):
            slots[s] = x.to(dtype)
            if s in self._quant_of:
                slots[s] = self.quantizers[self._quant_of[s]](slots[s])
        pending_bias: dict[int, str] = dict(self._bias_of)
        for kind, fn, args, outs in self._steps:
            if kind == "param":
                values: Any = (self.params[fn].to(dtype),)
            elif kind == "buffer":
                values = (getattr(self, fn).to(dtype),)
            else:
                for a in args:
                    if a in pending_bias:
                        key = pending_bias.pop(a)
                        slots[a] = self.quantizers[key](slots[a], self._cap(key, slots))
                values = fn(*[slots[a] for a in args])
            for o, v in zip(outs, values):
                if o in self._quant_of:
                    v = self.quantizers[self._quant_of[o]](v)
                slots[o] = v
        results = tuple(slots[s] for s in self._result_slots)
        return results[0] if len(results) == 1 else results

    # -- state -----------------------------------------------------------------------------

    def exponents(self) -> dict[str, np.ndarray]:
        """The current integer exponents of every quantizer by tensor name (a bias's capped
        as in the latest forward, else uncapped)."""
        out = {}
        for q in self.quantizers.values():
            out[q.name] = q.int_exponents()
        return out


# --------------------------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------------------------


def _config(options: dict[str, Any]) -> qz.QuantConfig:
    options = dict(options)
    rules = tuple(
        r if isinstance(r, qz.QuantRule) else qz.QuantRule.parse(r)
        for r in options.pop("rules", ())
    )
    if "rounding" in options:
        options["rounding"] = qz.parse_rounding(options["rounding"])  # noqa: SLF001
    try:
        return qz.QuantConfig(rules=rules, **options)
    except TypeError as e:
        raise QATError(f"nanoir.qat: {e}") from None


def prepare(
    model: Any,
    example_inputs: Sequence[Any],
    *,
    function: str | None = None,
    **quantize_options: Any,
) -> QATModule:
    """A trainable :class:`QATModule` for ``model`` (a ``torch.nn.Module``, or an nf
    ``ModuleOp``) with the fake-quants ``quantize(**quantize_options)`` would insert.

    ``quantize_options`` are ``quantize``'s (bits, per-channel, ``rules``, ``calibrator``,
    ``rounding``) plus ``learner`` (``ema`` or ``lsq``) and ``lr``, the defaults for tensors
    no rule names a learner for. Batch norm is folded first (see the module docstring).
    Weight exponents start from ``calibrator`` on the weights, as ``quantize`` sets them;
    activation exponents from the learner's init until :func:`calibrate`.
    """

    config = _config(quantize_options)
    if isinstance(model, ModuleOp):
        module = model.clone()
    else:
        module = from_torch(model, tuple(example_inputs))
    FoldBnPass().apply(make_context(), module)
    qat = QATModule(module, config, function)
    with torch.no_grad():
        for value, t in qat.targets.items():
            if t.kind in ("weight", "const"):
                assert isinstance(value, OpResult)
                x = dense_to_numpy(value.op.value).astype(np.float64)  # type: ignore[attr-defined]
                k = qz.tensor_exps(x, t.bits, t.channel_axis, config.calibrator, config.rounding)
                qat.quantizer(t.name).set_exponents(np.asarray(k).reshape(-1))
    return qat


def float_program(qat: QATModule) -> ModuleOp:
    """The folded nf program with the module's current constants written in."""

    module = qat.nf_module.clone()
    func = find_function(module, qat.function)
    for op in func.walk():
        if isinstance(op, nf.ConstantOp) and op.sym_name is not None:
            key = qat._param_key.get(op.sym_name.data)  # noqa: SLF001
            if key is None:
                continue
            value = qat.params[key].detach().cpu().to(torch.float32).numpy()
            t = op.value.get_type()
            if tuple(value.shape) != tuple(t.get_shape()) or "f32" not in str(t):
                raise QATError(
                    f"nanoir.qat: {op.sym_name.data} is {t}; the module holds "
                    f"float32 {list(value.shape)}"
                )
            op.value = DenseIntOrFPElementsAttr(t, BytesAttr(value.astype("<f4").tobytes()))
    return module


def calibrate(
    qat: QATModule,
    batches: Iterable[Any],
    *,
    calibrator: str | None = None,
    progress: bool | None = None,
) -> QATModule:
    """Start every exponent from nanoir's calibrators (``absmax``, NanoEngine's rule, or
    ``mse``; default the one given to :func:`prepare`) on ``batches`` (NumPy arrays, torch
    tensors, or ``(inputs, labels)`` pairs), run through the float program with the current
    weights: afterwards the module computes the PTQ program ``quantize`` gives."""

    config = qat.config
    if calibrator is not None:
        config = qz.QuantConfig(**{**config.__dict__, "calibrator": calibrator})
    module = float_program(qat)
    targets = qz.quantize_function(
        find_function(module, qat.function), batches, config, progress=progress
    )
    for t in targets:
        assert t.exps is not None
        qat.quantizer(t.name).set_exponents(np.asarray(t.exps).reshape(-1))
    return qat


def export_exponents(qat: QATModule) -> dict[str, dict[str, Any]]:
    """The exponents as ``quantize(exponents=...)`` reads them back (and as a JSON object):
    ``{name: {"exp": [k, ...], "bits": b, "rounding": mode, "axis": axis or None}}``, biases
    capped as ``quantize`` caps them for the current exponents."""
    was_training = qat.training
    qat.eval()
    out: dict[str, dict[str, Any]] = {}
    caps = _bias_caps(qat)
    for key, q in qat.quantizers.items():
        k = q.int_exponents().reshape(-1)
        cap = caps.get(key)
        if cap is not None:
            k = np.minimum(k, cap.min() if k.size == 1 else cap)
        out[q.name] = {
            "exp": [int(v) for v in k],
            "bits": q.bits,
            "rounding": str(q.rounding),
            "axis": q.axis,
        }
    qat.train(was_training)
    return out


def _bias_caps(qat: QATModule) -> dict[str, np.ndarray | None]:
    """Bias caps from the current (eval) exponents, without running the module."""
    for q in qat.quantizers.values():
        q.last_k = q.exponents().detach()
    return {
        key: (
            None
            if (c := qat._cap(key, [])) is None
            # noqa: SLF001
            else c.numpy().astype(np.int64)
        )
        for key in qat._bias_users
    }  # noqa: SLF001


def save_exponents(qat: QATModule, path: str | Path) -> None:
    """Write :func:`export_exponents` as JSON (``quantize{exponents="..."}`` reads it)."""
    Path(path).write_text(json.dumps(export_exponents(qat), indent=1) + "\n")


def convert(qat: QATModule) -> ModuleOp:
    """The nq program (nf + ``nq.fake_quant``) of the trained module: its constants and
    exponents through ``quantize``. ``nanoir.run`` on it equals ``qat.eval()`` on float64
    inputs bit for bit, and it lowers to nh as any quantized program does."""

    module = float_program(qat)
    qz.quantize_function(
        find_function(module, qat.function), None, qat.config, export_exponents(qat)
    )
    return module


# --------------------------------------------------------------------------------------------
# Training helpers
# --------------------------------------------------------------------------------------------


def train(
    qat: QATModule,
    data: Iterable[Any],
    *,
    epochs: int,
    lr: float = 1e-3,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    cosine: bool = False,
    progress: bool | None = None,
) -> list[float]:
    """Fine-tune ``qat`` on ``(inputs, target)`` batches (``data`` is iterated once per
    epoch: a shuffling DataLoader reshuffles) with Adam over :meth:`QATModule.param_groups`
    and cross entropy unless given; with ``cosine`` every group's rate decays to 0 along a
    half cosine over the run. Returns the mean loss per epoch. A progress bar shows on a
    terminal (``progress=None``) or when asked."""
    loss_fn = loss_fn or F.cross_entropy
    optimizer = optimizer or torch.optim.Adam(qat.param_groups(lr), lr=lr)
    batches = data if isinstance(data, Sequence) else None
    total = (
        epochs * len(batches)
        if batches is not None
        else (epochs * len(data) if hasattr(data, "__len__") else 0)
    )  # type: ignore[arg-type]
    losses: list[float] = []
    schedule = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(total, 1)) if cosine else None
    )
    qat.train()
    with qz.progress_bar(progress, total) as advance:  # noqa: SLF001
        for _ in range(epochs):
            running, count = 0.0, 0
            for batch in data:
                *xs, y = batch
                optimizer.zero_grad()
                loss = loss_fn(qat(*xs), torch.as_tensor(y))
                loss.backward()
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                running, count = running + float(loss.detach()), count + 1
                advance()
            losses.append(running / max(count, 1))
    qat.eval()
    return losses


@torch.no_grad()
def evaluate(qat: QATModule, *inputs: Any, dtype: torch.dtype = torch.float64) -> Any:
    """The module's eval-mode output as NumPy, computed in ``dtype`` (float64: the values
    ``nanoir.run(convert(qat), ...)`` gives)."""
    was_training = qat.training
    qat.eval()
    out = qat(*[torch.as_tensor(np.asarray(x)).to(dtype) for x in inputs])
    qat.train(was_training)
    if isinstance(out, tuple):
        return tuple(o.numpy() for o in out)
    return out.numpy()
