"""The one way out to NanoEngine text (`.ne`): find the function, detect its level, dispatch.

    ModuleOp --main_function--> func --level_of == nh?--> export_hw  |  export_nq
        --> Program --printer--> text

A function with nh ops or nh-typed arguments is written at the hw level, any other at the
nq level. IR the format cannot express is an `ExportError` naming the op; a program with host
islands (``lower-to-hw{host=true}``) is refused naming its host ops.
"""

from __future__ import annotations

from nanoir.dialects.functions import level_of
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.export_hw import export_hw_program
from nanoir.grammar.ne.export_nq import export_nq_program
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.schema import (
    StreamPlan,
    UnitStepPlan,
    main_function,
)
from nanoir.grammar.ne.syntax_tree import Program
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

__all__ = ["ExportError", "StreamPlan", "UnitStepPlan", "export_program", "export_nanoengine"]


def export_program(module: ModuleOp, plan: StreamPlan | None = None) -> Program:
    """The `.ne` syntax tree of an nf/nq or nh module.

    `plan` gives the declared shapes of runtime tensors and caches (a stream-plan analysis);
    without one, recorded shapes are kept and others are declared by `UnitStepPlan`
    (nh programs take no plan: they declare whole tensors).
    """
    func = main_function(module)
    if level_of(func) == "nh":
        refuse_host_islands(func)
        return export_hw_program(func, plan)
    return export_nq_program(module, plan)


def refuse_host_islands(func: Operation) -> None:
    """A program partitioned by ``lower-to-hw{host=true}`` runs some ops on the host, and `.ne`
    has no host op: refused, naming them (compile the engine part alone, or write integer
    ONNX, which carries the host islands as float ops)."""
    walked = list(func.walk())
    if not any(op.name in ("nh.to_host", "nh.from_host") for op in walked):
        return  # not partitioned: a stray nf op is refused by its row lookup, naming it
    host = [op for op in walked if op.name.startswith(("nf.", "nq."))]
    named = (
        [
            f"{op.name} %{op.results[0].name_hint or '?'}" if op.results else op.name
            for op in host
            if "nh.host" in op.attributes
        ]
        or [op.name for op in host[:1]]
        or ["nh.to_host"]
    )
    raise ExportError(
        f"nanoengine export: the program runs {len(named)} op(s) on the host "
        f"({', '.join(named[:4])}{', ...' if len(named) > 4 else ''}): NanoEngine text "
        "holds engine programs only; lower without host=true to see why each is refused"
    )


def export_nanoengine(module: ModuleOp, plan: StreamPlan | None = None) -> str:
    """The `.ne` text of an nf/nq or nh module; `ExportError` for IR NanoEngine cannot express."""
    program = export_program(module, plan)
    try:
        return print_nanoengine(program)
    except ValueError as e:
        raise ExportError(f"nanoengine export: {e}") from None
