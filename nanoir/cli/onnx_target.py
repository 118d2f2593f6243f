"""The ONNX targets of `nanoir-opt`: `--emit=onnx` (standard QDQ, opset 21),
`--emit=onnx-nanoengine` (NanoEngine-PyTorch's export: opset 17 + `t2e.qmodel::Q`) and
`--emit=onnx-integer` (an nh program as exact integer ONNX, `nanoir.grammar.onnx.integer`).

    nanoir-opt q.mlir --emit=onnx -o q.onnx
    nanoir-opt net.mlir -p 'quantize{...}' --emit=onnx-nanoengine -o net.onnx

ONNX is binary, so these targets do not print into xDSL's text stream: `nanoir-opt` asks
`to_bytes` and writes the bytes itself (to `-o`, atomically, or to stdout). The work is done
by `nanoir.grammar.onnx.exporter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from nanoir.errors import Error


@dataclass(frozen=True)
class OnnxTarget(Target):
    """Write an nf/nq module as standard ONNX QDQ."""

    name = "onnx"
    flavor: ClassVar[str] = "qdq"

    def to_bytes(self, module: ModuleOp) -> bytes:
        # lazy: the CLIs register this target at start-up; the ONNX writer loads only when used
        from nanoir.grammar.onnx.integer import export_any_flavor

        return export_any_flavor(module, self.flavor)

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        raise Error(f"--emit={self.name} writes binary ONNX, which a text stream cannot hold")


@dataclass(frozen=True)
class OnnxNanoEngineTarget(OnnxTarget):
    """Write an nf/nq module as NanoEngine-PyTorch's ONNX (trunc quantizers as `Q` nodes)."""

    name = "onnx-nanoengine"
    flavor: ClassVar[str] = "nanoengine"


@dataclass(frozen=True)
class OnnxIntegerTarget(OnnxTarget):
    """Write an nh (integer) module as exact integer ONNX (codes in and out)."""

    name = "onnx-integer"
    flavor: ClassVar[str] = "integer"
