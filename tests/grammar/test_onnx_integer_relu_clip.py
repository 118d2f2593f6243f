"""No ``Relu`` directly before an integer ``Clip`` (issue 31 §2.6): onnxruntime's ``FuseReluClip``
optimizer, on at its default level, fails on an int32 Clip ("Unexpected data type for Clip
'min' input"), so such a file does not open. Each form found to reach it (ReLU → ReLU6,
ReLU → requant by 0, Conv → GroupNorm → ReLU → Linear at 4 unsigned bits, Linear → ReLU →
LayerNorm) opens at the default level and runs equal to the NumPy executor; anything
onnxruntime refuses when the session is made is one ``nanoir.Error``, and ``nanoir-run``
prints it as one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from nanoir.dialects import nh
from nanoir.grammar.onnx.integer import export_model, make_session
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.base import ExecutionError
from torch import nn

import nanoir
from nanoir.cli.run import main as run_main

pytest.importorskip("onnxruntime")
torch.set_num_threads(1)


def relu_before_integer_clip(model: onnx.ModelProto) -> list[str]:
    """The Relu nodes whose output an integer Clip reads (what FuseReluClip fails on)."""
    integer = {
        i.name for i in model.graph.initializer if i.data_type not in (1, 10, 11, 16)
    }  # not a float
    relus = {n.output[0]: n.name for n in model.graph.node if n.op_type == "Relu"}
    return [
        relus[n.input[0]]
        for n in model.graph.node
        if n.op_type == "Clip" and n.input[0] in relus and set(n.input[1:]) & integer
    ]


class _LinearReluNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.norm = nn.Linear(6, 8), nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(torch.relu(self.fc(x)))


class _ConvGroupNormReluLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.norm(self.conv(x))).flatten(1))


RELU_REQUANT = """\
func.func @main(%x: tensor<?x4x8xi8, #nh.fixed<3, BCM>>) -> tensor<?x4x8xi4, #nh.fixed<3, BCM>> {
  %r = nh.relu %x : tensor<?x4x8xi8, #nh.fixed<3, BCM>>
  %q = nh.requant %r {shift = array<i64: 0>} : tensor<?x4x8xi8, #nh.fixed<3, BCM>>
      -> tensor<?x4x8xi4, #nh.fixed<3, BCM>>
  func.return %q : tensor<?x4x8xi4, #nh.fixed<3, BCM>>
}
"""


SEEDS = {"relu-relu6": 0, "conv-groupnorm-relu-linear": 1, "linear-relu-layernorm": 5}
"""Per torch form, a seed (weights and calibration data) whose program reaches it."""


def _torch_form(name: str) -> tuple[nn.Module, tuple[int, ...], dict[str, object]]:
    """The network, its input shape and quantize's options."""
    if name == "relu-relu6":
        return nn.Sequential(nn.ReLU(), nn.ReLU6()), (3, 8, 8), {}
    four_unsigned = {"act_bits": 4, "unsigned": "auto"}
    if name == "conv-groupnorm-relu-linear":
        return _ConvGroupNormReluLinear(), (3, 6, 6), four_unsigned
    return _LinearReluNorm(), (6,), four_unsigned


def relu_read_by_a_clip(hw: object) -> bool:
    """Whether an nh.relu is read by an nh.clamp or a requant by 0 (which write a Clip)."""
    for op in hw.walk():  # type: ignore[attr-defined]
        if isinstance(op, nh.ReluOp):
            for use in op.result.uses:
                reader = use.operation
                if isinstance(reader, nh.ClampOp) or (
                    isinstance(reader, nh.RequantOp) and not any(reader.shift.get_values())
                ):
                    return True
    return False


@pytest.mark.parametrize(
    "form",
    ["relu-relu6", "relu-requant0", "conv-groupnorm-relu-linear", "linear-relu-layernorm"],
)
def test_every_form_opens_at_the_default_level_and_equals_numpy(form: str) -> None:
    """Kills: the writer's ReLU written as an int32 ``Relu`` node again (each form then has a
    Relu before an integer Clip, and making the session fails)."""
    rng = np.random.default_rng(0)
    if form == "relu-requant0":
        hw = nanoir.parse(RELU_REQUANT)
        x: np.ndarray = rng.integers(-128, 128, (3, 4, 8)).astype(np.int8)
        raw = True
    else:
        torch.manual_seed(SEEDS[form])
        rng = np.random.default_rng(SEEDS[form])
        net, shape, options = _torch_form(form)
        calib = rng.standard_normal((8, *shape)).astype(np.float32)
        module = nanoir.from_torch(net.eval(), (torch.from_numpy(calib),))
        nanoir.quantize(module, [calib], **options)  # type: ignore[arg-type]
        hw = lower_to_hw(module)
        x, raw = rng.standard_normal((3, *shape)) * 2, False
    assert relu_read_by_a_clip(hw)  # the form is reached
    model = export_model(hw)
    assert relu_before_integer_clip(model) == []
    make_session(model)  # onnxruntime's default optimization level
    want = nanoir.run(hw, x, raw=raw)
    got = nanoir.run(hw, x, raw=raw, backend="onnxruntime")
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def _int32_relu_clip() -> onnx.ModelProto:
    """A graph FuseReluClip fails on: an int32 Relu read by an int32 Clip."""
    h = onnx.helper
    graph = h.make_graph(
        [
            h.make_node("Relu", ["x"], ["r"]),
            h.make_node("Clip", ["r", "lo", "hi"], ["y"]),
        ],
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.INT32, [2])],
        [h.make_tensor_value_info("y", onnx.TensorProto.INT32, [2])],
        [
            onnx.numpy_helper.from_array(np.array(0, np.int32), "lo"),
            onnx.numpy_helper.from_array(np.array(6, np.int32), "hi"),
        ],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_a_model_onnxruntime_refuses_is_one_nanoir_error() -> None:
    """Kills: ``make_session`` letting onnxruntime's own exception (``Fail``) through."""
    with pytest.raises(ExecutionError, match=r"onnxruntime refused the model: .*Clip") as info:
        make_session(_int32_relu_clip())
    assert isinstance(info.value, nanoir.Error)
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)


def test_nanoir_run_prints_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``nanoir-run --backend onnxruntime`` on a program whose file onnxruntime refuses prints
    one error line and exits 1 (the refusal forced here by an int32 Relu read by an int32 Clip)."""
    from nanoir.grammar.onnx.integer import ops

    prog, xin = tmp_path / "p.mlir", tmp_path / "x.npy"
    prog.write_text(RELU_REQUANT)
    np.save(xin, np.arange(-16, 16, dtype=np.int8).reshape(1, 4, 8))

    def int32_relu(g, op) -> None:  # noqa: ANN001  (an int32 Relu read by an int32 Clip)
        y = g.node("Relu", [g.get(op.input, "i32")], "relu")
        lo, hi = g.const(-128, np.int32), g.const(127, np.int32)
        g.put(op.result, "i32", g.node("Clip", [y, lo, hi], "relu_clip"))

    monkeypatch.setitem(ops.OPS, nh.ReluOp, int32_relu)
    code = run_main([str(prog), "-i", str(xin), "--raw", "--backend", "onnxruntime"])
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "onnxruntime refused the model" in err
