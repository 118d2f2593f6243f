"""Import (`.ne` text -> nq-level IR): the sample, the op table, custom ops, types, errors.

Expected values come from the input text (regular expressions, `bytes.fromhex`, `struct`)
or from NumPy re-implementations of the ops, never from the importer's own output. Error
positions are marked with `§` in the input and computed from where the marker was.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne.errors import NanoEngineError, NanoEngineSemanticError
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import (
    NanoEngineImportWarning,
    import_nanoengine,
    import_program,
    load_nanoengine,
)
from nanoir.grammar.ne.syntax_tree import (
    ConstTensor,
    Function,
    Program,
    RuntimeNode,
    RuntimeTensor,
)
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

import nanoir

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"
D = DYNAMIC_INDEX


def ops(module: ModuleOp, cls: type[Operation] | None = None) -> list[Operation]:
    return [op for op in module.walk() if cls is None or isinstance(op, cls)]


def node_op(module: ModuleOp, node: str) -> Operation:
    found = [
        op
        for op in module.walk()
        if isinstance(op.attributes.get("ne.node"), StringAttr)
        and op.attributes["ne.node"].data == node
    ]  # type: ignore[union-attr]
    assert len(found) == 1
    return found[0]


def shape(value: object) -> tuple[int, ...]:
    t = value.type  # type: ignore[attr-defined]
    assert isinstance(t, TensorType)
    return tuple(t.get_shape())


# ---------------------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_text() -> str:
    return SAMPLE.read_text()


@pytest.fixture(scope="module")
def sample(sample_text: str) -> ModuleOp:
    return import_nanoengine(sample_text, str(SAMPLE))


def test_sample_constants_hold_the_exact_bytes(sample_text: str, sample: ModuleOp) -> None:
    floats = dict(
        re.findall(
            r"^let (\w+): Tensor<little_float_32> = \{shape=\[[0-9, ]*\], data=0x([0-9a-f]*)\} ;$",
            sample_text,
            re.M,
        )
    )
    constants = {op.sym_name.data: op for op in ops(sample, nf.ConstantOp)}  # type: ignore[attr-defined]
    assert set(constants) == set(floats)
    for name, hex_data in floats.items():
        assert constants[name].value.data.data == bytes.fromhex(hex_data)  # type: ignore[attr-defined]
    scalar = constants["Constant_n12_o0"]
    assert shape(scalar.results[0]) == ()  # shape=[] is a rank-0 tensor


def test_sample_q_nodes_are_fake_quants(sample_text: str, sample: ModuleOp) -> None:
    blocks = re.findall(
        r"^let (\w+): (init )?Node = \{\n    op_type=Q,\n    attr=\[bit_len=(\d+)\],\n    in_s=\[(\w+), (\w+)\],",
        sample_text,
        re.M,
    )
    ints = {
        n: (s, h)
        for n, s, h in re.findall(
            r"^let (\w+): Tensor<int8_t> = \{shape=\[([0-9, ]*)\], data=0x([0-9a-f]*)\} ;$",
            sample_text,
            re.M,
        )
    }
    assert len(blocks) == len(ops(sample, FakeQuantOp)) == 14
    for name, init, bits, data, exp_name in blocks:
        op = node_op(sample, name)
        assert isinstance(op, FakeQuantOp)
        assert op.bits.value.data == int(bits)
        assert (init != "") == ("ne.init" in op.attributes)
        assert op.attributes["ne.exp_name"] == StringAttr(exp_name)
        dims, hex_data = ints[exp_name]
        exp_type = op.exp.get_type()
        assert exp_type.get_element_type() == IntegerAttr(0, 8).type  # i8, the constant's own type
        assert exp_type.get_shape() == tuple(int(d) for d in dims.split(", "))
        assert op.exp.data.data == bytes.fromhex(hex_data)
        source = op.input.owner
        if init:  # an init Q quantizes a constant
            assert isinstance(source, nf.ConstantOp) and source.sym_name.data == data  # type: ignore[union-attr]


def test_sample_signature_and_streamed_types(sample: ModuleOp) -> None:
    (func,) = ops(sample, FuncOp)
    assert isinstance(func, FuncOp)
    # input [-1, 3, 1, 5] (BCMD): batch and M are dynamic; the output [-1, 16, 1, 3] likewise.
    assert [t.get_shape() for t in func.function_type.inputs.data] == [(D, 3, D, 5)]  # type: ignore[attr-defined]
    assert [t.get_shape() for t in func.function_type.outputs.data] == [(D, 16, D, 3)]  # type: ignore[attr-defined]
    assert func.body.block.args[0].name_hint == "input"
    conv = node_op(sample, "Conv_n1")
    assert isinstance(conv, nf.ConvOp)
    assert array_values(conv.pads) == (0, 0, 0, 0) and array_values(conv.strides) == (1, 1)
    assert conv.groups.value.data == 1 and shape(conv.result) == (D, 16, D, 3)
    # Every op result's type came from shape inference and verifies.
    sample.verify()


def test_sample_runs_on_the_quantized_grid(sample: ModuleOp) -> None:
    rng = np.random.default_rng(3)
    for m in (3, 6):
        x = rng.standard_normal((2, 3, m, 5))
        (y,) = nanoir.run(sample, x)
        assert y.shape == (2, 16, m - 2, 3)  # 3x3 unpadded conv: D 5 -> 3, M m -> m - 2
        codes = y * 128
        assert np.array_equal(codes, np.round(codes))
        assert codes.min() >= -128 and codes.max() <= 127


def test_load_nanoengine_reads_a_file(sample: ModuleOp) -> None:
    assert load_nanoengine(SAMPLE).is_structurally_equivalent(sample)


# ---------------------------------------------------------------------------------------
# Small programs
# ---------------------------------------------------------------------------------------

FUNCS = "func init(){\n}\nfunc runtime(){\n    n.do();\n}\n"


def f32(values: list[float] | np.ndarray, shape: tuple[int, ...]) -> str:
    data = np.asarray(values, dtype="<f4").reshape(shape)
    return f"{{shape=[{', '.join(map(str, shape))}], data=0x{data.tobytes().hex()}}} ;"


def one_node(
    op_type: str,
    attrs: str,
    ins: list[str],
    decls: str,
    x: str = "[-1, 2, 1, 6]",
    y: str = "[-1, 3, 1, 5]",
    layout: str = "BCMD",
) -> str:
    """A program of inputs `x`, declarations `decls` and one runtime node `n` writing `y`."""
    y_layout = layout[: y.count(",") + 1]
    return (
        f"let x: Tensor<Any> = {{shape:{layout}={x}}};\n{decls}"
        f"let y: Tensor<Any> = {{shape:{y_layout}={y}}};\n"
        f"let n: Node = {{\n    op_type={op_type},\n    attr=[{attrs}],\n    in_s=[{', '.join(ins)}],\n    mem_s=[],\n    out_s=[y]\n}};\n"
        + FUNCS
    )


W = "let w: Tensor<little_float_32> = " + f32(np.arange(12) / 8, (3, 2, 1, 2)) + "\n"
B = "let b: Tensor<little_float_32> = " + f32([0.5, -1, 2], (3,)) + "\n"


@pytest.mark.parametrize(
    "text, cls, check",
    [
        (
            one_node(
                "Conv",
                "dilations=[1, 1], group=1, kernel_shape=[1, 2], pads=[0, 0, 0, 0], strides=[1, 1]",
                ["x", "w", "b"],
                W + B,
            ),
            nf.ConvOp,
            lambda op: array_values(op.strides) == (1, 1) and op.bias is not None,
        ),
        (
            one_node("Conv", "pads=[1, 0, 2, 1], strides=[2, 1]", ["x", "w"], W, y="[-1, 3, 1, 6]"),
            nf.ConvOp,
            lambda op: array_values(op.pads) == (1, 0, 2, 1) and op.dilations is None,
        ),
        (
            one_node(
                "Gemm",
                "alpha=1.0, beta=1.0, transB=1",
                ["x", "w2"],
                "let w2: Tensor<little_float_32> = " + f32(np.ones(6), (3, 2)) + "\n",
                "[-1, 2]",
                "[-1, 3]",
                "BC",
            ),
            nf.LinearOp,
            lambda op: op.bias is None,
        ),
        (one_node("Relu", "", ["x"], "", y="[-1, 2, 1, 6]"), nf.ReluOp, lambda op: True),
        (one_node("Sigmoid", "", ["x"], "", y="[-1, 2, 4, 6]"), nf.SigmoidOp, lambda op: True),
        (one_node("Tanh", "", ["x"], "", y="[-1, 2, 1, 6]"), nf.TanhOp, lambda op: True),
        (
            one_node("LeakyRelu", "alpha=0.25", ["x"], "", y="[-1, 2, 1, 6]"),
            nf.LeakyReluOp,
            lambda op: op.alpha.value.data == 0.25,
        ),
        (
            one_node("LeakyRelu", "", ["x"], "", y="[-1, 2, 1, 6]"),
            nf.LeakyReluOp,
            lambda op: op.alpha.value.data == 0.01,
        ),
        (
            one_node("Clip", "min=0.0, max=6.0", ["x"], "", y="[-1, 2, 1, 6]"),
            nf.ClampOp,
            lambda op: (op.min.value.data, op.max.value.data) == (0.0, 6.0),
        ),
        (one_node("Sub", "", ["x", "x"], "", y="[-1, 2, 1, 6]"), nf.SubOp, lambda op: True),
        (
            one_node(
                "Div",
                "",
                ["x", "s"],
                "let s: Tensor<little_float_32> = " + f32([4.0], ()) + "\n",
                y="[-1, 2, 1, 6]",
            ),
            nf.DivOp,
            lambda op: shape(op.rhs) == (),
        ),
        (
            one_node(
                "MaxPool",
                "ceil_mode=0, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2]",
                ["x"],
                "",
                y="[-1, 2, 1, 3]",
            ),
            nf.MaxPoolOp,
            lambda op: array_values(op.kernel) == (2, 2) and array_values(op.strides) == (2, 2),
        ),
        (
            one_node(
                "AveragePool",
                "kernel_shape=[1, 3], pads=[0, 1, 0, 1]",
                ["x"],
                "",
                y="[-1, 2, 1, 6]",
            ),
            nf.AvgPoolOp,
            lambda op: op.count_include_pad.value.data == 0,  # ONNX's default, not torch's
        ),
        (
            one_node("GlobalAveragePool", "", ["x"], "", y="[-1, 2, 1, 1]"),
            nf.AdaptiveAvgPoolOp,
            lambda op: array_values(op.output_size) == (1, 1),
        ),
        (
            one_node("Concat", "axis=1", ["x", "x"], "", y="[-1, 4, 1, 6]"),
            nf.ConcatOp,
            lambda op: op.axis.value.data == 1,
        ),
        (
            one_node(
                "BatchNormalization",
                "epsilon=1e-05, momentum=0.9",
                ["x", "g", "g", "g", "g"],
                "let g: Tensor<little_float_32> = " + f32([1, 2], (2,)) + "\n",
                y="[-1, 2, 1, 6]",
            ),
            nf.BatchNormOp,
            lambda op: op.epsilon.value.data == 1e-05,
        ),
        (
            one_node(
                "Reshape",
                "",
                ["x", "s"],
                "let s: Tensor<int64_t> = {shape=[2], data=0x0000000000000000ffffffffffffffff} ;\n",
                "[-1, 2, 6]",
                "[-1, 12]",
                "BCD",
            ),
            nf.ReshapeOp,
            lambda op: shape(op.result) == (D, 12),  # 0 copies the batch, -1 is inferred
        ),
        (
            one_node("Flatten", "axis=1", ["x"], "", "[-1, 2, 6]", "[-1, 12]", "BCD"),
            nf.ReshapeOp,
            lambda op: op.attributes["ne.op_type"] == StringAttr("Flatten"),
        ),
        (
            one_node("Transpose", "perm=[0, 2, 1]", ["x"], "", "[-1, 2, 6]", "[-1, 6, 2]", "BCD"),
            nf.TransposeOp,
            lambda op: shape(op.result) == (D, 6, 2),
        ),
        (
            one_node(
                "PRelu",
                "",
                ["x", "a"],
                "let a: Tensor<little_float_32> = " + f32([0.1, 0.2], (2,)) + "\n",
                y="[-1, 2, 1, 6]",
            ),
            nf.PReluOp,
            lambda op: True,
        ),
    ],
)
def test_known_op_types(text: str, cls: type[Operation], check: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NanoEngineImportWarning)  # known ops never warn
        module = import_nanoengine(text)
    op = node_op(module, "n")
    assert isinstance(op, cls)
    assert check(op)  # type: ignore[operator]
    assert export_nanoengine(module) == text


def test_conv_q_relu_compute_what_numpy_says() -> None:
    """ONNX semantics end to end on values that do not saturate: pads order, exponents, trunc."""
    rng = np.random.default_rng(0)
    w = np.round(rng.standard_normal((3, 2, 2, 3)) * 8) / 8
    b = np.array([0.25, -0.5, 0.125])
    text = (
        "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};\n"
        "let w: Tensor<little_float_32> = " + f32(w, w.shape) + "\n"
        "let b: Tensor<little_float_32> = " + f32(b, b.shape) + "\n"
        "let e4: Tensor<int8_t> = {shape=[1], data=0x04} ;\n"
        "let e3: Tensor<int16_t> = {shape=[], data=0x0300} ;\n"
        "let c: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};\n"
        "let q: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};\n"
        "let y: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]};\n"
        "let n: Node = {\n    op_type=Conv,\n    attr=[kernel_shape=[2, 3], pads=[1, 1, 0, 1]],\n    in_s=[x, w, b],\n    mem_s=[],\n    out_s=[c]\n};\n"
        "let m: Node = {\n    op_type=Q,\n    attr=[bit_len=8],\n    in_s=[c, e4],\n    mem_s=[],\n    out_s=[q]\n};\n"
        "let r: Node = {\n    op_type=Q,\n    attr=[bit_len=4],\n    in_s=[q, e3],\n    mem_s=[],\n    out_s=[y]\n};\n"
        "func init(){\n}\nfunc runtime(){\n    n.do();\n    m.do();\n    r.do();\n}\n"
    )
    module = import_nanoengine(text)
    x = np.round(rng.standard_normal((2, 2, 5, 6)) * 4) / 16
    (got,) = nanoir.run(module, x)
    # Reference: ONNX pads [top, left, bottom, right] = [1, 1, 0, 1]; cross-correlation.
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (1, 1)))
    conv = np.zeros((2, 3, 5, 6))
    for i in range(5):
        for j in range(6):
            conv[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i : i + 2, j : j + 3], w) + b

    def q(v: np.ndarray, bits: int, k: int) -> np.ndarray:
        return np.clip(np.trunc(v * 2.0**k), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) / 2.0**k

    assert np.array_equal(got, q(q(conv, 8, 4), 4, 3))


def test_unknown_op_types_are_kept_with_a_warning() -> None:
    text = one_node(
        "TopK",
        "axis=0, big=-9223372036854775808, f=1e-05, g=.5, mode=nearest, nested=[[1, -2], [x], []]",
        ["x", "idx", "s", "x"],
        "let idx: Tensor<int64_t> = {shape=[2], data=0x0100000000000000FFFFFFFFFFFFFFFF} ;\n"
        "let s: Tensor<little_float_32> = {shape=[], data=0x0000803f} ;\n",
        y="[-1, 3, 1, 2]",
    )
    with pytest.warns(
        NanoEngineImportWarning, match=r"<string>:\d+:\d+: warning: op type 'TopK' of node 'n'"
    ):
        module = import_nanoengine(text)
    op = node_op(module, "n")
    assert isinstance(op, nf.CustomOp) and op.op_type.data == "TopK"
    assert [
        v.owner.sym_name.data if isinstance(v.owner, nf.ConstantOp) else v.name_hint
        for v in op.inputs
    ] == ["x", "s", "x"]  # type: ignore[union-attr]
    attrs = op.attrs.data
    assert attrs["big"] == IntegerAttr(-(2**63), 64)  # the int64 limit of the format
    assert attrs["f"] == StringAttr("1e-05") and attrs["mode"] == StringAttr("nearest")
    assert isinstance(attrs["nested"], ArrayAttr) and len(attrs["nested"].data) == 3
    assert op.attributes["ne.const_in"] == DictionaryAttr({"1": StringAttr("idx")})
    decls = module.attributes["ne.decls"]
    assert isinstance(decls, DictionaryAttr)
    idx = decls.data["idx"].data["value"]  # type: ignore[attr-defined]
    assert idx.data.data == bytes.fromhex("0100000000000000FFFFFFFFFFFFFFFF")
    assert shape(op.results[0]) == (D, 3, D, 2)  # from the declaration
    assert export_nanoengine(module) == text  # uppercase hex included


@pytest.mark.parametrize(
    "op_type, attrs, ins, extra, why",
    [
        (
            "Gemm",
            "alpha=1.0, beta=1.0, transB=0",
            ["x", "w"],
            "let w: Tensor<little_float_32> = " + f32(np.ones(6), (2, 3)) + "\n",
            "transB",
        ),
        (
            "Gemm",
            "alpha=0.5, transB=1",
            ["x", "w"],
            "let w: Tensor<little_float_32> = " + f32(np.ones(6), (3, 2)) + "\n",
            "alpha",
        ),
        (
            "Clip",
            "",
            ["x", "lo", "lo"],
            "let lo: Tensor<little_float_32> = " + f32([0.0], ()) + "\n",
            "inputs",
        ),
        ("Relu", "inplace=1", ["x"], "", "inplace"),
    ],
)
def test_variants_nf_cannot_express_become_custom(
    op_type: str, attrs: str, ins: list[str], extra: str, why: str
) -> None:
    text = one_node(op_type, attrs, ins, extra, "[-1, 2]", "[-1, 3]", "BC")
    with pytest.warns(
        NanoEngineImportWarning, match=f"{op_type} node 'n' is kept as nf.custom: .*{why}"
    ):
        module = import_nanoengine(text)
    assert isinstance(node_op(module, "n"), nf.CustomOp)
    assert export_nanoengine(module) == text


def test_names_are_kept_even_where_ssa_hints_cannot_hold_them() -> None:
    text = (
        one_node("Relu", "", ["x"], "", y="[-1, 2, 1, 6]")
        .replace("let y:", "let y_12:")
        .replace("out_s=[y]", "out_s=[y_12]")
    )
    module = import_nanoengine(text)
    op = node_op(module, "n")
    assert op.results[0].name_hint in ("y", None)  # xDSL drops the _12
    assert op.attributes["ne.out_s"].data[0].data["name"] == StringAttr("y_12")  # type: ignore[attr-defined]
    assert export_nanoengine(module) == text


def test_streamed_dims_are_dynamic_by_layout() -> None:
    text = one_node("Relu", "", ["x"], "", "[-1, 4, 2]", "[-1, 4, 2]", "BCM")
    module = import_nanoengine(text)
    assert shape(node_op(module, "n").results[0]) == (D, 4, D)
    text = one_node("Relu", "", ["x"], "", "[-1, 4, 2]", "[-1, 4, 2]", "BCD")
    assert shape(node_op(import_nanoengine(text), "n").results[0]) == (D, 4, 2)


def test_hand_built_trees_import() -> None:
    program = Program(
        (
            RuntimeTensor("x", "Any", "BC", (-1, 2)),
            RuntimeTensor("y", "Any", "BC", (-1, 2)),
            ConstTensor.from_numpy("k", np.array([2.0], dtype=np.float32)),
            RuntimeNode("n", "Mul", (), ("x", "k"), (), ("y",)),
            Function("init", ()),
            Function("runtime", ("n",)),
        )
    )
    module = import_program(program)
    (y,) = nanoir.run(module, np.array([[1.0, -3.0]]))
    assert y.tolist() == [[2.0, -6.0]]


# ---------------------------------------------------------------------------------------
# Semantic errors, located at the node
# ---------------------------------------------------------------------------------------

MARK = "§"


def located(marked: str) -> tuple[str, int, int]:
    at = marked.index(MARK)
    line = marked.count("\n", 0, at) + 1
    column = at - (marked.rfind("\n", 0, at) + 1) + 1
    return marked.replace(MARK, ""), line, column


Q_PROGRAM = (
    "let x: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};\n"
    "let e: Tensor<int8_t> = {shape=[1], data=0x07} ;\n"
    "let f: Tensor<little_float_32> = {shape=[1], data=0x0000803f} ;\n"
    "let y: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]};\n"
    "let n: Node = {\n    op_type=Q,\n    attr=[bit_len=8],\n    in_s=[x, e],\n    mem_s=[],\n    out_s=[y]\n};\n"
    + FUNCS
)


@pytest.mark.parametrize(
    "marked, message",
    [
        (
            one_node("Conv", "§kernel_shape=[3, 3]", ["x", "w"], W),
            "kernel_shape [3, 3] of Conv node 'n' contradicts its weight of shape 3x2x1x2",
        ),
        (
            Q_PROGRAM.replace("in_s=[x, e]", "in_s=[x, §f]"),
            "Q node 'n' needs an integer exponent constant as input 1",
        ),
        (
            Q_PROGRAM.replace("in_s=[x, e]", "in_s=[x, §x]"),
            "Q node 'n' needs an integer exponent constant as input 1",
        ),
        (
            Q_PROGRAM.replace("let n: Node", "let §n: Node").replace("bit_len=8", "bits=8"),
            "Q node 'n' is kept",
        ),
        (
            Q_PROGRAM.replace("let n: Node", "let §n: Node").replace("in_s=[x, e]", "in_s=[x]"),
            "Q node 'n' takes 2 inputs (data, exponent), got 1",
        ),
        (
            Q_PROGRAM.replace("§", "").replace("bit_len=8", "§bit_len=x"),
            "attribute 'bit_len' of node 'n' must be an integer",
        ),
        (
            Q_PROGRAM.replace("let n: Node", "let §n: Node").replace("bit_len=8", "bit_len=0"),
            "bits = 0 is outside",
        ),
        (
            one_node("Conv", "", ["x", "w"], W.replace("[3, 2, 1, 2]", "[2, 3, 1, 2]")).replace(
                "let n:", "let §n:"
            ),
            "input has 2 channels but weight expects 3",
        ),
        (
            one_node("Conv", "", ["x"], "").replace("let n:", "let §n:"),
            "Conv node 'n' takes 2 to 3 inputs, got 1",
        ),
        (
            one_node("Relu", "", ["x"], "", y="[-1, 3, 1, 6]").replace("out_s=[y]", "out_s=[§y]"),
            "'y' is declared [-1, 3, 1, 6] (?x3x?x6 in the IR), but Relu node 'n' computes ?x2x?x6",
        ),
        (
            one_node("Add", "", ["x", "y"], "", y="[-1, 2, 1, 6]").replace(
                "in_s=[x, y]", "in_s=[x, §y]"
            ),
            "node 'n' reads 'y' before node 'n' computes it",
        ),
        (
            one_node("Relu", "", ["x"], "", y="[-1, 2, 1, 6]").replace(
                "    n.do();\n", "    n.do();\n    §n.do();\n"
            ),
            "node 'n' is called more than once",
        ),
        (
            one_node("Relu", "", ["x"], "", y="[-1, 2, 1, 6]")
            .replace("    n.do();\n", "")
            .replace("let n:", "let §n:"),
            "node 'n' is never called by func runtime",
        ),
        (
            one_node(
                "Add", "", ["x", "i"], "let i: Tensor<Any>  = {shape:C=[1]};\n", y="[-1, 2, 1, 6]"
            ).replace("in_s=[x, i]", "in_s=[x, §i]"),
            "node 'n' reads 'i', which no init node computes",
        ),
        (
            one_node("Flatten", "§axis=7", ["x"], "", "[-1, 2, 6]", "[-1, 12]", "BCD"),
            "axis 7 of Flatten node 'n' is out of range",
        ),
    ],
)
def test_semantic_errors_are_located(marked: str, message: str) -> None:
    text, line, column = located(marked)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NanoEngineImportWarning)
        if message.endswith("is kept"):  # not an error: an unknown attribute makes it custom
            with pytest.warns(NanoEngineImportWarning, match=message):
                import_nanoengine(text, "m.ne")
            return
        with pytest.raises(NanoEngineSemanticError) as info:
            import_nanoengine(text, "m.ne")
    err = info.value
    assert message in err.message
    assert (err.filename, err.line, err.column) == ("m.ne", line, column)
    assert str(err).startswith(f"m.ne:{line}:{column}: error: ")
    assert str(err).splitlines()[1] == text.splitlines()[line - 1]  # the source line, then a caret
    assert isinstance(err, NanoEngineError)
