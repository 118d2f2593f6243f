"""Recurrent layers (LSTM, GRU, RNN with tanh or ReLU) with torch's semantics, in float and
on integer codes. Pure NumPy: the nf kernel, the nq kernel and the nh kernel all call here.

Weights come in torch's flat order, per layer and per direction (forward, then reverse):
``w_ih [G*H, F]``, ``w_hh [G*H, H]`` and, with biases, ``b_ih [G*H]``, ``b_hh [G*H]``; ``G`` is
4 for an LSTM (gates i, f, g, o), 3 for a GRU (r, z, n), 1 for an RNN. Layer ``l > 0`` reads
the concatenated forward and reverse hidden states of layer ``l - 1``.

The integer cell (:func:`run_codes`) is how integer LSTM kernels do it (CMSIS-NN's int8x8_16
LSTM, TFLite's integer LSTM, Brevitas' ``QuantLSTM``), with power-of-two scales only:

- each gate's pre-activation ``W_ih x + b_ih + W_hh h + b_hh`` is summed exactly, both products
  and both biases aligned to the finest of their exponents by left shifts (int64, checked);
- requantized to the ``gates`` grid (``exp``, ``bits``), then sigmoid or tanh by a table over
  every gate code (:func:`activation_tables`) into Q0.15 (:data:`ACT_FRAC` fraction bits, as
  CMSIS-NN's int16 gate outputs);
- the LSTM cell ``c = f c + i g`` is exact at 30 fraction bits, then requantized to the
  ``cell`` grid (16 bits by default: a power-of-two fixed point of its own width); ``tanh(c)``
  reads the cell requantized to the gates grid through the same tanh table;
- the hidden state ``h = o tanh(c)`` (GRU: ``(1 - z) n + z h``; RNN: ``tanh(a)``, ``relu(a)``)
  is requantized to the ``hidden`` grid, the activation width: the sequence output, ``h_n``,
  and what the next step and layer read.

Every rounding is the program's rounding mode; every saturation is to the target width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from nanoir.runtime.numerics import quant

__all__ = [
    "ACT_FRAC",
    "GATES",
    "MODES",
    "Grid",
    "RecurrentBoundError",
    "RecurrentLayout",
    "activation_tables",
    "run_codes",
    "run_float",
]

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
"""Gates per cell, by mode."""
MODES = tuple(GATES)
ACT_FRAC = 15
"""Fraction bits of a sigmoid/tanh table output (Q0.15: CMSIS-NN's int16 gate outputs)."""
EXP_RANGE = (-16, 32)
"""Exponents an internal grid may take: the exact cell update's shifts then stay below 2**62."""
_LIMIT = 62


class RecurrentBoundError(ValueError):
    """An integer intermediate of the cell would pass ``2**62``: the message says where."""


@dataclass(frozen=True)
class RecurrentLayout:
    """What a recurrent op computes, apart from its weights' values."""

    mode: str
    hidden: int
    layers: int = 1
    bidirectional: bool = False
    batch_first: bool = False
    has_biases: bool = True

    @property
    def dirs(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def gates(self) -> int:
        return GATES[self.mode]

    @property
    def per_cell(self) -> int:
        """Weight tensors per layer and direction."""
        return 4 if self.has_biases else 2

    def weight_shapes(self, features: int) -> list[tuple[int, ...]]:
        """torch's flat weight shapes for an input of ``features`` features."""
        gh, shapes = self.gates * self.hidden, []
        for layer in range(self.layers):
            f = features if layer == 0 else self.dirs * self.hidden
            for _ in range(self.dirs):
                shapes += [(gh, f), (gh, self.hidden)]
                if self.has_biases:
                    shapes += [(gh,), (gh,)]
        return shapes

    def cells(self, weights: Sequence[object]) -> list[list[tuple]]:
        """``weights`` as ``[layer][direction] -> (w_ih, w_hh, b_ih or None, b_hh or None)``."""
        n, out = self.per_cell, []
        for layer in range(self.layers):
            row = []
            for d in range(self.dirs):
                w = list(weights[(layer * self.dirs + d) * n : (layer * self.dirs + d + 1) * n])
                row.append((w[0], w[1], *(w[2:] if self.has_biases else (None, None))))
            out.append(row)
        return out

    def result_shapes(
        self, x: Sequence[int]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
        """Shapes of ``output``, ``h_n`` and (LSTM) ``c_n`` for an input of shape ``x``."""
        t, n = (x[1], x[0]) if self.batch_first else (x[0], x[1])
        out = (
            (n, t, self.dirs * self.hidden) if self.batch_first else (t, n, self.dirs * self.hidden)
        )
        state = (self.layers * self.dirs, n, self.hidden)
        return out, state, state if self.mode == "lstm" else None


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # no overflow warning for large |x|


Observer = Callable[[str, np.ndarray], None]
"""``observe(kind, values)``: ``kind`` is ``gates`` (a pre-activation), ``cell`` or ``hidden``."""

CodesObserver = Callable[[str, np.ndarray, np.ndarray], None]
"""``observe(kind, exact, quantized)`` in :func:`run_codes`: at each internal quantizer
(``gates``, ``cell``, ``hidden``, in :func:`run_float`'s order of the same kinds), the exact
value it requantizes and the result, both as reals (float64): what ``nanoir.report`` measures."""


def _steps(xs: np.ndarray) -> np.ndarray:
    """``xs`` (time first), refused when it has no step: torch's recurrent layers refuse an
    empty sequence too, and its final states would not exist."""
    if len(xs) == 0:
        raise ValueError("the sequence has 0 steps; a recurrent layer needs at least one")
    return xs


def run_float(
    layout: RecurrentLayout,
    x: np.ndarray,
    h0: np.ndarray | None,
    c0: np.ndarray | None,
    weights: Sequence[np.ndarray],
    observe: Observer | None = None,
) -> tuple[np.ndarray, ...]:
    """torch's ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` in eval mode, in ``x``'s float dtype;
    returns ``(output, h_n)`` and, for an LSTM, ``c_n``. ``observe`` sees every gate
    pre-activation, cell and hidden state (calibration of the internal quantizers)."""
    dt = x.dtype
    xs = _steps(np.swapaxes(x, 0, 1) if layout.batch_first else x)
    n, hsize = xs.shape[1], layout.hidden
    zeros = np.zeros((layout.layers * layout.dirs, n, hsize), dt)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0
    look = observe or (lambda kind, v: None)
    hn, cn = [], []
    for layer, row in enumerate(layout.cells([np.asarray(w, dt) for w in weights])):
        outs = []
        for d, (w_ih, w_hh, b_ih, b_hh) in enumerate(row):
            s = layer * layout.dirs + d
            ax = xs @ w_ih.T + (0 if b_ih is None else b_ih)
            bh = 0 if b_hh is None else b_hh
            h, c = h0[s], c0[s]
            ys = [None] * len(xs)
            for t in range(len(xs))[:: -1 if d else 1]:
                ah = h @ w_hh.T + bh
                if layout.mode == "lstm":
                    a = ax[t] + ah
                    look("gates", a)
                    i, f, g, o = np.split(a, 4, axis=-1)
                    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
                    look("cell", c)
                    h = _sigmoid(o) * np.tanh(c)
                elif layout.mode == "gru":
                    xr, xz, xn = np.split(ax[t], 3, axis=-1)
                    hr, hz, hn_ = np.split(ah, 3, axis=-1)
                    look("gates", np.concatenate([xr + hr, xz + hz], -1))
                    r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
                    pre_n = xn + r * hn_
                    look("gates", pre_n)
                    h = (1 - z) * np.tanh(pre_n) + z * h
                else:
                    a = ax[t] + ah
                    look("gates", a)
                    h = np.tanh(a) if layout.mode == "rnn_tanh" else np.maximum(a, 0)
                look("hidden", h)
                ys[t] = h
            outs.append(np.stack(ys))
            hn.append(h)
            cn.append(c)
        xs = np.concatenate(outs, axis=-1)
    y = np.swapaxes(xs, 0, 1) if layout.batch_first else xs
    results = (y.astype(dt), np.stack(hn).astype(dt))
    return (*results, np.stack(cn).astype(dt)) if layout.mode == "lstm" else results


# --------------------------------------------------------------------------------------------
# The integer cell
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """A per-tensor power-of-two grid: value = code * 2**-exp, ``bits`` signed bits."""

    exp: int
    bits: int


def activation_tables(gates: Grid, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``(sigmoid, tanh)`` over every code of the gates grid, ``qmin`` first, into Q0.15
    (rounded by ``mode``, saturated to ``±(2**15 - 1)``): the cell's lookup tables.

    >>> s, t = activation_tables(Grid(2, 4), "half_even")   # codes -8..7, step 1/4
    >>> [int(s[8]), int(t[8]), int(t[12]), len(s)]              # x = 0, 0, 1
    [16384, 0, 24956, 16]
    """
    codes = np.arange(quant.qmin(gates.bits), quant.qmax(gates.bits) + 1, dtype=np.float64)
    x = codes * 2.0**-gates.exp
    one = 2**ACT_FRAC

    def table(values: np.ndarray) -> np.ndarray:
        r = quant.round_to_int(values * one, mode)
        return np.clip(r, -(one - 1), one - 1).astype(np.int64)

    return table(_sigmoid(x)), table(np.tanh(x))


def _shl(a: np.ndarray, s: np.ndarray | int, where: str) -> np.ndarray:
    """``a * 2**s`` for ``s >= 0`` (broadcast), refusing a result past ``2**62``."""
    s = np.asarray(s, dtype=np.int64)
    if a.size and s.size:
        top = int(np.abs(a).max())
        if top and top.bit_length() + int(s.max()) > _LIMIT:
            raise RecurrentBoundError(
                f"{where}: |{top}| << {int(s.max())} would pass 2**{_LIMIT}; choose coarser "
                "exponents or fewer bits"
            )
    return a << s


def _aligned_sum(
    terms: Sequence[tuple[np.ndarray, np.ndarray]], where: str
) -> tuple[np.ndarray, np.ndarray]:
    """The exact sum of integer terms at exponents (broadcast per row), at the finest one."""
    e = terms[0][1]
    for _, k in terms[1:]:
        e = np.maximum(e, k)
    total = sum(_shl(a, e - k, where) for a, k in terms)
    return np.asarray(total, dtype=np.int64), e


def _requant(acc: np.ndarray, shift: np.ndarray | int, grid: Grid, mode: str) -> np.ndarray:
    return quant.requant(acc, shift, grid.bits, mode).astype(np.int64)


@dataclass(frozen=True)
class Coded:
    """Integer codes and their exponents (a scalar, or one per row of a weight)."""

    codes: np.ndarray
    exp: np.ndarray


@dataclass(frozen=True)
class _Cell:
    """One step of the integer cell: the grids, the rounding and the tables."""

    kind: str
    gates: Grid
    cell: Grid
    hidden: Grid
    mode: str
    sig: np.ndarray
    tanh: np.ndarray
    observe: CodesObserver | None = None

    def look(
        self, kind: str, acc: np.ndarray, e: np.ndarray | int, codes: np.ndarray, k: int
    ) -> None:
        """Show ``observe`` the exact ``acc * 2**-e`` and its requantized ``codes * 2**-k``."""
        if self.observe is not None:
            exact = np.ldexp(acc.astype(np.float64), -np.asarray(e, np.int64))
            self.observe(kind, exact, np.ldexp(codes.astype(np.float64), -k))

    def act(
        self, table: np.ndarray, acc: np.ndarray, e: np.ndarray | int, gate: bool = True
    ) -> np.ndarray:
        """``table`` at the accumulator ``acc`` (exponent ``e``) requantized to the gates
        grid (a gate pre-activation unless ``gate`` is False: the cell read by tanh)."""
        codes = _requant(acc, np.asarray(e) - self.gates.exp, self.gates, self.mode)
        if gate:
            self.look("gates", acc, e, codes, self.gates.exp)
        return table[codes - quant.qmin(self.gates.bits)]

    def step(
        self,
        ax: tuple[np.ndarray, np.ndarray],
        ah: tuple[np.ndarray, np.ndarray],
        h: np.ndarray,
        c: np.ndarray,
        where: str,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(h, c)`` after one step from the input part ``ax`` and hidden part ``ah`` of
        the pre-activations (codes, exponents per row)."""
        kg, a, a2 = self.gates.exp, ACT_FRAC, 2 * ACT_FRAC
        if self.kind == "gru":
            hs = h.shape[-1]
            rows = slice(0, 2 * hs)
            pre, e = _aligned_sum(
                [(ax[0][..., rows], ax[1][rows]), (ah[0][..., rows], ah[1][rows])], where
            )
            gz = self.act(self.sig, pre, e)
            r, z = gz[..., :hs], gz[..., hs:]
            n_rows = slice(2 * hs, 3 * hs)
            pre, e = _aligned_sum(
                [(ax[0][..., n_rows], ax[1][n_rows]), (r * ah[0][..., n_rows], ah[1][n_rows] + a)],
                where,
            )
            nn = self.act(self.tanh, pre, e)
            acc, e = _aligned_sum(
                [((2**a - z) * nn, np.asarray(a2)), (z * h, np.asarray(a + self.hidden.exp))], where
            )
            return self.hidden_codes(acc, e), c
        pre, e = _aligned_sum([ax, ah], where)
        if self.kind == "rnn_relu":
            return self.hidden_codes(np.maximum(pre, 0), e), c
        if self.kind == "rnn_tanh":
            t = self.act(self.tanh, pre, e)
            return self.hidden_codes(t, a), c
        hs = h.shape[-1]
        codes = _requant(pre, e - kg, self.gates, self.mode)
        self.look("gates", pre, e, codes, kg)
        g = codes - quant.qmin(self.gates.bits)
        i, f = self.sig[g[..., :hs]], self.sig[g[..., hs : 2 * hs]]
        gg, o = self.tanh[g[..., 2 * hs : 3 * hs]], self.sig[g[..., 3 * hs :]]
        acc, e = _aligned_sum(
            [(f * c, np.asarray(a + self.cell.exp)), (i * gg, np.asarray(a2))], where
        )
        c = _requant(acc, e - self.cell.exp, self.cell, self.mode)
        self.look("cell", acc, e, c, self.cell.exp)
        tc = self.act(self.tanh, c, self.cell.exp, gate=False)
        return self.hidden_codes(o * tc, a2), c

    def hidden_codes(self, acc: np.ndarray, e: np.ndarray | int) -> np.ndarray:
        """``acc * 2**-e`` requantized to the hidden grid."""
        h = _requant(acc, np.asarray(e) - self.hidden.exp, self.hidden, self.mode)
        self.look("hidden", acc, e, h, self.hidden.exp)
        return h


def run_codes(
    layout: RecurrentLayout,
    x: Coded,
    h0: Coded | None,
    c0: Coded | None,
    weights: Sequence[Coded],
    gates: Grid,
    cell: Grid,
    hidden: Grid,
    mode: str,
    tables: tuple[np.ndarray, np.ndarray] | None = None,
    observe: CodesObserver | None = None,
) -> tuple[np.ndarray, ...]:
    """The integer recurrent layer on int64 codes (module docstring): ``(output, h_n)``
    codes on the ``hidden`` grid and, for an LSTM, ``c_n`` on the ``cell`` grid. The time loop
    is sequential; each step is vectorised over the batch and the gates. ``tables`` are
    :func:`activation_tables` (computed when None); ``observe`` sees every internal
    requantization (:data:`CodesObserver`)."""
    sig, tanh = activation_tables(gates, mode) if tables is None else tables
    step = _Cell(layout.mode, gates, cell, hidden, str(mode), sig, tanh, observe)
    xs = _steps(np.swapaxes(x.codes, 0, 1) if layout.batch_first else x.codes)
    xs, kx = xs.astype(np.int64), np.asarray(x.exp, np.int64)
    states = (layout.layers * layout.dirs, xs.shape[1], layout.hidden)
    h_init = np.zeros(states, np.int64)
    c_init = np.zeros(states, np.int64)
    if h0 is not None:
        shift = np.asarray(h0.exp) - hidden.exp
        h_init = _requant(h0.codes.astype(np.int64), shift, hidden, mode)
    if c0 is not None:
        c_init = _requant(c0.codes.astype(np.int64), np.asarray(c0.exp) - cell.exp, cell, mode)
    hn, cn = [], []
    for layer, row in enumerate(layout.cells(weights)):
        outs = []
        for d, (w_ih, w_hh, b_ih, b_hh) in enumerate(row):
            s = layer * layout.dirs + d
            where = f"layer {layer}{' reverse' if d else ''}"
            # The input part of every step at once: x W_ih^T (+ b_ih), exact.
            ax = (xs @ w_ih.codes.T.astype(np.int64), _rows(kx + w_ih.exp, w_ih))
            if b_ih is not None:
                ax = _aligned_sum([ax, (b_ih.codes.astype(np.int64), _rows(b_ih.exp, w_ih))], where)
            wh = w_hh.codes.T.astype(np.int64)
            kh = _rows(hidden.exp + w_hh.exp, w_hh)
            h, c = h_init[s], c_init[s]
            ys = [np.empty(0)] * len(xs)
            for t in range(len(xs))[:: -1 if d else 1]:
                ah = (h @ wh, kh)
                if b_hh is not None:
                    ah = _aligned_sum(
                        [ah, (b_hh.codes.astype(np.int64), _rows(b_hh.exp, w_hh))], where
                    )
                h, c = step.step((ax[0][t], ax[1]), ah, h, c, where)
                ys[t] = h
            outs.append(np.stack(ys))
            hn.append(h)
            cn.append(c)
        xs, kx = np.concatenate(outs, axis=-1), np.asarray(hidden.exp, np.int64)
    y = np.swapaxes(xs, 0, 1) if layout.batch_first else xs
    return (y, np.stack(hn), np.stack(cn)) if layout.mode == "lstm" else (y, np.stack(hn))


def _rows(exp: np.ndarray, weight: Coded) -> np.ndarray:
    """Exponents as one per gate row (a per-tensor exponent repeated)."""
    return np.broadcast_to(np.asarray(exp, np.int64).reshape(-1), (weight.codes.shape[0],)).copy()
