"""What an op *is*, as xDSL traits on the op classes, so that passes ask instead of keeping tables.

MLIR and xDSL keep facts about an op on the op (``traits = traits_def(...)``); a pass asks
``op.has_trait(DataMovement)`` or ``op.get_trait(SlidingWindow)``. nanoir's facts:

- :class:`Elementwise`: each result element depends on the operand elements at the same
  (NumPy-broadcast) index (activations, arithmetic, fake-quant, requant, lut);
- :class:`DataMovement`: results hold operand values unchanged, only moved (reshape,
  transpose, concat, split, pad, upsample): a value's exponent carries through, so quantize
  puts no fake-quant after them;
- :class:`SlidingWindow`: a conv or pool: kernel, strides, pads and dilations along each
  spatial dim (:meth:`SlidingWindow.geometry`);
- :class:`ChannelWise`: elementwise on the data with constant parameters along the channels
  (batch_norm, prelu);
- :class:`Contraction`: a sum over the last dim of the lhs (linear, matmul);
- :class:`WholeExtent`: each output element reads a window that depends on the whole extent
  of a dim (adaptive and global pools);
- :class:`Weighted`: operand 1 is a weight (its output channels along ``channel_axis``),
  operand 2 a bias (conv, conv_transpose, linear);
- :class:`FloatOnly`: no integer arithmetic form; :class:`LookupTable`: lowered to an
  ``nh.lut`` when a fake-quant reads it (its float function, :meth:`LookupTable.evaluate`);
- :class:`IntegerAlgorithm`: no dyadic form either, but a documented integer algorithm on
  codes defines it once quantized (softmax, log-softmax).

Streaming (DESIGN.md, "Streaming"). Every trait above except the last three is a
:class:`StreamingRule`: asked :meth:`~StreamingRule.row_step` for one dim, it says how the op
consumes and produces rows along it, as a :class:`RowStep` (rows each runtime operand's
cache *needs* to fire, rows it *drops* after firing, rows each result *emits* per firing,
zero rows of padding), or ``None`` when the op needs the whole extent of its inputs along
that dim at once. ``emit`` may exceed 1: a nearest upsample by ``r`` needs 1 row, drops 1
and emits ``r`` rows per firing; a transposed conv of stride ``s`` (a zero-inserting upsample
by ``s``, then a conv) needs the input rows one window of ``s`` output rows reads, drops 1
and emits ``s`` (:class:`TransposedWindow` says which rows and when that holds); DepthToSpace
(PixelShuffle) by ``r`` emits ``r`` rows per row, SpaceToDepth needs and drops ``r`` and
emits 1. The planner and the executor multiply a firing's windows by ``emit``
(the rows a result gains). The stream planner (``nanoir.lowering.analysis``) adds what holds
for every op: a node whose values all lack the dim moves whole units; all of a node's
caches step together.

```python
>>> from nanoir.dialects import nf
>>> nf.ReshapeOp.has_trait(DataMovement), nf.SigmoidOp.has_trait(LookupTable)
(True, True)

```
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from nanoir.runtime.numerics.kernels import nearest_indices
from nanoir.runtime.numerics.shapes import window_params
from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.traits import OpTrait

__all__ = [
    "Adjust",
    "ChannelWise",
    "Contraction",
    "DataMovement",
    "Elementwise",
    "FloatOnly",
    "IntegerAlgorithm",
    "LookupTable",
    "Normalising",
    "Quantized",
    "Recurrent",
    "RowStep",
    "SlidingWindow",
    "StreamingRule",
    "TransposedWindow",
    "Weighted",
    "Window",
    "WholeAlongAxis",
    "WholeExtent",
    "aligns_channels",
    "always_aligns",
    "concat_aligns",
    "expand_aligns",
    "grid_operands",
    "pad_aligns",
    "reshape_aligns",
    "shape_operands",
    "transpose_aligns",
    "weight_reader",
]

Adjust = Literal[
    "none", "window", "pad", "output_size", "result_rows", "transposed", "indices", "state"
]
"""How the streaming executor adapts an op to a window of rows: ``window`` sets a conv/pool's
``pads`` along the dim to the zero rows inside the window, ``pad`` does so for ``nf.pad``,
``output_size`` sets an adaptive pool's size along the dim to the windows fired,
``result_rows`` sets the result type's extent along the dim to the rows produced,
``transposed`` runs a transposed conv on the window (zero rows made real, no pads along the
dim) and keeps the ``emit`` rows per firing that the window owns (:class:`TransposedWindow`)."""


def _shape(value: SSAValue | Attribute) -> tuple[int, ...]:
    t = value.type if isinstance(value, SSAValue) else value
    return t.get_shape() if isinstance(t, TensorType) else ()


def _ints(attr: Attribute | None) -> tuple[int, ...] | None:
    if attr is None:
        return None
    assert isinstance(attr, DenseArrayBase)
    return tuple(int(v) for v in attr.get_values())


def _has_dim(value: SSAValue, dim: int) -> bool:
    return len(_shape(value)) > dim


@dataclass(frozen=True)
class RowStep:
    """How an op steps along one dim: every runtime operand's cache needs ``need`` rows to
    fire and drops ``drop`` rows after; each result emits ``emit`` rows per firing."""

    need: int = 1
    drop: int = 1
    emit: int = 1
    pad_begin: int = 0
    """Zero rows before the first real row (a causal warm-up)."""
    pad_end: int = 0
    """Zero rows fed once every operand has ended."""
    ceil_mode: bool = False
    """Fire once more on a partial last window (PyTorch's pooling ``ceil_mode``)."""
    adjust: Adjust = "none"


ROW = RowStep()
"""One row in, one row out."""


@dataclass(frozen=True)
class StreamingRule(OpTrait):
    """The op can be streamed: :meth:`row_step` says how along one dim."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        """The step along ``dim`` given which operands are ``runtime`` values (the others are
        constants); ``None``: the op needs the whole extent along ``dim`` at once."""
        raise NotImplementedError(type(self).__name__)


@dataclass(frozen=True)
class Elementwise(StreamingRule):
    """Each result element depends on the operand elements at its (broadcast) index.

    ``params`` name properties that broadcast against the result like operands (the
    exponents of ``nq.fake_quant``).
    """

    params: tuple[str, ...] = ()

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        # A runtime operand broadcast along dim, or a constant (or a parameter) that varies
        # along it, has no per-row meaning.
        out = _shape(op.results[0])
        rank = len(out)
        sizes = [(_shape(v), out[dim] if v in runtime else 1) for v in op.operands]
        for name in self.params:
            value = op.properties.get(name)
            if value is not None and hasattr(value, "get_type"):
                sizes.append((_shape(value.get_type()), 1))  # type: ignore[union-attr]
        for shape, expected in sizes:
            axis = dim - (rank - len(shape))  # NumPy aligns trailing dims
            if (shape[axis] if axis >= 0 else 1) != expected:
                return None
        # A runtime operand of lower rank that reaches dim runs along another axis of its
        # own (NumPy right-aligns it), which the planner does not stream along dim.
        if any(v in runtime and 0 <= dim - (rank - len(_shape(v))) < dim for v in op.operands):
            return None
        return ROW


@dataclass(frozen=True)
class ChannelWise(StreamingRule):
    """Elementwise on operand 0 with constant parameters along the channels (BN, PReLU)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        return ROW if tuple(runtime) == (op.operands[0],) else None


@dataclass(frozen=True)
class Window:
    """A conv or pool's window along each spatial dim (index ``i`` = tensor dim ``i + 2``)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    """Begins, then ends."""
    dilations: tuple[int, ...]
    ceil_mode: bool = False

    def field(self, i: int) -> int:
        """Rows one window spans along spatial dim ``i``: ``dil*(k-1)+1``."""
        return self.dilations[i] * (self.kernel[i] - 1) + 1


@dataclass(frozen=True)
class SlidingWindow(StreamingRule):
    """A conv or pool over ``[N, C, *spatial]``: ``kernel_from`` says where the kernel size is
    (``"weight"``: the weight's spatial dims; ``"kernel"``: the ``kernel`` property); the
    op's ``strides``, ``pads``, ``dilations`` and ``ceil_mode`` properties (each optional) give
    the rest."""

    kernel_from: Literal["weight", "kernel"] = "kernel"

    def geometry(self, op: Operation) -> Window:
        if self.kernel_from == "weight":
            kernel: Sequence[int] = _shape(op.operands[1])[2:]
        else:
            kernel = _ints(op.properties.get("kernel")) or ()
        k, s, p, d = window_params(
            len(kernel),
            kernel,
            _ints(op.properties.get("strides")),
            _ints(op.properties.get("pads")),
            _ints(op.properties.get("dilations")),
        )
        ceil = op.properties.get("ceil_mode")
        return Window(k, s, p, d, bool(ceil is not None and ceil.value.data))  # type: ignore[attr-defined]

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        data = op.operands[0]
        if tuple(runtime) != (data,):  # a runtime weight or bias: no per-row meaning
            return None
        if not _has_dim(data, dim):
            return ROW
        w = self.geometry(op)
        i, n = dim - 2, len(w.kernel)
        return RowStep(w.field(i), w.strides[i], 1, w.pads[i], w.pads[n + i], w.ceil_mode, "window")


@dataclass(frozen=True)
class Contraction(StreamingRule):
    """A sum over the last dim of operand 0 (``lhs``) against operand 1 (``linear``: a
    ``[out, in]`` weight; ``matmul``: NumPy matmul)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        lhs = op.operands[0]
        if tuple(runtime) != (lhs,):
            return None
        if not _has_dim(lhs, dim):
            return ROW
        if len(_shape(op.operands[1])) != 2 or dim == len(_shape(lhs)) - 1:
            return None  # a batched rhs, or contracting the dim itself
        return ROW


@dataclass(frozen=True)
class WholeExtent(StreamingRule):
    """Windows depend on the whole extent (adaptive pools, ``output_size`` per spatial dim):
    streamable only where the windows are even (``L % out == 0``, a pool of kernel = stride
    = ``L / out``)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        x = op.operands[0]
        if not _has_dim(x, dim):
            return ROW
        size = _shape(x)[dim]
        out = (_ints(op.properties.get("output_size")) or ())[dim - 2]
        if size == DYNAMIC_INDEX or size % out:
            return None
        return RowStep(size // out, size // out, adjust="output_size")


@dataclass(frozen=True)
class TransposedWindow(SlidingWindow):
    """A transposed conv (``[N, C, *spatial]``, weight ``[C, O/g, *K]``): input row ``i``
    adds into output rows ``i*s + t*d - pad_begin``, so each firing *emits* ``s`` rows.

    Along a dim with stride ``s``, dilation ``d``, kernel ``k`` (``F = d*(k-1)``), pads
    ``pb``/``pe`` and ``output_padding`` ``op``: firing ``j`` emits output rows
    ``[j*s, j*s + s)``, which read input rows ``j - floor((F - pb)/s)`` to
    ``j + ceil(pb/s)``: it needs ``floor((F - pb)/s) + ceil(pb/s) + 1`` rows, the first
    ``floor((F - pb)/s)`` of them zero rows before the input (warm-up), drops 1 and emits
    ``s``. The output has ``L*s + E - s`` rows with ``E = F + 1 + op - pb - pe``; so the rule
    holds when ``s`` divides ``E`` (then ``E/s - 1 + ceil(pb/s)`` zero rows end the input),
    as for the usual ``k = 2s, p = s/2`` or ``k = s`` upsampling convs and every stride-1 one;
    otherwise (or with ``pb > F``) the op takes the whole extent along the dim.
    """

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        data = op.operands[0]
        if tuple(runtime) != (data,):
            return None
        if not _has_dim(data, dim):
            return ROW
        w = self.geometry(op)
        i, n = dim - 2, len(w.kernel)
        s, pb, pe = w.strides[i], w.pads[i], w.pads[n + i]
        outpad = (_ints(op.properties.get("output_padding")) or (0,) * n)[i]
        span = w.field(i) - 1
        e = span + 1 + outpad - pb - pe
        if pb > span or e % s or e // s - 1 + -(-pb // s) < 0:
            return None
        warm = (span - pb) // s
        return RowStep(
            warm + -(-pb // s) + 1, 1, s, warm, e // s - 1 + -(-pb // s), adjust="transposed"
        )


@dataclass(frozen=True)
class WholeAlongAxis(WholeExtent):
    """A reduction over the op's ``axis`` property (softmax's row sum): the whole extent
    along that axis (the stream planner then waits for every row, and refuses a dynamic
    one, saying so), elementwise along the other dims (a constant mask, operand or ``mask``
    property, that varies along one of them makes it whole there too)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        rank = len(_shape(op.operands[0]))
        if op.properties["axis"].value.data % rank == dim:  # type: ignore[attr-defined]
            return None
        return Elementwise(("mask",)).row_step(op, dim, runtime)  # a mask varying along dim


RowsAlong = Callable[[Operation, int, Collection[SSAValue]], "RowStep | None"]


def never_aligns(op: Operation) -> bool:
    """Per-channel exponents move with their channels (split, gather, upsampling, ...)."""
    return False


@dataclass(frozen=True)
class DataMovement(StreamingRule):
    """Results hold operand values unchanged, moved: exponents carry through.

    ``rows`` is the op's own streaming rule (:meth:`StreamingRule.row_step`); the ones
    below are shared by the nf and nh forms of an op.
    """

    rows: RowsAlong
    shape_only: tuple[int, ...] = ()
    """Operands read for their shape alone (an expand's shape source, ``like``): no value of
    theirs reaches the result, so quantize, the exponents and the stream planner's caches
    leave them out (:func:`shape_operands`)."""
    indices: tuple[int, ...] = ()
    """Operands read as positions (an embedding's ids, an unpool's indices): runtime integers
    on no grid, whose values do not reach the result; the result's grid is the other
    operands' (:func:`grid_operands`)."""
    aligns: Callable[[Operation], bool] = never_aligns
    """Whether per-channel exponents (along dim 1) cannot move with their channels, so that
    lower-to-hw first aligns them onto one exponent (the finest, by exact left shifts, which
    widens the codes by the exponents' spread): channels leaving dim 1 (a reshape, a
    transpose, an expand that grows the rank), a padded channel dim or a non-zero pad value,
    depth_to_space gathering channels into one, a concat along another dim. Asked by quantize
    (:func:`aligns_channels`), whose join rules keep that spread within what the reader takes
    (a lookup table, a lone batch norm)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        return self.rows(op, dim, runtime)


def shape_operands(op: Operation) -> tuple[SSAValue, ...]:
    """The operands of ``op`` read for their shape alone (:attr:`DataMovement.shape_only`)."""
    trait = op.get_trait(DataMovement)
    if trait is None or not trait.shape_only:
        return ()
    return tuple(op.operands[i] for i in trait.shape_only if i < len(op.operands))


def grid_operands(op: Operation) -> tuple[SSAValue, ...]:
    """The operands of a data-movement ``op`` whose values (and so grids) reach its result:
    all but those read for their shape or as positions (:class:`DataMovement`)."""
    trait = op.get_trait(DataMovement)
    skip = () if trait is None else (*trait.shape_only, *trait.indices)
    return tuple(v for i, v in enumerate(op.operands) if i not in skip)


def aligns_channels(op: Operation) -> bool:
    """Whether the data-movement ``op`` puts per-channel exponents onto one before it moves
    codes (:attr:`DataMovement.aligns`); False for any other op."""
    trait = op.get_trait(DataMovement)
    return trait is not None and trait.aligns(op)


def reshape_aligns(op: Operation) -> bool:
    """A reshape aligns unless the channels stay in dim 1 (lower-to-hw's ``LowerReshape``)."""
    x, y = _shape(op.operands[0]), _shape(op.results[0])
    return not (len(x) >= 2 and len(y) >= 2 and x[1] == y[1])


def transpose_aligns(op: Operation) -> bool:
    """A transpose aligns unless dim 1 stays dim 1."""
    perm = _ints(op.properties.get("perm")) or ()
    return len(perm) < 2 or perm[1] != 1


def pad_aligns(op: Operation) -> bool:
    """A pad aligns where it pads the channel dim or pads with a non-zero constant (a code on
    one exponent)."""
    pads = _ints(op.properties.get("pads")) or ()
    rank = len(_shape(op.operands[0]))
    mode = getattr(op.properties.get("mode"), "data", "constant")
    value = getattr(op.properties.get("value"), "value", None)
    nonzero = mode == "constant" and value is not None and value.data != 0
    return nonzero or (rank >= 2 and len(pads) == 2 * rank and bool(pads[1] or pads[rank + 1]))


def expand_aligns(op: Operation) -> bool:
    """An expand aligns where it grows the rank (the channel dim moves)."""
    return len(_shape(op.results[0])) != len(_shape(op.operands[0]))


def concat_aligns(op: Operation) -> bool:
    """A concat along another dim than 1 aligns its parts: each channel onto its finest
    exponent across them (per tensor: onto one)."""
    rank = len(_shape(op.results[0]))
    return rank < 2 or op.properties["axis"].value.data % rank != 1  # type: ignore[attr-defined]


def always_aligns(op: Operation) -> bool:
    """depth_to_space: one result channel gathers ``r**n`` input channels, whose exponents
    lower-to-hw aligns unless they happen to be equal (a fact of the exponents, not the op)."""
    return True


def _same_prefix(a: Sequence[int], b: Sequence[int], dim: int) -> bool:
    if len(a) <= dim or len(b) <= dim:
        return False
    return all(x == y or DYNAMIC_INDEX in (x, y) for x, y in zip(a[: dim + 1], b[: dim + 1]))


def reshape_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Row by row when the dims up to ``dim`` are kept; else (flatten) the whole extent."""
    if _same_prefix(_shape(op.operands[0]), _shape(op.results[0]), dim):
        return RowStep(adjust="result_rows")
    return None


def transpose_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Row by row when the permutation keeps the batch and ``dim`` in place."""
    perm = _ints(op.properties.get("perm")) or ()
    return ROW if perm and perm[0] == 0 and len(perm) > dim and perm[dim] == dim else None


def axis_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Concat and split: a join along any other axis; along ``dim`` itself, the whole extent
    (as is a constant joined with streamed rows, which would have to be cut row by row)."""
    rank = len(_shape(op.results[0]))
    axis = op.properties["axis"].value.data % rank  # type: ignore[attr-defined]
    if axis == dim or any(v not in runtime for v in op.operands):
        return None
    return ROW


def pad_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """Constant padding along ``dim`` is warm-up rows; other modes and crops take it whole."""
    x = op.operands[0]
    if not _has_dim(x, dim):
        return ROW
    pads = _ints(op.properties.get("pads")) or ()
    rank = len(_shape(x))
    begin, end = pads[dim], pads[rank + dim]
    if begin == end == 0:
        return RowStep(adjust="pad")
    mode = op.properties.get("mode")
    if getattr(mode, "data", "constant") != "constant" or begin < 0 or end < 0:
        return None
    return RowStep(pad_begin=begin, pad_end=end, adjust="pad")


def scale_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """An integer scale ``r`` along ``dim`` (nearest upsampling): each row emits ``r`` rows."""
    x, y = _shape(op.operands[0]), _shape(op.results[0])
    if x[dim] == DYNAMIC_INDEX or y[dim] % x[dim]:
        return None
    r = y[dim] // x[dim]
    # Row j reads row j // r, as every window of rows does (torch's float32 product does not
    # for a few large r: then the op takes the whole extent).
    if (nearest_indices(x[dim], y[dim]) != np.arange(y[dim]) // r).any():
        return None
    return RowStep(emit=r, adjust="result_rows")


def depth_to_space_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """DepthToSpace (PixelShuffle) by ``r``: each input row emits ``r`` rows along every
    spatial dim."""
    return (
        RowStep(
            emit=op.properties["block"].value.data,  # type: ignore[attr-defined]
            adjust="result_rows",
        )
        if dim >= 2
        else None
    )


def space_to_depth_rows(op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
    """SpaceToDepth (PixelUnshuffle) by ``r``: ``r`` rows make one output row."""
    r = op.properties["block"].value.data  # type: ignore[attr-defined]
    return RowStep(r, r, 1, adjust="result_rows") if dim >= 2 else None


@dataclass(frozen=True)
class Weighted(OpTrait):
    """Operand 1 is a weight and operand 2 an optional bias (conv, conv_transpose, linear):
    quantize gives them weight and bias rules, and the weight's per-channel exponents run
    along its output channels, dim ``channel_axis`` (0 for ``[O, C/g, *K]`` and ``[O, I]``,
    1 for a transposed conv's ``[C, O/g, *K]``); at the hw level that is the first ``C`` of
    the weight's layout (:meth:`layout`)."""

    channel_axis: int = 0

    def layout(self, rank: int) -> str:
        """The nh layout of the weight: ``CC`` + ``D``s, or ``DC`` + ``D``s for axis 1."""
        return "D" * self.channel_axis + "C" * (2 - self.channel_axis) + "D" * (rank - 2)


def weight_reader(value: SSAValue) -> Weighted | None:
    """The :class:`Weighted` trait of an op that reads ``value`` as its weight, if any."""
    for use in value.uses:
        trait = use.operation.get_trait(Weighted)
        if trait is not None and use.index == 1:
            return trait
    return None


@dataclass(frozen=True)
class FloatOnly(OpTrait):
    """No integer arithmetic form: lower-to-hw needs a :class:`LookupTable` (or fails)."""


@dataclass(frozen=True)
class LookupTable(OpTrait):
    """An elementwise float function of one operand, lowered to ``nh.lut`` over every input
    code when a fake-quant reads the result: ``function(x, *params)`` with the op's
    ``params`` properties (floats) after ``x``, the same kernel the float interpreter runs."""

    function: Callable[..., Any]
    params: tuple[str, ...] = ()

    MAX_INPUT_BITS: ClassVar[int] = 16
    """The widest input a table covers: lower-to-hw evaluates it on every code its input can
    take, at most ``2**16 + 1`` (the segmented form); quantize keeps a table's aligned input
    within it (``join_rules.TABLE_INPUT_BITS``)."""

    def evaluate(self, op: Operation, x: np.ndarray) -> np.ndarray:
        """The op's float result on ``x`` (float64)."""
        return np.asarray(self.function(x, *self._param_values(op)))

    def _param_values(self, op: Operation) -> tuple[float, ...]:
        return tuple(float(op.properties[p].value.data) for p in self.params)  # type: ignore[attr-defined]

    def source(self, op: Operation) -> tuple[str, tuple[float, ...]] | None:
        """The function the table evaluates, as ``nh.lut`` records it (``function``,
        ``params``): the op's name within its dialect (``hardswish`` for ``nf.hardswish``)
        and its float ``params``; None where those do not say it all (a table whose
        ``evaluate`` reads other properties)."""
        return op.name.partition(".")[2], self._param_values(op)


@dataclass(frozen=True)
class Quantized:
    """A per-tensor quantized value: ``bits``, code exponent ``exp`` (value = code * 2**-exp;
    for 1-bit, the nh exponent ``-k``) and whether the codes are signed."""

    bits: int
    exp: int
    signed: bool = True


def _fake_quant_spec(fq: Operation) -> Quantized | str:
    bits = fq.properties["bits"].value.data  # type: ignore[attr-defined]
    exps = {int(v) for v in fq.properties["exp"].get_values()}  # type: ignore[attr-defined]
    if len(exps) != 1:
        return f"its exponents {sorted(exps)} differ along a dim (per channel)"
    signed = fq.properties.get("signed")
    k = exps.pop()
    return Quantized(bits, -k if bits == 1 else k, signed is None or bool(signed.value.data))  # type: ignore[attr-defined]


Leaf = TypeVar("Leaf")


def grid_sources(value: SSAValue, leaf: Callable[[SSAValue], Leaf | None]) -> list[Leaf] | None:
    """The quantized values (``leaf`` says what one is: a fake-quant, a quantize target ...)
    whose grids ``value`` carries, looking back through data movement (a concat carries all
    its parts', an embedding its table's: :func:`grid_operands`); None if some part is not
    one."""
    found_leaf = leaf(value)
    if found_leaf is not None:
        return [found_leaf]
    if isinstance(value.owner, Operation):
        op = value.owner
        if op.has_trait(DataMovement) and op.operands:
            found: list[Leaf] = []
            for operand in grid_operands(op):
                part = grid_sources(operand, leaf)
                if part is None:
                    return None
                found += [f for f in part if f not in found]
            return found
    return None


def source_quantized(value: SSAValue) -> Quantized | str:
    """The per-tensor grid ``value`` is on: its fake-quant's, looking back through data
    movement (all of a concat's inputs on one grid); else the reason there is none."""
    if not isinstance(value.owner, Operation):
        return "it is a function argument with no fake-quant"
    op = value.owner
    if op.name == "nq.fake_quant":
        return _fake_quant_spec(op)
    if not op.has_trait(DataMovement) or not op.operands:
        return f"it comes from {op.name}, not from a fake-quant"
    specs = {source_quantized(v) for v in grid_operands(op)}
    if len(specs) != 1:
        return f"the inputs of {op.name} are on different grids"
    return specs.pop()


def result_quantized(op: Operation) -> Quantized | str:
    """The per-tensor grid of ``op``'s result: the fake-quant that is its sole user."""
    uses = list(op.results[0].uses)
    if len(uses) != 1 or uses[0].operation.name != "nq.fake_quant":
        return "its result is not read by one fake-quant alone"
    return _fake_quant_spec(uses[0].operation)


Codes = Callable[..., np.ndarray]
"""``codes(op, q, input, output, *operands)``: the output codes of the integer algorithm for
input codes ``q`` (float64 at nq, int64 at nh) on grid ``input``, into grid ``output``; the
op's other operands (a mask) follow as arrays."""


@dataclass(frozen=True)
class IntegerAlgorithm(OpTrait):
    """An op with no dyadic form whose quantized semantics is an integer algorithm on codes
    (softmax, log-softmax; LayerNorm, GroupNorm): DESIGN.md, "Ops with no dyadic form".

    Where the nq semantics lives: in the nq runtime kernel of the nf op itself. The program
    stays "nf ops between fake-quants" (so ``.ne``, ONNX, QAT ``convert`` and the report need
    no new nq op), and the kernel reads its quantization from the IR around it:

    - the input grid from operand 0's fake-quant, looking back through data movement
      (:func:`source_quantized`), per tensor;
    - the output grid from the fake-quant that is the result's sole user
      (:func:`result_quantized`), per tensor (the algorithm's own rounding, half up, puts the
      result on that grid, so the fake-quant then changes nothing).

    When both exist (quantize puts them there unless a rule skips one), :meth:`run` gives
    ``codes(op, x * 2**k_in, ...) * 2**-k_out`` in float64: the algorithm on codes, every
    intermediate an integer below ``2**53``. Otherwise the op runs its float (torch) kernel at
    nq too, and lower-to-hw refuses it with :meth:`quantization`'s reason. The nh form runs
    the same ``codes`` function on int64 codes, so nq == nh by construction (and by property
    test). ``bound(op, input, output)`` says why the algorithm cannot run exactly (a sum that
    could pass ``2**52``), or None (:meth:`bound_error`): lower-to-hw refuses then, naming
    the op, and the nq kernel raises.
    """

    codes: Codes
    bound: Callable[[Operation, Quantized, Quantized], str | None] | None = None
    min_bits: int = 2
    """Narrowest output the algorithm supports (1-bit outputs have no step)."""

    def quantization(self, op: Operation) -> tuple[Quantized, Quantized] | str:
        """The input and output grids, or why the op is not quantized at both ends."""
        qin = source_quantized(op.operands[0])
        if isinstance(qin, str):
            return f"its input is not quantized per tensor: {qin}"
        qout = result_quantized(op)
        if isinstance(qout, str):
            return qout
        if qout.bits < self.min_bits:
            return f"its output fake-quant has {qout.bits} bits (at least {self.min_bits})"
        return qin, qout

    def bound_error(self, op: Operation, grids: tuple[Quantized, Quantized]) -> str | None:
        """Why the algorithm cannot run exactly on these grids, or None."""
        return None if self.bound is None else self.bound(op, *grids)

    def run(
        self, op: Operation, grids: tuple[Quantized, Quantized], x: np.ndarray, *rest: np.ndarray
    ) -> np.ndarray:
        """The nq semantics: float64 ``x`` on the input grid to float64 on the output grid."""
        qin, qout = grids
        q = np.asarray(x, dtype=np.float64) * 2.0**qin.exp
        return self.codes(op, q, qin, qout, *rest) * 2.0**-qout.exp


@dataclass(frozen=True)
class NonNegativeResult(OpTrait):
    """The result is ``>= 0`` whatever the input (ReLU, sigmoid, hardsigmoid; a clamp only when
    its ``min`` property is present and ``>= 0``, named by ``min_property``), so
    ``quantize(unsigned="auto")`` may give its fake-quant unsigned codes (DESIGN.md, "Signed
    and unsigned codes"): the fact lives on the op, not in a list in quantize."""

    min_property: str | None = None
    clips_negatives: bool = False
    """True when a negative input gives what 0 gives (ReLU, a clamp with min >= 0; not sigmoid),
    so the operand's own fake-quant may be unsigned too: its negative codes would saturate to
    0, which the op maps where it maps every negative value."""

    def holds(self, op: Operation) -> bool:
        """Whether this op's result is non-negative (for a clamp: its min is set and >= 0)."""
        if self.min_property is None:
            return True
        bound = op.properties.get(self.min_property)
        return bound is not None and float(bound.value.data) >= 0  # type: ignore[attr-defined]


def non_negative_result(value: SSAValue) -> bool:
    """Whether ``value`` is an op result known ``>= 0`` by construction (:class:`NonNegativeResult`)."""
    op = value.owner
    if not isinstance(op, Operation):
        return False
    trait = op.get_trait(NonNegativeResult)
    return trait is not None and trait.holds(op)


def negatives_unread(value: SSAValue) -> bool:
    """Whether every reader of ``value`` maps negative values as it maps 0 (a ReLU, a clamp
    with min >= 0: :attr:`NonNegativeResult.clips_negatives`), so unsigned codes for ``value``
    change nothing those readers compute."""
    uses = list(value.uses)
    for use in uses:
        op = use.operation
        trait = op.get_trait(NonNegativeResult)
        if trait is None or not trait.clips_negatives or not trait.holds(op):
            return False
    return bool(uses)


def normalised_dims(op: Operation) -> range:
    """The dims a LayerNorm (``normalized_dims`` property: the last ones) or a GroupNorm
    (every dim but the batch) reduces over."""
    rank = len(_shape(op.operands[0]))
    dims = op.properties.get("normalized_dims")
    if dims is not None:
        return range(rank - dims.value.data, rank)  # type: ignore[attr-defined]
    return range(1, rank)


@dataclass(frozen=True)
class Normalising(WholeExtent):
    """LayerNorm and GroupNorm (nf and nh): the whole extent along the normalised dims (a
    group's sums need all of it; a dynamic one is refused by stream-plan), row by row along
    the others (weight and bias are constants over the normalised dims)."""

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        if tuple(runtime) != (op.operands[0],) or dim in normalised_dims(op):
            return None
        return ROW


def _returned(value: SSAValue) -> bool:
    """Whether ``value`` reaches the function's results through its users (a pure program
    computes nothing else: a fake-quant quantize left on an unread ``h_n`` does not count)."""
    seen: set[SSAValue] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            if use.operation.name == "func.return":
                return True
            todo.extend(use.operation.results)
    return False


@dataclass(frozen=True)
class Recurrent(StreamingRule):
    """A recurrent op (``nf.recurrent``): input ``[N, T, F]`` when its ``batch_first``
    property is set, else ``[T, N, F]``. Along its time axis it steps one row in, one row of
    ``output`` out (``adjust="state"``): its state (``h``, and ``c`` for an LSTM) is what it
    carries from row to row, as a sliding window carries its cache; the stream planner
    records it as the node's state and the streaming executor resumes the cell from it.
    ``h_n``/``c_n`` are known only when the stream ends, so no result of the program may
    depend on them to stream along time; a bidirectional op (its reverse direction starts at the last step) and one
    whose initial state is computed at run time cannot stream along time at all
    (:meth:`refusal` says why). Along any other dim: the whole extent."""

    def time_axis(self, op: Operation) -> int:
        return 1 if op.properties["batch_first"].value.data else 0  # type: ignore[attr-defined]

    def refusal(self, op: Operation, runtime: Collection[SSAValue]) -> str | None:
        """Why ``op`` cannot stream along its time axis, or None."""
        if op.properties["bidirectional"].value.data:  # type: ignore[attr-defined]
            return (
                "it is bidirectional: its reverse direction starts from the last time step, "
                "so it needs the whole sequence"
            )
        if tuple(runtime) != (op.operands[0],):
            return "its initial state is computed at run time (give it as a constant, or none)"
        read = [
            r.name_hint or f"result {i}" for i, r in enumerate(op.results) if i and _returned(r)
        ]
        if read:
            return (
                f"its final state ({', '.join(read)}) is known only at the end of the stream "
                "(read the sequence output instead)"
            )
        return None

    def row_step(self, op: Operation, dim: int, runtime: Collection[SSAValue]) -> RowStep | None:
        if dim != self.time_axis(op) or self.refusal(op, runtime) is not None:
            return None
        return RowStep(adjust="state")
