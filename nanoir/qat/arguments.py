"""The checks of :mod:`nanoir.qat`'s arguments: rates, rules and training batches.

Each bad value is one :class:`~nanoir.errors.ArgumentError` naming the argument (and, for a
batch, the epoch and batch), raised before anything is changed: torch would take a NaN, an
infinite or a negative rate and make every weight NaN a step later, and a batch of another
shape fails deep inside a convolution with torch's own message. ``rules`` takes one rule string
as one rule, as ``nanoir.quantize``'s ``rules=`` reads it; a string was iterated character by
character ("rule 'f' must look like ...").
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch
from xdsl.dialects.builtin import DYNAMIC_INDEX

from nanoir.errors import ArgumentError
from nanoir.lowering import quantize as qz

__all__ = ["FLOAT32_MAX", "rate_argument", "rules_argument", "training_batch"]


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""The largest rate: the parameters are float32, and torch's step fails converting a larger
one ("value cannot be converted to type float without overflow")."""


def rate_argument(
    where: str,
    name: str,
    value: object,
    *,
    positive: bool = False,
    at_most: float = FLOAT32_MAX,
) -> float:
    """``value`` as a finite real rate ``>= 0`` (``> 0`` if ``positive``; ``<= at_most``),
    else :class:`ArgumentError` naming ``name`` (``where`` is the function, e.g.
    ``nanoir.qat.train``). ``bool`` and strings are refused, NumPy reals are taken."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        shown = repr(value)[:40] if isinstance(value, str | bytes) else type(value).__name__
        raise ArgumentError(f"{where}: {name} must be a real number, got {shown}")
    rate = float(value)
    low = "> 0" if positive else ">= 0"
    if not math.isfinite(rate) or rate < 0 or (positive and rate == 0) or rate > at_most:
        raise ArgumentError(
            f"{where}: {name} must be finite, {low} and <= {at_most:g}, got {rate!r}"
        )
    return rate


def rules_argument(where: str, value: object) -> tuple[qz.QuantRule, ...]:
    """``rules`` as parsed rules: one rule (a string or a ``QuantRule``), or a list or tuple
    of them in order (the first match wins, so an unordered set is refused); None is none.
    Every item's kind is checked before any is parsed. A rule's rate must be finite (the
    grammar takes ``lsq:inf``) and an ``ema`` rate at most 1 (a moving average's weight)."""
    if value is None:
        return ()
    items = (value,) if isinstance(value, str | qz.QuantRule) else value
    if not isinstance(items, list | tuple):
        raise ArgumentError(
            f"{where}: rules must be a rule string or a list or tuple of them "
            f"(e.g. ('fc.weight=4',)), got {type(value).__name__}"
        )
    for i, rule in enumerate(items):  # every item's kind first, then the grammar
        if not isinstance(rule, str | qz.QuantRule):
            raise ArgumentError(
                f"{where}: rules[{i}] must be a rule string (e.g. 'fc.weight=4') or a "
                f"QuantRule, got {type(rule).__name__}"
            )
    rules = []
    for i, rule in enumerate(items):
        parsed = rule if isinstance(rule, qz.QuantRule) else qz.QuantRule.parse(rule)
        if parsed.lr is not None:
            rate_argument(
                where,
                f"rules[{i}]'s rate",
                parsed.lr,
                positive=True,
                at_most=1.0 if parsed.learner == "ema" else FLOAT32_MAX,
            )
        rules.append(parsed)
    return tuple(rules)


def _spelled(shape: Sequence[int | None]) -> str:
    return qz.spelled_shape(tuple(DYNAMIC_INDEX if d is None else d for d in shape))


def _fits(shape: Sequence[int], want: Sequence[int | None]) -> bool:
    """Whether ``shape`` is ``want`` (None: any size)."""
    return len(shape) == len(want) and all(w is None or w == d for d, w in zip(shape, want))


def _tensor(value: object, label: str) -> torch.Tensor:
    """``torch.as_tensor(value)`` (what the module's forward applies), or
    :class:`ArgumentError` naming ``label``: an object array, a ragged list ..."""
    try:
        return torch.as_tensor(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise ArgumentError(
            f"{label} is a {type(value).__name__} torch cannot read as a numeric tensor"
        ) from None


def training_batch(
    batch: object,
    where: str,
    inputs: Sequence[Sequence[int]],
    output: Sequence[int] | None,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``(inputs, target)`` of one training batch as tensors (``torch.as_tensor``, as the
    module and the loss read them: no copy of a tensor or array), checked: a tuple or list of
    the program's inputs and a target; each input a real (not complex), finite tensor of the
    input's shape (``?`` dims free) with at least one row. With ``output`` (the shape of the
    program's one result, for the default cross-entropy loss) the target is class indices in
    ``0..C-1`` (or -100, cross entropy's ignored index) shaped as the output without its
    class dim, or finite class probabilities shaped as the output. ``where`` names the batch."""
    n = len(inputs)
    if not isinstance(batch, tuple | list) or len(batch) != n + 1:
        got = f"a {type(batch).__name__}"
        if isinstance(batch, tuple | list):
            got += f" of {len(batch)} items"
        raise ArgumentError(
            f"{where} must be a tuple (inputs..., target) of {n + 1} items "
            f"({n} input{'s' if n != 1 else ''} and a target), got {got}"
        )
    xs: list[torch.Tensor] = []
    rows = None
    for i, (x, shape) in enumerate(zip(batch[:n], inputs)):
        label = f"{where} input {i}" if n > 1 else f"{where}'s input"
        t = _tensor(x, label)
        if t.dtype.is_complex:
            raise ArgumentError(f"{label} is {t.dtype}; expected real numbers")
        if not _fits(t.shape, [None if d == DYNAMIC_INDEX else d for d in shape]):
            raise ArgumentError(
                f"{label} has shape {_spelled(t.shape)}; the program takes {_spelled(shape)}"
            )
        if t.dim() and t.shape[0] == 0:
            raise ArgumentError(f"{label} has no rows (shape {_spelled(t.shape)})")
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ArgumentError(f"{label} holds NaN or infinite values")
        rows = t.shape[0] if rows is None and t.dim() else rows
        xs.append(t)
    y = _tensor(batch[n], f"{where}'s target")
    if output is None:
        return xs, y
    if y.dtype == torch.bool or y.dtype.is_complex or y.dim() == 0:
        raise ArgumentError(
            f"{where}'s target must be class indices (integers) or class probabilities "
            "(floats) for the default cross-entropy loss, got "
            + ("a 0-d tensor" if y.dim() == 0 else f"{y.dtype}")
        )
    # the batch dim is the inputs' rows; another dynamic dim takes any size (None)
    out = [
        rows if i == 0 and d == DYNAMIC_INDEX else (None if d == DYNAMIC_INDEX else d)
        for i, d in enumerate(output)
    ]
    classes = out[1] if len(out) > 1 else out[0]
    indices = [out[0], *out[2:]] if len(out) > 1 else []
    if not y.is_floating_point():
        if not _fits(y.shape, indices):
            raise ArgumentError(
                f"{where}'s target has shape {_spelled(y.shape)}; class indices for an "
                f"output {_spelled(out)} are shaped {_spelled(indices)}"
            )
        bad = (y < 0) & (y != -100)
        if classes is not None:
            bad |= y >= classes
        if bool(bad.any()):
            span = "0 or more" if classes is None else f"in 0..{classes - 1}"
            raise ArgumentError(
                f"{where}'s target holds class {int(y[bad].reshape(-1)[0])}; classes "
                f"of the output {_spelled(out)} are {span} (-100: ignored)"
            )
    elif not _fits(y.shape, out) or not bool(torch.isfinite(y).all()):
        raise ArgumentError(
            f"{where}'s target (class probabilities) must be finite and shaped as the output "
            f"{_spelled(out)}, got {_spelled(y.shape)}"
        )
    return xs, y
