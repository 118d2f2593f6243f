"""Quantization-aware training (QAT): learnable power-of-two exponents in torch, handed to nq.

    qat = nanoir.qat.prepare(model, (x,), weight_bits=4, rules=("fc.weight=1",))
    nanoir.qat.calibrate(qat, batches)          # exponents start from the PTQ result
    nanoir.qat.train(qat, loader, epochs=15)    # or any torch training loop
    module = nanoir.qat.convert(qat)            # nf + nq.fake_quant; nanoir.run == qat.eval()
    hw = nanoir.lower_to_hw(module.clone())

How it works: :func:`prepare` imports the model with the torch frontend, folds batch norm
(``fold-bn``) and builds a :class:`QATModule`, an ``nn.Module`` that interprets that folded nf
program with torch ops. Its parameters are the program's named constants (the folded weights
and biases, and any other named parameter); the fake-quants sit where
:func:`nanoir.lowering.quantize.find_targets` puts them for the same options, so the placement,
bits, per-channel axes, ``skip`` rules, rounding and the bias exponent cap are ``quantize``'s by
construction (a ``conv_transpose`` weight ``[C, O/g, *K]`` has its exponents per output channel
along axis 1, the same for every group, and its bias cap tiles them per group). :func:`convert` writes the trained constants back into the nf program and runs
``quantize`` with the learned exponents.

**Batch norm** is folded before QAT: the module trains the folded conv/linear weights and
biases, and evaluates the same function in training and eval mode (no batch statistics; the
forward differs only by the exponent learners' updates). This is what the deployed integer
program computes, so there is no train/deploy mismatch; the price is that BN's normalisation
no longer helps the optimiser, which matters little when fine-tuning a trained float net.

**Forward** (the nq semantics, :func:`nanoir.runtime.numerics.quant.fake_quant`): with exponent ``k``,
b > 1: ``clamp(round(x * 2**k), -2**(b-1), 2**(b-1) - 1) / 2**k`` with the rounding mode
(trunc, floor, half_up, half_even); b = 1: ``(x >= 0 ? 1 : -1) * 2**k``. In float64 every
operation is exact where ``nanoir.run`` is exact, and rounds where it rounds (a conv's bias is
added to the finished sum, as nanoir's kernel adds it: with an input exponent of 60, from
calibrating on zeros, sum and bias need more than 53 bits), so ``qat.eval()(x.double())``
equals ``nanoir.run(convert(qat), x)`` bit for bit. Ops the exactness does not cover (``sigmoid``,
``tanh``: transcendental) take their forward value from nanoir's own NumPy kernel (the
gradient is torch's).

**Backward**: values pass straight through (STE) with NanoEngine's mask: b > 1, where the
clamp did not change the rounded code; b = 1, where ``|x| <= 1`` (NanoEngine's rule; the
``lsq`` learner uses ``|x| <= 2**(k+1)``, which follows the scale).

**Exponent learners**, per tensor and per rule (``learner=`` and ``lr=`` options, or
``/ema:LR``, ``/lsq:LR`` in a rule; see :class:`~nanoir.lowering.quantize.QuantRule`):

- ``ema`` (NanoEngine's ``DyQuantize``): a float scale ``s`` per tensor or channel, exponent
  ``k = floor(log2 s)``. Init: b > 1, ``s = 2**(b-1)``; b = 1, ``s = n**-0.5`` with ``n`` the
  elements per channel. Each training forward, before quantizing: ``a = absmax`` (per channel
  over the other dims, batch included, or global), target ``t = 2**(b-1) / a`` (b > 1) or
  ``t = a`` (b = 1); ``t *= 0.9`` where ``t > 2``, ``t /= 0.9`` where ``t < 0.5``;
  ``s = (1 - lr) s + lr t`` except where ``a < 1e-6`` (kept). No gradient.
- ``lsq`` (learned): a continuous exponent parameter ``e`` (``-log2`` of the step; b = 1:
  ``log2`` of the magnitude), ``k = round(e)`` with a straight-through gradient, and the LSQ
  gradient of the fake-quant with respect to ``k``: b > 1, ``-ln2 (q - x)`` inside the range and
  ``-ln2 q`` where clamped; b = 1, ``ln2 q``; scaled by LSQ's ``1 / sqrt(n qmax)``. ``lr`` is the
  learning rate of ``e`` in :meth:`QATModule.param_groups` (and :func:`train`).

Exponents are clamped to ``CALIB_EXP_RANGE`` (-60..60), as ``quantize`` does.

Imports torch (the ``torch`` extra); ``import nanoir`` does not import this module.
Abbreviations: ema = exponential moving average, lsq = learned step size quantization
(Esser et al. 2020), ste = straight-through estimator, ptq = post-training quantization.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    ModuleOp,
    StringAttr,
)
from xdsl.dialects.func import ReturnOp
from xdsl.ir import OpResult, SSAValue

import nanoir.qat.distributed as distributed
import nanoir.qat.low_bits as low_bits
from nanoir.context import make_context
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import DataMovement, Quantized, grid_operands
from nanoir.errors import (
    ArgumentError,
    batches_argument,
    bool_argument,
    int_argument,
    path_argument,
)
from nanoir.files import check_output_path, write_atomically
from nanoir.frontend import from_torch
from nanoir.lowering import quantize as qz
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.quantize import (
    add_zero_biases,
    checked_batch_array,
    make_dyadic,
    spelled_shape,
)
from nanoir.qat.arguments import FLOAT32_MAX, rate_argument, rules_argument, training_batch
from nanoir.qat.batch_norm import BatchNormStep
from nanoir.qat.batch_norm import input_grid as bn_input_grid
from nanoir.qat.checkpoint import load_checkpoint, save_checkpoint
from nanoir.qat.joins import JoinRules
from nanoir.qat.quantizer import (
    QATError,
    Quantizer,
)
from nanoir.qat.recurrent import RecurrentStep, internal_records, set_internal
from nanoir.qat.steps import IntegerAlgorithmStep, NormStep, build_step, tensor_key, value_shape
from nanoir.runtime.interpreter import find_function

_THROUGH = (nf.ReshapeOp, nf.PadOp, nf.UpsampleNearestOp)
"""Ops a bias cap looks through to find a layer input's fake-quant (as ``quantize``)."""


def _current_k(module: QATModule, key: str, applied: bool) -> set[int]:
    """A quantizer's integer exponents at this forward: as applied (``last_k``, the
    quantizer has run), or its learner's with this forward's join-rule tie (it runs after)."""
    q = module.quantizers[key]
    if applied:
        return set() if q.last_k is None else set(q.last_k.reshape(-1).long().tolist())
    k = q.int_exponents().astype(np.float64)
    tie = module.ties.get(key)
    if tie is not None:
        t = np.asarray(tie, dtype=np.float64).reshape(k.shape)
        k = np.where(np.isnan(t), k, t)
    return {int(v) for v in k.reshape(-1)}


def _grid(module: QATModule, keys: list[str] | None, applied: bool) -> Quantized | None:
    """The per-tensor grid of the quantizers ``keys`` (all on one exponent, as
    ``source_quantized`` asks of a concat's inputs), or None."""
    if not keys:
        return None
    qs = [module.quantizers[k] for k in keys]
    ks = set().union(*(_current_k(module, k, applied) for k in keys))
    if len(ks) != 1 or len({(q.bits, q.signed) for q in qs}) != 1:
        return None
    return Quantized(qs[0].bits, ks.pop(), qs[0].signed)


def _algorithm_grids(
    module: QATModule, in_slot: int, out_slot: int
) -> Callable[[], tuple[Quantized, Quantized] | None]:
    """The input's and output's per-tensor quantization of an ``IntegerAlgorithm`` op at
    this forward (the input quantizers' exponents as applied, found through data movement as
    ``source_quantized`` finds them; the output's current one with this forward's join-rule
    tie), or None where either is missing or per channel: ``IntegerAlgorithmStep.grids``."""

    def grids() -> tuple[Quantized, Quantized] | None:
        kout = module.quant_of.get(out_slot)
        qi = _grid(module, module.alg_source.get(in_slot), True)
        qo = _grid(module, None if kout is None else [kout], False)
        if qi is None or qo is None or qi.bits < 2 or qo.bits < 2:
            return None
        return qi, qo

    return grids


def _operand_grid(
    module: QATModule, slot: int, alg_source: dict[int, list[str]]
) -> tuple[np.ndarray, int] | None:
    """An operand's applied exponents (one, or per row) and bits: its own quantizer's (a
    weight or bias), else the per-tensor grid it is on through data movement."""
    key = module.quant_of.get(slot) or module.bias_of.get(slot)
    q = None if key is None else module.quantizers[key]
    if q is None or q.last_k is None:
        grid = _grid(module, alg_source.get(slot), True)
        if grid is None or grid.bits < 2 or not grid.signed:
            return None
        return np.array([grid.exp], np.int64), grid.bits
    if q.bits < 2 or not q.signed:
        return None
    return q.last_k.cpu().numpy().astype(np.int64).reshape(-1), q.bits


def _recurrent_grids(
    module: QATModule, args: list[int], alg_source: dict[int, list[str]]
) -> Callable[[], list[tuple[np.ndarray, int]] | None]:
    """Every operand's applied exponents and bits at this forward (the input and states per
    tensor, through data movement; weights and biases per row): ``RecurrentStep.grids``."""

    def grids() -> list[tuple[np.ndarray, int]] | None:
        out = [_operand_grid(module, slot, alg_source) for slot in args]
        return None if any(g is None for g in out) else out  # type: ignore[return-value]

    return grids


def _recurrent_caps(
    module: QATModule, step: RecurrentStep, args: list[int], alg_source: dict[int, list[str]]
) -> dict[str, Callable[[], torch.Tensor | None]]:
    """The bias cap of each bias a recurrent step reads, by quantizer key."""

    def last_k(operand: int) -> np.ndarray | None:
        grid = _operand_grid(module, args[operand], alg_source)
        return None if grid is None else grid[0]

    caps: dict[str, Callable[[], torch.Tensor | None]] = {}
    first = 1 + step.has_h0 + step.has_c0
    for j, slot in enumerate(args[first:]):
        key = module.bias_of.get(slot)
        if key is not None:
            caps[key] = (lambda j: lambda: step.bias_cap(j, last_k))(j)
    return caps


def _norm_grids(
    module: QATModule, args: list[int], out_slot: int
) -> Callable[[], tuple[Quantized, Quantized, Quantized, Quantized, str] | None]:
    """``_algorithm_grids`` and the weight's and bias's grids (fake-quantized constants, per
    tensor, as applied) and the output's rounding mode: ``NormStep.grids``."""
    inout = _algorithm_grids(module, args[0], out_slot)

    def grids() -> tuple[Quantized, Quantized, Quantized, Quantized, str] | None:
        ends = inout()
        wkey, bkey = module.quant_of.get(args[1]), module.quant_of.get(args[2])
        qw = _grid(module, None if wkey is None else [wkey], True)
        qb = _grid(module, None if bkey is None else [bkey], True)
        if ends is None or qw is None or qb is None:
            return None
        rounding = module.quantizers[module.quant_of[out_slot]].rounding
        return (*ends, qw, qb, rounding)

    return grids


class QATModule(nn.Module):
    """A trainable torch module computing a folded nf program with ``quantize``'s fake-quants.

    ``params`` holds the named constants (keys are the names with dots replaced; see
    :meth:`tensor`), ``quantizers`` one :class:`Quantizer` per fake-quant. Inputs are torch
    tensors or NumPy arrays; the module computes in the inputs' float dtype (float32 for
    training, float64 for the bit-exact check against ``nanoir.run(convert(...))``).

    How the program maps onto them, read by this module's functions and the steps' grids
    (never set from outside): ``param_key`` (a constant's name -> its parameter's key),
    ``quant_of`` / ``bias_of`` (a value's slot -> its quantizer's key), ``bias_users`` (the
    layers adding each bias), ``alg_source`` (a slot -> the quantizers found through data
    movement), ``joins`` (the join rules), ``ties`` (their exponents at the latest forward)
    and ``recurrent_steps``.
    """

    def __init__(self, module: ModuleOp, config: qz.QuantConfig, function: str | None = None):
        super().__init__()

        self.nf_module = module
        self.config = config
        self.function = function
        func = find_function(module, function)
        self._func_name = func.sym_name.data
        targets = qz.find_targets(func, config)
        self.targets = {t.value: t for t in targets}
        self.params = nn.ParameterDict()
        self.quantizers = nn.ModuleDict()
        self.param_key: dict[str, str] = {}
        self._const_buffers: dict[int, str] = {}
        taken_p: set[str] = set()
        taken_q: set[str] = set()

        slot: dict[SSAValue, int] = {}

        def slot_of(v: SSAValue) -> int:
            return slot.setdefault(v, len(slot))

        self._arg_slots = [slot_of(a) for a in func.body.block.args]
        self.input_shapes = [tuple(value_shape(a)) for a in func.body.block.args]
        """The program's input shapes (``DYNAMIC_INDEX`` where any size goes)."""
        self._steps: list[tuple[str, Any, list[int], list[int]]] = []
        self.quant_of: dict[int, str] = {}  # slot -> quantizer key (non-bias)
        self.bias_of: dict[int, str] = {}  # bias slot -> quantizer key
        self.bias_users: dict[str, list[tuple[int, int, int, int, bool]]] = {}
        self.recurrent_steps: list[RecurrentStep] = []  # nanoir.qat.recurrent
        self._recurrent_caps: dict[str, Callable[[], torch.Tensor | None]] = {}
        source: dict[int, str] = {}  # slot -> quantizer key it comes from
        # slot -> the quantizers source_quantized finds it on (through every data movement)
        alg_source: dict[int, list[str]] = {}
        self._result_slots: list[int] = []
        self._nbuf = 0
        key_of: dict[SSAValue, str] = {}  # quantized value -> quantizer key (join rules)

        def add_quantizer(t: qz.Target) -> str:
            key = tensor_key(t.name, taken_q)
            shape = qz.exp_shape(t)
            vshape = [d for d in value_shape(t.value)]
            if t.kind == "act":
                vshape = vshape[1:]
            total = int(np.prod([max(d, 1) for d in vshape])) if vshape else 1
            channels = int(np.prod(shape))
            learner, lr = config.resolve_learner(
                t.rule_name or t.name, "act" if t.kind == "const" else t.kind
            )
            self.quantizers[key] = Quantizer(
                t.name,
                t.kind,
                t.bits,
                shape,
                t.channel_axis,
                config.rounding,
                learner,
                lr,
                total // channels,
                t.signed,
            )
            key_of[t.value] = key
            return key

        for arg in func.body.block.args:
            if arg in self.targets:
                key = add_quantizer(self.targets[arg])
                self.quant_of[slot_of(arg)] = key
                source[slot_of(arg)] = key
                alg_source[slot_of(arg)] = [key]
        for op in func.body.block.ops:
            if isinstance(op, ReturnOp):
                self._result_slots = [slot_of(v) for v in op.arguments]
                self.output_shapes = [tuple(value_shape(v)) for v in op.arguments]
                continue
            if isinstance(op, FakeQuantOp):
                raise QATError("nanoir.qat: the program is already quantized (nq.fake_quant)")
            outs = [slot_of(r) for r in op.results]
            if isinstance(op, nf.ConstantOp):
                value = np.array(dense_to_numpy(op.value), dtype=np.float32)
                t = self.targets.get(op.result)
                if op.sym_name is not None and value.dtype.kind == "f":
                    key = tensor_key(op.sym_name.data, taken_p)
                    self.param_key[op.sym_name.data] = key
                    self.params[key] = nn.Parameter(torch.from_numpy(value))
                    self._steps.append(("param", key, [], outs))
                else:
                    name = f"const{self._nbuf}"
                    self._nbuf += 1
                    self.register_buffer(
                        name, torch.from_numpy(np.array(dense_to_numpy(op.value), dtype=np.float64))
                    )
                    self._steps.append(("buffer", name, [], outs))
                if t is not None:
                    key = add_quantizer(t)
                    if t.kind == "bias":
                        self.bias_of[outs[0]] = key
                        self.bias_users[key] = []
                    else:
                        self.quant_of[outs[0]] = key
                        source[outs[0]] = key
                        alg_source[outs[0]] = [key]
                continue
            args = [slot_of(v) for v in op.operands]
            step = RecurrentStep(op) if isinstance(op, nf.RecurrentOp) else build_step(op)
            if isinstance(op, nf.BatchNormOp):  # quantize's dyadic affine (qat.batch_norm)
                step = BatchNormStep(op)
                step.grid = bn_input_grid(self, op, args[0], outs[0])
            if isinstance(step, RecurrentStep):  # its forward reads every operand's quantizer
                step.grids = _recurrent_grids(self, args, alg_source)
                self.recurrent_steps.append(step)
                self._recurrent_caps.update(_recurrent_caps(self, step, args, alg_source))
            if isinstance(step, IntegerAlgorithmStep):  # its forward reads both quantizers
                step.grids = _algorithm_grids(self, args[0], outs[0])
            if isinstance(step, NormStep):  # and the weight's and bias's
                step.grids = _norm_grids(self, args, outs[0])
            self._steps.append(("op", step, args, outs))
            if isinstance(op, _THROUGH) and args[0] in source:
                source[outs[0]] = source[args[0]]
            grid_args = [slot_of(v) for v in grid_operands(op)]  # (not an embedding's ids)
            if op.has_trait(DataMovement) and all(a in alg_source for a in grid_args):
                moved = [k for a in grid_args for k in alg_source[a]]
                for o in outs:
                    alg_source[o] = moved
            if isinstance(op, qz.WEIGHTED) and len(args) > 2:
                bkey = self.bias_of.get(args[2])
                if bkey is not None:
                    groups = op.groups.value.data if not isinstance(op, nf.LinearOp) else 1
                    transposed = isinstance(op, nf.ConvTransposeOp)
                    out_c = value_shape(op.result)[1] if transposed else value_shape(op.weight)[0]
                    self.bias_users[bkey].append((args[0], args[1], out_c, groups, transposed))
            for r, o in zip(op.results, outs):
                if r in self.targets:
                    key = add_quantizer(self.targets[r])
                    self.quant_of[o] = key
                    source[o] = key
                    alg_source[o] = [key]
        self._source = source
        self.alg_source = alg_source
        self.ties: dict[str, Any] = {}
        self.joins = JoinRules(
            func, self.targets, key_of, self.quantizers, self.params, self.param_key
        )

    # -- names -----------------------------------------------------------------------------

    def tensor(self, name: str) -> nn.Parameter:
        """The parameter of the named constant ``name`` (e.g. ``conv1.weight``)."""
        return self.params[self.param_key[name]]

    def quantizer(self, name: str) -> Quantizer:
        """The quantizer of the tensor ``name`` (a constant's name or an SSA name)."""
        for q in self.quantizers.values():
            if q.name == name:
                return q  # type: ignore[return-value]
        raise KeyError(name)

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimizer groups: the constants at ``lr``; each ``lsq`` exponent at its rule's
        ``lr``; (``ema`` scales are buffers, updated by the forward)."""
        groups: list[dict[str, Any]] = [{"params": list(self.params.values()), "lr": lr}]
        for q in self.quantizers.values():
            if q.learner == "lsq":
                groups.append({"params": [q.exponent], "lr": q.lr})
        return groups

    # -- forward ---------------------------------------------------------------------------

    def bias_cap(self, key: str, slots: list[Any]) -> torch.Tensor | None:
        """The bias cap of ``quantize`` (min over the layers using the bias)."""
        if key in self._recurrent_caps:  # a recurrent op's bias: its product's exponent
            return self._recurrent_caps[key]()
        q = self.quantizers[key]
        if q.bits <= 1:
            return None
        cap = None
        for x_slot, w_slot, out_c, groups, transposed in self.bias_users[key]:
            kx_key, kw_key = self._source.get(x_slot), self._source.get(w_slot)
            if kx_key is None or kw_key is None:
                continue
            qx, qw = self.quantizers[kx_key], self.quantizers[kw_key]
            if qx.last_k is None or qw.last_k is None:
                continue
            kw = qw.last_k.cpu().numpy().astype(np.int64)
            if transposed and kw.size > 1:  # [O/g] along axis 1, the same per group
                kw = np.tile(kw.reshape(-1), groups)
            c = qz.accumulator_cap(
                qx.bits, qx.last_k.cpu().numpy().astype(np.int64), qw.bits, kw, out_c, groups
            )
            if c is not None:
                cap = c if cap is None else np.minimum(cap, c)
        return None if cap is None else torch.from_numpy(np.asarray(cap, dtype=np.float64))

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != len(self._arg_slots):
            raise QATError(
                f"nanoir.qat: the program takes {len(self._arg_slots)} inputs, got {len(inputs)}"
            )
        xs = [torch.as_tensor(x) for x in inputs]
        for i, (x, shape) in enumerate(zip(xs, self.input_shapes)):
            if x.dim() != len(shape) or any(
                d not in (DYNAMIC_INDEX, n) for d, n in zip(shape, x.shape)
            ):
                raise QATError(  # torch would fail inside an op, with its own message
                    f"nanoir.qat: input {i} has shape {spelled_shape(tuple(x.shape))}; the "
                    f"program takes {spelled_shape(shape)}"
                )
        dtype = next((x.dtype for x in xs if x.is_floating_point()), torch.float32)
        # quantize's join rules on this step's exponents (see nanoir.qat.joins)
        ties = self.joins.ties(biases=not self.training)
        self.ties = ties  # what an IntegerAlgorithm step's output grid is tied to
        slots: dict[int, Any] = {}
        for s, x in zip(self._arg_slots, xs):
            slots[s] = x.to(dtype)
            if s in self.quant_of:
                key = self.quant_of[s]
                slots[s] = self.quantizers[key](slots[s], tie=ties.get(key))
        pending_bias: dict[int, str] = dict(self.bias_of)
        for kind, fn, args, outs in self._steps:
            if kind == "param":
                values: Any = (self.params[fn].to(dtype),)
            elif kind == "buffer":
                values = (getattr(self, fn).to(dtype),)
            else:
                for a in args:
                    if a in pending_bias:
                        key = pending_bias.pop(a)
                        slots[a] = self.quantizers[key](
                            slots[a], self.bias_cap(key, slots), ties.get(key)
                        )
                values = fn(*[slots[a] for a in args])
            for o, v in zip(outs, values):
                if o in self.quant_of:
                    key = self.quant_of[o]
                    v = self.quantizers[key](v, tie=ties.get(key))
                slots[o] = v
        results = tuple(slots[s] for s in self._result_slots)
        return results[0] if len(results) == 1 else results

    # -- state -----------------------------------------------------------------------------

    def exponents(self) -> dict[str, np.ndarray]:
        """The current integer exponents of every quantizer by tensor name (a bias's capped
        as in the latest forward, else uncapped)."""
        out = {}
        for q in self.quantizers.values():
            out[q.name] = q.int_exponents()
        return out


# --------------------------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------------------------


def _config(options: dict[str, Any]) -> qz.QuantConfig:
    """``prepare``'s quantize options as a config; the arguments ``QuantConfig`` takes as
    given (a rate, a per-channel flag) checked first, each naming the argument."""
    where = "nanoir.qat.prepare"
    options = dict(options)
    rules = rules_argument(where, options.pop("rules", ()))
    if "rounding" in options:
        options["rounding"] = qz.parse_rounding(options["rounding"])
    for flag in ("weight_per_channel", "act_per_channel"):
        if flag in options and not isinstance(options[flag], bool | np.bool_):
            raise ArgumentError(f"{where}: {flag} must be True or False, got {options[flag]!r}")
    try:
        config = qz.QuantConfig(rules=rules, **{**options, "lr": None})
    except TypeError as e:
        raise QATError(f"nanoir.qat: {e}") from None
    if options.get("lr") is not None:  # an ema rate is a moving average's weight: at most 1
        at_most = 1.0 if config.learner == "ema" else FLOAT32_MAX
        lr = rate_argument(where, "lr", options["lr"], positive=True, at_most=at_most)
        config = qz.QuantConfig(**{**config.__dict__, "lr": lr})
    return config


def prepare(
    model: Any,
    example_inputs: Sequence[Any],
    *,
    function: str | None = None,
    bias_correction: bool = True,
    **quantize_options: Any,
) -> QATModule:
    """A trainable :class:`QATModule` for ``model`` (a ``torch.nn.Module``, or an nf
    ``ModuleOp``) with the fake-quants ``quantize(**quantize_options)`` would insert.

    ``quantize_options`` are ``quantize``'s (bits, per-channel, ``rules``, ``calibrator``,
    ``rounding``, ``unsigned``: with ``"auto"`` or a rule's ``u`` the quantizer of a
    non-negative activation clamps to the codes ``0..2**b-1`` and its EMA target is
    ``2**b / max``, and :func:`convert` writes ``signed = false``) plus ``learner`` (``ema`` or ``lsq``) and ``lr``, the defaults for tensors
    no rule names a learner for. Batch norm is folded first (see the module docstring).
    Weight exponents start from ``calibrator`` on the weights, as ``quantize`` sets them;
    activation exponents from the learner's init until :func:`calibrate`. The default
    calibrator is ``quantize``'s (``mse``), ``absmax`` with ``bias_correction=False``.

    ``bias_correction`` mirrors ``quantize``'s: every conv/linear gets a bias (zero where it
    had none) and :func:`calibrate` corrects the biases as ``quantize`` does. ``False`` keeps
    the program as imported and (unless ``calibrator`` is given) NanoEngine's ``absmax`` rule,
    the configuration that reproduces NanoEngine-PyTorch step for step.
    """

    if not isinstance(bias_correction, bool):
        raise ArgumentError(
            f"nanoir.qat.prepare: bias_correction must be True or False, got {bias_correction!r}"
        )
    if not bias_correction:  # NanoEngine-PyTorch's configuration: its absmax rule
        quantize_options = {"calibrator": "absmax", **quantize_options}
    config = _config(quantize_options)
    if isinstance(model, ModuleOp):
        module = model.clone()
    else:
        module = from_torch(model, example_inputs)
    FoldBnPass().apply(make_context(), module)
    if bias_correction:
        add_zero_biases(find_function(module, function), config)
    qat = QATModule(module, config, function)
    qat.bias_correction = bias_correction
    if bias_correction:  # as quantize's bias correction: offline rounding to the nearest code
        offline = {t.name for v, t in qat.targets.items() if qz.rounded_offline(t.kind, v)}
        for q in qat.quantizers.values():
            if q.name in offline:
                q.rounding = qz.CONSTANT_ROUNDING
    with torch.no_grad():
        for value, t in qat.targets.items():
            if t.kind in ("weight", "const"):
                assert isinstance(value, OpResult)
                x = dense_to_numpy(value.op.value).astype(np.float64)  # type: ignore[attr-defined]
                rounding = qat.quantizer(t.name).rounding
                k = qz.tensor_exps(x, t.bits, t.channel_axis, config.calibrator, rounding)
                qat.quantizer(t.name).set_exponents(np.asarray(k).reshape(-1))
    low_bits.apply(qat, quantize_options)  # 2-bit weights: lsq from absmax unless chosen
    return qat


def _qat_argument(qat: object, function: str) -> QATModule:
    """``qat``, unwrapped from ``DistributedDataParallel``, if it is a :class:`QATModule`."""
    qat = distributed.unwrap(qat)
    if not isinstance(qat, QATModule):
        raise ArgumentError(
            f"nanoir.qat.{function}: qat must be a QATModule (from nanoir.qat.prepare), "
            f"got {type(qat).__name__}"
        )
    return qat


def float_program(qat: QATModule) -> ModuleOp:
    """The folded nf program with the module's current constants written in."""
    qat = _qat_argument(qat, "float_program")

    module = qat.nf_module.clone()
    func = find_function(module, qat.function)
    for op in func.walk():
        if isinstance(op, nf.ConstantOp) and op.sym_name is not None:
            key = qat.param_key.get(op.sym_name.data)
            if key is None:
                continue
            value = qat.params[key].detach().cpu().to(torch.float32).numpy()
            t = op.value.get_type()
            if tuple(value.shape) != tuple(t.get_shape()) or "f32" not in str(t):
                raise QATError(
                    f"nanoir.qat: {op.sym_name.data} is {t}; the module holds "
                    f"float32 {list(value.shape)}"
                )
            op.value = DenseIntOrFPElementsAttr(t, BytesAttr(value.astype("<f4").tobytes()))
    return module


def calibrate(
    qat: QATModule,
    batches: Iterable[Any],
    *,
    calibrator: str | None = None,
    progress: bool | None = None,
) -> QATModule:
    """Start every exponent from nanoir's calibrators (``absmax``, NanoEngine's rule, or
    ``mse``; default the one given to :func:`prepare`) on ``batches`` (NumPy arrays, torch
    tensors, or ``(inputs, labels)`` pairs), run through the float program with the current
    weights: afterwards the module computes the PTQ program ``quantize`` gives. A batch input
    that is not a real numeric array of the input's shape with at least one row is refused
    with a :class:`QATError` naming the batch."""

    qat = _qat_argument(qat, "calibrate")
    config = qat.config
    if calibrator is not None:
        config = qz.QuantConfig(**{**config.__dict__, "calibrator": calibrator})
    module = float_program(qat)
    func = find_function(module, qat.function)
    checked = _checked_batches(batches, [value_shape(a) for a in func.body.block.args])
    correct = getattr(qat, "bias_correction", False)
    targets = qz.quantize_function(
        func,
        checked,
        config,
        None if calibrator is not None else low_bits.calibrator_exponents(qat),
        progress=progress,
        bias_correction=correct,
        reduce=distributed.reducer(),  # under torch.distributed: every rank's batches
    )
    for t in targets:
        assert t.exps is not None
        qat.quantizer(t.name).set_exponents(np.asarray(t.exps).reshape(-1))
        const = t.value.owner
        corrected = isinstance(const, nf.ConstantOp) and qz.UNCORRECTED in const.attributes
        if correct and (t.kind == "bias" or t.kind == "weight" and corrected):
            # the corrected bias, and a weight whose gain was corrected, into the module
            assert isinstance(const, nf.ConstantOp) and const.sym_name is not None
            with torch.no_grad():
                qat.tensor(const.sym_name.data).copy_(
                    torch.from_numpy(np.array(dense_to_numpy(const.value), dtype=np.float32))
                )
    qat.joins.calibrate(targets)  # the join rules' origins, as quantize's
    set_internal(qat.recurrent_steps, func)  # a recurrent op's cell grids
    return qat


def _checked_batches(
    batches: Iterable[Any], shapes: Sequence[Sequence[int]]
) -> Iterator[tuple[np.ndarray, ...]]:
    """``batches`` read as ``quantize`` reads them (a batch is one array, or a tuple or list
    whose first items are the inputs, e.g. ``(inputs, labels)``), each input refused with a
    :class:`QATError` naming the batch unless it is a real numeric array with at least one row:
    ``quantize`` would fail on it deep inside, with a bare ``ValueError``."""
    try:
        iterator = iter(batches)
    except TypeError:
        raise QATError(
            "nanoir.qat.calibrate: batches must be an iterable of batches (arrays, tensors or "
            f"(inputs, labels) pairs), got {type(batches).__name__}"
        ) from None
    for index, batch in enumerate(iterator):
        items = tuple(batch) if isinstance(batch, tuple | list) else (batch,)
        arrays = [
            checked_batch_array(
                item,
                shape,
                f"nanoir.qat.calibrate: batch {index}" + (f" input {i}" if len(shapes) > 1 else ""),
                QATError,
            )
            for i, (item, shape) in enumerate(zip(items, shapes))
        ]
        yield tuple(arrays) if len(items) >= len(shapes) else items


def export_exponents(qat: QATModule) -> dict[str, dict[str, Any]]:
    """The exponents as ``quantize(exponents=...)`` reads them back (and as a JSON object):
    ``{name: {"exp": [k, ...], "bits": b, "rounding": mode, "axis": axis or None}}``, biases
    capped as ``quantize`` caps them for the current exponents."""
    qat = _qat_argument(qat, "export_exponents")
    was_training = qat.training
    qat.eval()
    out: dict[str, dict[str, Any]] = {}
    settled = qat.joins.settle()[1]  # the join rules, as the forward applies them
    caps = _bias_caps(qat, settled)
    for key, q in qat.quantizers.items():
        k = settled.get(key, q.int_exponents()).reshape(-1)
        cap = caps.get(key)
        if cap is not None:
            k = np.minimum(k, cap.min() if k.size == 1 else cap)
        out[q.name] = {
            "exp": [int(v) for v in k],
            "bits": q.bits,
            "rounding": str(q.rounding),
            "axis": q.axis,
        }
    out.update(internal_records(qat.recurrent_steps))  # <op>.gates, ...
    qat.train(was_training)
    return out


def _bias_caps(qat: QATModule, settled: dict[str, np.ndarray]) -> dict[str, np.ndarray | None]:
    """Bias caps from the current (eval) exponents after the join rules (``settled``),
    without running the module."""
    for key, q in qat.quantizers.items():
        k = settled.get(key)
        q.last_k = q.exponents().detach() if k is None else torch.from_numpy(k.astype(np.float64))
    return {
        key: (None if (c := qat.bias_cap(key, [])) is None else c.numpy().astype(np.int64))
        for key in qat.bias_users
    }


def save_exponents(qat: QATModule, path: str | Path) -> None:
    """Write :func:`export_exponents` as JSON (``quantize{exponents="..."}`` reads it),
    atomically (``nanoir.files.write_atomically``: no partial file, a bad path is a
    ``FileAccessError`` naming it)."""
    qat = _qat_argument(qat, "save_exponents")
    name = path_argument("path", path)
    check_output_path(name)
    write_atomically(name, json.dumps(export_exponents(qat), indent=1) + "\n")


def convert(
    qat: QATModule,
    data: Iterable[Any] | None = None,
    *,
    strict: bool = False,
    min_sqnr: float = qz.MIN_SQNR_DB,
) -> ModuleOp:
    """The nq program (nf + ``nq.fake_quant``) of the trained module: its constants and
    exponents through ``quantize``. ``nanoir.run`` on it equals ``qat.eval()`` on float64
    inputs bit for bit, and it lowers to nh as any quantized program does.

    With ``data`` (batches, as for :func:`calibrate`), the program is checked on them against
    its float program as ``quantize`` checks it: a collapsed output gives a
    ``nanoir.QuantizationWarning`` (``strict``: a ``QuantizeError``)."""

    qat = _qat_argument(qat, "convert")
    if data is not None:
        batches_argument("data", data)
        data = list(data)
    elif bool_argument("strict", strict):
        raise ArgumentError("nanoir.qat.convert: strict=True checks the program on data; give data")
    module = float_program(qat)
    exponents = export_exponents(qat)
    origins = {qat.quantizers[k].name: o for k, o in qat.joins.origins.items()}
    func = find_function(module, qat.function)
    targets = qz.quantize_function(func, None, qat.config, exponents)
    make_dyadic(func, set())  # the module's lone BNs compute it (nanoir.qat.batch_norm)
    for t in targets:
        # The join rule that chose an exponent, as quantize records it (the report shows it).
        if t.name in origins:
            for use in t.value.uses:
                if isinstance(use.operation, FakeQuantOp) and use.operation.origin is None:
                    use.operation.origin = StringAttr(origins[t.name])
    if data is not None:
        qz.check_after_quantizing(func, data, [], min_sqnr=min_sqnr, strict=strict)
    return module


# --------------------------------------------------------------------------------------------
# Training helpers
# --------------------------------------------------------------------------------------------


def train(
    qat: QATModule,
    data: Iterable[Any],
    *,
    epochs: int,
    lr: float = 1e-3,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    cosine: bool = False,
    progress: bool | None = None,
    checkpoint: str | Path | None = None,
) -> list[float]:
    """Fine-tune ``qat`` on ``(inputs, target)`` batches (``data`` is iterated once per
    epoch: a shuffling DataLoader reshuffles) with Adam over :meth:`QATModule.param_groups`
    and cross entropy unless given; with ``cosine`` every group's rate decays to 0 along a
    half cosine over the run. Returns the mean loss per epoch. A progress bar shows on a
    terminal (``progress=None``) or when asked.

    ``qat`` may be wrapped in ``DistributedDataParallel``; under a process group a bare
    module is wrapped (``nanoir.qat.distributed``: every rank ends with the same exponents),
    and a ``DistributedSampler``'s epoch is set before each epoch (its shuffle changes).

    ``checkpoint`` (a path) is saved atomically at the end of every epoch (rank 0 only):
    module, optimizer, schedule, epoch and the random generators' states. If it exists when
    ``train`` starts, the run resumes after its last epoch (``epochs`` is the total): with a
    loader whose order depends only on torch's global generator (a shuffling DataLoader,
    ``num_workers=0``), the resumed run equals the uninterrupted one bit for bit. A file
    that is not a checkpoint of this module and optimizer, or holds a value training would
    fail on, is a :class:`QATError` naming it and the field, and changes nothing.

    Arguments are checked before anything changes (an :class:`ArgumentError` naming the
    argument): ``lr`` a finite rate >= 0; each batch a tuple ``(inputs..., target)`` of the
    program's input shapes, finite, and (with the default loss) a target of class indices in
    range or class probabilities shaped as the output, checked as it comes (a bad batch
    stops the run before its step, naming the epoch and batch)."""
    core = _qat_argument(qat, "train")
    batches_argument("data", data)
    epochs = int_argument("epochs", epochs, 0)
    lr = rate_argument("nanoir.qat.train", "lr", lr)
    if loss_fn is not None and not callable(loss_fn):
        raise ArgumentError(
            f"nanoir.qat.train: loss_fn must be callable, got {type(loss_fn).__name__}"
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise ArgumentError(
            "nanoir.qat.train: optimizer must be a torch.optim.Optimizer, got "
            f"{type(optimizer).__name__}"
        )
    cosine = bool_argument("cosine", cosine)
    if progress is not None:
        bool_argument("progress", progress)
    if loss_fn is None and len(core.output_shapes) != 1:
        raise ArgumentError(
            f"nanoir.qat.train: the program has {len(core.output_shapes)} outputs; the "
            "default loss (cross entropy) takes one: give loss_fn"
        )
    path = None if checkpoint is None else path_argument("checkpoint", checkpoint)
    if path is not None and distributed.is_main():
        check_output_path(path)
    output = core.output_shapes[0] if loss_fn is None else None  # the target it is checked for
    loss_fn = loss_fn or F.cross_entropy
    optimizer = optimizer or torch.optim.Adam(core.param_groups(lr), lr=lr)
    per_epoch = len(data) if hasattr(data, "__len__") else 0  # type: ignore[arg-type]
    hyper = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    schedule = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(epochs * per_epoch, 1))
        if cosine
        else None
    )
    done, losses = 0, []
    if path is not None and os.path.lexists(path):
        try:
            done, losses = load_checkpoint(path, core, optimizer, schedule, epochs)
        except QATError:  # nothing restored; the schedule's own marks (initial_lr) go too
            for group, saved in zip(optimizer.param_groups, hyper):
                params = group["params"]
                group.clear()
                group.update(saved, params=params)
            raise
    model = distributed.wrap(qat)  # after loading: DDP copies rank 0's state to every rank
    set_epoch = getattr(getattr(data, "sampler", None), "set_epoch", None)
    model.train()
    with qz.progress_bar(progress, (epochs - done) * per_epoch) as advance:
        for epoch in range(done, epochs):
            if callable(set_epoch):  # a DistributedSampler shuffles by its epoch
                set_epoch(epoch)
            running, count = 0.0, 0
            for index, batch in enumerate(data):
                where = f"nanoir.qat.train: data batch {index} (epoch {epoch})"
                xs, y = training_batch(batch, where, core.input_shapes, output)
                optimizer.zero_grad()
                loss = _checked_loss(loss_fn(model(*xs), y), where)
                loss.backward()
                try:
                    optimizer.step()
                except RuntimeError as e:  # a step beyond float32 (a rate too large)
                    raise QATError(
                        f"{where}: training diverged: the optimizer's step failed ({e}); "
                        "a smaller lr"
                    ) from None
                _check_diverged(core, where)
                if schedule is not None:
                    schedule.step()
                running, count = running + float(loss.detach()), count + 1
                advance()
            losses.append(running / max(count, 1))
            if path is not None:
                save_checkpoint(path, core, optimizer, schedule, epoch + 1, losses)
    core.eval()
    return losses


def _checked_loss(loss: object, where: str) -> torch.Tensor:
    """``loss`` if it is a finite scalar with a gradient; a custom ``loss_fn`` returning
    anything else failed in ``backward`` with torch's message, and a NaN loss turns every
    weight into NaN at the step."""
    if not (
        isinstance(loss, torch.Tensor)
        and loss.numel() == 1
        and loss.is_floating_point()
        and loss.requires_grad
    ):
        what = (
            f"a {list(loss.shape)} tensor"
            if isinstance(loss, torch.Tensor)
            else type(loss).__name__
        )
        raise ArgumentError(
            f"{where}: loss_fn must return a scalar float tensor with a gradient, got {what}"
        )
    if not bool(torch.isfinite(loss.detach()).all()):
        raise QATError(
            f"{where}: training diverged: the loss is {float(loss.detach())} (a smaller lr, "
            "or check the data); the step was not taken"
        )
    return loss


def _check_diverged(qat: QATModule, where: str) -> None:
    """Refuse to go on from a step that made a weight or exponent infinite or NaN (a rate
    too large for float32): the next forward would fail on it deep inside."""
    for key, p in qat.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            raise QATError(
                f"{where}: the step made {key} infinite or NaN; training diverged (a smaller lr)"
            )


@torch.no_grad()
def evaluate(qat: QATModule, *inputs: Any, dtype: torch.dtype = torch.float64) -> Any:
    """The module's eval-mode output as NumPy, computed in ``dtype`` (float64: the values
    ``nanoir.run(convert(qat), ...)`` gives). Inputs of another count or shape than the
    program's are refused with a :class:`QATError`."""
    qat = _qat_argument(qat, "evaluate")
    func = find_function(qat.nf_module, qat.function)
    shapes = [value_shape(a) for a in func.body.block.args]
    if len(inputs) != len(shapes):
        raise QATError(
            f"nanoir.qat.evaluate: the program takes {len(shapes)} inputs, got {len(inputs)}"
        )
    for i, (x, shape) in enumerate(zip(inputs, shapes)):
        got = tuple(np.shape(x))
        if len(got) != len(shape) or any(d not in (DYNAMIC_INDEX, n) for d, n in zip(shape, got)):
            raise QATError(
                f"nanoir.qat.evaluate: input {i} has shape {spelled_shape(got)}; expected {spelled_shape(shape)}"
            )
    was_training = qat.training
    qat.eval()
    out = qat(*[torch.as_tensor(np.asarray(x)).to(dtype) for x in inputs])
    qat.train(was_training)
    if isinstance(out, tuple):
        return tuple(o.numpy() for o in out)
    return out.numpy()
