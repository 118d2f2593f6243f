"""Pictures of programs: Graphviz DOT text (``nanoir-opt X --emit=dot``) and ``nanoir.draw``.

The DOT follows MLIR's op-graph convention (``mlir-opt --view-op-graph``): a ``digraph`` with
one cluster per function, one node per op (and one per function argument), and an edge from
the node that defines a value to every op that uses it, labelled with the operand number when
the op has several operands. Each node's label says what the op is and what it makes:

    %bn2 = nh.conv
    groups=1 pads=[1, 1, 1, 1]
    ?x16x8x8 i32 exp 9..10 (16 ch) BCMD
    stream out ?x16x2x8; cache ?x8x3x10 (240 values)
    warm-up rows 1 + 1

- the op's type and the SSA name of its result (as the MLIR printer names it);
- a few short attributes (a constant's name, a requant's shifts ...; dense values are left out);
- per result: the shape, the element type (``f32``, ``i8`` ...), for nh values the exponent(s)
  and the layout (``BCMD``, ``CCDD`` ...), for ``nq.fake_quant`` the bits and the exponent(s);
- on a streamed program (one that carries the stream-plan attributes: ``nanoir-opt -p
  stream-plan``), each runtime op's streamed output shape and the shape and size of each of its
  caches, and the stream plan (streamed dim and steps) in the function's label.

Devices: given ``devices`` (op -> ``engine``, ``host`` or ``boundary``, as
``nanoir.inspect(...).devices()`` gives them), each op is filled with its device's colour
(:data:`DEVICE_COLOURS`) and its label gains the device; a program ``lower-to-hw{host=true}``
partitioned is coloured so by itself (nh ops on the engine, ``nh.to_host``/``nh.from_host``
the boundary, the nf/nq ops left on the host), with a legend in the function's label.

``nanoir.draw(module, "g.svg")`` renders the DOT with the Graphviz ``dot`` program (a system
package, e.g. ``apt-get install graphviz``; a clear ``GraphvizMissingError`` when it is not
installed), in the format the suffix names (``.svg``, ``.png``, ``.pdf``, or ``.dot`` for the
text itself), and writes the file atomically (``nanoir.files.write_atomically``).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.printer import Printer
from xdsl.utils.target import Target

from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nh import FixedAttr
from nanoir.errors import ArgumentError, Error, FileFormatError, path_argument
from nanoir.files import check_output_path, check_path_name, write_atomically, writes_through
from nanoir.lowering.analysis.attributes import (
    MEM_ATTR,
    OUT_ATTR,
    PLAN_ATTR,
    SHAPE_ATTR,
    WARMUP_ATTR,
)

__all__ = [
    "DEVICE_COLOURS",
    "DotTarget",
    "GraphvizMissingError",
    "draw",
    "partition_devices",
    "to_dot",
]

FORMATS = ("svg", "png", "pdf")
"""Formats ``draw`` renders with ``dot`` (by the path's suffix); ``.dot`` writes the text."""

_SKIPPED_ATTRS = {
    "name", "bits", "exp", "rounding", "nh.host", "nh.host_kind", OUT_ATTR, MEM_ATTR, WARMUP_ATTR,
}  # fmt: skip
DEVICE_COLOURS = {"engine": "#cfe2f3", "host": "#fce5cd", "boundary": "#e6e6e6"}
"""Fill colours of ops by device (light blue, light orange, light grey)."""
_MAX_ATTR_TEXT = 40
_MAX_EXPS = 6


class GraphvizMissingError(RuntimeError, Error):
    """``draw`` needs the Graphviz ``dot`` program and it is not on the PATH."""


class GraphvizError(RuntimeError, Error):
    """``dot`` failed on the text nanoir made for it."""


def _quote(text: str) -> str:
    """A DOT string literal (newlines become ``\\n``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dims(shape: Sequence[int]) -> str:
    return "x".join("?" if d == DYNAMIC_INDEX or d < 0 else str(d) for d in shape) or "scalar"


def _exps_text(exps: Sequence[int]) -> str:
    if len(exps) == 1:
        return str(exps[0])
    if len(set(exps)) == 1:
        return f"{exps[0]} ({len(exps)} ch)"
    if len(exps) <= _MAX_EXPS:
        return "[" + ", ".join(str(e) for e in exps) + "]"
    return f"{min(exps)}..{max(exps)} ({len(exps)} ch)"


def _type_text(t: Attribute) -> str:
    """``?x4x8x8 i8 exp 5 BCMD`` for an nh tensor, ``?x4 f32`` for a float one."""
    if not isinstance(t, TensorType):
        return str(t)
    text = f"{_dims(t.get_shape())} {t.element_type}"
    enc = t.encoding
    if isinstance(enc, FixedAttr):
        exps = [e.data for e in enc.exps.data]
        text += f" exp {_exps_text(exps)} {enc.layout.data}"
    return text


def _shape_of(attr: Attribute) -> tuple[int, ...]:
    return tuple(int(v) for v in attr.get_values()) if isinstance(attr, DenseArrayBase) else ()


def _stream_shape_text(shape: Sequence[int]) -> str:
    return _dims(shape)


def _elements(shape: Sequence[int]) -> int:
    return int(np.prod([max(d, 1) for d in shape])) if shape else 1


def _short_attr(key: str, value: Attribute) -> str | None:
    """``key=value`` for a short, readable attribute; None for dense data and long values."""
    if key in _SKIPPED_ATTRS or key.startswith("stream."):
        return None
    if isinstance(value, DenseIntOrFPElementsAttr):
        return None
    if isinstance(value, DenseArrayBase):
        text = str(list(value.get_values()))
    elif isinstance(value, IntegerAttr):
        text = str(value.value.data)
    elif isinstance(value, StringAttr):
        text = value.data
    else:
        text = str(value)
    if len(text) > _MAX_ATTR_TEXT:
        return None
    return f"{key}={text}"


def _op_lines(op: Operation, names: dict[SSAValue, str]) -> list[str]:
    results = ", ".join(f"%{names[r]}" for r in op.results)
    head = f"{results} = {op.name}" if results else op.name
    lines = [head]
    name = op.properties.get("name")
    if isinstance(name, StringAttr):
        lines.append(f'"{name.data}"')
    if op.name == "nq.fake_quant":
        bits = op.properties.get("bits")
        exp = op.properties.get("exp")
        text = f"{bits.value.data}-bit" if isinstance(bits, IntegerAttr) else "?-bit"
        if isinstance(exp, DenseIntOrFPElementsAttr):
            text += f" exp {_exps_text(dense_to_numpy(exp).astype(np.int64).reshape(-1).tolist())}"
        rounding = op.properties.get("rounding")
        if rounding is not None:
            text += f" {str(rounding).removeprefix('#nq.rounding<').removesuffix('>')}"
        lines.append(text)
    extra = [
        s
        for key, value in [*op.properties.items(), *op.attributes.items()]
        if (s := _short_attr(key, value)) is not None
    ]
    if extra:
        lines.append(" ".join(extra))
    lines.extend(_type_text(r.type) for r in op.results)
    outs, mems = op.attributes.get(OUT_ATTR), op.attributes.get(MEM_ATTR)
    if isinstance(outs, ArrayAttr) and isinstance(mems, ArrayAttr):
        out_text = ", ".join(_stream_shape_text(_shape_of(a)) for a in outs.data)
        cache_text = ", ".join(
            f"{_stream_shape_text(s)} ({_elements(s)} values)" for s in map(_shape_of, mems.data)
        )
        lines.append(f"stream out {out_text}; cache {cache_text}")
        warmup = op.attributes.get(WARMUP_ATTR)
        if isinstance(warmup, DenseArrayBase):
            begin, end = (int(v) for v in warmup.get_values())
            lines.append(f"warm-up rows {begin} + {end}")
    return lines


def _arg_lines(func: FuncOp, index: int, arg: SSAValue, names: dict[SSAValue, str]) -> list[str]:
    lines = [f"%{names[arg]} (argument {index})", _type_text(arg.type)]
    attrs = func.arg_attrs.data[index].data if func.arg_attrs else {}
    bits, exp = attrs.get("nq.bits"), attrs.get("nq.exp")
    if isinstance(bits, IntegerAttr) and isinstance(exp, DenseIntOrFPElementsAttr):
        exps = dense_to_numpy(exp).astype(np.int64).reshape(-1).tolist()
        lines.append(f"{bits.value.data}-bit exp {_exps_text(exps)}")
    shape = attrs.get(SHAPE_ATTR)
    if shape is not None:
        lines.append(f"stream in {_stream_shape_text(_shape_of(shape))}")
    return lines


def _func_label(func: FuncOp) -> str:
    label = f"func.func @{func.sym_name.data}"
    plan = func.attributes.get(PLAN_ATTR)
    if isinstance(plan, DictionaryAttr):
        mem_dim = plan.data.get("mem_dim")
        steps = _shape_of(plan.data["steps"]) if "steps" in plan.data else ()
        pairs = ", ".join(f"{steps[i]}:{steps[i + 1]}" for i in range(0, len(steps) - 1, 2))
        dim = mem_dim.value.data if isinstance(mem_dim, IntegerAttr) else "?"
        label += f"\nstreamed along dim {dim}, steps {pairs}"
    return label


@dataclass
class _Graph:
    lines: list[str]
    ids: dict[object, str]

    def node(
        self,
        key: object,
        label_lines: list[str],
        indent: str,
        shape: str = "box",
        fill: str | None = None,
    ) -> str:
        node_id = f"v{len(self.ids)}"
        self.ids[key] = node_id
        label = _quote("\n".join(label_lines))
        style = f", style = filled, fillcolor = {_quote(fill)}" if fill else ""
        self.lines.append(f"{indent}{node_id} [label = {label}, shape = {shape}{style}];")
        return node_id


def _ssa_names(func: FuncOp) -> dict[SSAValue, str]:
    """The names the MLIR printer gives every value of a function (``%c``, ``%c_1``, ``%0``
    ...); each function is named afresh, as the printer does."""
    printer = Printer(stream=io.StringIO())
    names: dict[SSAValue, str] = {}
    for op in func.walk():
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    names[arg] = printer.print_ssa_value(arg)
        for r in op.results:
            names[r] = printer.print_ssa_value(r)
    return names


def partition_devices(module: ModuleOp) -> dict[Operation, str]:
    """The device of each op of a program with host islands (nh ops mixed with nf/nq ops):
    nh ops ``engine``, the boundary ops ``boundary``, the rest ``host``; empty otherwise."""
    ops = [op for op in module.walk() if "." in op.name and not op.name.startswith("func.")]
    dialects = {op.name.split(".", 1)[0] for op in ops}
    if "nh" not in dialects or not dialects & {"nf", "nq"}:
        return {}
    return {
        op: "boundary"
        if op.name in ("nh.to_host", "nh.from_host")
        else ("engine" if op.name.startswith("nh.") else "host")
        for op in ops
    }


def to_dot(
    module: ModuleOp, *, name: str = "G", devices: dict[Operation, str] | None = None
) -> str:
    """The program as Graphviz DOT text (the conventions are in the module docstring);
    ``devices`` colours ops by where they run (default: a partitioned program's own)."""
    if devices is None:
        devices = partition_devices(module)
    graph = _Graph(
        [
            f"digraph {_quote(name)} {{",
            "  compound = true;",
            "  rankdir = TB;",
            '  node [fontname = "Helvetica", fontsize = 10];',
            '  edge [fontname = "Helvetica", fontsize = 9];',
        ],
        {},
    )
    edges: list[tuple[SSAValue, Operation, int, int]] = []
    funcs = [op for op in module.walk() if isinstance(op, FuncOp)]
    names: dict[SSAValue, str] = {}
    for func in funcs:
        names.update(_ssa_names(func))
    for k, func in enumerate(funcs):
        graph.lines.append(f"  subgraph cluster_{k} {{")
        legend = ""
        if devices:
            used = [d for d in DEVICE_COLOURS if d in devices.values()]
            legend = "\ncolours: " + ", ".join(
                f"{d} {'blue' if d == 'engine' else 'orange' if d == 'host' else 'grey'}"
                for d in used
            )
        graph.lines.append(f"    label = {_quote(_func_label(func) + legend)};")
        graph.lines.append('    style = "rounded";')
        if func.body.blocks:
            for i, arg in enumerate(func.body.block.args):
                graph.node(arg, _arg_lines(func, i, arg, names), "    ", "ellipse")
        for op in func.walk():
            if op is func:
                continue
            device = devices.get(op) if devices else None
            lines = _op_lines(op, names) + ([f"[{device}]"] if device else [])
            fill = DEVICE_COLOURS.get(device) if device else None
            graph.node(op, lines, "    ", "box", fill)
            edges.extend((v, op, i, len(op.operands)) for i, v in enumerate(op.operands))
        graph.lines.append("  }")
    for value, user, index, count in edges:
        owner = value.owner if isinstance(value.owner, Operation) else value
        source = graph.ids.get(owner)
        if source is None:  # defined outside every function (or by the function itself)
            continue
        label = f" [label = {_quote(str(index))}]" if count > 1 else ""
        graph.lines.append(f"  {source} -> {graph.ids[user]}{label};")
    graph.lines.append("}")
    return "\n".join(graph.lines) + "\n"


@dataclass(frozen=True)
class DotTarget(Target):
    """``nanoir-opt X --emit=dot``: the program as Graphviz DOT text."""

    name = "dot"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(to_dot(module))


def dot_program() -> str:
    """The path of Graphviz's ``dot``, or a ``GraphvizMissingError`` that says how to get it."""
    found = shutil.which("dot")
    if found is None:
        raise GraphvizMissingError(
            "drawing needs the Graphviz 'dot' program, which is not on the PATH: install "
            "Graphviz from the system's packages (e.g. 'apt-get install graphviz', "
            "'brew install graphviz'), or write the DOT text with a .dot path or "
            "'nanoir-opt X --emit=dot'"
        )
    return found


def draw(
    module: ModuleOp,
    path: str | os.PathLike[str],
    *,
    devices: dict[Operation, str] | None = None,
) -> None:
    """Render ``module`` to ``path`` with Graphviz: ``.svg``, ``.png`` or ``.pdf`` by the
    suffix (``.dot`` writes the DOT text and needs no Graphviz). The file is written
    atomically; a special file such as ``/dev/stdout`` is written through (SVG unless its
    name has one of those suffixes), never replaced."""
    if not isinstance(module, ModuleOp):
        raise ArgumentError(f"module must be a program (a ModuleOp), got {type(module).__name__}")
    name = path_argument("path", path)
    check_path_name(name)
    suffix = os.path.splitext(name)[1].lower().lstrip(".")
    if suffix not in (*FORMATS, "dot", "gv") and writes_through(name):
        suffix = "svg"  # a device or pipe such as /dev/stdout: SVG text
    if suffix not in (*FORMATS, "dot", "gv"):
        raise FileFormatError(
            f"{name}: draw writes .svg, .png, .pdf (rendered by Graphviz) or .dot files; "
            "name the file with one of those suffixes"
        )
    check_output_path(name)
    text = to_dot(module, devices=devices)
    if suffix in ("dot", "gv"):
        write_atomically(name, text)
        return
    try:
        done = subprocess.run(
            [dot_program(), f"-T{suffix}"],
            input=text.encode(),
            capture_output=True,
            check=False,
        )
    except OSError as e:
        raise GraphvizError(f"cannot run Graphviz's dot: {e.strerror or e}") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise GraphvizError(f"Graphviz's dot failed (exit {done.returncode}): {message}")
    write_atomically(name, done.stdout)
