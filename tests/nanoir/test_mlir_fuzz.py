"""Fuzzing the MLIR reader: mutated valid programs give a verified module or one located error.

The corpus is every lit input under ``tests/filecheck/`` (each ``// -----`` chunk) and programs
the pipeline writes (a small network at the quantized nq level and lowered to nh, 8 and 1
bits). Mutations flip bytes, delete, duplicate, swap or replace tokens, truncate at any point,
blow numbers up (beyond int64, huge dims, ``1e309``), unterminate strings, nest brackets
thousands deep and insert bytes that are not UTF-8. Whatever comes out, ``nanoir.parse`` must
return a module (already verified) or raise a ``nanoir.Error`` whose message starts
``fuzz.mlir:LINE:COL`` inside the text, within two seconds. About 2,200 cases in 40-60 s on two
busy cores; ``NANOIR_HYPOTHESIS_PROFILE=thorough`` runs 20 times as many mutants.
"""

from __future__ import annotations

import contextlib
import functools
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.text import join_tokens
from nanoir.testing.text import tokens_and_gaps as split_tokens

FILECHECK = Path(__file__).parent.parent / "filecheck"
MAX_SECONDS = 10.0
"""A hang bound per case, not a speed test: cases take milliseconds, a hang never ends."""
SCALE = max(1, settings.default.max_examples // 100)
"""1 normally; 20 under the ``thorough`` hypothesis profile (2000 examples per test)."""


def lit_chunks() -> list[str]:
    """Every ``// -----`` chunk of every lit input, in a fixed order."""
    chunks = []
    for path in sorted(FILECHECK.rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        chunks += [c.strip("\n") + "\n" for c in path.read_text().split("// -----")]
    return [c for c in chunks if c.strip()]


LIT = lit_chunks()

SMALL = """\
func.func @main(%x: tensor<?x3x1x5xf32>) -> tensor<?x2x1x3xf32> {
  %w = nf.constant "conv.weight" dense<[[[[0.5, -0.25, 1.0]], [[2.0, 0.0, 1.0]], [[0.5, 0.5, 0.5]]], [[[0.0, 0.75, -1.0]], [[1.0, 1.0, 1.0]], [[-2.0, 0.25, 0.0]]]]> : tensor<2x3x1x3xf32>
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x3x1x5xf32>
  %wq = nq.fake_quant %w {bits = 4 : i64, exp = dense<2> : tensor<1xi8>, rounding = #nq.rounding<half_even>} : tensor<2x3x1x3xf32>
  %y = nf.conv %q, %wq {groups = 1 : i64} : (tensor<?x3x1x5xf32>, tensor<2x3x1x3xf32>) -> tensor<?x2x1x3xf32>
  %r = nf.relu %y : tensor<?x2x1x3xf32>
  func.return %r : tensor<?x2x1x3xf32>
}
"""


@functools.lru_cache(maxsize=1)
def pipeline_programs() -> tuple[str, ...]:
    """A small network at the nq level and lowered to nh (8 bits, and 1-bit activations)."""
    torch = pytest.importorskip("torch")
    from nanoir.testing import make_test_model

    model = make_test_model("SampleNet")
    x = model.make_example_input(2)  # type: ignore[operator]
    torch.manual_seed(0)
    programs = []
    for options in ({}, {"act_bits": 1, "weight_bits": 4}):
        for stop in ("nq", "nh"):
            programs.append(str(nanoir.compile_model(model, (x,), [(x,)], stop=stop, **options)))
    return tuple(programs)


_TOKEN = re.compile(
    r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|[%@#!^][\w$.-]*|-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)'
    r"|[A-Za-z_][\w$.]*|->|\S"
)
_NUMBER = re.compile(r"-?\d")
BLOWUPS = [
    "99999999999999999999",
    "9223372036854775808",
    "-9223372036854775809",
    "4294967296",
    "2147483648",
    "100000",
    "65536",
    "1e309",
    "-1e400",
    "0x7fffffffffffffffff",
    "0",
    "-1",
    "1.5",
    "128",
    "-129",
    "100000000000",
]
BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\x80", b"\xf5\x80\x80\x80", b"\x00"]
JUNK = [
    '"',
    "\\",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    "(",
    ")",
    ",",
    ":",
    "=",
    "%",
    "@",
    "#",
    "!",
    "^",
    "->",
    "//",
    "\x00",
    "\t",
    "\r",
    "\u0663",
    "\u00e9",
    "\ufeff",
    "?",
    "x",
    "...",
]


def tokens_and_gaps(text: str) -> tuple[list[str], list[str]]:
    return split_tokens(text, _TOKEN)


def nest(depth: int) -> str:
    return "[" * depth + "]" * depth


@st.composite
def mutants(draw: st.DrawFn, sources: list[str]) -> str | bytes:
    text: str = draw(st.sampled_from(sources))
    raw: bytes | None = None
    for _ in range(draw(st.integers(1, 3))):
        tokens, gaps = tokens_and_gaps(text)
        kind = draw(
            st.sampled_from(
                [
                    "truncate",
                    "delete",
                    "duplicate",
                    "swap",
                    "replace",
                    "number",
                    "string",
                    "nest",
                    "junk",
                    "bytes",
                    "flip",
                ]
            )
        )
        if not tokens or kind == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
            continue
        i = draw(st.integers(0, len(tokens) - 1))
        if kind == "delete":
            del tokens[i], gaps[i]
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
            gaps.insert(i, draw(st.sampled_from(["", " ", "\n"])))
        elif kind == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == "replace":
            tokens[i] = draw(st.sampled_from(tokens))
        elif kind == "number":
            numbers = [k for k, t in enumerate(tokens) if _NUMBER.match(t)]
            if numbers:
                tokens[draw(st.sampled_from(numbers))] = draw(st.sampled_from(BLOWUPS))
        elif kind == "string":
            strings = [k for k, t in enumerate(tokens) if t.startswith('"') and len(t) > 1]
            if strings:
                k = draw(st.sampled_from(strings))
                tokens[k] = tokens[k][:-1] + draw(st.sampled_from(["", "x" * 60, "\\", "\\q"]))
            else:
                tokens[i] = '"' + "x" * 40 + tokens[i]
        elif kind == "nest":
            depth = draw(st.sampled_from([10, 63, 64, 65, 200, 5000]))
            where = draw(st.sampled_from(["attr", "open", "region"]))
            if where == "attr":
                tokens[i] += " " + nest(depth)
            elif where == "open":
                tokens[i] += "[" * depth
            else:
                tokens[i] += "builtin.module {\n" * depth + "}\n" * depth
        elif kind == "junk":
            tokens[i] = draw(st.sampled_from(JUNK)) + tokens[i]
        text = join_tokens(tokens, gaps)
        if kind in ("bytes", "flip"):
            raw = text.encode("utf-8")
            at = draw(st.integers(0, len(raw)))
            if kind == "bytes":
                raw = raw[:at] + draw(st.sampled_from(BAD_BYTES)) + raw[at:]
            elif raw:
                at = min(at, len(raw) - 1)
                raw = raw[:at] + bytes([raw[at] ^ (1 << draw(st.integers(0, 7)))]) + raw[at + 1 :]
            try:
                text = raw.decode("utf-8")
                raw = None
            except UnicodeDecodeError:
                return raw  # stays bytes: later mutations work on text
    return text


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Turn a hang into a failure."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"parsing took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def assert_parses_or_reports(text: str | bytes) -> None:
    """A verified module, or one ``nanoir.Error`` located inside the text; quickly."""
    start = time.perf_counter()
    with alarm(5 * MAX_SECONDS):
        try:
            module = nanoir.parse(text, "fuzz.mlir")  # type: ignore[arg-type]
        except nanoir.Error as err:
            message = str(err)
            found = re.match(r"fuzz\.mlir:(\d+):(\d+)\n(.*)\n( *)\^+\n *error: ", message)
            assert found, message
            line, column = int(found.group(1)), int(found.group(2))
            data = text.encode("utf-8") if isinstance(text, str) else text
            lines = data.split(b"\n")
            assert 1 <= line <= len(lines), message
            assert 1 <= column <= len(lines[line - 1]) + 1, message
            assert "Traceback" not in message
        else:
            assert isinstance(module, ModuleOp)
    elapsed = time.perf_counter() - start
    assert elapsed < MAX_SECONDS, f"took {elapsed:.2f} s"


@settings(max_examples=1600 * SCALE)
@given(mutants(LIT))
def test_mutated_lit_inputs(text: str | bytes) -> None:
    assert_parses_or_reports(text)


@settings(max_examples=150 * SCALE)
@given(st.data())
def test_mutated_pipeline_programs(data: st.DataObject) -> None:
    assert_parses_or_reports(data.draw(mutants(list(pipeline_programs()))))


def test_pipeline_programs_read_back() -> None:
    for text in pipeline_programs():
        assert_parses_or_reports(text)
        nanoir.parse(text)


def test_truncation_at_every_token() -> None:
    tokens, gaps = tokens_and_gaps(SMALL)
    for i in range(len(tokens) + 1):
        assert_parses_or_reports(join_tokens(tokens[:i], gaps[: i + 1][:-1] + [""]) if i else "")


def test_every_single_token_deletion() -> None:
    tokens, gaps = tokens_and_gaps(SMALL)
    for i in range(len(tokens)):
        assert_parses_or_reports(
            join_tokens(tokens[:i] + tokens[i + 1 :], gaps[:i] + gaps[i + 1 :])
        )


def test_every_number_blown_up() -> None:
    tokens, gaps = tokens_and_gaps(SMALL)
    numbers = [k for k, t in enumerate(tokens) if _NUMBER.match(t)]
    for k in numbers:
        for big in ("99999999999999999999", "100000000000", "1e309"):
            assert_parses_or_reports(join_tokens(tokens[:k] + [big] + tokens[k + 1 :], gaps))


def test_a_bad_byte_on_every_line() -> None:
    raw = SMALL.encode()
    for at in [m.start() for m in re.finditer(b"\n", raw)]:
        for bad in (b"\xff", b"\xc3"):
            assert_parses_or_reports(raw[:at] + bad + raw[at:])


def test_an_unterminated_string_on_every_line() -> None:
    lines = SMALL.splitlines(keepends=True)
    for i in range(len(lines)):
        for tail in ('"' + "x" * 80, '"abc\\'):
            assert_parses_or_reports(
                "".join(lines[:i]) + lines[i].rstrip("\n") + tail + "\n" + "".join(lines[i + 1 :])
            )


def test_deep_nesting_everywhere() -> None:
    tokens, gaps = tokens_and_gaps(SMALL)
    for k in range(0, len(tokens), 7):
        for depth in (65, 5000):
            assert_parses_or_reports(
                join_tokens(tokens[:k] + [tokens[k] + nest(depth)] + tokens[k + 1 :], gaps)
            )
