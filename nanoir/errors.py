"""The one base of every error nanoir raises for bad input or an impossible request.

``except nanoir.Error`` catches them all. Each concrete error also keeps its built-in base
(``ValueError``, ``RuntimeError``, xDSL's ``DiagnosticException`` ...), so code written against
those still works. This module imports only the standard library, so every layer may import it.
"""

from __future__ import annotations

import os


class Error(Exception):
    """Base class of nanoir's own errors: the message says what and where."""


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


def os_reason(e: OSError) -> str:
    """The short reason of an ``OSError`` (``No such file or directory``), for messages."""
    return e.strerror or str(e)
