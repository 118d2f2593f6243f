"""The hw `.ne` level's `Recurrent` row on random quantized recurrent programs (no torch: the
nf op built directly): every mode, 1-2 layers, either direction, batch-first or time-major,
with or without biases and initial states, returning the sequence output and 0 to all of the
final states (returned ones are declared as runtime tensors, unread ones are not written). The
program lowered to nh exports, imports and exports to the same text, its nh.recurrent has the
same result types (layouts included) after read-back, and the read-back program runs bit for
bit as the lowered one, and both as the nq program (float64, a level the reader does not
touch)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import numpy_to_dense
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType, f64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.testing.programs import examples


def _program(
    layout: RecurrentLayout,
    x_shape: tuple[int, ...],
    states: bool,
    returned: int,
    rng: np.random.Generator,
) -> ModuleOp:
    """An nf function of x (and h0[, c0]) returning the recurrent op's first ``returned``
    results."""
    out, state, _ = layout.result_shapes(x_shape)
    n_states = (2 if layout.mode == "lstm" else 1) if states else 0
    block = Block(arg_types=[TensorType(f64, x_shape)] + [TensorType(f64, state)] * n_states)
    consts = [
        nf.ConstantOp(numpy_to_dense(rng.uniform(-0.6, 0.6, s), f64), name=f"rnn.w{i}")
        for i, s in enumerate(layout.weight_shapes(x_shape[2]))
    ]
    types = [TensorType(f64, out)] + [TensorType(f64, state)] * (2 if layout.mode == "lstm" else 1)
    x, *initial = block.args
    op = nf.RecurrentOp(x, [c.result for c in consts], layout, types, *initial)
    op.output.name_hint = "rnn"
    results = list(op.results)[:returned]
    block.add_ops([*consts, op, ReturnOp(*results)])
    ftype = FunctionType.from_lists(block.arg_types, [r.type for r in results])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def _inputs(
    layout: RecurrentLayout, x_shape: tuple[int, ...], states: bool, rng: np.random.Generator
) -> list[np.ndarray]:
    _, state, _ = layout.result_shapes(x_shape)
    arrays = [rng.normal(0, 1, x_shape)]
    if states:
        arrays += [rng.normal(0, 0.5, state) for _ in range(2 if layout.mode == "lstm" else 1)]
    return arrays


@settings(max_examples=examples(6), deadline=None)
@example(
    mode="lstm", layers=2, bidirectional=True, batch_first=False, bias=True, states=True,
    sizes=(2, 3, 2, 3), returned=3, seed=0, gate_bits=16,
)  # fmt: skip
@example(
    mode="rnn_relu", layers=1, bidirectional=False, batch_first=True, bias=False, states=False,
    sizes=(1, 4, 3, 2), returned=2, seed=1, gate_bits=8,
)  # fmt: skip
@example(
    mode="gru", layers=1, bidirectional=True, batch_first=False, bias=True, states=True,
    sizes=(2, 2, 2, 2), returned=1, seed=2, gate_bits=8,
)  # fmt: skip
@given(
    mode=st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]),
    layers=st.integers(1, 2),
    bidirectional=st.booleans(),
    batch_first=st.booleans(),
    bias=st.booleans(),
    states=st.booleans(),
    sizes=st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 3), st.integers(1, 4)),
    returned=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    gate_bits=st.sampled_from((8, 8, 16)),
)
def test_hw_recurrent_round_trip(
    mode: str,
    layers: int,
    bidirectional: bool,
    batch_first: bool,
    bias: bool,
    states: bool,
    sizes: tuple[int, int, int, int],
    returned: int,
    seed: int,
    gate_bits: int,
) -> None:
    """Mutants seen to fail it (private copy): the old time-major layouts (output MDC,
    states DDC: the writer refuses them); unwritten states typed DDC on read (the result
    types differ); LowerRecurrent's tables built half_up whatever the rounding (nh != nq).
    Gates at the default 16 bits or at 8 (a rule): the 2**16-entry tables of 16-bit gates
    take most of an example's time to write and read, so most examples take 8."""
    n, t, f, h = sizes
    layout = RecurrentLayout(mode, h, layers, bidirectional, batch_first, bias)
    x_shape = (n, t, f) if batch_first else (t, n, f)
    rng = np.random.default_rng(seed)
    returned = min(returned, 3 if mode == "lstm" else 2)
    module = _program(layout, x_shape, states, returned, rng)
    nanoir.quantize(
        module,
        [tuple(_inputs(layout, x_shape, states, rng)) for _ in range(2)],
        rules=(rf"rnn\.gates={gate_bits}",),
    )
    hw = nanoir.lower_to_hw(module.clone())
    text = export_nanoengine(hw)
    assert "op_type=Recurrent," in text
    back = import_nanoengine(text)
    assert export_nanoengine(back) == text
    (op,), (op_back,) = ([o for o in m.walk() if isinstance(o, nh.RecurrentOp)] for m in (hw, back))
    assert [r.type for r in op_back.results] == [r.type for r in op.results]
    xs = _inputs(layout, x_shape, states, rng)
    want_q, want_hw, got = run(module, *xs), run(hw, *xs), run(back, *xs)
    assert len(want_q) == len(want_hw) == len(got) == returned
    for q, w, g in zip(want_q, want_hw, got, strict=True):
        assert g.shape == w.shape == q.shape
        assert g.tobytes() == w.tobytes() == q.astype(np.float64).tobytes()
