"""nanoir: a multi-level IR compiler (xDSL) from PyTorch to power-of-two fixed-point programs.

The public API, loaded lazily so that ``import nanoir`` stays cheap:

- ``nanoir.run(module, *arrays)`` runs an nf/nq program with NumPy and returns its outputs;
- ``nanoir.compile_module(module)`` compiles it once for repeated runs;
- ``nanoir.make_context()`` is a context with every nanoir dialect;
- ``nanoir.parse(text)`` parses and verifies MLIR text with located errors;
- ``nanoir.load(path)`` / ``nanoir.save(module, path)`` read and write ``.mlir`` or NanoEngine
  ``.ne`` files, by extension;
- ``nanoir.from_torch``, ``quantize``, ``report``, ``lower_to_hw``, ``stream_plan``, ``stream``
  and ``compile_model`` are the pipeline's stages;
- ``nanoir.qat`` is quantization-aware training (``prepare``, ``calibrate``, ``train``,
  ``convert``; imports torch, on first use);
- ``nanoir.Error`` is the base of every error nanoir raises for bad input.
"""

from __future__ import annotations

from typing import Any

from nanoir.errors import Error

__all__ = [
    "Error",
    "compile_model",
    "compile_module",
    "from_torch",
    "load",
    "lower_to_hw",
    "make_context",
    "parse",
    "qat",
    "quantize",
    "report",
    "run",
    "save",
    "stream",
    "stream_plan",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name in ("run", "compile_module"):
        from nanoir.runtime import interpreter

        return getattr(interpreter, name)
    if name == "make_context":
        from nanoir.context import make_context

        return make_context
    if name in ("parse", "load", "save"):
        from nanoir import api

        return getattr(api, name)
    if name == "compile_model":
        from nanoir.pipeline import compile_model

        return compile_model
    if name == "from_torch":
        from nanoir.frontend import from_torch

        return from_torch
    if name == "qat":
        import importlib

        return importlib.import_module("nanoir.qat")
    if name == "quantize":
        from nanoir.lowering.quantize import quantize

        return quantize
    if name == "report":
        from nanoir.quant_report import report

        return report
    if name == "lower_to_hw":
        from nanoir.lowering.lower_to_hw import lower_to_hw

        return lower_to_hw
    if name == "stream_plan":
        from nanoir.lowering.stream_plan import stream_plan

        return stream_plan
    if name == "stream":
        from nanoir.runtime.stream import stream

        return stream
    raise AttributeError(f"module 'nanoir' has no attribute {name!r}")
