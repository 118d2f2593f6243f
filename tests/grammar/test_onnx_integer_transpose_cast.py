"""onnxruntime 1.32 dies (a segmentation fault, no error) creating a session of ``Transpose``
(perm ``[1, 0, 2]``) then ``Cast`` then ``MatMul``, which the integer writer made for a
batch-first LSTM's output read by a linear layer (found by the random programs under the
``explore`` profile). The writer now casts before it transposes.

Oracle: the NumPy nh executor; onnxruntime runs the file in a child process, so that a crash
is this test's failure, not the end of the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from nanoir.grammar.onnx.integer import export_model
from torch import nn

import nanoir

pytest.importorskip("onnxruntime")
torch.set_num_threads(1)

CHILD = """
import sys
import numpy as np
import nanoir
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.runtime.nh import quantize_inputs

hw = nanoir.parse(open(sys.argv[1]).read())
x = np.load(sys.argv[2])
session = make_session(export_model(hw))
func = next(op for op in hw.walk() if op.name == "func.func")
codes = quantize_inputs(func, [x])
got, want = run_model(session, codes), nanoir.run(hw, *codes, raw=True)
print("equal" if all(np.array_equal(a, np.asarray(b)) for a, b in zip(got, want)) else "differ")
"""


class _LstmLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.fc = nn.LSTM(5, 8, batch_first=True), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.rnn(x)[0])


@pytest.mark.parametrize("rounding", ["half_even", "trunc"])
def test_a_batch_first_lstm_read_by_a_linear_layer_opens(rounding: str, tmp_path: Path) -> None:
    """No ``Cast`` reads a ``Transpose`` in the written graph; the file opens in onnxruntime
    and gives the NumPy executor's codes. Kills: the rewrite removed (a ``Cast`` then reads a
    ``Transpose``, and the child process dies with SIGSEGV)."""
    torch.manual_seed(0)
    x = np.random.default_rng(0).standard_normal((2, 7, 5)).astype(np.float32)
    module = nanoir.from_torch(_LstmLinear().eval(), (torch.from_numpy(x),))
    nanoir.quantize(module, [x], rounding=rounding, progress=False)
    hw = nanoir.lower_to_hw(module)
    graph = export_model(hw).graph
    made = {out: node.op_type for node in graph.node for out in node.output}
    assert not [
        n.name for n in graph.node if n.op_type == "Cast" and made.get(n.input[0]) == "Transpose"
    ]
    (tmp_path / "hw.mlir").write_text(str(hw))
    np.save(tmp_path / "x.npy", x)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "hw.mlir"), str(tmp_path / "x.npy")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.split()[-1] == "equal"
