"""Operand widths of products of two runtime values, chosen so that they fit i32.

``nf.matmul`` of two runtime values (attention's ``q @ k^T`` and ``p @ v``) sums ``inner``
products of two activation codes into i32 (``nh.matmul``); ``nf.mul`` of two runtime values (a
gated product, ``gates``) is one such product (``nh.mul``). lower-to-hw refuses either when
``inner * max|a| * max|b|`` passes ``ACC_LIMIT``. A conv or linear has rules that coarsen its
input or weight grid (``join_rules``); here the operands are activations, whose codes span
their whole width whatever their exponent, so the rule is on bits: under ``act_bits=16`` (or
with a 16-bit gated product) two operands pass i32 from a matmul's second term on, a product
of two unsigned 16-bit codes at once, and two 8-bit operands once ``inner`` passes 2**17.
:func:`narrow_operands` gives the wider operand the next narrower width (``ALLOWED_BITS``:
what NanoEngine holds; an activation, or a constant such as an embedding's table that both
operands read), one step at a time, until the bound fits; it runs before calibration,
which then picks the coarser step that keeps the range. Bits a rule names are the user's:
when those alone cannot fit, quantize refuses, naming the op. A bicubic upsampling's sum
grows its input's codes by 9 bits per doubled dim (``nh.upsample_bicubic``): a 16-bit input
doubled along two dims needs 34, and its input is narrowed the same way, or refused the same
way where a rule names its bits (:func:`narrow_grown_inputs`).

A PReLU is a product with a constant: ``nh.prelu`` multiplies the negative side by the slope's
codes moved to the finest slope exponent ``shift`` and shifts the positive side left by
``shift``, so ``max|x| * max(2**shift, max|codes << ...|)`` must fit i32. A slope is a named
constant, quantized at ``act_bits``: at 16 bits a slope of 0.3 takes exponent 16, and every
PReLU passed i32. :func:`cap_slopes` caps the slope's exponents (after they are measured) at
the finest that fits: a slope below ``2**-shift`` then rounds as its grid says, a loss below
the input's own step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array
from nanoir.dialects.traits import Contraction, Weighted, grid_sources
from nanoir.lowering.quantize.rules import ALLOWED_BITS, QuantConfig, QuantizeError
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.accumulator import ACC_LIMIT
from nanoir.runtime.numerics.bicubic import GROWTH_BITS
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue

__all__ = ["cap_slopes", "narrow_grown_inputs", "narrow_operands"]


class Width(Protocol):
    """What this module reads and changes of a ``targets.Target`` (which imports it)."""

    value: SSAValue
    kind: str
    name: str
    rule_name: str
    bits: int
    signed: bool
    origin: str
    exps: np.ndarray | None
    rounding: quant.RoundingMode | None


def code_bound(t: Width) -> int:
    """The largest ``|code|`` of ``t``'s grid, as lower-to-hw bounds it (``HwValue.max_abs``):
    1 at 1 bit, ``2**b`` for unsigned ``b``-bit codes, else ``2**(b-1)``."""
    if t.bits == 1:
        return 1
    return 2 ** (t.bits - 1) if t.signed else 2**t.bits


def _terms(op: Operation) -> int | None:
    """How many products of its two operands' codes ``op`` sums (None: not such an op)."""
    if isinstance(op, nf.MulOp):
        return 1
    if op.has_trait(Contraction) and not op.has_trait(Weighted):
        return nf.tensor_shape(op.operands[0])[-1]
    return None


def _narrower(bits: int) -> int | None:
    below = [b for b in ALLOWED_BITS if 2 <= b < bits]
    return max(below) if below else None


def _label(op: Operation) -> str:
    """``%name`` of the op's result, or the op's name when it has none."""
    name = op.results[0].name_hint
    return f"%{name}" if name else op.name


def _widest(side: Sequence[Width]) -> int:
    return max(code_bound(t) for t in side)


def _narrow_until_fits(
    op: Operation,
    sides: list[list[Width]],
    fits: Callable[[], bool],
    bound: Callable[[], str],
    config: QuantConfig,
) -> None:
    """Give the widest targets of the widest side of ``op`` the next narrower width (origin
    ``acc:%op``), one step at a time, until ``fits()``; where no side can be narrower (every
    widest target's bits are a rule's, or at 2 bits), a ``QuantizeError`` naming the op,
    what passes i32 (``bound()``) and each operand with its bits and whether a rule named
    them. Shared by every op whose integer form grows its operands' codes."""
    while not fits():
        for side in sorted(sides, key=_widest, reverse=True):
            top = [t for t in side if code_bound(t) == _widest(side)]
            free = [t for t in top if _narrowable(t, config)]
            if free and len(free) == len(top):
                for t in free:
                    t.bits = _narrower(t.bits)  # type: ignore[assignment]
                    t.origin = f"acc:{_label(op)}"
                break
        else:
            named = {id(t): t for side in sides for t in side}.values()  # (once each)
            kept = ", ".join(
                f"{t.name} ({t.bits} bits{', a rule' if _ruled(t, config) else ''})" for t in named
            )
            raise QuantizeError(
                f"quantize: {op.name} {_label(op)} {bound()}, past i32 ({ACC_LIMIT}), and no "
                f"operand can be narrower ({kept}): give one of them fewer bits"
            )


def narrow_operands(func: FuncOp, targets: Sequence[Width], config: QuantConfig) -> None:
    """Narrow the operands of every matmul without weights and every product in ``func``
    whose operands are both quantized (``targets``, before calibration) until its bound fits
    i32 (see the module). Each narrowed target gets the origin ``acc:%op``."""
    by_value = {t.value: t for t in targets}
    for op in func.body.block.ops:
        terms = _terms(op)
        if terms is None or terms < 1:
            continue
        a, b = (grid_sources(v, by_value.get) for v in op.operands[:2])
        if not a or not b:
            continue  # (a float operand: lower-to-hw refuses it, naming it)
        _narrow_until_fits(
            op,
            [a, b],
            lambda: terms * _widest(a) * _widest(b) <= ACC_LIMIT,
            lambda: f"sums {terms} products of codes up to {_widest(a)} and {_widest(b)}",
            config,
        )


def narrow_grown_inputs(func: FuncOp, targets: Sequence[Width], config: QuantConfig) -> None:
    """Narrow the input of every bicubic upsampling until its grown sum fits i32: ``max|x| *
    2**(9 n)`` at most ``2**31`` for ``n`` doubled dims (lower-to-hw's ``b + 9 n <= 32``);
    where a rule names the input's bits, refuse as :func:`narrow_operands` does."""
    by_value = {t.value: t for t in targets}
    for op in func.body.block.ops:
        if not isinstance(op, nf.UpsampleBicubicOp):
            continue
        shapes = zip(nf.tensor_shape(op.input)[2:], nf.tensor_shape(op.result)[2:])
        doubled = sum(a != b for a, b in shapes)
        side = grid_sources(op.input, by_value.get)
        if not side or not doubled:
            continue
        growth = GROWTH_BITS * doubled
        _narrow_until_fits(
            op,
            [side],
            lambda: _widest(side) * 2**growth <= 2**31,
            lambda: (
                f"grows its input's codes up to {_widest(side)} by 2**{growth} "
                f"({doubled} doubled dims)"
            ),
            config,
        )


def _ruled(t: Width, config: QuantConfig) -> bool:
    """Whether a rule names ``t``'s bits (a named constant's rules are an activation's)."""
    return config.rule_bits(t.rule_name, "act" if t.kind == "const" else t.kind) is not None


def _narrowable(t: Width, config: QuantConfig) -> bool:
    """An activation or constant (an embedding's table, a named factor) whose bits the
    options gave, with a narrower width left."""
    return not _ruled(t, config) and _narrower(t.bits) is not None


def _prelu_bound(
    x_bound: int, values: np.ndarray, exps: np.ndarray, bits: int, mode: object
) -> int:
    """lower-to-hw's bound of ``nh.prelu`` (``LowerPRelu``) for slope ``values`` at ``exps``."""
    codes = quant.quantize_to_int(values, bits, exps, mode).astype(np.int64)  # type: ignore[arg-type]
    shift = max(int(exps.max()), 0)
    moved = np.abs(codes) << (shift - exps)
    return x_bound * max(2**shift, int(moved.max(initial=0)))


def cap_slopes(
    func: FuncOp, targets: Sequence[Width], rounding: quant.RoundingMode, fixed: set[str]
) -> None:
    """Cap the measured exponents of every PReLU slope in ``targets`` (not those named in
    ``fixed``: imported exponents are the user's) until ``nh.prelu`` fits i32 (see the
    module). Each capped slope gets the origin ``acc:%prelu``."""
    by_value = {t.value: t for t in targets}
    for op in func.body.block.ops:
        if not isinstance(op, nf.PReluOp):
            continue
        xs, slope = grid_sources(op.input, by_value.get), by_value.get(op.slope)
        if not xs or slope is None or slope.exps is None or slope.name in fixed:
            continue
        if slope.bits == 1:
            continue  # (a 1-bit slope's code exponent is -k: lower-to-hw bounds it as is)
        x_bound = max(code_bound(t) for t in xs)
        values = constant_array(op.slope).astype(np.float64).reshape(-1)
        exps = np.broadcast_to(slope.exps.reshape(-1), values.shape).astype(np.int64)
        mode = slope.rounding or rounding
        top = int(exps.max())
        while (
            top > 0
            and _prelu_bound(x_bound, values, np.minimum(exps, top), slope.bits, mode) > ACC_LIMIT
        ):
            top -= 1
        if top < int(exps.max()):
            slope.exps = np.minimum(slope.exps, top)
            slope.origin = f"acc:{_label(op)}"
