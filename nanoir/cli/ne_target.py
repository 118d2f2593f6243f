"""The `nanoengine` target of `nanoir-opt` (`-t nanoengine` / `--emit=nanoengine`) and the
`.ne` frontend: NanoEngine's deployment text format in and out of the tool.

    nanoir-opt model.ne                          # .ne -> MLIR (by extension, or -f nanoengine)
    nanoir-opt model.ne --emit=nanoengine        # reproduces the file byte for byte
    nanoir-opt net.mlir -p quantize{...} --emit=nanoengine -o net.ne
    nanoir-opt net.mlir --lower-to-hw --emit=nanoengine -o net_hw.ne   # the hw level (nh)

The work is done by the `.ne` front doors `nanoir.grammar.ne.importer` and
`nanoir.grammar.ne.exporter`, which detect the level (nq or hw) and dispatch.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target


@dataclass(frozen=True)
class NanoEngineTarget(Target):
    """Print an nf/nq or nh module as NanoEngine text (`.ne`)."""

    name = "nanoengine"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        # lazy: the CLIs register this target at start-up; the .ne layer loads only when used
        from nanoir.grammar.ne.exporter import export_nanoengine
        from nanoir.lowering.stream_plan import stream_shapes  # lazy, as above

        # After `-p stream-plan`, the runtime and cache shapes are the plan's.
        output.write(export_nanoengine(module, stream_shapes(module)))


def read_nanoengine(stream: IO[bytes], filename: str) -> ModuleOp:
    """Import `.ne` bytes; import warnings go to stderr as `file:line:col: warning: ...`."""
    # lazy: registered as a frontend at start-up; the .ne layer loads only when a file is read
    from nanoir.grammar.ne.importer import (
        NanoEngineImportWarning,
        import_nanoengine_bytes,
    )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", NanoEngineImportWarning)
        try:
            return import_nanoengine_bytes(stream.read(), filename)
        finally:
            for w in caught:
                if issubclass(w.category, NanoEngineImportWarning):
                    print(w.message, file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
