"""0-d runtime values, lowered as one-element vectors (a full reduction's result, a function
of a scalar input).

nh values carry a layout that names each dim (``BCMD``), and the patterns reason about dims
(channel axes, alignment); a 0-d value has none. Before the patterns run, the nq function is
rewritten so that every 0-d value computed at run time has shape ``[1]`` instead, which the
patterns already lower (NumPy broadcasting gives the same numbers: ``[1]`` broadcasts
against any shape as ``[]`` does). Only the function's boundary stays 0-d, where the caller
sees it: a 0-d input's fake-quant (its nh input, layout ``""``) is followed by a reshape to
``[1]``, and a 0-d result is reshaped back to ``[]`` before the return.

    %xq = nq.fake_quant %x : tensor<f32>            %xq = nq.fake_quant %x : tensor<f32>
    %e = nf.unary "exp" %xq : tensor<f32>      ─▶   %x1 = nf.reshape %xq : tensor<f32> -> tensor<1xf32>
    %eq = nq.fake_quant %e : tensor<f32>            %e = nf.unary "exp" %x1 : tensor<1xf32>
    func.return %eq : tensor<f32>                   %eq = nq.fake_quant %e : tensor<1xf32>
                                                    %r = nf.reshape %eq : tensor<1xf32> -> tensor<f32>
                                                    func.return %r : tensor<f32>

Elementwise ops (trait ``Elementwise``: their result is the broadcast of their operands) and
reshapes to ``[]`` take the new shape; any other op with a 0-d runtime result is refused,
naming it.
"""

from __future__ import annotations

from nanoir.dialects import nf
from nanoir.dialects.functions import describe
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import Elementwise
from nanoir.lowering.hw.core import LowerToHwError
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.rewriter import Rewriter

__all__ = ["promote_scalars"]


def _is_scalar(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and not value.type.get_shape()


def _one(value: SSAValue) -> TensorType:
    t = value.type
    assert isinstance(t, TensorType)
    return TensorType(t.get_element_type(), [1])


def _reshape_after(block: Block, value: SSAValue, at: Operation, shape: list[int]) -> SSAValue:
    """``nf.reshape(value, shape)`` inserted after ``at``; ``value``'s other uses read it."""
    new = nf.ReshapeOp(value, shape)
    block.insert_op_after(new, at)
    if value.name_hint:
        new.result.name_hint = value.name_hint
    value.replace_uses_with_if(new.result, lambda use: use.operation is not new)
    return new.result


def promote_scalars(func: FuncOp) -> None:
    """Rewrite ``func`` (an nq function) in place so that its 0-d runtime values have shape
    ``[1]`` (see the module docstring); refuse an op whose 0-d result is no elementwise op's
    or reshape's."""
    block = func.body.block
    runtime: set[SSAValue] = set(block.args)
    for op in list(block.ops):
        if isinstance(op, ReturnOp) or not any(v in runtime for v in op.operands):
            continue
        runtime.update(op.results)
        if isinstance(op, FakeQuantOp) and isinstance(op.input, BlockArgument):
            if _is_scalar(op.result):  # the nh input stays 0-d: its caller's shape
                runtime.add(_reshape_after(block, op.result, op, [1]))
            continue
        scalars = [r for r in op.results if _is_scalar(r)]
        if not scalars:
            continue
        if isinstance(op, nf.ReshapeOp):
            source = op.input
            if tuple(nf.tensor_shape(source)) != (1,):
                one = nf.ReshapeOp(source, [1])
                block.insert_op_before(one, op)
                source = one.result
            if op.result.name_hint:
                source.name_hint = op.result.name_hint
            op.result.replace_all_uses_with(source)
            op.detach()
            op.erase()
            runtime.add(source)
            continue
        if not op.has_trait(Elementwise):
            raise LowerToHwError(
                f"lower-to-hw: {describe(op)} has a 0-d result; nh values have at least "
                "one dim (keep a dim of size 1, e.g. keepdim=True)"
            )
        for r in scalars:
            runtime.add(Rewriter.replace_value_with_new_type(r, _one(r)))
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    declared = func.function_type.outputs.data
    results = list(ret.arguments)
    for i, (value, t) in enumerate(zip(results, declared)):
        if isinstance(t, TensorType) and not t.get_shape() and not _is_scalar(value):
            back = nf.ReshapeOp(value, [])
            block.insert_op_before(back, ret)
            if value.name_hint:
                back.result.name_hint = value.name_hint
            results[i] = back.result
    ret.operands = results
