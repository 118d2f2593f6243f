"""Kernels of the nf dialect for the NumPy executor: one builder per op.

Each builder reads the op's attributes once and returns a closure over NumPy arrays that calls
the matching function of :mod:`nanoir.runtime.numerics.kernels` (the executable definition of the op).
Values keep the plan's float dtype: float32 for float programs, float64 for quantized ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values
from nanoir.dialects.traits import IntegerAlgorithm, source_quantized
from nanoir.runtime.base import Builder, ExecutionError, Kernel
from nanoir.runtime.codes_conv import exact_conv
from nanoir.runtime.numerics import bicubic as bicubic_numerics
from nanoir.runtime.numerics import compare as compare_numerics
from nanoir.runtime.numerics import embedding, kernels, movement, norm, unpool, upsample
from nanoir.runtime.numerics import l2norm as l2_numerics
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from nanoir.runtime.numerics import reduce as reduce_numerics
from nanoir.runtime.numerics import softmax as softmax_numerics
from nanoir.runtime.numerics import unary as unary_numerics
from nanoir.runtime.numerics.shapes import window_params
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Operation

NF_BUILDERS: dict[type[Operation], Builder] = {}


def impl(op_type: type[Operation]) -> Callable[[Builder], Builder]:
    """Register the builder of ``op_type``'s kernel."""

    def register(builder: Builder) -> Builder:
        NF_BUILDERS[op_type] = builder
        return builder

    return register


def _unary(fn: Callable[[Any], Any]) -> Builder:
    def build(op: Any, dtype: np.dtype[Any]) -> Kernel:
        return lambda x: (fn(x),)

    return build


for _op, _fn in (
    (nf.ReluOp, kernels.relu),
    (nf.SigmoidOp, kernels.sigmoid),
    (nf.TanhOp, kernels.tanh),
    (nf.HardSwishOp, kernels.hardswish),
    (nf.SiluOp, kernels.silu),
):
    NF_BUILDERS[_op] = _unary(_fn)

for _op, _fn in (
    (nf.AddOp, np.add),
    (nf.SubOp, np.subtract),
    (nf.MulOp, np.multiply),
    (nf.DivOp, np.divide),
    (nf.MaximumOp, np.maximum),
    (nf.MinimumOp, np.minimum),
):
    NF_BUILDERS[_op] = (lambda f: lambda op, dtype: lambda a, b: (f(a, b),))(_fn)


@impl(nf.ConstantOp)
def constant(op: nf.ConstantOp, dtype: np.dtype[Any]) -> Kernel:
    value = dense_to_numpy(op.value).astype(dtype)
    return lambda: (value,)


@impl(nf.ClampOp)
def clamp(op: nf.ClampOp, dtype: np.dtype[Any]) -> Kernel:
    lo = None if op.min is None else op.min.value.data
    hi = None if op.max is None else op.max.value.data
    return lambda x: (kernels.clamp(x, lo, hi),)


@impl(nf.HardSigmoidOp)
def hardsigmoid(op: nf.HardSigmoidOp, dtype: np.dtype[Any]) -> Kernel:
    alpha, beta = op.alpha.value.data, op.beta.value.data
    return lambda x: (kernels.hardsigmoid(x, alpha, beta),)


@impl(nf.LeakyReluOp)
def leaky_relu(op: nf.LeakyReluOp, dtype: np.dtype[Any]) -> Kernel:
    alpha = op.alpha.value.data
    return lambda x: (kernels.leaky_relu(x, alpha),)


@impl(nf.GeluOp)
def gelu(op: nf.GeluOp, dtype: np.dtype[Any]) -> Kernel:
    approximate = op.approximate.data
    return lambda x: (kernels.gelu(x, approximate),)


@impl(nf.PReluOp)
def prelu(op: nf.PReluOp, dtype: np.dtype[Any]) -> Kernel:
    return lambda x, slope: (kernels.prelu(x, slope),)


@impl(nf.ConvOp)
def conv(op: nf.ConvOp, dtype: np.dtype[Any]) -> Kernel:
    """A quantized conv (float64 plans) runs on float32 codes where that is exact
    (``codes_conv``)."""
    strides, pads = array_values(op.strides), array_values(op.pads)
    dilations, groups = array_values(op.dilations), op.groups.value.data

    def run(x: Any, w: Any, b: Any = None) -> Any:
        return kernels.conv(x, w, b, strides=strides, pads=pads, dilations=dilations, groups=groups)

    plain: Kernel = lambda x, w, b=None: (run(x, w, b),)  # noqa: E731
    exact = exact_conv(op, run, plain) if dtype == np.float64 else None
    return plain if exact is None else exact


@impl(nf.ConvTransposeOp)
def conv_transpose(op: nf.ConvTransposeOp, dtype: np.dtype[Any]) -> Kernel:
    strides, pads = array_values(op.strides), array_values(op.pads)
    dilations, groups = array_values(op.dilations), op.groups.value.data
    output_padding = array_values(op.output_padding)
    return lambda x, w, b=None: (
        kernels.conv_transpose(
            x,
            w,
            b,
            strides=strides,
            pads=pads,
            dilations=dilations,
            output_padding=output_padding,
            groups=groups,
        ),
    )


@impl(nf.LinearOp)
def linear(op: nf.LinearOp, dtype: np.dtype[Any]) -> Kernel:
    return lambda x, w, b=None: (kernels.linear(x, w, b),)


@impl(nf.MatmulOp)
def matmul(op: nf.MatmulOp, dtype: np.dtype[Any]) -> Kernel:
    return lambda a, b: (kernels.matmul(a, b),)


@impl(nf.BatchNormOp)
def batch_norm(op: nf.BatchNormOp, dtype: np.dtype[Any]) -> Kernel:
    eps = op.epsilon.value.data
    return lambda x, scale, bias, mean, var: (kernels.batch_norm(x, scale, bias, mean, var, eps),)


def _window(
    op: nf.MaxPoolOp | nf.AvgPoolOp, dilations: tuple[int, ...] | None
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Kernel, strides, pads and dilations of a pool with the dialect's defaults filled in."""
    kernel = array_values(op.kernel) or ()
    return window_params(
        len(kernel), kernel, array_values(op.strides), array_values(op.pads), dilations
    )


@impl(nf.MaxPoolOp)
def max_pool(op: nf.MaxPoolOp, dtype: np.dtype[Any]) -> Kernel:
    # Spell out the dialect's defaults (stride 1, like ONNX): torch's pools default the
    # stride to the kernel size, and the kernels follow torch.
    kernel, strides, pads, dilations = _window(op, array_values(op.dilations))
    ceil_mode = bool(op.ceil_mode.value.data)
    return lambda x: (
        kernels.max_pool(
            x, kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode
        ),
    )


@impl(nf.AvgPoolOp)
def avg_pool(op: nf.AvgPoolOp, dtype: np.dtype[Any]) -> Kernel:
    kernel, strides, pads, _ = _window(op, None)
    ceil_mode = bool(op.ceil_mode.value.data)
    include_pad = bool(op.count_include_pad.value.data)
    divisor = None if op.divisor_override is None else op.divisor_override.value.data
    return lambda x: (
        kernels.avg_pool(
            x,
            kernel=kernel,
            strides=strides,
            pads=pads,
            ceil_mode=ceil_mode,
            count_include_pad=include_pad,
            divisor_override=divisor,
        ),
    )


@impl(nf.AdaptiveAvgPoolOp)
def adaptive_avg_pool(op: nf.AdaptiveAvgPoolOp, dtype: np.dtype[Any]) -> Kernel:
    size = array_values(op.output_size) or ()
    return lambda x: (kernels.adaptive_avg_pool(x, size),)


@impl(nf.ConcatOp)
def concat(op: nf.ConcatOp, dtype: np.dtype[Any]) -> Kernel:
    axis = op.axis.value.data
    return lambda *xs: (kernels.concat(xs, axis),)


@impl(nf.SplitOp)
def split(op: nf.SplitOp, dtype: np.dtype[Any]) -> Kernel:
    axis, sizes = op.axis.value.data, list(array_values(op.sizes) or ())
    return lambda x: tuple(kernels.split(x, sizes, axis))


def _target_shape(result: Any) -> list[int]:
    t = result.type
    assert isinstance(t, TensorType)
    return [-1 if d == DYNAMIC_INDEX else d for d in t.get_shape()]


@impl(nf.ReshapeOp)
def reshape(op: nf.ReshapeOp, dtype: np.dtype[Any]) -> Kernel:
    shape = _target_shape(op.result)
    return lambda x: (kernels.reshape(x, shape),)


@impl(nf.TransposeOp)
def transpose(op: nf.TransposeOp, dtype: np.dtype[Any]) -> Kernel:
    perm = list(array_values(op.perm) or ())
    return lambda x: (kernels.transpose(x, perm),)


@impl(nf.PadOp)
def pad(op: nf.PadOp, dtype: np.dtype[Any]) -> Kernel:
    pads, mode, value = list(array_values(op.pads) or ()), op.mode.data, op.value.value.data
    return lambda x: (kernels.pad(x, pads, mode, value),)


@impl(nf.UpsampleNearestOp)
def upsample_nearest(op: nf.UpsampleNearestOp, dtype: np.dtype[Any]) -> Kernel:
    size = _target_shape(op.result)[2:]
    return lambda x: (kernels.upsample_nearest(x, size=size),)


@impl(nf.MaxPoolIndicesOp)
def max_pool_indices(op: nf.MaxPoolIndicesOp, dtype: np.dtype[Any]) -> Kernel:
    kernel, strides = array_values(op.kernel) or (), array_values(op.strides) or ()
    return lambda x: (unpool.max_pool_indices(x, kernel, strides),)


@impl(nf.EmbeddingOp)
def embedding_lookup(op: nf.EmbeddingOp, dtype: np.dtype[Any]) -> Kernel:
    return lambda i, w: (embedding.embed(i, w),)


@impl(nf.MaxUnpoolOp)
def max_unpool(op: nf.MaxUnpoolOp, dtype: np.dtype[Any]) -> Kernel:
    size = _target_shape(op.result)[2:]
    return lambda x, i: (unpool.max_unpool(x, i, size),)


@impl(nf.UpsampleZeroOp)
def upsample_zero(op: nf.UpsampleZeroOp, dtype: np.dtype[Any]) -> Kernel:
    size, offsets = _target_shape(op.result)[2:], array_values(op.offsets) or ()
    return lambda x: (upsample.upsample_zero(x, size, offsets),)


@impl(nf.UpsampleBilinearOp)
def upsample_bilinear(op: nf.UpsampleBilinearOp, dtype: np.dtype[Any]) -> Kernel:
    x, y = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
    scaled = [a != b for a, b in zip(x[2:], y[2:])]
    pads = array_values(op.pads) or ()
    return lambda v: (upsample.bilinear(v, scaled, pads),)


@impl(nf.DepthToSpaceOp)
def depth_to_space(op: nf.DepthToSpaceOp, dtype: np.dtype[Any]) -> Kernel:
    block, mode = op.block.value.data, op.mode.data
    return lambda x: (kernels.depth_to_space(x, block, mode),)


@impl(nf.SpaceToDepthOp)
def space_to_depth(op: nf.SpaceToDepthOp, dtype: np.dtype[Any]) -> Kernel:
    block, mode = op.block.value.data, op.mode.data
    return lambda x: (kernels.space_to_depth(x, block, mode),)


@impl(nf.LayerNormOp)
def layer_norm(op: nf.LayerNormOp, dtype: np.dtype[Any]) -> Kernel:
    dims, eps = op.normalized_dims.value.data, op.epsilon.value.data
    return _integer_algorithm(op, lambda x, w, b: (norm.layer_norm(x, w, b, dims, eps),))


@impl(nf.GroupNormOp)
def group_norm(op: nf.GroupNormOp, dtype: np.dtype[Any]) -> Kernel:
    groups, eps = op.groups.value.data, op.epsilon.value.data
    return _integer_algorithm(op, lambda x, w, b: (norm.group_norm(x, w, b, groups, eps),))


@impl(nf.ExpandOp)
def expand(op: nf.ExpandOp, dtype: np.dtype[Any]) -> Kernel:
    """Broadcast; a dim grown to a dynamic size takes the shape source's (``like``)."""
    x_shape, shape = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
    if op.like is None:
        return lambda x: (movement.expand(x, shape),)
    return lambda x, like: (movement.expand(x, movement.expand_sizes(x_shape, shape, like.shape)),)


@impl(nf.GatherOp)
def gather(op: nf.GatherOp, dtype: np.dtype[Any]) -> Kernel:
    axis, indices = op.axis.value.data, list(array_values(op.indices) or ())
    return lambda x: (movement.gather(x, axis, indices),)


def _integer_algorithm(op: Operation, float_kernel: Kernel) -> Kernel:
    """The op's float kernel, or its integer algorithm where fake-quants give both grids
    (``IntegerAlgorithm``: the nq semantics)."""
    trait = op.get_trait(IntegerAlgorithm)
    assert trait is not None
    grids = trait.quantization(op)
    if isinstance(grids, str):
        return float_kernel
    reason = trait.bound_error(op, grids)

    def run(x: Any, *rest: Any) -> tuple[Any, ...]:
        if reason is not None:
            raise ExecutionError(f"{op.name}: {reason}")
        return (trait.run(op, grids, x, *rest).astype(x.dtype, copy=False),)

    return run


@impl(nf.SoftmaxOp)
def softmax(op: nf.SoftmaxOp, dtype: np.dtype[Any]) -> Kernel:
    axis = op.axis.value.data
    return _integer_algorithm(op, lambda x, mask=None: (softmax_numerics.softmax(x, axis, mask),))


@impl(nf.LogSoftmaxOp)
def log_softmax(op: nf.LogSoftmaxOp, dtype: np.dtype[Any]) -> Kernel:
    axis = op.axis.value.data
    return _integer_algorithm(op, lambda x: (softmax_numerics.log_softmax(x, axis),))


def recurrent_grids(op: nf.RecurrentOp) -> list[tuple[np.ndarray, int]] | str:
    """Every operand's exponents and bits (fake-quants) when ``op`` is quantized inside
    (the nq semantics: the integer cell), else why it runs torch's float math."""
    if op.gates is None:
        return "quantize has not set its internal quantizers (gates, cell, hidden)"
    grids = []
    for v in op.operands:
        if v in op.weights:
            grid = nf.operand_codes_grid(v)
        else:  # the input and the states: per tensor, through data movement
            q = source_quantized(v)
            if isinstance(q, str) or q.bits == 1 or not q.signed:
                what = q if isinstance(q, str) else "its codes are 1-bit or unsigned"
                return f"{v.name_hint or 'an operand'}: {what}"
            grid = (np.array([q.exp], np.int64), q.bits)
        if isinstance(grid, str):
            return grid
        grids.append(grid)
    return grids


@impl(nf.RecurrentOp)
def recurrent(op: nf.RecurrentOp, dtype: np.dtype[Any]) -> Kernel:
    """torch's float math, or the integer cell on the operands' codes (quantized: the
    internal quantizers and every operand's fake-quant are there), exact in float64."""
    layout, has_h0, has_c0 = op.layout, op.h0 is not None, op.c0 is not None
    grids = recurrent_grids(op)

    def split(args: tuple[Any, ...]) -> tuple[Any, Any, Any, list[Any]]:
        x, rest = args[0], list(args[1:])
        h0 = rest.pop(0) if has_h0 else None
        c0 = rest.pop(0) if has_c0 else None
        return x, h0, c0, rest

    if isinstance(grids, str):

        def run_float(*args: Any) -> tuple[Any, ...]:
            x, h0, c0, weights = split(args)
            return recurrent_numerics.run_float(layout, x, h0, c0, weights)

        return run_float
    internal = [op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL]
    assert op.rounding is not None and all(g is not None for g in internal)
    gates, cell, hidden = internal
    mode = op.rounding.data
    tables = recurrent_numerics.activation_tables(gates, mode)  # type: ignore[arg-type]

    def coded(a: Any, grid: tuple[np.ndarray, int]) -> recurrent_numerics.Coded:
        exps = grid[0]
        k = exps.reshape((-1,) + (1,) * (a.ndim - 1)) if exps.size > 1 else exps.reshape(())
        return recurrent_numerics.Coded(np.rint(a * 2.0**k).astype(np.int64), exps)

    def run_codes(*args: Any) -> tuple[Any, ...]:
        coded_args = [coded(np.asarray(a, np.float64), g) for a, g in zip(args, grids)]
        x, h0, c0, weights = split(tuple(coded_args))
        try:
            results = recurrent_numerics.run_codes(
                layout,
                x,
                h0,
                c0,
                weights,
                gates,
                cell,
                hidden,
                mode,
                tables,  # type: ignore[arg-type]
            )
        except recurrent_numerics.RecurrentBoundError as e:
            raise ExecutionError(f"{op.name}: {e}") from None
        exps = (hidden.exp, hidden.exp, cell.exp)  # type: ignore[union-attr]
        return tuple((r * 2.0**-k).astype(args[0].dtype) for r, k in zip(results, exps))

    return run_codes


def _read_by_fake_quants(op: Operation) -> bool:
    """Whether every reader of ``op``'s result is a fake-quant (its quantized semantics)."""
    uses = list(op.results[0].uses)
    return bool(uses) and all(u.operation.name == "nq.fake_quant" for u in uses)


@impl(nf.UnaryOp)
def unary(op: nf.UnaryOp, dtype: np.dtype[Any]) -> Kernel:
    """torch's function; read by fake-quants, its quantized semantics (the value at the
    nearest point of its domain outside it, what the table of lower-to-hw holds)."""
    fn, params = op.fn.data, op.param_values()
    if _read_by_fake_quants(op):
        return lambda x: (
            unary_numerics.quantized_values(fn, x, params).astype(x.dtype, copy=False),
        )
    return lambda x: (unary_numerics.evaluate(fn, x, params),)


@impl(nf.CompareOp)
def compare(op: nf.CompareOp, dtype: np.dtype[Any]) -> Kernel:
    """1.0 where the predicate holds, else 0.0, in the operands' dtype."""
    fn = compare_numerics.PREDICATES[op.predicate.data]
    return lambda a, b: (fn(a, b).astype(np.result_type(a, b), copy=False),)


@impl(nf.WhereOp)
def where(op: nf.WhereOp, dtype: np.dtype[Any]) -> Kernel:
    return lambda c, a, b: (np.where(c != 0, a, b),)


@impl(nf.ReduceOp)
def reduce(op: nf.ReduceOp, dtype: np.dtype[Any]) -> Kernel:
    kind, dims = op.kind.data, array_values(op.dims) or ()
    return lambda x: (reduce_numerics.reduce(x, kind, dims),)


@impl(nf.ArgReduceOp)
def arg_reduce(op: nf.ArgReduceOp, dtype: np.dtype[Any]) -> Kernel:
    """Integers (indices, 0/1) in the input's float dtype."""
    kind, (dim,) = op.kind.data, array_values(op.dims) or (0,)
    return lambda x: (reduce_numerics.arg_reduce(x, kind, dim).astype(x.dtype),)


@impl(nf.CumsumOp)
def cumsum(op: nf.CumsumOp, dtype: np.dtype[Any]) -> Kernel:
    (dim,) = array_values(op.dims) or (0,)
    return lambda x: (reduce_numerics.cumsum(x, dim),)


@impl(nf.UpsampleBicubicOp)
def upsample_bicubic(op: nf.UpsampleBicubicOp, dtype: np.dtype[Any]) -> Kernel:
    x, y = nf.tensor_shape(op.input), nf.tensor_shape(op.result)
    scaled = [a != b for a, b in zip(x[2:], y[2:])]
    pads = array_values(op.pads) or ()
    return lambda v: (bicubic_numerics.bicubic(v, scaled, pads),)


@impl(nf.NormalizeOp)
def normalize(op: nf.NormalizeOp, dtype: np.dtype[Any]) -> Kernel:
    axis, eps = op.axis.value.data, op.epsilon.value.data
    return _integer_algorithm(op, lambda x: (l2_numerics.normalize(x, axis, eps),))
