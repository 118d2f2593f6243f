"""Where quantize's exponents come from: a weight's own values, calibration batches run through
the float program (NanoEngine's absmax rule or the least squared error power of two); and the
checked loading of calibration files (imported QAT exponents: ``imported``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.traits import negatives_unread
from nanoir.lowering.quantize.rules import (
    QuantConfig,
    QuantizeError,
)
from nanoir.lowering.quantize.targets import Target
from nanoir.runtime.arrays import load_arrays
from nanoir.runtime.interpreter import compile_function, default_builders
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

from nanoir.errors import Error


def exp_shape(target: Target) -> tuple[int, ...]:
    shape = nf.tensor_shape(target.value)
    axis = target.channel_axis
    if axis is None:
        return (1,)
    out = [1] * len(shape)
    out[axis] = shape[axis]
    return tuple(out[1:]) if target.kind == "act" else tuple(out)


def tensor_exps(
    x: np.ndarray,
    bits: int,
    axis: int | None,
    calibrator: str,
    mode: RoundingMode,
    *,
    signed: bool = True,
) -> np.ndarray:
    """Exponents of one tensor from its values (reduced dims kept as 1); unsigned codes cover
    ``[0, max]`` with ``2**b - 1`` codes."""
    absmax = quant.channel_absmax(x if signed else np.maximum(x, 0.0), axis)
    if calibrator != "mse":
        return quant.exp_from_absmax(absmax, bits, signed=signed)
    mean_abs = _channel_mean_abs(x, axis)
    candidates = mse_candidates(absmax.reshape(-1), mean_abs.reshape(-1), bits, signed=signed)
    errors = candidate_sse(x, bits, candidates, axis, mode, signed=signed)
    return _least_error(candidates, errors).reshape(absmax.shape)


def candidate_sse(
    x: np.ndarray,
    bits: int,
    candidates: np.ndarray,
    axis: int | None,
    mode: RoundingMode,
    *,
    signed: bool = True,
) -> np.ndarray:
    """``[candidates, channels]``: per candidate exponent row, the summed squared error of
    ``fake_quant(x)`` per channel, bit for bit what ``fake_quant`` gives.

    The ``mse`` calibrator's cost (ten candidates over every weight and calibrated activation):
    ``fake_quant`` checks and converts its input and computes in fresh arrays at each call;
    here ``x`` is converted once and each candidate runs in one reused buffer, scaling by the
    exact power of two ``2**k`` (a product by a power of two rounds as ``ldexp`` does), 3-4x
    faster on ResNet-18."""
    v = np.asarray(x, dtype=np.float64)
    shape = [1] * v.ndim
    if axis is not None:
        shape[axis] = -1
    if bits == 1:  # sign * 2**k: no rounding to share; rare
        return np.stack(
            [
                _reduce((quant.fake_quant(v, 1, k.reshape(shape), mode) - v) ** 2, axis)
                for k in candidates
            ]
        )
    if np.isnan(v).any():
        raise ValueError("fake_quant input contains NaN, which has no integer code")
    lo, hi = float(quant.qmin(bits, signed=signed)), float(quant.qmax(bits, signed=signed))
    buf = np.empty_like(v)
    out = []
    for k in np.asarray(candidates, dtype=np.int64):
        k = k.reshape(shape)
        with np.errstate(over="ignore", under="ignore"):
            np.multiply(v, np.ldexp(1.0, k), out=buf)
        if mode is RoundingMode.TRUNC:
            np.trunc(buf, out=buf)
        elif mode is RoundingMode.HALF_EVEN:
            np.rint(buf, out=buf)
        elif mode is RoundingMode.FLOOR:
            underflow = (v < 0) & (buf == 0)  # floor(-0.0) is 0; the true floor is -1
            np.floor(buf, out=buf)
            buf[underflow] = -1.0
        else:
            buf[...] = quant.round_to_int(buf, mode)
        np.clip(buf, lo, hi, out=buf)  # (one pass: maximum, then minimum)
        np.multiply(buf, np.ldexp(1.0, -k), out=buf)
        np.subtract(buf, v, out=buf)
        np.square(buf, out=buf)
        out.append(_reduce(buf, axis))
    return np.stack(out)


OCTAVES = 2200
"""Bins of :func:`octave_sums`: every float64 binary exponent (``frexp``: -1073..1024), from
:data:`OCTAVE_BASE` up."""
OCTAVE_BASE = -1100
"""The exponent of bin 0 (zeros go there: below every grid, their error is 0)."""


def octave_sums(x: np.ndarray) -> np.ndarray:
    """``[3, 2, OCTAVES]``: per sign (non-negative, negative) and binary octave of ``|x|``
    (``2**(e-1) <= |x| < 2**e``), the count, the sum of ``|x|`` and of ``x**2``: what
    :func:`surviving_candidates` bounds each candidate's error by. Sums of batches add.

    The octave is read from the float64 bits (sign and biased exponent ``E``, the top 12 bits:
    ``e = E - 1022`` for a normal value) and binned by three bincounts, ``x`` itself weighting
    the sum of ``|x|`` (a negative bin's sum is negated, exactly): 3x faster than ``frexp`` and
    a weight array of ``|x|``. Only zeros and subnormals share ``E = 0``; the subnormals (rare)
    are binned by ``frexp``."""
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    key = (flat.view(np.uint64) >> np.uint64(52)).view(np.int64)  # sign * 2048 + E
    fields = 4096
    raw = np.stack(
        [
            np.bincount(key, weights=w, minlength=fields).astype(np.float64, copy=False)
            for w in (None, flat, flat * flat)
        ]
    ).reshape(3, 2, 2048)
    raw[1, 1] = -raw[1, 1]  # sum of x over negatives: minus the sum of |x|
    sums = np.zeros((3, 2, OCTAVES))
    normal = slice(1, 2047)  # E = 2047 (inf, NaN) is not binned: finite() removed them
    first = 1 - 1022 - OCTAVE_BASE  # the bin of E = 1
    sums[:, :, first : first + 2046] = raw[:, :, normal]
    subnormal = flat[(key & 2047) == 0]
    subnormal = subnormal[subnormal != 0]
    if subnormal.size:
        e = np.frexp(subnormal)[1].astype(np.intp) - OCTAVE_BASE
        side = (subnormal < 0).astype(np.intp)
        mag = np.abs(subnormal)
        for row, w in enumerate((None, mag, mag * mag)):
            np.add.at(sums[row], (side, e), 1.0 if w is None else w)
    sums[0, 0, 0] = flat.size - np.count_nonzero(flat)  # zeros: bin 0, nothing to the sums
    return sums


def error_bounds(
    sums: np.ndarray, k: int, bits: int, mode: RoundingMode, *, signed: bool = True
) -> tuple[float, float, float]:
    """Bounds on the squared error of ``fake_quant`` at exponent ``k`` of the values summed in
    ``sums`` (:func:`octave_sums`): ``(low, high, slack)``, ``slack`` a bound on the rounding
    of ``low``. Exact parts: values that saturate (an octave at or above the saturation bound:
    ``sum (|x| - T)**2`` from the sums; an octave straddling it, rounding to nearest, counts
    below), values that round to code 0 (trunc: ``|x| < 2**-k``; to nearest: ``< 2**-k / 2``;
    error ``|x|``); each other value errs by less than a step (``[0, step**2)``)."""
    count, s1, s2 = sums
    step = np.ldexp(1.0, -int(k))
    e = np.arange(OCTAVES) + OCTAVE_BASE  # octave [2**(e-1), 2**e)
    lo, hi = quant.qmin(bits, signed=signed), quant.qmax(bits, signed=signed)
    top = hi + 1  # saturates from (hi + 1) * step: trunc, floor; to nearest from hi + 1/2
    nearest = mode in (RoundingMode.HALF_UP, RoundingMode.HALF_EVEN)
    # octaves wholly at or above 2**(log2(top) - k) saturate (top is a power of two)
    first_saturated = int(np.log2(top)) - int(k) + 1
    saturated = e >= first_saturated
    low = 0.0
    slack = 0.0
    for side, bound in ((0, hi), (1, -lo)):
        t = bound * step
        if side == 1 and lo == 0:  # unsigned: every negative value saturates at 0
            rows = e > OCTAVE_BASE
            low += float(np.sum(s2[1, rows]))
            continue
        n, a, aa = count[side, saturated], s1[side, saturated], s2[side, saturated]
        terms = np.sum(aa) - 2.0 * t * np.sum(a) + np.sum(n) * t * t
        low += float(terms)
        slack += 1e-12 * float(np.sum(aa) + 2.0 * t * np.sum(a) + np.sum(n) * t * t)
    if mode is RoundingMode.TRUNC or nearest:  # code 0: |x| below a step (to nearest: half)
        zero = e <= -int(k) - (1 if nearest else 0)
        low += float(np.sum(s2[0 if lo == 0 else slice(None), zero]))  # (negatives: above)
    else:
        zero = np.zeros(OCTAVES, dtype=bool)
    rest = ~saturated & ~zero
    if lo == 0:
        middle = float(np.sum(count[0, rest]))
    else:
        middle = float(np.sum(count[:, rest]))
    return low, low + middle * step * step, slack


_FULL_SEARCH = [False]


@contextmanager
def full_mse_search() -> Iterator[None]:
    """Within it, the ``mse`` search computes every candidate's error, as before the bounds of
    :func:`surviving_candidates`: the reference the bounded search is tested and timed against
    (the same exponents, by construction)."""
    _FULL_SEARCH.append(True)
    try:
        yield
    finally:
        _FULL_SEARCH.pop()


def surviving_candidates(
    sums: np.ndarray,
    candidates: np.ndarray,
    bits: int,
    mode: RoundingMode,
    *,
    signed: bool = True,
) -> np.ndarray:
    """Which of the per-tensor ``candidates`` (``[candidates, 1]``) can have the least error of
    the values summed in ``sums``: one whose lower bound (:func:`error_bounds`) is above another
    one's upper bound cannot, and the ``mse`` search need not compute its error. The others'
    errors are computed as before, so the chosen exponent is the same."""
    bounds = [error_bounds(sums, int(k), bits, mode, signed=signed) for k in candidates[:, 0]]
    best_high = min(high for _, high, _ in bounds)
    margin = 1e-9 * best_high
    return np.array([low - slack <= best_high + margin for low, _, slack in bounds])


def _channel_mean_abs(x: np.ndarray, axis: int | None) -> np.ndarray:
    axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    return np.mean(np.abs(x), axis=axes, keepdims=axis is not None).reshape(-1)


def mse_candidates(
    absmax: np.ndarray, mean_abs: np.ndarray, bits: int, *, signed: bool = True
) -> np.ndarray:
    """Exponents the ``mse`` calibrator tries, per channel: ``[candidates, channels]``, the
    preferred one (kept on ties) first.

    b > 1: from the absmax rule's ``k0`` up to ``k0 + min(b + 1, 8)``, then ``k0 - 1``:
    finer steps trade saturation for resolution (the least error of a 4-bit weight is
    typically 1-2 steps finer, of an 8-bit activation up to ~4), and one coarser step helps
    only a positive maximum that would saturate at ``2**(b-1) - 1`` codes. b = 1: ``sign * 2**k`` has squared error ``sum (|x| - 2**k)**2``,
    least at ``2**k = mean |x|``, so the best power of two is one of the two around
    ``mean |x|`` (tried first, then one more on each side): ``max |x|`` (the absmax rule) can
    be several octaves away for wide, heavy-tailed channels, outside a fixed window.
    """
    if bits == 1:
        k0 = quant.exp_from_absmax(mean_abs, 1).astype(np.int64)
        offsets: tuple[int, ...] = (0, 1, -1, 2)
    else:
        k0 = quant.exp_from_absmax(absmax, bits, signed=signed).astype(np.int64)
        offsets = (*range(min(bits + 1, 8) + 1), -1)
    return np.clip(np.stack([k0 + d for d in offsets]), *quant.CALIB_EXP_RANGE)


def _least_error(candidates: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Per channel, the candidate with the least error; the earliest one on ties."""
    best = candidates[0].copy()
    best_err = errors[0].copy()
    for k, err in zip(candidates[1:], errors[1:]):
        better = err < best_err
        best = np.where(better, k, best)
        best_err = np.where(better, err, best_err)
    return best


@dataclass
class _Stats:
    """Running statistics of one activation over the calibration batches."""

    absmax: np.ndarray | None = None
    abs_sum: np.ndarray | None = None
    count: int = 0
    sse: np.ndarray | None = None
    candidates: np.ndarray | None = None
    octaves: np.ndarray | None = None
    keep: np.ndarray | None = None


def _reduce(x: np.ndarray, axis: int | None) -> np.ndarray:
    axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    return np.sum(x, axis=axes, keepdims=axis is not None).reshape(-1)


_KINDS = {"U": "strings", "S": "bytes", "c": "complex numbers", "M": "dates", "m": "durations"}


def spelled_shape(shape: Sequence[int]) -> str:
    """``2x?x8``: a shape as messages spell it, ``?`` for a dynamic dim."""
    return "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape)


def checked_batch_array(
    item: Any, shape: Sequence[int], where: str, error: type[Exception] = QuantizeError
) -> np.ndarray:
    """One input of a calibration batch as a float64 array, or ``error`` naming ``where``
    unless it is a real numeric array of ``shape`` (``?`` dims free) with at least one row:
    the float program would fail on it deep inside, with a bare ``ValueError``. Shared by
    ``quantize`` and ``nanoir.qat.calibrate``."""
    want = f"expected a real numeric array shaped {spelled_shape(shape)}"
    if hasattr(item, "detach"):  # a torch tensor (e.g. from a DataLoader)
        item = item.detach().cpu().numpy()
    a = np.asarray(item) if item is not None else None
    if a is None or a.dtype.kind not in "biufO":
        what = "None" if a is None else f"an array of {_KINDS.get(a.dtype.kind, a.dtype)}"
        raise error(f"{where} is {what}; {want}")
    try:
        a = a.astype(np.float64)
    except (TypeError, ValueError):
        raise error(f"{where} holds values that are not numbers; {want}") from None
    if a.ndim != len(shape) or any(d not in (DYNAMIC_INDEX, n) for d, n in zip(shape, a.shape)):
        raise error(f"{where} has shape {spelled_shape(a.shape)}; {want}")
    if a.ndim and a.shape[0] == 0:
        raise error(
            f"{where} has no rows (shape {spelled_shape(a.shape)}); {want}, with at least one row"
        )
    return a


def as_batches(
    calibration: Iterable[Any], shapes: Sequence[Sequence[int]]
) -> Iterable[tuple[np.ndarray, ...]]:
    """The calibration batches as tuples of checked arrays, one per program input of
    ``shapes`` (a batch is one array, or a tuple or list whose first items are the inputs)."""
    for index, batch in enumerate(calibration):
        items = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
        if len(items) < len(shapes):
            raise QuantizeError(
                f"quantize: a calibration batch has {len(items)} arrays; the program takes "
                f"{len(shapes)} inputs"
            )
        arrays = [
            checked_batch_array(
                item,
                shape,
                f"quantize: calibration batch {index}" + (f" input {i}" if len(shapes) > 1 else ""),
            )
            for i, (item, shape) in enumerate(zip(items, shapes))
        ]
        _check_finite(arrays, f"calibration batch {index}")
        yield tuple(arrays)


def finite(x: np.ndarray) -> np.ndarray:
    """``x`` with its infinities and NaNs as 0: they set no range (an infinity saturates on any
    grid; a NaN of a function outside its domain, such as log(-1), is defined once quantized:
    ``nanoir.runtime.numerics.unary``), so a ``masked_fill(-inf)`` or a ``log`` does not make
    calibration fail."""
    x = np.asarray(x)
    return x if np.isfinite(x).all() else np.where(np.isfinite(x), x, 0.0)


KEEP_BYTES = 2**30
"""The most float values calibration keeps (``calibrate(keep=)``): the float outputs of every
conv and linear on every batch, for its second pass and bias correction not to compute them
again; 0.5 GB for PP-OCRv4's recognizer on 12 batches of 3x48x320. Above it, they run
those layers again."""

_KEEP_LIMIT = [KEEP_BYTES]


@contextmanager
def without_kept_floats() -> Iterator[None]:
    """Within it, calibration keeps no float values (as if they passed :data:`KEEP_BYTES`):
    its second pass and bias correction run the float layers again, the reference the kept
    values are tested against (the same program, by construction)."""
    _KEEP_LIMIT.append(0)
    try:
        yield
    finally:
        _KEEP_LIMIT.pop()


def calibrate(
    func: FuncOp,
    targets: Sequence[Target],
    calibration: Iterable[Any],
    config: QuantConfig,
    *,
    progress: bool | None = None,
    reduce: Reduce | None = None,
    outputs: list[list[np.ndarray]] | None = None,
    keep: dict[SSAValue, list[np.ndarray]] | None = None,
) -> None:
    """Run the float program on the calibration batches and set each activation's ``exps``.

    ``outputs`` (a list) receives the float program's outputs on each batch, in order, for
    quantize's check (``check``) to reuse. ``keep`` maps op results to lists that receive
    their float values on each batch (the first pass), for the second pass not to compute them
    again and for bias correction to reuse, while they fit :data:`KEEP_BYTES` (beyond, every
    list is emptied and nothing more is kept).

    ``reduce`` merges the statistics of several processes, each calibrating on its own
    batches, before any exponent is chosen (``nanoir.qat.distributed``; None: one process):
    absmax by max, the 1-bit mean ``|x|`` sums and the mse errors by sum."""
    acts = {t.value: t for t in targets if t.kind == "act"}
    if not acts:
        return
    plan = compile_function(func, default_builders(), np.dtype(np.float64))
    stats = {v: _Stats() for v in acts}
    batches = list(as_batches(calibration, [nf.tensor_shape(a) for a in func.body.block.args]))
    if not (batches if reduce is None else reduce(len(batches), "sum")):
        raise QuantizeError("quantize: the calibration data is empty")
    passes = 2 if config.calibrator == "mse" else 1
    # Per-tensor activations: bounds from the first pass skip candidates that cannot win in the
    # second (surviving_candidates); not across processes (their sums are not merged).
    bounded = passes == 2 and reduce is None

    # Only the positive part sets the range of unsigned codes ([0, max]) and of a value read
    # only by a ReLU (or a clamp at 0), whose negatives nothing sees: there the error is
    # measured on what the ReLU reads, so a large negative tail does not coarsen the step.
    positive = {v for v, t in acts.items() if not t.signed or t.bits > 1 and negatives_unread(v)}

    def observe_absmax(value: SSAValue, x: np.ndarray) -> None:
        t = acts[value]
        x = finite(x)
        if value in positive:
            x = np.maximum(x, 0.0)
        # (an empty tensor, x[:, :0], holds nothing: 0, so its exponent is a zero range's)
        m = quant.channel_absmax(x, t.channel_axis) if x.size else np.zeros(1)
        m = m.reshape(-1)
        s = stats[value]
        s.absmax = m if s.absmax is None else np.maximum(s.absmax, m)
        if t.bits == 1:  # the 1-bit mse start is mean |x|
            a = _reduce(np.abs(x), t.channel_axis)
            s.abs_sum = a if s.abs_sum is None else s.abs_sum + a
            s.count += x.size // a.size
        elif bounded and t.channel_axis is None and x.size:  # to skip hopeless candidates
            o = octave_sums(x)
            s.octaves = o if s.octaves is None else s.octaves + o

    def observe_sse(value: SSAValue, x: np.ndarray) -> None:
        t, s = acts[value], stats[value]
        assert s.candidates is not None and s.sse is not None
        x = finite(x)
        if value in positive:
            x = np.maximum(x, 0.0)
        if s.keep is None:
            s.sse += candidate_sse(
                x, t.bits, s.candidates, t.channel_axis, config.rounding, signed=t.signed
            )
        else:  # the others cannot win (surviving_candidates); these errors are as before
            s.sse[s.keep] += candidate_sse(
                x, t.bits, s.candidates[s.keep], t.channel_axis, config.rounding, signed=t.signed
            )

    kept = {v: keep[v] for v in keep} if keep else {}
    kept_bytes = [0]

    def keep_value(value: SSAValue, x: np.ndarray) -> None:
        kept_bytes[0] += np.asarray(x).nbytes
        if kept_bytes[0] > _KEEP_LIMIT[-1]:  # too much to hold: the layers run again
            for values in kept.values():
                values.clear()
            kept.clear()
        else:
            kept[value].append(np.asarray(x))

    with progress_bar(progress, len(batches) * passes) as advance:
        for phase in range(passes):
            observe_value = observe_absmax if phase == 0 else observe_sse
            first = phase == 0

            def observe(op: Operation, results: tuple[Any, ...]) -> None:
                for r, x in zip(op.results, results):
                    if r in acts:
                        observe_value(r, x)
                    if first and r in kept:
                        keep_value(r, x)

            for i, batch in enumerate(batches):
                for arg, x in zip(func.body.block.args, batch):
                    if arg in acts:
                        observe_value(arg, x)
                # (the values the first pass kept, the same bit for bit, are not recomputed)
                given = None if first else {v.owner: (xs[i],) for v, xs in kept.items()}
                results = plan(*batch, observe=observe, given=given)
                if outputs is not None and phase == 0:
                    outputs.append([np.asarray(y, np.float64) for y in results])
                advance()
            if reduce is not None:
                _merge(stats, acts, phase, reduce)
            if phase == 0 and passes == 2:
                for v, s in stats.items():
                    assert s.absmax is not None
                    mean_abs = s.abs_sum / max(s.count, 1) if s.abs_sum is not None else s.absmax
                    s.candidates = mse_candidates(
                        s.absmax, mean_abs, acts[v].bits, signed=acts[v].signed
                    )
                    s.sse = np.zeros(s.candidates.shape, dtype=np.float64)
                    if s.octaves is not None and not _FULL_SEARCH[-1]:
                        keep = surviving_candidates(
                            s.octaves,
                            s.candidates,
                            acts[v].bits,
                            config.rounding,
                            signed=acts[v].signed,
                        )
                        if not keep.all():
                            s.keep = keep
                            s.sse[~keep] = np.inf
    for v, t in acts.items():
        s = stats[v]
        assert s.absmax is not None
        if s.sse is not None and s.candidates is not None:
            k = _least_error(s.candidates, s.sse)
        else:
            k = quant.exp_from_absmax(s.absmax, t.bits, signed=t.signed)
        t.exps = np.asarray(k, dtype=np.int64).reshape(exp_shape(t))


Reduce = Callable[[Any, str], Any]
"""Merges one statistic (an array or a number) over processes: ``reduce(x, "max" | "sum")``."""


def _merge(stats: dict[SSAValue, _Stats], acts: dict[SSAValue, Target], phase: int, reduce: Reduce):
    """The statistics of every process (``reduce``), after calibration pass ``phase``; a
    process without batches contributes zeros."""
    for v, s in stats.items():
        if phase == 0:
            n = int(np.prod(exp_shape(acts[v])))
            s.absmax = reduce(np.zeros(n) if s.absmax is None else s.absmax, "max")
            if acts[v].bits == 1:
                s.abs_sum = reduce(np.zeros(n) if s.abs_sum is None else s.abs_sum, "sum")
                s.count = reduce(s.count, "sum")
        elif s.sse is not None:
            s.sse = reduce(s.sse, "sum")


class progress_bar:
    """A rich progress bar on a terminal for calibration runs that take more than a moment."""

    def __init__(self, enabled: bool | None, total: int):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled or self.total < 2:
            return lambda: None
        from rich.progress import Progress

        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("calibrating", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def load_calibration(path: str, batch_size: int) -> list[tuple[np.ndarray, ...]]:
    """Batches from a ``.npy`` (one input) or ``.npz`` (one array per input, in file order).

    A file that cannot be read, is not a regular file (a FIFO, device or directory: checked
    before it is opened, so nothing blocks or reads without end), is not a NumPy file, is
    truncated, or holds NaN or infinity is a ``QuantizeError`` naming the file (and the batch
    with the bad value). Its size is bounded by the header check, not by a fixed limit:
    calibration data may be large.
    """
    try:
        arrays = load_arrays(path, regular_only=True)
    except Error as e:
        raise QuantizeError(f"quantize: calibration data: {e}") from None
    n = arrays[0].shape[0] if arrays and arrays[0].ndim else 0
    if n == 0 or any(a.ndim == 0 or a.shape[0] != n for a in arrays):
        raise QuantizeError(
            f"quantize: calibration arrays in {path!r} need one common, "
            "non-empty leading (batch) dim"
        )
    batches = [tuple(a[i : i + batch_size] for a in arrays) for i in range(0, n, batch_size)]
    for b, batch in enumerate(batches):
        _check_finite(
            batch,
            f"calibration data {path!r}, batch {b} (rows {b * batch_size}.."
            f"{b * batch_size + len(batch[0]) - 1})",
        )
    return batches


def _check_finite(arrays: Sequence[np.ndarray], where: str) -> None:
    """A ``QuantizeError`` at ``where`` if an array holds NaN or +-infinity (no exponent fits)."""
    for k, a in enumerate(arrays):
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            what = "NaN" if np.isnan(a).any() else "infinity"
            input_ = f", input {k}" if len(arrays) > 1 else ""
            raise QuantizeError(
                f"quantize: {where}{input_} holds {what}; calibration data must be finite"
            )
