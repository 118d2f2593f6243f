"""Imported (QAT) exponents: the user's statement of each tensor's exponents, checked as given.

An imported exponent is never a calibration result, so it is never clamped: a value outside
``CALIB_EXP_RANGE`` (-60..60, what NanoEngine stores and what keeps an accumulator's exponent
inside int8) is refused, naming the tensor, the value and the range, and so are ``bool``,
``None``, NaN, +-infinity, non-integer floats and anything else that is not an integer, as
exponents or as bit widths. Integral floats (``3.0``) are integers.

An exponent file is read only if it is a regular file (never a FIFO, device or directory,
checked with ``os.stat`` before it is opened, and again on the open descriptor, which is opened
non-blocking) of at most ``EXPONENT_FILE_LIMIT`` bytes; JSON nested more than
``MAX_JSON_DEPTH`` deep (counted before parsing) and integers too long to print are refused,
not raised as ``RecursionError``/``ValueError``. Hand-written: the
JSON-schema validators (``jsonschema``, ``pydantic``) would check types but neither the range
message asked for here nor the file kind and size before reading.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from nanoir.lowering.quantize.rules import QuantizeError, checked_bits, parse_rounding
from nanoir.runtime.arrays import open_regular_file
from nanoir.runtime.numerics import quant

from nanoir.errors import FileAccessError

__all__ = ["EXPONENT_FILE_LIMIT", "MAX_JSON_DEPTH", "checked_exponents", "load_exponents"]

EXPONENT_FILE_LIMIT = 16 * 2**20
"""The largest exponent file read (16 MiB; QAT's own files are a few KiB)."""

MAX_JSON_DEPTH = 32
"""The deepest JSON nesting read: QAT's files nest 3 deep (object, record, list)."""

_RECORD_KEYS = ("exp", "bits", "rounding", "axis")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPENERS = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSERS = np.frombuffer(b"]}", dtype=np.uint8)


class _LongInt(str):
    """A JSON integer literal too long to convert (Python refuses over 4300 digits)."""


def _shown(v: Any) -> str:
    """``v`` for a message: never a huge repr, never a recursive one."""
    if isinstance(v, _LongInt):
        return f"{v[:12]}... (an integer of {len(v.lstrip('-'))} digits)"
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        v = int(v)
        if v.bit_length() <= 64:
            return str(v)
        return f"an integer of about {math.ceil(v.bit_length() * math.log10(2))} digits"
    if isinstance(v, float | np.floating | bool | np.bool_) or v is None:
        return repr(v if not isinstance(v, np.generic) else v.item())
    if isinstance(v, str):
        return repr(v) if len(v) <= 40 else repr(v[:40]) + "..."
    return f"a {type(v).__name__}"


def _exponent(v: Any, name: str, where: str) -> int:
    """One exponent as an int in the calibration range, or a ``QuantizeError`` saying why not."""
    lo, hi = quant.CALIB_EXP_RANGE
    what = f"quantize: {where}tensor {name!r}: exponent {_shown(v)}"
    if isinstance(v, bool | np.bool_) or v is None:
        raise QuantizeError(f"{what} is not an integer (exponents are integers in {lo}..{hi})")
    if isinstance(v, float | np.floating):
        if not math.isfinite(v) or not float(v).is_integer():
            raise QuantizeError(f"{what} is not an integer (exponents are integers in {lo}..{hi})")
        v = int(v)
    if isinstance(v, _LongInt) or (isinstance(v, int | np.integer) and not lo <= v <= hi):
        raise QuantizeError(
            f"{what} is outside {lo}..{hi} (an imported exponent is used as given, never "
            f"clamped; NanoEngine's exponents lie in {lo}..{hi})"
        )
    if not isinstance(v, int | np.integer):
        raise QuantizeError(f"{what} is not an integer (exponents are integers in {lo}..{hi})")
    return int(v)


def _exponents(value: Any, name: str, where: str) -> np.ndarray:
    """``k`` or ``[k per channel]`` (a flat list, tuple or an array of any shape), flattened."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iu" and value.size:
            lo, hi = quant.CALIB_EXP_RANGE
            if lo <= value.min() and value.max() <= hi:
                return value.astype(np.int64).reshape(-1)
        value = value.reshape(-1).tolist()
    elif not isinstance(value, list | tuple):
        value = [value]
    lo, hi = quant.CALIB_EXP_RANGE
    if all(type(v) is int for v in value) and (not value or lo <= min(value) and max(value) <= hi):
        return np.asarray(value, dtype=np.int64).reshape(-1)  # the common case, checked at once
    return np.asarray([_exponent(v, name, where) for v in value], dtype=np.int64)


def _record(value: Mapping[Any, Any], name: str, where: str) -> dict[str, Any]:
    """A ``{"exp", "bits", "rounding", "axis"}`` record with each entry checked."""
    unknown = [k for k in value if k not in _RECORD_KEYS]
    if "exp" not in value or unknown:
        raise QuantizeError(
            f'quantize: {where}the exponents of {name} need an "exp" entry and may have bits, '
            "rounding and axis; got " + ", ".join(sorted(_shown(k) for k in value))
        )
    record: dict[str, Any] = {"exp": _exponents(value["exp"], name, where)}
    if value.get("bits") is not None:
        record["bits"] = checked_bits(value["bits"], f"{where}{name} asks for {{bits}} bits")
    if value.get("rounding") is not None:
        if not isinstance(value["rounding"], str):
            raise QuantizeError(
                f"quantize: {where}the rounding of {name} is {_shown(value['rounding'])}, "
                "not a rounding mode's name"
            )
        record["rounding"] = parse_rounding(value["rounding"])
    if "axis" in value:
        axis = value["axis"]
        if axis is not None and (
            isinstance(axis, bool | np.bool_) or not isinstance(axis, int | np.integer)
        ):
            raise QuantizeError(
                f"quantize: {where}the axis of {name} is {_shown(axis)}, not an integer or null"
            )
        record["axis"] = None if axis is None else int(axis)
    return record


def checked_exponents(exponents: Any, where: str = "") -> dict[str, Any]:
    """Imported exponents by tensor name, each checked (see the module docstring): a flat int64
    array for ``k`` / ``[k per channel]``, or a record whose ``exp`` is one. ``where`` (a file
    name and ``": "``) starts every message."""
    if exponents is None:
        return {}
    if not isinstance(exponents, Mapping):
        raise QuantizeError(
            f"quantize: {where}exponents must map tensor names to exponents; got {_shown(exponents)}"
        )
    checked: dict[str, Any] = {}
    for name, value in exponents.items():
        if not isinstance(name, str):
            raise QuantizeError(
                f"quantize: {where}exponents are keyed by tensor name (a string); got {_shown(name)}"
            )
        if isinstance(value, Mapping):
            checked[name] = _record(value, name, where)
        else:
            checked[name] = _exponents(value, name, where)
    return checked


def _read_regular_file(name: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; nothing else is opened."""
    where = f"quantize: cannot read exponents {name!r}"
    if "\0" in name:
        raise QuantizeError(f"{where}: the path holds a NUL byte")
    try:
        f = open_regular_file(name)
    except FileAccessError as e:
        raise QuantizeError(f"quantize: {e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise QuantizeError(
                f"{where}: it holds {size} bytes; an exponent file holds at most "
                f"{limit // 2**20} MiB"
            )
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise QuantizeError(f"{where}: {e.strerror or e}") from None
    if len(data) > limit:
        raise QuantizeError(
            f"{where}: it holds more than {limit // 2**20} MiB; an exponent file holds at most that"
        )
    return data


def _nesting(data: bytes) -> int:
    """The deepest ``[``/``{`` nesting of JSON text outside its strings (one pass, no
    recursion), so the depth is bounded before the parser (recursive in C) sees it."""
    text = _JSON_STRING.sub(b'""', data)
    b = np.frombuffer(text, dtype=np.uint8)
    if not b.size:
        return 0
    step = np.isin(b, _OPENERS).astype(np.int64) - np.isin(b, _CLOSERS)
    return int(np.cumsum(step).max())


def load_exponents(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Imported exponents from a JSON object of tensor name to an int, a list of ints, or a
    record ``{"exp": ..., "bits": ..., "rounding": ..., "axis": ...}`` (``nanoir.qat``'s
    ``save_exponents``), checked as :func:`checked_exponents` checks them."""
    name = os.fspath(path)
    data = _read_regular_file(name, EXPONENT_FILE_LIMIT)

    def long_int(text: str) -> int | _LongInt:
        return int(text) if len(text) <= 40 else _LongInt(text)

    if _nesting(data) > MAX_JSON_DEPTH:
        raise QuantizeError(
            f"quantize: cannot read exponents {name!r}: the JSON is nested more than "
            f"{MAX_JSON_DEPTH} deep (an exponent file needs 3: object, record, list)"
        )
    try:
        parsed = json.loads(data, parse_int=long_int)
    except RecursionError:  # the depth count above misread the text (not UTF-8, say)
        raise QuantizeError(
            f"quantize: cannot read exponents {name!r}: the JSON is nested too deeply"
        ) from None
    except ValueError as e:  # also UnicodeDecodeError
        raise QuantizeError(f"quantize: cannot read exponents {name!r}: {e}") from None
    if not isinstance(parsed, dict):
        raise QuantizeError(
            f"quantize: {name!r} must be a JSON object mapping tensor names to an int, a list "
            'of ints, or a record {"exp": ..., "bits": ..., ...}'
        )
    return checked_exponents(parsed, f"{name}: ")
