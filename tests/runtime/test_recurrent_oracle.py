"""The integer recurrent cell (LSTM, GRU, RNN) against oracles written here, not against
``nanoir.runtime.numerics`` (which nq and nh both call, so no nq == nh test can see a mistake
in it):

- a float64 reference (torch's ``LSTMCell`` / ``GRUCell`` / ``RNNCell``) of one step from any
  ``h0``/``c0``, with an error bound derived below from the grids, at gate, hidden and input
  widths of 2 to 16 bits and every rounding mode;
- the integer LSTM arithmetic of TFLite's and CMSIS-NN's reference kernels, written again here
  with Python integers, bit for bit over several steps;
- the sigmoid/tanh tables against float64 at every gate width, table ends included.

The one-step bound. With ``s_g``, ``s_c``, ``s_h`` the gates, cell and hidden steps, ``r`` the
rounding's worst error in steps (1 for trunc and floor, 1/2 for the half modes) and ``u =
2**-15`` (a table entry is within one Q0.15 step of the function, saturation included):

- ``h0`` requantized onto the hidden grid moves by ``dh0 <= r s_h`` (0 when its own grid is
  coarser: a left shift), ``c0`` by ``dc0 <= r s_c``; a pre-activation then moves by ``A =
  sum |W_hh| dh0`` (it is summed exactly), and its gate code by ``r s_g + A``;
- sigmoid is 1/4-Lipschitz, tanh 1-Lipschitz: ``|di| <= (r s_g + A) / 4 + u``, ``|dg| <= r s_g
  + A + u``;
- LSTM: ``c = f c0 + i g`` is exact before its requant, so ``|dc| <= |df| (|c0| + dc0) + |f| dc0
  + |di| (|g| + |dg|) + |i| |dg| + r s_c``; ``tanh(c)`` reads ``c`` on the gates grid:
  ``|dt| <= |dc| + r s_g + u``; ``|dh| <= |do| + |o| |dt| + s_h`` (the last term one step:
  rounding or saturation at the grid's end);
- GRU (``r`` in ``|r|`` and ``dr`` is the reset gate): ``|dn| <= |dr| (|W_hn h + b_hn| +
  A_n) + |r| A_n + r s_g + u``, ``|dh| <= |1 - z| |dn| + |dz| (|h0| + dh0 + |n| + |dn|) + |z|
  dh0 + s_h``; RNN: tanh ``r s_g + A + u + s_h``, relu ``A + s_h``.

The bound holds while no pre-activation and no cell value passes the gates grid: the programs
here choose grids that cover them, as quantize's calibration does (and one test checks that
quantize's grids do).
"""

from __future__ import annotations

import zlib
from fractions import Fraction

import numpy as np
import pytest
import torch
from nanoir.dialects import nh
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nf import array_values

import nanoir

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
MODES = ("trunc", "floor", "half_up", "half_even")
U = 2.0**-15


def rounding_error(mode: str) -> float:
    """The worst error of one requant, in steps (before saturation)."""
    return 1.0 if mode in ("trunc", "floor") else 0.5


def fmt(a: np.ndarray) -> str:
    """An array as an MLIR dense literal (dyadic floats print exactly)."""
    a = np.asarray(a)
    if a.dtype.kind != "i":
        a = a.astype(np.float64)
    return np.array2string(a, separator=", ", threshold=10**6, floatmode="unique").replace("\n", "")


def tensor(shape: tuple[int, ...]) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def on_grid(rng: np.random.Generator, shape: tuple[int, ...], bits: int, exp: int, spread=1.0):
    """Random values on a signed ``bits``-bit grid at ``exp`` (a fake-quant leaves them)."""
    top = 2 ** (bits - 1) - 1
    codes = np.clip(np.round(rng.standard_normal(shape) * spread * top / 3), -top, top)
    return codes * 2.0**-exp


def fits(values: np.ndarray, bits: int) -> int:
    """The finest exponent whose ``bits``-bit grid holds every value (NanoEngine's absmax rule
    with room to spare)."""
    top = float(np.abs(values).max(initial=0.0))
    return int(np.floor(np.log2((2 ** (bits - 1) - 1) / max(top, 1e-9))))


def cell_program(mode, n, f, h, weights, grids, rounding) -> str:
    """One layer, batch first, one step: ``x``, ``h0`` (and ``c0``) through their own
    fake-quants (``grids["x"]``, ``["h0"]``, ``["c0"]``), constant weights on their grids, the
    internal grids given. Returns (output, h_n[, c_n])."""
    lstm = mode == "lstm"
    state = (1, n, h)
    xs, hs = (n, 1, f), state
    args = [f"%x: {tensor(xs)}", f"%h0: {tensor(hs)}"] + ([f"%c0: {tensor(hs)}"] if lstm else [])
    lines = []

    def fq(name: str, src: str, shape, grid) -> None:
        bits, exp = grid
        exp = np.asarray(exp, np.int64)  # one, or one per row of a weight
        etype = "1" if exp.size == 1 else f"{shape[0]}" + "x1" * (len(shape) - 1)
        edense = (
            str(int(exp.reshape(-1)[0]))
            if exp.size == 1
            else fmt(exp.reshape((-1,) + (1,) * (len(shape) - 1)))
        )
        lines.append(
            f"  %{name} = nq.fake_quant %{src} {{bits = {bits} : i64, exp = dense<{edense}> : "
            f"tensor<{etype}xi8>}} : {tensor(shape)}"
        )

    fq("xq", "x", xs, grids["x"])
    fq("hq", "h0", hs, grids["h0"])
    if lstm:
        fq("cq", "c0", hs, grids["c0"])
    names = []
    for i, (w, grid) in enumerate(weights):
        lines.append(f"  %w{i} = nf.constant dense<{fmt(w)}> : {tensor(w.shape)}")
        fq(f"w{i}q", f"w{i}", w.shape, grid)
        names.append((f"%w{i}q", tensor(w.shape)))
    results = [tensor((n, 1, h)), tensor(state)] + ([tensor(state)] if lstm else [])
    g, c, hh = grids["gates"], grids["cell"], grids["hidden"]
    outs = "%y, %hn" + (", %cn" if lstm else "")
    lines.append(
        f"  {outs} = nf.recurrent %xq : {tensor(xs)} h0(%hq : {tensor(hs)}) "
        + (f"c0(%cq : {tensor(hs)}) " if lstm else "")
        + f"weights({', '.join(a for a, _ in names)} : {', '.join(t for _, t in names)}) "
        f'{{mode = "{mode}", hidden_size = {h} : i64, num_layers = 1 : i64, '
        f"bidirectional = false, batch_first = true, has_biases = true, "
        f"gates = array<i64: {g[1]}, {g[0]}>, cell = array<i64: {c[1]}, {c[0]}>, "
        f'hidden = array<i64: {hh[1]}, {hh[0]}>, rounding = "{rounding}"}} -> {", ".join(results)}'
    )
    lines.append(f"  func.return {outs} : {', '.join(results)}")
    return (
        f"func.func @main({', '.join(args)}) -> ({', '.join(results)}) {{\n"
        + "\n".join(lines)
        + "\n}\n"
    )


def torch_cell(mode, x, h0, c0, w):
    """One step of torch's cell in float64: (h, c or None, and the intermediates)."""
    wi, wh, bi, bh = (torch.tensor(a, dtype=torch.float64) for a in w)
    xt, ht = torch.tensor(x, dtype=torch.float64), torch.tensor(h0, dtype=torch.float64)
    ax, ah = xt @ wi.T + bi, ht @ wh.T + bh
    if mode == "lstm":
        i, f, g, o = (ax + ah).chunk(4, -1)
        i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
        c = f * torch.tensor(c0, dtype=torch.float64) + i * g
        hn = o * torch.tanh(c)
        # the same as torch's own cell (the reference's reference)
        cell = torch.nn.LSTMCell(x.shape[-1], h0.shape[-1]).double()
        with torch.no_grad():
            for p, a in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), w):
                p.copy_(torch.tensor(a))
            th, tc = cell(xt, (ht, torch.tensor(c0, dtype=torch.float64)))
        assert torch.allclose(th, hn, atol=1e-12) and torch.allclose(tc, c, atol=1e-12)
        parts = {"i": i, "f": f, "g": g, "o": o, "pre": ax + ah}
        return hn.numpy(), c.numpy(), {k: v.numpy() for k, v in parts.items()}
    if mode == "gru":
        xr, xz, xn = ax.chunk(3, -1)
        hr, hz, hn_ = ah.chunk(3, -1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn_)
        hnew = (1 - z) * n + z * ht
        cell = torch.nn.GRUCell(x.shape[-1], h0.shape[-1]).double()
        with torch.no_grad():
            for p, a in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh), w):
                p.copy_(torch.tensor(a))
            assert torch.allclose(cell(xt, ht), hnew, atol=1e-12)
        pre = torch.cat([xr + hr, xz + hz, xn + r * hn_], -1)
        parts = {"r": r, "z": z, "n": n, "hn": hn_, "pre": pre}
        return hnew.numpy(), None, {k: v.numpy() for k, v in parts.items()}
    a = ax + ah
    hnew = torch.tanh(a) if mode == "rnn_tanh" else torch.relu(a)
    return hnew.numpy(), None, {"pre": a.numpy()}


def one_step_bound(mode, parts, h0, c0, wh, grids, rounding):
    """The bound of the module docstring, per element of h (and of c for an LSTM)."""
    r = rounding_error(rounding)
    sg, sc, sh = (2.0 ** -grids[k][1] for k in ("gates", "cell", "hidden"))
    dh0 = r * sh if grids["h0"][1] > grids["hidden"][1] else 0.0
    a = np.abs(wh).sum(axis=1) * dh0  # per gate row
    hsz = h0.shape[-1]
    if mode == "lstm":
        dc0 = r * sc if grids["c0"][1] > grids["cell"][1] else 0.0
        ai, af, ag, ao = np.split(a, 4)
        di, df, do = (r * sg + ai) / 4 + U, (r * sg + af) / 4 + U, (r * sg + ao) / 4 + U
        dg = r * sg + ag + U
        f, i, g, o = parts["f"], parts["i"], parts["g"], parts["o"]
        dc = df * (np.abs(c0) + dc0) + np.abs(f) * dc0 + di * (np.abs(g) + dg)
        dc = dc + np.abs(i) * dg + r * sc
        dt = dc + r * sg + U
        return do + np.abs(o) * dt + sh, dc
    if mode == "gru":
        ar, az, an = np.split(a, 3)
        dr, dz = (r * sg + ar) / 4 + U, (r * sg + az) / 4 + U
        dn = dr * (np.abs(parts["hn"]) + an) + np.abs(parts["r"]) * an + r * sg + U
        z, n = parts["z"], parts["n"]
        dh = np.abs(1 - z) * dn + dz * (np.abs(h0) + dh0 + np.abs(n) + dn) + np.abs(z) * dh0
        return dh + sh, None
    assert a.shape == (hsz,)
    if mode == "rnn_tanh":
        return r * sg + a + U + sh, None
    return a + sh, None


def make_case(seed: int, mode: str, bits: dict, h0_finer: bool):
    """A random one-step cell whose grids cover every intermediate (the bound's premise), with
    ``h0`` and ``c0`` on grids two steps finer or one step coarser than the hidden and cell
    grids."""
    rng = np.random.default_rng(seed)
    n, f, h = 5, 3, 2
    rows = GATES[mode] * h
    w = [
        on_grid(rng, (rows, f), 8, 7),
        on_grid(rng, (rows, h), 8, 7),
        on_grid(rng, (rows,), 8, 8),
        on_grid(rng, (rows,), 8, 8),
    ]
    xbits = bits["x"]
    x = on_grid(rng, (n, f), xbits, xbits - 2)  # |x| < 2
    bh = bits["hidden"]
    # the hidden grid holds |h| < 1 (tanh-bounded) or, for relu, |h| < 16
    k_hidden = bh - 1 if mode != "rnn_relu" else bh - 5
    k_h0 = k_hidden + (2 if h0_finer else -1)
    top = min((2 ** (bh - 1) - 1) * 2.0**-k_hidden, (2**15 - 1) * 2.0**-k_h0)
    h0 = np.round(rng.uniform(-top, top, (1, n, h)) * 2.0**k_h0) * 2.0**-k_h0
    k_cell, k_c0 = 12, 14 if h0_finer else 11
    c0 = np.round(rng.uniform(-1.9, 1.9, (1, n, h)) * 2.0**k_c0) * 2.0**-k_c0
    hidden, c, parts = torch_cell(mode, x, h0[0], c0[0], w)
    cover = [np.abs(parts["pre"]).max() * 1.05 + 0.1]
    if mode == "lstm":
        cover.append(np.abs(c).max() * 1.05 + 0.1)  # tanh(c) reads c on the gates grid
    grids = {
        "x": (xbits, xbits - 2),
        "h0": (16, k_h0),
        "c0": (16, k_c0),
        "gates": (bits["gates"], fits(np.array(cover), bits["gates"])),
        "cell": (16, k_cell),
        "hidden": (bh, k_hidden),
    }
    return x, h0, c0, w, grids, hidden, c, parts


def run_levels(text: str, inputs: list[np.ndarray]):
    """The nq program's results in float64 and the nh program's (dequantized), which must be
    equal; returns the nq results."""
    nq_mod = nanoir.parse(text)
    nq_out = nanoir.run(nq_mod, *inputs, dtype=np.float64)
    nh_out = nanoir.run(nanoir.lower_to_hw(nanoir.parse(text)), *inputs)
    for a, b in zip(nq_out, nh_out):
        np.testing.assert_array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return nq_out


WIDTHS = [
    {"gates": 2, "hidden": 4, "x": 4},
    {"gates": 4, "hidden": 4, "x": 8},
    {"gates": 8, "hidden": 8, "x": 8},
    {"gates": 12, "hidden": 16, "x": 16},
    {"gates": 16, "hidden": 8, "x": 2},
]


@pytest.mark.parametrize("mode", list(GATES))
@pytest.mark.parametrize("bits", WIDTHS, ids=lambda b: "g{gates}h{hidden}x{x}".format(**b))
@pytest.mark.parametrize("h0_finer", [True, False], ids=["h0-finer", "h0-coarser"])
def test_one_step_within_the_bound_of_torch(mode, bits, h0_finer):
    """One step from an ``h0`` (and ``c0``) NOT on the hidden (cell) grid, against torch's
    float64 cell, within the module docstring's bound, at every rounding mode.

    kills: ``h0`` requantized onto the hidden grid with the wrong sign of the shift
    (``hidden.exp - h0.exp``; every other test passes ``h0`` already on the hidden grid);
    ``c0`` likewise; the sigmoid and tanh tables swapped; the cell's products aligned to the
    wrong exponent (``f c`` at 30 fraction bits)."""
    # (16-bit gates: one mode, the 2**16-entry tables are slow to build; the tables test and
    # the exact LSTM cover the modes)
    for rounding in MODES if bits["gates"] < 16 else ("half_even",):
        seed = zlib.crc32(repr((mode, bits, h0_finer, rounding)).encode())
        x, h0, c0, w, grids, hidden, c, parts = make_case(seed, mode, bits, h0_finer)
        text = cell_program(
            mode,
            x.shape[0],
            x.shape[1],
            h0.shape[-1],
            list(zip(w, [(8, 7), (8, 7), (8, 8), (8, 8)])),
            grids,
            rounding,
        )
        inputs = [x[:, None, :].astype(np.float32), h0.astype(np.float32)]
        if mode == "lstm":
            inputs.append(c0.astype(np.float32))
        out = run_levels(text, inputs)
        bound_h, bound_c = one_step_bound(mode, parts, h0[0], c0[0], w[1], grids, rounding)
        err_h = np.abs(np.asarray(out[1], np.float64)[0] - hidden)
        assert (err_h <= bound_h).all(), (rounding, grids, err_h.max(), bound_h.min())
        np.testing.assert_array_equal(out[0][:, 0, :], out[1][0])
        if mode == "lstm":
            err_c = np.abs(np.asarray(out[2], np.float64)[0] - c)
            assert (err_c <= bound_c).all(), (rounding, grids, err_c.max(), bound_c.min())


def float_lstm_program(n: int, f: int, h: int, w: list[np.ndarray]) -> str:
    """A float (nf) LSTM step with ``h0`` and ``c0`` inputs, for quantize to calibrate."""
    xs, st = (n, 1, f), (1, n, h)
    consts = "\n".join(
        f"  %w{i} = nf.constant dense<{fmt(a)}> : {tensor(a.shape)}" for i, a in enumerate(w)
    )
    ws = ", ".join(f"%w{i}" for i in range(4))
    wt = ", ".join(tensor(a.shape) for a in w)
    outs = f"{tensor((n, 1, h))}, {tensor(st)}, {tensor(st)}"
    return (
        f"func.func @main(%x: {tensor(xs)}, %h0: {tensor(st)}, %c0: {tensor(st)}) -> ({outs}) {{\n"
        f"{consts}\n"
        f"  %y, %hn, %cn = nf.recurrent %x : {tensor(xs)} h0(%h0 : {tensor(st)}) "
        f'c0(%c0 : {tensor(st)}) weights({ws} : {wt}) {{mode = "lstm", hidden_size = {h} : i64, '
        "num_layers = 1 : i64, bidirectional = false, batch_first = true, has_biases = true} "
        f"-> {outs}\n"
        f"  func.return %y, %hn, %cn : {outs}\n}}\n"
    )


def recurrent_grids(module) -> tuple[nh.RecurrentOp, dict]:
    """The nh.recurrent op of a lowered program and its grids, as ``(bits, exp)``, with the
    grids its inputs were quantized to (the function's ``nq.bits``/``nq.exp``)."""
    func = next(iter(module.body.block.ops))
    op = next(o for o in func.body.block.ops if isinstance(o, nh.RecurrentOp))
    grids = {k: (op.grid(k).bits, op.grid(k).exp) for k in ("gates", "cell", "hidden")}
    for name, arg in zip(("x", "h0", "c0"), func.body.block.args):
        attrs = func.arg_attrs.data[arg.index].data  # type: ignore[union-attr]
        exp = np.asarray(dense_to_numpy(attrs["nq.exp"])).reshape(-1)
        assert exp.size == 1
        grids[name] = (attrs["nq.bits"].value.data, int(exp[0]))
    return op, grids


def constant_values(value) -> np.ndarray:
    """The real values of an nh constant: codes times 2**-exp (per row or per tensor)."""
    const = value.owner
    codes = np.asarray(dense_to_numpy(const.value), np.float64)
    exps = np.asarray(nh.fixed_of(value).exp_list, np.float64)
    return codes * 2.0 ** -(exps.reshape((-1,) + (1,) * (codes.ndim - 1)))


def test_quantize_gates_grid_covers_the_cell_tanh_reads():
    """An LSTM whose cell grows past its gate pre-activations (|pre| < 0.7, |c| > 1.2):
    quantize calibrates the grids on this batch, and the integer step stays within the one-step
    bound of torch's float64 cell on that batch. The bound assumes ``tanh(c)`` reads ``c`` on a
    gates grid that holds it, which is quantize's rule.

    kills: the gates grid calibrated on the gate pre-activations only (not the cell, which
    ``tanh`` reads through the same grid): ``tanh(c)`` then saturates at the gates grid's end
    (about ``tanh(0.65)`` for ``tanh(1.5)``)."""
    rng = np.random.default_rng(31)
    n, f, h = 6, 3, 2
    w = [
        np.round(rng.uniform(-0.1, 0.1, (4 * h, f)) * 64) / 64,
        np.round(rng.uniform(-0.1, 0.1, (4 * h, h)) * 64) / 64,
        np.full(4 * h, 0.25),
        np.full(4 * h, 0.25),
    ]
    x = np.round(rng.uniform(-1, 1, (n, 1, f)) * 8) / 8
    h0 = np.round(rng.uniform(-0.5, 0.5, (1, n, h)) * 16) / 16
    c0 = np.round(rng.uniform(-2, 2, (1, n, h)) * 16) / 16
    inputs = [x.astype(np.float32), h0.astype(np.float32), c0.astype(np.float32)]
    module = nanoir.parse(float_lstm_program(n, f, h, w))
    nanoir.quantize(module, [tuple(inputs)])
    nq_out = nanoir.run(module, *inputs, dtype=np.float64)
    hw = nanoir.lower_to_hw(module.clone())
    op, grids = recurrent_grids(hw)
    for name, v in (("x", x), ("h0", h0), ("c0", c0)):  # on their calibrated grids already
        assert (v * 2.0 ** grids[name][1] == np.round(v * 2.0 ** grids[name][1])).all(), name
    weights = [constant_values(v) for v in op.weights]
    hidden, c, parts = torch_cell("lstm", x[:, 0], h0[0], c0[0], weights)
    assert np.abs(parts["pre"]).max() < 0.7 < 1.2 < np.abs(c).max()  # the case's premise
    bound_h, bound_c = one_step_bound("lstm", parts, h0[0], c0[0], weights[1], grids, "trunc")
    err_h = np.abs(np.asarray(nq_out[1], np.float64)[0] - hidden)
    err_c = np.abs(np.asarray(nq_out[2], np.float64)[0] - c)
    assert (err_c <= bound_c).all(), (grids, err_c.max())
    assert (err_h <= bound_h).all(), (grids, err_h.max(), bound_h.min())
    np.testing.assert_array_equal(nanoir.run(hw, *inputs)[1], nq_out[1])


# --------------------------------------------------------------------------------------------
# The sigmoid and tanh tables
# --------------------------------------------------------------------------------------------


def rnn_program(n: int, gates: tuple[int, int], rounding: str, mode: str = "rnn_tanh") -> str:
    """A one-unit RNN on a 2-feature input with the given gates grid ``(bits, exp)``."""
    xs, st = (n, 1, 2), (1, n, 1)
    return (
        f"func.func @main(%x: {tensor(xs)}) -> {tensor((n, 1, 1))} {{\n"
        f"  %xq = nq.fake_quant %x {{bits = 8 : i64, exp = dense<5> : tensor<1xi8>}} : {tensor(xs)}\n"
        "  %wi = nf.constant dense<[[1.0, -0.5]]> : tensor<1x2xf32>\n"
        "  %wiq = nq.fake_quant %wi {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<1x2xf32>\n"
        "  %wh = nf.constant dense<[[0.5]]> : tensor<1x1xf32>\n"
        "  %whq = nq.fake_quant %wh {bits = 8 : i64, exp = dense<6> : tensor<1xi8>} : tensor<1x1xf32>\n"
        f"  %y, %h = nf.recurrent %xq : {tensor(xs)} weights(%wiq, %whq : tensor<1x2xf32>, "
        f'tensor<1x1xf32>) {{mode = "{mode}", hidden_size = 1 : i64, num_layers = 1 : i64, '
        "bidirectional = false, batch_first = true, has_biases = false, "
        f"gates = array<i64: {gates[1]}, {gates[0]}>, cell = array<i64: 12, 16>, "
        f'hidden = array<i64: 15, 16>, rounding = "{rounding}"}} -> {tensor((n, 1, 1))}, '
        f"{tensor(st)}\n"
        f"  func.return %y : {tensor((n, 1, 1))}\n}}\n"
    )


def lowered_tables(gates: tuple[int, int], rounding: str) -> tuple[np.ndarray, np.ndarray]:
    hw = nanoir.lower_to_hw(nanoir.parse(rnn_program(1, gates, rounding)))
    op = next(o for o in next(iter(hw.body.block.ops)).body.block.ops if o.name == "nh.recurrent")
    return (
        np.asarray(array_values(op.sigmoid_table), np.int64),
        np.asarray(array_values(op.tanh_table), np.int64),
    )


@pytest.mark.parametrize("bits", range(2, 17))
def test_activation_tables_within_a_step_of_float64(bits: int):
    """Each table entry against ``2**15 f(x)`` in float64 (``f`` = sigmoid, tanh; ``x`` every
    code of the gates grid), at every gate width 2..16, every rounding mode and three grids: a
    fine one, one whose ends reach the functions' tails, and a coarse one (step 8) whose ends
    saturate. Bound: Q0.15 holds ``-(2**15 - 1)..2**15 - 1`` (``|t| <= 32767``); within it, the
    half modes are within 1/2 of the exact value, trunc below 1 toward zero, floor below 1
    downward; the ends are the function's limits rounded then saturated.

    kills: the tables saturating one step late (to ``±2**15``, which Q0.15 does not hold: the
    ends of a coarse grid came out ±32768); rounding half to even whatever the mode; the table
    shifted by one code (``qmin + 1`` first)."""
    one = 2**15
    for exp in (bits + 1, 1, -3) if bits < 16 else (1, -3):  # (2**16 entries: slow to build)
        codes = np.arange(-(2 ** (bits - 1)), 2 ** (bits - 1), dtype=np.float64)
        x = codes * 2.0**-exp
        for rounding in MODES:
            sig, tanh = lowered_tables((bits, exp), rounding)
            with np.errstate(over="ignore"):
                sigmoid = 1 / (1 + np.exp(-x))
            for table, f in ((sig, sigmoid), (tanh, np.tanh(x))):
                exact = f * one
                assert len(table) == len(codes) and (np.abs(table) <= one - 1).all(), (
                    exp,
                    rounding,
                )
                inside = np.abs(exact) <= one - 1
                err = table[inside] - exact[inside]
                if rounding in ("half_up", "half_even"):
                    assert (np.abs(err) <= 0.5).all(), (exp, rounding, np.abs(err).max())
                elif rounding == "floor":
                    assert ((err <= 0) & (err > -1)).all(), (exp, rounding)
                else:
                    assert (
                        (np.abs(table[inside]) <= np.abs(exact[inside])) & (np.abs(err) < 1)
                    ).all()
                # past Q0.15's range: the limit, saturated
                outside = ~inside
                want = np.where(exact[outside] > 0, one - 1, -(one - 1))
                np.testing.assert_array_equal(table[outside], want, err_msg=f"{exp} {rounding}")


# --------------------------------------------------------------------------------------------
# The integer LSTM of TFLite's and CMSIS-NN's reference kernels, in Python integers
# --------------------------------------------------------------------------------------------
#
# CMSIS-NN's int8x8_16 LSTM step (arm_nn_lstm_step_s8: calculate_gate, update_cell_state,
# update_output) and TFLite's integer LSTM reference compute, per step:
#   gate = act(requant(x W_ih + b) + requant(h W_hh + b))   int16 gate in Q0.15 (sigmoid/tanh)
#   c    = c f >> 15 + i g >> (30 + cell_scale)              int16 cell, saturated
#   h    = requant(o tanh(c))                                int8 hidden
# with a float scale per tensor turned into a multiplier and a shift. nanoir keeps that
# structure with power-of-two scales only, so that its scales are shifts: one exact sum of both
# products and both biases before a single requant to the gates grid (CMSIS requantizes each
# product, then adds), activation by a table over every gate code (CMSIS evaluates its Q3.12
# sigmoid/tanh by interpolation), and the cell update exact at 30 fraction bits before one
# requant (CMSIS rounds each of the two terms). Below, that arithmetic again in Python integers
# (unbounded, so no overflow can hide), from the nh.recurrent documentation.


def sigmoid64(v: float) -> float:
    return 1 / (1 + np.exp(-v)) if v > -700 else 0.0


def shift_round(a: int, s: int, mode: str) -> int:
    """``a * 2**-s`` rounded by ``mode`` (a left shift when ``s <= 0``)."""
    if s <= 0:
        return a << -s
    q, rem = divmod(a, 1 << s)  # floor division: rem in [0, 2**s)
    half = 1 << (s - 1)
    if mode == "floor":
        return q
    if mode == "trunc":
        return q + 1 if a < 0 and rem else q
    if mode == "half_up":
        return q + 1 if rem >= half else q
    assert mode == "half_even"
    return q + 1 if rem > half or (rem == half and q % 2) else q


def saturate(v: int, bits: int) -> int:
    return max(-(2 ** (bits - 1)), min(2 ** (bits - 1) - 1, v))


def real_round(v: Fraction, mode: str) -> int:
    """A real value rounded to an integer by ``mode``."""
    den = v.denominator
    return shift_round(v.numerator * (1 << 64) // den, 64, mode) if den > 1 else v.numerator


def q15_table(f, kg: int, bits: int, mode: str) -> list[int]:
    """``f`` at every gate code (qmin first) in Q0.15, rounded by ``mode``, saturated to
    ``±(2**15 - 1)`` (the symmetric int16 range CMSIS-NN's gates use)."""
    out = []
    for q in range(-(2 ** (bits - 1)), 2 ** (bits - 1)):
        v = Fraction(f(q * 2.0**-kg)) * 2**15
        out.append(max(-(2**15 - 1), min(2**15 - 1, real_round(v, mode))))
    return out


def reference_lstm(x, h0, c0, w, grids, mode):
    """The integer LSTM on codes: ``x [N, T, F]`` at ``grids["x"]``, ``h0``/``c0 [N, H]`` codes
    at their own grids, ``w`` = ``[(codes, exps per row)]`` for W_ih, W_hh, b_ih, b_hh. Returns
    the hidden codes of every step ``[N, T, H]`` and the last cell codes."""
    (bg, kg), (bc, kc), (bh, kh) = grids["gates"], grids["cell"], grids["hidden"]
    sig = q15_table(sigmoid64, kg, bg, mode)
    tanh = q15_table(np.tanh, kg, bg, mode)
    qmin = -(2 ** (bg - 1))
    (wi, ki), (wh, kwh), (bi, kbi), (bhh, kbh) = w
    kx = grids["x"][1]
    n, t_steps, _ = x.shape
    rows = len(bi)
    hsz = rows // 4
    out = np.zeros((n, t_steps, hsz), np.int64)
    c_last = np.zeros((n, hsz), np.int64)
    for b in range(n):
        h = [saturate(shift_round(int(v), grids["h0"][1] - kh, mode), bh) for v in h0[b]]
        c = [saturate(shift_round(int(v), grids["c0"][1] - kc, mode), bc) for v in c0[b]]
        for t in range(t_steps):
            gate = []
            for j in range(rows):
                terms = [
                    (sum(int(x[b, t, i]) * int(wi[j, i]) for i in range(x.shape[2])), kx + ki[j]),
                    (int(bi[j]), kbi[j]),
                    (sum(h[k] * int(wh[j, k]) for k in range(hsz)), kh + kwh[j]),
                    (int(bhh[j]), kbh[j]),
                ]
                e = max(k for _, k in terms)
                pre = sum(v << (e - k) for v, k in terms)  # exact
                gate.append(saturate(shift_round(pre, e - kg, mode), bg) - qmin)
            for k in range(hsz):
                i, f = sig[gate[k]], sig[gate[hsz + k]]
                g, o = tanh[gate[2 * hsz + k]], sig[gate[3 * hsz + k]]
                e = max(15 + kc, 30)  # f c at 15 + kc fraction bits, i g at 30
                acc = (f * c[k] << (e - 15 - kc)) + (i * g << (e - 30))
                c[k] = saturate(shift_round(acc, e - kc, mode), bc)
                tc = tanh[saturate(shift_round(c[k], kc - kg, mode), bg) - qmin]
                h_k = saturate(shift_round(o * tc, 30 - kh, mode), bh)
                out[b, t, k] = h_k
            h = list(out[b, t])
        c_last[b] = c
    return out, c_last


def lstm_program(n, t, f, h, weights, grids, rounding) -> str:
    """:func:`cell_program` over ``t`` steps."""
    return (
        cell_program("lstm", n, f, h, weights, grids, rounding)
        .replace(f"{n}x1x{f}x", f"{n}x{t}x{f}x")
        .replace(f"{n}x1x{h}x", f"{n}x{t}x{h}x")
    )


@pytest.mark.parametrize("gate_bits", [3, 8, 12])
@pytest.mark.parametrize("mode", MODES)
def test_lstm_equals_the_reference_integer_arithmetic(gate_bits: int, mode: str):
    """Four steps of an integer LSTM, bit for bit against :func:`reference_lstm` (the
    TFLite/CMSIS-NN integer LSTM with power-of-two scales), from ``h0`` and ``c0`` off the
    hidden and cell grids, with per-row weight exponents and a coarse gates grid whose table
    ends saturate.

    kills: ``h0`` or ``c0`` requantized with the wrong sign of the shift; the tables saturating
    one step late; the cell's two products aligned to the wrong exponent (``f c`` at 30
    fraction bits)."""
    rng = np.random.default_rng(gate_bits * 10 + MODES.index(mode))
    n, t, f, h = 3, 4, 3, 2
    kw = rng.integers(5, 8, 4 * h)
    wi = np.clip(np.round(rng.standard_normal((4 * h, f)) * 40), -127, 127)
    wh = np.clip(np.round(rng.standard_normal((4 * h, h)) * 40), -127, 127)
    bi = np.clip(np.round(rng.standard_normal(4 * h) * 40), -127, 127)
    bhh = np.clip(np.round(rng.standard_normal(4 * h) * 40), -127, 127)
    kg = {3: -2, 8: 4, 12: 9}[gate_bits]  # 3 bits: step 4, the table ends saturate
    grids = {
        "x": (8, 5),
        "h0": (16, 10),  # finer than the hidden grid: h0 is rounded onto it
        "c0": (16, 9),  # coarser than the cell grid: shifted left onto it
        "gates": (gate_bits, kg),
        "cell": (16, 12),
        "hidden": (8, 7),
    }
    xc = rng.integers(-128, 128, (n, t, f))
    h0c = rng.integers(-(2**10), 2**10, (n, h))
    c0c = rng.integers(-(2**10), 2**10, (n, h))
    rows = lambda a, k: a * 2.0 ** -k.reshape((-1,) + (1,) * (a.ndim - 1))  # noqa: E731
    kb = kw + 1
    weights = [rows(wi, kw), rows(wh, kw), rows(bi, kb), rows(bhh, kb)]
    text = lstm_program(
        n, t, f, h, list(zip(weights, [(8, kw), (8, kw), (8, kb), (8, kb)])), grids, mode
    )
    x = xc * 2.0**-5
    h0 = (h0c * 2.0**-10)[None]
    c0 = (c0c * 2.0**-9)[None]
    hw = nanoir.lower_to_hw(nanoir.parse(text))
    y, _, cn = nanoir.run(
        hw, x.astype(np.float32), h0.astype(np.float32), c0.astype(np.float32), raw=True
    )
    codes = [(wi, kw), (wh, kw), (bi, kb), (bhh, kb)]
    want_y, want_c = reference_lstm(xc, h0c, c0c, codes, grids, mode)
    np.testing.assert_array_equal(np.asarray(y, np.int64), want_y)
    np.testing.assert_array_equal(np.asarray(cn, np.int64)[0], want_c)
    op = next(o for o in next(iter(hw.body.block.ops)).body.block.ops if o.name == "nh.recurrent")
    for name, fn in (("sigmoid_table", sigmoid64), ("tanh_table", np.tanh)):
        assert list(array_values(op.properties[name])) == q15_table(fn, kg, gate_bits, mode)
    nq_y = nanoir.run(nanoir.parse(text), x, h0, c0, dtype=np.float64)[0]
    np.testing.assert_array_equal(nq_y, want_y * 2.0**-7)
