"""A converted QAT program says which join rule chose an exponent (the fake-quant's
``origin``, as quantize writes it) only while that is true (issue 31, section 5: an origin
outlived the exponent it explained).

``y`` is 0 on the calibration batch, so the join rule gives it ``x``'s exponent (origin
``join:%s``); training then shows ``y`` 16 times ``x``'s range and the ema learner moves its
exponent away: the rule no longer chose it.

Needs torch (the ``torch`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nanoir.dialects.dense import dense_to_numpy  # noqa: E402

import nanoir  # noqa: E402
from nanoir import qat  # noqa: E402


def _program() -> str:
    w = np.round(np.random.default_rng(0).uniform(-1, 1, (3, 4)) * 64) / 64
    dense = np.array2string(w, separator=", ", floatmode="unique").replace("\n", "")
    return f"""func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x3xf32> {{
  %s = nf.add %x, %y : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %w = nf.constant "fc.weight" dense<{dense}> : tensor<3x4xf32>
  %l = nf.linear %s, %w : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  func.return %l : tensor<?x3xf32>
}}"""


def _fake_quants(module) -> dict[str, tuple[int, str | None]]:  # noqa: ANN001
    """``name -> (exponent, origin)`` of the inputs' fake-quants."""
    return {
        op.input.name_hint: (
            int(np.asarray(dense_to_numpy(op.exp)).reshape(-1)[0]),
            None if op.origin is None else op.origin.data,
        )
        for op in module.walk()
        if op.name == "nq.fake_quant" and op.input.name_hint in ("x", "y")
    }


def test_an_origin_lasts_while_its_exponent_does():
    """After calibration ``convert`` writes ``y``'s origin (the join rule chose its exponent);
    after training moved that exponent, no origin (``x``'s exponent, which no rule chose,
    never has one).

    kills: the calibrated origin kept whatever the exponent became (``JoinRules.settle``
    without its ``np.array_equal(settled, start)``: the trained program still said
    ``join:%s`` on ``y`` at exponent 3, which no join chose); the calibrated origins dropped
    (``qat.calibrate`` not recording them: nothing said why ``y`` took ``x``'s exponent)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    q = qat.prepare(nanoir.parse(_program()), (), learner="ema")
    qat.calibrate(q, [(x, np.zeros_like(x))])
    before = _fake_quants(qat.convert(q))
    assert before["y"] == (before["x"][0], "join:%s") and before["x"][1] is None

    y = (rng.standard_normal((16, 4)) * 16).astype(np.float32)
    labels = rng.integers(0, 3, 16)
    data = [
        (
            torch.from_numpy(x[i : i + 4]),
            torch.from_numpy(y[i : i + 4]),
            torch.from_numpy(labels[i : i + 4]),
        )
        for i in range(0, 16, 4)
    ]
    qat.train(q, data, epochs=3, lr=1e-2)
    after = _fake_quants(qat.convert(q))
    assert after["y"][0] != before["y"][0]  # the premise: the learner moved it
    assert after["y"][1] is None and after["x"][1] is None
