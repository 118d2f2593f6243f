"""Which byte form a ``QuantizeLinear`` writes (:func:`nanoir.grammar.onnx.integer.requant.
byte_form`): int8 codes (zero point 0) where every reader converts them (an add, a mul, a
requant, a table, a function result: one ``Cast``, no ``Sub`` of 128), the uint8 form (zero
point 128) where a reader keeps bytes (data movement, a fused product); narrower codes
clipped in their own dtype. In every rounding mode the codes are the NumPy executor's.

Oracle: the NumPy nh executor (``nanoir.run``); onnxruntime runs the written file."""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.grammar.onnx.integer import export_model, make_session, run_model

import nanoir

pytest.importorskip("onnxruntime")

X = "tensor<?x4x8xi16, #nh.fixed<8, BCM>>"
I8 = "tensor<?x4x8xi8, #nh.fixed<4, BCM>>"
I4 = "tensor<?x4x8xi4, #nh.fixed<4, BCM>>"
SUM = "tensor<?x4x8xi16, #nh.fixed<4, BCM>>"
MOVED = "tensor<?x8x4xi8, #nh.fixed<4, BCM>>"
PROGRAM = f"""func.func @main(%x: {X}) -> ({SUM}, {I8}, {I4}, {MOVED}) {{
  %a = nh.requant %x {{shift = array<i64: 4>, rounding = #nq.rounding<MODE>}} : {X} -> {I8}
  %s = nh.add %a, %a : ({I8}, {I8}) -> {SUM}
  %b = nh.requant %x {{shift = array<i64: 4>, rounding = #nq.rounding<MODE>}} : {X} -> {I8}
  %c = nh.requant %x {{shift = array<i64: 4>, rounding = #nq.rounding<MODE>}} : {X} -> {I4}
  %d = nh.requant %x {{shift = array<i64: 4>, rounding = #nq.rounding<MODE>}} : {X} -> {I8}
  %t = nh.transpose %d {{perm = array<i64: 0, 2, 1>}} : {I8} -> {MOVED}
  func.return %s, %b, %c, %t : {SUM}, {I8}, {I4}, {MOVED}
}}"""


def _zero_point_types(model: object) -> list[int]:
    """The element type of each QuantizeLinear's zero point, in node order (2 uint8, 3 int8)."""
    inits = {i.name: i.data_type for i in model.graph.initializer}  # type: ignore[attr-defined]
    return [
        inits[n.input[2]]
        for n in model.graph.node  # type: ignore[attr-defined]
        if n.op_type == "QuantizeLinear"
    ]


@pytest.mark.parametrize("mode", ["half_even", "half_up", "floor", "trunc"])
def test_converted_codes_are_int8_and_kept_bytes_uint8(mode: str) -> None:
    """The add's operand, the int8 and int4 results are written as int8 codes (the int4 one
    clipped to -8..7 in int8), the transposed one as uint8; every code of every output is the
    NumPy executor's, over codes that saturate both ways and round at every tie. (trunc of
    signed codes is not a ``QuantizeLinear``: only the codes are checked.) Kills: the int8
    form written with zero point 128; the narrow clip's bounds offset by 128 in int8; a
    transposed (byte-keeping) value given the int8 form."""
    hw = nanoir.parse(PROGRAM.replace("MODE", mode))
    model = export_model(hw)
    if mode != "trunc":
        assert _zero_point_types(model) == [3, 3, 3, 2]
        # (the one Sub: the transposed uint8 codes' 128, as they leave the graph)
        assert sum(n.op_type == "Sub" for n in model.graph.node) == 1
    x = np.arange(-(2**15), 2**15, 7, dtype=np.int64)
    x = np.concatenate([x, np.arange(-40, 40) * 8])  # ties at every rounding
    x = np.resize(x, (x.size // 32 + 1) * 32).reshape(-1, 4, 8).astype(np.int16)
    got = run_model(make_session(model), [x])
    want = nanoir.run(hw, x, raw=True)
    for g, w in zip(got, want):
        assert g.dtype == np.asarray(w).dtype or g.dtype.kind == np.asarray(w).dtype.kind
        assert np.array_equal(g.astype(np.int64), np.asarray(w).astype(np.int64))
