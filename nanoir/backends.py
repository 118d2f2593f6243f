"""``nanoir.run``: one entry for the two executors of a program.

The NumPy executor (:mod:`nanoir.runtime.interpreter`) runs every level and is the default.
``backend="onnxruntime"`` runs an nh program as exact integer ONNX
(:mod:`nanoir.grammar.onnx.integer`) in onnxruntime: the same codes, faster on large tensors.
The dispatch lives here, in the API layer, because the runtime must not import the ONNX writer
(layers import downward only).

The onnxruntime session of a module is built once and kept while the module lives (a weak
cache keyed by the module object): repeated calls neither re-export nor re-optimise. A module
changed in place after a run (an op, an operand or an attribute replaced) gets a new session.

Errors are the NumPy executor's: a model onnxruntime refuses is one ``ExecutionError``; a run
that fails in onnxruntime (an index outside its table) or whose overflow checks count a code
outside its type (a program whose static bounds do not fit its types: see
:mod:`nanoir.grammar.onnx.integer.exporter`) is run again by the NumPy executor, which raises
its own error naming the op and the value. onnxruntime never returns a wrapped code.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

from nanoir.dialects import nh
from nanoir.dialects.functions import find_function, level_of
from nanoir.errors import ArgumentError
from nanoir.runtime import interpreter
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.nh import dequantize_outputs, quantize_inputs
from nanoir.runtime.numerics import quant

BACKENDS = ("numpy", "onnxruntime")
"""The executors :func:`run` knows."""


class _Session:
    """An onnxruntime session of one module's main function, with what tells it is stale."""

    def __init__(self, module: ModuleOp, func: FuncOp) -> None:
        from nanoir.grammar.onnx.integer import export_model, make_session  # lazy: onnx

        self.func = func
        self.fingerprint = _fingerprint(module)
        self.session = make_session(export_model(module))


def _fingerprint(module: ModuleOp) -> list[tuple[object, ...]]:
    """Each op with its operands and attribute objects. xDSL attributes are immutable values, so
    any edit (an op inserted, erased or replaced, an operand rewired, a property set) changes an
    object here; the ops are held, so their identities cannot be reused while the entry lives."""
    return [
        (op, *op.operands, *op.properties.values(), *op.attributes.values()) for op in module.walk()
    ]


def _same(a: list[tuple[object, ...]], b: list[tuple[object, ...]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(u is v for u, v in zip(x, y)) for x, y in zip(a, b)
    )


_SESSIONS: weakref.WeakKeyDictionary[ModuleOp, _Session] = weakref.WeakKeyDictionary()


def _session(module: ModuleOp | FuncOp, function: str | None) -> _Session:
    if not isinstance(module, ModuleOp):
        raise ArgumentError(
            "backend='onnxruntime' runs a module (the ONNX model is the module's main "
            f"function), got {type(module).__name__}"
        )
    func = find_function(module, function)
    if level_of(func) != "nh":
        raise ArgumentError(
            f"backend='onnxruntime' runs integer (nh) programs, and @{func.sym_name.data} is "
            f"at the {level_of(func)} level: lower it first (nanoir.lower_to_hw), or use the "
            "default backend='numpy'"
        )
    cached = _SESSIONS.get(module)
    if (
        cached is not None
        and cached.func is func
        and _same(cached.fingerprint, _fingerprint(module))
    ):
        return cached
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    named = [f for f in funcs if f.sym_name.data == "main"]
    if func is not (funcs[0] if len(funcs) == 1 else named[0] if named else None):
        # the ONNX model is the module's only function or its @main (export_model)
        raise ArgumentError(
            f"backend='onnxruntime' runs the module's main function (its ONNX model), not "
            f"@{func.sym_name.data}: run @{func.sym_name.data} with backend='numpy'"
        )
    fresh = _Session(module, func)
    _SESSIONS[module] = fresh
    return fresh


def run(
    module: ModuleOp | FuncOp,
    *inputs: Any,
    function: str | None = None,
    dtype: Any = None,
    raw: bool = False,
    backend: str = "numpy",
) -> list[Any]:
    """Run a program on NumPy inputs and return its outputs (see
    :func:`nanoir.runtime.interpreter.run`). ``backend="onnxruntime"`` runs an nh program in
    onnxruntime as exact integer ONNX: the same values (or codes, ``raw=True``) as NumPy."""
    if backend == "numpy":
        return interpreter.run(module, *inputs, function=function, dtype=dtype, raw=raw)
    if backend != "onnxruntime":
        raise ArgumentError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if not isinstance(raw, (bool, np.bool_)):
        raise ArgumentError(f"raw must be True or False, got {raw!r}")
    if dtype is not None:
        raise ArgumentError(
            "dtype= chooses the float type of nf/nq programs; backend='onnxruntime' runs nh "
            "programs, which compute on integer codes"
        )
    s = _session(module, function)
    if len(inputs) != len(s.func.args):
        raise ArgumentError(
            f"@{s.func.sym_name.data} takes {len(s.func.args)} inputs, got {len(inputs)}"
        )
    from nanoir.grammar.onnx.integer import run_model  # lazy: onnxruntime

    codes = quantize_inputs(s.func, inputs)
    try:
        outputs = run_model(s.session, codes)
    except ExecutionError:
        # onnxruntime names a node of its graph; the executor names the op and the bad value
        # (an index outside its table): its error when it has one, else onnxruntime's
        interpreter.run(module, *inputs, function=function, raw=True)
        raise
    if not raw:
        return dequantize_outputs(s.func, outputs)
    # onnxruntime gives ui8 codes as uint8, whose arithmetic wraps: the executor's dtypes
    types = s.func.function_type.outputs.data
    return [np.asarray(y).astype(_code_dtype(t), copy=False) for y, t in zip(outputs, types)]


def _code_dtype(t: Any) -> np.dtype[Any]:
    """The NumPy executor's dtype for codes of nh type ``t`` (``quant.code_dtype``)."""
    return quant.code_dtype(t.get_element_type().width.data, signed=not nh.is_unsigned(t))
