"""nq.fake_quant construction and verification."""

from __future__ import annotations

import pytest
from nanoir.dialects.nq import FakeQuantOp, exp_attr, exp_values
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerType, TensorType, f32
from xdsl.ir import Block, SSAValue
from xdsl.utils.exceptions import VerifyException


def arg(*shape: int) -> SSAValue:
    return Block(arg_types=[TensorType(f32, shape)]).args[0]


@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
@pytest.mark.parametrize(
    ("exp_shape", "exps"),
    [([1], [7]), ([16, 1, 1], list(range(-8, 8))), ([1, 16, 1, 1], [3] * 16)],
)
def test_fake_quant_accepts_levels(bits: int, exp_shape: list[int], exps: list[int]) -> None:
    op = FakeQuantOp(arg(DYNAMIC_INDEX, 16, 5, 5), bits, exp_attr(exps, exp_shape))
    op.verify()
    assert op.rounding_mode is RoundingMode.TRUNC
    assert exp_values(op.exp) == exps


def test_exp_attr_defaults_to_int8_per_tensor() -> None:
    attr = exp_attr(-3)
    assert attr.get_type() == TensorType(IntegerType(8), [1])
    assert exp_values(attr) == [-3]


def test_rounding_mode_is_kept() -> None:
    op = FakeQuantOp(arg(4), 4, exp_attr(2), RoundingMode.HALF_EVEN)
    op.verify()
    assert op.rounding_mode == "half_even"


@pytest.mark.parametrize(
    ("bits", "exp", "message"),
    [
        (0, exp_attr(1), r"bits = 0 is outside the supported 1\.\.16"),
        (17, exp_attr(1), r"bits = 17 is outside"),
        (
            8,
            exp_attr([1, 2, 3], [3, 1, 1]),
            r"exp of shape 3x1x1 does not broadcast against the input \?x16x5x5",
        ),
        (8, exp_attr(61), r"exponent 61 is outside -60\.\.60"),
    ],
)
def test_fake_quant_rejects(bits: int, exp, message: str) -> None:  # noqa: ANN001
    op = FakeQuantOp(arg(DYNAMIC_INDEX, 16, 5, 5), bits, exp)
    with pytest.raises(VerifyException, match=f"nq.fake_quant: {message}"):
        op.verify()
