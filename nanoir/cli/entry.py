"""What ``nanoir-opt`` and ``nanoir-run`` share: signals, exit codes and the last resort.

``run_main`` runs a CLI body so that SIGINT and SIGTERM unwind the stack as exceptions (so an
atomic write in progress removes its temporary file), then end the program with one line on
stderr and the shell's exit codes: 130 for SIGINT, 143 for SIGTERM. A reader that closes the
pipe early (``nanoir-opt x.mlir | head``) ends it quietly, as it would end ``cat``.

Every error exits 1 with one line on stderr, a bad command line too (``one_line_usage_errors``:
argparse's own is the whole usage and exit code 2).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM
EXIT_SIGPIPE = 128 + signal.SIGPIPE


def one_line_usage_errors(parser: argparse.ArgumentParser, prog: str) -> None:
    """Make ``parser`` end a bad command line (an unknown option or choice, a value of the
    wrong type, a missing argument) as every other error of nanoir's CLIs ends: one line,
    ``<prog>: error: <what argparse found> (see <prog> --help)``, and exit code 1. argparse
    prints its whole usage and exits 2; ``parser.error`` is the hook its documentation gives
    for changing that, and xDSL's ``xDSLOptMain`` builds its parser itself, so the hook is set
    on the instance."""
    parser.prog = prog

    def error(message: str) -> NoReturn:
        parser.exit(1, f"{prog}: error: {message} (see {prog} --help)\n")

    parser.error = error  # type: ignore[method-assign]


class Terminated(SystemExit):
    """SIGTERM, raised where the program is so that ``finally`` blocks and cleanups run."""

    def __init__(self) -> None:
        super().__init__(EXIT_SIGTERM)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def run_main(prog: str, body: Callable[[], int]) -> int:
    """Run ``body`` (a CLI's work, returning its exit code) with nanoir's signal handling."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return EXIT_SIGTERM
    except BrokenPipeError:
        # stdout's reader went away: say nothing, and keep Python's exit-time flush of
        # stdout from failing again with a traceback.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_SIGPIPE
    except MemoryError:
        print(f"{prog}: error: out of memory", file=sys.stderr)
        return 1
    finally:
        if main_thread:  # None: a handler not set from Python; the default is the best guess
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
