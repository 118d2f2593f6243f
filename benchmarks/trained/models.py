"""The trained networks of the benchmark, each made ready as a :class:`Subject`: the nanoir
float program (BN folded), the float reference's outputs on the evaluation inputs, the
calibration batches, the float ONNX file onnxruntime quantizes, and the task measure.

:data:`MODELS` is the table (a new network is one row): name -> :class:`Entry` (where it comes
from, what it reads, how it is measured, how to build its subject).

Inputs (fixed seeds; calibration and evaluation drawn from different seeds, checked disjoint):
16 calibration inputs for every network; 128 evaluation inputs for the label and string
networks (classifier, recognizers, MTCNN), 32 images for the detector. PaddleOCR's files get
their inputs as rapidocr feeds them (BGR channel order, ``(x/255 - 0.5)/0.5``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trained import measures
from trained.fetch import fetch, sha256
from trained.ort_baseline import run_file
from trained.prepare import prepare

__all__ = ["CALIBRATION", "MODELS", "Entry", "Subject", "batches", "fold_batch_norms"]

CALIBRATION = 16
EVALUATION = 128
EVALUATION_IMAGES = 32
CALIBRATION_SEED, EVALUATION_SEED = 101, 202

Measure = Callable[[list[np.ndarray], list[np.ndarray]], dict[str, float]]


@dataclass
class Subject:
    """A network ready to measure."""

    program: Any
    """The nanoir float (nf) program, batch norms folded."""
    calibration: np.ndarray
    evaluation: np.ndarray
    reference: list[np.ndarray]
    """The float reference's outputs on ``evaluation``."""
    onnx_float: Path
    """The float ONNX file onnxruntime quantizes: the graph nanoir reads (the prepared file, or
    the torch module's export)."""
    batch: int
    """Inputs per run of the program and of ``onnx_float`` (1 where the shape is static)."""
    notes: list[str] = field(default_factory=list)
    onnx_shipped: Path | None = None
    """The file as shipped, when it is not ``onnx_float`` (PaddleOCR's)."""


@dataclass(frozen=True)
class Entry:
    name: str
    title: str
    source: str
    measure_name: str
    """The task measure shown in the summary (a key of ``measure``'s result)."""
    measure: Measure
    build: Callable[[Path, Path, Callable[[str], None]], Subject]
    """``build(cache, work_folder, log)``; raises ``fetch.Unreachable`` when its wheel cannot
    be downloaded."""


def batches(x: np.ndarray, size: int) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


def fold_batch_norms(program: Any) -> str:
    """Fold every batch norm that folds into its conv/linear (``nanoir.fold_bn`` when this
    nanoir has it, else the ``fold-bn`` pass ``compile_model`` runs): ``nanoir.quantize`` does
    not fold them yet (issue 30 section 4). Returns a note saying what was done."""
    from nanoir.dialects import nf

    import nanoir

    before = sum(isinstance(op, nf.BatchNormOp) for op in program.walk())
    public = getattr(nanoir, "fold_bn", None)
    if public is not None:
        public(program)
        how = "nanoir.fold_bn"
    else:
        from nanoir.lowering.fold_bn import FoldBnPass

        from nanoir.context import make_context

        FoldBnPass().apply(make_context(), program)
        how = "the fold-bn pass"
    after = sum(isinstance(op, nf.BatchNormOp) for op in program.walk())
    return f"batch norms folded by the benchmark before quantize ({how}): {before} -> {after}"


def _check_disjoint(calibration: np.ndarray, evaluation: np.ndarray) -> None:
    seen = {x.tobytes() for x in calibration}
    if any(x.tobytes() in seen for x in evaluation):
        raise AssertionError("an evaluation input is also a calibration input")


# --- measures -----------------------------------------------------------------------------------


def _output_sqnr(reference: list[np.ndarray], value: list[np.ndarray]) -> dict[str, float]:
    found = {"SQNR dB": min(measures.sqnr_db(r, v) for r, v in zip(reference, value))}
    found["constant"] = float(any(np.ptp(v) == 0 for v in value))
    return found


def labels_measure(reference: list[np.ndarray], value: list[np.ndarray]) -> dict[str, float]:
    return {"labels equal": measures.label_agreement(reference[0], value[0])} | _output_sqnr(
        reference, value
    )


def strings_measure(
    columns: int, blank: int = 0
) -> Callable[[list[np.ndarray], list[np.ndarray]], dict[str, float]]:
    """Strings equal after greedy CTC decoding; the output is reshaped to ``[N, T, classes]``
    with ``T = columns`` (0: already ``[N, T, classes]``)."""

    def measure(reference: list[np.ndarray], value: list[np.ndarray]) -> dict[str, float]:
        def steps(x: np.ndarray) -> np.ndarray:
            return x if not columns else x.reshape(-1, columns, x.shape[-1])

        found = measures.strings_equal(steps(reference[0]), steps(value[0]), blank)
        return {"strings equal": found} | _output_sqnr(reference, value)

    return measure


def mask_measure(reference: list[np.ndarray], value: list[np.ndarray]) -> dict[str, float]:
    return {"mask IoU": measures.mask_iou(reference[0], value[0], 0.3)} | _output_sqnr(
        reference, value
    )


def face_measure(reference: list[np.ndarray], value: list[np.ndarray]) -> dict[str, float]:
    """Outputs ``(probabilities, boxes[, landmarks])``: decisions agree, and each regression
    output's SQNR."""
    found = {"decisions equal": measures.decision_agreement(reference[0], value[0])}
    found["box SQNR dB"] = measures.sqnr_db(reference[1], value[1])
    if len(reference) > 2:
        found["landmark SQNR dB"] = measures.sqnr_db(reference[2], value[2])
    return found | _output_sqnr(reference, value)


# --- PaddleOCR (ONNX files) ---------------------------------------------------------------------

PADDLE_FILES = {
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 256, 256)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
}


def _bgr(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[:, ::-1])


def paddle_inputs(name: str, count: int, seed: int) -> np.ndarray:
    """Inputs of one PaddleOCR network: text scenes (det), lines half turned by 180 degrees
    (cls), lines (rec)."""
    return paddle_set(name, count, seed)[0]


def paddle_set(name: str, count: int, seed: int) -> tuple[np.ndarray, list[str], np.ndarray]:
    """:func:`paddle_inputs` with the lines' texts and which were turned (empty for det)."""
    from trained.text_lines import normalise, text_line_set

    if name == "det":
        from trained.photos import text_scenes

        scenes = text_scenes(count, seed)
        return _bgr(np.stack([normalise(s) for s in scenes])), [], np.zeros(0, bool)
    _, (_, _, height, width) = PADDLE_FILES[name]
    rotated = 0.5 if name == "cls" else 0.0
    lines, texts, turned = text_line_set(count, seed, height, width, rotated=rotated)
    return _bgr(lines), texts, turned


def recognizer_alphabet(source: Path) -> list[str]:
    """The recognizer's characters by class: blank, the file's ``character`` metadata (one a
    line), then the space rapidocr appends."""
    import onnx

    model = onnx.load(str(source))
    (text,) = [p.value for p in model.metadata_props if p.key == "character"]
    return ["", *text.splitlines(), " "]


def float_reads(
    name: str, source: Path, reference: np.ndarray, texts: list[str], turned: np.ndarray
) -> str:
    """How well the float model does its task on the evaluation inputs (a check that the
    inputs are the kind it was trained on), or ""."""
    if name == "cls":
        right = np.mean(np.argmax(reference, -1) == turned)
        return f"the float model tells {right:.0%} of the evaluation lines' directions right"
    if name == "rec":
        alphabet = recognizer_alphabet(source)
        read = ["".join(alphabet[i] for i in measures.ctc_greedy(r)) for r in reference]
        exact = np.mean([a.replace(" ", "") == b.replace(" ", "") for a, b in zip(read, texts)])
        return f"the float model reads {exact:.0%} of the evaluation lines exactly (spaces aside)"
    return ""


def build_from_onnx(
    source: Path,
    shape: tuple[int, ...],
    calibration: np.ndarray,
    evaluation: np.ndarray,
    work: Path,
    notes: list[str],
    edits: Sequence[str] | None = None,
) -> Subject:
    """A subject from a shipped ONNX file: prepared for nanoir (:func:`prepare.prepare`),
    referenced by the shipped file in onnxruntime; onnxruntime quantizes the prepared file (the
    graph nanoir quantizes) and, in its own column, the shipped one."""
    import nanoir

    _check_disjoint(calibration, evaluation)
    notes.append(f"{source.name} sha256 {sha256(source)[:16]}")
    prepared = prepare(source, shape, work, enabled=None if edits is None else tuple(edits))
    notes += [f"prepare: {n}" for n in prepared.notes]
    program = nanoir.load(prepared.path)
    notes.append(fold_batch_norms(program))
    reference = run_file(source, batches(evaluation, 16))
    batch = shape[0] if "static-shape" in prepared.applied else 16
    return Subject(program, calibration, evaluation, reference, prepared.path, batch, notes, source)


def _paddle(name: str) -> Callable[[Path, Path, Callable[[str], None]], Subject]:
    def build(cache: Path, work: Path, log: Callable[[str], None]) -> Subject:
        file, shape = PADDLE_FILES[name]
        source = fetch("rapidocr", cache)[file]
        count = EVALUATION_IMAGES if name == "det" else EVALUATION
        calibration = paddle_inputs(name, CALIBRATION, CALIBRATION_SEED)
        evaluation, texts, turned = paddle_set(name, count, EVALUATION_SEED)
        subject = build_from_onnx(source, shape, calibration, evaluation, work, [])
        note = float_reads(name, source, subject.reference[0], texts, turned)
        subject.notes += [note] if note else []
        return subject

    return build


# --- torch networks (MTCNN, the CRNN trained here) ----------------------------------------------


def export_onnx(model: Any, example: np.ndarray, path: Path, outputs: int) -> Path:
    """The float ONNX file onnxruntime quantizes: the TorchScript exporter, opset 17, batch
    dynamic."""
    import torch

    names = [f"y{i}" for i in range(outputs)]
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.from_numpy(example),),
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=["x"],
            output_names=names,
            dynamic_axes={"x": {0: "n"}, **{n: {0: "n"} for n in names}},
        )
    return path


def build_from_torch(
    model: Any, calibration: np.ndarray, evaluation: np.ndarray, work: Path, notes: list[str]
) -> Subject:
    """A subject from a torch module (eval mode): ``nanoir.from_torch``, referenced by the
    module in float32, quantized by onnxruntime from its ONNX export."""
    import torch

    import nanoir

    _check_disjoint(calibration, evaluation)
    example = calibration[:2]
    program = nanoir.from_torch(model, (torch.from_numpy(example),))
    notes.append(fold_batch_norms(program))
    with torch.no_grad():
        runs = [model(torch.from_numpy(b)) for b in batches(evaluation, 16)]
    runs = [r if isinstance(r, tuple) else (r,) for r in runs]
    reference = [np.concatenate([r[i].numpy() for r in runs]) for i in range(len(runs[0]))]
    work.mkdir(parents=True, exist_ok=True)
    onnx_float = export_onnx(model, example, work / "float.onnx", len(reference))
    return Subject(program, calibration, evaluation, reference, onnx_float, 16, notes)


def _mtcnn(name: str) -> Callable[[Path, Path, Callable[[str], None]], Subject]:
    size = 24 if name == "rnet" else 48

    def build(cache: Path, work: Path, log: Callable[[str], None]) -> Subject:
        from trained.mtcnn import load_mtcnn, mtcnn_input
        from trained.photos import face_box, face_crops

        folder = fetch("facenet", cache)[f"{name}.pt"].parent
        box = face_box(load_mtcnn("onet", folder))
        calibration = mtcnn_input(face_crops(box, CALIBRATION, CALIBRATION_SEED, size))
        evaluation = mtcnn_input(face_crops(box, EVALUATION, EVALUATION_SEED, size))
        notes = [
            f"{name}.pt sha256 {sha256(folder / f'{name}.pt')[:16]}",
            f"face in astronaut() at x {box[0]:.0f}, y {box[1]:.0f}, side {box[2]:.0f} px "
            f"(float O-Net); crops {size} px, half faces (jittered), half other photos",
        ]
        return build_from_torch(load_mtcnn(name, folder), calibration, evaluation, work, notes)

    return build


def _crnn(geometry_name: str) -> Callable[[Path, Path, Callable[[str], None]], Subject]:
    def build(cache: Path, work: Path, log: Callable[[str], None]) -> Subject:
        import torch

        from trained.crnn import CLASSES, GEOMETRIES, code_set, decode_codes, trained_crnn

        geometry = GEOMETRIES[geometry_name]
        model, record = trained_crnn(geometry, cache, log)
        calibration, _ = code_set(geometry, CALIBRATION, CALIBRATION_SEED)
        evaluation, codes = code_set(geometry, EVALUATION, EVALUATION_SEED)
        with torch.no_grad():
            scores = model(torch.from_numpy(evaluation)).reshape(len(evaluation), -1, CLASSES)
        read = np.mean([a == b for a, b in zip(decode_codes(scores.numpy()), codes)])
        notes = [
            f"trained here: {record['steps']:.0f} Adam steps, {record['cpu_seconds']:.0f} CPU s; "
            f"the float model reads {read:.0%} of the evaluation codes exactly "
            f"({record['accuracy']:.0%} of 256 held-out ones after training)",
            "onnxruntime's QDQ quantization leaves the LSTM float (it has no QDQ LSTM)",
        ]
        return build_from_torch(model, calibration, evaluation, work, notes)

    return build


MODELS = {
    "det": Entry(
        "det",
        "PP-OCRv4 text detector (DB)",
        "rapidocr-onnxruntime==1.4.4",
        "mask IoU",
        mask_measure,
        _paddle("det"),
    ),
    "cls": Entry(
        "cls",
        "PP-OCR mobile v2 direction classifier",
        "rapidocr-onnxruntime==1.4.4",
        "labels equal",
        labels_measure,
        _paddle("cls"),
    ),
    "rec": Entry(
        "rec",
        "PP-OCRv4 text recognizer (SVTR-LCNet, CTC)",
        "rapidocr-onnxruntime==1.4.4",
        "strings equal",
        strings_measure(0),
        _paddle("rec"),
    ),
    "pnet": Entry(
        "pnet",
        "MTCNN P-Net (48 px crops)",
        "facenet-pytorch==2.6.0",
        "decisions equal",
        face_measure,
        _mtcnn("pnet"),
    ),
    "rnet": Entry(
        "rnet",
        "MTCNN R-Net (24 px crops)",
        "facenet-pytorch==2.6.0",
        "decisions equal",
        face_measure,
        _mtcnn("rnet"),
    ),
    "onet": Entry(
        "onet",
        "MTCNN O-Net (48 px crops)",
        "facenet-pytorch==2.6.0",
        "decisions equal",
        face_measure,
        _mtcnn("onet"),
    ),
    "crnn": Entry(
        "crnn",
        "CRNN, BiLSTM, 3x32x256, T=32",
        "trained here (MagikCRNN)",
        "strings equal",
        strings_measure(32),
        _crnn("wide"),
    ),
    "crnn-t4": Entry(
        "crnn-t4",
        "CRNN, BiLSTM, 3x32x128, T=4 (the manual's)",
        "trained here (MagikCRNN)",
        "strings equal",
        strings_measure(4),
        _crnn("manual"),
    ),
}
"""Every network, in the order of the table."""
