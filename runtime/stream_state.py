"""Kernels that resume from a carried state, for ops the stream executor runs along time with
their state as their cache (a recurrent op; ``nanoir.dialects.traits.Recurrent``).

``state_kernel(op, dtype, constants)`` gives ``run(x, state) -> (output, state)``: the op on
the rows ``x`` of its input along time, starting from ``state`` (``None``: the op's own
initial state, its constant ``h0``/``c0`` or zeros), returning the ``output`` rows and the
state after the last of them. Run on consecutive windows of rows, it gives the whole run's
``output`` rows, since a unidirectional cell at step ``t`` reads only the input at ``t`` and
the state after ``t - 1`` (layer by layer: layer ``l`` at ``t`` reads layer ``l - 1``'s output
at ``t``).

What is carried is exactly what the whole run carries from step to step: at the quantized
level, the integer codes of ``h`` on the ``hidden`` grid (and ``c`` on the ``cell`` grid),
which ``run_codes`` takes back unchanged (a shift of 0); in float, the float ``h``/``c``. So
the streamed rows equal the whole run's bit for bit at nq (each time step's integer cell is
the same), and in float up to the rounding of ``x @ W_ih`` computed over another number of
rows; at nh, the same integer cell on the codes (``nanoir.runtime.nh``'s kernel, with the
op's tables). The nq/float dispatch is the interpreter kernel's (``nanoir.runtime.nf.recurrent``):
kept next to the streaming executor rather than in that kernel, so the whole-tensor kernel
stays a plain function of its operands; the streamed == whole tests hold the two together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nf import array_values
from nanoir.runtime.base import ExecutionError
from nanoir.runtime.nf import recurrent_grids
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from xdsl.ir import Operation, SSAValue

__all__ = ["StateKernel", "state_kernel"]

StateKernel = Callable[[np.ndarray, Any], tuple[np.ndarray, Any]]
"""``run(x, state) -> (output, state)``; ``state`` None is the op's initial state."""


def state_kernel(
    op: Operation, dtype: np.dtype[Any], constants: dict[SSAValue, Any]
) -> StateKernel:
    """The resumable kernel of a stateful op (module docstring)."""
    if isinstance(op, nf.RecurrentOp):
        return _nf_recurrent(op, dtype, constants)
    if isinstance(op, nh.RecurrentOp):
        return _nh_recurrent(op, constants)
    raise ExecutionError(f"{op.name}: no kernel that resumes from a carried state")


def _constant(op: Operation, value: SSAValue | None, constants: dict[SSAValue, Any]) -> Any:
    if value is None:
        return None
    if value not in constants:  # stream-plan refuses this (Recurrent.refusal)
        raise ExecutionError(f"{op.name}: {value.name_hint or 'an operand'} is not a constant")
    return constants[value]


def _coded(a: Any, grid: tuple[np.ndarray, int]) -> recurrent_numerics.Coded:
    """Codes of ``a`` on its fake-quant's grid (as the interpreter's kernel reads them)."""
    a = np.asarray(a, np.float64)
    exps = grid[0]
    k = exps.reshape((-1,) + (1,) * (a.ndim - 1)) if exps.size > 1 else exps.reshape(())
    return recurrent_numerics.Coded(np.rint(a * 2.0**k).astype(np.int64), exps)


def _nf_recurrent(
    op: nf.RecurrentOp, dtype: np.dtype[Any], constants: dict[SSAValue, Any]
) -> StateKernel:
    layout = op.layout
    lstm = layout.mode == "lstm"
    h0, c0 = _constant(op, op.h0, constants), _constant(op, op.c0, constants)
    weights = [_constant(op, w, constants) for w in op.weights]
    grids = recurrent_grids(op)
    if isinstance(grids, str):

        def run_float(x: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
            h, c = (h0, c0) if state is None else state
            results = recurrent_numerics.run_float(layout, x, h, c, weights)
            return results[0], (results[1], results[2] if lstm else None)

        return run_float
    gates, cell, hidden = (op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL)
    assert op.rounding is not None and gates and cell and hidden
    mode = op.rounding.data
    tables = recurrent_numerics.activation_tables(gates, mode)
    operands = list(op.operands)
    grid_of = dict(zip(operands, grids))
    coded_weights = [_coded(w, grid_of[v]) for w, v in zip(weights, op.weights)]
    start = (
        None if op.h0 is None else _coded(h0, grid_of[op.h0]),
        None if op.c0 is None else _coded(c0, grid_of[op.c0]),
    )
    x_grid = grid_of[op.input]
    k_hidden, k_cell = np.asarray(hidden.exp), np.asarray(cell.exp)

    def run_codes(x: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        h, c = start if state is None else state
        try:
            results = recurrent_numerics.run_codes(
                layout, _coded(x, x_grid), h, c, coded_weights, gates, cell, hidden, mode, tables
            )
        except recurrent_numerics.RecurrentBoundError as e:
            raise ExecutionError(f"{op.name}: {e}") from None
        y = (results[0] * 2.0**-hidden.exp).astype(x.dtype)
        h_codes = recurrent_numerics.Coded(results[1], k_hidden)
        c_codes = recurrent_numerics.Coded(results[2], k_cell) if lstm else None
        return y, (h_codes, c_codes)

    return run_codes


def _nh_recurrent(op: nh.RecurrentOp, constants: dict[SSAValue, Any]) -> StateKernel:
    layout = op.layout
    lstm = layout.mode == "lstm"
    exp_of = {v: np.asarray(nh.fixed_of(v).exp_list, np.int64) for v in op.operands}

    def coded(v: SSAValue | None) -> recurrent_numerics.Coded | None:
        if v is None:
            return None
        codes = np.asarray(_constant(op, v, constants)).astype(np.int64)
        return recurrent_numerics.Coded(codes, exp_of[v])

    weights = [coded(w) for w in op.weights]
    start = (coded(op.h0), coded(op.c0))
    gates, cell, hidden = op.grid("gates"), op.grid("cell"), op.grid("hidden")
    tables = (
        np.asarray(array_values(op.sigmoid_table), np.int64),
        np.asarray(array_values(op.tanh_table), np.int64),
    )
    mode = op.rounding.data
    out_dtype = quant.code_dtype(nh.width_of(op.output))
    k_x = exp_of[op.input]
    k_hidden, k_cell = np.asarray(hidden.exp), np.asarray(cell.exp)

    def run(x: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        h, c = start if state is None else state
        xc = recurrent_numerics.Coded(np.asarray(x).astype(np.int64), k_x)
        try:
            results = recurrent_numerics.run_codes(
                layout, xc, h, c, weights, gates, cell, hidden, mode, tables
            )
        except recurrent_numerics.RecurrentBoundError as e:
            raise ExecutionError(f"{op.name}: {e}") from None
        h_codes = recurrent_numerics.Coded(results[1], k_hidden)
        c_codes = recurrent_numerics.Coded(results[2], k_cell) if lstm else None
        return results[0].astype(out_dtype), (h_codes, c_codes)

    return run
