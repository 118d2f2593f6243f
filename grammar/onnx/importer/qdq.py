"""The quantizers of an ONNX file: NanoEngine-PyTorch's ``t2e.qmodel::Q`` and standard
``QuantizeLinear -> DequantizeLinear`` pairs, read as ``nq.fake_quant``.

- ``Q(x, k)`` with attribute ``bit_len`` is the `.ne` ``Q`` row: trunc rounding, 1-bit =
  sign * 2**k, ``k`` an integer constant broadcast against ``x`` as torch broadcasts it (kept
  as int8);
- ``QuantizeLinear -> DequantizeLinear`` rounds half to even (QuantizeLinear's), ``bits`` from
  the zero point's type (int4/int8/int16; uint4/uint8/uint16 give ``signed = false``; without
  a zero point, ONNX's default uint8), ``exp = -log2(scale)``: the scale must be a power of two
  and the zero point 0. ``DequantizeLinear`` of an integer initializer (QDQ weights) is the
  dequantized float constant followed by an ``nq.fake_quant`` (exact: the values are on the
  grid).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.ne.node import NodeProblem, NodeSpec, Unsupported
from nanoir.grammar.ne.nq import convert_known
from nanoir.grammar.ne.schema import EXP_MAX, EXP_MIN, NE_EXP_NAME
from nanoir.grammar.ne.syntax_tree import ConstTensor
from nanoir.grammar.onnx.importer.state import Node, PendingQ, ReaderState, type_name
from nanoir.runtime.numerics.quant import RoundingMode
from nanoir.runtime.numerics.shapes import shape_str
from numpy.typing import NDArray
from xdsl.dialects.builtin import DYNAMIC_INDEX, StringAttr

__all__ = ["NANOENGINE_DOMAIN", "read_dequantize_linear", "read_q", "read_quantize_linear"]

NANOENGINE_DOMAIN = "t2e.qmodel"
"""The ONNX domain of NanoEngine-PyTorch's quantizer node `Q`."""

QDQ_BITS: dict[int, int] = {3: 8, 5: 16, 22: 4}
"""Signed QDQ code types (INT8, INT16, INT4) -> bits."""

UNSIGNED_BITS: dict[int, int] = {2: 8, 4: 16, 21: 4}
"""Unsigned QDQ code types (UINT8, UINT16, UINT4) -> bits: `signed = false` fake-quants."""


def _tensor_type(r: ReaderState, name: str) -> int:
    """The ONNX element type of a constant (as stored: int4 is read as int8 values)."""
    if name in r.types:
        return r.types[name]
    kind = r.static[name].dtype
    for code, np_type in ((3, np.int8), (2, np.uint8), (5, np.int16), (4, np.uint16)):
        if kind == np_type:
            return code
    return 6  # INT32 and anything else: refused by bits


def _qdq_params(
    r: ReaderState,
    n: Node,
    shape: Sequence[int],
    what: str,
    codes_type: int | None = None,
) -> tuple[int, NDArray[np.int8], int]:
    """(bits, exp broadcastable against a tensor of `shape`, zero point type).

    `codes_type` is the element type of a DequantizeLinear's codes when its QuantizeLinear
    fixed it (`output_dtype`): without a zero point, the codes' type is the zero point's."""
    rank = len(shape)
    inputs = n.inputs
    if len(inputs) < 2 or not inputs[1]:
        raise r.error(f"{what} needs a scale")
    scale = r.static_array(inputs[1], "scale")
    if scale.dtype.kind != "f" or scale.ndim > 1 or scale.size == 0:
        raise r.error(f"its scale '{inputs[1]}' must be a float scalar or 1-D tensor")
    attrs = n.attrs
    if attrs.get("block_size", 0) != 0:
        raise r.error("blocked quantization (block_size) is not read")
    zero_type: int | None = None
    if len(inputs) > 2 and inputs[2]:
        zp_name = inputs[2]
        zp = r.static_array(zp_name, "zero point")
        if np.any(zp != 0):
            raise r.error(
                f"its zero point '{zp_name}' is not 0; nanoir reads symmetric "
                "power-of-two quantization only (zero point 0)"
            )
        zero_type = _tensor_type(r, zp_name)
    elif isinstance(attrs.get("output_dtype"), int) and attrs["output_dtype"]:
        zero_type = attrs["output_dtype"]  # type: ignore[assignment]
    elif codes_type is not None:
        zero_type = codes_type
    elif what == "DequantizeLinear" and inputs[0] in r.static:
        zero_type = _tensor_type(r, inputs[0])
    if zero_type is None:
        zero_type = 2  # ONNX's default: uint8
    bits = QDQ_BITS.get(zero_type) or UNSIGNED_BITS.get(zero_type)
    if bits is None:
        raise r.error(
            f"it quantizes to {type_name(r.onnx, zero_type)}; nanoir reads int4, int8, int16, "
            "uint4, uint8 and uint16"
        )
    values = scale.astype(np.float64).reshape(-1)
    mantissa, e = np.frexp(values)
    if not np.all(np.isfinite(values)) or np.any(values <= 0) or np.any(mantissa != 0.5):
        raise r.error(
            f"its scale '{inputs[1]}' ({values.tolist()}) is not a power of two; nanoir "
            "reads power-of-two scales only"
        )
    exp = (1 - e).astype(np.int64)  # scale = 0.5 * 2**e = 2**-(1 - e)
    if exp.min() < EXP_MIN or exp.max() > EXP_MAX:
        raise r.error(f"its scale '{inputs[1]}' is outside 2**-127 .. 2**128")
    if scale.ndim == 0 or scale.size == 1 and scale.ndim == 1 and rank != 1:
        shaped = exp.reshape([1])
    else:
        axis = attrs.get("axis", 1)
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise r.error(f"its axis {axis} is out of range for rank {rank}")
        if shape[axis % rank] not in (exp.size, DYNAMIC_INDEX):
            raise r.error(
                f"its scale '{inputs[1]}' has {exp.size} values for axis {axis} of "
                f"{shape_str(shape)}"
            )
        dims = [1] * rank
        dims[axis % rank] = exp.size
        shaped = exp.reshape(dims)
    return bits, shaped.astype(np.int8), zero_type


def read_quantize_linear(r: ReaderState, n: Node) -> None:
    if len(n.outputs) != 1 or not n.inputs:
        raise r.error("QuantizeLinear takes (x, scale[, zero_point]) and has 1 output")
    x = r.ssa(n.inputs[0], "it")
    bits, exp, zero_type = _qdq_params(r, n, nf.tensor_shape(x), "QuantizeLinear")
    r.pending[n.outputs[0]] = PendingQ(n.name, n.inputs[0], bits, exp, zero_type)


def read_dequantize_linear(r: ReaderState, n: Node) -> None:
    if len(n.outputs) != 1 or not n.inputs:
        raise r.error("DequantizeLinear takes (x, scale[, zero_point]) and has 1 output")
    src = n.inputs[0]
    if src in r.pending:
        q = r.pending[src]
        x = r.ssa(q.x, "it")
        bits, exp, zero_type = _qdq_params(
            r, n, nf.tensor_shape(x), "DequantizeLinear", q.zero_type
        )
        if (bits, zero_type) != (q.bits, q.zero_type) or not np.array_equal(exp, q.exp):
            raise r.error(f"its scale or zero point differs from QuantizeLinear node '{q.node}''s")
        if q.op is None:
            signed = zero_type not in UNSIGNED_BITS
            q.op = r.fake_quant(x, bits, exp, RoundingMode.HALF_EVEN, signed)
            r.add(n, q.op, n.outputs)
        else:
            r.values[n.outputs[0]] = q.op.results[0]
        return
    if src in r.static and r.static[src].dtype.kind in "iu":
        codes = r.static[src]
        bits, exp, zero_type = _qdq_params(r, n, codes.shape, "DequantizeLinear")
        values = (codes.astype(np.float64) * np.exp2(-exp.astype(np.float64))).astype(np.float32)
        const = r.constant(src, values)
        signed = zero_type not in UNSIGNED_BITS
        op = r.fake_quant(const, bits, exp, RoundingMode.TRUNC, signed)
        r.add(n, op, n.outputs)
        return
    if src in r.values or src in r.static:
        raise r.error(
            f"it reads '{src}', which no QuantizeLinear computes and which is no integer "
            "initializer; nanoir reads QuantizeLinear -> DequantizeLinear pairs"
        )
    r.ssa(src, "it")  # the missing-value error


def _exponent(r: ReaderState, name: str) -> ConstTensor:
    """Q's `k`: a static integer tensor, kept as int8 (NanoEngine's exponent type)."""
    if name not in r.static:
        if name in r.values:
            raise r.error(f"its exponent '{name}' is computed at run time; a Q needs a constant k")
        raise r.error(
            f"it reads '{name}', which is no graph input, initializer or output of an earlier node"
        )
    k = r.static[name]
    if k.dtype.kind not in "iu":
        raise r.error(f"its exponent '{name}' is a {k.dtype} tensor; k must be integers")
    if k.size == 0:
        raise r.error(f"its exponent '{name}' is empty")
    if k.min() < EXP_MIN or k.max() > EXP_MAX:
        raise r.error(f"its exponent '{name}' has values outside int8 ({EXP_MIN}..{EXP_MAX})")
    return ConstTensor.from_numpy(name, k.astype(np.int8))


def read_q(r: ReaderState, n: Node) -> None:
    """NanoEngine-PyTorch's ``Q(x, k)``: the `.ne` Q row, ``k`` an int8 exponent constant."""
    if len(n.inputs) != 2:
        raise r.error(
            f"a {NANOENGINE_DOMAIN} Q node takes 2 inputs (x, k), got {len(n.proto.input)}"
        )
    if "bit_len" not in n.attrs:
        raise r.error("a Q node needs the attribute 'bit_len'")
    spec = NodeSpec(
        n.name,
        "Q",
        tuple(n.attrs.items()),
        (r.ssa(n.inputs[0], "it"), _exponent(r, n.inputs[1])),
        len(n.outputs),
    )
    try:
        op = convert_known(spec)
    except Unsupported as why:
        raise r.error(f"nanoir cannot read this Q node: {why}") from None
    except NodeProblem as problem:
        raise r.error(problem.message) from None
    op.attributes[NE_EXP_NAME] = StringAttr(n.inputs[1])
    r.add(n, op, n.outputs)
