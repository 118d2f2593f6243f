"""nanoir's layers import only downward, without cycles (DESIGN.md, "Layers").

From the bottom: ``nanoir.errors``; numerics (``nanoir.runtime.numerics``: NumPy math, kernels,
shape rules); dialects; analysis (``nanoir.lowering.analysis``: graph walks, stream rules); the
runtime (executors: passes run programs to calibrate, so it sits below them); passes, grammar
and frontend, which do not import each other; and ``nanoir`` itself (API, pipeline, CLIs). Every import counts, also one inside a function: such an import is
allowed only to keep start-up cheap, never to dodge a cycle, and says so in a comment with
the word "lazy" on its line or the line above.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "nanoir": "nanoir",
    "dialects": "nanoir.dialects",
    "lowering": "nanoir.lowering",
    "runtime": "nanoir.runtime",
    "grammar": "nanoir.grammar",
}

# (layer number, prefix), most specific prefix first.
LAYERS = [
    (0, "nanoir.errors"),
    (1, "nanoir.runtime.numerics"),
    (2, "nanoir.dialects"),
    (3, "nanoir.lowering.analysis"),
    (4, "nanoir.runtime"),
    (5, "nanoir.lowering"),
    (5, "nanoir.grammar"),
    (5, "nanoir.frontend"),
    (6, "nanoir"),
]


def layer_of(module: str) -> tuple[int, str]:
    for number, prefix in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return number, prefix
    raise AssertionError(f"{module} is in no layer")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if (
                folder == "nanoir"
                and parts
                and parts[0] in ("dialects", "lowering", "runtime", "grammar")
            ):
                continue
            found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(imported nanoir module, line, inside a function) for every import of nanoir code."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    result: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    result.append((alias.name, child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")
                    base = base[: len(base) - child.level + (1 if is_package else 0)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    sub = f"{target}.{alias.name}"
                    result.append((sub if sub in MODULES else target, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return [(m, line, f) for m, line, f in result if m == "nanoir" or m.startswith("nanoir.")]


def _type_checking_lines(path: Path) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if hasattr(inner, "lineno"):
                    lines.add(inner.lineno)
    return lines


def _explained_as_lazy(source: list[str], line: int) -> bool:
    """A 'lazy' comment on the import's line or above its block of consecutive imports."""
    i = line - 1
    if "lazy" in source[i].lower():
        return True
    while i > 0 and re.match(r"\s*(from \S+ )?import ", source[i - 1]):
        i -= 1
    return i > 0 and source[i - 1].lstrip().startswith("#") and "lazy" in source[i - 1].lower()


def test_modules_found() -> None:
    assert "nanoir.runtime.numerics.quant" in MODULES
    assert "nanoir.dialects.nf" in MODULES
    assert len(MODULES) > 40


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down(module: str) -> None:
    path = MODULES[module]
    mine, my_prefix = layer_of(module)
    typing_only = _type_checking_lines(path)
    source = path.read_text().splitlines()
    bad = []
    for target, line, in_function in _imports(path, module):
        if target == "nanoir":  # the package itself: only its lazy attributes
            if mine < 6:
                bad.append(f"line {line}: imports the top-level package")
            continue
        theirs, their_prefix = layer_of(target)
        if theirs > mine:
            bad.append(f"line {line}: imports {target} (layer {theirs}) from layer {mine}")
        elif theirs == mine == 5 and their_prefix != my_prefix:
            bad.append(f"line {line}: imports {target}, a sibling of {my_prefix}")
        if in_function and line not in typing_only:
            if not _explained_as_lazy(source, line):
                bad.append(
                    f"line {line}: imports {target} inside a function without a "
                    "'lazy' comment (a function-local import must not dodge a cycle)"
                )
    assert not bad, f"{module} ({path.relative_to(ROOT)}):\n  " + "\n  ".join(bad)


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        typing_only = _type_checking_lines(path)
        for target, line, _ in _imports(path, module):
            if target in MODULES and target != module and line not in typing_only:
                graph[module].add(target)
    # Tarjan's strongly connected components.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_can_fail() -> None:
    assert layer_of("nanoir.dialects.nf") > layer_of("nanoir.runtime.numerics.quant")
    assert layer_of("nanoir.grammar.ne.importer")[0] == layer_of("nanoir.lowering.quantize")[0]
    assert layer_of("nanoir.runtime.stream") < layer_of("nanoir.lowering.quantize")
    with pytest.raises(AssertionError):
        layer_of("numpy")
