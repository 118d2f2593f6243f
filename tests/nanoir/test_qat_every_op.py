"""QAT over every nf op quantize takes: ``nanoir.qat.prepare`` builds a step for each op of
random programs of every generator kind, or refuses with a QATError naming the op (never a
KeyError or a traceback). The kernel steps (``nanoir.qat.kernel_steps``: the nf.unary
family, compare and where, reduce, arg_reduce, cumsum, x2 bilinear and bicubic upsampling,
zero upsampling, embedding) train and convert: the module in eval mode equals
``nanoir.run`` of its converted program bit for bit, which equals quantize's nq program on
the exported exponents; their gradients are the numerical derivatives of their forward
values (``torch.autograd.gradcheck``, float64), so the torch function each takes its
gradient from is the op's own."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf
from nanoir.runtime.interpreter import run
from xdsl.dialects.builtin import TensorType, f64
from xdsl.ir import Block

import nanoir
from nanoir import qat
from nanoir.qat.kernel_steps import KERNEL_STEPS
from nanoir.qat.quantizer import QATError
from nanoir.qat.steps import build_step
from nanoir.testing.programs import QUANTIZE_KINDS, examples, program_inputs, random_nf_program

torch.set_num_threads(1)

KERNEL_KINDS = (
    "unary",
    "where",
    "reduce",
    "arg_reduce",
    "cumsum",
    "upsample_bilinear",
    "upsample_bicubic",
    "upsample_zero",
    "embedding",
)
"""The generator kinds whose ops take kernel steps."""
REFUSED = {"nf.max_unpool", "nf.max_pool_indices"}
"""Ops QAT refuses by name (an unpool by indices has no torch forward here)."""

_SETTINGS = settings(
    max_examples=examples(4),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("kind", sorted(set(QUANTIZE_KINDS)))
@_SETTINGS
@given(data=st.data())
def test_prepare_builds_every_op_or_refuses_it_by_name(kind: str, data: st.DataObject) -> None:
    """Random programs of ``kind``: prepare succeeds, or raises one QATError naming an op of
    the program (only the ones in REFUSED); the kernel kinds always succeed.
    kills: a KERNEL_STEPS entry dropped (its op refused); build_step raising KeyError for an
    op it has no step for."""
    module, _ = random_nf_program(data.draw, max_ops=3, kinds=(kind,))
    names = {op.name for op in module.walk() if op.name.startswith("nf.")}
    try:
        qat.prepare(module, ())
    except QATError as e:
        named = {n for n in names if n in str(e)}
        assert named & REFUSED, str(e)
        assert kind not in KERNEL_KINDS


def test_every_nf_op_class_is_reached() -> None:
    """The walk above meets every nf op class (nf.custom aside, which has no semantics):
    the generator draws each, and build_step knows each or refuses it by name.
    kills: a kind removed from QUANTIZE_KINDS (its op no longer walked)."""
    seen: set[type] = set()

    def walker(kind: str) -> object:
        @settings(max_examples=12, deadline=None, database=None)
        @given(data=st.data())
        def walk(data: st.DataObject) -> None:
            module, _ = random_nf_program(data.draw, max_ops=2, kinds=(kind,))
            seen.update(type(op) for op in module.walk())

        return walk

    for kind in sorted(set(QUANTIZE_KINDS)):
        walker(kind)()  # type: ignore[operator]
    assert set(nf.NF.operations) - seen <= {nf.CustomOp}


def _inputs(module: object, rng: np.random.Generator, batch: int) -> list[np.ndarray]:
    return program_inputs(module, rng, batch)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KERNEL_KINDS)
@_SETTINGS
@given(data=st.data())
def test_kernel_steps_convert_to_quantize_bit_for_bit(kind: str, data: st.DataObject) -> None:
    """prepare -> calibrate -> two SGD steps -> eval: the module equals ``nanoir.run`` of
    ``convert`` bit for bit, and that equals ``nanoir.quantize`` of the float program on the
    exported exponents.
    kills: a kernel step returning float32 for float64 inputs."""
    module, _ = random_nf_program(data.draw, max_ops=3, kinds=(kind,))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    options = {
        "act_bits": data.draw(st.sampled_from((4, 8, 16))),
        "rounding": data.draw(st.sampled_from(("trunc", "half_even"))),
    }
    calib = _inputs(module, rng, 8)
    # (bias correction reads the float program, NaN where a function leaves its domain:
    # a separate defect; the quantized semantics here are never NaN)
    assume(all(np.isfinite(y).all() for y in run(module, *calib, dtype=np.float64)))
    q = qat.prepare(module, (), **options)
    qat.calibrate(q, [tuple(calib)])
    params = [p for p in q.parameters() if p.requires_grad]
    if params:
        opt = torch.optim.SGD(params, lr=0.01)
        for _ in range(2):
            ys = q(*[torch.from_numpy(a) for a in calib])
            ys = ys if isinstance(ys, tuple) else (ys,)
            loss = sum((y.double() ** 2).mean() for y in ys)
            if loss.requires_grad:  # type: ignore[union-attr]
                opt.zero_grad()
                loss.backward()  # type: ignore[union-attr]
                opt.step()
    q.eval()
    x = _inputs(module, rng, 4)
    converted = qat.convert(q)
    gots = run(converted, *x, dtype=np.float64)
    wants = qat.evaluate(q, *x)
    wants = wants if isinstance(wants, tuple) else (wants,)
    for got, want in zip(gots, wants):
        assert np.array_equal(got, np.asarray(want)), (got, want)
    plain = qat.float_program(q)
    nanoir.quantize(plain, exponents=qat.export_exponents(q))
    for got, want in zip(run(plain, *x, dtype=np.float64), gots):
        assert np.array_equal(got, want)


def _kernel_ops(kind: str, draw: object) -> list[object]:
    module, _ = random_nf_program(draw, max_ops=2, kinds=(kind,))  # type: ignore[arg-type]
    return [op for op in module.walk() if type(op) in KERNEL_STEPS]


@pytest.mark.parametrize("kind", KERNEL_KINDS)
@_SETTINGS
@given(data=st.data())
def test_kernel_step_gradients_are_numerical_derivatives(kind: str, data: st.DataObject) -> None:
    """Each kernel step's gradient (torch's function of the op) equals the central
    difference of its forward value (nanoir's kernel), float64, on inputs inside every
    function's domain and away from ties; piecewise constant ops have no gradient.
    kills: cumsum's gradient along another dim; reduce's over other dims; bicubic's from
    bilinear; a unary function's gradient from another (exp's from log)."""
    for op in _kernel_ops(kind, data.draw):
        if isinstance(op, nf.CompareOp | nf.ArgReduceOp):
            continue
        step = build_step(op)
        rng = np.random.default_rng(0)
        args = []
        for v in op.operands:
            shape = [2 if d < 0 else d for d in nf.tensor_shape(v)]
            if isinstance(op, nf.EmbeddingOp) and v is op.indices:
                rows = nf.tensor_shape(op.table)[0]
                args.append(torch.from_numpy(rng.integers(0, rows, shape)))
            elif isinstance(op, nf.WhereOp) and v is op.cond:
                args.append(torch.from_numpy((rng.random(shape) < 0.5).astype(np.float64)))
            else:  # distinct values in (0.5, 1.5): in every domain, no ties for max/min
                n = int(np.prod(shape))
                vals = 0.5 + (rng.permutation(n) + 0.5) / n
                args.append(torch.from_numpy(vals.reshape(shape)).requires_grad_(True))
        assert torch.autograd.gradcheck(
            lambda *a: step(*a)[0], tuple(args), eps=1e-6, atol=1e-5, rtol=1e-4
        ), op.name


@pytest.mark.parametrize(
    ("fn", "outside", "want"),
    [("sqrt", -4.0, 0.0), ("asin", 2.0, math.pi / 2), ("acos", -3.0, math.pi)],
)
def test_unary_step_outside_its_domain_is_the_nearest_points_value(
    fn: str, outside: float, want: float
) -> None:
    """QAT computes what the converted program does, where a fake-quant reads nf.unary: the
    function at the nearest point of its domain (math's value there), never NaN; inside the
    domain, math's value.
    kills: the step computing unary.evaluate (NaN outside the domain)."""
    block = Block(arg_types=[TensorType(f64, (2,))])
    step = build_step(nf.UnaryOp(block.args[0], fn, ()))
    (y,) = step(torch.tensor([outside, 0.25], dtype=torch.float64))
    assert y.dtype == torch.float64
    assert y[0].item() == pytest.approx(want, abs=1e-12)
    assert y[1].item() == pytest.approx(getattr(math, fn)(0.25), abs=1e-12)
