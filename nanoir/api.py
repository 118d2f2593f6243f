"""Python API helpers that the CLIs share: reading and writing programs.

The format follows the file extension: ``.ne`` is NanoEngine text (imported at the nq level,
or at the hw level when its tensors are integers; see ``nanoir.grammar.ne_import``), anything
else read is MLIR; ``save`` writes ``.ne`` or ``.mlir``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from nanoir.context import make_context
from nanoir.diagnostics import parse_and_verify


def parse(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify MLIR text; errors are ``ParseError``/``NanoirDiagnostic`` with a location."""
    return parse_and_verify(make_context(), text, name)


def load(path: str | Path) -> ModuleOp:
    """Read a program from a ``.ne`` (NanoEngine) or ``.mlir`` file.

    Errors are located: ``NanoEngineError`` for ``.ne``, ``ParseError``/``NanoirDiagnostic``
    for MLIR.
    """
    path = Path(path)
    if path.suffix == ".ne":
        from nanoir.grammar.ne_import import load_nanoengine

        return load_nanoengine(path)
    return parse(path.read_text(), str(path))


def save(module: ModuleOp, path: str | Path) -> None:
    """Write ``module`` to a ``.ne`` or ``.mlir`` file, atomically (no partial file on error).

    ``.ne`` export errors are ``ExportError`` naming the op that has no NanoEngine form.
    """
    path = Path(path)
    if path.suffix == ".ne":
        from nanoir.grammar.ne_export import export_nanoengine

        text = export_nanoengine(module)
    elif path.suffix == ".mlir":
        text = str(module) + "\n"
    else:
        raise ValueError(f"cannot tell the format of {str(path)!r}: use a .ne or .mlir file name")
    write_atomically(path, text)


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that no half-written file can ever be seen."""
    path = Path(path).resolve()
    # A temporary file in the same directory, renamed over the target: readers never see
    # a half-written file, and a failure leaves the old file (if any) as it was.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
