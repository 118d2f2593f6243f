"""quantize: nf → nf + ``nq.fake_quant`` with power-of-two exponents (NanoEngine's Q level).

Where fake-quants go, as NanoEngine-PyTorch does it:

- every float input of the function (an *activation*);
- every weight and bias (``nf.constant`` operands 1 and 2 of ``nf.conv``/``nf.linear``), and
  every other named constant (a torch parameter or buffer added or multiplied in); unnamed
  scalar constants (a Python ``x + 2``) stay float when they are short dyadics, else get a
  weight's fake-quant (``x * 32**-0.5``; ``targets.scalar_factor``);
- the result of every computing op; not after data movement (reshape, transpose, split,
  concat, pad, upsample), which never leaves the input's grid.

Bits and per-channel choice come from defaults per kind (weight, bias, activation) and an
ordered list of :class:`QuantRule` (first match wins; a rule can also leave a tensor float).
Exponents: weights from their values; activations from calibration data (the float program run
on batches) with NanoEngine's absmax rule (``k = floor(log2(2**(b-1) / absmax))``) or the
power of two minimising squared error; or imported (QAT) exponents by tensor name. A bias's
exponent is capped at its accumulator's (input + weight exponent) so lowering to integers
stays exact, and where values meet (add, sub, concat, a conv's accumulator) calibrated
exponents are made coarser where lower-to-hw could not align them in i32
(``joins``; the fake-quant's ``origin`` says which join chose it). What an op reads on one
grid (an integer algorithm's or a recurrent op's input, a matmul's operands) is quantized per
tensor whatever ``act_per_channel`` says, and a concat it reads puts its parts on one
exponent; per-channel exponents that data movement aligns onto one (a pixel shuffle, a
transpose moving the channels, a pad of the channel dim) stay within what reads them (16 bits
for a lookup table or a lone batch norm); a value 0 on every calibration batch takes the
exponent of what it is computed from, never 60 (``targets.needs_one_grid``,
``join_rules.Rules.zero_range``). A matmul or product of two runtime values has no weight to
coarsen: the wider of its operands gets fewer bits until the result fits i32 (a bicubic
upsampling's input too; bits a rule names are refused, naming the op), and a PReLU's slope a
coarser exponent (``products``; origin ``acc:%matmul``, ``acc:%prelu``).

    %y = nf.conv %x, %w, %b ...               %xq = nq.fake_quant %x {bits = 8, exp = dense<5>}
                                    ─▶        %wq = nq.fake_quant %w {bits = 8, exp = dense<[[[[7]]], ...]>}
                                              %bq = nq.fake_quant %b {bits = 8, exp = dense<[7, ...]>}
                                              %y = nf.conv %xq, %wq, %bq ...
                                              %yq = nq.fake_quant %y {bits = 8, exp = dense<4>}

The package, one module per phase (this front re-exports what the rest of nanoir uses; import
from here, never from the modules): ``driver`` the pass (``quantize``, ``QuantizePass``) and
the order of the phases; ``rules`` the options and the rule grammar (``QuantConfig``,
``QuantRule``); ``targets`` where fake-quants go, ``gates`` and ``products`` the bits of
some of them; ``calibration`` exponents from values and calibration batches; ``imported``
imported (QAT) exponents, checked; ``joins`` the exponents at joins and accumulators, on the
rules of ``join_rules`` (exponents alone, shared with ``nanoir.qat``); ``bias_correction``
empirical bias correction; ``batch_norm`` the dyadic affine of a lone batch norm;
``recurrent`` the internal quantizers of ``nf.recurrent``; ``check`` the check at the end (an
output all zero, constant or below ``min_sqnr`` against float on the calibration data:
``nanoir.QuantizationWarning``, or an error with ``strict``).
"""

from __future__ import annotations

from nanoir.lowering.quantize.batch_norm import dyadic_affine, make_dyadic
from nanoir.lowering.quantize.batch_norm import input_grid as bn_input_grid
from nanoir.lowering.quantize.bias_correction import (
    GAIN_LIMITS,
    UNCORRECTED,
    add_zero_biases,
    channel_slopes,
    mean_error,
    restore_uncorrected,
    without_gain_correction,
)
from nanoir.lowering.quantize.calibration import (
    OCTAVE_BASE,
    OCTAVES,
    calibrate,
    candidate_sse,
    checked_batch_array,
    exp_shape,
    full_mse_search,
    load_calibration,
    mse_candidates,
    octave_sums,
    progress_bar,
    spelled_shape,
    surviving_candidates,
    tensor_exps,
    without_kept_floats,
)
from nanoir.lowering.quantize.check import MIN_SQNR_DB, check_after_quantizing, finite_energies
from nanoir.lowering.quantize.driver import (
    CONSTANT_ROUNDING,
    QuantizePass,
    accumulator_cap,
    nh_exps,
    quantize,
    quantize_function,
    rounded_offline,
)
from nanoir.lowering.quantize.imported import EXPONENT_FILE_LIMIT, MAX_JSON_DEPTH, load_exponents
from nanoir.lowering.quantize.join_rules import Quant, Rules, aligned_bits
from nanoir.lowering.quantize.joins import describe, describe_derived, describe_norms, get_exps
from nanoir.lowering.quantize.recurrent import internal_names
from nanoir.lowering.quantize.rules import (
    ALLOWED_BITS,
    DEFAULT_LR,
    LEARNERS,
    QuantConfig,
    QuantizeError,
    QuantRule,
    checked_bits,
    parse_rounding,
)
from nanoir.lowering.quantize.targets import WEIGHTED, Target, find_targets, value_name

__all__ = [
    "ALLOWED_BITS",
    "GAIN_LIMITS",
    "CONSTANT_ROUNDING",
    "DEFAULT_LR",
    "EXPONENT_FILE_LIMIT",
    "LEARNERS",
    "MAX_JSON_DEPTH",
    "MIN_SQNR_DB",
    "OCTAVES",
    "OCTAVE_BASE",
    "UNCORRECTED",
    "WEIGHTED",
    "Quant",
    "QuantConfig",
    "QuantRule",
    "QuantizeError",
    "QuantizePass",
    "Rules",
    "Target",
    "accumulator_cap",
    "add_zero_biases",
    "aligned_bits",
    "bn_input_grid",
    "calibrate",
    "channel_slopes",
    "candidate_sse",
    "check_after_quantizing",
    "checked_batch_array",
    "checked_bits",
    "describe",
    "describe_derived",
    "describe_norms",
    "dyadic_affine",
    "exp_shape",
    "finite_energies",
    "full_mse_search",
    "without_kept_floats",
    "find_targets",
    "get_exps",
    "internal_names",
    "load_calibration",
    "load_exponents",
    "make_dyadic",
    "mean_error",
    "mse_candidates",
    "octave_sums",
    "nh_exps",
    "parse_rounding",
    "progress_bar",
    "quantize",
    "quantize_function",
    "restore_uncorrected",
    "rounded_offline",
    "spelled_shape",
    "surviving_candidates",
    "tensor_exps",
    "value_name",
    "without_gain_correction",
]
