"""Issue 32 §2: ONNX's own node test suite (``onnx.backend.test.case.node``, shipped in the
``onnx`` package) for every op type the ONNX reader maps.

The onnx wheel ships the cases as code, not as the ``data/node`` folder of protobufs:
``collect_testcases`` builds each case's model and its input and expected output arrays (ONNX's
reference results). Each case whose nodes are all of mapped op types is read and run by nanoir
and gets one verdict:

- ``passed``: every output equals the expected one (the case's tolerance, at least rtol 1e-3,
  atol 1e-5; integers exactly);
- ``passed (constants)``: the same, after turning graph inputs that nanoir needs as constants
  into initializers (first the non-float ones: shapes, axes, indices, a bool condition; then
  every float input but the first: a Clip's min, a Pad's value);
- ``refused``: an ``OnnxImportError`` (or another ``nanoir.Error``, the runtime's included)
  naming the node and the attribute, form or type nanoir does not read;
- ``wrong`` (numbers differ) and ``crashed`` (any other exception, or the reader's wrapper
  for an unexpected one, "cannot be read (SomeError: ...)"), which must not happen.

Run with ``-s`` to see the table of verdicts per op type (recorded in BENCHMARKS.md).
"""

from __future__ import annotations

import collections
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from nanoir.grammar.ne.nq import BY_OP_TYPE
from nanoir.grammar.onnx.importer import import_onnx_model
from nanoir.grammar.onnx.importer.reader import READERS
from nanoir.grammar.onnx.recurrent import ONNX_RECURRENT

import nanoir

MAPPED = set(READERS) | set(BY_OP_TYPE) | set(ONNX_RECURRENT)
MAPPED |= {"QuantizeLinear", "DequantizeLinear", "Identity"}
FLOAT_TYPES = {1, 10, 11}
PASSED = ("passed", "passed (constants)")


def _collect() -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cases' own NumPy overflow warnings
        from onnx.backend.test.case import node

        return [
            case
            for case in node.collect_testcases(None)
            if case.kind == "node"
            and "_expanded" not in case.name
            and (ops := [n.op_type for n in case.model.graph.node if n.op_type != "Constant"])
            and set(ops) <= MAPPED
        ]


def _frozen(case: Any, inputs: list[Any], keep: set[str]) -> tuple[Any, list[Any]] | None:
    """The case's model with every graph input not in ``keep`` an initializer of its data."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    kept, infos = [], list(case.model.graph.input)
    for info, value in zip(infos, inputs):
        if info.name in keep:
            kept.append(value)
            continue
        if isinstance(value, onnx.TensorProto):
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value)
            tensor.name = info.name
        else:
            array = np.asarray(value)
            if array.dtype == object:
                return None
            tensor = onnx.numpy_helper.from_array(array, info.name)
        model.graph.initializer.append(tensor)
    del model.graph.input[:]
    model.graph.input.extend(i for i in infos if i.name in keep)
    return model, kept


def _equal(got: list[Any], want: list[Any], case: Any) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if w.dtype.kind in "fc":
            rtol, atol = max(case.rtol, 1e-3), max(case.atol, 1e-5)
            if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol, atol, True):
                return False
        elif w.dtype.kind not in "biu" or not np.array_equal(g.astype(np.float64), w):
            return False
    return True


def verdict(case: Any) -> tuple[str, str]:
    """(verdict, detail) of one case (see the module docstring)."""
    inputs, outputs = case.data_sets[0]
    inputs = [
        onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in inputs
    ]
    outputs = [
        onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in outputs
    ]
    infos = list(case.model.graph.input)
    floats = [
        i.name
        for i in infos
        if i.type.HasField("tensor_type") and i.type.tensor_type.elem_type in FLOAT_TYPES
    ]
    attempts: list[tuple[Any, list[Any], str]] = [(case.model, list(inputs), "passed")]
    for keep in (
        {*floats} if len(floats) < len(infos) else None,
        {floats[0]} if len(floats) > 1 else None,
    ):
        if keep and (frozen := _frozen(case, list(inputs), keep)) is not None:
            attempts.append((*frozen, "passed (constants)"))
    result = ("refused", "")
    for model, feeds, passed in attempts:
        try:
            module = import_onnx_model(model, case.name)
        except nanoir.Error as e:
            text = str(e)
            if "cannot be read (" in text:
                return "crashed", text
            result = ("refused", text)
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is the verdict
            return "crashed", f"{type(e).__name__}: {e}"
        try:
            got = nanoir.run(module, *feeds)
        except nanoir.Error as e:  # the runtime's own refusal, naming the op
            return "refused", f"at run: {e}"
        except Exception as e:  # noqa: BLE001 - a program that reads must run
            return "crashed", f"at run: {type(e).__name__}: {e}"
        return (passed, "") if _equal(got, outputs, case) else ("wrong", passed)
    return result


@pytest.fixture(scope="module")
def verdicts() -> dict[str, list[tuple[str, str, str]]]:
    """Op type -> (case, verdict, detail) for every selected case."""
    found: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)
    for case in _collect():
        op = [n.op_type for n in case.model.graph.node if n.op_type != "Constant"][-1]
        found[op].append((case.name, *verdict(case)))
    return found


def test_onnx_node_cases_pass_or_are_refused_by_name(
    verdicts: dict[str, list[tuple[str, str, str]]],
) -> None:
    """Every case of every mapped op type passes or is refused by name: none gives different
    numbers, none crashes; the table of verdicts per op type is printed. Kills (each seen as
    a wrong case before its fix): Resize align_corners from scales read with onnxruntime's
    integer length where ONNX's definition reads the scaled one; an empty ReduceMax reaching
    the kernel."""
    table = []
    totals: collections.Counter[str] = collections.Counter()
    for op in sorted(verdicts):
        counts = collections.Counter(v for _, v, _ in verdicts[op])
        totals.update(counts)
        table.append(
            f"| {op} | {len(verdicts[op])} | {counts['passed']} | {counts['passed (constants)']} "
            f"| {counts['refused']} | {counts['wrong']} | {counts['crashed']} |"
        )
    print("\n| op type | cases | passed | passed (constants) | refused | wrong | crashed |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(table))
    print(
        f"| all {len(verdicts)} op types | {sum(totals.values())} | {totals['passed']} | "
        f"{totals['passed (constants)']} | {totals['refused']} | {totals['wrong']} | "
        f"{totals['crashed']} |"
    )
    bad = [
        (op, name, v, d[:300])
        for op, rows in verdicts.items()
        for name, v, d in rows
        if v in ("wrong", "crashed")
    ]
    assert not bad, bad
    assert totals["passed"] + totals["passed (constants)"] >= 400, totals


def test_every_refusal_names_the_node_or_the_input(
    verdicts: dict[str, list[tuple[str, str, str]]],
) -> None:
    """A refusal says which node (`node '...' (Op)` or `node #i (Op)`) or which graph input
    is to blame."""
    for rows in verdicts.values():
        for name, v, detail in rows:
            if v == "refused" and not detail.startswith("at run: "):
                assert (
                    "node " in detail or "graph input '" in detail or "graph output '" in detail
                ), (
                    name,
                    detail,
                )
