"""The one way out to NanoEngine text (`.ne`): find the function, detect its level, dispatch.

    ModuleOp --main_function--> func --level_of == nh?--> export_hw  |  export_nq
        --> Program --printer--> text

A function with nh ops or nh-typed arguments is written at the hw level, any other at the
nq level. IR the format cannot express is an `ExportError` naming the op.
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

__all__ = ["ExportError", "StreamPlan", "UnitStepPlan", "export_program", "export_nanoengine"]


def export_program(module: ModuleOp, plan: StreamPlan | None = None) -> Program:
    """The `.ne` syntax tree of an nf/nq or nh module.

    `plan` gives the declared shapes of runtime tensors and caches (a stream-plan analysis);
    without one, recorded shapes are kept and others are declared by `UnitStepPlan`
    (nh programs take no plan: they declare whole tensors).
    """
    func = main_function(module)
    if level_of(func) == "nh":
        return export_hw_program(func, plan)
    return export_nq_program(module, plan)


def export_nanoengine(module: ModuleOp, plan: StreamPlan | None = None) -> str:
    """The `.ne` text of an nf/nq or nh module; `ExportError` for IR NanoEngine cannot express."""
    program = export_program(module, plan)
    try:
        return print_nanoengine(program)
    except ValueError as e:
        raise ExportError(f"nanoengine export: {e}") from None
