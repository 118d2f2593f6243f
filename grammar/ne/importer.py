"""The one way in for NanoEngine text (`.ne`): parse, check, detect the level, dispatch.

    text/bytes/path --parser--> Program --check--> checked Program
        --is_hw_program?--> import_hw (nh IR)  |  import_nq (nf/nq IR)

A program is at the hw level when its node outputs are integer tensors (`Tensor<int8_t>`,
...; `schema.is_hw_program`), else at the nq level. Every problem is a located
`NanoEngineError`; ops kept as `nf.custom` and files with NanoEngine-PyTorch's
padding-ignoring shapes warn (`NanoEngineImportWarning`, `NanoEnginePaddingWarning`).
"""

from __future__ import annotations

import os

from nanoir.grammar.ne.check import check_program
from nanoir.grammar.ne.errors import NanoEngineImportWarning, NanoEnginePaddingWarning
from nanoir.grammar.ne.fast import gc_paused
from nanoir.grammar.ne.import_hw import import_hw_program
from nanoir.grammar.ne.import_nq import import_nq_program
from nanoir.grammar.ne.parser import decode_nanoengine, parse_nanoengine
from nanoir.grammar.ne.schema import is_hw_program
from nanoir.grammar.ne.syntax_tree import Program
from xdsl.dialects.builtin import ModuleOp

__all__ = [
    "NanoEngineImportWarning",
    "NanoEnginePaddingWarning",
    "import_program",
    "import_nanoengine",
    "import_nanoengine_bytes",
    "load_nanoengine",
]


def import_program(
    program: Program, filename: str = "<string>", source: str | None = None
) -> ModuleOp:
    """The IR of a parsed `.ne` program (checked first); `NanoEngineSemanticError` on problems.

    `source`, the text the program came from, lets errors show the offending line.
    """
    with gc_paused():
        check_program(program, filename, source)
        return _import_checked(program, filename, source)


def import_nanoengine(text: str, filename: str = "<string>") -> ModuleOp:
    """Parse `.ne` text and import it; every problem is a located `NanoEngineError`."""
    with gc_paused():
        program = parse_nanoengine(text, filename, check=True)
        return _import_checked(program, filename, text)


def import_nanoengine_bytes(raw: bytes, filename: str = "<string>") -> ModuleOp:
    """Import `.ne` file contents (UTF-8); bad encoding is a located `NanoEngineSyntaxError`."""
    return import_nanoengine(decode_nanoengine(raw, filename), filename)


def load_nanoengine(path: str | os.PathLike[str]) -> ModuleOp:
    """Read and import a `.ne` file."""
    filename = os.fspath(path)
    with open(filename, "rb") as f:
        raw = f.read()
    return import_nanoengine_bytes(raw, filename)


def _import_checked(program: Program, filename: str, source: str | None) -> ModuleOp:
    if is_hw_program(program):
        return import_hw_program(program, filename, source)
    return import_nq_program(program, filename, source)
