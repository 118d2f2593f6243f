"""The trained-network benchmark (``benchmarks/bench_trained.py``) kept from rotting, without the
network, in seconds.

A stand-in direction classifier, built here the way PaddleOCR writes its classifier (conv +
batch norm + hardswish written ``x * clip(x + 3, 0, 6) / 6``, squeeze-excitation gated by
``HardSigmoid(alpha=0.2)``, a 1x2 softmax; opset 11, batch and image size dynamic), goes
through the very functions the benchmark runs on the real one: ``prepare``, the text-line
inputs, every column (nanoir float, defaults, recommended, onnxruntime's quantize_static), the
measures, nq == nh, the per-layer figures and the markdown. Its weights are random (BN
statistics set on the inputs), so the figures are not the trained network's; what is checked is
that each part does what it says, against independent oracles: onnxruntime on the file before
and after each prepare edit, measures on inputs whose answers are worked out by hand.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("PIL")

import onnx  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from torch import nn  # noqa: E402

import nanoir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_trained  # noqa: E402
from trained import measures, models, prepare  # noqa: E402
from trained.columns import nanoir_outputs, nq_equals_nh, run_column  # noqa: E402
from trained.models import (  # noqa: E402
    Entry,
    batches,
    build_from_onnx,
    labels_measure,
    paddle_inputs,
)
from trained.ort_baseline import run_file  # noqa: E402

SHAPE = (1, 3, 48, 192)


# --- the stand-in classifier -------------------------------------------------------------------


class PaddleHardswish(nn.Module):
    """Paddle's hardswish as it reaches ONNX: Add, Clip, Mul, then ``Div(., 6)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * F.relu6(x + 3) / 6


class ConvBnAct(nn.Sequential):
    """Conv (no bias) + BatchNorm + hardswish, as PaddleOCR's MobileNetV3 blocks."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1):
        conv = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False)
        super().__init__(conv, nn.BatchNorm2d(cout), PaddleHardswish())


class SqueezeExcite(nn.Module):
    """Squeeze-excitation gated by a hardsigmoid (exported as torch's HardSigmoid; the test
    then gives it Paddle's alpha = 0.2)."""

    def __init__(self, c: int):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(s))))


class StandInClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBnAct(3, 8, 3, stride=2)
        self.block1 = nn.Sequential(
            ConvBnAct(8, 8, 3, groups=8), SqueezeExcite(8), ConvBnAct(8, 16)
        )
        self.block2 = nn.Sequential(
            ConvBnAct(16, 16, 3, stride=2, groups=16), SqueezeExcite(16), ConvBnAct(16, 24)
        )
        self.head = nn.Linear(24, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.stem(x)))
        return torch.softmax(self.head(F.adaptive_avg_pool2d(x, 1).flatten(1)), dim=1)


def stand_in_file(folder: Path, calibration: np.ndarray) -> Path:
    """The stand-in as PaddleOCR ships its classifier: BN statistics set on ``calibration``
    (a train-mode pass), exported at opset 11 with dynamic batch and size, its HardSigmoid
    nodes given alpha = 0.2."""
    torch.manual_seed(0)
    model = StandInClassifier()
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # a cumulative average over the passes
    with torch.no_grad():
        model(torch.from_numpy(calibration))
    model.eval()
    path = folder / "stand_in_cls.onnx"
    torch.onnx.export(
        model,
        (torch.from_numpy(calibration[:1]),),
        str(path),
        dynamo=False,
        opset_version=11,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}, "y": {0: "n"}},
    )
    shipped = onnx.load(str(path))
    for node in shipped.graph.node:
        if node.op_type == "HardSigmoid":
            del node.attribute[:]
            node.attribute.extend(
                [helper.make_attribute("alpha", 0.2), helper.make_attribute("beta", 0.5)]
            )
    onnx.save(shipped, str(path))
    return path


@pytest.fixture(scope="module")
def inputs() -> tuple[np.ndarray, np.ndarray]:
    return paddle_inputs("cls", 16, 101), paddle_inputs("cls", 24, 202)


@pytest.fixture(scope="module")
def stand_in(
    tmp_path_factory: pytest.TempPathFactory, inputs: tuple[np.ndarray, np.ndarray]
) -> Path:
    return stand_in_file(tmp_path_factory.mktemp("stand_in"), inputs[0])


# --- measures against worked answers -------------------------------------------------------------


def test_sqnr_of_a_known_noise() -> None:
    """10% relative noise is 20 dB; exact is inf (mutant: the ratio inverted)."""
    ref = np.random.default_rng(0).standard_normal(1000)
    assert measures.sqnr_db(ref, ref * 1.1) == pytest.approx(20.0)
    assert measures.sqnr_db(ref, ref) == math.inf


def test_ctc_greedy_merges_repeats_then_drops_blanks() -> None:
    """Best path 0 3 3 0 3 5 5 0 reads 3 3 5 (mutants: blanks dropped before merging reads
    3 5; repeats kept reads 3 3 3 5 5)."""
    path = [0, 3, 3, 0, 3, 5, 5, 0]
    scores = np.eye(6)[path] + 0.01
    assert measures.ctc_greedy(scores, blank=0) == (3, 3, 5)
    other = np.eye(6)[[0, 3, 0, 0, 3, 5, 0, 0]]  # reads 3 3 5 too
    third = np.eye(6)[[3, 3, 3, 3, 5, 5, 5, 0]]  # reads 3 5
    assert measures.strings_equal(np.stack([scores, scores]), np.stack([other, third])) == 0.5


def test_mask_iou_of_known_rectangles() -> None:
    """Two 4x4 squares overlapping in 2x4: IoU 8/24; two empty masks agree (1); the
    threshold is strict (mutants: >= threshold; union for intersection)."""
    a, b = np.zeros((1, 8, 8)), np.zeros((1, 8, 8))
    a[0, 0:4, 0:4] = 0.9
    b[0, 2:6, 0:4] = 0.9
    assert measures.mask_iou(a, b, 0.3) == pytest.approx(8 / 24)
    assert measures.mask_iou(np.zeros((1, 4, 4)), np.full((1, 4, 4), 0.3), 0.3) == 1.0
    pair = np.stack([a[0], np.zeros((8, 8))])
    assert measures.mask_iou(pair, np.stack([b[0], np.zeros((8, 8))])) == pytest.approx(
        (8 / 24 + 1) / 2
    )


def test_labels_and_decisions() -> None:
    """Labels by argmax; a face where p(face) (channel 1) > 0.5, strictly. Mutants: the
    decision read on channel 0 (0.75 below); ``>=`` 0.5 (0.25)."""
    ref = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    got = np.array([[0.6, 0.4], [0.7, 0.3], [0.4, 0.6], [0.1, 0.9]])
    assert measures.label_agreement(ref, got) == 0.5
    face_ref = np.array([[0.2, 0.8], [0.7, 0.3], [0.4, 0.6], [0.9, 0.1]])  # face, -, face, -
    face_got = np.array([[0.5, 0.5], [0.1, 0.9], [0.45, 0.55], [0.8, 0.2]])  # -, face, face, -
    assert measures.decision_agreement(face_ref, face_got) == 0.5


# --- prepare: every edit keeps the float function ------------------------------------------------


def _paddle_style_block(folder: Path) -> Path:
    """A one-block file with each construct an edit rewrites: HardSigmoid(alpha=0.2), Div by
    6, and the recognizer's written-out LayerNorm (over the last axis), at opset 12."""
    rng = np.random.default_rng(0)
    w, b = rng.normal(1, 0.2, 8).astype(np.float32), rng.normal(0, 0.2, 8).astype(np.float32)
    init = [
        numpy_helper.from_array(v, n)
        for n, v in [
            ("six", np.array(6, np.float32)),
            ("two", np.array(2, np.float32)),
            ("eps", np.array(1e-5, np.float32)),
            ("w", w),
            ("b", b),
        ]
    ]
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["g"], alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["x", "g"], ["xg"]),
        helper.make_node("Div", ["xg", "six"], ["d"]),
        helper.make_node("ReduceMean", ["d"], ["mu"], axes=[-1]),
        helper.make_node("Sub", ["d", "mu"], ["c"]),
        helper.make_node("Pow", ["c", "two"], ["c2"]),
        helper.make_node("ReduceMean", ["c2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["c", "sd"], ["n"]),
        helper.make_node("Mul", ["n", "w"], ["nw"]),
        helper.make_node("Add", ["nw", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    path = folder / "block.onnx"
    onnx.save(model, str(path))
    return path


EDIT_COUNTS = {
    "static-shape": 1,
    "hardsigmoid-as-clip": 1,
    "layernorm-as-op": 1,
    "classifier-output-1x2": 0,
    "div-as-mul": 1,  # Div by the constant 6; the LayerNorm's Div by Sqrt(.) stays
}


def test_each_edit_keeps_the_function(tmp_path: Path) -> None:
    """onnxruntime gives the same outputs before and after each edit alone, and each edit
    changes what it says (mutants seen to fail: Clip's bounds 0..6; the reciprocal not taken;
    the LayerNorm's epsilon dropped, which moves the output past the 1e-5 tolerance here)."""
    source = _paddle_style_block(tmp_path)
    x = np.random.default_rng(1).normal(0, 3, (5, 4, 8)).astype(np.float32)
    (want,) = run_file(source, [x])
    for edit in prepare.EDITS:
        model = onnx.load(str(source))
        if edit.opset:
            model = prepare.to_opset(model, edit.opset)
        changed = edit.apply(model, (5, 4, 8))
        path = tmp_path / f"{edit.name}.onnx"
        onnx.save(model, str(path))
        ops = [n.op_type for n in model.graph.node]
        assert changed == EDIT_COUNTS[edit.name], edit.name
        (got,) = run_file(path, [x])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=edit.name)
        if edit.name == "hardsigmoid-as-clip":
            assert "HardSigmoid" not in ops and "Clip" in ops
        if edit.name == "layernorm-as-op":
            assert "LayerNormalization" in ops and "ReduceMean" not in ops and "Sqrt" not in ops
        if edit.name == "div-as-mul":
            assert ops.count("Div") == 1 and ops.count("Mul") == 3
        if edit.name == "static-shape":
            dims = model.graph.input[0].type.tensor_type.shape.dim
            assert [d.dim_value for d in dims] == [5, 4, 8]


def test_classifier_output_is_declared_with_the_batch(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    assert prepare.classifier_output_shape(model, (1, 2)) == 1
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [1, 2]


# --- the whole path on the stand-in --------------------------------------------------------------


def test_text_lines_are_seeded_disjoint_and_half_turned(
    inputs: tuple[np.ndarray, np.ndarray],
) -> None:
    calibration, evaluation = inputs
    assert calibration.shape == (16, 3, 48, 192) and calibration.dtype == np.float32
    assert np.array_equal(calibration, paddle_inputs("cls", 16, 101))
    assert not ({x.tobytes() for x in calibration} & {x.tobytes() for x in evaluation})
    assert calibration.min() >= -1 and calibration.max() <= 1 and calibration.std() > 0.2


def test_stand_in_through_every_column(
    stand_in: Path,
    inputs: tuple[np.ndarray, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The float column is the shipped file's function (prepare kept it: labels 100%, SQNR
    far above 8-bit's); onnxruntime's and nanoir's quantized columns give 8-bit-like SQNRs
    against it; every nanoir column is equal bit for bit at nh, and the check says NO when
    the nq outputs it is given differ from the nh program's by one value.

    Mutants seen to fail it: the float reference taken from the prepared file instead of the
    shipped one; the nq == nh check comparing the nq outputs with themselves."""
    calibration, evaluation = inputs
    notes: list[str] = []
    referenced: list[Path] = []

    def recorded(path: Path, xs: list[np.ndarray]) -> list[np.ndarray]:
        referenced.append(path)
        return run_file(path, xs)

    monkeypatch.setattr(models, "run_file", recorded)
    subject = build_from_onnx(stand_in, SHAPE, calibration, evaluation, tmp_path, notes)
    assert referenced == [stand_in]  # the shipped file: the prepared one computes the same here
    assert any(n.startswith("prepare: hardsigmoid-as-clip") for n in notes)
    assert any("batch norms folded" in n for n in notes)
    (reference,) = run_file(stand_in, batches(evaluation, 8))
    np.testing.assert_array_equal(subject.reference[0], reference)

    cells = {
        c.name: run_column("cls", subject, c, labels_measure, tmp_path, layers=c.name == "defaults")
        for c in bench_trained.COLUMNS
    }
    float_cell = cells["float"].measures
    assert float_cell["labels equal"] == 1.0 and 80 < float_cell["SQNR dB"] < math.inf
    for name in ("defaults", "recommended", "ort"):
        cell = cells[name]
        assert not cell.error, cell.error
        assert 0 <= cell.measures["labels equal"] <= 1
        assert cell.measures["SQNR dB"] < 70  # quantized: far from float32's agreement
        if name != "ort":
            assert cell.nq_nh.startswith("yes"), cell.nq_nh
            assert cell.seconds is not None and cell.seconds > 0
    assert cells["recommended"].measures["SQNR dB"] > 10
    assert cells["ort"].measures["SQNR dB"] > 10
    layers = cells["defaults"].layers
    assert layers is not None and layers.path and math.isfinite(layers.local_db)

    program = subject.program.clone()
    nanoir.quantize(program, batches(calibration, 1))
    outputs = nanoir_outputs(program, evaluation, 1)
    assert nq_equals_nh(program, subject, outputs).startswith("yes")
    outputs[0][3, 1] += 2.0**-20
    assert nq_equals_nh(program, subject, outputs) == "NO"


def test_measure_model_and_markdown(
    stand_in: Path, inputs: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """The benchmark's own driver on a one-model table: the summary row and the details name
    every column and the prepare notes; an unreachable wheel skips with one line."""
    calibration, evaluation = inputs
    entry = Entry(
        "stand-in",
        "stand-in classifier",
        "built in the test",
        "labels equal",
        labels_measure,
        lambda cache, work, log: build_from_onnx(
            stand_in, SHAPE, calibration, evaluation[:8], work, []
        ),
    )
    columns = [c for c in bench_trained.COLUMNS if c.name in ("float", "defaults")]
    lines: list[str] = []
    result = bench_trained.measure_model(
        entry, columns, tmp_path, tmp_path / "w", lines.append, False
    )
    text = "\n".join(
        bench_trained.summary([result], columns) + bench_trained.details(result, columns)
    )
    assert "| stand-in classifier (built in the test) | labels equal | 100% (" in text
    assert "nq == nh" in text and "prepare: div-as-mul" in text
    assert len(lines) == 2  # one progress line per column

    from trained.fetch import Unreachable

    def unreachable(cache: Path, work: Path, log: object) -> None:
        raise Unreachable("example==1.0: pip download failed (no network)")

    offline = Entry("x", "x", "x", "labels equal", labels_measure, unreachable)  # type: ignore[arg-type]
    lines.clear()
    skipped = bench_trained.measure_model(offline, columns, tmp_path, tmp_path, lines.append, False)
    assert "example==1.0" in skipped.skipped and lines == [f"skipped x: {skipped.skipped}"]
