"""The torch frontend: every test network and every supported ATen op, imported and compared
with torch eval (through the nf interpreter), plus names, dynamic batch, round trips and the
unsupported-op diagnostic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nanoir.dialects import nf
from torch import nn
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.parser import Parser

import nanoir
from nanoir.context import make_context
from nanoir.frontend import FrontendError, from_torch, supported_aten_ops
from nanoir.frontend.torch_import import name_hint
from nanoir.testing import TEST_MODELS, make_test_model

torch.set_num_threads(1)


def run_nf(module: ModuleOp, *inputs: torch.Tensor) -> list[np.ndarray]:
    """Run an nf program on torch tensors (the interpreter is the executable semantics)."""
    from nanoir.runtime.interpreter import run

    return run(module, *(t.numpy() for t in inputs))


def torch_outputs(model: nn.Module, *inputs: torch.Tensor) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def assert_close_to_torch(module: ModuleOp, model: nn.Module, *inputs: torch.Tensor) -> None:
    """max |nf - torch| <= 1e-4 * max |torch|, per output."""
    expected = torch_outputs(model, *inputs)
    actual = run_nf(module, *inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        bound = 1e-4 * max(float(np.abs(e).max(initial=0.0)), 1e-6)
        err = float(np.abs(a - e).max(initial=0.0))
        assert err <= bound, f"max abs error {err} > {bound}"


def main_func(module: ModuleOp) -> FuncOp:
    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    assert len(funcs) == 1 and funcs[0].sym_name.data == "main"
    return funcs[0]


def constants(module: ModuleOp) -> list[nf.ConstantOp]:
    return [op for op in module.walk() if isinstance(op, nf.ConstantOp)]


# --------------------------------------------------------------------------------------------
# The test networks
# --------------------------------------------------------------------------------------------

MODEL_NAMES = sorted(TEST_MODELS)


@pytest.fixture(scope="module", params=MODEL_NAMES)
def imported(request: pytest.FixtureRequest) -> tuple[nn.Module, ModuleOp]:
    """Each test network and its import, exported once per test module (from a batch-1
    example, which must still give a dynamic batch)."""
    torch.manual_seed(0)
    model = make_test_model(request.param)
    return model, from_torch(model, model.make_example_input(1))


@pytest.fixture(scope="module")
def folded(imported: tuple[nn.Module, ModuleOp]) -> ModuleOp:
    from nanoir.lowering.fold_bn import FoldBnPass

    module = imported[1].clone()
    FoldBnPass().apply(make_context(), module)
    module.verify()
    return module


def test_every_model_is_nf_and_verifies(imported: tuple[nn.Module, ModuleOp]) -> None:
    _, module = imported
    module.verify()
    func = main_func(module)
    names = {op.name for op in func.body.walk()}
    assert all(n.startswith("nf.") or n == "func.return" for n in names), names


def test_printed_model_parses_back_equal(imported: tuple[nn.Module, ModuleOp]) -> None:
    _, module = imported
    parsed = Parser(make_context(), str(module), "model.mlir").parse_module()
    parsed.verify()
    assert parsed.is_structurally_equivalent(module)


def test_constants_are_named_by_torch_path(imported: tuple[nn.Module, ModuleOp]) -> None:
    model, module = imported
    named = {op.sym_name.data: op for op in constants(module) if op.sym_name is not None}
    used_state = {k for k, v in model.state_dict().items() if v.is_floating_point()}
    # Every float parameter and buffer is a constant named by its path (each exactly once).
    assert used_state <= set(named), used_state - set(named)
    assert len(named) == len([op for op in constants(module) if op.sym_name is not None])
    for name, op in named.items():
        if name in used_state:
            expected = model.state_dict()[name].numpy()
            data = np.frombuffer(op.value.data.data, np.float32).reshape(expected.shape)
            np.testing.assert_array_equal(data, expected)
        hint = op.result.name_hint
        assert hint is not None and name_hint(name).startswith(hint), (name, hint)


def test_batch_dim_is_dynamic(imported: tuple[nn.Module, ModuleOp]) -> None:
    model, module = imported
    ftype = main_func(module).function_type
    example = model.make_example_input(1)
    (arg,) = ftype.inputs.data
    (out,) = ftype.outputs.data
    assert isinstance(arg, TensorType) and isinstance(out, TensorType)
    assert arg.get_shape() == (DYNAMIC_INDEX, *example.shape[1:])
    assert out.get_shape()[0] == DYNAMIC_INDEX
    assert str(ftype).startswith("(tensor<?x")


@pytest.mark.parametrize("batch", [1, 3])
def test_model_matches_torch(imported: tuple[nn.Module, ModuleOp], batch: int) -> None:
    model, module = imported
    assert_close_to_torch(module, model, model.make_example_input(batch, seed=7))


@pytest.mark.parametrize("batch", [1, 3])
def test_folded_model_matches_torch(
    imported: tuple[nn.Module, ModuleOp], folded: ModuleOp, batch: int
) -> None:
    model, _ = imported
    assert not [op for op in folded.walk() if isinstance(op, nf.BatchNormOp)]
    assert_close_to_torch(folded, model, model.make_example_input(batch, seed=7))


def test_fold_bn_keeps_layer_names(imported: tuple[nn.Module, ModuleOp], folded: ModuleOp) -> None:
    """Folded weights keep the conv/linear names, a bias-free layer gains ``<layer>.bias``,
    and no BN parameter is left."""
    model, _ = imported
    names = {op.sym_name.data for op in constants(folded) if op.sym_name is not None}
    for path, layer in model.named_modules():
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            assert not any(n.startswith(path + ".") for n in names), path
        elif isinstance(layer, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            assert f"{path}.weight" in names
            if layer.bias is not None or isinstance(layer, (nn.Conv1d, nn.Conv2d)):
                # A conv followed by BN gains a bias; every test network has BN after
                # its bias-free convs.
                assert f"{path}.bias" in names, path


def test_static_batch_when_asked() -> None:
    model = make_test_model("LeNet5")
    module = from_torch(model, model.make_example_input(2), dynamic_batch=False)
    ftype = main_func(module).function_type
    assert ftype.inputs.data[0].get_shape() == (2, 1, 32, 32)  # type: ignore[attr-defined]
    assert ftype.outputs.data[0].get_shape() == (2, 10)  # type: ignore[attr-defined]
    assert "?" not in str(main_func(module).function_type)


def test_training_flag_is_restored_and_bn_imported_for_inference() -> None:
    model = make_test_model("KWSNet").train()
    model.features[1].eval()  # a flag set on its own must survive too
    module = from_torch(model, model.make_example_input(2))
    assert model.training and model.fc.training and not model.features[1].training
    assert [op for op in module.walk() if isinstance(op, nf.BatchNormOp)]
    model.eval()
    assert_close_to_torch(module, model, model.make_example_input(2))


def test_sample_net_matches_the_sample_program() -> None:
    """The sample's structure: two convs, three adds of constants, relu, a residual add."""
    model = make_test_model("SampleNet")
    module = from_torch(model, model.make_example_input(1))
    body = [op.name for op in main_func(module).body.walk() if op.name != "nf.constant"]
    assert body == [
        "nf.conv",
        "nf.conv",
        "nf.add",
        "nf.add",
        "nf.add",
        "nf.relu",
        "nf.add",
        "func.return",
    ]
    named = {op.sym_name.data for op in constants(module) if op.sym_name is not None}
    assert {"conv.conv1.weight", "conv.conv2.bias", "custom_param", "lifted_tensor_0"} <= named
    scalar = [op for op in constants(module) if op.sym_name is None]
    assert len(scalar) == 1 and nf.tensor_shape(scalar[0].result) == ()


# --------------------------------------------------------------------------------------------
# One small network per supported ATen op (or family)
# --------------------------------------------------------------------------------------------


class Lambda(nn.Module):
    """A network whose forward is ``fn(self, x[, y])``, with the given submodules/parameters."""

    def __init__(self, fn: Callable[..., object], **children: nn.Module | nn.Parameter):
        super().__init__()
        self.fn = fn
        for name, child in children.items():
            setattr(self, name, child)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> object:
        return self.fn(self, x) if y is None else self.fn(self, x, y)


def param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape))


IMG = (2, 4, 9, 7)  # [N, C, H, W], odd sizes so ceil_mode and 'same' padding matter
SEQ = (2, 4, 11)  # [N, C, L]

OP_CASES: dict[str, tuple[Callable[[], nn.Module], list[tuple[int, ...]], set[str]]] = {
    "conv2d": (lambda: Lambda(lambda m, x: m.c(x), c=nn.Conv2d(4, 6, 3, 2, 1)), [IMG], {"nf.conv"}),
    "conv2d_dilation_groups": (
        lambda: Lambda(
            lambda m, x: m.c(x), c=nn.Conv2d(4, 6, 3, padding=(2, 1), dilation=(2, 1), groups=2)
        ),
        [IMG],
        {"nf.conv"},
    ),
    "conv2d_depthwise": (
        lambda: Lambda(lambda m, x: m.c(x), c=nn.Conv2d(4, 4, 3, groups=4, bias=False)),
        [IMG],
        {"nf.conv"},
    ),
    "conv2d_same": (
        lambda: Lambda(lambda m, x: m.c(x), c=nn.Conv2d(4, 5, (4, 3), padding="same")),
        [IMG],
        {"nf.conv"},
    ),
    "conv2d_asymmetric_pad": (
        lambda: Lambda(lambda m, x: m.c(F.pad(x, (0, 1, 2, 0))), c=nn.Conv2d(4, 5, 3)),
        [IMG],
        {"nf.pad", "nf.conv"},
    ),
    "conv1d": (
        lambda: Lambda(lambda m, x: m.c(x), c=nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2)),
        [SEQ],
        {"nf.conv"},
    ),
    "conv1d_same": (
        lambda: Lambda(lambda m, x: m.c(x), c=nn.Conv1d(4, 6, 4, padding="same", dilation=3)),
        [SEQ],
        {"nf.conv"},
    ),
    "linear": (lambda: Lambda(lambda m, x: m.fc(x), fc=nn.Linear(11, 5)), [SEQ], {"nf.linear"}),
    "matmul": (lambda: Lambda(lambda m, x: x @ m.w, w=param(11, 3)), [SEQ], {"nf.matmul"}),
    "mm": (
        lambda: Lambda(lambda m, x: torch.mm(x.flatten(1), m.w), w=param(44, 3)),
        [SEQ],
        {"nf.matmul"},
    ),
    "bmm": (lambda: Lambda(lambda m, x: torch.bmm(x, x.transpose(1, 2))), [SEQ], {"nf.matmul"}),
    "batch_norm": (
        lambda: Lambda(lambda m, x: m.bn(x), bn=nn.BatchNorm2d(4)),
        [IMG],
        {"nf.batch_norm"},
    ),
    "batch_norm_no_affine": (
        lambda: Lambda(lambda m, x: m.bn(x), bn=nn.BatchNorm1d(4, affine=False)),
        [SEQ],
        {"nf.batch_norm"},
    ),
    "tensor_arithmetic": (
        lambda: Lambda(lambda m, x, y: (x + y, x - y, x * y, x / (y * y + 1))),
        [IMG, IMG],
        {"nf.add", "nf.sub", "nf.mul", "nf.div"},
    ),
    "scalar_arithmetic": (
        lambda: Lambda(lambda m, x: (x + 2, x - 1.5, 3 - x, x * 0.5, x / 4, 2 * x)),
        [IMG],
        {"nf.add", "nf.sub", "nf.mul", "nf.div"},
    ),
    "alpha": (
        lambda: Lambda(
            lambda m, x, y: (
                torch.add(x, y, alpha=2),
                torch.sub(x, y, alpha=0.5),
                torch.add(x, 3, alpha=2),
                torch.rsub(x, y, alpha=3),
            )
        ),
        [IMG, IMG],
        {"nf.add", "nf.sub", "nf.mul"},
    ),
    "parameters": (
        lambda: Lambda(lambda m, x: x * m.a + m.b, a=param(4, 1, 1), b=param(1)),
        [IMG],
        {"nf.mul", "nf.add"},
    ),
    "torch_constants": (
        lambda: Lambda(
            lambda m, x: x + torch.tensor([1.5]) - torch.tensor(0.25) * torch.tensor([2])
        ),
        [IMG],
        {"nf.add", "nf.sub"},
    ),
    "activations": (
        lambda: Lambda(
            lambda m, x: (
                F.relu(x),
                torch.sigmoid(x),
                torch.tanh(x),
                F.hardsigmoid(3 * x),
                F.hardswish(3 * x),
                F.relu6(3 * x),
                F.hardtanh(x, -0.5, 0.7),
                torch.clamp(x, min=-0.2),
                F.leaky_relu(x, 0.1),
            )
        ),
        [IMG],
        {
            "nf.relu",
            "nf.sigmoid",
            "nf.tanh",
            "nf.hardsigmoid",
            "nf.hardswish",
            "nf.clamp",
            "nf.leaky_relu",
        },
    ),
    "prelu": (
        lambda: Lambda(lambda m, x: (m.p1(x), m.p2(x)), p1=nn.PReLU(4), p2=nn.PReLU()),
        [IMG],
        {"nf.prelu"},
    ),
    "max_pool2d": (
        lambda: Lambda(
            lambda m, x: (
                F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
                F.max_pool2d(x, 2, dilation=2),
                F.max_pool2d(x, (3, 2), (1, 2), (1, 0)),
            )
        ),
        [IMG],
        {"nf.max_pool"},
    ),
    "max_pool1d": (
        lambda: Lambda(lambda m, x: (F.max_pool1d(x, 3, 2, 1, ceil_mode=True), F.max_pool1d(x, 2))),
        [SEQ],
        {"nf.max_pool"},
    ),
    "max_pool2d_with_indices": (
        lambda: Lambda(lambda m, x: m.pool(x)[0], pool=nn.MaxPool2d(2, return_indices=True)),
        [IMG],
        {"nf.max_pool"},
    ),
    "avg_pool2d": (
        lambda: Lambda(
            lambda m, x: (
                F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool2d(x, 2, divisor_override=3),
                F.avg_pool2d(x, 3, 2, 1),
            )
        ),
        [IMG],
        {"nf.avg_pool"},
    ),
    "avg_pool1d": (
        lambda: Lambda(
            lambda m, x: (
                F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                F.avg_pool1d(x, 2),
            )
        ),
        [SEQ],
        {"nf.avg_pool"},
    ),
    "adaptive_avg_pool": (
        lambda: Lambda(
            lambda m, x: (
                F.adaptive_avg_pool2d(x, 1),
                F.adaptive_avg_pool2d(x, (4, 3)),
                F.adaptive_avg_pool1d(x.flatten(2), 5),
                x.mean((2, 3)),
                x.mean((-1, -2), keepdim=True),
            )
        ),
        [IMG],
        {"nf.adaptive_avg_pool"},
    ),
    "cat": (lambda: Lambda(lambda m, x, y: torch.cat([x, y, x], 1)), [IMG, IMG], {"nf.concat"}),
    "split": (
        lambda: Lambda(
            lambda m, x: (
                *torch.split(x, 3, dim=2),
                *torch.chunk(x, 2, 1),
                *torch.split(x, [1, 3], 1),
            )
        ),
        [IMG],
        {"nf.split"},
    ),
    "slice_select": (
        lambda: Lambda(lambda m, x: (x[:, 1:3], x[:, :, 2], x[..., -2:], x[:, -1])),
        [IMG],
        {"nf.split", "nf.reshape"},
    ),
    "reshape": (
        lambda: Lambda(
            lambda m, x: (
                x.flatten(1),
                x.view(x.shape[0], -1, 7),
                x.reshape(-1, 4, 63),
                x.unsqueeze(2).squeeze(2),
                x[:, None],
                x.flatten(2).unsqueeze(-1).squeeze(-1),
            )
        ),
        [IMG],
        {"nf.reshape"},
    ),
    "permute": (
        lambda: Lambda(
            lambda m, x: (
                x.permute(0, 2, 3, 1),
                x.transpose(1, 3),
                x.transpose(-1, -2).contiguous(),
                x.flatten(1).t(),
            )
        ),
        [IMG],
        {"nf.transpose"},
    ),
    "pad": (
        lambda: Lambda(
            lambda m, x: (
                F.pad(x, (1, 2)),
                F.pad(x, (1, 0, 0, 2), value=0.5),
                F.pad(x, (1, 1, 2, 2), mode="reflect"),
                F.pad(x, (2, 1, 1, 2), mode="replicate"),
                F.pad(x, (-1, 0, 0, -2)),
            )
        ),
        [IMG],
        {"nf.pad"},
    ),
    "upsample_nearest": (
        lambda: Lambda(
            lambda m, x: (
                F.interpolate(x, scale_factor=2),
                F.interpolate(x, size=(13, 20)),
                F.interpolate(x.flatten(2), scale_factor=3),
                F.interpolate(x, scale_factor=(1.5, 2.0)),
            )
        ),
        [IMG],
        {"nf.upsample_nearest"},
    ),
    "dropped_ops": (
        lambda: Lambda(
            lambda m, x: m.drop(m.ident(x)).clone().contiguous().detach() + 1,
            drop=nn.Dropout(0.5),
            ident=nn.Identity(),
        ),
        [IMG],
        {"nf.add"},
    ),
}


@pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")
@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_torch(case: str) -> None:
    make, shapes, expected_ops = OP_CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    for layer in model.modules():
        if isinstance(layer, nn.modules.batchnorm._BatchNorm):
            layer.running_mean.uniform_(-0.5, 0.5)  # type: ignore[union-attr]
            layer.running_var.uniform_(0.5, 2.0)  # type: ignore[union-attr]
    module = from_torch(model, tuple(torch.randn(*s) for s in shapes))
    module.verify()
    ops = {op.name for op in module.walk() if op.name.startswith("nf.")} - {"nf.constant"}
    assert expected_ops <= ops, ops
    for batch in (1, 3):
        inputs = [torch.randn(batch, *s[1:]) for s in shapes]
        assert_close_to_torch(module, model, *inputs)


def test_every_handler_is_exercised() -> None:
    """The op table holds the ops the issue asks for."""
    ops = set(supported_aten_ops())
    for required in (
        "aten.conv1d.default",
        "aten.conv2d.default",
        "aten.conv2d.padding",
        "aten.linear.default",
        "aten.matmul.default",
        "aten.mm.default",
        "aten.bmm.default",
        "aten._native_batch_norm_legit_no_training.default",
        "aten.add.Tensor",
        "aten.sub.Tensor",
        "aten.mul.Tensor",
        "aten.div.Tensor",
        "aten.relu.default",
        "aten.hardtanh.default",
        "aten.relu6.default",
        "aten.leaky_relu.default",
        "aten.prelu.default",
        "aten.sigmoid.default",
        "aten.tanh.default",
        "aten.hardsigmoid.default",
        "aten.hardswish.default",
        "aten.max_pool1d.default",
        "aten.max_pool2d.default",
        "aten.avg_pool1d.default",
        "aten.avg_pool2d.default",
        "aten.adaptive_avg_pool2d.default",
        "aten.cat.default",
        "aten.split.Tensor",
        "aten.split_with_sizes.default",
        "aten.view.default",
        "aten.permute.default",
        "aten.transpose.int",
        "aten.constant_pad_nd.default",
        "aten.upsample_nearest2d.vec",
        "aten.dropout.default",
        "aten.clone.default",
        "aten.alias.default",
        "aten.unsqueeze.default",
        "aten.squeeze.dim",
    ):
        assert required in ops, required


def test_name_hints_are_valid() -> None:
    assert name_hint("layer1.0.conv1.weight") == "layer1.0.conv1.weight"
    assert name_hint("0.weight") == "_0.weight"
    assert name_hint("a b/c") == "a_b_c"


# --------------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------------


class CumSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logcumsumexp(x, dim=1)  # no nf equivalent (no handler either)


class WithUnsupported(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.ReLU(), CumSum())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return torch.kthvalue(y, 2, dim=-1).values  # no nf equivalent either


def _line_of(text: str) -> int:
    source = Path(__file__).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(source) if text in line)


def test_unsupported_ops_are_one_error_naming_op_module_and_line() -> None:
    with pytest.raises(FrontendError) as info:
        from_torch(WithUnsupported().eval(), torch.randn(2, 3, 4))
    message = str(info.value)
    here = Path(__file__).name
    assert "aten.logcumsumexp.default" in message
    assert "'block.1' (CumSum)" in message
    assert f"{here}:{_line_of('torch.logcumsumexp(x, dim=1)')}" in message
    assert "torch.logcumsumexp(x, dim=1)" in message
    assert "aten.kthvalue" in message
    assert f"{here}:{_line_of('torch.kthvalue(y, 2, dim=-1)')}" in message
    assert "<root> (WithUnsupported)" in message
    supported = message.split("supported ATen ops:")[1]
    assert "aten.conv2d.default" in supported and "aten.logcumsumexp" not in supported
    assert info.value.__cause__ is None


def test_unsupported_argument_names_op_and_reason() -> None:
    model = Lambda(lambda m, x: F.pad(x, (1, 1), mode="circular"))
    with pytest.raises(FrontendError, match=r"aten\.\w*pad\w*\.\w+(.|\n)*circular"):
        from_torch(model, torch.randn(2, 3, 5))


def test_upsample_scale_that_picks_other_pixels_is_rejected() -> None:
    """torch reads ``floor(j / 1.7)`` where nf reads ``floor(j * 4 / 6)``: they differ here,
    so the frontend refuses instead of importing a different network."""
    from nanoir.runtime.numerics import kernels

    x = torch.arange(4.0).reshape(1, 1, 4)
    by_torch = F.interpolate(x, scale_factor=1.7).numpy()
    by_size = kernels.upsample_nearest(x.numpy(), size=[by_torch.shape[-1]])
    assert not np.array_equal(by_torch, by_size)
    model = Lambda(lambda m, x: F.interpolate(x, scale_factor=1.7))
    with pytest.raises(FrontendError, match="scale factor 1.7"):
        from_torch(model, torch.randn(2, 3, 4))


def test_untraceable_model_is_a_frontend_error() -> None:
    model = Lambda(lambda m, x: x if x.sum() > 0 else -x)  # data-dependent control flow
    with pytest.raises(FrontendError, match="torch.export could not trace"):
        from_torch(model, torch.randn(2, 3))


def test_result_shapes_are_checked_against_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler whose nf result disagrees with torch's recorded shape is caught at once."""
    from nanoir.frontend import torch_import

    def forgetful_flatten(imp, node, args):  # noqa: ANN001, ANN202 - drops the reshape
        return imp.tensor(node.args[0])

    monkeypatch.setitem(torch_import.ATEN_HANDLERS, "aten.view.default", forgetful_flatten)
    monkeypatch.setitem(torch_import.ATEN_HANDLERS, "aten.flatten.using_ints", forgetful_flatten)
    model = Lambda(lambda m, x: torch.relu(x.flatten(1)))
    with pytest.raises(
        FrontendError,
        match=r"(?s)aten\.(view|flatten)\.\w+.*differs from torch's tensor<\?x12xf32>",
    ):
        from_torch(model, torch.randn(2, 3, 4))


def test_undecomposed_export_imports_too() -> None:
    """``import_program`` also takes torch.export's graph before ``run_decompositions``, where
    batch_norm, flatten, chunk and dropout are still their own ATen ops."""
    from nanoir.frontend.torch_import import import_program

    torch.manual_seed(0)
    model = Lambda(
        lambda m, x: (
            m.drop(torch.cat(torch.chunk(m.bn(x), 2, 1)[::-1], 1).flatten(1)) + torch.tensor([0.5])
        ),
        bn=nn.BatchNorm2d(4),
        drop=nn.Dropout(0.1),
    ).eval()
    x = torch.randn(2, 4, 3, 3)
    program = torch.export.export(model, (x,))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {
        "aten.batch_norm.default",
        "aten.chunk.default",
        "aten.flatten.using_ints",
        "aten.dropout.default",
    } <= targets
    module = import_program(program)
    assert_close_to_torch(module, model, x)


def test_a_top_level_sequential_names_its_layers_and_clones() -> None:
    """Layers of a top-level ``nn.Sequential`` are named ``0``, ``1``...: their activations must
    keep a valid, non-empty name (xDSL strips a ``_<digits>`` suffix), so that the module
    clones, quantizes and lowers like any other."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 5)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    module = nanoir.from_torch(model, (x,))
    names = [r.name_hint for op in module.walk() for r in op.results]
    assert "m0" in names and "" not in names
    nanoir.quantize(module, [x.numpy()])
    (y_q,) = nanoir.run(module.clone(), x.numpy())
    (y_hw,) = nanoir.run(nanoir.lower_to_hw(module.clone()), x.numpy())
    assert np.array_equal(y_q, y_hw)
