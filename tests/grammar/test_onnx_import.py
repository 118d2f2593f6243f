"""Reading ONNX (`grammar/onnx/importer.py`): NanoEngine-PyTorch's `t2e.qmodel::Q` graphs and
standard QDQ, against an independent NumPy evaluation of the same graph; the reference's own
export (`examples/readme_model.onnx`) loads, runs, lowers to nh bit for bit and exports to
`.ne`; bad files are one `nanoir.Error` naming the file and the node, also under fuzzing.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.importer import (
    OnnxImportError,
    OnnxImportWarning,
    import_onnx_bytes,
)
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import DYNAMIC_INDEX

import nanoir
from nanoir.testing.programs import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
README_ONNX = EXAMPLES / "readme_model.onnx"
README_NE = EXAMPLES / "readme_model.ne"
DOMAIN = "t2e.qmodel"

# ---------------------------------------------------------------------------------------
# Building NanoEngine-style graphs
# ---------------------------------------------------------------------------------------


class Graph:
    """A NanoEngine-PyTorch-style graph: Q nodes whose k comes from a Constant node."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.counts: dict[str, int] = {}

    def name(self, op_type: str) -> str:
        self.counts[op_type] = self.counts.get(op_type, 0) + 1
        return f"{op_type}_n{self.counts[op_type]}"

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, value: np.ndarray) -> str:
        name = self.name("Constant")
        t = numpy_helper.from_array(np.asarray(value), name + "_t")
        self.nodes.append(helper.make_node("Constant", [], [name + "_o0"], name=name, value=t))
        return name + "_o0"

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs: object) -> str:
        name = self.name(op_type)
        outs = [f"{name}_o{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def q(self, x: str, k: int | np.ndarray, bits: int) -> str:
        kk = self.const(
            np.asarray(k, dtype=np.int8).reshape(-1 if np.ndim(k) == 0 else np.shape(k))
        )
        name = self.name("Q")
        self.nodes.append(
            helper.make_node("Q", [x, kk], [name + "_o0"], name=name, domain=DOMAIN, bit_len=bits)
        )
        return name + "_o0"

    def model(self, shape: list[int | str], out: str, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
            self.inits,
        )
        return helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)],
        )


def read(model: onnx.ModelProto, name: str = "m.onnx"):
    return import_onnx_bytes(model.SerializeToString(), name)


# ---------------------------------------------------------------------------------------
# The independent NumPy evaluation (NanoEngine's semantics, written out here)
# ---------------------------------------------------------------------------------------


def fq(x: np.ndarray, bits: int, k: np.ndarray | int) -> np.ndarray:
    """NanoEngine's Q: trunc, saturate; 1-bit is sign * 2**k (k broadcast as torch does)."""
    scale = np.power(2.0, np.asarray(k, dtype=np.float64))
    if bits == 1:
        return np.where(x >= 0, 1.0, -1.0) * scale
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return np.clip(np.trunc(x * scale), lo, hi) / scale + 0.0


def conv(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, pads: list[int], stride: int = 1
) -> np.ndarray:
    t, l, bo, r = pads[0], pads[1], pads[2], pads[3]
    xp = np.pad(x, ((0, 0), (0, 0), (t, bo), (l, r)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", win, w)
    return out + b.reshape(1, -1, 1, 1)


def avg_pool(x: np.ndarray, k: int, s: int, pad: int = 0) -> np.ndarray:
    """ONNX AveragePool, count_include_pad=0: the mean over the window's real elements."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ones = np.pad(np.ones(x.shape[2:]), ((pad, pad), (pad, pad)))
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s : i * s + k, j * s : j * s + k]
            count = ones[i * s : i * s + k, j * s : j * s + k].sum()
            out[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return out


def run(module, x: np.ndarray) -> np.ndarray:
    (y,) = nanoir.run(module, x)
    return np.asarray(y)


RNG = np.random.default_rng(7)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.normal(size=shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------------------
# NanoEngine-style graphs against NumPy
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_q_of_every_width(bits: int) -> None:
    g = Graph()
    out = g.q(g.op("Relu", [g.q("input", 3, bits)]), 2, bits)
    module = read(g.model(["N", 3, 4, 4], out))
    x = f32(2, 3, 4, 4)
    want = fq(np.maximum(fq(x.astype(np.float64), bits, 3), 0), bits, 2)
    assert np.array_equal(run(module, x), want)


def test_conv_with_padding_and_per_channel_exponents() -> None:
    g = Graph()
    w, b = f32(4, 3, 3, 3, scale=0.3), f32(4, scale=0.2)
    kw = np.array([2, 3, 2, 4], dtype=np.int8).reshape(4, 1, 1, 1)  # [C,1,1,1] weights
    kb = np.array([5, 6, 5, 7], dtype=np.int8)  # [C] for a 1-D bias
    ka = np.array([4, 5, 4, 6], dtype=np.int8).reshape(1, 4, 1, 1)  # [1,C,1,1] activations
    x_q = g.q("input", 5, 8)
    y = g.op(
        "Conv",
        [x_q, g.q(g.init("w", w), kw, 4), g.q(g.init("b", b), kb, 8)],
        dilations=[1, 1],
        group=1,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[1, 1],
    )
    out = g.q(y, ka, 8)
    module = read(g.model(["N", 3, 6, 6], out))
    assert module.body.block.ops.first.args[0].type.get_shape() == (
        DYNAMIC_INDEX,
        3,
        6,
        6,
    )  # dynamic batch
    x = f32(2, 3, 6, 6)
    want = fq(
        conv(
            fq(x.astype(np.float64), 8, 5),
            fq(w.astype(np.float64), 4, kw),
            fq(b.astype(np.float64), 8, kb),
            [1, 1, 1, 1],
        ),
        8,
        ka,
    )
    assert run(module, x).shape == (2, 4, 6, 6)
    assert np.array_equal(run(module, x), want)
    hw = nanoir.lower_to_hw(module.clone())
    assert np.array_equal(run(hw, x), want)


def test_gemm_on_a_2d_input() -> None:
    g = Graph()
    w, b = f32(5, 6, scale=0.4), f32(5, scale=0.3)
    y = g.op(
        "Gemm",
        [g.q("input", 4, 8), g.q(g.init("fc.weight", w), 3, 4), g.q(g.init("fc.bias", b), 6, 8)],
        alpha=1.0,
        beta=1.0,
        transB=1,
    )
    out = g.q(y, 4, 8)
    module = read(g.model(["N", 6], out))
    x = f32(3, 6)
    want = fq(
        fq(x.astype(np.float64), 8, 4) @ fq(w.astype(np.float64), 4, 3).T
        + fq(b.astype(np.float64), 8, 6),
        8,
        4,
    )
    assert np.array_equal(run(module, x), want)


@pytest.mark.parametrize(("k", "s", "pad"), [(2, 2, 0), (3, 1, 1)])
def test_average_pool(k: int, s: int, pad: int) -> None:
    g = Graph()
    y = g.op(
        "AveragePool",
        [g.q("input", 4, 8)],
        kernel_shape=[k, k],
        strides=[s, s],
        pads=[pad] * 4,
    )
    module = read(g.model(["N", 2, 6, 6], y))
    x = f32(2, 2, 6, 6)
    want = avg_pool(fq(x.astype(np.float64), 8, 4), k, s, pad)
    np.testing.assert_allclose(run(module, x), want, rtol=1e-12, atol=0)


def test_pools_concat_flatten_reshape_matmul_and_activations() -> None:
    g = Graph()
    x = g.q("input", 4, 8)
    pooled = g.op("MaxPool", [x], n_out=2, kernel_shape=[2, 2], strides=[2, 2])  # Indices unread
    branch = g.op("Transpose", [g.op("Transpose", [pooled], perm=[0, 1, 3, 2])], perm=[0, 1, 3, 2])
    joined = g.op("Concat", [pooled, g.op("Sigmoid", [branch])], axis=1)
    flat = g.op("Flatten", [g.op("GlobalAveragePool", [joined])], axis=1)
    w = f32(4, 3, scale=0.5)
    y = g.op("MatMul", [flat, g.q(g.init("w", w), 3, 8)])
    y = g.op("Reshape", [g.op("Tanh", [y]), g.init("shape", np.array([0, 3, -1], np.int64))])
    out = g.op("LeakyRelu", [y], alpha=0.125)
    module = read(g.model(["N", 2, 4, 4], out))
    xin = f32(3, 2, 4, 4)
    v = fq(xin.astype(np.float64), 8, 4)
    p = v.reshape(3, 2, 2, 2, 2, 2).max(axis=(3, 5))
    j = np.concatenate([p, 1 / (1 + np.exp(-p))], axis=1).mean(axis=(2, 3))
    t = np.tanh(j @ fq(w.astype(np.float64), 8, 3)).reshape(3, 3, 1)
    np.testing.assert_allclose(run(module, xin), np.where(t >= 0, t, 0.125 * t), rtol=1e-12)


def test_batch_norm_training_mode_warns_once_and_uses_running_statistics() -> None:
    g = Graph()
    c = 3
    params = [f32(c), f32(c), f32(c, scale=0.1), np.abs(f32(c)) + 0.5]
    names = [g.init(n, p) for n, p in zip(["gamma", "beta", "mean", "var"], params)]
    y = g.op(
        "BatchNormalization",
        [g.q("input", 4, 8), *names],
        n_out=3,
        epsilon=1e-5,
        momentum=0.9,
        training_mode=1,
    )
    y = g.op(
        "BatchNormalization", [y, *names], n_out=3, epsilon=1e-5, momentum=0.9, training_mode=1
    )
    with pytest.warns(OnnxImportWarning, match="training_mode=1") as caught:
        module = read(g.model(["N", c, 4, 4], y))
    assert len([w for w in caught if issubclass(w.category, OnnxImportWarning)]) == 1
    x = f32(2, c, 4, 4)
    gamma, beta, mean, var = (p.astype(np.float64).reshape(1, c, 1, 1) for p in params)

    def bn(v: np.ndarray) -> np.ndarray:
        return (v - mean) / np.sqrt(var + np.float32(1e-5)) * gamma + beta

    want = bn(bn(fq(x.astype(np.float64), 8, 4)))
    np.testing.assert_allclose(run(module, x), want, rtol=1e-6, atol=1e-9)


def test_batch_norm_whose_statistics_outputs_are_read_is_refused() -> None:
    g = Graph()
    names = [g.init(n, np.ones(2, np.float32)) for n in ["g", "b", "m", "v"]]
    g.op("BatchNormalization", [g.q("input", 4, 8), *names], n_out=3, training_mode=1)
    out = g.op("Relu", ["BatchNormalization_n1_o1"])
    with pytest.raises(OnnxImportError, match="BatchNormalization_n1.*running statistics"):
        read(g.model(["N", 2, 3, 3], out))


def test_opset_17_inputs_read_as_attributes() -> None:
    """Pad, Clip, Split and Resize take constants as inputs since opset 11/13; read statically."""
    g = Graph()
    x = g.q("input", 4, 8)
    p = g.op(
        "Pad",
        [
            x,
            g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
            g.const(np.array(0.0, np.float32)),
        ],
        mode="constant",
    )
    c = g.op("Clip", [p, g.const(np.array(-0.5, np.float32)), g.const(np.array(0.75, np.float32))])
    halves = g.op("Split", [c, g.const(np.array([1, 1], np.int64))], n_out=2, axis=1)
    scales = g.const(np.array([1, 1, 2, 2], np.float32))
    nearest = {
        "mode": "nearest",
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
    }
    r0 = g.op("Resize", [halves, "", scales], **nearest)
    r1 = g.op(
        "Resize", ["Split_n1_o1", "", "", g.const(np.array([2, 1, 10, 10], np.int64))], **nearest
    )
    out = g.op("Add", [r0, r1])
    module = read(g.model([2, 2, 3, 3], out))  # (sizes of 2 along a dynamic batch would resize it)
    xin = f32(2, 2, 3, 3)
    v = np.clip(
        np.pad(fq(xin.astype(np.float64), 8, 4), ((0, 0), (0, 0), (1, 1), (1, 1))), -0.5, 0.75
    )
    up = v.repeat(2, axis=2).repeat(2, axis=3)
    want = up[:, :1] + up[:, 1:]
    assert np.array_equal(run(module, xin), want)


def test_standard_qdq_reads_as_half_even_fake_quant() -> None:
    x_scale = np.array(2.0**-5, np.float32)
    w_codes = RNG.integers(-128, 128, size=(4, 3, 1, 1)).astype(np.int8)
    w_scale = np.array([2.0**-6, 2.0**-7, 2.0**-6, 2.0**-8], np.float32)
    zero = np.array(0, np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "xs", "zp"], ["xq"], name="ql"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="wdq", axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", kernel_shape=[1, 1]),
    ]
    inits = [
        numpy_helper.from_array(x_scale, "xs"),
        numpy_helper.from_array(zero, "zp"),
        numpy_helper.from_array(w_codes, "w"),
        numpy_helper.from_array(w_scale, "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wzp"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    module = read(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    text = str(module)
    assert "half_even" in text and 'nf.constant "w"' in text
    x = f32(2, 3, 2, 2) * 3
    xq = np.clip(np.round(x.astype(np.float64) * 32), -128, 127) / 32  # np.round: half to even
    w = w_codes * w_scale.astype(np.float64).reshape(4, 1, 1, 1)
    assert np.array_equal(run(module, x), np.einsum("nchw,oc->nohw", xq, w[:, :, 0, 0]))


def test_int4_qdq_opset_21() -> None:
    """int4 codes (ONNX INT4: a zero point or weight initializer of that type) are 4 bits."""
    w = helper.make_tensor("w", TensorProto.INT4, [2, 3], [1, -2, 3, -8, 7, 0])
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"], name="ql"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], name="wdq"),
        helper.make_node("Gemm", ["xd", "wd"], ["y"], name="fc", transB=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.25, np.float32), "xs"),
        helper.make_tensor("xz", TensorProto.INT4, [], [0]),
        w,
        numpy_helper.from_array(np.array(0.5, np.float32), "ws"),
    ]
    graph = helper.make_graph(
        nodes,
        "int4",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    module = read(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    assert str(module).count("bits = 4") == 2
    x = RNG.normal(size=(5, 3)) * 2
    xq = np.clip(np.round(x * 4), -8, 7) / 4
    w_values = np.array([[1, -2, 3], [-8, 7, 0]]) * 0.5
    assert np.array_equal(run(module, x), xq @ w_values.T)


@pytest.mark.parametrize(
    ("scale", "zp", "message"),
    [
        (np.array(0.1, np.float32), np.array(0, np.int8), "'ql'.*not a power of two"),
        (np.array(0.25, np.float32), np.array(3, np.int8), "'ql'.*zero point 'zp' is not 0"),
        # uint8 with zero point 0 reads as unsigned codes (tests/grammar/test_onnx_unsigned.py)
        (np.array(0.25, np.float32), np.array(3, np.uint8), "'ql'.*zero point 'zp' is not 0"),
    ],
)
def test_qdq_that_is_not_power_of_two_symmetric_is_refused(scale, zp, message) -> None:
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "s", "zp"], ["q"], name="ql"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "zp")],
    )
    with pytest.raises(OnnxImportError, match=message):
        read(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_torch_export_reads_folds_its_pad_computation_quantizes_and_lowers() -> None:
    """torch's own exporter (opset 17): BatchNormalization folded into the conv, F.pad's pads
    computed by ConstantOfShape/Concat/Reshape/Slice/Transpose/Cast on constants (folded when
    read), Resize with a scales input, a Gemm after Flatten; then quantized and lowered."""
    torch = pytest.importorskip("torch")
    import io

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
            self.fc = torch.nn.Linear(8 * 5 * 5, 5)

        def forward(self, x):
            F = torch.nn.functional
            x = F.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
            x = x + F.avg_pool2d(self.c2(x), 3, stride=1, padding=1, count_include_pad=False)
            x = F.interpolate(torch.sigmoid(x) * torch.tanh(x), scale_factor=2, mode="nearest")
            x = F.avg_pool2d(F.pad(x, (1, 1, 1, 1)), 2)
            return self.fc(torch.flatten(x, 1))

    torch.manual_seed(0)
    model = Net().eval()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 8, 8)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            buffer,
            dynamo=False,
            opset_version=17,
            input_names=["input"],
            dynamic_axes={"input": {0: "N"}},
        )
    module = import_onnx_bytes(buffer.getvalue(), "torch.onnx")
    assert module.body.block.ops.first.args[0].type.get_shape()[0] == DYNAMIC_INDEX
    with torch.no_grad():
        want = model(x).double().numpy()
    np.testing.assert_allclose(run(module, x.double().numpy()), want, rtol=1e-5, atol=1e-6)
    batches = [RNG.normal(size=(4, 3, 8, 8)) for _ in range(2)]
    nanoir.quantize(module, batches, progress=False)
    y_q = run(module, batches[0])
    assert np.array_equal(run(nanoir.lower_to_hw(module.clone()), batches[0]), y_q)


# ---------------------------------------------------------------------------------------
# The reference's own export
# ---------------------------------------------------------------------------------------


def load_readme():
    with pytest.warns(OnnxImportWarning, match="training_mode=1"):
        return nanoir.load(README_ONNX)


def test_readme_model_loads_runs_lowers_bit_exactly_and_exports(tmp_path: Path) -> None:
    module = load_readme()
    func = module.body.block.ops.first
    assert func.args[0].type.get_shape() == (DYNAMIC_INDEX, 3, 8, 8)
    names = [op.name for op in func.body.block.ops]
    assert "nf.batch_norm" in names and names.count("nq.fake_quant") == 18
    x = RNG.normal(size=(3, 3, 8, 8))
    y = run(module, x)
    assert y.shape == (3, 16, 6, 6)
    hw = nanoir.lower_to_hw(module.clone())
    assert {op.name.split(".")[0] for op in hw.walk()} <= {"builtin", "func", "nh"}
    assert np.array_equal(run(hw, x), y)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=1)
    assert np.array_equal(streamed, y)
    nanoir.save(hw, tmp_path / "hw.ne")  # the integer program in .ne reads back the same
    assert np.array_equal(run(nanoir.load(tmp_path / "hw.ne"), x), y)
    nanoir.save(module, tmp_path / "m.ne")
    text = (tmp_path / "m.ne").read_text()
    assert "op_type=BatchNormalization" in text and "let Q_n1: Node" in text
    assert np.array_equal(run(nanoir.load(tmp_path / "m.ne"), x), y)


def test_readme_model_agrees_with_the_reference_ne_where_they_should() -> None:
    """`readme_model.onnx` and `readme_model.ne` are two exports of the README's architecture,
    not one model: the parameters, exponents and widths differ (conv1's weight is 1-bit in the
    ONNX file, 4-bit in the .ne one), the input is 8x8 against a 5-wide stream, and only the
    ONNX one has the BatchNormalization. What must agree does: the parameter names and shapes,
    the naming of nodes, and, with the BatchNormalization and its parameters' Qs taken out, the
    sequence of computing ops."""
    from nanoir.dialects import nf

    from_onnx = load_readme().body.block.ops.first
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_ne = nanoir.load(README_NE).body.block.ops.first

    def params(func) -> dict[str, tuple[int, ...]]:
        return {
            op.sym_name.data: tuple(op.result.type.get_shape())
            for op in func.body.block.ops
            if isinstance(op, nf.ConstantOp) and op.sym_name.data.startswith("Net_0_conv_conv")
        }

    assert params(from_onnx) == params(from_ne) != {}
    bn = next(op for op in from_onnx.body.block.ops if isinstance(op, nf.BatchNormOp))
    dropped = {bn, *(v.op for v in bn.operands[1:])}

    def sequence(func, dropped=frozenset()) -> list[str]:
        return [
            op.name
            for op in func.body.block.ops
            if op.name not in ("nf.constant", "func.return") and op not in dropped
        ]

    onnx_seq, ne_seq = sequence(from_onnx, dropped), sequence(from_ne)
    # As many Qs, placed differently: the ONNX graph quantizes the BatchNormalization's output
    # and not the Relu's, the .ne one the Relu's (there is no BatchNormalization).
    assert onnx_seq.count("nq.fake_quant") == ne_seq.count("nq.fake_quant") == 14
    assert [n for n in onnx_seq if n != "nq.fake_quant"] == [
        n for n in ne_seq if n != "nq.fake_quant"
    ]
    node_names = {
        str(op.attributes["ne.node"].data)
        for op in from_ne.body.block.ops
        if "ne.node" in op.attributes
    }
    assert {"Q_n1", "Conv_n1", "Conv_n2", "Relu_n1", "Add_n4"} <= node_names
    assert {"Q_n1", "Conv_n1", "Conv_n2", "Relu_n1", "Add_n4"} <= {
        str(op.attributes["ne.node"].data)
        for op in from_onnx.body.block.ops
        if "ne.node" in op.attributes
    }


def test_cli_tools_read_onnx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from nanoir.cli.opt import main as opt_main
    from nanoir.cli.run import main as run_main

    x = RNG.normal(size=(2, 3, 8, 8))
    np.save(tmp_path / "x.npy", x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert (
            run_main(
                [
                    str(README_ONNX),
                    "--input",
                    str(tmp_path / "x.npy"),
                    "-o",
                    str(tmp_path / "y.npy"),
                ]
            )
            == 0
        )
    assert np.array_equal(np.load(tmp_path / "y.npy"), run(load_readme(), x))
    assert opt_main([str(README_ONNX), "--lower-to-hw", "-o", str(tmp_path / "hw.mlir")]) == 0
    assert "training_mode=1" in capsys.readouterr().err
    assert "nh." in (tmp_path / "hw.mlir").read_text()


# ---------------------------------------------------------------------------------------
# Bad files: one clear error naming the file and the node
# ---------------------------------------------------------------------------------------


def small() -> Graph:
    g = Graph()
    g.init("w", f32(2, 2, 1, 1))
    return g


def bad_models() -> list[tuple[str, onnx.ModelProto, str]]:
    cases = []
    g = small()
    cases.append(
        (
            "missing initializer",
            g.model(["N", 2, 2, 2], g.op("Conv", [g.q("input", 4, 8), "nope"])),
            r"'Conv_n1'.*reads 'nope', which is no graph input, initializer",
        )
    )
    g = small()
    k = g.const(np.array([4], np.int8))
    g.nodes.append(
        helper.make_node("Q", ["input", k, k], ["q"], name="Q_bad", domain=DOMAIN, bit_len=8)
    )
    cases.append(("Q with 3 inputs", g.model(["N", 2], "q"), r"'Q_bad'.*takes 2 inputs"))
    g = small()
    g.nodes.append(helper.make_node("Q", ["input"], ["q"], name="Q_one", domain=DOMAIN, bit_len=8))
    cases.append(("Q with 1 input", g.model(["N", 2], "q"), r"'Q_one'.*takes 2 inputs"))
    for bits in (0, 40):
        g = small()
        cases.append(
            (f"bit_len {bits}", g.model(["N", 2], g.q("input", 3, bits)), r"'Q_n1'.*bits = ")
        )
    g = small()
    k = g.const(np.array([4], np.int8))
    g.nodes.append(helper.make_node("Q", ["input", k], ["q"], name="Q_nobits", domain=DOMAIN))
    cases.append(("no bit_len", g.model(["N", 2], "q"), r"'Q_nobits'.*bit_len"))
    g = small()
    cases.append(
        (
            "unknown op",
            g.model(["N", 2], g.op("Hardmax", ["input"])),
            r"'Hardmax_n1'.*does not read the op Hardmax",
        )
    )
    g = small()
    g.nodes.append(helper.make_node("Frob", ["input"], ["f"], name="frob", domain="my.domain"))
    cases.append(("unknown domain", g.model(["N", 2], "f"), r"'frob'.*my\.domain::Frob"))
    g = small()
    g.nodes.append(
        helper.make_node("Q", ["input", "input"], ["q"], name="Q_dyn", domain=DOMAIN, bit_len=8)
    )
    cases.append(("computed k", g.model(["N", 2], "q"), r"'Q_dyn'.*computed at run time"))
    g = small()
    cases.append(
        (
            "unsupported attribute",  # (auto_pad reads for static spatial sizes)
            g.model(["N", 2, "H", 3], g.op("Conv", ["input", "w"], auto_pad="SAME_UPPER")),
            r"'Conv_n1'.*auto_pad SAME_UPPER pads dynamic spatial dims",
        )
    )
    g = small()
    model = g.model(["N", 2, 3, 3], g.op("Add", ["input", "w"]))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    cases.append(("mixed float types", model, r"'Add_n1'.*mix float types \(f32, f64\)"))
    return cases


BAD_MODELS = bad_models()


@pytest.mark.parametrize(
    ("what", "model", "message"),
    BAD_MODELS,
    ids=[what for what, _, _ in BAD_MODELS],
)
def test_bad_graphs_are_one_clear_error(tmp_path: Path, what: str, model, message: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(OnnxImportError, match=message) as info:
        nanoir.load(path)
    assert isinstance(info.value, nanoir.Error)
    assert str(info.value).startswith(f"{path}: node ")


def test_a_removed_initializer_is_named_with_the_node_that_reads_it() -> None:
    model = onnx.load_model_from_string(README_ONNX.read_bytes())
    kept = [t for t in model.graph.initializer if t.name != "Net_0_conv_conv1_weight"]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    with pytest.raises(
        OnnxImportError, match=r"node 'Q_n2' \(Q\): it reads 'Net_0_conv_conv1_weight'"
    ):
        read(model, "readme_model.onnx")


def test_truncated_protobuf_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(README_ONNX.read_bytes()[:1000])
    with pytest.raises(OnnxImportError, match=r"cut\.onnx: not a readable ONNX model"):
        nanoir.load(path)


def qdq_model_bytes() -> bytes:
    """A QDQ graph with the opset-17 forms (Split/Clip/Pad/Resize constant inputs)."""
    rng = np.random.default_rng(0)
    nearest = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}
    nodes = [
        helper.make_node("QuantizeLinear", ["input", "xs", "zp"], ["xq"], name="ql"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], name="wdq", axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", kernel_shape=[1, 1]),
        helper.make_node("Split", ["y", "sp"], ["a", "b"], name="split", axis=1),
        helper.make_node("Clip", ["a", "lo", "hi"], ["c"], name="clip"),
        helper.make_node("Pad", ["c", "pads", "pv"], ["d"], name="pad"),
        helper.make_node(
            "Resize", ["d", "", "sc"], ["e"], name="rs", nearest_mode="floor", **nearest
        ),
    ]
    arrays = {
        "xs": np.array(2.0**-5, np.float32),
        "zp": np.array(0, np.int8),
        "w": rng.integers(-128, 128, (4, 3, 1, 1)).astype(np.int8),
        "ws": np.full(4, 2.0**-6, np.float32),
        "wzp": np.zeros(4, np.int8),
        "sp": np.array([2, 2], np.int64),
        "lo": np.array(-1, np.float32),
        "hi": np.array(1, np.float32),
        "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        "pv": np.array(0, np.float32),
        "sc": np.array([1, 1, 2, 2], np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 2, 2])],
        [
            helper.make_tensor_value_info("e", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(v, k) for k, v in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


SEEDS = [README_ONNX.read_bytes(), qdq_model_bytes()]


def test_fuzz_seeds_read() -> None:
    for seed, shape in zip(SEEDS, [(1, 3, 8, 8), (1, 3, 2, 2)]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = import_onnx_bytes(seed, "seed.onnx")
        assert all(np.all(np.isfinite(y)) for y in nanoir.run(module, RNG.normal(size=shape)))


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.sampled_from(range(len(SEEDS))),
    st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=4),
    st.floats(0, 1),
)
def test_fuzzed_files_raise_only_nanoir_errors(
    seed: int, flips: list[tuple[float, int]], keep: float
) -> None:
    """Bytes flipped and the file cut short: it reads, or one nanoir.Error naming the file."""
    data = bytearray(SEEDS[seed])
    for at, value in flips:
        data[int(at * len(data))] = value
    cut = max(1, round(keep * len(data)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import_onnx_bytes(bytes(data[:cut]), "fuzz.onnx")
        except nanoir.Error as e:
            assert str(e).startswith("fuzz.onnx: ")


def test_standard_ops_agree_with_onnxruntime() -> None:
    """Where onnxruntime runs the graph (standard ops and QDQ, not `t2e.qmodel::Q`), nanoir's
    reading computes what it computes (to float32 rounding: ORT computes in float32)."""
    ort = pytest.importorskip("onnxruntime")
    data = qdq_model_bytes()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = (RNG.normal(size=(3, 3, 2, 2)) * 3).astype(np.float32)
    want = session.run(None, {"input": x})
    got = nanoir.run(import_onnx_bytes(data, "qdq.onnx"), x.astype(np.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
