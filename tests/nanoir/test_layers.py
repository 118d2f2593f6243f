"""nanoir's layers import only downward, without cycles (DESIGN.md, "Layers").

From the bottom: ``nanoir.errors``; numerics (``nanoir.runtime.numerics``: NumPy math, kernels,
shape rules); dialects; analysis (``nanoir.lowering.analysis``: graph walks, stream rules); the
runtime (executors: passes run programs to calibrate, so it sits below them); passes, grammar
and frontend, which do not import each other; and ``nanoir`` itself (API, pipeline, CLIs). Every import counts, also one inside a function: such an import is
allowed only to keep start-up cheap, never to dodge a cycle, and says so in a comment with
the word "lazy" on its line or the line above.

Inside a package, a module never imports the package's own front (its ``__init__``): the front
imports the package's modules, so that import is a cycle that works only by import order
(issue 31 §6). A package whose modules are its own business (``SEALED``: quantize's phases
behind ``nanoir.lowering.quantize``) is imported only through its front from outside. No
``_private`` name is used across modules: neither imported from another module nor read as an
attribute of anything but ``self``/``cls`` (a module, another object), where a public name in
the module that owns it is what the reader needs.
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
    (3, "nanoir.target"),  # what the engine is: read by passes, analysis users and the API
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

OUTSIDE = ("tests", "benchmarks", "examples")
"""Folders of Python code outside the package that import it."""

SEALED = ("nanoir.lowering.quantize",)
"""Packages whose inner modules only the package itself imports: the rest of nanoir, the
tests, benchmarks and examples import their front."""

KNOWN_FRONT_IMPORTS = {
    # Issue 31 §6: owned by other sessions; remove each pair when its import names the module.
    ("nanoir.dialects.functions", "nanoir.dialects"),
    ("nanoir.frontend.torch_import", "nanoir.frontend"),
    ("nanoir.runtime.numerics.recurrent", "nanoir.runtime.numerics"),
}
"""(module, its package's front it imports): the imports of a package's own front not yet
broken; every other one fails ``test_no_import_cycles``."""

KNOWN_PRIVATE_USES = {
    # Owned by other sessions (issue 30 §0 left them): each needs a public name in the module
    # that defines it (runtime/numerics/kernels.py, runtime/nh.py, runtime/numerics/softmax.py,
    # grammar/onnx/exporter.py, runtime/stream.py).
    ("nanoir.qat.steps", "_pool_geometry"),
    ("nanoir.qat.steps", "_avg_divisor_1d"),
    ("nanoir.grammar.onnx.integer.exporter", "_onnx"),
    ("nanoir.grammar.onnx.integer.importer", "_onnx"),
    ("nanoir.grammar.onnx.integer.pools", "_pool_geometry"),
    ("nanoir.grammar.onnx.integer.pools", "_pool_setup"),
    ("nanoir.grammar.onnx.integer.pools", "_window_counts"),
    ("nanoir.grammar.onnx.integer.algorithms", "_MANTISSA"),
    ("nanoir.runtime.stream", "_push_checked"),
    ("nanoir.runtime.streamer", "_push_checked"),
}
"""(module, private name) uses across modules not yet given a public name."""


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


def _front_imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(front, line) for every import of the front of a package ``module`` is inside (``from
    nanoir.qat import x`` in ``nanoir.qat.api``, also when ``x`` is a module). The top-level
    ``nanoir`` is not counted: its front is lazy (PEP 562) and imports none of its modules."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # ``from . import x``: the package the dots name
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(n, node.lineno) for n in names if n != "nanoir" and module.startswith(n + ".")]
    return found


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
    """No loop of imports, also of imports made only for type hints (a loop all the same, for a
    reader and for a type checker); and an import of a package's own front from inside the
    package counts as one (the front imports the package's modules)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    fronts: list[str] = []
    for module, path in MODULES.items():
        for target, _, _ in _imports(path, module):
            if target in MODULES and target != module:
                graph[module].add(target)
        tree = ast.parse(path.read_text())
        for front, line in _front_imports(tree, module, path.name == "__init__.py"):
            if (module, front) not in KNOWN_FRONT_IMPORTS:
                fronts.append(f"{module} (line {line}) imports its package's front {front}")
    assert not fronts, "imports of a package's own front (cycles):\n  " + "\n  ".join(fronts)
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


def _outside_sources() -> dict[str, Path]:
    """Every Python file importing nanoir, by a name for messages: the package's modules and
    the tests, benchmarks and examples."""
    found = {module: path for module, path in MODULES.items()}
    for folder in OUTSIDE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[str(path.relative_to(ROOT))] = path
    return found


def _imported_names(tree: ast.AST) -> list[tuple[str, int]]:
    """(module or ``module.name``, line) for every absolute import in ``tree``."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


@pytest.mark.parametrize("sealed", SEALED)
def test_sealed_packages_are_imported_through_their_front(sealed: str) -> None:
    """Outside ``sealed`` nothing imports its modules (``nanoir.lowering.quantize.driver``,
    or ``from nanoir.lowering.quantize import driver``): only names of its front."""
    inner = {m for m in MODULES if m.startswith(sealed + ".")}
    assert inner, f"{sealed} has no modules"
    bad = []
    for name, path in _outside_sources().items():
        if name == sealed or name.startswith(sealed + "."):
            continue
        for target, line in _imported_names(ast.parse(path.read_text())):
            if target in inner or target.startswith(tuple(m + "." for m in inner)):
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
    assert not bad, f"import {sealed}, not its modules:\n  " + "\n  ".join(bad)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _defined_privates(tree: ast.AST) -> set[str]:
    """The ``_private`` names a module defines: functions, classes, assignments at any level,
    and attributes it sets on ``self`` or ``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return {n for n in names if _private(n)}


def _private_uses(
    tree: ast.AST, module: str, project_privates: set[str]
) -> list[tuple[str, int, str]]:
    """(name, line, how) for every ``_private`` name imported from a nanoir module, or read or
    set as an attribute of anything but ``self``, ``cls`` or ``super()`` where some nanoir
    module defines that name (a private of torch or xDSL is theirs to judge)."""
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nanoir"):
            for alias in node.names:
                if _private(alias.name):
                    found.append((alias.name, node.lineno, f"from {node.module} import "))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            own = isinstance(base, ast.Name) and base.id in ("self", "cls")
            own = own or isinstance(base, ast.Call) and ast.unparse(base.func) == "super"
            if not own and node.attr in project_privates:
                found.append((node.attr, node.lineno, f"{ast.unparse(base)}."))
    return found


def test_no_private_name_is_used_across_modules() -> None:
    """A ``_private`` name stays in its module and its class: ``from m import _x``,
    ``module._x`` and ``obj._x`` (outside ``obj``'s own methods) each need a public name in the
    module that owns it, or the code moved where it belongs."""
    trees = {module: ast.parse(path.read_text()) for module, path in MODULES.items()}
    project_privates = set().union(*(_defined_privates(t) for t in trees.values()))
    bad = []
    for module, tree in trees.items():
        for name, line, how in _private_uses(tree, module, project_privates):
            if (module, name) not in KNOWN_PRIVATE_USES:
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {how}{name}")
    assert not bad, "private names used across modules:\n  " + "\n  ".join(bad)


def test_the_private_check_can_fail() -> None:
    """The checks above see what they claim: the cases issue 30 §0 removed."""
    privates = {"_shape", "_quant_of", "_joins", "_as_batches"}
    cases = {
        "from nanoir.lowering.quantize.targets import _shape": "_shape",
        "def f(module):\n    return module._quant_of": "_quant_of",
        "def f(qat):\n    qat._joins.calibrate([])": "_joins",
        "from nanoir.lowering.quantize import calibration\ncalibration._as_batches([], [])": (
            "_as_batches"
        ),
    }
    for source, name in cases.items():
        assert [u[0] for u in _private_uses(ast.parse(source), "m", privates)] == [name]
    fine = "class A:\n    def f(self):\n        return self._joins, super()._x, torch._y"
    assert _private_uses(ast.parse(fine), "m", privates) == []
    assert _defined_privates(ast.parse("class A:\n    def f(self):\n        self._q = 1")) == {"_q"}
    inner = _imported_names(ast.parse("from nanoir.lowering.quantize import driver"))
    assert ("nanoir.lowering.quantize.driver", 1) in inner
    front = ast.parse("from nanoir.qat import distributed")
    assert _front_imports(front, "nanoir.qat.api", False) == [("nanoir.qat", 1)]
    assert _front_imports(ast.parse("from . import x"), "nanoir.qat", True) == []
    assert _front_imports(ast.parse("from . import x"), "nanoir.qat.api", False) == [
        ("nanoir.qat", 1)
    ]
    module_only = ast.parse("import nanoir.qat.distributed as d\nimport nanoir")
    assert _front_imports(module_only, "nanoir.qat.api", False) == []
