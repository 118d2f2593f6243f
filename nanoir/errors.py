"""The one base of every error nanoir raises for bad input or an impossible request.

``except nanoir.Error`` catches them all. Each concrete error also keeps its built-in base
(``ValueError``, ``RuntimeError``, xDSL's ``DiagnosticException`` ...), so code written against
those still works. This module imports only the standard library, so every layer may import it.
"""

from __future__ import annotations

import os


class Error(Exception):
    """Base class of nanoir's own errors: the message says what and where."""


class ArgumentError(TypeError, ValueError, Error):
    """A bad argument to a public function: the wrong type, or a value it does not take.

    Python raises ``TypeError`` for the one and ``ValueError`` for the other; this keeps both
    bases, so code written against either (or against what a call raised before) still works.
    """


def int_argument(name: str, value: object, lo: int, hi: int | None = None) -> int:
    """``value`` as an ``int`` in ``lo..hi`` (``hi`` None: no upper bound), else
    :class:`ArgumentError` naming ``name``; ``bool`` is refused, NumPy integers are taken."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ArgumentError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    n = value.__index__()  # type: ignore[attr-defined]
    if n < lo or (hi is not None and n > hi):
        bounds = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise ArgumentError(f"{name} must be {bounds}, got {n}")
    return n


def path_argument(name: str, value: object) -> str:
    """``value`` as a path string (``str`` or ``os.PathLike`` of ``str``), else
    :class:`ArgumentError` naming ``name``."""
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)  # type: ignore[arg-type]
        if isinstance(path, str):
            return path
    raise ArgumentError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")


def bool_argument(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False``, else :class:`ArgumentError` naming ``name``."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def batches_argument(name: str, value: object) -> None:
    """Refuse (:class:`ArgumentError` naming ``name``) what is not an iterable of batches:
    a non-iterable, or a string (which iterates its characters)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ArgumentError(
            f"{name} must be an iterable of batches (each an array or a tuple of arrays, one "
            f"per input), got {type(value).__name__}"
        )


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


class QuantizationWarning(UserWarning):
    """A quantized program whose output is destroyed: all zero, the same for every input, or
    below the least SQNR against float on the calibration data (``nanoir.quantize``'s check;
    ``strict=True`` makes it an error). The message names the output, its SQNR, the layer
    where SQNR falls most and what to try."""
