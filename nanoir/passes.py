"""The registry of passes ``nanoir-opt`` offers, by pipeline name (lazily imported)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def _canonicalize() -> type[ModulePass]:
    from xdsl.transforms.canonicalize import CanonicalizePass

    return CanonicalizePass


def _cse() -> type[ModulePass]:
    from xdsl.transforms.common_subexpression_elimination import (
        CommonSubexpressionElimination,
    )

    return CommonSubexpressionElimination


def _dce() -> type[ModulePass]:
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    return DeadCodeElimination


def _quantize() -> type[ModulePass]:
    from nanoir.lowering.quantize import QuantizePass

    return QuantizePass


def _fold_bn() -> type[ModulePass]:
    from nanoir.lowering.fold_batch_norm import FoldBatchNormPass

    return FoldBatchNormPass


def _lower_to_hw() -> type[ModulePass]:
    from nanoir.lowering.lower_to_hw import LowerToHwPass

    return LowerToHwPass


NANOIR_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "fold-bn": _fold_bn,
    "quantize": _quantize,
    "lower-to-hw": _lower_to_hw,
}
"""Passes nanoir defines (``lowering/``)."""

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "canonicalize": _canonicalize,
    "cse": _cse,
    "dce": _dce,
    **NANOIR_PASSES,
}
"""Every pass ``nanoir-opt`` accepts in ``-p``: nanoir's own plus xDSL's generic clean-ups."""
