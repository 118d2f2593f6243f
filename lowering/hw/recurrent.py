"""lower-to-hw pattern for recurrent ops: ``nf.recurrent`` quantized inside (its ``gates``,
``cell``, ``hidden`` grids) becomes ``nh.recurrent`` on the operands' codes, with the sigmoid
and tanh tables the nq kernel builds from the same gates grid, so nq == nh by construction
(``nanoir.runtime.numerics.recurrent.run_codes`` runs at both levels).

    %y, %h = nf.recurrent %xq weights(%wiq, %whq) {mode = "gru", gates = array<i64: 5, 8>,
        cell = array<i64: 32, 16>, hidden = array<i64: 7, 8>, rounding = "trunc", ...}
                                        ─▶
    %y, %h = nh.recurrent %x weights(%wi, %wh) {..., sigmoid_table = array<i64: ...>,
        tanh_table = array<i64: ...>} -> tensor<...xi8, #nh.fixed<7, BMC>>, ...

The results' fake-quants are on the hidden and cell grids (quantize puts them there), so they
lower to nothing. The results' layouts (``nh.RecurrentOp.result_layouts``) start with B,
time-major ones too, so that the ``.ne`` hw level declares them as runtime tensors. An op that
is not quantized inside, or whose input or states are not on one signed per-tensor grid, is
refused, naming it.
"""

from __future__ import annotations

import numpy as np
from nanoir.dialects import nf, nh
from nanoir.dialects.nf import int_array
from nanoir.lowering.hw.codes import container_width
from nanoir.lowering.hw.core import HwPattern, HwValue
from nanoir.runtime.nf import recurrent_grids
from nanoir.runtime.numerics.recurrent import activation_tables
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern


class LowerRecurrent(HwPattern):
    """``nf.recurrent`` with its internal grids → ``nh.recurrent`` with the gate tables."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nf.RecurrentOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        grids = recurrent_grids(op)
        if isinstance(grids, str):
            raise hw.fail(op, f"has no integer form: {grids}")
        values = [hw.get(op, v) for v in op.operands]
        for v, hv, (exps, _) in zip(op.operands, values, grids):
            if not np.array_equal(np.unique(hv.exps), np.unique(exps)):
                raise hw.fail(
                    op,
                    f"reads {v.name_hint or 'an operand'} at exponents "
                    f"{sorted(set(hv.exps.flat))}, not {sorted(set(exps.flat))}",
                )
        gates, cell, hidden = (op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL)
        assert gates is not None and cell is not None and hidden is not None
        assert op.rounding is not None
        sig, tanh = activation_tables(gates, op.rounding.data)
        props: dict[str, Attribute] = {
            k: op.properties[k]
            for k in ("mode", "hidden_size", "num_layers", "bidirectional", "batch_first")
        }
        props |= {
            "has_biases": op.has_biases,
            "gates": int_array([gates.exp, gates.bits]),
            "cell": int_array([cell.exp, cell.bits]),
            "hidden": int_array([hidden.exp, hidden.bits]),
            "rounding": StringAttr(op.rounding.data),
            "sigmoid_table": int_array(sig.tolist()),
            "tanh_table": int_array(tanh.tolist()),
        }
        seq_layout, state_layout = nh.RecurrentOp.result_layouts(op.layout.batch_first)
        ones = (1, 1, 1)
        kinds = [(op.output, hidden, seq_layout), (op.h_n, hidden, state_layout)]
        if op.c_n is not None:
            kinds.append((op.c_n, cell, state_layout))
        types = [
            hw.result_type(nf.tensor_shape(r), np.full(ones, g.exp), container_width(g.bits), lay)
            for r, g, lay in kinds
        ]
        rest = [hv.value for hv in values[1:]]
        h0 = [rest.pop(0)] if op.h0 is not None else []
        c0 = [rest.pop(0)] if op.c0 is not None else []
        new = nh.RecurrentOp.build(
            operands=[values[0].value, h0, c0, rest],
            result_types=[types[0], types[1], types[2:]],
            properties=props,
        )
        hw.emit(new, op.output.name_hint)
        for (r, g, _), nr in zip(kinds, new.results):
            if r.name_hint:
                nr.name_hint = r.name_hint
            hw.set(r, HwValue(nr, np.full(ones, g.exp, dtype=np.int64), g.bits))
