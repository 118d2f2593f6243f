"""Python API helpers that the CLIs share: reading programs."""

from __future__ import annotations

from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from nanoir.context import make_context
from nanoir.diagnostics import parse_and_verify


def parse(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify MLIR text; errors are ``ParseError``/``NanoirDiagnostic`` with a location."""
    return parse_and_verify(make_context(), text, name)


def load(path: str | Path) -> ModuleOp:
    """Read a program from a ``.mlir`` file."""
    path = Path(path)
    return parse(path.read_text(), str(path))
