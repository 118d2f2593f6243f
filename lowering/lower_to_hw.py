"""lower-to-hw: nq (nf ops on fake-quantized values) → nh (integer codes, shifts, requant).

The exactness contract (DESIGN.md): running the nq program in float64 and the nh program on
integers, then scaling each nh result by ``2**-exp``, gives bit-identical numbers. Every value
of the nq program that the lowering maps is a dyadic rational ``code * 2**-exp`` with a static
exponent per tensor or per channel, and each pattern computes the same rational exactly:

- fake-quants (``hw/fake_quant.py``): of a constant, folded into codes; of an input, the
  function's nh input; of a runtime value, ``nh.requant``; of an average pool, one exact
  division; of a float-only elementwise op, a lookup table;
- conv / linear / matmul (``hw/contraction.py``): exact integer sums into i32, bias aligned,
  worst case checked against i32;
- arithmetic (``hw/elementwise.py``): add / sub aligned by left shifts, mul adds exponents,
  relu and clamp on codes;
- per-channel parameters (``hw/channel_wise.py``): PReLU as a per-channel multiply on the
  negative side; a batch norm read by a fake-quant as a per-channel integer affine checked
  against the nq kernel on every input code;
- data movement (``hw/data_movement.py``): max pool, concat, reshape, transpose, pad, split and
  nearest upsampling move codes.

Before any pattern, every op is asked what the engine can take (``hw/support.py``, the
same questions ``nanoir.inspect`` asks): an op with no integer form, one the ``target``
(``nanoir.Target``: ops, widths, rounding, on-chip buffer) cannot run, an operand or shape its
integer form cannot take. With ``host=false`` (the default) such an op, like any pattern's
refusal, is an error naming it; with ``host=true`` it stays on the host as float nq ops
between ``nh.to_host`` and ``nh.from_host`` (``hw/host.py``), and the engine runs the rest.

Anything else is reported by name with the reason (``LowerToHwError``). The function's inputs
become the codes of their first fake-quant (recorded in the argument attributes
``nq.bits``/``nq.exp``/``nq.rounding`` so runners can quantize float inputs), and runtime
tensors get ``BCMD`` layouts (``BCM``, ``BC`` for lower ranks), weights ``CCDD``.

    %xq = nq.fake_quant %x {bits = 8, exp = 5}         %acc = nh.conv %x, %w, %b : ... -> i32 <[9, 8]>
    %y = nf.conv %xq, %wq, %bq               ─▶        %y = nh.requant %acc {shift = [5, 4]} -> i8 <4>
    %yq = nq.fake_quant %y {bits = 8, exp = 4}

The patterns run in one forward sweep (``PatternRewriteWalker``, not recursive: every op is
visited once, in program order) with ``GreedyRewritePatternApplier``: the first pattern in
``PATTERNS`` that matches an op lowers it. To lower a new op, write one ``HwPattern`` in the
module of its family (or a new one) and add it to ``PATTERNS``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nanoir.lowering.hw.bicubic import LowerUpsampleBicubic
from nanoir.lowering.hw.channel_wise import FuseBatchNormFakeQuant, LowerBatchNorm, LowerPRelu
from nanoir.lowering.hw.contraction import LowerConv, LowerConvTranspose, LowerLinear, LowerMatmul
from nanoir.lowering.hw.core import (
    HwLowering,
    HwPattern,
    LowerToHwError,
    ReportUnlowered,
)
from nanoir.lowering.hw.data_movement import (
    LowerBlock,
    LowerConcat,
    LowerExpand,
    LowerGather,
    LowerMaxPool,
    LowerPad,
    LowerReshape,
    LowerSplit,
    LowerTranspose,
    LowerUpsampleNearest,
)
from nanoir.lowering.hw.elementwise import (
    LowerAddSub,
    LowerClamp,
    LowerDiv,
    LowerMaxMin,
    LowerMul,
    LowerRelu,
)
from nanoir.lowering.hw.embedding import LowerEmbedding
from nanoir.lowering.hw.fake_quant import (
    FoldConstantFakeQuant,
    FuseAvgPoolFakeQuant,
    FuseLookupTableFakeQuant,
    LowerConstant,
    QuantizeInput,
    RequantFakeQuant,
)
from nanoir.lowering.hw.host import EngineOrHost
from nanoir.lowering.hw.l2_normalize import LowerNormalize
from nanoir.lowering.hw.normalization import LowerNorm
from nanoir.lowering.hw.recurrent import LowerRecurrent
from nanoir.lowering.hw.reduce import LowerArgReduce, LowerCumsum, LowerReduce
from nanoir.lowering.hw.scalars import promote_scalars
from nanoir.lowering.hw.select import LowerCompare, LowerWhere
from nanoir.lowering.hw.softmax import LowerSoftmax
from nanoir.lowering.hw.upsample import (
    LowerMaxPoolIndices,
    LowerMaxUnpool,
    LowerUpsampleBilinear,
    LowerUpsampleZero,
)
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, FunctionType, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    op_type_rewrite_pattern,
)
from xdsl.transforms.dead_code_elimination import region_dce

from nanoir.errors import ArgumentError, bool_argument
from nanoir.target import Target, load_target


class LowerReturn(HwPattern):
    """``func.return`` of nq values → ``func.return`` of their nh values."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReturnOp, rewriter: PatternRewriter) -> None:
        hw = self.begin(op, rewriter)
        results = [hw.get(op, v).value for v in op.arguments]
        rewriter.replace(op, ReturnOp(*results))


PATTERNS: tuple[type[HwPattern], ...] = (
    LowerConstant,
    # Fake-quants: the first that matches wins; RequantFakeQuant takes the rest.
    FoldConstantFakeQuant,
    QuantizeInput,
    FuseAvgPoolFakeQuant,
    FuseLookupTableFakeQuant,
    FuseBatchNormFakeQuant,
    RequantFakeQuant,
    LowerConv,
    LowerConvTranspose,
    LowerLinear,
    LowerMatmul,
    LowerAddSub,
    LowerMaxMin,
    LowerMul,
    LowerDiv,
    LowerRelu,
    LowerClamp,
    LowerPRelu,
    LowerBatchNorm,
    LowerMaxPool,
    LowerConcat,
    LowerReshape,
    LowerTranspose,
    LowerPad,
    LowerSplit,
    LowerUpsampleNearest,
    LowerUpsampleZero,
    LowerUpsampleBilinear,
    LowerMaxPoolIndices,
    LowerMaxUnpool,
    LowerEmbedding,
    LowerBlock,
    LowerExpand,
    LowerGather,
    LowerSoftmax,
    LowerNorm,
    LowerRecurrent,
    LowerCompare,
    LowerWhere,
    LowerReduce,
    LowerArgReduce,
    LowerCumsum,
    LowerUpsampleBicubic,
    LowerNormalize,
    LowerReturn,
)
"""Every lower-to-hw pattern, tried in this order (``ReportUnlowered`` runs after them)."""


def lower_function(
    func: FuncOp,
    *,
    allow_overflow: bool = False,
    target: Target | None = None,
    host: bool = False,
) -> FuncOp:
    """The nh form of one nq function (a new ``func.func``; ``func`` is left emptied); with
    ``host``, what the engine (``target``) cannot run stays on the host (``hw/host.py``)."""
    hw = HwLowering(func, allow_overflow=allow_overflow)
    block = func.body.block
    old_args = list(block.args)
    promote_scalars(func)
    nq_ops = [op for op in block.ops if not isinstance(op, ReturnOp)]
    patterns = [cls(hw) for cls in PATTERNS] + [ReportUnlowered(hw)]
    engine_or_host = EngineOrHost(
        hw, GreedyRewritePatternApplier(patterns, dce_enabled=False), func, target, host
    )
    walker = PatternRewriteWalker(engine_or_host, apply_recursively=False)
    try:
        walker.rewrite_region(func.body)
    except LowerToHwError as e:
        # The walker attaches a dump of the whole module; the message already names the op.
        if hasattr(e, "__notes__"):
            del e.__notes__
        raise
    missing = [a for a in old_args if a not in hw.input_index]
    if missing:
        raise LowerToHwError(
            "lower-to-hw: function input "
            f"%{missing[0].name_hint or missing[0].index} is never "
            "fake-quantized; hw inputs are codes"
        )
    order = sorted(old_args, key=lambda a: hw.input_index[a])
    if [a.index for a in order] != list(range(len(old_args))):
        raise LowerToHwError("lower-to-hw: function inputs are quantized out of order")
    # Every nq value now has its nh form; the nq ops and inputs go (host islands stay).
    kept = engine_or_host.kept_ops()
    for op in reversed(nq_ops):
        if op in kept:
            continue
        op.detach()
        op.erase()
    for arg in old_args:
        block.erase_arg(arg)
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    ftype = FunctionType.from_lists([a.type for a in block.args], [r.type for r in ret.arguments])
    new = FuncOp(
        func.sym_name.data, ftype, func.detach_region(func.body), arg_attrs=ArrayAttr(hw.arg_attrs)
    )
    # Constants that were only stepping stones (a bias before its alignment) go away.
    region_dce(new.body)
    return new


def lower_to_hw(
    module: ModuleOp,
    *,
    allow_overflow: bool = False,
    target: Target | str | os.PathLike[str] | None = None,
    host: bool = False,
) -> ModuleOp:
    """Lower every function of an nq program to nh, in place; returns the module.

    ``target`` (a ``nanoir.Target`` or the path of its TOML file) is the engine: what it
    cannot run is refused, naming the op, or with ``host=True`` stays float on the host
    between ``nh.to_host`` / ``nh.from_host`` (each host op says why in ``nh.host``)."""
    if not isinstance(module, ModuleOp):
        raise ArgumentError(f"module must be a program (a ModuleOp), got {type(module).__name__}")
    host = bool_argument("host", host)
    target = target_argument(target)
    for op in list(module.body.block.ops):
        if isinstance(op, FuncOp):
            new = lower_function(op, allow_overflow=allow_overflow, target=target, host=host)
            module.body.block.insert_op_before(new, op)
            op.detach()
            op.erase(safe_erase=False)
    return module


@dataclass(frozen=True)
class LowerToHwPass(ModulePass):
    """Lower a quantized (nq) program to integer nh ops, exactly."""

    name = "lower-to-hw"

    allow_overflow: bool = False
    """Accept accumulators whose worst case may exceed i32 (otherwise an error)."""
    host: bool = False
    """Keep what the engine cannot run float on the host (``nh.to_host``/``nh.from_host``
    around each host island) instead of refusing it."""
    hw_target: str | None = None
    """A target TOML file (``nanoir.Target``): the ops, widths and buffer of the engine."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_to_hw(op, allow_overflow=self.allow_overflow, target=self.hw_target, host=self.host)


def target_argument(target: object) -> Target | None:
    """``target=`` as a :class:`~nanoir.target.Target`: one, a TOML file's path, or None."""
    if target is None or isinstance(target, Target):
        return target
    if isinstance(target, str | os.PathLike):
        return load_target(target)
    raise ArgumentError(
        f"target must be a nanoir.Target or the path of a target file, got {type(target).__name__}"
    )


__all__ = ["PATTERNS", "LowerToHwError", "LowerToHwPass", "lower_to_hw", "target_argument"]
