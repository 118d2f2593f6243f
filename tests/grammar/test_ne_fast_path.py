"""The `.ne` fast path (`ne.fast`) against the grammar (Lark): same tree or no answer.

Whenever `fast_items` reads a text, Lark must read it too and give the same items with the
same positions, hex case and comment spacing (fields that `==` ignores are compared too);
whenever Lark rejects a text, `fast_items` must give up on it (so the error is Lark's).
Texts: the sample programs, both levels of the node benchmark's programs, node declarations
generated with random spellings (blanks, comments, line breaks, nested attribute lists,
float spellings, hex case), and token-level mutants of all of these (about 3000 cases).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark.exceptions import UnexpectedInput
from nanoir.grammar.ne import parser as ne_parser
from nanoir.grammar.ne.errors import NanoEngineError
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.fast import fast_items
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.syntax_tree import Comment

from nanoir.testing.programs import examples
from nanoir.testing.text import join_tokens, tokens_and_gaps

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ne_nodes import hw_program, nq_program  # noqa: E402

INPUTS = sorted((ROOT / "tests" / "grammar" / "inputs").glob("*.ne"))
SAMPLES = [p.read_text() for p in INPUTS] + [(ROOT / "examples" / "readme_model.ne").read_text()]
NQ, _ = nq_program(40)
HW, _ = hw_program(40)
WORDS = """\
let s_k: Tensor = {type=Any, shape:NC=[1, 2], data=[0x0A0B0C0D, 0xDEADBEEF]};
let e: Tensor = {type=int8_t, shape:C=[], data=[]};
let c: Tensor<little_float_32> = {shape=[], data=0x0000803F} ;
let n: Tensor<int8_t> = {shape=[0], data=0x} ;
let data: Tensor<Any>  = {shape:=[]};
let g: init Node = {op_type=Gather, attr=[axis=-1, eps=1e-05, a=-3.25E+2, b=.5, c=5., m=x,
    perm=[[0, 1], [], [2.5, x]]], in_s=[c, s_k], out_s=[data]};
func init(){ g.do(); }
func runtime(){}
"""
CORPUS = [*SAMPLES, NQ, HW, WORDS]

_TOKEN = re.compile(r"//[^\n]*|0x[0-9A-Fa-f]*|-?[0-9.][0-9.eE+-]*|[A-Za-z_][A-Za-z0-9_]*|\S")
GAPS = [
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "\r\n",
    "\f",
    " \n\n ",
    "// note\n",
    " //x\r\n",
    "\v",
    "\u00a0",
    "//x\r",
]


def full(value: object) -> object:
    """`value` as nested tuples of every field, including those `==` leaves out (positions)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value).__name__, *(full(getattr(value, f.name)) for f in fields))
    if isinstance(value, tuple):
        return tuple(full(v) for v in value)
    return value


def fast(text: str) -> object:
    return fast_items(text, ne_parser._fromhex, ne_parser._blank_lines_before)


def lark(text: str) -> object:
    """The Lark path's items, or the error class when it rejects the text."""
    try:
        return ne_parser._parse_items(text, {})
    except (UnexpectedInput, ne_parser._LocatedError) as err:
        return type(err)


def assert_agree(text: str) -> bool:
    """The fast path gives Lark's tree or nothing; returns whether it gave one."""
    items = fast(text)
    if items is None:
        return False
    expected = lark(text)
    assert isinstance(expected, tuple), f"the fast path read text that Lark rejects: {text!r}"
    assert full(items) == full(expected)
    return True


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_the_fast_path_reads_the_corpus_as_lark_does(index: int) -> None:
    assert assert_agree(CORPUS[index])


@pytest.mark.parametrize("make", [nq_program, hw_program])
def test_benchmark_programs_import_and_use_the_fast_path(make) -> None:  # type: ignore[no-untyped-def]
    text, count = make(30)
    assert fast(text) is not None
    module = import_nanoengine(text, "bench.ne")
    assert sum(1 for _ in module.walk()) > count
    if make is nq_program:  # nq keeps names and layout: repeated nodes (ops reused) round-trip
        assert export_nanoengine(module) == text


def test_a_comment_inside_a_declaration_goes_to_lark() -> None:
    text = SAMPLES[0].replace("op_type=Q,", "op_type=Q, // the quantizer", 1)
    assert fast(text) is None
    program = parse_nanoengine(text)
    assert program.declarations == parse_nanoengine(SAMPLES[0]).declarations
    assert full(program.items) == full(lark(text))


@pytest.mark.parametrize(
    "text",
    [
        "// note\rlet t: Tensor<Any> = {shape:BC=[-1, 2]};\n",
        "let t: Tensor<Any> = {shape:BC=[-1, 2]}; // a\rlet u: Tensor<Any> = {shape:C=[3]};\n",
        "// one\r// two\r\n\rlet t: Tensor<Any> = {shape:BC=[-1, 2]};\r",
        "func init(){ a.do(); } // x\rfunc runtime(){ b.do(); }\n",
    ],
)
def test_a_lone_carriage_return_ends_a_comment(text: str) -> None:
    """A comment runs to the end of the line, and a lone ``\\r`` ends it as the grammar says
    (``COMMENT: //[^\\r\\n]*``): what follows the ``\\r`` is read, by the fast path as by
    Lark, which must agree (and the fast path must take these texts).

    Mutant it kills (checked in a copy; issue 19 lists it as surviving the suite): the fast path's
    comment pattern ``//[^\\r\\n]*`` -> ``//[^\\n]*`` (grammar/ne/fast.py, ``_GAP``), which swallows
    the declaration after the ``\\r``."""
    assert assert_agree(text)
    items = fast(text)
    assert isinstance(items, tuple)
    comments = [i for i in items if isinstance(i, Comment)]
    assert comments and all("\r" not in c.text for c in comments)
    assert len(items) - len(comments) == text.count("let ") + text.count("func ")


@pytest.mark.parametrize(
    "bad",
    [
        "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]}",  # no ';'
        "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 99999999999999999999]};",
        "let x: Tensor<int8_t> = {shape=[1], data=0x123} ;",  # odd digits
        "let x: Tensor = {type=Any, shape:C=[1], data=[0x0102]};",  # short word
        "let n: Node = {op_type=Q, attr=[k="
        + "[" * 70
        + "]" * 70
        + "], in_s=[], mem_s=[], out_s=[]};",
        "letx: Tensor<Any> = {shape:C=[1]};",
        "let x: Tensor<Any> = {shape:C1=[1]};",
    ],
)
def test_errors_are_the_grammars(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Text the fast path does not read is Lark's to report: the same error as without it."""
    assert fast(bad) is None
    with pytest.raises(NanoEngineError) as err:
        parse_nanoengine(bad, "bad.ne")
    monkeypatch.setattr(ne_parser, "fast_items", lambda *args: None)
    with pytest.raises(NanoEngineError) as lark_err:
        parse_nanoengine(bad, "bad.ne")
    assert str(err.value) == str(lark_err.value)


# -- generated node declarations ----------------------------------------------------------

NAMES = st.from_regex(re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,6}"), fullmatch=True)
INTS = st.integers(-(1 << 64), 1 << 64).map(str) | st.sampled_from(["007", "-0", "0" * 20 + "1"])
FLOATS = st.sampled_from(["1.0", "1e-05", "-3.25E+2", ".5", "5.", "1.5e3", "2E7", "1.2.3", "1e"])
LEAVES = NAMES | INTS | FLOATS
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3).map(lambda v: "[" + ", ".join(v) + "]"),
    max_leaves=8,
)


@st.composite
def node_texts(draw: st.DrawFn) -> str:
    """A node declaration (and its neighbours) spelled with random blanks and comments."""
    attrs = draw(st.lists(st.tuples(NAMES, VALUES), max_size=4))
    init = draw(st.booleans())
    tokens = ["let", draw(NAMES), ":", *(["init"] if init else []), "Node", "=", "{"]
    tokens += ["op_type", "=", draw(NAMES), ",", "attr", "=", "["]
    for i, (key, value) in enumerate(attrs):
        tokens += ([","] if i else []) + [key, "=", value]
    tokens.append("]")
    for field in ["in_s", "out_s"] if init else ["in_s", "mem_s", "out_s"]:
        names = draw(st.lists(NAMES, max_size=3))
        tokens += [",", field, "=", "[", ", ".join(names), "]"]
    tokens += ["}", ";"]
    gaps = [draw(st.sampled_from(GAPS[:8])) if draw(st.booleans()) else " " for _ in tokens]
    # Keywords need a blank after them; `//` gaps end with a line break, so they count.
    words = {"let", "init", "Node"}
    gaps = [(g or " ") if i and tokens[i - 1] in words else g for i, g in enumerate(gaps)]
    text = "".join(g + t for g, t in zip(gaps, tokens))
    before = draw(st.sampled_from(["", "// head\n", "let t: Tensor<Any> = {shape:BC=[-1, 2]};\n"]))
    after = draw(st.sampled_from(["", "\n", "\nfunc runtime(){ a.do(); b . do ( ) ; }\n"]))
    return before + text + after


@settings(max_examples=examples(800))
@given(node_texts())
def test_generated_nodes(text: str) -> None:
    assert_agree(text)


@st.composite
def mutants(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from([SAMPLES[0], SAMPLES[1], WORDS, NQ[:3000] + "\n", HW[:3000]]))
    for _ in range(draw(st.integers(1, 3))):
        tokens, gaps = tokens_and_gaps(text, _TOKEN)
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "replace", "gap", "int", "hex", "cut"]))
        if kind == "delete":
            del tokens[i], gaps[i]
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
            gaps.insert(i, draw(st.sampled_from(GAPS)))
        elif kind == "replace":
            tokens[i] = draw(st.sampled_from(tokens))
        elif kind == "gap":
            gaps[i] = draw(st.sampled_from(GAPS))
        elif kind == "int":
            tokens[i] = draw(INTS | FLOATS)
        elif kind == "hex":
            tokens[i] = draw(st.sampled_from(["0x", "0x1", "0xAb", "0x0A0B0C0D", "0xzz", "0x1 2"]))
        else:
            text = join_tokens(tokens, gaps)
            text = text[: draw(st.integers(0, len(text)))]
            continue
        text = join_tokens(tokens, gaps)
    return text


@settings(max_examples=examples(2000))
@given(mutants())
def test_mutants(text: str) -> None:
    assert_agree(text)
