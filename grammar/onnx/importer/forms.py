"""ONNX ops as exporters write them, at the opset they are written for, read into the `.ne`
rows' spelling or into nf ops directly. One function per op type (`FORMS`); an op type with
no entry here goes to its `.ne` row unchanged.

What changed between opsets (ONNX's operator changelog), read with each definition's own
meaning:

- ``Pad``: ``pads``/``value`` attributes before 11, inputs from 11, ``axes`` from 18;
- ``Split``: ``split`` attribute before 13, input from 13, ``num_outputs`` from 18;
- ``Clip``: ``min``/``max`` attributes before 11, inputs from 11;
- ``Squeeze``/``Unsqueeze``: ``axes`` attribute before 13, input from 13;
- ``ReduceMean`` and the other reductions: ``axes`` attribute before 18 (``ReduceSum``
  before 13), input after, with ``noop_with_empty_axes``;
- ``Softmax``/``LogSoftmax`` before 13 flatten the input to 2-D at ``axis`` (default 1) and
  normalise each row; from 13 along one axis (default -1);
- ``Slice``: ``starts``/``ends``/``axes`` attributes before 10, inputs from 10;
- ``Dropout``: ``ratio`` attribute before 12, ``ratio``/``training_mode`` inputs from 12 (an
  identity at inference either way; its mask output is refused when read);
- ``BatchNormalization``: ``spatial`` before 9 (``spatial = 0`` refused by its row),
  ``training_mode`` from 14;
- ``GroupNormalization``: per-group ``scale``/``bias`` at 18 (repeated per channel here),
  per-channel from 21;
- ``Resize``/``Upsample``: ``resize.py``.

Forms without a `.ne` row: ``Gemm`` with any ``transA``/``transB``/``alpha``/``beta`` and a
constant operand (``nf.linear`` with the weight transposed and scaled once), ``Pow`` by 1, 2
(``x * x``) and 0.5, ``ReduceMean``/``ReduceSum`` over any axes but the batch (a global
average pool over the reduced dims moved last, as the torch frontend does; a sum is that mean
times the count), ``Sum``/``Mean``/``Max``/``Min`` of any number of inputs (a chain of binary
ops), ``Cast`` to the same float type, ``Dropout`` and ``Identity``, a ``Slice`` of several axes
(one ``nf.gather`` per axis), ``InstanceNormalization`` (``nf.group_norm`` with one group per
channel), ``LayerNormalization`` without a bias (zeros), ``Mul``/``Div`` by a constant 1 and
``Add``/``Sub`` of a constant 0 (nothing: an exporter's ``x * 1.0`` before a SiLU), ``auto_pad``
of Conv, MaxPool and AveragePool (SAME_UPPER, SAME_LOWER, VALID) as the explicit pads it means
for static spatial sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.ne.syntax_tree import AttrValue, Float
from nanoir.grammar.onnx.importer.state import FLOAT_TYPES, Node, ReaderState, dims_text, type_name
from nanoir.grammar.onnx.recurrent import read_squeeze
from nanoir.lowering.analysis.products import reciprocal_of_divisor
from nanoir.runtime.numerics.shapes import broadcast_shapes, shape_str
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import SSAValue

__all__ = ["FORMS", "read_by_row"]

Form = Callable[[ReaderState, Node], None]

_INT_MAX = 2**31 - 1
"""Where exporters end a slice that runs to the end (INT32_MAX or INT64_MAX)."""


def read_by_row(r: ReaderState, n: Node) -> None:
    """The op type's `.ne` row, with the node's attributes and inputs as they are."""
    r.row(n, n.op_type, dict(n.attrs), n.inputs, n.outputs)


def _shape(value: SSAValue) -> tuple[int, ...]:
    return nf.tensor_shape(value)


# ---------------------------------------------------------------------------------------
# Inputs that became attributes, or attributes that became inputs
# ---------------------------------------------------------------------------------------


def _pad(r: ReaderState, n: Node) -> None:
    attrs, inputs = dict(n.attrs), list(n.inputs)
    if n.opset >= 11 and len(inputs) > 1:
        pads = list(r.static_ints(inputs[1], "pads"))
        if n.input(2):
            attrs["value"] = r.static_scalar(inputs[2], "constant_value")
        if n.input(3):
            rank = len(_shape(r.ssa(inputs[0])))
            axes = [a % rank if -rank <= a < rank else -1 for a in r.static_ints(inputs[3], "axes")]
            if -1 in axes or len(set(axes)) != len(axes) or len(pads) != 2 * len(axes):
                raise r.error(f"its axes {axes} and pads {pads} do not fit rank {rank}")
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[rank + a] = pads[j], pads[len(axes) + j]
            pads = full
        attrs["pads"] = tuple(pads)
        inputs = inputs[:1]
    r.row(n, "Pad", attrs, inputs, n.outputs)


def _split(r: ReaderState, n: Node) -> None:
    attrs, inputs = dict(n.attrs), list(n.inputs)
    if len(inputs) > 1:
        attrs["split"] = r.static_ints(inputs[1], "split")
        inputs = inputs[:1]
    parts = attrs.pop("num_outputs", None)
    if parts is not None and "split" not in attrs:
        shape = _shape(r.ssa(inputs[0]))
        axis = attrs.get("axis", 0)
        if not isinstance(parts, int) or parts < 1 or not isinstance(axis, int):
            raise r.error("num_outputs and axis must be integers")
        if not -len(shape) <= axis < len(shape) or shape[axis] == DYNAMIC_INDEX:
            raise r.error(f"axis {axis} is out of range or dynamic in {shape_str(shape)}")
        chunk = -(-shape[axis] // parts)
        attrs["split"] = (chunk,) * (parts - 1) + (shape[axis] - chunk * (parts - 1),)
    r.row(n, "Split", attrs, inputs, n.outputs)


def _clip(r: ReaderState, n: Node) -> None:
    attrs, inputs = dict(n.attrs), list(n.inputs)
    if len(inputs) > 1:
        if inputs[1]:
            attrs["min"] = r.static_scalar(inputs[1], "min")
        if n.input(2):
            attrs["max"] = r.static_scalar(inputs[2], "max")
        inputs = inputs[:1]
    r.row(n, "Clip", attrs, inputs, n.outputs)


def _batch_norm(r: ReaderState, n: Node) -> None:
    attrs, outputs = dict(n.attrs), list(n.outputs)
    attrs.pop("consumed_inputs", None)
    attrs.pop("is_test", None)  # opset 6: inference either way
    if attrs.get("training_mode", 0) == 1 or len(outputs) > 1:
        readers = r.readers(outputs[1:])
        if readers:
            raise r.error(
                "its running statistics outputs are read by "
                f"{readers[0]}; nanoir reads a BatchNormalization for inference only"
            )
        if attrs.get("training_mode", 0) == 1:
            r.warn_once(
                "training_mode",
                f"BatchNormalization {r.current} has training_mode=1 (NanoEngine-PyTorch writes "
                "it for inference too); nanoir reads it with its stored running statistics",
            )
        attrs.pop("training_mode", None)
        outputs = outputs[:1]
    r.row(n, "BatchNormalization", attrs, n.inputs, outputs)


def _squeeze(r: ReaderState, n: Node) -> None:
    """Squeeze / Unsqueeze of a runtime tensor: ``nf.reshape`` (axes an attribute before 13,
    an input from 13)."""
    if n.opset >= 13 and n.input(1):
        axes: Sequence[int] = r.static_ints(n.inputs[1], "axes")
    else:
        axes = tuple(int(a) for a in n.attrs.get("axes", ()))  # type: ignore[union-attr]
    if n.op_type == "Unsqueeze" and not axes:
        raise r.error("an Unsqueeze needs axes")
    try:
        op = read_squeeze(n.op_type, r.ssa(n.inputs[0]), axes)
    except ValueError as why:
        raise r.error(f"nanoir cannot read this {n.op_type} node: {why}") from None
    r.add(n, op, n.outputs)


def _slice(r: ReaderState, n: Node) -> None:
    """Slice of a runtime tensor along any axes: one `.ne` Slice row (``nf.gather``) per axis
    that the slice changes (a slice of a whole dim, static or dynamic, is no op)."""
    x = r.ssa(n.inputs[0])
    shape = _shape(x)
    rank = len(shape)
    if n.opset >= 10:
        keys = ("starts", "ends", "axes", "steps")
        given = {k: r.static_ints(name, k) for k, name in zip(keys, n.inputs[1:]) if name}
    else:
        given = {k: tuple(n.attrs[k]) for k in ("starts", "ends", "axes") if k in n.attrs}  # type: ignore[arg-type]
    if "starts" not in given or "ends" not in given:
        raise r.error("a Slice needs starts and ends")
    starts, ends = given["starts"], given["ends"]
    axes = given.get("axes", tuple(range(len(starts))))
    steps = given.get("steps", (1,) * len(starts))
    if not len(axes) == len(steps) == len(starts) == len(ends):
        raise r.error(
            f"its starts, ends, axes and steps {[starts, ends, axes, steps]} differ in length"
        )
    if len({a % rank for a in axes}) != len(axes) or any(not -rank <= a < rank for a in axes):
        raise r.error(f"its axes {list(axes)} are out of range or repeated for rank {rank}")
    if any(s == 0 for s in steps):
        raise r.error("a Slice step is 0")
    cuts: list[tuple[int, list[int]]] = []
    for a, b, e, s in zip(axes, starts, ends, steps):
        axis = a % rank
        size = shape[axis]
        if size == DYNAMIC_INDEX:
            if s == 1 and b == 0 and e >= _INT_MAX:
                continue  # the whole dim
            raise r.error(
                f"it slices dim {axis}, which is dynamic in {dims_text(shape)}" + r.shapes_hint()
            )
        indices = list(range(*slice(b, min(e, 2**62), s).indices(size)))
        if indices == list(range(size)):
            continue
        if not indices:
            raise r.error(f"it slices dim {axis} of {dims_text(shape)} to nothing")
        cuts.append((axis, indices))
    if not cuts:
        r.alias(n.outputs[0], x)
        return
    value = x
    for axis, indices in cuts[:-1]:
        value = r.emit(nf.GatherOp(value, axis, indices)).results[0]
    axis, indices = cuts[-1]
    r.add(n, nf.GatherOp(value, axis, indices), n.outputs)


def _softmax(r: ReaderState, n: Node) -> None:
    """Softmax / LogSoftmax: one axis from opset 13 (default -1); before 13, the input
    flattened to 2-D at ``axis`` (default 1), each row normalised: a reshape keeping the dims
    before ``axis`` and merging the rest, the op along the merged dim, and back."""
    attrs = dict(n.attrs)
    if n.opset >= 13:
        r.row(n, n.op_type, attrs, n.inputs, n.outputs)
        return
    x = r.ssa(n.inputs[0])
    shape = _shape(x)
    rank = len(shape)
    axis = attrs.get("axis", 1)
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise r.error(f"its axis {axis} is out of range for rank {rank}")
    axis %= rank
    if axis == rank - 1:
        r.row(n, n.op_type, {"axis": -1}, n.inputs, n.outputs)
        return
    tail = shape[axis:]
    if DYNAMIC_INDEX in tail:
        raise r.error(
            f"at opset {n.opset} it normalises dims {axis}.. of {dims_text(shape)} together "
            "(flattened to 2-D), one of which is dynamic" + r.shapes_hint()
        )
    flat = r.emit(nf.ReshapeOp(x, [*shape[:axis], math.prod(tail)]))
    soft = r.row(n, n.op_type, {"axis": -1}, [flat.results[0]], [""])
    r.add(n, nf.ReshapeOp(soft.results[0], shape), n.outputs)


def _dropout(r: ReaderState, n: Node) -> None:
    """Dropout at inference is the identity; its mask (all true) is refused when read, and
    ``training_mode`` must be false."""
    if n.opset >= 12 and n.input(2):
        training = r.static_array(n.inputs[2], "training_mode")
        if bool(np.any(training)):
            raise r.error("training_mode is true (random dropout); nanoir reads inference")
    if len(n.outputs) > 1 and r.readers(n.outputs[1:]):
        raise r.error(
            f"its mask output '{n.outputs[1]}' is read; nanoir reads Dropout as the identity"
        )
    r.alias(n.outputs[0], r.ssa(n.inputs[0]))


_FLOAT_BITS = {"f16": 16, "f32": 32, "f64": 64}
_BOOL = 9  # ONNX TensorProto BOOL


def _cast(r: ReaderState, n: Node) -> None:
    """Cast of a runtime (float) tensor: to its own type, or to a wider float type (exact: every
    value is kept), the identity (nanoir computes a program in one float type); to BOOL,
    ``nf.compare "ne"`` with 0 (true and false as 1 and 0, as nf holds them). A narrowing cast
    (it rounds) and a cast to integers are refused naming both types."""
    x = r.ssa(n.inputs[0])
    to = n.attrs.get("to")
    elt = str(x.type.get_element_type())  # type: ignore[attr-defined]
    target = FLOAT_TYPES.get(to)  # type: ignore[arg-type]
    if target is not None and _FLOAT_BITS[str(target)] >= _FLOAT_BITS[elt]:
        r.alias(n.outputs[0], x)
        return
    if to == _BOOL:
        zero = r.fresh_constant(f"{n.name}_zero", np.zeros((), _np_type(x)))
        r.add(n, nf.CompareOp(x, zero, "ne"), n.outputs)
        return
    what = "rounds" if target is not None else "is not a float type"
    raise r.error(
        f"it casts a runtime {elt} tensor to {type_name(r.onnx, to)}, which {what}; nanoir "  # type: ignore[arg-type]
        "computes a program in one float type (a cast to the same or a wider float type is "
        "read as nothing, to BOOL as a comparison with 0)"
    )


def _not(r: ReaderState, n: Node) -> None:
    """Not of a runtime truth value (nanoir holds bools as 1 and 0): ``nf.compare "eq"`` with
    0, as nanoir's ONNX writer spells ``ne`` ``Not(Equal)``."""
    x = r.ssa(n.inputs[0])
    zero = r.fresh_constant(f"{n.name}_zero", np.zeros((), _np_type(x)))
    r.add(n, nf.CompareOp(x, zero, "eq"), n.outputs)


def _identity_constant(r: ReaderState, name: str, neutral: float, like: SSAValue) -> bool:
    """Whether ``name`` is a constant equal to ``neutral`` everywhere whose broadcast against
    ``like`` keeps ``like``'s shape."""
    if name not in r.static:
        return False
    array = r.static[name]
    if array.dtype.kind != "f" or not np.all(array == neutral):
        return False
    shape = _shape(like)
    try:
        return tuple(broadcast_shapes(shape, array.shape)) == tuple(shape)
    except Exception:
        return False


def _arith(r: ReaderState, n: Node) -> None:
    """Add / Sub / Mul / Div; a constant neutral operand (``x * 1``, ``x + 0``) is no op."""
    a, b = (n.inputs + ["", ""])[:2]
    neutral = {"Add": 0.0, "Sub": 0.0, "Mul": 1.0, "Div": 1.0}[n.op_type]
    if len(n.inputs) == 2 and a in r.values and _identity_constant(r, b, neutral, r.values[a]):
        r.alias(n.outputs[0], r.values[a])
        return
    commutes = n.op_type in ("Add", "Mul")
    if (
        commutes
        and len(n.inputs) == 2
        and b in r.values
        and _identity_constant(r, a, neutral, r.values[b])
    ):
        r.alias(n.outputs[0], r.values[b])
        return
    inputs = list(n.inputs)
    inverse = _reciprocal(r, n)
    if inverse is not None:  # Div(a, c): Mul(a, 1/c), the factor quantized like a weight
        inputs[1] = r.fresh_constant(f"{b}.reciprocal", inverse.astype(r.static[b].dtype))
        r.row(n, "Mul", dict(n.attrs), inputs, n.outputs)
        return
    if n.op_type == "Mul" and _fuse_silu(r, inputs):
        r.row(n, "Swish", {}, inputs[:1], n.outputs)
        return
    r.row(n, n.op_type, dict(n.attrs), inputs, n.outputs)


def _reciprocal(r: ReaderState, n: Node) -> np.ndarray | None:
    """For ``Div(a, c)`` with a constant float ``c`` that is no power of two (issue 30 §7),
    ``1/c``: the division is read as that product (``analysis.products``)."""
    if n.op_type != "Div" or len(n.inputs) != 2 or n.inputs[1] not in r.static:
        return None
    divisor = r.static[n.inputs[1]]
    if divisor.dtype.kind != "f":
        return None
    return reciprocal_of_divisor(divisor)


def _fuse_silu(r: ReaderState, inputs: list[str]) -> bool:
    """Whether ``Mul(x, Sigmoid(x))`` (either order; put ``x`` first in ``inputs``) with the
    Sigmoid read by this Mul alone: that is SiLU (``nf.silu``, `.ne`'s Swish), which the
    exporter writes so below opset 24; the Sigmoid's op is dropped."""
    if len(inputs) != 2:
        return False
    for x, s in (inputs, inputs[::-1]):
        sig, xv = r.values.get(s), r.values.get(x)
        owner = None if sig is None else sig.owner
        if (
            isinstance(owner, nf.SigmoidOp)
            and xv is not None
            and owner.input is xv
            and len(r.readers([s])) == 1
            and s not in {o.name for o in r.graph.output}
        ):
            r.ops.remove(owner)
            owner.erase(safe_erase=False)
            del r.values[s]
            inputs[:] = [x, s]
            return True
    return False


def _variadic(r: ReaderState, n: Node) -> None:
    """Sum / Mean / Max / Min of any number of inputs: a chain of binary ops (Mean: then
    times 1/N); one input is itself."""
    binary = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}[n.op_type]
    if not n.inputs:
        raise r.error(f"a {n.op_type} needs at least one input")
    if len(n.inputs) == 1:
        r.alias(n.outputs[0], r.ssa(n.inputs[0]))
        return
    if len(n.inputs) == 2 and n.op_type != "Mean":
        r.row(n, binary, {}, n.inputs, n.outputs)
        return
    value: SSAValue | str = n.inputs[0]
    last = len(n.inputs) - 1
    for i, name in enumerate(n.inputs[1:], 1):
        outputs = n.outputs if i == last and n.op_type != "Mean" else [""]
        value = r.row(n, binary, {}, [value, name], outputs).results[0]
    if n.op_type == "Mean":
        assert isinstance(value, SSAValue)
        scale = np.asarray(1.0 / len(n.inputs), dtype=_np_type(value))
        r.add(n, nf.MulOp(value, r.fresh_constant(f"{n.name}_1_over_n", scale)), n.outputs)


def _np_type(value: SSAValue) -> type:
    elt = str(value.type.get_element_type())  # type: ignore[attr-defined]
    return {"f16": np.float16, "f32": np.float32, "f64": np.float64}[elt]


def _instance_norm(r: ReaderState, n: Node) -> None:
    """InstanceNormalization: each channel normalised over its positions, then per-channel
    scale and bias: ``nf.group_norm`` with one group per channel."""
    x = r.ssa(n.inputs[0])
    shape = _shape(x)
    if len(shape) < 3 or shape[1] == DYNAMIC_INDEX:
        raise r.error(f"its input {dims_text(shape)} needs rank >= 3 and static channels")
    eps = n.attrs.get("epsilon", Float("1e-05"))
    attrs: dict[str, AttrValue] = {"epsilon": eps, "num_groups": shape[1]}
    r.row(n, "GroupNormalization", attrs, n.inputs, n.outputs)


def _layer_norm(r: ReaderState, n: Node) -> None:
    """LayerNormalization; without a bias input, a zero bias."""
    inputs = list(n.inputs)
    if len(inputs) == 2:
        scale = r.ssa(inputs[1])
        inputs.append(
            r.fresh_constant(f"{n.name}_bias", np.zeros(_shape(scale), _np_type(scale)))  # type: ignore[arg-type]
        )
    if len(n.outputs) > 1 and r.readers(n.outputs[1:]):
        raise r.error("its Mean / InvStdDev outputs are read; nanoir reads the normalised output")
    r.row(n, "LayerNormalization", dict(n.attrs), inputs, n.outputs[:1])


def _group_norm(r: ReaderState, n: Node) -> None:
    """GroupNormalization: opset 18's scale and bias are per group (repeated per channel
    here, constants only); opset 21's per channel."""
    inputs: list[str | SSAValue] = list(n.inputs)
    if n.opset < 21 and len(inputs) == 3:
        groups = n.attrs.get("num_groups")
        x = r.ssa(n.inputs[0])
        channels = _shape(x)[1] if len(_shape(x)) > 1 else DYNAMIC_INDEX
        if (
            not isinstance(groups, int)
            or groups < 1
            or channels == DYNAMIC_INDEX
            or channels % groups
        ):
            raise r.error(f"its num_groups {groups} does not divide {channels} channels")
        for i in (1, 2):
            per_group = r.static_array(n.inputs[i], "scale" if i == 1 else "bias")
            if per_group.shape != (groups,):
                raise r.error(
                    f"its {'scale' if i == 1 else 'bias'} has shape {list(per_group.shape)}; "
                    f"opset {n.opset} takes one value per group ({groups})"
                )
            repeated = np.repeat(per_group, channels // groups)
            inputs[i] = r.fresh_constant(f"{n.inputs[i]}_per_channel", repeated)
    r.row(n, "GroupNormalization", dict(n.attrs), inputs, n.outputs)


def _prelu(r: ReaderState, n: Node) -> None:
    """PRelu's slope as nf.prelu's: ONNX broadcasts the slope from the right, so only a
    slope that is 1 on every dim but the channel dim (1) once padded on the left to the
    input's rank is per channel (`[C, 1, 1]` of NCHW, `[C]` of a rank-2 input) and one of
    ones is a scalar; it becomes a 1-D `[C]` or `[1]` slope. Any other is refused.
    (The `.ne` PRelu row keeps torch's rule, a 1-D slope per channel, unchanged.)"""
    if len(n.inputs) != 2:
        read_by_row(r, n)
        return
    x_shape = _shape(r.ssa(n.inputs[0]))
    name = n.inputs[1]
    static = name in r.static and r.static[name].dtype.kind == "f"
    shape = list(r.static[name].shape if static else _shape(r.ssa(name)))
    padded = [1] * (len(x_shape) - len(shape)) + shape
    if len(shape) > len(x_shape) or any(d != 1 for i, d in enumerate(padded) if i != 1):
        raise r.error(
            f"its slope '{name}' of shape {dims_text(shape)} does not broadcast per channel or "
            f"as a scalar against the input's shape {dims_text(x_shape)} (ONNX aligns the slope "
            "to the last dims; nanoir reads a slope of shape [C, 1, ..., 1], [C] of a rank-2 "
            "input, or a single value)"
        )
    flat = [padded[1] if len(padded) > 1 else 1]
    slope: SSAValue
    if static and shape != flat:  # a constant of its own: others may read the [C, 1, 1]
        slope = r.fresh_constant(name, r.static[name].reshape(flat))
    else:
        value = r.ssa(name)
        if shape == flat:
            slope = value
        else:
            source = value.owner
            if isinstance(source, nf.ReshapeOp) and list(_shape(source.input)) == flat:
                r.bypassed.add(source)  # nanoir's own export: Reshape([C] -> [C, 1, 1])
                slope = source.input
            else:
                slope = r.emit(nf.ReshapeOp(value, flat)).results[0]
    r.row(n, "PRelu", dict(n.attrs), [n.inputs[0], slope], n.outputs)


def _where(r: ReaderState, n: Node) -> None:
    """Where(cond, x, y): a constant bool or integer operand is read as a float constant of
    its 0/1 (or integer) values, as ``nf.where`` and ``nf.compare`` hold them."""
    like = next((r.values[x] for x in n.inputs if x in r.values), None)
    dtype = _np_type(like) if like is not None else np.float32
    inputs: list[str | SSAValue] = []
    for name in n.inputs:
        if name in r.static and r.static[name].dtype.kind in "biu":
            inputs.append(r.fresh_constant(f"{name}_values", r.static[name].astype(dtype)))
        else:
            inputs.append(name)
    r.row(n, "Where", dict(n.attrs), inputs, n.outputs)


def _explicit_pads(r: ReaderState, n: Node, kernel: Sequence[int]) -> dict[str, AttrValue]:
    """``auto_pad`` SAME_UPPER / SAME_LOWER / VALID as the explicit ``pads`` it means for the
    input's static spatial sizes (ONNX: the output is ``ceil(L / stride)`` for SAME, the extra
    pad at the end for SAME_UPPER, at the start for SAME_LOWER)."""
    attrs = dict(n.attrs)
    mode = str(attrs.pop("auto_pad", "NOTSET"))
    if mode == "NOTSET":
        return attrs
    shape = _shape(r.ssa(n.inputs[0]))[2:]
    if mode == "VALID":
        attrs["pads"] = (0,) * (2 * len(kernel))
        return attrs
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise r.error(f"its auto_pad '{mode}' is not ONNX's")
    if DYNAMIC_INDEX in shape:
        raise r.error(f"its auto_pad {mode} pads dynamic spatial dims" + r.shapes_hint())
    strides = attrs.get("strides") or (1,) * len(kernel)
    dilations = attrs.get("dilations") or (1,) * len(kernel)
    begins, ends = [], []
    for size, k, s, d in zip(shape, kernel, strides, dilations):  # type: ignore[arg-type]
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    attrs["pads"] = tuple(begins + ends)
    return attrs


def _conv(r: ReaderState, n: Node) -> None:
    """Conv; ``auto_pad`` as explicit pads (`_explicit_pads`), the kernel from the weight."""
    kernel = _shape(r.ssa(n.inputs[1]))[2:] if len(n.inputs) > 1 else ()
    r.row(n, n.op_type, _explicit_pads(r, n, kernel), n.inputs, n.outputs)


def _pool(r: ReaderState, n: Node) -> None:
    """MaxPool / AveragePool; ``auto_pad`` as explicit pads, the unread Indices dropped."""
    kernel = tuple(int(k) for k in n.attrs.get("kernel_shape", ()))  # type: ignore[union-attr]
    outputs = n.outputs
    if n.op_type == "MaxPool" and len(outputs) > 1 and not r.readers(outputs[1:]):
        outputs = outputs[:1]  # the Indices output, which nobody reads
    r.row(n, n.op_type, _explicit_pads(r, n, kernel), n.inputs, outputs)


def _hard_sigmoid(r: ReaderState, n: Node) -> None:
    r.row(n, "HardSigmoid", dict(n.attrs), n.inputs, n.outputs)


FORMS: dict[str, Form] = {
    "Pad": _pad,
    "Split": _split,
    "Clip": _clip,
    "BatchNormalization": _batch_norm,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "Conv": _conv,
    "Squeeze": _squeeze,
    "Unsqueeze": _squeeze,
    "Slice": _slice,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "Dropout": _dropout,
    "Cast": _cast,
    "Not": _not,
    "Add": _arith,
    "Sub": _arith,
    "Mul": _arith,
    "Div": _arith,
    "Sum": _variadic,
    "Mean": _variadic,
    "Max": _variadic,
    "Min": _variadic,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "GroupNormalization": _group_norm,
    "HardSigmoid": _hard_sigmoid,
    "PRelu": _prelu,
    "Where": _where,
}
"""ONNX op type -> how the reader reads it (where the `.ne` row alone does not)."""
