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
checked against the module and optimizer before anything is restored: a file that is not a
checkpoint, or is one of another model, is one :class:`QATError` naming it.
"""

from __future__ import annotations

import copy
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


def _same_kind(own: dict[str, Any], saved: object) -> bool:
    """Whether ``saved`` has ``own``'s keys and value types: a schedule's ``load_state_dict``
    takes any mapping, and a damaged one fails only later, mid-training."""
    return (
        isinstance(saved, dict)
        and set(saved) == set(own)
        and all(type(saved[k]) is type(v) for k, v in own.items())
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
    if schedule is not None and not _same_kind(schedule.state_dict(), state["scheduler"]):
        raise QATError(f"nanoir.qat.train: checkpoint {path} has a damaged schedule state")
    kind = state.get("optimizer_class")
    if kind != type(optimizer).__qualname__:
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} holds another optimizer's state "
            f"({kind}; this run's is {type(optimizer).__qualname__})"
        )
    _check_optimizer(path, optimizer, state["optimizer"])
    before = optimizer.state_dict()
    try:
        optimizer.load_state_dict(state["optimizer"])
    except Exception as e:  # ValueError/KeyError/TypeError: another optimizer's state
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} holds another optimizer's state: {e}"
        ) from None
    previous = _rng_state()
    try:
        _set_rng_state(rng)
    except Exception as e:
        optimizer.load_state_dict(before)
        _set_rng_state(previous)
        raise QATError(
            f"nanoir.qat.train: checkpoint {path} has a damaged rng state: {e}"
        ) from None
    if schedule is not None:
        schedule.load_state_dict(state["scheduler"])
    module.load_state_dict(state["model"])
    return epoch, [float(v) for v in losses]
