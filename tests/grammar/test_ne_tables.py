"""The structure of the `.ne` layer: one op table per level, one schema, one front door.

- the grammar modules import each other only downward (no cycle) and never inside a
  function (a lazy import would hide a cycle);
- each op table row is read by both import and export: a new op type is one row;
- `ne.schema.Names` is the one naming rule, honouring reserved names at both levels.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from nanoir.dialects import nf
from nanoir.grammar.ne import hw as ne_hw
from nanoir.grammar.ne import nq as ne_nq
from nanoir.grammar.ne.exporter import export_nanoengine
from nanoir.grammar.ne.importer import import_nanoengine
from nanoir.grammar.ne.node import AttrMap
from nanoir.grammar.ne.nq import NqOp
from nanoir.grammar.ne.schema import Names
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region

GRAMMAR = Path(__file__).resolve().parents[2] / "grammar"


def _grammar_imports() -> dict[str, tuple[set[str], list[str]]]:
    """Module -> (grammar modules it imports at top level, function-local imports that are
    not an optional package loaded lazily: a nanoir module, or an import without a ``lazy``
    comment on its line, would dodge a cycle)."""
    found: dict[str, tuple[set[str], list[str]]] = {}
    for path in sorted(GRAMMAR.rglob("*.py")):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top: set[str] = set()
        for node in tree.body:
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("nanoir.grammar")
            ):
                top.add(node.module.removeprefix("nanoir.grammar."))
        local = [
            f"{path.name}:{inner.lineno}"
            for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(fn)
            if isinstance(inner, (ast.Import, ast.ImportFrom))
            and (
                "lazy" not in lines[inner.lineno - 1]
                or any(
                    name.startswith("nanoir")
                    for name in (
                        [inner.module or ""]
                        if isinstance(inner, ast.ImportFrom)
                        else [a.name for a in inner.names]
                    )
                )
            )
        ]
        found[".".join(path.relative_to(GRAMMAR).with_suffix("").parts)] = (top, local)
    return found


def test_grammar_modules_import_downward_only() -> None:
    imports = _grammar_imports()
    assert not [where for _, local in imports.values() for where in local], "function-local imports"
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        if module in done:
            return
        for dep in imports.get(module, (set(), []))[0]:
            visit(dep, (*path, module))
        done.add(module)

    for module in imports:
        visit(module, ())
    # The tables sit below both directions; the front doors on top of both.
    assert {"ne.import_nq", "ne.export_nq"} <= {
        m for m, (deps, _) in imports.items() if "ne.nq" in deps
    }
    assert {"ne.import_hw", "ne.export_hw"} <= {
        m for m, (deps, _) in imports.items() if "ne.hw" in deps
    }
    assert {"ne.import_nq", "ne.import_hw"} <= imports["ne.importer"][0]
    assert {"ne.export_nq", "ne.export_hw"} <= imports["ne.exporter"][0]


def test_each_op_type_has_one_row_per_level() -> None:
    for table in (ne_nq.NQ_OPS, ne_hw.HW_OPS):
        op_types = [row.op_type for row in table]
        assert len(op_types) == len(set(op_types))
    assert ne_nq.BY_CLASS[nf.ReshapeOp].op_type == "Reshape"  # the first row of a class
    assert ne_nq.BY_OP_TYPE["Flatten"].cls is nf.ReshapeOp


def _float_program(build: type[nf.UnaryFloatOp]) -> ModuleOp:
    block = Block(arg_types=[TensorType(f32, [-1, 3, 4, 5])])
    op = build(block.args[0])
    block.add_ops([op, ReturnOp(op.results[0])])
    ftype = ([block.args[0].type], [op.results[0].type])
    return ModuleOp([FuncOp("main", ftype, Region(block))])


def test_one_row_adds_an_op_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its row nf.hardswish has no `.ne` op type; one nq row (ONNX's HardSwish)
    gives it one, both ways."""
    monkeypatch.delitem(ne_nq.BY_OP_TYPE, "HardSwish")
    monkeypatch.delitem(ne_nq.BY_CLASS, nf.HardSwishOp)
    module = _float_program(nf.HardSwishOp)
    with pytest.raises(Exception, match="nf.hardswish"):
        export_nanoengine(module)
    row = NqOp("HardSwish", nf.HardSwishOp)
    monkeypatch.setitem(ne_nq.BY_OP_TYPE, row.op_type, row)
    monkeypatch.setitem(ne_nq.BY_CLASS, row.cls, row)
    text = export_nanoengine(module)
    assert "op_type=HardSwish" in text
    again = import_nanoengine(text)
    assert [op.name for op in again.walk() if op.name.startswith("nf.")] == ["nf.hardswish"]
    assert export_nanoengine(again) == text


def test_one_row_with_an_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row's AttrMap reads the attribute (ONNX default when absent) and writes it back."""
    row = NqOp("MyLeaky", nf.LeakyReluOp, attrs=(AttrMap("alpha", "alpha", "float", 0.5),))
    monkeypatch.setitem(ne_nq.BY_OP_TYPE, row.op_type, row)
    text = export_nanoengine(_float_program(lambda x: nf.LeakyReluOp(x, 0.25)))  # type: ignore[arg-type]
    text = text.replace("op_type=LeakyRelu", "op_type=MyLeaky").replace(
        "attr=[alpha=0.25]", "attr=[]"
    )
    module = import_nanoengine(text)
    (op,) = [op for op in module.walk() if isinstance(op, nf.LeakyReluOp)]
    assert op.alpha.value.data == 0.5
    assert export_nanoengine(module) == text  # the op type and the written attributes are recorded


def test_names_step_around_taken_and_reserved() -> None:
    names = Names(reserved={"input", "Conv_n1"})
    assert names.fresh("input") == "input_1"
    assert names.numbered("Conv") == "Conv_n2"
    assert names.claim("input", lambda: "x") == "input"  # a recorded name is its own
    assert names.claim("input", lambda: names.fresh("input")) == "input_2"
    assert names.claim("1bad", lambda: "fallback") == "fallback"
