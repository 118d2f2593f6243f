"""Unsigned codes in `.ne` (issue 20 section 4): nanoir's documented extension.

An `nq.fake_quant` with `signed = false` is a `Q` node with `signed=0` (the reference reads
signed codes only, so a signed `Q` prints exactly as before and this attribute appears only
for unsigned codes). The reader takes `signed=0`/`signed=1` and refuses anything else at the
attribute's `file:line:col`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import NanoEngineImportWarning, NanoEngineSemanticError
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.syntax_tree import RuntimeNode, RuntimeTensor
from nanoir.lowering.lower_to_hw import lower_to_hw
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import BASE_KINDS, examples, random_nq_program

MARK = "§"

RELU_U8 = """
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %q : tensor<?x4xf32>
  %u = nq.fake_quant %r {bits = 8 : i64, exp = dense<4> : tensor<1xi8>, signed = false}
      : tensor<?x4xf32>
  func.return %u : tensor<?x4xf32>
}
"""


def fake_quants(module: ModuleOp) -> list[FakeQuantOp]:
    return [op for op in module.walk() if isinstance(op, FakeQuantOp)]


def quantizers(module: ModuleOp) -> list[tuple[bool, int, str, str]]:
    """Each fake-quant's signedness, bits, exponent and rounding, in a fixed order (the
    importer may place constants' fake-quants elsewhere)."""
    return sorted(
        (op.is_signed, op.bits.value.data, str(op.exp), op.rounding_mode.value)
        for op in fake_quants(module)
    )


def q_attrs(text: str) -> list[dict[str, object]]:
    """The attributes of every Q node, as the parser reads them (not as the exporter wrote)."""
    program = parse_nanoengine(text)
    return [
        dict(d.attrs)
        for d in program.declarations
        if isinstance(d, RuntimeNode) and d.op_type == "Q"
    ]


def located(marked: str) -> tuple[str, int, int]:
    assert marked.count(MARK) == 1
    at = marked.index(MARK)
    line = marked.count("\n", 0, at) + 1
    column = at - (marked.rfind("\n", 0, at) + 1) + 1
    return marked[:at] + marked[at + 1 :], line, column


def test_unsigned_q_writes_signed_0_and_reads_back() -> None:
    """Only the unsigned Q gets `signed=0`; the signed one has the reference's attributes.
    Kills: the writer dropping `signed=0` (the attribute lists differ) and the reader
    ignoring it (the second fake-quant comes back signed)."""
    module = nanoir.parse(RELU_U8)
    text = export_nanoengine(module)
    assert q_attrs(text) == [{"bit_len": 8}, {"bit_len": 8, "signed": 0}]
    back = import_nanoengine(text, "u.ne")
    back.verify()
    assert [op.is_signed for op in fake_quants(back)] == [True, False]
    assert export_nanoengine(back) == text
    x = np.linspace(-20, 20, 24, dtype=np.float32).reshape(6, 4)
    (want,) = nanoir.run(module, x)
    (got,) = nanoir.run(back, x)
    assert np.array_equal(got, want)
    # The oracle, in NumPy: unsigned trunc codes of relu(signed codes) at step 2**-4.
    q = np.clip(np.trunc(x * 8), -128, 127) / 8
    expected = np.clip(np.trunc(np.maximum(q, 0) * 16), 0, 255) / 16
    assert np.array_equal(want, expected)


def test_signed_1_reads_as_signed() -> None:
    """`signed=1` is accepted (the default spelled out) and, as every attribute of a file
    read, written back as it was; fresh IR never prints it."""
    text = export_nanoengine(nanoir.parse(RELU_U8)).replace("signed=0", "signed=1")
    back = import_nanoengine(text, "s.ne")
    assert [op.is_signed for op in fake_quants(back)] == [True, True]
    assert export_nanoengine(back) == text
    fresh = nanoir.parse(RELU_U8.replace(", signed = false", ""))
    assert "signed" not in export_nanoengine(fresh)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2", "attribute 'signed' of node 'Q_n2' must be 0 or 1, got 2"),
        ("-1", "attribute 'signed' of node 'Q_n2' must be 0 or 1, got -1"),
        ("yes", "attribute 'signed' of node 'Q_n2' must be an integer"),
        ("[0]", "attribute 'signed' of node 'Q_n2' must be an integer"),
    ],
)
def test_bad_signed_values_are_located(value: str, message: str) -> None:
    """Kills: a reader that takes any integer (`bool(2)`) or a name for `signed`."""
    text = export_nanoengine(nanoir.parse(RELU_U8))
    marked = text.replace("signed=0", MARK + "signed=" + value)
    text, line, column = located(marked)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NanoEngineImportWarning)
        with pytest.raises(NanoEngineSemanticError) as info:
            import_nanoengine(text, "u.ne")
    err = info.value
    assert message in err.message
    assert (err.filename, err.line, err.column) == ("u.ne", line, column)
    assert str(err).startswith(f"u.ne:{line}:{column}: error: ")


def test_one_bit_unsigned_is_refused_at_the_attribute() -> None:
    """1-bit codes are ±1: `signed=0` with `bit_len=1` is refused where it is written."""
    text = export_nanoengine(nanoir.parse(RELU_U8))
    marked = text.replace("attr=[bit_len=8, signed=0]", "attr=[bit_len=1, " + MARK + "signed=0]")
    text, line, column = located(marked)
    with pytest.raises(NanoEngineSemanticError) as info:
        import_nanoengine(text, "u.ne")
    assert "no unsigned form" in info.value.message
    assert (info.value.line, info.value.column) == (line, column)


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_random_programs_with_unsigned_fake_quants_round_trip(data: st.DataObject) -> None:
    """Random nq programs with a drawn subset of their (b > 1) fake-quants made unsigned:
    export -> import gives the same quantizers (signedness, bits, exponents, rounding), a
    fixed point of export, and the same numbers from `nanoir.run` (which an unsigned quantizer
    read as signed, or the reverse, changes on negative and large inputs)."""
    module, shape = random_nq_program(data.draw, kinds=BASE_KINDS)
    candidates = [op for op in fake_quants(module) if op.bits.value.data > 1]
    for op in candidates:
        if data.draw(st.booleans()):
            op.set_signed(False)
    module.verify()
    text = export_nanoengine(module)
    back = import_nanoengine(text, "r.ne")
    back.verify()
    assert quantizers(back) == quantizers(module)
    assert export_nanoengine(back) == text
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = (rng.standard_normal((2, *shape[1:])) * 8).astype(np.float32)
    for got, want in zip(nanoir.run(back, x), nanoir.run(module, x), strict=True):
        assert np.array_equal(got, want)


# ---------------------------------------------------------------------------------------
# hw level: ui<b> tensors are Tensor<uint<b>_t>, an unsigned input's Q has signed=0
# ---------------------------------------------------------------------------------------

U_IN = """
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %q = nq.fake_quant %x {bits = 4 : i64, exp = dense<1> : tensor<1xi8>, signed = false}
      : tensor<?x4xf32>
  %r = nf.relu %q : tensor<?x4xf32>
  %u = nq.fake_quant %r {bits = 8 : i64, exp = dense<3> : tensor<1xi8>, signed = false}
      : tensor<?x4xf32>
  func.return %u : tensor<?x4xf32>
}
"""


def canonical(module: ModuleOp) -> str:
    """The text without SSA name hints, properties in key order (as tests/grammar/test_ne_hw.py)."""
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


def declared(text: str) -> dict[str, str]:
    program = parse_nanoengine(text)
    return {d.name: d.dtype for d in program.declarations if isinstance(d, RuntimeTensor)}


def hw_round_trip(hw: ModuleOp) -> tuple[str, ModuleOp]:
    text = export_nanoengine(hw)
    parse_nanoengine(text, "hw.ne", check=True)
    back = import_nanoengine(text, "hw.ne")
    back.verify()
    assert canonical(back) == canonical(hw)
    assert export_nanoengine(back) == text
    return text, back


def test_hw_unsigned_types_and_input_round_trip() -> None:
    """The ui4 input is the Q node's Tensor<uint4_t> output with signed=0, the ui8 result a
    Tensor<uint8_t>; they read back as ui<b> and compute the same codes. Kills: ui<b> written
    as int<b>_t (as before this change: the import is i<b>, canonical text differs) and the
    Q's signed=0 dropped (the attribute list differs)."""
    hw = lower_to_hw(nanoir.parse(U_IN))
    text, back = hw_round_trip(hw)
    dtypes = declared(text)
    assert dtypes["Q_n1_o0"] == "uint4_t" and dtypes["output"] == "uint8_t"
    assert q_attrs(text) == [{"bit_len": 4, "exp": 1, "signed": 0}]
    assert "xui4" in str(back) and "xui8" in str(back)
    x = np.linspace(-3, 12, 24, dtype=np.float32).reshape(6, 4)
    (want,) = nanoir.run(hw, x, raw=True)
    (got,) = nanoir.run(back, x, raw=True)
    assert np.array_equal(got, want)
    # NumPy: codes of relu(q) at step 2**-1, 4-bit unsigned, requantized to step 2**-3
    q = np.clip(np.trunc(x * 2), 0, 15)
    assert np.array_equal(np.asarray(want), np.clip(q * 4, 0, 255))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "signed=0",
            MARK + "signed=2",
            "attribute 'signed' of Q node 'Q_n1' must be 0 or 1, got 2",
        ),
        ("signed=0", MARK + "signed=1", "Q node 'Q_n1' has signed=1, but its output 'Q_n1_o0' is"),
        (
            "let Q_n1_o0: Tensor<uint4_t>",
            "let Q_n1_o0: Tensor<int4_t>",
            "Q node 'Q_n1' has signed=0, but its output 'Q_n1_o0' is Tensor<int4_t>",
        ),
    ],
)
def test_hw_bad_signed_is_located(old: str, new: str, message: str) -> None:
    """A Q's signed must be 0/1 and agree with its output's declaration (a uint dtype with
    signed=1, or signed=0 on an int dtype, is refused rather than guessed)."""
    text = export_nanoengine(lower_to_hw(nanoir.parse(U_IN)))
    assert text.count(old) == 1
    marked = text.replace(old, new)
    if MARK not in marked:  # point at the Q's signed attribute
        marked = marked.replace("signed=0", MARK + "signed=0")
    text, line, column = located(marked)
    with pytest.raises(NanoEngineSemanticError) as info:
        import_nanoengine(text, "hw.ne")
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (line, column)


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_random_unsigned_programs_round_trip_at_the_hw_level(data: st.DataObject) -> None:
    """Random nq programs with a drawn subset of their activation fake-quants (b > 1) made
    unsigned, lowered (ui<b> types): export -> import gives the same IR, a fixed point of
    export, and the same codes from the nh runtime. Kills (private copy): the reader typing
    uint<b>_t outputs as signed i<b>."""
    module, shape = random_nq_program(data.draw, kinds=BASE_KINDS)
    for op in fake_quants(module):
        if op.bits.value.data > 1 and data.draw(st.booleans()):
            op.set_signed(False)
    hw = lower_to_hw(module)
    hw.verify()
    _, back = hw_round_trip(hw)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = (rng.standard_normal((2, *shape[1:])) * 8).astype(np.float32)
    for got, want in zip(nanoir.run(back, x, raw=True), nanoir.run(hw, x, raw=True), strict=True):
        assert np.array_equal(got, want)
