"""What quantize does so that a truncating engine keeps trained networks (issue 30 §2), each
mechanism checked without the benchmark, against oracles written here (NumPy, the program's
structure, torch float).

- half an output step folded into a bias before a truncating requant turns truncation into
  round-half-up wherever the result is non-negative or its negatives are read as 0 (a ReLU):
  ``bias_correction._rounding_offset`` relies on this identity;
- gated products (the product of two activations) get ``gate_bits`` (16) by default, lookup
  tables' inputs ``table_input_bits`` when asked (``lowering/quantize/gates.py``); a product
  with a constant, other activations and anything a rule names keep theirs; the programs
  still lower exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from nanoir.dialects import nf
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.lowering.quantize import QuantConfig, QuantizeError
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics import quant
from torch import nn
from xdsl.ir import Operation

import nanoir


@pytest.mark.parametrize("shift", [1, 2, 5, 9])
def test_half_step_in_the_bias_makes_trunc_round_half_up(shift: int) -> None:
    """Every accumulator in a range wide enough to reach both saturations, shift 1..9: with
    ``2**(shift-1)`` added (half an output step, what the bias absorbs), ``nh.requant``'s
    ``trunc`` equals round-half-up of the accumulator (NumPy ``floor(a / 2**s + 1/2)``) on every
    non-negative accumulator, unsigned and signed codes; after a ReLU (negatives read as 0)
    on every accumulator. Kills (seen failing): the offset as a whole step (``2**shift``),
    which is what ``_rounding_offset`` must not fold."""
    half = 1 << (shift - 1)
    acc = np.arange(-(300 << shift), 300 << shift, dtype=np.int64)
    want = np.floor(acc / 2.0**shift + 0.5).astype(np.int64)
    for signed in (True, False):
        lo, hi = quant.qmin(8, signed=signed), quant.qmax(8, signed=signed)
        pos = acc >= 0
        got = quant.requant(acc[pos] + half, shift, 8, "trunc", signed=signed)
        assert np.array_equal(got, np.clip(want[pos], lo, hi))
    relu_then = quant.requant(np.maximum(acc + half, 0), shift, 8, "trunc")
    assert np.array_equal(relu_then, np.clip(np.maximum(want, 0), -128, 127))
    # without the offset, truncation is a whole step below on half of the codes
    plain = quant.requant(acc[acc >= 0], shift, 8, "trunc")
    assert np.any(plain != np.clip(want[acc >= 0], -128, 127))


class _SqueezeExcite(nn.Module):
    """conv -> hardswish -> SE (pool, conv, relu, conv, hardsigmoid, x * gate) -> x * 0.5 ->
    conv: one gated product, one product with a constant, one table input (the conv read
    only by hardswish) and one that is not (the last conv, an output)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.squeeze = nn.Conv2d(8, 4, 1)
        self.excite = nn.Conv2d(4, 8, 1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.conv(x))
        s = nn.functional.adaptive_avg_pool2d(y, 1)
        s = nn.functional.hardsigmoid(self.excite(torch.relu(self.squeeze(s))))
        return self.head((y * s) * 0.5)


def _quantized(**options: object) -> tuple[object, dict[str, int], np.ndarray]:
    torch.manual_seed(0)
    net = _SqueezeExcite().eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
    program = nanoir.from_torch(net, (torch.from_numpy(x[:2]),))
    nanoir.quantize(program, [x[:4], x[4:]], **options)
    bits: dict[str, int] = {}  # "<order>:<producer op>" -> bits, activations only
    for op in program.walk():
        if isinstance(op, FakeQuantOp) and not isinstance(op.input.owner, nf.ConstantOp):
            producer = op.input.owner
            name = producer.name if isinstance(producer, Operation) else "argument"
            bits[f"{len(bits)}:{name}"] = op.bits.value.data
    with torch.no_grad():
        reference = net(torch.from_numpy(x)).numpy()
    return program, bits, reference


def _bits_by_op(bits: dict[str, int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for key, b in bits.items():
        out.setdefault(key.split(":", 1)[1], []).append(b)
    return out


def test_gated_products_get_gate_bits_and_table_inputs_when_asked() -> None:
    """Defaults: the product of the two activations (``y * s``) is 16-bit; the product with
    the constant 0.5, every conv, the tables' outputs and the input stay 8-bit. With
    ``table_input_bits=16`` the convs read only by a table (hardswish, hardsigmoid) are 16-bit
    too, not the squeeze (into a ReLU) nor the head (an output). ``gate_bits=None`` gives the
    8-bit program; a rule naming a gated tensor wins. Kills (each seen failing): ``gated_product``
    false for every mul, true for every mul (``* 0.5`` at 16), ``table_input`` true whatever
    the readers, ``resolve`` ignoring the widening."""
    _, bits, _ = _quantized()
    by_op = _bits_by_op(bits)
    assert by_op["nf.mul"] == [16, 8]  # y * s, then (y * s) * 0.5
    assert by_op["nf.conv"] == [8, 8, 8, 8]
    assert by_op["nf.hardswish"] == [8] and by_op["nf.hardsigmoid"] == [8]

    _, tables, _ = _quantized(table_input_bits=16)
    by_op = _bits_by_op(tables)
    # conv (read only by hardswish), squeeze (into a ReLU), excite (read only by
    # hardsigmoid), head (an output)
    assert by_op["nf.conv"] == [16, 8, 16, 8]
    assert by_op["nf.mul"] == [16, 8]

    _, plain, _ = _quantized(gate_bits=None)
    assert set(plain.values()) == {8}
    _, ruled, _ = _quantized(rules=[r"act@.*=8"], table_input_bits=16)
    assert set(ruled.values()) == {8}


class _GatedAttention(nn.Module):
    """Gated products read by a matmul of two runtime values (``g @ r^T``, ``r`` through a
    transpose) and, beside them, by a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)
        g = h * torch.sigmoid(h)  # read by a matmul
        r = h * torch.relu(h)  # read by the matmul through a transpose only
        q = h * torch.tanh(h)  # read by a linear layer
        return torch.matmul(g, r.transpose(1, 2)), self.out(q)


def test_gated_products_read_by_a_matmul_fit_its_accumulator() -> None:
    """A matmul of two runtime values has no weight rule to bound its accumulator: two
    16-bit gated products pass i32 from the second term on (lower-to-hw refused the program
    quantize made: "'nf.matmul' may overflow its i32 accumulator"; drawn by the explore
    profile). One of the two (``r`` read through a transpose) is narrowed to 8 bits, which
    fits (``6 * 2**15 * 2**7``; 16 and 16 give ``6 * 2**30``, past ``2**31 - 1``), the one a
    linear layer reads keeps 16, and the program lowers and equals nq. Kills: data movement
    not walked (no operand found through the transpose: lower-to-hw refuses), both operands
    narrowed (8, 8), weighted readers counted too (the linear's product narrowed)."""
    torch.manual_seed(0)
    net = _GatedAttention().eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    program = nanoir.from_torch(net, (torch.from_numpy(x[:2]),))
    nanoir.quantize(program, [x[:2], x[2:]], progress=False)
    products = [
        op.bits.value.data
        for op in program.walk()
        if isinstance(op, FakeQuantOp) and isinstance(op.input.owner, nf.MulOp)
    ]
    assert sorted(products[:2]) == [8, 16] and products[2] == 16  # g, r (the matmul's); q
    hw = lower_to_hw(program.clone())
    for want, got in zip(run(program, x, dtype=np.float64), run(hw, x), strict=True):
        assert np.array_equal(want, got)


def test_every_table_input_is_widened() -> None:
    """``table_input_bits=16``: both convs read only by a table (hardswish's, hardsigmoid's)
    are 16-bit, the squeeze conv (read by a ReLU) is not. Kills: ``table_input`` true
    whatever the readers."""
    program, _, _ = _quantized(table_input_bits=16)
    widths = {}
    for op in program.walk():
        if isinstance(op, FakeQuantOp) and isinstance(op.input.owner, nf.ConvOp):
            readers = {u.operation.name for u in op.result.uses}
            widths[frozenset(readers)] = op.bits.value.data
    assert widths[frozenset({"nf.hardswish"})] == 16
    assert widths[frozenset({"nf.hardsigmoid"})] == 16
    assert widths[frozenset({"nf.relu"})] == 8


def test_widened_programs_lower_exactly_and_stay_near_float() -> None:
    """nq == nh bit for bit on the SE net with 16-bit gates (the segmented tables, the i16
    product read by a conv), and the output is at least as close to torch's float output as
    the 8-bit program's (SQNR in dB, computed here). Kills: a lowering that keeps the table
    dense (refuses or truncates a 16-bit index), and gate bits that make things worse."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 12, 12)).astype(np.float32)

    def sqnr(program: object, reference: np.ndarray) -> float:
        (y,) = nanoir.run(program, x)
        err = np.asarray(y, np.float64) - reference
        return float(10 * np.log10(np.sum(reference**2) / max(np.sum(err**2), 1e-300)))

    program, _, _ = _quantized(table_input_bits=16)
    (nq_out,) = nanoir.run(program, x)
    (nh_out,) = nanoir.run(lower_to_hw(program.clone()), x)
    assert np.array_equal(np.asarray(nq_out), np.asarray(nh_out))

    torch.manual_seed(0)
    net = _SqueezeExcite().eval()
    with torch.no_grad():
        reference = net(torch.from_numpy(x)).numpy().astype(np.float64)
    narrow, _, _ = _quantized(gate_bits=None)  # the defaults before issue 30 §2
    assert sqnr(program, reference) >= sqnr(narrow, reference) - 0.1


def test_widths_are_checked() -> None:
    """``gate_bits`` and ``table_input_bits`` take the allowed widths only, as any bits
    option. Kills: no check."""
    assert QuantConfig(gate_bits=8).gate_bits == 8
    with pytest.raises(QuantizeError, match="gate_bits = 12"):
        QuantConfig(gate_bits=12)
    with pytest.raises(QuantizeError, match="table_input_bits = 3"):
        QuantConfig(table_input_bits=3)
