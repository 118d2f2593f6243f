"""Token-level mutation of program text, shared by the `.ne` and MLIR fuzz suites.

A text is split into tokens (by a format's token pattern) and the gaps before them, so a fuzz
test can delete, duplicate or replace one token and put the text back together unchanged
elsewhere.
"""

from __future__ import annotations

import re

__all__ = ["join_tokens", "tokens_and_gaps"]


def tokens_and_gaps(text: str, token: re.Pattern[str]) -> tuple[list[str], list[str]]:
    """Tokens of ``text``, and the text before each token (plus the tail).

    >>> tokens_and_gaps("a = 1;", re.compile(r"\\w+|\\S"))
    (['a', '=', '1', ';'], ['', ' ', ' ', '', ''])
    """
    tokens, gaps, last = [], [], 0
    for m in token.finditer(text):
        gaps.append(text[last : m.start()])
        tokens.append(m.group(0))
        last = m.end()
    gaps.append(text[last:])
    return tokens, gaps


def join_tokens(tokens: list[str], gaps: list[str]) -> str:
    """The inverse of :func:`tokens_and_gaps`: ``gaps`` has one more entry than ``tokens``."""
    return "".join(g + t for g, t in zip(gaps, tokens)) + gaps[-1]
