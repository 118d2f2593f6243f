"""``nanoir-opt``: mlir-opt conventions around xDSL's ``xDSLOptMain``.

Reads ``.mlir``, NanoEngine ``.ne`` or ``.onnx`` (by extension, or ``--input-format``; stdin
is MLIR), runs ``-p`` pipelines of nanoir and xDSL passes, and prints with a target (``-t``/``--emit``:
``mlir``, ``nanoengine``, ``dot``: Graphviz DOT of the op graph, see ``nanoir.dot``,
``onnx`` / ``onnx-nanoengine`` / ``onnx-integer``: binary ONNX, see ``nanoir.cli.onnx_target``,
or ``perf`` / ``perf-json``: the cost estimate, ``nanoir.cost``). ``--hw-target FILE`` names the
engine (``nanoir.Target``) for ``--lower-to-hw [--host]``, ``--inspect`` (which op runs where,
and why: a table, ``json`` or ``dot``) and ``--emit=perf``.
Bad input is one message with ``file:line:col`` and exit code 1, and so is a bad option, pass
or pass option (one line): no traceback, and ``-o`` is written only when everything succeeded
(atomically, see ``nanoir.files.write_atomically``; special files such as ``/dev/null`` or
``/dev/stdout`` are written through). SIGINT and SIGTERM end it with one line and exit code 130
or 143.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import warnings
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.targets.mlir import MLIRTarget
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

import nanoir
from nanoir.api import decode_text, parse_input_shape
from nanoir.cli.entry import one_line_usage_errors, run_main
from nanoir.cli.ne_target import NanoEngineTarget, read_nanoengine
from nanoir.cli.onnx_target import OnnxIntegerTarget, OnnxNanoEngineTarget, OnnxTarget
from nanoir.context import ALL_DIALECTS
from nanoir.diagnostics import LocatingParser, NanoirDiagnostic, verify_located
from nanoir.errors import Error, FileAccessError, FileFormatError, QuantizationWarning
from nanoir.files import check_output_path, write_atomically
from nanoir.grammar.ne.errors import NanoEngineError
from nanoir.passes import ALL_PASSES, PASS_SUMMARIES


def _read_onnx(
    stream: IO[bytes], filename: str, from_file: bool, shapes: Sequence[str] = ()
) -> ModuleOp:
    """Import ONNX bytes; import warnings go to stderr as one line each. External data is
    looked for beside an input file only: read from stdin, a model has no folder. ``shapes``
    are ``--input-shape`` values (``NAME=D1xD2...``)."""
    # lazy: registered as a frontend at start-up; the ONNX reader loads only when a file is read
    from nanoir.grammar.onnx.importer import OnnxImportWarning, import_onnx_bytes
    from nanoir.grammar.onnx.integer import import_model, integer_model_of

    base = os.path.dirname(os.path.abspath(filename)) if from_file else None
    data = stream.read()
    integer = integer_model_of(data)  # nanoir's integer flavour: the nh program again
    input_shapes = dict(parse_input_shape(spec) for spec in shapes) if shapes else None
    if integer is not None:
        if input_shapes is not None:
            raise Error(
                f"{filename}: --input-shape is for float ONNX models, not the integer flavour"
            )
        return import_model(integer, filename, lambda t: nanoir.parse(t, f"{filename}:nanoir.nh"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OnnxImportWarning)
        try:
            return import_onnx_bytes(data, filename, base, input_shapes)
        finally:
            for w in caught:
                if issubclass(w.category, OnnxImportWarning):
                    print(w.message, file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _dot_target() -> type[Target]:
    """The Graphviz DOT target (``--emit=dot``)."""
    # lazy: the DOT writer (and the stream-plan attributes it reads) loads only when used
    from nanoir.dot import DotTarget

    return DotTarget


class _BufferedOutput(io.StringIO):
    """Collects the output; xDSLOptMain closes its stream, which must not discard it."""

    def close(self) -> None:  # noqa: D102 - keep the text until main() writes it out
        pass


class NanoirOptMain(xDSLOptMain):
    """xDSLOptMain with nanoir's dialects, passes and targets, and located diagnostics."""

    # `--version`: nanoir's own version (the package metadata), xDSL's beside it.
    version_format = f"nanoir-opt {nanoir.__version__} (xdsl {{xdsl_version}})"

    def register_all_dialects(self) -> None:
        for name, factory in ALL_DIALECTS.items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        for name, factory in ALL_PASSES.items():
            self.register_pass(name, factory)

    def register_all_targets(self) -> None:
        self.available_targets = {
            "mlir": lambda: MLIRTarget,
            "nanoengine": lambda: NanoEngineTarget,
            "dot": _dot_target,
            "onnx": lambda: OnnxTarget,
            "onnx-nanoengine": lambda: OnnxNanoEngineTarget,
            "onnx-integer": lambda: OnnxIntegerTarget,
            "perf": lambda: MLIRTarget,  # (written by output_resulting_program: the estimate)
            "perf-json": lambda: MLIRTarget,
        }

    def register_all_frontends(self) -> None:
        def parse_mlir(stream: IO[bytes]) -> ModuleOp:
            text = decode_text(stream.read(), self.get_input_name())
            parser = LocatingParser(self.ctx, text, self.get_input_name())
            module = parser.parse_module(not self.args.no_implicit_module)
            if not self.args.disable_verify:
                verify_located(module, parser.op_spans, self.chunk_offset)
            return module

        self.available_frontends["mlir"] = parse_mlir
        # NanoEngine text, by the `.ne` extension or `-f nanoengine` / `--input-format=nanoengine`.
        self.available_frontends["ne"] = self.available_frontends["nanoengine"] = lambda stream: (
            read_nanoengine(stream, self.get_input_name())
        )
        # ONNX (NanoEngine-PyTorch's export or QDQ), by the `.onnx` extension or `-f onnx`.
        self.available_frontends["onnx"] = lambda stream: _read_onnx(
            stream, self.get_input_name(), self.args.input_file is not None, self.args.input_shape
        )

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        """The input file and its extension; a clear error for an unknown extension (unless
        ``-f`` says the format) or a path that cannot be read. stdin is MLIR."""
        path = self.args.input_file
        if path is None:
            if sys.stdin is None:  # started with stdin closed
                raise FileAccessError(
                    "cannot read stdin: it is closed (give an input file)", "<stdin>"
                )
            return sys.stdin.buffer, "mlir"
        extension = os.path.splitext(path)[1].replace(".", "")
        if not self.args.frontend and extension not in self.available_frontends:
            raise FileFormatError(
                f"{path}: cannot tell the input format from its extension: nanoir-opt reads "
                ".mlir (MLIR), .ne (NanoEngine) and .onnx (ONNX) files, or any file with "
                "-f/--input-format (mlir, nanoengine, onnx); stdin is MLIR"
            )
        try:
            return open(path, "rb"), extension
        except OSError as e:
            raise FileAccessError(f"cannot read {path}: {e.strerror or e}", path, e.errno) from None

    chunk_offset = 0
    """Line offset of the chunk being parsed (``--split-input-file``)."""

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        self.chunk_offset = start_offset
        return super().parse_chunk(chunk, file_extension, start_offset)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        one_line_usage_errors(arg_parser, "nanoir-opt")  # (also xDSL's own -t check)
        super().register_all_arguments(arg_parser)
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        width = max(len(name) for name in self.available_passes)
        arg_parser.epilog = "passes (-p NAME or NAME{option=value ...}):\n" + "\n".join(
            f"  {name.ljust(width)}  {PASS_SUMMARIES.get(name, '').replace('``', '')}"
            for name in self.available_passes
        )
        arg_parser.add_argument(
            "--emit",
            dest="target",
            metavar="TARGET",
            help="output format, same as -t (mlir, nanoengine, dot: Graphviz DOT of the op graph, "
            "onnx: standard QDQ, onnx-nanoengine: NanoEngine-PyTorch's ONNX, onnx-integer: an "
            "nh program as exact integer ONNX, perf / perf-json: the per-layer cost estimate "
            "on --hw-target)",
        )
        arg_parser.add_argument(
            "--input-format",
            dest="frontend",
            choices=list(self.available_frontends),
            help="input format, same as -f (default: from the file extension)",
        )
        arg_parser.add_argument(
            "--input-shape",
            action="append",
            default=[],
            metavar="NAME=D1xD2...",
            help="for .onnx input: give graph input NAME these sizes (? for a dim left "
            "dynamic), e.g. --input-shape x=1x3x48x320; once per input",
        )
        arg_parser.add_argument(
            "--lower-to-hw",
            action="store_true",
            help="lower the quantized program to integer nh ops after the -p passes "
            "(same as appending ',lower-to-hw' to -p)",
        )
        arg_parser.add_argument(
            "--host",
            action="store_true",
            help="with --lower-to-hw: keep what the engine cannot run on the host "
            "(lower-to-hw{host=true})",
        )
        arg_parser.add_argument(
            "--hw-target",
            metavar="FILE",
            help="the engine, a target TOML file (nanoir.Target; see "
            "examples/targets/nanoengine_example.toml): read by --lower-to-hw, --inspect and "
            "--emit=perf (-t/--target is the output format)",
        )
        arg_parser.add_argument(
            "--inspect",
            nargs="?",
            const="table",
            choices=("table", "json", "dot"),
            help="print which op runs on the engine and which on the host, and why, instead "
            "of the program: a table (default), json, or dot (the picture, coloured by device)",
        )
        arg_parser.add_argument(
            "--perf-plot",
            metavar="FILE",
            help="with --emit=perf or perf-json: also draw the per-layer cycles as a bar "
            "chart (.png, .svg, .pdf; needs matplotlib)",
        )

    def setup_pipeline(self) -> None:
        if self.args.lower_to_hw:
            options = []
            if self.args.host:
                options.append("host=true")
            if self.args.hw_target:
                options.append(f"hw_target={_quoted(self.args.hw_target)}")
            step = "lower-to-hw" + ("{" + " ".join(options) + "}" if options else "")
            self.args.passes = ",".join(p for p in (self.args.passes, step) if p)
        elif self.args.host:
            raise Error("--host goes with --lower-to-hw (or write lower-to-hw{host=true} in -p)")
        super().setup_pipeline()

    def prepare_output(self) -> IO[str]:
        self.output_buffer = _BufferedOutput()
        return self.output_buffer

    binary_output: bytes | None = None
    """What a binary target (ONNX) wrote; main() writes it instead of the text."""

    def output_resulting_program(self, prog: ModuleOp) -> str:
        if self.args.inspect:
            return _inspection_text(prog, self.args.inspect, self.args.hw_target)
        if self.args.target in ("perf", "perf-json"):
            return _estimate_text(prog, self.args.target, self.args.hw_target, self.args.perf_plot)
        target = {
            "onnx": OnnxTarget,
            "onnx-nanoengine": OnnxNanoEngineTarget,
            "onnx-integer": OnnxIntegerTarget,
        }.get(self.args.target)
        if target is None:
            return super().output_resulting_program(prog)
        if self.binary_output is not None:
            raise FileFormatError(f"--emit={self.args.target} writes one program, not several")
        self.binary_output = target().to_bytes(prog)
        return ""


def _quoted(text: str) -> str:
    """A pass option's string value, quoted for the pipeline syntax."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _inspection_text(prog: ModuleOp, form: str, target: str | None) -> str:
    """``--inspect``: the program's engine-or-host table, JSON or coloured picture."""
    # lazy: the quantize placement and the table load only when asked for
    from nanoir.inspection import inspect

    result = inspect(prog, target)
    if form == "json":
        return result.to_json() + "\n"
    if form == "dot":
        return result.to_dot()
    if sys.stdout.isatty():
        from rich.console import Console

        buffer = io.StringIO()
        Console(file=buffer, force_terminal=True, width=200).print(result.rich())
        return buffer.getvalue()
    return str(result) + "\n"


def _estimate_text(prog: ModuleOp, form: str, target: str | None, plot: str | None) -> str:
    """``--emit=perf`` / ``perf-json``: the per-layer estimate (and its chart with
    ``--perf-plot``)."""
    # lazy: the estimate loads only when asked for
    from nanoir.cost import estimate

    result = estimate(prog, target)
    if plot:
        result.plot(plot)
    return (result.to_json() if form == "perf-json" else str(result)) + "\n"


def _run_printing_quantize_warnings(tool: NanoirOptMain) -> None:
    """Run the pipeline; each ``QuantizationWarning`` (quantize's check: a collapsed output)
    is one line on stderr, ``nanoir-opt: warning: ...``; ``quantize{strict=true}`` raises
    instead, which ends with exit code 1 as any error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", QuantizationWarning)
        try:
            tool.run()
        finally:
            for w in caught:
                if issubclass(w.category, QuantizationWarning):
                    print(f"nanoir-opt: warning: {w.message}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``nanoir-opt``; returns the exit code."""
    return run_main("nanoir-opt", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    try:
        tool = NanoirOptMain(description="nanoir modular optimizer driver", args=argv)
        onnx_input = tool.args.frontend == "onnx" or (
            tool.args.frontend is None and str(tool.args.input_file or "").endswith(".onnx")
        )
        if tool.args.input_shape and not onnx_input:
            raise Error("--input-shape gives the shapes of an .onnx input's graph inputs")
        if tool.args.perf_plot and tool.args.target not in ("perf", "perf-json"):
            raise Error("--perf-plot draws the estimate: use it with --emit=perf or perf-json")
        if tool.args.hw_target:
            # lazy: a bad target file is refused before any pass runs
            from nanoir.target import load_target

            load_target(tool.args.hw_target)
        if tool.args.output_file is not None:
            check_output_path(tool.args.output_file)  # before the work, not after
        elif tool.args.target.startswith("onnx") and sys.stdout.isatty():
            raise Error(
                f"--emit={tool.args.target} writes binary ONNX, which a terminal cannot show: "
                "give -o FILE (or redirect stdout)"
            )
        _run_printing_quantize_warnings(tool)
        text = tool.output_buffer.getvalue()
        if tool.binary_output is not None:  # ONNX
            if tool.args.output_file is None:
                sys.stdout.buffer.write(tool.binary_output)
                sys.stdout.flush()
            else:
                write_atomically(tool.args.output_file, tool.binary_output)
        elif tool.args.output_file is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_atomically(tool.args.output_file, text)
    except ParseError as e:
        print(f"{e}".rstrip(), file=sys.stderr)
        return 1
    except NanoEngineError as e:  # already `file:line:col: error: ...` with the source line
        print(e, file=sys.stderr)
        return 1
    except NanoirDiagnostic as e:
        print(e, file=sys.stderr)
        return 1
    except DiagnosticException as e:
        # Raised by a pass: show the message, not the module dump xDSL attaches as a note.
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    except Error as e:  # every other nanoir error: bad files, bad paths, bad data
        print(f"nanoir-opt: error: {e}", file=sys.stderr)
        return 1
    except ArgSpecParseError as e:  # a BaseException in xDSL
        print(f"nanoir-opt: error: bad pipeline: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # xDSL's pipeline errors: an unknown pass, a bad pass option
        print(f"nanoir-opt: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # stdout's reader is gone: run_main ends quietly
    except OSError as e:
        print(f"nanoir-opt: error: {e.strerror or e}: {e.filename}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
