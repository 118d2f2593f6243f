"""Every syntax and semantic error of the `.ne` parser: message and `file:line:col`.

Each bad input is written with a `§` where the error must point; the test removes the marker
and computes the expected line and column from where it was, so the positions are derived
from the input, never copied from the parser's output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nanoir.grammar.ne import parser as ne_parser
from nanoir.grammar.ne.check import check_program, find_problems
from nanoir.grammar.ne.errors import (
    NanoEngineError,
    NanoEngineSemanticError,
    NanoEngineSyntaxError,
)
from nanoir.grammar.ne.parser import parse_nanoengine, parse_nanoengine_file
from nanoir.grammar.ne.syntax_tree import ConstTensor, Function, InitTensor, Program

MARK = "§"
FUNCS = "func init(){\n}\nfunc runtime(){\n}\n"

# A small valid program the cases below are variations of.
VALID = (Path(__file__).parent / "inputs" / "small.ne").read_text()


def located(marked: str) -> tuple[str, int, int]:
    """The text without its one marker, and the marker's 1-based line and column."""
    assert marked.count(MARK) == 1, "exactly one marker"
    at = marked.index(MARK)
    line = marked.count("\n", 0, at) + 1
    column = at - (marked.rfind("\n", 0, at) + 1) + 1
    return marked[:at] + marked[at + 1 :], line, column


def mark(old: str, new_marked: str, base: str = VALID) -> str:
    """`base` with its one `old` replaced by `new_marked` (which carries the marker)."""
    assert base.count(old) == 1, old
    return base.replace(old, new_marked)


def test_valid_base_program_parses() -> None:
    program = parse_nanoengine(VALID)
    assert program.init_calls == ("qn",) and program.runtime_calls == ("rn",)


SYNTAX_CASES: list[tuple[str, str, str]] = [
    (
        "missing ';' before next let",
        mark("data=0x07} ;\nlet", "data=0x07}\n" + MARK + "let"),
        "expected ';', found 'let'",
    ),
    (
        "missing ';' at end of input",
        VALID[: VALID.rindex(";")] + MARK,
        "expected ';', found end of input",
    ),
    ("stray character", VALID + MARK + "@", "expected 'func' or 'let', found '@'"),
    (
        "keyword glued to a name",
        mark("let x:", MARK + "letx:"),
        "expected 'func', 'let' or end of input, found 'letx'",
    ),
    (
        "missing mem_s in runtime node",
        mark("    mem_s=[m],\n    out_s", "    " + MARK + "out_s"),
        "expected 'mem_s', found 'out_s'",
    ),
    (
        "missing attribute value",
        mark("bit_len=8", "bit_len=" + MARK),
        "expected '[', a float, a name or an integer, found ']'",
    ),
    (
        "number glued to letters",
        mark("bit_len=8", "bit_len=" + MARK + "8x"),
        "expected '[', a float, a name or an integer, found '8x'",
    ),
    (
        "odd number of hex digits",
        mark("data=0x0102", "data=" + MARK + "0x010"),
        "hex data has an odd number of digits (3)",
    ),
    (
        "non-hex digit",
        mark("data=0x0102", "data=" + MARK + "0x01zz"),
        "expected hex data (0x...), found '0x01zz'",
    ),
    (
        "name in a shape",
        mark("shape=[2]", "shape=[" + MARK + "two]"),
        "expected ']' or an integer, found 'two'",
    ),
    (
        "digit in a layout",
        mark("shape:C=[2]", "shape:" + MARK + "C1=[2]"),
        "expected '=' or a layout (such as BCMD), found 'C1'",
    ),
    (
        "non-ASCII digit",
        mark("shape=[1]", "shape=[" + MARK + "\u0663]"),
        "expected ']' or an integer, found '\u0663'",
    ),
    (
        "missing '{' of a node",
        mark("let rn: Node = {", "let rn: Node = " + MARK + "op_type"),
        "expected '{', found 'op_type'",
    ),
    (
        "unknown declaration kind",
        mark("let m: mem Tensor", "let m: " + MARK + "memory Tensor"),
        "expected 'Node', 'Tensor', 'init' or 'mem', found 'memory'",
    ),
    (
        "call without do",
        mark("    qn.do();", "    qn." + MARK + "run();"),
        "expected 'do', found 'run'",
    ),
    (
        "truncated inside hex data",
        "let w: Tensor<int8_t> = {shape=[2], data=0x01" + MARK,
        "expected '}', found end of input",
    ),
    (
        "word of the wrong width",
        "let s: Tensor = {type=Any, shape:NC=[1, 2], data=[0x0A0B0C0D, "
        + MARK
        + "0x0A0B]};\n"
        + FUNCS,
        "a data word has 8 hex digits, found 4",
    ),
    (
        "lists nested too deeply",
        mark("attr=[bit_len=8]", "attr=[" + MARK + "k=" + "[" * 70 + "]" * 70 + "]"),
        "attribute 'k' has lists nested deeper than 64",
    ),
]


@pytest.mark.parametrize(
    "marked, message", [c[1:] for c in SYNTAX_CASES], ids=[c[0] for c in SYNTAX_CASES]
)
def test_syntax_errors(marked: str, message: str) -> None:
    text, line, column = located(marked)
    with pytest.raises(NanoEngineSyntaxError) as info:
        parse_nanoengine(text, "bad.ne")
    err = info.value
    assert (err.filename, err.line, err.column, err.message) == ("bad.ne", line, column, message)
    assert str(err).startswith(f"bad.ne:{line}:{column}: error: {message}\n")


SEMANTIC_CASES: list[tuple[str, str, str]] = [
    (
        "duplicate declaration",
        mark("let y: Tensor<Any>", "let " + MARK + "w: Tensor<Any>").replace(
            "out_s=[y]", "out_s=[w]"
        ),
        "duplicate declaration of 'w' (first declared at line 1)",
    ),
    (
        "undefined input",
        mark("in_s=[x, q]", "in_s=[x, " + MARK + "nope]"),
        "undefined name 'nope' in in_s of node 'rn'",
    ),
    (
        "undefined cache",
        mark("mem_s=[m]", "mem_s=[" + MARK + "mm]"),
        "undefined name 'mm' in mem_s of node 'rn'",
    ),
    (
        "output never declared",
        mark("out_s=[q]", "out_s=[" + MARK + "q2]"),
        "undefined name 'q2' in out_s of node 'qn'",
    ),
    (
        "data longer than the shape",
        mark("data=0x07}", "data=" + MARK + "0x0707}"),
        "data of 'e' has 2 bytes, but shape [1] of int8_t needs 1",
    ),
    (
        "data of a scalar",
        mark("{shape=[1], data=0x07}", "{shape=[], data=" + MARK + "0x}"),
        "data of 'e' has 0 bytes, but shape [] of int8_t needs 1",
    ),
    (
        "unknown dtype",
        mark("let e: Tensor<int8_t>", "let " + MARK + "e: Tensor<int4_t>"),
        "unknown dtype 'int4_t' of 'e'; expected one of little_float_16, little_float_32, little_float_64, "
        "int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t",
    ),
    (
        "call of an undeclared node",
        mark("    qn.do();", "    " + MARK + "ghost.do();"),
        "func init calls undeclared node 'ghost'",
    ),
    (
        "call of a tensor",
        mark("    rn.do();", "    " + MARK + "x.do();"),
        "func runtime calls 'x', which is a runtime tensor, not a node",
    ),
    (
        "init calls a runtime node",
        mark("    qn.do();", "    " + MARK + "rn.do();"),
        "func init calls 'rn', which is a runtime node; expected an init node",
    ),
    (
        "missing func runtime",
        VALID[: VALID.index("func runtime")] + MARK,
        "missing 'func runtime(){...}'",
    ),
    (
        "unknown function",
        mark("func runtime(){", "func " + MARK + "main(){"),
        "unknown function 'main'; expected 'init' or 'runtime'",
    ),
    (
        "duplicate function",
        VALID + "func " + MARK + "init(){\n}\n",
        "duplicate 'func init' (first declared at line 20)",
    ),
    (
        "layout of the wrong length",
        mark("let x: Tensor<Any> = {shape:BCMD", "let " + MARK + "x: Tensor<Any> = {shape:BCM"),
        "layout 'BCM' of 'x' has 3 letters but shape [-1, 2, 1, 3] has 4 dimensions",
    ),
    (
        "negative dimension of a constant",
        mark(
            "let w: Tensor<int8_t> = {shape=[2], data=0x0102}",
            "let " + MARK + "w: Tensor<int8_t> = {shape=[-2], data=0x0102}",
        ),
        "shape [-2] of 'w' has dimension -2; dimensions must be 0 or more",
    ),
    (
        "runtime dimension below -1",
        mark(
            "let y: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]}",
            "let " + MARK + "y: Tensor<Any> = {shape:BCMD=[-1, -2, 1, 3]}",
        ),
        "shape [-1, -2, 1, 3] of 'y' has dimension -2; dimensions must be -1 (the batch) or more",
    ),
    (
        "tensor produced twice",
        mark("out_s=[y]", "out_s=[y, " + MARK + "y]"),
        "'y' is already an output of node 'rn'",
    ),
    (
        "cache used as input",
        mark("in_s=[x, q]", "in_s=[x, " + MARK + "m]"),
        "'m' in in_s of node 'rn' is a mem tensor; expected a constant, init or runtime tensor",
    ),
    (
        "init node reads a runtime tensor",
        mark("in_s=[w, e]", "in_s=[w, " + MARK + "x]"),
        "'x' in in_s of node 'qn' is a runtime tensor; expected a constant or init tensor",
    ),
    (
        "runtime node writes an init tensor",
        mark("out_s=[y]", "out_s=[" + MARK + "q]"),
        "'q' in out_s of node 'rn' is an init tensor; expected a runtime tensor",
    ),
    (
        "tensor in mem_s",
        mark("mem_s=[m]", "mem_s=[" + MARK + "x]"),
        "'x' in mem_s of node 'rn' is a runtime tensor; expected a mem tensor",
    ),
    (
        "node used as a tensor",
        mark("in_s=[x, q]", "in_s=[x, " + MARK + "qn]"),
        "'qn' in in_s of node 'rn' is an init node; expected a constant, init or runtime tensor",
    ),
    (
        "duplicate attribute",
        mark("attr=[bit_len=8]", "attr=[bit_len=8, " + MARK + "bit_len=4]"),
        "duplicate attribute 'bit_len' in node 'qn'",
    ),
    (
        "word data of a typed word tensor",
        "let s: Tensor = {type=int32_t, shape:NC=[1, 2], data=[" + MARK + "0x0A0B0C0D]};\n" + FUNCS,
        "data of 's' has 4 bytes, but shape [1, 2] of int32_t needs 8",
    ),
]


@pytest.mark.parametrize(
    "marked, message", [c[1:] for c in SEMANTIC_CASES], ids=[c[0] for c in SEMANTIC_CASES]
)
def test_semantic_errors(marked: str, message: str) -> None:
    text, line, column = located(marked)
    with pytest.raises(NanoEngineSemanticError) as info:
        parse_nanoengine(text, "bad.ne")
    err = info.value
    assert (err.filename, err.line, err.column, err.message) == ("bad.ne", line, column, message)
    # Without checks the same text parses.
    parse_nanoengine(text, "bad.ne", check=False)


def test_the_first_problem_in_file_order_is_reported() -> None:
    marked = mark("in_s=[w, e]", "in_s=[" + MARK + "a, b]").replace("in_s=[x, q]", "in_s=[x, c]")
    text, line, column = located(marked)
    with pytest.raises(NanoEngineSemanticError) as info:
        parse_nanoengine(text)
    assert (info.value.line, info.value.column) == (line, column)
    messages = [p.message for p in find_problems(parse_nanoengine(text, check=False))]
    assert messages == [
        "undefined name 'a' in in_s of node 'qn'",
        "undefined name 'b' in in_s of node 'qn'",
        "undefined name 'c' in in_s of node 'rn'",
    ]


def test_message_shows_the_line_and_a_caret() -> None:
    text, line, column = located(
        mark("let y: Tensor<Any> = {", "let y: Tensor<Any> = " + MARK + "[{")
    )
    with pytest.raises(NanoEngineError) as info:
        parse_nanoengine(text, "model.ne")
    lines = str(info.value).split("\n")
    source_line = text.split("\n")[line - 1]
    assert lines == [
        f"model.ne:{line}:{column}: error: expected '{{', found '['",
        source_line,
        " " * (column - 1) + "^",
    ]


def test_caret_keeps_tabs() -> None:
    text, line, column = located("\tlet\tw: Tensor<int8_t> = {shape=[1], data=0x07}\t" + MARK + "}")
    with pytest.raises(NanoEngineError) as info:
        parse_nanoengine(text)
    lines = str(info.value).split("\n")
    assert lines[1] == text
    assert lines[2] == "".join("\t" if c == "\t" else " " for c in text[: column - 1]) + "^"


def test_long_lines_are_shown_as_a_window() -> None:
    digits = "ab" * 3000
    text, line, column = located(
        "let w: Tensor<int8_t> = {shape=[2], data=" + MARK + "0x" + digits + "} ;\n" + FUNCS
    )
    with pytest.raises(NanoEngineSemanticError) as info:
        parse_nanoengine(text)
    assert (info.value.line, info.value.column) == (line, column)
    _, excerpt, caret = str(info.value).split("\n")
    assert len(excerpt) < 120
    assert excerpt[caret.index("^") :].startswith("0xabab")


def test_errors_after_a_lifted_blob_point_at_the_real_text(monkeypatch: pytest.MonkeyPatch) -> None:
    digits = np.random.default_rng(2).integers(0, 256, 40000, dtype=np.uint8).tobytes().hex()
    big = f"let big: Tensor<uint8_t> = {{shape=[40000], data=0x{digits}}} ;\n"
    assert ne_parser._lift_blobs(big)[1], (
        "the blob must take the shortcut for this test to mean anything"
    )
    cases = [
        (
            big + "let z: Tensor<int8_t> = {shape=[1], data=0x07} " + MARK + "let",
            NanoEngineSyntaxError,
        ),
        (
            big.replace("shape=[40000]", "shape=[39999]").replace("data=0x", "data=" + MARK + "0x")
            + FUNCS,
            NanoEngineSemanticError,
        ),
        (
            big + "let " + MARK + "big: Tensor<Any>  = {shape:C=[1]};\n" + FUNCS,
            NanoEngineSemanticError,
        ),
    ]
    for marked, kind in cases:
        text, line, column = located(marked)
        with pytest.raises(kind) as info:
            parse_nanoengine(text, "big.ne")
        assert (info.value.line, info.value.column) == (line, column), str(info.value)[:200]


def test_file_with_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.ne"
    path.write_bytes(b"// ok\n// caf\xc3\xa9 \xff\n")
    with pytest.raises(NanoEngineSyntaxError) as info:
        parse_nanoengine_file(path)
    # Line 2; "// café " is 8 characters, so the bad byte is character 9.
    assert (info.value.filename, info.value.line, info.value.column) == (str(path), 2, 9)
    assert info.value.message == "expected UTF-8 text, found invalid byte 0xff"
    # The line is shown (the bad byte as U+FFFD) with a caret under the bad byte.
    assert str(info.value).endswith("\n// caf\u00e9 \ufffd\n        ^")


def test_empty_input_lacks_both_functions() -> None:
    with pytest.raises(NanoEngineSemanticError) as info:
        parse_nanoengine("", "empty.ne")
    assert str(info.value) == "empty.ne:1:1: error: missing 'func init(){...}'\n\n^"


def test_check_program_on_a_tree_built_by_hand() -> None:
    program = Program(
        (
            ConstTensor("a", "int8_t", (2,), b"\x01"),
            InitTensor("a", "Any", "C", (1,)),
            Function("init", ()),
            Function("runtime", ()),
        )
    )
    with pytest.raises(NanoEngineSemanticError) as info:
        check_program(program, "built")
    # No positions: the location falls back to 1:1, the message still names the problem.
    assert (
        str(info.value)
        == "built:1:1: error: data of 'a' has 1 bytes, but shape [2] of int8_t needs 2"
    )


def test_non_text_input_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        parse_nanoengine(b"func init(){}")  # type: ignore[arg-type]
