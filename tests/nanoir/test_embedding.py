"""``nn.Embedding`` by integer inputs, end to end: nf equals torch; quantize gives the table the
weight rules per tensor and puts no fake-quant on the indices; nq equals a NumPy fake-quant of
the table indexed by the ids, and nh (``i32`` ids at exponent 0) equals nq bit for bit; an id
outside the table is a runtime error naming the op; the Embedding -> Conv1d text classifier
compiles from integer calibration batches, streams along the sequence (dim 1) equal to its
whole run, and its ``.ne`` at both levels (``Tensor<int64_t>`` input, ``Embedding`` row) reads
back byte for byte."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh, nq
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import ExecutionError, run
from nanoir.runtime.stream import stream
from torch import nn
from xdsl.ir import BlockArgument

import nanoir
from nanoir.cli.run import main as nanoir_run
from nanoir.frontend import FrontendError, from_torch
from nanoir.testing.magik_models import MAGIK_INPUTS, TEXT_VOCAB, make_magik_model
from nanoir.testing.programs import examples

torch.set_num_threads(1)


class _TwoTables(nn.Module):
    """``nn.Embedding`` with a padding row and ``F.embedding`` on a second table, summed."""

    def __init__(self, max_norm: float | None = None):
        super().__init__()
        self.a = nn.Embedding(7, 3, padding_idx=0)
        self.b = nn.Parameter(torch.randn(7, 3))
        self.max_norm = max_norm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.a(ids) + F.embedding(ids, self.b, max_norm=self.max_norm)


def test_embedding_equals_torch_and_max_norm_is_refused() -> None:
    """nf (float64) == torch on int64 ids of another batch size (dynamic batch), the ids an
    nf input read only by the two nf.embedding ops; ``max_norm`` is refused with the reason.
    Mutant seen to fail it: the kernel indexing ``table[indices - 1]``."""
    torch.manual_seed(0)
    net = _TwoTables().eval()
    module = from_torch(net, (torch.randint(0, 7, (2, 5)),))
    ids = torch.tensor([[0, 6, 3, 3, 1], [5, 4, 2, 0, 6], [1, 1, 1, 2, 2]])
    (y,) = run(module, ids.numpy(), dtype=np.float64)
    np.testing.assert_allclose(y, net.double()(ids).detach().numpy(), atol=1e-12)
    (func,) = module.ops
    (arg,) = func.body.block.args  # type: ignore[attr-defined]
    assert nf.is_index_input(arg) and len(list(arg.uses)) == 2
    with pytest.raises(FrontendError, match="max_norm"):
        from_torch(_TwoTables(max_norm=1.0).eval(), (ids,))


def _program(ids: int, vocab: int, dim: int, table: np.ndarray) -> str:
    i, w, y = f"tensor<?x{ids}xf32>", f"tensor<{vocab}x{dim}xf32>", f"tensor<?x{ids}x{dim}xf32>"
    rows = ", ".join("[" + ", ".join(repr(float(v)) for v in row) + "]" for row in table)
    return f"""func.func @main(%ids: {i}) -> {y} {{
  %w = nf.constant "emb" dense<[{rows}]> : {w}
  %y = nf.embedding %ids, %w : ({i}, {w}) -> {y}
  func.return %y : {y}
}}"""


def _numpy_fake_quant(x: np.ndarray, bits: int, k: int, rounding: str) -> np.ndarray:
    """A power-of-two fake-quant written here (signed codes, step ``2**-k``; at 1 bit
    ``±2**k``, as nq.fake_quant's documentation says)."""
    if bits == 1:
        return np.ldexp(np.where(x >= 0, 1.0, -1.0), k)
    mode = {
        "trunc": np.trunc,
        "floor": np.floor,
        "half_even": np.rint,
        "half_up": lambda s: np.floor(s + 0.5),
    }[rounding]
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return np.ldexp(np.clip(mode(np.ldexp(x, k)), lo, hi), -k)


@settings(max_examples=examples(12), deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(1, 5),
    st.sampled_from((1, 2, 4, 8)),
    st.sampled_from(("trunc", "floor", "half_up", "half_even")),
    st.floats(0.05, 20),
)
def test_nq_equals_numpy_and_nh(
    vocab: int, dim: int, ids: int, bits: int, rounding: str, scale: float
) -> None:
    """The table fake-quantized once for the whole table (one exponent, whatever the weight
    rules' per-channel default), by a NumPy fake-quant at the program's exponent and rounding,
    indexed by the ids, is nq's result; no fake-quant reads the ids; nh == nq bit for bit with
    the ids ``i32`` at exponent 0.
    Mutants seen to fail it: quantize putting a fake-quant on the ids (is_index_input ignored);
    the table quantized per channel (per_channel kept for an embedding's table)."""
    rng = np.random.default_rng(vocab * 31 + dim * 7 + ids)
    table = (rng.standard_normal((vocab, dim)) * scale).astype(np.float32)
    module = nanoir.parse(_program(ids, vocab, dim, table))
    batches = [rng.integers(0, vocab, (3, ids)) for _ in range(2)]
    nanoir.quantize(module, batches, weight_bits=bits, rounding=rounding, weight_per_channel=True)
    (fq,) = [o for o in module.walk() if isinstance(o, nq.FakeQuantOp)]
    assert not isinstance(fq.input, BlockArgument) and fq.bits.value.data == bits
    (k,) = [int(e) for e in fq.exp.get_values()]  # one exponent: per tensor
    x = rng.integers(0, vocab, (4, ids))
    (y,) = run(module, x, dtype=np.float64)
    want = _numpy_fake_quant(table.astype(np.float64), bits, k, str(fq.rounding.data))[x]
    assert np.array_equal(y, want)
    hw = lower_to_hw(module.clone())
    (emb,) = [o for o in hw.walk() if isinstance(o, nh.EmbeddingOp)]
    assert nh.width_of(emb.indices) == 32 and isinstance(emb.indices, BlockArgument)
    (got,) = run(hw, x)
    assert got.tobytes() == y.tobytes()


def test_an_id_outside_the_table_is_a_runtime_error() -> None:
    """An id past the table or negative stops nf, nq and nh runs with the op's name.
    Mutant seen to fail it: the kernel's range check removed (NumPy wraps -1 to the last
    row)."""
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    module = nanoir.parse(_program(2, 3, 2, table))
    (y,) = run(module, np.array([[2, 0]]))
    assert y.tolist() == [[[4, 5], [0, 1]]]
    q = module.clone()
    nanoir.quantize(q, [np.array([[0, 1], [2, 2]])])
    hw = lower_to_hw(q.clone())
    for program, level in ((module, "nf"), (q, "nf"), (hw, "nh")):
        for bad in (3, -1):
            with pytest.raises(ExecutionError, match=f"{level}.embedding.* {bad} is outside"):
                run(program, np.array([[0, bad]]))


@pytest.fixture(scope="module")
def text_cnn() -> tuple[nn.Module, np.ndarray]:
    model = make_magik_model("TextCNN")
    x = np.random.default_rng(1).integers(0, TEXT_VOCAB, MAGIK_INPUTS["TextCNN"])
    return model, x


def test_text_classifier_end_to_end(
    text_cnn: tuple[nn.Module, np.ndarray], tmp_path: pathlib.Path
) -> None:
    """The Embedding -> Conv1d classifier: nf == torch; compile_model from integer batches
    gives the nh program quantize + lower-to-hw give; nq == nh bit for bit; streamed along
    the ids (dim 1, steps 1 and 5, and the Streamer pushing 2 ids at a time) == whole at nq
    and nh; ``.ne`` at both levels reads back byte for byte and runs equal; nanoir-run takes
    an int64 ``.npy`` (also --stream --mem-dim 1).
    Mutants seen to fail it: check_mem_dim's lowest dim back to 2; the .ne hw exporter
    writing the ids' tensor as Tensor<Any>."""
    model, x = text_cnn
    module = from_torch(model, (torch.from_numpy(x),))
    (y,) = run(module, x, dtype=np.float64)
    np.testing.assert_allclose(y, model.double()(torch.from_numpy(x)).detach().numpy(), atol=1e-9)
    model.float()
    rng = np.random.default_rng(2)
    batches = [rng.integers(0, TEXT_VOCAB, (4, x.shape[1])) for _ in range(3)]
    q = module.clone()
    nanoir.quantize(q, batches)
    hw = lower_to_hw(q.clone())
    compiled = nanoir.compile_model(model, (torch.from_numpy(x),), batches)
    assert str(compiled) == str(hw)
    (a,) = run(q, x, dtype=np.float64)
    (b,) = run(hw, x)
    assert a.tobytes() == b.tobytes()
    (codes,) = run(hw, x, raw=True)
    for step in (1, 5):
        (s,) = stream(hw, [x], step=step, mem_dim=1, raw=True)
        assert s.tobytes() == codes.tobytes()
        (s,) = stream(q, [x], step=step, mem_dim=1, dtype=np.float64)
        assert s.tobytes() == a.tobytes()
    streamer = nanoir.Streamer(hw, mem_dim=1, raw=True)
    # The class scores are a mean over the ids, a whole-stream result: None until flush.
    assert all(streamer.push(x[:, j : j + 2]) == [None] for j in range(0, x.shape[1], 2))
    assert streamer.flush()[0].tobytes() == codes.tobytes()
    for level, program, kw in (("hw", hw, {}), ("nq", q, {"dtype": np.float64})):
        path, again = tmp_path / f"{level}.ne", tmp_path / f"{level}2.ne"
        nanoir.save(program, str(path))
        assert "let input: Tensor<int64_t>" in path.read_text()
        back = nanoir.load(str(path))
        nanoir.save(back, str(again))
        assert path.read_bytes() == again.read_bytes()
        assert run(back, x, **kw)[0].tobytes() == run(program, x, **kw)[0].tobytes()
    np.save(tmp_path / "ids.npy", x)
    nanoir.save(hw, str(tmp_path / "hw.mlir"))
    for extra in ([], ["--stream", "--mem-dim", "1", "--step", "3"]):
        out = tmp_path / "out.npy"
        args = [str(tmp_path / "hw.mlir"), "--input", str(tmp_path / "ids.npy"), "-o", str(out)]
        assert nanoir_run([*args, *extra]) == 0
        assert np.load(out).tobytes() == b.tobytes()
