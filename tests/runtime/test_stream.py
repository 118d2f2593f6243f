"""The streaming executor equals the whole-tensor run bit for bit, at the quantized (nq) and
integer (nh) levels, and its caches never hold more rows than the stream plan allows.

Every check compares ``stream(...)`` with ``nanoir.runtime.interpreter.run`` on the full input
and holds ``StreamRunner.cache_peaks`` against ``stream_plan`` for the same step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import quantize
from nanoir.lowering.stream_plan import stream_plan
from nanoir.runtime.interpreter import ExecutionError, run
from nanoir.runtime.stream import StreamRunner, stream
from torch import nn
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.context import make_context
from nanoir.frontend import from_torch
from nanoir.testing import make_test_model, randomize_batch_norm
from nanoir.testing.programs import ALL_KINDS, examples, random_nq_program


def check_stream(module: ModuleOp, inputs: list[Any], step: int, raw: bool = False) -> None:
    """Streamed == whole-tensor (same dtype, same bytes), and caches within the plan."""
    want = run(module, *inputs, raw=raw) if raw else run(module, *inputs)
    runner = StreamRunner(module, raw=raw)
    got = stream(module, inputs, step=step, runner=runner)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert g.tobytes() == w.tobytes(), f"step {step}: {np.flatnonzero(g != w).size} differ"
    plan = stream_plan(module, steps=[(2, step)])
    for key, peak in runner.cache_peaks.items():
        cache = plan.caches[key]
        assert peak <= cache.rows[2].max, (cache.node_name, cache.tensor_name, peak)
    for value, peak in runner.tensor_peaks.items():
        if 2 in plan.tensors[value].rows:
            assert peak <= plan.tensors[value].rows[2].max, plan.tensors[value].name


def quantized(model: nn.Module, example: torch.Tensor, seed: int = 0) -> tuple[ModuleOp, ModuleOp]:
    """The model at the nq level (BN folded, calibrated on random data) and lowered to nh."""
    module = from_torch(model.eval(), (example,))
    FoldBnPass().apply(make_context(), module)
    rng = np.random.default_rng(seed)
    shape = tuple(example.shape)
    quantize(module, [rng.standard_normal((4, *shape[1:])).astype(np.float32)])
    return module, lower_to_hw(module.clone())


def inputs_like(module: ModuleOp, shape: tuple[int, ...], seed: int = 1) -> list[np.ndarray]:
    return [np.random.default_rng(seed).standard_normal(shape) * 2.0]


# --------------------------------------------------------------------------------------------
# Test networks
# --------------------------------------------------------------------------------------------


class StridedDilated(nn.Module):
    """Strides and dilations along the streamed dim, a stride larger than its window (rows
    skipped), and a ceil_mode max pool whose last window is partial."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, stride=(2, 1), dilation=(2, 1))
        self.pool = nn.MaxPool2d((3, 2), stride=(2, 1), ceil_mode=True)
        self.conv2 = nn.Conv2d(4, 3, (1, 2), stride=(3, 1))
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        return torch.relu(self.bn(self.conv2(x)))


class Padded(nn.Module):
    """Padding along the streamed dim: convs (one padded by more than its window), an average
    pool that does not count padding and a max pool whose padding must never win."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, (5, 3), padding=(2, 1))
        self.avg = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.max = nn.MaxPool2d(3, stride=(2, 1), padding=1)
        self.conv2 = nn.Conv2d(3, 2, 1, padding=(1, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avg(torch.relu(self.conv1(x)))
        return self.conv2(self.max(x))


class Residual(nn.Module):
    """Two branches of different latency joined by add (and by concat): a 5-row padded conv
    against the identity and against a 1-row conv."""

    def __init__(self) -> None:
        super().__init__()
        self.long = nn.Conv1d(3, 3, 5, padding=2)
        self.short = nn.Conv1d(3, 3, 1)
        self.mix = nn.Conv1d(6, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        long = torch.relu(self.long(x))
        y = long + x
        return self.mix(torch.cat([y, self.short(x)], dim=1))


def _seeded(model: nn.Module) -> nn.Module:
    return randomize_batch_norm(model, 0)


@pytest.fixture(scope="module")
def kws() -> tuple[ModuleOp, ModuleOp]:
    torch.manual_seed(0)
    model = make_test_model("KWSNet")
    return quantized(model, model.make_example_input(2))  # type: ignore[operator]


@pytest.fixture(scope="module")
def sample_net() -> tuple[ModuleOp, ModuleOp]:
    model = make_test_model("SampleNet")
    return quantized(model, model.make_example_input(2))  # type: ignore[operator]


NETS = {
    "strided_dilated": (StridedDilated, (2, 2, 19, 6)),
    "padded": (Padded, (2, 1, 9, 4)),
    "residual": (Residual, (2, 3, 11)),
}


@pytest.fixture(scope="module", params=sorted(NETS))
def net(request: pytest.FixtureRequest) -> tuple[str, ModuleOp, ModuleOp, tuple[int, ...]]:
    factory, shape = NETS[request.param]
    torch.manual_seed(1)
    model = _seeded(factory())
    nq, nh = quantized(model, torch.randn(shape))
    return request.param, nq, nh, shape


# --------------------------------------------------------------------------------------------
# Bit-exactness and cache bounds
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 3, 49])
def test_kws_quantized(kws: tuple[ModuleOp, ModuleOp], step: int) -> None:
    nq, _ = kws
    check_stream(nq, inputs_like(nq, (3, 40, 49)), step)


@pytest.mark.parametrize(("step", "raw"), [(1, True), (4, False), (49, True)])
def test_kws_integer(kws: tuple[ModuleOp, ModuleOp], step: int, raw: bool) -> None:
    _, nh = kws
    check_stream(nh, inputs_like(nh, (3, 40, 49)), step, raw=raw)


@pytest.mark.parametrize("step", [1, 2, 5])
def test_sample_net_along_its_height(sample_net: tuple[ModuleOp, ModuleOp], step: int) -> None:
    for module in sample_net:
        check_stream(module, inputs_like(module, (2, 3, 8, 5)), step)


@pytest.mark.parametrize("step", [1, 2, 4])
def test_nets(net: tuple[str, ModuleOp, ModuleOp, tuple[int, ...]], step: int) -> None:
    _, nq, nh, shape = net
    check_stream(nq, inputs_like(nq, shape), step)
    check_stream(nh, inputs_like(nh, shape), step, raw=step == 2)


def test_sample_program_with_a_dynamic_height() -> None:
    """The NanoEngine sample (dynamic M) on inputs of several heights: its plan covers a
    stream ending after any step."""
    module = nanoir.load(
        __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"
    )
    for rows, step in ((3, 1), (7, 2), (8, 3), (5, 5)):
        x = np.random.default_rng(rows).standard_normal((2, 3, rows, 5))
        check_stream(module, [x], step)


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_programs(data: st.DataObject) -> None:
    """Random exact-lowerable programs of every op kind (strided, dilated, padded convs,
    ceil_mode pools, joins, block ops, upsampling, transposes, flatten + linear, ...), at both
    levels, with a random step; those stream-plan refuses (a bidirectional recurrent op
    along time) are counted and left to ``test_stream_plan_accepts.py``."""
    module, shape = random_nq_program(data.draw, kinds=ALL_KINDS)
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((2, *shape[1:])) * data.draw(st.sampled_from((0.5, 4.0)))
    step = data.draw(st.integers(1, 4), label="step")
    try:
        stream_plan(module, steps=[(2, step)])
    except nanoir.Error:
        event("refused by stream-plan")
        return
    check_stream(module, [x], step)
    check_stream(lower_to_hw(module.clone()), [x], step)


# --------------------------------------------------------------------------------------------
# The step-by-step API
# --------------------------------------------------------------------------------------------

CONV3 = """\
func.func @main(%x: tensor<?x1x?xf32>) -> tensor<?x1x?xf32> {
  %w = nf.constant "w" dense<[[[1.0, 2.0, 4.0]]]> : tensor<1x1x3xf32>
  %c = nf.conv %x, %w : (tensor<?x1x?xf32>, tensor<1x1x3xf32>) -> tensor<?x1x?xf32>
  func.return %c : tensor<?x1x?xf32>
}
"""


def test_rows_come_out_as_soon_as_they_can() -> None:
    runner = StreamRunner(nanoir.parse(CONV3))
    outs = [runner.push(np.full((1, 1, 1), float(i), np.float32))[0] for i in range(5)]
    assert [o is None for o in outs] == [True, True, False, False, False]
    assert [float(o[0, 0, 0]) for o in outs[2:]] == [0 + 2 + 8, 1 + 4 + 12, 2 + 6 + 16]
    assert runner.finish() == [None]
    with pytest.raises(ExecutionError, match="push after finish"):
        runner.push(np.zeros((1, 1, 1), np.float32))
    runner.reset()
    assert runner.push(np.zeros((1, 1, 3), np.float32))[0].shape == (1, 1, 1)  # type: ignore[union-attr]


def test_bad_calls() -> None:
    module = nanoir.parse(CONV3)
    with pytest.raises(ExecutionError, match="step must be >= 1"):
        stream(module, [np.zeros((1, 1, 4), np.float32)], step=0)
    # Two rows for a 3-row window: the conv's own error, as the whole run gives it (the
    # stream said only that an output "produced no rows").
    short = np.zeros((1, 1, 2), np.float32)
    with pytest.raises(ExecutionError) as whole:
        run(module, short)
    with pytest.raises(ExecutionError, match="nf.conv failed on inputs") as streamed:
        stream(module, [short])
    assert str(streamed.value) == str(whole.value)
    with pytest.raises(ExecutionError, match="takes 1 inputs, got 2"):
        StreamRunner(module).push(None, None)


def test_nanoir_stream_is_the_executor() -> None:
    assert nanoir.stream is stream


TWO_INPUTS = """\
func.func @main(%x: tensor<?x2x6xf32>, %z: tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?x2x4xf32>) {
  %w = nf.constant "w" dense<[[[1.0, -2.0, 0.5], [0.25, 1.0, 3.0]], [[2.0, 0.0, -1.0], [1.0, 1.0, 1.0]]]> : tensor<2x2x3xf32>
  %c = nf.conv %x, %w : (tensor<?x2x6xf32>, tensor<2x2x3xf32>) -> tensor<?x2x4xf32>
  %f = nf.reshape %c : tensor<?x2x4xf32> -> tensor<?x8xf32>
  %fw = nf.constant "fc" dense<0.5> : tensor<3x8xf32>
  %y = nf.linear %f, %fw : (tensor<?x8xf32>, tensor<3x8xf32>) -> tensor<?x3xf32>
  %s = nf.add %y, %z : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %s, %c : tensor<?x3xf32>, tensor<?x2x4xf32>
}
"""


@pytest.mark.parametrize("step", [1, 4, 6])
def test_an_input_without_the_streamed_dim_and_two_results(step: int) -> None:
    """``z`` has no M dim: it arrives whole with the first rows; the flatten waits for every
    row of the conv, the conv's rows stream out as they come."""
    module = nanoir.parse(TWO_INPUTS)
    rng = np.random.default_rng(step)
    x = rng.integers(-8, 8, (3, 2, 6)).astype(np.float32)  # small integers: sums are exact
    z = rng.integers(-8, 8, (3, 3)).astype(np.float32)
    check_stream(module, [x, z], step)
    runner = StreamRunner(module)
    first = runner.push(x[:, :, :3], z)
    assert first[0] is None and first[1] is not None and first[1].shape == (3, 2, 1)


def test_nanoir_run_streams(tmp_path: Any) -> None:
    from nanoir.cli.run import main

    program = tmp_path / "conv.mlir"
    program.write_text(CONV3)
    x = np.arange(14, dtype=np.float32).reshape(2, 1, 7)
    np.save(tmp_path / "x.npy", x)
    assert main([str(program), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "w.npy")]) == 0
    assert (
        main(
            [
                str(program),
                "-i",
                str(tmp_path / "x.npy"),
                "--stream",
                "--step",
                "3",
                "-o",
                str(tmp_path / "s.npy"),
            ]
        )
        == 0
    )
    assert np.load(tmp_path / "s.npy").tobytes() == np.load(tmp_path / "w.npy").tobytes()


BN_POOL = """\
func.func @main(%x: tensor<?x3x6xf32>) -> tensor<?x2xf32> {
  %g = nf.constant "bn.weight" dense<[1.5, 0.5, 2.0]> : tensor<3xf32>
  %b = nf.constant "bn.bias" dense<[0.1, -0.2, 0.3]> : tensor<3xf32>
  %m = nf.constant "bn.running_mean" dense<[0.5, 0.0, -1.0]> : tensor<3xf32>
  %v = nf.constant "bn.running_var" dense<[1.0, 2.0, 0.5]> : tensor<3xf32>
  %n = nf.batch_norm %x, %g, %b, %m, %v : (tensor<?x3x6xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<?x3x6xf32>
  %r = nf.relu %n : tensor<?x3x6xf32>
  %p = nf.adaptive_avg_pool %r {output_size = array<i64: 1>} : tensor<?x3x6xf32> -> tensor<?x3x1xf32>
  %f = nf.reshape %p : tensor<?x3x1xf32> -> tensor<?x3xf32>
  %w = nf.constant "fc" dense<[[0.5, -1.0, 2.0], [1.0, 1.0, 1.0]]> : tensor<2x3xf32>
  %y = nf.linear %f, %w : (tensor<?x3xf32>, tensor<2x3xf32>) -> tensor<?x2xf32>
  func.return %y : tensor<?x2xf32>
}
"""


@pytest.mark.parametrize("step", [1, 4])
def test_float_batch_norm_and_global_pool(step: int) -> None:
    module = nanoir.parse(BN_POOL)
    check_stream(module, [np.random.default_rng(step).standard_normal((4, 3, 6))], step)


DATA_MOVEMENT = """\
func.func @main(%x: tensor<?x2x5xf32>) -> (tensor<?x2x16xf32>, tensor<?x16x2xf32>) {
  %p = nf.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 2>, value = 0.5 : f64} : tensor<?x2x5xf32> -> tensor<?x2x8xf32>
  %u = nf.upsample_nearest %p : tensor<?x2x8xf32> -> tensor<?x2x16xf32>
  %a, %b = nf.split %u {axis = 1 : i64, sizes = array<i64: 1, 1>} : (tensor<?x2x16xf32>) -> (tensor<?x1x16xf32>, tensor<?x1x16xf32>)
  %c = nf.concat %b, %a {axis = 1 : i64} : (tensor<?x1x16xf32>, tensor<?x1x16xf32>) -> tensor<?x2x16xf32>
  %t = nf.transpose %c {perm = array<i64: 0, 2, 1>} : tensor<?x2x16xf32> -> tensor<?x16x2xf32>
  func.return %c, %t : tensor<?x2x16xf32>, tensor<?x16x2xf32>
}
"""


@pytest.mark.parametrize("step", [1, 2, 5])
def test_data_movement(step: int) -> None:
    """Constant padding along M (zero rows of value 0.5), an integer-scale upsample (2 rows per
    row), split and concat along channels, and a transpose that moves M (relabelled: its rows
    pass through as they come, one in, one out, and its result streams along dim 1; before,
    it waited for the whole extent, 16 rows)."""
    module = nanoir.parse(DATA_MOVEMENT)
    check_stream(module, [np.random.default_rng(step).standard_normal((2, 2, 5))], step)
    plan = stream_plan(module)
    ops = {op.name: op for op in module.walk()}
    assert plan.warmup == {ops["nf.pad"]: (1, 2)}
    transpose = ops["nf.transpose"]
    assert plan.caches[(transpose, transpose.operands[0])].rows[2].max == 4
    assert plan.tensors[transpose.results[0]].shape == (-1, 4, 2)


PADDED_BEFORE_ITS_INPUT = """
builtin.module {
  func.func @main(%0: tensor<?x1x3xi2, #nh.fixed<0, BCM>> {nq.bits = 2 : i64, nq.exp = dense<0> : tensor<1xi8>, nq.rounding = #nq.rounding<trunc>}) -> tensor<?x1x3xi2, #nh.fixed<0, BCM>> {
    %w = nh.constant "conv.weight" dense<[[[1, -1]]]> : tensor<1x1x2xi8> -> tensor<1x1x2xi1, #nh.fixed<4, CCD>>
    %1 = nh.conv %0, %w {strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>} : (tensor<?x1x3xi2, #nh.fixed<0, BCM>>, tensor<1x1x2xi1, #nh.fixed<4, CCD>>) -> tensor<?x1x2xi32, #nh.fixed<4, BCM>>
    %2 = nh.requant %1 {shift = array<i64: 4>} : tensor<?x1x2xi32, #nh.fixed<4, BCM>> -> tensor<?x1x2xi2, #nh.fixed<0, BCM>>
    %3 = nh.pad %2 {pads = array<i64: 0, 0, 1, 0, 0, 0>} : tensor<?x1x2xi2, #nh.fixed<0, BCM>> -> tensor<?x1x3xi2, #nh.fixed<0, BCM>>
    func.return %3 : tensor<?x1x3xi2, #nh.fixed<0, BCM>>
  }
}
"""


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_pad_before_its_input_has_rows_keeps_the_code_dtype(step: int) -> None:
    """A pad of one row before a conv's output (kernel 2): streamed a row at a time, its
    first window is padding only, read before the conv has a row; that empty window was int64,
    and the padded i2 output came back int64 where the whole run gives int8 (drawn by
    ``test_stream_plan_accepts`` under the explore profile). Kills: the empty window's dtype
    int64 again."""
    module = nanoir.parse(PADDED_BEFORE_ITS_INPUT)
    x = np.array([[[1, -2, 1]], [[0, 1, -1]]], dtype=np.int8)
    (want,) = run(module, x, raw=True)
    (got,) = stream(module, [x], step=step, runner=StreamRunner(module, raw=True))
    assert want.dtype == np.int8
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)
