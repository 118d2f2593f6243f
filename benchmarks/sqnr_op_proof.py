"""SQNR of nq against nf at the output of each issue-21 op in the proof networks
(``nanoir.testing.op_proof_models``), 8-bit weights and activations: the table in
docs/ADDING_AN_OP.md ("The issue-21 proof networks").

Per network: fixed weights (``make_op_proof_model``), quantized on 4 batches of 8 N(0, 1)
inputs, measured on 4 other batches. "own" is the op's error alone: its nq output against
torch's float function (float64 kernels) of the same quantized operands (the table's rounding,
or the integer algorithm's error and its output rounding; measured here, as ``nanoir.report``
sees an integer algorithm's output already on its grid); "vs float" is ``nanoir.report``'s:
the quantized program against the float one at that tensor (every earlier error included).
Also checks nq == nh. A network that does not import yet prints why.

    python benchmarks/sqnr_op_proof.py
"""

from __future__ import annotations

import numpy as np
import torch
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.runtime.interpreter import compile_function, default_builders, find_function
from nanoir.runtime.nf import NF_BUILDERS
from nanoir.runtime.numerics import norm, softmax

import nanoir
from nanoir.testing.op_proof_models import OP_PROOF_MODELS, make_op_proof_model

torch.set_num_threads(1)

OPS = (
    "nf.silu",
    "nf.sigmoid",
    "nf.gelu",
    "nf.layer_norm",
    "nf.group_norm",
    "nf.softmax",
    "nf.log_softmax",
    "nf.prelu",
    "nf.expand",
)


def float_kernel(op):  # noqa: ANN001, ANN201
    """Torch's float function of the op (float64), also for ops nq runs as integer
    algorithms."""
    p = op.properties
    if op.name == "nf.layer_norm":
        dims, eps = p["normalized_dims"].value.data, p["epsilon"].value.data
        return lambda x, w, b: norm.layer_norm(x, w, b, dims, eps)
    if op.name == "nf.group_norm":
        groups, eps = p["groups"].value.data, p["epsilon"].value.data
        return lambda x, w, b: norm.group_norm(x, w, b, groups, eps)
    if op.name == "nf.softmax":
        return lambda x, *mask: softmax.softmax(x, p["axis"].value.data, *mask)
    if op.name == "nf.log_softmax":
        return lambda x: softmax.log_softmax(x, p["axis"].value.data)
    kernel = NF_BUILDERS[type(op)](op, np.dtype(np.float64))
    return lambda *xs: kernel(*xs)[0]


def own_sqnr(module, batches: list[np.ndarray]) -> dict:  # noqa: ANN001
    """Per op of ``OPS``: the SQNR of its nq output (after its fake-quant) against its float
    function of the same nq operands, over ``batches``."""
    func = find_function(module, None)
    plan = compile_function(func, default_builders(), np.dtype(np.float64))
    ops = [op for op in func.walk() if op.name in OPS]
    power = {op: [0.0, 0.0] for op in ops}
    for x in batches:
        values = dict(zip(func.body.block.args, [x]))

        def observe(op, results) -> None:  # noqa: ANN001
            values.update(zip(op.results, results))

        plan(x, observe=observe)

        def value(v):  # noqa: ANN001, ANN202
            return values[v] if v in values else plan.constants[plan.slot_of[v]]

        for op in ops:
            (fq,) = [u.operation for u in op.results[0].uses]
            f = float_kernel(op)(*[value(v) for v in op.operands])
            q = value(fq.results[0])
            power[op][0] += float(np.sum(f**2))
            power[op][1] += float(np.sum((q - f) ** 2))
    return {op: 10 * np.log10(s / n) if n else np.inf for op, (s, n) in power.items()}


def measure(name: str) -> list[tuple[str, str, float, float]]:
    model = make_op_proof_model(name)
    shape = tuple(model.make_example_input(8).shape)
    rng = np.random.default_rng(0)
    module = nanoir.from_torch(model, (torch.randn(shape),))  # the batch dynamic
    FoldBnPass().apply(nanoir.make_context(), module)
    nanoir.quantize(
        module, [rng.standard_normal(shape) for _ in range(4)], weight_bits=8, act_bits=8
    )
    held_out = [rng.standard_normal(shape) for _ in range(4)]
    rep = nanoir.report(module, held_out)
    fqs = [op for op in module.walk() if isinstance(op, FakeQuantOp)]
    assert len(fqs) == len(rep.rows)
    row_of = {fq.input: row for fq, row in zip(fqs, rep.rows)}
    try:
        hw = nanoir.lower_to_hw(module.clone())
    except nanoir.Error as e:
        print(f"{name}: not lowered: {str(e).splitlines()[0]}")
    else:
        x = held_out[0]
        same = zip(nanoir.run(hw, x), nanoir.run(module, x))
        assert all(np.array_equal(a, b) for a, b in same)
    own = own_sqnr(module, held_out)
    found = []
    for op in module.walk():
        if op.name in OPS and op.results[0] in row_of:
            row = row_of[op.results[0]]
            at = op.results[0].name_hint or ""
            found.append((op.name, at, own[op], row.sqnr_vs_float))
    return found


def main() -> None:
    print("| Net | Op | at | own dB | vs float dB |")
    print("|---|---|---|---|---|")
    for name in OP_PROOF_MODELS:
        try:
            rows = measure(name)
        except nanoir.Error as e:
            print(f"| {name} | (not measured: {str(e).splitlines()[0][:90]}) | | | |")
            continue
        for i, (op, at, own, vs) in enumerate(rows):
            print(f"| {name if i == 0 else ''} | `{op}` | {at} | {own:.1f} | {vs:.1f} |")


if __name__ == "__main__":
    main()
