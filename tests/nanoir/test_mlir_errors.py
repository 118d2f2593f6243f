"""Hostile MLIR input: one located nanoir error, quickly, never a traceback or a hang.

Each test below failed on the code before issue 11: an unterminated string hung the parser
(xDSL's string pattern backtracks exponentially), an ``#nh.fixed`` exponent beyond int64 crashed
``nanoir-run``, a dense value out of its type's range or a non-UTF-8 byte was an unlocated
``ValueError`` (exit code 2), deep nesting was a ``RecursionError`` traceback, a huge splat a
``MemoryError``, an empty file "Could not parse entire input!", and an nh input without
``nq.rounding`` passed ``nanoir-opt`` but failed in ``nanoir-run`` with ``KeyError``.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects.nh import FixedAttr
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.utils.exceptions import ParseError, VerifyException

import nanoir
from nanoir.diagnostics import MAX_NESTING, MlirSyntaxError, NanoirDiagnostic


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the test run) if the block takes longer than ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"took more than {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def parse_error(text: str | bytes, seconds: float = 2.0) -> nanoir.Error:
    """The error ``nanoir.parse`` raises for ``text`` (which must be one, and located)."""
    with deadline(seconds), pytest.raises(nanoir.Error) as info:
        nanoir.parse(text, "bad.mlir")  # type: ignore[arg-type]
    err = info.value
    assert isinstance(err, MlirSyntaxError | NanoirDiagnostic), type(err)
    assert re.match(r"bad\.mlir:\d+:\d+\n", str(err)), str(err)
    assert "Traceback" not in str(err)
    return err


def caret_under(err: nanoir.Error, snippet: str) -> None:
    """The message shows the source line and a caret under ``snippet``."""
    lines = str(err).splitlines()
    line, carets = lines[1], lines[2]
    col = line.index(snippet)
    assert carets.startswith(" " * col + "^"), str(err)


HW = """\
func.func @f(%x: tensor<?x4xi8, #nh.fixed<3, BC>> {ATTRS}) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %y = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %y : tensor<?x4xi8, #nh.fixed<3, BC>>
}
"""
GOOD_ATTRS = (
    "nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>"
)


# -- 1. the hang --------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [26, 40, 60, 1000, 200_000])
def test_unterminated_string_is_an_error_not_a_hang(length: int) -> None:
    """The bound is on the work, not a tight clock: xDSL's pattern takes about 10 s at 26
    characters and doubles with each one (days at 40, millennia at 60), while the linear
    lexer reads 200,000 in about 0.05 s; a 60 s guard separates the two by orders of
    magnitude on any machine, however loaded, and never flakes on a slow one."""
    text = 'func.func @f() attributes {a = "' + "x" * length + "} {\n  func.return\n}\n"
    err = parse_error(text, seconds=60.0)
    assert "error: unterminated string literal: no closing '\"' on this line" in str(err)
    assert str(err).startswith("bad.mlir:1:32\n")
    assert len(str(err).splitlines()[1]) < 200  # a long line is cut around the caret


def test_unterminated_string_at_the_first_token() -> None:
    # The first token is lexed when the parser is built: that must not hang either.
    err = parse_error('"test.op' + "y" * 60 + "\n")
    assert "unterminated string literal" in str(err)


def test_invalid_escape_is_located_at_the_backslash() -> None:
    err = parse_error('"test.op"() {a = "abc\\q"} : () -> ()\n')
    assert str(err).startswith("bad.mlir:1:22\n")
    assert "invalid escape in string literal" in str(err)


def test_strings_still_lex_as_before() -> None:
    module = nanoir.parse('"test.op"() {a = "q\\"uote\\" \\0A \\\\ \\t", b = ""} : () -> ()')
    op = next(iter(module.body.block.ops))
    assert op.attributes["a"].data == 'q"uote" \n \\ \t'  # type: ignore[attr-defined]


# -- 2. #nh.fixed exponents ---------------------------------------------------------------------


@pytest.mark.parametrize("exp", ["99999999999999999999", "128", "-129", "[1, 500]"])
def test_fixed_exponent_out_of_int8_is_located(exp: str) -> None:
    text = HW.replace("#nh.fixed<3, BC>", f"#nh.fixed<{exp}, BC>").replace(" {ATTRS}", "")
    err = parse_error(text)
    assert "is outside -128..127 (NanoEngine stores exponents as int8)" in str(err)
    caret_under(err, exp.strip("[").split(",")[-1].strip(" ]") if "[" in exp else exp)


def test_fixed_exponent_limits() -> None:
    assert FixedAttr(127, "C").exp_list == [127]
    assert FixedAttr([-128, 0], "C").exp_list == [-128, 0]
    with pytest.raises(VerifyException, match="exponent 128 is outside -128..127"):
        FixedAttr(128, "C")


# -- 3. dense values, UTF-8, empty files ----------------------------------------------------------


@pytest.mark.parametrize(
    "literal",
    [
        "dense<300> : tensor<2xi8>",
        "dense<[1, -200]> : tensor<2xi8>",
        "dense<70000> : tensor<3xi16>",
    ],
)
def test_dense_value_out_of_range_is_located(literal: str) -> None:
    err = parse_error(f'"test.op"() {{v = {literal}}} : () -> ()\n')
    assert isinstance(err, ParseError)  # still an xDSL ParseError for callers catching that
    assert "out of range for type" in str(err)
    caret_under(err, literal)


def test_non_utf8_bytes_are_located_with_line_and_caret() -> None:
    text = b"func.func @f() {\n  // caf\xe9\n  func.return\n}\n"
    err = parse_error(text)
    assert str(err).startswith("bad.mlir:2:9\n")
    assert "not valid UTF-8: byte 0xe9" in str(err)
    assert "  // caf\N{REPLACEMENT CHARACTER}" in str(err)
    caret_under(err, "\N{REPLACEMENT CHARACTER}")


@pytest.mark.parametrize("text", ["", "\n\n", "// only a comment\n", b""])
def test_empty_file_is_an_empty_module(text: str | bytes) -> None:
    module = nanoir.parse(text)  # type: ignore[arg-type]
    assert isinstance(module, ModuleOp) and not list(module.body.block.ops)


def test_stray_token_says_what_it_found() -> None:
    err = parse_error("}\n")
    assert "error: expected an operation, found '}'" in str(err)


# -- 4. nesting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_NESTING + 1, 1000, 5000])
def test_deep_attribute_nesting_is_located(depth: int) -> None:
    text = '"test.op"() {a = ' + "[" * depth + "]" * depth + "} : () -> ()\n"
    err = parse_error(text)
    assert f"nesting too deep: more than {MAX_NESTING} levels" in str(err)
    assert len(str(err).splitlines()[1]) < 200


@pytest.mark.parametrize("depth", [200, 5000])
def test_deep_module_nesting_is_located(depth: int) -> None:
    text = "builtin.module {\n" * depth + "}\n" * depth
    err = parse_error(text)
    assert "nesting too deep" in str(err)
    assert str(err).startswith(f"bad.mlir:{MAX_NESTING + 1}:16\n")


def test_nesting_up_to_the_limit_parses_verifies_and_prints() -> None:
    depth = MAX_NESTING - 2  # the op's own `{` and the implicit module count too
    text = '"test.op"() {a = ' + "[" * depth + "]" * depth + "} : () -> ()\n"
    assert "[[[" in str(nanoir.parse(text))
    text = "builtin.module {\n" * (MAX_NESTING - 1) + "}\n" * (MAX_NESTING - 1)
    assert "builtin.module" in str(nanoir.parse(text))


@pytest.mark.parametrize(
    ("value", "comment"),
    [
        ("[" * 500, "{" * 500),
        ('\\"' + "(" * 100, "<" * 100),  # an escaped quote does not end the string
        ("<" * 70 + "->" * 40, "[" * 100 + '"'),  # nor does a quote in a comment open one
    ],
)
def test_brackets_in_strings_and_comments_do_not_count(value: str, comment: str) -> None:
    """Brackets inside a string or a comment are not nesting: the text parses, with the
    string intact; the same brackets outside them are refused as too deep (the control).

    Mutants this kills: the string or the comment alternative dropped from
    ``_NESTING_TOKENS`` (nanoir/diagnostics.py), or its escape handling."""
    text = f'"test.op"() {{a = "{value}"}} : () -> ()  // {comment}\n'
    module = nanoir.parse(text)
    op = next(iter(module.body.block.ops))
    assert op.attributes["a"].data == value.replace("\\", "")  # type: ignore[attr-defined]
    bare = value.replace('\\"', "").replace("->", "")
    closing = {"[": "]", "(": ")", "<": ">", "{": "}"}
    nested = bare + "".join(closing[c] for c in reversed(bare))
    err = parse_error(f'"test.op"() {{a = {nested}}} : () -> ()\n')
    assert "nesting too deep" in str(err)


# -- 5. huge splats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "literal",
    [
        "dense<1.0> : tensor<100000000000x4xf32>",
        'dense<"0x0000803F"> : tensor<100000000000xf32>',
        "dense<1> : tensor<99999999999999999999xi8>",
    ],
)
def test_huge_splat_is_refused_before_it_is_expanded(literal: str) -> None:
    err = parse_error(f'"test.op"() {{v = {literal}}} : () -> ()\n')
    assert re.search(
        r"error: dense literal of type tensor<\d+(x4)?x[fi]\d+> has \d+ elements "
        r"\([\d.]+ [TGM]iB\); nanoir accepts at most 256 MiB per literal",
        str(err),
    )
    caret_under(err, "tensor<")


@pytest.mark.parametrize(
    ("value", "elt", "dtype"),
    [
        ("-3", "i8", "<i1"),
        ("7", "i32", "<i4"),
        ("1.5", "f32", "<f4"),
        ("2", "f64", "<f8"),
        ("true", "i1", "<i1"),
    ],
)
def test_large_splats_are_fast_and_exact(value: str, elt: str, dtype: str) -> None:
    n = 1_000_000  # xDSL alone takes 4 s for a million integers
    with deadline(2.0):
        module = nanoir.parse(
            f'"test.op"() {{v = dense<{value}> : tensor<1000x1000x{elt}>}} : () -> ()'
        )
    attr = next(iter(module.body.block.ops)).attributes["v"]
    assert isinstance(attr, DenseIntOrFPElementsAttr)
    expected = np.full(
        n, -1 if value == "true" else float(value), dtype=dtype
    )  # xDSL: true is 0xff
    assert attr.data.data == expected.tobytes()
    assert attr.get_shape() == (1000, 1000)


def test_small_splat_round_trips() -> None:
    text = '"test.op"() {v = dense<-2> : tensor<2x3xi8>} : () -> ()'
    assert "dense<-2> : tensor<2x3xi8>" in str(nanoir.parse(text))


# -- 6. what the runtime needs from nh functions ----------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            "nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>",
            "has nq.bits, nq.exp but no nq.rounding",
        ),
        (
            "nq.bits = 99 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>",
            "nq.bits = 99 is outside 1..16",
        ),
        (
            "nq.bits = 8 : i64, nq.exp = dense<999> : tensor<1xi16>, nq.rounding = #nq.rounding<trunc>",
            "nq.exp 999 is outside -60..60",
        ),
        (
            "nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi4>, nq.rounding = #nq.rounding<trunc>",
            "nq.exp must be a dense tensor of i8, i16, i32 or i64 exponents",
        ),
        (
            "nq.bits = 8 : i64, nq.exp = dense<5> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>",
            "its exponents 3 are not nq.exp = 5",
        ),
        ("nq.bit = 8 : i64", "has the unknown attribute nq.bit"),
    ],
)
def test_hw_inputs_the_runtime_cannot_quantize_are_rejected(attrs: str, message: str) -> None:
    err = parse_error(HW.replace("ATTRS", attrs))
    assert isinstance(err, NanoirDiagnostic)
    assert f"error: func.func: argument 0 of @f{':' if message[0] != 'h' else ''}" in str(err)
    assert message in str(err)
    assert str(err).startswith("bad.mlir:1:1\n")


@pytest.mark.parametrize("elt", ["si8", "ui32"])
def test_nh_codes_must_be_signless_or_narrow_unsigned(elt: str) -> None:
    """Signed-typed (si8) codes are refused; unsigned ones only as ui2..ui16 (ui8 is valid)."""
    err = parse_error(HW.replace(" {ATTRS}", "").replace("xi8", f"x{elt}"))
    assert f"has element type {elt}; " in str(err) and "nh codes are" in str(err)


def test_a_verified_hw_function_runs() -> None:
    module = nanoir.parse(HW.replace("ATTRS", GOOD_ATTRS))
    (y,) = nanoir.run(module, np.array([[-1.0, 0.5, 0.3, 20.0]]))
    assert y.tolist() == [[0.0, 0.5, 0.25, 127 / 8]]


def test_one_bit_inputs_use_the_negated_exponent() -> None:
    text = HW.replace(
        "ATTRS",
        "nq.bits = 1 : i64, nq.exp = dense<-2> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>",
    ).replace("i8,", "i1,")
    text = text.replace("#nh.fixed<3, BC>", "#nh.fixed<2, BC>")
    nanoir.parse(text)
    err = parse_error(text.replace("dense<-2>", "dense<2>"))
    assert "its exponents 2 are not -nq.exp = -2" in str(err)


# -- error types and the CLIs --------------------------------------------------------------------


def test_errors_are_nanoir_errors_and_xdsl_parse_errors() -> None:
    with pytest.raises(ParseError):
        nanoir.parse('"test.op"() {v = dense<300> : tensor<2xi8>} : () -> ()')
    with pytest.raises(nanoir.Error):
        nanoir.parse("func.func @f( {")
    err = parse_error(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %y : tensor<4xf32>\n}\n"
    )
    assert isinstance(err, MlirSyntaxError)


def _tool(name: str) -> str:
    exe = shutil.which(name, path=str(Path(sys.executable).parent))
    assert exe, f"{name} is not installed next to this Python"
    return exe


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "hang.mlir",
            'func.func @f() attributes {a = "' + "x" * 60 + "} {\n}\n",
            "unterminated string literal",
        ),
        (
            "deep.mlir",
            '"test.op"() {a = ' + "[" * 5000 + "]" * 5000 + "} : () -> ()\n",
            "nesting too deep",
        ),
        (
            "splat.mlir",
            '"test.op"() {v = dense<1.0> : tensor<100000000000x4xf32>} : () -> ()\n',
            "has 400000000000 elements",
        ),
        (
            "range.mlir",
            '"test.op"() {v = dense<300> : tensor<2xi8>} : () -> ()\n',
            "out of range for type i8",
        ),
    ],
)
def test_nanoir_opt_exits_1_with_one_located_message(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    src = tmp_path / name
    src.write_text(content)
    proc = subprocess.run(
        [_tool("nanoir-opt"), str(src)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert re.match(rf"{re.escape(str(src))}:1:\d+\n", proc.stderr), proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('func.func @f() attributes {a = "' + "x" * 60 + "} {\n}\n", "unterminated string literal"),
        (
            "func.func @f(%x: tensor<4xi8, #nh.fixed<99999999999999999999, C>>) {\n  func.return\n}\n",
            "exponent 99999999999999999999 is outside -128..127",
        ),
    ],
)
def test_nanoir_run_exits_1_with_one_located_message(
    tmp_path: Path, content: str, message: str
) -> None:
    src = tmp_path / "bad.mlir"
    src.write_text(content)
    proc = subprocess.run(
        [_tool("nanoir-run"), str(src)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    assert re.match(rf"{re.escape(str(src))}:1:\d+\n", proc.stderr), proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_nanoir_opt_reads_an_empty_file(tmp_path: Path) -> None:
    src = tmp_path / "empty.mlir"
    src.write_text("")
    proc = subprocess.run(
        [_tool("nanoir-opt"), str(src)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["builtin.module", "{", "}"]


def test_nanoir_run_rejects_a_hw_input_without_rounding(tmp_path: Path) -> None:
    src = tmp_path / "hw.mlir"
    src.write_text(HW.replace("ATTRS", "nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>"))
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 4), np.float32))
    proc = subprocess.run(
        [_tool("nanoir-run"), str(src), "--input", str(x)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{src}:1:1\n" in proc.stderr
    assert "has nq.bits, nq.exp but no nq.rounding" in proc.stderr
    assert "KeyError" not in proc.stderr and "Traceback" not in proc.stderr


# -- odds and ends the fuzzer met ------------------------------------------------------------------


def test_number_beyond_python_int_limit_is_located() -> None:
    err = parse_error('"test.op"() {v = ' + "9" * 5000 + " : i64} : () -> ()\n")
    assert "error: invalid attribute: number too long (more than 4300 digits)" in str(err)
    assert "set_int_max_str_digits" not in str(err)


def test_invisible_characters_are_shown() -> None:
    err = parse_error('"test.op"()\x00 : () -> ()\n')
    assert "error: Unexpected character '\\x00' (U+0000)" in str(err)


@pytest.mark.parametrize(
    "text", ['\ufeff"test.op"() : () -> ()', b'\xef\xbb\xbf"test.op"() : () -> ()']
)
def test_a_byte_order_mark_is_accepted(text: str | bytes) -> None:
    assert len(list(nanoir.parse(text).body.block.ops)) == 1  # type: ignore[arg-type]
    err = parse_error(text[:-2] + ("!)" if isinstance(text, str) else b"!)"))
    assert str(err).startswith("bad.mlir:1:22\n")  # the mark counts as one column


def test_a_symbol_defined_twice_at_top_level_is_located() -> None:
    err = parse_error("func.func @f() {\n  func.return\n}\nfunc.func @f() {\n  func.return\n}\n")
    assert str(err).startswith("bad.mlir:4:1\n")
    assert 'Redefinition of symbol "f"' in str(err)


def test_non_utf8_file_through_load_and_the_clis_shows_line_and_caret(tmp_path: Path) -> None:
    src = tmp_path / "latin1.mlir"
    src.write_bytes(b"func.func @f() {\n  // caf\xe9 au lait\n  func.return\n}\n")
    with pytest.raises(nanoir.Error) as info:
        nanoir.load(src)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{src}:2:9: invalid UTF-8 byte 0xe9: not a text file"
    assert lines[1:] == ["  // caf\N{REPLACEMENT CHARACTER} au lait", " " * 8 + "^"]
    for tool in ("nanoir-opt", "nanoir-run"):
        proc = subprocess.run([_tool(tool), str(src)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.splitlines()[1:] == lines[1:], proc.stderr
