"""The frontend's one exception type (kept free of torch imports so callers can catch it
without importing torch)."""

from __future__ import annotations

from nanoir.errors import Error


class FrontendError(Error):
    """A network the torch frontend cannot import.

    The message names the ATen op, the module path and the source line each problem comes
    from, and, for unsupported ops, lists the ops that are supported.
    """
