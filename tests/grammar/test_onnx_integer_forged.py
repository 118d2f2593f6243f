"""An integer-flavour file holds exactly the program its metadata names (issue 31 §6): besides
the graph, the io record and the opset, the reader compares the ``ir_version``, the model-local
functions (and training info) with what the program writes, and refuses an embedded program
that holds more than the one function its graph is; a module of several functions is written
with its main function alone."""

from __future__ import annotations

import onnx
import pytest
from nanoir.grammar.onnx.integer import (
    PROGRAM_KEY,
    IntegerOnnxImportError,
    export_model,
    import_model,
)

import nanoir

PROGRAM = """\
func.func @main(%x: tensor<?x4xi8, #nh.fixed<3, BC>>) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  %r = nh.relu %x : tensor<?x4xi8, #nh.fixed<3, BC>>
  func.return %r : tensor<?x4xi8, #nh.fixed<3, BC>>
}
"""
HELPER = """\
func.func @helper(%x: tensor<?x4xi8, #nh.fixed<3, BC>>) -> tensor<?x4xi8, #nh.fixed<3, BC>> {
  func.return %x : tensor<?x4xi8, #nh.fixed<3, BC>>
}
"""


def _written() -> onnx.ModelProto:
    return export_model(nanoir.parse(PROGRAM))


def _forged(how: str) -> onnx.ModelProto:
    m = _written()
    if how == "ir_version":
        m.ir_version = 9
    elif how == "function":  # a model-local function: onnxruntime inlines a call to it
        f = m.functions.add()
        f.CopyFrom(
            onnx.helper.make_function(
                "forged",
                "Id",
                ["a"],
                ["b"],
                [onnx.helper.make_node("Identity", ["a"], ["b"])],
                [onnx.helper.make_opsetid("", 21)],
            )
        )
    elif how == "training_info":
        m.training_info.add().algorithm.CopyFrom(onnx.helper.make_graph([], "t", [], []))
    elif how == "extra_function":  # another function in the embedded program
        for p in m.metadata_props:
            if p.key == PROGRAM_KEY:
                p.value = p.value.rstrip().removesuffix("}") + HELPER.replace("\n", "\n  ") + "}\n"
    return m


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("ir_version", r"ir_version 9.*writes 10"),
        ("function", r"model-local functions \(forged.Id\)"),
        ("training_info", r"training info"),
        ("extra_function", r"holds @helper beside @main"),
    ],
)
def test_forged_files_are_refused(how: str, message: str) -> None:
    """Kills (one each): the reader not comparing ir_version; not comparing the model's
    functions; not comparing training info; not checking the program's functions."""
    data = _forged(how).SerializeToString()
    with pytest.raises(IntegerOnnxImportError, match=message) as info:
        import_model(data, "forged.onnx")
    assert isinstance(info.value, nanoir.Error)


def test_the_written_file_reads_back() -> None:
    assert str(import_model(_written())) == str(nanoir.parse(PROGRAM))


def test_a_module_of_several_functions_is_written_with_main_alone() -> None:
    """The embedded program is the function the graph is; reading gives that function.

    Kills: the writer embedding the whole module (the file is then refused by its reader)."""
    module = nanoir.parse(PROGRAM + HELPER)
    model = export_model(module)
    back = import_model(model)
    assert [op.sym_name.data for op in back.body.block.ops] == ["main"]  # type: ignore[attr-defined]
    assert str(back) == str(nanoir.parse(PROGRAM))
