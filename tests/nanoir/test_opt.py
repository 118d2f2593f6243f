"""``nanoir-opt`` end to end: round trips, located errors, exit codes, no partial output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nanoir.cli.opt import main

GOOD = """\
func.func @f(%x: tensor<?x3x8x8xf32>) -> tensor<?x3x8x8xf32> {
  %q = nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>} : tensor<?x3x8x8xf32>
  %y = nf.relu %q : tensor<?x3x8x8xf32>
  func.return %y : tensor<?x3x8x8xf32>
}
"""

SYNTAX_ERROR = """\
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.relu %x : tensor<4xf32
  func.return %y : tensor<4xf32>
}
"""

VERIFY_ERROR = """\
func.func @f(%x: tensor<?x4x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w : (tensor<?x4x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("nanoir-opt", path=str(Path(sys.executable).parent))
    assert exe, "nanoir-opt is not installed next to this Python"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def test_round_trip_through_output_file(tmp_path: Path) -> None:
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    out = tmp_path / "out.mlir"
    assert main([str(src), "-o", str(out)]) == 0
    again = tmp_path / "again.mlir"
    assert main([str(out), "-o", str(again)]) == 0
    assert out.read_text() == again.read_text()
    assert "nq.fake_quant %x {bits = 8 : i64, exp = dense<4> : tensor<1xi8>}" in out.read_text()


def test_syntax_error_is_located_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "bad.mlir"
    src.write_text(SYNTAX_ERROR)
    out = tmp_path / "out.mlir"
    proc = run(str(src), "-o", str(out))
    assert proc.returncode == 1
    # The missing '>' is noticed at the next token, on line 3 column 3.
    assert f"{src}:3:3" in proc.stderr
    assert "Expected '>'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]


def test_verify_error_is_located_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "bad.mlir"
    src.write_text(VERIFY_ERROR)
    out = tmp_path / "out.mlir"
    proc = run(str(src), "-o", str(out))
    assert proc.returncode == 1
    assert f"{src}:2:3" in proc.stderr
    assert "nf.conv: input has 4 channels but weight expects 3" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_use_before_definition_is_reported(tmp_path: Path) -> None:
    src = tmp_path / "dom.mlir"
    src.write_text(
        "func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %y = nf.relu %z : tensor<4xf32>\n"
        "  %z = nf.relu %x : tensor<4xf32>\n"
        "  func.return %y : tensor<4xf32>\n}\n"
    )
    proc = run(str(src))
    assert proc.returncode == 1
    assert f"{src}:2:3" in proc.stderr and "uses %z before it is defined" in proc.stderr


def test_wrong_element_type_is_located(tmp_path: Path) -> None:
    src = tmp_path / "ty.mlir"
    src.write_text(
        "func.func @f(%x: tensor<4xi8>) -> tensor<4xi8> {\n"
        "  %y = nf.relu %x : tensor<4xi8>\n"
        "  func.return %y : tensor<4xi8>\n}\n"
    )
    proc = run(str(src))
    assert proc.returncode == 1
    assert f"{src}:2:3" in proc.stderr and "'nf.relu' op" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_and_bad_pipeline(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "nope.mlir"))
    assert missing.returncode == 1 and "No such file" in missing.stderr
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    bad_pass = run(str(src), "-p", "no-such-pass")
    assert bad_pass.returncode == 1 and "Unrecognized passes" in bad_pass.stderr
    bad_spec = run(str(src), "-p", "cse{")
    assert bad_spec.returncode == 1 and "Traceback" not in bad_spec.stderr


def test_stdin_pipeline_and_generic_form(tmp_path: Path) -> None:
    exe = shutil.which("nanoir-opt", path=str(Path(sys.executable).parent))
    assert exe
    generic = subprocess.run(
        [exe, "--print-op-generic"], input=GOOD, capture_output=True, text=True, timeout=120
    )
    assert generic.returncode == 0 and '"nq.fake_quant"(%x)' in generic.stdout
    back = subprocess.run(
        [exe, "-p", "cse,canonicalize"],
        input=generic.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert back.returncode == 0
    assert "nf.relu %q : tensor<?x3x8x8xf32>" in back.stdout


def test_print_between_passes_and_emit_alias(tmp_path: Path) -> None:
    src = tmp_path / "good.mlir"
    src.write_text(GOOD)
    proc = run(str(src), "-p", "cse,dce", "--print-between-passes", "--emit=mlir")
    assert proc.returncode == 0
    assert "IR after cse:" in proc.stdout
    bad_target = run(str(src), "--emit=nope")
    assert bad_target.returncode == 1 and "invalid choice: 'nope'" in bad_target.stderr


def test_version() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("nanoir-opt")


@pytest.mark.parametrize("flag", ["--verify-diagnostics", "--parsing-diagnostics"])
def test_diagnostic_flags_print_and_succeed(tmp_path: Path, flag: str) -> None:
    src = tmp_path / "bad.mlir"
    src.write_text(
        (VERIFY_ERROR if flag == "--verify-diagnostics" else SYNTAX_ERROR) + "\n// -----\n" + GOOD
    )
    proc = run(str(src), "--split-input-file", flag)
    assert proc.returncode == 0
    assert f"{src}:" in proc.stdout
    assert "nf.relu %q" in proc.stdout
