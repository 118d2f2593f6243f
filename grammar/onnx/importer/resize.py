"""ONNX ``Resize`` (opsets 10-19) and ``Upsample`` (7-9), read as ONNX defines each mode.

Every mode is separable: along each resized axis, output ``j`` is a fixed combination of input
positions, so the whole op is, per axis, a matrix ``W [L_out, L_in]`` (and, for
``tf_crop_and_resize`` with an ``extrapolation_value``, a constant for the rows that fall
outside). `axis_weights` builds that matrix from ONNX's definition:

- the output length: ``floor(L_in * scale)`` from ``scales`` (in float32, as onnxruntime
  computes it), or ``sizes`` (then ``scale = L_out / L_in``; ``keep_aspect_ratio_policy``
  ``not_larger``/``not_smaller`` take one scale for all the axes and round the lengths);
- the source coordinate of output ``j`` (``coordinate_transformation_mode``): ``half_pixel``
  (the default from opset 11), ``half_pixel_symmetric``, ``pytorch_half_pixel``,
  ``align_corners``, ``asymmetric`` (opsets 7-10, and Upsample), ``tf_half_pixel_for_nn``,
  ``tf_crop_and_resize`` (``roi``), in float32;
- ``nearest``: the source pixel by ``nearest_mode`` (``round_prefer_floor`` default,
  ``round_prefer_ceil``, ``floor``, ``ceil``; before opset 11 onnxruntime's rule: ``ceil`` when
  downsampling, else truncation), clamped to the input;
- ``linear``: the two neighbours, weights ``1 - t`` and ``t``, the coordinate clamped to the
  input (edge values beyond it);
- ``cubic``: four neighbours with Keys' weights for ``cubic_coeff_a`` (edge values beyond the
  input; ``exclude_outside`` drops those and renormalises);
- ``antialias`` (opset 18, linear and cubic when downsampling): the kernel widened by
  ``1 / scale`` over the input pixels it covers, renormalised.

Then each axis becomes the cheapest nf form that computes its matrix: nothing (the
identity), ``nf.upsample_nearest`` (torch's nearest picks on every resized spatial axis),
``nf.upsample_bilinear`` (x2 half-pixel linear on every resized spatial axis),
``nf.upsample_bicubic`` (x2 half-pixel cubic with ``a = -0.75``, torch's), ``nf.gather``
(rows that each pick one input: nearest in any other mode: data movement, exact at every
level), or ``nf.linear`` by the matrix over that axis (moved last by ``nf.transpose``; any
other interpolation). Pure NumPy for the matrices; onnxruntime is the test oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from nanoir.dialects import nf
from nanoir.grammar.onnx.importer.state import Node, ReaderState, dims_text
from nanoir.runtime.numerics.bicubic import bicubic
from nanoir.runtime.numerics.kernels import nearest_indices
from numpy.typing import NDArray
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import SSAValue

__all__ = ["RESIZE", "Ambiguous", "Interpolation", "axis_weights"]

_F = np.float32

_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


class Ambiguous(ValueError):
    """A Resize whose result along an axis depends on how a runtime rounds its float32
    coordinates, or where onnxruntime and ONNX's definition disagree: refused, saying why."""


@dataclass(frozen=True)
class Interpolation:
    """How one Resize node interpolates (the same along every axis)."""

    mode: str  # nearest, linear, cubic
    coordinates: str = "half_pixel"
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0
    antialias: bool = False


def source_coordinates(
    how: Interpolation, l_in: int, l_out: int, scale: np.float32, roi: tuple[float, float]
) -> NDArray[np.float32]:
    """The input coordinate of each output index, in float32 as onnxruntime computes it (its
    order of operations; half_pixel_symmetric and one-output tf_crop_and_resize in double)."""
    x = np.arange(l_out, dtype=_F)
    half, s = _F(0.5), _F(scale)
    mode = how.coordinates
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + half) / s - half if l_out > 1 else np.zeros(l_out, _F)
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if mode == "align_corners":
        if l_out == 1:
            return np.zeros(1, _F)
        return x * _F(l_in - 1) / _F(l_out - 1)
    if mode == "tf_crop_and_resize":
        start, end = _F(roi[0]), _F(roi[1])
        if l_out > 1:
            return start * _F(l_in - 1) + x * (end - start) * _F(l_in - 1) / _F(l_out - 1)
        return np.full(l_out, 0.5 * (float(start) + float(end)) * (l_in - 1), _F)
    if mode == "half_pixel_symmetric":
        adjustment = _F(l_out) / (s * _F(l_in))
        offset = _F(_F(l_in) / _F(2)) * (_F(1) - adjustment)
        return (float(offset) + (x.astype(np.float64) + 0.5) / float(s) - 0.5).astype(_F)
    return (x + half) / s - half  # half_pixel


def _exact_coordinates(
    how: Interpolation, l_in: int, l_out: int, scale: np.float32, roi: tuple[float, float]
) -> list[Fraction]:
    """`source_coordinates` without rounding: the same formula on the same (float32) inputs
    in rational arithmetic."""
    s, half = Fraction(float(scale)), Fraction(1, 2)
    start, end = Fraction(float(_F(roi[0]))), Fraction(float(_F(roi[1])))
    mode = how.coordinates
    out = []
    for j in range(l_out):
        if mode == "asymmetric":
            c = j / s
        elif mode == "tf_half_pixel_for_nn":
            c = (j + half) / s
        elif mode == "align_corners":
            c = Fraction(0) if l_out == 1 else Fraction(j * (l_in - 1), l_out - 1)
        elif mode == "tf_crop_and_resize":
            c = (start + j * (end - start) / (l_out - 1) if l_out > 1 else (start + end) / 2) * (
                l_in - 1
            )
        elif mode == "pytorch_half_pixel" and l_out == 1:
            c = Fraction(0)
        elif mode == "half_pixel_symmetric":
            adjustment = Fraction(l_out) / (s * l_in)
            c = Fraction(l_in, 2) * (1 - adjustment) + (j + half) / s - half
        else:
            c = (j + half) / s - half
        out.append(c)
    return out


def _nearest_boundary_is_close(
    how: Interpolation, coords: NDArray[np.float32], exact: list[Fraction]
) -> int | None:
    """The first output index whose float32 coordinate was rounded to within 4 float32 steps of
    a half-way point, but not onto it, in a round mode: there the pick depends on how a runtime
    evaluates the formula (onnxruntime's picks there follow neither IEEE float32 nor exact
    arithmetic), so nanoir does not choose. (Elsewhere onnxruntime picks as float32 does.)"""
    if how.nearest not in ("round_prefer_floor", "round_prefer_ceil"):
        return None
    for j, (c, e) in enumerate(zip(coords, exact)):
        value = float(c)
        tie = math.floor(value) + 0.5
        if Fraction(value) == e or value == tie:
            continue
        if abs(value - tie) <= 4 * float(np.spacing(np.abs(c))):
            return j
    return None


def _nearest_pixels(
    how: Interpolation, coords: NDArray[np.float32], down: bool
) -> NDArray[np.int64]:
    mode = how.nearest
    if mode == "floor":
        return np.floor(coords).astype(np.int64)
    if mode == "ceil":
        return np.ceil(coords).astype(np.int64)
    if mode == "simple":  # onnxruntime before opset 11
        return (np.ceil(coords) if down else np.trunc(coords)).astype(np.int64)
    away = np.sign(coords) * np.floor(np.abs(coords) + _F(0.5))  # std::round
    if mode == "round_prefer_ceil":
        return away.astype(np.int64)
    tie = coords == np.trunc(coords) + _F(0.5)
    return np.where(tie, np.floor(coords), away).astype(np.int64)


def _cubic(t: NDArray[np.float64], a: float) -> NDArray[np.float64]:
    """Keys' cubic kernel at distances ``t`` (any sign)."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def axis_weights(
    how: Interpolation, l_in: int, l_out: int, scale: float, roi: tuple[float, float] = (0.0, 1.0)
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """``(W, bias)``: output ``j`` along one axis is ``W[j] @ input + bias[j]`` (``bias`` only
    where ``tf_crop_and_resize`` extrapolates a non-zero value)."""
    s = _F(scale)
    coords = source_coordinates(how, l_in, l_out, s, roi)
    if how.mode == "nearest":
        close = _nearest_boundary_is_close(
            how, coords, _exact_coordinates(how, l_in, l_out, s, roi)
        )
        if close is not None:
            raise Ambiguous(
                f"output {close} of {l_out} reads input coordinate {float(coords[close])!r}, "
                f"within float32 rounding of where nearest_mode '{how.nearest}' changes its pick"
            )
    weights = np.zeros((l_out, l_in))
    outside = np.zeros(l_out, bool)
    if how.coordinates == "tf_crop_and_resize":
        outside = (coords < 0) | (coords > _F(l_in - 1))
    if how.mode == "nearest":
        pixels = np.clip(_nearest_pixels(how, coords, bool(s < 1)), 0, l_in - 1)
        weights[np.arange(l_out), pixels] = 1.0
    elif how.antialias:
        _antialias_weights(how, weights, coords, l_in, s)
    elif how.mode == "linear":
        c = np.clip(coords, _F(0), _F(l_in - 1))
        left = np.minimum(c.astype(np.int64), l_in - 1)
        right = np.minimum(left + 1, l_in - 1)
        to_left = np.abs(c - right.astype(_F)).astype(np.float64)  # onnxruntime's dx2, dx1
        to_right = np.abs(c - left.astype(_F)).astype(np.float64)
        same = left == right
        to_left[same] = to_right[same] = 0.5
        rows = np.arange(l_out)
        np.add.at(weights, (rows, left), to_left)
        np.add.at(weights, (rows, right), to_right)
    else:  # cubic
        base = np.floor(coords).astype(np.int64)
        t = (coords - base.astype(_F)).astype(np.float64)
        for k in range(4):
            taps = base + (k - 1)
            w = _cubic(t - (k - 1), how.cubic_a)
            if how.exclude_outside:
                w = np.where((taps < 0) | (taps >= l_in), 0.0, w)
            np.add.at(weights, (np.arange(l_out), np.clip(taps, 0, l_in - 1)), w)
        if how.exclude_outside:
            sums = weights.sum(axis=1, keepdims=True)
            weights = np.divide(weights, sums, out=np.zeros_like(weights), where=sums != 0)
    if s == 1 and l_in == l_out and (outside.any() or not np.array_equal(weights, np.eye(l_in))):
        if how.coordinates == "tf_half_pixel_for_nn":
            return np.eye(l_in), None  # (x + 0.5) / 1 rounds up in the ceil modes; runtimes copy
        raise Ambiguous(
            f"its scale is 1 and coordinate_transformation_mode '{how.coordinates}' moves the "
            "axis, which onnxruntime copies unchanged at scale 1"
        )
    bias = None
    if outside.any():
        weights[outside] = 0.0
        if how.extrapolation != 0:
            bias = np.where(outside, how.extrapolation, 0.0)
    return weights, bias


def _antialias_weights(
    how: Interpolation,
    weights: NDArray[np.float64],
    coords: NDArray[np.float32],
    l_in: int,
    s: np.float32,
) -> None:
    """Antialiased linear or cubic weights, as onnxruntime computes them (Pillow's resampling:
    the filter widened by ``1 / scale`` when downsampling, over the input pixels whose centres
    it covers; weights beyond the input added to the edge pixel, or dropped with
    ``exclude_outside``; then normalised), in float32."""
    scale = _F(1) / s
    size = _F(2) if how.mode == "linear" else _F(4)
    support = size * _F(0.5) * scale if scale >= 1 else size * _F(0.5)
    inv = _F(1) / scale if scale >= 1 else _F(1)
    a = _F(how.cubic_a)
    for j in range(weights.shape[0]):
        center = _F(0.5) + (_F(j) if scale == 1 else coords[j])
        lo = math.floor(float(center) - float(support) + 0.5)
        hi = math.floor(float(center) + float(support) + 0.5)
        if how.exclude_outside:
            lo, hi = max(lo, 0), min(hi, l_in)
        taps = np.arange(lo, hi)
        t = np.abs((taps.astype(_F) - center + _F(0.5)) * inv)
        if how.mode == "linear":
            w = np.where(t < 1, _F(1) - t, _F(0))
        else:
            near = ((a + 2) * t - (a + 3)) * t * t + 1
            far = (((t - 5) * t + 8) * t - 4) * a
            w = np.where(t < 1, near, np.where(t < 2, far, _F(0))).astype(_F)
        total = _F(w.sum(dtype=_F))
        if total != 0 and total != 1:
            w = w / total
        np.add.at(weights, (j, np.clip(taps, 0, l_in - 1)), w.astype(np.float64))


def _check_fractional_length(how: Interpolation, l_in: int, l_out: int, scale: float) -> None:
    """From ``scales``, ONNX's definition (its reference implementation) puts the resized length
    ``scale * L_in`` itself into align_corners', tf_crop_and_resize's and pytorch_half_pixel's
    formulas; onnxruntime puts the output length ``floor(scale * L_in)``. Where the two differ
    and the formula reads it, `Ambiguous`."""
    length = float(_F(l_in) * _F(scale))
    if length == l_out:
        return
    if (
        how.coordinates in ("align_corners", "tf_crop_and_resize")
        and l_out > 1
        or (how.coordinates == "pytorch_half_pixel" and l_out == 1 and length > 1)
    ):
        raise Ambiguous(
            f"its scale {scale} makes the resized length {length}, which ONNX's "
            f"{how.coordinates} formula reads where onnxruntime reads the output length {l_out}"
        )


def _bicubic_x2(l_in: int) -> NDArray[np.float64]:
    """``nf.upsample_bicubic``'s matrix along one doubled axis (its kernel on each unit
    vector)."""
    return np.asarray(bicubic(np.eye(l_in).reshape(l_in, 1, l_in), [True]))[:, 0, :].T


def _bilinear_x2(l_in: int) -> NDArray[np.float64]:
    """``nf.upsample_bilinear``'s matrix along one doubled axis."""
    w = np.zeros((2 * l_in, l_in))
    for i in range(l_in):
        w[2 * i, max(i - 1, 0)] += 0.25
        w[2 * i, i] += 0.75
        w[2 * i + 1, i] += 0.75
        w[2 * i + 1, min(i + 1, l_in - 1)] += 0.25
    return w


def _interpolation(r: ReaderState, n: Node) -> Interpolation:
    a = n.attrs
    mode = str(a.get("mode", "nearest"))
    if mode == "bilinear" and n.op_type == "Upsample":
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic") or (n.op_type == "Upsample" and mode == "cubic"):
        raise r.error(f"its mode '{mode}' is not one ONNX defines for {n.op_type}")
    if n.op_type == "Upsample" or n.opset < 11:
        return Interpolation(mode, "asymmetric", "simple")
    coordinates = str(a.get("coordinate_transformation_mode", "half_pixel"))
    nearest = str(a.get("nearest_mode", "round_prefer_floor"))
    if coordinates not in _COORDINATE_MODES or (
        coordinates == "half_pixel_symmetric" and n.opset < 19
    ):
        raise r.error(f"its coordinate_transformation_mode '{coordinates}' is not ONNX's")
    if nearest not in _NEAREST_MODES[:-1]:
        raise r.error(f"its nearest_mode '{nearest}' is not ONNX's")
    exclude = bool(a.get("exclude_outside", 0))
    if exclude and mode != "cubic" and not (mode == "linear" and a.get("antialias", 0)):
        raise r.error("exclude_outside=1 is defined for mode cubic (and antialiased linear) only")
    cubic_a = float(a["cubic_coeff_a"].value) if "cubic_coeff_a" in a else -0.75  # type: ignore[union-attr]
    extrapolation = float(a["extrapolation_value"].value) if "extrapolation_value" in a else 0.0  # type: ignore[union-attr]
    antialias = bool(a.get("antialias", 0)) and n.opset >= 18
    if antialias and mode == "nearest":
        antialias = False  # ONNX: antialias applies to linear and cubic only
    if antialias and coordinates == "tf_crop_and_resize":
        raise r.error(
            "antialias=1 with coordinate_transformation_mode tf_crop_and_resize: onnxruntime "
            "tests the roi bounds half a pixel off ONNX's definition; nanoir does not choose"
        )
    return Interpolation(mode, coordinates, nearest, cubic_a, exclude, extrapolation, antialias)


def _scales_and_sizes(
    r: ReaderState, n: Node, shape: tuple[int, ...], kept_sizes: tuple[int, ...] | None
) -> tuple[list[float], list[int], list[tuple[float, float]]]:
    """Per dim of the input: the scale, the output length and the roi (start, end)."""
    rank = len(shape)
    scales, sizes = [1.0] * rank, list(shape)
    rois = [(0.0, 1.0)] * rank
    if n.op_type == "Upsample" and n.opset < 9 or n.op_type == "Upsample" and not n.input(1):
        given = [float(v.value) for v in n.attrs.get("scales", ())]  # type: ignore[union-attr]
        scale_name, size_name, roi_name, axes = "", "", "", list(range(rank))
    elif n.opset < 11:
        given, scale_name, size_name, roi_name, axes = [], n.input(1), "", "", list(range(rank))
    else:
        given, scale_name, size_name, roi_name = [], n.input(2), n.input(3), n.input(1)
        axes_attr = n.attrs.get("axes") if n.opset >= 18 else None
        axes = list(range(rank)) if axes_attr is None else [int(x) for x in axes_attr]  # type: ignore[union-attr]
        if any(not -rank <= x < rank for x in axes) or len({x % rank for x in axes}) != len(axes):
            raise r.error(f"its axes {axes} are out of range or repeated for rank {rank}")
        axes = [x % rank for x in axes]
    if scale_name:
        array = r.static_array(scale_name, "scales")
        given = [] if array.size == 0 else [float(v) for v in array.reshape(-1)]
    if given:
        if len(given) != len(axes):
            raise r.error(f"its scales {given} do not fit {len(axes)} axes")
        for axis, s in zip(axes, given):
            if not s > 0 or not math.isfinite(s):
                raise r.error(f"its scale {s} is not positive")
            scales[axis] = float(_F(s))
            if shape[axis] != DYNAMIC_INDEX:
                sizes[axis] = int(_F(shape[axis]) * _F(s))
            elif s != 1:
                raise r.error(
                    f"it scales dim {axis}, which is dynamic in {dims_text(shape)}"
                    + r.shapes_hint()
                )
    elif size_name:
        wanted = kept_sizes if kept_sizes is not None else r.static_ints(size_name, "sizes")
        if len(wanted) != len(axes):
            raise r.error(f"its sizes {list(wanted)} do not fit {len(axes)} axes")
        policy = (
            str(n.attrs.get("keep_aspect_ratio_policy", "stretch")) if n.opset >= 18 else "stretch"
        )
        for axis, size in zip(axes, wanted):
            if shape[axis] == DYNAMIC_INDEX:
                if size != DYNAMIC_INDEX:
                    raise r.error(
                        f"it resizes dim {axis}, which is dynamic in {dims_text(shape)}"
                        + r.shapes_hint()
                    )
        if policy in ("not_larger", "not_smaller"):
            ratios = [_F(size) / _F(shape[axis]) for axis, size in zip(axes, wanted)]
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for axis in axes:
                scales[axis] = float(common)
                sizes[axis] = int(np.floor(float(common) * shape[axis] + 0.5))
        elif policy == "stretch":
            for axis, size in zip(axes, wanted):
                if size == DYNAMIC_INDEX:
                    continue  # a dynamic dim kept (its size computed from a Shape)
                if size < 0:
                    raise r.error(f"its sizes {list(wanted)} hold a negative size")
                sizes[axis] = size
                scales[axis] = float(_F(size) / _F(shape[axis])) if shape[axis] else 1.0
        else:
            raise r.error(f"its keep_aspect_ratio_policy '{policy}' is not ONNX's")
    else:
        raise r.error(f"a {n.op_type} needs scales or sizes")
    if roi_name:
        roi = r.static_array(roi_name, "roi").reshape(-1).astype(np.float64)
        if roi.size:
            if roi.size != 2 * len(axes):
                raise r.error(f"its roi {roi.tolist()} does not fit {len(axes)} axes")
            k = len(axes)
            for i, axis in enumerate(axes):
                rois[axis] = (float(roi[i]), float(roi[k + i]))
    return scales, sizes, rois


def read_resize(r: ReaderState, n: Node, kept_sizes: tuple[int, ...] | None = None) -> None:
    """``kept_sizes``: the sizes input when it was computed from a dynamic shape
    (DYNAMIC_INDEX where it keeps a dynamic dim)."""
    if len(n.outputs) != 1:
        raise r.error(f"a {n.op_type} has 1 output")
    how = _interpolation(r, n)
    x = r.ssa(n.inputs[0])
    shape = nf.tensor_shape(x)
    rank = len(shape)
    scales, sizes, rois = _scales_and_sizes(r, n, shape, kept_sizes)
    by_scales = kept_sizes is None and not (n.opset >= 11 and n.op_type == "Resize" and n.input(3))
    plans: dict[int, tuple[NDArray[np.float64], NDArray[np.float64] | None]] = {}
    for axis in range(rank):
        l_in, l_out = shape[axis], sizes[axis]
        if l_in == DYNAMIC_INDEX:
            samples = [axis_weights(how, size, size, 1.0, rois[axis]) for size in (1, 2, 7)]
            if any(b is not None or not np.array_equal(w, np.eye(len(w))) for w, b in samples):
                raise r.error(
                    f"it resizes dim {axis}, which is dynamic in {dims_text(shape)}"
                    + r.shapes_hint()
                )
            continue
        if l_out < 1 or l_in < 1:
            raise r.error(f"it resizes dim {axis} from {l_in} to {l_out}")
        try:
            if by_scales:
                _check_fractional_length(how, l_in, l_out, scales[axis])
            if how.antialias and l_in == l_out and _F(scales[axis]) != 1:
                raise Ambiguous(
                    f"antialias with scale {scales[axis]} keeps the length {l_in}, which "
                    "onnxruntime copies unchanged while ONNX's definition interpolates"
                )
            w, b = axis_weights(how, l_in, l_out, scales[axis], rois[axis])
        except Ambiguous as why:
            raise r.error(
                f"along dim {axis} ({l_in} -> {l_out}): {why}; nanoir does not choose"
            ) from None
        if b is None and w.shape[0] == w.shape[1] and np.array_equal(w, np.eye(l_in)):
            continue
        plans[axis] = (w, b)
    value = x
    if not plans:
        r.alias(n.outputs[0], x)
        return
    if list(sizes) == list(shape):
        raise r.error(
            f"it keeps the shape {dims_text(shape)}, which onnxruntime copies unchanged, while "
            f"ONNX's definition moves dim {min(plans)} (scale {scales[min(plans)]}); nanoir does "
            "not choose"
        )
    spatial = rank >= 3 and all(axis >= 2 for axis in plans)
    one_hot = {
        a
        for a, (w, b) in plans.items()
        if b is None and np.all((w == 0) | (w == 1)) and np.all(w.sum(1) == 1)
    }
    if (
        spatial
        and len(one_hot) == len(plans)
        and all(
            np.array_equal(np.argmax(w, 1), nearest_indices(shape[a], w.shape[0]))
            for a, (w, _) in plans.items()
        )
    ):
        r.add(n, nf.UpsampleNearestOp(x, sizes[2:]), n.outputs)
        return
    if spatial and all(
        b is None
        and w.shape[0] == 2 * w.shape[1]
        and np.allclose(w, _bilinear_x2(w.shape[1]), rtol=0, atol=1e-6)
        for w, b in plans.values()
    ):
        r.add(n, nf.UpsampleBilinearOp(x, sizes[2:]), n.outputs)
        return
    if spatial and all(
        b is None
        and w.shape[0] == 2 * w.shape[1]
        and np.allclose(w, _bicubic_x2(w.shape[1]), rtol=0, atol=1e-6)
        for w, b in plans.values()
    ):
        r.add(n, nf.UpsampleBicubicOp(x, sizes[2:]), n.outputs)
        return
    axes = sorted(plans)
    for i, axis in enumerate(axes):
        w, b = plans[axis]
        if axis in one_hot:
            op = nf.GatherOp(value, axis, [int(k) for k in np.argmax(w, 1)])
        else:
            op = _linear_along(r, n, value, axis, w, b)
        if i == len(axes) - 1:
            r.add(n, op, n.outputs)
        else:
            value = r.emit(op).results[0]


def _linear_along(
    r: ReaderState,
    n: Node,
    x: SSAValue,
    axis: int,
    w: NDArray[np.float64],
    b: NDArray[np.float64] | None,
):  # noqa: ANN202 - an nf op
    """``nf.linear`` by ``w`` over ``axis`` (moved last and back by transposes); the last op
    is returned unadded."""
    rank = len(nf.tensor_shape(x))
    dtype = {"f16": np.float16, "f32": np.float32, "f64": np.float64}[
        str(x.type.get_element_type())
    ]  # type: ignore[attr-defined]
    weight = r.fresh_constant(f"{n.name}_axis{axis}_weights", w.astype(dtype))
    bias = (
        None
        if b is None
        else r.fresh_constant(f"{n.name}_axis{axis}_extrapolation", b.astype(dtype))
    )
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    if axis != rank - 1:
        x = r.emit(nf.TransposeOp(x, perm)).results[0]
    op = nf.LinearOp(x, weight, bias)
    if axis == rank - 1:
        return op
    moved = r.emit(op).results[0]
    return nf.TransposeOp(moved, perm)


RESIZE = {"Resize": read_resize, "Upsample": read_resize}
