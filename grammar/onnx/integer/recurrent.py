"""``nh.recurrent`` (LSTM, GRU, RNN) as ONNX ``Scan`` loops, exactly: the integer cell of
:mod:`nanoir.runtime.numerics.recurrent` on float64 codes.

One ``Scan`` per layer, over a sequence whose length and batch are known only at run time.
Both directions of a bidirectional layer step in the same loop, stacked on a leading axis
(``[D, N, ...]``, a batched ``MatMul`` for ``h @ U``): the reverse one reads its input reversed
in time, and its outputs are put back in order after the loop. A step's nodes (about 25 for an
LSTM, each a fixed cost in onnxruntime) so run once per step, not once per step and direction:
the trained CRNN's two-direction LSTM went from 4.3-4.4 to 3.8-3.9 ms. The states are the
hidden codes (and an LSTM's cell codes); the scanned input is the input part of every step's
pre-activations, computed for the whole sequence at once before the loop (one ``MatMul``).
onnxruntime refuses a ``Scan`` over 0 steps, as the NumPy executor (and torch) refuse an empty
sequence.

Why float64, and why it is exact. The runtime sums each gate's pre-activation in int64 with
every term left-shifted to the finest exponent ``E``, then requantizes by ``s = E - k`` to the
target grid ``k``. The requantized value before rounding is ``sum_i T_i 2**(k - e_i)``: the
alignment drops out. So the writer scales the weights and biases by those powers of two
(exact) and lets a float64 ``MatMul`` and ``Add`` sum the terms: every term and partial sum is
an integer multiple of ``2**-max(s, 0)``, exact while the integers stay below ``2**53``, which
the writer proves from the constant weights and the declared widths (:func:`_exact`; a program
whose bound it cannot prove is refused naming the op, where the runtime's own limit is
``2**62``). Rounding is then the mode's own float op on an exact value: ``Clip`` to the
target's codes first (rounding is monotone and keeps integers: the clipped rounding is the
rounded clip), then ``Floor`` (floor, and half_up after adding 1/2, folded into the biases
where it can be), ``Round`` (ONNX rounds half to even: half_even) or a ``Cast`` to int64
(truncation toward zero: trunc); the ``Clip`` is left out where the bound keeps every value
within the codes. The Q0.15 tables are one lookup (:func:`.common.table_lookup`) from one
float64 table holding every region a step reads, each pre-scaled by the power of two its
product needs (LSTM ``i`` by ``2**(k_cell - 30)``, ``f`` by ``2**-15``, ``o`` by
``2**(k_hidden - 30)``), the region picked by an offset per row added to the gate code.

Integer ONNX ops were the other candidate (the :mod:`.arith` rounding division in int64): a
requant there is up to nine nodes against three or four, and the loop body runs once per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.dialects import nh
from nanoir.dialects.nf import array_values
from nanoir.dialects.nq import RoundingMode
from nanoir.grammar.onnx.integer.common import (
    Writer,
    constant_codes,
    out_name,
    refuse,
    table_lookup,
)
from nanoir.grammar.onnx.integer.graph import F32_EXACT, Graph
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.recurrent import ACT_FRAC, Grid
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation

F64_EXACT = 2**53
"""Every integer of magnitude <= 2**53 is a float64."""
F64 = np.float64
I64 = np.int64
DOUBLE = 11
FLOAT = 1


class _Body:
    """Nodes written into a loop body instead of the main graph (constants stay outer
    initializers, which a body reads by name)."""

    def __init__(self, g: Graph) -> None:
        self.g = g

    def __enter__(self) -> list[Any]:
        self.outer, self.g.nodes = self.g.nodes, []
        return self.g.nodes

    def __exit__(self, *exc: object) -> None:
        self.g.nodes = self.outer


def _exact(op: Operation, what: str, terms: Sequence[tuple[Any, Any]], k: Any, half: bool) -> None:
    """Refuse unless ``sum_i T_i 2**(k - e_i)`` (and 1/2 for half_up) is exact in float64
    for ``|T_i| <= bound_i``: ``terms`` are ``(bound, e)`` per row (broadcast)."""
    e_top = np.max(np.broadcast_arrays(*[np.asarray(e, I64) for _, e in terms]), axis=0)
    if half:
        e_top = np.maximum(e_top, np.asarray(k, I64) + 1)
    total = sum(
        np.asarray(b, dtype=object) * np.power(2, (e_top - np.asarray(e, I64)).astype(object))
        for b, e in terms
    )
    if half:
        total = total + np.power(2, (e_top - np.asarray(k, I64) - 1).astype(object))
    top = int(np.max(np.asarray(total, dtype=object)))
    if top > F64_EXACT:
        raise refuse(
            op,
            f"has {what} of up to {top} in units of its finest exponent, past 2**53: no exact "
            "float64 form here (coarser exponents or fewer bits)",
        )


def _reach(terms: Sequence[tuple[Any, Any]], k: Any, half: bool) -> np.ndarray:
    """The largest ``|sum_i T_i 2**(k - e_i)|`` (and 1/2 for half_up) per row: exact in
    float64 once :func:`_exact` has passed (every partial sum a multiple of the finest unit,
    below ``2**53`` of them)."""
    total = sum(
        np.asarray(b, F64) * _pow2(np.asarray(k, I64) - np.asarray(e, I64)) for b, e in terms
    )
    return np.asarray(total, F64) + (0.5 if half else 0.0)


def _span(reach: np.ndarray) -> tuple[float, float]:
    top = float(reach.max(initial=0))
    return -top, top


def _pow2(e: Any) -> np.ndarray:
    return np.ldexp(1.0, np.asarray(e, I64))


class _Cell:
    """What every layer and direction of one op shares: grids, rounding, the tables."""

    def __init__(self, g: Graph, op: nh.RecurrentOp) -> None:
        self.g, self.op = g, op
        self.kind = op.layout.mode
        self.gates, self.cell, self.hidden = op.grid("gates"), op.grid("cell"), op.grid("hidden")
        for label, grid in (("gates", self.gates), ("cell", self.cell), ("hidden", self.hidden)):
            if grid.bits < 2:
                raise refuse(op, f"has a {grid.bits}-bit {label} grid (the sign rule)")
        self.mode = RoundingMode(op.rounding.data)
        self.half = self.mode is RoundingMode.HALF_UP
        self.base = out_name(g, op)
        self.sig = np.asarray(array_values(op.sigmoid_table), I64)
        self.tanh = np.asarray(array_values(op.tanh_table), I64)
        self.size = 2**self.gates.bits
        self.dirs = op.layout.dirs
        self.regions: list[np.ndarray] = []
        self.written: str | None = None

    def region(self, table: np.ndarray, scale_exp: int) -> int:
        """The offset of ``table * 2**scale_exp`` in the step's table (added once)."""
        self.regions.append(table.astype(F64) * 2.0**scale_exp)
        return (len(self.regions) - 1) * self.size - quant.qmin(self.gates.bits)

    def table(self) -> str:
        if self.written is None:
            self.written = self.g.const(np.concatenate(self.regions), F64, self.base + "_tables")
        return self.written

    # -- rounding --------------------------------------------------------------------------
    def clip(self, y: str, grid: Grid, base: str, lo: int | None = None) -> str:
        lo = quant.qmin(grid.bits) if lo is None else lo
        g = self.g
        return g.node("Clip", [y, g.const(lo, F64), g.const(quant.qmax(grid.bits), F64)], base)

    def codes(self, y: str, grid: Grid, base: str, lo: int | None = None) -> str:
        """``y`` (scaled, half_up's 1/2 added) rounded and saturated to ``grid``, float64."""
        c = self.clip(y, grid, base + "_c", lo)
        if self.mode is RoundingMode.TRUNC:
            t = self.g.node("Cast", [c], base + "_t", to=7)
            return self.g.node("Cast", [t], base, to=DOUBLE)
        return self.g.node("Round" if self.mode is RoundingMode.HALF_EVEN else "Floor", [c], base)

    def lookup(
        self, y: str, offsets: Any, width: int, base: str, span: tuple[float, float], whole: bool
    ) -> str:
        """The table entries at ``y`` (``[D, N, width]``, scaled to the gates grid, 1/2 added
        unless ``whole``) requantized to the gates grid: one lookup at the code plus each
        row's region offset. ``y`` lies in ``span``: within the table's codes the ``Clip`` is
        left out (every rounding is monotone and keeps the codes), and a ``whole``
        (integer-valued) ``y`` is not rounded."""
        g = self.g
        lo, hi = span
        if lo < quant.qmin(self.gates.bits) or hi > quant.qmax(self.gates.bits):
            y = self.clip(y, self.gates, base + "_c")
        if self.mode is not RoundingMode.TRUNC and not whole:
            y = g.node(
                "Round" if self.mode is RoundingMode.HALF_EVEN else "Floor", [y], base + "_r"
            )
        idx = g.node("Cast", [y], base + "_i", to=7)
        idx = g.node("Add", [idx, g.const(offsets, I64, base + "_off")], base + "_ix")
        return table_lookup(g, self.table(), idx, (self.dirs, DYNAMIC_INDEX, width), base)

    def half_add(self, y: str, base: str) -> str:
        return self.g.node("Add", [y, self.g.const(0.5, F64)], base) if self.half else y


def _matmul(
    g: Graph,
    x: str,
    weights: np.ndarray,
    bound: np.ndarray,
    exps: np.ndarray,
    wname: str,
    name: str,
    x32: bool = False,
) -> str:
    """``x @ weights``, float64 codes in (float32 ones if ``x32``) and out, each column of
    ``weights`` integers times ``2**exps``: in float32 where that is exact (every column's
    sum of integer products within ``2**24`` by ``bound``, the column's power of two well
    inside float32's range: every partial sum is then a float32), else in float64.
    onnxruntime's float64 ``MatMul`` is 2.8x slower than the two ``Cast``s and its float32
    ``MatMul`` on a step's 1x128 by 128x512 (44.7 us against 16.2 us), and the loop body runs
    once per step."""
    if not _float32_exact(bound, exps):
        x = g.node("Cast", [x], name + "_x64", to=DOUBLE) if x32 else x
        return g.node("MatMul", [x, g.const(weights, F64, wname)], name)
    x32 = x if x32 else g.node("Cast", [x], name + "_x32", to=FLOAT)
    y32 = g.node("MatMul", [x32, g.const(weights, np.float32, wname)], name + "_32")
    return g.node("Cast", [y32], name, to=DOUBLE)


def _float32_exact(bound: np.ndarray, exps: np.ndarray) -> bool:
    return not (
        bound.max(initial=0) > F32_EXACT or exps.min(initial=0) < -100 or exps.max(initial=0) > 100
    )


def _weights(op: nh.RecurrentOp) -> list[list[tuple[Any, ...]]]:
    """Per layer and direction: ``(W, kw, b, kb, U, ku, bh, kbh)`` codes (int64) and
    exponents per gate row (biases and their exponents 0 where the op has none)."""
    coded = []
    for w in op.weights:
        codes = constant_codes(w)
        if codes is None:
            raise refuse(op, "reads run-time weights (the writer proves exactness from codes)")
        coded.append((codes, np.asarray(nh.fixed_of(w).exp_list, I64).reshape(-1)))
    cells = []
    for row in op.layout.cells(coded):
        out = []
        for w_ih, w_hh, b_ih, b_hh in row:
            rows = w_ih[0].shape[0]

            def per_row(exp: np.ndarray, rows: int = rows) -> np.ndarray:
                return np.broadcast_to(exp, (rows,)).copy()

            def bias(b: Any, rows: int = rows) -> tuple[np.ndarray, np.ndarray]:
                if b is None:
                    return np.zeros(rows, I64), np.zeros(rows, I64)
                return b[0], per_row(b[1])

            out.append(
                (
                    w_ih[0],
                    per_row(w_ih[1]),
                    *bias(b_ih),
                    w_hh[0],
                    per_row(w_hh[1]),
                    *bias(b_hh),
                )
            )
        cells.append(out)
    return cells


def _states(
    g: Graph, cell: _Cell, xs: str, value: Any, grid: Grid, layers: int, dirs: int, hsize: int
) -> list[str]:
    """Each layer's initial state (``[D, N, H]`` float64 codes on ``grid``, its directions
    stacked): the operand requantized to ``grid``, or zeros of the run-time batch."""
    base = f"{cell.base}_{'h0' if grid is cell.hidden else 'c0'}"
    if value is None:
        n = g.node("Shape", [xs], base + "_n", start=1, end=2)
        shape = g.node(
            "Concat", [g.const([dirs], I64), n, g.const([hsize], I64)], base + "_shape", axis=0
        )
        zero = g.helper.make_tensor("zero", DOUBLE, [1], [0.0])
        z = g.node("ConstantOfShape", [shape], base, value=zero)
        return [z] * layers
    k = np.asarray(nh.fixed_of(value).exp_list, I64).reshape(-1)
    shift = k - grid.exp
    bound = g.bound(value)
    _exact(cell.op, "an initial state", [(bound, k)], grid.exp, cell.half)
    y = g.node("Mul", [g.get(value, "f64"), g.const(_pow2(-shift), F64, base + "_s")], base + "_m")
    y = cell.codes(cell.half_add(y, base + "_h"), grid, base)
    if layers == 1:
        return [y]
    return [
        g.node(
            "Slice",
            [y, g.const([i * dirs], I64), g.const([(i + 1) * dirs], I64), g.const([0], I64)],
            f"{base}_{i}",
        )
        for i in range(layers)
    ]


def _reversed(g: Graph, x: str, base: str) -> str:
    """``x`` reversed along its first (time) axis."""
    return g.node(
        "Slice",
        [x, g.const([-1], I64), g.const([-(2**63)], I64), g.const([0], I64), g.const([-1], I64)],
        base,
    )


def _projected(
    g: Graph,
    xs: str,
    w_in: list[np.ndarray],
    b_in: list[np.ndarray],
    bounds: tuple[list[np.ndarray], list[np.ndarray]],
    base: str,
) -> str:
    """The input part of every step's pre-activations, ``[T, D, N, G]``: ``[T, N, I]`` times
    every direction's weights in one 2-D ``MatMul`` (onnxruntime's batched one, ``[T, D, N,
    I]`` by ``[D, I, G]``, is a GEMV per time step and direction: 4.6 ms against 0.2 on the
    CRNN), directions then moved to axis 1, the reverse one's reversed in time (step ``t``
    of the loop reads ``x[T - 1 - t]`` there)."""
    dirs, rows = len(w_in), w_in[0].shape[1]
    sums, exps = (np.concatenate(b) for b in bounds)
    ax = _matmul(g, xs, np.concatenate(w_in, axis=1), sums, exps, base + "_wih", base + "_xw")
    ax = g.node("Add", [ax, g.const(np.concatenate(b_in), F64, base + "_b")], base + "_ax")
    if dirs == 1:
        return g.node("Unsqueeze", [ax, g.const([1], I64)], base + "_ax1")
    ax = g.node("Reshape", [ax, g.const([0, 0, dirs, rows], I64)], base + "_axd")
    ax = g.node("Transpose", [ax], base + "_axt", perm=[0, 2, 1, 3])
    fwd, rev = g.node("Split", [ax], base + "_axs", outputs=2, axis=1, num_outputs=2)
    return g.node("Concat", [fwd, _reversed(g, rev, base + "_axr")], base + "_ax2", axis=1)


def _unstacked_output(g: Graph, ys: str, dirs: int, base: str) -> str:
    """The loop's ``[T, D, N, H]`` hidden codes as the layer's ``[T, N, D * H]`` output (the
    reverse direction's put back in time order)."""
    if dirs == 1:
        return g.node("Squeeze", [ys, g.const([1], I64)], base)
    fwd, rev = g.node("Split", [ys], base + "_d", outputs=2, axis=1, num_outputs=2)
    both = g.node("Concat", [fwd, _reversed(g, rev, base + "_rt")], base + "_c", axis=3)
    return g.node("Squeeze", [both, g.const([1], I64)], base)


def recurrent(g: Graph, op: nh.RecurrentOp) -> None:
    layout = op.layout
    cell = _Cell(g, op)
    kind, base = cell.kind, cell.base
    gates, hidden = cell.gates, cell.hidden
    kg, kh, kc = gates.exp, hidden.exp, cell.cell.exp
    hsize, dirs = layout.hidden, layout.dirs
    a = ACT_FRAC
    # The tables' regions, in a fixed order per mode (offsets: code + offset, per row).
    if kind == "lstm":
        off_i = cell.region(cell.sig, kc - 2 * a)
        off_f = cell.region(cell.sig, -a)
        off_g = cell.region(cell.tanh, 0)
        off_o = cell.region(cell.sig, kh - 2 * a)
        gate_offsets = np.repeat([off_i, off_f, off_g, off_o], hsize)
    elif kind == "gru":
        off_r = cell.region(cell.sig, 0)
        off_z = cell.region(cell.sig, -a)
        off_n = cell.region(cell.tanh, kh - a)
        gate_offsets = np.repeat([off_r, off_z], hsize)
    elif kind == "rnn_tanh":
        gate_offsets = np.repeat([cell.region(cell.tanh, kh - a)], hsize)
    else:
        gate_offsets = None
    x_bound = g.bound(op.input)
    kx = int(nh.fixed_of(op.input).exp_list[0])
    xs = g.get(op.input, "f64")
    if layout.batch_first:
        xs = g.node("Transpose", [xs], base + "_tm", perm=[1, 0, 2])
    layers = layout.layers
    h_init = _states(g, cell, xs, op.h0, hidden, layers, dirs, hsize)
    c_init = _states(g, cell, xs, op.c0, cell.cell, layers, dirs, hsize) if kind == "lstm" else []
    h_bound = 2 ** (hidden.bits - 1)
    c_bound = 2 ** (cell.cell.bits - 1)
    t_bound = 2**a
    hn: list[str] = []
    cn: list[str] = []
    for layer, row in enumerate(_weights(op)):
        name = f"{base}_l{layer}"
        w_in, w_h, b_in, b_h, hu, h_exps = [], [], [], [], [], []
        x_sums, x_exps = [], []
        reach = np.zeros(len(row[0][0]))  # |pre-activation| per gate row, any direction
        for w, kw, b, kb, u, ku, bh, kbh in row:
            xw = x_bound * np.abs(w).sum(axis=1)
            hu.append(h_bound * np.abs(u).sum(axis=1))
            # Targets per row: the gates grid, an RNN-ReLU's rows the hidden grid.
            k_row = np.full(len(w), kh if kind == "rnn_relu" else kg, I64)
            # GRU's n rows read r * (h U + b_hh): Q0.15 further.
            h_extra = np.zeros(len(w), I64)
            if kind == "gru":
                h_extra[2 * hsize :] = a
            terms = [
                (xw, kx + kw),
                (np.abs(b), kb),
                (hu[-1] * 2**h_extra, kh + ku + h_extra),
                (np.abs(bh) * 2**h_extra, kbh + h_extra),
            ]
            _exact(op, "gate pre-activations", terms, k_row, cell.half)
            reach = np.maximum(reach, _reach(terms, k_row, cell.half))
            h_exps.append(k_row - kh - ku - h_extra)
            x_sums.append(xw)
            x_exps.append(k_row - kx - kw)
            w_in.append((w.T * _pow2(x_exps[-1])).astype(F64))
            w_h.append((u.T * _pow2(h_exps[-1])).astype(F64))
            bias_in = b * _pow2(k_row - kb) + (0.5 if cell.half else 0.0)
            bias_h = bh * _pow2(k_row - kbh - h_extra)
            if kind == "gru":  # only the n rows' b_hh is multiplied by r
                bias_in[: 2 * hsize] += bias_h[: 2 * hsize]
                bias_h[: 2 * hsize] = 0
            else:
                bias_in, bias_h = bias_in + bias_h, np.zeros_like(bias_h)
            b_in.append(bias_in)
            b_h.append(bias_h[None, 2 * hsize :])
        ax = _projected(g, xs, w_in, b_in, (x_sums, x_exps), name)
        scanned = [ax]
        if kind == "gru":
            parts = g.node(
                "Split", [ax, g.const([2 * hsize, hsize], I64)], name + "_axs", outputs=2, axis=3
            )
            scanned = list(parts)
        # The hidden state is carried in float32 where only ``h @ U`` reads it and that is
        # exact in float32: the Cast before it made once per step at the step's end, where
        # it also stands for the Identity a scanned output that is a state needs.
        h32 = kind != "gru" and _float32_exact(np.concatenate(hu), np.concatenate(h_exps))
        h0 = h_init[layer]
        if h32:
            h0 = g.node("Cast", [h0], f"{name}_h0_32", to=FLOAT)
        states = [h0] + ([c_init[layer]] if kind == "lstm" else [])
        state_in = [g.fresh(name + "_h_in")] + ([g.fresh(name + "_c_in")] if c_init else [])
        scan_in = [g.fresh(f"{name}_x{i}_t") for i in range(len(scanned))]
        with _Body(g) as body:
            h = state_in[0]
            ah = _matmul(
                g,
                h,
                np.stack(w_h),
                np.concatenate(hu),
                np.concatenate(h_exps),
                name + "_whh",
                name + "_hw",
                x32=h32,
            )
            if kind == "lstm":
                pre = g.node("Add", [scan_in[0], ah], name + "_pre")
                act = cell.lookup(pre, gate_offsets, 4 * hsize, name + "_act", _span(reach), False)
                i_, f_, g_, o_ = g.node(
                    "Split", [act], name + "_gate", outputs=4, axis=2, num_outputs=4
                )
                _exact(
                    op, "a cell update", [(t_bound * c_bound, a + kc), (t_bound**2, 2 * a)],
                    kc, cell.half,
                )  # fmt: skip
                c_new = g.node(
                    "Add",
                    [
                        g.node("Mul", [f_, state_in[1]], name + "_fc"),
                        g.node("Mul", [i_, g_], name + "_ig"),
                    ],
                    name + "_cacc",
                )
                c_new = cell.codes(cell.half_add(c_new, name + "_ch"), cell.cell, name + "_c")
                _exact(op, "the cell read by tanh", [(c_bound, kc)], kg, cell.half)
                whole, scale = kg >= kc, 2.0 ** (kg - kc)
                span = (quant.qmin(cell.cell.bits) * scale, quant.qmax(cell.cell.bits) * scale)
                tc = c_new
                if kg != kc:
                    tc = g.node("Mul", [c_new, g.const(scale, F64)], name + "_cg")
                if not whole:
                    tc = cell.half_add(tc, name + "_cgh")
                    span = (span[0], span[1] + 0.5 * cell.half)
                tc = cell.lookup(tc, off_g, hsize, name + "_tc", span, whole)
                h_new = g.node("Mul", [o_, tc], name + "_hacc")
                _exact(op, "a hidden state", [(t_bound**2, 2 * a)], kh, cell.half)
                h_new = cell.codes(cell.half_add(h_new, name + "_hh"), hidden, name + "_h")
                outs_body = [h_new, c_new]
            elif kind == "gru":
                ah_rz, ah_n = g.node(
                    "Split",
                    [ah, g.const([2 * hsize, hsize], I64)],
                    name + "_hws",
                    outputs=2,
                    axis=2,
                )
                pre = g.node("Add", [scan_in[0], ah_rz], name + "_pre")
                rz = cell.lookup(
                    pre, gate_offsets, 2 * hsize, name + "_rz", _span(reach[: 2 * hsize]), False
                )
                r, z = g.node("Split", [rz], name + "_r", outputs=2, axis=2, num_outputs=2)
                if any(bias.any() for bias in b_h):
                    ah_n = g.node("Add", [ah_n, g.const(np.stack(b_h), F64)], name + "_hb")
                pre_n = g.node(
                    "Add", [scan_in[1], g.node("Mul", [r, ah_n], name + "_rh")], name + "_pn"
                )
                nn = cell.lookup(
                    pre_n,
                    np.full(hsize, off_n),
                    hsize,
                    name + "_n",
                    _span(reach[2 * hsize :]),
                    False,
                )
                _exact(
                    op, "a hidden state", [(t_bound**2, 2 * a), (t_bound * h_bound, a + kh)],
                    kh, cell.half,
                )  # fmt: skip
                keep = g.node("Sub", [g.const(1.0, F64), z], name + "_1z")
                h_new = g.node(
                    "Add",
                    [
                        g.node("Mul", [keep, nn], name + "_zn"),
                        g.node("Mul", [z, h], name + "_zh"),
                    ],
                    name + "_hacc",
                )
                h_new = cell.codes(cell.half_add(h_new, name + "_hh"), hidden, name + "_h")
                outs_body = [h_new]
            elif kind == "rnn_tanh":
                pre = g.node("Add", [scan_in[0], ah], name + "_pre")
                t = cell.lookup(pre, gate_offsets, hsize, name + "_t", _span(reach), False)
                _exact(op, "a hidden state", [(t_bound, a)], kh, cell.half)
                h_new = cell.codes(cell.half_add(t, name + "_hh"), hidden, name + "_h")
                outs_body = [h_new]
            else:  # rnn_relu: the pre-activation is already scaled to the hidden grid
                pre = g.node("Add", [scan_in[0], ah], name + "_pre")
                h_new = cell.codes(pre, hidden, name + "_h", lo=0)
                outs_body = [h_new]
            if h32:
                y_t, outs_body[0] = h_new, g.node("Cast", [h_new], name + "_h32", to=FLOAT)
            else:
                y_t = g.node("Identity", [h_new], name + "_y_t")
        outs_body = [*outs_body, y_t]
        types = [FLOAT if h32 else DOUBLE] + [DOUBLE] * (len(outs_body) - 1)
        graph = g.helper.make_graph(
            body,
            name + "_step",
            [
                g.helper.make_tensor_value_info(v, t, None)
                for v, t in zip([*state_in, *scan_in], types[:-1] + [DOUBLE] * len(scan_in))
            ],
            [g.helper.make_tensor_value_info(v, t, None) for v, t in zip(outs_body, types)],
        )
        results = g.node(
            "Scan",
            [*states, *scanned],
            name + "_scan",
            outputs=len(outs_body),
            body=graph,
            num_scan_inputs=len(scanned),
        )
        hn.append(g.node("Cast", [results[0]], name + "_hn", to=DOUBLE) if h32 else results[0])
        if kind == "lstm":
            cn.append(results[1])
        xs = _unstacked_output(g, results[-1], dirs, name + "_y")
        x_bound, kx = h_bound, kh
    y = g.node("Transpose", [xs], base + "_bf", perm=[1, 0, 2]) if layout.batch_first else xs
    g.put(op.output, "f64", y)
    g.set_bound(op.output, h_bound)
    _put_states(g, op.h_n, hn, base + "_hn", h_bound)
    if op.c_n is not None:
        _put_states(g, op.c_n, cn, base + "_cn", c_bound)


def _put_states(g: Graph, value: Any, states: list[str], base: str, bound: int) -> None:
    """Each layer's final ``[D, N, H]`` states, as the op's ``[L * D, N, H]``."""
    g.put(value, "f64", g.node("Concat", states, base, axis=0) if len(states) > 1 else states[0])
    g.set_bound(value, bound)


WRITERS: dict[type[Operation], Writer] = {nh.RecurrentOp: recurrent}
