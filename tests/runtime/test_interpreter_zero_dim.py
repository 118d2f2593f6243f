"""0-d tensors keep torch's shapes through the executor (issue 31 §1 item 5; the fix is
commit 50c450f, the input check's ``np.ascontiguousarray`` made a 0-d input 1-d).

Each op of the issue's list (and their neighbours) is imported from torch with 0-d inputs and
run at the float level and, quantized, at the nq level; torch gives the oracle's shapes and
values. An nh program has no 0-d values (lower-to-hw refuses them by name).
"""

from __future__ import annotations

import numpy as np
import pytest

import nanoir

torch = pytest.importorskip("torch")

INPUTS = {
    "x": torch.tensor(1.5),
    "y": torch.tensor(-0.25),
    "v": torch.tensor([1.25]),
    "s": torch.tensor([1.5, -0.5, 2.0]),
    "i": torch.tensor(3),
}
"""The program's inputs: 0-d ``x``, ``y`` and index ``i``; ``v`` and ``s`` become 0-d."""


class ZeroDim(torch.nn.Module):
    """Every op of the issue's list (and neighbours) on 0-d values, one output each."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(7, 5)

    def forward(self, x, y, v, s, i):  # noqa: ANN001, ANN201
        return {
            "add": x + y,
            "add_self": x + x,
            "mul": x * 3,
            "sub": 2 - x,
            "div": x / 4,
            "relu": torch.relu(y),
            "sigmoid": torch.sigmoid(x),
            "tanh": torch.tanh(y),
            "clamp": x.clamp(-1, 1),
            "clone": x.clone(),
            "transpose": x.t(),
            "permute": x.permute(()),
            "maximum": torch.maximum(x, y),
            "where": torch.where(y > 0, y, -y),
            "to_0d": v.reshape(()),
            "from_0d": x.reshape(1, 1),
            "sum_to_0d": s.sum(),
            "times_vector": x * torch.arange(3.0),
            "embedding": self.embed(i),
        }


NAMES = list(ZeroDim()(*INPUTS.values()))


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
    """Per level, nanoir's outputs and torch's, in ``NAMES`` order."""
    torch.manual_seed(0)
    model = ZeroDim().eval()
    args = tuple(INPUTS.values())
    with torch.no_grad():
        want = [y.numpy() for y in model(*args).values()]
    arrays = [a.numpy() for a in args]
    module = nanoir.from_torch(model, args, dynamic_batch=False)
    out = {"nf": (nanoir.run(module, *arrays), want)}
    nanoir.quantize(module, [tuple(arrays)])
    out["nq"] = (nanoir.run(module, *arrays), want)
    return out


@pytest.mark.parametrize("level", ["nf", "nq"])
def test_zero_dim_values_keep_torch_shapes(
    runs: dict[str, tuple[list[np.ndarray], list[np.ndarray]]], level: str
) -> None:
    """Each result has torch's shape (``[]``, or ``[5]`` for an embedding of a 0-d index) and
    torch's value (the nq level: within its 8-bit grid's error).
    kills: the input check's ``np.ascontiguousarray`` (a 0-d input made ``[1]``: ``[1]``
    results, ``[1, 5]`` for the embedding)."""
    got, want = runs[level]
    assert len(got) == len(NAMES)
    for name, g, w in zip(NAMES, got, want):
        assert np.shape(g) == w.shape, name
        tol = 1e-6 if level == "nf" else 2.0**-5 * max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, atol=tol, rtol=0, err_msg=name)
