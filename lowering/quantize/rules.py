"""quantize's options: the rule grammar (``[kind@]REGEX=BITS[u][/pc|/pt][/u|/s][:learner[@lr]]``
or ``=skip``), per-kind defaults, rounding modes, signedness and exponent learners, as one frozen
config.

The quantize pass, ``nanoir.qat`` and the CLI all read options through :class:`QuantConfig`,
so a rule means the same thing everywhere.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from nanoir.runtime.numerics.quant import RoundingMode
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


def checked_bits(bits: object, what: str) -> int:
    """``bits`` as one of :data:`ALLOWED_BITS`; ``bool``, ``None``, NaN and non-integer floats
    are refused (``True == 1`` would otherwise pass as 1 bit), an integral float is its int.
    ``what`` is the message's subject, with ``{bits}`` where the value goes."""
    value: object = bits
    if isinstance(bits, float) and math.isfinite(bits) and bits.is_integer():
        value = int(bits)
    elif isinstance(bits, numbers.Integral) and not isinstance(bits, bool):
        value = int(bits)  # also NumPy's integers
    if isinstance(value, bool) or not isinstance(value, int) or value not in ALLOWED_BITS:
        shown = type(bits).__name__
        if isinstance(bits, float | bool) or bits is None:
            shown = repr(bits)
        elif isinstance(value, int):
            shown = (
                str(value) if value.bit_length() <= 64 else f"a {value.bit_length()}-bit integer"
            )
        elif isinstance(bits, str):
            shown = repr(bits[:20])
        raise QuantizeError(
            f"quantize: {what.replace('{bits}', shown)}; "
            f"allowed: {', '.join(map(str, ALLOWED_BITS))}"
        )
    return value


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
    learner (it matters to :mod:`nanoir.qat` only). Signedness of an activation: ``u``
    (unsigned codes ``0..2**b-1``, also written after the bits, ``relu1=8u``) or ``s``
    (signed, overriding ``unsigned="auto"``): ``act@.*relu.*=u``, ``head=4/s``.
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
    signed: bool | None = None
    """False: unsigned codes (``u``); True: signed (``s``); None: the options decide."""

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as e:
            raise QuantizeError(
                f"quantize: rule pattern {self.pattern!r} is not a regex: {e}"
            ) from None
        if self.bits is not None:
            object.__setattr__(
                self,
                "bits",
                checked_bits(self.bits, f"rule {self.pattern!r} asks for {{bits}} bits"),
            )
        if self.kind not in (None, "weight", "bias", "act"):
            raise QuantizeError(f"quantize: rule kind {self.kind!r} is not weight, bias or act")
        if self.learner is not None:
            object.__setattr__(self, "learner", _learner(self.learner))
        if self.lr is not None and not (0 < self.lr and self.lr == self.lr):
            raise QuantizeError(
                f"quantize: rule {self.pattern!r} has rate {self.lr}; it must be positive"
            )

    @staticmethod
    def parse(text: str) -> QuantRule:
        kind = None
        if "@" in text.split("=", 1)[0]:
            kind, text = text.split("@", 1)
        pattern, sep, spec = text.rpartition("=")
        if not sep or not pattern:
            raise QuantizeError(
                f"quantize: rule {text!r} must look like REGEX=BITS[/pc|/pt] or REGEX=skip"
            )
        if spec == "skip":
            return QuantRule(pattern, skip=True, kind=kind)
        bits: int | None = None
        per_channel: bool | None = None
        learner: str | None = None
        lr: float | None = None
        signed: bool | None = None
        bad = QuantizeError(
            f"quantize: rule spec {spec!r} must be skip, or BITS, pc or pt, u or s and "
            "a learner (ema or lsq, optionally :LR), separated by /"
        )
        for part in spec.split("/"):
            name, colon, rate = part.partition(":")
            if part[:-1].isdigit() and part.endswith("u") and bits is None and signed is None:
                bits, signed = int(part[:-1]), False
            elif part.isdigit() and bits is None:
                bits = int(part)
            elif part in ("u", "s") and signed is None:
                signed = part == "s"
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
        return QuantRule(
            pattern,
            bits=bits,
            per_channel=per_channel,
            kind=kind,
            learner=learner,
            lr=lr,
            signed=signed,
        )

    def matches(self, name: str, kind: str) -> bool:
        return (self.kind is None or self.kind == kind) and re.search(
            self.pattern, name
        ) is not None


@dataclass(frozen=True)
class QuantConfig:
    """Defaults per kind of tensor, rules, calibrator and rounding."""

    weight_bits: int = 8
    bias_bits: int = 8
    act_bits: int = 8
    weight_per_channel: bool = True
    act_per_channel: bool = False
    rules: tuple[QuantRule, ...] = ()
    calibrator: str = "mse"
    """``mse`` (the power of two with least squared error; the default: with ``trunc`` and bias
    correction a median 1.3 dB closer to free-scale PTQ than absmax on ``bench_ptq.py``) or
    ``absmax`` (NanoEngine's rule)."""
    rounding: RoundingMode = RoundingMode.TRUNC
    learner: str = "ema"
    """The QAT exponent learner of tensors no rule names one for (``ema`` or ``lsq``)."""
    lr: float | None = None
    """Its rate (None: :data:`DEFAULT_LR` of the learner)."""
    unsigned: str = "never"
    """``never`` (signed codes everywhere, the default; ``False`` is accepted) or ``auto``
    (``True``): an activation known non-negative by construction (the ``NonNegativeResult``
    trait: ReLU, ReLU6, sigmoid, ...) gets unsigned codes. Rules override it per tensor."""

    gate_bits: int | None = 16
    """Bits of a gated product, the product of two activations (an SE block's ``x * gate``,
    SiLU or hardswish written as products; ``gates.gated_product``) where no rule names it, at
    least ``act_bits``. Truncated twice at 8 bits, such products shrink multiplicatively along
    a chain of them; TFLite keeps these intermediates in 16 bits. The engine truncates either
    way: this is a width, not a rounding. On ``bench_trained.py`` (issue 30 §2), PP-OCR's
    classifier: 83.6% -> 93.8% labels, 7.5 -> 11.1 dB. ``None``:
    ``act_bits``."""
    table_input_bits: int | None = None
    """Bits of a value read only by lookup tables (hardswish, sigmoid, SiLU, tanh: the conv
    before them; ``gates.table_input``) where no rule names it; ``None`` (the default):
    ``act_bits``. At 16 the table is segmented (lower-to-hw) and indexed almost by the float
    value: with ``gate_bits=16``, PP-OCR's classifier reaches 100% labels, 26.5 dB
    (onnxruntime: 30.0). Not the default yet: every sigmoid/hardswish program's tables grow."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "learner", _learner(self.learner))
        for label in ("gate_bits", "table_input_bits"):
            if getattr(self, label) is not None:
                object.__setattr__(
                    self, label, checked_bits(getattr(self, label), f"{label} = {{bits}}")
                )
        object.__setattr__(self, "unsigned", parse_unsigned(self.unsigned))
        for label, bits in (
            ("weight", self.weight_bits),
            ("bias", self.bias_bits),
            ("act", self.act_bits),
        ):
            object.__setattr__(
                self, f"{label}_bits", checked_bits(bits, f"{label}_bits = {{bits}}")
            )
        if self.calibrator not in ("absmax", "mse"):
            raise QuantizeError(f"quantize: calibrator {self.calibrator!r} is not absmax or mse")

    def resolve(self, name: str, kind: str, wider: int | None = None) -> tuple[int, bool] | None:
        """(bits, per_channel) for a tensor, or None to leave it float. ``wider``: the bits of
        an activation ``gates`` widens (``gate_bits``, ``table_input_bits``) unless a rule
        names it."""
        bits = {"weight": self.weight_bits, "bias": self.bias_bits, "act": self.act_bits}[kind]
        if wider is not None and kind == "act":
            bits = max(bits, wider)
        per_channel = {
            "weight": self.weight_per_channel,
            "bias": self.weight_per_channel,
            "act": self.act_per_channel,
        }[kind]
        for rule in self.rules:
            if rule.matches(name, kind):
                if rule.skip:
                    return None
                return (
                    rule.bits or bits,
                    per_channel if rule.per_channel is None else rule.per_channel,
                )
        return bits, per_channel

    def rule_bits(self, name: str, kind: str) -> int | None:
        """The bits the first rule matching a tensor names (None: no rule names them)."""
        for rule in self.rules:
            if rule.matches(name, kind):
                return None if rule.skip else rule.bits
        return None

    def resolve_signed(self, name: str, kind: str) -> bool | None:
        """A tensor's signedness as the first matching rule sets it (None: not set by it)."""
        for rule in self.rules:
            if rule.matches(name, kind):
                return None if rule.skip else rule.signed
        return None

    def resolve_learner(self, name: str, kind: str) -> tuple[str, float]:
        """(learner, lr) of a tensor for QAT: from the first matching rule, else the defaults."""
        learner, lr = self.learner, self.lr
        for rule in self.rules:
            if rule.matches(name, kind):
                if rule.learner is not None:
                    learner, lr = (
                        rule.learner,
                        rule.lr
                        if rule.lr is not None
                        else (lr if rule.learner == self.learner else None),
                    )
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


def parse_unsigned(value: object) -> str:
    """``unsigned`` as ``never`` or ``auto`` (``False``/``True`` are accepted as those)."""
    if value is False or value == "never":
        return "never"
    if value is True or value == "auto":
        return "auto"
    shown = repr(value)[:40]
    raise QuantizeError(f"quantize: unsigned {shown} is not one of never, auto (False, True)")


def parse_rounding(value: str | RoundingMode) -> RoundingMode:
    try:
        return RoundingMode(value)
    except ValueError:
        raise QuantizeError(
            f"quantize: rounding {value!r} is not one of "
            + ", ".join(m.value for m in RoundingMode)
        ) from None
