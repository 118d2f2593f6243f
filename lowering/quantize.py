"""quantize: nf → nf + ``nq.fake_quant`` with power-of-two exponents (NanoEngine's Q level).

Where fake-quants go, as NanoEngine-PyTorch does it:

- every float input of the function (an *activation*);
- every weight and bias (``nf.constant`` operands 1 and 2 of ``nf.conv``/``nf.linear``), and
  every other named constant (a torch parameter or buffer added or multiplied in); unnamed
  scalar constants (a Python ``x + 2``) stay float;
- the result of every computing op; not after data movement (reshape, transpose, split,
  concat, pad, upsample), which never leaves the input's grid.

Bits and per-channel choice come from defaults per kind (weight, bias, activation) and an
ordered list of :class:`QuantRule` (first match wins; a rule can also leave a tensor float).
Exponents: weights from their values; activations from calibration data (the float program run
on batches) with NanoEngine's absmax rule (``k = floor(log2(2**(b-1) / absmax))``) or the
power of two minimising squared error; or imported (QAT) exponents by tensor name. A bias's
exponent is capped at its accumulator's (input + weight exponent) so lowering to integers
stays exact.

    %y = nf.conv %x, %w, %b ...               %xq = nq.fake_quant %x {bits = 8, exp = dense<5>}
                                    ─▶        %wq = nq.fake_quant %w {bits = 8, exp = dense<[[[[7]]], ...]>}
                                              %bq = nq.fake_quant %b {bits = 8, exp = dense<[7, ...]>}
                                              %y = nf.conv %xq, %wq, %bq ...
                                              %yq = nq.fake_quant %y {bits = 8, exp = dense<4>}
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import DataMovement
from nanoir.runtime.arrays import load_arrays
from nanoir.runtime.interpreter import compile_function, default_builders, find_function
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics.quant import RoundingMode
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerType, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import DiagnosticException

from nanoir.errors import Error

ALLOWED_BITS = (1, 2, 4, 8, 16)

LEARNERS = ("ema", "lsq")
"""Exponent learners for quantization-aware training (``nanoir.qat``); ``quantize`` ignores
them. ``ema``: NanoEngine's moving average of the absolute maximum, rate ``lr``; ``lsq``: a
learned continuous exponent (``learned`` is an alias), learning rate ``lr``."""

DEFAULT_LR = {"ema": 0.1, "lsq": 0.01}
"""The rate ``lr`` of each learner when neither a rule nor the options give one."""


class QuantizeError(DiagnosticException, Error):
    """The program or the options cannot be quantized as asked."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantRule:
    """Tensors whose name matches ``pattern`` (``re.search``) get these settings.

    ``kind`` limits the rule to ``weight``, ``bias`` or ``act`` tensors. Text form (for
    pipelines): ``[kind@]REGEX=SPEC`` with SPEC ``skip`` or ``/``-separated parts, each at
    most once and in any order: ``BITS``, ``pc`` (per channel) or ``pt`` (per tensor), and a
    QAT exponent learner ``ema`` or ``lsq`` (alias ``learned``) with an optional rate
    ``:LR``: ``weight@layer1\\..*=4/pc``, ``fc=skip``, ``fc\\.weight=1/pt/lsq:0.05``,
    ``act@.*=ema:0.2``. Unset parts take the options' defaults; ``quantize`` ignores the
    learner (it matters to :mod:`nanoir.qat` only).
    """

    pattern: str
    bits: int | None = None
    per_channel: bool | None = None
    skip: bool = False
    kind: str | None = None
    learner: str | None = None
    """``ema`` or ``lsq`` (see :data:`LEARNERS`); None takes the options' default."""
    lr: float | None = None
    """The learner's rate; None takes the options' (or the learner's) default."""

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise QuantizeError(
                f"quantize: rule pattern {self.pattern!r} is not a regex: {e}") from None
        if self.bits is not None and self.bits not in ALLOWED_BITS:
            raise QuantizeError(f"quantize: rule {self.pattern!r} asks for {self.bits} bits; "
                                f"allowed: {', '.join(map(str, ALLOWED_BITS))}")
        if self.kind not in (None, "weight", "bias", "act"):
            raise QuantizeError(f"quantize: rule kind {self.kind!r} is not weight, bias or act")
        if self.learner is not None:
            object.__setattr__(self, "learner", _learner(self.learner))
        if self.lr is not None and not (0 < self.lr and self.lr == self.lr):
            raise QuantizeError(f"quantize: rule {self.pattern!r} has rate {self.lr}; it must "
                                "be positive")

    @staticmethod
    def parse(text: str) -> QuantRule:
        kind = None
        if "@" in text.split("=", 1)[0]:
            kind, text = text.split("@", 1)
        pattern, sep, spec = text.rpartition("=")
        if not sep or not pattern:
            raise QuantizeError(f"quantize: rule {text!r} must look like REGEX=BITS[/pc|/pt] "
                                "or REGEX=skip")
        if spec == "skip":
            return QuantRule(pattern, skip=True, kind=kind)
        bits: int | None = None
        per_channel: bool | None = None
        learner: str | None = None
        lr: float | None = None
        bad = QuantizeError(f"quantize: rule spec {spec!r} must be skip, or BITS, pc or pt and "
                            "a learner (ema or lsq, optionally :LR), separated by /")
        for part in spec.split("/"):
            name, colon, rate = part.partition(":")
            if part.isdigit() and bits is None:
                bits = int(part)
            elif part in ("pc", "pt") and per_channel is None:
                per_channel = part == "pc"
            elif name in (*LEARNERS, "learned") and learner is None:
                learner = name
                if colon:
                    try:
                        lr = float(rate)
                    except ValueError:
                        raise bad from None
            else:
                raise bad
        return QuantRule(pattern, bits=bits, per_channel=per_channel, kind=kind,
                         learner=learner, lr=lr)

    def matches(self, name: str, kind: str) -> bool:
        return (self.kind is None or self.kind == kind) and re.search(self.pattern, name) is not None


@dataclass(frozen=True)
class QuantConfig:
    """Defaults per kind of tensor, rules, calibrator and rounding."""

    weight_bits: int = 8
    bias_bits: int = 8
    act_bits: int = 8
    weight_per_channel: bool = True
    act_per_channel: bool = False
    rules: tuple[QuantRule, ...] = ()
    calibrator: str = "absmax"
    """``absmax`` (NanoEngine's rule) or ``mse`` (the power of two with least squared error)."""
    rounding: RoundingMode = RoundingMode.TRUNC
    learner: str = "ema"
    """The QAT exponent learner of tensors no rule names one for (``ema`` or ``lsq``)."""
    lr: float | None = None
    """Its rate (None: :data:`DEFAULT_LR` of the learner)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "learner", _learner(self.learner))
        for label, bits in (("weight", self.weight_bits), ("bias", self.bias_bits),
                            ("act", self.act_bits)):
            if bits not in ALLOWED_BITS:
                raise QuantizeError(f"quantize: {label}_bits = {bits}; allowed: "
                                    f"{', '.join(map(str, ALLOWED_BITS))}")
        if self.calibrator not in ("absmax", "mse"):
            raise QuantizeError(f"quantize: calibrator {self.calibrator!r} is not absmax or mse")

    def resolve(self, name: str, kind: str) -> tuple[int, bool] | None:
        """(bits, per_channel) for a tensor, or None to leave it float."""
        bits = {"weight": self.weight_bits, "bias": self.bias_bits, "act": self.act_bits}[kind]
        per_channel = {"weight": self.weight_per_channel, "bias": self.weight_per_channel,
                       "act": self.act_per_channel}[kind]
        for rule in self.rules:
            if rule.matches(name, kind):
                if rule.skip:
                    return None
                return (rule.bits or bits,
                        per_channel if rule.per_channel is None else rule.per_channel)
        return bits, per_channel

    def resolve_learner(self, name: str, kind: str) -> tuple[str, float]:
        """(learner, lr) of a tensor for QAT: from the first matching rule, else the defaults."""
        learner, lr = self.learner, self.lr
        for rule in self.rules:
            if rule.matches(name, kind):
                if rule.learner is not None:
                    learner, lr = rule.learner, rule.lr if rule.lr is not None else (
                        lr if rule.learner == self.learner else None)
                elif rule.lr is not None:
                    lr = rule.lr
                break
        return learner, DEFAULT_LR[learner] if lr is None else lr


def _learner(name: str) -> str:
    if name == "learned":
        return "lsq"
    if name not in LEARNERS:
        raise QuantizeError(f"quantize: learner {name!r} is not one of ema, lsq (learned)")
    return name


# --------------------------------------------------------------------------------------------
# What to quantize
# --------------------------------------------------------------------------------------------


@dataclass
class Target:
    """One tensor to fake-quantize."""

    value: SSAValue
    kind: str
    name: str
    bits: int
    per_channel: bool
    exps: np.ndarray | None = None
    """Exponents shaped to broadcast against the value (without the batch dim)."""
    rounding: RoundingMode | None = None
    """This tensor's rounding, if imported exponents say (else the config's)."""
    rule_name: str = ""
    """The name rules match (``name`` before it was made unique)."""
    weight_axis: int = 0
    """A weight's output-channel axis: 0 (conv, linear), 1 (conv_transpose's ``[C, O/g, *K]``)."""

    @property
    def channel_axis(self) -> int | None:
        rank = len(_shape(self.value))
        if not self.per_channel or rank == 0:
            return None
        if self.kind == "act":
            return 1 if rank >= 2 else None
        return self.weight_axis if self.kind == "weight" else 0


def _shape(value: SSAValue) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.get_shape()


def value_name(value: SSAValue, index: dict[SSAValue, int]) -> str:
    """The name rules match against: a constant's ``name``, else the SSA name hint."""
    if isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp):
        if value.op.sym_name is not None:
            return value.op.sym_name.data
    if value.name_hint:
        return value.name_hint
    return f"%{index.setdefault(value, len(index))}"


def _is_float_tensor(value: SSAValue) -> bool:
    t = value.type
    return isinstance(t, TensorType) and not isinstance(t.get_element_type(), IntegerType)


def _already_quantized(value: SSAValue) -> bool:
    if isinstance(value, OpResult) and isinstance(value.op, FakeQuantOp):
        return True
    return any(isinstance(use.operation, FakeQuantOp) for use in value.uses)


WEIGHTED = (nf.ConvOp, nf.ConvTransposeOp, nf.LinearOp)
"""Ops whose operand 1 is a weight and operand 2 a bias."""


def _weight_axis(value: SSAValue) -> int:
    """A weight's output-channel axis: 1 when a conv_transpose reads it, else 0."""
    return 1 if any(isinstance(u.operation, nf.ConvTransposeOp) and u.index == 1
                    for u in value.uses) else 0


def _constant_kind(value: SSAValue) -> str | None:
    """weight, bias, const (another named constant) or None (leave float)."""
    assert isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp)
    for use in value.uses:
        if isinstance(use.operation, WEIGHTED):
            if use.index == 1:
                return "weight"
            if use.index == 2:
                return "bias"
    if value.op.sym_name is None and int(np.prod(_shape(value))) <= 1:
        return None  # a Python scalar such as ``x + 2``
    return "const"


def find_targets(func: FuncOp, config: QuantConfig) -> list[Target]:
    """The tensors of ``func`` to quantize, in program order.

    Rules match a tensor's name (:func:`value_name`); ``Target.name`` is that name made unique
    in program order as the IR printer does (``relu``, ``relu_1``, ...), so imported
    exponents name every tensor unambiguously.
    """
    names: dict[SSAValue, int] = {}
    used: set[str] = set()
    targets: list[Target] = []

    def add(value: SSAValue, kind: str) -> None:
        if not _is_float_tensor(value) or _already_quantized(value):
            return
        name = unique = value_name(value, names)
        i = 0
        while unique in used:
            i += 1
            unique = f"{name}_{i}"
        used.add(unique)
        rule_kind = "act" if kind == "const" else kind
        resolved = config.resolve(name, rule_kind)
        if resolved is None:
            return
        bits, per_channel = resolved
        if kind == "const":
            per_channel = False
        targets.append(Target(value, rule_kind if kind != "const" else "const", unique, bits,
                              per_channel, rule_name=name,
                              weight_axis=_weight_axis(value) if kind == "weight" else 0))

    block = func.body.block
    for arg in block.args:
        add(arg, "act")
    for op in block.ops:
        if isinstance(op, nf.ConstantOp):
            kind = _constant_kind(op.result)
            if kind is not None:
                add(op.result, kind)
        elif op.name.startswith("nf.") and not op.has_trait(DataMovement):
            # (data movement keeps its inputs' grid: no fake-quant after it)
            for r in op.results:
                add(r, "act")
    return targets


# --------------------------------------------------------------------------------------------
# Exponents
# --------------------------------------------------------------------------------------------


def _exp_shape(target: Target) -> tuple[int, ...]:
    shape = _shape(target.value)
    axis = target.channel_axis
    if axis is None:
        return (1,)
    out = [1] * len(shape)
    out[axis] = shape[axis]
    return tuple(out[1:]) if target.kind == "act" else tuple(out)


def tensor_exps(
    x: np.ndarray, bits: int, axis: int | None, calibrator: str, mode: RoundingMode
) -> np.ndarray:
    """Exponents of one tensor from its values (reduced dims kept as 1)."""
    absmax = quant.channel_absmax(x, axis)
    if calibrator != "mse":
        return quant.exp_from_absmax(absmax, bits)
    mean_abs = _channel_mean_abs(x, axis)
    candidates = mse_candidates(absmax.reshape(-1), mean_abs.reshape(-1), bits)
    shape = [1] * x.ndim
    if axis is not None:
        shape[axis] = -1
    errors = np.stack([_reduce((quant.fake_quant(x, bits, k.reshape(shape), mode) - x) ** 2,
                               axis) for k in candidates])
    return _least_error(candidates, errors).reshape(absmax.shape)


def _channel_mean_abs(x: np.ndarray, axis: int | None) -> np.ndarray:
    axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    return np.mean(np.abs(x), axis=axes, keepdims=axis is not None).reshape(-1)


def mse_candidates(absmax: np.ndarray, mean_abs: np.ndarray, bits: int) -> np.ndarray:
    """Exponents the ``mse`` calibrator tries, per channel: ``[candidates, channels]``, the
    preferred one (kept on ties) first.

    b > 1: from the absmax rule's ``k0`` (nothing saturates) up to ``k0 + min(b + 1, 8)``;
    coarser steps than ``k0`` never lower the error, and finer ones trade saturation for
    resolution (the least error of a 4-bit weight is typically 1-2 steps finer, of an 8-bit
    activation up to ~4). b = 1: ``sign * 2**k`` has squared error ``sum (|x| - 2**k)**2``,
    least at ``2**k = mean |x|``, so the best power of two is one of the two around
    ``mean |x|`` (tried first, then one more on each side): ``max |x|`` (the absmax rule) can
    be several octaves away for wide, heavy-tailed channels, outside a fixed window.
    """
    if bits == 1:
        k0 = quant.exp_from_absmax(mean_abs, 1).astype(np.int64)
        offsets: tuple[int, ...] = (0, 1, -1, 2)
    else:
        k0 = quant.exp_from_absmax(absmax, bits).astype(np.int64)
        offsets = tuple(range(min(bits + 1, 8) + 1))
    return np.clip(np.stack([k0 + d for d in offsets]), *quant.CALIB_EXP_RANGE)


def _least_error(candidates: np.ndarray, errors: np.ndarray) -> np.ndarray:
    """Per channel, the candidate with the least error; the earliest one on ties."""
    best = candidates[0].copy()
    best_err = errors[0].copy()
    for k, err in zip(candidates[1:], errors[1:]):
        better = err < best_err
        best = np.where(better, k, best)
        best_err = np.where(better, err, best_err)
    return best


@dataclass
class _Stats:
    """Running statistics of one activation over the calibration batches."""

    absmax: np.ndarray | None = None
    abs_sum: np.ndarray | None = None
    count: int = 0
    sse: np.ndarray | None = None
    candidates: np.ndarray | None = None


def _reduce(x: np.ndarray, axis: int | None) -> np.ndarray:
    axes = tuple(i for i in range(x.ndim) if i != axis) if axis is not None else None
    return np.sum(x, axis=axes, keepdims=axis is not None).reshape(-1)


def _as_batches(
    calibration: Iterable[Any], num_inputs: int
) -> Iterable[tuple[np.ndarray, ...]]:
    for index, batch in enumerate(calibration):
        items = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
        if len(items) < num_inputs:
            raise QuantizeError(
                f"quantize: a calibration batch has {len(items)} arrays; the program takes "
                f"{num_inputs} inputs"
            )
        arrays = []
        for item in items[:num_inputs]:
            if hasattr(item, "detach"):  # a torch tensor (e.g. from a DataLoader)
                item = item.detach().cpu().numpy()
            arrays.append(np.asarray(item, dtype=np.float64))
        _check_finite(arrays, f"calibration batch {index}")
        yield tuple(arrays)


def calibrate(
    func: FuncOp,
    targets: Sequence[Target],
    calibration: Iterable[Any],
    config: QuantConfig,
    *,
    progress: bool | None = None,
) -> None:
    """Run the float program on the calibration batches and set each activation's ``exps``."""
    acts = {t.value: t for t in targets if t.kind == "act"}
    if not acts:
        return
    plan = compile_function(func, default_builders(), np.dtype(np.float64))
    stats = {v: _Stats() for v in acts}
    batches = list(_as_batches(calibration, len(func.body.block.args)))
    if not batches:
        raise QuantizeError("quantize: the calibration data is empty")
    passes = 2 if config.calibrator == "mse" else 1

    def observe_absmax(value: SSAValue, x: np.ndarray) -> None:
        t = acts[value]
        m = quant.channel_absmax(x, t.channel_axis).reshape(-1)
        s = stats[value]
        s.absmax = m if s.absmax is None else np.maximum(s.absmax, m)
        if t.bits == 1:  # the 1-bit mse start is mean |x|
            a = _reduce(np.abs(x), t.channel_axis)
            s.abs_sum = a if s.abs_sum is None else s.abs_sum + a
            s.count += x.size // a.size

    def observe_sse(value: SSAValue, x: np.ndarray) -> None:
        t, s = acts[value], stats[value]
        assert s.candidates is not None and s.sse is not None
        axis = t.channel_axis
        shape = [1] * x.ndim
        if axis is not None:
            shape[axis] = -1
        for i, k in enumerate(s.candidates):
            err = quant.fake_quant(x, t.bits, k.reshape(shape), config.rounding) - x
            s.sse[i] += _reduce(err * err, axis)

    with _progress(progress, len(batches) * passes) as advance:
        for phase in range(passes):
            observe_value = observe_absmax if phase == 0 else observe_sse

            def observe(op: Operation, results: tuple[Any, ...]) -> None:
                for r, x in zip(op.results, results):
                    if r in acts:
                        observe_value(r, x)

            for batch in batches:
                for arg, x in zip(func.body.block.args, batch):
                    if arg in acts:
                        observe_value(arg, x)
                plan(*batch, observe=observe)
                advance()
            if phase == 0 and passes == 2:
                for v, s in stats.items():
                    assert s.absmax is not None
                    mean_abs = (s.abs_sum / max(s.count, 1) if s.abs_sum is not None
                                else s.absmax)
                    s.candidates = mse_candidates(s.absmax, mean_abs, acts[v].bits)
                    s.sse = np.zeros(s.candidates.shape, dtype=np.float64)
    for v, t in acts.items():
        s = stats[v]
        assert s.absmax is not None
        if s.sse is not None and s.candidates is not None:
            k = _least_error(s.candidates, s.sse)
        else:
            k = quant.exp_from_absmax(s.absmax, t.bits)
        t.exps = np.asarray(k, dtype=np.int64).reshape(_exp_shape(t))


class _progress:
    """A rich progress bar on a terminal for calibration runs that take more than a moment."""

    def __init__(self, enabled: bool | None, total: int):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled or self.total < 2:
            return lambda: None
        from rich.progress import Progress

        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("calibrating", total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _constant_array(value: SSAValue) -> np.ndarray:
    assert isinstance(value, OpResult) and isinstance(value.op, nf.ConstantOp)
    return dense_to_numpy(value.op.value).astype(np.float64)


def nh_exps(bits: int, exps: np.ndarray) -> np.ndarray:
    """Exponent of the integer codes: ``k`` for b > 1, ``-k`` for 1-bit (code ±1, size 2**k)."""
    return -exps if bits == 1 else exps


def _source_fake_quant(value: SSAValue) -> FakeQuantOp | None:
    """The fake-quant a value comes from, looking through data movement."""
    while isinstance(value, OpResult):
        op = value.op
        if isinstance(op, FakeQuantOp):
            return op
        if isinstance(op, nf.ReshapeOp | nf.PadOp | nf.UpsampleNearestOp):
            value = op.input
            continue
        return None
    return None


def _accumulator_cap(op: nf.ConvOp | nf.ConvTransposeOp | nf.LinearOp) -> np.ndarray | None:
    """Per output channel ``exp(x) + exp(w)`` in code exponents, if both are quantized."""
    fx, fw = _source_fake_quant(op.input), _source_fake_quant(op.weight)
    if fx is None or fw is None:
        return None
    groups = op.groups.value.data if isinstance(op, nf.ConvOp | nf.ConvTransposeOp) else 1
    w_exps = dense_to_numpy(fw.exp).astype(np.int64)
    out_c = _shape(op.result)[1] if isinstance(op, nf.ConvTransposeOp) else _shape(op.weight)[0]
    if isinstance(op, nf.ConvTransposeOp) and w_exps.size > 1:
        w_exps = np.tile(w_exps.reshape(-1), groups)  # [O/g] along axis 1, the same per group
    return accumulator_cap(fx.bits.value.data, dense_to_numpy(fx.exp).astype(np.int64),
                           fw.bits.value.data, w_exps, out_c, groups)


def accumulator_cap(
    x_bits: int, x_exps: np.ndarray, w_bits: int, w_exps: np.ndarray, out_c: int, groups: int
) -> np.ndarray | None:
    """Per output channel accumulator exponent ``exp(x) + exp(w)`` (code exponents) of a conv
    or linear layer, or None where no single one exists (per-channel input exponents that
    differ within a group); a bias's exponent is capped at it (``nanoir.qat`` shares this)."""
    kx = nh_exps(x_bits, np.asarray(x_exps, dtype=np.int64))
    kw = nh_exps(w_bits, np.asarray(w_exps, dtype=np.int64))
    kw = np.broadcast_to(kw.reshape(-1), (out_c,)) if kw.size in (1, out_c) else None
    if kw is None:
        return None
    if kx.size == 1:
        return kx.reshape(-1)[0] + kw
    kx = kx.reshape(-1)
    if kx.size % groups:
        return None
    per_group = kx.reshape(groups, -1)
    if (per_group != per_group[:, :1]).any():
        return None
    return np.repeat(per_group[:, 0], out_c // groups) + kw


def _insert(target: Target, config: QuantConfig, rewriter: Rewriter) -> FakeQuantOp:
    assert target.exps is not None
    value = target.value
    exps = np.clip(target.exps, *quant.CALIB_EXP_RANGE).astype(np.int64)
    fq = FakeQuantOp(value, target.bits, exp_attr(exps.reshape(-1).tolist(), list(exps.shape)),
                     target.rounding or config.rounding)
    if isinstance(value, BlockArgument):
        block = value.block
        assert isinstance(block, Block)
        first = block.first_op
        point = InsertPoint.before(first) if first is not None else InsertPoint.at_end(block)
    else:
        assert isinstance(value, OpResult)
        point = InsertPoint.after(value.op)
    rewriter.insert_op(fq, point)
    for use in list(value.uses):
        if use.operation is not fq:
            use.operation.operands[use.index] = fq.result
    if value.name_hint:
        fq.result.name_hint = value.name_hint
    return fq


Exponents = Mapping[str, "int | Sequence[int] | np.ndarray | Mapping[str, Any]"]
"""Imported exponents by tensor name: ``k``, ``[k per channel]``, or a record
``{"exp": k or [k, ...], "bits": b, "rounding": mode, "axis": channel axis or None}`` (the
form ``nanoir.qat.export_exponents`` writes; ``bits`` and ``rounding`` then override the
options for that tensor, and ``axis`` must be the tensor's channel axis)."""


def _import_record(t: Target, record: Any) -> np.ndarray:
    """Apply a ``{"exp", "bits", "rounding", "axis"}`` record to ``t``; return its exponents."""
    if not isinstance(record, Mapping):
        return np.asarray(record, dtype=np.int64).reshape(-1)
    unknown = set(record) - {"exp", "bits", "rounding", "axis"}
    if "exp" not in record or unknown:
        raise QuantizeError(f"quantize: the exponents of {t.name} need an \"exp\" entry and "
                            "may have bits, rounding and axis; got " + ", ".join(sorted(record)))
    if record.get("bits") is not None:
        if record["bits"] not in ALLOWED_BITS:
            raise QuantizeError(f"quantize: {t.name} asks for {record['bits']} bits; allowed: "
                                f"{', '.join(map(str, ALLOWED_BITS))}")
        t.bits = int(record["bits"])
    if record.get("rounding") is not None:
        t.rounding = _rounding(record["rounding"])
    k = np.asarray(record["exp"], dtype=np.int64).reshape(-1)
    if "axis" in record:
        t.per_channel = record["axis"] is not None
        if t.per_channel and record["axis"] != t.channel_axis:
            raise QuantizeError(f"quantize: {t.name} is per channel along axis "
                                f"{t.channel_axis}, not {record['axis']}")
    return k


def quantize_function(
    func: FuncOp,
    calibration: Iterable[Any] | None,
    config: QuantConfig,
    exponents: Exponents | None = None,
    *,
    progress: bool | None = None,
) -> list[Target]:
    """Insert fake-quants into ``func``; returns what was quantized, with its exponents."""
    targets = find_targets(func, config)
    exponents = dict(exponents or {})
    for t in targets:
        if t.name in exponents:
            # Imported (QAT) exponents decide per tensor or per channel by their count
            # (or by the record's axis).
            record = exponents.pop(t.name)
            k = _import_record(t, record)
            if not (isinstance(record, Mapping) and "axis" in record):
                t.per_channel = k.size > 1
            shape = _exp_shape(t)
            if t.channel_axis is None and k.size > 1 or k.size != int(np.prod(shape)):
                raise QuantizeError(f"quantize: {k.size} exponents given for {t.name}, which "
                                    f"has {int(np.prod(shape))} channels")
            t.exps = k.reshape(shape)
    if exponents:
        raise QuantizeError("quantize: exponents given for unknown tensors: "
                            + ", ".join(sorted(exponents)))
    for t in targets:
        if t.exps is None and t.kind in ("weight", "const"):
            x = _constant_array(t.value)
            t.exps = tensor_exps(x, t.bits, t.channel_axis, config.calibrator,
                                 config.rounding).reshape(_exp_shape(t))
    missing = [t for t in targets if t.exps is None and t.kind == "act"]
    if missing:
        if calibration is None:
            raise QuantizeError(
                "quantize: activation exponents need calibration data (or imported "
                f"exponents); none given for {', '.join(t.name for t in missing[:5])}"
                + (" ..." if len(missing) > 5 else "")
            )
        calibrate(func, missing, calibration, config, progress=progress)
    rewriter = Rewriter()
    for t in targets:
        if t.kind != "bias":
            _insert(t, config, rewriter)
    for t in targets:
        if t.kind != "bias":
            continue
        if t.exps is None:
            t.exps = tensor_exps(_constant_array(t.value), t.bits, t.channel_axis,
                                 config.calibrator, config.rounding).reshape(_exp_shape(t))
        users = [u.operation for u in t.value.uses
                 if isinstance(u.operation, WEIGHTED) and u.index == 2]
        for user in users:
            cap = _accumulator_cap(user)
            if cap is not None and t.bits > 1:
                # A per-tensor bias takes the smallest of per-channel caps.
                cap = cap.min() if t.exps.size == 1 else cap
                t.exps = np.minimum(t.exps.reshape(-1), cap).reshape(t.exps.shape)
        _insert(t, config, rewriter)
    return targets


def quantize(
    module: ModuleOp,
    calibration: Iterable[Any] | None = None,
    *,
    config: QuantConfig | None = None,
    exponents: Exponents | None = None,
    function: str | None = None,
    progress: bool | None = None,
    **options: Any,
) -> list[Target]:
    """Quantize a float (nf) program in place: ``nanoir.quantize(module, batches, act_bits=8)``.

    ``calibration`` is an iterable of batches (arrays, tuples of arrays, torch tensors or
    ``(inputs, labels)`` pairs from a DataLoader); ``options`` are :class:`QuantConfig` fields.
    """
    if config is None:
        rules = tuple(r if isinstance(r, QuantRule) else QuantRule.parse(r)
                      for r in options.pop("rules", ()))
        if "rounding" in options:
            options["rounding"] = _rounding(options["rounding"])
        config = QuantConfig(rules=rules, **options)
    elif options:
        raise QuantizeError("quantize: pass either config= or keyword options, not both")
    func = find_function(module, function)
    return quantize_function(func, calibration, config, exponents, progress=progress)


def load_calibration(path: str, batch_size: int) -> list[tuple[np.ndarray, ...]]:
    """Batches from a ``.npy`` (one input) or ``.npz`` (one array per input, in file order).

    A file that cannot be read, is not a NumPy file, is truncated, or holds NaN or infinity is
    a ``QuantizeError`` naming the file (and the batch with the bad value).
    """
    try:
        arrays = load_arrays(path)
    except Error as e:
        raise QuantizeError(f"quantize: calibration data: {e}") from None
    n = arrays[0].shape[0] if arrays and arrays[0].ndim else 0
    if n == 0 or any(a.ndim == 0 or a.shape[0] != n for a in arrays):
        raise QuantizeError(f"quantize: calibration arrays in {path!r} need one common, "
                            "non-empty leading (batch) dim")
    batches = [tuple(a[i:i + batch_size] for a in arrays) for i in range(0, n, batch_size)]
    for b, batch in enumerate(batches):
        _check_finite(batch, f"calibration data {path!r}, batch {b} (rows {b * batch_size}.."
                             f"{b * batch_size + len(batch[0]) - 1})")
    return batches


def _check_finite(arrays: Sequence[np.ndarray], where: str) -> None:
    """A ``QuantizeError`` at ``where`` if an array holds NaN or +-infinity (no exponent fits)."""
    for k, a in enumerate(arrays):
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            what = "NaN" if np.isnan(a).any() else "infinity"
            input_ = f", input {k}" if len(arrays) > 1 else ""
            raise QuantizeError(f"quantize: {where}{input_} holds {what}; calibration data "
                                "must be finite")


def _rounding(value: str | RoundingMode) -> RoundingMode:
    try:
        return RoundingMode(value)
    except ValueError:
        raise QuantizeError(f"quantize: rounding {value!r} is not one of "
                            + ", ".join(m.value for m in RoundingMode)) from None


def load_exponents(path: str) -> dict[str, Any]:
    """Imported exponents from a JSON object of tensor name to an int, a list of ints, or a
    record ``{"exp": ..., "bits": ..., "rounding": ..., "axis": ...}`` (see ``Exponents``)."""
    import json

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise QuantizeError(f"quantize: cannot read exponents {path!r}: {e}") from None

    def ints(v: Any) -> bool:
        return isinstance(v, int) or (isinstance(v, list) and all(isinstance(i, int) for i in v))

    ok = isinstance(data, dict) and all(
        ints(v) or (isinstance(v, dict) and ints(v.get("exp"))) for v in data.values()
    )
    if not ok:
        raise QuantizeError(f"quantize: {path!r} must map tensor names to an int, a list "
                            "of ints, or a record {\"exp\": ..., \"bits\": ..., ...}")
    return data


@dataclass(frozen=True)
class QuantizePass(ModulePass):
    """Insert power-of-two fake-quants (the nq level) into a float program."""

    name = "quantize"

    calibration: str | None = None
    """A .npy (single input) or .npz (one array per input) file of calibration inputs."""
    batch_size: int = 32
    """Calibration batch size along the leading dim of the calibration arrays."""
    weight_bits: int = 8
    """Bits of conv/linear weights (1, 2, 4, 8 or 16)."""
    bias_bits: int = 8
    """Bits of conv/linear biases."""
    act_bits: int = 8
    """Bits of activations and other constants."""
    weight_per_channel: bool = True
    """Per output channel weight (and bias) exponents."""
    act_per_channel: bool = False
    """Per channel (dim 1) activation exponents."""
    rules: tuple[str, ...] = ()
    """Ordered rules ``[kind@]REGEX=BITS[/pc|/pt]`` or ``REGEX=skip``; first match wins."""
    calibrator: str = "absmax"
    """``absmax`` (NanoEngine) or ``mse`` (least squared error power of two)."""
    rounding: str = "trunc"
    """trunc (NanoEngine), floor, half_up or half_even."""
    function: str | None = None
    """The function to quantize (default: the only one, or @main)."""
    exponents: str | None = None
    """A JSON file ``{"tensor name": k or [k per channel]}`` of imported (QAT) exponents."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.batch_size <= 0:
            raise QuantizeError(f"quantize: batch_size must be positive, got {self.batch_size}")
        rounding = _rounding(self.rounding)
        config = QuantConfig(
            weight_bits=self.weight_bits, bias_bits=self.bias_bits, act_bits=self.act_bits,
            weight_per_channel=self.weight_per_channel, act_per_channel=self.act_per_channel,
            rules=tuple(QuantRule.parse(r) for r in self.rules), calibrator=self.calibrator,
            rounding=rounding,
        )
        batches = (None if self.calibration is None
                   else load_calibration(self.calibration, self.batch_size))
        imported = None if self.exponents is None else load_exponents(self.exponents)
        quantize(op, batches, config=config, exponents=imported, function=self.function,
                 progress=False)


__all__ = ["QuantConfig", "QuantRule", "QuantizePass", "QuantizeError", "Target", "quantize"]
