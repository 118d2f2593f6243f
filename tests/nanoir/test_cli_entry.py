"""Every error of nanoir's CLIs exits 1 with one line (issue 31 §2 item 14; README, "Bad
input ... exit code 1"), a bad command line too: argparse's own ending is its whole usage and
exit code 2 (``nanoir-run --backend ORT`` exited 2), and ``nanoir-opt`` gave 2 for an unknown
pass or a bad pipeline."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from nanoir.cli import opt, run

GOOD = """func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.relu %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
"""

MAINS: dict[str, Callable[[Sequence[str] | None], int]] = {
    "nanoir-opt": opt.main,
    "nanoir-run": run.main,
}

USAGE_ERRORS = [
    ("nanoir-run", ["--backend", "ORT"], "argument --backend: invalid choice: 'ORT'"),
    ("nanoir-run", ["--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    ("nanoir-run", ["--step", "x"], "argument --step: invalid int value: 'x'"),
    ("nanoir-run", ["--bogus"], "unrecognized arguments: --bogus"),
    ("nanoir-run", None, "the following arguments are required: program"),
    ("nanoir-opt", ["--emit=nope"], "argument -t/--target: invalid choice: 'nope'"),
    ("nanoir-opt", ["--input-format", "zz"], "argument --input-format: invalid choice: 'zz'"),
    ("nanoir-opt", ["--inspect=xx"], "argument --inspect: invalid choice: 'xx'"),
    ("nanoir-opt", ["--bogus"], "unrecognized arguments: --bogus"),
]
"""(CLI, arguments after the program (None: no program either), what the line says)."""

PIPELINE_ERRORS = [
    (["-p", "no-such-pass"], "Unrecognized passes: ['no-such-pass']"),
    (["-p", "cse{"], "bad pipeline"),
    (["-p", "canonicalize{foo=1}"], '["foo"] not found'),
]


def exit_code(main: Callable[[Sequence[str] | None], int], argv: list[str]) -> int:
    """The code the console script exits with: ``main``'s return, or its ``SystemExit``."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1


@pytest.fixture
def program(tmp_path: Path) -> str:
    path = tmp_path / "good.mlir"
    path.write_text(GOOD)
    return str(path)


@pytest.mark.parametrize(("cli", "args", "says"), USAGE_ERRORS)
def test_usage_errors_are_one_line_and_exit_1(
    program: str, cli: str, args: list[str] | None, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """kills: one_line_usage_errors exiting 2 (argparse's code), or not set on a CLI's
    parser (argparse's usage lines and exit 2)."""
    code = exit_code(MAINS[cli], [] if args is None else [program, *args])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.count("\n") == 1 and err.startswith(f"{cli}: error: {says}"), err
    assert err.rstrip().endswith(f"(see {cli} --help)") and "usage:" not in err


@pytest.mark.parametrize(("args", "says"), PIPELINE_ERRORS)
def test_pipeline_errors_exit_1(
    program: str, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown pass, a pipeline that does not parse, an option a pass does not have.
    kills: opt's ValueError or ArgSpecParseError branch returning 2 (as before)."""
    code = exit_code(opt.main, [program, *args])
    err = capsys.readouterr().err
    assert code == 1, err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize("cli", list(MAINS))
def test_help_and_version_still_exit_0(cli: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The hook changes errors only. kills: exit code 1 for every parser exit."""
    assert exit_code(MAINS[cli], ["--help"]) == 0
    assert exit_code(MAINS[cli], ["--version"]) == 0
    assert cli in capsys.readouterr().out


def test_the_issue_reproducer_through_the_console_script(program: str) -> None:
    """``nanoir-run --backend ORT`` as a shell runs it (the console script's exit code)."""
    exe = shutil.which("nanoir-run", path=str(Path(sys.executable).parent))
    assert exe
    proc = subprocess.run(
        [exe, program, "--backend", "ORT"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "nanoir-run: error: argument --backend: invalid choice: 'ORT' (choose from 'numpy', "
        "'onnxruntime') (see nanoir-run --help)"
    ]
