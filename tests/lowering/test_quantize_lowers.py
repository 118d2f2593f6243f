"""Programs quantize makes lower (issue 31, §3, §2 items 7 and 13, and the reproducers found
while moving quantize into its package): each case is a small torch network that quantize
accepted and lower-to-hw then refused (or whose integer program could not run).

Every test compiles the network (``nanoir.compile_model`` to ``nq``, or the steps by hand for
a sequence-first RNN, whose dim 0 is time), lowers it, and checks the integer program
against the nq program run in float64 (NumPy), bit for bit, and the float (nf) program
against torch. The mutant each test kills is named in its docstring.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.fold_bn import FoldBnPass
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.interpreter import run
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.context import make_context

torch = pytest.importorskip("torch")
nn = torch.nn

torch.set_num_threads(1)


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().numpy().astype(np.float64)


def compile_checked(
    model: torch.nn.Module,
    x: torch.Tensor,
    batches: list[torch.Tensor],
    *,
    dynamic_batch: bool = True,
    **options: object,
) -> tuple[ModuleOp, ModuleOp]:
    """``(nq, nh)`` of ``model``: the float program equals torch (float32 rounding), the nh
    program equals the nq program bit for bit on ``x`` and on every calibration batch."""
    model = model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.export's notes on nn.LSTM's flat weights
        module = nanoir.from_torch(model, (x,), dynamic_batch=dynamic_batch)
    with torch.no_grad():
        want = model(x)
    want = want[0] if isinstance(want, tuple) else want
    got = run(module, _numpy(x), dtype=np.float64)[0]
    np.testing.assert_allclose(got, _numpy(want), rtol=1e-4, atol=1e-4)
    FoldBnPass().apply(make_context(), module)
    nanoir.quantize(module, [_numpy(b) for b in batches], progress=False, **options)
    nq = module
    nh = lower_to_hw(nq.clone())
    for inp in [x, *batches]:
        a = run(nq, _numpy(inp), dtype=np.float64)
        b = run(nh, _numpy(inp))
        for p, q in zip(a, b, strict=True):
            bad = np.flatnonzero(p != q)
            assert bad.size == 0, f"{bad.size} differ: nq {p.flat[bad[0]]} nh {q.flat[bad[0]]}"
    return nq, nh


def fake_quants(module: ModuleOp) -> list[FakeQuantOp]:
    return [op for op in module.walk() if isinstance(op, FakeQuantOp)]


# --------------------------------------------------------------------------------------------
# §2 item 13: inputs (and outputs) of ops that read one grid stay per tensor
# --------------------------------------------------------------------------------------------


class _Tail(nn.Module):
    """A 1x1 conv (per-channel activations under ``act_per_channel``) read by ``tail``."""

    def __init__(self, tail: str):
        super().__init__()
        self.conv, self.tail = nn.Conv1d(4, 6, 1), tail
        self.ln, self.gn = nn.LayerNorm(5), nn.GroupNorm(2, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        if self.tail == "softmax":
            return torch.softmax(y, -1)
        if self.tail == "log_softmax":
            return torch.log_softmax(y, -1)
        if self.tail == "layer_norm":
            return self.ln(y)
        if self.tail == "group_norm":
            return self.gn(y)
        if self.tail == "normalize":
            return nn.functional.normalize(y, dim=-1)
        return y @ y.transpose(1, 2)  # matmul of two runtime values


@pytest.mark.parametrize(
    "tail", ["softmax", "log_softmax", "layer_norm", "group_norm", "normalize", "matmul"]
)
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_per_channel_activations_leave_one_grid_ops_per_tensor(tail: str, bits: int) -> None:
    """``act_per_channel=True`` keeps per tensor what an op reads on one grid (an integer
    algorithm's input and output, a matmul's operands). Kills: ``needs_one_grid`` answering
    False (lower-to-hw: "its exponents [5, 6] differ along a dim (per channel)", "needs
    per-tensor exponents on both operands")."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 5)
    nq, _ = compile_checked(
        _Tail(tail),
        x,
        [torch.randn(4, 4, 5) for _ in range(2)],
        act_per_channel=True,
        act_bits=bits,
    )
    per_channel = [fq for fq in fake_quants(nq) if fq.exp.type.get_shape() != (1,)]
    conv_out = [fq for fq in fake_quants(nq) if fq.input.name_hint == "conv"]
    assert conv_out and all(fq not in per_channel for fq in conv_out)


# --------------------------------------------------------------------------------------------
# unsigned="auto" leaves signed what a recurrent op reads
# --------------------------------------------------------------------------------------------


class _ReluGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.gru = nn.Linear(3, 3), nn.GRU(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gru(torch.relu(self.fc(x)))[0]


def test_auto_unsigned_relu_feeding_an_rnn_stays_signed() -> None:
    """``nn.Linear(3, 3)`` → ReLU → ``nn.GRU(3, 2)`` with ``unsigned="auto"``: the ReLU's
    output is read by the recurrent cell, which takes signed codes. Kills: the recurrent
    reader dropped from ``_unsigned_unlowered`` (lower-to-hw: "its codes are 1-bit or
    unsigned")."""
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3)
    nq, _ = compile_checked(
        _ReluGRU(),
        x,
        [torch.randn(5, 2, 3) for _ in range(2)],
        dynamic_batch=False,
        unsigned="auto",
    )
    relu = [fq for fq in fake_quants(nq) if fq.input.name_hint == "relu"]
    assert relu and all(fq.is_signed for fq in relu)


def test_magik_crnn_with_auto_unsigned_lowers() -> None:
    """``MagikCRNN`` with ``unsigned="auto"``: its last conv block's ReLU reaches the RNN
    through a reshape and a transpose. Kills: ``_unsigned_unlowered`` reading only direct
    uses (lower-to-hw: "'nf.recurrent' (%rnn) has no integer form: transpose: its codes are
    1-bit or unsigned")."""
    from nanoir.testing.magik_models import MagikCRNN

    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 64)
    compile_checked(MagikCRNN("lstm", width=0.125), x, [torch.randn(2, 3, 32, 64)], unsigned="auto")
