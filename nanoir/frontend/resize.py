"""Handlers for torch's linear and cubic resizing (``F.interpolate(mode="linear" | "bilinear"
| "bicubic" | "trilinear")``, any size or scale, ``align_corners`` either way, ``antialias``
too):

| case | nf |
|---|---|
| 2-D, each spatial dim x1 or x2, ``align_corners=False``, no antialias | ``nf.upsample_bilinear`` / ``nf.upsample_bicubic``: dyadic weights, exact on codes, streamed |
| anything else | per resized dim, ``nf.linear`` by a constant ``[out, in]`` weight along that dim (moved last by ``nf.transpose`` and back) |

torch's resizing is separable: each output is a fixed weighted sum of input rows along each
dim, the weights a function of the positions only. Those weights are read from torch itself
(the same ATen op run in float64 on a basis: a one-hot along the dim, ones along the others,
whose weights sum to one), so every convention of torch's (``align_corners``, a scale given
instead of a size, edge clamping, the cubic's ``A = -0.75``, antialiasing) is torch's. As
the weight of an ``nf.linear``, quantize quantizes them like any weight (per output position,
per channel), and lower-to-hw computes the integer sums exactly: nq == nh; the difference
from float is the weights' quantization, shown in the report. Where the weights are dyadic
and the grid allows (x2, ``align_corners=False``), the dedicated ops keep them exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import fx
from xdsl.ir import SSAValue

from nanoir.dialects import nf
from nanoir.dialects.dense import numpy_to_dense
from nanoir.frontend.support import Unsupported
from nanoir.runtime.numerics.shapes import DYNAMIC_INDEX

__all__ = ["HANDLERS", "MAX_WEIGHTS", "resize_weights"]

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]

MAX_WEIGHTS = 2**22
"""Most elements of one dim's ``[out, in]`` weight (a 2048 -> 2048 resize)."""


def resize_weights(op: Any, args: tuple[Any, ...], shape: tuple[int, ...]) -> list[np.ndarray]:
    """Per spatial dim of an ``[N, C, *S]`` input of ``shape``, the ``[out, in]`` float64
    weights of torch's resize ``op(x, *args)`` along it."""
    spatial = shape[2:]
    weights = []
    for d, n in enumerate(spatial):
        basis = torch.zeros((n, 1, *spatial), dtype=torch.float64)
        index = [slice(None)] * basis.ndim
        for k in range(n):
            index[0], index[2 + d] = k, k
            basis[tuple(index)] = 1.0
        with torch.no_grad():
            out = op(basis, *args).numpy()
        corner = (slice(None), 0, *[slice(None) if e == d else 0 for e in range(len(spatial))])
        weights.append(np.ascontiguousarray(out[corner].T))  # [k, out] -> [out, in]
    return weights


def _exact_x2(a: dict[str, Any], node: fx.Node, in_spatial, out_spatial) -> bool:
    """Whether the dedicated x2 op computes this resize: each dim x1 or x2, the half-pixel
    convention (``align_corners=False``), a scale (if given) of 1 or 2, no antialias."""
    if a.get("align_corners") or a.get("antialias") or "_aa" in str(node.target):
        return False
    if any(o not in (i, 2 * i) for i, o in zip(in_spatial, out_spatial)):
        return False
    scales = a.get("scale_factors") or [a.get(k) for k in ("scales_h", "scales_w") if k in a]
    return all(s is None or float(s) in (1.0, 2.0) for s in scales)


def _along_last(imp: Any, x: SSAValue, d: int, weight: SSAValue) -> SSAValue:
    """``nf.linear`` of ``x`` by ``weight`` along dim ``d`` (moved last and back)."""
    rank = len(nf.tensor_shape(x))
    perm = list(range(rank))
    perm[d], perm[-1] = perm[-1], perm[d]
    if d != rank - 1:
        x = imp.emit(nf.TransposeOp(x, perm)).result
    y = imp.emit(nf.LinearOp(x, weight)).result
    if d != rank - 1:
        y = imp.emit(nf.TransposeOp(y, perm)).result
    return y


def resize(exact: Callable[[SSAValue, Any], Any] | None) -> Handler:
    """A handler for one resize mode; ``exact(x, size)`` makes its dedicated x2 op (2-D
    resizes: None for 1-D and 3-D ones)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        x = imp.tensor(node.args[0], imp.element_type(node))
        shape = tuple(nf.tensor_shape(x))
        in_spatial = shape[2:]
        out_spatial = tuple(imp.result_type(node).get_shape()[2:])
        if DYNAMIC_INDEX in (*in_spatial, *out_spatial):
            raise Unsupported("resizing a dynamic spatial dim (its weights are not static)")
        if in_spatial == out_spatial and not (a.get("align_corners") or a.get("antialias")):
            return x
        if exact is not None and _exact_x2(a, node, in_spatial, out_spatial):
            return imp.emit(exact(x, out_spatial)).result
        too_big = [(o, i) for i, o in zip(in_spatial, out_spatial) if i * o > MAX_WEIGHTS]
        if too_big:
            raise Unsupported(
                f"resizing {too_big[0][1]} to {too_big[0][0]}: its weights would have more "
                f"than {MAX_WEIGHTS} elements"
            )
        args = tuple(node.args[1:])
        if any(isinstance(v, fx.Node) for v in (*args, *node.kwargs.values())):
            raise Unsupported("resizing to a size computed at run time")
        probe = (1, 1, *in_spatial)

        def op(t: torch.Tensor, *rest: Any) -> torch.Tensor:
            return node.target(t, *rest, **node.kwargs)  # type: ignore[operator]

        weights = resize_weights(op, args, probe)
        elt = imp.element_type(node)
        for d in reversed(range(len(in_spatial))):
            w = weights[d]
            if w.shape[0] == w.shape[1] and np.array_equal(w, np.eye(w.shape[0])):
                continue
            const = nf.ConstantOp(
                numpy_to_dense(w.astype(np.float32), elt), name=f"{node.name}.weight{d}"
            )
            imp.constant_ops.append(const)
            x = _along_last(imp, x, 2 + d, const.result)
        return x

    handle.__doc__ = "torch's resize: the exact x2 op, or a linear by torch's weights per dim."
    return handle


_bilinear = resize(nf.UpsampleBilinearOp)
_bicubic = resize(nf.UpsampleBicubicOp)
_other = resize(None)

HANDLERS: dict[str, Handler] = {
    "aten.upsample_bilinear2d.vec": _bilinear,
    "aten.upsample_bilinear2d.default": _bilinear,
    "aten._upsample_bilinear2d_aa.vec": _bilinear,
    "aten._upsample_bilinear2d_aa.default": _bilinear,
    "aten.upsample_bicubic2d.vec": _bicubic,
    "aten.upsample_bicubic2d.default": _bicubic,
    "aten._upsample_bicubic2d_aa.vec": _bicubic,
    "aten._upsample_bicubic2d_aa.default": _bicubic,
    "aten.upsample_linear1d.vec": _other,
    "aten.upsample_linear1d.default": _other,
    "aten.upsample_trilinear3d.vec": _other,
    "aten.upsample_trilinear3d.default": _other,
}
"""The ATen resize ops of this family, by overload name."""
