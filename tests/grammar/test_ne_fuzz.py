"""Fuzzing the `.ne` parser: mutated valid programs give a Program or a NanoEngineError.

Mutations (drawn by hypothesis) truncate the text, delete, duplicate, swap or replace tokens,
corrupt hex data (bad digit, odd length, a space inside) and insert junk characters. Whatever
comes out, `parse_nanoengine` must return a `Program` or raise a `NanoEngineError` (never an
internal error, a Lark exception, or anything else) within two seconds, and an error must be
located inside the text. When a mutant parses, printing it must give text that parses back to
the same tree.

Hostile values (issue 11): integers are replaced by int64 and int8 edge values, values in
[2^63, 2^64) (which once wrapped to negative numbers), huge and very long literals (beyond
Python's 4300-digit int-str limit); file bytes get a byte order mark, invalid UTF-8 or a cut
multi-byte character. These mutants go through the whole importer as well (`.ne` bytes ->
IR), at the nq level (the README sample) and the hw level (inputs/small_hw.ne): each must
give a module or a located `NanoEngineError`, within the time bound. About 5000 cases; the
file runs in about 25 s of CPU on two cores.
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.ne.errors import NanoEngineError, NanoEngineInternalError
from nanoir.grammar.ne.importer import import_nanoengine_bytes
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.syntax_tree import Program
from xdsl.dialects.builtin import ModuleOp

from nanoir.testing.programs import examples
from nanoir.testing.text import join_tokens
from nanoir.testing.text import tokens_and_gaps as split_tokens

SMALL = (Path(__file__).parent / "inputs" / "small.ne").read_text()
SMALL_HW = (Path(__file__).parent / "inputs" / "small_hw.ne").read_text()
SAMPLE = (Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne").read_text()
# nanoir's unsigned-code extension (issue 20): Q with signed=0, at the hw level on a uint8_t output
SAMPLE_UNSIGNED = SAMPLE.replace("attr=[bit_len=8]", "attr=[bit_len=8, signed=0]")
SMALL_HW_UNSIGNED = (
    SMALL_HW.replace("attr=[bit_len=8, exp=5],", "attr=[bit_len=8, exp=5, signed=0],")
    .replace("let Q_n1_o0: Tensor<int8_t>", "let Q_n1_o0: Tensor<uint8_t>")
    .replace(
        "Conv_n1_Q_n1_o0: mem Tensor = {type=int8_t", "Conv_n1_Q_n1_o0: mem Tensor = {type=uint8_t"
    )
)

VARIED = """\
// constants
let s_k: Tensor = {type=Any, shape:NC=[1, 2], data=[0x0A0B0C0D, 0xDEADBEEF]};
let c: Tensor<little_float_32> = {shape=[], data=0x0000803f} ;
let i: Tensor<int64_t> = {shape=[1], data=0xffffffffffffffff} ;
let data: Tensor<Any>  = {shape:=[]};

// runtime
let x: Tensor<Any> = {shape:BCMD=[-1, 1, 1, 1]};
let y: Tensor<Any> = {shape:BCMD=[-1, 1, 1, 1]};
let x_c: mem Tensor = {type=Any, shape:BCMD=[-1, 1, 1, 1]};
let g: init Node = {
    op_type=Gather,
    attr=[axis=-1, eps=1e-05, alpha=-3.25E+2, mode=nearest, perm=[[0, 1], [], [2.5, x]]],
    in_s=[c, i],
    out_s=[data]
};
let n: Node = {
    op_type=Mystery,
    attr=[scale_k=s_k],
    in_s=[x, data, s_k],
    mem_s=[x_c],
    out_s=[y]
};

// call
func init(){
    g.do();
}
func runtime(){
    n.do();
}
"""

# Large enough for the parser's large-blob shortcut, so its fallback paths get fuzzed too.
_BLOB = np.random.default_rng(3).integers(0, 256, 40000, dtype=np.uint8).tobytes()
BIG = (
    f"let big: Tensor<uint8_t> = {{shape=[40000], data=0x{_BLOB.hex()}}} ;\n"
    f"let up: Tensor<uint8_t> = {{shape=[200, 200], data=0x{_BLOB.hex().upper()}}} ;\n"
    "func init(){\n}\nfunc runtime(){\n}\n"
)

CORPUS = [SMALL, VARIED, BIG]

_TOKEN = re.compile(r"//[^\n]*|0x[0-9A-Fa-f]*|-?[0-9.][0-9.eE+-]*|[A-Za-z_][A-Za-z0-9_]*|\S")
JUNK = st.sampled_from(
    list("@#$%^&*!?~`'\"\\|<>{}[](),;:=.-+/\t\n\r\x00\x7f")
    + ["\u0663", "\u00e9", "\ud800", "0x", "//", "é", "\ufeff"]
)
MAX_SECONDS = 10.0
"""A hang bound per case, not a speed test: cases take milliseconds, a hang never ends."""


def tokens_and_gaps(text: str) -> tuple[list[str], list[str]]:
    return split_tokens(text, _TOKEN)


@st.composite
def mutants(draw: st.DrawFn, sources: list[str]) -> str:
    text = draw(st.sampled_from(sources))
    for _ in range(draw(st.integers(1, 3))):
        tokens, gaps = tokens_and_gaps(text)
        kind = draw(
            st.sampled_from(["truncate", "delete", "duplicate", "swap", "replace", "hex", "junk"])
        )
        if not tokens or kind == "truncate":
            text = text[: draw(st.integers(0, len(text)))]
            continue
        i = draw(st.integers(0, len(tokens) - 1))
        if kind == "delete":
            del tokens[i]
            del gaps[i]
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
            gaps.insert(i, draw(st.sampled_from(["", " ", "\n"])))
        elif kind == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == "replace":
            tokens[i] = draw(st.sampled_from(tokens))
        elif kind == "hex":
            hexes = [k for k, t in enumerate(tokens) if t.startswith("0x")]
            if hexes:
                k = draw(st.sampled_from(hexes))
                tok = tokens[k]
                at = draw(st.integers(2, len(tok)))
                how = draw(st.sampled_from(["bad digit", "drop digit", "space", "truncate"]))
                if how == "bad digit":
                    tok = tok[:at] + draw(st.sampled_from("gGxz-. ")) + tok[at + 1 :]
                elif how == "drop digit":
                    tok = tok[: max(at - 1, 2)] + tok[at:]
                elif how == "space":
                    tok = tok[:at] + " " + tok[at:]
                else:
                    tok = tok[:at]
                tokens[k] = tok
        else:  # junk
            text = join_tokens(tokens, gaps)
            at = draw(st.integers(0, len(text)))
            text = text[:at] + "".join(draw(st.lists(JUNK, min_size=1, max_size=3))) + text[at:]
            continue
        text = join_tokens(tokens, gaps)
    return text


def assert_parses_or_reports(text: str) -> None:
    """A Program that prints and parses back, or a located NanoEngineError; nothing else."""
    start = time.perf_counter()
    try:
        program = parse_nanoengine(text, "fuzz.ne")
    except NanoEngineInternalError:
        raise
    except NanoEngineError as err:
        assert 1 <= err.line <= text.count("\n") + 1
        last_line = len(text.split("\n")[err.line - 1])
        assert 1 <= err.column <= last_line + 1
        assert str(err).startswith(f"fuzz.ne:{err.line}:{err.column}: error: ")
    else:
        assert isinstance(program, Program)
        assert parse_nanoengine(print_nanoengine(program)) == program
    assert time.perf_counter() - start < MAX_SECONDS


@settings(max_examples=examples(2500))
@given(mutants([SMALL, VARIED]))
def test_mutated_small_programs(text: str) -> None:
    assert_parses_or_reports(text)


@settings(max_examples=examples(500))
@given(mutants([BIG]))
def test_mutated_large_blobs(text: str) -> None:
    assert_parses_or_reports(text)


@settings(max_examples=examples(300))
@given(
    st.text(max_size=80)
    | st.lists(st.sampled_from(_TOKEN.findall(VARIED)) | JUNK, max_size=40).map(" ".join)
)
def test_random_text(text: str) -> None:
    assert_parses_or_reports(text)


def test_every_prefix_of_a_program() -> None:
    for end in range(len(VARIED) + 1):
        assert_parses_or_reports(VARIED[:end])


def test_every_single_token_deletion() -> None:
    tokens, gaps = tokens_and_gaps(SMALL)
    for i in range(len(tokens)):
        assert_parses_or_reports(
            join_tokens(tokens[:i] + tokens[i + 1 :], gaps[:i] + gaps[i + 1 :])
        )


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    for depth in (65, 1000, 10_000):
        attr = "[" * depth + "]" * depth
        text = SMALL.replace("attr=[]", f"attr=[k={attr}]")
        assert_parses_or_reports(text)
        assert_parses_or_reports(text[: len(text) // 2])


# ---------------------------------------------------------------------------------------
# Hostile values and bytes (issue 11), through the parser and the whole importer
# ---------------------------------------------------------------------------------------

_INT = re.compile(r"(?<![0-9A-Za-z_.x])-?[0-9]+(?![0-9A-Za-z_.])")
_EDGES = [
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    -(2**63) - 1,
    10**30,
    -(10**30),
    2**31,
    2**32,
    127,
    128,
    -128,
    -129,
    255,
    256,
    0,
    -1,
    -2,
    16,
    17,
]
HOSTILE_INTS = st.one_of(
    st.sampled_from(_EDGES).map(str),
    st.integers(2**63, 2**64 - 1).map(str),  # once read as value - 2**64
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.integers(4290, 4400).map(lambda n: "9" * n),  # around the int-str conversion limit
    st.integers(4290, 4400).map(lambda n: "-" + "1" * n),
    st.integers(4290, 4400).map(lambda n: "0" * n + "7"),  # long, but a small value
)
BAD_BYTES = st.sampled_from(
    [b"\x80", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\xe2\x82"]
)


@st.composite
def int_mutants(draw: st.DrawFn, sources: list[str]) -> str:
    """`sources` with one to three integers replaced by hostile ones."""
    text = draw(st.sampled_from(sources))
    for _ in range(draw(st.integers(1, 3))):
        found = list(_INT.finditer(text))
        if not found:
            break
        m = draw(st.sampled_from(found))
        text = text[: m.start()] + draw(HOSTILE_INTS) + text[m.end() :]
    return text


@st.composite
def byte_mutants(draw: st.DrawFn, sources: list[str]) -> bytes:
    """`sources` as UTF-8 with a byte order mark, bad bytes, or a cut multi-byte character."""
    raw = draw(st.sampled_from(sources)).encode()
    if draw(st.booleans()):
        raw = "\u00e9\u20ac\U0001f600".encode().join(
            raw.split(b"//", 1)
        )  # multi-byte text in a comment
    kinds = draw(st.lists(st.sampled_from(["bom", "bad", "cut"]), min_size=1, max_size=3))
    for kind in kinds:
        at = draw(st.integers(0, len(raw)))
        if kind == "bad":
            raw = raw[:at] + draw(BAD_BYTES) + raw[at:]
        elif kind == "cut":
            multi = [i for i, b in enumerate(raw) if b >= 0xC0]
            if multi:
                i = draw(st.sampled_from(multi))
                raw = raw[: i + 1] + raw[i + 2 :]
    if "bom" in kinds:
        raw = b"\xef\xbb\xbf" + raw
    return raw


def assert_imports_or_reports(raw: bytes) -> None:
    """A module, or a located NanoEngineError; nothing else, within the time bound."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # import warnings (unknown op types, paddings)
            module = import_nanoengine_bytes(raw, "fuzz.ne")
    except NanoEngineInternalError:
        raise
    except NanoEngineError as err:
        text = raw.decode("utf-8", errors="replace").removeprefix("\ufeff")
        lines = text.split("\n")
        assert 1 <= err.line <= len(lines)
        assert 1 <= err.column <= len(lines[err.line - 1]) + 1
        assert str(err).startswith(f"fuzz.ne:{err.line}:{err.column}: error: ")
        assert err.excerpt is not None and str(err).endswith("^")  # the line and a caret
    else:
        assert isinstance(module, ModuleOp)
    assert time.perf_counter() - start < MAX_SECONDS


@settings(max_examples=600, deadline=None)
@given(int_mutants([SMALL, VARIED]) | mutants([SMALL, VARIED]).map(lambda t: "\ufeff" + t))
def test_hostile_integers_and_bom_parse_or_report(text: str) -> None:
    assert_parses_or_reports(text.removeprefix("\ufeff"))
    if text.startswith("\ufeff"):
        assert_parses_or_reports(text)


@settings(max_examples=400, deadline=None)
@given(int_mutants([SMALL_HW, SMALL_HW_UNSIGNED]) | mutants([SMALL_HW, SMALL_HW_UNSIGNED]))
def test_hostile_hw_programs_import_or_report(text: str) -> None:
    # A lone surrogate (from JUNK) becomes bytes that are not UTF-8: a located error too.
    assert_imports_or_reports(text.encode("utf-8", errors="surrogatepass"))


@settings(max_examples=150, deadline=None)
@given(int_mutants([SAMPLE, SAMPLE_UNSIGNED]))
def test_hostile_nq_programs_import_or_report(text: str) -> None:
    assert_imports_or_reports(text.encode())


@settings(max_examples=300, deadline=None)
@given(byte_mutants([SMALL, VARIED, SMALL_HW, SAMPLE]))
def test_hostile_bytes_import_or_report(raw: bytes) -> None:
    assert_imports_or_reports(raw)
