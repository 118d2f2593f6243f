"""PyTorch's OpInfo samples through the torch frontend: each sample imported as a program of
its own, run, and compared with eager torch (issue 32 §3's test on the Core ATen ops). Needs the ``torch`` extra.

``torch.testing._internal.common_methods_invocations.op_db`` is torch's own catalogue of ops
with sample inputs (an internal API, pinned with torch; it needs the ``expecttest`` package).
For one OpInfo and one float32 sample, :func:`check_sample` builds a module whose inputs are
the sample's float tensors (other tensors, such as indices and masks, are constants of the
module), imports it with ``nanoir.from_torch`` (static shapes), runs the nf program and
compares every output with torch's, then, when asked, quantizes it on the sample itself,
lowers it to nh and checks nq == nh bit for bit. The outcome is one of :data:`OUTCOMES`:

- ``correct``: imported and equal to torch (within ``1e-4`` relative, ``1e-5`` of the largest
  magnitude; NaN where torch has NaN);
- ``refused``: a ``nanoir.Error`` naming the op and why (the frontend's, or torch.export's
  own failure, counted apart as ``export``);
- ``wrong``: imported, but a different number or shape;
- ``crashed``: any other exception (a bug).

Lowering (``lower=True``) adds ``hw_equal`` / ``hw_refused`` / ``hw_wrong`` / ``hw_crashed``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import nanoir

__all__ = [
    "OUTCOMES",
    "Outcome",
    "Tally",
    "check_sample",
    "float32_samples",
    "load_op_db",
]

OUTCOMES = ("correct", "refused", "export", "wrong", "crashed")
HW_OUTCOMES = ("hw_equal", "hw_refused", "hw_wrong", "hw_crashed")


def load_op_db() -> list[Any]:
    """torch's OpInfo list (raises ImportError when its test dependencies are missing)."""
    # lazy: the catalogue imports torch's test harness (expecttest), tens of seconds
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


@dataclass
class Outcome:
    """What happened to one sample (``hw``: its lowering, when asked)."""

    kind: str
    detail: str = ""
    hw: str | None = None
    hw_detail: str = ""


@dataclass
class Tally:
    """Outcomes per op: counts of each kind, and the first detail of each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, outcome: Outcome) -> None:
        for kind, detail in ((outcome.kind, outcome.detail), (outcome.hw, outcome.hw_detail)):
            if kind is None:
                continue
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.examples.setdefault(kind, detail)

    def __getitem__(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    @property
    def run(self) -> int:
        return sum(self[k] for k in OUTCOMES)


def float32_samples(opinfo: Any, limit: int) -> Iterator[Any]:
    """Up to ``limit`` of ``opinfo``'s float32 CPU samples (none when it has no float32)."""
    if torch.float32 not in opinfo.supported_dtypes("cpu"):
        return
    try:
        samples = opinfo.sample_inputs("cpu", torch.float32, requires_grad=False)
    except Exception:  # (a sample generator of torch's own that fails: no samples)
        return
    for i, sample in enumerate(samples):
        if i >= limit:
            return
        yield sample


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point and not t.is_complex()


class _Probe(torch.nn.Module):
    """``op(input, *args, **kwargs)`` with the sample's float tensors as ``forward``'s inputs
    (in order of appearance) and everything else as it is in the sample."""

    def __init__(self, op: Any, structure: tuple[Any, tuple[Any, ...], dict[str, Any]]):
        super().__init__()
        self.op = op
        self.structure = structure

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)

        def fill(v: Any) -> Any:
            if isinstance(v, _Slot):
                return next(it)
            if isinstance(v, (list, tuple)):
                return type(v)(fill(u) for u in v)
            return v

        first, args, kwargs = self.structure
        return self.op(fill(first), *fill(args), **{k: fill(v) for k, v in kwargs.items()})


class _Slot:
    """Where one of ``forward``'s inputs goes."""


def _split(sample: Any) -> tuple[tuple[Any, tuple[Any, ...], dict[str, Any]], list[torch.Tensor]]:
    inputs: list[torch.Tensor] = []

    def cut(v: Any) -> Any:
        if _is_float(v):
            inputs.append(v.detach().clone())
            return _Slot()
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        if isinstance(v, (list, tuple)):
            return type(v)(cut(u) for u in v)
        return v

    structure = (
        cut(sample.input),
        cut(tuple(sample.args)),
        {k: cut(v) for k, v in sample.kwargs.items()},
    )
    return structure, inputs


def _outputs(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _outputs(v)]
    return []


def _compare(got: list[Any], want: list[torch.Tensor]) -> str | None:
    """Why ``got`` (nanoir's outputs) differs from ``want`` (torch's), or None."""
    if len(got) != len(want):
        return f"{len(got)} outputs, torch has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        w64 = w.detach().to(torch.float64).numpy() if not w.is_complex() else None
        if w64 is None:
            return f"output {i} is complex"
        g64 = np.asarray(g, np.float64)
        if g64.shape != w64.shape:
            return f"output {i} has shape {g64.shape}, torch's {w64.shape}"
        if not w64.size:
            continue
        if w.dtype.is_floating_point:
            finite = np.isfinite(w64)
            scale = float(np.abs(w64[finite]).max(initial=1.0))
            ok = np.isclose(g64, w64, rtol=1e-4, atol=1e-5 * scale, equal_nan=True)
        else:
            ok = g64 == w64
        if not ok.all():
            at = tuple(int(v) for v in np.argwhere(~ok)[0])
            return f"output {i} at {at}: {g64[at]!r}, torch {w64[at]!r}"
    return None


def _short(e: BaseException) -> str:
    """The exception's first lines (the op it names, and why), on one line."""
    lines = [line.strip() for line in f"{type(e).__name__}: {e}".strip().splitlines()]
    keep = [lines[0]] + [line for line in lines[1:] if line.startswith(("- aten", "reason:"))]
    return " ".join(keep)[:400]


def check_sample(opinfo: Any, sample: Any, *, lower: bool = False) -> Outcome:
    """One sample: import, run, compare with torch; then, with ``lower``, quantize, lower to
    nh and compare nq with nh."""
    structure, inputs = _split(sample)
    probe = _Probe(opinfo.op, structure).eval()
    with torch.no_grad():
        try:
            expected = _outputs(probe(*inputs))
        except Exception as e:  # torch itself refuses the sample: nothing to compare
            return Outcome("export", f"eager torch: {_short(e)}")
    if not inputs:
        return Outcome("export", "the sample has no float tensor to give as an input")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            module = nanoir.from_torch(probe, tuple(inputs), dynamic_batch=False)
        except nanoir.Error as e:
            kind = "export" if "torch.export could not" in str(e) else "refused"
            return Outcome(kind, _short(e))
        except Exception as e:
            return Outcome("crashed", f"import: {_short(e)}")
        arrays = [t.numpy() for t in inputs]
        try:
            got = nanoir.run(module, *arrays)
        except Exception as e:
            return Outcome("crashed", f"run: {_short(e)}")
        why = _compare(got, expected)
        if why is not None:
            return Outcome("wrong", why)
        if not lower:
            return Outcome("correct")
        return _lowered(module, arrays)


def _lowered(module: Any, arrays: list[np.ndarray]) -> Outcome:
    try:
        nanoir.quantize(module, [tuple(arrays)], progress=False)
        nq = nanoir.run(module, *arrays)
        hw = nanoir.lower_to_hw(module.clone())
        nh = nanoir.run(hw, *arrays)
    except nanoir.Error as e:
        return Outcome("correct", hw="hw_refused", hw_detail=_short(e))
    except Exception as e:
        return Outcome("correct", hw="hw_crashed", hw_detail=_short(e))
    for i, (a, b) in enumerate(zip(nq, nh)):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a64.shape != b64.shape or not np.array_equal(a64, b64, equal_nan=True):
            return Outcome("correct", hw="hw_wrong", hw_detail=f"output {i}: nq != nh")
    return Outcome("correct", hw="hw_equal")


def opinfos_of(op_db: Iterable[Any], names: Iterable[str]) -> list[Any]:
    """The OpInfos whose name (or aten name) is one of ``names``, in op_db's order."""
    wanted = set(names)
    return [o for o in op_db if o.name in wanted or f"{o.name}.{o.variant_test_name}" in wanted]
