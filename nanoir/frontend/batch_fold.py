"""Fold what depends on the inputs only through the batch size, when it is the same for every
sample: evaluate it once at batch one, and expand that to the batch at run time.

A position encoding written for the batch (``torch.arange(1, H + 1).view(1, -1, 1).repeat(B, 1,
W)`` then ``cumsum``, ``sin``, ``cos``, ``stack``, a 1x1 conv, as XCiT and EdgeNeXt write it; a
DETR mask ``torch.zeros(B, H, W)``) reads the dynamic batch size ``B`` and nothing else of the
input: the fold (:mod:`nanoir.frontend.fold`) calls it ``SYMBOLIC`` and cannot evaluate it. But
``B`` only *replicates* it: every sample's slice is the same. This module proves that node by
node, with per-op facts, and evaluates such nodes with ``B = 1``; the importer then reads each
one as that constant expanded to the batch (``nf.expand`` with the input as the size source).

A node is *batch-uniform* when its dim 0 is the batch symbol, no other dim is symbolic, and

- it *makes* the batch dim by replicating what has none: ``repeat`` / ``expand`` by the batch
  size along dim 0 of a constant whose dim 0 is 1, or a fill (``ones``, ``full``, ``new_zeros``,
  ``zeros_like(x)``...) of a shape whose dim 0 is the batch (:data:`FILLS`); or
- it is *sample-local* (:func:`sample_local`): each sample of its result depends on the same
  sample of its batch-uniform operands and on constants only, so it stays uniform. That is every
  op torch tags ``pointwise`` (constants broadcasting without a batch dim of their own), casts
  and copies, ops along a dim other than 0 (``cumsum``, ``cat``, ``stack``, ``slice``, ``sum``,
  ``softmax``, ``flip``, ``transpose``, ``unsqueeze``, ``flatten``...), ``permute`` keeping dim 0,
  views that keep dim 0, convs, linears and norms of a uniform input, and an embedding of
  uniform indices into a constant table.

The batch size may appear only as a size (of ``repeat``, ``expand``, fills and views): as a
value (``torch.arange(B)``, ``x * B``) its node is not uniform, and stays refused naming the
dim. Anything else, or any failure, leaves the node to the importer as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from nanoir.frontend.fold import METADATA_ARGS, NOT_VALUES, Dependence, Fold

__all__ = ["FILLS", "fold_batch_uniform", "sample_local"]

FILLS = frozenset(
    f"aten.{name}.default"
    for name in ("zeros", "ones", "full", "new_zeros", "new_ones", "new_full")
)
"""Fills of a ``size`` list (``full`` and ``new_full`` with a value)."""

_COPIES = {
    "aten._to_copy.default",
    "aten.type_as.default",
    "aten.alias.default",
    "aten.clone.default",
    "aten.detach.default",
    "aten.contiguous.default",
    "aten.lift_fresh_copy.default",
}

_ALONG_DIMS = {
    "aten.cumsum.default": ("dim",),
    "aten.cumprod.default": ("dim",),
    "aten._softmax.default": ("dim",),
    "aten.softmax.int": ("dim",),
    "aten._log_softmax.default": ("dim",),
    "aten.log_softmax.int": ("dim",),
    "aten.flip.default": ("dims",),
    "aten.roll.default": ("dims",),
    "aten.cat.default": ("dim",),
    "aten.slice.Tensor": ("dim",),
    "aten.select.int": ("dim",),
    "aten.narrow.default": ("dim",),
    "aten.index_select.default": ("dim",),
    "aten.transpose.int": ("dim0", "dim1"),
    "aten.squeeze.dim": ("dim",),
    "aten.squeeze.dims": ("dim",),
    "aten.sum.dim_IntList": ("dim",),
    "aten.mean.dim": ("dim",),
    "aten.amax.default": ("dim",),
    "aten.amin.default": ("dim",),
    "aten.prod.dim_int": ("dim",),
    "aten.linalg_vector_norm.default": ("dim",),
}
"""Ops that work along the dims named by these arguments (counted on the input's rank): a
sample-local op when none of them is dim 0. An empty or absent dim list (every dim) is not."""

_ALONG_OUTPUT_DIM = {"aten.stack.default", "aten.unsqueeze.default"}
"""Ops whose ``dim`` counts on the result's rank."""

_PER_SAMPLE = {
    "aten.conv1d.default",
    "aten.conv2d.default",
    "aten.conv3d.default",
    "aten.conv1d.padding",
    "aten.conv2d.padding",
    "aten.convolution.default",
    "aten.linear.default",
    "aten.layer_norm.default",
    "aten.native_layer_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten.group_norm.default",
    "aten.native_group_norm.default",
    "aten.matmul.default",
    "aten.mm.default",
    "aten.bmm.default",
}
"""Ops computing each sample from the same sample of their (first) input and constants."""

_VIEWS = {
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.expand.default",
    "aten.repeat.default",
    "aten.permute.default",
    "aten.flatten.using_ints",
    "aten.constant_pad_nd.default",
}


def _names(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name (positional and keyword)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    named = {a.name: v for a, v in zip(schema.arguments, node.args)}
    named.update(node.kwargs)
    return named


class _Batch:
    """The batch symbol(s) and the uniform nodes found so far."""

    def __init__(self, program: torch.export.ExportedProgram, fold: Fold):
        from torch.export.graph_signature import InputKind

        self.fold = fold
        users = [
            s.arg.name
            for s in program.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT
        ]
        self.symbols: set[Any] = set()
        self.source: fx.Node | None = None
        for node in program.graph.nodes:
            val = node.meta.get("val")
            if node.op != "placeholder" or node.name not in users:
                continue
            if (
                isinstance(val, torch.Tensor)
                and val.ndim
                and isinstance(val.shape[0], torch.SymInt)
            ):
                self.symbols.add(val.shape[0].node.expr)
                self.source = self.source or node
        self.values: dict[fx.Node, Any] = {}
        """Batch-uniform nodes (and batch-size nodes: 1) at batch one."""

    # -- facts ---------------------------------------------------------------------------

    def is_batch(self, value: Any) -> bool:
        """``value`` is the batch size itself (a SymInt or a node holding one)."""
        if isinstance(value, fx.Node):
            value = value.meta.get("val")
        return isinstance(value, torch.SymInt) and value.node.expr in self.symbols

    def batched_shape(self, val: Any) -> bool:
        """A tensor whose dim 0 is the batch and whose other dims are static."""
        return (
            isinstance(val, torch.Tensor)
            and val.ndim > 0
            and self.is_batch(val.shape[0])
            and all(isinstance(d, int) for d in val.shape[1:])
        )

    def uniform(self, node: Any) -> bool:
        return isinstance(node, fx.Node) and node in self.values and node.op != "placeholder"

    def constant_without_batch(self, node: Any, rank: int) -> bool:
        """A folded constant that broadcasts into a rank-``rank`` result without a dim 0 of
        its own (lower rank, or 1 there)."""
        if not isinstance(node, fx.Node) or node not in self.fold.values:
            return False
        t = self.fold.values[node]
        return isinstance(t, torch.Tensor) and (t.ndim < rank or t.shape[0] == 1)

    # -- the rules -----------------------------------------------------------------------

    def makes_batch(self, node: fx.Node) -> bool:
        """repeat / expand of a constant by the batch along dim 0, or a fill of the batch."""
        name, args = str(node.target), _names(node)
        rank = node.meta["val"].ndim
        if name in FILLS:
            sizes = list(args.get("size") or [])
            return (
                bool(sizes)
                and self.is_batch(sizes[0])
                and not any(self.is_batch(s) or isinstance(s, fx.Node) for s in sizes[1:])
            )
        if name in {"aten.zeros_like.default", "aten.ones_like.default", "aten.full_like.default"}:
            return self.batched_shape(args["self"].meta.get("val"))
        if name in {"aten.repeat.default", "aten.expand.default"}:
            sizes = list(args.get("repeats") or args.get("size") or [])
            return (
                bool(sizes)
                and self.is_batch(sizes[0])
                and all(isinstance(s, int) for s in sizes[1:])
                and self.constant_without_batch(args["self"], rank)
            )
        return False

    def sample_local(self, node: fx.Node) -> bool:
        return sample_local(node, self)


def sample_local(node: fx.Node, batch: _Batch) -> bool:
    """Whether each sample of ``node``'s result depends only on the same sample of its
    batch-uniform operands and on constants (see the module docstring)."""
    name, args = str(node.target), _names(node)
    rank = node.meta["val"].ndim
    metadata = METADATA_ARGS.get(name, (None,))[0]
    tensors = [
        (key, a)
        for key, a in args.items()
        for a in (a if isinstance(a, (list, tuple)) else [a])
        if isinstance(a, fx.Node) and key != metadata
    ]
    if not any(batch.uniform(a) for _, a in tensors):
        return False
    sizes_may_hold_batch = name in _VIEWS
    for _, a in tensors:
        if batch.is_batch(a):
            if not sizes_may_hold_batch:
                return False  # the batch size as a value
            continue
        if not (batch.uniform(a) or batch.constant_without_batch(a, rank)):
            if not (name in _PER_SAMPLE and a in batch.fold.values):
                return False
    if torch.Tag.pointwise in getattr(node.target, "tags", ()) or name in _COPIES:
        return True
    if name in _PER_SAMPLE:
        first = node.args[0]
        return batch.uniform(first)
    if name == "aten.embedding.default":  # rows of a constant table by uniform indices
        return batch.uniform(args["indices"]) and args["weight"] in batch.fold.values
    if name == "aten.slice.Tensor" and _whole(args):
        return True  # x[:, ...]: the whole of dim 0
    if name in _ALONG_DIMS or name in _ALONG_OUTPUT_DIM:
        first = node.args[0] if not isinstance(node.args[0], (list, tuple)) else node.args[0][0]
        in_rank = rank if name in _ALONG_OUTPUT_DIM else first.meta["val"].ndim
        dims = []
        for key in _ALONG_DIMS.get(name, ("dim",)):
            value = args.get(key)
            dims += list(value) if isinstance(value, (list, tuple)) else [value]
        if not dims or any(d is None for d in dims):
            return False  # every dim, the batch's too
        return all(int(d) % max(in_rank, 1) != 0 for d in dims)
    return _view_keeps_batch(node, name, args, batch)


def _whole(args: dict[str, Any]) -> bool:
    """A slice that takes all of its dim (start 0, no end, step 1)."""
    end = args.get("end")
    return (
        args.get("start") in (None, 0)
        and (end is None or (isinstance(end, int) and end >= 2**62))
        and args.get("step", 1) == 1
    )


def _view_keeps_batch(node: fx.Node, name: str, args: dict[str, Any], batch: _Batch) -> bool:
    source = args.get("self", args.get("input"))
    if not batch.uniform(source):
        return False
    if name in {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"}:
        return batch.batched_shape(source.meta.get("val"))  # dim 0 in, dim 0 out: row-major
    if name == "aten.permute.default":
        return int(args["dims"][0]) % node.meta["val"].ndim == 0
    if name == "aten.flatten.using_ints":
        return int(args.get("start_dim", 0)) % source.meta["val"].ndim != 0
    if name == "aten.expand.default":
        return batch.is_batch(args["size"][0]) or args["size"][0] == -1
    if name == "aten.repeat.default":
        return args["repeats"][0] == 1
    if name == "aten.constant_pad_nd.default":
        return len(args["pad"]) < 2 * node.meta["val"].ndim or not any(args["pad"][-2:])
    return False


def _at_batch_one(node: fx.Node, batch: _Batch) -> Any:
    """Run ``node`` with the batch size 1: uniform operands at batch one, constants folded,
    a metadata-only operand as zeros of its shape at batch one."""

    def value_of(arg: fx.Node) -> Any:
        if arg in batch.values:
            return batch.values[arg]
        if arg in batch.fold.values:
            return batch.fold.values[arg]
        val = arg.meta["val"]
        shape = [1 if batch.is_batch(d) else d for d in val.shape]
        return torch.zeros(shape, dtype=val.dtype)

    args = fx.node.map_arg(node.args, value_of)
    kwargs = fx.node.map_arg(node.kwargs, value_of)
    with torch.no_grad():
        return node.target(*args, **kwargs)  # type: ignore[operator]


def fold_batch_uniform(program: torch.export.ExportedProgram, fold: Fold) -> None:
    """Find the batch-uniform nodes of ``program`` and evaluate them at batch one, into
    ``fold.batched`` (those read by nodes that are not uniform; ``fold.batch_source`` is the
    input whose dim 0 is the batch)."""
    batch = _Batch(program, fold)
    if batch.source is None:
        return
    found: list[fx.Node] = []
    for node in program.graph.nodes:
        if fold.dependence.get(node) != Dependence.SYMBOLIC or node.op != "call_function":
            continue
        if batch.is_batch(node) and str(node.target) == "aten.sym_size.int":
            batch.values[node] = 1
            continue
        val = node.meta.get("val")
        if not batch.batched_shape(val):
            continue
        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            continue  # a draw per sample and per run: nothing to fold
        try:
            if not (batch.makes_batch(node) or batch.sample_local(node)):
                continue
            value = _at_batch_one(node, batch)
        except Exception:  # noqa: BLE001 - any failure leaves the node to the importer
            continue
        expected = (1, *val.shape[1:])
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != expected:
            continue
        if value.dtype != val.dtype:
            continue
        batch.values[node] = value
        found.append(node)
    uniform = set(found)
    fold.batch_source = batch.source
    for node in found:
        if any(u not in uniform and str(u.target) not in NOT_VALUES for u in node.users):
            fold.batched[node] = batch.values[node]
    fold.batch_folded |= uniform
