"""Run an integer-flavour model in onnxruntime: codes in, codes out (the ``ort`` extra).

onnxruntime runs it at its default graph optimization level (every optimizer on): the graph is
integer ops only, which its optimizers keep exact (unlike QDQ graphs, whose fusions change
rounding). One ``InferenceSession`` per :func:`make_session` call; callers that run a model
repeatedly keep the session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from nanoir.dialects.nh import code_range
from nanoir.runtime.base import ExecutionError

from nanoir.errors import ArgumentError, Error

_DTYPES = {
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(int16)": np.int16,
    "tensor(uint16)": np.uint16,
    "tensor(int32)": np.int32,
}


def _ort() -> Any:
    try:
        import onnxruntime  # lazy: an optional dependency, loaded on first run
    except ImportError:
        raise Error("running integer ONNX needs onnxruntime: pip install onnxruntime") from None
    return onnxruntime


def make_session(model: Any, threads: int | None = None) -> Any:
    """An onnxruntime ``InferenceSession`` of ``model`` (ModelProto or bytes) on the CPU, at
    the default optimization level; ``threads`` sets ``intra_op_num_threads``. A model
    onnxruntime refuses (its loader, checker or an optimizer failing) is an
    :class:`ExecutionError` with onnxruntime's message on one line."""
    ort = _ort()
    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: a failed run is our one error, not its log too
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # the default
    if threads is not None:
        options.intra_op_num_threads = threads
    data = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own types (Fail, InvalidGraph, ...): one nanoir error
        raise ExecutionError(f"onnxruntime refused the model: {_status(e)}") from None


def _code_ranges(session: Any) -> list[tuple[str, int, int] | None]:
    """Per graph input, its nh type and code range from the ``nanoir.io`` record (None where
    the model has no record). An int8 input of ``i4`` codes takes -128..127 in onnxruntime,
    which computes with codes the nh program never holds, so they are checked here."""
    record = session.get_modelmeta().custom_metadata_map.get("nanoir.io")
    try:
        described = json.loads(record)["inputs"] if record else []
        return [(d["type"], *code_range(int(d["bits"]), bool(d["signed"]))) for d in described]
    except (ValueError, KeyError, TypeError):
        return []


def _check_codes(i: int, a: np.ndarray, checked: tuple[str, int, int]) -> None:
    kind, lo, hi = checked
    bad = (a < lo) | (a > hi)
    if lo == -1 and hi == 1:
        bad |= a == 0
    if bad.any():
        at = tuple(int(j) for j in np.argwhere(bad)[0])
        allowed = "-1 or +1" if lo == -1 and hi == 1 else f"{lo}..{hi}"
        raise ArgumentError(
            f"input {i} has code {int(a[at])} at index {at}, outside {kind} ({allowed})"
        )


def run_model(model_or_session: Any, inputs: Sequence[Any]) -> list[np.ndarray]:
    """The output codes of an integer-flavour model for input codes ``inputs`` (integer
    arrays, in the graph's input order); a model (not a session) gets a new session. Codes
    outside an input's nh type (``nanoir.io``) are refused, as the NumPy executor does; a
    failed run (an embedding index outside its table) is an :class:`ExecutionError`."""
    session = model_or_session
    if not hasattr(session, "get_inputs"):
        session = make_session(model_or_session)
    declared = session.get_inputs()
    if len(inputs) != len(declared):
        raise ArgumentError(f"the model takes {len(declared)} inputs, got {len(inputs)}")
    ranges = _code_ranges(session)
    feeds = {}
    for i, (x, d) in enumerate(zip(inputs, declared)):
        a = np.asarray(x)
        if not np.issubdtype(a.dtype, np.integer):
            raise ArgumentError(f"input {i} must hold integer codes, got {a.dtype}")
        dtype = _DTYPES[d.type]
        info = np.iinfo(dtype)
        if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
            raise ArgumentError(f"input {i} has codes outside {np.dtype(dtype).name}")
        if a.size and i < len(ranges) and ranges[i] is not None:
            _check_codes(i, a, ranges[i])
        want = list(d.shape)  # ints are static, str/None dynamic: onnxruntime's own refusal
        if a.ndim != len(want) or any(  # is a traceback, so it is checked here
            isinstance(w, int) and w != n for w, n in zip(want, a.shape)
        ):
            shown = "x".join(str(w) if isinstance(w, int) else "?" for w in want)
            raise ArgumentError(f"input {i} ({d.name}) has shape {a.shape}, expected {shown}")
        feeds[d.name] = a.astype(dtype, copy=False)
    try:
        outputs = session.run(None, feeds)
    except Exception as e:  # onnxruntime's own exception types (Fail, InvalidArgument, ...)
        raise ExecutionError(f"onnxruntime failed to run the model: {_status(e)}") from None
    return [np.asarray(y) for y in outputs]


def _status(e: Exception) -> str:
    """onnxruntime's message without its prefix (``[ONNXRuntimeError] : 2 : ...``)."""
    text = str(e)
    for marker in ("Non-zero status code returned while running ", "[ONNXRuntimeError] : "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return " ".join(text.replace(" Status Message:", ":").split())
