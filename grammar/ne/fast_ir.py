"""Verification shortcuts for the `.ne` importers (node-heavy programs, issue 15).

The importers verify every op as they build it, so that a bad node is reported at the node.
In a program of 200k nodes most ops repeat a handful of signatures (a Q of the same width
on the same shape, a 1x1 conv of the same channels, ...), and xDSL's generic verifier costs
100-300 µs per op. `verify_op` therefore remembers the signatures that verified:

    (op class, operand types, result types, properties, attributes)

An op without regions or successors verifies or fails by exactly these (xDSL's checks for an
op outside a block read only them, and no verifier of nf, nq or nh reads an operand's
defining op or uses), so an op whose signature verified before is not verified again. A
failure is never remembered: it raises as it always did.

`verify_shell` verifies what the per-op checks leave out, once: the module, the function
and its return (their own verifiers, not the ops inside again).
"""

from __future__ import annotations

import threading

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

__all__ = ["verify_op", "verify_shell"]

# Signatures that verified; cleared when it grows past this (a program has few distinct ones).
_MAX_SIGNATURES = 50_000
_verified: set[object] = set()
_by_identity: dict[object, object] = {}
_lock = threading.Lock()


def verify_op(op: Operation) -> None:
    """`op.verify()`, skipped when an op of the same signature verified before."""
    if op.regions or op.successors or op.parent is not None:
        op.verify()
        return
    operand_types = tuple(operand.type for operand in op.operands)
    result_types = tuple(result.type for result in op.results)
    properties = tuple(op.properties.items())
    attributes = tuple(op.attributes.items())
    # First by identity (hashing a type walks all its parameters; importers share the
    # attribute objects they make): the entry keeps the objects alive, so no other object
    # can take their ids while it exists.
    identity = (
        type(op),
        tuple(map(id, operand_types)),
        tuple(map(id, result_types)),
        tuple((k, id(v)) for k, v in properties),
        tuple((k, id(v)) for k, v in attributes),
    )
    if identity in _by_identity:
        return
    key = (type(op), operand_types, result_types, properties, attributes)
    try:
        known = key in _verified
    except TypeError:  # an attribute that cannot be hashed: no shortcut
        op.verify()
        return
    if not known:
        op.verify()
    with _lock:
        if len(_verified) >= _MAX_SIGNATURES or len(_by_identity) >= _MAX_SIGNATURES:
            _verified.clear()
            _by_identity.clear()
        _verified.add(key)
        _by_identity[identity] = key  # keeps the attributes alive


def verify_shell(module: ModuleOp) -> None:
    """Verify the module, its functions and their terminators, not the other ops (which
    were verified as they were built)."""
    module.verify(verify_nested_ops=False)
    for func in module.ops:
        for region in func.regions:
            for block in region.blocks:
                last = block.last_op
                if last is not None:
                    last.verify(verify_nested_ops=False)
        func.verify(verify_nested_ops=False)
