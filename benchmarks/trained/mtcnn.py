"""MTCNN's three networks (Zhang et al. 2016, "Joint Face Detection and Alignment using
Multi-task Cascaded Convolutional Networks") in plain torch, written here, so that the trained
weights ``facenet-pytorch==2.6.0`` ships (``data/{pnet,rnet,onet}.pt``, state dicts) load
without installing or importing that package.

- P-Net (proposal), fully convolutional on a 12x12 window: three 3x3 convs with PReLU (a 2x2
  max pool after the first), then 1x1 convs to a face/no-face softmax and a box offset per
  position;
- R-Net (refine), 24x24: three convs with PReLU (3x3 / 2 max pools after the first two), a
  576 -> 128 dense layer, face softmax and box offset;
- O-Net (output), 48x48: four convs with PReLU and max pools, 1152 -> 256 dense, face softmax,
  box offset and five landmarks (x then y).

The dense layers read the conv features flattened in (width, height, channel) order: the
weights were converted from the original Caffe release, whose blobs are laid out that way, so
the features are permuted before flattening. Pools round up (Caffe's ``ceil`` mode). The
outputs here are ``(probabilities, boxes[, landmarks])``. Inputs are RGB crops scaled as
facenet-pytorch scales them: ``(pixel - 127.5) / 128``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["MTCNN_NETS", "ONet", "PNet", "RNet", "load_mtcnn", "mtcnn_input"]


def _conv(cin: int, cout: int, k: int) -> tuple[nn.Conv2d, nn.PReLU]:
    return nn.Conv2d(cin, cout, k), nn.PReLU(cout)


class PNet(nn.Module):
    """Face probability and box offset per 12x12 window (stride 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = _conv(3, 10, 3)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = _conv(10, 16, 3)
        self.conv3, self.prelu3 = _conv(16, 32, 3)
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return torch.softmax(self.conv4_1(x), dim=1), self.conv4_2(x)


class RNet(nn.Module):
    """Face probability and box offset of a 24x24 crop."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = _conv(3, 28, 3)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = _conv(28, 48, 3)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = _conv(48, 64, 2)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)  # Caffe's (W, H, C) order
        x = self.prelu4(self.dense4(x))
        return torch.softmax(self.dense5_1(x), dim=1), self.dense5_2(x)


class ONet(nn.Module):
    """Face probability, box offset and five landmarks of a 48x48 crop."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.prelu1 = _conv(3, 32, 3)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = _conv(32, 64, 3)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = _conv(64, 64, 3)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = _conv(64, 128, 2)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = x.permute(0, 3, 2, 1).reshape(x.shape[0], -1)  # Caffe's (W, H, C) order
        x = self.prelu5(self.dense5(x))
        return torch.softmax(self.dense6_1(x), dim=1), self.dense6_2(x), self.dense6_3(x)


MTCNN_NETS = {"pnet": PNet, "rnet": RNet, "onet": ONet}
"""Network name (the state dict's file stem) -> class."""


def load_mtcnn(name: str, folder: Path) -> Any:
    """The network ``name`` with facenet-pytorch's trained weights from ``folder/name.pt``,
    in eval mode (``load_state_dict`` is strict: a layer of the wrong shape or name fails)."""
    model = MTCNN_NETS[name]()
    state = torch.load(folder / f"{name}.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.eval()


def mtcnn_input(crops: np.ndarray) -> np.ndarray:
    """``[N, H, W, 3]`` uint8 RGB crops to the networks' ``[N, 3, H, W]`` float32 input."""
    return ((crops.astype(np.float32) - 127.5) * 0.0078125).transpose(0, 3, 1, 2).copy()
