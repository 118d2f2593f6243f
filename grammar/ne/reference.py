"""The shapes NanoEngine-PyTorch declares for runtime tensors: its stream analysis ignores pads.

For a padded network it declares the outputs of Conv, MaxPool and AveragePool (the `padded`
rows of `nq.NQ_OPS`), and everything computed from them, smaller than they are (a pad-1
3x3 conv on width 8 is declared 6 wide). `import_nq` accepts such a declared shape (with
a `NanoEnginePaddingWarning`) and `export_nq` keeps it while it is still the one the
reference would declare; both ask `reference_result_types`.
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoir.grammar.ne.node import NodeProblem, NodeSpec, Unsupported
from nanoir.grammar.ne.nq import BY_OP_TYPE, convert_known
from nanoir.runtime.numerics.shapes import ShapeError
from xdsl.dialects.builtin import DYNAMIC_INDEX, TensorType
from xdsl.ir import Attribute, Block, SSAValue

__all__ = ["has_pads", "reference_result_types"]


def has_pads(spec: NodeSpec) -> bool:
    pads = dict(spec.attrs).get("pads")
    row = BY_OP_TYPE.get(spec.op_type)
    return row is not None and row.padded and isinstance(pads, tuple) and any(p != 0 for p in pads)


def reference_result_types(
    spec: NodeSpec, types: Sequence[Attribute], reference: Sequence[Attribute | None]
) -> list[Attribute] | None:
    """The result types NanoEngine-PyTorch declares for a known node: shape inference with
    the node's pads taken as zero and its SSA inputs at their reference types.

    `types` are the result types nanoir computes (returned as they are when the node has no
    pads and every input's reference type is its type); `reference` holds one type (or None:
    unknown) per SSA input, in order. None when a reference type is unknown or the reference
    shapes do not fit together.

    A join (a `join` row: Add, Sub, Mul, Div, Concat) of a padded branch with a less shrunken
    one, as in a residual block, fires in the reference's analysis while every input has a
    row, so along each dim where its inputs disagree (and none broadcasts, and not Concat's
    axis) it produces as many as the shortest input has.
    """
    values = [v for v in spec.inputs if isinstance(v, SSAValue)]
    if not has_pads(spec) and all(r == v.type for v, r in zip(values, reference)):
        return list(types)
    row = BY_OP_TYPE.get(spec.op_type)
    if any(r is None for r in reference) or row is None:
        return None
    attrs = tuple(
        (k, tuple(0 for _ in v)) if k == "pads" and isinstance(v, tuple) and row.padded else (k, v)
        for k, v in spec.attrs
    )
    found = _types_of(
        NodeSpec(spec.name, spec.op_type, attrs, spec.inputs, spec.num_outputs), reference
    )  # type: ignore[arg-type]
    if found is None and row.join:
        found = _types_of(spec, _shortest_joined(spec, reference))  # type: ignore[arg-type]
    return found


def _types_of(spec: NodeSpec, input_types: Sequence[Attribute]) -> list[Attribute] | None:
    """The result types of the node with its SSA inputs of these types; None if they do not fit."""
    placeholders = iter(Block(arg_types=input_types).args)
    inputs = tuple(next(placeholders) if isinstance(v, SSAValue) else v for v in spec.inputs)
    try:
        op = convert_known(NodeSpec(spec.name, spec.op_type, spec.attrs, inputs, spec.num_outputs))
    except (Unsupported, NodeProblem, ShapeError, ValueError):
        return None
    result = [r.type for r in op.results]
    op.erase(safe_erase=False)
    return result


def _shortest_joined(spec: NodeSpec, types: Sequence[Attribute]) -> list[Attribute]:
    """The input types of a join cut to the shortest input along each dim where they differ."""
    shapes = [list(t.get_shape()) if isinstance(t, TensorType) else [] for t in types]
    rank = max((len(s) for s in shapes), default=0)
    axis = dict(spec.attrs).get("axis") if spec.op_type == "Concat" else None
    skip = axis % rank if isinstance(axis, int) and rank and -rank <= axis < rank else None
    for d in range(rank):
        sizes = {s[d] for s in shapes if len(s) == rank and s[d] not in (1, DYNAMIC_INDEX)}
        if d != skip and len(sizes) > 1:
            for s in shapes:
                if len(s) == rank and s[d] not in (1, DYNAMIC_INDEX):
                    s[d] = min(sizes)
    return [
        TensorType(t.get_element_type(), s) if isinstance(t, TensorType) else t
        for t, s in zip(types, shapes)
    ]
