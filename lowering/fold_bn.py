"""fold-bn: fold inference batch norm (bn) into the conv or linear layer that feeds it.

An inference bn is the per-channel affine map ``y = A * x + B`` with ``A = γ / √(σ² + ε)``
and ``B = β − A · μ`` (γ = scale, β = bias, μ = running mean, σ² = running variance; the
form QONNX's ``BatchNormToAffine`` uses). A conv or linear layer is linear in its weight and
bias per output channel, so ``bn(conv(x, w, b)) = conv(x, w · A, b · A + B)``: the bn
disappears and the hardware level sees one integer layer instead of two.

A bn is folded when its input is the result of an ``nf.conv`` (any rank, groups) or of an
``nf.linear`` with a 2-D result (then bn's channel dim 1 is the linear's output feature),
that result has no other use, and the weight, the bias (if any) and all four bn parameters
are ``nf.constant``. Anything else (a lone bn, a conv whose output is also used elsewhere,
non-constant parameters) is left as it is; the runtime and later levels run ``nf.batch_norm``.

The new constants are computed in float64 and stored in the weight's element type. They keep
the layer's names: the folded weight is still ``conv1.weight``; the bias keeps the layer's bias
name, or, if the layer had none, takes the weight's name with ``weight`` → ``bias``.

    %w = nf.constant "conv1.weight" ...                %w = nf.constant "conv1.weight" <w·A>
    %y = nf.conv %x, %w ...                   ─▶       %b = nf.constant "conv1.bias" <B>
    %z = nf.batch_norm %y, %g, %be, %m, %v             %z = nf.conv %x, %w, %b ...
        {epsilon = 1.0e-05 : f64}

The same fold takes the constant per-channel affine maps a layer's result goes through next:
``mul(layer, s)`` and ``add(layer, t)`` / ``sub(layer, t)`` (either operand order for ``mul``
and ``add``) with an ``nf.constant`` ``s`` or ``t`` that is a scalar or varies only along the
layer's output channel (dim 1 of a conv result, the last dim of a linear result). Exports of
trained networks carry them: PaddleOCR's PP-LCNetV3 follows every conv + bn with a learnable
``x * a + b``. Folded, they cost nothing; left, each is one more requantization, and under the
hardware's truncation every requantization shrinks the signal (issue 30: PP-OCRv4's detector
and recognizer go through six per block instead of two).

The pass changes nothing else (no general dead-code elimination); constants left without
uses by a fold are erased.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, numpy_to_dense
from numpy.typing import NDArray
from xdsl.context import Context
from xdsl.dialects.builtin import (
    ModuleOp,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from nanoir.errors import ArgumentError

__all__ = [
    "FoldAffineIntoLayer",
    "FoldBatchNormIntoConv",
    "FoldBatchNormIntoLinear",
    "FoldBnPass",
    "batch_norm_affine",
    "channel_vector",
    "fold_batch_norm",
    "fold_bn",
]

Float64Array = NDArray[np.float64]


# --------------------------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------------------------


def batch_norm_affine(
    scale: NDArray[np.floating],
    bias: NDArray[np.floating],
    mean: NDArray[np.floating],
    var: NDArray[np.floating],
    eps: float,
) -> tuple[Float64Array, Float64Array]:
    """``(A, B)`` with ``bn(x) = A * x + B`` per channel, in float64.

    >>> a, b = batch_norm_affine(np.array([2.0]), np.array([1.0]), np.array([3.0]),
    ...                          np.array([4.0]), 0.0)
    >>> a.tolist(), b.tolist()
    ([1.0], [-2.0])
    """
    a = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    b = np.asarray(bias, np.float64) - a * np.asarray(mean, np.float64)
    return a, b


def fold_batch_norm(
    weight: NDArray[np.floating],
    bias: NDArray[np.floating] | None,
    scale: NDArray[np.floating],
    bn_bias: NDArray[np.floating],
    mean: NDArray[np.floating],
    var: NDArray[np.floating],
    eps: float,
) -> tuple[Float64Array, Float64Array]:
    """Weight and bias of ``bn(layer(x))`` for a conv (``[O, C/g, *K]``) or linear (``[O, I]``)
    weight: ``w' = w · A`` along the output channel (dim 0), ``b' = (b or 0) · A + B``.

    >>> w, b = fold_batch_norm(np.ones((2, 1)), None, np.array([2.0, 1.0]), np.zeros(2),
    ...                        np.array([1.0, 0.0]), np.ones(2), 0.0)
    >>> w.tolist(), b.tolist()  # A = [2, 1] / sqrt(1), B = -A * mean
    ([[2.0], [1.0]], [-2.0, 0.0])
    """
    a, b = batch_norm_affine(scale, bn_bias, mean, var, eps)
    w64 = np.asarray(weight, np.float64)
    new_weight = w64 * a.reshape((-1,) + (1,) * (w64.ndim - 1))
    old_bias = np.zeros_like(a) if bias is None else np.asarray(bias, np.float64)
    return new_weight, old_bias * a + b


# --------------------------------------------------------------------------------------------
# Constants <-> NumPy
# --------------------------------------------------------------------------------------------


def _make_constant(
    array: NDArray[np.floating], element_type: Attribute, name: str | None, hint: str | None
) -> nf.ConstantOp:
    op = nf.ConstantOp(numpy_to_dense(array, element_type), name=name)
    op.result.name_hint = hint
    return op


def _constant_name(value: SSAValue) -> str | None:
    owner = value.owner
    assert isinstance(owner, nf.ConstantOp)
    return None if owner.sym_name is None else owner.sym_name.data


def _bias_name(weight_name: str | None) -> str | None:
    """``conv1.weight`` → ``conv1.bias`` (a layer without a bias gets the one torch would name)."""
    if weight_name is None:
        return None
    if weight_name.endswith("weight"):
        return weight_name.removesuffix("weight") + "bias"
    return weight_name + ".bias"


def _erase_if_unused(rewriter: PatternRewriter, values: list[SSAValue | None]) -> None:
    """Erase the constants among ``values`` that lost their last use (each op once)."""
    owners = {v.owner: None for v in values if v is not None and isinstance(v.owner, nf.ConstantOp)}
    for op in owners:
        if not op.results[0].uses:
            rewriter.erase(op)


# --------------------------------------------------------------------------------------------
# Patterns
# --------------------------------------------------------------------------------------------


def _fold(bn: nf.BatchNormOp, layer: nf.ConvOp | nf.LinearOp, rewriter: PatternRewriter) -> None:
    """Batch norm: new weight and bias constants, a new layer in place of the bn."""
    weight = constant_array(layer.weight)
    bias = constant_array(layer.bias)
    params = [constant_array(v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
    if weight is None or (layer.bias is not None and bias is None):
        return
    if any(p is None for p in params):
        return
    scale, bn_bias, mean, var = params
    new_w, new_b = fold_batch_norm(
        weight,
        bias,
        scale,
        bn_bias,
        mean,
        var,
        bn.epsilon.value.data,  # type: ignore[arg-type]
    )
    _replace_layer(bn, layer, new_w, new_b, [bn.scale, bn.bias, bn.mean, bn.var], rewriter)


def _replace_layer(
    folded: Operation,
    layer: nf.ConvOp | nf.LinearOp,
    new_w: Float64Array,
    new_b: Float64Array,
    folded_operands: list[SSAValue],
    rewriter: PatternRewriter,
) -> None:
    """Replace ``folded`` (the op read by ``layer``) by a copy of ``layer`` with constants
    ``new_w``, ``new_b``; erase ``layer`` and the constants left without uses."""
    element_type = layer.weight.type.get_element_type()  # type: ignore[attr-defined]
    w_name = _constant_name(layer.weight)
    b_name = _constant_name(layer.bias) if layer.bias is not None else _bias_name(w_name)
    if layer.bias is not None:
        b_hint = layer.bias.name_hint
    else:  # the new bias's name, where it is a valid SSA name
        b_hint = b_name if b_name is not None and SSAValue.is_valid_name(b_name) else None
    w_const = _make_constant(new_w, element_type, w_name, layer.weight.name_hint)
    b_const = _make_constant(new_b, element_type, b_name, b_hint)
    if isinstance(layer, nf.ConvOp):
        new_layer = nf.ConvOp(
            layer.input,
            w_const.result,
            b_const.result,
            strides=nf.array_values(layer.strides),
            pads=nf.array_values(layer.pads),
            dilations=nf.array_values(layer.dilations),
            groups=layer.groups.value.data,
        )
    else:
        new_layer = nf.LinearOp(layer.input, w_const.result, b_const.result)
    new_layer.attributes.update(layer.attributes)
    old_operands = [layer.weight, layer.bias, *folded_operands]
    # The new constants go where the old weight was, so constants stay grouped as imported.
    weight_op = layer.weight.owner
    assert isinstance(weight_op, Operation)
    same_block = weight_op.parent_block() is folded.parent_block()
    rewriter.insert([w_const, b_const], InsertPoint.before(weight_op if same_block else folded))
    rewriter.replace(folded, new_layer)
    rewriter.erase(layer)
    _erase_if_unused(rewriter, old_operands)


def channel_vector(
    constant: NDArray[np.floating], result_rank: int, channel_dim: int
) -> Float64Array | None:
    """``constant`` as one value per output channel (length 1 or C, broadcast by the caller),
    or None when it varies along any other dim of a rank-``result_rank`` result.

    >>> channel_vector(np.ones((3, 1, 1)), 4, 1).shape, channel_vector(np.ones((1, 3)), 4, 1)
    ((3,), None)
    """
    c = np.asarray(constant, np.float64)
    if c.ndim > result_rank:
        return None
    shape = (1,) * (result_rank - c.ndim) + c.shape
    if any(n != 1 for d, n in enumerate(shape) if d != channel_dim % result_rank):
        return None
    return c.reshape(-1)


def _affine_operands(
    op: nf.MulOp | nf.AddOp | nf.SubOp,
) -> tuple[nf.ConvOp | nf.LinearOp, Float64Array] | None:
    """The layer and the per-channel constant of ``op`` when it folds (see the module)."""
    orders = (
        [(op.lhs, op.rhs)] if isinstance(op, nf.SubOp) else [(op.lhs, op.rhs), (op.rhs, op.lhs)]
    )
    for value, other in orders:
        layer = value.owner
        if not isinstance(layer, nf.ConvOp | nf.LinearOp) or not layer.result.has_one_use():
            continue
        constant = constant_array(other)
        if constant is None or op.result.type != layer.result.type:
            continue
        if constant_array(layer.weight) is None:
            continue
        if layer.bias is not None and constant_array(layer.bias) is None:
            continue
        rank = len(nf.tensor_shape(layer.result))
        vector = channel_vector(constant, rank, 1 if isinstance(layer, nf.ConvOp) else -1)
        if vector is None or not np.all(np.isfinite(vector)):
            continue
        return layer, vector
    return None


class FoldAffineIntoLayer(RewritePattern):
    """``mul(layer(x, w, b), s) → layer(x, w · s, b · s)``, ``add(layer(x, w, b), t) →
    layer(x, w, b + t)`` and ``sub(layer, t) → layer(x, w, b − t)`` for an ``nf.conv`` or
    ``nf.linear`` with constant weight and bias whose result has no other use, and a constant
    ``s`` / ``t`` that is a scalar or one value per output channel (the module says which dim).
    """

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, nf.MulOp | nf.AddOp | nf.SubOp):
            return
        found = _affine_operands(op)
        if found is None:
            return
        layer, vector = found
        weight = np.asarray(constant_array(layer.weight), np.float64)
        out_channels = weight.shape[0]
        if vector.size not in (1, out_channels):
            return
        vector = np.broadcast_to(vector, (out_channels,))
        bias = constant_array(layer.bias)
        bias = np.zeros(out_channels) if bias is None else np.asarray(bias, np.float64)
        if isinstance(op, nf.MulOp):
            new_w = weight * vector.reshape((-1,) + (1,) * (weight.ndim - 1))
            new_b = bias * vector
        else:
            new_w, new_b = weight, bias + (vector if isinstance(op, nf.AddOp) else -vector)
        other = op.rhs if op.lhs is layer.result else op.lhs
        _replace_layer(op, layer, new_w, new_b, [other], rewriter)


class FoldBatchNormIntoConv(RewritePattern):
    """``batch_norm(conv(x, w, b), γ, β, μ, σ²) → conv(x, w · A, b · A + B)`` with
    ``A = γ / √(σ² + ε)``, ``B = β − A · μ``, scaling ``w`` along its output channel (dim 0).

    Needs a constant weight, bias and bn parameters, and no other use of the conv result.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.BatchNormOp, rewriter: PatternRewriter) -> None:
        conv = op.input.owner
        if not isinstance(conv, nf.ConvOp):
            return
        if not conv.result.has_one_use():
            return
        _fold(op, conv, rewriter)


class FoldBatchNormIntoLinear(RewritePattern):
    """``batch_norm(linear(x, w, b), γ, β, μ, σ²) → linear(x, w · A, b · A + B)`` (``A``, ``B``
    as for convs; ``w`` is ``[out, in]``, scaled along dim 0).

    Only for a 2-D linear result ``[N, out]``: bn normalizes dim 1, which is then the linear's
    output feature (on ``[N, L, out]`` it would normalize ``L``). Needs constants and no other
    use of the linear result, as for convs.
    """

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.BatchNormOp, rewriter: PatternRewriter) -> None:
        linear = op.input.owner
        if not isinstance(linear, nf.LinearOp):
            return
        if len(nf.tensor_shape(linear.result)) != 2:
            return
        if not linear.result.has_one_use():
            return
        _fold(op, linear, rewriter)


def fold_bn(program: Operation) -> int:
    """Fold every batch norm that folds (as above) in ``program``, a module or one function,
    in place: ``nanoir.fold_bn(module)``, and the constant per-channel affine maps after a
    layer. Returns how many batch norms were folded; the others stay."""
    if not isinstance(program, Operation):
        raise ArgumentError(f"fold_bn takes a program (a ModuleOp), got {type(program).__name__}")
    count = sum(isinstance(op, nf.BatchNormOp) for op in program.walk())
    patterns = GreedyRewritePatternApplier(
        [FoldBatchNormIntoConv(), FoldBatchNormIntoLinear(), FoldAffineIntoLayer()],
        dce_enabled=False,
    )
    for region in program.regions:
        PatternRewriteWalker(patterns).rewrite_region(region)
    return count - sum(isinstance(op, nf.BatchNormOp) for op in program.walk())


@dataclass(frozen=True)
class FoldBnPass(ModulePass):
    """Fold ``nf.batch_norm`` into the preceding ``nf.conv``/``nf.linear`` where possible."""

    name = "fold-bn"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fold_bn(op)
