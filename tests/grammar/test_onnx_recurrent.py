"""ONNX's float LSTM / GRU / RNN as torch's exporter writes them (``dynamo=False``, opset 17)
read as ``nf.recurrent`` (``grammar/onnx/recurrent.py``), against torch; and the refusals."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from nanoir.dialects import nf
from nanoir.grammar.onnx.importer import OnnxImportError, import_onnx_bytes
from nanoir.runtime.interpreter import run
from onnx import TensorProto, helper
from torch import nn


class _Sequence(nn.Module):
    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.rnn(x)[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True),
        lambda: nn.GRU(3, 4, batch_first=True),
        lambda: nn.GRU(3, 4, bias=False, bidirectional=True),
        lambda: nn.RNN(3, 4, nonlinearity="relu", bidirectional=True),
        lambda: nn.RNN(3, 4),
    ],
    ids=["lstm-2-bi", "gru-batch-first", "gru-nobias-bi", "rnn-relu-bi", "rnn-tanh"],
)
def test_torch_onnx_export_reads_back(make) -> None:  # noqa: ANN001
    """torch's ONNX export of each recurrent module reads as nf.recurrent ops (one per layer,
    zero initial states dropped) and runs as torch does, to float32 rounding. Mutants seen to
    fail it (private copy): the LSTM's ONNX gate rows taken in ONNX's order (no permutation);
    ONNX's B split with b_ih and b_hh swapped -- a GRU's differ, so GRU cases fail."""
    torch.manual_seed(0)
    model = _Sequence(make()).eval()
    x = torch.randn(5, 2, 3)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17)
    module = import_onnx_bytes(f.getvalue())
    ops = [op for op in module.walk() if isinstance(op, nf.RecurrentOp)]
    assert ops and all(op.h0 is None and op.c0 is None for op in ops)
    (y,) = run(module, x.numpy())
    np.testing.assert_allclose(y, model(x).detach().numpy(), rtol=0, atol=2e-6)


def _gru_model(**attrs) -> bytes:  # noqa: ANN003
    h, f = 2, 3
    inits = [
        helper.make_tensor("W", TensorProto.FLOAT, [1, 3 * h, f], np.zeros(9 * h).tolist()),
        helper.make_tensor("R", TensorProto.FLOAT, [1, 3 * h, h], np.zeros(6 * h).tolist()),
    ]
    node = helper.make_node("GRU", ["X", "W", "R"], ["Y"], hidden_size=h, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 1, f])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 1, 1, h])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({}, "linear_before_reset = 0"),
        ({"linear_before_reset": 1, "direction": "reverse"}, "direction 'reverse'"),
        ({"linear_before_reset": 1, "clip": 2.0}, "clip"),
    ],
)
def test_refusals_name_the_node_and_reason(attrs: dict, reason: str) -> None:
    """A GRU torch cannot express is refused, naming the node type and what differs. Mutant
    seen to fail it: the reader without the linear_before_reset check."""
    with pytest.raises(OnnxImportError, match=f"cannot read this GRU node: .*{reason}"):
        import_onnx_bytes(_gru_model(**attrs))


def test_gru_linear_before_reset_reads() -> None:
    """The same hand-written GRU with ``linear_before_reset = 1`` (torch's form) reads."""
    module = import_onnx_bytes(_gru_model(linear_before_reset=1))
    assert [op.mode.data for op in module.walk() if isinstance(op, nf.RecurrentOp)] == ["gru"]
    assert onnx is not None
