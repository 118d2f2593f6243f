"""The torch frontend: ``torch.nn.Module`` → nf, through ``torch.export``.

Importing this package does not import torch; :func:`from_torch` does, on first call (it needs
the ``torch`` extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nanoir.frontend.errors import FrontendError

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

__all__ = ["FrontendError", "from_torch", "supported_aten_ops"]


def from_torch(model: Any, example_inputs: Any, *, dynamic_batch: bool = True) -> ModuleOp:
    """Import a torch network as an nf program; see :func:`nanoir.frontend.torch_import.from_torch`."""
    # lazy: torch (the ``torch`` extra) loads on first use
    from nanoir.frontend.torch_import import from_torch as _from_torch

    return _from_torch(model, example_inputs, dynamic_batch=dynamic_batch)


def supported_aten_ops() -> list[str]:
    """The ATen ops (``aten.<name>.<overload>``) the frontend converts, sorted."""
    # lazy: torch (the ``torch`` extra) loads on first use
    from nanoir.frontend.torch_import import supported_aten_ops as _supported

    return _supported()
