"""Read an integer-flavour ONNX file back as the nh program it was written from.

The file carries the program's MLIR text (``metadata_props["nanoir.nh"]``); reading parses
it, writes it again, and accepts the file only if the graph it holds is the graph that
program writes, node for node and constant for constant (and the ``nanoir.io`` record and
the opset agree). So a file changed by another tool (an optimizer that fused nodes, a hand
edit of a constant) is refused with one :class:`IntegerOnnxImportError`, never trusted as
the program its text names. A file without the key is not an integer-flavour file:
:func:`is_integer_model` says so and the caller reads it with the ordinary (nf/nq) reader.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nanoir.dialects.nf import NF
from nanoir.dialects.nh import NH, ConstantOp
from nanoir.dialects.nq import NQ
from nanoir.grammar.onnx.exporter import _onnx
from nanoir.grammar.onnx.integer.exporter import IO_KEY, KERNELS_KEY, PROGRAM_KEY, export_model
from nanoir.grammar.onnx.integer.graph import IntegerOnnxError
from nanoir.grammar.onnx.integer.session import FUSED_KERNELS
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, DenseIntOrFPElementsAttr, ModuleOp, TensorType
from xdsl.dialects.func import Func, FuncOp
from xdsl.parser import Parser

from nanoir.errors import FileFormatError


class IntegerOnnxImportError(FileFormatError):
    """An integer-flavour ONNX file that does not hold the program its metadata names."""


def _props(model: Any) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def _as_model(model: Any, name: str) -> Any:
    if isinstance(model, bytes | bytearray | memoryview):
        onnx = _onnx()
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:
            raise IntegerOnnxImportError(f"{name}: not an ONNX model ({e})") from None
    return model


def is_integer_model(model: Any) -> bool:
    """Whether ``model`` (a ModelProto) is an integer-flavour file (it has ``nanoir.nh``)."""
    return PROGRAM_KEY in _props(model)


def integer_model_of(data: bytes) -> Any | None:
    """The ModelProto of ONNX bytes if they are an integer-flavour file, else None (also for
    bytes that are no ONNX model at all: the ordinary reader then reports what is wrong)."""
    try:
        model = _onnx().load_from_string(bytes(data))
    except Exception:
        return None
    return model if is_integer_model(model) else None


def _default_parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (Builtin, Func, NF, NQ, NH):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def _check_constant_size(module: ModuleOp, model: Any, name: str) -> None:
    """Refuse constants the graph cannot hold before writing them: the writer stores every
    constant code it reads (and every element of a dense attribute, such as a softmax's
    mask) in at least a byte, and a splat literal of a few bytes of text
    (``dense<1> : tensor<100000000xi8>``) would otherwise cost seconds and gigabytes of
    writing before the graphs differ."""
    codes = sum(
        math.prod(op.result.type.get_shape())
        for op in module.walk()
        if isinstance(op, ConstantOp) and isinstance(op.result.type, TensorType)
    ) + sum(  # dense attributes the writer also stores whole (a softmax's mask)
        math.prod(a.get_type().get_shape())
        for op in module.walk()
        if not isinstance(op, ConstantOp)
        for a in (*op.properties.values(), *op.attributes.values())
        if isinstance(a, DenseIntOrFPElementsAttr)
    )
    limit = 8 * model.ByteSize() + (1 << 20)
    if codes > limit:
        raise IntegerOnnxImportError(
            f"{name}: the nh program in its {PROGRAM_KEY} metadata has {codes} constant codes, "
            f"more than a file of {model.ByteSize()} bytes holds: the file was changed after "
            "nanoir wrote it; refusing to read it as that program"
        )


def import_model(
    model: Any, name: str = "<onnx>", parse: Callable[[str], ModuleOp] | None = None
) -> ModuleOp:
    """The nh program of an integer-flavour model (a ModelProto or its bytes); ``parse``
    reads MLIR text (nanoir's hardened parser when called through ``nanoir.load``).
    :class:`IntegerOnnxImportError` unless the file's graph is the one its program writes."""
    model = _as_model(model, name)
    props = _props(model)
    if PROGRAM_KEY not in props:
        raise IntegerOnnxImportError(
            f"{name}: no {PROGRAM_KEY} metadata: not an integer-flavour nanoir file"
        )
    try:
        module = (parse or _default_parse)(props[PROGRAM_KEY])
    except Exception as e:
        raise IntegerOnnxImportError(
            f"{name}: the nh program in its {PROGRAM_KEY} metadata does not parse: {e}"
        ) from None
    _check_one_function(module, name)
    _check_constant_size(module, model, name)
    kernel = props.get(KERNELS_KEY)
    if kernel is not None and kernel not in FUSED_KERNELS:
        raise IntegerOnnxImportError(
            f"{name}: its {KERNELS_KEY} metadata is {kernel!r}: expected one of {FUSED_KERNELS}"
        )
    try:
        again = export_model(module, program_text=props[PROGRAM_KEY], fused=kernel)
    except IntegerOnnxError as e:
        raise IntegerOnnxImportError(
            f"{name}: the nh program in its {PROGRAM_KEY} metadata does not export: {e}"
        ) from None
    if again.graph != model.graph:
        raise IntegerOnnxImportError(
            f"{name}: its graph is not the one its nh program ({PROGRAM_KEY}) writes: the file "
            "was changed after nanoir wrote it (by an optimizer or by hand), or another version "
            "of nanoir wrote it (each version checks the graph it writes itself); refusing to "
            "read it as that program"
        )
    if _props(again).get(KERNELS_KEY) != props.get(KERNELS_KEY):
        raise IntegerOnnxImportError(
            f"{name}: its {KERNELS_KEY} record is not the one its nh program writes: the file "
            "was changed after nanoir wrote it; refusing to read it as that program"
        )
    if _props(again).get(IO_KEY) != props.get(IO_KEY) or list(again.opset_import) != list(
        model.opset_import
    ):
        raise IntegerOnnxImportError(
            f"{name}: its {IO_KEY} record or opset is not the one its nh program writes: the "
            "file was changed after nanoir wrote it; refusing to read it as that program"
        )
    _check_model_fields(model, again, name)
    return module


def _check_one_function(module: ModuleOp, name: str) -> None:
    """The embedded program is the one function the graph is (the writer embeds no other)."""
    tops = list(module.body.block.ops)
    if len(tops) == 1 and isinstance(tops[0], FuncOp):
        return
    names = [f"@{op.sym_name.data}" if isinstance(op, FuncOp) else op.name for op in tops]
    main = next((n for n in names if n == "@main"), names[0] if names else "no function")
    others = ", ".join(n for n in names if n != main) or "nothing"
    raise IntegerOnnxImportError(
        f"{name}: the nh program in its {PROGRAM_KEY} metadata holds {others} beside {main}, "
        "which its graph does not: the file was changed after nanoir wrote it; refusing to "
        "read it as that program"
    )


def _check_model_fields(model: Any, again: Any, name: str) -> None:
    """What else onnxruntime reads from the file is what the program writes: the IR version,
    the model-local functions (a node of the graph may call one) and training info."""
    why = None
    if model.ir_version != again.ir_version:
        why = f"ir_version {model.ir_version}, where its nh program writes {again.ir_version}"
    elif list(model.functions) != list(again.functions):
        found = ", ".join(f"{f.domain}.{f.name}" for f in model.functions) or "none"
        why = f"model-local functions ({found}) its nh program does not write"
    elif list(model.training_info) != list(again.training_info):
        why = "training info its nh program does not write"
    if why is not None:
        raise IntegerOnnxImportError(
            f"{name}: it has {why}: the file was changed after nanoir wrote it; refusing to "
            "read it as that program"
        )
