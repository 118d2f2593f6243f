"""``nanoir-run``: run a program on ``.npy`` inputs and save its outputs.

    nanoir-run model.mlir --input x.npy [--input y.npy ...] -o out.npy [-o out2.npy]
    nanoir-run model.mlir --input x.npy -o outs.npz
    nanoir-run model.mlir --input x.npy --stream --step 4 -o out.npy
    nanoir-run q.mlir --input x.npy --report --plot report.png   # the report, also as a figure

Float (nf) programs run in the float type they declare (float64 where a value is f64, else
float32), quantized (nq) ones in float64; integer (nh) programs take float inputs (quantized as
their inputs say) or codes, and output exact real values (``--raw``: the codes). Errors are one
message (the file and place for bad programs, the op and shapes for failed runs, what is wrong
with a bad ``.npy`` or ``-o`` path, the option and what it takes for a bad option), exit code
1, and no output file is written unless every output was computed. Options and paths are
checked before anything runs. Outputs are written atomically and exactly to the named files
(``nanoir.files.write_atomically``); SIGINT and SIGTERM end the run with one line and exit code
130 or 143.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.dialects.func import FuncOp
from xdsl.utils.exceptions import DiagnosticException, ParseError

import nanoir
from nanoir.api import load, parse_input_shape
from nanoir.backends import BACKENDS, run
from nanoir.cli.entry import one_line_usage_errors, run_main
from nanoir.dialects import nf
from nanoir.errors import Error
from nanoir.files import check_output_path, write_atomically, writes_through
from nanoir.grammar.ne.errors import NanoEngineError
from nanoir.runtime.arrays import load_array
from nanoir.runtime.interpreter import find_function


def _arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nanoir-run",
        description="Run a nanoir program with NumPy (or an nh program with onnxruntime).",
    )
    one_line_usage_errors(p, "nanoir-run")
    p.add_argument(
        "--version",
        action="version",
        version=f"nanoir-run {nanoir.__version__} (xdsl {metadata.version('xdsl')})",
    )
    p.add_argument("program", help="a .mlir, .ne or .onnx program")
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="NPY",
        help="an input array (.npy), once per function argument, in order",
    )
    p.add_argument(
        "-o",
        "--output",
        action="append",
        default=[],
        metavar="PATH",
        help="where to save the outputs: one .npy per output, or a single .npz "
        "(by suffix, any case; a special file such as /dev/stdout gets .npy)",
    )
    p.add_argument("-f", "--function", help="the function to run (default: the only one, or @main)")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=D1xD2...",
        help="for an .onnx program: give graph input NAME these sizes (? for a dim left "
        "dynamic), e.g. --input-shape x=1x3x48x320; once per input",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        help="override the float type the program runs in",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="for a quantized program: print the per-layer quantization report "
        "(bits, exponents, saturation, SQNR) measured on the inputs",
    )
    p.add_argument(
        "--plot",
        metavar="PATH",
        help="with --report: also draw it as a figure (.png, .svg or .pdf by suffix): "
        "SQNR, saturation and exponents per layer (needs matplotlib: pip install nanoir[plot])",
    )
    p.add_argument(
        "--stream",
        action="store_true",
        help="run step by step along the streamed dim, --step rows of each input at "
        "a time, with the stream-plan's caches (same outputs)",
    )
    p.add_argument(
        "--step", type=int, default=1, metavar="ROWS", help="rows per step for --stream (default 1)"
    )
    p.add_argument(
        "--mem-dim",
        type=int,
        default=2,
        metavar="DIM",
        help="the streamed dim for --stream, 0 .. the inputs' rank - 1 (default 2)",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="for integer (nh) programs: output the codes, not their real values "
        "(float inputs are quantized as the program's inputs say either way)",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="numpy",
        help="the executor: numpy (default, every level) or onnxruntime (integer nh programs, "
        "as exact integer ONNX; the same codes, faster on large tensors)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="batch size for --report (the inputs are split along dim 0)",
    )
    return p


class UsageError(ValueError, Error):
    """Options that do not fit the program (or each other); found before anything runs."""


OUTPUT_SUFFIXES = (".npy", ".npz")


def _check_outputs(paths: Sequence[str]) -> list[tuple[str, bool]]:
    """Each ``-o`` path with whether it is an ``.npz``; all checked before anything runs.

    The format is the suffix (``.npy`` or ``.npz``, any case), and exactly the named file is
    written. A special file (``/dev/null``, ``/dev/stdout``, a FIFO) may have no suffix: it
    gets ``.npy`` data.
    """
    outs = []
    seen: dict[str, str] = {}
    for path in paths:
        suffix = Path(path).suffix.lower()
        special = writes_through(path)
        if suffix not in OUTPUT_SUFFIXES and not special:
            raise UsageError(
                f"-o {path}: outputs are saved as .npy (one array) or .npz (every "
                "output in one archive); name the file with one of those "
                "suffixes"
            )
        check_output_path(path)
        key = path if special else os.path.realpath(path)
        if key in seen:
            raise UsageError(f"-o {path}: the same file as -o {seen[key]}")
        seen[key] = path
        outs.append((path, suffix == ".npz"))
    if len(outs) > 1:
        for path, npz in outs:
            if npz:
                raise UsageError(
                    f"-o {path}: a .npz holds every output; give it as the only -o "
                    "(or one .npy per output)"
                )
    return outs


def _check_plot_path(path: str) -> None:
    """The --plot path's suffix, its folder and matplotlib, before anything runs."""
    # lazy: the report's modules (and matplotlib) load only for --report --plot
    from nanoir.quant_report import PLOT_FORMATS, require_matplotlib

    if Path(path).suffix.lower().lstrip(".") not in PLOT_FORMATS and not writes_through(path):
        raise UsageError(
            f"--plot {path}: the figure is written as .png, .svg or .pdf; name the file "
            "with one of those suffixes"
        )
    check_output_path(path)
    require_matplotlib()


def _check_stream_options(func: FuncOp, mem_dim: int, step: int) -> None:
    if step < 1:
        raise UsageError(f"--step must be at least 1, got {step}")
    ranks = [
        len(t.get_shape()) for t in func.function_type.inputs.data if isinstance(t, TensorType)
    ]
    rank = max(ranks, default=0)
    if not nf.lowest_streamed_dim(func.body.block.args) <= mem_dim < rank:  # (1: token ids)
        raise UsageError(
            f"--mem-dim {mem_dim} is not a dim of @{func.sym_name.data}'s inputs to stream: they "
            f"have at most {rank} dims, so the streamed dim is one of 2..{rank - 1} (dim 0 is "
            "the batch, dim 1 the channels)"
            if rank > 2
            else f"--stream: @{func.sym_name.data} has no tensor inputs to stream"
        )


def _save(outs: list[tuple[str, bool]], outputs: Sequence[Any]) -> None:
    """Print the outputs (no ``-o``), or write one ``.npz`` or one ``.npy`` per output."""
    if not outs:
        for i, y in enumerate(outputs):
            y = np.asarray(y)
            print(f"// output {i}: shape {tuple(y.shape)}, dtype {y.dtype}")
            print(np.array2string(y, threshold=200, max_line_width=100))
        return
    if len(outs) == 1 and outs[0][1]:
        arrays = {f"output_{i}": np.asarray(y) for i, y in enumerate(outputs)}
        write_atomically(outs[0][0], lambda f: np.savez(f, **arrays))
        return
    for (path, _), y in zip(outs, outputs, strict=True):
        write_atomically(path, lambda f, y=y: np.save(f, np.asarray(y), allow_pickle=False))


def _stream(module: Any, args: argparse.Namespace, outs: list[tuple[str, bool]]) -> int:
    """``--stream``: the inputs memory-mapped and pushed ``--step`` rows at a time through a
    ``Streamer``; each output's rows spooled to disk as they come (``RowSpool``), then
    written as one ``.npy`` each (or printed, or one ``.npz``)."""
    # lazy: the streaming modules load only for --stream
    from nanoir.cli.row_spool import RowSpool
    from nanoir.runtime.streamer import Streamer

    streamer = Streamer(
        module, args.mem_dim, function=args.function, dtype=args.dtype, raw=args.raw
    )
    inputs = [load_array(path, mmap=True) for path in args.input]
    dim, step = args.mem_dim, args.step
    along = [x.ndim > dim and streamer.streams_input(i) for i, x in enumerate(inputs)]
    length = max([x.shape[dim] for x, a in zip(inputs, along) if a] or [1])
    # each output's rows come along its own dim (a transpose may have moved mem_dim)
    spools = [RowSpool(dim if a is None else a) for a in streamer.output_axes]
    try:
        for start in range(0, length, step):
            chunks = [
                x[(slice(None),) * dim + (slice(start, start + step),)]
                if a
                else (x if start == 0 else None)
                for x, a in zip(inputs, along)
            ]
            for spool, y in zip(spools, streamer.push(*chunks)):
                spool.add(y)
        for spool, y in zip(spools, streamer.flush()):
            spool.add(y)
        if outs and not (len(outs) == 1 and outs[0][1]):
            for (path, _), spool in zip(outs, spools, strict=True):
                write_atomically(path, spool.write_npy)
        else:
            _save(outs, [spool.array() for spool in spools])
    finally:
        for spool in spools:
            spool.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``nanoir-run``; returns the exit code."""
    return run_main("nanoir-run", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args = _arguments().parse_args(argv)
    try:
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
        if args.report and args.output:
            raise UsageError("--report prints the report; it writes no -o file")
        if args.plot is not None:
            if not args.report:
                raise UsageError("--plot draws the quantization report: give --report too")
            _check_plot_path(args.plot)
        if args.backend != "numpy":
            for flag, given in (("--stream", args.stream), ("--report", args.report)):
                if given:
                    raise UsageError(
                        f"{flag} runs on the numpy backend (onnxruntime runs whole tensors "
                        "of an integer program): leave out --backend or that flag"
                    )
            if args.dtype is not None:
                raise UsageError(
                    "--dtype chooses the float type of nf/nq programs; --backend "
                    "onnxruntime runs integer (nh) programs"
                )
        outs = _check_outputs(args.output)
        shapes = dict(parse_input_shape(spec) for spec in args.input_shape)
        module = load(args.program, input_shapes=shapes or None)
        func = find_function(module, args.function)
        if args.stream:
            _check_stream_options(func, args.mem_dim, args.step)
        params = len(func.function_type.inputs.data)
        if len(args.input) != params:
            raise UsageError(
                f"@{func.sym_name.data} takes {params} inputs, got "
                f"{len(args.input)} (give --input once per input, in order)"
            )
        results = len(func.function_type.outputs.data)
        if len(outs) > 1 or (outs and not outs[0][1]):
            if len(outs) != results:
                raise UsageError(
                    f"the program has {results} outputs but {len(outs)} -o paths were given "
                    "(give one per output, or a single .npz)"
                )
        if args.stream and not args.report:
            return _stream(module, args, outs)
        inputs = [load_array(path) for path in args.input]
        if args.report:
            # lazy: the report's modules load only for --report
            from nanoir.quant_report import report

            n = inputs[0].shape[0] if inputs and inputs[0].ndim else 0
            step = args.batch_size
            batches = [tuple(x[i : i + step] for x in inputs) for i in range(0, n, step)]
            measured = report(module, batches, function=args.function)
            print(measured)
            if args.plot is not None:
                measured.plot(args.plot, title=f"{Path(args.program).name}: quantization report")
            return 0
        outputs = run(
            module,
            *inputs,
            function=args.function,
            dtype=args.dtype,
            raw=args.raw,
            backend=args.backend,
        )
        _save(outs, outputs)
        return 0
    except (ParseError, NanoEngineError) as e:
        print(str(e).rstrip(), file=sys.stderr)
        return 1
    except DiagnosticException as e:
        print(str(e.args[0]) if e.args else str(e), file=sys.stderr)
        return 1
    except Error as e:  # every other nanoir error: bad files, bad paths, failed runs
        print(f"nanoir-run: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # stdout's reader is gone: run_main ends quietly
    except (OSError, ValueError) as e:
        print(f"nanoir-run: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
