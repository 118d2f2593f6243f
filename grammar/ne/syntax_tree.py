"""Syntax tree of the NanoEngine text format (`.ne`): plain frozen dataclasses, no xDSL.

A `Program` is the file's items in file order: `Comment`s (the `// section` lines), the
declarations, and the two `Function`s (`func init(){...}`, `func runtime(){...}`). Keeping
everything in one ordered tuple is what lets the printer reproduce a file byte for byte; the
properties `Program.declarations`, `Program.init_calls` and `Program.runtime_calls` give the
views a consumer usually wants.

Declaration kinds, one class each (the reference printer's spelling on the right):

    ConstTensor    let w: Tensor<little_float_32> = {shape=[2], data=0x0000803f00000040} ;
    WordTensor     let s: Tensor = {type=Any, shape:NC=[1, 2], data=[0x0A0B0C0D, 0x01020304]};
    InitTensor     let q: Tensor<Any>  = {shape:CCDD=[16, 3, 3, 3]};
    RuntimeTensor  let x: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 5]};
    MemTensor      let c: mem Tensor = {type=Any, shape:BCMD=[-1, 3, 3, 5]};
    InitNode       let n: init Node = { op_type=.., attr=[..], in_s=[..], out_s=[..] };
    RuntimeNode    let m: Node = { op_type=.., attr=[..], in_s=[..], mem_s=[..], out_s=[..] };

`Tensor<Any> = {shape:LAYOUT=[...]}` is a runtime tensor when its layout starts with `B`
(batch; the reference gives every runtime tensor a `B...` layout and a `-1` batch dim, and
init tensors `C`, `CC`, `CCD`, ... layouts), otherwise an init tensor.

Constant data is kept as raw little-endian `bytes`, never decoded to numbers, so float bit
patterns survive. Float attribute values keep their spelling (`Float("1e-05")`).

Source positions (`Loc`) and the case of hex digits (`hex_upper`) are presentation: they sit
in fields declared with `compare=False`, so two trees compare equal whatever the spacing or
hex case of the text they came from. A tree built by hand has no positions.
Abbreviations: dtype = element type name as spelled in the file (`little_float_32`, `int8_t`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Union

import numpy as np
import numpy.typing as npt

__all__ = [
    "Loc",
    "Float",
    "AttrValue",
    "Comment",
    "ConstTensor",
    "WordTensor",
    "InitTensor",
    "RuntimeTensor",
    "MemTensor",
    "InitNode",
    "RuntimeNode",
    "Function",
    "Declaration",
    "DECLARATION_TYPES",
    "TensorDecl",
    "NodeDecl",
    "Item",
    "Program",
    "DTYPES",
    "numpy_dtype",
    "dtype_size",
    "dtype_name",
    "element_count",
    "kind_name",
]


@dataclass(frozen=True)
class Loc:
    """A 1-based line and column in the source text."""

    line: int
    column: int


def _loc() -> Loc | None:
    # Positions never take part in equality, hashing or repr.
    return field(default=None, compare=False, repr=False)  # type: ignore[return-value]


def _locs() -> tuple[Loc, ...]:
    return field(default=(), compare=False, repr=False)  # type: ignore[return-value]


@dataclass(frozen=True)
class Float:
    """A float attribute value, kept as spelled (`0.5`, `1e-05`, `-3.25E+2`)."""

    text: str

    @property
    def value(self) -> float:
        return float(self.text)

    @classmethod
    def from_value(cls, value: float) -> Float:
        """The spelling the reference exporter uses (Python's `str` of the float)."""
        text = repr(float(value))
        if not math.isfinite(value):
            raise ValueError(f"{text} has no spelling as a .ne float")
        return cls(text)


# An attribute value: an int, a float, an identifier (plain `str`), or a list of values.
AttrValue = Union[int, Float, str, tuple["AttrValue", ...]]


@dataclass(frozen=True)
class Comment:
    """A `//` comment line; `text` is what follows `//`, without trailing blanks.

    `blank_lines` is how many blank lines precede it in the file it came from (presentation,
    like `loc`); None, as in a tree built by hand, means the reference exporter's spacing
    (one blank line before a comment that follows anything but another comment).
    """

    text: str
    loc: Loc | None = _loc()
    blank_lines: int | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ConstTensor:
    """A constant: `let NAME: Tensor<DTYPE> = {shape=[...], data=0xHEX} ;`."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: bytes
    # Case of the hex digits, so the text prints back as it came. Presentation only, like the
    # positions: it does not take part in ==.
    hex_upper: bool = field(default=False, compare=False)
    loc: Loc | None = _loc()
    data_loc: Loc | None = _loc()

    def to_numpy(self) -> npt.NDArray[np.generic]:
        """The data as a read-only array of the declared dtype and shape (a view, no copy)."""
        return np.frombuffer(self.data, dtype=numpy_dtype(self.dtype)).reshape(self.shape)

    @classmethod
    def from_numpy(cls, name: str, array: npt.ArrayLike, dtype: str | None = None) -> ConstTensor:
        """A constant holding `array`, stored little-endian as `dtype` (default: from the array)."""
        arr = np.asarray(array)
        dtype = dtype if dtype is not None else dtype_name(arr.dtype)
        data = np.ascontiguousarray(arr, dtype=numpy_dtype(dtype)).tobytes()
        return cls(name, dtype, tuple(int(d) for d in arr.shape), data)


@dataclass(frozen=True)
class WordTensor:
    """A constant printed as 32-bit words: `let NAME: Tensor = {type=Any, shape:NC=[...], data=[0x0A0B0C0D, ...]};`.

    `data` is the bytes in file order (word `0x0A0B0C0D` is bytes 0a 0b 0c 0d). The reference
    prints node scale tensors (`<node>_scale_k`) this way.
    """

    name: str
    type_name: str
    layout: str
    shape: tuple[int, ...]
    data: bytes
    hex_upper: bool = field(default=True, compare=False)  # the reference prints words in uppercase
    loc: Loc | None = _loc()
    data_loc: Loc | None = _loc()


@dataclass(frozen=True)
class InitTensor:
    """A tensor computed by an init node: `let NAME: Tensor<Any>  = {shape:CCDD=[...]};`."""

    name: str
    dtype: str
    layout: str
    shape: tuple[int, ...]
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class RuntimeTensor:
    """A tensor computed at run time: `let NAME: Tensor<Any> = {shape:BCMD=[-1, ...]};`."""

    name: str
    dtype: str
    layout: str
    shape: tuple[int, ...]
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class MemTensor:
    """A node's input cache: `let NAME: mem Tensor = {type=Any, shape:BCMD=[-1, ...]};`."""

    name: str
    type_name: str
    layout: str
    shape: tuple[int, ...]
    loc: Loc | None = _loc()


@dataclass(frozen=True)
class InitNode:
    """A node run once at init: `let NAME: init Node = { op_type=.., attr=[..], in_s=[..], out_s=[..] };`.

    `attrs` keeps the file's order as (name, value) pairs; `attr_dict()` gives a dict.
    """

    name: str
    op_type: str
    attrs: tuple[tuple[str, AttrValue], ...]
    in_s: tuple[str, ...]
    out_s: tuple[str, ...]
    loc: Loc | None = _loc()
    attr_locs: tuple[Loc, ...] = _locs()
    in_locs: tuple[Loc, ...] = _locs()
    out_locs: tuple[Loc, ...] = _locs()

    def attr_dict(self) -> dict[str, AttrValue]:
        return dict(self.attrs)


@dataclass(frozen=True)
class RuntimeNode:
    """A node run at every step: like `InitNode`, plus `mem_s`, its input caches."""

    name: str
    op_type: str
    attrs: tuple[tuple[str, AttrValue], ...]
    in_s: tuple[str, ...]
    mem_s: tuple[str, ...]
    out_s: tuple[str, ...]
    loc: Loc | None = _loc()
    attr_locs: tuple[Loc, ...] = _locs()
    in_locs: tuple[Loc, ...] = _locs()
    mem_locs: tuple[Loc, ...] = _locs()
    out_locs: tuple[Loc, ...] = _locs()

    def attr_dict(self) -> dict[str, AttrValue]:
        return dict(self.attrs)


@dataclass(frozen=True)
class Function:
    """`func init(){ A.do(); B.do(); }`: the nodes `name` runs, in order."""

    name: str
    calls: tuple[str, ...]
    loc: Loc | None = _loc()
    call_locs: tuple[Loc, ...] = _locs()


TensorDecl = Union[ConstTensor, WordTensor, InitTensor, RuntimeTensor, MemTensor]
NodeDecl = Union[InitNode, RuntimeNode]
Declaration = Union[TensorDecl, NodeDecl]
Item = Union[Comment, Declaration, Function]

DECLARATION_TYPES = (
    ConstTensor,
    WordTensor,
    InitTensor,
    RuntimeTensor,
    MemTensor,
    InitNode,
    RuntimeNode,
)


@dataclass(frozen=True)
class Program:
    """A whole `.ne` file: comments, declarations and functions in file order.

    `bom`: the file starts with a byte order mark (U+FEFF), which the printer writes back so
    that such a file round-trips byte for byte (presentation: not part of ==).
    """

    items: tuple[Item, ...]
    bom: bool = field(default=False, compare=False)

    @cached_property
    def declarations(self) -> tuple[Declaration, ...]:
        return tuple(item for item in self.items if isinstance(item, DECLARATION_TYPES))

    @cached_property
    def functions(self) -> tuple[Function, ...]:
        return tuple(item for item in self.items if isinstance(item, Function))

    @cached_property
    def _by_name(self) -> dict[str, Declaration]:
        table: dict[str, Declaration] = {}
        for decl in self.declarations:
            table.setdefault(decl.name, decl)  # the first wins, as in the duplicate check
        return table

    def lookup(self, name: str) -> Declaration | None:
        """The declaration called `name`, or None."""
        return self._by_name.get(name)

    def function(self, name: str) -> Function | None:
        """The first `func NAME(){...}`, or None."""
        return next((f for f in self.functions if f.name == name), None)

    @property
    def init_calls(self) -> tuple[str, ...]:
        """Node names `func init` runs, in order (empty when there is no `func init`)."""
        func = self.function("init")
        return func.calls if func is not None else ()

    @property
    def runtime_calls(self) -> tuple[str, ...]:
        """Node names `func runtime` runs, in order."""
        func = self.function("runtime")
        return func.calls if func is not None else ()


# dtype name as spelled in `.ne` files -> NumPy dtype string (explicitly little-endian).
DTYPES: dict[str, str] = {
    "little_float_16": "<f2",
    "little_float_32": "<f4",
    "little_float_64": "<f8",
    "int8_t": "i1",
    "int16_t": "<i2",
    "int32_t": "<i4",
    "int64_t": "<i8",
    "uint8_t": "u1",
    "uint16_t": "<u2",
    "uint32_t": "<u4",
    "uint64_t": "<u8",
}


def numpy_dtype(name: str) -> np.dtype[np.generic]:
    """NumPy dtype of a `.ne` dtype name (`little_float_32` -> `<f4`); KeyError if unknown."""
    return np.dtype(DTYPES[name])


def dtype_size(name: str) -> int:
    """Bytes per element of a `.ne` dtype name."""
    return numpy_dtype(name).itemsize


def dtype_name(dtype: npt.DTypeLike) -> str:
    """The `.ne` dtype name of a NumPy dtype (either byte order); KeyError if none."""
    wanted = np.dtype(dtype).newbyteorder("<")
    for name, spec in DTYPES.items():
        if np.dtype(spec) == wanted:
            return name
    raise KeyError(f"no .ne dtype for {np.dtype(dtype)}")


def element_count(shape: tuple[int, ...]) -> int:
    """Number of elements of a static shape (1 for the scalar shape `[]`)."""
    if any(d < 0 for d in shape):
        raise ValueError(f"shape {list(shape)} is not static")
    return math.prod(shape)


def kind_name(decl: Declaration | Function) -> str:
    """A reader's name for the kind of a declaration, for messages."""
    return _KIND_NAMES[type(decl)]


_KIND_NAMES: dict[type, str] = {
    ConstTensor: "a constant tensor",
    WordTensor: "a constant tensor",
    InitTensor: "an init tensor",
    RuntimeTensor: "a runtime tensor",
    MemTensor: "a mem tensor",
    InitNode: "an init node",
    RuntimeNode: "a runtime node",
    Function: "a function",
}
