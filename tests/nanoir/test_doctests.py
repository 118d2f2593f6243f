"""The examples in nanoir's docstrings run, and hold (issue 31, section 5: about a hundred of
them never ran). Every module of the ``nanoir`` namespace whose source holds ``>>>`` is
collected (so a new module with examples is run without being listed here), and doctest must
see at least one example in it: a ``>>>`` that doctest does not collect (in a comment, or in
a string that is not a docstring) is an example that never runs.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
from pathlib import Path

import pytest

PACKAGES = ("nanoir", "nanoir.dialects", "nanoir.lowering", "nanoir.runtime", "nanoir.grammar")
"""The namespace's top packages (pyproject.toml maps each folder to one)."""


def modules_with_examples() -> list[str]:
    names: set[str] = set()
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for root in map(Path, spec.submodule_search_locations):
            for path in sorted(root.rglob("*.py")):
                if ">>>" not in path.read_text(encoding="utf-8"):
                    continue
                parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
                names.add(".".join([package, *parts]))
    return sorted(names)


MODULES = modules_with_examples()


def test_the_examples_are_found():
    """kills: a discovery that finds nothing (every parametrized case would vanish and the
    suite still pass)."""
    assert len(MODULES) >= 20, MODULES
    assert "nanoir.runtime.numerics.quant" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name: str):
    """kills: an example whose printed value is wrong (fold_bn's folded weight and bias were,
    for a variance of 1 read as 2); an example doctest never collects."""
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=out.write)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0, f"{name} has '>>>' but no example doctest collects"
    assert result.failed == 0, out.getvalue()
