"""Hostile `.ne` input (issue 11): each case ends in one located `NanoEngineError`, never a
traceback, a hang or a silently wrong value, through the parser, `nanoir.load` and the CLIs.

- integers out of range: a dimension or attribute integer outside int64 (values in [2^63, 2^64)
  used to wrap to negative numbers), literals longer than Python's 4300-digit int-str limit,
  shapes whose dimensions multiply past int64, hw exponents outside int8, a huge bit_len;
- encodings: a UTF-8 byte order mark is accepted and written back; bad UTF-8 is located with
  the line and a caret;
- layout: a comment right after a declaration (or after several blank lines) prints back byte
  for byte, also through the IR.

Bad inputs carry a `§` where the error must point (see test_ne_errors.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nanoir.grammar.ne.errors import (
    NanoEngineError,
    NanoEngineSemanticError,
    NanoEngineSyntaxError,
)
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine, import_nanoengine_bytes
from nanoir.grammar.ne.parser import (
    INT64_MAX,
    INT64_MIN,
    parse_nanoengine,
    parse_nanoengine_file,
)
from nanoir.grammar.ne.printer import print_nanoengine

import nanoir
from nanoir.cli.opt import main as opt_main
from nanoir.cli.run import main as run_main
from nanoir.errors import Error

INPUTS = Path(__file__).parent / "inputs"
SMALL = (INPUTS / "small.ne").read_text()
# What `export_nanoengine(lower_to_hw(SMALL))` of test_ne_hw.py writes: a conv, requant, relu.
SMALL_HW = (INPUTS / "small_hw.ne").read_text()
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"
MARK = "§"
INT64_RANGE = f"from {INT64_MIN} to {INT64_MAX} (int64)"


def located(marked: str) -> tuple[str, int, int]:
    at = marked.index(MARK)
    return (
        marked.replace(MARK, ""),
        marked.count("\n", 0, at) + 1,
        at - (marked.rfind("\n", 0, at) + 1) + 1,
    )


def mark(old: str, new_marked: str, base: str) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new_marked)


def expect(
    marked: str, message: str, kind: type[NanoEngineError] = NanoEngineSyntaxError, hw: bool = False
) -> None:
    """Parsing (and for hw-level text, importing) fails with `message` at the marker."""
    text, line, column = located(marked)
    with pytest.raises(kind) as info:
        (import_nanoengine if hw else parse_nanoengine)(text, "bad.ne")
    err = info.value
    assert (err.filename, err.line, err.column, err.message) == ("bad.ne", line, column, message), (
        str(err)
    )
    # One message, then the source line and a caret under the column.
    head, shown, caret = str(err).split("\n")
    assert head == f"bad.ne:{line}:{column}: error: {message}"
    source_line = text.split("\n")[line - 1]
    if len(source_line) <= 100:
        assert shown == source_line and caret == " " * (column - 1) + "^"
    else:  # a window of the line, the caret still under the character at the column
        assert shown[len(caret) - 1 :].startswith(
            source_line[column - 1 : column + 9].rstrip(".")[:5]
        )


def found(value: int) -> str:
    """How a message shows a literal: itself, or its length when it is long."""
    text = str(value)
    return text if len(text) <= 24 else f"an integer of {len(text.lstrip('-'))} digits"


def test_the_hw_input_is_the_exporters() -> None:
    assert export_nanoengine(import_nanoengine(SMALL_HW)) == SMALL_HW


# ---------------------------------------------------------------------------------------
# 1, 2, 4: integers out of range
# ---------------------------------------------------------------------------------------

TOO_BIG = [2**63, 2**64 - 1, 2**64, 10**30]


@pytest.mark.parametrize("value", TOO_BIG + [-(2**63) - 1, -(10**30)])
def test_attribute_integers_fit_int64(value: int) -> None:
    expect(
        mark("bit_len=8", "bit_len=" + MARK + str(value), SMALL),
        f"expected an integer {INT64_RANGE}, found {found(value)}",
    )
    expect(
        mark("[4, 3, 4]", f"[4, {MARK}{value}, 4]", SMALL_HW),
        f"expected an integer {INT64_RANGE}, found {found(value)}",
    )


def test_int64_bounds_themselves_are_read() -> None:
    for value in (INT64_MIN, INT64_MAX):
        program = parse_nanoengine(SMALL.replace("bit_len=8", f"bit_len=8, k=[{value}]"))
        assert program.lookup("qn").attr_dict()["k"] == (value,)  # type: ignore[union-attr]
    wide = SMALL.replace("[-1, 2, 1, 3]};\nlet y", f"[-1, {INT64_MAX}, 1, 1]}};\nlet y")
    assert parse_nanoengine(wide, check=False).lookup("x").shape == (-1, INT64_MAX, 1, 1)  # type: ignore[union-attr]


@pytest.mark.parametrize("value", TOO_BIG)
def test_dimensions_fit_int64(value: int) -> None:
    expect(
        mark("shape:C=[2]", f"shape:C=[{MARK}{value}]", SMALL),
        f"expected a dimension of at most {INT64_MAX}, found {found(value)}",
    )
    expect(
        mark("shape=[2], data=0x0102", f"shape=[{MARK}{value}], data=0x0102", SMALL),
        f"expected a dimension of at most {INT64_MAX}, found {found(value)}",
    )
    # The old failure: 2^63 read back as -2^63 after an export.
    expect(
        mark(
            "Conv_n1_o0: Tensor<int32_t> = {shape:BCMD=[-1, 3, 4, 6]}",
            f"Conv_n1_o0: Tensor<int32_t> = {{shape:BCMD=[-1, 3, 4, {MARK}{value}]}}",
            SMALL_HW,
        ),
        f"expected a dimension of at most {INT64_MAX}, found {found(value)}",
    )


def test_dimensions_below_int64_and_below_minus_one() -> None:
    expect(
        mark(
            "shape:BCMD=[-1, 2, 1, 3]};\nlet y",
            f"shape:BCMD=[{MARK}-{2**63 + 1}, 2, 1, 3]}};\nlet y",
            SMALL,
        ),
        f"expected a dimension of -1 or more, found -{2**63 + 1}",
    )
    # Within int64, the checker reports the dimension with the shape (as before).
    expect(
        mark(
            "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]}",
            f"let {MARK}x: Tensor<Any> = {{shape:BCMD=[-2, 2, 1, 3]}}",
            SMALL,
        ),
        "shape [-2, 2, 1, 3] of 'x' has dimension -2; dimensions must be -1 (the batch) or more",
        NanoEngineSemanticError,
    )


@pytest.mark.parametrize("digits", [4301, 5000, 100_000])
def test_very_long_literals_are_out_of_range_not_internal_errors(digits: int) -> None:
    long = "9" * digits
    expect(
        mark("bit_len=8", "bit_len=" + MARK + long, SMALL),
        f"expected an integer {INT64_RANGE}, found an integer of {digits} digits",
    )
    expect(
        mark("bit_len=8", "bit_len=" + MARK + "-" + long, SMALL),
        f"expected an integer {INT64_RANGE}, found an integer of {digits} digits",
    )
    expect(
        mark("shape:C=[2]", f"shape:C=[{MARK}{long}]", SMALL),
        f"expected a dimension of at most {INT64_MAX}, found an integer of {digits} digits",
    )
    # Leading zeros do not make a value long.
    program = parse_nanoengine(SMALL.replace("bit_len=8", "bit_len=" + "0" * digits + "8"))
    assert program.lookup("qn").attr_dict()["bit_len"] == 8  # type: ignore[union-attr]


def test_element_counts_fit_int64() -> None:
    half = 2**62
    message = f"expected a shape of at most {INT64_MAX} elements (not counting 0 and -1 dimensions), found more at this dimension"
    expect(mark("shape:C=[2]}", f"shape:CC=[{half}, {MARK}2]}}", SMALL), message)
    # An empty tensor too: NumPy cannot shape one with 2^64 elements per slice.
    expect(
        mark("shape=[2], data=0x0102", f"shape=[0, {half}, {MARK}4], data=0x0102", SMALL), message
    )
    expect(
        mark(
            "shape:BCMD=[-1, 2, 1, 3]};\nlet y",
            f"shape:BCMD=[-1, {half}, 1, {MARK}2]}};\nlet y",
            SMALL,
        ),
        message,
    )
    assert parse_nanoengine(SMALL.replace("shape:C=[2]", f"shape:CC=[{half}, 1]"), check=False)


def test_absurd_shapes_with_data_are_located() -> None:
    expect(
        mark("shape=[1], data=0x07", "shape=[100000000000, 4], data=" + MARK + "0x07", SMALL),
        "data of 'e' has 1 bytes, but shape [100000000000, 4] of int8_t needs 400000000000",
        NanoEngineSemanticError,
    )


def test_printer_refuses_integers_the_parser_would_refuse() -> None:
    program = parse_nanoengine(SMALL)
    node = program.lookup("qn")
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError, match="does not fit int64"):
            print_nanoengine(
                type(program)((*program.items, type(node)("k", "Q", (("a", bad),), (), ())))
            )  # type: ignore[arg-type, call-arg]


# ---------------------------------------------------------------------------------------
# 3: hw-level exponents and widths
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [128, -129, 300, 2**40, INT64_MAX])
def test_hw_exponents_fit_int8(value: int) -> None:
    expect(
        mark("attr=[bit_len=8, exp=4,", f"attr=[bit_len=8, {MARK}exp={value},", SMALL_HW),
        f"exp of node 'Requant_n1' must be from -128 to 127 (NanoEngine stores exponents as int8), found {value}",
        NanoEngineSemanticError,
        hw=True,
    )
    expect(
        mark("attr=[exp=[8, 7, 8]", f"attr=[{MARK}exp=[8, {value}, 8]", SMALL_HW),
        f"exp of node 'Conv_n1' must be from -128 to 127 (NanoEngine stores exponents as int8), found {value}",
        NanoEngineSemanticError,
        hw=True,
    )


def test_hw_exponent_beyond_int64_is_a_located_syntax_error() -> None:
    # It used to be an OverflowError traceback from nh.FixedAttr.exp_array.
    value = 99999999999999999999
    expect(
        mark("attr=[bit_len=8, exp=4,", f"attr=[bit_len=8, exp={MARK}{value},", SMALL_HW),
        f"expected an integer {INT64_RANGE}, found {value}",
        hw=True,
    )


def test_hw_q_exponent_constant_fits_int8() -> None:
    marked = mark(
        "in_s=[input, Constant_n1_o0]",
        f"in_s=[input, {MARK}Constant_n1_o0]",
        SMALL_HW.replace(
            "let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x05} ;",
            "let Constant_n1_o0: Tensor<int16_t> = {shape=[1], data=0x2c01} ;",
        ),
    )
    expect(
        marked,
        "the exponent constant of Q node 'Q_n1' must be from -128 to 127 (NanoEngine stores exponents as int8), found 300",
        NanoEngineSemanticError,
        hw=True,
    )


@pytest.mark.parametrize("value", [0, 17, 100000, INT64_MAX])
def test_hw_q_bit_len_is_a_supported_width(value: int) -> None:
    expect(
        mark("attr=[bit_len=8, exp=5]", f"attr=[{MARK}bit_len={value}, exp=5]", SMALL_HW),
        f"bit_len of Q node 'Q_n1' must be an integer from 1 to 16, found {value}",
        NanoEngineSemanticError,
        hw=True,
    )


def test_hw_huge_group_is_located() -> None:
    expect(
        mark("group=1", f"group={MARK}{2**64}", SMALL_HW),
        f"expected an integer {INT64_RANGE}, found {2**64}",
        hw=True,
    )


# ---------------------------------------------------------------------------------------
# 5, 6: byte order mark, comments
# ---------------------------------------------------------------------------------------


def test_byte_order_mark_is_accepted_and_kept() -> None:
    text = "\ufeff" + SMALL
    program = parse_nanoengine(text)
    assert program.bom and program == parse_nanoengine(SMALL)  # presentation only
    assert print_nanoengine(program) == text
    assert not parse_nanoengine(SMALL).bom
    # Through the IR (nq level) too.
    sample = "\ufeff" + SAMPLE.read_text()
    assert export_nanoengine(import_nanoengine(sample)) == sample
    # Columns on line 1 count from after the mark, as editors show them.
    bad, line, column = located(
        "\ufefflet w: Tensor<int8_t> = {shape=[2], data=0x0102} " + MARK + "}"
    )
    with pytest.raises(NanoEngineSyntaxError) as info:
        parse_nanoengine(bad)
    assert (info.value.line, info.value.column) == (1, column - 1)
    assert str(info.value).split("\n")[1:] == [bad[1:], " " * (column - 2) + "^"]


def test_byte_order_mark_in_files(tmp_path: Path) -> None:
    path = tmp_path / "bom.ne"
    path.write_bytes(b"\xef\xbb\xbf" + SAMPLE.read_bytes())
    assert parse_nanoengine_file(path).bom
    module = nanoir.load(path)
    out = tmp_path / "out.ne"
    nanoir.save(module, out)
    assert out.read_bytes() == path.read_bytes()
    # The hw level keeps no file layout: it reads, and writes the exporter's layout.
    hw = tmp_path / "hw.ne"
    hw.write_bytes(b"\xef\xbb\xbf" + SMALL_HW.encode())
    assert export_nanoengine(nanoir.load(hw)) == SMALL_HW


COMMENTED = """\
let w: Tensor<int8_t> = {shape=[2], data=0x0102} ;
// right after a declaration
let e: Tensor<int8_t> = {shape=[1], data=0x07} ;


// after two blank lines
// and another
let q: Tensor<Any>  = {shape:C=[2]};
"""


def test_comments_keep_their_blank_lines() -> None:
    text = "\n// after a blank first line\n" + SMALL.replace(
        SMALL[: SMALL.index("let x")], COMMENTED
    )
    assert print_nanoengine(parse_nanoengine(text)) == text


def test_comment_spacing_survives_the_ir() -> None:
    sample = SAMPLE.read_text()
    text = sample.replace("\n\n// runtime tensor\n", "\n// runtime tensor\n", 1).replace(
        "\n// init node\n", "\n\n\n// init node\n", 1
    )
    assert text != sample
    module = import_nanoengine(text)
    assert export_nanoengine(module) == text
    assert export_nanoengine(nanoir.parse(str(module))) == text  # through MLIR text as well


# ---------------------------------------------------------------------------------------
# 7: bad UTF-8
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "line", "column", "shown"),
    [
        (b"// ok\n// caf\xc3\xa9 \xff\n", 2, 9, "// caf\u00e9 \ufffd"),
        (b"let w\xc3: Tensor", 1, 6, "let w\ufffd: Tensor"),
        (b"\xef\xbb\xbflet \x80w", 1, 5, "let \ufffdw"),  # after a BOM, columns count from after it
        (b"\xed\xa0\x80", 1, 1, "\ufffd\ufffd\ufffd"),  # an encoded surrogate
    ],
)
def test_bad_utf8_is_located_with_a_caret(
    tmp_path: Path, raw: bytes, line: int, column: int, shown: str
) -> None:
    path = tmp_path / "bad.ne"
    path.write_bytes(raw)
    for load in (
        parse_nanoengine_file,
        nanoir.load,
        lambda p: import_nanoengine_bytes(p.read_bytes(), str(p)),
    ):
        with pytest.raises(NanoEngineSyntaxError) as info:
            load(path)
        err = info.value
        assert isinstance(err, Error)
        assert (err.filename, err.line, err.column) == (str(path), line, column)
        assert err.message.startswith("expected UTF-8 text, found invalid byte 0x")
        assert str(err).split("\n")[1:] == [shown, " " * (column - 1) + "^"]


def test_bad_utf8_in_a_huge_line_shows_a_window() -> None:
    raw = b"let w: Tensor<uint8_t> = {shape=[300000], data=0x" + b"ab" * 300000 + b"\xff} ;\n"
    with pytest.raises(NanoEngineSyntaxError) as info:
        import_nanoengine_bytes(raw, "big.ne")
    _, excerpt, caret = str(info.value).split("\n")
    assert len(excerpt) < 120 and excerpt[caret.index("^")] == "\ufffd"


# ---------------------------------------------------------------------------------------
# The tools: exit code 1 and one located message, never a traceback
# ---------------------------------------------------------------------------------------

BAD_FILES = {
    "wrapping_shift.ne": SMALL_HW.replace("shift=[4, 3, 4]", f"shift=[{2**64 - 1}, 3, 4]").encode(),
    "huge_exp.ne": SMALL_HW.replace(
        "exp=4, rounding", "exp=99999999999999999999, rounding"
    ).encode(),
    "int8_exp.ne": SMALL_HW.replace("exp=4, rounding", "exp=300, rounding").encode(),
    "huge_dim.ne": SMALL.replace("shape:C=[2]", f"shape:C=[{2**64}]").encode(),
    "long_literal.ne": SMALL.replace("bit_len=8", "bit_len=" + "7" * 5000).encode(),
    "bad_utf8.ne": b"// caf\xc3\xa9 \xff\n" + SMALL.encode(),
    "many_elements.ne": SMALL.replace(
        "shape=[1], data=0x07", f"shape=[{2**40}, {2**40}], data=0x07"
    ).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_tools_exit_1_with_a_located_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = tmp_path / name
    path.write_bytes(BAD_FILES[name])
    with pytest.raises(NanoEngineError) as info:
        nanoir.load(path)
    where = f"{path}:{info.value.line}:{info.value.column}: error: "
    for main in (opt_main, run_main):
        assert main([str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(where), err
        assert "Traceback" not in err and len(err.strip().split("\n")) == 3, err


@pytest.mark.parametrize("value", ["1e999", "-1e999", "-1E+400"])
def test_a_float_attribute_past_float64_is_located(value: str, tmp_path: Path) -> None:
    """A LeakyRelu's ``alpha=1e999`` reads as inf, which no `.ne` float spells: the import
    (it writes the node's defaults back) ended in a ValueError traceback. Now one located
    error naming the attribute."""
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.LeakyReLU(0.1)).eval()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    module = nanoir.from_torch(net, (torch.from_numpy(x),))
    nanoir.quantize(module, [x], progress=False)
    path = tmp_path / "leaky.ne"
    nanoir.save(module, path)
    text = path.read_text()
    assert text.count("alpha=") == 1
    start = text.index("alpha=") + len("alpha=")
    end = min(i for i in (text.find(",", start), text.find("]", start)) if i > 0)
    path.write_text(text[:start] + value + text[end:])
    line = text[:start].count("\n") + 1
    with pytest.raises(NanoEngineError, match="'alpha' .* must be a finite number") as info:
        nanoir.load(path)
    assert info.value.line == line


def test_a_hw_float_property_past_float64_is_refused() -> None:
    """The hw rows' float properties are decoded by the same rule (finite, or the reader's
    ValueError, which it locates)."""
    from nanoir.grammar.ne.schema import decode_prop
    from nanoir.grammar.ne.syntax_tree import Float

    assert decode_prop("float", Float("0.25")).value.data == 0.25
    with pytest.raises(ValueError, match="must be a finite number"):
        decode_prop("float", Float("1e999"))
