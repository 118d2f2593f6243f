"""ONNX's float ``LSTM`` / ``GRU`` / ``RNN`` (as torch's own exporter writes them, opset 17)
read as ``nf.recurrent``: one ONNX node is one layer (``forward`` or ``bidirectional``).

What changes on the way (ONNX operator docs, "LSTM"/"GRU"/"RNN"):

- gate order: ONNX's LSTM weights hold gates ``i, o, f, c``, torch's ``i, f, g, o``; ONNX's GRU
  ``z, r, h``, torch's ``r, z, n``; the rows are permuted at import (weights must be static);
- ``W [D, G*H, F]``, ``R [D, G*H, H]``, ``B [D, 2*G*H]`` become torch's per-direction
  ``w_ih``, ``w_hh``, ``b_ih``, ``b_hh`` constants;
- ``Y [T, D, N, H]`` is nf's ``[T, N, D*H]`` output reshaped to ``[T, N, D, H]`` and
  transposed; ``Y_h`` / ``Y_c`` are ``h_n`` / ``c_n``;
- an initial state that is absent, or all zeros (torch writes ``Expand`` of a zero constant)
  is dropped: nf's states then start at zero.

Refused with the reason: ``direction = reverse``, ``layout = 1``, ``clip``, ``input_forget``,
peepholes (``P``), ``sequence_lens``, activations other than torch's (RNN: Tanh or Relu), and a
GRU with ``linear_before_reset = 0`` (torch's GRU resets after the hidden matmul).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.runtime.numerics.recurrent import RecurrentLayout
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

ONNX_RECURRENT = ("LSTM", "GRU", "RNN")
_TORCH_ROWS = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2), "RNN": (0,)}
"""For each torch gate, the ONNX gate that holds it."""
_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}


def _zero_state(value: SSAValue) -> bool:
    """Whether ``value`` is all zeros by construction (a zero constant, maybe expanded)."""
    op = value.owner
    while isinstance(op, nf.ExpandOp | nf.ReshapeOp):
        op = op.input.owner
    return isinstance(op, nf.ConstantOp) and not np.any(dense_to_numpy(op.value))


def read_recurrent(
    op_type: str,
    attrs: dict[str, Any],
    inputs: Sequence[str],
    n_outputs: int,
    static: Callable[[str, str], np.ndarray],
    value: Callable[[str], SSAValue],
    constant: Callable[[str, np.ndarray], SSAValue],
    name: str,
) -> tuple[list[Operation], list[SSAValue | None]]:
    """The nf ops of one ONNX recurrent node and the values of its outputs (Y, Y_h, Y_c), or a
    ``ValueError`` saying what nanoir does not read."""
    hidden = int(attrs.get("hidden_size", 0))
    if hidden < 1:
        raise ValueError(f"hidden_size {hidden} (a layer has at least one hidden unit)")
    direction = str(attrs.get("direction", "forward"))
    if direction not in ("forward", "bidirectional"):
        raise ValueError(f"direction {direction!r} (nf.recurrent runs forward or both ways)")
    for unsupported in ("clip", "input_forget", "layout"):
        if unsupported in attrs and (unsupported == "clip" or attrs[unsupported]):
            raise ValueError(f"attribute {unsupported} (torch's layers have none)")
    dirs = 2 if direction == "bidirectional" else 1
    acts = tuple(str(a) for a in attrs.get("activations", ()))
    if op_type == "RNN":
        act = acts[0] if acts else "Tanh"
        if act not in ("Tanh", "Relu") or any(a != act for a in acts):
            raise ValueError(f"activations {acts} (torch's RNN is Tanh or Relu)")
        mode = "rnn_tanh" if act == "Tanh" else "rnn_relu"
    else:
        mode = op_type.lower()
        if acts and acts != _ACTIVATIONS[op_type] * dirs:
            raise ValueError(f"activations {acts} (torch's are {_ACTIVATIONS[op_type]})")
    if op_type == "GRU" and attrs.get("linear_before_reset", 0) != 1:
        raise ValueError("linear_before_reset = 0 (torch's GRU applies the reset after R h)")
    names = list(inputs) + [""] * (8 - len(inputs))
    if names[4]:
        raise ValueError("sequence_lens (every sequence has the input's length in nf)")
    if names[7]:
        raise ValueError("peephole weights P (torch's LSTM has none)")
    w, r = static(names[1], "weight W"), static(names[2], "weight R")
    gates = len(_TORCH_ROWS[op_type])
    b = static(names[3], "bias B") if names[3] else None
    rows_of = gates * hidden
    for label, array, want in (
        ("W", w, (dirs, rows_of, w.shape[-1] if w.ndim else 0)),
        ("R", r, (dirs, rows_of, hidden)),
        ("B", b, (dirs, 2 * rows_of)),
    ):  # ONNX's shapes (onnxruntime refuses others): a W of more rows is no smaller layer
        if array is not None and tuple(array.shape) != want:
            raise ValueError(
                f"its {label} has shape {list(array.shape)}, expected {list(want)} "
                f"({dirs} direction(s), {gates} gate(s) of hidden_size {hidden})"
            )
    rows = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in _TORCH_ROWS[op_type]])
    weights = []
    for d in range(dirs):
        parts = [w[d][rows], r[d][rows]]
        if b is not None:
            parts += [b[d][: gates * hidden][rows], b[d][gates * hidden :][rows]]
        for label, array in zip(("w_ih", "w_hh", "b_ih", "b_hh"), parts):
            weights.append(constant(f"{name}.{label}{'_reverse' if d else ''}", array))
    x = value(names[0])
    states = [None if not n else value(n) for n in names[5:7]]
    h0, c0 = (None if s is None or _zero_state(s) else s for s in states)
    layout = RecurrentLayout(mode, hidden, 1, dirs == 2, False, b is not None)
    t = x.type
    assert isinstance(t, TensorType)
    out, state, cell = layout.result_shapes(t.get_shape())
    elt = t.get_element_type()
    types = [TensorType(elt, out), TensorType(elt, state)]
    if cell is not None:
        types.append(TensorType(elt, cell))
    rec = nf.RecurrentOp(x, weights, layout, types, h0, c0 if mode == "lstm" else None)
    steps, n = out[0], out[1]
    split = nf.ReshapeOp(rec.output, [steps, n, dirs, hidden])
    y = nf.TransposeOp(split.result, [0, 2, 1, 3])
    values: list[SSAValue | None] = [y.result, rec.h_n, rec.c_n][:n_outputs]
    return [rec, split, y], values


def read_squeeze(op_type: str, x: SSAValue, axes: Sequence[int]) -> Operation:
    """A float ``Squeeze`` / ``Unsqueeze`` with static axes (torch writes ``Squeeze`` of a
    one-direction ``Y``) as ``nf.reshape``."""
    t = x.type
    assert isinstance(t, TensorType)
    shape = list(t.get_shape())
    if op_type == "Squeeze":
        rank = len(shape)
        drop = {a % rank for a in axes} if axes else {i for i, d in enumerate(shape) if d == 1}
        if any(shape[a] != 1 for a in drop):
            raise ValueError(f"it squeezes axes {sorted(drop)} of {shape}, not all of size 1")
        shape = [d for i, d in enumerate(shape) if i not in drop]
    else:
        rank = len(shape) + len(axes)
        for a in sorted(a % rank for a in axes):
            shape.insert(a, 1)
    return nf.ReshapeOp(x, shape)
