"""The NumPy executor for nanoir programs: compile a ``func.func`` once into a flat plan, run it.

xDSL's own ``Interpreter`` dispatches every op through a dict at run time and keeps every
intermediate alive until the function returns (XDSL_NOTES.md §5). Here the function is turned
once into a list of steps ``(kernel, input slots, output slots, slots to free)``: each value
lives in a slot that is dropped right after its last use, and each kernel is a closure whose
attributes were read at compile time, so the hot loop does no IR work at all.

Ops whose operands are all compile-time constants (weights, their fake-quants, folded
arithmetic) are evaluated while compiling: this is NanoEngine's ``init`` phase.

A producer and the elementwise chain that reads it (an nh conv, its requant and ReLU) run as
one fused kernel where ``nanoir.runtime.fused`` computes them exactly: ``Plan.fused`` is the
step list a call runs. With ``observe`` the plan runs ``Plan.steps``, one op at a time, so
every value is seen; the results are the same bit for bit.

The kernels for each dialect live in ``runtime/<dialect>.py`` as a table from op class to a
*builder*: ``builder(op, dtype) -> kernel``, where ``kernel(*arrays) -> tuple of arrays``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nanoir.dialects.functions import find_function, level_of
from nanoir.dialects.nh import FixedAttr, code_range
from nanoir.runtime.base import Builder, ExecutionError, Kernel, as_array
from nanoir.runtime.fused import NH_FUSIONS, Fuser
from nanoir.runtime.host import HOST_BUILDERS, has_host_ops
from nanoir.runtime.nf import NF_BUILDERS
from nanoir.runtime.nh import NH_BUILDERS, dequantize_outputs, quantize_inputs
from nanoir.runtime.nq import NQ_BUILDERS
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float64Type,
    IntegerType,
    ModuleOp,
    NoneAttr,
    Signedness,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue
from xdsl.traits import ConstantLike

from nanoir.errors import ArgumentError

Observer = Callable[[Operation, tuple[Any, ...]], None]


@dataclass
class Step:
    """One op of a compiled plan."""

    op: Operation
    kernel: Kernel
    args: tuple[int, ...]
    outs: tuple[int, ...]
    free: tuple[int, ...] = ()


@dataclass
class Plan:
    """A compiled function: run it with :meth:`__call__`."""

    func: FuncOp
    num_slots: int
    arg_slots: tuple[int, ...]
    result_slots: tuple[int, ...]
    steps: list[Step]
    constants: dict[int, Any] = field(default_factory=dict)
    dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype(np.float32))
    slot_of: dict[SSAValue, int] = field(default_factory=dict)
    """Where each value lives (constants' values are in ``constants`` under their slot)."""
    fused: list[Step] | None = None
    """The steps a call without ``observe`` runs: ``steps`` with fused chains (None: same)."""

    def __call__(
        self,
        *inputs: Any,
        observe: Observer | None = None,
        given: Mapping[Operation, tuple[Any, ...]] | None = None,
    ) -> list[Any]:
        """Run on ``inputs``; ``observe(op, results)`` sees every runtime op's results.
        ``given`` holds results already known for some ops on these very inputs (from an
        earlier run: quantize's calibration runs the float program twice); their kernels
        are not run."""
        if len(inputs) != len(self.arg_slots):
            raise ExecutionError(
                f"@{self.func.sym_name.data} takes {len(self.arg_slots)} inputs, got {len(inputs)}"
            )
        slots: list[Any] = [None] * self.num_slots
        for slot, value in self.constants.items():
            slots[slot] = value
        arg_types = self.func.function_type.inputs.data
        for i, (slot, value, t) in enumerate(zip(self.arg_slots, inputs, arg_types)):
            slots[slot] = check_input(i, value, t, self.dtype)
        steps = self.steps if observe is not None or self.fused is None else self.fused
        for step in steps:
            try:
                if given is not None and step.op in given:
                    results = given[step.op]
                else:
                    results = step.kernel(*[slots[a] for a in step.args])
            except ExecutionError:
                raise
            except Exception as e:  # a kernel failed: say which op, on what shapes
                shapes = ", ".join(str(getattr(slots[a], "shape", "?")) for a in step.args)
                raise ExecutionError(
                    f"{step.op.name} failed on inputs of shapes ({shapes}): {type(e).__name__}: {e}"
                ) from e
            for slot, value in zip(step.outs, results):
                slots[slot] = value
            if observe is not None:
                observe(step.op, results)
            for slot in step.free:
                slots[slot] = None
        return [slots[s] for s in self.result_slots]


def check_input(index: int, value: Any, t: Any, dtype: np.dtype[Any]) -> Any:
    """Convert one input to the plan's dtype and check it against the argument type.

    An argument holding nh codes (an integer tensor with an ``#nh.fixed`` encoding) takes
    integer arrays only, never converted to the plan's dtype, and every code must fit the
    argument's width: the nh kernels rely on it for exactness.
    """
    if isinstance(t, TensorType) and _is_mask_type(t):
        return _check_mask(index, value, t)
    array = as_array(index, value)
    if isinstance(t, TensorType):
        expected = t.get_shape()
        if len(expected) != array.ndim or any(
            e != DYNAMIC_INDEX and e != a for e, a in zip(expected, array.shape)
        ):
            shape = "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in expected)
            raise ExecutionError(f"input {index} has shape {tuple(array.shape)}, expected {shape}")
        if not np.issubdtype(array.dtype, np.number):
            raise ExecutionError(f"input {index} has non-numeric dtype {array.dtype}")
        if _is_nh_type(t):
            return _check_codes(index, array, t)
    if np.issubdtype(array.dtype, np.floating) or np.issubdtype(dtype, np.floating):
        # (not np.ascontiguousarray, which makes a 0-d input 1-d)
        return np.asarray(array, dtype=dtype, order="C")
    return array


def _is_mask_type(t: TensorType) -> bool:
    elt = t.get_element_type()
    return isinstance(elt, IntegerType) and elt.width.data == 1 and t.encoding == NoneAttr()


def _check_mask(index: int, value: Any, t: TensorType) -> np.ndarray:
    """A boolean argument (``tensor<...xi1>``, a softmax mask): a bool (or 0/1 integer)
    array of the argument's shape."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise ExecutionError(f"input {index} is not an array: {e}") from e
    expected = t.get_shape()
    if array.dtype.kind not in "biu":
        raise ExecutionError(f"input {index} is a {array.dtype} array, but {t} takes booleans")
    if len(expected) != array.ndim or any(
        e != DYNAMIC_INDEX and e != a for e, a in zip(expected, array.shape)
    ):
        shape = "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in expected)
        raise ExecutionError(f"input {index} has shape {tuple(array.shape)}, expected {shape}")
    return array.astype(bool)


def _is_nh_type(t: TensorType) -> bool:
    return isinstance(t.get_element_type(), IntegerType) and isinstance(t.encoding, FixedAttr)


def _check_codes(index: int, array: np.ndarray, t: TensorType) -> np.ndarray:
    """An nh input: integer codes within the argument's width (i1: -1 or +1), as a signed
    integer array (unsigned input is widened to int64, so no kernel sees unsigned codes)."""
    elt = t.get_element_type()
    assert isinstance(elt, IntegerType)
    width = elt.width.data
    if array.dtype.kind not in "iu":
        raise ExecutionError(
            f"input {index} is a {array.dtype} array, but the argument holds i{width} codes "
            f"of type {t}; pass integer codes (e.g. nanoir.runtime.numerics.quant.quantize_to_int)"
        )
    lo, hi = code_range(width, elt.signedness.data != Signedness.UNSIGNED)  # ui<b>: 0..2**b-1
    info = np.iinfo(array.dtype)
    # An int8 array cannot hold a code outside i8: check only what the dtype admits.
    if array.size and (info.min < lo or info.max > hi or width == 1):
        bad = (array < lo) | (array > hi)
        if width == 1:
            bad |= array == 0
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            allowed = "-1 or +1" if width == 1 else f"{lo}..{hi}"
            raise ExecutionError(
                f"input {index} has code {int(array[at])} at index {at}, outside "
                f"{'u' if lo == 0 else ''}i{width} "
                f"({allowed})"
            )
    return array.astype(np.int64) if array.dtype.kind == "u" else array


def compile_function(
    func: FuncOp, builders: dict[type[Operation], Builder], dtype: np.dtype[Any]
) -> Plan:
    """Turn ``func`` into a :class:`Plan`, evaluating constant subgraphs now."""
    block = func.body.block
    slot_of: dict[SSAValue, int] = {}

    def slot(v: SSAValue) -> int:
        if v not in slot_of:
            slot_of[v] = len(slot_of)
        return slot_of[v]

    arg_slots = tuple(slot(a) for a in block.args)
    constants: dict[int, Any] = {}
    steps: list[Step] = []
    result_slots: tuple[int, ...] = ()
    for op in block.ops:
        if isinstance(op, ReturnOp):
            result_slots = tuple(slot(v) for v in op.arguments)
            continue
        builder = builders.get(type(op))
        if builder is None:
            raise ExecutionError(
                f"{op.name} cannot be executed: no runtime kernel for it "
                f"(supported: {', '.join(sorted(c.name for c in builders))})"
            )
        kernel = builder(op, dtype)
        args = tuple(slot(v) for v in op.operands)
        outs = tuple(slot(r) for r in op.results)
        if op.has_trait(ConstantLike) or (args and all(a in constants for a in args)):
            try:
                values = kernel(*[constants[a] for a in args])
            except Exception as e:
                raise ExecutionError(f"{op.name} failed while folding constants: {e}") from e
            constants.update(zip(outs, values))
            continue
        steps.append(Step(op, kernel, args, outs))
    _plan_frees(steps, result_slots, constants)
    fused = fuse_steps(steps, result_slots, constants, default_fusions())
    if fused is not None:
        _plan_frees(fused, result_slots, constants)
    return Plan(
        func, len(slot_of), arg_slots, result_slots, steps, constants, dtype, slot_of, fused
    )


def fuse_steps(
    steps: list[Step],
    result_slots: tuple[int, ...],
    constants: dict[int, Any],
    fusions: dict[type[Operation], Fuser],
) -> list[Step] | None:
    """``steps`` with each fusable chain as one step (``None`` when nothing fuses): a
    producer with a fuser and its successors, each the only user of the value before it
    (read as its only operand, not a result). The fused step takes the producer's place:
    its successors read nothing else, so they may run there. (A fuser may also take the
    producer alone, giving a faster kernel of that op.)"""
    users: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for a in step.args:
            users.setdefault(a, []).append(i)
    results = set(result_slots)
    absorbed: set[int] = set()
    changed = False
    out: list[Step] = []
    for i, step in enumerate(steps):
        if i in absorbed:
            continue
        fuser = fusions.get(type(step.op))
        chain = [step]
        while fuser is not None:
            last = chain[-1]
            if len(last.outs) != 1 or last.outs[0] in results:
                break
            readers = users.get(last.outs[0], [])
            if len(readers) != 1 or steps[readers[0]].args != last.outs:
                break
            chain.append(steps[readers[0]])
        fused = None
        if fuser is not None:
            fused = fuser([s.op for s in chain], [constants.get(a) for a in step.args])
        if fused is None:
            out.append(step)
            continue
        kernel, n = fused
        absorbed.update(users[s.outs[0]][0] for s in chain[: n - 1])
        out.append(Step(step.op, kernel, step.args, chain[n - 1].outs))
        changed = True
    return out if changed else None


def default_fusions() -> dict[type[Operation], Fuser]:
    """Fused kernels of op chains (only the nh level has any)."""
    return dict(NH_FUSIONS)


def _plan_frees(
    steps: list[Step], result_slots: tuple[int, ...], constants: dict[int, Any]
) -> None:
    """Drop every runtime value right after the step that uses it last."""
    keep = set(result_slots) | set(constants)
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for a in step.args:
            last_use[a] = i
    for i, step in enumerate(steps):
        for o in step.outs:
            last_use.setdefault(o, i)  # results nobody reads are dropped at once
    frees: dict[int, list[int]] = {}
    for s, i in last_use.items():
        if s not in keep:
            frees.setdefault(i, []).append(s)
    for i, step in enumerate(steps):
        step.free = tuple(frees.get(i, ()))


def default_builders() -> dict[type[Operation], Builder]:
    """Kernels for every dialect the runtime knows."""
    return {**NF_BUILDERS, **NQ_BUILDERS, **NH_BUILDERS, **HOST_BUILDERS}


def compile_module(
    module: ModuleOp | FuncOp, *, function: str | None = None, dtype: Any = None
) -> Plan:
    """Compile the function to run; float64 for quantized (nq) programs, int64 for integer
    (nh) programs, whose kernels compute on integer codes whatever the dtype (float64 when
    they have host islands: nf and nq ops between ``nh.to_host`` and ``nh.from_host``), and
    float (nf) programs in the float type they declare (:func:`declared_float_dtype`)."""
    func = find_function(module, function)
    if dtype is None:
        level = level_of(func)
        dtype = (
            declared_float_dtype(func)
            if level == "nf"
            else {"nq": np.float64, "nh": np.int64}[level]
        )
        if has_host_ops(func.walk()):  # host islands run the nq ops: float64 (runtime/host.py)
            dtype = np.float64
    return compile_function(func, default_builders(), numeric_dtype(dtype))


def declared_float_dtype(func: FuncOp) -> np.dtype[Any]:
    """The dtype a float program runs in: float64 when any of its values is declared ``f64``
    (a model on doubles keeps their range and precision: 1e200 + 1e200 is no ``inf``), else
    float32. ``f16`` programs run in float32 too, and return float32: float32 holds every
    f16 value exactly, NumPy has no BLAS for float16, and rounding each intermediate result to
    f16 would mimic no particular runtime."""
    types = [*func.function_type.inputs.data, *func.function_type.outputs.data]
    types += [r.type for op in func.walk() for r in op.results]
    wide = any(
        isinstance(t, TensorType) and isinstance(t.get_element_type(), Float64Type) for t in types
    )
    return np.dtype(np.float64 if wide else np.float32)


def numeric_dtype(dtype: Any) -> np.dtype[Any]:
    """``dtype`` as a NumPy float or integer dtype, else :class:`ArgumentError`."""
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise ArgumentError(f"dtype must be a NumPy float or integer dtype, got {dtype!r}") from e
    if d.kind not in "fiu":
        raise ArgumentError(f"dtype must be a NumPy float or integer dtype, got {d}")
    return d


def run(
    module: ModuleOp | FuncOp,
    *inputs: Any,
    function: str | None = None,
    dtype: Any = None,
    raw: bool = False,
) -> list[Any]:
    """Run a program on NumPy inputs and return its outputs.

    nf programs run in the float type they declare (float64 when a value is ``f64``, else
    float32) and nq programs in float64 (the exactness contract's reference), unless ``dtype``
    says otherwise. nh programs compute on integer codes: float inputs are
    quantized as the argument attributes (``nq.bits``/``nq.exp``/``nq.rounding``, written by
    lower-to-hw) say, integer inputs are taken as codes, and the outputs come back as exact
    real values (``code * 2**-exp``) — or as the raw codes with ``raw=True``.
    """
    if not isinstance(raw, (bool, np.bool_)):
        raise ArgumentError(f"raw must be True or False, got {raw!r}")
    plan = compile_module(module, function=function, dtype=dtype)
    if level_of(plan.func) != "nh":
        return plan(*inputs)
    outputs = plan(*quantize_inputs(plan.func, inputs))
    return outputs if raw else dequantize_outputs(plan.func, outputs)
