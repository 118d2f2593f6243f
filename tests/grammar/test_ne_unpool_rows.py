"""The nq `.ne` rows MaxPoolIndices and MaxUnpoolPlane (nanoir's extensions for
nf.max_pool_indices / nf.max_unpool, named as the hw rows): a MaxPool/MaxUnpool decoder,
float and quantized, exports, imports and exports to the same text byte for byte, and the
read-back program runs bit for bit as the original, which equals torch (float64). Also a
Focus-style gather along the streamed dim, which such whole-tensor declarations now keep."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.runtime.interpreter import run
from torch import nn

import nanoir
from nanoir.frontend import from_torch
from nanoir.testing.magik_models import UnpoolDecoder

torch.set_num_threads(1)


@pytest.mark.parametrize("quantized", [False, True])
def test_nq_max_pool_indices_and_unpool_round_trip(quantized: bool) -> None:
    """The program's runtime tensors are declared whole (layout BCDD), so the planes read
    back static. Mutants seen to fail it (private copy): MaxUnpoolPlane's sizes written from the
    input's plane; the whole-tensor declaration switched off (M=1 plan: static planes lost)."""
    torch.manual_seed(0)
    net = UnpoolDecoder().eval()
    x = torch.randn(2, 3, 6, 8)
    module = from_torch(net, (x,))
    if quantized:
        nanoir.quantize(module, [x.numpy()])
    else:  # the oracle: torch in float64
        (y,) = run(module, x.double().numpy(), dtype=np.float64)
        want = net.double()(x.double()).detach().numpy()
        net.float()
        np.testing.assert_allclose(y, want, atol=1e-12)
    text = export_nanoengine(module)
    assert "op_type=MaxPoolIndices,\n    attr=[kernel_shape=[2, 2], strides=[2, 2]]," in text
    assert "op_type=MaxUnpoolPlane,\n    attr=[sizes=[6, 8]]," in text
    back = import_nanoengine(text)
    assert "nf.custom" not in str(back)
    assert export_nanoengine(back) == text
    (a,) = run(module, x.numpy())
    (b,) = run(back, x.numpy())
    assert a.tobytes() == b.tobytes()


class _Focus(nn.Module):
    """YOLOv5's Focus: the four pixel phases stacked on channels, then a 1x1 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        phases = [x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]]
        return self.conv(torch.cat(phases, 1))


@pytest.mark.parametrize("quantized", [False, True])
def test_nq_focus_gather_along_rows_round_trips(quantized: bool) -> None:
    """A gather along dim 2 (the streamed dim M) was written with M=1 and read back as
    nf.custom ("Gather along a dynamic dim", only a warning): save+load lost the op. Now the
    program declares whole tensors and reads back with every gather, running equal; the
    float one equals torch (float64). Mutant seen to fail it (private copy): a gather along
    dim 2 not asking for whole tensors (the old behaviour)."""
    torch.manual_seed(0)
    net = _Focus().eval()
    x = torch.randn(2, 2, 6, 8)
    module = from_torch(net, (x,))
    if quantized:
        nanoir.quantize(module, [x.numpy()])
    else:
        (y,) = run(module, x.double().numpy(), dtype=np.float64)
        want = net.double()(x.double()).detach().numpy()
        net.float()
        np.testing.assert_allclose(y, want, atol=1e-12)
    text = export_nanoengine(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no op kept as nf.custom
        back = import_nanoengine(text)
    gathers = [o for o in back.walk() if isinstance(o, nf.GatherOp)]
    assert len(gathers) == sum(isinstance(o, nf.GatherOp) for o in module.walk()) >= 4
    assert export_nanoengine(back) == text
    (a,) = run(module, x.numpy())
    (b,) = run(back, x.numpy())
    assert a.tobytes() == b.tobytes()
