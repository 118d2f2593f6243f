"""``nanoir.report`` shows a recurrent op's internal quantizers: rows ``<op>.gates``,
``<op>.cell`` (an LSTM's) and ``<op>.hidden`` of kind ``internal``, each with its saturation,
its SQNR against the exact value it requantizes, and against the float cell's value at the
same step. The oracle is the integer LSTM / GRU cell and torch's float cell written here in
NumPy, step by step, from the quantized operands (each step's quantized hidden state is
checked against the nq program's output, and the last cell state against its ``c_n``, so the
oracle is the program's own cell); the float cell is checked against torch.

Mutants seen to fail it (private copy): the report without the internal rows; the cell's
observer given the quantized value as the exact one (SQNR inf); each float value paired with
the previous step's; the float cell run on the quantized operands; the internal rows placed at
the end, after the op's result rows; the saturation counted one exponent coarser.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy, numpy_to_dense
from nanoir.dialects.nq import FakeQuantOp
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType, f64
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir

torch.set_num_threads(1)

N, T, F, H = 2, 7, 3, 4


def _program(mode: str, rng: np.random.Generator) -> ModuleOp:
    """One batch-first layer of ``mode`` on ``[N, T, F]``, random weights ``rnn.w0..3``."""
    layout = RecurrentLayout(mode, H, 1, False, True, True)
    x_shape = (N, T, F)
    out, state, _ = layout.result_shapes(x_shape)
    block = Block(arg_types=[TensorType(f64, x_shape)])
    consts = [
        nf.ConstantOp(numpy_to_dense(rng.uniform(-0.7, 0.7, s), f64), name=f"rnn.w{i}")
        for i, s in enumerate(layout.weight_shapes(F))
    ]
    types = [TensorType(f64, out), TensorType(f64, state)]
    if mode == "lstm":
        types.append(TensorType(f64, state))
    op = nf.RecurrentOp(block.args[0], [c.result for c in consts], layout, types)
    op.output.name_hint = "rnn"
    block.add_ops([*consts, op, ReturnOp(*op.results)])
    ftype = FunctionType.from_lists(block.arg_types, [r.type for r in op.results])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def _round(v: np.ndarray) -> np.ndarray:
    return np.round(v)  # half to even: the program's rounding here


def _grid(v: np.ndarray, exp: np.ndarray | int, bits: int) -> np.ndarray:
    """``v`` rounded half to even onto ``2**-exp`` steps, saturated to signed ``bits``."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return np.ldexp(np.clip(_round(np.ldexp(v, exp)), lo, hi), -np.asarray(exp))


def _table(fn, v: np.ndarray, exp: int, bits: int) -> np.ndarray:  # noqa: ANN001
    """The cell's Q0.15 table at the gates code of ``v`` (already on the gates grid)."""
    one = 2**15
    codes = np.clip(_round(np.ldexp(v, exp)), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return np.clip(_round(fn(np.ldexp(codes, -exp)) * one), -(one - 1), one - 1) / one


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


class _Stats:
    """Sums for one row: exact vs quantized, float vs quantized, saturated count."""

    def __init__(self, exp: int, bits: int) -> None:
        self.exp, self.bits = exp, bits
        self.s = self.n = self.fs = self.fn = 0.0
        self.count = self.saturated = 0

    def add(self, exact: np.ndarray, q: np.ndarray, f: np.ndarray) -> None:
        raw = np.trunc(np.ldexp(exact, self.exp))
        self.saturated += int(
            ((raw < -(2 ** (self.bits - 1))) | (raw > 2 ** (self.bits - 1) - 1)).sum()
        )
        self.count += exact.size
        self.s += float(np.sum(exact**2))
        self.n += float(np.sum((q - exact) ** 2))
        self.fs += float(np.sum(f**2))
        self.fn += float(np.sum((q - f) ** 2))

    def figures(self) -> tuple[float, float, float]:
        def db(s: float, n: float) -> float:
            return math.inf if n == 0 else 10 * math.log10(s / n)

        return self.saturated / self.count, db(self.s, self.n), db(self.fs, self.fn)


def _fake_quantized(fq: FakeQuantOp, v: np.ndarray) -> np.ndarray:
    exp = dense_to_numpy(fq.exp).astype(np.int64)
    if exp.ndim == 1 and exp.size > 1 and v.ndim == 2:
        exp = exp.reshape(-1, 1)  # per gate row
    assert fq.rounding_mode.value == "half_even"
    return _grid(v, exp.reshape(()) if exp.size == 1 else exp, fq.bits.value.data)


def _oracle(module: ModuleOp, mode: str, x: np.ndarray) -> dict[str, _Stats]:
    """Every internal quantizer's statistics over the batch ``x``, by the cell written here."""
    (op,) = [o for o in module.walk() if isinstance(o, nf.RecurrentOp)]
    grids = {k: op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL}
    kg, bg = grids["gates"].exp, grids["gates"].bits  # type: ignore[union-attr]
    kc, bc = grids["cell"].exp, grids["cell"].bits  # type: ignore[union-attr]
    kh, bh = grids["hidden"].exp, grids["hidden"].bits  # type: ignore[union-attr]
    stats = {k: _Stats(g.exp, g.bits) for k, g in grids.items()}  # type: ignore[union-attr]
    floats, quants = [], []
    for w in op.weights:
        fq = w.owner
        assert isinstance(fq, FakeQuantOp) and isinstance(fq.input.owner, nf.ConstantOp)
        value = np.asarray(dense_to_numpy(fq.input.owner.value), np.float64)
        floats.append(value)
        quants.append(_fake_quantized(fq, value))
    fx = op.input.owner
    assert isinstance(fx, FakeQuantOp)
    xq = _fake_quantized(fx, x)
    outputs = nanoir.run(module, x)
    y_q = outputs[0]
    wi, wh, bi, bh_ = quants
    fwi, fwh, fbi, fbh = floats
    h = c = np.zeros((N, H))
    hf = cf = np.zeros((N, H))
    for t in range(T):
        ax, ah = xq[:, t] @ wi.T + bi, h @ wh.T + bh_
        fax, fah = x[:, t] @ fwi.T + fbi, hf @ fwh.T + fbh
        if mode == "lstm":
            pre, fpre = ax + ah, fax + fah
            gq = _grid(pre, kg, bg)
            stats["gates"].add(pre, gq, fpre)
            i, f, g, o = np.split(gq, 4, axis=-1)
            c_exact = _table(_sigmoid, f, kg, bg) * c + _table(_sigmoid, i, kg, bg) * _table(
                np.tanh, g, kg, bg
            )
            c_new = _grid(c_exact, kc, bc)
            fi, ff, fg, fo = np.split(fpre, 4, axis=-1)
            cf = _sigmoid(ff) * cf + _sigmoid(fi) * np.tanh(fg)
            stats["cell"].add(c_exact, c_new, cf)
            h_exact = _table(_sigmoid, o, kg, bg) * _table(np.tanh, _grid(c_new, kg, bg), kg, bg)
            hf = _sigmoid(fo) * np.tanh(cf)
            c = c_new
        else:  # gru
            pre, fpre = ax[:, : 2 * H] + ah[:, : 2 * H], fax[:, : 2 * H] + fah[:, : 2 * H]
            gq = _grid(pre, kg, bg)
            stats["gates"].add(pre, gq, fpre)
            r, z = np.split(_table(_sigmoid, gq, kg, bg), 2, axis=-1)
            n_pre = ax[:, 2 * H :] + r * ah[:, 2 * H :]
            fr, fz = np.split(_sigmoid(fpre), 2, axis=-1)
            fn_pre = fax[:, 2 * H :] + fr * fah[:, 2 * H :]
            nq = _grid(n_pre, kg, bg)
            stats["gates"].add(n_pre, nq, fn_pre)
            h_exact = (1 - z) * _table(np.tanh, nq, kg, bg) + z * h
            hf = (1 - fz) * np.tanh(fn_pre) + fz * hf
        h_new = _grid(h_exact, kh, bh)
        np.testing.assert_array_equal(h_new, y_q[:, t])  # the oracle is the program's cell
        stats["hidden"].add(h_exact, h_new, hf)
        h = h_new
    if mode == "lstm":
        np.testing.assert_array_equal(c[None], outputs[2])
    else:
        del stats["cell"]
    return stats, hf


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_report_rows_of_the_internal_quantizers(mode: str) -> None:
    rng = np.random.default_rng(3)
    module = _program(mode, rng)
    calib = [rng.normal(0, 1, (N, T, F)) for _ in range(2)]
    nanoir.quantize(module, calib, rounding="half_even", bias_correction=False)
    x = rng.normal(0, 2.5, (N, T, F))  # wider than calibration: some gates saturate
    stats, hf = _oracle(module, mode, x)

    # The float cell written here is torch's.
    (op,) = [o for o in module.walk() if isinstance(o, nf.RecurrentOp)]
    rnn = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(F, H, batch_first=True).double()
    with torch.no_grad():
        for p, w in zip(rnn._flat_weights, op.weights):  # noqa: SLF001
            p.copy_(torch.from_numpy(dense_to_numpy(w.owner.input.owner.value).copy()))  # type: ignore[union-attr]
        want = rnn(torch.from_numpy(x))[0][:, -1].numpy()
    np.testing.assert_allclose(hf, want, atol=1e-12)

    report = nanoir.report(module, [x])
    rows = {r.name: r for r in report.rows if r.kind == "internal"}
    expected = (
        ["rnn.gates", "rnn.cell", "rnn.hidden"] if mode == "lstm" else ["rnn.gates", "rnn.hidden"]
    )
    assert list(rows) == expected
    names = [r.name for r in report.rows]
    # After the operands' rows (the last weight's), before the op's results' ("rnn": output).
    assert names[names.index("rnn.gates") - 1] == "rnn.w3"
    assert names.index(expected[-1]) < names.index("rnn")
    assert sum(s.saturated for s in stats.values()) > 0  # the data saturates somewhere
    for which, s in stats.items():
        row = rows[f"rnn.{which}"]
        sat, own, vs_float = s.figures()
        assert row.bits == s.bits and row.exps == [s.exp]
        assert row.saturation == pytest.approx(sat, abs=1e-12)
        assert row.sqnr == pytest.approx(own, rel=1e-9)
        assert row.sqnr_vs_float == pytest.approx(vs_float, rel=1e-9)
    assert "rnn.gates" in str(report) and "internal" in str(report)
