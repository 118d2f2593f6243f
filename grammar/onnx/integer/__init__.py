"""nh (integer) programs as exact integer ONNX: ``export_model`` (:mod:`.exporter`, the op
rows in :mod:`.ops`), ``import_model`` (:mod:`.importer`) and ``run_model`` (:mod:`.session`,
onnxruntime at its default optimization level; ``u8s8_is_exact``: whether this machine runs the
uint8 x int8 kernels exactly)."""

from nanoir.grammar.onnx.integer.exporter import (
    CHECK_OUTPUT,
    FLAVORS,
    IO_KEY,
    KERNELS_KEY,
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
from nanoir.grammar.onnx.integer.session import make_session, run_model, u8s8_is_exact

__all__ = [
    "CHECK_OUTPUT",
    "FLAVORS",
    "KERNELS_KEY",
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
    "u8s8_is_exact",
]
