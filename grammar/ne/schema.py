"""The `.ne` schema both levels share: metadata keys, dtypes, value codecs, naming, levels.

Import and export at the nq level (`import_nq`, `export_nq`) and at the hw level
(`import_hw`, `export_hw`) read and write the same things the same way; this module
is that one definition, so a key, a codec or a naming rule cannot drift between them.

- `NE_*`: the discardable attributes an nq-level import records so that export reproduces
  the file byte for byte (what each holds: `import_nq`'s docstring);
- dtypes: `.ne` dtype <-> IR element type, and the hw level's integer widths;
- attribute values: `.ne` value <-> xDSL attribute, kept as written (`encode_value`) or as
  an op property of a kind (`encode_prop`: ints, int, flag, rounding, float, name);
- declared tensors and constants as attributes (`tensor_entry`, `const_entry`, ...);
- names: `sanitize_name` and `Names` (fresh `base_<k>` and numbered `<OpType>_n<k>` names,
  stepping around names taken or reserved);
- the level of a program (`is_hw_program`), which the front door `importer` dispatches on
  (`exporter` asks `nanoir.dialects.functions.level_of`);
- the shapes runtime tensors are declared with (`StreamPlan`, `UnitStepPlan`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from nanoir.dialects.functions import runtime_layout
from nanoir.dialects.nf import array_values, int_array
from nanoir.dialects.nq import RoundingModeAttr
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    ConstTensor,
    Declaration,
    Float,
    InitNode,
    InitTensor,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    Signedness,
    StringAttr,
    TensorType,
    f32,
    f64,
    i64,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Operation, SSAValue

__all__ = [
    "NE_ITEMS",
    "NE_DECLS",
    "NE_TENSOR",
    "NE_NODE",
    "NE_INIT",
    "NE_OUT_S",
    "NE_MEM_S",
    "NE_ATTR",
    "NE_OP_TYPE",
    "NE_CONST_IN",
    "NE_EXP_NAME",
    "NE_HEX_UPPER",
    "NE_EXP_HEX_UPPER",
    "NE_IDENTITY",
    "Attrs",
    "element_type",
    "dtype_of",
    "is_float_dtype",
    "HW_DTYPES",
    "UNSIGNED_HW_DTYPES",
    "WIDTH_OF_DTYPE",
    "encode_value",
    "decode_value",
    "encode_attrs",
    "decode_attrs",
    "encode_prop",
    "decode_prop",
    "same_value",
    "EXP_MIN",
    "EXP_MAX",
    "exp_value",
    "exp_from_value",
    "name_value",
    "name_from_value",
    "tensor_entry",
    "entry_fields",
    "dense_from_const",
    "const_from_dense",
    "const_entry",
    "words_entry",
    "orphan_entry",
    "decl_from_entry",
    "streamed_type",
    "runtime_layout",
    "init_layout",
    "NAME",
    "sanitize_name",
    "set_hint",
    "Names",
    "is_hw_program",
    "main_function",
    "StreamPlan",
    "UnitStepPlan",
]

# ---------------------------------------------------------------------------------------
# Metadata keys (what each records: import_nq)
# ---------------------------------------------------------------------------------------

NE_ITEMS = "ne.items"
NE_DECLS = "ne.decls"
NE_TENSOR = "ne.tensor"
NE_NODE = "ne.node"
NE_INIT = "ne.init"
NE_OUT_S = "ne.out_s"
NE_MEM_S = "ne.mem_s"
NE_ATTR = "ne.attr"
NE_OP_TYPE = "ne.op_type"
NE_CONST_IN = "ne.const_in"
NE_EXP_NAME = "ne.exp_name"
NE_HEX_UPPER = "ne.hex_upper"
NE_EXP_HEX_UPPER = "ne.exp_hex_upper"
NE_IDENTITY = "ne.identity"

Attrs = tuple[tuple[str, AttrValue], ...]
"""A node's attribute list, in the order it is written."""

# ---------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------

_ELEMENT_TYPES: dict[str, Attribute] = {
    "little_float_16": Float16Type(),
    "little_float_32": Float32Type(),
    "little_float_64": Float64Type(),
    "int8_t": IntegerType(8),
    "int16_t": IntegerType(16),
    "int32_t": IntegerType(32),
    "int64_t": IntegerType(64),
    "uint8_t": IntegerType(8, Signedness.UNSIGNED),
    "uint16_t": IntegerType(16, Signedness.UNSIGNED),
    "uint32_t": IntegerType(32, Signedness.UNSIGNED),
    "uint64_t": IntegerType(64, Signedness.UNSIGNED),
}


def element_type(dtype: str) -> Attribute:
    """The IR element type of a `.ne` dtype (`int8_t` -> `i8`, `uint8_t` -> `ui8`)."""
    return _ELEMENT_TYPES[dtype]


def dtype_of(elt: Attribute) -> str | None:
    """The `.ne` dtype of an IR element type (signed and signless ints are both `intN_t`)."""
    if isinstance(elt, IntegerType) and elt.signedness.data == Signedness.SIGNED:
        elt = IntegerType(elt.width.data)
    for name, t in _ELEMENT_TYPES.items():
        if t == elt:
            return name
    return None


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("little_float_")


HW_DTYPES: dict[int, str] = {
    1: "int1_t",
    2: "int2_t",
    4: "int4_t",
    8: "int8_t",
    16: "int16_t",
    32: "int32_t",
}
"""nh element width -> dtype of a computed tensor's declaration."""
UNSIGNED_HW_DTYPES: dict[int, str] = {2: "uint2_t", 4: "uint4_t", 8: "uint8_t", 16: "uint16_t"}
"""nh width of unsigned codes (`ui<b>`, from `signed = false` fake-quants) -> dtype: nanoir's
extension (NanoEngine's tensors hold signed codes); there is no ui1 or ui32."""
WIDTH_OF_DTYPE: dict[str, int] = {
    name: width for table in (HW_DTYPES, UNSIGNED_HW_DTYPES) for width, name in table.items()
}
"""The nh width of a computed tensor's dtype, signed or unsigned."""

# ---------------------------------------------------------------------------------------
# Attribute values: as written, and as op properties
# ---------------------------------------------------------------------------------------

_FLOAT_SPELLING = re.compile(
    r"-?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
)


def encode_value(value: AttrValue) -> Attribute:
    """An attribute value as an xDSL attribute (see the module docstring)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a .ne attribute value")
    if isinstance(value, int):
        width = max(64, (value if value >= 0 else ~value).bit_length() + 1)  # signed: -2**63 is i64
        return IntegerAttr(value, i64 if width == 64 else IntegerType(width))
    if isinstance(value, Float):
        return StringAttr(value.text)
    if isinstance(value, str):
        return StringAttr(value)
    return ArrayAttr([encode_value(v) for v in value])


def decode_value(attr: Attribute) -> AttrValue:
    """The `.ne` attribute value an xDSL attribute stands for; ValueError when none."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, StringAttr):
        return Float(attr.data) if _FLOAT_SPELLING.fullmatch(attr.data) else attr.data
    if isinstance(attr, ArrayAttr):
        return tuple(decode_value(a) for a in attr.data)
    if isinstance(attr, FloatAttr):
        return Float.from_value(float(attr.value.data))
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    raise ValueError(f"attribute {attr} has no .ne spelling")


def encode_attrs(attrs: Sequence[tuple[str, AttrValue]]) -> DictionaryAttr:
    return DictionaryAttr({k: encode_value(v) for k, v in attrs})


def decode_attrs(attr: DictionaryAttr) -> tuple[tuple[str, AttrValue], ...]:
    return tuple((k, decode_value(v)) for k, v in attr.data.items())


def _ints_attr(value: AttrValue) -> Attribute:
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        raise ValueError("must be a list of integers")
    return int_array([int(v) for v in value])  # type: ignore[arg-type]  # checked above


def _int_attr(value: AttrValue) -> Attribute:
    if not isinstance(value, int):
        raise ValueError("must be an integer")
    return IntegerAttr(value, i64)


def _flag_attr(value: AttrValue) -> Attribute:
    if value not in (0, 1) or not isinstance(value, int):
        raise ValueError("must be 0 or 1")
    return BoolAttr.from_bool(bool(value))


def _rounding_attr(value: AttrValue) -> Attribute:
    try:
        return RoundingModeAttr(RoundingMode(value))
    except ValueError:
        raise ValueError("must be one of " + ", ".join(m.value for m in RoundingMode)) from None


def _float_attr(value: AttrValue) -> Attribute:
    if isinstance(value, Float):
        number = value.value
    elif isinstance(value, int) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ValueError("must be a number")
    if not math.isfinite(number):  # (1e999 reads as inf, which no .ne float spells)
        raise ValueError("must be a finite number")
    return FloatAttr(number, Float64Type())


def _floats_attr(value: AttrValue) -> Attribute:
    if not isinstance(value, tuple) or not all(
        isinstance(v, Float) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
    ):
        raise ValueError("must be a list of numbers")
    floats = [v.value if isinstance(v, Float) else float(v) for v in value]
    if not all(math.isfinite(v) for v in floats):
        raise ValueError("must be a list of finite numbers")
    return DenseArrayBase.from_list(f64, floats)


def _name_attr(value: AttrValue) -> Attribute:
    if not isinstance(value, str):
        raise ValueError("must be a name")
    return StringAttr(value)


def _mask_value(attr: Attribute) -> AttrValue:
    """A boolean mask (``dense<...> : tensor<...xi1>``) as ``[[shape], [0/1 values]]``."""
    data = dense_to_numpy(attr)
    return (tuple(int(d) for d in data.shape), tuple(int(v != 0) for v in data.reshape(-1)))


def _mask_attr(value: AttrValue) -> Attribute:
    ok = isinstance(value, tuple) and len(value) == 2 and all(isinstance(p, tuple) for p in value)
    shape, bits = value if ok else ((), ())  # type: ignore[misc]
    if not ok or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError("must be [[shape], [values]] (a boolean mask)")
    if any(v not in (0, 1) for v in bits) or len(bits) != math.prod(shape):  # type: ignore[arg-type]
        raise ValueError(f"must hold {math.prod(shape)} values, each 0 or 1")  # type: ignore[arg-type]
    data = np.asarray(bits, dtype=np.int8).reshape(shape)  # type: ignore[arg-type]
    return numpy_to_dense(data, IntegerType(1))


_PROP_KINDS: dict[
    str, tuple[Callable[[Attribute], AttrValue], Callable[[AttrValue], Attribute]]
] = {
    "ints": (lambda a: array_values(a) or (), _ints_attr),  # type: ignore[arg-type]
    "int": (lambda a: int(a.value.data), _int_attr),  # type: ignore[attr-defined]
    "flag": (lambda a: int(bool(a.value.data)), _flag_attr),  # type: ignore[attr-defined]
    "rounding": (lambda a: a.data.value, _rounding_attr),  # type: ignore[attr-defined]
    "float": (lambda a: Float.from_value(a.value.data), _float_attr),  # type: ignore[attr-defined]
    "floats": (lambda a: tuple(Float.from_value(v) for v in a.get_values()), _floats_attr),  # type: ignore[attr-defined]
    "name": (lambda a: a.data, _name_attr),  # type: ignore[attr-defined]
    "mask": (_mask_value, _mask_attr),
}
"""Property kind -> (property -> attribute value, attribute value -> property)."""


def encode_prop(kind: str, attr: Attribute) -> AttrValue:
    """The `.ne` attribute value of a property of the given kind."""
    return _PROP_KINDS[kind][0](attr)


def decode_prop(kind: str, value: AttrValue) -> Attribute:
    """The property an attribute value stands for; ValueError saying what it must be."""
    return _PROP_KINDS[kind][1](value)


def same_value(a: AttrValue, b: AttrValue) -> bool:
    """Whether two attribute values mean the same (floats compare by value, not spelling)."""
    if isinstance(a, Float) and isinstance(b, (Float, int)):
        return a.value == float(b.value if isinstance(b, Float) else b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


EXP_MIN, EXP_MAX = -128, 127
"""The range of an exponent: NanoEngine stores exponents as int8 (import and export check it)."""


def exp_value(fixed: nh.FixedAttr) -> AttrValue:
    """`exp=7` per tensor, `exp=[7, 6]` per channel."""
    return tuple(fixed.exp_list) if fixed.is_per_channel else fixed.exp_list[0]


def exp_from_value(value: AttrValue) -> int | list[int]:
    """The `#nh.fixed` exponent(s) of an `exp` attribute value; ValueError otherwise."""
    if isinstance(value, int):
        return value
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]  # type: ignore[arg-type]  # checked above
    raise ValueError(
        "must be an integer (per tensor) or a non-empty list of integers (per channel)"
    )


_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"0|[1-9][0-9]*")


def name_value(name: str) -> AttrValue:
    """The `name` attribute of an IR constant name (an hw `Unpack` node's; see `hw`).

    >>> name_value("layers.0.weight")
    ('layers', 0, 'weight')
    >>> name_value("a-b")
    ((97, 45, 98),)
    """
    parts = name.split(".")
    if all(_PART.fullmatch(p) or _NUMBER.fullmatch(p) for p in parts):
        return tuple(int(p) if _NUMBER.fullmatch(p) else p for p in parts)
    return (tuple(name.encode("utf-8")),)


def name_from_value(value: AttrValue) -> str:
    """Inverse of `name_value`; ValueError for values it never makes."""
    if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], tuple):
        raw = value[0]
        if not all(isinstance(b, int) and 0 <= b < 256 for b in raw):
            raise ValueError("must list UTF-8 bytes")
        try:
            return bytes(raw).decode("utf-8")  # type: ignore[arg-type]  # checked above
        except UnicodeDecodeError:
            raise ValueError("is not valid UTF-8") from None
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(p, str) or (isinstance(p, int) and p >= 0) for p in value)
    ):
        return ".".join(str(p) for p in value)
    raise ValueError("must be a list of names and numbers, or [[UTF-8 bytes]]")


# ---------------------------------------------------------------------------------------
# Declared tensors and constants as attributes
# ---------------------------------------------------------------------------------------


def tensor_entry(
    name: str, layout: str, shape: Sequence[int], dtype: str = "Any"
) -> DictionaryAttr:
    """`{name, layout, shape[, dtype]}`: one declared tensor (dtype only when not Any)."""
    entry: dict[str, Attribute] = {
        "name": StringAttr(name),
        "layout": StringAttr(layout),
        "shape": DenseArrayBase.from_list(i64, list(shape)),
    }
    if dtype != "Any":
        entry["dtype"] = StringAttr(dtype)
    return DictionaryAttr(entry)


Entry = tuple[str, str, tuple[int, ...], str]
"""(name, layout, shape, dtype) of a declared tensor."""


def entry_fields(entry: Attribute) -> Entry | None:
    """(name, layout, shape, dtype) of a recorded `{name, layout, shape[, dtype]}` entry."""
    if not isinstance(entry, DictionaryAttr):
        return None
    d = entry.data
    name, layout, shape = d.get("name"), d.get("layout"), d.get("shape")
    dtype = d.get("dtype", StringAttr("Any"))
    if not (
        isinstance(name, StringAttr)
        and isinstance(layout, StringAttr)
        and isinstance(shape, DenseArrayBase)
        and isinstance(dtype, StringAttr)
    ):
        return None
    return name.data, layout.data, tuple(int(v) for v in shape.get_values()), dtype.data


def dense_from_const(const: ConstTensor) -> DenseIntOrFPElementsAttr:
    """The constant's exact bytes as a dense attribute of its own element type and shape."""
    return DenseIntOrFPElementsAttr(
        TensorType(element_type(const.dtype), const.shape), BytesAttr(const.data)
    )


def const_from_dense(
    name: str, value: DenseIntOrFPElementsAttr, hex_upper: bool = False
) -> ConstTensor:
    """The `.ne` constant holding a dense attribute's exact bytes; ValueError for other types."""
    t = value.get_type()
    assert isinstance(t, TensorType)
    dtype = dtype_of(t.get_element_type())
    if dtype is None:
        raise ValueError(
            f"constant '{name}' has element type {t.get_element_type()}, which .ne cannot hold"
        )
    return ConstTensor(name, dtype, tuple(t.get_shape()), value.data.data, hex_upper)


def const_entry(const: ConstTensor) -> DictionaryAttr:
    entry: dict[str, Attribute] = {"kind": StringAttr("const"), "value": dense_from_const(const)}
    if const.hex_upper:
        entry["hex_upper"] = BoolAttr.from_bool(True)
    return DictionaryAttr(entry)


def words_entry(words: WordTensor) -> DictionaryAttr:
    data = DenseIntOrFPElementsAttr(
        TensorType(IntegerType(8, Signedness.UNSIGNED), [len(words.data)]), BytesAttr(words.data)
    )
    return DictionaryAttr(
        {
            "kind": StringAttr("words"),
            "type": StringAttr(words.type_name),
            "layout": StringAttr(words.layout),
            "shape": DenseArrayBase.from_list(i64, list(words.shape)),
            "data": data,
            "hex_upper": BoolAttr.from_bool(words.hex_upper),
        }
    )


def orphan_entry(kind: str, decl: InitTensor | RuntimeTensor | MemTensor) -> DictionaryAttr:
    """An `ne.decls` entry for a tensor no op carries: `{kind, layout, shape[, dtype]}`."""
    dtype = decl.type_name if isinstance(decl, MemTensor) else decl.dtype
    entry = dict(tensor_entry(decl.name, decl.layout, decl.shape, dtype).data)
    del entry["name"]
    return DictionaryAttr({"kind": StringAttr(kind), **entry})


def decl_from_entry(name: str, entry: Attribute) -> Declaration | None:
    """The declaration of an `ne.decls` entry; None for an entry import never makes."""
    if not isinstance(entry, DictionaryAttr) or not isinstance(entry.data.get("kind"), StringAttr):
        return None
    d = entry.data
    kind = d["kind"].data  # type: ignore[union-attr]
    hex_upper = d.get("hex_upper")
    upper = bool(hex_upper.value.data) if isinstance(hex_upper, IntegerAttr) else None
    if kind == "const" and isinstance(d.get("value"), DenseIntOrFPElementsAttr):
        return const_from_dense(name, d["value"], bool(upper))  # type: ignore[arg-type]
    if kind == "words":
        data, shape, layout, type_name = (
            d.get("data"),
            d.get("shape"),
            d.get("layout"),
            d.get("type"),
        )
        if (
            isinstance(data, DenseIntOrFPElementsAttr)
            and isinstance(shape, DenseArrayBase)
            and isinstance(layout, StringAttr)
            and isinstance(type_name, StringAttr)
        ):
            dims = tuple(int(v) for v in shape.get_values())
            return WordTensor(
                name,
                type_name.data,
                layout.data,
                dims,
                data.data.data,
                True if upper is None else upper,
            )
        return None
    fields = entry_fields(
        DictionaryAttr({"name": StringAttr(name), **{k: v for k, v in d.items() if k != "kind"}})
    )
    if fields is None:
        return None
    _, layout, shape, dtype = fields
    if kind == "init":
        return InitTensor(name, dtype, layout, shape)
    if kind == "runtime":
        return RuntimeTensor(name, dtype, layout, shape)
    if kind == "mem":
        return MemTensor(name, dtype, layout, shape)
    return None


def streamed_type(shape: Sequence[int], layout: str, elt: Attribute = f32) -> TensorType:
    """The IR type of a declared runtime tensor: B and M dims (and -1) become `?`."""
    dims = [
        DYNAMIC_INDEX if d == -1 or (i < len(layout) and layout[i] in "BM") else d
        for i, d in enumerate(shape)
    ]
    return TensorType(elt, dims)


def init_layout(rank: int) -> str:
    """NanoEngine's layout of an init tensor: C, CC, CCD, CCDD, ... (weights, vectors)."""
    return "C" * min(rank, 2) + "D" * max(0, rank - 2)


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A `.ne` name."""

# What xDSL accepts as an SSA name hint.
_HINT = re.compile(r"[A-Za-z_][A-Za-z0-9_$.-]*")


def sanitize_name(name: str) -> str:
    """A `.ne` name for any string: `conv1.weight` -> `conv1_weight`, `0w` -> `_0w`."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return "_" + name if name[0].isdigit() else name


def set_hint(value: SSAValue, name: str) -> None:
    """Use a `.ne` name as the SSA name hint where xDSL allows (a trailing `_<digits>` is
    dropped by xDSL, so exact names are kept elsewhere where they matter)."""
    if _HINT.fullmatch(name):
        value.name_hint = name


class Names:
    """The names one export hands out: each once, stepping around `reserved` ones.

    `reserved` are names recorded in the IR (an imported file's): a fresh or numbered
    name never takes one, so each stays free for the declaration that recorded it.
    """

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self.taken: set[str] = set()
        self.reserved: set[str] = set(reserved)
        self.counters: dict[str, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.taken

    def add(self, name: str) -> None:
        self.taken.add(name)

    def claim(self, recorded: str | None, fallback: Callable[[], str]) -> str:
        """`recorded` if it is a valid name not used yet in this export, else `fallback()`."""
        if recorded is not None and recorded not in self.taken and NAME.fullmatch(recorded):
            self.taken.add(recorded)
            return recorded
        return fallback()

    def fresh(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`, ... : the first not reserved and not taken."""
        name, i = base, 0
        while name in self.taken or name in self.reserved:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def numbered(self, op_type: str, suffix: str = "") -> str:
        """`<op_type>_n<k><suffix>` with the next free k for that op type."""
        while True:
            k = self.counters[op_type] = self.counters.get(op_type, 0) + 1
            name = f"{op_type}_n{k}{suffix}"
            if name not in self.taken and name not in self.reserved:
                self.taken.add(name)
                return name


# ---------------------------------------------------------------------------------------
# Levels
# ---------------------------------------------------------------------------------------


def is_hw_program(program: Program) -> bool:
    """Whether `program` is at the hw level: some node output is an integer tensor."""
    outputs = {
        o for d in program.declarations if isinstance(d, (InitNode, RuntimeNode)) for o in d.out_s
    }
    return any(
        isinstance(d, (InitTensor, RuntimeTensor))
        and d.name in outputs
        and d.dtype in WIDTH_OF_DTYPE
        for d in program.declarations
    )


def main_function(module: ModuleOp) -> FuncOp:
    """The program's function: the module's only one, or its `@main`; flat, one block."""
    funcs = [op for op in module.body.block.ops if isinstance(op, FuncOp)]
    if len(funcs) != 1:
        funcs = [f for f in funcs if f.sym_name.data == "main"]
    if len(funcs) != 1:
        raise ExportError("nanoengine export: the module needs one function (or one @main)")
    func = funcs[0]
    if len(func.body.blocks) != 1:
        raise ExportError(f"nanoengine export: @{func.sym_name.data} must have exactly one block")
    for op in func.body.block.ops:
        if op.regions and not isinstance(op, ReturnOp):
            raise ExportError(
                f"nanoengine export: '{op.name}' has regions; NanoEngine programs are flat"
            )
    return func


# ---------------------------------------------------------------------------------------
# The shapes runtime tensors and caches are declared with
# ---------------------------------------------------------------------------------------


class StreamPlan(Protocol):
    """Declared shapes of runtime tensors and node caches; None means "no opinion"."""

    def tensor_shape(self, value: SSAValue) -> Sequence[int] | None: ...

    def cache_shape(
        self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]
    ) -> Sequence[int] | None: ...


@dataclass(frozen=True)
class UnitStepPlan:
    """The plan without a stream analysis: one row per step along M, the whole of C and D.

    A runtime tensor `tensor<?xCxMxD...>` is declared `[-1, C, 1, D...]`, and a cache like
    the tensor it caches.
    """

    def tensor_shape(self, value: SSAValue) -> Sequence[int] | None:
        t = value.type
        assert isinstance(t, TensorType)
        dims = list(t.get_shape())
        if not dims:
            raise ExportError(f"nanoengine export: a runtime value of type {t} has no batch dim")
        if len(dims) >= 3:
            dims[2] = 1
        dims[0] = -1
        if DYNAMIC_INDEX in dims:
            raise ExportError(
                f"nanoengine export: cannot declare a runtime tensor of type {t}: only the batch and "
                "the streamed dim may be dynamic (give a stream plan)"
            )
        return dims

    def cache_shape(
        self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]
    ) -> Sequence[int] | None:
        return tensor_shape
