"""Facts about a whole ``func.func`` program that every layer above the dialects asks:
which function of a module to use (:func:`find_function`), which level it is at
(:func:`level_of`: ``nf``, ``nq`` or ``nh``), and NanoEngine's layout of a runtime tensor of a
given rank (:func:`runtime_layout`, BCMD: Batch, Channel, M = the streamed dim, D = the rest),
and how diagnostics name an op (:func:`describe`).
"""

from __future__ import annotations

from typing import Literal

from nanoir.dialects import nf
from nanoir.dialects.nh import FixedAttr
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

from nanoir.errors import ArgumentError, Error

__all__ = [
    "FunctionNotFoundError",
    "Level",
    "describe",
    "find_function",
    "level_of",
    "runtime_layout",
]

Level = Literal["nf", "nq", "nh"]


class FunctionNotFoundError(LookupError, Error):
    """The module has no function of that name, or several and none is ``@main``."""


def find_function(module: ModuleOp | FuncOp, name: str | None = None) -> FuncOp:
    """The function to use: ``name``, else the only function, else ``@main``."""
    if isinstance(module, FuncOp):
        return module
    if not isinstance(module, ModuleOp):
        raise ArgumentError(
            f"module must be a program (a ModuleOp from nanoir.load, parse or from_torch), "
            f"got {type(module).__name__}"
        )
    if name is not None and not isinstance(name, str):
        raise ArgumentError(f"function must be a name (str), got {type(name).__name__}")
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    if name is not None:
        for f in funcs:
            if f.sym_name.data == name:
                return f
        raise FunctionNotFoundError(f"no function @{name} in the module")
    if len(funcs) == 1:
        return funcs[0]
    for f in funcs:
        if f.sym_name.data == "main":
            return f
    raise FunctionNotFoundError(
        f"the module has {len(funcs)} functions and none is @main; say which one to run"
    )


def level_of(func: FuncOp) -> Level:
    """``nh`` for an integer program (nh ops, arguments of nh type, or arguments that say how
    floats become codes: ``nq.bits``), else ``nq`` when it has fake-quants, else ``nf``."""
    names = [op.name for op in func.walk()]
    if any(n.startswith("nh.") for n in names):
        return "nh"
    if any(
        isinstance(t, TensorType) and isinstance(t.encoding, FixedAttr)
        for t in func.function_type.inputs.data
    ):
        return "nh"
    if func.arg_attrs is not None and any("nq.bits" in d.data for d in func.arg_attrs.data):
        return "nh"
    if any(n.startswith("nq.") for n in names):
        return "nq"
    return "nf"


def runtime_layout(rank: int) -> str:
    """NanoEngine's layout of a runtime tensor of ``rank`` dims: B, BC, BCM, BCMD, then one
    more D per further dim (BCMDD, ...), as its weights are CCDD, CCDDD, ...

    >>> [runtime_layout(r) for r in range(1, 6)]
    ['B', 'BC', 'BCM', 'BCMD', 'BCMDD']
    """
    if rank < 0:
        raise ValueError(f"a tensor of rank {rank}")
    return "BCMD"[:rank] + "D" * max(0, rank - 4)


def describe(op: Operation) -> str:
    """``'nf.conv' (%c)``: an op and its first result's name, for diagnostics."""
    hint = op.results[0].name_hint if op.results and op.results[0].name_hint else None
    if isinstance(op, nf.CustomOp):
        return f"'{op.name}' (op_type {op.op_type.data})" + (f" (%{hint})" if hint else "")
    return f"'{op.name}'" + (f" (%{hint})" if hint else "")
