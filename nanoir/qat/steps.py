"""QAT's torch forwards of nf ops: ``build_step(op)`` gives the torch function that computes
one op of the folded nf program (exact in float64 where ``nanoir.run`` is; transcendental ops
take their forward value from nanoir's NumPy kernel and their gradient from torch), for
``nanoir.qat.QATModule`` to interpret the program with.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    TensorType,
)
from xdsl.ir import SSAValue

from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.dialects.traits import IntegerAlgorithm, Quantized, normalised_dims
from nanoir.qat.kernel_steps import KERNEL_STEPS
from nanoir.qat.quantizer import QATError
from nanoir.runtime.nf import NF_BUILDERS
from nanoir.runtime.numerics import kernels, movement
from nanoir.runtime.numerics import norm as norm_numerics
from nanoir.runtime.numerics.shapes import window_params

__all__ = ["IntegerAlgorithmStep", "NormStep", "Step", "build_step", "tensor_key", "value_shape"]

# --------------------------------------------------------------------------------------------
# The module: an interpreter of the folded nf program in torch
# --------------------------------------------------------------------------------------------

Step = Callable[..., tuple[torch.Tensor, ...]]


def tensor_key(name: str, taken: set[str]) -> str:
    """A ``ModuleDict``/``ParameterDict`` key for a tensor name (no dots, unique)."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "_"
    key, i = base, 1
    while key in taken:
        key, i = f"{base}_{i}", i + 1
    taken.add(key)
    return key


def value_shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


def _target_shape(value: SSAValue) -> list[int]:
    return [-1 if d == DYNAMIC_INDEX else d for d in value_shape(value)]


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


Grids = Callable[[], "tuple[Quantized, Quantized] | None"]


class _AlgorithmForward(torch.autograd.Function):
    """Value from the nq integer algorithm (float64 on codes), gradient from torch's float
    op on the same input (straight-through: the algorithm's rounding has no gradient)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, np_fn: Any, torch_fn: Any) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.torch_fn = torch_fn
        y = np_fn(x.detach().cpu().numpy().astype(np.float64))
        return torch.from_numpy(np.ascontiguousarray(y)).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(ctx.torch_fn(xd), xd, g)
        return grad, None, None


class IntegerAlgorithmStep:
    """An op defined by an integer algorithm (``IntegerAlgorithm``: softmax, log-softmax).

    ``grids`` (set by the module that owns the quantizers) gives the input's and the output's
    current per-tensor quantization; with both, the forward is the nq semantics
    (``IntegerAlgorithm.run``, so ``convert`` is bit for bit) and the gradient torch's float
    op's; without, the op is torch's float op (as nq runs it then).
    """

    def __init__(self, op: Any):
        self.op = op
        self.trait = op.get_trait(IntegerAlgorithm)
        self.axis = op.axis.value.data
        self.grids: Grids | None = None

    def torch_fn(self, mask: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
        axis = self.axis
        if isinstance(self.op, nf.LogSoftmaxOp):
            return lambda x: torch.log_softmax(x, axis)
        if mask is None:
            return lambda x: torch.softmax(x, axis)
        m = mask.to(torch.bool)

        def masked(x: torch.Tensor) -> torch.Tensor:
            y = torch.softmax(x.masked_fill(~m, float("-inf")), axis)
            return torch.nan_to_num(y, nan=0.0)

        return masked

    def __call__(self, x: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor]:
        mask = rest[0] if rest else None
        torch_fn = self.torch_fn(mask)
        grids = None if self.grids is None else self.grids()
        if grids is None:
            return (torch_fn(x),)
        arrays = [r.detach().cpu().numpy() for r in rest]
        reason = self.trait.bound_error(self.op, grids)
        if reason is not None:
            raise QATError(f"nanoir.qat: {self.op.name}: {reason}")

        def np_fn(v: np.ndarray) -> np.ndarray:
            return self.trait.run(self.op, grids, v, *arrays)

        return (_AlgorithmForward.apply(x, np_fn, torch_fn),)


class _NormForward(torch.autograd.Function):
    """LayerNorm/GroupNorm: value from a NumPy function of input, weight and bias (the nq
    integer algorithm, or nanoir's float kernel), gradient from torch's float op to all three
    (straight-through: the algorithm's rounding has no gradient)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, np_fn: Any, torch_fn: Any
    ) -> torch.Tensor:
        ctx.save_for_backward(x, w, b)
        ctx.torch_fn = torch_fn
        arrays = [t.detach().cpu().numpy().astype(np.float64) for t in (x, w, b)]
        return torch.from_numpy(np.ascontiguousarray(np_fn(*arrays))).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, ...]:
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
            grads = torch.autograd.grad(ctx.torch_fn(*leaves), leaves, g)
        return (*grads, None, None)


NormGrids = Callable[[], "tuple[Quantized, Quantized, Quantized, Quantized, str] | None"]


class NormStep:
    """``nf.layer_norm`` / ``nf.group_norm`` (``IntegerAlgorithm`` with a weight and a bias).

    ``grids`` (set by the module that owns the quantizers) gives the input's, output's,
    weight's and bias's current per-tensor quantization and the output's rounding mode; with
    them, the forward is the nq semantics (``nf._norm_codes``'s calls: the plan of
    ``norm.plan_for`` on these codes, then ``layer_norm_codes``/``group_norm_codes``), so
    ``convert`` is bit for bit; the gradient is torch's float op's to the input, weight and
    bias. Without them, the op is nanoir's float kernel (as nq runs it then).
    """

    def __init__(self, op: nf.LayerNormOp | nf.GroupNormOp):
        self.op = op
        self.eps = op.epsilon.value.data
        self.layer = isinstance(op, nf.LayerNormOp)
        self.param = (
            op.normalized_dims.value.data
            if isinstance(op, nf.LayerNormOp)
            else op.groups.value.data
        )
        self.grids: NormGrids | None = None

    def torch_fn(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.layer:
            shape = tuple(x.shape[x.dim() - self.param :])
            return F.layer_norm(x, shape, w.reshape(shape), b.reshape(shape), self.eps)
        return F.group_norm(x, self.param, w.reshape(-1), b.reshape(-1), self.eps)

    def float_fn(self, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        kernel = norm_numerics.layer_norm if self.layer else norm_numerics.group_norm
        return kernel(x, w, b, self.param, self.eps)

    def codes_fn(
        self, grids: tuple[Quantized, Quantized, Quantized, Quantized, str]
    ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        qin, qout, qw, qb, mode = grids

        def run(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
            q = np.rint(x * 2.0**qin.exp).astype(np.int64)
            g = np.rint(w * 2.0**qw.exp).astype(np.int64)
            c = np.rint(b * 2.0**qb.exp).astype(np.int64)
            dims = normalised_dims(self.op)
            n = int(np.prod([q.shape[d] for d in dims], dtype=np.int64))
            n = n if self.layer else n // self.param
            in_bits = qin.bits + (0 if qin.signed else 1)
            try:
                plan = norm_numerics.plan_for(
                    n, in_bits, qin.exp, self.eps, g, qw.exp, c, qb.exp,
                    qout.exp, qout.bits, mode, qout.signed,
                )  # fmt: skip
            except norm_numerics.NormBoundError as e:
                raise QATError(f"nanoir.qat: {self.op.name}: {e}") from None
            fn = norm_numerics.layer_norm_codes if self.layer else norm_numerics.group_norm_codes
            out = fn(q, self.param, g, qw.exp, c, qb.exp, plan)
            return np.asarray(out, np.float64) * 2.0**-qout.exp

        return run

    def __call__(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
        grids = None if self.grids is None else self.grids()
        np_fn = self.float_fn if grids is None else self.codes_fn(grids)
        return (_NormForward.apply(x, w, b, np_fn, self.torch_fn),)


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


def build_step(op: Any) -> Step:  # noqa: C901 - one branch per op, as the runtime's table
    """The torch forward of one nf op (the semantics of ``runtime/nf.py``)."""
    if isinstance(op, nf.ReluOp):
        return lambda x: (torch.relu(x),)
    if isinstance(op, nf.SigmoidOp):
        return _exact_unary(kernels.sigmoid, torch.sigmoid)
    if isinstance(op, nf.TanhOp):
        return _exact_unary(kernels.tanh, torch.tanh)
    if isinstance(op, nf.HardSigmoidOp):
        alpha, beta = op.alpha.value.data, op.beta.value.data
        if (alpha, beta) == kernels.HARDSIGMOID_TORCH:
            return lambda x: (torch.clamp(x + 3, 0, 6) / 6,)
        return lambda x: (torch.clamp(alpha * x + beta, 0, 1),)
    if isinstance(op, nf.HardSwishOp):
        return lambda x: (x * torch.clamp(x + 3, 0, 6) / 6,)
    if isinstance(op, nf.SiluOp):
        return _exact_unary(kernels.silu, F.silu)
    if isinstance(op, nf.LayerNormOp | nf.GroupNormOp):
        return NormStep(op)
    if op.has_trait(IntegerAlgorithm):
        return IntegerAlgorithmStep(op)
    if isinstance(op, nf.GeluOp):
        form = op.approximate.data
        return _exact_unary(lambda x: kernels.gelu(x, form), lambda x: F.gelu(x, approximate=form))
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
        (nf.MaximumOp, torch.maximum),  # exact: the larger operand, on its own grid
        (nf.MinimumOp, torch.minimum),
    ):
        if isinstance(op, cls):
            return (lambda f: lambda a, b: (f(a, b),))(fn)
    if isinstance(op, nf.ConvOp):
        strides = list(array_values(op.strides) or ())
        pads = list(array_values(op.pads) or ())
        dilations = list(array_values(op.dilations) or ())
        groups = op.groups.value.data
        n = len(value_shape(op.weight)) - 2
        strides = strides or [1] * n
        dilations = dilations or [1] * n
        pads = pads or [0] * (2 * n)
        begins, ends = pads[:n], pads[n:]
        conv = _CONV[n]

        def run_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> Any:
            # The bias is added to the finished sum, as nanoir's kernel adds it: torch's conv
            # folds it into its accumulation, which rounds differently when the sum and the
            # bias together need more than float64's 53 bits (an input exponent of 60, from
            # calibrating on zeros, against a bias at 2**-13).
            if begins == ends:
                y = conv(x, w, None, strides, begins, dilations, groups)
            else:
                y = conv(
                    _torch_pad_spatial(x, begins, ends, 0.0), w, None, strides, 0, dilations, groups
                )
            if b is not None:
                y = y + b.reshape((1, -1) + (1,) * n)
            return (y,)

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
    if isinstance(op, nf.ExpandOp) and op.like is not None:
        return _expand_like_step(op)
    if isinstance(
        op,
        nf.PadOp
        | nf.UpsampleNearestOp
        | nf.DepthToSpaceOp
        | nf.SpaceToDepthOp
        | nf.ExpandOp
        | nf.GatherOp,
    ):
        return _gather_step(op)
    if type(op) in KERNEL_STEPS:
        return KERNEL_STEPS[type(op)](op)
    raise QATError(f"nanoir.qat: {op.name} has no torch forward")


_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _conv_transpose_step(op: nf.ConvTransposeOp) -> Step:
    """``nf.conv_transpose`` (weight ``[C, O/g, *K]``, asymmetric ``pads``,
    ``output_padding``): torch's transposed conv without padding, then the pads cropped
    (and ``output_padding`` beyond the last input row added as zeros), then the bias."""
    n = len(value_shape(op.weight)) - 2
    strides = list(array_values(op.strides) or ()) or [1] * n
    dilations = list(array_values(op.dilations) or ()) or [1] * n
    pads = list(array_values(op.pads) or ()) or [0] * (2 * n)
    groups = op.groups.value.data
    out = value_shape(op.result)[2:]
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


def _expand_like_step(op: nf.ExpandOp) -> Step:
    """``nf.expand`` with a shape source (a class token to the dynamic batch): torch's
    ``expand``, the grown dims set from the source's shape (its values unread), -1 elsewhere
    (a kept dim keeps the input's size)."""
    x_shape, shape = value_shape(op.input), value_shape(op.result)

    def expand(x: torch.Tensor, like: torch.Tensor) -> Any:
        sizes = movement.expand_sizes(x_shape, shape, tuple(like.shape))
        return (x.expand(*[-1 if d == DYNAMIC_INDEX else d for d in sizes]),)

    return expand


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
