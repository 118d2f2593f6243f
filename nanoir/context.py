"""A ``Context`` with every dialect a nanoir program may use."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.ir import Dialect

from nanoir.errors import bool_argument


def _builtin() -> Dialect:
    from xdsl.dialects.builtin import Builtin

    return Builtin


def _func() -> Dialect:
    from xdsl.dialects.func import Func

    return Func


def _arith() -> Dialect:
    from xdsl.dialects.arith import Arith

    return Arith


def _test() -> Dialect:
    from xdsl.dialects.test import Test

    return Test


def _nf() -> Dialect:
    # lazy: xDSL loads a dialect when a program first uses it
    from nanoir.dialects.nf import NF

    return NF


def _nq() -> Dialect:
    # lazy: xDSL loads a dialect when a program first uses it
    from nanoir.dialects.nq import NQ

    return NQ


def _nh() -> Dialect:
    # lazy: xDSL loads a dialect when a program first uses it
    from nanoir.dialects.nh import NH

    return NH


NANOIR_DIALECTS: dict[str, Callable[[], Dialect]] = {"nf": _nf, "nq": _nq, "nh": _nh}
"""The dialects nanoir defines, by name (lazily loaded)."""

ALL_DIALECTS: dict[str, Callable[[], Dialect]] = {
    "builtin": _builtin,
    "func": _func,
    "arith": _arith,
    "test": _test,
    **NANOIR_DIALECTS,
}
"""Everything a nanoir tool loads: the nanoir dialects plus builtin, func, arith and test."""


def make_context(*, allow_unregistered: bool = False) -> Context:
    """A context that knows every dialect in :data:`ALL_DIALECTS`."""
    bool_argument("allow_unregistered", allow_unregistered)
    ctx = Context(allow_unregistered=allow_unregistered)
    for name, factory in ALL_DIALECTS.items():
        ctx.register_dialect(name, factory)
    return ctx
