"""Round trips of the NanoEngine text format: text -> tree -> text and tree -> text -> tree.

The reference sample must come back byte for byte. Hypothesis builds valid programs as trees
(every declaration kind, dtypes, scalar and -1 shapes, every attribute value kind, comments,
items in any order) and checks print -> parse -> print, plus that re-spacing the text (any
whitespace between tokens) gives the same tree. Expected values about the sample are read
from the sample with regular expressions and `struct`, not from the parser.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.ne import parser as ne_parser
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.syntax_tree import (
    DTYPES,
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
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
    dtype_name,
    dtype_size,
    element_count,
    numpy_dtype,
)

from nanoir.testing.programs import examples

# A copy of shared/samples/readme_model.ne, as NanoEngine-PyTorch printed it.
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"


@pytest.fixture(scope="module")
def sample_text() -> str:
    return SAMPLE.read_bytes().decode("utf-8")


# ---------------------------------------------------------------------------------------
# The reference sample
# ---------------------------------------------------------------------------------------


def test_sample_prints_back_byte_for_byte(sample_text: str) -> None:
    assert sample_text.endswith("}\n") and not sample_text.endswith("\n\n")
    program = parse_nanoengine(sample_text, str(SAMPLE))
    assert print_nanoengine(program) == sample_text
    assert parse_nanoengine(print_nanoengine(program)) == program


def test_sample_tree_matches_the_text(sample_text: str) -> None:
    program = parse_nanoengine(sample_text)
    consts = re.findall(
        r"^let (\w+): Tensor<(\w+)> = \{shape=\[([0-9, ]*)\], data=0x([0-9a-f]*)\} ;$",
        sample_text,
        re.M,
    )
    inits = re.findall(
        r"^let (\w+): Tensor<Any>  = \{shape:([A-Z]*)=\[([0-9, ]*)\]\};$", sample_text, re.M
    )
    runtimes = re.findall(
        r"^let (\w+): Tensor<Any> = \{shape:(B[A-Z]*)=\[([-0-9, ]*)\]\};$", sample_text, re.M
    )
    mems = re.findall(
        r"^let (\w+): mem Tensor = \{type=Any, shape:([A-Z]*)=\[([-0-9, ]*)\]\};$",
        sample_text,
        re.M,
    )
    init_nodes = re.findall(r"^let (\w+): init Node = \{$", sample_text, re.M)
    runtime_nodes = re.findall(r"^let (\w+): Node = \{$", sample_text, re.M)
    comments = re.findall(r"^//(.*)$", sample_text, re.M)
    assert (len(consts), len(inits), len(runtimes), len(mems)) == (21, 6, 16, 16)

    def dims(text: str) -> tuple[int, ...]:
        return tuple(int(d) for d in text.split(",")) if text.strip() else ()

    by_kind: dict[type, list[object]] = {}
    for decl in program.declarations:
        by_kind.setdefault(type(decl), []).append(decl)
    assert by_kind[ConstTensor] == [
        ConstTensor(n, t, dims(s), bytes.fromhex(h)) for n, t, s, h in consts
    ]
    assert by_kind[InitTensor] == [InitTensor(n, "Any", lay, dims(s)) for n, lay, s in inits]
    assert by_kind[RuntimeTensor] == [
        RuntimeTensor(n, "Any", lay, dims(s)) for n, lay, s in runtimes
    ]
    assert by_kind[MemTensor] == [MemTensor(n, "Any", lay, dims(s)) for n, lay, s in mems]
    assert [n.name for n in by_kind[InitNode]] == init_nodes
    assert [n.name for n in by_kind[RuntimeNode]] == runtime_nodes
    assert [c.text for c in program.items if isinstance(c, Comment)] == comments

    init_block = sample_text[
        sample_text.index("func init(){") : sample_text.index("// call runtime node")
    ]
    runtime_block = sample_text[sample_text.index("func runtime(){") :]
    assert program.init_calls == tuple(re.findall(r"(\w+)\.do\(\);", init_block))
    assert program.runtime_calls == tuple(re.findall(r"(\w+)\.do\(\);", runtime_block))

    conv = program.lookup("Conv_n1")
    assert isinstance(conv, RuntimeNode)
    assert conv.attr_dict() == {
        "dilations": (1, 1),
        "group": 1,
        "kernel_shape": (3, 3),
        "pads": (0, 0, 0, 0),
        "strides": (1, 1),
    }
    assert conv.in_s == ("Q_n1_o0", "Q_n2_o0", "Q_n3_o0")
    assert conv.mem_s == ("Conv_n1_Q_n1_o0",)
    assert conv.out_s == ("Conv_n1_o0",)

    # Float bit patterns: the first constant is the float32 with little-endian bytes 41 f3 f6 3f.
    first = program.lookup("tensor_constant0")
    assert isinstance(first, ConstTensor)
    assert first.to_numpy().tolist() == [struct.unpack("<f", bytes.fromhex("41f3f63f"))[0]]
    scalar = program.lookup("Constant_n12_o0")
    assert isinstance(scalar, ConstTensor) and scalar.shape == () and scalar.to_numpy() == 2.0


def test_sample_positions_point_at_names(sample_text: str) -> None:
    program = parse_nanoengine(sample_text)
    lines = sample_text.split("\n")
    for decl in program.declarations:
        assert decl.loc is not None
        line = lines[decl.loc.line - 1]
        assert line.startswith("let ") and line[decl.loc.column - 1 :].startswith(decl.name + ":")
    node = program.lookup("Add_n4")
    assert isinstance(node, RuntimeNode)
    for name, loc in zip(node.mem_s, node.mem_locs):
        assert lines[loc.line - 1][loc.column - 1 :].startswith(name)


# ---------------------------------------------------------------------------------------
# Small hand-written cases
# ---------------------------------------------------------------------------------------

FUNCS = "func init(){\n}\nfunc runtime(){\n}\n"


def test_word_tensor_and_attribute_kinds() -> None:
    text = (
        "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};\n"
        "let y: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};\n"
        "let m: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 1, 3]};\n"
        "let n_scale_k: Tensor = {type=Any, shape:NC=[1, 2], data=[0x0A0B0C0D, 0x01020304]};\n"
        "let n: Node = {\n"
        "    op_type=Weird,\n"
        "    attr=[a=-3, b=1e-05, c=0.5, d=-3.25E+2, e=nearest, f=[], g=[[1, 2], [x]], scale_k=n_scale_k],\n"
        "    in_s=[x],\n"
        "    mem_s=[m],\n"
        "    out_s=[y]\n"
        "};\n" + FUNCS
    )
    program = parse_nanoengine(text)
    assert print_nanoengine(program) == text
    word = program.lookup("n_scale_k")
    assert word == WordTensor("n_scale_k", "Any", "NC", (1, 2), bytes([10, 11, 12, 13, 1, 2, 3, 4]))
    node = program.lookup("n")
    assert isinstance(node, RuntimeNode)
    assert node.attrs == (
        ("a", -3),
        ("b", Float("1e-05")),
        ("c", Float("0.5")),
        ("d", Float("-3.25E+2")),
        ("e", "nearest"),
        ("f", ()),
        ("g", ((1, 2), ("x",))),
        ("scale_k", "n_scale_k"),
    )
    assert Float("-3.25E+2").value == -325.0


def test_layout_decides_init_or_runtime_tensor() -> None:
    text = (
        "let a: Tensor<Any>  = {shape:CCDD=[1, 2, 3, 4]};\n"
        "let b: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 3]};\n"
        "let s: Tensor<Any>  = {shape:=[]};\n" + FUNCS
    )
    program = parse_nanoengine(text)
    assert [type(d) for d in program.declarations] == [InitTensor, RuntimeTensor, InitTensor]
    assert program.lookup("s") == InitTensor("s", "Any", "", ())
    assert print_nanoengine(program) == text


def test_keywords_may_be_names() -> None:
    # The contextual lexer only looks for keywords where the grammar allows them.
    text = (
        "let data: Tensor<int8_t> = {shape=[1], data=0x07} ;\n"
        "let shape: Tensor<Any>  = {shape:C=[1]};\n"
        "let init: init Node = {\n"
        "    op_type=Node,\n"
        "    attr=[let=func, do=Tensor],\n"
        "    in_s=[data],\n"
        "    out_s=[shape]\n"
        "};\n"
        "func init(){\n    init.do();\n}\nfunc runtime(){\n}\n"
    )
    program = parse_nanoengine(text)
    assert print_nanoengine(program) == text
    assert program.init_calls == ("init",)


def test_comments_are_kept_and_placed_between_items() -> None:
    text = (
        "// first\n"
        "// second, no blank line after a comment\n"
        "let a: Tensor<int8_t> = {shape=[], data=0x01} ;\n"
        "\n"
        "//no space\n"
        "let b: Tensor<int8_t> = {shape=[], data=0x02} ;\n" + FUNCS + "\n// trailing\n"
    )
    program = parse_nanoengine(text)
    assert print_nanoengine(program) == text
    assert [c.text for c in program.items if isinstance(c, Comment)] == [
        " first",
        " second, no blank line after a comment",
        "no space",
        " trailing",
    ]


def test_comment_inside_a_declaration_moves_after_it() -> None:
    text = "let a: Tensor<int8_t> = { // inner   \n shape=[], data=0x01} ; // tail\n" + FUNCS
    program = parse_nanoengine(text)
    assert program.items[:3] == (
        ConstTensor("a", "int8_t", (), b"\x01"),
        Comment(" inner"),
        Comment(" tail"),
    )
    reprinted = print_nanoengine(program)
    assert reprinted.startswith(
        "let a: Tensor<int8_t> = {shape=[], data=0x01} ;\n\n// inner\n// tail\n"
    )
    assert parse_nanoengine(reprinted) == program


def test_hex_case_is_kept() -> None:
    upper = "let a: Tensor<uint8_t> = {shape=[2], data=0xABCD} ;\n" + FUNCS
    lower = upper.replace("ABCD", "abcd")
    assert print_nanoengine(parse_nanoengine(upper)) == upper
    assert print_nanoengine(parse_nanoengine(lower)) == lower
    # The case is presentation: both texts give equal trees.
    assert parse_nanoengine(upper) == parse_nanoengine(lower)


def test_whitespace_is_free_between_tokens() -> None:
    canonical = "let a: Tensor<int8_t> = {shape=[2, 1], data=0x0102} ;\n" + FUNCS
    spaced = "let\ta :Tensor < int8_t >={ shape = [ 2 ,1 ] ,data= 0x0102 }\r\n;func init ( ) { } func runtime(){}"
    assert parse_nanoengine(spaced) == parse_nanoengine(canonical)
    assert print_nanoengine(parse_nanoengine(spaced)) == canonical


def test_lifted_blobs_parse_like_lexed_blobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The large-blob shortcut gives the same tree, positions included, as the lexer path."""
    rng = np.random.default_rng(1)
    big = rng.standard_normal(20000).astype("<f4").tobytes()
    odd_case = rng.integers(0, 256, 40000, dtype=np.uint8).tobytes()
    text = (
        "// weights\n"
        f"let w: Tensor<little_float_32> = {{shape=[20000], data=0x{big.hex()}}} ;\n"
        f"let u: Tensor<uint8_t> = {{shape=[200, 200], data=0x{odd_case.hex().upper()}}}  ;  \n"
        "let z: Tensor<int8_t> = {shape=[], data=0x05} ; let y: Tensor<Any>  = {shape:C=[3]};\n"
        "// data=0xabcd} ; in a comment\n"
        "let v: Tensor<little_float_32> = {shape=[20000], data = 0x"
        + big.hex()
        + "} ; // spaced: lexed\n"
        + FUNCS
    )
    lean, lifted = ne_parser._lift_blobs(text)
    assert len(lifted) == 2 and len(lean) < len(text) - 2 * len(big)  # w and u, not v
    fast = parse_nanoengine(text)
    monkeypatch.setattr(ne_parser, "_BLOB_MIN_DIGITS", 1 << 62)
    slow = parse_nanoengine(text)
    assert fast == slow
    assert [getattr(i, "loc", None) for i in fast.items] == [
        getattr(i, "loc", None) for i in slow.items
    ]
    assert [getattr(i, "data_loc", None) for i in fast.items] == [
        getattr(i, "data_loc", None) for i in slow.items
    ]
    assert [getattr(i, "hex_upper", None) for i in fast.items] == [
        getattr(i, "hex_upper", None) for i in slow.items
    ]
    w = fast.lookup("w")
    second_line = text.split("\n")[1]
    assert isinstance(w, ConstTensor) and w.data == big
    assert w.data_loc == Loc(2, second_line.index("0x") + 1)


def test_dtype_helpers() -> None:
    assert numpy_dtype("little_float_32") == np.dtype("<f4")
    assert numpy_dtype("int8_t") == np.dtype(np.int8)
    assert numpy_dtype("uint64_t") == np.dtype("<u8")
    assert [
        dtype_size(n)
        for n in ("little_float_16", "little_float_64", "int16_t", "int32_t", "int64_t")
    ] == [
        2,
        8,
        2,
        4,
        8,
    ]
    assert dtype_name(np.dtype(">f4")) == "little_float_32"
    assert element_count(()) == 1 and element_count((2, 3, 4)) == 24 and element_count((0, 5)) == 0
    with pytest.raises(ValueError):
        element_count((-1, 3))
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    const = ConstTensor.from_numpy("c", arr)
    assert (
        const.dtype == "int16_t"
        and const.shape == (2, 3)
        and const.data == b"\x00\x00\x01\x00\x02\x00\x03\x00\x04\x00\x05\x00"
    )
    assert (const.to_numpy() == arr).all()


def test_float_spelling_from_a_value() -> None:
    # The reference prints ONNX float attributes with Python's str() of the float32 value.
    assert Float.from_value(np.float32(1e-5)).text == "9.999999747378752e-06"
    assert Float.from_value(0.5) == Float("0.5") and Float.from_value(-325.0).text == "-325.0"
    with pytest.raises(ValueError):
        Float.from_value(float("inf"))


def test_printer_rejects_what_cannot_parse_back() -> None:
    """Trees whose text would not parse back to them are refused."""
    for bad in (
        Program((InitTensor("not a name", "Any", "C", (1,)),)),
        Program((InitTensor("a", "Any", "C1", (1,)),)),
        Program((Comment("two\nlines"),)),
        Program((InitNode("n", "Op", (("k", True),), (), ()),)),
        Program((WordTensor("w", "Any", "C", (1,), b"\x01\x02\x03"),)),
        Program((InitNode("n", "Op", (("k", Float("1")),), (), ()),)),
        Program((InitTensor("i", "Any", "BC", (1, 1)),)),
        Program((RuntimeTensor("r", "Any", "CB", (1, -1)),)),
    ):
        with pytest.raises(ValueError):
            print_nanoengine(bad)


# ---------------------------------------------------------------------------------------
# Hypothesis: valid programs
# ---------------------------------------------------------------------------------------

KEYWORDS = [
    "let",
    "Tensor",
    "mem",
    "init",
    "Node",
    "shape",
    "data",
    "type",
    "op_type",
    "attr",
    "in_s",
    "mem_s",
    "out_s",
    "func",
    "do",
    "Any",
]
_FIRST = "abcxyzABCQ_"
_REST = _FIRST + "019_"
names = st.builds(
    lambda first, rest: first + rest, st.sampled_from(_FIRST), st.text(_REST, max_size=6)
) | st.sampled_from(KEYWORDS)
letters = st.sampled_from("BCDMNHW")


@st.composite
def float_spellings(draw: st.DrawFn) -> str:
    """Float spellings built from parts: 0.5, -3.25E+2, 1e-05, .5, 7., and Python's repr."""
    if draw(st.booleans()):
        return repr(draw(st.floats(allow_nan=False, allow_infinity=False)))
    digits = st.text("0123456789", min_size=1, max_size=4)
    sign = draw(st.sampled_from(["", "-"]))
    exponent = (
        draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "+", "-"])) + draw(digits)
    )
    form = draw(st.sampled_from(["d.d", "d.", ".d", "de", "d.de", ".de"]))
    whole, frac = draw(digits), draw(digits)
    text = {
        "d.d": f"{whole}.{frac}",
        "d.": f"{whole}.",
        ".d": f".{frac}",
        "de": f"{whole}{exponent}",
        "d.de": f"{whole}.{frac}{exponent}",
        ".de": f".{frac}{exponent}",
    }[form]
    return sign + text


scalar_values: st.SearchStrategy[AttrValue] = st.one_of(
    st.integers(-(2**63), 2**63 - 1),  # the parser takes int64 attribute values
    float_spellings().map(Float),
    names,
)
attr_values: st.SearchStrategy[AttrValue] = st.recursive(
    scalar_values, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6
)


def shapes(min_dim: int, max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(min_dim, 3), max_size=max_rank).map(tuple)


@st.composite
def const_tensors(draw: st.DrawFn, name: str) -> ConstTensor:
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    shape = draw(shapes(0))
    size = element_count(shape) * dtype_size(dtype)
    data = draw(st.binary(min_size=size, max_size=size))
    return ConstTensor(name, dtype, shape, data, hex_upper=draw(st.booleans()))


@st.composite
def word_tensors(draw: st.DrawFn, name: str) -> WordTensor:
    shape = draw(shapes(0, max_rank=2))
    layout = "".join(draw(st.lists(letters, min_size=len(shape), max_size=len(shape))))
    type_name = draw(st.sampled_from(["Any", "little_float_32", "int32_t", "uint32_t"]))
    if type_name == "Any":
        nwords = draw(st.integers(0, 3))
        size = 4 * nwords
    else:
        size = element_count(shape) * dtype_size(type_name)
    data = draw(st.binary(min_size=size, max_size=size))
    return WordTensor(name, type_name, layout, shape, data, hex_upper=draw(st.booleans()))


@st.composite
def layouts_for(draw: st.DrawFn, shape: tuple[int, ...], first: str | None) -> str:
    rest = draw(st.lists(letters, min_size=len(shape), max_size=len(shape)))
    if first is not None and shape:
        rest[0] = first
    return "".join(rest)


@st.composite
def node_attrs(draw: st.DrawFn) -> tuple[tuple[str, AttrValue], ...]:
    keys = draw(st.lists(names, max_size=4, unique=True))
    return tuple((k, draw(attr_values)) for k in keys)


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """A valid program: every reference resolves to the right kind, outputs are unique."""
    counts = [
        draw(st.integers(lo, hi))
        for lo, hi in ((0, 3), (0, 2), (0, 3), (1, 4), (0, 3), (0, 3), (0, 3))
    ]
    n_const, n_word, n_init_t, n_run_t, n_mem, n_init_n, n_run_n = counts
    all_names = draw(st.lists(names, min_size=sum(counts), max_size=sum(counts), unique=True))
    pool = iter(all_names)

    def take(n: int) -> list[str]:
        return [next(pool) for _ in range(n)]

    consts = [draw(const_tensors(n)) for n in take(n_const)]
    words = [draw(word_tensors(n)) for n in take(n_word)]
    inits: list[InitTensor] = []
    for n in take(n_init_t):
        shape = draw(shapes(0))
        inits.append(
            InitTensor(
                n, draw(st.sampled_from(["Any", "int8_t"])), draw(layouts_for(shape, "C")), shape
            )
        )
    runs: list[RuntimeTensor] = []
    for n in take(n_run_t):
        shape = (-1,) + draw(shapes(-1))
        runs.append(RuntimeTensor(n, "Any", draw(layouts_for(shape, "B")), shape))
    mems: list[MemTensor] = []
    for n in take(n_mem):
        shape = draw(shapes(-1, max_rank=4))
        mems.append(MemTensor(n, "Any", draw(layouts_for(shape, None)), shape))

    def owned(outputs: list[str], n_nodes: int) -> list[list[str]]:
        # Each output belongs to at most one node.
        owners = [draw(st.integers(-1, n_nodes - 1)) for _ in outputs] if n_nodes else []
        return [[o for o, w in zip(outputs, owners) if w == k] for k in range(n_nodes)]

    const_like = [t.name for t in consts + words + inits]
    init_nodes = []
    for n, outs in zip(take(n_init_n), owned([t.name for t in inits], n_init_n)):
        ins = draw(st.lists(st.sampled_from(const_like), max_size=3)) if const_like else []
        init_nodes.append(InitNode(n, draw(names), draw(node_attrs()), tuple(ins), tuple(outs)))
    readable = const_like + [t.name for t in runs]
    run_nodes = []
    for n, outs in zip(take(n_run_n), owned([t.name for t in runs], n_run_n)):
        ins = draw(st.lists(st.sampled_from(readable), max_size=3))
        mem_s = draw(st.lists(st.sampled_from([m.name for m in mems]), max_size=2)) if mems else []
        run_nodes.append(
            RuntimeNode(n, draw(names), draw(node_attrs()), tuple(ins), tuple(mem_s), tuple(outs))
        )

    def calls(nodes: list[InitNode] | list[RuntimeNode]) -> tuple[str, ...]:
        return (
            tuple(draw(st.lists(st.sampled_from([x.name for x in nodes]), max_size=4)))
            if nodes
            else ()
        )

    items: list[Item] = [*consts, *words, *inits, *runs, *mems, *init_nodes, *run_nodes]
    items = list(draw(st.permutations(items)))
    functions: list[Item] = [
        Function("init", calls(init_nodes)),
        Function("runtime", calls(run_nodes)),
    ]
    if draw(st.booleans()):  # usually at the end, as the reference prints them
        items += functions
    else:
        for func in functions:
            items.insert(draw(st.integers(0, len(items))), func)
    comment_texts = st.text(
        st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=12
    ).map(str.rstrip)
    for text in draw(st.lists(comment_texts, max_size=3)):
        items.insert(draw(st.integers(0, len(items))), Comment(text))
    return Program(tuple(items))


@settings(max_examples=examples(150))
@given(programs())
def test_valid_programs_round_trip(program: Program) -> None:
    text = print_nanoengine(program)
    parsed = parse_nanoengine(text, "gen.ne")
    assert parsed == program
    assert print_nanoengine(parsed) == text


# Tokens of printed text, to re-space it; whitespace is only required between word-like tokens.
_TOKEN = re.compile(r"//[^\n]*|0x[0-9A-Fa-f]*|-?[0-9.][0-9.eE+-]*|[A-Za-z_][A-Za-z0-9_]*|\S")
_WORDY = re.compile(r"[A-Za-z0-9_.+-]")


@settings(max_examples=examples(80))
@given(programs(), st.data())
def test_whitespace_variants_parse_to_the_same_tree(program: Program, data: st.DataObject) -> None:
    tokens = _TOKEN.findall(print_nanoengine(program))
    separators = st.sampled_from(["", "", " ", "\n", "\t", "  \n    ", "\r\n", "\f"])
    out = [tokens[0]] if tokens else []
    for prev, tok in zip(tokens, tokens[1:]):
        sep = data.draw(separators)
        if prev.startswith("//") and "\n" not in sep:
            sep += "\n"  # a comment runs to the end of its line
        elif not sep and _WORDY.match(prev[-1]) and _WORDY.match(tok[0]):
            sep = " "
        out.append(sep + tok)
    variant = "".join(out)
    assert parse_nanoengine(variant) == program
