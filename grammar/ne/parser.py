"""Parse NanoEngine text (`.ne`) into the plain syntax tree of `syntax_tree`.

The grammar is `nanoengine.lark`, run by Lark's LALR parser with the contextual lexer and an
inline transformer (`Lark(..., transformer=...)`): the tree is built while parsing, with no
intermediate Lark `Tree`, which keeps large programs fast. A constant's data is one `HEX`
token, decoded with `bytes.fromhex` a few megabytes at a time.

Large blobs take a shortcut, because Lark's regex lexer scans hex at half the speed of
`bytes.fromhex` and copies every token twice: before parsing, `_lift_blobs` finds each
`data=0x<digits>} ;` that ends its line, decodes the digits (which also validates them), and
cuts them out of the text the lexer sees, leaving the `HEX` token `0x`; the transformer
puts the decoded bytes back. Lines and the columns of every position the tree keeps are
unchanged (nothing that carries a position follows a blob on its line). Anything unusual
(spacing, odd length, a comment) stays in the text for the lexer, and when the shortened
text fails to parse, the full text is parsed again so that errors point at the real input.

Before any of this, `fast` tries to read the whole text with regular expressions (the
common forms, about ten times faster than Lark on node-heavy programs); it gives the same tree
or gives up, and then the text is parsed as described here, so errors are always the grammar's.

`//` comments are ignored by the grammar and collected by a lexer callback; afterwards each
comment is placed, by position, between the items it falls between (a comment inside a
declaration moves after it), with the number of blank lines before it, so that it prints back
where it was. Every error, Lark's or ours, leaves as a `NanoEngineError`.

Hostile input. Integers are range-checked where they are read, before any other code sees
them: a dimension fits int64 (the checker then asks for -1 or more), an attribute integer fits
int64, and a shape's dimensions multiply to at most 2^63 - 1 elements; a literal too long for
Python's int-str conversion (4300 digits) is the same located error, never a `ValueError`. A
text may start with a byte order mark (U+FEFF): it is not part of line 1 (columns count from
after it), and the `Program` records it (`Program.bom`) so that the printer writes it back
and the file round-trips byte for byte (through the nq-level IR too, in `ne.items`; the hw
level keeps no file layout, so its export has no mark).
`decode_nanoengine` turns file bytes into text with the same located errors for bad UTF-8.
"""

from __future__ import annotations

import os
import re
import threading
from functools import lru_cache
from typing import Any, NamedTuple

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput
from lark.lexer import TerminalDef
from nanoir.grammar.ne.check import check_program
from nanoir.grammar.ne.errors import (
    NanoEngineInternalError,
    NanoEngineSyntaxError,
    syntax_error_from_lark,
)
from nanoir.grammar.ne.fast import fast_items, gc_paused
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    Comment,
    ConstTensor,
    Float,
    Function,
    InitNode,
    InitTensor,
    Item,
    Loc,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)

__all__ = [
    "parse_nanoengine",
    "parse_nanoengine_file",
    "decode_nanoengine",
    "INT64_MIN",
    "INT64_MAX",
]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
# Decimal digits of INT64_MAX and of -INT64_MIN: a longer literal (leading zeros aside) is out
# of range without converting it, which also keeps clear of Python's 4300-digit int-str limit.
_INT64_DIGITS = 19
BOM = "\ufeff"

# Hex digits decoded per bytes.fromhex call; even, so every chunk holds whole bytes.
_HEX_CHUNK = 1 << 22
# Blobs with fewer digits than this go through the lexer like any other token.
_BLOB_MIN_DIGITS = 1 << 16
# What may follow a lifted blob: `} ;` and the end of the line.
_BLOB_TAIL = re.compile(r"\}[ \t]*;[ \t\r]*(?:\n|\Z)")
# Deeper attribute lists than this are rejected: the printer and == on tuples recurse.
MAX_LIST_DEPTH = 64
_FIRST_HEX_LETTER = re.compile(r"[a-fA-F]")
# What a bug in this module could raise (UnicodeError is a ValueError); reported, not leaked.
_BUG_ERRORS = (
    ValueError,
    LookupError,
    TypeError,
    AttributeError,
    ArithmeticError,
    AssertionError,
    RecursionError,
)


class _LocatedError(Exception):
    """Raised inside the transformer, which knows the token but not the file name."""

    def __init__(self, message: str, token: Token) -> None:
        super().__init__(message)
        self.message = message
        self.line = token.line or 1
        self.column = token.column or 1


def _loc(token: Token) -> Loc:
    return Loc(token.line or 1, token.column or 1)


def _shown_literal(token: Token) -> str:
    """A literal as the "found" of a message: itself, or its length when it is long."""
    text = str(token)
    if len(text) <= 24:
        return text
    digits = len(text) - text.startswith("-")
    return f"an integer of {digits} digits"


def _int64(token: Token) -> int | None:
    """The value of an `INT` token, or None when it does not fit int64 (the sign of the
    literal then says on which side)."""
    text = str(token)
    negative = text.startswith("-")
    significant = (text[1:] if negative else text).lstrip("0")
    if len(significant) > _INT64_DIGITS:
        return None
    value = -int(significant or "0") if negative else int(significant or "0")
    return value if INT64_MIN <= value <= INT64_MAX else None


def _dimension(token: Token) -> int:
    value = _int64(token)
    if value is None:
        # Below -1 within int64 is the checker's to report (with the shape and its kind).
        wanted = (
            "a dimension of -1 or more"
            if token.startswith("-")
            else f"a dimension of at most {INT64_MAX}"
        )
        raise _LocatedError(f"expected {wanted}, found {_shown_literal(token)}", token)
    return value


def _attribute_int(token: Token) -> int:
    value = _int64(token)
    if value is None:
        raise _LocatedError(
            f"expected an integer from {INT64_MIN} to {INT64_MAX} (int64), found {_shown_literal(token)}",
            token,
        )
    return value


def _hex_is_upper(
    digits: str, start: int = 0, end: int | None = None, default: bool = False
) -> bool:
    # The first letter decides: the reference prints all-lowercase (`bytes.hex`) or
    # all-uppercase (`:02X`) hex, and scanning 100 MB for mixed case would cost a pass.
    # Without letters the case is invisible; `default` is then the reference's choice.
    letter = _FIRST_HEX_LETTER.search(digits, start, len(digits) if end is None else end)
    return letter.group(0).isupper() if letter is not None else default


def _fromhex(text: str, start: int, end: int) -> bytes:
    """`bytes.fromhex(text[start:end])`, without a copy of the whole slice.

    Chunks start small and double: when the digits are not hex after all, the work done
    before the ValueError is proportional to where the bad character is, not to the slice.
    """
    if end - start <= 16:
        return bytes.fromhex(text[start:end])
    parts: list[bytes] = []
    size = 16
    while start < end:
        stop = min(start + size, end)
        parts.append(bytes.fromhex(text[start:stop]))
        start = stop
        size = min(2 * size, _HEX_CHUNK)
    return b"".join(parts)


def _decode_hex(token: Token) -> tuple[bytes, bool]:
    """The bytes and case of a `HEX` token (`0x` + digits, checked by the lexer)."""
    lifted = _state.blobs.get(token.start_pos) if token == "0x" else None
    if lifted is not None:
        return lifted
    ndigits = len(token) - 2
    if ndigits % 2:
        raise _LocatedError(f"hex data has an odd number of digits ({ndigits})", token)
    return _fromhex(token, 2, len(token)), _hex_is_upper(token)


def _lift_blobs(text: str) -> tuple[str, dict[int, tuple[bytes, bool]]]:
    """Cut large `data=0x<digits>} ;` blobs out of `text`, decoded (see the module docstring).

    Returns the shortened text and, keyed by the offset of each emptied `0x` in it, the
    blob's bytes and case. Does nothing when no blob qualifies.
    """
    pieces: list[str] = []
    blobs: dict[int, tuple[bytes, bool]] = {}
    pos = 0  # where to search next; never inside a comment
    copied = 0  # text[copied:] is not in `pieces` yet
    removed = 0  # digits cut so far: an offset after them moves back by this much
    end = -1  # the first "}" after the current candidate; shared by candidates before it
    # Linear in the text whatever it holds: searches never restart before a position they
    # have passed, and a failed decode stops at the first non-hex character, which is at
    # the latest the next candidate's "data=" (see _fromhex).
    while True:
        found = text.find("data=0x", pos)
        if found < 0:
            break
        comment = text.find("//", pos, found)
        if comment >= 0:  # `found` may be inside that comment: go on after it
            line_end = text.find("\n", comment)
            if line_end < 0:
                break
            pos = line_end + 1
            continue
        start = found + len("data=0x")
        if start > end:
            end = text.find("}", start)
            if end < 0:
                break
        pos = start  # if this blob is not lifted, the lexer will see it; search on from here
        if end - start < _BLOB_MIN_DIGITS or not _BLOB_TAIL.match(text, end):
            continue
        try:
            data = _fromhex(text, start, end)
        except ValueError:  # not hex, or odd length: the lexer will report it
            continue
        if 2 * len(data) != end - start:  # bytes.fromhex skips whitespace; the grammar does not
            continue
        pieces.append(text[copied:start])
        blobs[start - 2 - removed] = (data, _hex_is_upper(text, start, end))
        copied = pos = end
        removed += end - start
    if not blobs:
        return text, blobs
    pieces.append(text[copied:])
    return "".join(pieces), blobs


def _nested_deeper_than(value: AttrValue, limit: int) -> bool:
    # Iterative on purpose: a recursive walk is exactly what deep nesting would break.
    stack: list[tuple[AttrValue, int]] = [(value, 0)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, tuple):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in current)
    return False


class _Words(NamedTuple):
    data: bytes
    upper: bool
    loc: Loc | None


def _names_and_locs(tokens: tuple[Token, ...]) -> tuple[tuple[str, ...], tuple[Loc, ...]]:
    return tuple(str(t) for t in tokens), tuple(_loc(t) for t in tokens)


@v_args(inline=True)
class _ToAst(Transformer[Token, Any]):
    """Builds `syntax_tree` nodes; methods are named after the rules of nanoengine.lark."""

    # -- lists and scalars -------------------------------------------------------------
    def shape(self, *dims: Token) -> tuple[int, ...]:
        shape = tuple(_dimension(d) for d in dims)
        # NumPy (and any allocation) needs the element count in int64, also for an empty
        # tensor: zero and -1 (batch) dimensions do not count.
        count = 1
        for value, token in zip(shape, dims):
            if value > 0:
                count *= value
                if count > INT64_MAX:
                    raise _LocatedError(
                        f"expected a shape of at most {INT64_MAX} elements (not counting 0 and -1 dimensions), "
                        "found more at this dimension",
                        token,
                    )
        return shape

    def names(self, *names: Token) -> tuple[Token, ...]:
        return names

    def layout(self, *letters: Token) -> str:
        return str(letters[0]) if letters else ""

    def words(self, *words: Token) -> _Words:
        for word in words:
            if len(word) != 10:
                raise _LocatedError(f"a data word has 8 hex digits, found {len(word) - 2}", word)
        data = b"".join(bytes.fromhex(word[2:]) for word in words)
        upper = _hex_is_upper("".join(words), default=True)
        return _Words(data, upper, _loc(words[0]) if words else None)

    # -- attribute values ----------------------------------------------------------------
    def int_value(self, token: Token) -> int:
        return _attribute_int(token)

    def float_value(self, token: Token) -> Float:
        return Float(str(token))

    def name_value(self, token: Token) -> str:
        return str(token)

    def list_value(self, *values: AttrValue) -> tuple[AttrValue, ...]:
        return values

    def attribute(self, key: Token, value: AttrValue) -> tuple[Token, AttrValue]:
        if _nested_deeper_than(value, MAX_LIST_DEPTH):
            raise _LocatedError(
                f"attribute '{key}' has lists nested deeper than {MAX_LIST_DEPTH}", key
            )
        return key, value

    def attrs(self, *attributes: tuple[Token, AttrValue]) -> tuple[tuple[Token, AttrValue], ...]:
        return attributes

    def op_type(self, name: Token) -> str:
        return str(name)

    def in_s(self, names: tuple[Token, ...]) -> tuple[Token, ...]:
        return names

    def mem_s(self, names: tuple[Token, ...]) -> tuple[Token, ...]:
        return names

    def out_s(self, names: tuple[Token, ...]) -> tuple[Token, ...]:
        return names

    # -- declarations --------------------------------------------------------------------
    def const_tensor(
        self, name: Token, dtype: Token, shape: tuple[int, ...], hex_token: Token
    ) -> ConstTensor:
        data, upper = _decode_hex(hex_token)
        return ConstTensor(
            str(name), str(dtype), shape, data, upper, loc=_loc(name), data_loc=_loc(hex_token)
        )

    def word_tensor(
        self, name: Token, type_name: Token, layout: str, shape: tuple[int, ...], words: _Words
    ) -> WordTensor:
        return WordTensor(
            str(name),
            str(type_name),
            layout,
            shape,
            words.data,
            words.upper,
            loc=_loc(name),
            data_loc=words.loc or _loc(name),
        )

    def computed_tensor(
        self, name: Token, dtype: Token, layout: str, shape: tuple[int, ...]
    ) -> InitTensor | RuntimeTensor:
        # The reference gives runtime tensors a B(atch)... layout and init tensors C/D ones.
        cls = RuntimeTensor if layout.startswith("B") else InitTensor
        return cls(str(name), str(dtype), layout, shape, loc=_loc(name))

    def mem_tensor(
        self, name: Token, type_name: Token, layout: str, shape: tuple[int, ...]
    ) -> MemTensor:
        return MemTensor(str(name), str(type_name), layout, shape, loc=_loc(name))

    def init_node(
        self,
        name: Token,
        op_type: str,
        attrs: tuple[tuple[Token, AttrValue], ...],
        ins: tuple[Token, ...],
        outs: tuple[Token, ...],
    ) -> InitNode:
        in_s, in_locs = _names_and_locs(ins)
        out_s, out_locs = _names_and_locs(outs)
        return InitNode(
            str(name),
            op_type,
            tuple((str(k), v) for k, v in attrs),
            in_s,
            out_s,
            loc=_loc(name),
            attr_locs=tuple(_loc(k) for k, _ in attrs),
            in_locs=in_locs,
            out_locs=out_locs,
        )

    def runtime_node(
        self,
        name: Token,
        op_type: str,
        attrs: tuple[tuple[Token, AttrValue], ...],
        ins: tuple[Token, ...],
        mems: tuple[Token, ...],
        outs: tuple[Token, ...],
    ) -> RuntimeNode:
        in_s, in_locs = _names_and_locs(ins)
        mem_s, mem_locs = _names_and_locs(mems)
        out_s, out_locs = _names_and_locs(outs)
        return RuntimeNode(
            str(name),
            op_type,
            tuple((str(k), v) for k, v in attrs),
            in_s,
            mem_s,
            out_s,
            loc=_loc(name),
            attr_locs=tuple(_loc(k) for k, _ in attrs),
            in_locs=in_locs,
            mem_locs=mem_locs,
            out_locs=out_locs,
        )

    def call(self, node: Token) -> Token:
        return node

    def function(self, name: Token, *calls: Token) -> Function:
        names, locs = _names_and_locs(calls)
        return Function(str(name), names, loc=_loc(name), call_locs=locs)

    def start(self, *items: Item) -> tuple[Item, ...]:
        return items


class _ParseState(threading.local):
    """State of the parse in progress; per thread, because the parser object is shared."""

    def __init__(self) -> None:
        self.comments: list[Token] = []
        self.blobs: dict[int, tuple[bytes, bool]] = {}


_state = _ParseState()


def _collect_comment(token: Token) -> None:
    _state.comments.append(token)


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark.open(
        "nanoengine.lark",
        rel_to=__file__,
        parser="lalr",
        lexer="contextual",
        transformer=_ToAst(),
        maybe_placeholders=False,
        lexer_callbacks={"COMMENT": _collect_comment},
    )


@lru_cache(maxsize=1)
def _terminals() -> dict[str, TerminalDef]:
    return {term.name: term for term in _parser().terminals}


def _item_loc(item: Item) -> tuple[int, int]:
    loc = item.loc
    return (loc.line, loc.column) if loc is not None else (0, 0)


def _merge_comments(items: tuple[Item, ...], comments: list[Token], text: str) -> tuple[Item, ...]:
    """Interleave comments with items by position (items are placed by their name token)."""
    if not comments:
        return items
    merged: list[Item] = []
    ci = 0
    for item in items:
        where = _item_loc(item)
        while ci < len(comments) and (comments[ci].line, comments[ci].column) < where:
            merged.append(_comment(comments[ci], text))
            ci += 1
        merged.append(item)
    merged.extend(_comment(c, text) for c in comments[ci:])
    return tuple(merged)


_BLANKS = " \t\f\r\n"


def _blank_lines_before(text: str, pos: int) -> int | None:
    """How many blank lines come right before the line of `text[pos]`; None when other
    text precedes it on its line (the printer then gives it the reference spacing)."""
    start = pos
    while start > 0 and text[start - 1] in _BLANKS:
        start -= 1
    breaks = text.count("\n", start, pos)
    if start == 0:
        return breaks
    # After other text, the first line break only ends that text's line.
    return breaks - 1 if breaks else None


def _comment(token: Token, text: str) -> Comment:
    pos = token.start_pos
    blank_lines = _blank_lines_before(text, pos) if pos is not None else None
    return Comment(str(token)[2:].rstrip(), loc=_loc(token), blank_lines=blank_lines)


def _parse_items(text: str, blobs: dict[int, tuple[bytes, bool]]) -> tuple[Item, ...]:
    _state.comments = []
    _state.blobs = blobs
    try:
        items: tuple[Item, ...] = _parser().parse(text)  # type: ignore[assignment]  # start() returns it
        return _merge_comments(items, _state.comments, text)
    finally:
        _state.comments = []
        _state.blobs = {}


def _items(text: str) -> tuple[Item, ...]:
    # The common forms first (fast); anything else, errors included, goes to Lark.
    items = fast_items(text, _fromhex, _blank_lines_before)
    if items is not None:
        return items
    lean_text, blobs = _lift_blobs(text)
    if blobs:
        try:
            return _parse_items(lean_text, blobs)
        except (UnexpectedInput, _LocatedError):
            pass  # parse the full text again, so the error shows the real input
        del lean_text
    return _parse_items(text, {})


def parse_nanoengine(text: str, filename: str = "<string>", check: bool = True) -> Program:
    """Parse `.ne` text into a `Program`; with `check`, also run `check_program` on it.

    Raises `NanoEngineSyntaxError` or `NanoEngineSemanticError` (both `NanoEngineError`),
    located at `filename:line:col`; no other exception escapes for any input string. A
    leading byte order mark is skipped (positions count from after it) and kept as
    `Program.bom`.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_nanoengine expects str, got {type(text).__name__}")
    # A byte order mark is not part of line 1: positions count from after it.
    bom = text.startswith(BOM)
    if bom:
        text = text[1:]
    try:
        with gc_paused():
            program = Program(_items(text), bom=bom)
    except UnexpectedInput as err:
        raise syntax_error_from_lark(err, text, filename, _terminals()) from None
    except _LocatedError as err:
        raise NanoEngineSyntaxError(err.message, filename, err.line, err.column, text) from None
    except _BUG_ERRORS as err:
        # Only a bug gets here; still report it in the one-line format, never as a traceback.
        raise NanoEngineInternalError(
            f"internal parser error: {type(err).__name__}: {err}", filename, 1, 1
        ) from err
    if check:
        try:
            with gc_paused():
                check_program(program, filename, text)
        except _BUG_ERRORS as err:
            raise NanoEngineInternalError(
                f"internal checker error: {type(err).__name__}: {err}", filename, 1, 1
            ) from err
    return program


def decode_nanoengine(raw: bytes, filename: str = "<string>") -> str:
    """The text of `.ne` file contents (UTF-8, a leading byte order mark kept for
    `parse_nanoengine`); bad UTF-8 is a `NanoEngineSyntaxError` at the first bad byte, with
    the line shown (bad bytes as U+FFFD) and a caret under it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        before = raw[: err.start].decode("utf-8")  # the first error: everything before is valid
        shown = raw.decode("utf-8", errors="replace")
        if before.startswith(BOM):  # columns count from after it, as in parse_nanoengine
            before, shown = before[1:], shown[1:]
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        raise NanoEngineSyntaxError(
            f"expected UTF-8 text, found invalid byte 0x{raw[err.start]:02x}",
            filename,
            line,
            column,
            shown,
        ) from None


def parse_nanoengine_file(path: str | os.PathLike[str], check: bool = True) -> Program:
    """Read a `.ne` file (UTF-8) and parse it; bad encoding is a `NanoEngineSyntaxError`."""
    filename = os.fspath(path)
    with open(filename, "rb") as f:
        raw = f.read()
    return parse_nanoengine(decode_nanoengine(raw, filename), filename, check=check)
