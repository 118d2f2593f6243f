"""What the engine is: a target description read from a small TOML file (``nanoir.Target``).

A target says what an accelerator of the NanoEngine kind executes and what it costs. lower-to-hw
(``host=true`` puts what the target cannot run on the host), ``nanoir.inspect`` (which op runs
where, and why) and ``nanoir.estimate`` (cycles, latency, frames per second) read it. The
fields, as the TOML file spells them (every one optional; an absent one takes the default
below, which is what the nh level itself can express, so a target that says nothing limits
nothing):

    name = "my-engine"                      # for messages and reports (default: the file's
                                            #   name without its suffix)

    [engine]
    ops = ["conv", "linear", "add", ...]    # the nh ops the engine executes, by mnemonic
                                            #   (nh.conv -> "conv"); default: every nh op, which
                                            #   is what the .ne hw rows express
    weight_bits = [1, 2, 4, 8, 16]          # code widths of weights it takes natively
    activation_bits = [1, 2, 4, 8, 16]      # code widths of other values (activations, tables)
    unsigned = true                         # unsigned codes (ui<b>) as well as signed ones
    rounding = ["trunc", "floor", "half_up", "half_even"]   # requantization rounding modes

    [compute]
    clock_mhz = 100.0                       # engine clock
    lanes = { 1 = 512, 2 = 256, 4 = 128, 8 = 64, 16 = 16 }
                                            # multiply-accumulates per cycle, per weight width
                                            #   (a width runs on the narrowest lane width >= it)
    vector_lanes = 64                       # values per cycle of an op without MACs
                                            #   (elementwise, pools, data movement)

    [memory]
    buffer_bytes = 262144                   # on-chip buffer
    bandwidth_bytes_per_cycle = 8.0         # external memory bandwidth
    stream_dim = 2                          # the dim streamed when checking stream buffers

    [host]
    gmacs = 1.0                             # the host's multiply-accumulates per second (1e9),
                                            #   to estimate the time of host islands

A code of ``b`` bits is taken when a listed width is ``>= b`` (a 5-bit activation runs in an
8-bit lane); the check refuses only codes wider than every listed width. ``stream_dim`` and
``buffer_bytes`` bound each op's stream caches (``stream-plan``'s analysis along that dim):
an op whose caches need more than the buffer runs on the host. The cost fields serve
``nanoir.estimate`` only; the defaults are round example numbers.

Bad input is one :class:`TargetError` naming the file and either ``line:col`` (malformed
TOML) or the field and what it takes. ``examples/targets/nanoengine_example.toml`` is a worked
example; its numbers are an example, not a vendor's figures (``Target.example()`` reads the
same file shipped inside nanoir).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nanoir.dialects.nh import NH
from nanoir.errors import Error, FileAccessError, os_reason, path_argument

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with tomli (a dependency there)
    import tomli as tomllib

__all__ = ["ALL_BITS", "ROUNDINGS", "Target", "TargetError", "engine_op_names", "load_target"]

ALL_BITS = frozenset((1, 2, 4, 8, 16))
"""Code widths the nh level carries for weights and activations (accumulators are i32)."""
ROUNDINGS = frozenset(("trunc", "floor", "half_up", "half_even"))
"""``nh.requant``'s rounding modes."""
BOUNDARY_OPS = frozenset(("to_host", "from_host"))
"""nh ops that cross between engine and host: every target has them (they are not engine work)."""
EXAMPLE_FILE = Path(__file__).resolve().parent / "targets" / "nanoengine_example.toml"


class TargetError(ValueError, Error):
    """A target file or value that is not a target: the message names the file and the field."""


def engine_op_names() -> frozenset[str]:
    """Every nh op mnemonic a target may list (``nh.conv`` -> ``conv``), boundary ops aside."""
    return frozenset(op.name.removeprefix("nh.") for op in NH.operations) - BOUNDARY_OPS


@dataclass(frozen=True)
class Target:
    """An engine: what it executes (``ops``, widths, rounding) and what that costs.

    The defaults limit nothing (every nh op, width and mode) and give round example costs;
    read a file with :meth:`load` (or :func:`load_target`)."""

    name: str = "unlimited"
    ops: frozenset[str] | None = None
    """nh op mnemonics the engine executes; None: every nh op (what the .ne hw rows express)."""
    weight_bits: frozenset[int] = ALL_BITS
    activation_bits: frozenset[int] = ALL_BITS
    unsigned: bool = True
    rounding: frozenset[str] = ROUNDINGS
    clock_mhz: float = 100.0
    lanes: Mapping[int, float] = field(
        default_factory=lambda: {1: 512.0, 2: 256.0, 4: 128.0, 8: 64.0, 16: 16.0}
    )
    """Multiply-accumulates per cycle, per weight width."""
    vector_lanes: float = 64.0
    buffer_bytes: int | None = None
    """On-chip buffer; None: no bound on stream buffers (and no spill in the estimate)."""
    bandwidth_bytes_per_cycle: float = 8.0
    stream_dim: int = 2
    host_gmacs: float = 1.0
    source: str = ""
    """The file it was read from (for messages), or empty."""

    # -- what the engine takes ---------------------------------------------------------------

    def takes_op(self, mnemonic: str) -> bool:
        """Whether the engine executes ``nh.<mnemonic>`` (boundary ops always)."""
        return self.ops is None or mnemonic in self.ops or mnemonic in BOUNDARY_OPS

    def takes_bits(self, bits: int, weight: bool = False) -> bool:
        """Whether a ``bits``-wide code fits a width the engine has (weights or other values)."""
        widths = self.weight_bits if weight else self.activation_bits
        return any(w >= bits for w in widths)

    def lanes_for(self, bits: int) -> float:
        """MACs per cycle for ``bits``-wide weights: the narrowest lane width that holds them
        (the widest one's lanes when none does)."""
        fitting = sorted(w for w in self.lanes if w >= bits)
        key = fitting[0] if fitting else max(self.lanes)
        return float(self.lanes[key])

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    def describe(self) -> str:
        """One line: the name and where it came from."""
        return self.name + (f" ({self.source})" if self.source else "")

    # -- reading -----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Target:
        """The target described by the TOML file at ``path`` (:class:`TargetError` if not one)."""
        return load_target(path)

    @classmethod
    def from_toml(cls, text: str, source: str = "<string>") -> Target:
        """The target described by TOML ``text`` (``source`` names it in messages)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            message = str(e)
            at = re.search(r"\(at line (\d+), column (\d+)\)", message)
            if at:
                where = f"{source}:{at.group(1)}:{at.group(2)}"
            else:  # "(at end of document)": the position after the last character
                lines = text.split("\n")
                where = f"{source}:{len(lines)}:{len(lines[-1]) + 1}"
            reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", message)
            raise TargetError(f"{where}: error: not a TOML file: {reason}") from None
        return cls.from_dict(data, source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Target:
        """The target a parsed TOML document (nested dicts) describes."""
        return _Reader(source).target(data)

    @classmethod
    def example(cls) -> Target:
        """The example target shipped with nanoir (its numbers are an example, not a vendor's)."""
        return load_target(EXAMPLE_FILE)

    def with_ops(self, ops: frozenset[str] | set[str] | None) -> Target:
        """This target executing only ``ops`` (checked like the file's ``engine.ops``)."""
        checked = None if ops is None else _Reader(self.source or "<ops>").ops(list(ops))
        return replace(self, ops=checked)


def load_target(path: str | os.PathLike[str]) -> Target:
    """Read a target file: a regular file of at most 1 MiB holding TOML (see the module)."""
    name = path_argument("path", path)
    try:
        if not stat.S_ISREG(os.stat(name).st_mode):  # (before opening: a FIFO would block)
            raise TargetError(f"{name}: a target is a regular file (TOML)")
        with open(name, "rb") as f:
            data = f.read(2**20 + 1)
    except OSError as e:
        raise FileAccessError(f"cannot read target {name}: {os_reason(e)}", name, e.errno) from None
    if len(data) > 2**20:
        raise TargetError(f"{name}: a target file is at most 1 MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TargetError(f"{name}: error: not UTF-8 text (byte {e.start})") from None
    return Target.from_toml(text, name)


def _default_name(source: str) -> str:
    """A target without ``name`` is called after its file (``tiny.toml``: ``tiny``)."""
    stem = Path(source).stem
    return stem if stem and not source.startswith("<") else "unnamed"


_SECTIONS: dict[str, dict[str, str]] = {
    "engine": {
        "ops": "ops",
        "weight_bits": "weight_bits",
        "activation_bits": "activation_bits",
        "unsigned": "unsigned",
        "rounding": "rounding",
    },
    "compute": {"clock_mhz": "clock_mhz", "lanes": "lanes", "vector_lanes": "vector_lanes"},
    "memory": {
        "buffer_bytes": "buffer_bytes",
        "bandwidth_bytes_per_cycle": "bandwidth_bytes_per_cycle",
        "stream_dim": "stream_dim",
    },
    "host": {"gmacs": "host_gmacs"},
}
"""TOML section -> key -> ``Target`` field."""


class _Reader:
    """Checks a parsed TOML document field by field, naming the field in every refusal."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, message: str) -> TargetError:
        return TargetError(f"{self.source}: error: {key}: {message}")

    def target(self, data: Mapping[str, Any]) -> Target:
        values: dict[str, Any] = {"source": self.source, "name": _default_name(self.source)}
        for key, value in data.items():
            if key == "name":
                if not isinstance(value, str) or not value:
                    raise self.fail("name", f"must be a non-empty string, got {value!r}")
                values["name"] = value
                continue
            if key not in _SECTIONS:
                raise self.fail(
                    key,
                    "unknown field (a target has name and [engine], [compute], [memory], [host])",
                )
            if not isinstance(value, dict):
                raise self.fail(key, f"must be a table ([{key}]), got {type(value).__name__}")
            for sub, v in value.items():
                full = f"{key}.{sub}"
                if sub not in _SECTIONS[key]:
                    known = ", ".join(_SECTIONS[key])
                    raise self.fail(full, f"unknown field (known in [{key}]: {known})")
                values[_SECTIONS[key][sub]] = getattr(self, "field_" + sub)(full, v)
        target = Target(**values)
        missing = sorted(b for b in target.weight_bits if not any(w >= b for w in target.lanes))
        if missing:
            raise self.fail(
                "compute.lanes",
                f"has no lane width for {missing[0]}-bit weights (engine.weight_bits lists it)",
            )
        return target

    # -- one method per field ----------------------------------------------------------------

    def ops(self, value: Any, key: str = "engine.ops") -> frozenset[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"must be a list of nh op names, got {value!r}")
        known = engine_op_names()
        for v in value:
            name = v.removeprefix("nh.")
            if name not in known:
                raise self.fail(key, f"{v!r} is not an nh op (known: {', '.join(sorted(known))})")
        return frozenset(v.removeprefix("nh.") for v in value)

    def field_ops(self, key: str, value: Any) -> frozenset[str]:
        return self.ops(value, key)

    def _bits(self, key: str, value: Any) -> frozenset[int]:
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            raise self.fail(key, f"must be a non-empty list of bit widths, got {value!r}")
        bad = [v for v in value if not 1 <= v <= 16]
        if bad:
            raise self.fail(key, f"{bad[0]} is not a code width (1..16)")
        return frozenset(value)

    def field_weight_bits(self, key: str, value: Any) -> frozenset[int]:
        return self._bits(key, value)

    def field_activation_bits(self, key: str, value: Any) -> frozenset[int]:
        return self._bits(key, value)

    def field_unsigned(self, key: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def field_rounding(self, key: str, value: Any) -> frozenset[str]:
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.fail(key, f"must be a non-empty list of rounding modes, got {value!r}")
        bad = [v for v in value if v not in ROUNDINGS]
        if bad:
            raise self.fail(
                key, f"{bad[0]!r} is not a rounding mode ({', '.join(sorted(ROUNDINGS))})"
            )
        return frozenset(value)

    def _positive(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.fail(key, f"must be a positive number, got {value!r}")
        if value == float("inf"):
            raise self.fail(key, "must be finite")
        return float(value)

    def field_clock_mhz(self, key: str, value: Any) -> float:
        return self._positive(key, value)

    def field_vector_lanes(self, key: str, value: Any) -> float:
        return self._positive(key, value)

    def field_bandwidth_bytes_per_cycle(self, key: str, value: Any) -> float:
        return self._positive(key, value)

    def field_gmacs(self, key: str, value: Any) -> float:
        return self._positive(key, value)

    def field_lanes(self, key: str, value: Any) -> dict[int, float]:
        if not isinstance(value, dict) or not value:
            raise self.fail(key, f"must be a table of weight width = MACs per cycle, got {value!r}")
        lanes: dict[int, float] = {}
        for width, n in value.items():
            if not width.isdigit() or not 1 <= int(width) <= 16:
                raise self.fail(f"{key}.{width}", "a lane width is a bit width 1..16")
            lanes[int(width)] = self._positive(f"{key}.{width}", n)
        return lanes

    def field_buffer_bytes(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(key, f"must be a positive whole number of bytes, got {value!r}")
        return value

    def field_stream_dim(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(key, f"must be a dim index >= 1, got {value!r}")
        return value
