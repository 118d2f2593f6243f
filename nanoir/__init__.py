"""nanoir: a multi-level IR compiler (xDSL) from PyTorch to power-of-two fixed-point programs.

The public API, loaded lazily so that ``import nanoir`` stays cheap:

- ``nanoir.run(module, *arrays)`` runs a program with NumPy and returns its outputs
  (``backend="onnxruntime"``: an nh program as exact integer ONNX in onnxruntime);
- ``nanoir.compile_module(module)`` compiles it once for repeated runs;
- ``nanoir.make_context()`` is a context with every nanoir dialect;
- ``nanoir.parse(text)`` parses and verifies MLIR text with located errors;
- ``nanoir.load(path)`` / ``nanoir.save(module, path)`` read and write ``.mlir`` or NanoEngine
  ``.ne`` files, by extension;
- ``nanoir.from_torch``, ``fold_bn``, ``quantize``, ``report``, ``lower_to_hw``,
  ``stream_plan``, ``stream`` and ``compile_model`` are the pipeline's stages; ``quantize``
  warns (``nanoir.QuantizationWarning``) when an output collapses on the calibration data;
- ``nanoir.Streamer(hw, mem_dim=2)`` runs a program on input rows as they arrive
  (``push``/``flush``/``reset``);
- ``nanoir.qat`` is quantization-aware training (``prepare``, ``calibrate``, ``train``,
  ``convert``; imports torch, on first use);
- ``nanoir.draw(module, "g.svg")`` draws the op graph with Graphviz (``.svg``/``.png``/``.pdf``;
  ``nanoir-opt X --emit=dot`` writes the DOT text);
- ``nanoir.Target`` describes an engine (a TOML file: ops, widths, lanes, buffer, bandwidth);
  ``nanoir.inspect(module, target)`` says which op runs on the engine and which on the host,
  and why, before quantizing; ``nanoir.estimate(hw, target)`` gives per-layer MACs, bytes,
  cycles, latency and frames per second;
- ``nanoir.Error`` is the base of every error nanoir raises for bad input;
- ``nanoir.__version__`` is the installed package's version (its metadata).
"""

from __future__ import annotations

import importlib
from typing import Any

from nanoir.errors import Error, QuantizationWarning

__all__ = [
    "Error",
    "QuantizationWarning",
    "Streamer",
    "Target",
    "compile_model",
    "compile_module",
    "draw",
    "estimate",
    "fold_bn",
    "from_torch",
    "inspect",
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
    return sorted(set(globals()) | set(__all__) | {"__version__"})


# Lazy (PEP 562): ``import nanoir`` loads no xDSL, NumPy or torch; each name loads its module on
# first use. Name -> (module, attribute; None for the module itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    "run": ("nanoir.backends", "run"),
    "compile_module": ("nanoir.runtime.interpreter", "compile_module"),
    "make_context": ("nanoir.context", "make_context"),
    "parse": ("nanoir.api", "parse"),
    "load": ("nanoir.api", "load"),
    "save": ("nanoir.api", "save"),
    "compile_model": ("nanoir.pipeline", "compile_model"),
    "from_torch": ("nanoir.frontend", "from_torch"),
    "qat": ("nanoir.qat", None),
    "quantize": ("nanoir.lowering.quantize", "quantize"),
    "fold_bn": ("nanoir.lowering.fold_bn", "fold_bn"),
    "report": ("nanoir.quant_report", "report"),
    "draw": ("nanoir.dot", "draw"),
    "Target": ("nanoir.target", "Target"),
    "inspect": ("nanoir.inspection", "inspect"),
    "estimate": ("nanoir.cost", "estimate"),
    "lower_to_hw": ("nanoir.lowering.lower_to_hw", "lower_to_hw"),
    "stream_plan": ("nanoir.lowering.stream_plan", "stream_plan"),
    "stream": ("nanoir.runtime.stream", "stream"),
    "Streamer": ("nanoir.runtime.streamer", "Streamer"),
}


def _version() -> str:
    """nanoir's version from the installed package's metadata (pyproject.toml's ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nanoir")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name not in _LAZY:
        raise AttributeError(f"module 'nanoir' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attribute is None else getattr(module, attribute)
