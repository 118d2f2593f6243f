"""The rest of PyTorch's Core ATen ops (``torch.Tag.core``) that mean something in inference:
what maps onto ops nf already has, and what is refused by name with the reason.

The families map the bulk (``math_ops``: elementwise math, comparisons, selection;
``reductions``; ``movement_ops``); the core importer maps convolutions, matmuls, norms, pools,
activations and views. Here:

- :data:`ALIASES`: Core ATen overloads whose core handler already reads them (3-D pools);
- :data:`HANDLERS`: ``addmm`` and ``baddbmm`` (``beta bias + alpha a @ b``), reflection and replication pads
  (``nf.pad``), and a refusal for each op with no integer form, naming why;
- :data:`WRAPS`: division with ``rounding_mode`` (the division, then ``floor`` / ``trunc``).

Complex values (STFT, FFTs, ``view_as_complex``) are refused naming the op: nf holds real
tensors. Left out of the Core ATen list altogether (random sampling, uninitialised ``empty*``,
``out=`` variants, backward ops, ``sym_*`` shape queries) is listed, with the reason, in
``tests/nanoir/test_core_aten.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import fx

from nanoir.dialects import nf
from nanoir.frontend.support import Unsupported

__all__ = ["ALIASES", "HANDLERS", "REFUSED", "WRAPS"]

Handler = Callable[[Any, fx.Node, dict[str, Any]], Any]

ALIASES: dict[str, str] = {
    "aten.avg_pool3d.default": "aten.avg_pool2d.default",
    "aten._adaptive_avg_pool3d.default": "aten._adaptive_avg_pool2d.default",
    "aten.max_pool3d_with_indices.default": "aten.max_pool2d_with_indices.default",
    "aten.div.Scalar_mode": "aten.div.Scalar",
}
"""A Core ATen overload -> the overload whose handler reads it too (3-D pools by rank; a
division by a number with a rounding mode, wrapped below)."""

_COMPLEX = "complex values: nf holds real tensors (take magnitudes before the program, or a real transform)"

REFUSED: dict[str, str] = {
    # data-dependent shapes and values
    "aten.nonzero.default": "its result's shape depends on the data",
    "aten._local_scalar_dense.default": "it reads a tensor's value into Python (x.item())",
    # indexing by values computed at run time
    "aten.gather.default": "it gathers by indices computed at run time (index_select by a "
    "constant index maps)",
    "aten.scatter.src": "it writes at indices given as a tensor",
    "aten.scatter.value": "it writes at indices given as a tensor",
    "aten.scatter_add.default": "it writes at indices given as a tensor",
    "aten.scatter_reduce.two": "it writes at indices given as a tensor",
    "aten.index_put.default": "it writes at indices given as a tensor",
    "aten.masked_scatter.default": "it writes a mask's worth of values in order (a "
    "data-dependent gather)",
    "aten.select_scatter.default": "no nf op writes one index of a dim (slice_scatter maps)",
    "aten.grid_sampler_2d.default": "it samples at positions computed at run time",
    "aten._embedding_bag.default": "an embedding bag's offsets are data (nn.Embedding maps)",
    # memory and layout
    "aten.as_strided.default": "it views memory by strides, which nf tensors do not have",
    "aten.col2im.default": "no nf op folds columns back into an image (unfold's inverse)",
    "aten.diagonal.default": "no nf op takes a diagonal",
    # orderings and distances
    "aten.sort.default": "no nf op sorts (codes would sort exactly, but nf has no sort)",
    "aten.topk.default": "no nf op selects the top k (codes would, but nf has no sort)",
    "aten._cdist_forward.default": "no nf op computes pairwise distances",
    "aten._pdist_forward.default": "no nf op computes pairwise distances",
    # functions of two runtime values (a lookup table takes one input)
    "aten.atan2.default": "a function of two tensors has no lookup table (one input)",
    # complex values and transforms
    "aten.stft.default": _COMPLEX,
    "aten.stft.center": _COMPLEX,
    "aten.istft.default": _COMPLEX,
    "aten._fft_r2c.default": _COMPLEX,
    "aten._fft_c2r.default": _COMPLEX,
    "aten._fft_c2c.default": _COMPLEX,
    "aten.fft_fft.default": _COMPLEX,
    "aten.fft_rfft.default": _COMPLEX,
    "aten.fft_irfft.default": _COMPLEX,
    "aten.fft_ifft.default": _COMPLEX,
    "aten.fft_fft2.default": _COMPLEX,
    "aten.fft_rfft2.default": _COMPLEX,
    "aten.view_as_complex.default": _COMPLEX,
    "aten.view_as_real.default": _COMPLEX,
    "aten.complex.default": _COMPLEX,
    "aten.polar.default": _COMPLEX,
}
"""Ops with an inference meaning and no integer form here, with the reason."""


def _refuse(reason: str) -> Handler:
    def refuse(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        raise Unsupported(reason)

    refuse.__doc__ = f"Refused: {reason}."
    return refuse


def _addmm(first: str, second: str) -> Handler:
    """``addmm(bias, a, b, beta, alpha) = beta bias + alpha (a @ b)`` (``baddbmm`` the same on
    batches of matrices): ``nf.matmul``, scalar products where ``alpha``/``beta`` are not 1,
    ``nf.add`` (broadcasting the bias)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        return _scaled_sum(imp, node, a, a[first], a[second])

    handle.__doc__ = f"``beta self + alpha ({first} @ {second})``."
    return handle


def _scaled_sum(imp: Any, node: fx.Node, a: dict[str, Any], lhs: Any, rhs: Any) -> Any:
    elt = imp.element_type(node)
    product = imp.emit(nf.MatmulOp(imp.tensor(lhs, elt), imp.tensor(rhs, elt))).result
    alpha, beta = float(a.get("alpha", 1)), float(a.get("beta", 1))
    if alpha != 1:
        product = imp.emit(nf.MulOp(product, imp.scalar(alpha, elt))).result
    if beta == 0:
        return product
    bias = imp.tensor(a["self"], elt)
    if beta != 1:
        bias = imp.emit(nf.MulOp(bias, imp.scalar(beta, elt))).result
    return imp.emit(nf.AddOp(product, bias)).result


def _edge_pad(mode: str) -> Handler:
    """``reflection_pad*d`` / ``replication_pad*d``: ``nf.pad`` (torch lists (begin, end)
    pairs from the last dim backwards; nf all begins, then all ends, from the first)."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        x = imp.tensor(a["self"], imp.element_type(node))
        rank = len(nf.tensor_shape(x))
        pairs = [int(p) for p in a["padding"]]
        begins, ends = [0] * rank, [0] * rank
        for i in range(len(pairs) // 2):
            begins[rank - 1 - i], ends[rank - 1 - i] = pairs[2 * i], pairs[2 * i + 1]
        return imp.emit(nf.PadOp(x, [*begins, *ends], mode)).result

    handle.__doc__ = f"``nf.pad`` in mode {mode!r}."
    return handle


def _rounded_division(previous: Handler) -> Handler:
    """``div(a, b, rounding_mode="floor" | "trunc")``: the division, then ``nf.unary`` of that
    rounding; without a rounding mode, the division's handler as before."""

    def handle(imp: Any, node: fx.Node, a: dict[str, Any]) -> Any:
        mode = a.get("rounding_mode")
        if mode is None:
            return previous(imp, node, a)
        if mode not in ("floor", "trunc"):
            raise Unsupported(f"division with rounding_mode={mode!r}")
        quotient = previous(imp, node, {**a, "rounding_mode": None})
        return imp.emit(nf.UnaryOp(quotient, mode)).result

    handle.__doc__ = "A division, then floor or trunc for its ``rounding_mode``."
    return handle


HANDLERS: dict[str, Handler] = {
    **{name: _refuse(reason) for name, reason in REFUSED.items()},
    "aten.addmm.default": _addmm("mat1", "mat2"),
    "aten.baddbmm.default": _addmm("batch1", "batch2"),
    "aten.reflection_pad1d.default": _edge_pad(nf.PadMode.REFLECT),
    "aten.reflection_pad2d.default": _edge_pad(nf.PadMode.REFLECT),
    "aten.reflection_pad3d.default": _edge_pad(nf.PadMode.REFLECT),
    "aten.replication_pad1d.default": _edge_pad(nf.PadMode.EDGE),
    "aten.replication_pad2d.default": _edge_pad(nf.PadMode.EDGE),
    "aten.replication_pad3d.default": _edge_pad(nf.PadMode.EDGE),
}
"""This module's handlers, by overload name."""

WRAPS: dict[str, Callable[[Handler], Handler]] = {
    "aten.div.Tensor_mode": _rounded_division,
    "aten.div.Scalar_mode": _rounded_division,
}
"""Handlers of the core importer extended here: each wraps the one it replaces."""
