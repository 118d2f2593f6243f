"""nanoir.estimate: MAC counts against analytic counts, and the cost model's monotonicity.

The oracles are independent of the code under test: torch forward hooks that count each
layer's MACs from the module's own shapes (``conv``: output elements x in channels per
group x kernel; ``linear``: in x out features; a transposed conv: input elements x out
channels per group x kernel; a recurrent layer: steps x its weight matrices, written out per
layer and direction), and the published figures (ResNet-18 at 224x224: 1.814 G MACs;
MobileNetV2 1.0 at 224x224: about 300 M).

kills: a conv counted without its groups (a depthwise conv 32x too dear), a transposed conv
counted over its output instead of its input, the batch counted as a MAC dim, a recurrent
layer counted once instead of per step or without its reverse direction, weights counted at
their container width instead of packed (4-bit weights as bytes), memory cycles charged for
bytes the buffer holds, an estimate that depends on the layers around one (a network's
estimate is the sum of its layers' estimated alone), cycles that grow with the lanes.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import nanoir
from nanoir.cost import estimate, layer_cycles, macs_of
from nanoir.target import Target
from nanoir.testing.models import InvertedResidual, ResNet18
from nanoir.testing.programs import examples


def hooked_macs(model: nn.Module, x: torch.Tensor) -> int:
    """MACs of one sample, counted by forward hooks from each layer's shapes."""
    total = 0

    def conv(m: nn.Conv1d | nn.Conv2d, inputs: tuple[torch.Tensor], out: torch.Tensor) -> None:
        nonlocal total
        total += out[0].numel() * (m.in_channels // m.groups) * math.prod(m.kernel_size)

    def transposed(m: nn.ConvTranspose2d, inputs: tuple[torch.Tensor], out: torch.Tensor) -> None:
        nonlocal total
        total += inputs[0][0].numel() * (m.out_channels // m.groups) * math.prod(m.kernel_size)

    def linear(m: nn.Linear, inputs: tuple[torch.Tensor], out: torch.Tensor) -> None:
        nonlocal total
        total += out[0].numel() * m.in_features

    for m in model.modules():
        if isinstance(m, nn.Conv1d | nn.Conv2d):
            m.register_forward_hook(conv)
        elif isinstance(m, nn.ConvTranspose2d):
            m.register_forward_hook(transposed)
        elif isinstance(m, nn.Linear):
            m.register_forward_hook(linear)
    with torch.no_grad():
        model(x[:1])
    return total


def nf_macs(model: nn.Module, x: torch.Tensor) -> int:
    return estimate(nanoir.from_torch(model.eval(), (x,))).macs


def test_resnet18_at_224() -> None:
    x = torch.randn(2, 3, 224, 224)
    model = ResNet18().eval()
    got = nf_macs(model, x)
    assert got == hooked_macs(model, x)
    assert round(got / 1e9, 3) == 1.814


def mobilenet_v2() -> nn.Module:
    """MobileNetV2 1.0 (Sandler et al. 2018, table 2) from nanoir.testing's inverted residual."""
    settings_ = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip
    layers: list[nn.Module] = [
        nn.Conv2d(3, 32, 3, 2, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU6(),
    ]
    c = 32
    for t, out, n, s in settings_:
        for i in range(n):
            layers.append(InvertedResidual(c, out, s if i == 0 else 1, t))
            c = out
    layers += [nn.Conv2d(c, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]  # fmt: skip
    return nn.Sequential(*layers)


def test_mobilenet_v2_at_224() -> None:
    x = torch.randn(1, 3, 224, 224)
    model = mobilenet_v2().eval()
    got = nf_macs(model, x)
    assert got == hooked_macs(model, x)
    assert abs(got / 300e6 - 1) < 0.01  # the paper's 300 M multiply-adds


@pytest.mark.parametrize(
    "layer, shape",
    [
        (nn.Conv2d(32, 32, 3, padding=1, groups=32), (2, 32, 9, 7)),  # depthwise
        (nn.Conv2d(12, 18, (3, 1), stride=2, groups=3), (2, 12, 11, 6)),  # grouped
        (nn.Conv1d(8, 4, 5, dilation=2), (3, 8, 20)),
        (nn.ConvTranspose2d(8, 6, 4, stride=2, padding=1, groups=2), (2, 8, 5, 7)),
        (nn.Linear(10, 7), (4, 5, 10)),
    ],
    ids=["depthwise", "grouped", "conv1d", "transposed", "linear-3d"],
)
def test_single_layers(layer: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    assert nf_macs(layer, x) == hooked_macs(layer, x) > 0


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_recurrent_layers(cell: str) -> None:
    """Per layer and direction, steps x gates x hidden x (inputs + hidden) MACs."""
    inputs, hidden, layers, steps = 6, 5, 2, 7
    cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cell]
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[cell]
    model = cls(inputs, hidden, num_layers=layers, bidirectional=True, batch_first=True)
    x = torch.randn(2, steps, inputs)
    want = sum(
        2 * steps * gates * hidden * ((inputs if layer == 0 else 2 * hidden) + hidden)
        for layer in range(layers)
    )

    class Out(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    assert nf_macs(Out(), x) == want


def test_the_nh_program_packed_widths_and_the_host_share() -> None:
    """Lowered at 4-bit weights: the same MACs as the float program, weights at half a byte,
    activations at one byte; with conv left on the host, the engine's share drops."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3, groups=2), nn.ReLU())
    x = torch.randn(2, 3, 10, 10)
    module = nanoir.from_torch(model.eval(), (x,))
    float_cost = estimate(module)
    nanoir.quantize(module, [x.numpy()], weight_bits=4, bias_correction=False)
    hw = nanoir.lower_to_hw(module.clone())
    cost = estimate(hw, Target())
    assert cost.macs == float_cost.macs == hooked_macs(model, x)
    convs = [r for r in cost.layers if r.op == "nh.conv"]
    biases = [8 * 4, 8 * 4]  # i32 biases, 4 bytes each
    assert [r.weight_bytes for r in convs] == [
        math.ceil(8 * 3 * 9 * 4 / 8) + biases[0],
        math.ceil(8 * 4 * 9 * 4 / 8) + biases[1],
    ]
    assert [r.in_bytes for r in convs] == [3 * 10 * 10, 8 * 8 * 8]
    assert cost.engine_share_macs == 1.0
    no_conv = Target(name="t").with_ops({"relu", "requant", "constant"})
    mixed = estimate(nanoir.lower_to_hw(module.clone(), target=no_conv, host=True), no_conv)
    assert mixed.macs == cost.macs and mixed.engine_share_macs == 0.0
    assert mixed.engine_share_time < 1.0 and mixed.host_seconds > 0


@st.composite
def targets(draw: st.DrawFn) -> Target:
    return Target(
        lanes={b: float(draw(st.integers(1, 4096))) for b in (1, 2, 4, 8, 16)},
        vector_lanes=float(draw(st.integers(1, 256))),
        buffer_bytes=draw(st.integers(1, 2**20)),
        bandwidth_bytes_per_cycle=float(draw(st.integers(1, 64))),
    )


@settings(max_examples=examples(200))
@given(
    target=targets(),
    macs=st.integers(0, 10**10),
    bits=st.sampled_from((1, 2, 4, 8, 16)),
    values=st.integers(0, 10**7),
    onchip=st.integers(0, 10**8),
    factor=st.integers(2, 16),
)
def test_cycles_are_monotone(
    target: Target, macs: int, bits: int, values: int, onchip: int, factor: int
) -> None:
    """Non-increasing in lanes and bandwidth (and buffer), non-decreasing in MACs and bytes."""
    from dataclasses import replace

    def cycles(t: Target, m: int = macs, b: int = onchip) -> float:
        return max(layer_cycles(m, bits, values, b, t))

    base = cycles(target)
    more_lanes = replace(target, lanes={k: v * factor for k, v in target.lanes.items()},
                         vector_lanes=target.vector_lanes * factor)  # fmt: skip
    assert cycles(more_lanes) <= base
    assert (
        cycles(replace(target, bandwidth_bytes_per_cycle=target.bandwidth_bytes_per_cycle * factor))
        <= base
    )
    assert cycles(replace(target, buffer_bytes=target.buffer_bytes * factor)) <= base  # type: ignore[operator]
    assert cycles(target, m=macs * factor) >= base
    assert cycles(target, b=onchip * factor) >= base
    compute, memory = layer_cycles(macs, bits, values, onchip, target)
    assert memory == max(0, onchip - target.buffer_bytes) / target.bandwidth_bytes_per_cycle  # type: ignore[operator]
    assert compute == (macs / target.lanes_for(bits) if macs else values / target.vector_lanes)


def test_a_networks_estimate_is_the_sum_of_its_layers() -> None:
    """Each layer estimated as a program of its own gives the network's row: MACs, bytes and
    cycles add up (nothing depends on the layers around it)."""
    torch.manual_seed(1)
    layers = [nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, groups=8, padding=1),
              nn.Conv2d(8, 16, 1), nn.Conv2d(16, 4, 3, stride=2)]  # fmt: skip
    target = Target(buffer_bytes=2000, bandwidth_bytes_per_cycle=4.0)
    x = torch.randn(2, 3, 12, 12)
    whole = estimate(nanoir.from_torch(nn.Sequential(*layers).eval(), (x,)), target)
    parts = []
    for layer in layers:
        parts.append(estimate(nanoir.from_torch(layer.eval(), (x,)), target))
        x = layer(x).detach()
    assert whole.macs == sum(p.macs for p in parts)
    assert whole.cycles == pytest.approx(sum(p.cycles for p in parts))
    assert whole.latency == pytest.approx(sum(p.latency for p in parts))
    assert [r.weight_bytes for r in whole.layers] == [p.layers[0].weight_bytes for p in parts]
    assert any(r.memory_cycles > 0 for r in whole.layers)  # the buffer bound matters here
    assert whole.fps == pytest.approx(1 / whole.latency)
    more = whole.scaled(lanes={b: 10 * n for b, n in target.lanes.items()})
    assert more.cycles <= whole.cycles


def test_outputs_text_json_plot_and_cli(tmp_path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    x = torch.randn(2, 3, 8, 8)
    module = nanoir.from_torch(model.eval(), (x,))
    nanoir.quantize(module, [x.numpy()])
    hw = nanoir.lower_to_hw(module.clone())
    cost = estimate(hw)
    text = str(cost)
    assert "frames per second" in text and "nh.conv" in text
    data = json.loads(cost.to_json())
    assert data["totals"]["macs"] == cost.macs == hooked_macs(model, x)
    assert [r["macs"] for r in data["layers"]] == [r.macs for r in cost.layers]
    png = tmp_path / "perf.png"
    cost.plot(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from nanoir.cli.opt import main

    program = tmp_path / "hw.mlir"
    program.write_text(str(hw))
    out = tmp_path / "perf.json"
    assert (
        main(
            [
                str(program),
                "--emit=perf-json",
                "-o",
                str(out),
                "--perf-plot",
                str(tmp_path / "p.png"),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["totals"]["macs"] == cost.macs
    assert (tmp_path / "p.png").exists()
    assert macs_of(next(op for op in hw.walk() if op.name == "nh.conv")) == 4 * 36 * 27
    assert np.isfinite(cost.fps)
