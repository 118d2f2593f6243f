"""``nanoir.estimate``: what each layer of a program costs on an engine (``nanoir.Target``),
and the totals: latency and frames per second (``nanoir-opt --emit=perf``).

A first-order roofline, one sample (batch 1), one row per layer: an op with the requantization
that follows it (``nh.requant``, or an nq fake-quant, read by nothing else), so what leaves a
layer is its requantized codes, not its accumulator:

- **MACs**: conv ``out elements x (C_in / groups) x kernel``; transposed conv ``in elements x
  (C_out / groups) x kernel``; linear ``out elements x in features``; matmul ``out elements x
  inner dim``; recurrent ``steps x`` the elements of its weight matrices (every gate's input
  and hidden products, every layer and direction). Other ops have none;
- **bytes**: weights (the op's constant operands) at their packed width (a 4-bit weight is half
  a byte), activations in and out at their code widths (nh types; nq: the fake-quants' bits;
  float values 32 bits), and the op's stream caches (``stream-plan``'s analysis along the
  target's ``stream_dim``, when the program streams);
- **cycles** = max(compute, memory): compute = MACs / ``lanes`` at the weight width (an op
  without MACs: output values / ``vector_lanes``), memory = the bytes the on-chip buffer
  cannot hold (weights + activations - ``buffer_bytes``) / ``bandwidth_bytes_per_cycle``;
- host ops (a program ``lower-to-hw{host=true}`` partitioned) take ``max(MACs, output
  values) / host_gmacs`` seconds; the boundary ops move their bytes over the bandwidth.

Totals: engine cycles and seconds (``clock_mhz``), host seconds, latency = their sum, frames
per second = 1 / latency, and the engine's share of MACs and of time. A dynamic dim other
than the batch counts as 1 (a stream's length is unknown): such an estimate is per row.

:class:`Estimate` prints as text (the per-layer table shared with ``nanoir.report``,
``nanoir.layer_table``), JSON (``to_json``) and a per-layer bar chart of cycles (``plot``).
The numbers are those of the target: the example target's are an example, not a vendor's.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

from nanoir.dialects.functions import find_function, level_of
from nanoir.dialects.nh import FixedAttr
from nanoir.errors import ArgumentError
from nanoir.layer_table import LayerTable, bar_chart, write_figure
from nanoir.lowering.hw.support import QuantizedView, View, cache_bytes
from nanoir.lowering.lower_to_hw import target_argument
from nanoir.target import Target

__all__ = ["Estimate", "LayerCost", "estimate", "layer_cycles", "macs_of"]


# ---------------------------------------------------------------------------------------------
# Counting: MACs per op, widths per value
# ---------------------------------------------------------------------------------------------


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    if not isinstance(t, TensorType):
        return ()
    return tuple(1 if d == DYNAMIC_INDEX else d for d in t.get_shape())


def _per_sample(value: SSAValue) -> int:
    """Elements of one sample: the batch (dim 0 of a rank >= 2 value) and dynamic dims as 1."""
    shape = _shape(value)
    if len(shape) >= 2:
        shape = (1,) + shape[1:]
    return math.prod(shape)


def _groups(op: Operation) -> int:
    g = op.properties.get("groups")
    return int(g.value.data) if g is not None else 1  # type: ignore[attr-defined]


def _conv(op: Operation) -> int:
    w = _shape(op.operands[1])
    return _per_sample(op.results[0]) * w[1] * math.prod(w[2:])


def _conv_transpose(op: Operation) -> int:
    w = _shape(op.operands[1])  # [C_in, C_out / g, *K]
    return _per_sample(op.operands[0]) * w[1] * math.prod(w[2:])


def _linear(op: Operation) -> int:
    return _per_sample(op.results[0]) * _shape(op.operands[1])[-1]


def _matmul(op: Operation) -> int:
    return _per_sample(op.results[0]) * _shape(op.operands[0])[-1]


def _recurrent(op: Operation) -> int:
    """Steps x the elements of every weight matrix (``[gates x hidden, in]`` and ``[gates x
    hidden, hidden]`` per layer and direction): each is one product per step."""
    batch_first = bool(op.properties["batch_first"].value.data)  # type: ignore[attr-defined]
    steps = _shape(op.operands[0])[1 if batch_first else 0]
    weights = op.weights  # type: ignore[attr-defined]
    return steps * sum(math.prod(_shape(v)) for v in weights if len(_shape(v)) == 2)


MAC_COUNTS: dict[str, Callable[[Operation], int]] = {
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "linear": _linear,
    "matmul": _matmul,
    "recurrent": _recurrent,
}
"""MACs of one sample by op mnemonic, the same at every level (nf, nq's nf ops, nh)."""


def macs_of(op: Operation) -> int:
    """Multiply-accumulates of one sample of ``op`` (0 for an op without products)."""
    count = MAC_COUNTS.get(op.name.split(".", 1)[-1])
    return count(op) if count is not None and op.name.startswith(("nf.", "nh.")) else 0


def _bits(value: SSAValue, view: View | None) -> int:
    """A value's code width: its nh type's, its fake-quant's (nq), else 32 (floats)."""
    if view is not None:
        grid = view.grid(value)
        if grid is not None:
            return grid.bits
    t = value.type
    if isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr):
        element = t.get_element_type()
        assert isinstance(element, IntegerType)
        return element.width.data
    return 32


def _bytes(value: SSAValue, view: View | None, constant: bool = False) -> int:
    """Packed bytes of one sample of a runtime value, or of the whole of a constant."""
    count = math.prod(_shape(value)) if constant else _per_sample(value)
    return -(-count * _bits(value, view) // 8)


def _weight_bits(op: Operation, constants: set[SSAValue], view: View | None) -> int:
    """The width its MACs run at: its weight's (operand 1), else its widest operand's."""
    if len(op.operands) > 1 and op.name.split(".", 1)[-1] in ("conv", "conv_transpose", "linear"):
        return _bits(op.operands[1], view)
    ws = [_bits(v, view) for v in op.operands[1:] if v in constants] or [
        _bits(v, view) for v in op.operands
    ]
    return max(ws, default=8)


# ---------------------------------------------------------------------------------------------
# Costing
# ---------------------------------------------------------------------------------------------


def layer_cycles(
    macs: float,
    weight_bits: int,
    values: float,
    onchip_bytes: float,
    target: Target,
) -> tuple[float, float]:
    """``(compute, memory)`` cycles of an engine op: MACs over the lanes of its weight width
    (or its output ``values`` over the vector lanes when it has no MACs), and the bytes the
    on-chip buffer cannot hold over the bandwidth.

    >>> t = Target(lanes={8: 64.0}, vector_lanes=16.0, buffer_bytes=100, bandwidth_bytes_per_cycle=4.0)
    >>> layer_cycles(6400, 8, 10, 500, t)   # 6400 / 64, (500 - 100) / 4
    (100.0, 100.0)
    >>> layer_cycles(0, 8, 32, 50, t)       # no MACs: 32 values / 16; all on chip
    (2.0, 0.0)
    """
    compute = macs / target.lanes_for(weight_bits) if macs else values / target.vector_lanes
    spill = onchip_bytes if target.buffer_bytes is None else onchip_bytes - target.buffer_bytes
    if target.buffer_bytes is None:
        spill = 0.0
    memory = max(0.0, spill) / target.bandwidth_bytes_per_cycle
    return float(compute), float(memory)


@dataclass(frozen=True)
class LayerCost:
    """One op's estimate (see the module docstring)."""

    name: str
    op: str
    device: str
    macs: int
    weight_bits: int
    weight_bytes: int
    in_bytes: int
    out_bytes: int
    stream_bytes: int | None
    out_values: int
    compute_cycles: float
    memory_cycles: float
    seconds: float

    @property
    def cycles(self) -> float:
        """Engine cycles: the larger of compute and memory (0 on the host)."""
        return max(self.compute_cycles, self.memory_cycles) if self.device != "host" else 0.0


@dataclass
class Estimate:
    """Per-layer costs and totals on ``target`` (see the module docstring)."""

    target: Target
    layers: list[LayerCost] = field(default_factory=list)
    level: str = "nh"

    @property
    def macs(self) -> int:
        return sum(r.macs for r in self.layers)

    @property
    def engine_macs(self) -> int:
        return sum(r.macs for r in self.layers if r.device == "engine")

    @property
    def cycles(self) -> float:
        """Engine cycles (boundary transfers included)."""
        return sum(r.cycles for r in self.layers)

    @property
    def engine_seconds(self) -> float:
        return sum(r.seconds for r in self.layers if r.device == "engine")

    @property
    def host_seconds(self) -> float:
        return sum(r.seconds for r in self.layers if r.device != "engine")

    @property
    def latency(self) -> float:
        """Seconds per sample: the engine's, the host's and the boundary's."""
        return sum(r.seconds for r in self.layers)

    @property
    def fps(self) -> float:
        return 1.0 / self.latency if self.latency > 0 else math.inf

    @property
    def engine_share_macs(self) -> float:
        return self.engine_macs / self.macs if self.macs else 1.0

    @property
    def engine_share_time(self) -> float:
        return self.engine_seconds / self.latency if self.latency else 1.0

    def totals(self) -> dict[str, Any]:
        return {
            "macs": self.macs,
            "engine_macs": self.engine_macs,
            "weight_bytes": sum(r.weight_bytes for r in self.layers),
            "cycles": self.cycles,
            "engine_seconds": self.engine_seconds,
            "host_seconds": self.host_seconds,
            "latency_seconds": self.latency,
            "fps": self.fps,
            "engine_share_macs": self.engine_share_macs,
            "engine_share_time": self.engine_share_time,
        }

    def table(self) -> LayerTable:
        columns = [
            "layer", "op", "device", "MACs", "w bits", "weight B", "in B", "out B",
            "stream B", "compute cyc", "memory cyc", "cycles", "us",
        ]  # fmt: skip
        keys = [
            "layer", "op", "device", "macs", "weight_bits", "weight_bytes", "in_bytes",
            "out_bytes", "stream_bytes", "compute_cycles", "memory_cycles", "cycles",
            "microseconds",
        ]  # fmt: skip
        rows: list[list[Any]] = [
            [
                r.name,
                r.op,
                r.device,
                r.macs,
                r.weight_bits if r.macs else None,
                r.weight_bytes,
                r.in_bytes,
                r.out_bytes,
                r.stream_bytes,
                r.compute_cycles,
                r.memory_cycles,
                r.cycles,
                r.seconds * 1e6,
            ]  # fmt: skip
            for r in self.layers
        ]
        t = self.totals()
        notes = [
            f"total: {t['macs']:,} MACs ({100 * t['engine_share_macs']:.1f}% on the engine), "
            f"{t['weight_bytes']:,} weight bytes, {t['cycles']:,.0f} engine cycles",
            f"latency {1e3 * t['latency_seconds']:.4g} ms per sample "
            f"(engine {1e3 * t['engine_seconds']:.4g} ms, host and boundary "
            f"{1e3 * t['host_seconds']:.4g} ms: {100 * t['engine_share_time']:.1f}% of the time "
            f"on the engine), {t['fps']:.4g} frames per second",
            f"target {self.target.describe()}: {self.target.clock_mhz:g} MHz, lanes "
            + ", ".join(f"{b}-bit {n:g}" for b, n in sorted(self.target.lanes.items()))
            + f", buffer {self.target.buffer_bytes} B, "
            f"{self.target.bandwidth_bytes_per_cycle:g} B/cycle",
        ]
        return LayerTable(columns, rows, left=3, notes=notes, keys=keys)

    def __str__(self) -> str:
        return self.table().text()

    def as_dict(self) -> dict[str, Any]:
        target = {f.name: _plain(getattr(self.target, f.name)) for f in fields(self.target)}
        return {"target": target, "level": self.level, "layers": self.table().records()} | {
            "totals": self.totals()
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def figure(self, *, title: str | None = None) -> Any:
        """A per-layer bar chart of the estimated time, coloured by device (engine, host,
        boundary; ``nanoir.layer_table``)."""
        labels = [f"{r.name} ({r.op.split('.', 1)[-1]})" for r in self.layers]
        return bar_chart(
            self.table(),
            "us",
            label=labels,
            group="device",
            title=title or f"estimated time per layer on {self.target.name}",
            unit="microseconds per sample",
        )

    def plot(self, path: str | os.PathLike[str], *, title: str | None = None) -> None:
        """Write :meth:`figure` to ``path`` (``.png``, ``.svg``, ``.pdf``), as the report's."""
        write_figure(self.figure(title=title), path, "the estimate's figure")

    def scaled(self, **target_fields: Any) -> Estimate:
        """(For comparisons) the same layers re-costed on the target with ``target_fields``
        changed (``lanes=``, ``bandwidth_bytes_per_cycle=`` ...)."""
        target = replace(self.target, **target_fields)
        return Estimate(target, [_recost(r, target) for r in self.layers], self.level)


def _plain(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    return value


def _recost(r: LayerCost, target: Target) -> LayerCost:
    onchip = r.weight_bytes + r.in_bytes + r.out_bytes
    compute, memory, seconds = _costs(r.device, r.macs, r.weight_bits, r.out_values, onchip, target)
    return replace(r, compute_cycles=compute, memory_cycles=memory, seconds=seconds)


def _costs(
    device: str, macs: int, weight_bits: int, out_values: int, onchip: int, target: Target
) -> tuple[float, float, float]:
    """``(compute cycles, memory cycles, seconds)`` of one op on its device."""
    if device == "host":
        return 0.0, 0.0, max(macs, out_values) / (target.host_gmacs * 1e9)
    if device == "boundary":
        memory = onchip / target.bandwidth_bytes_per_cycle
        return 0.0, memory, memory / target.clock_hz
    compute, memory = layer_cycles(macs, weight_bits, out_values, onchip, target)
    return compute, memory, max(compute, memory) / target.clock_hz


def _device(op: Operation, level: str) -> str:
    if op.name in ("nh.to_host", "nh.from_host"):
        return "boundary"
    if level == "nh" and not op.name.startswith("nh."):
        return "host"
    return "engine"


def estimate(
    module: ModuleOp,
    target: Target | str | None = None,
    *,
    function: str | None = None,
) -> Estimate:
    """The cost of each op of ``module`` on ``target`` (a ``nanoir.Target`` or its TOML file;
    None: the example target, ``Target.example()``, whose numbers are an example).

    ``module`` is best the lowered (nh) program, partitioned or not: its widths are the
    engine's. A quantized (nq) program is costed at its fake-quants' widths and a float one
    at 32 bits, op by op as they stand (MACs are the same at every level)."""
    if not isinstance(module, ModuleOp):
        raise ArgumentError(f"module must be a program (a ModuleOp), got {type(module).__name__}")
    checked = target_argument(target) or Target.example()
    func = find_function(module, function)
    level = level_of(func)
    view: View | None = QuantizedView() if level == "nq" else None
    constants = _constant_values(func)
    streams = cache_bytes(func, view or QuantizedView(), checked.stream_dim)
    layers: list[LayerCost] = []
    last: Operation | None = None
    for op in func.body.block.ops:
        if isinstance(op, ReturnOp) or not op.results or op.name.endswith(".constant"):
            continue
        if all(v in constants for v in op.operands):
            continue  # computed once, at compile time
        if layers and last is not None and _requantizes(op, last):
            # The producer's requantization (an nh.requant, an nq fake-quant) is part of its
            # layer: what leaves the layer is the requantized codes, not the accumulator.
            r = layers[-1]
            out = sum(_bytes(v, view) for v in op.results)
            merged = replace(r, out_bytes=out)
            layers[-1] = _recost(merged, checked)
            last = op
            continue
        device = _device(op, level)
        macs = macs_of(op)
        wbits = _weight_bits(op, constants, view)
        weight = sum(_bytes(v, view, constant=True) for v in op.operands if v in constants)
        runtime_in = sum(_bytes(v, view) for v in op.operands if v not in constants)
        out = sum(_bytes(r, view) for r in op.results)
        values = sum(_per_sample(r) for r in op.results)
        compute, memory, seconds = _costs(
            device, macs, wbits, values, weight + runtime_in + out, checked
        )
        name = op.results[0].name_hint or op.name
        stream = streams.get(op) if streams is not None else None
        layers.append(
            LayerCost(
                name,
                op.name,
                device,
                macs,
                wbits,
                weight,
                runtime_in,
                out,
                stream,
                values,
                compute,
                memory,
                seconds,
            )  # fmt: skip
        )
        last = op
    return Estimate(checked, layers, level)


REQUANTIZING = ("nh.requant", "nq.fake_quant")
"""Ops that requantize their producer's result: costed in the producer's layer."""


def _requantizes(op: Operation, last: Operation) -> bool:
    """``op`` requantizes the result of ``last`` (the op costed just before it), which
    nothing else reads: one layer, as the engine runs it (the accumulator stays on chip)."""
    if op.name not in REQUANTIZING or len(op.operands) != 1:
        return False
    value = op.operands[0]
    return value.owner is last and len(last.results) == 1 and len(list(value.uses)) == 1


def _constant_values(func: FuncOp) -> set[SSAValue]:
    """Values computed from constants only (weights and what is folded from them)."""
    constants: set[SSAValue] = set()
    for op in func.body.block.ops:
        if op.name.endswith(".constant") or (
            op.operands and all(v in constants for v in op.operands)
        ):
            constants.update(op.results)
    return constants
