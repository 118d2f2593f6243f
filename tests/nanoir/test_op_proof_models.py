"""The proof networks of issue 21 (``nanoir.testing.op_proof_models``): torch -> nf within
1e-5 of torch in float64, and nq -> nh bit for bit on random inputs.

The oracles: torch's own module in float64 for nf; the nq program run by the NumPy
interpreter in float64 for nh (the contract: nh's numbers are nq's exactly). A network whose op
has not landed is marked ``xfail(strict=True, raises=...)`` naming the op: it turns into a
failure as soon as the op lands (then remove the mark), and fails outright if it breaks for
another reason. Every network imports with a dynamic batch (TinyViT's class token is expanded
to it by ``nf.expand`` with a shape source; ``STATIC_BATCH`` would name one that cannot).

Mutants checked (each made the tests named fail, in a private copy):
- the nf LayerNorm kernel's variance divided by ``n - 1``: test_nf_matches_torch[ConvNeXtBlock];
- the nf GroupNorm kernel without its per-channel weight: test_nf_matches_torch[TasNetBlock];
- the frontend's slice_scatter leaving the slice unwritten: test_nf_matches_torch[GhostBlock];
- the nf log_softmax normalising by ``log(sum(exp(x)))`` (not of ``x - max``):
  test_nf_matches_torch[KeywordNet];
- the nh LayerNorm / GroupNorm kernels reading the bias one exponent off:
  test_nq_equals_nh[*-ConvNeXtBlock] / test_nq_equals_nh[*-TasNetBlock];
- the lookup-table kernel ignoring ``channels``: test_lookup_tables_in_a_network[per-channel];
- a segmented table searched with ``side="left"``: test_lookup_tables_in_a_network[16-bit].
- the report broadcasting a scalar constant's exponent ``[k]`` as it is (the bug it had):
  test_report_measures_every_op[TinyViT];
- the frontend's expand taking no shape source (the class token's ``expand(x.shape[0], ...)``
  is then refused): test_imports_with_a_dynamic_batch[TinyViT].
"""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.dialects import nh
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run

import nanoir

torch = pytest.importorskip("torch")
proof = pytest.importorskip("nanoir.testing.op_proof_models")

torch.set_num_threads(1)

STATIC_BATCH: dict[str, str] = {}
"""Networks imported with a static batch (``dynamic_batch=False``), and why."""

MISSING: dict[str, dict[str, tuple[str, type[BaseException]]]] = {}
"""Per test, networks blocked by an op that has not landed: the reason (naming the op) and
the error it raises."""


def _params(test: str) -> list:  # noqa: ANN001
    missing = MISSING.get(test, {})
    return [
        pytest.param(
            name,
            marks=pytest.mark.xfail(strict=True, reason=missing[name][0], raises=missing[name][1]),
        )
        if name in missing
        else name
        for name in sorted(proof.OP_PROOF_MODELS)
    ]


def _import(name: str, model: object, example: np.ndarray):  # noqa: ANN202
    dynamic = name not in STATIC_BATCH
    return nanoir.from_torch(model, (torch.from_numpy(example),), dynamic_batch=dynamic)


def _inputs(model: object, n: int, seed: int, batch: int = 2) -> list[np.ndarray]:
    shape = model.make_example_input(batch).shape  # type: ignore[attr-defined]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("name", _params("dynamic"))
def test_imports_with_a_dynamic_batch(name: str) -> None:
    """Every network imports with its batch dim dynamic (``?``), as ``from_torch`` does by
    default."""
    model = proof.make_op_proof_model(name)
    module = nanoir.from_torch(model, (torch.from_numpy(_inputs(model, 1, 0)[0]),))
    assert "tensor<?x" in str(module)


@pytest.mark.parametrize("name", _params("nf"))
def test_nf_matches_torch(name: str) -> None:
    """The imported nf program holds the ops the network is here for and, run in float64,
    equals torch's module in float64 within 1e-5 * max(1, max |torch|), at two batch sizes
    (the batch dim is dynamic; batch 2 only for ``STATIC_BATCH``)."""
    model = proof.make_op_proof_model(name)
    module = _import(name, model, _inputs(model, 1, 0)[0])
    names = {op.name for op in module.walk()}
    assert set(proof.OP_PROOF_OPS[name]) <= names, names
    double = proof.make_op_proof_model(name).double()
    for batch in (2,) if name in STATIC_BATCH else (1, 3):
        x = _inputs(model, 1, 5 + batch, batch)[0].astype(np.float64)
        with torch.no_grad():
            want = double(torch.from_numpy(x)).numpy()
        (got,) = run(module, x, dtype=np.float64)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("name", _params("nh"))
@pytest.mark.parametrize(
    "options",
    [
        {"weight_bits": 8, "act_bits": 8, "rounding": "trunc"},
        {"weight_bits": 4, "act_bits": 8, "rounding": "half_even"},
    ],
    ids=["w8a8-trunc", "w4a8-half_even"],
)
def test_nq_equals_nh(name: str, options: dict) -> None:
    """Calibrated on random batches, lowered to nh: the nh program's numbers are the nq
    program's bit for bit on held-out random inputs."""
    model = proof.make_op_proof_model(name)
    module = _import(name, model, _inputs(model, 1, 0)[0])
    FoldBnPass().apply(nanoir.make_context(), module)
    nanoir.quantize(module, _inputs(model, 2, 1), progress=False, **options)
    hw = lower_to_hw(module.clone())
    assert not any(op.name.startswith(("nf.", "nq.")) for op in hw.walk())
    for x in _inputs(model, 2, 2, batch=2 if name in STATIC_BATCH else 3):
        want = run(module, x, dtype=np.float64)
        got = run(hw, x)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("options", "form"),
    [({"act_bits": 16}, "starts"), ({"act_per_channel": True}, "channels")],
    ids=["16-bit", "per-channel"],
)
def test_lookup_tables_in_a_network(options: dict, form: str) -> None:
    """MBConvSE's five tables (three SiLU, SE's SiLU and sigmoid) with 16-bit activations
    (segmented tables) or per-channel activation exponents (per-channel sub-tables): nh ==
    nq bit for bit."""
    model = proof.make_op_proof_model("MBConvSE")
    example = torch.from_numpy(_inputs(model, 1, 0)[0])
    module = nanoir.compile_model(model, (example,), stop="folded")
    nanoir.quantize(module, _inputs(model, 2, 1), progress=False, **options)
    hw = lower_to_hw(module.clone())
    luts = [op for op in hw.walk() if isinstance(op, nh.LutOp)]
    assert len(luts) == 5 and all(getattr(op, form) is not None for op in luts)
    for x in _inputs(model, 2, 2, batch=3):
        np.testing.assert_array_equal(run(hw, x)[0], run(module, x, dtype=np.float64)[0])


@pytest.mark.parametrize("name", sorted(proof.OP_PROOF_MODELS))
def test_report_measures_every_op(name: str) -> None:
    """``nanoir.report`` runs on each quantized network (TinyViT's attention scale is a scalar
    constant: its exponent ``[k]`` once failed to broadcast to the scalar, a ValueError) and
    gives every fake-quanted op output of the network a finite SQNR above 10 dB against the
    float program at 8 bits."""
    model = proof.make_op_proof_model(name)
    module = _import(name, model, _inputs(model, 1, 0)[0])
    FoldBnPass().apply(nanoir.make_context(), module)
    nanoir.quantize(module, _inputs(model, 2, 1), progress=False)
    report = nanoir.report(module, _inputs(model, 2, 2))
    fqs = [op for op in module.walk() if op.name == "nq.fake_quant"]
    assert len(fqs) == len(report.rows)
    outputs = {
        fq.input: row
        for fq, row in zip(fqs, report.rows)
        if getattr(fq.input.owner, "name", "") in proof.OP_PROOF_OPS[name]
    }
    assert outputs or name == "GhostBlock"  # its split and concat add no fake-quant
    assert all(10 < row.sqnr_vs_float < np.inf for row in outputs.values()), outputs
