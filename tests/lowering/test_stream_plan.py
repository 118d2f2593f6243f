"""stream-plan: the NanoEngine sample's numbers and shapes, the rules beyond the reference
(padding, whole-extent ops, minimum steps), errors, and the attributes the pass writes.

The sample's table (``examples/readme_model.analysis.txt``) and the shapes declared in
``examples/readme_model.ne`` come from NanoEngine-PyTorch, an external reference; everything
else is checked against first principles or against the streaming executor's measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.functions import find_function
from nanoir.lowering.stream_plan import (
    BufferPlan,
    StreamPlanError,
    StreamPlanPass,
    parse_steps,
    stream_plan,
    stream_shapes,
)
from nanoir.runtime.interpreter import ExecutionError
from nanoir.runtime.numerics.shapes import ShapeError
from nanoir.runtime.stream import StreamRunner, stream
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, DictionaryAttr, ModuleOp

import nanoir
from nanoir.context import make_context
from nanoir.testing.programs import examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLE = EXAMPLES / "readme_model.ne"
SAMPLE_TABLE = EXAMPLES / "readme_model.analysis.txt"


def table_block(text: str, header_start: str) -> list[str]:
    """The lines of the table whose header starts with ``header_start``, up to a blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.fixture(scope="module")
def sample() -> ModuleOp:
    return nanoir.load(SAMPLE)


@pytest.fixture(scope="module")
def sample_plan(sample: ModuleOp) -> BufferPlan:
    return stream_plan(sample, mem_dim=2, steps=[(2, 1), (3, 5)])


# --------------------------------------------------------------------------------------------
# The NanoEngine sample
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", ["Tensor Name", "Node Name Tensor Name"])
def test_sample_tables_match_the_reference(sample_plan: BufferPlan, header: str) -> None:
    reference = SAMPLE_TABLE.read_text(encoding="utf-8")
    assert table_block(sample_plan.report(), header) == table_block(reference, header)


def _recorded(entries: object) -> list[tuple[str, tuple[int, ...]]]:
    assert isinstance(entries, ArrayAttr)
    out = []
    for e in entries.data:
        assert isinstance(e, DictionaryAttr)
        shape = e.data["shape"]
        assert isinstance(shape, DenseArrayBase)
        out.append((e.data["name"].data, tuple(int(v) for v in shape.get_values())))  # type: ignore[union-attr]
    return out


def test_sample_shapes_match_the_program(sample: ModuleOp, sample_plan: BufferPlan) -> None:
    """Every runtime tensor and cache is declared in the .ne file with the reference's plan."""
    func = find_function(sample)
    checked = 0
    arg = func.body.block.args[0]
    declared = func.arg_attrs.data[0].data["ne.tensor"]  # type: ignore[union-attr]
    assert sample_plan.tensors[arg].shape == tuple(declared.data["shape"].get_values())  # type: ignore[union-attr]
    for op in func.body.block.ops:
        if "ne.mem_s" not in op.attributes:
            continue
        for result, (name, shape) in zip(op.results, _recorded(op.attributes["ne.out_s"])):
            assert sample_plan.tensors[result].name == name
            assert sample_plan.tensors[result].shape == shape, name
            checked += 1
        runtime = [c for (node, _), c in sample_plan.caches.items() if node is op]
        mems = _recorded(op.attributes["ne.mem_s"])
        assert [c.shape for c in runtime] == [shape for _, shape in mems], mems
        checked += len(mems)
    assert checked == 15 + 16  # 15 node outputs, 16 caches


def test_sample_export_with_the_pass_reproduces_the_file(sample: ModuleOp) -> None:
    from nanoir.grammar.ne.exporter import export_nanoengine

    module = sample.clone()
    StreamPlanPass(mem_dim=2, steps="2:1,3:5").apply(make_context(), module)
    shapes = stream_shapes(module)
    assert shapes is not None
    assert export_nanoengine(module, plan=shapes) == SAMPLE.read_text(encoding="utf-8")


def test_width_needs_the_whole_receptive_field_in_one_step(sample: ModuleOp) -> None:
    # Along the width (not streamed) one step must produce every output: the 3-wide conv
    # needs 3 columns.
    with pytest.raises(
        StreamPlanError, match=r"dim 3 .*a step of 2 does not; the minimum step is 3"
    ):
        stream_plan(sample, steps="2:1,3:2")
    narrow = stream_plan(sample, steps="2:1,3:3")
    out = find_function(sample).body.block.last_op.operands[0]  # type: ignore[union-attr]
    assert narrow.tensors[out].rows[3].sum == 1  # (3 - 3) / 1 + 1 columns


def test_step_larger_than_the_receptive_field(sample: ModuleOp) -> None:
    """Two rows per step into a 3-row conv: the conv's cache holds 2 + 2 rows before firing
    twice; the executor's caches stay within the plan on any input length."""
    plan = stream_plan(sample, steps=[(2, 2)])
    conv = next(op for op in find_function(sample).body.block.ops if op.name == "nf.conv")
    assert plan.caches[(conv, conv.operands[0])].rows[2].max == 4
    runner = StreamRunner(sample)
    for rows in (3, 4, 5, 8):
        x = np.random.default_rng(rows).standard_normal((1, 3, rows, 5))
        stream(sample, [x], step=2, runner=runner)
        for key, peak in runner.cache_peaks.items():
            assert peak <= plan.caches[key].rows[2].max


# --------------------------------------------------------------------------------------------
# Rules beyond the reference
# --------------------------------------------------------------------------------------------

PADDED = """\
func.func @main(%x: tensor<?x1x?xf32>) -> tensor<?x1x?xf32> {
  %w = nf.constant "w" dense<1.0> : tensor<1x1x3xf32>
  %c = nf.conv %x, %w {pads = array<i64: 2, 1>, dilations = array<i64: 2>} : (tensor<?x1x?xf32>, tensor<1x1x3xf32>) -> tensor<?x1x?xf32>
  func.return %c : tensor<?x1x?xf32>
}
"""


def test_padding_is_a_causal_warm_up() -> None:
    """A conv of receptive field 2*(3-1)+1 = 5 padded by (2, 1): 2 zero rows at the start, so
    the first output needs 3 real rows; 1 zero row when the stream ends."""
    module = nanoir.parse(PADDED)
    plan = stream_plan(module)
    conv = find_function(module).body.block.ops.first.next_op  # type: ignore[union-attr]
    assert plan.warmup == {conv: (2, 1)}
    assert plan.first_row_step[2] == 3
    assert plan.caches[(conv, conv.operands[0])].rows[2].max >= 5
    runner = StreamRunner(module)
    outs = [runner.push(np.ones((1, 1, 1), np.float32))[0] for _ in range(3)]
    assert [o is None for o in outs] == [True, True, False]
    last = runner.finish()[0]
    assert last is not None and last.shape[2] == 1  # the row that needs the end padding


def test_the_sample_model_streams_along_its_height_with_padding() -> None:
    """Shapes of a padded 2-D conv along both dims: one step along the width covers the
    padded width."""
    text = """\
func.func @main(%x: tensor<?x2x?x6xf32>) -> tensor<?x4x?x6xf32> {
  %w = nf.constant "w" dense<0.5> : tensor<4x2x3x3xf32>
  %c = nf.conv %x, %w {pads = array<i64: 1, 1, 1, 1>} : (tensor<?x2x?x6xf32>, tensor<4x2x3x3xf32>) -> tensor<?x4x?x6xf32>
  func.return %c : tensor<?x4x?x6xf32>
}
"""
    module = nanoir.parse(text)
    plan = stream_plan(module, steps="2:1,3:6")
    func = find_function(module)
    conv = func.body.block.last_op.operands[0]  # type: ignore[union-attr]
    assert plan.tensors[conv].shape == (-1, 4, 1, 6)  # the whole padded width: 6 columns
    assert plan.caches[(conv.owner, func.body.block.args[0])].shape == (-1, 2, 3, 8)  # type: ignore[index]


KWS_LIKE = """\
func.func @main(%x: tensor<?x2x{T}xf32>) -> tensor<?x3xf32> {{
  %w = nf.constant "w" dense<0.5> : tensor<2x2x3xf32>
  %c = nf.conv %x, %w {{pads = array<i64: 1, 1>}} : (tensor<?x2x{T}xf32>, tensor<2x2x3xf32>) -> tensor<?x2x{T}xf32>
  %p = nf.adaptive_avg_pool %c {{output_size = array<i64: 1>}} : tensor<?x2x{T}xf32> -> tensor<?x2x1xf32>
  %f = nf.reshape %p : tensor<?x2x1xf32> -> tensor<?x2xf32>
  %fw = nf.constant "fc" dense<1.0> : tensor<3x2xf32>
  %y = nf.linear %f, %fw : (tensor<?x2xf32>, tensor<3x2xf32>) -> tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}}
"""


def test_global_pool_buffers_the_whole_extent_and_then_moves_units() -> None:
    module = nanoir.parse(KWS_LIKE.format(T=7))
    plan = stream_plan(module)
    ops = list(find_function(module).body.block.ops)
    pool, flatten, linear = (
        next(o for o in ops if o.name == n)
        for n in ("nf.adaptive_avg_pool", "nf.reshape", "nf.linear")
    )
    assert plan.caches[(pool, pool.operands[0])].rows[2].max == 7
    assert plan.caches[(flatten, flatten.operands[0])].rows[2].max == 1
    assert 2 not in plan.caches[(linear, linear.operands[0])].rows  # one unit per sample
    assert plan.tensors[linear.results[0]].shape == (-1, 3)
    # Every output exists once the stream has ended: 7 steps of rows and the end step.
    assert plan.first_row_step[2] == 8


def test_a_dynamic_extent_cannot_be_buffered_whole() -> None:
    module = nanoir.parse(KWS_LIKE.format(T="?"))
    with pytest.raises(
        StreamPlanError,
        match=r"'nf.adaptive_avg_pool' .*needs the whole of dim 2"
        r".*dynamic",
    ):
        stream_plan(module)


def test_unknown_ops_are_named_not_looped_on() -> None:
    text = """\
func.func @main(%x: tensor<?x2x?xf32>) -> tensor<?x2x?xf32> {
  %y = nf.custom %x {op_type = "Gather"} : (tensor<?x2x?xf32>) -> tensor<?x2x?xf32>
  func.return %y : tensor<?x2x?xf32>
}
"""
    module = nanoir.parse(text)
    with pytest.raises(
        StreamPlanError, match=r"'nf.custom' \(op_type Gather\).* has no streaming rule"
    ):
        stream_plan(module)
    with pytest.raises(StreamPlanError, match="Gather"):
        StreamRunner(module)


def test_the_function_to_plan_is_found_as_the_interpreter_finds_it() -> None:
    text = """\
func.func @f(%x: tensor<?x2x?xf32>) -> tensor<?x2x?xf32> {
  func.return %x : tensor<?x2x?xf32>
}
func.func @g(%x: tensor<?x2x?xf32>) -> tensor<?x2x?xf32> {
  func.return %x : tensor<?x2x?xf32>
}
"""
    module = nanoir.parse(text)
    with pytest.raises(StreamPlanError, match="2 functions and none is @main"):
        stream_plan(module)
    with pytest.raises(StreamPlanError, match="no function @h"):
        stream_plan(module, function="h")
    assert stream_plan(module, function="g").func.sym_name.data == "g"


def test_branches_at_different_rates_are_an_error() -> None:
    text = """\
func.func @main(%x: tensor<?x1x?xf32>) -> tensor<?x1x?xf32> {
  %w = nf.constant "w" dense<1.0> : tensor<1x1x1xf32>
  %c = nf.conv %x, %w {strides = array<i64: 2>} : (tensor<?x1x?xf32>, tensor<1x1x1xf32>) -> tensor<?x1x?xf32>
  %a = nf.add %c, %x : (tensor<?x1x?xf32>, tensor<?x1x?xf32>) -> tensor<?x1x?xf32>
  func.return %a : tensor<?x1x?xf32>
}
"""
    with pytest.raises(StreamPlanError, match=r"'nf.add' \(%a\) grow without bound"):
        stream_plan(nanoir.parse(text))


def test_residual_join_buffers_the_early_branch() -> None:
    """``x + conv(x)`` with a 3-row conv padded (1, 1): the conv's row j needs x row j + 1, so
    the add holds x's rows one step longer than the conv's."""
    text = """\
func.func @main(%x: tensor<?x1x?xf32>) -> tensor<?x1x?xf32> {
  %w = nf.constant "w" dense<1.0> : tensor<1x1x3xf32>
  %c = nf.conv %x, %w {pads = array<i64: 1, 1>} : (tensor<?x1x?xf32>, tensor<1x1x3xf32>) -> tensor<?x1x?xf32>
  %a = nf.add %x, %c : (tensor<?x1x?xf32>, tensor<?x1x?xf32>) -> tensor<?x1x?xf32>
  func.return %a : tensor<?x1x?xf32>
}
"""
    module = nanoir.parse(text)
    plan = stream_plan(module)
    add = find_function(module).body.block.last_op.operands[0].owner  # type: ignore[union-attr]
    x, c = add.operands  # type: ignore[union-attr]
    assert plan.caches[(add, x)].rows[2].max == 2
    assert plan.caches[(add, c)].rows[2].max == 1


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ("2:0", r"step along dim 2 must be >= 1"),
        ("2-1", r"not 'dim:step'"),
        ("1:1", r"dim 1 cannot be analysed"),
        ("2:1,2:3", r"given twice"),
    ],
)
def test_bad_steps(steps: str, message: str) -> None:
    with pytest.raises(StreamPlanError, match=message):
        parse_steps(steps, 2)


def test_streamed_dim_comes_first_with_step_one() -> None:
    assert parse_steps("3:5", 2) == ((2, 1), (3, 5))
    assert parse_steps([(3, 5), (2, 4)], 2) == ((2, 4), (3, 5))


# --------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------


def test_pass_writes_and_reads_back_the_shapes(
    sample: ModuleOp, capsys: pytest.CaptureFixture[str]
) -> None:
    module = sample.clone()
    StreamPlanPass(steps="2:1,3:5", report=True).apply(make_context(), module)
    assert "Max-Len-D2" in capsys.readouterr().out
    func = find_function(module)
    plan = stream_plan(module, steps="2:1,3:5")
    shapes = stream_shapes(module)
    assert shapes is not None
    assert shapes.tensors == {v: t.shape for v, t in plan.tensors.items()}
    assert shapes.caches == {k: c.shape for k, c in plan.caches.items()}
    attr = func.attributes["stream.plan"]
    assert isinstance(attr, DictionaryAttr)
    assert tuple(attr.data["steps"].get_values()) == (2, 1, 3, 5)  # type: ignore[union-attr]
    assert stream_shapes(nanoir.load(SAMPLE)) is None  # not planned yet


def test_pass_is_registered() -> None:
    from nanoir.passes import NANOIR_PASSES

    assert NANOIR_PASSES["stream-plan"]().name == "stream-plan"
    assert nanoir.stream_plan is stream_plan


def test_the_end_of_a_dynamic_stream_is_planned() -> None:
    """End padding makes the last step busier than the steady state: the first conv fires 4
    windows at once on its 4 zero rows, so the second conv's cache holds 2 + 4 rows. With a
    dynamic M the plan must cover a stream that ends after any step."""
    text = """\
func.func @main(%x: tensor<?x1x?xf32>) -> tensor<?x1x?xf32> {
  %w1 = nf.constant "w1" dense<1.0> : tensor<1x1x5xf32>
  %a = nf.conv %x, %w1 {pads = array<i64: 0, 4>} : (tensor<?x1x?xf32>, tensor<1x1x5xf32>) -> tensor<?x1x?xf32>
  %w2 = nf.constant "w2" dense<1.0> : tensor<1x1x3xf32>
  %b = nf.conv %a, %w2 : (tensor<?x1x?xf32>, tensor<1x1x3xf32>) -> tensor<?x1x?xf32>
  func.return %b : tensor<?x1x?xf32>
}
"""
    module = nanoir.parse(text)
    second = find_function(module).body.block.last_op.operands[0].owner  # type: ignore[union-attr]
    for step in (1, 2, 3):
        plan = stream_plan(module, steps=[(2, step)])
        runner = StreamRunner(module)
        measured = 0
        for rows in range(5, 12):
            x = np.arange(rows, dtype=np.float32).reshape(1, 1, rows)
            got = stream(module, [x], step=step, runner=runner)[0]
            assert got.tobytes() == nanoir.run(module, x)[0].tobytes()
            measured = max(measured, runner.cache_peaks[(second, second.operands[0])])
            for key, peak in runner.cache_peaks.items():
                assert peak <= plan.caches[key].rows[2].max
        assert measured == 2 + 4 <= plan.caches[(second, second.operands[0])].rows[2].max


@st.composite
def dynamic_chains(draw: st.DrawFn) -> str:
    """A 1-D program on ``?x2x?``: padded, strided, dilated convs (small integer weights, so
    float32 sums are exact), ceil_mode max pools, relus and same-length residual adds."""
    t = "tensor<?x2x?xf32>"
    lines = [f"func.func @main(%v0: {t}) -> {t} {{"]
    for i in range(1, draw(st.integers(1, 4)) + 1):
        prev = f"%v{i - 1}"
        kind = draw(st.sampled_from(["conv", "conv", "pool", "relu", "residual"]))
        if kind == "relu":
            lines.append(f"  %v{i} = nf.relu {prev} : {t}")
            continue
        if kind == "pool":
            k = draw(st.integers(2, 3))
            s, p = draw(st.integers(1, 2)), draw(st.integers(0, k // 2))
            ceil = str(draw(st.booleans())).lower()
            lines.append(
                f"  %v{i} = nf.max_pool {prev} {{kernel = array<i64: {k}>, strides = "
                f"array<i64: {s}>, pads = array<i64: {p}, {p}>, ceil_mode = {ceil}}} "
                f": {t} -> {t}"
            )
            continue
        k, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        rf = d * (k - 1) + 1
        if kind == "residual":  # same length: pads add up to rf - 1, stride 1
            s, pb = 1, draw(st.integers(0, rf - 1))
            pe = rf - 1 - pb
        else:
            s, pb, pe = draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(0, 2))
        w = draw(st.lists(st.integers(-2, 2), min_size=4 * k, max_size=4 * k))
        lines.append(
            f'  %w{i} = nf.constant "w{i}" dense<{np.array(w).reshape(2, 2, k).tolist()}>'
            f" : tensor<2x2x{k}xf32>"
        )
        conv = "%c" + str(i) if kind == "residual" else f"%v{i}"
        lines.append(
            f"  {conv} = nf.conv {prev}, %w{i} {{strides = array<i64: {s}>, pads = "
            f"array<i64: {pb}, {pe}>, dilations = array<i64: {d}>}} : ({t}, "
            f"tensor<2x2x{k}xf32>) -> {t}"
        )
        if kind == "residual":
            lines.append(f"  %v{i} = nf.add {prev}, %c{i} : ({t}, {t}) -> {t}")
    lines += [f"  func.return %v{i} : {t}", "}"]
    return "\n".join(lines)


@settings(max_examples=examples(40), deadline=None)
@given(text=dynamic_chains(), step=st.integers(1, 4), length=st.integers(1, 14))
def test_plan_bounds_dynamic_streams_of_any_length(text: str, step: int, length: int) -> None:
    module = nanoir.parse(text)
    x = np.arange(2 * 2 * length, dtype=np.float32).reshape(2, 2, length) % 7 - 3
    try:
        want = nanoir.run(module, x)[0]
    except ExecutionError as e:
        # Too short for the program (a window longer than its padded input): nothing to
        # compare. Any other failure of the whole-tensor run is a failure of this test.
        if not (isinstance(e.__cause__, ShapeError) and "does not fit input length" in str(e)):
            raise
        return
    runner = StreamRunner(module)
    got = stream(module, [x], step=step, runner=runner)[0]
    assert got.tobytes() == want.tobytes()
    plan = stream_plan(module, steps=[(2, step)])
    for key, peak in runner.cache_peaks.items():
        assert peak <= plan.caches[key].rows[2].max, (plan.caches[key].node_name, peak)
