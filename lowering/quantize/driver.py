"""The quantize pass: the phases of ``nanoir.lowering.quantize`` in order, on one function.

:func:`quantize_function` finds the targets (``targets``), takes imported exponents
(``imported``), calibrates weights and activations (``calibration``), inserts the fake-quants,
quantizes recurrent ops (``recurrent``), settles joins (``joins``), corrects biases
(``bias_correction``), caps each bias at its accumulator and makes lone batch norms dyadic
(``batch_norm``). :func:`quantize` and :class:`QuantizePass` are its Python and pass fronts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import constant_array, dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.dialects.traits import LookupTable
from nanoir.lowering.fold_bn import fold_bn as fold_batch_norms
from nanoir.lowering.hw.support import check_before_calibrating
from nanoir.lowering.lower_to_hw import target_argument
from nanoir.lowering.quantize.batch_norm import make_dyadic
from nanoir.lowering.quantize.bias_correction import add_zero_biases, correct_biases, float_kernels
from nanoir.lowering.quantize.calibration import (
    Reduce,
    calibrate,
    exp_shape,
    load_calibration,
    tensor_exps,
)
from nanoir.lowering.quantize.check import MIN_SQNR_DB, check_after_quantizing, min_sqnr_argument
from nanoir.lowering.quantize.imported import checked_exponents, load_exponents
from nanoir.lowering.quantize.joins import settle
from nanoir.lowering.quantize.masks import fold_infinite_masks
from nanoir.lowering.quantize.products import cap_slopes
from nanoir.lowering.quantize.recurrent import (
    has_recurrent,
    pop_internal,
    quantize_recurrent,
    recurrent_bias_cap,
    settle_zero_rows,
)
from nanoir.lowering.quantize.rules import (
    QuantConfig,
    QuantizeError,
    QuantRule,
    parse_rounding,
)
from nanoir.lowering.quantize.targets import (
    WEIGHTED,
    Target,
    find_targets,
)
from nanoir.runtime.interpreter import find_function
from nanoir.runtime.numerics import quant
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from nanoir.errors import ArgumentError, batches_argument, bool_argument

__all__ = [
    "CONSTANT_ROUNDING",
    "Exponents",
    "QuantizePass",
    "accumulator_cap",
    "nh_exps",
    "quantize",
    "quantize_function",
    "rounded_offline",
]


CONSTANT_ROUNDING = quant.RoundingMode.HALF_EVEN
"""How bias correction's programs round what is rounded offline (:func:`rounded_offline`),
whatever ``rounding`` says: the nearest code costs the hardware nothing there, while ``trunc``
on a weight shrinks every product toward zero, a gain error per channel that no bias can
absorb, and on a sigmoid's table loses half an output step on every value (measured on
bench_ptq's nets with ``trunc``: KWS-1D +3.8 dB, ResNet-18 +0.5 from the weights).
``bias_correction=False`` keeps NanoEngine-PyTorch's rounding everywhere."""


def rounded_offline(kind: str, value: SSAValue) -> bool:
    """Whether a fake-quant of ``value`` (a target of ``kind``) rounds offline, into codes
    lower-to-hw writes as constants: a weight, bias or other constant, and the output of an
    op that lowers to a lookup table (``LookupTable``: sigmoid, tanh, hardswish, ...)."""
    if kind != "act":
        return True
    return isinstance(value, OpResult) and value.op.has_trait(LookupTable)


def _constant_array(value: SSAValue) -> np.ndarray:
    data = constant_array(value)
    assert data is not None, "a quantized constant is an nf.constant"
    return data.astype(np.float64)


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
    out_c = (
        nf.tensor_shape(op.result)[1]
        if isinstance(op, nf.ConvTransposeOp)
        else nf.tensor_shape(op.weight)[0]
    )
    if isinstance(op, nf.ConvTransposeOp) and w_exps.size > 1:
        w_exps = np.tile(w_exps.reshape(-1), groups)  # [O/g] along axis 1, the same per group
    return accumulator_cap(
        fx.bits.value.data,
        dense_to_numpy(fx.exp).astype(np.int64),
        fw.bits.value.data,
        w_exps,
        out_c,
        groups,
    )


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
    # a scalar (rank 0: a Python float the program multiplies by) takes a rank-0 exponent,
    # the only shape that broadcasts against it (the verifier refuses [1])
    scalar = isinstance(value.type, TensorType) and not value.type.get_shape() and exps.size == 1
    fq = FakeQuantOp(
        value,
        target.bits,
        exp_attr(exps.reshape(-1).tolist(), [] if scalar else list(exps.shape)),
        target.rounding or config.rounding,
        signed=target.signed,
    )
    if target.origin:
        fq.origin = StringAttr(target.origin)
    if isinstance(value, BlockArgument):
        block = value.block
        assert isinstance(block, Block)
        first = block.first_op
        while isinstance(first, FakeQuantOp) and isinstance(first.input, BlockArgument):
            first = first.next_op  # after earlier inputs' fake-quants: inputs stay in order
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
options for that tensor, and ``axis`` must be the tensor's channel axis). Each is the user's
statement, used as given: an integer in -60..60, else a ``QuantizeError`` naming the tensor and
the value (``imported.checked_exponents``), never clamped."""


def _import_record(t: Target, record: np.ndarray | dict[str, Any]) -> np.ndarray:
    """Apply a checked record (``checked_exponents``) to ``t``; return its exponents."""
    if not isinstance(record, dict):
        return record
    if "bits" in record:
        t.bits = record["bits"]
    if "rounding" in record:
        t.rounding = record["rounding"]
    if "axis" in record:
        t.per_channel = record["axis"] is not None
        if t.per_channel and record["axis"] != t.channel_axis:
            raise QuantizeError(
                f"quantize: {t.name} is per channel along axis "
                f"{t.channel_axis}, not {record['axis']}"
            )
    return record["exp"]


def quantize_function(
    func: FuncOp,
    calibration: Iterable[Any] | None,
    config: QuantConfig,
    exponents: Exponents | None = None,
    *,
    progress: bool | None = None,
    bias_correction: bool | None = None,
    reduce: Reduce | None = None,
    float_outputs: list[list[np.ndarray]] | None = None,
) -> list[Target]:
    """Insert fake-quants into ``func``; returns what was quantized, with its exponents.

    ``bias_correction`` (None: on when there is calibration data) corrects every conv/linear
    bias for the mean quantization error at its output (``bias_correction``). ``reduce`` merges
    the calibration statistics of several processes (``calibration.Reduce``).
    ``float_outputs`` (a list) receives the float program's outputs on each calibration batch
    where calibration runs it (``calibrate``), for the check (``check``)."""
    exponents = checked_exponents(exponents)
    names = set(exponents)
    fold_infinite_masks(func)  # (no grid holds x + -inf's constant; a selection picks it)
    correct = calibration is not None and bias_correction is not False
    if correct:
        calibration = list(calibration)  # read twice: calibrating, then correcting
        add_zero_biases(func, config)
    targets = find_targets(func, config)
    if correct:  # what is rounded offline rounds to the nearest code (CONSTANT_ROUNDING)
        for t in targets:
            if rounded_offline(t.kind, t.value):
                t.rounding = CONSTANT_ROUNDING
    for t in targets:
        if t.name in exponents:
            # Imported (QAT) exponents decide per tensor or per channel by their count
            # (or by the record's axis).
            record = exponents.pop(t.name)
            k = _import_record(t, record)
            if not (isinstance(record, dict) and "axis" in record):
                t.per_channel = k.size > 1
            shape = exp_shape(t)
            if t.channel_axis is None and k.size > 1 or k.size != int(np.prod(shape)):
                raise QuantizeError(
                    f"quantize: {k.size} exponents given for {t.name}, which "
                    f"has {int(np.prod(shape))} channels"
                )
            t.exps = k.reshape(shape)
    internal = pop_internal(func, exponents)  # a recurrent op's gates, cell, hidden
    if calibration is not None and has_recurrent(func):
        calibration = list(calibration)  # read twice: calibrating, then the recurrent cells
    if exponents:
        raise QuantizeError(
            "quantize: exponents given for unknown tensors: " + ", ".join(sorted(exponents))
        )
    measured = [t for t in targets if t.exps is None and t.kind in ("weight", "const")]
    for t in measured:
        x = _constant_array(t.value)
        t.exps = tensor_exps(
            x, t.bits, t.channel_axis, config.calibrator, t.rounding or config.rounding
        ).reshape(exp_shape(t))
    settle_zero_rows(measured)  # a recurrent weight's zero rows (recurrent)
    cap_slopes(func, targets, config.rounding, names)  # a PReLU's slope fits i32 (products)
    for t in targets:  # a softmax's output lies in [0, 1]: its exponent is that range's
        if t.exps is None and t.kind == "act" and isinstance(t.value.owner, nf.SoftmaxOp):
            ones = np.ones(exp_shape(t))
            t.exps = quant.exp_from_absmax(ones, t.bits, signed=getattr(t, "signed", True))
    missing = [t for t in targets if t.exps is None and t.kind == "act"]
    # the float outputs of the conv and linear layers, kept by calibration's first run for its
    # second and for bias correction
    kept: dict[SSAValue, list[np.ndarray]] | None = {
        op.results[0]: [] for op in func.walk() if isinstance(op, WEIGHTED)
    }
    if missing:
        if calibration is None:
            raise QuantizeError(
                "quantize: activation exponents need calibration data (or imported "
                f"exponents); none given for {', '.join(t.name for t in missing[:5])}"
                + (" ..." if len(missing) > 5 else "")
            )
        calibrate(
            func,
            missing,
            calibration,
            config,
            progress=progress,
            reduce=reduce,
            outputs=float_outputs,
            keep=kept,
        )
    if not correct:
        kept = None  # (nothing reads them now)
    # The float program's kernels, built before fake-quants change what some ops compute.
    kernels = float_kernels(func) if correct else {}
    rewriter = Rewriter()
    imported = [id(t) for t in targets if t.name in names and t.kind != "bias"]
    inserted: dict[int, FakeQuantOp] = {}
    for t in targets:
        if t.kind != "bias":
            inserted[id(t)] = _insert(t, config, rewriter)
    if has_recurrent(func):
        # The recurrent cells' grids are measured by running the program: first the join
        # and zero-range rules (a norm elsewhere whose input was 0 on every batch, exponent
        # 60, cannot run; a cell measured on exponents settle then moves would be stale).
        settle(func, [], [inserted[i] for i in imported], config.rounding)
    quantize_recurrent(func, calibration, config, internal)
    biases = [t for t in targets if t.kind == "bias"]
    for t in biases:
        if t.exps is None:
            t.exps = tensor_exps(
                _constant_array(t.value),
                t.bits,
                t.channel_axis,
                config.calibrator,
                t.rounding or config.rounding,
            ).reshape(exp_shape(t))
    # Joins and accumulators that could not lower get coarser exponents (joins).
    settle(func, biases, [inserted[i] for i in imported], config.rounding)
    if correct:
        assert calibration is not None
        if correct_biases(
            func,
            biases,
            calibration,
            config,
            imported=names,
            bias_cap=_capped_bias_exps,
            float_kernels=kernels,
            reduce=reduce,
            float_outputs=kept,
        ):
            # The corrected values' exponents, settled and capped as any bias's.
            settle(func, biases, [inserted[i] for i in imported], config.rounding)
    for t in targets:
        if t.kind != "bias":
            t.exps = dense_to_numpy(inserted[id(t)].exp).astype(np.int64).reshape(exp_shape(t))
    for t in biases:
        assert t.exps is not None
        t.exps = _capped_bias_exps(t, t.exps)
        _insert(t, config, rewriter)
    make_dyadic(func, {inserted[i] for i in imported})  # lone BNs lower always (batch_norm)
    return targets


def _capped_bias_exps(t: Target, exps: np.ndarray) -> np.ndarray:
    """A bias's exponents ``exps`` capped at the accumulator of every op adding it."""
    users = [
        u.operation for u in t.value.uses if isinstance(u.operation, WEIGHTED) and u.index == 2
    ]
    for user in users:
        cap = _accumulator_cap(user)
        if cap is not None and t.bits > 1:
            # A per-tensor bias takes the smallest of per-channel caps.
            cap = cap.min() if exps.size == 1 else cap
            exps = np.minimum(exps.reshape(-1), cap).reshape(exps.shape)
    cap = recurrent_bias_cap(t.value)  # the product a recurrent op adds it to
    if cap is not None and t.bits > 1:
        cap = cap.min() if exps.size == 1 else cap
        exps = np.minimum(exps.reshape(-1), cap).reshape(exps.shape)
    return exps


def quantize(
    module: ModuleOp,
    calibration: Iterable[Any] | None = None,
    *,
    config: QuantConfig | None = None,
    exponents: Exponents | None = None,
    function: str | None = None,
    progress: bool | None = None,
    bias_correction: bool | None = None,
    target: Any = None,
    host: bool = False,
    fold_bn: bool = True,
    strict: bool = False,
    min_sqnr: float = MIN_SQNR_DB,
    **options: Any,
) -> list[Target]:
    """Quantize a float (nf) program in place: ``nanoir.quantize(module, batches, act_bits=8)``.

    ``calibration`` is an iterable of batches (arrays, tuples of arrays, torch tensors or
    ``(inputs, labels)`` pairs from a DataLoader); ``options`` are :class:`QuantConfig` fields.
    ``bias_correction`` (default: on when ``calibration`` is given) shifts each conv/linear
    bias by the mean quantization error at its output on the calibration data
    (``bias_correction``); ``False`` gives the uncorrected program. ``target`` (a
    ``nanoir.Target`` or its TOML file) is the engine the program will lower to: an op it
    cannot run is refused before anything is calibrated, unless ``host=True`` (the op will
    run on the host: ``lower_to_hw(..., host=True)``).

    Every batch norm that folds into the conv or linear before it is folded first
    (``nanoir.fold_bn``; ``fold_bn=False`` keeps them). With calibration data, the quantized
    program's outputs are checked against the float program's on it (``check``): an output all
    zero, the same for every input, or below ``min_sqnr`` dB SQNR gives a
    ``nanoir.QuantizationWarning`` naming it, the layer where SQNR falls most and what to try;
    ``strict=True`` makes that a ``QuantizeError``.
    """
    fold_bn = bool_argument("quantize: fold_bn", fold_bn)
    strict = bool_argument("quantize: strict", strict)
    min_sqnr = min_sqnr_argument(min_sqnr)
    if bias_correction is not None and not isinstance(bias_correction, bool | np.bool_):
        raise ArgumentError(
            f"quantize: bias_correction must be True, False or None, got {bias_correction!r}"
        )
    if calibration is not None:
        batches_argument("calibration", calibration)
    elif strict:
        raise ArgumentError(
            "quantize: strict=True checks the quantized program on the calibration data; "
            "give calibration batches"
        )
    if config is None:
        unknown = sorted(set(options) - {f.name for f in fields(QuantConfig)})
        if unknown:
            raise ArgumentError(
                f"quantize: unknown option(s) {', '.join(unknown)} (options: "
                + ", ".join(f.name for f in fields(QuantConfig))
                + ")"
            )
        rules = tuple(
            r if isinstance(r, QuantRule) else QuantRule.parse(r) for r in options.pop("rules", ())
        )
        if "rounding" in options:
            options["rounding"] = parse_rounding(options["rounding"])
        config = QuantConfig(rules=rules, **options)
    elif options:
        raise QuantizeError("quantize: pass either config= or keyword options, not both")
    func = find_function(module, function)
    if fold_bn:
        fold_batch_norms(func)
    if target is not None and not host:  # before calibrating: what the engine cannot run
        engine = target_argument(target)
        assert engine is not None
        check_before_calibrating(func, find_targets(func, config), config.rounding, engine)
    if calibration is not None:  # (after the check above: a refusal reads no batch)
        calibration = list(calibration)  # read by calibration and by the check
    floats: list[list[np.ndarray]] = []
    targets = quantize_function(
        func,
        calibration,
        config,
        exponents,
        progress=progress,
        bias_correction=None if bias_correction is None else bool(bias_correction),
        float_outputs=floats,
    )
    if calibration is not None:
        check_after_quantizing(func, calibration, floats, min_sqnr=min_sqnr, strict=strict)
    return targets


@dataclass(frozen=True)
class QuantizePass(ModulePass):
    """Insert power-of-two fake-quants (the nq level) into a float program."""

    name = "quantize"

    calibration: str | None = None
    """A .npy (single input) or .npz (one array per input) file of calibration inputs (a
    regular file: no FIFO, device or directory)."""
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
    calibrator: str = "mse"
    """``mse`` (least squared error power of two, the default) or ``absmax`` (NanoEngine)."""
    rounding: str = "trunc"
    """trunc (NanoEngine), floor, half_up or half_even."""
    function: str | None = None
    """The function to quantize (default: the only one, or @main)."""
    exponents: str | None = None
    """A JSON file ``{"tensor name": k or [k per channel]}`` of imported (QAT) exponents: a
    regular file of at most 16 MiB, each exponent an integer in -60..60."""
    bias_correction: bool = True
    """Correct each conv/linear bias for the mean quantization error at its output on the
    calibration data (no effect without ``calibration``)."""
    unsigned: str = "never"
    """``never`` (signed codes) or ``auto``: unsigned codes for activations known non-negative."""
    fold_bn: bool = True
    """Fold every batch norm that folds into the conv or linear before it first (``fold-bn``)."""
    strict: bool = False
    """A collapsed output (all zero, constant, or below ``min_sqnr`` against float on the
    calibration data) is an error rather than a warning on stderr."""
    min_sqnr: float | int = MIN_SQNR_DB
    """The least SQNR (dB) of each output against float on the calibration data."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.batch_size <= 0:
            raise QuantizeError(f"quantize: batch_size must be positive, got {self.batch_size}")
        rounding = parse_rounding(self.rounding)
        config = QuantConfig(
            weight_bits=self.weight_bits,
            bias_bits=self.bias_bits,
            act_bits=self.act_bits,
            weight_per_channel=self.weight_per_channel,
            act_per_channel=self.act_per_channel,
            rules=tuple(QuantRule.parse(r) for r in self.rules),
            calibrator=self.calibrator,
            rounding=rounding,
            unsigned=self.unsigned,
        )
        batches = (
            None
            if self.calibration is None
            else load_calibration(self.calibration, self.batch_size)
        )
        imported = None if self.exponents is None else load_exponents(self.exponents)
        quantize(
            op,
            batches,
            config=config,
            exponents=imported,
            function=self.function,
            progress=False,
            bias_correction=self.bias_correction,
            fold_bn=self.fold_bn,
            strict=self.strict,
            min_sqnr=self.min_sqnr,
        )
