"""``nanoir-run``: run a program on ``.npy`` inputs and save its outputs.

    nanoir-run model.mlir --input x.npy [--input y.npy ...] -o out.npy [-o out2.npy]
    nanoir-run model.mlir --input x.npy -o outs.npz

Float (nf) programs run in float32, quantized (nq) ones in float64; integer (nh) programs take
float inputs (quantized as their inputs say) or codes, and output exact real values (``--raw``:
the codes). Errors are one message
(the file and place for bad programs, the op and shapes for failed runs), exit code 1, and no
output file is written unless every output was computed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from xdsl.utils.exceptions import DiagnosticException, ParseError

from nanoir.api import load
from nanoir.grammar.ne_errors import NanoEngineError
from nanoir.runtime.interpreter import ExecutionError, run


def _arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nanoir-run", description="Run a nanoir program with NumPy.")
    p.add_argument("program", help="a .mlir program")
    p.add_argument("-i", "--input", action="append", default=[], metavar="NPY",
                   help="an input array (.npy), once per function argument, in order")
    p.add_argument("-o", "--output", action="append", default=[], metavar="PATH",
                   help="where to save the outputs: one .npy per output, or a single .npz")
    p.add_argument("-f", "--function", help="the function to run (default: the only one, or @main)")
    p.add_argument("--dtype", choices=["float32", "float64"],
                   help="override the float type the program runs in")
    p.add_argument("--report", action="store_true",
                   help="for a quantized program: print the per-layer quantization report "
                        "(bits, exponents, saturation, SQNR) measured on the inputs")
    p.add_argument("--stream", action="store_true",
                   help="run step by step along the streamed dim, --step rows of each input at "
                        "a time, with the stream-plan's caches (same outputs)")
    p.add_argument("--step", type=int, default=1, metavar="ROWS",
                   help="rows per step for --stream (default 1)")
    p.add_argument("--mem-dim", type=int, default=2, metavar="DIM",
                   help="the streamed dim for --stream (default 2)")
    p.add_argument("--raw", action="store_true",
                   help="for integer (nh) programs: output the codes, not their real values "
                        "(float inputs are quantized as the program's inputs say either way)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="batch size for --report (the inputs are split along dim 0)")
    return p


def _save_atomically(path: Path, write: object) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)  # type: ignore[operator]
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    try:
        module = load(args.program)
        inputs = [np.load(path, allow_pickle=False) for path in args.input]
        if args.report:
            from nanoir.quant_report import report

            n = inputs[0].shape[0] if inputs and inputs[0].ndim else 0
            step = max(args.batch_size, 1)
            batches = [tuple(x[i:i + step] for x in inputs) for i in range(0, n, step)]
            print(report(module, batches, function=args.function))
            return 0
        if args.stream:
            from nanoir.runtime.stream import stream

            outputs = stream(module, inputs, mem_dim=args.mem_dim, step=args.step,
                             function=args.function, dtype=args.dtype, raw=args.raw)
        else:
            outputs = run(module, *inputs, function=args.function, dtype=args.dtype,
                          raw=args.raw)
    except (ParseError, NanoEngineError) as e:
        print(str(e).rstrip(), file=sys.stderr)
        return 1
    except DiagnosticException as e:
        print(str(e.args[0]) if e.args else str(e), file=sys.stderr)
        return 1
    except ExecutionError as e:
        print(f"nanoir-run: error: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as e:
        print(f"nanoir-run: error: {e}", file=sys.stderr)
        return 1

    outs = [Path(p) for p in args.output]
    if not outs:
        for i, y in enumerate(outputs):
            y = np.asarray(y)
            print(f"// output {i}: shape {tuple(y.shape)}, dtype {y.dtype}")
            print(np.array2string(y, threshold=200, max_line_width=100))
        return 0
    if len(outs) == 1 and outs[0].suffix == ".npz":
        arrays = {f"output_{i}": y for i, y in enumerate(outputs)}
        _save_atomically(outs[0], lambda tmp: np.savez(tmp, **arrays))
        return 0
    if len(outs) != len(outputs):
        print(f"nanoir-run: error: the program has {len(outputs)} outputs but {len(outs)} -o "
              "paths were given (give one per output, or a single .npz)", file=sys.stderr)
        return 1
    for path, y in zip(outs, outputs):
        _save_atomically(path, lambda tmp, y=y: np.save(tmp, y))
    return 0


if __name__ == "__main__":
    sys.exit(main())
