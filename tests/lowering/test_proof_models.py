"""The proof networks of issue 20 (``nanoir.testing.proof_models``) compile to nh and run exactly.

Each pattern once made lower-to-hw refuse what calibration chose (measured before the fix, 8-bit
weights; the same at 4 bits):

- ZeroInitResidual, zero-init: ``'nf.add' (%layer1.0) aligning operands needs 63-bit codes``;
- DLATree, zero-init: the same at ``%level.tree1.tree1``; fresh BN: ``'nf.conv'
  (%level.tree1.root.last_bn) may overflow i32 once aligned to its bias``;
- CSPTransition, zero-init: ``'nf.add' (%blocks.0) aligning operands needs 62-bit codes``;
  fresh BN: ``'nf.conv' (%blocks.0.conv1.1) may overflow i32 once aligned to its bias``
  (a conv after split);
- RepVGGBlock, zero-init: ``'nf.add' (%stages.1) aligning operands needs 63-bit codes``;
- MagikFront, fresh BN: ``'nf.conv' (%conv2.1) may overflow i32 once aligned to its bias``
  (the conv after the ``Route`` concat).

Every model, BatchNorm mode, rounding mode, 8-bit and 4-bit weights: ``compile_model(...,
stop="nh")`` succeeds and the nh program equals the nq program bit for bit (the oracle is the
nq program run by the NumPy interpreter in float64).
"""

from __future__ import annotations

import numpy as np
import pytest
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import RoundingMode

import nanoir

torch = pytest.importorskip("torch")
proof = pytest.importorskip("nanoir.testing.proof_models")


def _batches(model: object, n: int, seed: int) -> list[np.ndarray]:
    shape = model.make_example_input(2).shape  # type: ignore[attr-defined]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("bn", proof.BN_MODES)
@pytest.mark.parametrize("name", sorted(proof.PROOF_MODELS))
def test_proof_model_lowers_exactly(name: str, bn: str) -> None:
    """``compile_model(..., stop="nh")`` on every rounding mode and 8/4-bit weights; nh ==
    nq. Mutants caught (private copy): ``Settler.join`` returning at once (the zero-init
    cases), ``sources`` not looking through concat and split (CSPTransition and MagikFront
    with fresh BN: "may overflow i32 once aligned to its bias")."""
    model = proof.make_proof_model(name, bn)
    example = torch.from_numpy(_batches(model, 1, 0)[0])
    calibration = _batches(model, 2, 1)
    inputs = _batches(model, 1, 2)
    folded = nanoir.compile_model(model, (example,), stop="folded")
    for rounding in RoundingMode:
        for weight_bits in (8, 4):
            module = folded.clone()
            nanoir.quantize(
                module, calibration, rounding=rounding, weight_bits=weight_bits, progress=False
            )
            want = run(module, *inputs, dtype=np.float64)
            hw = lower_to_hw(module.clone())
            got = run(hw, *inputs)
            for g, w in zip(got, want, strict=True):
                assert np.array_equal(g, w), (name, bn, rounding, weight_bits)


def test_compile_model_to_nh() -> None:
    """The user's path: ``compile_model(..., stop="nh")`` on the zero-init residual network
    and the fresh Magik front end (both refused before); the residual join shows in the nq
    program as an ``origin`` (the Magik fix is a bias cap through the concat: no origin)."""
    for name, bn in (("ZeroInitResidual", "zero_init"), ("MagikFront", "fresh")):
        model = proof.make_proof_model(name, bn)
        example = torch.from_numpy(_batches(model, 1, 0)[0])
        calibration = _batches(model, 2, 1)
        hw = nanoir.compile_model(model, (example,), calibration, stop="nh")
        assert "nh.conv" in str(hw)
        if bn == "zero_init":
            nq = nanoir.compile_model(model, (example,), calibration, stop="nq")
            assert 'origin = "join:%layer1.0"' in str(nq)
