"""Fold what does not depend on the inputs: evaluate it once, at import, with torch itself.

Position ids (``torch.arange(T)``), sinusoidal and 2-D position encodings computed in
``forward``, masks built from constants and the shape arithmetic between them depend only on
parameters, buffers, constants and static dims. nf need not hold any of their ops: the
importer takes each such subgraph's result as one constant, and maps only the ops that read
an input.

A dependence analysis from the graph inputs sorts every node of the exported graph into

- ``CONSTANT``: its value follows from parameters, buffers, lifted constants and literal
  arguments (torch.export writes a static dim as a literal int);
- ``SYMBOLIC``: it depends on the inputs only through a dynamic dim's size (a
  ``sym_size(x, 0)`` of the batch, and what is computed from it): not foldable here, since
  the size is known only at run time (:mod:`nanoir.frontend.batch_fold` folds those that are
  the same for every sample, at batch one);
- ``RUNTIME``: it reads an input's values.

An argument that an op reads only for its dtype or shape (``type_as(x)``, ``zeros_like(x)``,
:data:`METADATA_ARGS`) adds no value dependence: its dtype is static, and so is its shape
unless a dim is dynamic.

Every ``CONSTANT`` node is then run once, in graph order, with its own ATen target on the
real tensors (``node.target(*args)``, in the dtypes torch.export recorded), so the folded
value is what eager torch computes, bit for bit; no op is reimplemented here. A node is left
unfolded, with its reason, when it is random (torch's ``nondeterministic_seeded`` tag; it is
run twice with different seeds and folded if both agree, as dropout in eval mode does), reads
uninitialised memory (``empty*``), would exceed the fold limits (:func:`fold_limits`, checked
on the shapes torch.export recorded, before anything is allocated), or raises; its dependants
are then unfolded too. The importer maps an unfolded node with its handler if it has one,
else refuses it, saying the op is input-independent and why it was not folded.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

__all__ = [
    "METADATA_ARGS",
    "NOT_VALUES",
    "Dependence",
    "Fold",
    "FoldLimits",
    "fold_limits",
    "fold_program",
]


class Dependence(enum.IntEnum):
    """How a node depends on the program's inputs (the join of its arguments' dependences)."""

    CONSTANT = 0
    SYMBOLIC = 1
    RUNTIME = 2


METADATA_ARGS: dict[str, tuple[str, str]] = {
    "aten.type_as.default": ("other", "dtype"),
    "aten.new_zeros.default": ("self", "dtype"),
    "aten.new_ones.default": ("self", "dtype"),
    "aten.new_full.default": ("self", "dtype"),
    "aten.zeros_like.default": ("self", "shape"),
    "aten.ones_like.default": ("self", "shape"),
    "aten.full_like.default": ("self", "shape"),
    "aten.expand_as.default": ("other", "shape"),
    "aten.view_as.default": ("other", "shape"),
    "aten.reshape_as.default": ("other", "shape"),
}
"""Ops that read one tensor argument only for its metadata: ``(argument, what is read)``.
Reading ``"dtype"`` is always static; reading ``"shape"`` is static unless a dim is dynamic."""

NOT_VALUES = {
    "aten.sym_size.int",
    "aten.sym_numel.default",
    "aten.sym_stride.int",
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
}
"""Nodes that compute sizes or assert on them: never folded (the IR takes shapes from meta)."""

_UNINITIALISED = ("aten.empty", "aten.empty_like", "aten.new_empty", "aten.empty_strided")


@dataclass(frozen=True)
class FoldLimits:
    """The most elements one folded result may hold, and all folded results together."""

    per_result: int
    total: int


MIN_FOLDED = 1 << 24
"""A fold may always hold this many elements (a 4096 x 4096 mask), however small the model."""


def fold_limits(state: Iterable[torch.Tensor]) -> FoldLimits:
    """Limits relative to what the model itself holds: one result at most the larger of
    :data:`MIN_FOLDED` and the model's largest tensor; all results at most four times the
    larger of that and everything the model holds. A model whose ``forward`` builds a huge
    constant from a few numbers (``torch.ones(10**5, 10**5)``) is refused before anything
    is allocated, since the limits are checked on the shapes torch.export recorded."""
    sizes = [t.numel() for t in state if isinstance(t, torch.Tensor)]
    per_result = max(MIN_FOLDED, max(sizes, default=0))
    return FoldLimits(per_result, 4 * max(per_result, sum(sizes)))


@dataclass
class Fold:
    """The dependence of every node, and the folded value of each ``CONSTANT`` node that
    folded (a tensor, or a tuple of them for a multi-result op)."""

    dependence: dict[fx.Node, Dependence] = field(default_factory=dict)
    values: dict[fx.Node, Any] = field(default_factory=dict)
    folded: set[fx.Node] = field(default_factory=set)
    """Every node whose value was computed (``values`` keeps only those read by nodes that
    did not fold: the rest would only hold memory)."""
    unfolded: dict[fx.Node, str] = field(default_factory=dict)
    """Why a ``CONSTANT`` node was not folded."""
    dynamic_dims: dict[fx.Node, list[str]] = field(default_factory=dict)
    """For a ``SYMBOLIC`` node: the dynamic dims it is computed from (``dim 0 of input 'x'``)."""
    roots: dict[fx.Node, str] = field(default_factory=dict)
    """For a ``CONSTANT`` node: the parameter or buffer it is computed from (a float one
    first), to name the folded constant after it."""
    batched: dict[fx.Node, Any] = field(default_factory=dict)
    """``SYMBOLIC`` nodes the same for every sample, at batch one (those read by other nodes;
    :mod:`nanoir.frontend.batch_fold`), to be expanded to the batch of ``batch_source``."""
    batch_folded: set[fx.Node] = field(default_factory=set)
    batch_source: fx.Node | None = None

    def is_constant(self, node: Any) -> bool:
        return isinstance(node, fx.Node) and self.dependence.get(node) == Dependence.CONSTANT

    def why_not_folded(self, node: fx.Node) -> str | None:
        """What the importer says of a node it cannot map: None for a node that reads an
        input, else why its input-independent value was not folded."""
        kind = self.dependence.get(node)
        if kind == Dependence.CONSTANT and node in self.unfolded:
            return f"input-independent, but not folded: {self.unfolded[node]}"
        if kind == Dependence.SYMBOLIC:
            dims = ", ".join(self.dynamic_dims.get(node, [])) or "a dynamic dim"
            return (
                f"input-independent except for the size of {dims}, which is known only at "
                "run time, so it cannot be folded; import with dynamic_batch=False to make "
                "that dim static"
            )
        return None


def _arg_nodes(node: fx.Node) -> list[tuple[str | int, fx.Node]]:
    """``(argument name or position, node)`` for every node among ``node``'s arguments."""
    schema = getattr(node.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    found: list[tuple[str | int, fx.Node]] = []
    for i, arg in enumerate(node.args):
        key: str | int = names[i] if i < len(names) else i
        fx.node.map_arg(arg, lambda n, key=key: found.append((key, n)))  # type: ignore[misc]
    for key, arg in node.kwargs.items():
        fx.node.map_arg(arg, lambda n, key=key: found.append((key, n)))  # type: ignore[misc]
    return found


def _static_shape(val: Any) -> bool:
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape)


def _meta_numel(val: Any) -> int:
    """Elements of a recorded value (0 for non-tensors; a symbolic dim counts as unknown)."""
    if isinstance(val, torch.Tensor):
        return math.prod(d if isinstance(d, int) else 0 for d in val.shape)
    if isinstance(val, (list, tuple)):
        return sum(_meta_numel(v) for v in val)
    return 0


class _Analysis:
    def __init__(self, program: torch.export.ExportedProgram, limits: FoldLimits | None):
        from torch.export.graph_signature import InputKind

        self.program = program
        self.fold = Fold()
        self.specs = {s.arg.name: s for s in program.graph_signature.input_specs}
        self.user = {n for n, s in self.specs.items() if s.kind == InputKind.USER_INPUT}
        state = [*program.state_dict.values(), *program.constants.values()]
        self.limits = limits or fold_limits(state)
        self.folded_elements = 0

    # -- dependence ----------------------------------------------------------------------

    def classify(self, node: fx.Node) -> None:
        fold = self.fold
        if node.op == "placeholder":
            if node.name in self.user:
                fold.dependence[node] = Dependence.RUNTIME
            else:
                fold.dependence[node] = Dependence.CONSTANT
                fold.roots[node] = str(self.specs[node.name].target)
            return
        if node.op != "call_function":
            fold.dependence[node] = Dependence.RUNTIME
            return
        target = str(node.target)
        if target == "aten.sym_size.int" or target == "aten.sym_numel.default":
            source = node.args[0]
            dims = self._dynamic_dims_of(source, node.args[1] if len(node.args) > 1 else None)
            fold.dependence[node] = Dependence.SYMBOLIC if dims else Dependence.CONSTANT
            fold.dynamic_dims[node] = dims
            return
        metadata = METADATA_ARGS.get(target)
        kind, dims, root = Dependence.CONSTANT, [], None
        for key, arg in _arg_nodes(node):
            if metadata is not None and key == metadata[0]:
                val = arg.meta.get("val")
                if metadata[1] == "dtype" or _static_shape(val):
                    continue
                arg_kind, arg_dims = Dependence.SYMBOLIC, self._dynamic_dims_of(arg, None)
            else:
                arg_kind = fold.dependence.get(arg, Dependence.RUNTIME)
                arg_dims = fold.dynamic_dims.get(arg, [])
                if arg_kind == Dependence.CONSTANT and arg in fold.roots:
                    name = fold.roots[arg]
                    if root is None or (not self._is_float(root) and self._is_float(name)):
                        root = name
            kind = max(kind, arg_kind)
            dims += [d for d in arg_dims if d not in dims]
        fold.dependence[node] = kind
        if kind == Dependence.SYMBOLIC:
            fold.dynamic_dims[node] = dims
        if kind == Dependence.CONSTANT and root is not None:
            fold.roots[node] = root

    def _is_float(self, name: str) -> bool:
        t = self.program.state_dict.get(name, self.program.constants.get(name))
        return isinstance(t, torch.Tensor) and t.is_floating_point()

    def _dynamic_dims_of(self, source: Any, dim: Any) -> list[str]:
        """``dim d of input 'x'`` for the dynamic dims of ``source`` (one dim, or all)."""
        val = source.meta.get("val") if isinstance(source, fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return []
        dims = range(val.ndim) if dim is None else [int(dim) % max(val.ndim, 1)]
        what = "input" if source.name in self.user else "tensor"
        return [
            f"dim {d} of {what} '{source.name}'"
            for d in dims
            if d < val.ndim and not isinstance(val.shape[d], int)
        ]

    # -- evaluation ----------------------------------------------------------------------

    def evaluate(self, node: fx.Node) -> None:
        fold = self.fold
        if node.op == "placeholder":
            value = self._state(node)
            if value is not None:
                fold.values[node] = value
                fold.folded.add(node)
            return
        target = str(node.target)
        if target in NOT_VALUES:
            fold.unfolded[node] = "a size computation"
            return
        missing = [
            a
            for k, a in _arg_nodes(node)
            if fold.dependence.get(a) == Dependence.CONSTANT and a not in fold.values
        ]
        if missing:
            fold.unfolded[node] = f"its operand '{missing[0].name}' was not folded"
            return
        if target.startswith(_UNINITIALISED):
            fold.unfolded[node] = (
                f"{target} holds uninitialised memory (use torch.zeros or torch.full)"
            )
            return
        size = _meta_numel(node.meta.get("val"))
        if size > self.limits.per_result:
            fold.unfolded[node] = (
                f"its result would hold {size} elements, more than the "
                f"{self.limits.per_result} one folded constant may hold"
            )
            return
        if self.folded_elements + size > self.limits.total:
            fold.unfolded[node] = (
                f"all folded constants together would hold more than {self.limits.total} elements"
            )
            return
        try:
            value = self._run(node)
        except Exception as e:  # torch raises many types; the message says what failed
            fold.unfolded[node] = f"torch raised {type(e).__name__}: {str(e).splitlines()[0]}"
            return
        if not self._matches_meta(value, node.meta.get("val")):
            fold.unfolded[node] = "its folded value differs in shape or dtype from torch.export's"
            return
        self.folded_elements += size
        fold.values[node] = value
        fold.folded.add(node)

    def _state(self, node: fx.Node) -> torch.Tensor | None:
        spec = self.specs[node.name]
        value = self.program.state_dict.get(spec.target)
        if value is None:
            value = self.program.constants.get(spec.target)
        return value.detach() if isinstance(value, torch.Tensor) else None

    def _run(self, node: fx.Node) -> Any:
        metadata = METADATA_ARGS.get(str(node.target))
        fold = self.fold

        def value_of(arg: fx.Node) -> Any:
            if arg in fold.values:
                return fold.values[arg]
            val = arg.meta["val"]  # a metadata-only argument: any values of its kind will do
            shape = val.shape if _static_shape(val) else (0,)
            return torch.zeros(shape, dtype=val.dtype)

        assert metadata is None or all(
            a in fold.values or k == metadata[0] for k, a in _arg_nodes(node)
        )
        args = fx.node.map_arg(node.args, value_of)
        kwargs = fx.node.map_arg(node.kwargs, value_of)
        tags = getattr(node.target, "tags", ())
        with torch.no_grad():
            if torch.Tag.nondeterministic_seeded not in tags:
                return node.target(*args, **kwargs)  # type: ignore[operator]
            runs = []
            for seed in (0, 1):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    runs.append(node.target(*args, **kwargs))  # type: ignore[operator]
        if not _same(*runs):
            raise _Random(f"{node.target} is random (torch tags it nondeterministic_seeded)")
        return runs[0]

    @staticmethod
    def _matches_meta(value: Any, val: Any) -> bool:
        if isinstance(val, torch.Tensor):
            return (
                isinstance(value, torch.Tensor)
                and value.dtype == val.dtype
                and tuple(value.shape) == tuple(val.shape)
            )
        if isinstance(val, (list, tuple)):
            return isinstance(value, (list, tuple)) and len(value) == len(val)
        return True


class _Random(Exception):
    """A random op whose two runs differ."""


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def fold_program(program: torch.export.ExportedProgram, limits: FoldLimits | None = None) -> Fold:
    """Classify every node of ``program``'s graph and evaluate the ``CONSTANT`` ones."""
    analysis = _Analysis(program, limits)
    for node in program.graph.nodes:
        analysis.classify(node)
    for node in program.graph.nodes:
        if analysis.fold.dependence.get(node) == Dependence.CONSTANT and node.op in (
            "placeholder",
            "call_function",
        ):
            analysis.evaluate(node)
    _release_intermediates(analysis.fold)
    return analysis.fold


def _release_intermediates(fold: Fold) -> None:
    """Drop the folded values nothing outside the fold reads (only the frontier is
    materialised; the rest would only hold memory)."""
    for node in list(fold.values):
        if all(u in fold.folded for u in node.users):
            del fold.values[node]
