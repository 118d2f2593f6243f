"""Resumable QAT: :func:`nanoir.qat.train`'s checkpoint, saved at the end of every epoch.

A checkpoint holds what the next epoch depends on: the module's state (weights, ``lsq``
exponents, ``ema`` scales), the optimizer's and the learning-rate schedule's, the number of
epochs done with their mean losses, and the random number generators' states (torch's, CUDA's
when present, NumPy's global and Python's ``random``), so that a resumed run draws the same
shuffles as the uninterrupted one. It is written atomically (``nanoir.files.write_atomically``:
a temporary file in the same folder, renamed over the old one), by rank 0 only under
``torch.distributed`` (the ranks hold the same state; each rank reads the file back, so under
several machines it must be on a shared file system, and every rank resumes with rank 0's
random number generators).

Files are read with ``torch.load(weights_only=True)`` (no code runs from a foreign file), and
checked against the module, optimizer and schedule before anything is restored: a file that is
not a checkpoint, is one of another model, or holds a value the next epoch would fail on or turn
into NaN (a weight or moment that is not finite, a hyper-parameter the optimizer's own
constructor refuses or that is not finite, a step that is not a count, a schedule of another
shape) is one :class:`QATError` naming the file and the field, and changes nothing: the
restore itself is undone if any part of it fails.
"""

from __future__ import annotations

import copy
import math
import numbers
import os
import random
import stat
from typing import Any

import numpy as np
import torch

from nanoir.files import write_atomically
from nanoir.qat.distributed import is_main
from nanoir.qat.quantizer import QATError

__all__ = ["load_checkpoint", "save_checkpoint"]

FORMAT = "nanoir.qat.checkpoint"
VERSION = 1


def _rng_state() -> dict[str, Any]:
    """The global generators' states in types ``weights_only`` loading accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (name, torch.from_numpy(np.asarray(keys, np.int64)), pos, has_gauss, cached),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    epoch: int,
    losses: list[float],
) -> None:
    """Write the checkpoint after ``epoch`` epochs (rank 0 only; see the module docstring)."""
    if not is_main():
        return
    state = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": epoch,
        "losses": [float(v) for v in losses],
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "optimizer_class": type(optimizer).__qualname__,
        "scheduler": None if schedule is None else schedule.state_dict(),
        "rng": _rng_state(),
    }
    write_atomically(path, lambda f: torch.save(state, f))


def _read(path: str) -> dict[str, Any]:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise QATError(f"nanoir.qat.train: checkpoint {path} is not a regular file")
    except OSError as e:
        raise QATError(f"nanoir.qat.train: cannot read checkpoint {path}: {e.strerror}") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many kinds for a corrupt or foreign file
        raise QATError(
            f"nanoir.qat.train: {path} is not a nanoir.qat checkpoint (torch.load with "
            "weights_only=True cannot read it)"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise QATError(f"nanoir.qat.train: {path} is not a nanoir.qat checkpoint")
    if state.get("version") != VERSION:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} has version {state.get('version')!r}; "
            f"this nanoir reads version {VERSION}"
        )
    return state


def _check_model(path: str, module: torch.nn.Module, saved: object) -> None:
    """Refuse a state dict of another model before any tensor is copied (``load_state_dict``
    copies the tensors that fit before it reports the ones that do not)."""
    if not isinstance(saved, dict):
        raise QATError(f"nanoir.qat.train: checkpoint {path} holds no model state")
    own = module.state_dict()
    missing, extra = sorted(set(own) - set(saved)), sorted(set(saved) - set(own))
    if missing or extra:
        what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which this module lacks"
        raise QATError(f"nanoir.qat.train: checkpoint {path} is of another model: it {what}")
    for key, value in own.items():
        got = saved[key]
        if not isinstance(got, torch.Tensor) or (got.shape, got.dtype) != (
            value.shape,
            value.dtype,
        ):
            shape = list(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            here = list(value.shape)
            if shape == here:  # the dtype differs: a float copied into it would be cast
                shape, here = f"{shape} {got.dtype}", f"{here} {value.dtype}"
            raise QATError(
                f"nanoir.qat.train: checkpoint {path} is of another model: {key} is "
                f"{shape} there, {here} here"
            )
        if got.is_floating_point() and bool(torch.isnan(got).any()):  # no code: fails mid-epoch
            raise QATError(f"nanoir.qat.train: checkpoint {path} is damaged: {key} holds NaN")
        learned = key.startswith(("params.", "quantizers."))  # (a constant may hold -inf)
        if learned and got.is_floating_point() and not bool(torch.isfinite(got).all()):
            raise QATError(f"nanoir.qat.train: checkpoint {path} is damaged: {key} holds inf")
        if key.endswith(".scale") and key.startswith("quantizers.") and bool((got <= 0).any()):
            raise QATError(  # an ema scale: its exponent is floor(log2 scale)
                f"nanoir.qat.train: checkpoint {path} is damaged: {key} holds a scale <= 0"
            )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_field(path: str, where: str, got: object, own: object) -> None:
    """A saved hyper-parameter ``got`` of the kind of this run's ``own``, and finite: a NaN
    or infinite rate passes ``load_state_dict`` and the optimizer's step, and turns every
    weight into NaN (the next forward fails on it)."""

    def refuse(what: str) -> QATError:
        shown = repr(got) if not isinstance(got, torch.Tensor) else f"a tensor {got.tolist()}"
        return QATError(
            f"nanoir.qat.train: checkpoint {path} is damaged: {where} is {shown}; {what}"
        )

    if isinstance(own, bool) or own is None:  # flags (None: the optimizer decides)
        if not (isinstance(got, bool) or got is None):
            raise refuse("expected True, False or None")
    elif _is_number(own) or isinstance(own, torch.Tensor):
        if isinstance(got, torch.Tensor) and got.numel() == 1 and not got.dtype.is_complex:
            got_value = float(got)
        elif _is_number(got):
            got_value = float(got)  # type: ignore[arg-type]
        else:
            raise refuse("expected a number")
        if not math.isfinite(got_value):
            raise refuse("expected a finite number")
    elif isinstance(own, tuple | list):
        if not isinstance(got, tuple | list) or len(got) != len(own):
            raise refuse(f"expected {len(own)} values")
        for i, (g, o) in enumerate(zip(got, own)):
            _check_field(path, f"{where}[{i}]", g, o)
    elif type(got) is not type(own):
        raise refuse(f"expected a {type(own).__name__}")


def _constructor_refusal(optimizer: torch.optim.Optimizer, **hyper: Any) -> str | None:
    """What ``optimizer``'s class says about ``hyper`` over its defaults (None: accepted)."""
    try:
        type(optimizer)([torch.zeros(1, requires_grad=True)], **{**optimizer.defaults, **hyper})
    except Exception as e:  # the optimizer's own checks: ValueError, RuntimeError ...
        return str(e) or type(e).__name__
    return None


def _check_hyper_parameters(path: str, optimizer: torch.optim.Optimizer, saved: object) -> None:
    """Each saved parameter group's hyper-parameters: the keys of this run's groups, each of
    its kind and finite, and accepted by the optimizer's own constructor (the checks it makes
    of its arguments: Adam's ``0 <= lr``, ``0 <= beta < 1``, ...), which ``load_state_dict``
    skips; and every number in the per-parameter state finite, steps counts. The field is
    named in the error."""
    name = type(optimizer).__name__
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list):
        raise QATError(f"nanoir.qat.train: checkpoint {path} holds no optimizer state")
    groups, state = saved["param_groups"], saved.get("state")
    if len(groups) != len(optimizer.param_groups) or not isinstance(state, dict):
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} holds another optimizer's state "
            f"({len(groups)} parameter groups; this run's {name} has "
            f"{len(optimizer.param_groups)})"
        )
    checked = _constructor_refusal(optimizer) is None  # a custom constructor: types only
    for i, (group, own) in enumerate(zip(groups, optimizer.param_groups)):
        keys = set(group) - {"params"} if isinstance(group, dict) else None
        if keys != set(own) - {"params"}:
            raise QATError(
                f"nanoir.qat.train: checkpoint {path} holds another optimizer's state: "
                f"param_groups[{i}] has other hyper-parameters than this run's {name}"
            )
        assert isinstance(group, dict)
        for key in sorted(keys):
            where = f"optimizer param_groups[{i}].{key}"
            _check_field(path, where, group[key], own[key])
            refusal = (
                checked
                and key in optimizer.defaults
                and _constructor_refusal(optimizer, **{key: group[key]})
            )
            if refusal:
                raise QATError(
                    f"nanoir.qat.train: checkpoint {path} is damaged: {where} = "
                    f"{group[key]!r} is refused by {name}: {refusal}"
                )
        hyper = {k: group[k] for k in keys if k in optimizer.defaults}
        refusal = checked and _constructor_refusal(optimizer, **hyper)
        if refusal:
            raise QATError(
                f"nanoir.qat.train: checkpoint {path} is damaged: optimizer "
                f"param_groups[{i}] is refused by {name}: {refusal}"
            )
    for index, entry in state.items():
        if not isinstance(entry, dict):
            raise QATError(
                f"nanoir.qat.train: checkpoint {path} is damaged: optimizer state[{index}] "
                "is not a mapping"
            )
        for key, value in entry.items():
            where = f"optimizer state[{index}].{key}"
            number = isinstance(value, torch.Tensor) and value.is_floating_point()
            if (number or _is_number(value)) and not bool(
                torch.isfinite(torch.as_tensor(value, dtype=torch.float64)).all()
            ):
                raise QATError(
                    f"nanoir.qat.train: checkpoint {path} is damaged: {where} is not finite"
                )
            if key == "step" and (number or _is_number(value)):
                step = torch.as_tensor(value, dtype=torch.float64)
                if step.numel() != 1 or float(step) < 0 or not float(step).is_integer():
                    raise QATError(
                        f"nanoir.qat.train: checkpoint {path} is damaged: {where} is "
                        f"{step.tolist()}; expected a count of steps (an integer >= 0)"
                    )


def _check_optimizer(path: str, optimizer: torch.optim.Optimizer, saved: object) -> None:
    """Load ``saved`` into a copy of ``optimizer`` over zero tensors and take one step: its
    ``load_state_dict`` takes moments of another shape or type, a text learning rate, a
    missing moment, and the step that reads them fails mid-epoch, after the module and
    generators were restored. An optimizer that cannot be copied so is not checked."""
    groups = [
        {**g, "params": [torch.zeros_like(p, requires_grad=True) for p in g["params"]]}
        for g in optimizer.param_groups
    ]
    for g in groups:
        for p in g["params"]:
            p.grad = torch.zeros_like(p)
    try:
        probe = type(optimizer)(groups, **optimizer.defaults)
    except Exception:  # a custom optimizer with other constructor arguments
        return
    try:
        # a copy: load_state_dict keeps the file's tensors, which the step updates in place
        probe.load_state_dict(copy.deepcopy(saved))  # type: ignore[arg-type]
        probe.step()
    except Exception as e:  # ValueError/KeyError/TypeError/RuntimeError: a damaged state
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} holds another optimizer's state: {e}"
        ) from None
    for i, g in enumerate(probe.param_groups):  # e.g. a negative second moment: sqrt is NaN
        for j, p in enumerate(g["params"]):
            if not bool(torch.isfinite(p).all()):
                raise QATError(
                    f"nanoir.qat.train: checkpoint {path} is damaged: the optimizer's first "
                    f"step from its state gives non-finite values (param_groups[{i}], "
                    f"parameter {j})"
                )


def _same_kind(own: dict[str, Any], saved: object) -> bool:
    """Whether ``saved`` has ``own``'s keys and value types: a schedule's ``load_state_dict``
    takes any mapping, and a damaged one fails only later, mid-training."""
    return (
        isinstance(saved, dict)
        and set(saved) == set(own)
        and all(type(saved[k]) is type(v) for k, v in own.items())
    )


def _check_schedule(path: str, own: dict[str, Any], saved: object) -> None:
    """The schedule's state: this run's keys and types, lists of this run's length, every
    number finite, rates >= 0 and a positive period (``T_max``: a zero divides by zero in
    the first step's rate)."""
    if not _same_kind(own, saved):
        raise QATError(f"nanoir.qat.train: checkpoint {path} has a damaged schedule state")
    assert isinstance(saved, dict)
    for key, value in own.items():
        got = saved[key]
        where = f"scheduler {key}"
        if isinstance(value, list) and len(got) != len(value):
            raise QATError(
                f"nanoir.qat.train: checkpoint {path} is damaged: {where} has {len(got)} "
                f"values; this run has {len(value)} parameter groups"
            )
        values = got if isinstance(got, list) else [got]
        for v in values:
            if _is_number(v) or isinstance(v, torch.Tensor):
                _check_field(path, where, v, 0.0)
                if float(v) < 0 and key not in ("last_epoch",):
                    raise QATError(
                        f"nanoir.qat.train: checkpoint {path} is damaged: {where} is {v!r}; "
                        "expected >= 0"
                    )
    if "T_max" in saved and saved["T_max"] <= 0:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} is damaged: scheduler T_max is "
            f"{saved['T_max']!r}; expected > 0"
        )
    if saved.get("last_epoch", 0) < -1:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} is damaged: scheduler last_epoch is "
            f"{saved['last_epoch']!r}; expected >= -1"
        )


def load_checkpoint(
    path: str,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
    epochs: int,
) -> tuple[int, list[float]]:
    """Restore the checkpoint ``path`` into ``module``, ``optimizer``, ``schedule`` and the
    global generators; returns the epochs done and their losses. Everything is checked first:
    a refused file changes nothing."""
    state = _read(path)
    epoch, losses, rng = state.get("epoch"), state.get("losses"), state.get("rng")
    bad = (
        not isinstance(epoch, int)
        or isinstance(epoch, bool)
        or epoch < 0
        or not isinstance(losses, list)
        or len(losses) != epoch
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in losses)
        or not isinstance(rng, dict)
        or not {"torch", "numpy", "python"} <= set(rng)
    )
    if bad:
        raise QATError(f"nanoir.qat.train: checkpoint {path} is damaged (epoch, losses, rng)")
    assert isinstance(epoch, int) and isinstance(losses, list) and isinstance(rng, dict)
    if epoch > epochs:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} has {epoch} epochs done, more than "
            f"epochs={epochs} (epochs is the total, resumed runs included)"
        )
    _check_model(path, module, state.get("model"))
    if (state.get("scheduler") is None) != (schedule is None):
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} was saved with cosine="
            f"{state.get('scheduler') is not None}; resume with the same options"
        )
    if schedule is not None:
        _check_schedule(path, schedule.state_dict(), state["scheduler"])
    kind = state.get("optimizer_class")
    if kind != type(optimizer).__qualname__:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} holds another optimizer's state "
            f"({kind}; this run's is {type(optimizer).__qualname__})"
        )
    _check_hyper_parameters(path, optimizer, state["optimizer"])
    _check_optimizer(path, optimizer, state["optimizer"])
    _restore(path, state, module, optimizer, schedule)
    return epoch, [float(v) for v in losses]


def _restore(
    path: str,
    state: dict[str, Any],
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: Any,
) -> None:
    """Load the checked ``state`` into the module, optimizer, schedule and generators, all or
    nothing: if any part fails, the parts already loaded are put back as they were."""
    before = (
        copy.deepcopy(optimizer.state_dict()),
        None if schedule is None else copy.deepcopy(schedule.state_dict()),
        {k: v.detach().clone() for k, v in module.state_dict().items()},
        _rng_state(),
    )
    try:
        optimizer.load_state_dict(state["optimizer"])
        _set_rng_state(state["rng"])
        if schedule is not None:
            schedule.load_state_dict(state["scheduler"])
        module.load_state_dict(state["model"])
    except Exception as e:  # ValueError/KeyError/TypeError/RuntimeError: a damaged part
        optimizer.load_state_dict(before[0])
        if schedule is not None:
            schedule.load_state_dict(before[1])
        module.load_state_dict(before[2])
        _set_rng_state(before[3])
        raise QATError(f"nanoir.qat.train: checkpoint {path} cannot be restored: {e}") from None
