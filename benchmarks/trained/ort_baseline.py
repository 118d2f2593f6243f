"""onnxruntime: the float reference of the ONNX files and the ``quantize_static`` baseline.

The baseline is onnxruntime's own post-training quantization as a user runs it: QDQ format,
int8 weights per channel, uint8 activations (asymmetric, with a zero point), MinMax
calibration, on the same calibration inputs as nanoir. Files older than opset 13 are
converted to 13 first (per-channel QDQ needs it) and their declared intermediate shapes
dropped (the converter leaves stale ones). onnxruntime quantizes no LSTM in QDQ format: a
recurrent layer stays float there (the benchmark says so in its notes).
Everything runs on one thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trained.prepare import strip_value_info, to_opset

__all__ = ["float_ops", "ort_quantize", "run_file"]


def _session(path: Path) -> Any:
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_file(path: Path, batches: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Every output of the ONNX file on ``batches`` (one input), concatenated over them."""
    session = _session(path)
    name = session.get_inputs()[0].name
    runs = [session.run(None, {name: b}) for b in batches]
    return [np.concatenate([r[i] for r in runs]) for i in range(len(runs[0]))]


class _Reader:
    """onnxruntime's CalibrationDataReader over the calibration batches."""

    def __init__(self, name: str, batches: Sequence[np.ndarray]):
        self.feeds = iter([{name: b} for b in batches])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def ort_quantize(
    source: Path, calibration: Sequence[np.ndarray], folder: Path
) -> tuple[Path, float]:
    """onnxruntime's ``quantize_static`` of ``source`` (see the module), written into
    ``folder``; returns the QDQ file and the CPU seconds it took."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    start = time.process_time()
    folder.mkdir(parents=True, exist_ok=True)
    model = to_opset(onnx.load(str(source)), 13)
    strip_value_info(model)
    float_path = folder / (source.stem + ".opset13.onnx")
    onnx.save(model, str(float_path))
    qdq = folder / (source.stem + ".qdq.onnx")
    name = model.graph.input[0].name
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's "consider pre-processing"
    quantize_static(
        str(float_path),
        str(qdq),
        _Reader(name, calibration),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QUInt8,
        calibrate_method=CalibrationMethod.MinMax,
    )
    return qdq, time.process_time() - start


def float_ops(path: Path) -> list[str]:
    """Op types whose results onnxruntime leaves float in the QDQ file: computing ops none of
    whose outputs is read by a QuantizeLinear (graph outputs and data movement aside)."""
    import onnx

    model = onnx.load(str(path))
    quantized = {n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    outputs = {o.name for o in model.graph.output}
    quiet = {
        "QuantizeLinear",
        "DequantizeLinear",
        "Constant",
        "Shape",
        "Reshape",
        "Transpose",
        "Squeeze",
        "Unsqueeze",
        "Concat",
        "Slice",
        "Gather",
        "Cast",
        "Flatten",
        "Identity",
    }
    found = {
        node.op_type
        for node in model.graph.node
        if node.op_type not in quiet
        and not any(o in quantized or o in outputs for o in node.output)
    }
    return sorted(found)
