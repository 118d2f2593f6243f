"""QAT through recurrent ops (``nf.recurrent``): the forward is the nq integer cell on the
current quantizers' exponents (so ``convert`` hands over bit for bit), the gradient torch's
float LSTM / GRU / RNN on the same fake-quantized operands (straight-through, as the
existing quantizer's rounding).

The internal grids (``gates``, ``cell``, ``hidden``) are fixed at ``calibrate`` (quantize's
calibration of them) and exported with the exponents as ``<name>.gates`` / ``.cell`` /
``.hidden`` records, which ``convert``'s quantize reads back. A bias read by the op is capped
at its product's exponent at every forward, as quantize caps it.

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from nanoir.dialects import nf
from nanoir.qat.quantizer import QATError
from nanoir.runtime.numerics import recurrent as numerics

__all__ = ["RecurrentStep", "internal_records"]

_TORCH_OPS = {
    "lstm": torch.lstm,
    "gru": torch.gru,
    "rnn_tanh": torch.rnn_tanh,
    "rnn_relu": torch.rnn_relu,
}

Grids = Callable[[], list[tuple[np.ndarray, int]] | None]


class _CellForward(torch.autograd.Function):
    """Values from the integer cell (float64 on codes), gradients from torch's float op."""

    @staticmethod
    def forward(ctx: Any, np_fn: Any, torch_fn: Any, *xs: torch.Tensor) -> Any:
        ctx.save_for_backward(*xs)
        ctx.torch_fn = torch_fn
        ys = np_fn([x.detach().cpu().numpy().astype(np.float64) for x in xs])
        return tuple(torch.from_numpy(np.ascontiguousarray(y)).to(xs[0].dtype) for y in ys)

    @staticmethod
    def backward(ctx: Any, *gs: torch.Tensor) -> tuple[Any, ...]:
        xs = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_(True) for x in xs]
            outs = ctx.torch_fn(*leaves)
            pairs = [(o, g) for o, g in zip(outs, gs) if g is not None]
            grads = torch.autograd.grad(
                [o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True
            )
        return (None, None, *grads)


class RecurrentStep:
    """The torch forward of one ``nf.recurrent``: ``grids`` (set by the module that owns the
    quantizers) gives every operand's current exponents and bits; with those and the internal
    grids (``internal``, set by ``calibrate``) the forward is the integer cell, else torch's
    float op (as nq runs it then)."""

    def __init__(self, op: nf.RecurrentOp):
        self.op = op
        self.layout = op.layout
        self.has_h0, self.has_c0 = op.h0 is not None, op.c0 is not None
        self.grids: Grids | None = None
        self.internal: dict[str, numerics.Grid] | None = None
        self.rounding = "trunc"

    def _split(self, xs: Sequence[Any]) -> tuple[Any, Any, Any, list[Any]]:
        x, rest = xs[0], list(xs[1:])
        h0 = rest.pop(0) if self.has_h0 else None
        c0 = rest.pop(0) if self.has_c0 else None
        return x, h0, c0, rest

    def torch_fn(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layout = self.layout
        x, h0, c0, weights = self._split(xs)
        n = x.shape[0 if layout.batch_first else 1]
        shape = (layout.layers * layout.dirs, n, layout.hidden)
        h0 = x.new_zeros(shape) if h0 is None else h0
        flags = (layout.has_biases, layout.layers, 0.0, False, layout.bidirectional)
        if layout.mode == "lstm":
            c0 = x.new_zeros(shape) if c0 is None else c0
            return tuple(_TORCH_OPS["lstm"](x, [h0, c0], weights, *flags, layout.batch_first))
        return tuple(_TORCH_OPS[layout.mode](x, h0, weights, *flags, layout.batch_first))

    def __call__(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grids = None if self.grids is None or self.internal is None else self.grids()
        if grids is None:
            return self.torch_fn(*xs)
        internal = self.internal
        assert internal is not None
        tables = numerics.activation_tables(internal["gates"], self.rounding)

        def np_fn(arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
            coded = []
            for a, (exps, _) in zip(arrays, grids):
                k = exps.reshape((-1,) + (1,) * (a.ndim - 1)) if exps.size > 1 else exps[0]
                coded.append(numerics.Coded(np.rint(a * 2.0**k).astype(np.int64), exps))
            x, h0, c0, weights = self._split(coded)
            try:
                codes = numerics.run_codes(
                    self.layout, x, h0, c0, weights, internal["gates"], internal["cell"],
                    internal["hidden"], self.rounding, tables,
                )  # fmt: skip
            except numerics.RecurrentBoundError as e:
                raise QATError(f"nanoir.qat: {self.op.name}: {e}") from None
            exps = (internal["hidden"].exp, internal["hidden"].exp, internal["cell"].exp)
            return tuple(c * 2.0**-k for c, k in zip(codes, exps))

        return _CellForward.apply(np_fn, self.torch_fn, *xs)

    def bias_cap(self, index: int, last_k: Callable[[int], np.ndarray | None]) -> Any:
        """The cap of weight operand ``index`` (a bias) at this forward: its product's
        exponents, from ``last_k(operand)`` (the applied exponents of an operand's
        quantizer) and the hidden grid; None where not known."""
        layout, internal = self.layout, self.internal
        cell, part = divmod(index, layout.per_cell)
        if internal is None or part < 2:
            return None
        first = 1 + self.has_h0 + self.has_c0
        kw = last_k(first + cell * layout.per_cell + part - 2)
        if cell // layout.dirs == 0 and part == 2:
            kx = last_k(0)
        else:
            kx = np.array([internal["hidden"].exp])
        if kw is None or kx is None:
            return None
        return torch.from_numpy((kx.reshape(-1)[0] + kw.reshape(-1)).astype(np.float64))


def set_internal(steps: Sequence[RecurrentStep], func: Any) -> None:
    """Copy the internal grids quantize calibrated on ``func`` into the steps, in order."""
    ops = [op for op in func.body.block.ops if isinstance(op, nf.RecurrentOp)]
    for step, op in zip(steps, ops):
        grids = {k: op.internal_grid(k) for k in nf.RecurrentOp.INTERNAL}
        if all(g is not None for g in grids.values()) and op.rounding is not None:
            step.internal = grids  # type: ignore[assignment]
            step.rounding = op.rounding.data


def internal_records(steps: Sequence[RecurrentStep]) -> dict[str, dict[str, Any]]:
    """The internal grids as ``quantize(exponents=...)`` records, by quantizer name."""
    from nanoir.lowering.quantize import internal_names  # lazy: keeps import cheap

    out: dict[str, dict[str, Any]] = {}
    for step in steps:
        if step.internal is None:
            continue
        for which, name in internal_names(step.op).items():
            g = step.internal[which]
            out[name] = {"exp": [g.exp], "bits": g.bits}
    return out
