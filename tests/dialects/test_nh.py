"""The nh encoding (``#nh.fixed``) and nh constants."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects.nh import ConstantOp, FixedAttr, code_range, fixed_type
from xdsl.context import Context
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    IntegerType,
    TensorType,
)
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from nanoir.context import make_context


@pytest.fixture(scope="module")
def ctx() -> Context:
    return make_context()


def test_code_ranges() -> None:
    assert code_range(1) == (-1, 1)
    assert code_range(2) == (-2, 1)
    assert code_range(4) == (-8, 7)
    assert code_range(8) == (-128, 127)
    assert code_range(32) == (-(2**31), 2**31 - 1)


def test_fixed_attr_per_tensor_and_per_channel(ctx: Context) -> None:
    t = fixed_type(8, [2, 3, 4, 5], 7, "BCMD")
    assert str(t) == "tensor<2x3x4x5xi8, #nh.fixed<7, BCMD>>"
    pc = FixedAttr([5, -1, 0], "BCMD")
    assert pc.is_per_channel and pc.channel_axis == 1
    assert pc.exp_array().shape == (1, 3, 1, 1)
    assert pc.exp_array().ravel().tolist() == [5, -1, 0]
    w = FixedAttr([1, 2], "CCDD")
    assert w.channel_axis == 0 and w.exp_array().shape == (2, 1, 1, 1)
    assert FixedAttr(3, "C").exp_array().shape == (1,)
    assert FixedAttr(0, "BCMD").strides([2, 3, 4, 5]) == (60, 20, 5, 1)
    assert list(FixedAttr(0, "CC").offsets([2, 3])) == list(range(6))


@pytest.mark.parametrize(
    "text", ["#nh.fixed<7, BCMD>", "#nh.fixed<[5, -1, 0], CCDD>", "#nh.fixed<-3, C>"]
)
def test_fixed_attr_round_trips(ctx: Context, text: str) -> None:
    attr = Parser(ctx, text).parse_attribute()
    assert isinstance(attr, FixedAttr)
    assert str(attr) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("#nh.fixed<7, BXMD>", "must be a string of the letters BCMD"),
        ("#nh.fixed<7, CBMD>", "may have B only as its first letter"),
        ("#nh.fixed<[1, 2], MD>", "per-channel exponents need a C"),
    ],
)
def test_fixed_attr_parse_errors_are_located(ctx: Context, text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        Parser(ctx, text, "t.mlir").parse_attribute()
    assert str(info.value.span.get_location()).startswith("t.mlir:1:")


def test_fixed_attr_verifies_when_built() -> None:
    with pytest.raises(VerifyException, match="per-channel exponents need a C"):
        FixedAttr([1, 2], "MD")


def _storage(a: np.ndarray) -> DenseIntOrFPElementsAttr:
    a = np.ascontiguousarray(a, dtype="<i1")
    return DenseIntOrFPElementsAttr(TensorType(IntegerType(8), a.shape), BytesAttr(a.tobytes()))


def test_constant_codes_and_ranges() -> None:
    codes = np.array([[-8, 7, 0], [1, -1, 3]], dtype=np.int8)
    op = ConstantOp(_storage(codes), fixed_type(4, [2, 3], [3, 2], "CC"), name="fc.weight")
    op.verify()
    assert np.array_equal(op.codes(), codes)
    with pytest.raises(VerifyException, match=r"code -9 does not fit i4 \(-8\.\.7\)"):
        ConstantOp(_storage(codes - 1), fixed_type(4, [2, 3], 0, "CC")).verify()
    binary = np.array([1, -1, 1], dtype=np.int8)
    ConstantOp(_storage(binary), fixed_type(1, [3], 0, "C")).verify()
    with pytest.raises(VerifyException, match=r"code 0 does not fit i1 \(-1 or \+1\)"):
        ConstantOp(_storage(np.array([1, 0], dtype=np.int8)), fixed_type(1, [2], 0, "C")).verify()
