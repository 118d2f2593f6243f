"""A fast path for parsing `.ne` text: the common forms, read with regular expressions.

Lark's LALR parser costs about 15 µs per token in Python, and a node-heavy program has 60-100
tokens per node (the node, its output tensor and its caches), so a 200k-node file took minutes.
This module reads a whole program with one compiled regular expression per declaration kind
(the grammar's tokens and spacing, written out in `nanoengine.lark`'s terms), and builds
exactly the tree the Lark path builds: the same `syntax_tree` items, the same positions (`Loc`:
line, and column counted from the last line break, as Lark's lexer counts), the same hex case
and the same comments with their blank lines.

It only ever accepts text the grammar accepts, and gives up (returns None) on anything it
does not recognize: a comment inside a declaration, an integer literal of 19 characters or
more, lists nested deeper than `_MAX_DEPTH`, an odd number of hex digits, a data word that is
not 8 digits, a shape of more than 2^63 - 1 elements, any syntax error. The caller then
parses the text with Lark, so every error message stays the grammar's, located where the
grammar locates it. `tests/grammar/test_ne_fast_path.py` checks, on generated and mutated
texts, that whenever this path gives a tree, Lark gives the same tree with the same
positions.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

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
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
)

__all__ = ["fast_items", "gc_paused"]

INT64_MAX = (1 << 63) - 1
# An integer literal of at most this many characters (sign included) fits int64; longer ones
# go to Lark, which range-checks them with a located error.
_SAFE_INT_CHARS = 18
# Nested attribute lists deeper than this go to Lark (it rejects depth 65 with an error).
_MAX_DEPTH = 32

_WS_CHARS = " \t\f\r\n"
# \x20, not a space: the spaces of the patterns below stand for optional whitespace.
_W = r"[\x20\t\f\r\n]*"
_W1 = r"[\x20\t\f\r\n]+"
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_INT = r"-?[0-9]+(?![A-Za-z0-9_.])"
_FLOAT = (
    r"-?(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"(?![A-Za-z0-9_.])"
)
_HEX = r"0x[0-9a-fA-F]*(?![A-Za-z0-9_])"
_LAYOUT = r"(?:([A-Za-z]+)(?![A-Za-z0-9_]))?"
# Bracketed lists (the contents are captured; the brackets are not).
_NAMES = rf"\[({_W}(?:{_NAME}(?:{_W},{_W}{_NAME})*{_W})?)\]"
_SHAPE = rf"\[({_W}(?:{_INT}(?:{_W},{_W}{_INT})*{_W})?)\]"
_WORDS = rf"\[({_W}(?:{_HEX}(?:{_W},{_W}{_HEX})*{_W})?)\]"


def _rx(pattern: str) -> re.Pattern[str]:
    """Compile `pattern`, its spaces standing for optional whitespace (%ignore WS)."""
    return re.compile(pattern.replace(" ", _W))


# Blanks and comments between items; a comment is `//` to the end of the line (not the \r).
_GAP = re.compile(rf"{_W1}|//[^\r\n]*")
_LET = re.compile(rf"let{_W1}({_NAME}){_W}:{_W}")
_FUNC = _rx(rf"func{_W1}({_NAME}) \( \) \{{((?: {_NAME} \. do \( \) ;)*+) \}}")
_CALL = re.compile(rf"({_NAME}){_W}\.")
# After `let NAME:`, one pattern per declaration kind.
_NODE_HEAD = _rx(rf"(init{_W1})?Node = \{{ op_type = ({_NAME}) , attr = \[")
_RUNTIME_TAIL = _rx(rf" , in_s = {_NAMES} , mem_s = {_NAMES} , out_s = {_NAMES} \}} ;")
_INIT_TAIL = _rx(rf" , in_s = {_NAMES} , out_s = {_NAMES} \}} ;")
_COMPUTED = _rx(rf"Tensor < ({_NAME}) > = \{{ shape : {_LAYOUT} = {_SHAPE} \}} ;")
_CONST_HEAD = _rx(rf"Tensor < ({_NAME}) > = \{{ shape = {_SHAPE} , data = 0x")
_CONST_TAIL = _rx(r"\} ;")
_MEM = _rx(rf"mem{_W1}Tensor = \{{ type = ({_NAME}) , shape : {_LAYOUT} = {_SHAPE} \}} ;")
_WORD = _rx(
    rf"Tensor = \{{ type = ({_NAME}) , shape : {_LAYOUT} = {_SHAPE} , data = {_WORDS} \}} ;"
)
_NAME_AT = re.compile(_NAME)
_INT_AT = re.compile(r"-?[0-9]+")
_HEX_AT = re.compile(r"0x[0-9a-fA-F]*")
# One token of an attribute list: a name, float, int or punctuation, after optional blanks.
_ATTR_TOKEN = re.compile(rf"{_W}(?:({_NAME})|({_FLOAT})|({_INT})|([\[\]=,]))")
_FIRST_HEX_LETTER = re.compile(r"[a-fA-F]")
# An attribute list's text up to and including its `]`, lists nested at most two deep (the
# cache key of `_Reader._attrs`; its contents are read by tokens).
_ATTR_SPAN = re.compile(r"(?:[^\[\]]++|\[(?:[^\[\]]++|\[[^\[\]]*+\])*+\])*+\]")


class _Decline(Exception):
    """The text is not in a form this path reads; Lark takes it."""


class _Lines:
    """Line and column of offsets visited in increasing order (as Lark's lexer counts:
    lines at each \\n, columns from the character after the last one, both 1-based)."""

    __slots__ = ("text", "pos", "line", "line_start")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1
        self.line_start = 0

    def loc(self, pos: int) -> Loc:
        if pos != self.pos:
            if pos < self.pos:  # not expected; start counting again from the top
                self.pos, self.line, self.line_start = 0, 1, 0
            text = self.text
            breaks = text.count("\n", self.pos, pos)
            if breaks:
                self.line += breaks
                self.line_start = text.rfind("\n", self.pos, pos) + 1
            self.pos = pos
        return Loc(self.line, pos - self.line_start + 1)


def _int(text: str) -> int:
    if len(text) > _SAFE_INT_CHARS:
        raise _Decline
    return int(text)


@lru_cache(maxsize=4096)  # programs repeat a few shapes
def _shape(body: str) -> tuple[int, ...]:
    shape = tuple(_int(d) for d in _INT_AT.findall(body))
    count = 1
    for d in shape:
        if d > 0:
            count *= d
    if count > INT64_MAX:
        raise _Decline
    return shape


def _hex_is_upper(digits: str, default: bool) -> bool:
    letter = _FIRST_HEX_LETTER.search(digits)
    return letter.group(0).isupper() if letter is not None else default


def _names(body: str, offset: int, lines: _Lines) -> tuple[tuple[str, ...], tuple[Loc, ...]]:
    names: list[str] = []
    locs: list[Loc] = []
    if "\n" in body:
        for m in _NAME_AT.finditer(body):
            names.append(m.group(0))
            locs.append(lines.loc(offset + m.start()))
    else:  # one line: columns by arithmetic
        first = lines.loc(offset)
        line, column = first.line, first.column
        for m in _NAME_AT.finditer(body):
            names.append(m.group(0))
            locs.append(Loc(line, column + m.start()))
    return tuple(names), tuple(locs)


class _Reader:
    """Reads one program; `items()` returns its items or raises `_Decline`."""

    def __init__(
        self,
        text: str,
        fromhex: Callable[[str, int, int], bytes],
        blank_lines: Callable[[str, int], int | None],
    ) -> None:
        self.text = text
        self.lines = _Lines(text)
        self.fromhex = fromhex
        self.blank_lines = blank_lines
        self.attr_cache: dict[str, tuple[tuple[tuple[str, AttrValue], ...], tuple[int, ...]]] = {}

    # -- attributes -----------------------------------------------------------------------
    def _token(self, pos: int) -> re.Match[str]:
        m = _ATTR_TOKEN.match(self.text, pos)
        if m is None:
            raise _Decline
        return m

    def _value(self, pos: int, depth: int) -> tuple[AttrValue, int]:
        m = self._token(pos)
        name, flt, integer, punct = m.groups()
        if integer is not None:
            return _int(integer), m.end()
        if name is not None:
            return name, m.end()
        if flt is not None:
            return Float(flt), m.end()
        if punct != "[" or depth >= _MAX_DEPTH:
            raise _Decline
        values: list[AttrValue] = []
        m = self._token(m.end())
        if m.group(4) == "]":
            return (), m.end()
        pos = m.start()
        while True:
            value, pos = self._value(pos, depth + 1)
            values.append(value)
            m = self._token(pos)
            punct = m.group(4)
            if punct == "]":
                return tuple(values), m.end()
            if punct != ",":
                raise _Decline
            pos = m.end()

    def _attrs(self, pos: int) -> tuple[tuple[tuple[str, AttrValue], ...], tuple[Loc, ...], int]:
        """The attributes after `attr=[`, their key positions, and the offset after `]`.

        Attribute lists repeat (`bit_len=8`, a conv's windows): one read per distinct text."""
        text = self.text
        span = _ATTR_SPAN.match(text, pos)
        if span is None:  # deeply nested, or not a list
            attrs, offsets, end = self._read_attrs(pos)
        else:
            end = span.end()
            body = text[pos:end]
            found = self.attr_cache.get(body)
            if found is None:
                attrs, offsets, end_read = self._read_attrs(pos)
                if end_read != end:  # cannot happen: the span is balanced
                    raise _Decline
                self.attr_cache[body] = found = (attrs, tuple(o - pos for o in offsets))
            attrs, relative = found
            offsets = tuple(pos + o for o in relative)
        loc = self.lines.loc
        return attrs, tuple(loc(o) for o in offsets), end

    def _read_attrs(
        self, pos: int
    ) -> tuple[tuple[tuple[str, AttrValue], ...], tuple[int, ...], int]:
        """`_attrs` by tokens: the attributes, the offsets of their keys, the end."""
        attrs: list[tuple[str, AttrValue]] = []
        locs: list[int] = []
        m = self._token(pos)
        if m.group(4) == "]":
            return (), (), m.end()
        while True:
            key = m.group(1)
            if key is None:
                raise _Decline
            locs.append(m.start(1))
            m = self._token(m.end())
            if m.group(4) != "=":
                raise _Decline
            value, pos = self._value(m.end(), 0)
            attrs.append((key, value))
            m = self._token(pos)
            punct = m.group(4)
            if punct == "]":
                return tuple(attrs), tuple(locs), m.end()
            if punct != ",":
                raise _Decline
            m = self._token(m.end())

    # -- declarations ---------------------------------------------------------------------
    def _node(self, name: str, loc: Loc, pos: int) -> tuple[Item, int]:
        text = self.text
        m = _NODE_HEAD.match(text, pos)
        if m is None:
            raise _Decline
        init = m.group(1) is not None
        op_type = m.group(2)
        attrs, attr_locs, pos = self._attrs(m.end())
        lines = self.lines
        if init:
            t = _INIT_TAIL.match(text, pos)
            if t is None:
                raise _Decline
            in_s, in_locs = _names(t.group(1), t.start(1), lines)
            out_s, out_locs = _names(t.group(2), t.start(2), lines)
            node: Item = InitNode(
                name, op_type, attrs, in_s, out_s, loc, attr_locs, in_locs, out_locs
            )
            return node, t.end()
        t = _RUNTIME_TAIL.match(text, pos)
        if t is None:
            raise _Decline
        in_s, in_locs = _names(t.group(1), t.start(1), lines)
        mem_s, mem_locs = _names(t.group(2), t.start(2), lines)
        out_s, out_locs = _names(t.group(3), t.start(3), lines)
        node = RuntimeNode(
            name, op_type, attrs, in_s, mem_s, out_s, loc, attr_locs, in_locs, mem_locs, out_locs
        )
        return node, t.end()

    def _const(self, name: str, loc: Loc, pos: int) -> tuple[Item, int] | None:
        text = self.text
        m = _CONST_HEAD.match(text, pos)
        if m is None:
            return None
        start = m.end()
        close = text.find("}", start)
        if close < 0:
            raise _Decline
        end = close
        while end > start and text[end - 1] in _WS_CHARS:
            end -= 1
        if (end - start) % 2:
            raise _Decline  # Lark reports the odd digit count
        try:
            data = self.fromhex(text, start, end)
        except ValueError:
            raise _Decline from None
        if 2 * len(data) != end - start:  # bytes.fromhex skips blanks; the grammar does not
            raise _Decline
        t = _CONST_TAIL.match(text, close)
        if t is None:
            raise _Decline
        letter = _FIRST_HEX_LETTER.search(text, start, end)
        upper = letter.group(0).isupper() if letter is not None else False
        data_loc = self.lines.loc(start - 2)
        const = ConstTensor(name, m.group(1), _shape(m.group(2)), data, upper, loc, data_loc)
        return const, t.end()

    def _tensor(self, name: str, loc: Loc, pos: int) -> tuple[Item, int]:
        text = self.text
        m = _COMPUTED.match(text, pos)
        if m is not None:
            dtype, layout, shape = m.group(1), m.group(2) or "", _shape(m.group(3))
            cls = RuntimeTensor if layout.startswith("B") else InitTensor
            return cls(name, dtype, layout, shape, loc), m.end()
        found = self._const(name, loc, pos)
        if found is not None:
            return found
        m = _WORD.match(text, pos)
        if m is None:
            raise _Decline
        words: list[str] = []
        first: Loc | None = None
        for w in _HEX_AT.finditer(m.group(4)):
            word = w.group(0)
            if len(word) != 10:
                raise _Decline
            if first is None:
                first = self.lines.loc(m.start(4) + w.start())
            words.append(word[2:])
        digits = "".join(words)
        word_tensor = WordTensor(
            name,
            m.group(1),
            m.group(2) or "",
            _shape(m.group(3)),
            bytes.fromhex(digits),
            _hex_is_upper(digits, True),
            loc,
            first or loc,
        )
        return word_tensor, m.end()

    def _let(self, pos: int) -> tuple[Item, int]:
        text = self.text
        m = _LET.match(text, pos)
        if m is None:
            raise _Decline
        name = m.group(1)
        loc = self.lines.loc(m.start(1))
        pos = m.end()
        first = text[pos : pos + 1]
        if first == "T":
            return self._tensor(name, loc, pos)
        if first == "m":
            t = _MEM.match(text, pos)
            if t is None:
                raise _Decline
            mem = MemTensor(name, t.group(1), t.group(2) or "", _shape(t.group(3)), loc)
            return mem, t.end()
        return self._node(name, loc, pos)

    def _func(self, pos: int) -> tuple[Item, int]:
        m = _FUNC.match(self.text, pos)
        if m is None:
            raise _Decline
        loc = self.lines.loc(m.start(1))
        calls, call_locs = [], []
        offset = m.start(2)
        lines = self.lines
        for c in _CALL.finditer(m.group(2)):
            calls.append(c.group(1))
            call_locs.append(lines.loc(offset + c.start()))
        return Function(m.group(1), tuple(calls), loc, tuple(call_locs)), m.end()

    def items(self) -> tuple[Item, ...]:
        text = self.text
        size = len(text)
        items: list[Item] = []
        pos = 0
        gap = _GAP.match
        while True:
            g = gap(text, pos)
            while g is not None:
                end = g.end()
                if text.startswith("//", pos):
                    comment = Comment(
                        text[pos + 2 : end].rstrip(),
                        loc=self.lines.loc(pos),
                        blank_lines=self.blank_lines(text, pos),
                    )
                    items.append(comment)
                pos = end
                g = gap(text, pos)
            if pos >= size:
                return tuple(items)
            if text.startswith("let", pos):
                item, pos = self._let(pos)
            elif text.startswith("func", pos):
                item, pos = self._func(pos)
            else:
                raise _Decline
            items.append(item)


def fast_items(
    text: str,
    fromhex: Callable[[str, int, int], bytes],
    blank_lines: Callable[[str, int], int | None],
) -> tuple[Item, ...] | None:
    """The items of `text` (no byte order mark) as the Lark path gives them, or None when this
    path does not read the text (see the module docstring).

    `fromhex(text, start, end)` decodes hex digits (raising ValueError when they are not
    hex); `blank_lines(text, pos)` is `Comment.blank_lines` of the comment at `pos`.
    """
    try:
        return _Reader(text, fromhex, blank_lines).items()
    except _Decline:
        return None


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while reading a program.

    Parsing and importing allocate millions of objects that all stay alive (the tree, then
    the IR), and each collection of the oldest generation walks all of them: on a 200k-node
    program that was about 40% of the import time. Reference counting still frees what is
    dropped; collection resumes (if it was on) when the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
