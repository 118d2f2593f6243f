"""The one base of every error nanoir raises for bad input or an impossible request.

``except nanoir.Error`` catches them all. Each concrete error also keeps its built-in base
(``ValueError``, ``RuntimeError``, xDSL's ``DiagnosticException`` ...), so code written against
those still works. This module imports nothing, so every layer may import it.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of nanoir's own errors: the message says what and where."""
