"""The graph under construction: nodes, initializers, and each nh value in the ONNX forms it
has been asked for.

An nh value is a tensor of integer codes. ONNX has no one integer type every op takes
(onnxruntime 1.32: `ConvInteger`/`MatMulInteger` want uint8 or int8, `MaxPool` int8/uint8 or
float, `Div`/`Mod`/`Clip` int32/int64), so a value may live in several *forms*, each made on
first demand from one already there and then kept:

- ``i32`` / ``i64``: the codes in int32 / int64 (all integer arithmetic);
- ``u8``: codes of at most 8 bits as uint8 for the integer products: a signed value offset by
  128 (zero point 128: the fast uint8 x uint8 kernels; int8 operands take a slow path), an
  unsigned one as is (zero point 0);
- ``f64``: the codes as float64 (exact: nh codes have at most 32 bits), for `MaxPool` of wide
  codes;
- ``in``: a graph input as given (int8, uint8, int16, uint16 or int32).

Data movement applies to whichever form the value already has. :class:`Graph` also tracks a
static bound of each value's ``|code|``, tighter than its type for products of constant
weights, so that rounding stays in int32 wherever it provably cannot overflow.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.grammar.onnx.exporter import OnnxExportError
from xdsl.ir import SSAValue

I32_MAX = 2**31 - 1

ELEM = {
    np.dtype(np.int8): 3,
    np.dtype(np.uint8): 2,
    np.dtype(np.int16): 5,
    np.dtype(np.uint16): 4,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.float64): 11,
    np.dtype(np.bool_): 9,
}
"""ONNX TensorProto element types of the NumPy dtypes used."""


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


class Graph:
    """Nodes and initializers in order, fresh names, and the forms of each nh value."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.helper = onnx.helper
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
        self.lazy: dict[SSAValue, np.ndarray] = {}
        """Constant codes, written as an int32 initializer only when some node reads them
        (a weight is written in its products' own form instead)."""

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
        a = np.ascontiguousarray(np.asarray(array).astype(dtype))
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
            return "i32"
        return next(iter(self.forms[value]))

    def base(self, value: SSAValue) -> str:
        return self.hints.get(value) or value.name_hint or "v"

    def get(self, value: SSAValue, form: str) -> str:
        """``value`` in ``form``, converted from a form it has (and kept)."""
        if value in self.lazy and not self.forms.get(value):
            self.put(value, "i32", self.const(self.lazy[value], np.int32, self.base(value)))
        have = self.forms.get(value)
        if not have:
            raise IntegerOnnxError("integer onnx export: a value is read before it is defined")
        if form in have:
            return have[form]
        base = f"{self.base(value)}_{form}"
        if form == "i32":
            if "in" in have or "i64" in have or "f64" in have:
                src = have.get("in") or have.get("i64") or have["f64"]
                name = self.node("Cast", [src], base, to=6)
            else:
                cast = self.node("Cast", [have["u8"]], base + "c", to=6)
                zp = zero_point(value)
                name = self.node("Sub", [cast, self.const(zp, np.int32)], base) if zp else cast
        elif form == "i64":
            name = self.node("Cast", [self.get(value, "i32")], base, to=7)
        elif form == "f64":
            name = self.node("Cast", [self.get(value, "i32")], base, to=11)
        elif form == "u8":
            if nh.width_of(value) > 8:
                raise IntegerOnnxError(
                    f"integer onnx export: {nh.type_text(value)} codes have no uint8 form"
                )
            if "in" in have and nh.is_unsigned(value):
                name = have["in"]
            else:
                x = self.get(value, "i32")
                zp = zero_point(value)
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
