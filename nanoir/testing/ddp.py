"""Run a function on several CPU processes under a ``gloo`` process group (the ``torch`` extra).

``run_ranks(worker, 2, *args)`` calls ``worker(rank, world_size, *args)`` in each of 2
processes started with ``torch.multiprocessing`` spawn, with ``torch.distributed`` initialised
(gloo, a file rendezvous in a temporary folder) and one thread each. The worker is found again
in the child by its file and name, not by its module's import name: pytest imports test files
under names a fresh process cannot import (``--import-mode=importlib``). A child that fails
fails the call with its traceback; one that hangs (a collective some rank never reaches) is
killed after ``timeout`` seconds.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_ranks"]

T = TypeVar("T")


def _trampoline(
    rank: int, path: str, name: str, world: int, rendezvous: str, args: tuple[Any, ...]
) -> None:
    import torch  # lazy: only the children and the spawning test need torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location(f"_nanoir_rank_{rank}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        getattr(module, name)(rank, world, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(
    worker: Callable[..., None],
    world: int,
    *args: Any,
    meanwhile: Callable[[], T] | None = None,
    timeout: float = 240.0,
) -> T | None:
    """``worker(rank, world, *args)`` on ``world`` spawned processes (see the module
    docstring); ``worker`` is a module-level function, ``args`` picklable. ``meanwhile()``
    runs in this process while they do; its result is returned."""
    import torch.multiprocessing as mp  # lazy: only the spawning test needs torch

    path = os.path.abspath(inspect.getfile(worker))
    with tempfile.TemporaryDirectory(prefix="nanoir-ranks-") as folder:
        rendezvous = os.path.join(folder, "rendezvous")
        context = mp.spawn(
            _trampoline,
            args=(path, worker.__name__, world, rendezvous, args),
            nprocs=world,
            join=False,
        )
        try:
            result = None if meanwhile is None else meanwhile()
            deadline = time.monotonic() + timeout
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"run_ranks: {worker.__name__} did not end in {timeout} s")
        finally:
            for process in context.processes:  # the processes this call started
                if process.is_alive():
                    process.kill()
    return result
