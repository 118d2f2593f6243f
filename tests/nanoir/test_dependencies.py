"""Every third-party import in the package is declared in pyproject.toml.

A module may import a distribution from the core dependencies, or from an extra that it
documents (its docstring, or its package's, names "the ``X`` extra"). Imports inside
functions count too: a lazily imported module is still needed on the path that reaches it
(a progress bar that only a terminal turns on crashed a person's first run this way).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("nanoir", "dialects", "lowering", "runtime", "grammar")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    """Core distributions and, per extra, its distributions (normalized names)."""
    core: set[str] = set()
    extras: dict[str, set[str]] = {}
    for line in md.requires("nanoir") or []:
        req = Requirement(line)
        name = _normal(req.name)
        found = re.findall(r'extra\s*==\s*"([^"]+)"', str(req.marker or ""))
        if found:
            for extra in found:
                extras.setdefault(extra, set()).add(name)
        else:
            core.add(name)
    return core, extras


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _documented_extras(path: Path) -> set[str]:
    texts = [ast.get_docstring(ast.parse(path.read_text())) or ""]
    init = path.parent / "__init__.py"
    if init.exists() and init != path:
        texts.append(ast.get_docstring(ast.parse(init.read_text())) or "")
    return {m for t in texts for m in re.findall(r"``?(\w[\w-]*)``? extra", t)}


def _sources() -> list[Path]:
    return sorted(p for d in PACKAGE_DIRS for p in (ROOT / d).rglob("*.py"))


def test_sources_found() -> None:
    assert len(_sources()) > 30


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_third_party_imports_are_declared(path: Path) -> None:
    core, extras = _declared()
    documented = _documented_extras(path)
    unknown_extras = documented - set(extras)
    assert not unknown_extras, f"{path.name} documents extras pyproject lacks: {unknown_extras}"
    allowed = core.union(*(extras[e] for e in documented))
    distributions = md.packages_distributions()
    missing = []
    for module in sorted(_imported_modules(ast.parse(path.read_text()))):
        if module in sys.stdlib_module_names or module in ("nanoir", "__future__"):
            continue
        dists = {_normal(d) for d in distributions.get(module, [module])}
        if not dists & allowed:
            missing.append(f"{module} (distribution {', '.join(sorted(dists))})")
    assert not missing, (
        f"{path.relative_to(ROOT)} imports {missing}: declare them in pyproject.toml's "
        f"dependencies, or in an extra that the module's docstring names "
        f"(documented: {sorted(documented) or 'none'})"
    )


def test_an_undeclared_import_is_caught(tmp_path: Path) -> None:
    """The check itself can fail: a module importing an undeclared distribution is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""Needs nothing."""\n\ndef f():\n    import rich\n    import sklearn\n')
    core, extras = _declared()
    assert "rich" in core
    modules = _imported_modules(ast.parse(bad.read_text()))
    assert modules == {"rich", "sklearn"}
    dists = {_normal(d) for d in md.packages_distributions().get("sklearn", ["sklearn"])}
    assert not dists & core.union(*(extras[e] for e in _documented_extras(bad)))


def test_every_package_is_listed_for_setuptools() -> None:
    """A subpackage missing from ``[tool.setuptools] packages`` works in an editable install
    but is left out of a wheel: every folder with an ``__init__.py`` must be listed."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join((package, *init.parent.relative_to(ROOT / folder).parts))
        for package, folder in config["package-dir"].items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert found - listed == set(), f"packages missing from pyproject.toml: {found - listed}"
    assert listed - found == set(), f"listed packages with no folder: {listed - found}"
