"""Python API helpers that the CLIs share: reading and writing programs and arrays.

The format follows the file extension: ``.ne`` is NanoEngine text (imported at the nq level,
or at the hw level when its tensors are integers; see ``nanoir.grammar.ne_import``) and
``.mlir`` is MLIR; ``save`` writes ``.ne`` or ``.mlir``. Any other name is a
``FileFormatError`` that says so.

Every error raised here derives from ``nanoir.Error``: ``FileFormatError`` (also a
``ValueError``) for contents or names nanoir cannot read, ``FileAccessError`` (also an
``OSError``) for paths that cannot be read or written.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import signal
import stat
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from nanoir.errors import Error

if TYPE_CHECKING:
    import numpy as np
    from xdsl.dialects.builtin import ModuleOp

PROGRAM_FORMATS = {".mlir": "MLIR", ".ne": "NanoEngine"}
"""The program files ``load`` reads, by extension."""

Writer = Callable[[IO[bytes]], None]
Contents = str | bytes | Writer


class FileFormatError(ValueError, Error):
    """A file whose name or contents nanoir cannot read (or a name it cannot write)."""


class FileAccessError(OSError, Error):
    """A path that cannot be read or written: missing, a directory, no permission ...

    ``str()`` is the whole message (it names the path); ``errno`` and ``filename`` are set
    as for any ``OSError``.
    """

    def __init__(self, message: str, path: str | os.PathLike[str], errno: int | None = None):
        super().__init__(errno, message, os.fspath(path))
        self.message = message

    def __str__(self) -> str:
        return self.message


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


# ---------------------------------------------------------------------------------------------
# Programs


def parse(text: str, name: str = "<string>") -> ModuleOp:
    """Parse and verify MLIR text; errors are ``ParseError``/``NanoirDiagnostic`` with a location."""
    from nanoir.context import make_context
    from nanoir.diagnostics import parse_and_verify

    return parse_and_verify(make_context(), text, name)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The contents of ``path``; an unreadable path is a ``FileAccessError`` naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FileAccessError(f"cannot read {os.fspath(path)}: {_reason(e)}", path,
                              e.errno) from None


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 ``data`` as text; bad bytes are a ``FileFormatError`` at ``name:line:col``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[: e.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        from xdsl.utils.lexer import Input, Span

        from nanoir.diagnostics import print_span

        # The source line (bad bytes shown as U+FFFD) and a caret under the first bad byte.
        shown = print_span(Span(e.start, e.end, Input(data, name)), "").splitlines()[1:3]
        raise FileFormatError(f"{name}:{line}:{column}: invalid UTF-8 byte "
                              f"0x{data[e.start]:02x}: not a text file\n"
                              + "\n".join(shown)) from None


def _program_format(path: Path) -> str:
    if path.suffix not in PROGRAM_FORMATS:
        known = " and ".join(f"{ext} ({what})" for ext, what in PROGRAM_FORMATS.items())
        raise FileFormatError(
            f"{path}: cannot tell the format of {path.name!r} from its extension: nanoir reads "
            f"{known} files"
        )
    return path.suffix


def load(path: str | Path) -> ModuleOp:
    """Read a program from a ``.ne`` (NanoEngine) or ``.mlir`` file.

    Errors are located: ``NanoEngineError`` for ``.ne``, ``ParseError``/``NanoirDiagnostic``
    for MLIR; ``FileFormatError`` for another extension or a file that is not UTF-8 text,
    ``FileAccessError`` for a path that cannot be read.
    """
    path = Path(path)
    if _program_format(path) == ".ne":
        from nanoir.grammar.ne_import import import_nanoengine_bytes

        return import_nanoengine_bytes(read_bytes(path), str(path))
    return parse(decode_text(read_bytes(path), str(path)), str(path))


def save(module: ModuleOp, path: str | Path) -> None:
    """Write ``module`` to a ``.ne`` or ``.mlir`` file, atomically (no partial file on error).

    ``.ne`` export errors are ``ExportError`` naming the op that has no NanoEngine form; see
    ``write_atomically`` for the path rules.
    """
    path = Path(path)
    if path.suffix == ".ne":
        from nanoir.grammar.ne_export import export_nanoengine

        check_output_path(path)
        text = export_nanoengine(module)
    elif path.suffix == ".mlir":
        check_output_path(path)
        text = str(module) + "\n"
    else:
        raise FileFormatError(f"cannot tell the format of {str(path)!r}: use a .ne or .mlir "
                              "file name")
    write_atomically(path, text)


# ---------------------------------------------------------------------------------------------
# Arrays

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _read_npy(stream: IO[bytes], size: int, name: str) -> np.ndarray:
    """One array from a ``.npy`` stream of ``size`` bytes, its header checked first."""
    from numpy.lib import format as npy

    start = stream.tell()
    try:
        version = npy.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = npy.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = npy.read_array_header_2_0(stream)
        else:
            raise FileFormatError(f"{name}: .npy format version {version} is not read here "
                                  "(only 1.0 and 2.0, which hold numeric arrays)")
    except FileFormatError:
        raise
    except Exception as e:  # ValueError, EOFError, tokenize.TokenError, zlib.error ...
        raise FileFormatError(f"{name}: not a valid .npy file ({type(e).__name__}: {e})"
                              ) from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise FileFormatError(f"{name}: holds {dtype} values; nanoir reads numeric arrays "
                              "(bool, int, uint or float)")
    needed = math.prod(shape) * dtype.itemsize
    held = size - stream.tell()
    if needed > held:
        raise FileFormatError(
            f"{name}: truncated: its header promises a {'x'.join(map(str, shape)) or 'scalar'} "
            f"{dtype} array ({_size(needed)}) but the file holds {_size(max(held, 0))} of data"
        )
    stream.seek(start)
    try:
        return npy.read_array(stream, allow_pickle=False)
    except MemoryError:
        raise FileFormatError(f"{name}: a {'x'.join(map(str, shape))} {dtype} array "
                              f"({_size(needed)}) does not fit in memory") from None
    except (ValueError, EOFError, OSError) as e:
        raise FileFormatError(f"{name}: cannot read the array: {e}") from None


def load_arrays(path: str | os.PathLike[str], *, archive: bool = True) -> list[np.ndarray]:
    """The arrays of a ``.npy`` file (one) or a ``.npz`` archive (each, in file order).

    The header is checked against the file's size before anything is allocated, so a
    truncated or corrupt file is a ``FileFormatError`` that says what is wrong (an empty
    file, not a NumPy file, a header promising more data than there is, a non-numeric
    dtype). With ``archive=False`` a ``.npz`` is an error too: one array was expected.
    Non-regular files (FIFOs, ``/dev/stdin``) are read whole first.
    """
    name = os.fspath(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise FileAccessError(f"cannot read {name}: {_reason(e)}", path, e.errno) from None
    with f:
        try:
            st = os.fstat(f.fileno())
            stream: IO[bytes] = f
            if stat.S_ISREG(st.st_mode):
                size = st.st_size
            else:
                stream = io.BytesIO(f.read())
                size = len(stream.getvalue())  # type: ignore[attr-defined]
            head = stream.read(len(_NPY_MAGIC))
            stream.seek(0)
        except OSError as e:
            raise FileAccessError(f"cannot read {name}: {_reason(e)}", path, e.errno) from None
        if size == 0:
            raise FileFormatError(f"{name}: the file is empty (0 bytes), not a .npy array")
        if head.startswith(_ZIP_MAGIC):
            if not archive:
                raise FileFormatError(f"{name}: is a .npz archive; one .npy array is expected "
                                      "here")
            return _read_npz(stream, name)
        if head != _NPY_MAGIC:
            raise FileFormatError(f"{name}: not a .npy file (it does not start with NumPy's "
                                  "magic bytes)")
        return [_read_npy(stream, size, name)]


def _read_npz(stream: IO[bytes], name: str) -> list[np.ndarray]:
    try:
        with zipfile.ZipFile(stream) as z:
            arrays = []
            for info in z.infolist():
                member = f"{name}[{info.filename.removesuffix('.npy')}]"
                with z.open(info) as m:
                    arrays.append(_read_npy(m, info.file_size, member))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, OSError, EOFError) as e:
        raise FileFormatError(f"{name}: not a valid .npz archive: {e}") from None
    if not arrays:
        raise FileFormatError(f"{name}: the .npz archive holds no arrays")
    return arrays


def load_array(path: str | os.PathLike[str]) -> np.ndarray:
    """The one array of a ``.npy`` file (see ``load_arrays``; a ``.npz`` is an error)."""
    return load_arrays(path, archive=False)[0]


# ---------------------------------------------------------------------------------------------
# Writing files

_INHERITED = re.compile(r"^/(dev/std(in|out|err)|dev/fd/\d+|proc/[^/]+/fd/\d+)$")
"""Names of already-open descriptors: written through, never renamed over."""


def _is_inherited(path: str) -> bool:
    """Whether ``path`` (or a symlink chain from it) names an open descriptor of a process."""
    p = os.path.abspath(path)
    for _ in range(40):
        if _INHERITED.match(p):
            return True
        if not os.path.islink(p) or p.startswith("/proc/"):
            return False
        try:
            link = os.readlink(p)
        except OSError:
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return False


def writes_through(path: str | os.PathLike[str]) -> bool:
    """Whether ``write_atomically`` writes into ``path`` in place: an existing file that is
    not a regular file (a device, FIFO, socket ...) or an open descriptor's name such as
    ``/dev/stdout``."""
    name = os.fspath(path)
    if not name:
        return False
    if _is_inherited(name):
        return True
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no way to read it without setting it elsewhere
    os.umask(mask)
    return mask


def check_output_path(path: str | os.PathLike[str]) -> None:
    """Fail early, before any work, if ``path`` obviously cannot be written.

    A ``FileAccessError`` if it is a directory, or its directory is missing, not a
    directory, or not writable. Nothing is created.
    """
    name = os.fspath(path)
    if not name:
        raise FileAccessError("cannot write to an empty path", name)
    if _is_inherited(name):
        return
    target = os.path.realpath(name)
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        st = None  # the directory is checked below
    except OSError as e:
        raise FileAccessError(f"cannot write {name}: {_reason(e)}", name, e.errno) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise FileAccessError(f"cannot write {name}: it is a directory", name)
        if not stat.S_ISREG(st.st_mode):
            return  # written through
    parent = os.path.dirname(target) or "."
    if not os.path.exists(parent):
        raise FileAccessError(
            f"cannot write {name}: directory {os.path.dirname(name) or parent} does not exist",
            name)
    if not os.path.isdir(parent):
        raise FileAccessError(f"cannot write {name}: {parent} is not a directory", name)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileAccessError(f"cannot write {name}: no permission to create files in "
                              f"{parent}", name)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (delivered on exit) so that a temp file is never left unnamed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _write_contents(f: IO[bytes], contents: Contents) -> None:
    if isinstance(contents, str):
        f.write(contents.encode("utf-8"))
    elif isinstance(contents, bytes | bytearray | memoryview):
        f.write(contents)
    else:
        contents(f)
    f.flush()


def write_atomically(path: str | os.PathLike[str], contents: Contents) -> None:
    """Write ``contents`` (text as UTF-8, bytes, or a callback writing to a binary file) to
    ``path`` so that no half-written file is ever seen, and a failure (or SIGINT/SIGTERM
    raised as an exception) leaves an existing file as it was and no temporary file behind.

    - A regular file (or a new one) is written to a temporary file in the same directory,
      flushed and fsynced, then renamed over it. An existing file keeps its mode (and, if
      possible, its owner); a new one gets the mode ``open()`` would give (0666 less the
      umask), not ``mkstemp``'s 0600.
    - A symlink is followed: its target is replaced, the link stays.
    - Anything that is not a regular file (a device such as ``/dev/null``, a FIFO, a pipe
      or terminal behind ``/dev/stdout``) and the names of open descriptors (``/dev/stdout``,
      ``/dev/fd/N``, ``/proc/self/fd/N``) are written through, never renamed over: renaming
      would replace a device node with a regular file.

    Errors are ``FileAccessError`` naming the path. Hand-written on the standard library:
    the maintained packages for this (``safer``, ``boltons.fileutils.AtomicSaver``;
    ``atomicwrites`` is archived) replace special files and symlinks with regular files,
    and ``safer`` neither fsyncs nor keeps the umask's mode. A file with several hard links
    is replaced like any other (the other names keep the old contents).
    """
    name = os.fspath(path)
    check_output_path(name)
    if _is_inherited(name):
        _write_through(name, contents)
        return
    target = os.path.realpath(name)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise FileAccessError(f"cannot write {name}: {_reason(e)}", name, e.errno) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(name, contents)
        return
    directory = os.path.dirname(target)
    tmp: str | None = None
    try:
        try:
            with _signals_held():
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(target)}.",
                                           suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                _write_contents(f, contents)
                if st is not None:
                    if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                        with contextlib.suppress(OSError):
                            os.chown(f.fileno(), st.st_uid, st.st_gid)
                    os.chmod(f.fileno(), stat.S_IMODE(st.st_mode))
                else:
                    os.chmod(f.fileno(), 0o666 & ~_umask())
                os.fsync(f.fileno())
            os.replace(tmp, target)
            tmp = None
        except OSError as e:
            raise FileAccessError(f"cannot write {name}: {_reason(e)}", name, e.errno) from None
        with contextlib.suppress(OSError):  # make the rename itself durable
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_through(name: str, contents: Contents) -> None:
    """Write into an existing special file (device, FIFO, inherited descriptor) in place."""
    import sys

    if callable(contents):  # render first: a pipe cannot seek (np.save needs to), and a
        buffer = io.BytesIO()  # failing writer then writes nothing at all
        contents(buffer)
        contents = buffer.getvalue()
    if _is_inherited(name):
        with contextlib.suppress(Exception):
            sys.stdout.flush()  # whatever was printed comes first
    try:
        # O_APPEND: a regular file behind /dev/stdout was opened (and truncated, or not, for
        # `>>`) by the shell; a device or FIFO ignores it.
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY)
        with os.fdopen(fd, "wb") as f:
            _write_contents(f, contents)
    except OSError as e:
        raise FileAccessError(f"cannot write {name}: {_reason(e)}", name, e.errno) from None
