"""The ONNX nanoengine flavour and lookup-table outputs. With bias correction (the default
with calibration data) quantize rounds tables computed offline (sigmoid, tanh, hardswish,
SiLU, GELU) to the nearest code, while NanoEngine's ``Q`` truncates what follows the float op:
the flavour cannot write such an output and refuses it with one message naming the
fake-quant and the op, why, and the ways out. Each way out is checked to work: the
nanoengine flavour with ``bias_correction=False`` (reads back to the same nq numbers), QDQ
with ``rounding="half_even"`` (onnxruntime equals nanoir), and the nh program as integer
ONNX (onnxruntime equals the NumPy executor), each also against the float network within a
loose bound (an oracle independent of the writer).

Why the table is not written as data here (an initializer of on-grid values, gathered by the
input codes, then ``Q``): NanoEngine's toolchain reads a float op followed by ``Q`` and
truncates; a Gather by computed indices is no NanoEngine op, and nanoir's reader could not
read the file back as the op and its fake-quant.

Mutant seen to fail it (private copy): the LookupTable branch removed (the message is then
the generic one, which points at ``qdq`` alone, which this default program cannot use
either: its trunc activations are refused there).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes
from nanoir.grammar.onnx.importer import import_onnx_bytes
from torch import nn

import nanoir

ort = pytest.importorskip("onnxruntime")
torch.set_num_threads(1)


class _Net(nn.Module):
    def __init__(self, act: nn.Module):
        super().__init__()
        self.c, self.act, self.d = nn.Conv1d(3, 4, 3, padding=1), act, nn.Conv1d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d(self.act(self.c(x)))


ACTS = {"sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(), "hardswish": nn.Hardswish()}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_table_output_refused_with_the_ways_out_and_each_works(act: str) -> None:
    torch.manual_seed(0)
    net = _Net(ACTS[act]).eval()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((4, 3, 7)).astype(np.float32) for _ in range(2)]
    x = rng.standard_normal((5, 3, 7)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).double().numpy()
    nf_program = nanoir.from_torch(net, (torch.from_numpy(x),))

    default = nf_program.clone()
    nanoir.quantize(default, calib)
    with pytest.raises(OnnxExportError) as info:
        export_onnx_bytes(default, "nanoengine")
    text = str(info.value)
    assert f"'act_1' quantizes the lookup table of nf.{act}, rounded half_even" in text
    assert "onnx_flavor='qdq'" in text and "bias_correction=False" in text
    assert "lower_to_hw" in text and "Traceback" not in text
    # The default program's trunc activations are refused by QDQ too: why both are named.
    with pytest.raises(OnnxExportError, match="rounds trunc"):
        export_onnx_bytes(default, "qdq")

    def close(got: np.ndarray) -> None:  # 8-bit everywhere: within a few output steps
        assert np.abs(got - want).max() <= 0.15 * max(1.0, float(np.abs(want).max()))

    # 1. nanoengine flavour, NanoEngine-PyTorch's configuration: every rounding trunc.
    plain = nf_program.clone()
    nanoir.quantize(plain, calib, bias_correction=False)
    back = import_onnx_bytes(export_onnx_bytes(plain, "nanoengine"))
    (got_plain,) = nanoir.run(plain, x)
    np.testing.assert_array_equal(nanoir.run(back, x)[0], got_plain)
    close(got_plain)

    # 2. QDQ with half_even activations: onnxruntime computes nanoir's numbers.
    even = nf_program.clone()
    nanoir.quantize(even, calib, rounding="half_even")
    session = ort.InferenceSession(
        export_onnx_bytes(even, "qdq"),
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["QDQPropagationTransformer", "DoubleQDQPairsRemover"],
    )
    (got_ort,) = session.run(None, {session.get_inputs()[0].name: x})
    (got_even,) = nanoir.run(even, x)
    np.testing.assert_array_equal(got_ort, got_even.astype(np.float32))
    close(got_even)

    # 3. The default program lowered to nh: exact integer ONNX in any rounding.
    hw = nanoir.lower_to_hw(default.clone())
    (got_hw,) = nanoir.run(hw, x)
    np.testing.assert_array_equal(nanoir.run(hw, x, backend="onnxruntime")[0], got_hw)
    np.testing.assert_array_equal(got_hw, nanoir.run(default, x)[0])
    close(got_hw)
