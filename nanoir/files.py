"""Writing output files so that no reader ever sees half a file and nothing special is replaced.

A regular file is written to a temporary file beside it, fsynced and renamed over the target
(keeping the old file's mode and owner; a new file gets 0666 less the umask). Anything that is
not a regular file (a device such as ``/dev/null``, a FIFO, ``/dev/stdout``) is written
through, never renamed over; symlinks are followed. The temporary file is removed on any
error, including SIGINT/SIGTERM. Every problem is a ``FileAccessError`` (a ``nanoir.Error``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import IO

from nanoir.errors import FileAccessError
from nanoir.errors import os_reason as _reason

__all__ = [
    "Contents",
    "Writer",
    "check_output_path",
    "check_path_name",
    "write_atomically",
    "writes_through",
]

Writer = Callable[[IO[bytes]], None]
Contents = str | bytes | Writer

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


def check_path_name(name: str | bytes, action: str = "write") -> None:
    """A ``FileAccessError`` for a name no system call takes (a NUL byte), before the OS
    raises a bare ``ValueError`` for it."""
    if ("\0" if isinstance(name, str) else b"\0") in name:
        raise FileAccessError(f"cannot {action} {name!r}: the path holds a NUL byte", name)


def writes_through(path: str | os.PathLike[str]) -> bool:
    """Whether ``write_atomically`` writes into ``path`` in place: an existing file that is
    not a regular file (a device, FIFO, socket ...) or an open descriptor's name such as
    ``/dev/stdout``."""
    name = os.fspath(path)
    if not name or "\0" in name:
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
    directory, or not writable, or the name holds a NUL byte. Nothing is created.
    """
    name = os.fspath(path)
    if not name:
        raise FileAccessError("cannot write to an empty path", name)
    check_path_name(name)
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
            f"cannot write {name}: directory {os.path.dirname(name) or parent} does not exist", name
        )
    if not os.path.isdir(parent):
        raise FileAccessError(f"cannot write {name}: {parent} is not a directory", name)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileAccessError(
            f"cannot write {name}: no permission to create files in {parent}", name
        )


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
                fd, tmp = tempfile.mkstemp(
                    dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp"
                )
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
