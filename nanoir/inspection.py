"""``nanoir.inspect``: which op runs on the engine, which on the host, and why, before
quantizing (``nanoir-opt --inspect``).

For a float (nf) program the answer comes from where ``quantize`` will put its fake-quants
(its placement, ``find_targets``, with the same options: bits, rules, unsigned codes), with no
calibration; for a quantized (nq) program from its fake-quants; for a program
``lower-to-hw{host=true}`` partitioned, from its ``nh.host`` marks. Every op asked is asked
:func:`nanoir.lowering.hw.support.placement`, the functions lower-to-hw itself asks before
its patterns, so the two cannot disagree:

- ``host``: what lower-to-hw would say, found now (no integer form; an nh op, a code width,
  a rounding mode or unsigned codes the target lacks; an operand or shape the integer form
  cannot take; stream caches larger than the on-chip buffer; or it reads a host op's float);
- ``engine``: subject to what the lowering checks on the calibrated exponents (an
  accumulator bound, an alignment within i32, an integer algorithm's bounds), which the
  ``why`` column names: such a refusal is known only after calibrating, and
  ``lower-to-hw{host=true}`` then puts the op on the host too.

The result prints as a table (``str``, ``rich()``), as JSON (``to_json``) and on the
program's picture, one colour per device (``to_dot``, ``nanoir.draw(..., devices=...)``).

    #  op          value  device  why
    3  nf.reduce   %p     host    multiplies codes together: ...
    4  nf.conv     %c     engine  subject to exponents: its i32 accumulator bound ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

from nanoir.dialects.functions import find_function, level_of
from nanoir.errors import ArgumentError
from nanoir.layer_table import LayerTable
from nanoir.lowering.hw.host import HOST_ATTR, HOST_KIND_ATTR
from nanoir.lowering.hw.support import (
    QuantizedView,
    View,
    conditions,
    placement,
    planned_view,
)
from nanoir.lowering.lower_to_hw import target_argument
from nanoir.lowering.quantize import QuantConfig, QuantRule, find_targets, parse_rounding
from nanoir.target import Target

__all__ = ["Inspection", "Placed", "inspect"]

DEVICES = ("engine", "host", "boundary")


@dataclass(frozen=True)
class Placed:
    """One op: where it runs and why."""

    index: int
    """Its position among the ops asked (program order)."""
    op: Operation
    device: str
    """``engine``, ``host`` or (in a partitioned program) ``boundary``."""
    why: str
    """host: the refusal; engine: what it is subject to on the calibrated exponents."""
    kind: str = ""
    """host: what the engine lacks (``op``, ``bits``, ``mode``, ``shape``, ``buffer``,
    ``host``: joins a host island; ``exponents``: found while lowering)."""

    @property
    def name(self) -> str:
        r = self.op.results[0] if self.op.results else None
        return f"%{r.name_hint}" if r is not None and r.name_hint else ""


@dataclass
class Inspection:
    """Where each op of a program runs (see the module docstring)."""

    module: ModuleOp
    func: FuncOp
    target: Target | None
    level: str
    ops: list[Placed]

    @property
    def host(self) -> list[Placed]:
        return [p for p in self.ops if p.device == "host"]

    @property
    def engine(self) -> list[Placed]:
        return [p for p in self.ops if p.device == "engine"]

    def devices(self) -> dict[Operation, str]:
        """Each op's device (what ``to_dot`` colours)."""
        return {p.op: p.device for p in self.ops}

    def table(self) -> LayerTable:
        rows: list[list[Any]] = [
            [p.index, p.op.name, p.name, p.device, p.kind, p.why] for p in self.ops
        ]
        target = self.target.describe() if self.target is not None else "no target (nh itself)"
        notes = [
            f"{len(self.ops)} ops: {len(self.engine)} on the engine, {len(self.host)} on the "
            f"host; target {target}"
        ]
        return LayerTable(
            ["#", "op", "value", "device", "kind", "why"],
            rows,
            left=6,
            notes=notes,
            keys=["index", "op", "value", "device", "kind", "why"],
        )

    def __str__(self) -> str:
        return self.table().text()

    def rich(self) -> Any:
        return self.table().rich(title=f"engine or host: @{self.func.sym_name.data}")

    def as_dict(self) -> dict[str, Any]:
        target = self.target
        return {
            "function": self.func.sym_name.data,
            "level": self.level,
            "target": None
            if target is None
            else {f.name: _plain(getattr(target, f.name)) for f in fields(target)},
            "ops": self.table().records(),
            "engine": len(self.engine),
            "host": len(self.host),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def to_dot(self) -> str:
        """The program's picture with each op coloured by its device (``nanoir.dot``)."""
        # lazy: the DOT writer loads only when a picture is asked for
        from nanoir.dot import to_dot

        return to_dot(self.module, devices=self.devices())


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    return value


def _config(options: dict[str, Any]) -> QuantConfig:
    """quantize's options as its ``QuantConfig`` (rules parsed, rounding by name)."""
    known = {f.name for f in fields(QuantConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ArgumentError(
            f"inspect: unknown option(s) {', '.join(unknown)} (quantize's options: "
            + ", ".join(sorted(known))
            + ")"
        )
    options = dict(options)
    options["rules"] = tuple(
        r if isinstance(r, QuantRule) else QuantRule.parse(r) for r in options.get("rules", ())
    )
    if "rounding" in options:
        options["rounding"] = parse_rounding(options["rounding"])
    return QuantConfig(**options)


def _partitioned(module: ModuleOp, func: FuncOp, target: Target | None) -> Inspection:
    """A lowered program: nh ops on the engine, ops marked ``nh.host`` on the host."""
    placed: list[Placed] = []
    for op in func.body.block.ops:
        if op.name in ("func.return", "nh.constant", "nf.constant", "nq.fake_quant"):
            continue
        mark, kind = op.attributes.get(HOST_ATTR), op.attributes.get(HOST_KIND_ATTR)
        if isinstance(mark, StringAttr):
            lacks = kind.data if isinstance(kind, StringAttr) else ""
            placed.append(Placed(len(placed), op, "host", mark.data, lacks))
        elif op.name in ("nh.to_host", "nh.from_host"):
            placed.append(Placed(len(placed), op, "boundary", "host boundary"))
        elif op.name.startswith("nh."):
            placed.append(Placed(len(placed), op, "engine", ""))
    return Inspection(module, func, target, "nh", placed)


def inspect(
    module: ModuleOp,
    target: Target | str | None = None,
    *,
    function: str | None = None,
    **options: Any,
) -> Inspection:
    """Which op of ``module`` runs on the engine (``target``: a ``nanoir.Target`` or its TOML
    file; None: what nh itself can express) and which on the host, and why.

    ``module`` is a float program (then ``options`` are ``quantize``'s, as you will quantize
    it: ``weight_bits``, ``act_bits``, ``rules``, ``unsigned`` ...), a quantized one, or one
    ``lower_to_hw(host=True)`` partitioned. Nothing is calibrated or changed."""
    if not isinstance(module, ModuleOp):
        raise ArgumentError(f"module must be a program (a ModuleOp), got {type(module).__name__}")
    checked = target_argument(target)
    func = find_function(module, function)
    level = level_of(func)
    if level == "nh":
        return _partitioned(module, func, checked)
    view: View
    if level == "nf":
        config = _config(options)
        view = planned_view(find_targets(func, config), config.rounding)
    else:
        if options:
            raise ArgumentError(
                "inspect: quantize's options are for a float program; this one is quantized "
                f"already (got {', '.join(sorted(options))})"
            )
        view = QuantizedView()
    placed = [
        Placed(
            i,
            op,
            "engine" if why is None else "host",
            (f"subject to exponents: {conditions(op)}" if conditions(op) else "")
            if why is None
            else why.reason,
            "" if why is None else why.kind,
        )
        for i, (op, why) in enumerate(placement(func, view, checked))
    ]
    return Inspection(module, func, checked, level, placed)
