"""Where the declarations of a written `.ne` file go: the reference's sections, or the order
an imported file recorded.

NanoEngine-PyTorch writes one commented section per kind of declaration (constants, init
tensors, runtime tensors, caches, init nodes, runtime nodes), then the calls. Both levels'
exporters write fresh IR that way (`reference_layout`); the nq level writes IR imported from
a file in the file's own order, recorded in `ne.items` (`recorded_layout`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from nanoir.grammar.ne.printer import comment_from_entry
from nanoir.grammar.ne.syntax_tree import (
    Comment,
    ConstTensor,
    Declaration,
    Function,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)

__all__ = ["SECTIONS", "calls", "reference_layout", "recorded_layout"]

SECTIONS: tuple[tuple[str, tuple[type, ...]], ...] = (
    (" init const tensor", (ConstTensor, WordTensor)),
    (" init static tensor", (InitTensor,)),
    (" runtime tensor", (RuntimeTensor,)),
    (" runtime memory", (MemTensor,)),
    (" init node", (InitNode,)),
    (" runtime_node", (RuntimeNode,)),
)
"""The reference's section comments, each followed by the declarations of its kinds."""

_NODE_SECTIONS = 2  # the last two sections hold nodes


def calls(nodes: Iterable[InitNode | RuntimeNode]) -> dict[str, Function]:
    """`func init` and `func runtime`, calling the nodes in the given order."""
    nodes = list(nodes)
    init = tuple(n.name for n in nodes if isinstance(n, InitNode))
    runtime = tuple(n.name for n in nodes if isinstance(n, RuntimeNode))
    return {"init": Function("init", init), "runtime": Function("runtime", runtime)}


def reference_layout(
    decls: Iterable[Declaration], functions: Mapping[str, Function], node_runs: bool = False
) -> list[Item]:
    """One commented section per kind (in the given order within a kind), then the calls.

    With `node_runs` the nodes keep their order instead: a new `// init node` or
    `// runtime_node` section wherever the kind changes (the hw level declares nodes in op
    order, and its importer rebuilds the order from the sections), with at least one of each.
    """
    decls = list(decls)
    items: list[Item] = []
    for title, kinds in SECTIONS[:-_NODE_SECTIONS]:
        items.append(Comment(title))
        items.extend(d for d in decls if isinstance(d, kinds))
    nodes = [d for d in decls if isinstance(d, (InitNode, RuntimeNode))]
    if not node_runs:
        for title, kinds in SECTIONS[-_NODE_SECTIONS:]:
            items.append(Comment(title))
            items.extend(d for d in nodes if isinstance(d, kinds))
    else:
        runs: list[tuple[bool, list[InitNode | RuntimeNode]]] = []
        for node in nodes:
            init = isinstance(node, InitNode)
            if not runs or runs[-1][0] != init:
                runs.append((init, []))
            runs[-1][1].append(node)
        if not any(init for init, _ in runs):
            runs.insert(0, (True, []))
        if all(init for init, _ in runs):
            runs.append((False, []))
        for init, run in runs:
            items += [Comment(" init node" if init else " runtime_node"), *run]
    items += [
        Comment(" call init node"),
        functions["init"],
        Comment(" call runtime node"),
        functions["runtime"],
    ]
    return items


def recorded_layout(
    entries: Sequence[str],
    decls: Mapping[str, Declaration],
    functions: Mapping[str, Function],
    kept: Mapping[str, Declaration],
) -> list[Item]:
    """The items in a recorded order (`ne.items` entries: names, comments, "func init"/
    "func runtime"); `kept` are recorded declarations no op carries (still written where
    they were). Declarations the record does not know go after the last one of their kind."""
    items: list[Item] = []
    emitted: set[str] = set()
    for text in entries:
        comment = comment_from_entry(text)  # `//text`, or `<blank lines>//text`
        if comment is not None:
            items.append(comment)
        elif text in ("func init", "func runtime"):
            name = text[5:]
            if name not in emitted:
                items.append(functions[name])
                emitted.add(name)
        elif text in decls and text not in emitted:
            items.append(decls[text])
            emitted.add(text)
        elif text in kept and text not in emitted:
            items.append(kept[text])
            emitted.add(text)
    for name, decl in decls.items():
        if name not in emitted:
            _insert_by_kind(items, decl)
    for name, func in functions.items():
        if name not in emitted:
            items.append(func)
    return items


def _insert_by_kind(items: list[Item], decl: Declaration) -> None:
    """Put a declaration the recorded order does not know after the last one of its kind."""
    kinds = next((k for _, k in SECTIONS if isinstance(decl, k)), (type(decl),))
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], kinds):
            items.insert(i + 1, decl)
            return
    first_func = next((i for i, item in enumerate(items) if isinstance(item, Function)), len(items))
    items.insert(first_func, decl)
