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
    # lazy: a pass module loads only when a pipeline names it
    from nanoir.lowering.quantize import QuantizePass

    return QuantizePass


def _fold_bn() -> type[ModulePass]:
    # lazy: a pass module loads only when a pipeline names it
    from nanoir.lowering.fold_bn import FoldBnPass

    return FoldBnPass


def _lower_to_hw() -> type[ModulePass]:
    # lazy: a pass module loads only when a pipeline names it
    from nanoir.lowering.lower_to_hw import LowerToHwPass

    return LowerToHwPass


def _stream_plan() -> type[ModulePass]:
    # lazy: a pass module loads only when a pipeline names it
    from nanoir.lowering.stream_plan import StreamPlanPass

    return StreamPlanPass


NANOIR_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "fold-bn": _fold_bn,
    "quantize": _quantize,
    "lower-to-hw": _lower_to_hw,
    "stream-plan": _stream_plan,
}
"""Passes nanoir defines (``lowering/``)."""

ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "canonicalize": _canonicalize,
    "cse": _cse,
    "dce": _dce,
    **NANOIR_PASSES,
}
"""Every pass ``nanoir-opt`` accepts in ``-p``: nanoir's own plus xDSL's generic clean-ups."""

PASS_SUMMARIES: dict[str, str] = {
    "fold-bn": "Fold ``nf.batch_norm`` into the preceding ``nf.conv``/``nf.linear`` where possible.",
    "quantize": "Insert power-of-two fake-quants (the nq level) into a float program.",
    "lower-to-hw": "Lower a quantized (nq) program to integer nh ops, exactly.",
    "stream-plan": "Plan the per-node caches of a program streamed along M and record their shapes.",
    "canonicalize": "Apply every canonicalization pattern (xDSL).",
    "cse": "Merge identical pure ops (xDSL common subexpression elimination).",
    "dce": "Delete unused pure ops (xDSL dead code elimination).",
}
"""One line per pass for ``nanoir-opt --help`` (kept without importing the passes; a test
checks nanoir's own against the first line of each pass class docstring)."""
