"""The Core ATen ops (``torch.Tag.core``) that mean something in inference, and the OpInfo
entries (``op_db``) that exercise each (issue 32 §3); shared by ``tests/nanoir/test_core_aten.py``
and ``benchmarks/bench_opinfo.py``. Needs the ``torch`` extra.

:data:`LEFT_OUT` lists the Core ATen ops left out, each with the reason; every other core op
is *kept*: mapped onto nf ops (the frontend's handlers), folded at import when it does not
depend on the inputs (:data:`FOLDED`), or refused by name with a reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = [
    "FOLDED",
    "ISSUE_OPS",
    "LEFT_OUT",
    "OPINFOS",
    "core_ops",
    "kept_ops",
    "opinfo_names",
]

_RANDOM = "random sampling: no inference meaning (a program computes the same every run)"
_EMPTY = "uninitialised memory: its values are undefined"
_OUT = "an out= variant: writes into a given tensor (functional programs have none)"
_FFT = "complex values / FFT: nf holds real tensors (refused by name when met: core_aten)"
_GRAD = "autograd only: a backward op, never in an inference program"
_SYM = "a sym_* shape query: computes a size, which the importer takes from the graph's meta"
_TRAIN = "training only: batch norm with batch statistics, dropout in training mode"

LEFT_OUT: dict[str, str] = {
    "rand": _RANDOM,
    "randn": _RANDOM,
    "randperm": _RANDOM,
    "native_dropout": _TRAIN,
    "empty": _EMPTY,
    "empty_strided": _EMPTY,
    "atan2.out": _OUT,
    "_fft_r2c": _FFT,
    "_fft_c2r": _FFT,
    "_adaptive_avg_pool2d_backward": _GRAD,
    "avg_pool2d_backward": _GRAD,
    "convolution_backward": _GRAD,
    "embedding_dense_backward": _GRAD,
    "max_pool2d_with_indices_backward": _GRAD,
    "native_group_norm_backward": _GRAD,
    "native_layer_norm_backward": _GRAD,
    "sym_numel": _SYM,
    "sym_size": _SYM,
    "sym_storage_offset": _SYM,
    "sym_stride": _SYM,
    "_native_batch_norm_legit": _TRAIN,
}
"""Core ATen ops (by name, or ``name.overload`` for one overload) left out, with the reason."""

FOLDED = ("arange", "full", "full_like", "scalar_tensor", "fill")
"""Kept core ops that build tensors from numbers and shapes: folded at import
(``nanoir.frontend.fold``), never an op of the program."""


def core_ops() -> list[str]:
    """Every Core ATen overload, ``aten.<name>.<overload>``, sorted."""
    found: set[str] = set()
    for name in torch.ops.aten:
        packet = getattr(torch.ops.aten, name)
        try:
            overloads = packet.overloads()
        except Exception:  # (not an op packet)
            continue
        for overload in overloads:
            if torch.Tag.core in getattr(packet, overload).tags:
                found.add(f"aten.{name}.{overload}")
    return sorted(found)


def _left_out(op: str) -> bool:
    """Listed in :data:`LEFT_OUT`, or any ``sym_*`` shape query (``sym_is_contiguous`` appears
    once something has loaded it: ``torch.ops.aten`` lists the packets loaded so far)."""
    _, name, overload = op.split(".", 2)
    return name in LEFT_OUT or f"{name}.{overload}" in LEFT_OUT or name.startswith("sym_")


def kept_ops() -> list[str]:
    """The Core ATen overloads kept (not :data:`LEFT_OUT`)."""
    return [op for op in core_ops() if not _left_out(op)]


OPINFOS: dict[str, tuple[str, ...]] = {
    "_adaptive_avg_pool2d": ("nn.functional.adaptive_avg_pool2d",),
    "_adaptive_avg_pool3d": ("nn.functional.adaptive_avg_pool3d",),
    "_log_softmax": ("log_softmax",),
    "_softmax": ("softmax",),
    "_native_batch_norm_legit_no_training": ("nn.functional.batch_norm",),
    "_to_copy": ("float", "double", "bool", "type_as"),
    "convolution": ("nn.functional.conv1d", "nn.functional.conv2d"),
    "index": ("__getitem__",),
    "max_pool2d_with_indices": ("nn.functional.max_pool2d",),
    "max_pool3d_with_indices": ("nn.functional.max_pool3d",),
    "reflection_pad1d": ("nn.functional.pad.reflect",),
    "reflection_pad2d": ("nn.functional.pad.reflect",),
    "reflection_pad3d": ("nn.functional.pad.reflect",),
    "replication_pad2d": ("nn.functional.pad.replicate",),
    "replication_pad3d": ("nn.functional.pad.replicate",),
    "upsample_bilinear2d": ("nn.functional.interpolate.bilinear",),
    "upsample_nearest2d": ("nn.functional.interpolate.nearest",),
    "constant_pad_nd": ("nn.functional.pad.constant",),
    "copy": ("clone",),
    "alias": ("view_as",),
}
"""Core ops whose OpInfo entries have other names (``name.variant``); the others are found by
name (``exp``, ``nn.functional.elu``)."""

ISSUE_OPS = (
    "stack",
    "nn.functional.normalize",
    "sum",
    "nn.functional.mish",
    "repeat_interleave",
    "nn.functional.interpolate.bicubic",
    "eq",
    "masked_fill",
    "where",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "erf",
    "sin",
    "cos",
    "pow",
    "neg",
    "abs",
    "sign",
    "floor",
    "round",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "amax",
    "amin",
    "argmax",
    "flip",
    "cumsum",
    "repeat",
)
"""The OpInfo entries of the ops issue 32 names (its patterns and §3's list)."""


def opinfo_names(op: str, op_db: Iterable[Any]) -> list[str]:
    """The OpInfo entries (``name`` or ``name.variant``) that exercise core op ``op``
    (``aten.<name>.<overload>``): by the table, else by name."""
    name = op.split(".")[1]
    if name in OPINFOS:
        return list(OPINFOS[name])
    base = name.lstrip("_")
    found = []
    for o in op_db:
        full = o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")
        if o.name in (name, base, f"nn.functional.{name}", f"nn.functional.{base}"):
            found.append(full)
    return found
