"""The named pipeline from a torch model to an integer program, straight-line, with stop points.

    module = nanoir.compile_model(model, (x,), calibration, stop="nh")

Stages, in order (``stop`` names the last one run):

- ``nf``: ``from_torch`` (float ops, PyTorch semantics);
- ``folded``: ``fold-bn``;
- ``nq``: ``quantize`` (the NanoEngine "Q" level; ``quantize_options`` are its options, e.g.
  ``bias_correction=False`` for the uncorrected program);
- ``nh``: ``lower-to-hw`` (integer ops, exact);
- ``streamed``: ``stream-plan`` (per-node caches recorded on the program; ``stream`` gives its
  ``mem_dim`` and ``steps``).

The stages run with Python's cyclic garbage collector paused (:func:`paused_gc`), which keeps
the time per op flat as programs grow (``benchmarks/bench_compile.py``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from nanoir.context import make_context
from nanoir.errors import ArgumentError
from nanoir.frontend import from_torch
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import quantize
from nanoir.lowering.stream_plan import StreamPlanPass

STAGES = ("nf", "folded", "nq", "nh", "streamed")


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off while the stages run, as it was after.

    A program of N ops is millions of Python objects; each full collection walks all of them,
    and the stages allocate enough to trigger one again and again, so the time per op grew
    with N (stream-plan 4x slower per op at 10,000 ops than at 100). The cycles a stage
    leaves (erased ops) are collected after it, by the next automatic collection. The
    collector is process-wide: another thread's compile finishing re-enables it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compile_model(
    model: Any,
    example_inputs: Sequence[Any],
    calibration: Iterable[Any] | None = None,
    *,
    stop: str = "nh",
    stream: dict[str, Any] | None = None,
    **quantize_options: Any,
) -> ModuleOp:
    """Run the pipeline on a ``torch.nn.Module`` up to and including the stage ``stop``.

    Bad arguments (``stop`` not a stage name, ``stream`` not a dict of ``stream-plan``
    options) raise :class:`~nanoir.errors.ArgumentError` before any stage runs.
    """
    if not isinstance(stop, str) or stop not in STAGES:
        raise ArgumentError(f"stop must be one of {', '.join(STAGES)}, got {stop!r}")
    if stream is not None and not isinstance(stream, dict):
        raise ArgumentError(
            f"stream must be a dict of stream-plan options, got {type(stream).__name__}"
        )
    allowed = {f.name for f in fields(StreamPlanPass)}
    unknown = sorted(map(str, set(stream or {}) - allowed))
    if unknown:
        raise ArgumentError(
            f"stream has unknown option(s) {', '.join(unknown)} "
            f"(stream-plan takes {', '.join(sorted(allowed))})"
        )
    with paused_gc():
        return _run_stages(model, example_inputs, calibration, stop, stream, quantize_options)


def _run_stages(
    model: Any,
    example_inputs: Sequence[Any],
    calibration: Iterable[Any] | None,
    stop: str,
    stream: dict[str, Any] | None,
    quantize_options: dict[str, Any],
) -> ModuleOp:
    module = from_torch(model, example_inputs)
    if stop == "nf":
        return module

    FoldBnPass().apply(make_context(), module)
    if stop == "folded":
        return module

    quantize(module, calibration, **quantize_options)
    if stop == "nq":
        return module

    lower_to_hw(module)
    if stop == "nh":
        return module

    options = dict(stream or {})
    steps = options.pop("steps", None)
    if steps is not None and not isinstance(steps, str):
        steps = ",".join(f"{d}:{s}" for d, s in steps)
    StreamPlanPass(**options, **({"steps": steps} if steps else {})).apply(make_context(), module)
    return module
