"""The named pipeline stops where asked and matches the stages run one by one."""

from __future__ import annotations

import numpy as np
import pytest

import nanoir
from nanoir.pipeline import STAGES

torch = pytest.importorskip("torch")
from nanoir.testing import make_test_model  # noqa: E402 - needs torch


def ops(module) -> set[str]:  # noqa: ANN001
    return {op.name.split(".")[0] for op in module.walk() if "." in op.name}


def test_each_stage_and_the_end_result() -> None:
    model = make_test_model("KWSNet")
    x = model.make_example_input(2)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((4, *x.shape[1:])) for _ in range(2)]
    seen = {}
    for stop in STAGES:
        seen[stop] = nanoir.compile_model(
            model, (x,), calibration, stop=stop, stream={"mem_dim": 2}
        )
    assert "nq" not in ops(seen["folded"]) and any(
        op.name == "nf.batch_norm" for op in seen["nf"].walk()
    )
    assert not any(op.name == "nf.batch_norm" for op in seen["folded"].walk())
    assert "nq" in ops(seen["nq"]) and "nh" not in ops(seen["nq"])
    assert "nf" not in ops(seen["nh"]) and "nh" in ops(seen["nh"])
    assert "stream.plan" in nanoir.runtime.interpreter.find_function(seen["streamed"]).attributes
    xs = rng.standard_normal((3, *x.shape[1:]))
    (want,) = nanoir.run(seen["nq"], xs)
    (got,) = nanoir.run(seen["nh"], xs)
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match="stop must be one of"):
        nanoir.compile_model(model, (x,), stop="asm")
