"""Files NanoEngine-PyTorch writes for padded networks: declared shapes that ignore padding.

Its stream analysis ignores the pads of Conv, MaxPool and AveragePool, so a pad-1 3x3 conv
on width 8 is declared 6 wide, and everything computed from it is declared with the
reference's shrunken widths too. nanoir reads such files with one `NanoEnginePaddingWarning`,
computes with the true shapes and writes the declared numbers back.

The inputs (`inputs/reference_*.ne`) are written in the reference's style (sections, names,
`Q` nodes with int8 exponent constants, runtime and cache shapes from its analysis with steps
`[(2, 1), (3, whole width)]`, pads ignored): a chain of two pad-1 convs, a pad-1 stride-2 max
pool and a pad-1 average pool, a residual block (two pad-1 convs added to their input), and
a pad-1 stride-2 conv. Expected shapes are written out
below; expected numbers come from a PyTorch evaluation of the file's own constants (not from
the importer) and from the same file declared with the true shapes.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from nanoir.grammar.ne.errors import NanoEngineSemanticError
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import (
    NanoEngineImportWarning,
    NanoEnginePaddingWarning,
    import_nanoengine,
)
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.syntax_tree import ConstTensor, InitNode, RuntimeNode
from nanoir.lowering.stream_plan import StreamPlanPass, stream_shapes
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType

import nanoir

INPUTS = Path(__file__).resolve().parent / "inputs"
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"

# file -> (input width, {tensor: (declared width, true width)} for every tensor whose
# declaration is the reference's padding-ignoring one, in declaration order)
CASES: dict[str, tuple[int, dict[str, tuple[int, int]]]] = {
    "reference_pad1_conv_chain": (
        8,
        {
            "Conv_n1_o0": (6, 8),
            "Q_n4_o0": (6, 8),
            "Relu_n1_o0": (6, 8),
            "Conv_n2_o0": (4, 8),
            "output": (4, 8),
        },
    ),
    "reference_padded_pools": (
        10,
        {  # conv without pads: 8 = 8; max pool k3 s2 p1: 3 vs 4; avg pool k2 s1 p1: 2 vs 5
            "MaxPool_n1_o0": (3, 4),
            "Q_n5_o0": (3, 4),
            "AveragePool_n1_o0": (2, 5),
            "output": (2, 5),
        },
    ),
    "reference_residual": (
        8,
        {  # two pad-1 convs joined with their input: the reference's Add is as long as its
            # shorter input (it fires while both caches hold a row)
            "Conv_n1_o0": (6, 8),
            "Q_n4_o0": (6, 8),
            "Relu_n1_o0": (6, 8),
            "Conv_n2_o0": (4, 8),
            "Q_n7_o0": (4, 8),
            "Add_n1_o0": (4, 8),
            "output": (4, 8),
        },
    ),
    "reference_strided_padded_conv": (
        8,
        {  # conv k3 s2 p1: 3 vs 4, then a 1x1 conv
            "Conv_n1_o0": (3, 4),
            "Q_n4_o0": (3, 4),
            "Relu_n1_o0": (3, 4),
            "Conv_n2_o0": (3, 4),
            "output": (3, 4),
        },
    ),
}


def load_with_warnings(path: Path) -> tuple[ModuleOp, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = nanoir.load(path)
    return module, list(caught)


def import_text(text: str, name: str = "x.ne") -> tuple[ModuleOp, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = import_nanoengine(text, name)
    return module, list(caught)


def declared_with_true_shapes(text: str, widths: dict[str, tuple[int, int]]) -> str:
    """The file with every reference-shaped runtime tensor declared with its true width."""
    for name, (declared, true) in widths.items():
        pattern = rf"(let {name}: Tensor<Any> = \{{shape:BCMD=\[-1, \d+, \d+, ){declared}\]"
        text, n = re.subn(pattern, rf"\g<1>{true}]", text)
        assert n == 1, name
    return text


def result_of(module: ModuleOp, tensor: str) -> TensorType:
    """The IR type of the value that `tensor` (an op's declared output) names."""
    for op in module.walk():
        outs = op.attributes.get("ne.out_s")
        if outs is None:
            continue
        for entry, result in zip(outs.data, op.results):  # type: ignore[attr-defined]
            if entry.data["name"] == StringAttr(tensor):
                assert isinstance(result.type, TensorType)
                return result.type
    raise KeyError(tensor)


def named_in(message: str) -> list[tuple[str, int, int]]:
    """(tensor, declared width, computed width) for each tensor a padding warning names."""
    named = re.findall(r"(\w+) declared \[-1, \d+, 1, (\d+)\], computed \?x\d+x\?x(\d+)", message)
    return [(n, int(d), int(t)) for n, d, t in named]


def inputs_for(width: int, rows: int = 9, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 2, rows, width))


# ---------------------------------------------------------------------------------------
# An independent evaluation: PyTorch (float64) on the file's own constants
# ---------------------------------------------------------------------------------------


def _fake_quant(x: torch.Tensor, bits: int, exp: np.ndarray) -> torch.Tensor:
    k = torch.from_numpy(exp.astype(np.float64))
    scale = 2.0**k
    return torch.clamp(torch.trunc(x * scale), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1) / scale


def torch_reference(text: str, x: np.ndarray) -> np.ndarray:
    """Run the file's nodes with PyTorch: Q, Conv, Add, Relu, MaxPool and AveragePool, pads used."""
    program = parse_nanoengine(text)
    values: dict[str, torch.Tensor] = {"input": torch.from_numpy(x)}
    consts = {d.name: d for d in program.declarations if isinstance(d, ConstTensor)}
    for d in consts.values():
        if d.dtype == "little_float_32":
            values[d.name] = torch.from_numpy(d.to_numpy().astype(np.float64))
    nodes = {d.name: d for d in program.declarations if isinstance(d, (InitNode, RuntimeNode))}
    calls = [*program.function("init").calls, *program.function("runtime").calls]  # type: ignore[union-attr]
    for node in (nodes[c] for c in calls):
        attrs = node.attr_dict()
        ins = [values[n] for n in node.in_s if n in values]
        if node.op_type == "Q":
            exp = consts[node.in_s[1]].to_numpy()
            out = _fake_quant(ins[0], attrs["bit_len"], exp)  # type: ignore[arg-type]
        elif node.op_type == "Conv":
            pad = attrs["pads"][0]  # type: ignore[index]
            out = F.conv2d(ins[0], ins[1], ins[2], stride=attrs["strides"], padding=pad)  # type: ignore[arg-type]
        elif node.op_type == "Add":
            out = ins[0] + ins[1]
        elif node.op_type == "Relu":
            out = torch.relu(ins[0])
        elif node.op_type == "MaxPool":
            out = F.max_pool2d(ins[0], attrs["kernel_shape"], attrs["strides"], attrs["pads"][0])  # type: ignore[arg-type, index]
        elif node.op_type == "AveragePool":
            out = F.avg_pool2d(
                ins[0],
                attrs["kernel_shape"],
                attrs["strides"],
                attrs["pads"][0],  # type: ignore[arg-type, index]
                count_include_pad=bool(attrs["count_include_pad"]),
            )
        else:
            raise AssertionError(node.op_type)
        values[node.out_s[0]] = out
    return values["output"].numpy()


# ---------------------------------------------------------------------------------------
# The reference's files
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_reference_file_loads_with_one_warning(case: str) -> None:
    path = INPUTS / f"{case}.ne"
    text = path.read_text()
    _, widths = CASES[case]
    module, caught = load_with_warnings(path)
    assert len(caught) == 1 and caught[0].category is NanoEnginePaddingWarning
    # tools print it like every import warning
    assert issubclass(NanoEnginePaddingWarning, NanoEngineImportWarning)
    message = str(caught[0].message)
    # Located at the first such tensor's declaration.
    first = next(iter(widths))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith(f"let {first}:"))
    assert message.startswith(
        f"{path}:{line}:5: warning: {len(widths)} runtime tensors are declared "
    )
    assert "ignores the pads" in message
    # Each tensor with its declared and computed shape, nothing else.
    assert named_in(message) == [(n, d, t) for n, (d, t) in widths.items()]
    # The IR has the true shapes; the declared numbers ride along.
    for name, (_, true) in widths.items():
        assert result_of(module, name).get_shape()[3] == true


@pytest.mark.parametrize("case", CASES)
def test_reference_file_writes_back_byte_for_byte(case: str, tmp_path: Path) -> None:
    path = INPUTS / f"{case}.ne"
    module, _ = load_with_warnings(path)
    nanoir.save(module, tmp_path / "again.ne")
    assert (tmp_path / "again.ne").read_bytes() == path.read_bytes()
    # Also after printing the IR as MLIR text and parsing it back.
    reparsed = nanoir.parse(str(module))
    assert export_nanoengine(reparsed) == path.read_text()


@pytest.mark.parametrize("case", CASES)
def test_reference_file_runs_like_the_true_program(case: str) -> None:
    path = INPUTS / f"{case}.ne"
    text = path.read_text()
    width, widths = CASES[case]
    module, _ = load_with_warnings(path)
    fixed, caught = import_text(declared_with_true_shapes(text, widths))
    assert caught == []  # declared as nanoir computes: nothing to say
    x = inputs_for(width)
    (got,) = nanoir.run(module, x)
    (want,) = nanoir.run(fixed, x)
    assert got.shape == (2, *want.shape[1:]) and np.array_equal(got, want)
    assert np.array_equal(got, torch_reference(text, x))
    assert np.abs(got).max() > 0


@pytest.mark.parametrize("case", CASES)
def test_reference_file_lowers_and_streams(case: str) -> None:
    path = INPUTS / f"{case}.ne"
    width, _ = CASES[case]
    module, _ = load_with_warnings(path)
    x = inputs_for(width, rows=11, seed=1)
    (want,) = nanoir.run(module, x)
    hw = nanoir.lower_to_hw(module.clone())
    (got,) = nanoir.run(hw, x)
    assert np.array_equal(got, want)
    for step in (1, 2):
        (streamed,) = nanoir.stream(hw, [x], mem_dim=2, step=step)
        assert np.array_equal(streamed, want)
    (streamed,) = nanoir.stream(module, [x], mem_dim=2, step=1)
    assert np.array_equal(streamed, want)


def test_after_stream_plan_export_writes_the_true_plan() -> None:
    """`stream-plan` replaces the reference's numbers with nanoir's: the true widths."""
    width, widths = CASES["reference_pad1_conv_chain"]
    module, _ = load_with_warnings(INPUTS / "reference_pad1_conv_chain.ne")
    StreamPlanPass(steps=f"2:1,3:{width}").apply(nanoir.make_context(), module)
    program = parse_nanoengine(export_nanoengine(module, stream_shapes(module)))
    for name, (_, true) in widths.items():
        decl = program.lookup(name)
        assert decl is not None and decl.shape[3] == true  # type: ignore[union-attr]
    # and that file reads back without a warning
    _, caught = import_text(export_nanoengine(module, stream_shapes(module)))
    assert caught == []


def test_the_warning_is_issued_once_per_file() -> None:
    text = (INPUTS / "reference_pad1_conv_chain.ne").read_text()
    for _ in range(2):
        _, caught = import_text(text, "a.ne")
        assert [w.category for w in caught] == [NanoEnginePaddingWarning]
    _, caught = import_text(text, "b.ne")
    assert len(caught) == 1 and str(caught[0].message).startswith("b.ne:")


def test_true_and_reference_declarations_may_mix() -> None:
    """Each declaration is checked on its own: the true shape or the reference's."""
    width, widths = CASES["reference_pad1_conv_chain"]
    text = (INPUTS / "reference_pad1_conv_chain.ne").read_text()
    partly = declared_with_true_shapes(
        text, {"Conv_n1_o0": widths["Conv_n1_o0"], "output": widths["output"]}
    )
    module, caught = import_text(partly)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "3 runtime tensors" in message
    assert named_in(message) == [
        ("Q_n4_o0", 6, 8),
        ("Relu_n1_o0", 6, 8),
        ("Conv_n2_o0", 4, 8),
    ]
    x = inputs_for(width)
    assert np.array_equal(nanoir.run(module, x)[0], torch_reference(text, x))
    assert export_nanoengine(module) == partly


# ---------------------------------------------------------------------------------------
# Other mismatches stay errors
# ---------------------------------------------------------------------------------------


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.mark.parametrize(
    "old, new, tensor, computed",
    [
        # neither the true width (8) nor the reference's (6)
        (
            "let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]}",
            "let Conv_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 7]}",
            "Conv_n1_o0",
            "?x3x?x8",
        ),
        # a wrong channel count is never the padding quirk
        (
            "let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 3, 1, 6]}",
            "let Q_n4_o0: Tensor<Any> = {shape:BCMD=[-1, 4, 1, 6]}",
            "Q_n4_o0",
            "?x3x?x8",
        ),
        # the reference's width one step too early: the input of a padded conv is not shrunk
        (
            "let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 8]}",
            "let Q_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 6]}",
            "Q_n1_o0",
            "?x2x?x8",
        ),
    ],
)
def test_other_mismatches_are_errors(old: str, new: str, tensor: str, computed: str) -> None:
    text = _replace_once((INPUTS / "reference_pad1_conv_chain.ne").read_text(), old, new)
    with pytest.raises(
        NanoEngineSemanticError,
        match=rf"'{tensor}' is declared .* computes {re.escape(computed)}",
    ):
        import_text(text)


def test_a_shrunk_shape_without_padding_is_an_error() -> None:
    """The sample has no pads: a width its convs do not give is an error, not the quirk."""
    text = SAMPLE.read_text()
    shrunk = _replace_once(
        text,
        "let Conv_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 16, 1, 3]}",
        "let Conv_n2_o0: Tensor<Any> = {shape:BCMD=[-1, 16, 1, 1]}",
    )
    with pytest.raises(NanoEngineSemanticError, match=r"'Conv_n2_o0' is declared \[-1, 16, 1, 1\]"):
        import_text(shrunk)
    _, caught = import_text(text)
    assert not any(issubclass(w.category, NanoEnginePaddingWarning) for w in caught)


def test_a_join_is_as_long_as_its_shorter_input_only() -> None:
    """In the residual block, the Add is declared 4 wide (its shorter input) or 8 (true);
    no other width is accepted."""
    text = (INPUTS / "reference_residual.ne").read_text()
    decl = "let Add_n1_o0: Tensor<Any> = {shape:BCMD=[-1, 2, 1, 4]}"
    for width in (5, 6):
        wrong = _replace_once(text, decl, decl.replace("1, 4]", f"1, {width}]"))
        with pytest.raises(
            NanoEngineSemanticError,
            match=rf"'Add_n1_o0' is declared \[-1, 2, 1, {width}\]",
        ):
            import_text(wrong)
