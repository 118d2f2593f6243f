"""Reading ``.npy``/``.npz`` inputs without trusting them.

NumPy's own loaders allocate what a header promises (a 0-byte file is an ``EOFError``, a header
claiming 1e11 rows a ``MemoryError``, a ``.npz`` where one array was expected a misleading
shape). Here the header is checked against the file's size first, and every problem is a
``FileFormatError`` or ``FileAccessError`` (both ``nanoir.Error``) naming the file.
"""

from __future__ import annotations

import io
import math
import os
import stat
import zipfile
import zlib
from typing import IO

import numpy as np

from nanoir.errors import FileAccessError, FileFormatError
from nanoir.errors import os_reason as _reason

__all__ = ["load_array", "load_arrays"]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_MAX_BYTES = 2**63 - 1
"""No array holds more bytes than this (NumPy's sizes are signed 64-bit)."""


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _shape_text(shape: tuple[int, ...]) -> str:
    """A header's shape for a message, its dims never printed whole if huge."""
    dims = [str(d) if abs(d).bit_length() <= 64 else f"<{abs(d).bit_length()}-bit>" for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _read_npy(stream: IO[bytes], size: int, name: str) -> np.ndarray:
    """One array from a ``.npy`` stream of ``size`` bytes, its header checked first."""
    from numpy.lib import format as npy

    start = stream.tell()
    shape, dtype = _check_npy_header(stream, size, name)
    needed = math.prod(shape) * dtype.itemsize
    stream.seek(start)
    try:
        return npy.read_array(stream, allow_pickle=False)
    except MemoryError:
        raise FileFormatError(
            f"{name}: a {'x'.join(map(str, shape))} {dtype} array "
            f"({_size(needed)}) does not fit in memory"
        ) from None
    except (ValueError, EOFError, OSError) as e:
        raise FileFormatError(f"{name}: cannot read the array: {e}") from None


def _check_npy_header(stream: IO[bytes], size: int, name: str) -> tuple[tuple[int, ...], np.dtype]:  # type: ignore[type-arg]
    """The shape and dtype a ``.npy`` header at the stream's position promises, checked
    against the ``size`` bytes the stream holds (the stream is left after the header)."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(stream)
        if version == (1, 0):
            shape, fortran_order, dtype = npy.read_array_header_1_0(stream)
        elif version == (2, 0):
            shape, fortran_order, dtype = npy.read_array_header_2_0(stream)
        else:
            raise FileFormatError(
                f"{name}: .npy format version {version} is not read here "
                "(only 1.0 and 2.0, which hold numeric arrays)"
            )
    except FileFormatError:
        raise
    except Exception as e:  # ValueError, EOFError, tokenize.TokenError, zlib.error ...
        raise FileFormatError(f"{name}: not a valid .npy file ({type(e).__name__}: {e})") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise FileFormatError(
            f"{name}: holds {dtype} values; nanoir reads numeric arrays (bool, int, uint or float)"
        )
    if any(d < 0 for d in shape) or math.prod(d for d in shape if d) * dtype.itemsize > _MAX_BYTES:
        # NumPy's reader takes a negative dim as -1 ("the rest") or overflows on a huge one.
        raise FileFormatError(
            f"{name}: its header promises an array of shape {_shape_text(shape)}: "
            f"{'a dim is negative' if any(d < 0 for d in shape) else 'too large to exist'}"
        )
    needed = math.prod(shape) * dtype.itemsize
    held = size - stream.tell()
    if needed > held:
        raise FileFormatError(
            f"{name}: truncated: its header promises a {'x'.join(map(str, shape)) or 'scalar'} "
            f"{dtype} array ({_size(needed)}) but the file holds {_size(max(held, 0))} of data"
        )
    return tuple(shape), dtype


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages (``a FIFO (named pipe)``, ``a device``, ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular_file(name: str) -> IO[bytes]:
    """``name`` opened for reading if it is a regular file, else a ``FileAccessError``:
    ``os.stat`` decides before anything is opened, and the open is non-blocking and checked
    again (``fstat``), so a path swapped for a FIFO in between waits for no writer. Used
    wherever only a regular file may be read (calibration arrays, exponent files)."""
    try:
        mode = os.stat(name).st_mode
        if not stat.S_ISREG(mode):
            raise FileAccessError(
                f"cannot read {name}: it is {file_kind(mode)}; only a regular file is read", name
            )
        f = os.fdopen(os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    except OSError as e:
        if isinstance(e, FileAccessError):
            raise
        raise FileAccessError(f"cannot read {name}: {_reason(e)}", name, e.errno) from None
    mode = os.fstat(f.fileno()).st_mode
    if not stat.S_ISREG(mode):
        f.close()
        raise FileAccessError(
            f"cannot read {name}: it is {file_kind(mode)}; only a regular file is read", name
        )
    return f


def _check_name(name: str) -> None:
    if "\0" in name:
        raise FileAccessError(f"cannot read {name!r}: the path holds a NUL byte", name)


def load_arrays(
    path: str | os.PathLike[str], *, archive: bool = True, regular_only: bool = False
) -> list[np.ndarray]:
    """The arrays of a ``.npy`` file (one) or a ``.npz`` archive (each, in file order).

    The header is checked against the file's size before anything is allocated, so a
    truncated or corrupt file is a ``FileFormatError`` that says what is wrong (an empty
    file, not a NumPy file, a header promising more data than there is, a negative or
    impossible dim, a non-numeric dtype). With ``archive=False`` a ``.npz`` is an error too:
    one array was expected. Non-regular files (FIFOs, ``/dev/stdin``) are read whole first,
    once their first bytes are NumPy's or zip's magic (so ``/dev/zero`` is refused at once);
    with ``regular_only`` they are refused before they are opened (``os.stat``; a FIFO is
    then opened non-blocking and checked again, so nothing waits for a writer).
    """
    name = os.fspath(path)
    _check_name(name)
    if regular_only:
        f = open_regular_file(name)
    else:
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
                head = f.read(len(_NPY_MAGIC))
                if head and head != _NPY_MAGIC and not head.startswith(_ZIP_MAGIC):
                    raise FileFormatError(
                        f"{name}: not a .npy file (it does not start with NumPy's magic bytes)"
                    )
                stream = io.BytesIO(head + f.read())
                size = len(stream.getvalue())  # type: ignore[attr-defined]
            head = stream.read(len(_NPY_MAGIC))
            stream.seek(0)
        except OSError as e:
            if isinstance(e, FileAccessError):
                raise
            raise FileAccessError(f"cannot read {name}: {_reason(e)}", path, e.errno) from None
        if size == 0:
            raise FileFormatError(f"{name}: the file is empty (0 bytes), not a .npy array")
        if head.startswith(_ZIP_MAGIC):
            if not archive:
                raise FileFormatError(f"{name}: is a .npz archive; one .npy array is expected here")
            return _read_npz(stream, name)
        if head != _NPY_MAGIC:
            raise FileFormatError(
                f"{name}: not a .npy file (it does not start with NumPy's magic bytes)"
            )
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


def load_array(path: str | os.PathLike[str], *, mmap: bool = False) -> np.ndarray:
    """The one array of a ``.npy`` file (see ``load_arrays``; a ``.npz`` is an error).

    With ``mmap`` a regular file's data is memory-mapped read-only (after the same header
    checks), so a long input can be streamed without reading it whole; other files are read.
    """
    if not mmap:
        return load_arrays(path, archive=False)[0]
    name = os.fspath(path)
    _check_name(name)
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as e:
        raise FileAccessError(f"cannot read {name}: {_reason(e)}", path, e.errno) from None
    if not regular:
        return load_arrays(path, archive=False)[0]
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise FileFormatError(f"{name}: the file is empty (0 bytes), not a .npy array")
            head = f.read(len(_NPY_MAGIC))
            if head.startswith(_ZIP_MAGIC):
                raise FileFormatError(f"{name}: is a .npz archive; one .npy array is expected here")
            if head != _NPY_MAGIC:
                raise FileFormatError(
                    f"{name}: not a .npy file (it does not start with NumPy's magic bytes)"
                )
            f.seek(0)
            _check_npy_header(f, size, name)
    except OSError as e:
        raise FileAccessError(f"cannot read {name}: {_reason(e)}", path, e.errno) from None
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise FileFormatError(f"{name}: cannot map the array: {e}") from None
