"""Edits that let nanoir read PaddleOCR's ONNX files, one small function per reader gap.

Each edit works around one thing nanoir's ONNX reader (or lowering) does not take yet; when it
does, the edit goes (the reach issue filed with issue 30 makes the reader read these files as
shipped). :func:`prepare` therefore asks, for every edit that would change something, whether
nanoir still needs it (:func:`goes_through` on the file prepared without it) and skips it,
saying so, when not. The float reference is never the prepared file: it is the shipped file run
in onnxruntime, so a wrong edit shows as a "nanoir float" column below 100%.

The edits keep the computation the same in float (each docstring says why), on the file as
shipped by ``rapidocr-onnxruntime==1.4.4`` (opset 11 and 12, exported by paddle2onnx).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "EDITS",
    "Edit",
    "Prepared",
    "prepare",
    "strip_value_info",
    "to_opset",
]


def _onnx() -> Any:
    import onnx

    return onnx


def strip_value_info(model: Any) -> None:
    """Drop the intermediate shapes a file declares: after an edit they can be stale (a
    converter or exporter wrote them for the old graph), and readers trust them."""
    del model.graph.value_info[:]


def to_opset(model: Any, version: int) -> Any:
    """The model converted to ``version`` of the default domain (``onnx.version_converter``),
    its declared intermediate shapes dropped; unchanged when already at or above it."""
    onnx = _onnx()
    current = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if current >= version:
        return model
    converted = onnx.version_converter.convert_version(model, version)
    strip_value_info(converted)
    return converted


def _constant_values(model: Any) -> dict[str, np.ndarray]:
    """Every initializer and ``Constant`` node output, by name."""
    numpy_helper = _onnx().numpy_helper
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def _add_initializer(model: Any, name: str, value: np.ndarray) -> str:
    model.graph.initializer.append(_onnx().numpy_helper.from_array(value, name))
    return name


def _set_dims(value_info: Any, dims: tuple[int, ...]) -> None:
    shape = value_info.type.tensor_type.shape
    del shape.dim[:]
    for size in dims:
        shape.dim.add().dim_value = size


# --- the edits --------------------------------------------------------------------------------


def static_input_shape(model: Any, shape: tuple[int, ...]) -> int:
    """Gap: nanoir reads ``Shape`` of a tensor only when its dims are static (the recognizer
    reshapes by its own shape), and refuses the ``-1`` dims the classifier declares. Declare the
    input shape the benchmark feeds (``1x3xHxW``). Same computation: these are the shapes the
    files are run at."""
    (graph_input,) = [i for i in model.graph.input if i.name not in _constant_values(model)]
    dims = graph_input.type.tensor_type.shape.dim
    if [d.dim_value for d in dims] == list(shape):
        return 0
    _set_dims(graph_input, shape)
    strip_value_info(model)
    return 1


def hard_sigmoid_as_clip(model: Any, shape: tuple[int, ...]) -> int:
    """Gap: nanoir reads ``HardSigmoid`` only with torch's alpha = 1/6 (``nf.hardsigmoid``);
    Paddle writes alpha = 0.2, beta = 0.5 in its SE blocks. Write it out as
    ``Clip(alpha·x + beta, 0, 1)``, which is ONNX's definition of HardSigmoid."""
    onnx = _onnx()
    nodes, changed = [], 0
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        alpha, beta = attrs.get("alpha", 0.2), attrs.get("beta", 0.5)
        if node.op_type != "HardSigmoid" or abs(alpha - 1 / 6) < 1e-6:
            nodes.append(node)
            continue
        changed += 1
        stem = f"{node.name or node.output[0]}.as_clip"
        a = _add_initializer(model, stem + ".alpha", np.array(alpha, np.float32))
        b = _add_initializer(model, stem + ".beta", np.array(beta, np.float32))
        lo = _add_initializer(model, stem + ".min", np.array(0, np.float32))
        hi = _add_initializer(model, stem + ".max", np.array(1, np.float32))
        scaled, shifted = stem + ".scaled", stem + ".shifted"
        nodes += [
            onnx.helper.make_node("Mul", [node.input[0], a], [scaled], name=stem + ".mul"),
            onnx.helper.make_node("Add", [scaled, b], [shifted], name=stem + ".add"),
            onnx.helper.make_node("Clip", [shifted, lo, hi], list(node.output), name=stem),
        ]
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return changed


def div_by_constant_as_mul(model: Any, shape: tuple[int, ...]) -> int:
    """Gap: ``Div(x, 6)`` (Paddle's hardswish ``x·clip(x+3, 0, 6)/6``) reads and quantizes,
    but lower-to-hw refuses it ("reciprocal is not a dyadic rational"). Write
    ``Mul(x, 1/6)``: the same up to float32 rounding of 1/6 (relative 3e-8), and nanoir
    quantizes the factor like a weight."""
    constants = _constant_values(model)
    changed = 0
    for node in model.graph.node:
        divisor = constants.get(node.input[1]) if node.op_type == "Div" else None
        if divisor is None or divisor.size != 1 or not np.issubdtype(divisor.dtype, np.floating):
            continue
        name = _add_initializer(
            model,
            f"{node.input[1]}.reciprocal.{changed}",
            (1 / divisor.astype(np.float64)).astype(divisor.dtype),
        )
        node.op_type = "Mul"
        node.input[1] = name
        changed += 1
    return changed


def layer_norm_as_op(model: Any, shape: tuple[int, ...]) -> int:
    """Gap: nanoir does not read ``ReduceMean`` (nor ``Pow``, ``Sqrt``), which the
    recognizer's written-out LayerNorm uses:
    ``d = x - ReduceMean(x); y = d / Sqrt(ReduceMean(d^2) + eps) * w + b`` over the last axis.
    Write ``LayerNormalization(x, w, b, axis=-1, epsilon=eps)`` (opset 17: the file is
    converted to it first), which computes exactly that."""
    onnx = _onnx()
    constants = _constant_values(model)
    readers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def only(name: str, op_type: str) -> Any:
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def last_axis(node: Any) -> bool:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return list(attrs.get("axes", [])) == [-1] and attrs.get("keepdims", 1) == 1

    replaced: dict[int, Any] = {}
    removed: set[int] = set()
    for mean in model.graph.node:
        if mean.op_type != "ReduceMean" or not last_axis(mean):
            continue
        x = mean.input[0]
        sub = only(mean.output[0], "Sub")
        if sub is None or list(sub.input) != [x, mean.output[0]]:
            continue
        uses = readers[sub.output[0]]
        pow_ = next((n for n in uses if n.op_type == "Pow"), None)
        div = next((n for n in uses if n.op_type == "Div"), None)
        if len(uses) != 2 or pow_ is None or div is None:
            continue
        exponent = constants.get(pow_.input[1])
        var = only(pow_.output[0], "ReduceMean")
        add = var and only(var.output[0], "Add")
        sqrt = add and only(add.output[0], "Sqrt")
        mul = only(div.output[0], "Mul")
        bias = mul and only(mul.output[0], "Add")
        if exponent is None or float(exponent) != 2 or not (var and last_axis(var)):
            continue
        if not (add and sqrt and mul and bias) or list(div.input) != [
            sub.output[0],
            sqrt.output[0],
        ]:
            continue
        epsilon = constants.get(add.input[1])
        weight, beta = mul.input[1], bias.input[1]
        if epsilon is None or weight not in constants or beta not in constants:
            continue
        chain = [mean, sub, pow_, var, add, sqrt, div, mul, bias]
        ids = [id(n) for n in chain]
        replaced[ids[-1]] = onnx.helper.make_node(
            "LayerNormalization",
            [x, weight, beta],
            list(bias.output),
            name=f"{bias.name or bias.output[0]}.layer_norm",
            axis=-1,
            epsilon=float(epsilon),
        )
        removed.update(ids[:-1])
    if not replaced:
        return 0
    nodes = [replaced.get(id(n), n) for n in model.graph.node if id(n) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    strip_value_info(model)
    return len(replaced)


def classifier_output_shape(model: Any, shape: tuple[int, ...]) -> int:
    """Gap: nanoir compares a graph output's declared shape with the one it computes and
    refuses the classifier's ``-1x2`` (a negative dim). Declare ``Nx2`` with the input's
    batch ``N``."""
    changed = 0
    for output in model.graph.output:
        dims = output.type.tensor_type.shape.dim
        if len(dims) == 2 and dims[0].dim_value < 0 and dims[1].dim_value == 2:
            _set_dims(output, (shape[0], 2))
            changed += 1
    return changed


# --- the table and the driver -----------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One edit: ``apply(model, input_shape)`` changes the ModelProto in place and returns how
    many places it changed; ``opset``: the default-domain opset it needs the file at."""

    name: str
    apply: Callable[[Any, tuple[int, ...]], int]
    opset: int = 0


EDITS = (
    Edit("static-shape", static_input_shape),
    Edit("hardsigmoid-as-clip", hard_sigmoid_as_clip),
    Edit("layernorm-as-op", layer_norm_as_op, opset=17),
    Edit("classifier-output-1x2", classifier_output_shape),
    Edit("div-as-mul", div_by_constant_as_mul),
)
"""Every edit, in the order applied; a new one is one row."""


@dataclass
class Prepared:
    """The file nanoir reads, and what was done to get it (one line per edit)."""

    path: Path
    notes: list[str]
    applied: list[str]


def _apply(source: Path, shape: tuple[int, ...], edits: list[Edit], target: Path) -> dict[str, int]:
    onnx = _onnx()
    model = onnx.load(str(source))
    opset = max([e.opset for e in edits], default=0)
    if opset:
        model = to_opset(model, opset)
    counts = {e.name: e.apply(model, shape) for e in edits}
    onnx.save(model, str(target))
    return counts


def goes_through(path: Path, shape: tuple[int, ...]) -> str:
    """ "" when nanoir takes the file from reading to integers (``nanoir.load``, a quick
    ``quantize``: absmax, one N(0, 1) input of ``shape``, and ``lower_to_hw``), else the
    first line of the first refusal. This is what each edit is probed with: some gaps show
    only at lower-to-hw (``Div(x, 6)``; dynamic shapes that make pooling windows unknown)."""
    import nanoir

    try:
        program = nanoir.load(path)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        nanoir.quantize(program, [x], calibrator="absmax", bias_correction=False)
        nanoir.lower_to_hw(program)
    except nanoir.Error as error:
        return str(error).splitlines()[0].removeprefix(f"{path}: ")
    return ""


def prepare(
    source: Path,
    shape: tuple[int, ...],
    folder: Path,
    *,
    enabled: tuple[str, ...] | None = None,
    probe: bool = True,
) -> Prepared:
    """Write into ``folder`` the file nanoir reads for the shipped ``source`` at input
    ``shape``. ``enabled`` names the edits to consider (None: all of :data:`EDITS`); with
    ``probe``, an edit that changes something is skipped when nanoir no longer needs it (the
    file prepared without it :func:`goes_through`), and the notes say so."""
    wanted = [e for e in EDITS if enabled is None or e.name in enabled]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (source.stem + ".prepared.onnx")
    counts = _apply(source, shape, wanted, target)
    used = [e for e in wanted if counts[e.name]]
    notes = [f"{e.name}: nothing to change" for e in wanted if not counts[e.name]]
    if probe:
        for edit in list(used):
            trial = folder / (source.stem + f".without-{edit.name}.onnx")
            _apply(source, shape, [e for e in used if e is not edit], trial)
            why = goes_through(trial, shape)
            trial.unlink()
            if why:
                notes.append(f"{edit.name} ({counts[edit.name]} places): needed: {why[:160]}")
            else:
                used.remove(edit)
                notes.append(f"{edit.name}: skipped, nanoir takes the file without it")
        _apply(source, shape, used, target)
    else:
        notes += [f"{e.name} ({counts[e.name]} places): applied (not probed)" for e in used]
    why = goes_through(target, shape)
    if why:
        notes.append(f"nanoir still refuses the prepared file: {why}")
    return Prepared(target, notes, [e.name for e in used])
