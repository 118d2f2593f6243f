"""Semantic checks of a NanoEngine program (`.ne`), after it has parsed.

The grammar accepts any sequence of well-formed declarations; these checks make sure the
program also means something, so that the importer can trust the tree:

- every name is declared once (tensors and nodes share one namespace), and only `func init`
  and `func runtime` exist, once each;
- shapes: no dimension below 0 (runtime and mem tensors may use -1, the batch), and a layout
  has one letter per dimension;
- a constant's dtype is known and its data holds exactly prod(shape) * sizeof(dtype) bytes
  (a word-list constant is only checked when its `type` is a known dtype, not `Any`);
- a node's `in_s` names tensors (an init node reads only constant and init tensors), `mem_s`
  names mem tensors, `out_s` names init tensors (init node) or runtime tensors (runtime node),
  and no tensor is the output of two nodes; attribute names are unique per node;
- `func init` calls init nodes and `func runtime` calls runtime nodes, all declared.

Problems are reported at the offending declaration or name reference (positions come from
the tree's `Loc` fields); `check_program` raises the first one in file order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nanoir.grammar.ne.errors import NanoEngineSemanticError, end_location
from nanoir.grammar.ne.syntax_tree import (
    DECLARATION_TYPES,
    DTYPES,
    ConstTensor,
    Declaration,
    Function,
    InitNode,
    InitTensor,
    Loc,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
    dtype_size,
    kind_name,
)

__all__ = ["Problem", "find_problems", "check_program", "check_each_node_called_once"]


@dataclass(frozen=True)
class Problem:
    """One semantic problem: a message and where it is (None for trees built by hand)."""

    message: str
    loc: Loc | None
    item_index: int  # orders problems in file order, also when there are no positions


_FUNCTION_KINDS: dict[str, tuple[type, str]] = {
    "init": (InitNode, "an init node"),
    "runtime": (RuntimeNode, "a runtime node"),
}


def _shape_problems(
    decl: ConstTensor | WordTensor | InitTensor | RuntimeTensor | MemTensor, lowest: int
) -> list[str]:
    shape = decl.shape
    found: list[str] = []
    bad = [d for d in shape if d < lowest]
    if bad:
        allowed = "-1 (the batch) or more" if lowest == -1 else "0 or more"
        found.append(
            f"shape {list(shape)} of '{decl.name}' has dimension {bad[0]}; dimensions must be {allowed}"
        )
    layout: str | None = getattr(decl, "layout", None)
    if layout is not None and len(layout) != len(shape):
        found.append(
            f"layout '{layout}' of '{decl.name}' has {len(layout)} letters but shape {list(shape)} has {len(shape)} dimensions"
        )
    return found


def _data_problem(name: str, dtype: str, shape: tuple[int, ...], data: bytes) -> str | None:
    count = 1
    for d in shape:
        count *= d
    need = count * dtype_size(dtype)
    if len(data) != need:
        return f"data of '{name}' has {len(data)} bytes, but shape {list(shape)} of {dtype} needs {need}"
    return None


def find_problems(program: Program) -> list[Problem]:
    """All semantic problems of `program`, in file order."""
    problems: list[Problem] = []
    items = program.items

    def report(index: int, loc: Loc | None, message: str) -> None:
        problems.append(Problem(message, loc, index))

    # Pass 1: the namespace. Names may be used before their declaration.
    table: dict[str, Declaration] = {}
    functions: dict[str, Function] = {}
    for index, item in enumerate(items):
        if isinstance(item, Function):
            if item.name not in _FUNCTION_KINDS:
                report(
                    index, item.loc, f"unknown function '{item.name}'; expected 'init' or 'runtime'"
                )
            elif item.name in functions:
                report(
                    index,
                    item.loc,
                    f"duplicate 'func {item.name}'{_first_at(functions[item.name].loc)}",
                )
            else:
                functions[item.name] = item
        elif isinstance(item, DECLARATION_TYPES):
            if item.name in table:
                report(
                    index,
                    item.loc,
                    f"duplicate declaration of '{item.name}'{_first_at(table[item.name].loc)}",
                )
            else:
                table[item.name] = item

    # Pass 2: each item on its own and its references.
    producers: dict[str, str] = {}
    for index, item in enumerate(items):
        if isinstance(item, ConstTensor):
            shape_issues = _shape_problems(item, 0)
            for message in shape_issues:
                report(index, item.loc, message)
            if item.dtype not in DTYPES:
                known = ", ".join(DTYPES)
                report(
                    index,
                    item.loc,
                    f"unknown dtype '{item.dtype}' of '{item.name}'; expected one of {known}",
                )
            elif not shape_issues:
                message = _data_problem(item.name, item.dtype, item.shape, item.data)
                if message:
                    report(index, item.data_loc or item.loc, message)
        elif isinstance(item, WordTensor):
            shape_issues = _shape_problems(item, 0)
            for message in shape_issues:
                report(index, item.loc, message)
            if item.type_name in DTYPES and not shape_issues:
                message = _data_problem(item.name, item.type_name, item.shape, item.data)
                if message:
                    report(index, item.data_loc or item.loc, message)
        elif isinstance(item, InitTensor):
            for message in _shape_problems(item, 0):
                report(index, item.loc, message)
        elif isinstance(item, (RuntimeTensor, MemTensor)):
            for message in _shape_problems(item, -1):
                report(index, item.loc, message)
        elif isinstance(item, (InitNode, RuntimeNode)):
            _node_problems(index, item, table, producers, report)
        elif isinstance(item, Function) and item.name in _FUNCTION_KINDS:
            wanted_type, wanted = _FUNCTION_KINDS[item.name]
            for i, call in enumerate(item.calls):
                loc = _at(item.call_locs, i, item.loc)
                target = table.get(call)
                if target is None:
                    report(index, loc, f"func {item.name} calls undeclared node '{call}'")
                elif not isinstance(target, (InitNode, RuntimeNode)):
                    report(
                        index,
                        loc,
                        f"func {item.name} calls '{call}', which is {kind_name(target)}, not a node",
                    )
                elif not isinstance(target, wanted_type):
                    report(
                        index,
                        loc,
                        f"func {item.name} calls '{call}', which is {kind_name(target)}; expected {wanted}",
                    )

    for name in ("init", "runtime"):
        if name not in functions:
            report(len(items), None, f"missing 'func {name}(){{...}}'")
    problems.sort(key=lambda p: (p.item_index, (p.loc.line, p.loc.column) if p.loc else (0, 0)))
    return problems


def _node_problems(
    index: int,
    node: InitNode | RuntimeNode,
    table: dict[str, Declaration],
    producers: dict[str, str],
    report: Callable[[int, Loc | None, str], None],
) -> None:
    """References and attributes of one node."""
    seen_attrs: set[str] = set()
    for i, (key, _) in enumerate(node.attrs):
        if key in seen_attrs:
            report(
                index,
                _at(node.attr_locs, i, node.loc),
                f"duplicate attribute '{key}' in node '{node.name}'",
            )
        seen_attrs.add(key)

    # (field, names, their positions, the declaration kinds allowed there, those kinds in words)
    lists: list[tuple[str, tuple[str, ...], tuple[Loc, ...], tuple[type, ...], str]]
    if isinstance(node, InitNode):
        lists = [
            (
                "in_s",
                node.in_s,
                node.in_locs,
                (ConstTensor, WordTensor, InitTensor),
                "a constant or init tensor",
            ),
            ("out_s", node.out_s, node.out_locs, (InitTensor,), "an init tensor"),
        ]
    else:
        lists = [
            (
                "in_s",
                node.in_s,
                node.in_locs,
                (ConstTensor, WordTensor, InitTensor, RuntimeTensor),
                "a constant, init or runtime tensor",
            ),
            ("mem_s", node.mem_s, node.mem_locs, (MemTensor,), "a mem tensor"),
            ("out_s", node.out_s, node.out_locs, (RuntimeTensor,), "a runtime tensor"),
        ]
    for field_name, names, locs, allowed, wanted in lists:
        for i, name in enumerate(names):
            loc = _at(locs, i, node.loc)
            target = table.get(name)
            if target is None:
                report(index, loc, f"undefined name '{name}' in {field_name} of node '{node.name}'")
            elif not isinstance(target, allowed):
                report(
                    index,
                    loc,
                    f"'{name}' in {field_name} of node '{node.name}' is {kind_name(target)}; expected {wanted}",
                )
            elif field_name == "out_s":
                if name in producers:
                    report(index, loc, f"'{name}' is already an output of node '{producers[name]}'")
                else:
                    producers[name] = node.name


def _at(locs: tuple[Loc, ...], i: int, fallback: Loc | None) -> Loc | None:
    return locs[i] if i < len(locs) else fallback


def _first_at(loc: Loc | None) -> str:
    return f" (first declared at line {loc.line})" if loc is not None else ""


def check_program(program: Program, filename: str = "<string>", source: str | None = None) -> None:
    """Raise `NanoEngineSemanticError` for the first problem of `program` in file order.

    `source` (the text the program came from) lets the error show the offending line.
    """
    problems = find_problems(program)
    if not problems:
        return
    first = problems[0]
    if first.loc is not None:
        line, column = first.loc.line, first.loc.column
    elif source is not None:
        line, column = end_location(source)  # only "missing func" has no position
    else:
        line, column = 1, 1
    raise NanoEngineSemanticError(first.message, filename, line, column, source)


def check_each_node_called_once(
    program: Program,
    nodes: Mapping[str, InitNode | RuntimeNode],
    error: Callable[[str, Loc | None], NanoEngineSemanticError],
) -> None:
    """nanoir runs each node exactly once (both levels): a node called twice, or never, is an
    error (`find_problems` allows both, the format does)."""
    seen: set[str] = set()
    for name in ("init", "runtime"):
        func = program.function(name)
        assert func is not None  # check_program requires both
        for i, call in enumerate(func.calls):
            if call in seen:
                loc = func.call_locs[i] if i < len(func.call_locs) else func.loc
                raise error(
                    f"node '{call}' is called more than once; nanoir runs each node once", loc
                )
            seen.add(call)
    for node in nodes.values():
        if node.name not in seen:
            kind = "init" if isinstance(node, InitNode) else "runtime"
            raise error(f"node '{node.name}' is never called by func {kind}", node.loc)
