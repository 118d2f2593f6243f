"""nh (integer) programs as exact integer ONNX: ``export_model`` (:mod:`.exporter`, the op
rows in :mod:`.ops`), ``import_model`` (:mod:`.importer`) and ``run_model`` (:mod:`.session`,
onnxruntime at its default optimization level)."""

from nanoir.grammar.onnx.integer.exporter import (
    FLAVORS,
    IO_KEY,
    PROGRAM_KEY,
    export_any_flavor,
    export_bytes,
    export_model,
    is_nh_program,
)
from nanoir.grammar.onnx.integer.graph import IntegerOnnxError
from nanoir.grammar.onnx.integer.importer import (
    IntegerOnnxImportError,
    import_model,
    integer_model_of,
    is_integer_model,
)
from nanoir.grammar.onnx.integer.session import make_session, run_model

__all__ = [
    "FLAVORS",
    "export_any_flavor",
    "IO_KEY",
    "PROGRAM_KEY",
    "IntegerOnnxError",
    "IntegerOnnxImportError",
    "export_bytes",
    "export_model",
    "import_model",
    "integer_model_of",
    "is_integer_model",
    "is_nh_program",
    "make_session",
    "run_model",
]
