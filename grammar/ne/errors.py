"""Errors for the NanoEngine text format (`.ne`), in the compiler's one-line style.

Every problem with a `.ne` input is reported as a `NanoEngineError` whose `str()` is

    model.ne:12:48: error: expected ';', found '}'
    let w: Tensor<int8_t> = {shape=[1], data=0x07} };
                                                   ^

so that tools can print it as is, and editors can jump to the location. Lark's own exceptions
(`UnexpectedToken`, `UnexpectedCharacters`, `UnexpectedEOF`) are translated here, following
Lark's `examples/advanced/error_reporting_lalr.py`: terminal names such as `SEMICOLON` or `NAME`
become the words a reader expects ("';'", "a name").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
)
from lark.lexer import PatternStr, TerminalDef
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

__all__ = [
    "NanoEngineError",
    "NanoEngineSyntaxError",
    "NanoEngineSemanticError",
    "NanoEngineInternalError",
    "NanoEngineImportWarning",
    "NanoEnginePaddingWarning",
    "ExportError",
    "source_line",
    "end_location",
    "syntax_error_from_lark",
]

# Source lines longer than this are shown as a window around the caret: a constant's hex blob
# is one line of up to hundreds of megabytes.
_EXCERPT_WIDTH = 100


class NanoEngineError(Error):
    """A problem in a `.ne` input, located at `filename:line:column` (both 1-based)."""

    def __init__(
        self,
        message: str,
        filename: str = "<string>",
        line: int = 1,
        column: int = 1,
        source: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        # Only a window of the offending line is kept, never the whole (possibly huge) source.
        self.excerpt: str | None = None
        self.caret_column = column
        if source is not None:
            found = _excerpt(source, line, column)
            if found is not None:
                self.excerpt, self.caret_column = found

    def __str__(self) -> str:
        head = f"{self.filename}:{self.line}:{self.column}: error: {self.message}"
        if self.excerpt is None:
            return head
        # Tabs stay tabs in the caret line so the caret lines up in any terminal.
        pad = "".join("\t" if c == "\t" else " " for c in self.excerpt[: self.caret_column - 1])
        return f"{head}\n{self.excerpt}\n{pad}^"


class NanoEngineSyntaxError(NanoEngineError):
    """The text does not follow the grammar (bad token, missing ';', odd hex length, ...)."""


class NanoEngineSemanticError(NanoEngineError):
    """The text parses, but the program is inconsistent (undefined name, wrong data size, ...)."""


class NanoEngineInternalError(NanoEngineError):
    """A bug in the parser itself; reported in the same format so tools never show a traceback."""


class NanoEngineImportWarning(UserWarning):
    """An op kept as `nf.custom` (unknown op type, or a variant nanoir cannot express).

    The message starts with `file:line:col: warning:`, so tools can print it as is."""


class NanoEnginePaddingWarning(NanoEngineImportWarning):
    """Runtime tensors declared with the shapes NanoEngine-PyTorch computes ignoring padding.

    Its stream analysis ignores the pads of Conv, MaxPool and AveragePool, so a file it wrote
    for a padded network declares those outputs (and everything computed from them) smaller
    than they are. nanoir reads such a file with one warning naming the tensors, computes
    with the true shapes and keeps the declared numbers for writing the file back."""


class ExportError(DiagnosticException, Error):
    """The IR cannot be written as NanoEngine text; the message names the op and why."""


def _line_bounds(text: str, line: int) -> tuple[int, int] | None:
    """Start and end offsets of the 1-based `line` of `text` (without its line break)."""
    if line < 1:
        return None
    start = 0
    for _ in range(line - 1):
        nl = text.find("\n", start)
        if nl < 0:
            return None
        start = nl + 1
    end = text.find("\n", start)
    if end < 0:
        end = len(text)
    if end > start and text[end - 1] == "\r":
        end -= 1
    return start, end


def source_line(text: str, line: int) -> str | None:
    """The 1-based `line` of `text` without its line break, or None when out of range."""
    bounds = _line_bounds(text, line)
    return None if bounds is None else text[bounds[0] : bounds[1]]


def end_location(text: str) -> tuple[int, int]:
    """The (line, column) just past the last character of `text`."""
    line = text.count("\n") + 1
    last_break = text.rfind("\n")
    return line, len(text) - last_break


def _excerpt(text: str, line: int, column: int) -> tuple[str, int] | None:
    """The source line (or a window of it around `column`) and the caret's column in it."""
    bounds = _line_bounds(text, line)
    if bounds is None:
        return None
    start, end = bounds
    if end - start <= _EXCERPT_WIDTH:
        return text[start:end], column
    window_start = max(start, min(start + column - 1 - _EXCERPT_WIDTH // 2, end - _EXCERPT_WIDTH))
    window_end = min(end, window_start + _EXCERPT_WIDTH)
    prefix = "..." if window_start > start else ""
    suffix = "..." if window_end < end else ""
    caret = column - (window_start - start) + len(prefix)
    return prefix + text[window_start:window_end] + suffix, caret


# Human words for the named terminals of nanoengine.lark; string terminals and keywords are
# shown as the quoted text they match.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "LAYOUT": "a layout (such as BCMD)",
    "INT": "an integer",
    "FLOAT": "a float",
    "HEX": "hex data (0x...)",
    "$END": "end of input",
}

# Keyword terminals are regexps like /let(?![A-Za-z0-9_])/; this recovers the word.
_KEYWORD_PATTERN = re.compile(r"^([A-Za-z_]+)\(\?!\[A-Za-z0-9_\]\)$")

# What to show as "found" when no token matches: the run of characters that looks like one word.
_WORD_AT = re.compile(r"[^\s,;{}\[\]()<>=:\"'`]{1,40}")


def _terminal_words(name: str, terminals: Mapping[str, TerminalDef]) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    term = terminals.get(name)
    if term is not None:
        if isinstance(term.pattern, PatternStr):
            return f"'{term.pattern.value}'"
        keyword = _KEYWORD_PATTERN.match(term.pattern.value)
        if keyword:
            return f"'{keyword.group(1)}'"
    return name.lower()


def _join_alternatives(words: Iterable[str]) -> str:
    unique = sorted(set(words))
    if not unique:
        return "nothing"
    if len(unique) == 1:
        return unique[0]
    return ", ".join(unique[:-1]) + " or " + unique[-1]


def _quote_found(text: str) -> str:
    if len(text) > 24:
        text = text[:20] + "..."
    if text.isprintable() and "'" not in text:
        return f"'{text}'"
    return ascii(text)


def syntax_error_from_lark(
    err: UnexpectedInput,
    text: str,
    filename: str,
    terminals: Mapping[str, TerminalDef],
    ignored: Iterable[str] = ("WS", "COMMENT"),
) -> NanoEngineSyntaxError:
    """Translate a Lark parse error into `file:line:col: error: expected X, found Y`."""
    skip = set(ignored)
    if isinstance(err, UnexpectedToken):
        # `accepts` simulates the parser and drops terminals that only pass a default
        # reduction; fall back to `expected` when it is unavailable.
        accepts = None
        try:
            accepts = err.accepts
        except Exception:  # the interactive parser is best effort; `expected` is always there
            accepts = None
        expected = set(accepts or err.expected) - skip
        token = err.token
        if token.type == "$END":
            line, column = end_location(text)
            found = "end of input"
        else:
            line, column = token.line or 1, token.column or 1
            found = _quote_found(str(token))
    elif isinstance(err, UnexpectedCharacters):
        expected = set(err.allowed or ()) - skip
        line, column = err.line or 1, err.column or 1
        pos = err.pos_in_stream or 0
        word = _WORD_AT.match(text, pos)
        found = _quote_found(word.group(0) if word else text[pos : pos + 1])
    elif isinstance(err, UnexpectedEOF):
        expected = set(err.expected) - skip
        line, column = end_location(text)
        found = "end of input"
    else:  # other UnexpectedInput subclasses carry a position but no expectation
        line = int(getattr(err, "line", 1) or 1)
        column = int(getattr(err, "column", 1) or 1)
        return NanoEngineSyntaxError("invalid syntax", filename, line, column, text)
    wanted = _join_alternatives(_terminal_words(name, terminals) for name in expected)
    return NanoEngineSyntaxError(f"expected {wanted}, found {found}", filename, line, column, text)
