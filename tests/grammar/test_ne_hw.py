"""The hw level of `.ne` (nh IR <-> text, `ne.hw`, `ne.export_hw`, `ne.import_hw`).

- Constant codes of every width go through files: 1/2/4-bit codes packed as NanoEngine packs
  them (MSB-first fields, two's complement, 1-bit -1 = bit 1) in ceil(n * bits / 8) bytes,
  wider ones as int8/16/32_t; names, exponents and storage widths come back.
- Random quantized programs of every op kind (`ALL_KINDS`), lowered to hw, exported, parsed
  with the checks and imported again: the same IR (up to SSA name hints and property order),
  the same text when exported again, and the same integer codes from the interpreter.
- Test models (torch) quantized at 8 bits and at 4/1 bits do the same.
- Results that are arguments, returned twice or also read; error messages for files and IR
  the hw level cannot take.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nh
from nanoir.grammar.ne.errors import NanoEngineSemanticError
from nanoir.grammar.ne.exporter import (
    ExportError,
    UnitStepPlan,
    export_nanoengine,
    export_program,
)
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.schema import name_from_value, name_value
from nanoir.grammar.ne.syntax_tree import Comment, ConstTensor, InitNode, Program, RuntimeNode
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import quant
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

import nanoir
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program


def canonical(module: ModuleOp) -> str:
    """The module's text without SSA name hints and with properties in key order: what
    "the same IR" means here (xDSL's structural equality ignores both, and result types)."""
    module = module.clone()
    for op in module.walk():
        op.properties = dict(sorted(op.properties.items()))
        for value in op.results:
            value.name_hint = None
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    arg.name_hint = None
    return str(module)


def round_trip(hw: ModuleOp) -> tuple[str, ModuleOp]:
    """Export, parse with the semantic checks, import; the text and the module read back."""
    text = export_nanoengine(hw)
    parse_nanoengine(text, "hw.ne", check=True)
    back = import_nanoengine(text, "hw.ne")
    back.verify()
    assert canonical(back) == canonical(hw)
    assert export_nanoengine(back) == text  # export -> import -> export is a fixed point
    return text, back


def unpack_nodes(text: str) -> list[tuple[InitNode, ConstTensor]]:
    program = parse_nanoengine(text)
    found = []
    for decl in program.declarations:
        if isinstance(decl, InitNode) and decl.op_type == "Unpack":
            data = program.lookup(decl.in_s[0])
            assert isinstance(data, ConstTensor)
            found.append((decl, data))
    return found


ARG = "{nq.bits = 8 : i64, nq.exp = dense<3> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}"
X = "tensor<?x4xi8, #nh.fixed<3, BC>>"


def with_constant(constant: str) -> ModuleOp:
    """A one-op program (relu of its input) that also holds `constant` (unused)."""
    return nanoir.parse(f"""
func.func @main(%x: {X} {ARG}) -> {X} {{
  {constant}
  %y = nh.relu %x : {X}
  func.return %y : {X}
}}
""")


# ---------------------------------------------------------------------------------------
# Constants: packing, widths, names
# ---------------------------------------------------------------------------------------


def test_packing_is_nanoengines() -> None:
    # 4-bit fields most significant first, two's complement: 1, -1 | -8, 7 = 0x1f 0x87.
    four = with_constant(
        '%w = nh.constant "w" dense<[[1, -1], [-8, 7]]> : tensor<2x2xi8> -> tensor<2x2xi4, #nh.fixed<2, CC>>'
    )
    assert "let w: Tensor<uint8_t> = {shape=[2], data=0x1f87} ;" in round_trip(four)[0]
    # 1-bit: -1 is bit 1, +1 bit 0, padded with zeros: 0 1 0 0 1 000 = 0x48.
    one = with_constant(
        '%w = nh.constant "w" dense<[1, -1, 1, 1, -1]> : tensor<5xi8> -> tensor<5xi1, #nh.fixed<0, C>>'
    )
    assert "let w: Tensor<uint8_t> = {shape=[1], data=0x48} ;" in round_trip(one)[0]
    # 2-bit: 1, -2, -1, 0 = 01 10 11 00.
    two = with_constant(
        '%w = nh.constant "w" dense<[1, -2, -1, 0]> : tensor<4xi8> -> tensor<4xi2, #nh.fixed<0, C>>'
    )
    assert "let w: Tensor<uint8_t> = {shape=[1], data=0x6c} ;" in round_trip(two)[0]
    # An i32 bias is int32_t data, whatever the IR stores it in.
    bias = with_constant(
        '%b = nh.constant "b" dense<[1, -2]> : tensor<2xi8> -> tensor<2xi32, #nh.fixed<[9, 8], C>>'
    )
    text = round_trip(bias)[0]
    assert "let b: Tensor<int32_t> = {shape=[2], data=0x01000000feffffff} ;" in text
    assert "attr=[bit_len=32, exp=[9, 8]]" in text


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 32])
@settings(max_examples=examples(12))
@given(data=st.data())
def test_codes_of_every_width_round_trip(width: int, data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=3)))
    lo, hi = nh.code_range(width)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if width == 1:
        codes = rng.choice([-1, 1], size=shape)
    else:
        codes = rng.integers(lo, hi, size=shape, endpoint=True)
    needed = 8 if width <= 8 else width
    storage = data.draw(st.sampled_from([s for s in (8, 16, 32, 64) if s >= needed]))
    layout = "C" + "D" * (len(shape) - 1)
    per_channel = data.draw(st.booleans())
    exp = (
        str([int(e) for e in rng.integers(-4, 9, shape[0])])
        if per_channel
        else str(int(rng.integers(-4, 9)))
    )
    dims = "x".join(map(str, shape))
    values = np.array2string(codes, separator=", ", threshold=10**6).replace("\n", "")
    module = with_constant(
        f'%w = nh.constant "layer.{width}.w" dense<{values}> : tensor<{dims}xi{storage}> '
        f"-> tensor<{dims}xi{width}, #nh.fixed<{exp}, {layout}>>"
    )
    text, back = round_trip(module)
    ((node, const),) = unpack_nodes(text)
    count = math.prod(shape)
    if width <= 4:
        assert const.dtype == "uint8_t" and len(const.data) == math.ceil(count * width / 8)
        assert const.data == quant.pack_bits(codes, width)
    else:
        assert const.dtype == f"int{width}_t" and const.shape == shape
    narrowest = next(
        b
        for b in (8, 16, 32, 64)
        if np.iinfo(f"int{b}").min <= codes.min() and codes.max() <= np.iinfo(f"int{b}").max
    )
    assert (("storage", storage) in node.attrs) == (storage != narrowest)
    (constant,) = [op for op in back.walk() if isinstance(op, nh.ConstantOp)]
    assert np.array_equal(constant.codes(), codes)


def test_names_come_back() -> None:
    names = [
        "conv1.weight",
        "layers.0.weight",
        "a-b",
        "fc_weight",
        "Constant_n1_o0",
        "x.01",
        "fc.weight",
    ]
    constants = (
        "\n  ".join(
            f'%c{i} = nh.constant "{name}" dense<{i}> : tensor<1xi8> -> tensor<1xi8, #nh.fixed<0, C>>'
            for i, name in enumerate(names)
        )
        + "\n  %u = nh.constant dense<5> : tensor<1xi8> -> tensor<1xi8, #nh.fixed<0, C>>"
    )
    text, back = round_trip(with_constant(constants))
    got = [
        op.sym_name.data if op.sym_name else None
        for op in back.walk()
        if isinstance(op, nh.ConstantOp)
    ]
    assert got == [*names, None]
    # Readable where it can be: the name becomes the data constant's, the parts an attribute.
    assert "let conv1_weight: Tensor<int8_t>" in text and "name=[conv1, weight]" in text
    assert "name=[layers, 0, weight]" in text and "name=[[97, 45, 98]]" in text
    assert "let fc_weight: Tensor<int8_t>" in text  # taken as it is: no name attribute
    assert "let fc_weight_1: Tensor<int8_t>" in text  # "fc.weight" comes second


@pytest.mark.parametrize(
    "name", ["conv1.weight", "layers.0.weight", "a-b", "x.01", "", "é.1", "a..b"]
)
def test_name_values_invert(name: str) -> None:
    assert name_from_value(name_value(name)) == name


# ---------------------------------------------------------------------------------------
# Random programs and test models: the same IR, the same text, the same codes
# ---------------------------------------------------------------------------------------


def check_codes(hw: ModuleOp, back: ModuleOp, inputs: list[np.ndarray]) -> None:
    want = run(hw, *inputs, raw=True)
    got = run(back, *inputs, raw=True)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)


@settings(max_examples=examples(100))
@given(data=st.data(), batch=st.sampled_from((1, 3)))
def test_random_programs_round_trip(data: st.DataObject, batch: int) -> None:
    """Programs of every op kind the generator has (`ALL_KINDS`). lower-to-hw takes every
    one of them (850 drawn, none refused), so no example is discarded: a refusal is a
    failure here, where it used to hide a partial regression of the lowering."""
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    hw = lower_to_hw(module)
    hw.verify()
    _, back = round_trip(hw)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((batch, *shape[1:])) * data.draw(st.sampled_from((0.5, 4.0, 30.0)))
    check_codes(hw, back, [x])


@pytest.mark.parametrize(("name", "config"), [("SampleNet", "8-bit"), ("LeNet5", "4/1-bit")])
def test_test_models_round_trip(name: str, config: str) -> None:
    torch = pytest.importorskip("torch")
    from nanoir.lowering.fold_bn import FoldBnPass
    from nanoir.lowering.quantize import quantize

    from nanoir.testing import make_test_model

    torch.manual_seed(0)
    model = make_test_model(name)
    example = model.make_example_input(2)
    module = nanoir.from_torch(model, (example,))
    FoldBnPass().apply(nanoir.make_context(), module)
    rng = np.random.default_rng(1)
    shape = tuple(example.shape[1:])
    options = (
        {}
        if config == "8-bit"
        else {"weight_bits": 4, "rules": ("weight@(fc|classifier|linear)=1",)}
    )
    quantize(module, [rng.standard_normal((4, *shape)) for _ in range(2)], **options)
    hw = lower_to_hw(module)
    text, back = round_trip(hw)
    check_codes(hw, back, [rng.standard_normal((3, *shape)) * 2])
    widths = set()
    for node, data in unpack_nodes(text):
        bits = dict(node.attrs)["bit_len"]
        assert isinstance(bits, int)
        widths.add(bits)
        out = parse_nanoengine(text).lookup(node.out_s[0])
        count = math.prod(out.shape)  # type: ignore[union-attr]
        size = math.ceil(count * bits / 8) if bits < 8 else count * bits // 8
        assert len(data.data) == size, (
            f"{data.name}: {count} {bits}-bit codes in {len(data.data)} bytes"
        )
    assert widths >= ({1, 4} if config == "4/1-bit" else {8})


def test_sample_round_trips_at_the_hw_level() -> None:
    sample = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"
    hw = lower_to_hw(nanoir.load(sample))
    del hw.attributes["ne.items"]  # the nq file's layout, which the hw file does not carry
    _, back = round_trip(hw)
    check_codes(hw, back, [np.random.default_rng(2).standard_normal((2, 3, 8, 5)) * 3])


def test_save_and_load(tmp_path: Path) -> None:
    hw = with_constant(
        '%w = nh.constant "w" dense<[1, -1, 1]> : tensor<3xi8> -> tensor<3xi1, #nh.fixed<2, C>>'
    )
    nanoir.save(hw, tmp_path / "model_hw.ne")
    assert canonical(nanoir.load(tmp_path / "model_hw.ne")) == canonical(hw)


# ---------------------------------------------------------------------------------------
# Results, op order
# ---------------------------------------------------------------------------------------

OUTPUTS = f"""
func.func @main(%x: {X} {ARG}, %z: {X} {ARG}) -> ({X}, {X}, {X}, {X}, {X}) {{
  %a = nh.relu %x : {X}
  %b = nh.relu %a : {X}
  %c = nh.clamp %z {{min = 0 : i64, max = 3 : i64}} : {X}
  func.return %c, %a, %b, %b, %x : {X}, {X}, {X}, {X}, {X}
}}
"""


def test_results_in_any_order_also_read_or_repeated() -> None:
    hw = nanoir.parse(OUTPUTS)
    text, back = round_trip(hw)
    program = parse_nanoengine(text)
    identities = [
        d for d in program.declarations if isinstance(d, RuntimeNode) and d.op_type == "Identity"
    ]
    # %a is read by %b, %b is returned twice, %x is an argument: four Identity nodes.
    assert len(identities) == 4
    x = np.arange(8, dtype=np.int8).reshape(2, 4) - 4
    check_codes(hw, back, [x, x[::-1].copy()])


def test_constants_between_runtime_ops_keep_their_place() -> None:
    hw = nanoir.parse(f"""
func.func @main(%x: {X} {ARG}) -> tensor<?x4xi16, #nh.fixed<3, BC>> {{
  %a = nh.relu %x : {X}
  %k = nh.constant "k" dense<[1, 2, 3, 4]> : tensor<4xi8> -> tensor<4xi8, #nh.fixed<3, D>>
  %s = nh.add %a, %k : ({X}, tensor<4xi8, #nh.fixed<3, D>>) -> tensor<?x4xi16, #nh.fixed<3, BC>>
  func.return %s : tensor<?x4xi16, #nh.fixed<3, BC>>
}}
""")
    text, _ = round_trip(hw)
    sections = re.findall(r"^// (init node|runtime_node)$", text, flags=re.M)
    assert sections == ["runtime_node", "init node", "runtime_node"]
    # The reference layout, every init node first, reads back with the constant on top.
    program = parse_nanoengine(text)
    headers = (Comment(" init node"), Comment(" runtime_node"))
    rest = [
        i for i in program.items if not isinstance(i, (InitNode, RuntimeNode)) and i not in headers
    ]
    cut = rest.index(Comment(" call init node"))
    inits = [d for d in program.declarations if isinstance(d, InitNode)]
    runtimes = [d for d in program.declarations if isinstance(d, RuntimeNode)]
    grouped = Program((*rest[:cut], headers[0], *inits, headers[1], *runtimes, *rest[cut:]))
    module = import_nanoengine(print_nanoengine(grouped))
    func = next(op for op in module.walk() if op.name == "func.func")
    assert [op.name for op in func.regions[0].block.ops] == [
        "nh.constant",
        "nh.relu",
        "nh.add",
        "func.return",
    ]


# ---------------------------------------------------------------------------------------
# What the hw level refuses, located
# ---------------------------------------------------------------------------------------

SMALL = """\
func.func @main(%x: tensor<?x2x4x6xf32>) -> tensor<?x3x4x6xf32> {
  %w = nf.constant "layer.w" dense<[[[[0.5]], [[-0.25]]], [[[0.75]], [[1.0]]], [[[-1.0]], [[0.125]]]]> : tensor<3x2x1x1xf32>
  %q = nq.fake_quant %w {bits = 4 : i64, exp = dense<[[[[3]]], [[[2]]], [[[3]]]]> : tensor<3x1x1x1xi8>} : tensor<3x2x1x1xf32>
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x2x4x6xf32>
  %y = nf.conv %xq, %q : (tensor<?x2x4x6xf32>, tensor<3x2x1x1xf32>) -> tensor<?x3x4x6xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x3x4x6xf32>
  %r = nf.relu %yq : tensor<?x3x4x6xf32>
  func.return %r : tensor<?x3x4x6xf32>
}
"""


@pytest.fixture
def small_text() -> str:
    return export_nanoengine(lower_to_hw(nanoir.parse(SMALL)))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "shape=[3], data=0x4e3481",
            "shape=[2], data=0x4e34",
            r"hw.ne:\d+:\d+: error: data of Unpack node 'Unpack_n1': 6 packed 4-bit codes are Tensor<uint8_t> of shape \[3\]",
        ),
        ("op_type=Relu", "op_type=Hardmax", r"op type 'Hardmax' of node 'Relu_n1' has no nh op"),
        (
            "Requant_n1_o0: Tensor<int8_t>",
            "Requant_n1_o0: Tensor<Any>",
            r"'Requant_n1_o0' is declared Tensor<Any>, but this is a hw-level program",
        ),
        (
            "attr=[exp=[8, 7, 8], group=1",
            "attr=[exp=[8, 7, 7], group=1",
            r"Conv node 'Conv_n1': nh.conv: result exponent must be input \+ weight exponent",
        ),
        (
            "kernel_shape=[1, 1]",
            "kernel_shape=[3, 3]",
            r"attribute 'kernel_shape' of node 'Conv_n1' must be \(1, 1\), not \(3, 3\)",
        ),
        (
            "attr=[bit_len=4, exp=[3, 2, 3]",
            "attr=[bit_len=8, exp=[3, 2, 3]",
            r"bit_len of Unpack node 'Unpack_n1' must be the width of its output",
        ),
        (
            "rounding=trunc, shift",
            "rounding=nearest, shift",
            r"attribute 'rounding' of node 'Requant_n1' must be one of trunc",
        ),
        (
            "attr=[exp=4]",
            "attr=[exp=4, alpha=2]",
            r"attribute 'alpha' is not one nanoir knows for Relu",
        ),
    ],
)
def test_bad_files_are_located(small_text: str, old: str, new: str, message: str) -> None:
    assert old in small_text
    bad = small_text.replace(old, new, 1)
    with pytest.raises(NanoEngineSemanticError, match=message):
        import_nanoengine(bad, "hw.ne")


def test_ir_the_format_cannot_hold_is_named() -> None:
    no_quantization = nanoir.parse(f"""
func.func @main(%x: {X}) -> {X} {{
  %y = nh.relu %x : {X}
  func.return %y : {X}
}}
""")
    with pytest.raises(ExportError, match="argument 0 of @main has no nq.bits/nq.exp"):
        export_nanoengine(no_quantization)
    returns_constant = nanoir.parse(f"""
func.func @main(%x: {X} {ARG}) -> ({X}, tensor<4xi8, #nh.fixed<0, C>>) {{
  %y = nh.relu %x : {X}
  %k = nh.constant dense<1> : tensor<4xi8> -> tensor<4xi8, #nh.fixed<0, C>>
  func.return %y, %k : {X}, tensor<4xi8, #nh.fixed<0, C>>
}}
""")
    with pytest.raises(ExportError, match="returns a constant as result 1"):
        export_nanoengine(returns_constant)
    with pytest.raises(ExportError, match="stream plans are not supported for nh programs"):
        export_program(with_constant(""), UnitStepPlan())
    mixed = lower_to_hw(nanoir.parse(SMALL))
    block = next(op for op in mixed.walk() if op.name == "func.func").regions[0].block
    stray: Operation = nanoir.parse(
        'func.func @f() { %c = nf.constant "c" dense<1.0> : tensor<1xf32>\n func.return }'
    ).body.block.first_op.body.block.first_op.clone()  # type: ignore[union-attr]
    block.insert_op_before(stray, block.first_op)  # type: ignore[arg-type]
    with pytest.raises(
        ExportError, match="'nf.constant' has no NanoEngine op type in an nh program"
    ):
        export_nanoengine(mixed)
