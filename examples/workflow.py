"""Check, inspect, estimate, compile: a small ConvNeXt-V2-style network whose global response
normalization (GRN) divides by a value computed at run time, which no integer form computes
exactly, so that division runs on the host (docs/WORKFLOW.md walks through the output).

    python examples/workflow.py [--out workflow_out]

Writes ``inspect.png`` (the float program coloured by where each op will run; needs
Graphviz's ``dot``), ``partitioned.png`` (the compiled program with its host island),
``estimate.png`` (cycles per layer), ``model.mlir`` / ``hw.mlir`` and the tables on stdout.
The target is ``examples/targets/nanoengine_example.toml``: its numbers are an example, not
a vendor's figures.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn

import nanoir

TARGET = Path(__file__).resolve().parent / "targets" / "nanoengine_example.toml"


class GRN(nn.Module):
    """ConvNeXt V2's global response normalization: each channel's L2 norm over the plane,
    divided by the mean of those norms (a division by a value the input decides)."""

    def __init__(self, channels: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.full((1, channels, 1, 1), 0.5))
        self.beta = nn.Parameter(torch.full((1, channels, 1, 1), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gx = x.pow(2).mean(dim=(2, 3), keepdim=True)
        nx = gx / (gx.mean(dim=1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class Block(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.up = nn.Conv2d(channels, 4 * channels, 1)
        self.act = nn.GELU()
        self.grn = GRN(4 * channels)
        self.down = nn.Conv2d(4 * channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.grn(self.act(self.up(self.dw(x)))))


class TinyConvNeXtV2(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, stride=4)
        self.block = Block(16)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.block(self.stem(x))), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("workflow_out"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = TinyConvNeXtV2().eval()
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    x = batches[-1]

    # 1. Check: import, and ask where each op will run, before quantizing.
    target = nanoir.Target.load(TARGET)
    module = nanoir.from_torch(model, (torch.from_numpy(x),))
    nanoir.save(module, args.out / "model.mlir")
    inspection = nanoir.inspect(module, target)
    print(inspection)
    if shutil.which("dot"):
        nanoir.draw(module, args.out / "inspect.png", devices=inspection.devices())

    # 2. Quantize (the check runs again first: with host=True it lets the division through).
    nanoir.quantize(module, batches[:2], target=target, host=True)

    # 3. Compile: the engine takes what it can, the host the rest, bit for bit as nq.
    hw = nanoir.lower_to_hw(module.clone(), target=target, host=True)
    nanoir.save(hw, args.out / "hw.mlir")
    (want,) = nanoir.run(module, x)
    (got,) = nanoir.run(hw, x)
    print(f"\npartitioned program == nq bit for bit: {np.array_equal(want, got)}")
    if shutil.which("dot"):
        nanoir.draw(hw, args.out / "partitioned.png")

    # 4. Estimate: per layer, and latency and frames per second on the target.
    cost = nanoir.estimate(hw, target)
    print()
    print(cost)
    cost.plot(args.out / "estimate.png")


if __name__ == "__main__":
    main()
