"""nh (integer) programs as exact integer ONNX: ``export_model`` (:mod:`.exporter`, the op
rows in :mod:`.ops`), ``import_model`` (:mod:`.importer`) and ``run_model`` (:mod:`.session`,
onnxruntime at its default optimization level)."""

from nanoir.grammar.onnx.integer.exporter import IO_KEY, PROGRAM_KEY, export_bytes, export_model
from nanoir.grammar.onnx.integer.graph import IntegerOnnxError
from nanoir.grammar.onnx.integer.importer import (
    IntegerOnnxImportError,
    import_model,
    is_integer_model,
)
from nanoir.grammar.onnx.integer.session import make_session, run_model

__all__ = [
    "IO_KEY",
    "PROGRAM_KEY",
    "IntegerOnnxError",
    "IntegerOnnxImportError",
    "export_bytes",
    "export_model",
    "import_model",
    "is_integer_model",
    "make_session",
    "run_model",
]
