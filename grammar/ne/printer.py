"""Print a `syntax_tree.Program` as NanoEngine text (`.ne`), in the reference exporter's layout.

The layout is NanoEngine-PyTorch's, quirks included, so that a file it wrote parses and
prints back byte for byte:

- constants end with ` ;` (space before the semicolon), everything else with `;`;
- init tensors have two spaces before `=` (`Tensor<Any>  = `), runtime tensors one;
- node blocks put one field per line, indented by four spaces, and close with `};`;
- functions are `func init(){`, one `    NAME.do();` per line, and `}`;
- a comment line is preceded by a blank line, except at the start of the file or right
  after another comment (the exporter prints `"\\n// section"`); a parsed comment instead
  keeps the blank lines it had (`Comment.blank_lines`), so a comment right after a
  declaration prints back right after it;
- a program read from a file that starts with a byte order mark prints one (`Program.bom`),
  so that the file round-trips byte for byte.

Hex data keeps the case it was read with (`hex_upper`). Names, layouts, float spellings and
the int64 range of integers are checked, and a runtime tensor's layout must start with `B` (an init tensor's must not), because
a tree built by hand could otherwise print text that does not parse back to the same tree;
such trees raise `ValueError`.
"""

from __future__ import annotations

import numbers
import re

from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    Comment,
    ConstTensor,
    Float,
    Function,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)

__all__ = ["print_nanoengine", "BOM_ENTRY", "comment_entry", "comment_from_entry"]

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LAYOUT = re.compile(r"[A-Za-z]*")
_FLOAT = re.compile(
    r"-?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
)


def _name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid .ne name")
    return name


def _layout(layout: str) -> str:
    if not isinstance(layout, str) or not _LAYOUT.fullmatch(layout):
        raise ValueError(f"{layout!r} is not a valid .ne layout")
    return layout


def _int64(value: int) -> str:
    # The parser reads int64 dimensions and attribute integers only.
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit int64, which .ne integers must")
    return str(value)


def _ints(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(_int64(v) for v in values) + "]"


def _names(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_name(v) for v in values) + "]"


def _value(value: AttrValue) -> str:
    if isinstance(value, bool):  # bool is an int subclass but has no .ne spelling
        raise ValueError(f"{value!r} is not a .ne attribute value")
    if isinstance(value, numbers.Integral):  # also NumPy integers, for trees built from arrays
        return _int64(int(value))
    if isinstance(value, Float):
        if not _FLOAT.fullmatch(value.text):
            raise ValueError(f"{value.text!r} is not a .ne float (it needs a '.' or an exponent)")
        return value.text
    if isinstance(value, str):
        return _name(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise ValueError(f"{value!r} is not a .ne attribute value")


def _attrs(attrs: tuple[tuple[str, AttrValue], ...]) -> str:
    return "[" + ", ".join(f"{_name(k)}={_value(v)}" for k, v in attrs) + "]"


def _hex(data: bytes, upper: bool) -> str:
    digits = data.hex()
    return digits.upper() if upper else digits


def _words(data: bytes, upper: bool) -> str:
    if len(data) % 4:
        raise ValueError(f"word data must be a multiple of 4 bytes, got {len(data)}")
    return (
        "[" + ", ".join("0x" + _hex(data[i : i + 4], upper) for i in range(0, len(data), 4)) + "]"
    )


def _item(item: Item, out: list[str]) -> None:
    """Append the text of one item (with its line break) to `out`."""
    if isinstance(item, ConstTensor):
        # Three pieces instead of one f-string: the hex can be 100 MB, copy it only once.
        out.append(
            f"let {_name(item.name)}: Tensor<{_name(item.dtype)}> = {{shape={_ints(item.shape)}, data=0x"
        )
        out.append(_hex(item.data, item.hex_upper))
        out.append("} ;\n")
    elif isinstance(item, InitTensor):
        if item.layout.startswith("B"):  # it would read back as a runtime tensor
            raise ValueError(
                f"init tensor {item.name!r} has layout {item.layout!r}; a B... layout means a runtime tensor"
            )
        out.append(
            f"let {_name(item.name)}: Tensor<{_name(item.dtype)}>  = "
            f"{{shape:{_layout(item.layout)}={_ints(item.shape)}}};\n"
        )
    elif isinstance(item, RuntimeTensor):
        if not item.layout.startswith("B"):  # it would read back as an init tensor
            raise ValueError(
                f"runtime tensor {item.name!r} has layout {item.layout!r}; it must start with B (batch)"
            )
        out.append(
            f"let {_name(item.name)}: Tensor<{_name(item.dtype)}> = "
            f"{{shape:{_layout(item.layout)}={_ints(item.shape)}}};\n"
        )
    elif isinstance(item, MemTensor):
        out.append(
            f"let {_name(item.name)}: mem Tensor = "
            f"{{type={_name(item.type_name)}, shape:{_layout(item.layout)}={_ints(item.shape)}}};\n"
        )
    elif isinstance(item, WordTensor):
        out.append(
            f"let {_name(item.name)}: Tensor = {{type={_name(item.type_name)}, "
            f"shape:{_layout(item.layout)}={_ints(item.shape)}, data={_words(item.data, item.hex_upper)}}};\n"
        )
    elif isinstance(item, InitNode):
        out.append(
            f"let {_name(item.name)}: init Node = {{\n"
            f"    op_type={_name(item.op_type)},\n"
            f"    attr={_attrs(item.attrs)},\n"
            f"    in_s={_names(item.in_s)},\n"
            f"    out_s={_names(item.out_s)}\n"
            "};\n"
        )
    elif isinstance(item, RuntimeNode):
        out.append(
            f"let {_name(item.name)}: Node = {{\n"
            f"    op_type={_name(item.op_type)},\n"
            f"    attr={_attrs(item.attrs)},\n"
            f"    in_s={_names(item.in_s)},\n"
            f"    mem_s={_names(item.mem_s)},\n"
            f"    out_s={_names(item.out_s)}\n"
            "};\n"
        )
    elif isinstance(item, Function):
        out.append(f"func {_name(item.name)}(){{\n")
        out.extend(f"    {_name(call)}.do();\n" for call in item.calls)
        out.append("}\n")
    else:
        raise ValueError(f"{item!r} is not a .ne program item")


def _reference_blank_lines(previous: Item | None) -> int:
    """Blank lines the reference exporter puts before a comment that follows `previous`."""
    return 0 if previous is None or isinstance(previous, Comment) else 1


# How the `ne.items` attribute of an imported module (see `import_nq`) records what the
# printer needs beyond the items themselves, so that IR -> text is byte-exact too:
BOM_ENTRY = "\ufeff"
"""A first entry that is the byte order mark: the file started with one (`Program.bom`)."""
_SPACED_COMMENT = re.compile(r"([0-9]+)(//.*)", re.DOTALL)


def comment_entry(comment: Comment, previous: Item | None) -> str:
    """The `ne.items` entry of a comment that follows `previous`: `//text` when it has the
    reference spacing (or no recorded spacing), else `<k>//text` with its k blank lines."""
    k = comment.blank_lines
    if k is None or k == _reference_blank_lines(previous):
        return "//" + comment.text
    return f"{k}//{comment.text}"


def comment_from_entry(entry: str) -> Comment | None:
    """The comment an `ne.items` entry stands for (see `comment_entry`), or None."""
    if entry.startswith("//"):
        return Comment(entry[2:])
    spaced = _SPACED_COMMENT.fullmatch(entry)
    if spaced is not None and len(spaced.group(1)) <= 9:
        return Comment(spaced.group(2)[2:], blank_lines=int(spaced.group(1)))
    return None


def print_nanoengine(program: Program) -> str:
    """The `.ne` text of `program`, in the reference exporter's exact layout."""
    out: list[str] = ["\ufeff"] if program.bom else []
    previous: Item | None = None
    for item in program.items:
        if isinstance(item, Comment):
            if "\n" in item.text or "\r" in item.text:
                raise ValueError(f"comment text {item.text!r} spans lines")
            if item.blank_lines is not None:
                if (
                    isinstance(item.blank_lines, bool)
                    or not isinstance(item.blank_lines, int)
                    or item.blank_lines < 0
                ):
                    raise ValueError(f"comment {item.text!r} has {item.blank_lines!r} blank lines")
                out.append("\n" * item.blank_lines)
            else:
                out.append("\n" * _reference_blank_lines(previous))
            out.append(f"//{item.text}\n")
        else:
            _item(item, out)
        previous = item
    return "".join(out)
