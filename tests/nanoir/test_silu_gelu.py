"""SiLU and GELU (both forms) through every level: torch -> nf (float64, against torch) ->
nq (against a quantizer written here over torch's function) -> nh (the lookup table, bit for
bit) -> `.ne` at both levels -> streaming -> ONNX (onnxruntime) -> QAT (forward = nq,
backward = torch's gradient).

Mutants checked (each made the tests named fail, in a private copy):
- `kernels.gelu` computing the tanh form for ``approximate="none"``: test_nf_matches_torch,
  test_kernel_at_extremes_matches_torch, test_nq_is_the_quantized_torch_function,
  test_the_table_is_the_quantized_torch_function;
- SiLU's lookup table off by one input code (``LookupTable(lambda x: kernels.silu(x + step))``):
  test_the_table_is_the_quantized_torch_function, test_streamed_is_whole (its nh == nq),
  test_qat_trains_through_and_converts_bit_for_bit (its nh == nq);
- the QAT backward of SiLU taken from ``torch.sigmoid``, of GELU from the other form:
  test_qat_forward_is_nq_and_backward_is_torchs;
- the frontend dropping ``approximate`` (always ``"none"``): test_nf_matches_torch,
  test_ne_round_trips_at_both_levels, test_onnx_nf_program_matches_onnxruntime;
- the `.ne` Gelu row writing no ``approximate``: test_ne_round_trips_at_both_levels,
  test_onnx_nf_program_matches_onnxruntime;
- the ONNX reader fusing ``Mul(y, Sigmoid(x))`` (no check that the Mul's other input is the
  Sigmoid's), or a Sigmoid read elsewhere too: test_onnx_reader_fuses_only_x_times_its_own_sigmoid;
- the ONNX writer writing SiLU as a bare Sigmoid: test_onnx_nf_program_matches_onnxruntime,
  test_onnx_nanoengine_flavour_writes_silu_and_refuses_gelu.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf, nh
from nanoir.dialects.nq import FakeQuantOp, exp_attr
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.onnx.exporter import OnnxExportError, export_onnx_bytes
from nanoir.grammar.onnx.importer import import_onnx_bytes
from nanoir.lowering.lower_to_hw import LowerToHwError, lower_to_hw
from nanoir.runtime.interpreter import run
from nanoir.runtime.numerics.quant import RoundingMode
from torch import nn
from xdsl.dialects.builtin import DYNAMIC_INDEX, FunctionType, ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

import nanoir
from nanoir.qat.steps import build_step
from nanoir.testing.programs import examples

torch.set_num_threads(1)

FORMS = ("silu", "gelu", "gelu_tanh")
MODES = tuple(RoundingMode)


def torch_fn(form: str, x: torch.Tensor) -> torch.Tensor:
    """The op in torch: the independent oracle of every level."""
    if form == "silu":
        return F.silu(x)
    return F.gelu(x, approximate="tanh" if form == "gelu_tanh" else "none")


def torch_module(form: str) -> nn.Module:
    if form == "silu":
        return nn.SiLU()
    return nn.GELU(approximate="tanh" if form == "gelu_tanh" else "none")


def nf_op(form: str, x):  # noqa: ANN001, ANN201
    if form == "silu":
        return nf.SiluOp(x)
    return nf.GeluOp(x, "tanh" if form == "gelu_tanh" else "none")


def quantized(v: np.ndarray, bits: int, k: int, mode: RoundingMode) -> tuple[np.ndarray, ...]:
    """``v`` on the grid ``2**-k`` at ``bits`` (saturating), by NumPy; and a mask of the
    elements not within 1e-9 of a rounding boundary (where torch's and nanoir's float64
    may round a last bit apart and legitimately land on neighbouring codes)."""
    s = np.ldexp(v, k)
    if mode == RoundingMode.TRUNC:
        c, edge = np.trunc(s), np.abs(s - np.round(s))
    elif mode == RoundingMode.FLOOR:
        c, edge = np.floor(s), np.abs(s - np.round(s))
    else:
        c = np.floor(s + 0.5) if mode == RoundingMode.HALF_UP else np.round(s)
        edge = np.abs(s - np.floor(s) - 0.5)
    c = np.clip(c, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return np.ldexp(c, -k), edge > 1e-9 * np.maximum(1.0, np.abs(s))


def assert_quantized_equal(got: np.ndarray, want: np.ndarray, clear: np.ndarray, k: int) -> None:
    """Equal off a rounding boundary; on one (an exact tie, such as f(0) = 0 under trunc),
    at most one output step apart."""
    np.testing.assert_array_equal(got[clear], want[clear])
    assert np.all(np.abs(got - want)[~clear] <= np.ldexp(1.0, -k))


def program(
    form: str,
    channels: int,
    bits_in: int,
    exps_in: list[int],
    bits_out: int,
    k_out: int,
    mode: RoundingMode,
) -> ModuleOp:
    """``fake_quant(f(fake_quant(x)))`` on ``[?, channels, L]``: per channel when
    ``exps_in`` has one exponent per channel."""
    shape = (DYNAMIC_INDEX, channels, 7)
    block = Block(arg_types=[TensorType(f32, shape)])
    e_in = exp_attr(exps_in, [channels, 1]) if len(exps_in) > 1 else exp_attr(exps_in[0])
    q = FakeQuantOp(block.args[0], bits_in, e_in, mode)
    y = nf_op(form, q.results[0])
    out = FakeQuantOp(y.results[0], bits_out, exp_attr(k_out), mode)
    block.add_ops([q, y, out, ReturnOp(out.results[0])])
    ftype = FunctionType.from_lists([block.args[0].type], [out.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def every_code(bits: int, channels: int, exps: list[int]) -> np.ndarray:
    """An input ``[N, channels, 7]`` holding every code of ``bits`` in each channel."""
    codes = np.arange(-(2 ** (bits - 1)), 2 ** (bits - 1), dtype=np.float64)
    n = -(-codes.size // 7)
    codes = np.resize(codes, n * 7).reshape(n, 1, 7)
    x = np.repeat(codes, channels, axis=1)
    return np.ldexp(x, -np.asarray(exps).reshape(1, -1, 1) * np.ones((1, channels, 1), int))


# ---------------------------------------------------------------------------------------
# torch -> nf
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=examples(8), deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    scale=st.sampled_from((0.1, 1.0, 4.0, 40.0)),
    seed=st.integers(0, 2**16),
)
def test_nf_matches_torch(form: str, shape: list[int], scale: float, seed: int) -> None:
    """The frontend's nf op, run in float64, is torch's within 1e-5 * max(1, max |torch|);
    the input has a dynamic batch (the program is run at two batch sizes)."""
    model = nn.Sequential(torch_module(form)).double().eval()
    gen = torch.Generator().manual_seed(seed)
    example = torch.randn([2, *shape], generator=gen, dtype=torch.float64)
    module = nanoir.from_torch(model, (example,))
    names = [op.name for op in module.walk() if op.name.startswith("nf.")]
    assert names == ["nf.silu" if form == "silu" else "nf.gelu"]
    for batch in (1, 3):
        x = torch.randn([batch, *shape], generator=gen, dtype=torch.float64) * scale
        with torch.no_grad():
            want = model(x).numpy()
        (got,) = run(module, x.numpy(), dtype=np.float64)
        assert got.shape == want.shape
        bound = 1e-5 * max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) <= bound


@pytest.mark.parametrize("form", FORMS)
def test_kernel_at_extremes_matches_torch(form: str) -> None:
    """Far tails (sigmoid's and erf's saturation), zero, and float32 in and out."""
    x = np.array([-1e4, -750.0, -40.0, -8.0, -1e-8, 0.0, 1e-8, 3.0, 40.0, 750.0, 1e4])
    op = nf_op(form, _arg())
    (got,) = nanoir.runtime.nf.NF_BUILDERS[type(op)](op, np.dtype(np.float64))(x)
    want = torch_fn(form, torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    (got32,) = nanoir.runtime.nf.NF_BUILDERS[type(op)](op, np.dtype(np.float32))(
        x.astype(np.float32)
    )
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want.astype(np.float32), rtol=2e-6, atol=1e-30)


def _arg():  # noqa: ANN202
    return Block(arg_types=[TensorType(f32, (4,))]).args[0]


# ---------------------------------------------------------------------------------------
# nq -> nh
# ---------------------------------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    form=st.sampled_from(FORMS),
    bits_in=st.sampled_from((2, 4, 8, 16)),
    bits_out=st.sampled_from((4, 8, 16)),
    e_in=st.integers(-2, 12),
    k_out=st.integers(-1, 12),
    mode=st.sampled_from(MODES),
    per_channel=st.booleans(),
)
def test_nq_is_the_quantized_torch_function(
    form: str,
    bits_in: int,
    bits_out: int,
    e_in: int,
    k_out: int,
    mode: RoundingMode,
    per_channel: bool,
) -> None:
    """nq in float64 on every input code is torch's function of the dequantized code,
    quantized by NumPy here (off a rounding boundary); per tensor or per channel."""
    channels = 3 if per_channel else 2
    exps = [e_in, e_in + 1, e_in - 1] if per_channel else [e_in]
    module = program(form, channels, bits_in, exps, bits_out, k_out, mode)
    x = every_code(bits_in, channels, exps)
    (got,) = run(module, x, dtype=np.float64)
    want, clear = quantized(torch_fn(form, torch.from_numpy(x)).numpy(), bits_out, k_out, mode)
    assert_quantized_equal(got, want, clear, k_out)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    form=st.sampled_from(FORMS),
    bits_in=st.sampled_from((2, 4, 8)),
    bits_out=st.sampled_from((2, 4, 8, 16)),
    e_in=st.integers(-2, 8),
    k_out=st.integers(-1, 12),
    mode=st.sampled_from(MODES),
)
def test_the_table_is_the_quantized_torch_function(
    form: str, bits_in: int, bits_out: int, e_in: int, k_out: int, mode: RoundingMode
) -> None:
    """Per tensor, at most 8 bits in: lower-to-hw writes one ``nh.lut`` whose entries are
    torch's function quantized here, and nh == nq bit for bit on every code."""
    module = program(form, 2, bits_in, [e_in], bits_out, k_out, mode)
    hw = lower_to_hw(module.clone())
    hw.verify()
    luts = [op for op in hw.walk() if isinstance(op, nh.LutOp)]
    assert len(luts) == 1
    table = np.asarray(luts[0].table.get_values())
    codes = np.arange(-(2 ** (bits_in - 1)), 2 ** (bits_in - 1), dtype=np.float64)
    want, clear = quantized(
        torch_fn(form, torch.from_numpy(np.ldexp(codes, -e_in))).numpy(), bits_out, k_out, mode
    )
    assert_quantized_equal(np.ldexp(table.astype(np.float64), -k_out), want, clear, k_out)
    x = every_code(bits_in, 2, [e_in])
    (want_nq,) = run(module, x, dtype=np.float64)
    (got_nh,) = run(hw, x)
    np.testing.assert_array_equal(got_nh, want_nq)


@pytest.mark.parametrize("form", FORMS)
def test_inputs_beyond_16_bits_are_refused_naming_the_op(form: str) -> None:
    """The sum of two 16-bit values can take 2**17 + 1 codes (i32): more than a table
    covers (16-bit and per-channel inputs are tables now, tests/nanoir/test_lut_wide.py):
    lower-to-hw refuses, naming the op and why."""
    call = (
        "nf.silu %s" if form == "silu" else f'nf.gelu %s {{approximate = "{form[5:] or "none"}"}}'
    )
    text = f"""\
func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {{
  %xq = nq.fake_quant %x {{bits = 16 : i64, exp = dense<8> : tensor<1xi8>}} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {{bits = 16 : i64, exp = dense<8> : tensor<1xi8>}} : tensor<?x4xf32>
  %s = nf.add %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %t = {call} : tensor<?x4xf32>
  %tq = nq.fake_quant %t {{bits = 8 : i64, exp = dense<4> : tensor<1xi8>}} : tensor<?x4xf32>
  func.return %tq : tensor<?x4xf32>
}}
"""
    module = nanoir.parse(text)
    name = "nf.silu" if form == "silu" else "nf.gelu"
    with pytest.raises(LowerToHwError, match=f"{name}.*can take 131073 codes"):
        lower_to_hw(module)


# ---------------------------------------------------------------------------------------
# .ne, streaming
# ---------------------------------------------------------------------------------------


def quantized_net(
    forms: tuple[str, ...], seed: int, act_bits: int = 8, rounding: str = "trunc"
) -> tuple[ModuleOp, ...]:
    """A small conv net with ``forms`` after convs, quantized at ``act_bits``: (nq, x)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    channels = 3
    for form in forms:
        layers += [nn.Conv1d(channels, 4, 3, padding=1), torch_module(form)]
        channels = 4
    model = nn.Sequential(*layers).eval()
    x = torch.randn(2, 3, 11)
    module = nanoir.from_torch(model, (x,))
    gen = np.random.default_rng(seed)
    batches = [gen.standard_normal((4, 3, 11)) * 2 for _ in range(3)]
    nanoir.quantize(module, batches, weight_bits=8, act_bits=act_bits, rounding=rounding)
    return module, gen.standard_normal((3, 3, 11)) * 2


@settings(max_examples=examples(10), deadline=None)
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 1000),
)
def test_ne_round_trips_at_both_levels(forms: tuple[str, ...], seed: int) -> None:
    """nq and nh `.ne`: text -> IR -> text byte for byte, the IR read back computes the same
    numbers; the nq text names each op type (Swish, Gelu with its form)."""
    module, x = quantized_net(forms, seed)
    text = export_nanoengine(module)
    for form in set(forms):
        written = {
            "silu": "op_type=Swish,",
            "gelu": "op_type=Gelu,\n    attr=[approximate=none]",
            "gelu_tanh": "op_type=Gelu,\n    attr=[approximate=tanh]",
        }
        assert written[form] in text
    back = import_nanoengine(text)
    assert export_nanoengine(back) == text
    assert [op.name for op in back.walk() if op.name.startswith("nf.")] == [
        op.name for op in module.walk() if op.name.startswith("nf.")
    ]
    np.testing.assert_array_equal(run(back, x)[0], run(module, x)[0])
    hw = lower_to_hw(module.clone())
    hw_text = export_nanoengine(hw)
    hw_back = import_nanoengine(hw_text)
    assert export_nanoengine(hw_back) == hw_text
    np.testing.assert_array_equal(run(hw_back, x, raw=True)[0], run(hw, x, raw=True)[0])


@settings(max_examples=examples(10), deadline=None)
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 1000),
    step=st.integers(1, 4),
)
def test_streamed_is_whole(forms: tuple[str, ...], seed: int, step: int) -> None:
    """Elementwise, so they stream: nh streamed == whole, and both == nq."""
    module, x = quantized_net(forms, seed)
    hw = lower_to_hw(module.clone())
    (whole,) = run(hw, x)
    (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=step)
    np.testing.assert_array_equal(streamed, whole)
    np.testing.assert_array_equal(whole, run(module, x, dtype=np.float64)[0])


# ---------------------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------------------


def run_ort(data: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@settings(max_examples=examples(10), deadline=None)
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 1000),
)
def test_onnx_nf_program_matches_onnxruntime(forms: tuple[str, ...], seed: int) -> None:
    """QDQ flavour (opset 21) of the float program: Gelu with its ``approximate``, SiLU as
    Sigmoid + Mul; onnxruntime's output is torch's within float32 rounding, and the file
    reads back into nf computing the same."""
    torch.manual_seed(seed)
    model = nn.Sequential(*(torch_module(f) for f in forms)).eval()
    x = torch.randn(3, 4, 5) * 3
    module = nanoir.from_torch(model, (x,))
    data = export_onnx_bytes(module)
    proto = onnx.load_model_from_string(data)
    types = [n.op_type for n in proto.graph.node]
    assert types.count("Sigmoid") == types.count("Mul") == forms.count("silu")
    gelus = [n for n in proto.graph.node if n.op_type == "Gelu"]
    assert [onnx.helper.get_attribute_value(n.attribute[0]).decode() for n in gelus] == [
        "tanh" if f == "gelu_tanh" else "none" for f in forms if f != "silu"
    ]
    with torch.no_grad():
        want = model(x).numpy()
    got = run_ort(data, x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want).max()))
    back = import_onnx_bytes(data)
    assert nf_names(back) == nf_names(module)  # Mul(x, Sigmoid(x)) is read as nf.silu
    np.testing.assert_array_equal(run(back, x.numpy())[0], run(module, x.numpy())[0])


def test_onnx_reader_fuses_only_x_times_its_own_sigmoid() -> None:
    """``Mul(x, Sigmoid(x))`` in either order is one nf.silu; ``Mul(y, Sigmoid(x))`` and a
    Sigmoid read elsewhere too stay nf.sigmoid + nf.mul (the numbers are the same anyway)."""
    h = onnx.helper

    def model(nodes: list, outputs: list[str]) -> bytes:  # noqa: ANN001
        info = [h.make_tensor_value_info(n, 1, ["N", 3]) for n in ("x", "y")]
        out = [h.make_tensor_value_info(n, 1, None) for n in outputs]
        graph = h.make_graph(nodes, "g", info, out)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
        m.ir_version = 10
        return m.SerializeToString()

    sig = h.make_node("Sigmoid", ["x"], ["s"])
    cases = {
        "x*s": ([sig, h.make_node("Mul", ["x", "s"], ["z"])], ["z"], ["nf.silu"]),
        "s*x": ([sig, h.make_node("Mul", ["s", "x"], ["z"])], ["z"], ["nf.silu"]),
        "y*s": ([sig, h.make_node("Mul", ["y", "s"], ["z"])], ["z"], ["nf.sigmoid", "nf.mul"]),
        "s read twice": (
            [sig, h.make_node("Mul", ["x", "s"], ["z"])],
            ["z", "s"],
            ["nf.sigmoid", "nf.mul"],
        ),
    }
    x = np.linspace(-6, 6, 6, dtype=np.float32).reshape(2, 3)
    y = x[::-1].copy()
    for name, (nodes, outputs, ops) in cases.items():
        data = model(nodes, outputs)
        back = import_onnx_bytes(data)
        assert nf_names(back) == ops, name
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x, "y": y})
        got = run(back, x, y) if len(back.body.block.first_op.args) == 2 else run(back, x)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def nf_names(module: ModuleOp) -> list[str]:
    """The computing nf ops in order (constants and fake-quants may be placed otherwise)."""
    return [
        op.name for op in module.walk() if op.name.startswith("nf.") and op.name != "nf.constant"
    ]


@settings(max_examples=examples(8), deadline=None)
@given(
    forms=st.lists(st.sampled_from(FORMS), min_size=1, max_size=3).map(tuple),
    seed=st.integers(0, 1000),
)
def test_onnx_nq_program_reads_back_and_lowers(forms: tuple[str, ...], seed: int) -> None:
    """The QDQ file of an nq program (half_even) reads back as the same ops, computes the
    same numbers bit for bit, and still lowers to nh (the SiLU read back is one op, so its
    table is built); onnxruntime (float32 SiLU/GELU) is within one output step of nq."""
    module, x = quantized_net(forms, seed, rounding="half_even")
    data = export_onnx_bytes(module)
    back = import_onnx_bytes(data)
    assert nf_names(back) == nf_names(module)
    (want,) = run(module, x)
    np.testing.assert_array_equal(run(back, x)[0], want)
    np.testing.assert_array_equal(run(lower_to_hw(back), x)[0], want)
    (ort_out,) = [run_ort(data, x.astype(np.float32))]
    step = np.ldexp(1.0, -int(module_out_exp(module)))
    assert np.all(np.abs(ort_out - want) <= step)


def module_out_exp(module: ModuleOp) -> int:
    (ret,) = [op for op in module.walk() if isinstance(op, ReturnOp)]
    fq = ret.operands[0].owner
    assert isinstance(fq, FakeQuantOp)
    return int(np.asarray(fq.exp.get_values()).reshape(-1)[0])


def test_onnx_nanoengine_flavour_writes_silu_and_refuses_gelu() -> None:
    x = torch.randn(2, 3, 4)
    silu = nanoir.from_torch(nn.Sequential(nn.SiLU()).eval(), (x,))
    data = export_onnx_bytes(silu, "nanoengine")
    np.testing.assert_allclose(run_ort(data, x.numpy()), F.silu(x).numpy(), rtol=1e-6)
    gelu = nanoir.from_torch(nn.Sequential(nn.GELU()).eval(), (x,))
    with pytest.raises(OnnxExportError, match=r"nf\.gelu.*opset 17"):
        export_onnx_bytes(gelu, "nanoengine")


# ---------------------------------------------------------------------------------------
# QAT
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_qat_forward_is_nq_and_backward_is_torchs(form: str) -> None:
    """The QAT step's value is nanoir's kernel (so convert stays bit for bit: checked on a
    trained net below) and its gradient is torch's float op's."""
    op = nf_op(form, _arg())
    step = build_step(op)
    x = (torch.randn(64, dtype=torch.float64) * 4).requires_grad_(True)
    (y,) = step(x)
    (want,) = nanoir.runtime.nf.NF_BUILDERS[type(op)](op, np.dtype(np.float64))(x.detach().numpy())
    np.testing.assert_array_equal(y.detach().numpy(), want)
    g = torch.randn(64, dtype=torch.float64)
    (grad,) = torch.autograd.grad(y, x, g)
    xd = x.detach().requires_grad_(True)
    (want_grad,) = torch.autograd.grad(torch_fn(form, xd), xd, g)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)


def test_qat_trains_through_and_converts_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(3, 4, 3, padding=1),
        nn.SiLU(),
        nn.Conv1d(4, 4, 1),
        nn.GELU(),
        nn.Conv1d(4, 2, 1),
        nn.GELU(approximate="tanh"),
    ).eval()
    x = np.random.default_rng(0).standard_normal((4, 3, 9))
    q = nanoir.qat.prepare(model, (torch.from_numpy(x).float(),))
    nanoir.qat.calibrate(q, [x])
    xt = torch.from_numpy(x.astype(np.float32))
    opt = torch.optim.Adam([g for g in q.param_groups(1e-2) if g["params"]])
    before = [p.detach().clone() for p in q.parameters()]
    q.train()
    for _ in range(2):
        out = q(xt)
        out = out if isinstance(out, torch.Tensor) else out[0]
        loss = (out - 1).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    q.eval()
    assert any(not torch.equal(b, p) for b, p in zip(before, q.parameters()))
    module = nanoir.qat.convert(q)
    assert {"nf.silu", "nf.gelu"} <= {op.name for op in module.walk()}
    (got,) = nanoir.run(module, x)
    np.testing.assert_array_equal(got, nanoir.qat.evaluate(q, x))
    hw = lower_to_hw(module.clone())
    np.testing.assert_array_equal(nanoir.run(hw, x)[0], got)
