"""nh (integer) programs as exact integer ONNX: ``export_model`` (:mod:`.exporter`, the op
rows in :mod:`.ops`), ``import_model`` (:mod:`.importer`) and ``run_model`` (:mod:`.session`,
onnxruntime at its default optimization level; ``fused_kernel``: the fastest fused kernel this
machine runs exactly, ``fused_kernel_is_exact`` and ``u8s8_is_exact``: whether it runs one)."""

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
from nanoir.grammar.onnx.integer.session import (
    FUSED_KERNELS,
    fused_kernel,
    fused_kernel_is_exact,
    make_session,
    run_model,
    u8s8_is_exact,
)

__all__ = [
    "CHECK_OUTPUT",
    "FLAVORS",
    "FUSED_KERNELS",
    "KERNELS_KEY",
    "export_any_flavor",
    "IO_KEY",
    "PROGRAM_KEY",
    "IntegerOnnxError",
    "IntegerOnnxImportError",
    "export_bytes",
    "export_model",
    "fused_kernel",
    "fused_kernel_is_exact",
    "import_model",
    "integer_model_of",
    "is_integer_model",
    "is_nh_program",
    "make_session",
    "run_model",
    "u8s8_is_exact",
]
