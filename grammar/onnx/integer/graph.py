"""The graph under construction: nodes, initializers, each nh value in the ONNX forms it has been
asked for, static bounds, and the run-time overflow checks.

An nh value is a tensor of integer codes. ONNX has no one type every fast kernel takes
(onnxruntime 1.32: float ``Conv``/``MatMul`` want float, ``QLinearConv`` uint8 codes, ``Div``/
``Mod`` int32/int64), so a value may live in several *forms*, each made on first demand from
one already there and then kept:

- ``f32``: the codes as float32, exact while ``|code| < 2**24`` (the bound says where): float
  convolutions, matmuls, requantization and elementwise ops run on it (:mod:`.products`);
- ``u8``: codes of at most 8 bits as uint8, a signed value offset by 128 (zero point 128), an
  unsigned one as is (zero point 0): what ``QLinearConv`` reads and writes;
- ``i8``: signed codes of at most 8 bits as int8 (zero point 0): what a ``QuantizeLinear``
  writes for readers that convert its codes (one ``Cast`` to float, no ``Sub`` of 128);
- ``i32`` / ``i64``: the codes in int32 / int64 (integer arithmetic, tables, the integer
  algorithms);
- ``f64``: the codes as float64 (exact: nh codes have at most 32 bits);
- ``in``: a graph input as given (int8, uint8, int16, uint16 or int32).

No ``DequantizeLinear`` is ever written: onnxruntime 1.32 reads a float ``MatMul``/``Conv``
whose input is dequantized (and whose result is quantized) as a QDQ node group and rewrites its
float weights and bias into int8/int32 on its own grids (``MatMulAddFusion`` at the basic
level, the QDQ selectors above it), which moves a bias that carries a rounding offset.

Data movement applies to whichever form the value already has. :class:`Graph` tracks a static
bound of each value's ``|code|``, tighter than its type for products of constant weights: it
says where float32 is exact and where int32 provably does not overflow. Where an op's result
may leave its type (a hand-written program, ``lower-to-hw{allow_overflow=true}``), the writer
computes it wide and adds a *check*: a count of the codes outside the type, returned in the
graph output :data:`CHECK_OUTPUT` (see :mod:`.exporter`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.grammar.onnx.exporter import OnnxExportError
from nanoir.runtime.numerics.accumulator import F32_EXACT
from xdsl.ir import Operation, SSAValue

I32_MAX = 2**31 - 1
F64_EXACT = 2**52
"""A bound on ``|x|`` below which float64 holds ``x``, its power-of-two multiples and
``x * 2**-s + 1/2`` exactly (its integers are exact to ``2**53``): every nh code (at most 32
bits) is below it."""

ELEM = {
    np.dtype(np.int8): 3,
    np.dtype(np.uint8): 2,
    np.dtype(np.int16): 5,
    np.dtype(np.uint16): 4,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.float32): 1,
    np.dtype(np.float64): 11,
    np.dtype(np.bool_): 9,
}
"""ONNX TensorProto element types of the NumPy dtypes used."""

FORM_DTYPE = {
    "f32": np.float32,
    "u8": np.uint8,
    "i8": np.int8,
    "i32": np.int32,
    "i64": np.int64,
    "f64": np.float64,
}
"""The element type of each form (``in`` is the value's exchange dtype)."""

DEPTH_TO_SPACE_FORMS = ("u8", "i8", "f32", "f64")
"""The forms onnxruntime's ``DepthToSpace`` takes (1.32: not int16, int32 or int64)."""


class IntegerOnnxError(OnnxExportError):
    """An nh program (or part of one) has no exact integer-ONNX form here; the message names
    the op and why."""


def natural_dtype(value: SSAValue) -> np.dtype[Any]:
    """The dtype an nh value's codes are exchanged in: int8/uint8 up to 8 bits (1-bit codes
    are +-1 in int8), int16/uint16 up to 16, int32 for accumulators."""
    width, unsigned = nh.width_of(value), nh.is_unsigned(value)
    if width <= 8:
        return np.dtype(np.uint8 if unsigned else np.int8)
    if width <= 16:
        return np.dtype(np.uint16 if unsigned else np.int16)
    return np.dtype(np.int32)


def zero_point(value: SSAValue) -> int:
    """The ``u8`` form's offset: 128 for signed codes, 0 for unsigned ones."""
    return 0 if nh.is_unsigned(value) else 128


def declared_bound(value: SSAValue) -> int:
    lo, hi = nh.value_code_range(value)
    return max(-lo, hi)


def op_label(op: Operation) -> str:
    """The op and, when it has one, its result's SSA name: ``nh.conv (%acc)``."""
    hints = [r.name_hint for r in op.results if r.name_hint]
    return f"{op.name} (%{hints[0]})" if hints else op.name


class Graph:
    """Nodes and initializers in order, fresh names, the forms of each nh value, bounds and
    checks. ``kernel``: the fused ``QLinearConv`` kernel products may use (one of
    :data:`nanoir.grammar.onnx.integer.session.FUSED_KERNELS`), or None."""

    def __init__(self, onnx: Any, *, kernel: str | None = None) -> None:
        self.onnx = onnx
        self.helper = onnx.helper
        self.kernel = kernel
        self.used_kernel = False
        """Whether a written node uses ``kernel`` (recorded in the file)."""
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.taken: set[str] = set()
        self.counts: dict[str, int] = {}
        self.forms: dict[SSAValue, dict[str, str]] = {}
        self.bounds: dict[SSAValue, int] = {}
        self.consts: dict[tuple[bytes, str, tuple[int, ...]], str] = {}
        self.hints: dict[SSAValue, str] = {}
        self.fused: set[Any] = set()
        """``nh.relu`` ops whose requant already saturates at 0."""
        self.done: set[Any] = set()
        """Ops a product's writer wrote with it (the requant a fused kernel applies)."""
        self.scaled: dict[Any, str] = {}
        """``nh.requant`` ops whose product wrote the accumulator already scaled by
        ``2**-shift`` (and offset for half_up) in float32: the requant rounds and clips it."""
        self.lazy: dict[SSAValue, np.ndarray] = {}
        """Constant codes, written as an initializer only when some node reads them (a
        weight is written in its products' own form instead)."""
        self.checks: list[tuple[str, str]] = []
        """Per checked op: (the int64 count of its codes outside its type, the op's label)."""

    # -- names, nodes, constants ---------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.]", "_", base) or "v"
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def node(self, op_type: str, inputs: list[str], base: str, outputs: int = 1, **attrs: Any):
        """Add a node; its output name (or names, when ``outputs`` > 1)."""
        k = self.counts.get(op_type, 0)
        self.counts[op_type] = k + 1
        names = [self.fresh(base if i == 0 else f"{base}_{i}") for i in range(outputs)]
        self.nodes.append(
            self.helper.make_node(
                op_type, inputs, names, name=self.fresh(f"{op_type}_{k}"), **attrs
            )
        )
        return names[0] if outputs == 1 else names

    def const(self, array: Any, dtype: Any, base: str = "c") -> str:
        """An initializer holding ``array`` as ``dtype`` (equal small constants are shared)."""
        a = np.asarray(array).astype(dtype, order="C")  # (a scalar stays a scalar)
        key = (a.tobytes(), a.dtype.str, a.shape)
        if a.size <= 64 and key in self.consts:
            return self.consts[key]
        name = self.fresh(base)
        self.initializers.append(self.onnx.numpy_helper.from_array(a, name))
        if a.size <= 64:
            self.consts[key] = name
        return name

    # -- forms ---------------------------------------------------------------------------
    def put(self, value: SSAValue, form: str, name: str) -> None:
        self.forms.setdefault(value, {})[form] = name

    def has(self, value: SSAValue, form: str) -> bool:
        return form in self.forms.get(value, {})

    def first_form(self, value: SSAValue) -> str:
        if not self.forms.get(value):
            return "f32" if self.float_exact(value) else "i32"
        return next(iter(self.forms[value]))

    def float_exact(self, value: SSAValue) -> bool:
        """Whether ``value``'s codes are exact in float32 (its bound is within 2**24)."""
        return self.bound(value) <= F32_EXACT

    def base(self, value: SSAValue) -> str:
        return self.hints.get(value) or value.name_hint or "v"

    def get(self, value: SSAValue, form: str) -> str:
        """``value`` in ``form``, converted from a form it has (and kept)."""
        if value in self.lazy and not self.forms.get(value):
            dtype = np.float32 if form == "f32" and self.float_exact(value) else np.int32
            self.put(
                value,
                "f32" if dtype is np.float32 else "i32",
                self.const(self.lazy[value], dtype, self.base(value)),
            )
        have = self.forms.get(value)
        if not have:
            raise IntegerOnnxError("integer onnx export: a value is read before it is defined")
        if form in have:
            return have[form]
        base = f"{self.base(value)}_{form}"
        if form == "f32":
            if not self.float_exact(value):  # a bug of the caller: say so, never round
                raise IntegerOnnxError(
                    f"integer onnx export: codes of bound {self.bound(value)} asked for as "
                    "float32, which holds integers up to 2**24 only"
                )
            src = next((have[f] for f in ("in", "i8", "i32", "i64", "f64") if f in have), None)
            if src is not None:
                name = self.node("Cast", [src], base, to=1)
            else:  # Cast and Sub, never DequantizeLinear: see the module docstring
                cast = self.node("Cast", [have["u8"]], base + "c", to=1)
                zp = zero_point(value)
                name = self.node("Sub", [cast, self.const(zp, np.float32)], base) if zp else cast
        elif form == "i32":
            src = next((have[f] for f in ("in", "i8", "f32", "i64", "f64") if f in have), None)
            if src is not None:
                name = self.node("Cast", [src], base, to=6)
            else:
                cast = self.node("Cast", [have["u8"]], base + "c", to=6)
                zp = zero_point(value)
                name = self.node("Sub", [cast, self.const(zp, np.int32)], base) if zp else cast
        elif form == "i64":
            name = self.node("Cast", [self.get(value, "i32")], base, to=7)
        elif form == "f64":
            src = next((have[f] for f in ("in", "i8", "i64", "i32", "f32") if f in have), None)
            name = self.node("Cast", [src or self.get(value, "i32")], base, to=11)
        elif form == "u8":
            if nh.width_of(value) > 8:
                raise IntegerOnnxError(
                    f"integer onnx export: {nh.type_text(value)} codes have no uint8 form"
                )
            zp = zero_point(value)
            if "in" in have and nh.is_unsigned(value):
                name = have["in"]
            elif "f32" in have:
                x = have["f32"]
                if zp:
                    x = self.node("Add", [x, self.const(zp, np.float32)], base + "o")
                name = self.node("Cast", [x], base, to=2)
            else:
                x = self.get(value, "i32")
                if zp:
                    x = self.node("Add", [x, self.const(zp, np.int32)], base + "o")
                name = self.node("Cast", [x], base, to=2)
        else:
            raise AssertionError(form)
        self.put(value, form, name)
        return name

    # -- bounds --------------------------------------------------------------------------
    def bound(self, value: SSAValue) -> int:
        """A static bound on ``|code|`` of ``value``."""
        return self.bounds.get(value, declared_bound(value))

    def set_bound(self, value: SSAValue, bound: int) -> None:
        self.bounds[value] = min(int(bound), declared_bound(value))

    # -- run-time checks -----------------------------------------------------------------
    def check(self, op: Operation, x: str, lo: int, hi: int, dtype: Any, *, one_bit: bool = False):
        """Count the values of ``x`` (in ``dtype``) outside ``lo..hi`` (and, for 1-bit codes,
        equal to 0) into the graph's check output, labelled with ``op``."""
        base = f"{op_label(op).split(' ')[0].replace('.', '_')}_check"
        outside = self.node(
            "Or",
            [
                self.node("Less", [x, self.const(lo, dtype)], base + "_lo"),
                self.node("Greater", [x, self.const(hi, dtype)], base + "_hi"),
            ],
            base + "_out",
        )
        if one_bit:
            zero = self.node("Equal", [x, self.const(0, dtype)], base + "_zero")
            outside = self.node("Or", [outside, zero], base + "_out1")
        count = self.node(
            "ReduceSum",
            [self.node("Cast", [outside], base + "_n", to=7)],
            base + "_count",
            keepdims=0,
        )
        self.checks.append((count, op_label(op)))
