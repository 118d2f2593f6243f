"""Run an integer-flavour model in onnxruntime: codes in, codes out (the ``ort`` extra).

onnxruntime runs it at its default graph optimization level (every optimizer on): the graph is
integer ops only, which its optimizers keep exact (unlike QDQ graphs, whose fusions change
rounding). One ``InferenceSession`` per :func:`make_session` call; callers that run a model
repeatedly keep the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
    the default optimization level; ``threads`` sets ``intra_op_num_threads``."""
    ort = _ort()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: no warnings on stderr
    if threads is not None:
        options.intra_op_num_threads = threads
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def run_model(model_or_session: Any, inputs: Sequence[Any]) -> list[np.ndarray]:
    """The output codes of an integer-flavour model for input codes ``inputs`` (integer
    arrays, in the graph's input order); a model (not a session) gets a new session."""
    session = model_or_session
    if not hasattr(session, "get_inputs"):
        session = make_session(model_or_session)
    declared = session.get_inputs()
    if len(inputs) != len(declared):
        raise ArgumentError(f"the model takes {len(declared)} inputs, got {len(inputs)}")
    feeds = {}
    for i, (x, d) in enumerate(zip(inputs, declared)):
        a = np.asarray(x)
        if not np.issubdtype(a.dtype, np.integer):
            raise ArgumentError(f"input {i} must hold integer codes, got {a.dtype}")
        dtype = _DTYPES[d.type]
        info = np.iinfo(dtype)
        if a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
            raise ArgumentError(f"input {i} has codes outside {np.dtype(dtype).name}")
        want = list(d.shape)  # ints are static, str/None dynamic: onnxruntime's own refusal
        if a.ndim != len(want) or any(  # is a traceback, so it is checked here
            isinstance(w, int) and w != n for w, n in zip(want, a.shape)
        ):
            shown = "x".join(str(w) if isinstance(w, int) else "?" for w in want)
            raise ArgumentError(f"input {i} ({d.name}) has shape {a.shape}, expected {shown}")
        feeds[d.name] = a.astype(dtype, copy=False)
    return [np.asarray(y) for y in session.run(None, feeds)]
