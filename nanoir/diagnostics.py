"""Located parsing and verification of MLIR text.

Parse MLIR text remembering where each op was written, then verify op by op so a verifier
error reads ``file:line:col`` with the source line and a caret.

xDSL ops carry no source location, ``module.verify()`` does not say which op failed, and xDSL
has no SSA dominance check (a use before its definition in the same block parses and
verifies). :func:`parse_and_verify` adds all three.

The parser also stands between xDSL and hostile input: whatever the text, parsing ends in a
verified module or in one :class:`MlirSyntaxError` / :class:`NanoirDiagnostic` naming the
place, quickly, never in a traceback or a hang:

- string literals are lexed in linear time (xDSL 0.74's pattern backtracks exponentially on an
  unterminated string: see :class:`LinearTimeLexer`);
- bytes that are not UTF-8 are reported at the first bad byte;
- brackets nested deeper than :data:`MAX_NESTING` are refused before xDSL recurses on them;
- a ``dense<>`` literal larger than :data:`MAX_DENSE_BYTES` is refused before it is
  materialized, and splats are expanded without a per-element Python loop;
- errors that xDSL raises without a location while parsing an attribute or a type (a value out
  of its element type's range, an attribute's verifier) are located at that attribute;
- an empty file is an empty module (as in ``mlir-opt``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from xdsl.context import Context
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AnyFloat,
    BytesAttr,
    ComplexType,
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerType,
    ModuleOp,
    RankedStructure,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import base
from xdsl.parser import Parser
from xdsl.parser.generic_parser import ParserState
from xdsl.utils.exceptions import (
    DiagnosticException,
    MultipleSpansParseError,
    ParseError,
    VerifyException,
)
from xdsl.utils.lexer import Input, Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from nanoir.dialects.nh import verify_hw_function
from nanoir.errors import Error

MAX_NESTING = 64
"""Deepest bracket nesting (``(``, ``[``, ``{``, ``<``) accepted in MLIR text. xDSL's parser
recurses about seven Python frames per level and hits Python's recursion limit near 140."""

MAX_DENSE_BYTES = 1 << 28
"""Largest ``dense<>`` literal (in bytes of its element type) the parser materializes; a splat
such as ``dense<1.0> : tensor<100000000000x4xf32>`` is otherwise expanded in memory."""

_T = TypeVar("_T")


class NanoirDiagnostic(DiagnosticException, Error):
    """A user-facing error whose message already names the place (``file:line:col``)."""


@dataclasses.dataclass
class MlirSyntaxError(ParseError, Error):
    """Bad MLIR text: ``file:line:col``, the source line, a caret and ``error: ...``.

    A subclass of xDSL's ``ParseError`` (so code catching that still works) and of
    :class:`nanoir.Error`.
    """

    note: str = ""
    """More context printed after the message (e.g. where a value was first defined)."""

    def __str__(self) -> str:
        return print_span(self.span, self.msg) + self.note


MAX_SHOWN_LINE = 160
"""Longest source line shown whole in a message; longer ones are cut around the caret."""


_SHOWN_CONTROLS = {c: "\ufffd" for c in [*range(0x20), 0x7F]} | {ord("\t"): " "}


def print_span(span: Span[Any], msg: str) -> str:
    """``file:line:col``, the span's (first) source line, carets under the span, ``msg``.

    Like xDSL's ``Span.print_with_context``, but a line longer than :data:`MAX_SHOWN_LINE`
    (a minified file, 5,000 brackets) is cut to the part around the caret.
    """
    input = span.input
    line_start = input.get_start_of_line(span.start)
    line_end = input.get_end_of_line(span.start)
    line: str | bytes = input.content[line_start:line_end]
    start, end = span.start - line_start, min(span.end, line_end) - line_start
    if isinstance(line, bytes):
        start = len(line[:start].decode("utf-8", "replace"))
        end = len(line[:end].decode("utf-8", "replace"))
        line = line.decode("utf-8", "replace")
    # One character in, one out, so the caret stays aligned: tabs as spaces, other control
    # characters (a NUL, a form feed) as U+FFFD.
    line = line.removesuffix("\r").translate(_SHOWN_CONTROLS)
    start = min(start, len(line))
    end = min(max(end, start + 1), max(len(line), start + 1))
    if len(line) > MAX_SHOWN_LINE:
        lo = max(0, min(start - MAX_SHOWN_LINE // 3, len(line) - MAX_SHOWN_LINE))
        hi = lo + MAX_SHOWN_LINE
        prefix, suffix = ("..." if lo else ""), ("..." if hi < len(line) else "")
        line = prefix + line[lo:hi] + suffix
        start = start - lo + len(prefix)
        end = min(end - lo + len(prefix), len(line) - len(suffix))
        end = max(end, start + 1)
    pad = " " * start
    return f"{span.get_location()}\n{line}\n{pad}{'^' * (end - start)}\n{pad}{msg}\n"


def _error_text(message: str) -> str:
    return message if message.startswith("error") else f"error: {message}"


def _describe(e: BaseException) -> str:
    """An exception's message, with its type where the message alone would be cryptic."""
    text = str(e.args[0]) if isinstance(e, DiagnosticException) and e.args else str(e)
    if isinstance(e, ValueError) and text.startswith("Exceeds the limit ("):
        # Python refuses int() of more than 4300 digits; no type could hold such a number.
        limit = re.search(r"\((\d+) digits\)", text)
        return f"number too long (more than {limit.group(1) if limit else 4300} digits)"
    if isinstance(e, ValueError | OverflowError | DiagnosticException) and text:
        return text
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def as_syntax_error(e: ParseError) -> MlirSyntaxError:
    """xDSL's ``ParseError`` as nanoir's located :class:`MlirSyntaxError`."""
    if isinstance(e, MlirSyntaxError):
        return e
    note = ""
    if isinstance(e, MultipleSpansParseError):
        note = e.ref_text + "\n" if e.ref_text is not None else ""
        for span, msg in e.refs:
            note += span.print_with_context(msg) + "\n"
    msg = e.msg
    char = e.span.input.content[e.span.start : e.span.start + 1]
    if "{first_char}" in msg:  # a message xDSL 0.74 forgot to format
        msg = msg.replace("{first_char}", repr(char))
    if msg.startswith("Unexpected character: "):  # show NUL, BOM, tabs ... visibly
        msg = f"Unexpected character {char!r} (U+{ord(char):04X})" if char else msg
    return MlirSyntaxError(e.span, _error_text(msg), note)


def _line_span(input: Input[Any], start: int, end: int) -> Span[Any]:
    """``start..end`` cut at the end of ``start``'s line (at least one character wide)."""
    end = min(max(end, start + 1), input.get_end_of_line(start))
    return Span(start, max(end, start + 1) if start < input.len else start, input)


# ---------------------------------------------------------------------------------------------
# Lexing


class LinearTimeLexer(MLIRLexer):
    """xDSL's MLIR lexer with a string-literal pattern that runs in linear time.

    Upstream bug (xDSL 0.74, ``MLIRLexer._unescaped_characters_regex``): the pattern
    ``"(?:[^"\\\\\\n\\v\\f]+|\\\\(?:["nt\\\\]|[0-9A-Fa-f]{2}))*"`` nests ``+`` inside ``*``, so
    on a string with no closing quote the regex engine tries every way to split the line
    into runs: 26 characters take 10 s and a line of 40 never ends (``xdsl-opt`` hangs the
    same way; nanoir cannot fix the stock tool short of patching xDSL's class globally). The
    "unrolled loop" below accepts exactly the same strings, with one way to match each.
    """

    _BODY = r'[^"\\\n\v\f]*(?:\\(?:["nt\\]|[0-9A-Fa-f]{2})[^"\\\n\v\f]*)*'
    _unescaped_characters_regex = re.compile('"' + _BODY + '"')
    _string_prefix_regex = re.compile('"' + _BODY)

    def _lex_string_literal(self, start_pos: int) -> Any:
        if self._unescaped_characters_regex.match(self.input.content, start_pos) is None:
            prefix = self._string_prefix_regex.match(self.input.content, start_pos)
            stop = prefix.end() if prefix is not None else start_pos + 1
            if self.input.at(stop) == "\\":
                raise MlirSyntaxError(
                    Span(stop, min(stop + 2, self.input.get_end_of_line(stop)), self.input),
                    'error: invalid escape in string literal (allowed: \\n \\t \\\\ \\" and '
                    "two hex digits)",
                )
            raise MlirSyntaxError(
                Span(start_pos, start_pos + 1, self.input),
                "error: unterminated string literal: no closing '\"' on this line",
            )
        return super()._lex_string_literal(start_pos)


# Strings in the "unrolled loop" form (one way to match, fast on 80 MB of hex), comments,
# arrows (not a closing `>`), brackets.
_NESTING_TOKENS = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|->|[\[({<]|[\])}>]')


def check_nesting(input: Input[str], limit: int = MAX_NESTING) -> None:
    """Refuse brackets nested deeper than ``limit`` (outside strings and comments)."""
    depth = 0
    for m in _NESTING_TOKENS.finditer(input.content):
        c = m.group(0)
        if c in "[({<":
            depth += 1
            if depth > limit:
                raise MlirSyntaxError(
                    Span(m.start(), m.end(), input),
                    f"error: nesting too deep: more than {limit} levels of brackets or regions",
                )
        elif c in "])}>" and c != "->":
            depth = max(depth - 1, 0)


def _decode(text: str | bytes, name: str) -> str:
    """``text`` as a string; bytes that are not UTF-8 are an error at the first bad byte."""
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as e:
        input = Input(text, name)
        raise MlirSyntaxError(
            Span(e.start, max(e.end, e.start + 1), input),
            f"error: the file is not valid UTF-8: byte 0x{text[e.start]:02x} cannot be "
            "decoded here",
        ) from None


# ---------------------------------------------------------------------------------------------
# Parsing

# Errors that xDSL raises without a location while building what it parsed.
_UNLOCATED = (
    ValueError,
    TypeError,
    OverflowError,
    IndexError,
    KeyError,
    AssertionError,
    ZeroDivisionError,
    DiagnosticException,
)


class LocatingParser(Parser):
    """An xDSL parser that records the span where each operation starts, and turns every
    error into one located :class:`MlirSyntaxError` (see the module docstring)."""

    def __init__(self, ctx: Context, text: str | bytes, name: str = "<unknown>"):
        super().__init__(ctx, "", name)
        source = _decode(text, name)
        if source.startswith("\ufeff"):  # a byte order mark: read it as a space (same columns)
            source = " " + source[1:]
        input = Input(source, name)
        check_nesting(input)
        try:
            self._parser_state = ParserState(LinearTimeLexer(input))
        except ParseError as e:
            raise as_syntax_error(e) from None
        self.op_spans: dict[Operation, Span] = {}

    # -- whole module -------------------------------------------------------------------------
    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            if allow_implicit_module and self._current_token.kind == MLIRTokenKind.EOF:
                return ModuleOp([])  # an empty file (or only comments) is an empty module
            return super().parse_module(allow_implicit_module)
        except ParseError as e:
            if e.msg == "Could not parse entire input!":
                found = self._current_token
                what = (
                    "the end of the file" if found.kind == MLIRTokenKind.EOF else (repr(found.text))
                )
                e = MlirSyntaxError(e.span, f"error: expected an operation, found {what}")
            raise as_syntax_error(e) from None
        except RecursionError:
            raise MlirSyntaxError(
                self._current_token.span, "error: nesting too deep for the parser"
            ) from None
        except MemoryError:
            raise MlirSyntaxError(
                self._current_token.span, "error: out of memory while parsing this"
            ) from None
        except Exception as e:  # noqa: BLE001 - xDSL may fail anywhere; say where
            raise MlirSyntaxError(self._current_token.span, f"error: {_describe(e)}") from None

    # -- operations ---------------------------------------------------------------------------
    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # A constraint checked while parsing a custom format (e.g. a tensor of the
            # wrong element type) escapes xDSL's parser without a location.
            reason = e.args[0] if e.args else e
            raise MlirSyntaxError(
                start,
                f"error: {self._op_name(start)} has an operand or result of the wrong "
                f"type: {reason}",
            ) from None
        except _UNLOCATED as e:
            raise MlirSyntaxError(
                start, f"error: {self._op_name(start)} cannot be built: {_describe(e)}"
            ) from None
        self.op_spans[op] = start
        return op

    @staticmethod
    def _op_name(start: Span) -> str:
        text = start.input.content[start.start : start.start + 400]
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        found = re.search(r'"?([A-Za-z_][\w$]*\.[\w$.]+)"?', text)
        return f"'{found.group(1)}' op" if found else "operation"

    # -- attributes and types -----------------------------------------------------------------
    def _located(self, parse: Callable[[], _T], what: str) -> _T:
        start = self._current_token.span.start
        try:
            return parse()
        except _UNLOCATED as e:
            end = self._current_token.span.start
            raise MlirSyntaxError(
                _line_span(self.lexer.input, start, end), f"error: invalid {what}: {_describe(e)}"
            ) from None

    def parse_optional_attribute(self) -> Attribute | None:
        return self._located(super().parse_optional_attribute, "attribute")

    def parse_optional_type(self) -> Attribute | None:
        return self._located(super().parse_optional_type, "type")

    def _check_dense_size(self, type: Any, start: int) -> None:
        shape = list(type.get_shape())
        count = math.prod(shape)
        elt = type.get_element_type()
        size = getattr(elt, "compile_time_size", None) or 8
        if count * size > MAX_DENSE_BYTES:
            raise MlirSyntaxError(
                _line_span(self.lexer.input, start, self._current_token.span.start),
                f"error: dense literal of type {type} has {count} elements "
                f"({_bytes_text(count * size)}); nanoir accepts at most "
                f"{_bytes_text(MAX_DENSE_BYTES)} per literal",
            )

    def _parse_dense_literal_type(self) -> Any:
        # xDSL 0.74's own version, except that it rebuilds this constraint on every call,
        # which is most of the ~1 ms each `dense<>` literal costs (XDSL_NOTES.md section 7).
        start = self._current_token.span.start
        type = self.expect(self.parse_optional_type, "Dense attribute must be typed!")
        if not _dense_type_constraint().verifies(type):
            self.raise_error(
                "Expected memref, vector or tensor type of integer, index, float, or complex type"
            )
        if any(dim == DYNAMIC_INDEX for dim in type.get_shape()):
            self.raise_error("Dense literal attribute should have a static shape.")
        self._check_dense_size(type, start)
        return type

    def parse_dense_int_or_fp_elements_attr(self, type: Any) -> DenseIntOrFPElementsAttr:
        if type is not None:
            self._check_dense_size(type, self._current_token.span.start)
            return super().parse_dense_int_or_fp_elements_attr(type)
        # A splat (`dense<1.0> : tensor<64x3x3x3xf32>`): xDSL expands it into a Python list
        # and converts element by element (4 s per million integers); expand the bytes instead.
        start = self._current_token.span.start
        # Only a scalar can be a splat: leave hex strings (`dense<"0x...">`, possibly many MB,
        # which the lookahead would lex twice), lists and empty literals to xDSL at once.
        content = self.lexer.input.content
        after = self._current_token.span.end
        while after < len(content) and content[after] in " \t\r\n":
            after += 1
        if self._current_token.kind != MLIRTokenKind.LESS or content[after : after + 1] in (
            '"',
            "[",
            ">",
            "(",
            "",
        ):
            return super().parse_dense_int_or_fp_elements_attr(None)
        splat_type = self._splat_type()
        self._resume_from(start)
        if splat_type is None:
            return super().parse_dense_int_or_fp_elements_attr(None)
        one = super().parse_dense_int_or_fp_elements_attr(
            TensorType(splat_type.get_element_type(), [1])
        )
        self.parse_punctuation(":", " in dense attribute")
        self._parse_dense_literal_type()
        count = math.prod(splat_type.get_shape())
        return DenseIntOrFPElementsAttr(splat_type, BytesAttr(one.data.data * count))

    def _splat_type(self) -> Any | None:
        """The type of a scalar splat literal with more than one element, else None."""
        if self.parse_optional_punctuation("<") is None:
            return None
        self.parse_optional_punctuation("-")
        token = self._current_token
        if token.kind not in (MLIRTokenKind.INTEGER_LIT, MLIRTokenKind.FLOAT_LIT) and not (
            token.kind == MLIRTokenKind.BARE_IDENT and token.text in ("true", "false")
        ):
            return None
        self._consume_token(token.kind)
        if self.parse_optional_punctuation(">") is None:
            return None
        if self.parse_optional_punctuation(":") is None:
            return None
        type = self._parse_dense_literal_type()
        return type if math.prod(type.get_shape()) > 1 else None


@functools.cache
def _dense_type_constraint() -> Any:
    return base(RankedStructure[IntegerType | IndexType | AnyFloat | ComplexType])


def _bytes_text(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


# ---------------------------------------------------------------------------------------------
# Verification


def _located(
    message: str, op: Operation, spans: dict[Operation, Span], line_offset: int = 0
) -> NanoirDiagnostic:
    # nanoir's verifiers start their messages with the op name; xDSL's generic ones do not.
    if not message.startswith(f"{op.name}:"):
        message = f"'{op.name}' op {message}"
    span = spans.get(op) or _span_inside(op, message, spans)
    if span is None:
        return NanoirDiagnostic(f"error: {message}")
    span = dataclasses.replace(span, line_offset=line_offset)
    return NanoirDiagnostic(print_span(span, f"error: {message}").rstrip())


def _span_inside(op: Operation, message: str, spans: dict[Operation, Span]) -> Span | None:
    """A place for an error on an op the text never spelled out (the implicit module around
    top-level ops): the symbol defined twice, else the first op inside it."""
    twice = re.search(r'Redefinition of symbol "(.*)"', message)
    seen = False
    for inner in op.walk():
        if inner is op or inner not in spans:
            continue
        name = inner.properties.get("sym_name") or inner.attributes.get("sym_name")
        if twice and getattr(name, "data", None) == twice.group(1):
            if seen:
                return spans[inner]
            seen = True
    return next((spans[inner] for inner in op.walk() if inner in spans), None)


def check_dominance(block: Block) -> tuple[Operation, SSAValue] | None:
    """The first op in ``block`` (or nested under it) using a value not yet defined, if any.

    Values defined in enclosing blocks are visible everywhere below them; within a block,
    only earlier results and the block's arguments are.
    """

    def walk(b: Block, visible: set[SSAValue]) -> tuple[Operation, SSAValue] | None:
        defined = set(visible) | set(b.args)
        for op in b.ops:
            for operand in op.operands:
                if operand not in defined:
                    return op, operand
            for region in op.regions:
                for inner in region.blocks:
                    bad = walk(inner, defined)
                    if bad:
                        return bad
            defined.update(op.results)
        return None

    return walk(block, set())


def _verify_op(op: Operation) -> None:
    op.verify(verify_nested_ops=False)
    if op.name == "func.func":
        verify_hw_function(op)


def verify_located(
    module: Operation, spans: dict[Operation, Span] | None = None, line_offset: int = 0
) -> None:
    """Verify every op, raising :class:`NanoirDiagnostic` located at the first bad op.

    Besides each op's own verifier, a ``func.func`` holding an integer (nh) program is checked
    for what the runtime needs from it (:func:`nanoir.dialects.nh.verify_hw_function`).
    ``line_offset`` is added to reported lines (the chunk's start under --split-input-file).
    """
    spans = spans or {}
    for op in module.walk():
        try:
            _verify_op(op)
        except VerifyException as e:
            message = str(e.args[0]) if e.args else str(e)
            raise _located(message, op, spans, line_offset) from None
        except (*_UNLOCATED, MemoryError, RecursionError) as e:
            # A verifier that fails on input it did not foresee: still say which op.
            raise _located(f"cannot be verified: {_describe(e)}", op, spans, line_offset) from None
    for region in module.regions:
        for block in region.blocks:
            bad = check_dominance(block)
            if bad:
                op, value = bad
                raise _located(
                    f"uses %{value.name_hint or '?'} before it is defined",
                    op,
                    spans,
                    line_offset,
                )


def parse_and_verify(ctx: Context, text: str | bytes, name: str = "<string>") -> ModuleOp:
    """Parse MLIR text and verify it with source locations.

    Bad text raises :class:`MlirSyntaxError` (an xDSL ``ParseError``), an op that does not
    verify :class:`NanoirDiagnostic`; both are :class:`nanoir.Error`.
    """
    parser = LocatingParser(ctx, text, name)
    module = parser.parse_module()
    verify_located(module, parser.op_spans)
    return module
