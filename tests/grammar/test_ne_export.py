"""Export (IR -> `.ne` text) and the round trips text -> IR -> text and IR -> text -> IR.

- The sample: import then export gives the file byte for byte, also after printing the IR as
  MLIR text and parsing it back (and that re-parsed module is structurally equal).
- Hypothesis builds valid, importable programs as syntax trees (known op types with varied
  attribute spellings and orders, unknown op types with every attribute kind, integer
  constants of every width, scalars, word tensors, unused declarations, mem caches, shuffled
  declarations, comments, hex case) and checks that the printed text comes back byte for byte.
- IR that did not come from `.ne` (a float program quantized by `quantize`) exports to text
  that parses with the checks on, imports again and computes bit-identical outputs.
"""

from __future__ import annotations

import re
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.grammar.ne import nq as ne_nq
from nanoir.grammar.ne.exporter import ExportError, export_nanoengine, export_program
from nanoir.grammar.ne.importer import NanoEngineImportWarning, import_nanoengine
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.syntax_tree import (
    AttrValue,
    Comment,
    ConstTensor,
    Float,
    Function,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
    WordTensor,
    dtype_size,
)
from nanoir.lowering.quantize import quantize
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation, SSAValue

import nanoir
from nanoir.testing.programs import examples

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"


def quiet_import(text: str) -> ModuleOp:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NanoEngineImportWarning)
        return import_nanoengine(text, "gen.ne")


def mlir_round_trip(module: ModuleOp) -> ModuleOp:
    return nanoir.parse(str(module))


# ---------------------------------------------------------------------------------------
# The sample
# ---------------------------------------------------------------------------------------


def test_sample_exports_byte_for_byte() -> None:
    text = SAMPLE.read_text()
    module = import_nanoengine(text, str(SAMPLE))
    assert export_nanoengine(module) == text


def test_sample_survives_mlir_text() -> None:
    text = SAMPLE.read_text()
    module = import_nanoengine(text, str(SAMPLE))
    again = mlir_round_trip(module)
    assert again.is_structurally_equivalent(module)
    assert export_nanoengine(again) == text
    # And text -> IR -> text -> IR is structurally equal too.
    assert import_nanoengine(export_nanoengine(again)).is_structurally_equivalent(module)


# ---------------------------------------------------------------------------------------
# Hypothesis: importable programs
# ---------------------------------------------------------------------------------------

FLOAT_SPELLINGS = [
    "0.01",
    "1e-05",
    "9.999999747378752e-06",
    "0.2",
    ".5",
    "1.",
    "2E-1",
    "-0.0",
    "1e+2",
    "0.125",
]
UNKNOWN_OPS = [
    "GridSample",
    "TopK",
    "NonMaxSuppression",
    "Unsqueeze",
    "ScatterND",
    "MyOp",
    "Einsum",
]
"""Op types the reader does not map, carried as opaque nodes (``Slice`` was one until the
reader mapped it: :func:`test_unknown_ops_are_unknown` keeps the list honest)."""
INT_DTYPES = [
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
]


class _Gen:
    """Accumulates a valid program; every runtime tensor is [B, C, M, D] or [B, F]."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.count = 0
        self.consts: list[ConstTensor | WordTensor] = []
        self.init_tensors: list[InitTensor] = []
        self.runtime: list[RuntimeTensor] = []
        self.mems: list[MemTensor] = []
        self.init_nodes: list[InitNode] = []
        self.runtime_nodes: list[RuntimeNode] = []
        self.extra: list[Item] = []  # unused declarations

    def name(self, base: str) -> str:
        self.count += 1
        # Names ending in _<digits> lose that suffix as SSA hints; the IR must keep them anyway.
        style = self.draw(st.sampled_from(["{b}_n{k}", "{b}{k}", "{b}_{k}", "_{b}_x{k}"]))
        return style.format(b=base, k=self.count)

    def hex_upper(self) -> bool:
        return self.draw(st.booleans())

    def float_const(self, shape: tuple[int, ...], base: str = "w") -> ConstTensor:
        n = int(np.prod(shape)) if shape else 1
        # No -0.0, NaN, infinity or integral values of 7+ digits here: xDSL 0.74 prints those
        # lossily inside a short dense<[...]> (see test_xdsl_short_dense_float_printing), so
        # they would not survive MLIR text. text -> IR -> text keeps them all
        # (test_float_bit_patterns_survive).
        finite = st.floats(-1e5, 1e5, width=32).map(lambda v: v + 0.0)
        values = self.draw(st.lists(finite, min_size=n, max_size=n))
        data = np.asarray(values, dtype="<f4").tobytes()
        const = ConstTensor(self.name(base), "little_float_32", shape, data, self.hex_upper())
        self.consts.append(const)
        return const

    def int_const(
        self, shape: tuple[int, ...], dtype: str | None = None, values: Sequence[int] | None = None
    ) -> ConstTensor:
        dtype = dtype or self.draw(st.sampled_from(INT_DTYPES))
        n = int(np.prod(shape)) if shape else 1
        if values is None:
            data = self.draw(
                st.binary(min_size=n * dtype_size(dtype), max_size=n * dtype_size(dtype))
            )
        else:
            data = np.asarray(
                values, dtype=np.dtype({"int8_t": "i1", "int64_t": "<i8"}[dtype])
            ).tobytes()
        const = ConstTensor(self.name("Constant"), dtype, shape, data, self.hex_upper())
        self.consts.append(const)
        return const

    def runtime_tensor(self, dims: tuple[int, ...]) -> RuntimeTensor:
        """A runtime tensor of IR shape `dims` (`?` = -1 for B and M), declared with a plan."""
        if len(dims) == 4:
            shape = (-1, dims[1], self.draw(st.integers(1, 4)), dims[3])
            layout = "BCMD"
        else:
            shape, layout = (-1, *dims[1:]), "BC"
        tensor = RuntimeTensor(self.name("t"), "Any", layout, shape)
        self.runtime.append(tensor)
        return tensor

    def maybe_quantized(self, const: ConstTensor) -> str:
        """The constant itself or, sometimes, an init Q of it."""
        if not self.draw(st.booleans()):
            return const.name
        exp_shape = self.draw(st.sampled_from([(1,), const.shape])) if const.shape else ()
        exp = self.int_const(
            exp_shape,
            "int8_t",
            self.draw(
                st.lists(
                    st.integers(-6, 8),
                    min_size=int(np.prod(exp_shape)),
                    max_size=int(np.prod(exp_shape)),
                )
            ),
        )
        layouts = ["C" * len(const.shape), ("C" + "D" * len(const.shape))[: len(const.shape)]]
        out = InitTensor(self.name("q"), "Any", self.draw(st.sampled_from(layouts)), const.shape)
        self.init_tensors.append(out)
        attrs = (("bit_len", self.draw(st.sampled_from([1, 2, 4, 8]))),)
        self.init_nodes.append(
            InitNode(self.name("Q"), "Q", attrs, (const.name, exp.name), (out.name,))
        )
        return out.name

    def node(
        self,
        op_type: str,
        attrs: Sequence[tuple[str, AttrValue]],
        ins: Sequence[str],
        outs: Sequence[RuntimeTensor],
    ) -> None:
        n_mem = self.draw(st.integers(0, 2))
        mems: list[str] = []
        for _ in range(n_mem):
            shape = (
                -1,
                self.draw(st.integers(1, 4)),
                self.draw(st.integers(1, 4)),
                self.draw(st.integers(1, 6)),
            )
            mem = MemTensor(self.name("mem"), "Any", "BCMD", shape)
            self.mems.append(mem)
            mems.append(mem.name)
        self.runtime_nodes.append(
            RuntimeNode(
                self.name(op_type),
                op_type,
                tuple(attrs),
                tuple(ins),
                tuple(mems),
                tuple(o.name for o in outs),
            )
        )

    def shuffled_attrs(
        self, attrs: list[tuple[str, AttrValue]], optional: set[str]
    ) -> list[tuple[str, AttrValue]]:
        """Drop some optional attributes and maybe reorder: the IR must keep the spelling."""
        kept = [(k, v) for k, v in attrs if k not in optional or self.draw(st.booleans())]
        if self.draw(st.booleans()):
            kept = self.draw(st.permutations(kept))
        return list(kept)


scalar_attr: st.SearchStrategy[AttrValue] = st.one_of(
    st.integers(-(2**63), 2**63 - 1),  # .ne integers are int64 (wider ones are errors)
    st.sampled_from(FLOAT_SPELLINGS).map(Float),
    st.sampled_from(["nearest", "NOTSET", "linear", "axis_name"]),
)
attr_value: st.SearchStrategy[AttrValue] = st.recursive(
    scalar_attr, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=5
)


def _step(
    g: _Gen,
    x: RuntimeTensor,
    dims: tuple[int, ...],
    pool: list[tuple[RuntimeTensor, tuple[int, ...]]],
) -> tuple[RuntimeTensor, tuple[int, ...]]:
    """Add one node reading `x` (IR shape `dims`); returns its output and the output's shape."""
    draw = g.draw
    if len(dims) == 2:
        kind = draw(st.sampled_from(["Gemm", "unary", "Q", "unknown"]))
    else:
        kind = draw(
            st.sampled_from(
                [
                    "Q",
                    "unary",
                    "LeakyRelu",
                    "Clip",
                    "binary",
                    "Conv",
                    "pool",
                    "Concat",
                    "BatchNormalization",
                    "unknown",
                    "Flatten",
                    "Reshape",
                ]
            )
        )
    B = M = -1
    if kind == "Q":
        exp_shape = draw(
            st.sampled_from([(1,), ()] + ([(dims[1], 1, 1)] if len(dims) == 4 else []))
        )
        k = int(np.prod(exp_shape)) if exp_shape else 1
        exp = g.int_const(
            exp_shape, "int8_t", draw(st.lists(st.integers(-8, 8), min_size=k, max_size=k))
        )
        attrs: list[tuple[str, AttrValue]] = [("bit_len", draw(st.sampled_from([1, 2, 4, 8, 16])))]
        if draw(st.integers(0, 4)) == 0:
            attrs.append(("rounding", draw(st.sampled_from(["half_even", "floor", "trunc"]))))
        out = g.runtime_tensor(dims)
        g.node("Q", attrs, [x.name, exp.name], [out])
        return out, dims
    if kind == "unary":
        out = g.runtime_tensor(dims)
        g.node(draw(st.sampled_from(["Relu", "Sigmoid", "Tanh"])), [], [x.name], [out])
        return out, dims
    if kind == "LeakyRelu":
        out = g.runtime_tensor(dims)
        g.node(
            "LeakyRelu",
            g.shuffled_attrs(
                [("alpha", Float(draw(st.sampled_from(FLOAT_SPELLINGS[:6]))))], {"alpha"}
            ),
            [x.name],
            [out],
        )
        return out, dims
    if kind == "Clip":
        out = g.runtime_tensor(dims)
        lo, hi = sorted(
            draw(st.lists(st.sampled_from([-1.5, 0.0, 0.5, 6.0]), min_size=2, max_size=2))
        )
        g.node(
            "Clip",
            g.shuffled_attrs([("max", Float(repr(hi))), ("min", Float(repr(lo)))], {"max", "min"}),
            [x.name],
            [out],
        )
        return out, dims
    if kind == "binary":
        op_type = draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
        other_kind = draw(st.sampled_from(["tensor", "const", "scalar"]))
        same = [t for t, d in pool if d == dims]
        if other_kind == "tensor" and same:
            other = draw(st.sampled_from(same)).name
        else:
            shape = () if other_kind == "scalar" else draw(st.sampled_from([(1,), (dims[1], 1, 1)]))
            other = g.maybe_quantized(g.float_const(shape, "c"))
        ins = [x.name, other] if draw(st.booleans()) else [other, x.name]
        out = g.runtime_tensor(dims)
        g.node(op_type, [], ins, [out])
        return out, dims
    if kind == "Conv":
        C, D = dims[1], dims[3]
        depthwise = draw(st.booleans())
        O = C if depthwise else draw(st.integers(1, 4))
        group = C if depthwise else 1
        kh, kw = draw(st.integers(1, 3 if dims[2] == -1 else 1)), draw(st.integers(1, min(3, D)))
        stride, dil = draw(st.sampled_from([1, 2])), 1
        pads = [draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))] * 2
        w = g.maybe_quantized(g.float_const((O, C // group, kh, kw)))
        ins = [x.name, w]
        if draw(st.booleans()):
            ins.append(g.maybe_quantized(g.float_const((O,), "b")))
        attrs = [
            ("dilations", (dil, dil)),
            ("group", group),
            ("kernel_shape", (kh, kw)),
            ("pads", tuple(pads)),
            ("strides", (stride, stride)),
        ]
        optional = {"dilations", "kernel_shape", "pads", "strides"} | (
            {"group"} if group == 1 else set()
        )
        attrs = g.shuffled_attrs(attrs, optional) if draw(st.booleans()) else attrs
        given = dict(attrs)
        s = given.get("strides", (1, 1))[1]  # type: ignore[index]
        p = given.get("pads", (0, 0, 0, 0))
        new_d = (D + p[1] + p[3] - kw) // s + 1  # type: ignore[index]
        out_dims = (B, O, dims[2], new_d)  # (a static M, after a global pool, stays 1)
        out = g.runtime_tensor(out_dims)
        g.node("Conv", attrs, ins, [out])
        return out, out_dims
    if kind == "pool":
        D = dims[3]
        kh, kw = draw(st.integers(1, 2 if dims[2] == -1 else 1)), draw(st.integers(1, min(2, D)))
        op_type = draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool"]))
        if op_type == "GlobalAveragePool":
            out_dims = (B, dims[1], 1, 1)
            out = g.runtime_tensor(out_dims)
            g.node(op_type, [], [x.name], [out])
            return out, out_dims
        attrs = [("ceil_mode", 0)]
        if op_type == "AveragePool":
            attrs.append(("count_include_pad", draw(st.sampled_from([0, 1]))))
        attrs += [("kernel_shape", (kh, kw)), ("pads", (0, 0, 0, 0)), ("strides", (1, kw))]
        attrs = g.shuffled_attrs(attrs, {"ceil_mode", "count_include_pad", "pads"})
        out_dims = (B, dims[1], dims[2], (D - kw) // kw + 1)
        out = g.runtime_tensor(out_dims)
        g.node(op_type, attrs, [x.name], [out])
        return out, out_dims
    if kind == "Concat":
        same_d = [(t, d) for t, d in pool if len(d) == 4 and d[2:] == dims[2:]]
        other, other_dims = draw(st.sampled_from(same_d))
        out_dims = (B, dims[1] + other_dims[1], dims[2], dims[3])
        out = g.runtime_tensor(out_dims)
        g.node("Concat", [("axis", 1)], [x.name, other.name], [out])
        return out, out_dims
    if kind == "BatchNormalization":
        C = dims[1]
        params = [g.float_const((C,), "bn").name for _ in range(4)]
        attrs = [
            ("epsilon", Float(draw(st.sampled_from(["1e-05", "9.999999747378752e-06", "0.001"]))))
        ]
        if draw(st.booleans()):
            attrs.append(("momentum", Float("0.9")))
        out = g.runtime_tensor(dims)
        g.node("BatchNormalization", attrs, [x.name, *params], [out])
        return out, dims
    if kind in ("Flatten", "Reshape"):
        # Flattening a streamed [B, C, M, D] leaves two dynamic dims: nf.custom, with a warning.
        F = dims[1] * dims[3]
        ins = [x.name]
        attrs = [("axis", 1)] if kind == "Flatten" else []
        if kind == "Reshape":
            ins.append(g.int_const((2,), "int64_t", [0, -1]).name)
        out_dims = (B, F)
        out = g.runtime_tensor(out_dims)
        g.node(kind, attrs, ins, [out])
        return out, out_dims
    if kind == "Gemm":
        F = dims[1]
        N = draw(st.integers(1, 4))
        w = g.maybe_quantized(g.float_const((N, F)))
        ins = [x.name, w] + ([g.float_const((N,), "b").name] if draw(st.booleans()) else [])
        attrs = [
            ("alpha", Float("1.0")),
            ("beta", Float("1.0")),
            ("transB", draw(st.sampled_from([1, 1, 0]))),
        ]
        out_dims = (B, N) if dict(attrs)["transB"] == 1 else (B, draw(st.integers(1, 3)))
        out = g.runtime_tensor(out_dims)
        g.node("Gemm", g.shuffled_attrs(attrs, {"alpha", "beta"}), ins, [out])
        return out, out_dims
    # unknown op type: any inputs, any attributes, one or two outputs of any declared shape
    op_type = draw(st.sampled_from(UNKNOWN_OPS))
    ins = [x.name]
    for _ in range(draw(st.integers(0, 2))):
        choice = draw(st.sampled_from(["int", "float", "tensor"]))
        if choice == "int":
            ins.append(g.int_const(draw(st.sampled_from([(), (1,), (2,), (2, 3)]))).name)
        elif choice == "float":
            ins.append(g.float_const(draw(st.sampled_from([(), (3,)])), "f").name)
        else:
            ins.append(draw(st.sampled_from(pool))[0].name)
    keys = draw(
        st.lists(
            st.sampled_from(["axis", "mode", "scales", "alpha", "x", "axes"]),
            unique=True,
            max_size=4,
        )
    )
    attrs = [(k, draw(attr_value)) for k in keys]
    outs = []
    out_dims = dims
    for _ in range(draw(st.integers(1, 2))):
        out_dims = (
            (B, draw(st.integers(1, 4)), M, draw(st.integers(1, 5)))
            if len(dims) == 4
            else (B, draw(st.integers(1, 5)))
        )
        outs.append(g.runtime_tensor(out_dims))
    g.node(op_type, attrs, ins, outs)
    return outs[-1], out_dims


@st.composite
def importable_programs(draw: st.DrawFn) -> Program:
    g = _Gen(draw)
    dims: tuple[int, ...] = (-1, draw(st.integers(1, 3)), -1, draw(st.integers(3, 6)))
    x = g.runtime_tensor(dims)
    x = RuntimeTensor("input", x.dtype, x.layout, x.shape)
    g.runtime[-1] = x
    pool = [(x, dims)]
    for _ in range(draw(st.integers(1, 6))):
        x, dims = _step(g, *draw(st.sampled_from(pool[-2:])), pool)
        pool.append((x, dims))
    # Declarations nobody uses are kept too.
    if draw(st.booleans()):
        g.extra.append(
            WordTensor(
                g.name("scale"),
                "Any",
                "NC",
                (1, 2),
                draw(st.binary(min_size=8, max_size=8)),
                g.hex_upper(),
            )
        )
    if draw(st.booleans()):
        g.int_const((draw(st.integers(0, 3)),))
    if draw(st.booleans()):
        g.extra.append(MemTensor(g.name("spare"), "Any", "BCMD", (-1, 1, 2, 3)))
    if draw(st.booleans()):
        g.extra.append(RuntimeTensor(g.name("unused"), "Any", "BC", (-1, 4)))
    if draw(st.booleans()):
        g.float_const((2,), "orphan")

    functions = [
        Function("init", tuple(n.name for n in g.init_nodes)),
        Function("runtime", tuple(n.name for n in g.runtime_nodes)),
    ]
    sections: list[tuple[str, Sequence[Item]]] = [
        (" init const tensor", g.consts),
        (" init static tensor", g.init_tensors),
        (" runtime tensor", g.runtime),
        (" runtime memory", g.mems),
        (" init node", g.init_nodes),
        (" runtime_node", g.runtime_nodes),
    ]
    items: list[Item] = []
    if draw(st.booleans()):  # the reference's layout
        for title, decls in sections:
            items.append(Comment(title))
            items.extend(decls)
        items += g.extra
        items += [
            Comment(" call init node"),
            functions[0],
            Comment(" call runtime node"),
            functions[1],
        ]
    else:  # any order, a few comments anywhere
        decls = [d for _, ds in sections for d in ds] + g.extra
        items = list(draw(st.permutations(decls)))
        for func in functions:
            items.insert(draw(st.integers(0, len(items))), func)
        for text in draw(st.lists(st.sampled_from([" note", "x", " a // b", ""]), max_size=3)):
            items.insert(draw(st.integers(0, len(items))), Comment(text))
    return Program(tuple(items))


def test_unknown_ops_are_unknown() -> None:
    """The generator's opaque op types are none the reader maps (a mapped one, drawn without
    its attributes, is refused: ``Slice`` was, once the reader learned it; explore profile)."""
    assert not set(UNKNOWN_OPS) & set(ne_nq.BY_OP_TYPE)


@settings(max_examples=examples(60))
@given(importable_programs())
def test_generated_programs_round_trip(program: Program) -> None:
    text = print_nanoengine(program)
    module = quiet_import(text)
    assert export_nanoengine(module) == text
    # IR -> MLIR text -> IR keeps every bit, and exports the same text.
    again = mlir_round_trip(module)
    assert again.is_structurally_equivalent(module)
    assert export_nanoengine(again) == text


CONCAT_SAME_TWICE = """
func.func @main(%x: tensor<?x1x3xf32>) -> (tensor<?x2x3xf32>, tensor<?x2x3xf32>) {
  %a = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x1x3xf32>
  %s = nf.sigmoid %a : tensor<?x1x3xf32>
  %b = nq.fake_quant %s {bits = 8 : i64, exp = dense<7> : tensor<1xi8>} : tensor<?x1x3xf32>
  %aa = nf.concat %a, %a {axis = 1 : i64} : (tensor<?x1x3xf32>, tensor<?x1x3xf32>) -> tensor<?x2x3xf32>
  %ab = nf.concat %a, %b {axis = 1 : i64} : (tensor<?x1x3xf32>, tensor<?x1x3xf32>) -> tensor<?x2x3xf32>
  func.return %aa, %ab : tensor<?x2x3xf32>, tensor<?x2x3xf32>
}
"""


def test_a_node_reading_one_tensor_twice_does_not_shape_later_nodes() -> None:
    """`Concat(a, a)` then `Concat(a, b)` (same types and attributes) come back as written:
    the importer reuses a built op for later nodes of the same signature, and an input read
    twice made its operand positions (0, 0), so the second node read (a, a) (the thorough
    profile's minimal failing program of test_random_programs_with_unsigned_fake_quants_
    round_trip). Expected values: NumPy's concatenate of the two quantized inputs. Mutant
    seen to fail it: the importer remembering templates with a repeated input."""
    module = nanoir.parse(CONCAT_SAME_TWICE)
    text = export_nanoengine(module)
    back = import_nanoengine(text, "twice.ne")
    assert export_nanoengine(back) == text
    x = np.linspace(-3, 3, 6).reshape(2, 1, 3)
    a = np.clip(np.trunc(x * 16), -128, 127) / 16
    b = np.clip(np.trunc(1 / (1 + np.exp(-a)) * 128), -128, 127) / 128
    aa, ab = nanoir.run(back, x)
    np.testing.assert_array_equal(aa, np.concatenate([a, a], axis=1))
    np.testing.assert_array_equal(ab, np.concatenate([a, b], axis=1))


def test_float_bit_patterns_survive() -> None:
    """NaN payloads, -0.0, infinities and subnormals (text -> IR -> text; see the note below)."""
    words = ["0100c07f", "00000080", "0000807f", "000080ff", "01000000", "ffffff7f"]
    text = (
        "let x: Tensor<Any> = {shape:BCMD=[-1, 6, 1, 1]};\n"
        f"let c: Tensor<little_float_32> = {{shape=[6, 1, 1], data=0x{''.join(words)}}} ;\n"
        "let y: Tensor<Any> = {shape:BCMD=[-1, 6, 1, 1]};\n"
        "let n: Node = {\n    op_type=Add,\n    attr=[],\n    in_s=[x, c],\n    mem_s=[],\n    out_s=[y]\n};\n"
        "func init(){\n}\nfunc runtime(){\n    n.do();\n}\n"
    )
    module = import_nanoengine(text)
    const = next(op for op in module.walk() if isinstance(op, nf.ConstantOp))
    assert const.value.data.data == bytes.fromhex("".join(words))
    assert export_nanoengine(module) == text
    # Not sent through MLIR text: see test_xdsl_short_dense_float_printing.


@pytest.mark.xfail(
    reason="xDSL 0.74 prints these floats lossily in a short dense<[...]>", strict=True
)
@pytest.mark.parametrize(
    "words",
    [
        [
            "0000803f",
            "0000c07f",
        ],  # 1.0, NaN: printed 0x7FC00000, read back as the integer 2143289344
        ["80c87dcd", "0000803f"],  # -265868800.0: 9 digits and no '.', printed as a hex integer too
        ["00000000", "00000080"],  # 0.0, -0.0: compare equal, so printed as the splat dense<0.0>
    ],
)
def test_xdsl_short_dense_float_printing(words: list[str]) -> None:
    """Tracks an xDSL bug: when it is fixed these pass, and the generator above can widen."""
    data = "".join(words)
    text = (
        f"let c: Tensor<little_float_32> = {{shape=[2], data=0x{data}}} ;\n"
        "let x: Tensor<Any> = {shape:BC=[-1, 2]};\nlet y: Tensor<Any> = {shape:BC=[-1, 2]};\n"
        "let n: Node = {\n    op_type=Mul,\n    attr=[],\n    in_s=[x, c],\n    mem_s=[],\n    out_s=[y]\n};\n"
        "func init(){\n}\nfunc runtime(){\n    n.do();\n}\n"
    )
    assert export_nanoengine(mlir_round_trip(import_nanoengine(text))) == text


# ---------------------------------------------------------------------------------------
# IR that did not come from .ne
# ---------------------------------------------------------------------------------------

NET = """\
func.func @main(%x: tensor<?x2x6x6xf32>) -> tensor<?x3xf32> {
  %w = nf.constant "conv.weight" dense<[[[[0.5, -0.25], [0.125, 1.0]], [[0.75, 0.5], [-1.5, 0.25]]], [[[2.0, -0.5], [0.25, 0.5]], [[-0.25, 0.125], [0.5, 0.75]]]]> : tensor<2x2x2x2xf32>
  %b = nf.constant "conv.bias" dense<[0.3, -0.7]> : tensor<2xf32>
  %c = nf.conv %x, %w, %b {pads = array<i64: 0, 1, 0, 1>} : (tensor<?x2x6x6xf32>, tensor<2x2x2x2xf32>, tensor<2xf32>) -> tensor<?x2x5x7xf32>
  %p = nf.constant "offset" dense<[1.9]> : tensor<1xf32>
  %two = nf.constant dense<2.0> : tensor<f32>
  %r = nf.relu %c : tensor<?x2x5x7xf32>
  %a = nf.add %r, %p : (tensor<?x2x5x7xf32>, tensor<1xf32>) -> tensor<?x2x5x7xf32>
  %a2 = nf.mul %a, %two : (tensor<?x2x5x7xf32>, tensor<f32>) -> tensor<?x2x5x7xf32>
  %m = nf.max_pool %a2 {kernel = array<i64: 1, 2>, strides = array<i64: 1, 2>} : tensor<?x2x5x7xf32> -> tensor<?x2x5x3xf32>
  %f = nf.reshape %m : tensor<?x2x5x3xf32> -> tensor<?x30xf32>
  %fw = nf.constant "fc.weight" dense<0.02> : tensor<3x30xf32>
  %fb = nf.constant "fc.bias" dense<[0.1, 0.2, -0.3]> : tensor<3xf32>
  %y = nf.linear %f, %fw, %fb : (tensor<?x30xf32>, tensor<3x30xf32>, tensor<3xf32>) -> tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}
"""


def quantized_net() -> ModuleOp:
    module = nanoir.parse(NET)
    rng = np.random.default_rng(0)
    quantize(module, [rng.standard_normal((4, 2, 6, 6)) for _ in range(3)])
    return module


def test_quantized_program_exports_and_runs_bit_identically() -> None:
    module = quantized_net()
    text = export_nanoengine(module)
    program = parse_nanoengine(text, "net.ne", check=True)
    # Names chosen as NanoEngine-PyTorch does, read from the tree, not from our own output.
    consts = [d.name for d in program.declarations if isinstance(d, ConstTensor)]
    assert consts[:5] == ["conv_weight", "conv_bias", "offset", "fc_weight", "fc_bias"]
    assert all(re.fullmatch(r"Constant_n\d+_o0", n) for n in consts[5:])
    n_fake_quants = sum(isinstance(op, FakeQuantOp) for op in module.walk())
    q_nodes = [
        n
        for n in program.declarations
        if isinstance(n, (InitNode, RuntimeNode)) and n.op_type == "Q"
    ]
    assert [n.name for n in q_nodes if isinstance(n, RuntimeNode)][0] == "Q_n1"
    assert sorted(int(n.name[3:]) for n in q_nodes) == list(range(1, n_fake_quants + 1))
    assert all(isinstance(n, InitNode) for n in q_nodes if n.in_s[0] in consts)
    inputs = [d for d in program.declarations if isinstance(d, RuntimeTensor) and d.name == "input"]
    assert inputs == [RuntimeTensor("input", "Any", "BCMD", (-1, 2, 1, 6))]
    runtime_nodes = [n for n in program.declarations if isinstance(n, RuntimeNode)]
    assert runtime_nodes[-1].out_s == ("output",)
    assert {n.op_type for n in runtime_nodes} == {
        "Q",
        "Conv",
        "Add",
        "Mul",
        "Relu",
        "MaxPool",
        "Reshape",
        "Gemm",
    }
    # One cache per runtime input, shaped like what it caches.
    declared = {d.name: d for d in program.declarations}
    for node in runtime_nodes:
        runtime_ins = [n for n in node.in_s if isinstance(declared[n], RuntimeTensor)]
        assert len(node.mem_s) == len(set(runtime_ins))
        for mem, cached in zip(node.mem_s, dict.fromkeys(runtime_ins)):
            assert declared[mem].shape == declared[cached].shape  # type: ignore[union-attr]

    again = import_nanoengine(text, "net.ne")
    x = np.random.default_rng(7).standard_normal((5, 2, 6, 6))
    (expected,) = nanoir.run(module, x)
    (got,) = nanoir.run(again, x)
    assert expected.dtype == got.dtype and np.array_equal(expected, got)
    # The re-imported program is itself lossless.
    assert export_nanoengine(again) == text


def test_constant_names_are_sanitized_and_unique() -> None:
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x2xf32>) -> tensor<?x2xf32> {
  %a = nf.constant "layer.0.w" dense<[1.0, 2.0]> : tensor<2xf32>
  %b = nf.constant "layer_0_w" dense<[3.0, 4.0]> : tensor<2xf32>
  %c = nf.constant "0bad" dense<[5.0, 6.0]> : tensor<2xf32>
  %s = nf.add %x, %a : (tensor<?x2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  %t = nf.add %s, %b : (tensor<?x2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  %u = nf.sub %t, %c : (tensor<?x2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  func.return %u : tensor<?x2xf32>
}
"""
    )
    program = parse_nanoengine(export_nanoengine(module))
    names = [d.name for d in program.declarations if isinstance(d, ConstTensor)]
    assert names[0] == "layer_0_w" and names[1] != "layer_0_w" and names[1].startswith("layer_0_w")
    assert names[2] == "_0bad"
    nodes = [d for d in program.declarations if isinstance(d, RuntimeNode)]
    assert [n.name for n in nodes] == ["Add_n1", "Add_n2", "Sub_n1"]
    assert nodes[0].in_s == ("input", "layer_0_w") and nodes[-1].out_s == ("output",)


def test_unsupported_ir_names_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every nf op has a row today: take one away.
    monkeypatch.delitem(ne_nq.BY_CLASS, nf.HardSwishOp)
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x2x4xf32>) -> tensor<?x2x4xf32> {
  %y = nf.hardswish %x : tensor<?x2x4xf32>
  func.return %y : tensor<?x2x4xf32>
}
"""
    )
    with pytest.raises(ExportError, match="'nf.hardswish' has no NanoEngine op type"):
        export_nanoengine(module)


def test_nf_ops_in_nh_programs_are_refused_by_name() -> None:
    # nh programs export at the hw level (tests/grammar/test_ne_hw.py); an nf op among them
    # has no hw op type.
    module = quantized_net()
    from nanoir.lowering.lower_to_hw import LowerToHwPass

    LowerToHwPass().apply(nanoir.make_context(), module)
    export_nanoengine(module)
    block = next(op for op in module.walk() if op.name == "func.func").regions[0].block
    first = block.first_op
    assert first is not None
    block.insert_op_before(nf.ReluOp(first.results[0]), block.last_op)  # type: ignore[arg-type]
    with pytest.raises(ExportError, match=re.escape("nf.relu")):
        export_nanoengine(module)


def test_f64_constants_are_written_exactly() -> None:
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x1xf64>) -> tensor<?x1xf64> {
  %c = nf.constant "c" dense<[0.1]> : tensor<1xf64>
  %y = nf.add %x, %c : (tensor<?x1xf64>, tensor<1xf64>) -> tensor<?x1xf64>
  func.return %y : tensor<?x1xf64>
}
"""
    )
    program = parse_nanoengine(export_nanoengine(module))
    const = program.lookup("c")
    assert const == ConstTensor("c", "little_float_64", (1,), struct.pack("<d", 0.1))


# ---------------------------------------------------------------------------------------
# Recorded metadata is used only while it still describes the IR
# ---------------------------------------------------------------------------------------

SMALL = """\
let x: Tensor<Any> = {shape:BCMD=[-1, 2, 3, 4]};
let w: Tensor<little_float_32> = {shape=[2, 2, 1, 1], data=0x0000803f000000000000000000008040} ;
let y: Tensor<Any> = {shape:BCMD=[-1, 2, 3, 4]};
let z: Tensor<Any> = {shape:BCMD=[-1, 2, 3, 4]};
let cm: mem Tensor = {type=Any, shape:BCMD=[-1, 2, 3, 4]};
let conv: Node = {
    op_type=Conv,
    attr=[strides=[1, 1], group=1],
    in_s=[x, w],
    mem_s=[cm],
    out_s=[y]
};
let relu: Node = {
    op_type=Relu,
    attr=[],
    in_s=[y],
    mem_s=[],
    out_s=[z]
};
func init(){
}
func runtime(){
    conv.do();
    relu.do();
}
"""


def _op(module: ModuleOp, cls: type[Operation]) -> Operation:
    return next(op for op in module.walk() if isinstance(op, cls))


def test_attribute_spelling_is_kept_while_it_holds() -> None:
    module = import_nanoengine(SMALL)
    assert export_nanoengine(module) == SMALL
    conv = _op(module, nf.ConvOp)
    assert "ne.attr" in conv.attributes  # the text's order and omissions differ from the default
    # A pass changes the strides: the recorded spelling no longer holds, so the exporter
    # prints the op as it is now.
    from nanoir.dialects.nf import int_array

    conv.properties["pads"] = int_array([0, 0, 0, 0])
    assert "strides=[1, 1], group=1" in export_nanoengine(module)  # still means the same
    conv.properties["strides"] = int_array([1, 2])
    text = export_nanoengine(module)
    assert (
        "attr=[dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 2]]"
        in text
    )


def test_ops_added_by_a_pass_get_fresh_names() -> None:
    module = import_nanoengine(SMALL)
    relu = _op(module, nf.ReluOp)
    extra = nf.SigmoidOp(relu.results[0])
    assert relu.parent is not None
    relu.parent.insert_op_after(extra, relu)
    ret = relu.parent.last_op
    assert ret is not None
    ret.operands = [extra.results[0]]
    text = export_nanoengine(module)
    program = parse_nanoengine(text, check=True)
    sig = program.lookup("Sigmoid_n1")
    assert isinstance(sig, RuntimeNode) and sig.in_s == ("z",) and sig.out_s == ("output",)
    assert sig.mem_s == ("Sigmoid_n1_z",)
    # Recorded declarations keep their places; the new ones follow their kind.
    names = [getattr(i, "name", None) for i in program.items]
    assert names.index("output") == names.index("z") + 1
    assert names.index("Sigmoid_n1_z") == names.index("cm") + 1


def test_stream_plan_hook_sets_declared_shapes() -> None:
    module = quantized_net()

    class Plan:
        def tensor_shape(self, value: SSAValue) -> Sequence[int] | None:
            shape = nf.tensor_shape(value)
            return [-1, shape[1], 7, shape[3]] if len(shape) == 4 else None

        def cache_shape(
            self, node: Operation, value: SSAValue, tensor_shape: Sequence[int]
        ) -> Sequence[int] | None:
            return [*tensor_shape[:2], 9, *tensor_shape[3:]] if len(tensor_shape) == 4 else None

    program = export_program(module, Plan())
    runtime = [d for d in program.declarations if isinstance(d, RuntimeTensor)]
    mems = [d for d in program.declarations if isinstance(d, MemTensor)]
    assert all(t.shape[2] == 7 for t in runtime if len(t.shape) == 4)
    assert all(m.shape[2] == 9 for m in mems if len(m.shape) == 4)
    assert any(len(t.shape) == 2 for t in runtime)  # the plan had no opinion: [-1, F]


def test_custom_ops_export_their_attributes() -> None:
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x2xf32> {
  %y = nf.custom %x {op_type = "TopK", attrs = {axis = -1 : i64, k = 2 : i64, mode = "largest", scale = 1.5 : f64, list = [1 : i64, "0.25"]}} : (tensor<?x4xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}
"""
    )
    program = parse_nanoengine(export_nanoengine(module))
    node = program.lookup("TopK_n1")
    assert isinstance(node, RuntimeNode)
    assert node.attrs == (
        ("axis", -1),
        ("k", 2),
        ("mode", "largest"),
        ("scale", Float("1.5")),
        ("list", (1, Float("0.25"))),
    )


def test_results_keep_their_order() -> None:
    """Import finds results as unread runtime tensors in declaration order, so export declares
    them in return order even when they are computed the other way round."""
    import numpy as np
    from nanoir.grammar.ne.importer import import_nanoengine

    import nanoir

    text = """
func.func @main(%x: tensor<?x4x1x3xf32>) -> (tensor<?x4x1x3xf32>, tensor<?x4x1x3xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4x1x3xf32>
  %a = nf.relu %xq : tensor<?x4x1x3xf32>
  %b = nf.sigmoid %xq : tensor<?x4x1x3xf32>
  func.return %b, %a : tensor<?x4x1x3xf32>, tensor<?x4x1x3xf32>
}
"""
    module = nanoir.parse(text)
    again = import_nanoengine(export_nanoengine(module), "x.ne")
    x = np.random.default_rng(0).standard_normal((2, 4, 1, 3))
    for want, got in zip(nanoir.run(module, x), nanoir.run(again, x), strict=True):
        assert np.array_equal(want, got)


# ---------------------------------------------------------------------------------------
# Results that are also read: Identity nodes
# ---------------------------------------------------------------------------------------

SHARED_RESULTS = """
func.func @main(%x: tensor<?x4x?x3xf32>) -> (tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>) {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x4x?x3xf32>
  %a = nf.relu %xq : tensor<?x4x?x3xf32>
  %b = nf.sigmoid %a : tensor<?x4x?x3xf32>
  func.return %a, %b, %b, %x : tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>
}
"""


def without_ne_metadata(module: ModuleOp) -> ModuleOp:
    """A copy without the `ne.*` attributes (the import's record of the text)."""
    module = module.clone()
    for op in module.walk():
        for key in [k for k in op.attributes if k.startswith("ne.")]:
            del op.attributes[key]
        if isinstance(op, FuncOp):
            op.arg_attrs = op.res_attrs = None
    return module


def test_results_that_are_also_read_go_through_identity_nodes() -> None:
    """Import takes unread tensors for results: a result read by another node (%a), returned
    twice (%b) or an input (%x) gets an Identity node, and the file reads back to the same
    program, which writes back byte for byte."""
    module = nanoir.parse(SHARED_RESULTS)
    text = export_nanoengine(module)
    program = parse_nanoengine(text)
    identities = [
        d for d in program.declarations if isinstance(d, RuntimeNode) and d.op_type == "Identity"
    ]
    assert [(d.in_s, d.out_s) for d in identities] == [
        (("Relu_n1_o0",), ("output",)),
        (("Sigmoid_n1_o0",), ("output_1",)),
        (("Sigmoid_n1_o0",), ("output_2",)),
        (("input",), ("output_3",)),
    ]
    again = import_nanoengine(text, "x.ne")
    assert without_ne_metadata(again).is_structurally_equivalent(module)
    x = np.random.default_rng(0).standard_normal((2, 4, 5, 3))
    for want, got in zip(nanoir.run(module, x), nanoir.run(again, x), strict=True):
        assert np.array_equal(want, got)
    assert export_nanoengine(again) == text
    assert export_nanoengine(mlir_round_trip(again)) == text


IDENTITY_FILE = """// init const tensor
let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x04} ;

// init static tensor
// runtime tensor
let input: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let features: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};
let Relu_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 3]};

// runtime memory
let Q_n1_input: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};
let copy_mem: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};
let Relu_n1_Q_n1_o0: mem Tensor = {type=Any, shape:BCMD=[-1, 4, 1, 3]};

// init node
// runtime_node
let Q_n1: Node = {
    op_type=Q,
    attr=[bit_len=8],
    in_s=[input, Constant_n1_o0],
    mem_s=[Q_n1_input],
    out_s=[Q_n1_o0]
};
let copy: Node = {
    op_type=Identity,
    attr=[],
    in_s=[Q_n1_o0],
    mem_s=[copy_mem],
    out_s=[features]
};
let Relu_n1: Node = {
    op_type=Relu,
    attr=[],
    in_s=[Q_n1_o0],
    mem_s=[Relu_n1_Q_n1_o0],
    out_s=[Relu_n1_o0]
};

// call init node
func init(){
}

// call runtime node
func runtime(){
    Q_n1.do();
    copy.do();
    Relu_n1.do();
}
"""


def test_identity_nodes_of_a_file_keep_their_names_and_place() -> None:
    module = import_nanoengine(IDENTITY_FILE, "id.ne")
    ret = list(module.walk())[-1]
    assert isinstance(ret, ReturnOp) and len(ret.arguments) == 2
    assert isinstance(ret.arguments[0].owner, FakeQuantOp)  # `features` is Q_n1_o0's value
    x = np.random.default_rng(1).standard_normal((1, 4, 2, 3))
    q, r = nanoir.run(module, x)
    assert np.array_equal(r, np.maximum(q, 0))
    assert export_nanoengine(module) == IDENTITY_FILE
    assert export_nanoengine(mlir_round_trip(module)) == IDENTITY_FILE


@pytest.mark.parametrize(
    "node, message",
    [
        ("attr=[axis=1],\n    in_s=[Q_n1_o0]", "Identity node 'copy' takes no attributes"),
        (
            "attr=[],\n    in_s=[Q_n1_o0, Q_n1_o0]",
            "Identity node 'copy' takes 1 input and has 1 output",
        ),
        (
            "attr=[],\n    in_s=[Constant_n1_o0]",
            "Identity node 'copy' reads the int8_t constant 'Constant_n1_o0'",
        ),
    ],
)
def test_bad_identity_nodes_are_errors(node: str, message: str) -> None:
    from nanoir.grammar.ne.errors import NanoEngineSemanticError

    text = IDENTITY_FILE.replace(
        "attr=[],\n    in_s=[Q_n1_o0],\n    mem_s=[copy_mem]", node + ",\n    mem_s=[copy_mem]"
    )
    assert text != IDENTITY_FILE
    with pytest.raises(NanoEngineSemanticError, match=re.escape(message)):
        import_nanoengine(text, "id.ne")


def test_a_returned_constant_is_still_refused() -> None:
    module = nanoir.parse(
        """
func.func @main(%x: tensor<?x2xf32>) -> (tensor<?x2xf32>, tensor<2xf32>) {
  %c = nf.constant "c" dense<1.0> : tensor<2xf32>
  %y = nf.add %x, %c : (tensor<?x2xf32>, tensor<2xf32>) -> tensor<?x2xf32>
  func.return %y, %c : tensor<?x2xf32>, tensor<2xf32>
}
"""
    )
    with pytest.raises(ExportError, match="returns a constant .* as result 1"):
        export_nanoengine(module)
