"""Random quantized (nq) programs for property tests of the hw lowering and streaming.

``random_nq_program(draw)`` is a hypothesis-driven builder of nf + ``nq.fake_quant`` programs
made only of ops that lower exactly to nh. ``BASE_KINDS``: quantized convs (grouped,
depthwise, strided, dilated, padded, 1-D or 2-D) with optional biases, relu, clamp, max and
average pools, adds of branches, products with constants, concat, elementwise float ops behind
a fake-quant (lookup tables), and half the time a flatten (reshape) + linear tail; with
1/2/4/8-bit codes, per-tensor and per-channel exponents of both signs and every rounding mode.
``ALL_KINDS`` adds every other nf op (all but ``nf.custom``, which has no semantics): PReLU,
lone batch norms, transpose, pad, split, nearest upsampling, transposed convs (1-D or 2-D,
grouped, strided, dilated, padded, output_padding; weight exponents along dim 1), sub,
products of branches, a float constant added, division by a dyadic constant, matmul (by a
constant, and of a value by its transpose), linear layers over the last dim of a feature map,
adaptive average pooling, hardsigmoid and leaky ReLU (tables), depth_to_space /
space_to_depth (both modes, a 1x1 conv or an end pad first where the shapes need it),
channel shuffle (reshape, transpose, reshape), softmax / log-softmax, LayerNorm over the last
dims and GroupNorm (integer algorithms between per-tensor fake-quants), expand of a size-1 dim
and gather with constant indices. The hw lowering's and the
streaming executor's property tests draw from ``ALL_KINDS``, ``.ne``'s and QAT's from
``BASE_KINDS``. Test code imports it from here (never from ``tests``); it needs hypothesis,
from the ``test`` extra.

``examples(n)`` is the example count of a property test that pins its own: ``n`` under the
default hypothesis profile, scaled with the profile's ``max_examples`` under another one
(``NANOIR_HYPOTHESIS_PROFILE=thorough``, see tests/conftest.py). ``streaming_program()`` is a
fixed nf program with a dynamic stream length and two streamed outputs (the Streamer and
``nanoir-run --stream`` tests share it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    FunctionType,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Operation, Region, SSAValue

from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.runtime.numerics import quant
from nanoir.runtime.numerics import recurrent as recurrent_numerics
from nanoir.runtime.numerics.quant import RoundingMode

BITS = (1, 2, 4, 8)
MODES = tuple(RoundingMode)


def examples(n: int) -> int:
    """``n`` examples under the default profile (``max_examples`` 100), ``n * max_examples /
    100`` under the loaded one: a test's pinned count follows the profile.

    Call it in the test module's ``@settings(max_examples=examples(n))``; the profile is loaded
    (tests/conftest.py) before test modules are imported.
    """
    return max(1, n * settings().max_examples // 100)


def _shape(v: SSAValue) -> tuple[int, ...]:
    t = v.type
    assert isinstance(t, TensorType)
    return t.get_shape()


class ProgramBuilder:
    """Accumulates ops into one ``func.func @main`` and keeps the quantized values."""

    def __init__(self, draw: Callable[[Any], Any], spatial: int, quantized: bool = True):
        self.draw = draw
        self.ops: list[Operation] = []
        self.rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        self.spatial = spatial
        self.quantized = quantized
        """False: a float (nf) program, every fake-quant left out (``random_nf_program``)."""

    def add(self, op: Operation) -> Operation:
        self.ops.append(op)
        return op

    def constant(self, data: np.ndarray, name: str) -> SSAValue:
        a = np.ascontiguousarray(data, dtype="<f4")
        attr = DenseIntOrFPElementsAttr(TensorType(f32, a.shape), BytesAttr(a.tobytes()))
        return self.add(nf.ConstantOp(attr, name=name)).results[0]

    def fake_quant(
        self,
        v: SSAValue,
        *,
        bits: int | None = None,
        per_channel_axis: int | None = None,
        exp: int | None = None,
        mode: RoundingMode | None = None,
        base: int = 3,
        per_channel: bool | None = None,
    ) -> SSAValue:
        """A fake-quant of ``v``; with ``per_channel_axis``, per channel when ``per_channel``
        (drawn when None). Per-channel exponents are all ``exp`` when it is given. ``v``
        itself in a float program."""
        if not self.quantized:
            return v
        draw = self.draw
        bits = draw(st.sampled_from(BITS)) if bits is None else bits
        mode = draw(st.sampled_from(MODES)) if mode is None else mode
        shape = _shape(v)
        if per_channel_axis is not None and (
            draw(st.booleans()) if per_channel is None else per_channel
        ):
            c = shape[per_channel_axis]
            exps = [base + draw(st.integers(-2, 2)) if exp is None else exp for _ in range(c)]
            if per_channel_axis == 0:
                exp_shape = [c] + [1] * (len(shape) - 1)
            else:
                exp_shape = [c] + [1] * (len(shape) - 2)
            e = exp_attr(exps, exp_shape)
        else:
            k = base + draw(st.integers(-2, 2)) if exp is None else exp
            e = exp_attr(k)
        return self.add(FakeQuantOp(v, bits, e, mode)).results[0]

    def weight(self, shape: tuple[int, ...], name: str, axis: int = 0) -> SSAValue:
        """A quantized weight, its output channels along ``axis`` (per channel or not)."""
        w = self.rng.standard_normal(shape) * 0.5
        c = self.constant(w, name)
        if not self.quantized:
            return c
        bits = self.draw(st.sampled_from(BITS))
        absmax = float(np.abs(w).max()) or 1.0
        base = int(quant.exp_from_absmax([absmax], bits)[0])
        return self.fake_quant(c, bits=bits, per_channel_axis=axis, base=base)

    def bias(self, n: int, name: str) -> SSAValue:
        b = self.constant(self.rng.standard_normal(n) * 0.5, name)
        if not self.quantized:
            return b
        # At most the accumulator's exponent in practice (small exps keep lowering exact).
        return self.fake_quant(b, bits=8, exp=self.draw(st.integers(-1, 2)))

    def act(self, v: SSAValue) -> SSAValue:
        """A fake-quant of an activation: 2/4/8 bits, per tensor or per channel."""
        if not self.quantized:
            return v
        bits = self.draw(st.sampled_from((2, 4, 8)))
        return self.fake_quant(v, bits=bits, per_channel_axis=1, base=self.draw(st.integers(-1, 4)))

    def pointwise_conv(self, v: SSAValue, cout: int, name: str) -> SSAValue:
        """A quantized 1x1 conv to ``cout`` channels (with a bias half the time)."""
        # (1x1 over the value's own dims: an embedding's [N, L, D] in a 2-D program has one)
        w = self.weight((cout, _shape(v)[1]) + (1,) * (len(_shape(v)) - 2), f"{name}.weight")
        bias = self.bias(cout, f"{name}.bias") if self.draw(st.booleans()) else None
        return self.act(self.add(nf.ConvOp(v, w, bias)).results[0])

    def lut(self, v: SSAValue, functions: tuple[Callable[[SSAValue], Operation], ...]) -> SSAValue:
        """``f(v)`` for a float-only elementwise ``f`` drawn from ``functions``, between
        per-tensor fake-quants (a lookup table at the hw level)."""
        draw = self.draw
        if not self.quantized:
            return self.add(draw(st.sampled_from(functions))(v)).results[0]
        bits = draw(st.sampled_from((2, 4, 8)))
        if draw(st.booleans()):
            # Per-channel exponents that are all equal, then a per-tensor fake-quant at
            # that exponent (an identity when no narrower): the table's input must still
            # count as per-tensor.
            k = 3 + draw(st.integers(-2, 2))
            v = self.fake_quant(
                v,
                bits=draw(st.sampled_from([n for n in (2, 4, 8) if n <= bits])),
                per_channel_axis=1,
                per_channel=True,
                exp=k,
            )
            src = self.fake_quant(v, bits=bits, exp=k)
        else:
            src = self.fake_quant(v, bits=bits, base=3)
        f = draw(st.sampled_from(functions))
        y = self.add(f(src)).results[0]
        return self.fake_quant(y, bits=8, base=6)


def _leaky_relu(alpha: float) -> Callable[[SSAValue], Operation]:
    return lambda x: nf.LeakyReluOp(x, alpha)


def _unary(fn: str, *params: float) -> Callable[[SSAValue], Operation]:
    return lambda x: nf.UnaryOp(x, fn, params)


UNARY_FUNCTIONS = (
    _unary("exp"),
    _unary("log"),
    _unary("sqrt"),
    _unary("rsqrt"),
    _unary("erf"),
    _unary("sin"),
    _unary("atan"),
    _unary("abs"),
    _unary("neg"),
    _unary("softsign"),
    _unary("mish"),
    _unary("log_sigmoid"),
    _unary("pow", 2.0),
    _unary("elu", 1.0, 1.0, 1.0),
    _unary("softplus", 1.0, 20.0),
)
"""``nf.unary`` functions the generator draws: with and without parameters, defined
everywhere or on part of the line (log, sqrt: the nearest point of the domain outside it)."""

LUT_FUNCTIONS: dict[str, tuple[Callable[[SSAValue], Operation], ...]] = {
    "lut": (nf.SigmoidOp, nf.TanhOp, nf.HardSwishOp),
    "hardsigmoid": (nf.HardSigmoidOp,),
    "leaky_relu": tuple(_leaky_relu(a) for a in (0.01, 0.1, 0.25)),
    "silu": (nf.SiluOp,),
    "gelu": (nf.GeluOp, lambda x: nf.GeluOp(x, "tanh")),
    "unary": UNARY_FUNCTIONS,
}
"""The float-only elementwise ops each lookup-table kind draws from."""

BASE_KINDS = ("conv", "conv", "relu", "maxpool", "avgpool", "add", "mul", "concat", "lut", "clamp")
"""The op kinds every consumer of the generator handles (lowering, streaming, ``.ne``, QAT)."""
ALL_KINDS = BASE_KINDS + (
    "prelu",
    "batch_norm",
    "transpose",
    "pad",
    "split",
    "upsample",
    "sub",
    "div",
    "matmul",
    "linear",
    "adaptive_avgpool",
    "hardsigmoid",
    "leaky_relu",
    "depth_to_space",
    "space_to_depth",
    "channel_shuffle",
    "conv_transpose",
    "mul_branches",
    "add_constant",
    "matmul_branches",
    "silu",
    "gelu",
    "softmax",
    "layer_norm",
    "group_norm",
    "expand",
    "gather",
    "maximum",
    "upsample_zero",
    "upsample_bilinear",
    "max_unpool",
    "unary",
    "where",
    "reduce",
    "arg_reduce",
    "cumsum",
    "normalize",
    "upsample_bicubic",
    "recurrent",
)
"""Every nf op with an integer lowering (``nf.custom`` aside, which has no semantics, and
``nf.embedding``, whose indices are a second, integer input: :data:`INDEX_KINDS`); the hw
lowering's and the streaming executor's property tests draw from these."""

INDEX_KINDS = ("embedding",)
"""Kinds that add an integer program input (an embedding's token ids, ``[N, T]``): programs
drawn with them take :func:`program_inputs`, not one float array."""

QUANTIZE_KINDS = (
    ALL_KINDS
    + INDEX_KINDS
    + (
        "dead",
        "negative_pool",
        "class_token",
        "split_concat_bn",
        "gram",
    )
)
"""What the property test of ``quantize`` draws as float programs (``random_nf_program``):
every kind, and the shapes quantize once accepted and lower-to-hw then refused: a branch that
is 0 on every input (``dead``: a norm or RNN reading it), a ReLU-read average pool whose
output is negative everywhere (``negative_pool``), a class token concatenated to the
sequence (``class_token``), a lone batch norm after a concat of split parts
(``split_concat_bn``); with an embedding read directly by a norm or an RNN, a concat read by
softmax or a norm, a ReLU feeding an RNN as the other kinds meet."""


def random_nf_program(
    draw: Callable[[Any], Any], max_ops: int = 6, kinds: tuple[str, ...] = QUANTIZE_KINDS
) -> tuple[ModuleOp, tuple[int, ...]]:
    """A random float (nf) program made of ``kinds`` (the programs of
    :func:`random_nq_program` with every fake-quant left out, for ``quantize`` to place) and
    its float input's shape; :func:`program_inputs` makes inputs for it."""
    return random_nq_program(draw, max_ops, kinds, quantized=False)


def program_inputs(
    module: ModuleOp, rng: np.random.Generator, batch: int, scale: float = 1.0
) -> list[np.ndarray]:
    """An input for every argument of ``module``'s function: float64 normal times ``scale``,
    or, for an index input (read only by embeddings), int64 ids below every table's rows."""
    func = next(op for op in module.walk() if isinstance(op, FuncOp))
    inputs = []
    for arg in func.body.block.args:
        shape = [batch if d == DYNAMIC_INDEX else d for d in _shape(arg)]
        if nf.is_index_input(arg):
            vocab = min(_shape(u.operation.operands[1])[0] for u in arg.uses)
            inputs.append(rng.integers(0, vocab, shape).astype(np.int64))
        else:
            inputs.append(rng.standard_normal(shape) * scale)
    return inputs


def _exps(v: SSAValue) -> np.ndarray:
    """The exponents of the fake-quant ``v`` comes from."""
    op = v.owner
    assert isinstance(op, FakeQuantOp)
    return np.asarray(op.exp.get_values(), dtype=np.int64)


_SPATIAL_KINDS = frozenset(
    (
        "conv",
        "maxpool",
        "avgpool",
        "max_unpool",
        "adaptive_avgpool",
        "depth_to_space",
        "space_to_depth",
        "conv_transpose",
    )
)
"""Kinds whose op reads the program's ``spatial`` dims: drawn on values of that rank only."""


def random_nq_program(
    draw: Callable[[Any], Any],
    max_ops: int = 6,
    kinds: tuple[str, ...] = BASE_KINDS,
    quantized: bool = True,
) -> tuple[ModuleOp, tuple[int, ...]]:
    """A random exact-lowerable nq program made of ``kinds`` and its float input's shape
    (batch dim dynamic); a float program with ``quantized=False`` (:func:`random_nf_program`).
    With :data:`INDEX_KINDS` the program may take a second, integer input
    (:func:`program_inputs`)."""
    spatial = draw(st.sampled_from((1, 2)))
    channels = draw(st.integers(1, 4))
    sizes = tuple(draw(st.integers(3, 9)) for _ in range(spatial))
    in_shape = (DYNAMIC_INDEX, channels, *sizes)
    block = Block(arg_types=[TensorType(f32, in_shape)])
    b = ProgramBuilder(draw, spatial, quantized)
    x = b.fake_quant(
        block.args[0], bits=draw(st.sampled_from((2, 4, 8))), exp=draw(st.integers(-1, 5))
    )
    values = [x]
    extra: list[SSAValue] = []  # integer results (indices), returned
    for i in range(draw(st.integers(1, max_ops))):
        v = draw(st.sampled_from(values))
        shape = _shape(v)
        kind = draw(st.sampled_from(kinds))
        if kind in _SPATIAL_KINDS and len(shape) != 2 + spatial:
            continue  # (an embedding's or a recurrent op's [N, L, D] in a 2-D program)
        if kind == "conv":
            cin = shape[1]
            groups = draw(st.sampled_from([g for g in (1, 2, cin) if cin % g == 0]))
            cout = groups * draw(st.integers(1, 3))
            k = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
            strides = [draw(st.integers(1, 2)) for _ in range(spatial)]
            dil = [draw(st.integers(1, 2)) for _ in range(spatial)]
            pads = [draw(st.integers(0, 1)) for _ in range(2 * spatial)]
            fits = all(
                shape[2 + j] + pads[j] + pads[spatial + j] >= dil[j] * (k[j] - 1) + 1
                for j in range(spatial)
            )
            if not fits:
                continue
            w = b.weight((cout, cin // groups, *k), f"conv{i}.weight")
            bias = b.bias(cout, f"conv{i}.bias") if draw(st.booleans()) else None
            y = b.add(
                nf.ConvOp(v, w, bias, strides=strides, pads=pads, dilations=dil, groups=groups)
            ).results[0]
            values.append(b.act(y))
        elif kind == "relu":
            values.append(b.add(nf.ReluOp(v)).results[0])
        elif kind == "clamp":
            # ReLU6-like bounds that are whole codes at any exponent >= 0.
            values.append(b.act(b.add(nf.ClampOp(v, 0.0, 4.0)).results[0]))
        elif kind == "maxpool":
            if min(shape[2:]) < 2:
                continue
            values.append(
                b.add(
                    nf.MaxPoolOp(
                        v, [2] * spatial, strides=[2] * spatial, ceil_mode=draw(st.booleans())
                    )
                ).results[0]
            )
        elif kind == "avgpool":
            if min(shape[2:]) < 3:
                continue
            p = b.add(
                nf.AvgPoolOp(
                    v,
                    [3] * spatial,
                    strides=[1] * spatial,
                    pads=[1] * (2 * spatial),
                    count_include_pad=draw(st.booleans()),
                )
            ).results[0]
            values.append(
                b.fake_quant(
                    p,
                    bits=8,
                    mode=draw(st.sampled_from((RoundingMode.TRUNC, RoundingMode.FLOOR))),
                    base=draw(st.integers(0, 5)),
                )
            )
        elif kind == "add":
            same = [u for u in values if _shape(u) == shape]
            other = draw(st.sampled_from(same))
            values.append(b.act(b.add(nf.AddOp(v, other)).results[0]))
        elif kind == "mul":
            c = b.constant(np.array(draw(st.sampled_from((0.5, 2.0, -0.75, 1.25)))), f"s{i}")
            values.append(b.act(b.add(nf.MulOp(v, c)).results[0]))
        elif kind == "concat":
            same = [u for u in values if _shape(u)[2:] == shape[2:]]
            other = draw(st.sampled_from(same))
            values.append(b.add(nf.ConcatOp([v, other], axis=1)).results[0])
        elif kind in LUT_FUNCTIONS:
            values.append(b.lut(v, LUT_FUNCTIONS[kind]))
        elif kind == "softmax":  # an integer algorithm between per-tensor fake-quants
            x = b.fake_quant(v, bits=draw(st.sampled_from((4, 8))), per_channel_axis=None)
            axis = draw(st.integers(1, len(shape) - 1)) * draw(st.sampled_from((1, -1)))
            log = draw(st.booleans())
            op = nf.LogSoftmaxOp(x, axis) if log else nf.SoftmaxOp(x, axis)
            y = b.add(op).results[0]
            values.append(b.fake_quant(y, bits=8, exp=3 if log else 7, per_channel_axis=None))
        elif kind in ("layer_norm", "group_norm"):
            # An integer algorithm between per-tensor fake-quants, its affine weight and bias
            # per-tensor fake-quantized constants (as quantize leaves them).
            x = b.fake_quant(v, bits=draw(st.sampled_from((4, 8))), per_channel_axis=None)
            rank, eps = len(shape), draw(st.sampled_from((1e-5, 1e-3)))
            if kind == "layer_norm":
                dims = draw(st.integers(1, rank - 1))  # over the last dims, never the batch
                affine = tuple(shape[rank - dims :])
            else:
                c = shape[1]
                groups = draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
                affine = (c,)
            params = []
            for name, data in (
                ("weight", b.rng.uniform(-2.0, 2.0, affine)),
                ("bias", b.rng.uniform(-1.0, 1.0, affine)),
            ):
                base = int(quant.exp_from_absmax([float(np.abs(data).max()) or 1.0], 8)[0])
                const = b.constant(data, f"norm{i}.{name}")
                params.append(b.fake_quant(const, bits=8, base=base, per_channel_axis=None))
            if kind == "layer_norm":
                op = nf.LayerNormOp(x, params[0], params[1], dims, eps)
            else:
                op = nf.GroupNormOp(x, params[0], params[1], groups, eps)
            y = b.add(op).results[0]
            values.append(b.fake_quant(y, bits=8, base=4, per_channel_axis=None))
        elif kind == "expand":
            # A size-1 dim broadcast along itself (``x.narrow(d, i, 1).expand(...)``): the
            # piece is split off first unless the dim has size 1 already.
            d = draw(st.integers(1, len(shape) - 1))
            piece = v
            if shape[d] > 1:
                first, rest = b.add(nf.SplitOp(v, d, [1, shape[d] - 1])).results
                piece = first
                values.append(rest)
            size = list(_shape(piece))
            size[d] = draw(st.integers(2, 4))
            values.append(b.add(nf.ExpandOp(piece, size)).results[0])
        elif kind == "gather":
            # Constant indices along a non-batch dim, in any order, repeats allowed.
            axis = draw(st.integers(1, len(shape) - 1))
            idx = draw(st.lists(st.integers(0, shape[axis] - 1), min_size=1, max_size=5))
            values.append(b.add(nf.GatherOp(v, axis, idx)).results[0])
        elif kind == "prelu":
            n = shape[1] if draw(st.booleans()) else 1
            slope = b.constant(b.rng.uniform(-0.5, 1.5, n), f"prelu{i}.weight")
            slope = b.fake_quant(
                slope, bits=draw(st.sampled_from((4, 8))), exp=draw(st.integers(1, 5))
            )
            values.append(b.act(b.add(nf.PReluOp(v, slope)).results[0]))
        elif kind == "batch_norm":
            # A BN fold-bn cannot fold (a quantizer between it and its producer), parameters
            # quantized as quantize does (named constants), or left float.
            v = b.act(v)
            c = shape[1]
            params = [
                b.rng.uniform(0.5, 2.0, c),
                b.rng.standard_normal(c) * 0.5,
                b.rng.standard_normal(c) * 0.5,
                b.rng.uniform(0.1, 2.0, c),
            ]
            names = ("weight", "bias", "running_mean", "running_var")
            ops = [b.constant(p, f"bn{i}.{n}") for p, n in zip(params, names)]
            if draw(st.booleans()):
                ops = [b.fake_quant(o, bits=8, exp=4) for o in ops]
            y = b.add(nf.BatchNormOp(v, *ops, epsilon=draw(st.sampled_from((1e-5, 1e-3)))))
            values.append(b.act(y.results[0]))
        elif kind == "transpose":
            rank = len(shape)
            perm = [0, 1, 3, 2] if rank == 4 else [0, 2, 1]
            values.append(b.add(nf.TransposeOp(v, perm)).results[0])
        elif kind == "pad":
            rank = len(shape)
            mode = draw(st.sampled_from(("constant", "reflect", "edge")))
            pads = [0] * (2 * rank)
            for d in range(2, rank):
                top = min(2, shape[d] - 1) if mode == "reflect" else 2  # torch: < size
                pads[d], pads[rank + d] = draw(st.integers(0, top)), draw(st.integers(0, top))
            if mode == "constant" and draw(st.booleans()):
                pads[1] = 1  # the channel dim too
            value = draw(st.sampled_from((0.0, 0.5, -1.0, 0.25))) if mode == "constant" else 0.0
            values.append(b.add(nf.PadOp(v, pads, mode, value)).results[0])
        elif kind == "split":
            axis = 1 if shape[1] >= 2 and draw(st.booleans()) else len(shape) - 1
            if shape[axis] < 2:
                continue
            first = draw(st.integers(1, shape[axis] - 1))
            parts = b.add(nf.SplitOp(v, axis, [first, shape[axis] - first])).results
            values.extend(parts)
        elif kind == "upsample":
            if max(shape[2:]) > 9:
                continue
            size = [d * draw(st.integers(1, 2)) + draw(st.integers(0, 1)) for d in shape[2:]]
            values.append(b.add(nf.UpsampleNearestOp(v, size)).results[0])
        elif kind == "maximum":  # operands aligned by exact shifts, as add's
            same = [u for u in values if _shape(u) == shape]
            other = draw(st.sampled_from(same))
            cls = draw(st.sampled_from((nf.MaximumOp, nf.MinimumOp)))
            values.append(b.act(b.add(cls(v, other)).results[0]))
        elif kind == "upsample_zero":
            scales = [draw(st.integers(1, 2)) for _ in shape[2:]]
            offsets = [draw(st.integers(0, r - 1)) for r in scales]
            size = [d * r for d, r in zip(shape[2:], scales)]
            values.append(b.add(nf.UpsampleZeroOp(v, size, offsets)).results[0])
        elif kind == "upsample_bilinear":  # x2 or x1 per dim; the sum is requantized
            size = [d * draw(st.integers(1, 2)) for d in shape[2:]]
            values.append(b.act(b.add(nf.UpsampleBilinearOp(v, size)).results[0]))
        elif kind == "max_unpool":  # a 2x2 max pool's indices read by the unpool
            if spatial != 2 or min(shape[2:]) < 2:
                continue
            pooled = b.add(nf.MaxPoolOp(v, [2, 2], strides=[2, 2])).results[0]
            indices = b.add(nf.MaxPoolIndicesOp(v, [2, 2], [2, 2])).results[0]
            # (to the pooled input's size: indices count positions in its planes)
            values.append(b.add(nf.MaxUnpoolOp(pooled, indices, shape[2:])).results[0])
        elif kind == "sub":
            same = [u for u in values if _shape(u) == shape]
            other = draw(st.sampled_from(same))
            values.append(b.act(b.add(nf.SubOp(v, other)).results[0]))
        elif kind == "div":
            # By a constant whose reciprocal is dyadic: a product at the hw level.
            c = b.constant(np.array(draw(st.sampled_from((2.0, 4.0, 0.5, -2.0)))), f"d{i}")
            values.append(b.act(b.add(nf.DivOp(v, c)).results[0]))
        elif kind == "matmul":
            # x @ w over the last dim, both per tensor (what nh.matmul takes).
            x = b.fake_quant(v, bits=draw(st.sampled_from((2, 4, 8))), base=3)
            wdata = b.rng.standard_normal((shape[-1], draw(st.integers(1, 4)))) * 0.5
            bits = draw(st.sampled_from(BITS))
            base = int(quant.exp_from_absmax([float(np.abs(wdata).max()) or 1.0], bits)[0])
            w = b.fake_quant(b.constant(wdata, f"mm{i}.weight"), bits=bits, base=base)
            values.append(b.act(b.add(nf.MatmulOp(x, w)).results[0]))
        elif kind == "linear":
            # A linear layer over the last dim of a [N, C, *S] value (nn.Linear on a feature
            # map): a per-channel input is aligned to one exponent; the result (layout B..C at
            # the hw level) is quantized per channel along dim 1 or per tensor, like any
            # activation, and any kind may read it.
            out = draw(st.integers(1, 4))
            w = b.weight((out, shape[-1]), f"fc{i}.weight")
            bias = b.bias(out, f"fc{i}.bias") if draw(st.booleans()) else None
            values.append(b.act(b.add(nf.LinearOp(v, w, bias)).results[0]))
        elif kind == "adaptive_avgpool":
            if draw(st.booleans()):
                size = [1] * spatial  # global average pooling
            else:
                size = [
                    draw(st.sampled_from([o for o in range(1, d + 1) if d % o == 0]))
                    for d in shape[2:]
                ]
            p = b.add(nf.AdaptiveAvgPoolOp(v, size)).results[0]
            values.append(
                b.fake_quant(
                    p,
                    bits=8,
                    mode=draw(st.sampled_from((RoundingMode.TRUNC, RoundingMode.FLOOR))),
                    base=draw(st.integers(0, 5)),
                )
            )
        elif kind == "depth_to_space":
            r = draw(st.sampled_from((2, 3) if spatial == 1 else (2,)))
            if max(shape[2:]) * r > 18:
                continue
            if shape[1] % r**spatial:
                # A conv to a multiple of r**n channels first, as a pixel shuffle follows one.
                v = b.pointwise_conv(v, r**spatial * draw(st.integers(1, 2)), f"conv{i}")
            mode = draw(st.sampled_from(nf.BlockMode.ALL))
            values.append(b.add(nf.DepthToSpaceOp(v, r, mode)).results[0])
        elif kind == "space_to_depth":
            r = draw(st.sampled_from((2, 3)))
            if shape[1] * r**spatial > 18:
                continue
            rank = len(shape)
            ends = [-d % r for d in shape[2:]]
            if any(ends):
                # Padded at the end to a multiple of the block.
                pads = [0] * (2 * rank)
                pads[rank + 2 :] = ends
                mode = draw(st.sampled_from(("constant", "edge")))
                v = b.add(nf.PadOp(v, pads, mode, 0.0)).results[0]
            mode = draw(st.sampled_from(nf.BlockMode.ALL))
            values.append(b.add(nf.SpaceToDepthOp(v, r, mode)).results[0])
        elif kind == "channel_shuffle":
            # torch's channel_shuffle as the frontend decomposes it: reshape, transpose, reshape.
            c, rank = shape[1], len(shape)
            groups = [g for g in range(2, c) if c % g == 0]
            if not groups:
                continue
            g = draw(st.sampled_from(groups))
            split = b.add(nf.ReshapeOp(v, (DYNAMIC_INDEX, g, c // g, *shape[2:]))).results[0]
            perm = [0, 2, 1, *range(3, rank + 1)]
            swapped = b.add(nf.TransposeOp(split, perm)).results[0]
            values.append(b.add(nf.ReshapeOp(swapped, (DYNAMIC_INDEX, *shape[1:]))).results[0])
        elif kind == "conv_transpose":
            cin = shape[1]
            groups = draw(st.sampled_from([g for g in (1, 2, cin) if cin % g == 0]))
            cout = groups * draw(st.integers(1, 3))
            k = [draw(st.integers(1, 3)) for _ in range(spatial)]
            strides = [draw(st.integers(1, 3)) for _ in range(spatial)]
            dil = [draw(st.integers(1, 2)) for _ in range(spatial)]
            pads = [
                draw(st.integers(0, min(1, dil[j % spatial] * (k[j % spatial] - 1))))
                for j in range(2 * spatial)
            ]
            outpad = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dil)]
            out_sizes = [
                (shape[2 + j] - 1) * strides[j]
                - pads[j]
                - pads[spatial + j]
                + dil[j] * (k[j] - 1)
                + outpad[j]
                + 1
                for j in range(spatial)
            ]
            if not all(1 <= n <= 18 for n in out_sizes):
                continue
            # Weight [C, O/g, *K]: output channels (and per-channel exponents) along dim 1.
            w = b.weight((cin, cout // groups, *k), f"up{i}.weight", axis=1)
            bias = b.bias(cout, f"up{i}.bias") if draw(st.booleans()) else None
            y = b.add(
                nf.ConvTransposeOp(
                    v,
                    w,
                    bias,
                    strides=strides,
                    pads=pads,
                    dilations=dil,
                    output_padding=outpad,
                    groups=groups,
                )
            ).results[0]
            values.append(b.act(y))
        elif kind == "mul_branches":
            # A product of two runtime values: codes multiply, exponents add.
            same = [u for u in values if _shape(u) == shape]
            other = draw(st.sampled_from(same))
            values.append(b.act(b.add(nf.MulOp(v, other)).results[0]))
        elif kind == "add_constant":
            # A float constant operand (``x + 0.5``), used at an exponent where it is whole.
            c = b.constant(np.array(draw(st.sampled_from((0.5, 2.0, -1.25, 0.125)))), f"a{i}")
            values.append(b.act(b.add(nf.AddOp(v, c)).results[0]))
        elif kind == "matmul_branches":
            # x @ transpose(x) over the last dim (attention-like scores), both per tensor.
            if shape[-1] > 9:
                continue
            x = b.fake_quant(v, bits=draw(st.sampled_from((2, 4, 8))), base=3)
            rank = len(shape)
            perm = [*range(rank - 2), rank - 1, rank - 2]
            xt = b.add(nf.TransposeOp(x, perm)).results[0]
            values.append(b.act(b.add(nf.MatmulOp(x, xt)).results[0]))
        elif kind == "where":
            # A selection by a comparison (masked_fill's form): of two values, or of a value
            # and a threshold constant.
            same = [u for u in values if _shape(u) == shape]
            other = draw(st.sampled_from(same))
            pred = draw(st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne")))
            rhs = other
            if draw(st.booleans()):
                rhs = b.constant(np.array(draw(st.sampled_from((0.0, 0.5, -1.25)))), f"t{i}")
            cond = b.add(nf.CompareOp(v, rhs, pred)).results[0]
            first, second = (v, other) if draw(st.booleans()) else (other, v)
            values.append(b.act(b.add(nf.WhereOp(cond, first, second)).results[0]))
        elif kind == "reduce":
            rank = len(shape)
            dims = sorted(set(draw(st.lists(st.integers(1, rank - 1), min_size=1, max_size=2))))
            how = draw(st.sampled_from(("sum", "max", "min")))
            values.append(b.act(b.add(nf.ReduceOp(v, how, dims)).results[0]))
        elif kind == "arg_reduce":  # indices or truth values: integers, returned
            how = draw(st.sampled_from(("argmax", "argmin", "any", "all")))
            d = draw(st.integers(1, len(shape) - 1))
            extra.append(b.add(nf.ArgReduceOp(v, how, d)).results[0])
        elif kind == "cumsum":
            d = draw(st.integers(1, len(shape) - 1))
            values.append(b.act(b.add(nf.CumsumOp(v, d)).results[0]))
        elif kind == "normalize":  # an integer algorithm between per-tensor fake-quants
            x = b.fake_quant(v, bits=draw(st.sampled_from((4, 8))), per_channel_axis=None)
            axis = draw(st.integers(1, len(shape) - 1))
            y = b.add(nf.NormalizeOp(x, axis)).results[0]
            values.append(b.fake_quant(y, bits=8, exp=6, per_channel_axis=None))
        elif kind == "upsample_bicubic":  # x2 or x1 per spatial dim
            if max(shape[2:]) > 9:
                continue
            size = [d * draw(st.integers(1, 2)) for d in shape[2:]]
            values.append(b.act(b.add(nf.UpsampleBicubicOp(v, size)).results[0]))
        elif kind == "recurrent":
            if len(shape) != 3:
                continue
            values.append(_recurrent(b, v, i))
        elif kind == "embedding":  # token ids: a second, integer input
            vocab, dim = draw(st.integers(2, 6)), draw(st.integers(1, 4))
            ids = block.insert_arg(
                TensorType(f32, (DYNAMIC_INDEX, draw(st.integers(1, 6)))), len(block.args)
            )
            table = b.rng.standard_normal((vocab, dim))
            bits = draw(st.sampled_from(BITS))
            base = int(quant.exp_from_absmax([float(np.abs(table).max())], bits)[0])
            t = b.fake_quant(b.constant(table, f"emb{i}.weight"), bits=bits, base=base)
            values.append(b.add(nf.EmbeddingOp(ids, t)).results[0])
        elif kind == "dead":  # a 1x1 conv with zero weights: 0 on every input
            w = b.constant(np.zeros((shape[1], shape[1]) + (1,) * (len(shape) - 2)), f"dead{i}.w")
            wq = b.fake_quant(w, bits=8, exp=0)
            bias = b.fake_quant(b.constant(np.zeros(shape[1]), f"dead{i}.b"), bits=8, exp=0)
            values.append(b.act(b.add(nf.ConvOp(v, wq, bias)).results[0]))
        elif kind == "negative_pool":
            # A conv whose channel 0 is below -50 everywhere, average-pooled, then a ReLU
            # (which alone reads the pool: calibrated on its positive part, 0 in channel 0).
            c = shape[1]
            w = b.weight((c, c) + (1,) * (len(shape) - 2), f"neg{i}.weight")
            bias_data = b.rng.standard_normal(c) * 0.5
            bias_data[0] = -100.0
            bias = b.fake_quant(b.constant(bias_data, f"neg{i}.bias"), bits=8, exp=0)
            y = b.act(b.add(nf.ConvOp(v, w, bias)).results[0])
            size = [1] * (len(shape) - 2)
            p = b.add(nf.AdaptiveAvgPoolOp(y, size)).results[0]
            p = b.fake_quant(p, bits=8, mode=RoundingMode.TRUNC, base=draw(st.integers(0, 5)))
            values.append(b.add(nf.ReluOp(p)).results[0])
        elif kind == "class_token":
            # ViT: cat([cls.expand(N, -1, ...), x], 1) with a named [1, 1, *rest] parameter.
            cls = b.constant(b.rng.standard_normal((1, 1, *shape[2:])) * 3, f"cls{i}")
            cls = b.fake_quant(cls, bits=8, base=3)
            token = b.add(nf.ExpandOp(cls, (DYNAMIC_INDEX, 1, *shape[2:]), v)).results[0]
            values.append(b.add(nf.ConcatOp([token, v], axis=1)).results[0])
        elif kind == "gram":
            # Attention's scores: v @ v^T over the last dim, a matmul of two runtime values,
            # both per tensor ([N, C, L] -> [N, C, C], [N, C, H, W] -> [N, C, H, H]).
            x = b.fake_quant(v, bits=draw(st.sampled_from((2, 4, 8))), base=3)
            rank = len(shape)
            xt = b.add(nf.TransposeOp(x, [*range(rank - 2), rank - 1, rank - 2])).results[0]
            values.append(b.act(b.add(nf.MatmulOp(x, xt)).results[0]))
        elif kind == "split_concat_bn":
            # a, b = x.split(C // 2, 1); BatchNorm(cat([a, conv(b)], 1)) with random
            # statistics (fold-bn cannot fold a BN after a concat).
            c = shape[1]
            if c < 2:
                continue
            first, rest = b.add(nf.SplitOp(v, 1, [c // 2, c - c // 2])).results
            conv = b.pointwise_conv(rest, c - c // 2, f"conv{i}")
            cat = b.add(nf.ConcatOp([first, conv], axis=1)).results[0]
            cat = b.act(cat)  # (a quantized program: the BN's input on its own grid)
            stats = [
                b.rng.uniform(0.5, 2.0, c),
                b.rng.standard_normal(c) * 0.5,
                b.rng.standard_normal(c) * 0.5,
                b.rng.uniform(0.1, 2.0, c),
            ]
            names = ("weight", "bias", "running_mean", "running_var")
            params = [b.constant(p, f"bn{i}.{n}") for p, n in zip(stats, names)]
            values.append(b.act(b.add(nf.BatchNormOp(cat, *params)).results[0]))
    out = values[-1]
    if draw(st.booleans()):
        shape = _shape(out)
        flat = b.add(nf.ReshapeOp(out, [DYNAMIC_INDEX, int(np.prod(shape[1:]))])).results[0]
        features = int(np.prod(shape[1:]))
        w = b.weight((3, features), "fc.weight")
        y = b.add(nf.LinearOp(flat, w, b.bias(3, "fc.bias") if draw(st.booleans()) else None))
        out = b.act(y.results[0])
    block.add_ops(b.ops)
    # Return every value nothing else reads, so that no generated op is dead code.
    sinks = [v for v in values if not v.uses and v is not out] + extra + [out]
    block.add_op(ReturnOp(*sinks))
    ftype = FunctionType.from_lists([a.type for a in block.args], [v.type for v in sinks])
    module = ModuleOp([FuncOp("main", ftype, Region(block))])
    return module, (None, channels, *sizes)  # type: ignore[return-value]


def _recurrent(b: ProgramBuilder, v: SSAValue, i: int) -> SSAValue:
    """An ``nf.recurrent`` (any mode, 1-2 layers, either direction, biases or not) reading
    the rank-3 ``v`` as ``[N, T, F]`` directly (an embedding's result) or transposed from
    ``[N, C, L]``; its sequence output, back in ``v``'s layout. In a quantized program the
    operands come through per-tensor signed (or per-row weight) fake-quants and the internal
    grids are set, as quantize sets them."""
    draw = b.draw
    direct = draw(st.booleans())
    seq = v if direct else b.add(nf.TransposeOp(v, [0, 2, 1])).results[0]
    x = b.fake_quant(seq, bits=draw(st.sampled_from((4, 8))), per_channel_axis=None)
    layout = recurrent_numerics.RecurrentLayout(
        draw(st.sampled_from(recurrent_numerics.MODES)),
        draw(st.integers(1, 3)),
        draw(st.integers(1, 2)),
        draw(st.booleans()),
        True,
        draw(st.booleans()),
    )
    weights = []
    for j, w_shape in enumerate(layout.weight_shapes(_shape(seq)[2])):
        data = b.rng.standard_normal(w_shape) * 0.5
        c = b.constant(data, f"rnn{i}.w{j}")
        if len(w_shape) == 1:
            weights.append(b.fake_quant(c, bits=8, exp=draw(st.integers(-1, 2))))
            continue
        bits = draw(st.sampled_from((2, 4, 8)))
        base = int(quant.exp_from_absmax([float(np.abs(data).max()) or 1.0], bits)[0])
        weights.append(b.fake_quant(c, bits=bits, per_channel_axis=0, base=base))
    out, state, cell = layout.result_shapes(_shape(seq))
    types = [TensorType(f32, out), TensorType(f32, state)]
    if cell is not None:
        types.append(TensorType(f32, cell))
    op = b.add(nf.RecurrentOp(x, weights, layout, types))
    assert isinstance(op, nf.RecurrentOp)
    y = op.output
    if b.quantized:
        hidden = draw(st.integers(5, 7))
        op.properties["gates"] = nf.int_array([draw(st.integers(3, 6)), 8])
        op.properties["cell"] = nf.int_array([12, 16])
        op.properties["hidden"] = nf.int_array([hidden, 8])
        op.properties["rounding"] = StringAttr(str(draw(st.sampled_from(MODES))))
        y = b.fake_quant(y, bits=8, exp=hidden, per_channel_axis=None)
    return y if direct else b.add(nf.TransposeOp(y, [0, 2, 1])).results[0]


def _dense_f32(a: np.ndarray) -> str:
    return f"dense<{np.round(a, 3).tolist()}> : tensor<{'x'.join(map(str, a.shape))}xf32>"


def streaming_program(seed: int = 0) -> str:
    """Two streamed outputs of a stream of any length (the M dim is ``?``): a conv stack
    (pad 1, then dilation 2 with pad 2) into a transposed conv (k4, s2, p1: 2 rows per input
    row), and an unpadded k5 conv of the same features."""
    rng = np.random.default_rng(seed)
    w1, w2 = rng.standard_normal((6, 4, 3)) / 3, rng.standard_normal((6, 6, 3)) / 4
    wt, w3 = rng.standard_normal((6, 3, 4)) / 4, rng.standard_normal((5, 6, 5)) / 5
    t = "tensor<?x{}x?xf32>"
    return f"""\
func.func @main(%x: {t.format(4)}) -> ({t.format(3)}, {t.format(5)}) {{
  %w1 = nf.constant "c1.weight" {_dense_f32(w1)}
  %w2 = nf.constant "c2.weight" {_dense_f32(w2)}
  %wt = nf.constant "up.weight" {_dense_f32(wt)}
  %w3 = nf.constant "c3.weight" {_dense_f32(w3)}
  %a = nf.conv %x, %w1 {{pads = array<i64: 1, 1>}} : ({t.format(4)}, tensor<6x4x3xf32>) -> {t.format(6)}
  %ra = nf.relu %a : {t.format(6)}
  %b = nf.conv %ra, %w2 {{pads = array<i64: 2, 2>, dilations = array<i64: 2>}} : ({t.format(6)}, tensor<6x6x3xf32>) -> {t.format(6)}
  %h = nf.relu %b : {t.format(6)}
  %up = nf.conv_transpose %h, %wt {{strides = array<i64: 2>, pads = array<i64: 1, 1>}} : ({t.format(6)}, tensor<6x3x4xf32>) -> {t.format(3)}
  %c = nf.conv %h, %w3 : ({t.format(6)}, tensor<5x6x5xf32>) -> {t.format(5)}
  %rc = nf.relu %c : {t.format(5)}
  func.return %up, %rc : {t.format(3)}, {t.format(5)}
}}
"""
