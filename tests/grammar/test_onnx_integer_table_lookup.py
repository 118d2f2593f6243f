"""Table lookups in integer ONNX (``common.table_lookup``): from ``LOOKUP_ELEMENTS`` indices on
a lookup is ``GatherElements`` over the flattened indices, reshaped back (to a constant shape,
or to the indices' run-time ``Shape`` where a dim is dynamic); below it ``Gather``. Each form
against an oracle written here (the table indexed in NumPy) and the NumPy executor, for an
``nh.lut`` of 4- and 8-bit codes and for a softmax's exp table."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.grammar.onnx.integer import export_model, make_session, run_model
from nanoir.grammar.onnx.integer.common import LOOKUP_ELEMENTS
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.nh import quantize_inputs
from torch import nn

import nanoir
from nanoir.testing.programs import examples

pytest.importorskip("onnxruntime")
torch.set_num_threads(1)


def _lut(bits: int, shape: str, table: np.ndarray) -> str:
    t_in = f"tensor<{shape}xi{bits}, #nh.fixed<0, BCMD>>"
    t_out = f"tensor<{shape}xi16, #nh.fixed<0, BCMD>>"
    entries = ", ".join(str(int(v)) for v in table)
    return (
        f"func.func @main(%x: {t_in}) -> {t_out} {{\n"
        f"  %y = nh.lut %x {{table = array<i64: {entries}>}} : {t_in} -> {t_out}\n"
        f"  func.return %y : {t_out}\n}}\n"
    )


def _ops(model) -> list[str]:  # noqa: ANN001
    return [n.op_type for n in model.graph.node]


@settings(max_examples=examples(20), deadline=None)
@given(
    bits=st.sampled_from([4, 8]),
    dims=st.sampled_from([(2, 3, 5), (3, 8, 16), (4, 9, 11), (1, 1, 2)]),
    dynamic=st.sampled_from(["none", "batch", "all"]),
    batch=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_a_lut_is_the_table_indexed(
    bits: int, dims: tuple[int, int, int], dynamic: str, batch: int, seed: int
) -> None:
    """onnxruntime's codes are the table at ``code - lo`` (oracle: NumPy indexing) and the
    NumPy executor's; ``GatherElements`` exactly where the static dims hold
    ``LOOKUP_ELEMENTS`` indices or more. Kills: the flat result reshaped to another shape,
    the index not flattened, ``Gather`` kept for large lookups."""
    rng = np.random.default_rng(seed)
    lo = -(2 ** (bits - 1))
    table = rng.integers(-(2**15), 2**15, 2**bits)
    static = [batch, *dims]
    if dynamic == "batch":
        declared = ["?", *dims]
    elif dynamic == "all":
        declared = ["?"] * 4
    else:
        declared = static
    module = nanoir.parse(_lut(bits, "x".join(str(d) for d in declared), table))
    x = rng.integers(lo, -lo, static).astype(np.int8)
    model = export_model(module, fused=None)
    (got,) = run_model(make_session(model), [x])
    assert got.shape == x.shape
    assert np.array_equal(got, table[x.astype(np.int64) - lo])
    assert np.array_equal(got, nanoir.run(module, x, raw=True)[0])
    counted = np.prod([1 if d == "?" else d for d in declared])
    large = counted >= LOOKUP_ELEMENTS
    assert ("GatherElements" in _ops(model)) == large
    assert ("Gather" in _ops(model)) == (not large)
    assert ("Shape" in _ops(model)) == (large and declared.count("?") > 1)


@pytest.mark.parametrize("classes", [3, 300])
def test_a_softmax_reads_its_exp_table_either_way(classes: int) -> None:
    """A softmax over 3 classes (``Gather``) and over 300 (``GatherElements``), half_even,
    over a dynamic batch: onnxruntime's codes are the NumPy executor's at batch 1 and 5."""
    torch.manual_seed(classes)
    net = nn.Sequential(nn.Linear(8, classes), nn.Softmax(dim=1)).eval()
    rng = np.random.default_rng(classes)
    x = rng.standard_normal((6, 8)).astype(np.float32) * 2
    module = nanoir.from_torch(net, (torch.from_numpy(x),))
    nanoir.quantize(module, [x], rounding="half_even", progress=False)
    hw = lower_to_hw(module)
    model = export_model(hw)
    assert ("GatherElements" in _ops(model)) == (classes >= LOOKUP_ELEMENTS)
    session = make_session(model)
    for batch in (1, 5):
        (codes,) = quantize_inputs(
            next(op for op in hw.walk() if op.name == "func.func"), [x[:batch] * 1.5]
        )
        (want,) = nanoir.run(hw, codes, raw=True)
        (got,) = run_model(session, [codes])
        assert np.array_equal(got, want)
