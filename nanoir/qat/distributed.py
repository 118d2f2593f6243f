"""QAT across processes (``torch.distributed``): one set of exponents on every rank.

Under an initialised process group with more than one rank, every statistic an exponent is
chosen from is reduced over the ranks before it is used, so all ranks hold the same exponents
and :func:`nanoir.qat.convert` gives the same program everywhere:

- the ``ema`` learner's absmax, each training forward: all-reduce max (``Quantizer``);
- calibration (:func:`nanoir.qat.calibrate`): the absmax and the 1-bit mean ``|x|`` sums
  (max, sum), the ``mse`` calibrator's summed squared error per candidate exponent (sum: the
  candidates are chosen from the reduced absmax, so they are the same on every rank), and
  bias correction's summed error and count (sum). The calibration code in ``lowering/`` knows
  nothing of torch: it takes :func:`reducer`'s NumPy callable as its ``reduce`` hook;
- ``lsq`` exponents are parameters: ``DistributedDataParallel`` averages their gradients as
  it does the weights'. :func:`nanoir.qat.train` wraps a bare module in it (:func:`wrap`).

With one batch per rank, sums are exact in the order a single process would add them, so a
2-rank calibration equals one process calibrating on both ranks' batches bit for bit (more
batches per rank add in another order: the last bits of an mse error or a corrected bias may
differ, never across ranks). Without a process group (or with one rank) nothing is reduced.
The reductions are collectives: every rank must run the same training-mode forwards and call
``calibrate`` together (a forward in eval mode reduces nothing).

Imports torch (the ``torch`` extra).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

__all__ = ["active", "all_reduce_max", "is_main", "reducer", "unwrap", "wrap"]

_OPS = {"max": "MAX", "sum": "SUM"}


def active() -> bool:
    """Whether a process group with more than one rank is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def is_main() -> bool:
    """Rank 0, or no process group: the process that writes files."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


@torch.no_grad()
def all_reduce_max(a: torch.Tensor) -> torch.Tensor:
    """``a`` reduced by elementwise max over the ranks (``a`` itself without a group)."""
    if not active():
        return a
    out = a.detach().clone().contiguous()
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out


def _reduce_numpy(a: Any, op: str) -> Any:
    """``a`` (a NumPy array or a Python number) reduced by ``op`` (``max`` or ``sum``) over
    the ranks, as float64 (int64 for integers, which sum exactly), in ``a``'s type."""
    arr = np.asarray(a)
    t = torch.from_numpy(arr.astype(np.int64 if arr.dtype.kind in "biu" else np.float64))
    dist.all_reduce(t, op=getattr(dist.ReduceOp, _OPS[op]))
    out = t.numpy().astype(arr.dtype, copy=False)
    return out if isinstance(a, np.ndarray) else out.item()


def reducer() -> Callable[[Any, str], Any] | None:
    """The ``reduce`` hook of ``lowering``'s calibration under a process group (``None``
    without one): ``reduce(array_or_number, "max" | "sum")``, the same on every rank."""
    return _reduce_numpy if active() else None


def unwrap(model: Any) -> Any:
    """The module inside a ``DistributedDataParallel`` (or ``DataParallel``) wrapper."""
    while isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        model = model.module
    return model


def wrap(model: nn.Module) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` under a process group with more than one
    rank (already wrapped, or no group: ``model`` itself). Wrapping copies rank 0's
    parameters and buffers (weights, ``ema`` scales) to every rank."""
    if not active() or isinstance(model, nn.parallel.DistributedDataParallel):
        return model
    return nn.parallel.DistributedDataParallel(model)
