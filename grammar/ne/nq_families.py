"""`.ne` nq rows of issue 32's op families, by ONNX's names: one nf op class, several op types.

    .ne op_type                       IR op
    Abs Neg Sign Floor Ceil Round     nf.unary of that function (Round: half to even, as
    Exp Log Sqrt Reciprocal Erf       torch's and ONNX's)
    Sin Cos Tan Asin Acos Atan
    Sinh Cosh Asinh Acosh Atanh
    Mish Softsign
    Softplus                          nf.unary "softplus" with beta 1, threshold 20 (torch's
                                      default; ONNX's has neither: above 20 they differ by
                                      less than 2e-9 x)
    Elu (alpha)                       nf.unary "elu" with scale 1, input_scale 1
    Selu (alpha, gamma)               nf.unary "selu" (torch's constants only)
    Celu (alpha)                      nf.unary "celu"
    Shrink (bias, lambd)              nf.unary "hardshrink" (bias 0) or "softshrink" (bias = lambd)
    ThresholdedRelu (alpha)           nf.unary "threshold" with value 0
    Equal Less LessOrEqual Greater    nf.compare eq / lt / le / gt / ge / and / or / xor
    GreaterOrEqual And Or Xor         (bools are 0/1 values)
    Where                             nf.where (cond, x, y)
    ReduceSum ReduceMax ReduceMin     nf.reduce sum / max / min / prod: axes as an attribute
    ReduceProd                        (opset < 13's form), keepdims = 1 only
    ArgMax ArgMin                     nf.arg_reduce: axis, keepdims = 1, select_last_index = 0
    CumSum                            nf.cumsum: axis as an attribute (nanoir's form; ONNX's is
                                      an input), exclusive = reverse = 0
    LpNormalization                   nf.normalize: axis, p = 2; epsilon written when not
                                      torch's 1e-12 (nanoir's extension: ONNX's has none)
    ResizeCubic                       nf.upsample_bicubic: Resize's mode=cubic, half_pixel,
                                      cubic_coeff_a=-0.75 (x2); read as Resize mode=cubic too

The rest of these ops (``nf.unary`` of a function ONNX does not have, such as ``rsqrt`` or
``log1p``; ``ne``; ``any``/``all``) has no op type: :func:`row_for` refuses it by name
(``ExportError``), at the nq level only: at the hw level each is an op of its own or a ``Lut``.
"""

from __future__ import annotations

from nanoir.dialects import nf
from nanoir.dialects.nf import array_values
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.node import NodeSpec, Unsupported
from nanoir.grammar.ne.schema import Attrs
from nanoir.grammar.ne.syntax_tree import Float
from xdsl.ir import Operation

__all__ = [
    "FAMILY_CLASSES",
    "FAMILY_ROWS",
    "NoOpType",
    "RowSpec",
    "refusal",
    "resize_cubic",
    "row_type_for",
]

PLAIN_UNARY: dict[str, str] = {
    "Abs": "abs",
    "Neg": "neg",
    "Sign": "sign",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Erf": "erf",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Mish": "mish",
    "Softsign": "softsign",
}
"""ONNX op type -> ``nf.unary`` function, for the functions with no parameter."""

COMPARES: dict[str, str] = {
    "Equal": "eq",
    "Less": "lt",
    "LessOrEqual": "le",
    "Greater": "gt",
    "GreaterOrEqual": "ge",
    "And": "and",
    "Or": "or",
    "Xor": "xor",
}
REDUCES: dict[str, str] = {
    "ReduceSum": "sum",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
}
ARG_REDUCES: dict[str, str] = {"ArgMax": "argmax", "ArgMin": "argmin"}

_SELU = (1.67326319217681884765625, 1.05070102214813232421875)
"""ONNX Selu's default alpha and gamma (torch's constants in float32)."""
_TORCH_SOFTPLUS = (1.0, 20.0)


def _one_input(n: NodeSpec, *attrs: str) -> object:
    n.allow(*attrs)
    n.one_output()
    return n.values(1, 1)[0]


def _plain(op_type: str):  # noqa: ANN202
    fn = PLAIN_UNARY[op_type]
    return lambda n: nf.UnaryOp(_one_input(n), fn)  # type: ignore[arg-type]


def _softplus(n: NodeSpec) -> Operation:
    return nf.UnaryOp(_one_input(n), "softplus", _TORCH_SOFTPLUS)  # type: ignore[arg-type]


def _elu(n: NodeSpec) -> Operation:
    x = _one_input(n, "alpha")
    return nf.UnaryOp(x, "elu", (n.float("alpha", 1.0), 1.0, 1.0))  # type: ignore[arg-type]


def _selu(n: NodeSpec) -> Operation:
    x = _one_input(n, "alpha", "gamma")
    if (n.float("alpha", _SELU[0]), n.float("gamma", _SELU[1])) != _SELU:
        raise Unsupported("Selu with other than its default alpha and gamma (torch's selu)")
    return nf.UnaryOp(x, "selu")  # type: ignore[arg-type]


def _celu(n: NodeSpec) -> Operation:
    x = _one_input(n, "alpha")
    return nf.UnaryOp(x, "celu", (n.float("alpha", 1.0),))  # type: ignore[arg-type]


def _shrink(n: NodeSpec) -> Operation:
    x = _one_input(n, "bias", "lambd")
    bias, lambd = n.float("bias", 0.0), n.float("lambd", 0.5)
    if bias == 0:
        return nf.UnaryOp(x, "hardshrink", (lambd,))  # type: ignore[arg-type]
    if bias == lambd:
        return nf.UnaryOp(x, "softshrink", (lambd,))  # type: ignore[arg-type]
    raise Unsupported("Shrink with a bias other than 0 (hardshrink) or lambd (softshrink)")


def _thresholded_relu(n: NodeSpec) -> Operation:
    x = _one_input(n, "alpha")
    return nf.UnaryOp(x, "threshold", (n.float("alpha", 1.0), 0.0))  # type: ignore[arg-type]


def _compare(op_type: str):  # noqa: ANN202
    predicate = COMPARES[op_type]

    def build(n: NodeSpec) -> Operation:
        n.allow()
        n.one_output()
        lhs, rhs = n.values(2, 2)
        return nf.CompareOp(lhs, rhs, predicate)

    return build


def _where(n: NodeSpec) -> Operation:
    n.allow()
    n.one_output()
    cond, lhs, rhs = n.values(3, 3)
    return nf.WhereOp(cond, lhs, rhs)


def _keepdims(n: NodeSpec) -> None:
    if n.int("keepdims", 1) != 1:
        raise Unsupported("keepdims = 0 (nanoir keeps the reduced dims; a Reshape follows)")


def _reduce(op_type: str):  # noqa: ANN202
    kind = REDUCES[op_type]

    def build(n: NodeSpec) -> Operation:
        x = _one_input(n, "axes", "keepdims", "noop_with_empty_axes")
        _keepdims(n)
        if len(n.inputs) != 1:
            raise Unsupported(f"{op_type} with axes as an input (nanoir writes an attribute)")
        rank = len(nf.tensor_shape(x))  # type: ignore[arg-type]
        axes = n.ints("axes")
        dims = sorted({a % max(rank, 1) for a in axes}) if axes else list(range(rank))
        return nf.ReduceOp(x, kind, dims)  # type: ignore[arg-type]

    return build


def _arg_reduce(op_type: str):  # noqa: ANN202
    kind = ARG_REDUCES[op_type]

    def build(n: NodeSpec) -> Operation:
        x = _one_input(n, "axis", "keepdims", "select_last_index")
        _keepdims(n)
        if n.int("select_last_index", 0) != 0:
            raise Unsupported(f"{op_type} with select_last_index = 1 (the first, as torch)")
        rank = len(nf.tensor_shape(x))  # type: ignore[arg-type]
        return nf.ArgReduceOp(x, kind, n.int("axis", 0) % max(rank, 1))  # type: ignore[arg-type]

    return build


def _cumsum(n: NodeSpec) -> Operation:
    x = _one_input(n, "axis", "exclusive", "reverse")
    if n.int("exclusive", 0) or n.int("reverse", 0):
        raise Unsupported("CumSum with exclusive or reverse")
    rank = len(nf.tensor_shape(x))  # type: ignore[arg-type]
    return nf.CumsumOp(x, n.int("axis") % max(rank, 1))  # type: ignore[arg-type]


def _lp_normalization(n: NodeSpec) -> Operation:
    x = _one_input(n, "axis", "p", "epsilon")
    if n.int("p", 2) != 2:
        raise Unsupported("LpNormalization with p other than 2")
    rank = len(nf.tensor_shape(x))  # type: ignore[arg-type]
    axis = n.int("axis", -1) % max(rank, 1)
    return nf.NormalizeOp(x, axis, n.float("epsilon", 1e-12))  # type: ignore[arg-type]


RESIZE_CUBIC = (
    ("coordinate_transformation_mode", "half_pixel"),
    ("cubic_coeff_a", -0.75),
    ("mode", "cubic"),
)
"""ONNX's Resize for torch's bicubic upsampling with ``align_corners=False``."""


def resize_cubic(n: NodeSpec) -> Operation:
    """Resize cubic/half_pixel with ``a = -0.75`` doubling (or keeping) each spatial axis:
    nf.upsample_bicubic (x2 only: other scales are not dyadic)."""
    x = _one_input(n, "axes", "sizes", *(k for k, _ in RESIZE_CUBIC))
    if n.name_attr("coordinate_transformation_mode", "half_pixel") != "half_pixel":
        raise Unsupported("Resize cubic other than half_pixel (align_corners=False)")
    if n.float("cubic_coeff_a", -0.75) != -0.75:
        raise Unsupported("Resize cubic with cubic_coeff_a other than torch's -0.75")
    rank = len(nf.tensor_shape(x))  # type: ignore[arg-type]
    axes = n.ints("axes") or tuple(range(2, rank))
    sizes = n.ints("sizes")
    if sizes is None or len(sizes) != len(axes) or sorted(axes) != list(range(2, rank)):
        raise Unsupported("Resize needs sizes for exactly the spatial axes")
    spatial = [sizes[list(axes).index(a)] for a in range(2, rank)]
    return nf.UpsampleBicubicOp(x, spatial)  # type: ignore[arg-type]


# -- writers ------------------------------------------------------------------------------


class NoOpType(ExportError, KeyError):
    """An op of these families whose function has no op type: an ``ExportError`` for the
    `.ne` writer, and a ``KeyError`` (no row) for the ONNX writer, which refuses it by name as
    any op without a row."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _refuse(op: Operation, what: str) -> ExportError:
    return NoOpType(f"nanoengine export: {op.name} {what} has no NanoEngine (ONNX) op type")


def row_type_for(op: Operation) -> str | None:
    """The op type that writes ``op`` (one of this module's classes), or None when it has
    none (``row_for`` then refuses it)."""
    if isinstance(op, nf.UnaryOp):
        fn, params = op.fn.data, op.param_values()
        for op_type, name in PLAIN_UNARY.items():
            if name == fn:
                return op_type
        simple = {
            ("softplus", _TORCH_SOFTPLUS): "Softplus",
            ("selu", ()): "Selu",
        }.get((fn, params))
        if simple is not None:
            return simple
        if fn == "elu" and params[1:] == (1.0, 1.0):
            return "Elu"
        if fn == "celu":
            return "Celu"
        if fn in ("hardshrink", "softshrink"):
            return "Shrink"
        if fn == "threshold" and params[1] == 0.0:
            return "ThresholdedRelu"
        return None
    if isinstance(op, nf.CompareOp):
        return next((t for t, p in COMPARES.items() if p == op.predicate.data), None)
    if isinstance(op, nf.ReduceOp):
        return next((t for t, k in REDUCES.items() if k == op.kind.data), None)
    if isinstance(op, nf.ArgReduceOp):
        return next((t for t, k in ARG_REDUCES.items() if k == op.kind.data), None)
    return None


def describe(op: Operation) -> str:
    """How the refusal names ``op``: its function, predicate or kind."""
    for prop in ("fn", "predicate", "kind"):
        value = op.properties.get(prop)
        if value is not None:
            return f"{value.data!r}"  # type: ignore[attr-defined]
    return ""


def refusal(op: Operation) -> ExportError:
    return _refuse(op, describe(op))


def _unary_attrs(op: nf.UnaryOp) -> Attrs:
    fn, params = op.fn.data, op.param_values()
    if fn == "elu":
        return (("alpha", Float.from_value(params[0])),)
    if fn == "celu":
        return (("alpha", Float.from_value(params[0])),)
    if fn == "selu":
        return (("alpha", Float.from_value(_SELU[0])), ("gamma", Float.from_value(_SELU[1])))
    if fn == "hardshrink":
        return (("bias", Float.from_value(0.0)), ("lambd", Float.from_value(params[0])))
    if fn == "softshrink":
        return (("bias", Float.from_value(params[0])), ("lambd", Float.from_value(params[0])))
    if fn == "threshold":
        return (("alpha", Float.from_value(params[0])),)
    return ()


def _reduce_attrs(op: nf.ReduceOp) -> Attrs:
    return (("axes", tuple(array_values(op.dims) or ())), ("keepdims", 1))


def _arg_reduce_attrs(op: nf.ArgReduceOp) -> Attrs:
    (axis,) = array_values(op.dims) or (0,)
    return (("axis", axis), ("keepdims", 1), ("select_last_index", 0))


def _cumsum_attrs(op: nf.CumsumOp) -> Attrs:
    (axis,) = array_values(op.dims) or (0,)
    return (("axis", axis), ("exclusive", 0), ("reverse", 0))


def _lp_attrs(op: nf.NormalizeOp) -> Attrs:
    eps = op.epsilon.value.data
    extra: Attrs = (("epsilon", Float.from_value(eps)),) if eps != 1e-12 else ()
    return (("axis", op.axis.value.data), *extra, ("p", 2))


def _resize_cubic_attrs(op: nf.UpsampleBicubicOp) -> Attrs:
    shape = nf.tensor_shape(op.result)
    return (
        ("axes", tuple(range(2, len(shape)))),
        RESIZE_CUBIC[0],
        ("cubic_coeff_a", Float.from_value(-0.75)),
        RESIZE_CUBIC[2],
        ("sizes", tuple(shape[2:])),
    )


RowSpec = tuple[str, type[Operation], object, object, tuple[int, int]]
"""``(op type, class, converter, writer, (inputs low, high))`` for ``nq.NqOp``."""

FAMILY_ROWS: tuple[RowSpec, ...] = (
    *((t, nf.UnaryOp, _plain(t), _unary_attrs, (1, 1)) for t in PLAIN_UNARY),
    ("Softplus", nf.UnaryOp, _softplus, _unary_attrs, (1, 1)),
    ("Elu", nf.UnaryOp, _elu, _unary_attrs, (1, 1)),
    ("Selu", nf.UnaryOp, _selu, _unary_attrs, (1, 1)),
    ("Celu", nf.UnaryOp, _celu, _unary_attrs, (1, 1)),
    ("Shrink", nf.UnaryOp, _shrink, _unary_attrs, (1, 1)),
    ("ThresholdedRelu", nf.UnaryOp, _thresholded_relu, _unary_attrs, (1, 1)),
    *((t, nf.CompareOp, _compare(t), lambda op: (), (2, 2)) for t in COMPARES),
    ("Where", nf.WhereOp, _where, lambda op: (), (3, 3)),
    *((t, nf.ReduceOp, _reduce(t), _reduce_attrs, (1, 1)) for t in REDUCES),
    *((t, nf.ArgReduceOp, _arg_reduce(t), _arg_reduce_attrs, (1, 1)) for t in ARG_REDUCES),
    ("CumSum", nf.CumsumOp, _cumsum, _cumsum_attrs, (1, 1)),
    ("LpNormalization", nf.NormalizeOp, _lp_normalization, _lp_attrs, (1, 1)),
    ("ResizeCubic", nf.UpsampleBicubicOp, resize_cubic, _resize_cubic_attrs, (1, 1)),
)
"""The rows, for ``nq.NQ_OPS``."""

FAMILY_CLASSES = (nf.UnaryOp, nf.CompareOp, nf.ReduceOp, nf.ArgReduceOp)
"""Classes written by one of several op types (:func:`row_type_for` picks it)."""
