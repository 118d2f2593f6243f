"""Python API helpers that the CLIs share: reading and writing programs (arrays: ``load_arrays``
from ``nanoir.runtime.arrays``; safe writes: ``nanoir.files``).

The format follows the file extension: ``.ne`` is NanoEngine text (imported at the nq level,
or at the hw level when its tensors are integers; see ``nanoir.grammar.ne.importer``),
``.onnx`` is ONNX (NanoEngine-PyTorch's export or standard QDQ, read into nf + nq; needs the
``onnx`` extra; see ``nanoir.grammar.onnx.importer``) and ``.mlir`` is MLIR; ``save`` writes
``.ne``, ``.onnx`` (QDQ or NanoEngine's form, ``nanoir.grammar.onnx.exporter``) or ``.mlir``. Any other name is a
``FileFormatError`` that says so.

Every error raised here derives from ``nanoir.Error``: ``FileFormatError`` (also a
``ValueError``) for contents or names nanoir cannot read, ``FileAccessError`` (also an
``OSError``) for paths that cannot be read or written.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nanoir.errors import ArgumentError, FileAccessError, FileFormatError, path_argument
from nanoir.errors import os_reason as _reason
from nanoir.files import check_output_path, check_path_name, write_atomically

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

PROGRAM_FORMATS = {".mlir": "MLIR", ".ne": "NanoEngine", ".onnx": "ONNX"}
"""The program files ``load`` reads, by extension."""


# ---------------------------------------------------------------------------------------------
# Programs


def parse(text: str | bytes, name: str = "<string>") -> ModuleOp:
    """Parse and verify MLIR text; errors are ``ParseError``/``NanoirDiagnostic`` with a location."""
    if not isinstance(text, str | bytes):
        raise ArgumentError(f"text must be MLIR text (str or bytes), got {type(text).__name__}")
    if not isinstance(name, str):
        raise ArgumentError(f"name must be a str, got {type(name).__name__}")
    # lazy: each format's reader or writer loads on first use
    from nanoir.context import make_context
    from nanoir.diagnostics import parse_and_verify

    return parse_and_verify(make_context(), text, name)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The contents of ``path``; an unreadable path is a ``FileAccessError`` naming it."""
    check_path_name(os.fspath(path), "read")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FileAccessError(
            f"cannot read {os.fspath(path)}: {_reason(e)}", path, e.errno
        ) from None


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 ``data`` as text; bad bytes are a ``FileFormatError`` at ``name:line:col``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        from xdsl.utils.lexer import Input, Span

        # lazy: each format's reader or writer loads on first use
        from nanoir.diagnostics import print_span

        # The source line (bad bytes shown as U+FFFD) and a caret under the first bad byte.
        shown = print_span(Span(e.start, e.end, Input(data, name)), "").splitlines()[1:3]
        raise FileFormatError(
            f"{name}:{line}:{column}: invalid UTF-8 byte "
            f"0x{data[e.start]:02x}: not a text file\n" + "\n".join(shown)
        ) from None


def _program_format(path: Path) -> str:
    if path.suffix not in PROGRAM_FORMATS:
        names = [f"{ext} ({what})" for ext, what in PROGRAM_FORMATS.items()]
        known = ", ".join(names[:-1]) + " and " + names[-1]
        raise FileFormatError(
            f"{path}: cannot tell the format of {path.name!r} from its extension: nanoir reads "
            f"{known} files"
        )
    return path.suffix


def parse_input_shape(spec: str) -> tuple[str, tuple[int | None, ...]]:
    """A command line's ``NAME=D1xD2x...`` (``?`` or ``-1`` for a dim left dynamic) as the name
    and the dims ``load``'s ``input_shapes`` takes; ``ArgumentError`` for anything else.

    >>> parse_input_shape("x=1x3x48x320")
    ('x', (1, 3, 48, 320))
    >>> parse_input_shape("image=?x3x224x224")
    ('image', (None, 3, 224, 224))
    """
    name, sep, dims = spec.rpartition("=")
    parts = dims.split("x") if dims else []
    ok = bool(sep and name and parts)
    shape: list[int | None] = []
    for part in parts:
        if part in ("?", "-1"):
            shape.append(None)
        elif part.isdigit():
            shape.append(int(part))
        else:
            ok = False
    if not ok:
        raise ArgumentError(
            f"--input-shape {spec!r}: expected NAME=D1xD2x... (a graph input's name and its "
            "sizes, ? for a dim left dynamic), e.g. x=1x3x48x320"
        )
    return name, tuple(shape)


def load(
    path: str | Path, *, input_shapes: Mapping[str, Sequence[int | None]] | None = None
) -> ModuleOp:
    """Read a program from a ``.ne`` (NanoEngine), ``.onnx`` (ONNX) or ``.mlir`` file.

    ``input_shapes`` (ONNX only) gives graph inputs declared with dynamic dims static sizes,
    as onnxruntime's and TensorRT's tools take them: ``{"x": (1, 3, 48, 320)}`` (``None`` or
    -1 leaves a dim dynamic); a dim the file declares static must be given as it is.

    Errors are located: ``NanoEngineError`` for ``.ne``, ``OnnxImportError`` (a
    ``FileFormatError`` naming the node) for ``.onnx``, ``ParseError``/``NanoirDiagnostic``
    for MLIR; ``FileFormatError`` for another extension or a file that is not UTF-8 text,
    ``FileAccessError`` for a path that cannot be read.
    """
    path = Path(path_argument("path", path))
    check_path_name(str(path), "read")
    if input_shapes is not None and _program_format(path) != ".onnx":
        raise ArgumentError(
            f"input_shapes gives the shapes of an ONNX file's graph inputs; {path.name} is no "
            ".onnx file"
        )
    if _program_format(path) == ".ne":
        # lazy: each format's reader or writer loads on first use
        from nanoir.grammar.ne.importer import import_nanoengine_bytes

        return import_nanoengine_bytes(read_bytes(path), str(path))
    if path.suffix == ".onnx":
        # lazy: each format's reader or writer loads on first use
        from nanoir.grammar.onnx.importer import import_onnx_bytes
        from nanoir.grammar.onnx.integer import import_model, integer_model_of

        data = read_bytes(path)
        integer = integer_model_of(data)  # nanoir's integer flavour: the nh program again
        if integer is not None:
            if input_shapes is not None:
                raise ArgumentError(
                    f"{path}: input_shapes is for float ONNX models; this is nanoir's integer "
                    "flavour, whose shapes are the program's"
                )
            return import_model(integer, str(path), lambda text: parse(text, f"{path}:nanoir.nh"))
        return import_onnx_bytes(data, str(path), str(path.resolve().parent), input_shapes)
    return parse(decode_text(read_bytes(path), str(path)), str(path))


def save(module: ModuleOp, path: str | Path, *, onnx_flavor: str | None = None) -> None:
    """Write ``module`` to a ``.ne``, ``.onnx`` or ``.mlir`` file, atomically (no partial file
    on error).

    ``.ne`` export errors are ``ExportError`` naming the op that has no NanoEngine form; see
    ``write_atomically`` for the path rules. ``.onnx`` writes an nf/nq program as standard
    QDQ (``onnx_flavor="qdq"``, opset 21) or as NanoEngine-PyTorch's export
    (``onnx_flavor="nanoengine"``, opset 17 + ``t2e.qmodel::Q``); what the flavour cannot
    express is an ``OnnxExportError`` naming the op (see ``nanoir.grammar.onnx.exporter``).
    An nh (integer) program is written as exact integer ONNX (``onnx_flavor="integer"``, the
    default for it; ``nanoir.grammar.onnx.integer``), which ``load`` reads back as the same
    program; ``qdq`` or ``nanoengine`` on it is refused, naming the flavour.
    """
    # lazy: xDSL loads only when a program is saved
    from xdsl.dialects.builtin import ModuleOp

    if not isinstance(module, ModuleOp):
        raise ArgumentError(f"module must be a program (a ModuleOp), got {type(module).__name__}")
    path = Path(path_argument("path", path))
    check_path_name(str(path))
    contents: str | bytes
    if path.suffix == ".ne":
        # lazy: each format's reader or writer loads on first use
        from nanoir.grammar.ne.exporter import export_nanoengine

        check_output_path(path)
        contents = export_nanoengine(module)
    elif path.suffix == ".onnx":
        # lazy: each format's reader or writer loads on first use
        from nanoir.grammar.onnx.integer import export_any_flavor

        if onnx_flavor is not None and not isinstance(onnx_flavor, str):
            raise ArgumentError(
                f"onnx_flavor must be 'qdq', 'nanoengine', 'integer' or None, got {onnx_flavor!r}"
            )
        check_output_path(path)
        contents = export_any_flavor(module, onnx_flavor)
    elif path.suffix == ".mlir":
        check_output_path(path)
        contents = str(module) + "\n"
    else:
        raise FileFormatError(
            f"cannot tell the format of {str(path)!r}: use a .ne, .onnx or .mlir file name"
        )
    write_atomically(path, contents)
