"""nf op constructors: result types are inferred, and the built ops verify."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.runtime.numerics.shapes import ShapeError
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    TensorType,
    f32,
)
from xdsl.ir import Block, SSAValue
from xdsl.utils.exceptions import VerifyException

D = DYNAMIC_INDEX


def arg(*shape: int) -> SSAValue:
    return Block(arg_types=[TensorType(f32, shape)]).args[0]


def dense(a: np.ndarray) -> DenseIntOrFPElementsAttr:
    a = np.ascontiguousarray(a, dtype="<f4")
    return DenseIntOrFPElementsAttr(TensorType(f32, a.shape), BytesAttr(a.tobytes()))


def shape_of(op: nf.IRDLOperation) -> tuple[int, ...]:
    t = op.results[0].type
    assert isinstance(t, TensorType)
    return t.get_shape()


def test_constant_keeps_name_and_bytes() -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    op = nf.ConstantOp(dense(data), name="layer1.0.conv1.weight")
    op.verify()
    assert op.sym_name is not None and op.sym_name.data == "layer1.0.conv1.weight"
    got = np.frombuffer(op.value.data.data, dtype="<f4").reshape(2, 3)
    assert np.array_equal(got, data)


@pytest.mark.parametrize(
    ("x", "w", "kwargs", "expected"),
    [
        ((D, 3, 32, 31), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 2]}, (D, 16, 16, 16)),
        ((2, 16, 9, 9), (16, 1, 3, 3), {"dilations": [2, 2], "groups": 16}, (2, 16, 5, 5)),
        ((D, 8, 101), (4, 8, 5), {"strides": [3], "dilations": [2]}, (D, 4, 31)),
        ((1, 6, 5, 5), (4, 3, 5, 5), {"groups": 2}, (1, 4, 1, 1)),
    ],
)
def test_conv_infers_result(x, w, kwargs, expected) -> None:  # noqa: ANN001
    op = nf.ConvOp(arg(*x), arg(*w), **kwargs)
    op.verify()
    assert shape_of(op) == expected


def test_conv_constructor_rejects_bad_groups() -> None:
    with pytest.raises(ShapeError, match="not divisible by groups 3"):
        nf.ConvOp(arg(1, 6, 5, 5), arg(4, 2, 3, 3), groups=3)


def test_conv_verifier_names_op_and_values() -> None:
    op = nf.ConvOp(arg(1, 3, 8, 8), arg(4, 3, 3, 3), bias=arg(5))
    with pytest.raises(VerifyException, match=r"nf.conv: bias shape 5 does not match the 4 output"):
        op.verify()


def test_linear_matmul_batchnorm() -> None:
    lin = nf.LinearOp(arg(D, 400), arg(120, 400), arg(120))
    lin.verify()
    assert shape_of(lin) == (D, 120)
    mm = nf.MatmulOp(arg(D, 4, 8), arg(8))
    mm.verify()
    assert shape_of(mm) == (D, 4)
    c = arg(16)
    bn = nf.BatchNormOp(arg(D, 16, 7, 5), c, c, c, c, epsilon=1e-3)
    bn.verify()
    assert bn.epsilon.value.data == pytest.approx(1e-3)


def test_binary_broadcasts() -> None:
    op = nf.AddOp(arg(D, 16, 1, 5), arg(16, 7, 1))
    op.verify()
    assert shape_of(op) == (D, 16, 7, 5)
    with pytest.raises(ShapeError, match="do not broadcast"):
        nf.MulOp(arg(3, 4), arg(5))


def test_pools_and_adaptive() -> None:
    mp = nf.MaxPoolOp(arg(D, 16, 7, 5), [2, 2], strides=[2, 2], ceil_mode=True)
    mp.verify()
    assert shape_of(mp) == (D, 16, 4, 3)
    ap = nf.AvgPoolOp(arg(2, 8, 50), [4], count_include_pad=False, divisor_override=3)
    ap.verify()
    assert shape_of(ap) == (2, 8, 47)
    gp = nf.AdaptiveAvgPoolOp(arg(D, 512, 7, 7), [1, 1])
    gp.verify()
    assert shape_of(gp) == (D, 512, 1, 1)


def test_data_movement() -> None:
    a, b = arg(D, 8, 4, 4), arg(D, 4, 4, 4)
    cat = nf.ConcatOp([a, b], axis=1)
    cat.verify()
    assert shape_of(cat) == (D, 12, 4, 4)
    split = nf.SplitOp(cat.result, axis=1, sizes=[5, 7])
    split.verify()
    assert [r.type.get_shape() for r in split.results] == [(D, 5, 4, 4), (D, 7, 4, 4)]
    tr = nf.TransposeOp(cat.result, [0, 2, 3, 1])
    tr.verify()
    assert shape_of(tr) == (D, 4, 4, 12)
    pad = nf.PadOp(cat.result, [0, 0, 1, 2, 0, 0, 1, 0], mode="edge")
    pad.verify()
    assert shape_of(pad) == (D, 12, 6, 6)
    rs = nf.ReshapeOp(cat.result, [D, 192])
    rs.verify()
    up = nf.UpsampleNearestOp(cat.result, [8, 12])
    up.verify()
    assert shape_of(up) == (D, 12, 8, 12)


def test_unary_and_activations_keep_type() -> None:
    x = arg(D, 16)
    for op in (
        nf.ReluOp(x),
        nf.SigmoidOp(x),
        nf.TanhOp(x),
        nf.HardSigmoidOp(x),
        nf.HardSwishOp(x),
        nf.ClampOp(x, 0.0, 6.0),
        nf.LeakyReluOp(x, 0.1),
        nf.PReluOp(x, arg(16)),
    ):
        op.verify()
        assert op.results[0].type == x.type
    with pytest.raises(VerifyException, match="nf.clamp: min 6.0 is greater than max 0.0"):
        nf.ClampOp(x, 6.0, 0.0).verify()
