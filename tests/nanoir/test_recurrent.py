"""Recurrent ops (``nf.recurrent`` / ``nh.recurrent``): torch vs nf in float64, the frontend's
ATen mapping and refusals, and nq == nh bit for bit over the integer cell's parameters.

These models take time-major inputs or initial states as inputs, whose dim 0 is not the
batch, so they import with ``dynamic_batch=False`` (``from_torch`` marks dim 0 of every input as
the batch; a batch-first layer alone keeps a dynamic batch, see tests/nanoir/test_magik.py).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.recurrent import Coded, Grid, RecurrentLayout, run_codes
from torch import nn
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType, f64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.frontend import FrontendError, from_torch
from nanoir.frontend.torch_import import export, import_program
from nanoir.testing.programs import examples

MODULES = {
    "lstm": lambda f, h, **kw: nn.LSTM(f, h, **kw),
    "gru": lambda f, h, **kw: nn.GRU(f, h, **kw),
    "rnn_tanh": lambda f, h, **kw: nn.RNN(f, h, nonlinearity="tanh", **kw),
    "rnn_relu": lambda f, h, **kw: nn.RNN(f, h, nonlinearity="relu", **kw),
}


class _Wrap(nn.Module):
    """Returns the sequence, h_n and (LSTM) c_n as a flat tuple, optionally given states."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *states):  # noqa: ANN001, ANN201
        if isinstance(self.rnn, nn.LSTM):
            y, (h, c) = self.rnn(x, tuple(states) if states else None)
            return y, h, c
        y, h = self.rnn(x, states[0] if states else None)
        return y, h


def _import(model: nn.Module, args: tuple[torch.Tensor, ...]) -> ModuleOp:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_torch(model, args, dynamic_batch=False)


def _recurrent(module: ModuleOp) -> nf.RecurrentOp:
    (op,) = [op for op in module.walk() if isinstance(op, nf.RecurrentOp)]
    return op


@settings(max_examples=examples(3))
@example(
    mode="lstm", layers=2, bidirectional=True, batch_first=True, bias=True, states=True,
    sizes=(2, 4, 3, 3),
)  # fmt: skip
@example(
    mode="gru", layers=1, bidirectional=True, batch_first=False, bias=False, states=True,
    sizes=(1, 3, 2, 2),
)  # fmt: skip
@given(
    mode=st.sampled_from(sorted(MODULES)),
    layers=st.integers(1, 2),
    bidirectional=st.booleans(),
    batch_first=st.booleans(),
    bias=st.booleans(),
    states=st.booleans(),
    sizes=st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(1, 5)),
)
def test_torch_vs_nf(mode, layers, bidirectional, batch_first, bias, states, sizes) -> None:
    """torch's module in float64 and the imported nf program agree to 1e-12 on every result,
    for every mode, layer count, direction, layout, with and without biases and initial
    states. Mutants seen to fail it (private copy): GRU's ``(1 - z) n + z h`` with z and
    1 - z swapped; the reverse direction reading time forwards; LSTM gates split as i, g, f,
    o; the frontend passing torch's LSTM states as (c0, h0)."""
    n, t, f, h = sizes
    torch.manual_seed(n * 100 + t * 10 + f + h)
    rnn = MODULES[mode](
        f, h, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias
    )
    model = _Wrap(rnn).double().eval()
    x = torch.randn((n, t, f) if batch_first else (t, n, f), dtype=torch.float64)
    dirs = 2 if bidirectional else 1
    args = (x,)
    if states:
        args += tuple(
            torch.randn(layers * dirs, n, h, dtype=torch.float64)
            for _ in range(2 if mode == "lstm" else 1)
        )
    module = _import(model, args)
    op = _recurrent(module)
    assert op.mode.data == mode and (op.h0 is not None) == states
    got = run(module, *(a.numpy() for a in args), dtype=np.float64)
    want = model(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.detach().numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("mode", "aten"),
    [
        ("lstm", "aten.lstm.input"),
        ("gru", "aten.gru.input"),
        ("rnn_tanh", "aten.rnn_tanh.input"),
        ("rnn_relu", "aten.rnn_relu.input"),
    ],
)
def test_frontend_maps_each_aten_op(mode: str, aten: str) -> None:
    """Each ATen recurrent op becomes one nf.recurrent of its mode; the ``aten.zeros`` torch
    makes for the initial states become absent operands (no constant, no zeros op). Mutant
    seen to fail it: ``aten.rnn_tanh.input`` mapped to mode ``rnn_relu``."""
    model = _Wrap(MODULES[mode](3, 4)).eval()
    x = torch.randn(5, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = export(model, (x,), dynamic_batch=False)
    targets = {str(n.target) for n in program.graph.nodes}
    assert aten in targets and "aten.zeros.default" in targets
    module = import_program(program)
    op = _recurrent(module)
    assert op.mode.data == mode and op.h0 is None and op.c0 is None
    assert len(op.results) == (3 if mode == "lstm" else 2)
    assert not [o for o in module.walk() if isinstance(o, nf.ConstantOp) and not o.sym_name]


def test_frontend_refuses_proj_size() -> None:
    """An LSTM with ``proj_size`` is refused, saying why (a second matmul in the cell).
    Mutant seen to fail it: the frontend without the proj_size check."""
    model = _Wrap(nn.LSTM(3, 4, proj_size=2)).eval()
    with pytest.raises(FrontendError, match="proj_size.*w_hr"):
        _import(model, (torch.randn(5, 2, 3),))


# --------------------------------------------------------------------------------------------
# nq == nh
# --------------------------------------------------------------------------------------------


def _program(
    layout: RecurrentLayout, x_shape: tuple[int, ...], states: bool, rng: np.random.Generator
) -> ModuleOp:
    """An nf function: inputs x (and h0, c0), the recurrent op on random weights."""
    out, state, _ = layout.result_shapes(x_shape)
    n_states = (2 if layout.mode == "lstm" else 1) if states else 0
    block = Block(arg_types=[TensorType(f64, x_shape)] + [TensorType(f64, state)] * n_states)
    consts = [
        nf.ConstantOp(numpy_to_dense(rng.uniform(-0.6, 0.6, s), f64), name=f"rnn.w{i}")
        for i, s in enumerate(layout.weight_shapes(x_shape[2]))
    ]
    types = [TensorType(f64, out), TensorType(f64, state)]
    if layout.mode == "lstm":
        types.append(TensorType(f64, state))
    args = list(block.args)
    op = nf.RecurrentOp(
        args[0],
        [c.result for c in consts],
        layout,
        types,
        args[1] if states else None,
        args[2] if states and layout.mode == "lstm" else None,
    )
    op.output.name_hint = "rnn"
    block.add_ops([*consts, op, ReturnOp(*op.results)])
    ftype = FunctionType.from_lists(block.arg_types, [r.type for r in op.results])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def _inputs(layout, x_shape, states, rng, scale=1.0):  # noqa: ANN001, ANN202
    _, state, _ = layout.result_shapes(x_shape)
    arrays = [rng.normal(0, scale, x_shape)]
    if states:
        arrays += [rng.normal(0, 0.5, state) for _ in range(2 if layout.mode == "lstm" else 1)]
    return arrays


@settings(max_examples=examples(10))
@given(
    mode=st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]),
    layers=st.integers(1, 2),
    bidirectional=st.booleans(),
    batch_first=st.booleans(),
    bias=st.booleans(),
    states=st.booleans(),
    sizes=st.tuples(st.integers(1, 3), st.integers(1, 50), st.integers(1, 4), st.integers(1, 5)),
    bits=st.sampled_from([(8, 8, None), (4, 4, None), (8, 8, 8), (16, 16, None), (2, 4, 8)]),
    rounding=st.sampled_from(["trunc", "floor", "half_up", "half_even"]),
    seed=st.integers(0, 2**16),
)
def test_nq_equals_nh(
    mode, layers, bidirectional, batch_first, bias, states, sizes, bits, rounding, seed
) -> None:
    """quantize (calibrated internal grids, weight/activation bits, a cell width rule), then
    the nq program (float64, the integer cell on the operands' codes) and its nh lowering
    (int64 codes, the op's tables) agree bit for bit on fresh inputs and random initial
    states, sequences of 1 to 50 steps. Mutants seen to fail it (private copy): LowerRecurrent
    building the tables with half_up instead of the program's rounding; the nh kernel
    rounding half_even whatever the op says; a default cell width of 8; quantize inserting
    the inputs' fake-quants in reverse order (lower-to-hw then refuses two-input programs)."""
    n, t, f, h = sizes
    layout = RecurrentLayout(mode, h, layers, bidirectional, batch_first, bias)
    x_shape = (n, t, f) if batch_first else (t, n, f)
    rng = np.random.default_rng(seed)
    module = _program(layout, x_shape, states, rng)
    weight_bits, act_bits, cell_bits = bits
    rules = (f"rnn\\.cell={cell_bits}",) if cell_bits else ()
    calibration = [tuple(_inputs(layout, x_shape, states, rng)) for _ in range(2)]
    nanoir.quantize(
        module,
        calibration,
        weight_bits=weight_bits,
        bias_bits=max(weight_bits, 8),
        act_bits=act_bits,
        rounding=rounding,
        rules=rules,
    )
    op = _recurrent(module)
    assert op.internal_grid("cell").bits == (cell_bits or 16)  # type: ignore[union-attr]
    hw = nanoir.lower_to_hw(module.clone())
    assert [o for o in hw.walk() if isinstance(o, nh.RecurrentOp)]
    x = _inputs(layout, x_shape, states, rng, scale=1.5)
    got_q, got_h = run(module, *x), run(hw, *x)
    for q, hv in zip(got_q, got_h):
        assert q.shape == hv.shape
        np.testing.assert_array_equal(q, hv)


def test_integer_cell_tracks_torch_at_16_bits() -> None:
    """The integer cell with 16-bit codes everywhere stays within 2e-3 of torch's float LSTM,
    GRU and RNN (an oracle for the cell's structure: gate order, which state each gate
    reads, the reverse direction). Mutants seen to fail it: the integer LSTM reading its
    forget gate from the g rows; GRU's reset gate applied to the input part of n instead of
    the hidden part."""
    rng = np.random.default_rng(1)
    for mode in MODULES:
        torch.manual_seed(0)
        rnn = MODULES[mode](3, 5, num_layers=2, bidirectional=True).double().eval()
        x = torch.randn(7, 2, 3, dtype=torch.float64)
        want = rnn(x)
        layout = RecurrentLayout(mode, 5, 2, True, False, True)
        weights = [
            Coded(np.rint(w.detach().numpy() * 2**13).astype(np.int64), np.array([13]))
            for w in rnn._flat_weights
        ]  # noqa: SLF001
        xq = Coded(np.rint(x.numpy() * 2**12).astype(np.int64), np.array([12]))
        got = run_codes(
            layout, xq, None, None, weights, Grid(11, 16), Grid(12, 16), Grid(14, 16), "half_even"
        )
        np.testing.assert_allclose(got[0] * 2.0**-14, want[0].detach().numpy(), atol=2e-3)
        assert rng is not None


def test_unquantized_cell_is_refused_by_lower_to_hw() -> None:
    """A rule that skips an internal quantizer leaves the op float inside: nq runs torch's
    math and lower-to-hw refuses it, naming the op and the reason. Mutant seen to fail it:
    LowerRecurrent returning without a refusal."""
    layout = RecurrentLayout("gru", 3)
    rng = np.random.default_rng(0)
    module = _program(layout, (4, 2, 2), False, rng)
    nanoir.quantize(
        module, [tuple(_inputs(layout, (4, 2, 2), False, rng))], rules=(r"rnn\.gates=skip",)
    )
    assert _recurrent(module).gates is None
    with pytest.raises(nanoir.Error, match="nf.recurrent.*internal quantizers"):
        nanoir.lower_to_hw(module.clone())


def test_tiny_bias_is_capped_at_its_product() -> None:
    """A bias far finer than the product it is added to (values 1e-15: calibrated exponent
    60) is capped at that product's exponent (input + weight for ``b_ih``, hidden + weight for
    ``b_hh``), so the exact pre-activation sum stays below 2**62 and the program runs and
    lowers. Mutant seen to fail it: quantize without the recurrent bias cap."""
    layout = RecurrentLayout("rnn_tanh", 2)
    rng = np.random.default_rng(0)
    module = _program(layout, (3, 1, 2), False, rng)
    for c in module.walk():
        if isinstance(c, nf.ConstantOp) and len(c.result.type.get_shape()) == 1:  # type: ignore[union-attr]
            c.value = numpy_to_dense(np.full(2, 1e-15), f64)
    calibration = [(rng.normal(0, 1000.0, (3, 1, 2)),) for _ in range(2)]
    nanoir.quantize(module, calibration, weight_per_channel=False, bias_correction=False)
    op = _recurrent(module)
    fqs = [w.owner for w in op.weights]
    k = [int(np.asarray(dense_to_numpy(fq.exp)).reshape(-1)[0]) for fq in fqs]  # type: ignore[union-attr]
    kx = int(np.asarray(dense_to_numpy(op.input.owner.exp)).reshape(-1)[0])  # type: ignore[union-attr]
    hidden = op.internal_grid("hidden")
    assert hidden is not None
    assert k[2] <= kx + k[0] and k[3] <= hidden.exp + k[1]
    x = rng.normal(0, 1000.0, (3, 1, 2))
    np.testing.assert_array_equal(run(module, x)[0], run(nanoir.lower_to_hw(module.clone()), x)[0])


class _First(nn.Module):
    """The sequence output alone, so only the batch and the time dims are dynamic."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.rnn(x)[0]


def test_an_empty_sequence_is_one_clear_error() -> None:
    """A program whose sequence length is dynamic, run on 0 steps (torch refuses it too), is
    one ``nanoir.Error`` naming the op and saying why, at nf and nh (it was NumPy's "need at
    least one array to stack"); one step still runs. Mutant seen to fail it: ``_steps``
    returning without its check."""
    model = nn.Sequential(nn.GRU(3, 4, batch_first=True)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = from_torch(_First(model), (torch.randn(2, 5, 3),))  # batch-first: dynamic
    nf_text = str(program).replace("?x5x", "?x?x")
    rng = np.random.default_rng(0)
    q = nanoir.parse(nf_text)
    nanoir.quantize(q, [rng.standard_normal((2, 5, 3)).astype(np.float32)])
    for program in (nanoir.parse(nf_text), nanoir.lower_to_hw(q)):
        with pytest.raises(nanoir.Error, match="recurrent.*the sequence has 0 steps"):
            nanoir.run(program, np.zeros((1, 0, 3), np.float32))
        assert nanoir.run(program, np.ones((1, 1, 3), np.float32))[0].shape == (1, 1, 4)
