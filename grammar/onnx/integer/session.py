"""Run an integer-flavour model in onnxruntime: codes in, codes out (the ``ort`` extra).

onnxruntime runs it at its default graph optimization level (every optimizer on): the graph
computes on integer codes (in integer or float32 tensors, where the bounds prove float32
exact), which its optimizers keep exact (unlike QDQ graphs, whose fusions change rounding). One
``InferenceSession`` per :func:`make_session` call; callers that run a model repeatedly keep
the session. A graph using one of onnxruntime's fused kernels (:data:`FUSED_KERNELS`) runs
only where :func:`fused_kernel_is_exact` holds for it; a graph's overflow checks
(``nanoir_checks``) become an :class:`~nanoir.runtime.base.ExecutionError`.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
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


def _probe_cases(rng: np.random.Generator) -> list[tuple[str, dict[str, Any]]]:
    """Conv and matmul shapes that reach onnxruntime's uint8 x int8 GEMM, GEMV and depthwise
    kernels, with codes at the extremes (uint8 255 next to int8 127 or -128: a pair of such
    products is 64,770 in magnitude, past the int16 ``vpmaddubsw`` saturates at)."""

    cases: list[tuple[str, dict[str, Any]]] = []
    for c, o, hw, k, group in (
        (32, 16, 4, 3, 1),
        (64, 1, 3, 1, 1),
        (16, 16, 1, 1, 1),
        (8, 8, 5, 3, 8),
    ):
        x = np.where(rng.random((1, c, hw, hw)) < 0.9, 255, rng.integers(0, 256, (1, c, hw, hw)))
        w = np.where(
            rng.random((o, c // group, k, k)) < 0.9,
            rng.choice([127, -128], (o, c // group, k, k)),
            rng.integers(-128, 128, (o, c // group, k, k)),
        )
        cases.append(("conv", {"x": x.astype(np.uint8), "w": w.astype(np.int8), "group": group}))
    for m, kk, n in ((4, 96, 8), (1, 200, 1), (16, 64, 16)):
        a = np.where(rng.random((m, kk)) < 0.9, 255, rng.integers(0, 256, (m, kk)))
        b = np.where(rng.random((kk, n)) < 0.9, rng.choice([127, -128], (kk, n)), 0)
        cases.append(("matmul", {"x": a.astype(np.uint8), "w": b.astype(np.int8)}))
    return cases


def _probe_model(kind: str, case: dict[str, Any], shift: int, kernel: str) -> Any:
    import onnx  # lazy: the probe runs once, on the first session that needs it

    helper = onnx.helper

    x, w = case["x"], case["w"]
    consts = {
        "sx": np.array(1.0, np.float32),
        "zx": np.array(0, np.uint8),
        "w": fused_weights(w, kernel),
        "sw": np.array(2.0**-shift, np.float32),
        "zw": fused_weight_zero(kernel),
        "sy": np.array(1.0, np.float32),
        "zy": np.array(128, np.uint8),
    }
    names = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    if kind == "conv":
        k = w.shape[2]
        node = helper.make_node("QLinearConv", names, ["y"], pads=[k // 2] * 4, group=case["group"])
    else:
        node = helper.make_node("QLinearMatMul", names, ["y"])
    graph = helper.make_graph(
        [node],
        "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, list(x.shape))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _exact_product(kind: str, case: dict[str, Any]) -> np.ndarray:
    """The products' exact int64 sums, written here in NumPy."""
    x, w = case["x"].astype(np.int64), case["w"].astype(np.int64)
    if kind == "matmul":
        return x @ w
    k, group = w.shape[2], case["group"]
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    hw = x.shape[2]
    out = np.zeros((1, w.shape[0], hw, hw), dtype=np.int64)
    per_in, per_out = x.shape[1] // group, w.shape[0] // group
    for o in range(w.shape[0]):
        g0 = (o // per_out) * per_in
        for i in range(hw):
            for j in range(hw):
                out[0, o, i, j] = (xp[0, g0 : g0 + per_in, i : i + k, j : j + k] * w[o]).sum()
    return out


FUSED_KERNELS = ("u8s8", "u8u8")
"""onnxruntime's fused ``QLinearConv`` kernels the writer may use, fastest first: uint8 codes
times int8 weights, or times uint8 weights offset by 128 (zero point 128). Its x86 kernels
without VNNI saturate pairs of uint8 x int8 products in int16 (``vpmaddubsw``); its uint8 x
uint8 ones widen both to 16 bits first (``vpmaddwd``), exact there too, and about 1.4x the
float32 convolution's speed on such a CPU (AVX2, no VNNI)."""


def fused_weights(w: np.ndarray, kernel: str) -> np.ndarray:
    """Signed 8-bit weight codes in ``kernel``'s weight dtype (offset by 128 for uint8)."""
    if kernel == "u8s8":
        return w.astype(np.int8)
    return (w.astype(np.int16) + 128).astype(np.uint8)


def fused_weight_zero(kernel: str) -> np.ndarray:
    """The weight zero point of ``kernel``: the code that stands for 0."""
    return np.array(0, np.int8) if kernel == "u8s8" else np.array(128, np.uint8)


def u8s8_is_exact() -> bool:
    """Whether this machine's onnxruntime sums uint8 x int8 products exactly (see
    :func:`fused_kernel_is_exact`)."""
    return fused_kernel_is_exact("u8s8")


def fused_kernel() -> str | None:
    """The fastest of :data:`FUSED_KERNELS` this machine's onnxruntime runs exactly, or None."""
    return next((k for k in FUSED_KERNELS if fused_kernel_is_exact(k)), None)


@functools.cache
def fused_kernel_is_exact(kernel: str) -> bool:
    """Whether this machine's onnxruntime sums ``kernel``'s products exactly in ``QLinearConv``
    and ``QLinearMatMul`` (their GEMM, GEMV and depthwise kernels), at codes where a pair of
    products leaves int16: onnxruntime's x86 kernels pick their instructions from the CPU
    alone (no setting forces another; its uint8 x int8 ones without VNNI saturate such pairs),
    so the writer asks this once per process and kernel. False when onnxruntime is missing or
    refuses the probe, and for a name not in :data:`FUSED_KERNELS`."""
    if kernel not in FUSED_KERNELS:
        return False
    try:
        ort = _ort()
    except Error:
        return False
    rng = np.random.default_rng(0)
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    for kind, case in _probe_cases(rng):
        exact = _exact_product(kind, case)
        # The shift that brings the largest sum to about 100: every output code in range.
        shift = max(int(np.abs(exact).max()).bit_length() - 7, 0)
        want = np.clip(np.rint(exact * 2.0**-shift) + 128, 0, 255)
        try:
            model = _probe_model(kind, case, shift, kernel)
            session = ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            (got,) = session.run(None, {"x": case["x"]})
        except Exception:  # a build without these kernels: not exact, as far as we know
            return False
        if not np.array_equal(np.asarray(got, dtype=np.int64), want.astype(np.int64)):
            return False
    return True


def make_session(model: Any, threads: int | None = None) -> Any:
    """An onnxruntime ``InferenceSession`` of ``model`` (ModelProto or bytes) on the CPU, at
    the default optimization level but for its QDQ rewrites; ``threads`` sets
    ``intra_op_num_threads``. A model onnxruntime refuses (its loader, checker or an optimizer
    failing) is an :class:`ExecutionError` with onnxruntime's message on one line.

    The writer's graphs have no DequantizeLinear / QuantizeLinear pairs to fuse (their fused
    kernels are written as such), and onnxruntime's QDQ propagation moves a requant's
    ``QuantizeLinear`` above the float32 ``MaxPool`` the writer chose for uint8 codes, making
    it the scalar uint8 one where the pool stays NCHW (the trained CRNN's after its phase
    conv: 0.16 ms against 0.02 as float32 NCHWc; the whole network 3.27 -> 3.13 ms, the other
    trained networks unchanged within noise)."""
    ort = _ort()
    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: a failed run is our one error, not its log too
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # the default
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    if threads is not None:
        options.intra_op_num_threads = threads
    data = model if isinstance(model, bytes) else model.SerializeToString()
    kernel = _kernel_of(model) if b"nanoir.kernels" in data else None
    if kernel is not None and not fused_kernel_is_exact(kernel):
        why = "saturate sums of products (no VNNI)" if kernel == "u8s8" else "are not exact"
        raise ExecutionError(
            f"the model uses onnxruntime's {kernel} kernels, which on this machine's CPU {why}: "
            "write it again here (nanoir.save or export_model: the writer then uses kernels "
            "exact on this machine)"
        )
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own types (Fail, InvalidGraph, ...): one nanoir error
        raise ExecutionError(f"onnxruntime refused the model: {_status(e)}") from None


def _kernel_of(model: Any) -> str | None:
    """The fused kernel the model's metadata records (any value but None is checked: an
    unknown one fails the probe)."""
    if isinstance(model, bytes):
        import onnx  # lazy: only files that name the key are parsed again

        model = onnx.load_from_string(model)
    return next((p.value for p in model.metadata_props if p.key == "nanoir.kernels"), None)


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


def _check_codes(i: int, a: np.ndarray, checked: tuple[str, int, int], low: int, high: int) -> None:
    """Refuse ``a`` (its least and greatest codes ``low``, ``high``) if a code lies outside
    the nh type ``checked`` says, naming the first; the place is looked for only then."""
    kind, lo, hi = checked
    one_bit = (lo, hi) == (-1, 1)
    if lo <= low and high <= hi and not (one_bit and not a.all()):
        return
    bad = (a < lo) | (a > hi)
    if one_bit:
        bad |= a == 0
    at = tuple(int(j) for j in np.argwhere(bad)[0])
    allowed = "-1 or +1" if one_bit else f"{lo}..{hi}"
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
    io = _session_io(session)
    if len(inputs) != len(io.names):
        raise ArgumentError(f"the model takes {len(io.names)} inputs, got {len(inputs)}")
    feeds = {}
    for i, (x, name, dtype, want) in enumerate(zip(inputs, io.names, io.dtypes, io.shapes)):
        a = np.asarray(x)
        if a.dtype.kind not in "iu":
            raise ArgumentError(f"input {i} must hold integer codes, got {a.dtype}")
        checked = io.ranges[i] if i < len(io.ranges) else None
        if a.size and not _fits(a.dtype, io.allowed[i]):
            # (a min and a max say whether every code fits: the place only on failure)
            low, high = int(a.min()), int(a.max())
            info = _limits(dtype)
            if low < info.min or high > info.max:
                raise ArgumentError(f"input {i} has codes outside {np.dtype(dtype).name}")
            if checked is not None:
                _check_codes(i, a, checked, low, high)
        if a.ndim != len(want) or any(  # onnxruntime's own refusal is a traceback
            isinstance(w, int) and w != n for w, n in zip(want, a.shape)
        ):
            shown = "x".join(str(w) if isinstance(w, int) else "?" for w in want)
            raise ArgumentError(f"input {i} ({name}) has shape {a.shape}, expected {shown}")
        feeds[name] = a.astype(dtype, copy=False)
    try:
        outputs = session.run(None, feeds)
    except Exception as e:  # onnxruntime's own exception types (Fail, InvalidArgument, ...)
        raise ExecutionError(f"onnxruntime failed to run the model: {_status(e)}") from None
    if io.checks:
        _raise_on_checks(session, np.asarray(outputs[-1]))
        outputs = outputs[:-1]
    return [np.asarray(y) for y in outputs]


@dataclass(frozen=True)
class _SessionIo:
    """What ``run_model`` reads of a session on every call, read once per session: the
    inputs' names, exchange dtypes, declared shapes (ints static) and nh code ranges, and
    whether the last output is the overflow checks' counts."""

    names: tuple[str, ...]
    dtypes: tuple[Any, ...]
    shapes: tuple[tuple[Any, ...], ...]
    ranges: tuple[tuple[str, int, int] | None, ...]
    checks: bool
    allowed: tuple[tuple[int, int] | None, ...]
    """Per input, the codes it takes (its exchange dtype's and nh type's ranges met; None
    for 1-bit codes, whose zero is refused): an array whose dtype holds only such codes
    needs no look at its values (an int8 array into an 8-bit input: no pass over it)."""


_SESSION_IO: weakref.WeakKeyDictionary[Any, _SessionIo] = weakref.WeakKeyDictionary()


def _session_io(session: Any) -> _SessionIo:
    """``session``'s :class:`_SessionIo` (kept while the session lives)."""
    try:
        return _SESSION_IO[session]
    except (KeyError, TypeError):
        pass
    declared = session.get_inputs()
    outputs = [o.name for o in session.get_outputs()]
    dtypes = tuple(_DTYPES[d.type] for d in declared)
    ranges = tuple(_code_ranges(session))
    allowed = []
    for i, dtype in enumerate(dtypes):
        info = _limits(dtype)
        checked = ranges[i] if i < len(ranges) else None
        if checked is None:
            allowed.append((info.min, info.max))
        elif (checked[1], checked[2]) == (-1, 1):
            allowed.append(None)
        else:
            allowed.append((max(info.min, checked[1]), min(info.max, checked[2])))
    io = _SessionIo(
        tuple(d.name for d in declared),
        dtypes,
        tuple(tuple(d.shape) for d in declared),
        ranges,
        bool(outputs) and outputs[-1] == "nanoir_checks",
        tuple(allowed),
    )
    try:
        _SESSION_IO[session] = io
    except TypeError:  # (a session type without weak references: read again next call)
        pass
    return io


@functools.cache
def _limits(dtype: Any) -> Any:
    """``np.iinfo(dtype)``, read once per dtype (it costs microseconds a call)."""
    return np.iinfo(dtype)


def _fits(dtype: np.dtype, allowed: tuple[int, int] | None) -> bool:
    """Whether every value of ``dtype`` lies in ``allowed``."""
    if allowed is None:
        return False
    info = _limits(dtype)
    return allowed[0] <= info.min and info.max <= allowed[1]


def _raise_on_checks(session: Any, counts: np.ndarray) -> None:
    """The graph's overflow checks: an :class:`ExecutionError` naming the first op whose
    result left its type (its codes would have wrapped)."""
    if not counts.any():
        return
    record = session.get_modelmeta().custom_metadata_map.get("nanoir.io")
    try:
        labels = json.loads(record)["checks"] if record else []
    except (ValueError, KeyError, TypeError):
        labels = []
    first = int(np.flatnonzero(counts)[0])
    label = labels[first] if first < len(labels) else f"check {first}"
    raise ExecutionError(
        f"{label}: {int(counts[first])} result values do not fit its type (computed by "
        "onnxruntime and checked); the program's types are wrong for this input"
    )


def _status(e: Exception) -> str:
    """onnxruntime's message without its prefix (``[ONNXRuntimeError] : 2 : ...``)."""
    text = str(e)
    for marker in ("Non-zero status code returned while running ", "[ONNXRuntimeError] : "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return " ".join(text.replace(" Status Message:", ":").split())
