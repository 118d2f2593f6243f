"""``nanoir-run``: inputs from .npy, outputs to .npy/.npz/stdout, and clean errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from nanoir.runtime.interpreter import run

from nanoir.api import parse
from nanoir.cli.run import main

PROGRAM = """\
func.func @main(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %s = nf.add %x, %y : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %q = nq.fake_quant %s {bits = 4 : i64, exp = dense<1> : tensor<1xi8>} : tensor<?x4xf32>
  %r = nf.relu %x : tensor<?x4xf32>
  func.return %q, %r : tensor<?x4xf32>, tensor<?x4xf32>
}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    prog = tmp_path / "p.mlir"
    prog.write_text(PROGRAM)
    rng = np.random.default_rng(0)
    x, y = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(x, rng.standard_normal((3, 4)).astype(np.float32) * 3)
    np.save(y, rng.standard_normal((3, 4)).astype(np.float32))
    return prog, x, y


def test_npy_outputs_match_the_api(files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    prog, x, y = files
    o1, o2 = tmp_path / "o1.npy", tmp_path / "o2.npy"
    assert main([str(prog), "-i", str(x), "-i", str(y), "-o", str(o1), "-o", str(o2)]) == 0
    want = run(parse(PROGRAM), np.load(x), np.load(y))
    assert np.array_equal(np.load(o1), want[0]) and np.array_equal(np.load(o2), want[1])
    # The 4-bit output holds codes of 2**-1 in [-8, 7].
    codes = np.load(o1) * 2
    assert np.array_equal(codes, np.trunc(codes)) and codes.min() >= -8 and codes.max() <= 7


def test_npz_and_stdout(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prog, x, y = files
    out = tmp_path / "all.npz"
    assert main([str(prog), "-i", str(x), "-i", str(y), "-o", str(out)]) == 0
    with np.load(out) as npz:
        assert sorted(npz.files) == ["output_0", "output_1"]
    assert main([str(prog), "-i", str(x), "-i", str(y)]) == 0
    printed = capsys.readouterr().out
    assert "// output 0: shape (3, 4), dtype float64" in printed
    assert "// output 1: shape (3, 4), dtype float64" in printed


def test_errors_leave_no_output(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prog, x, _ = files
    out = tmp_path / "o.npy"
    assert main([str(prog), "-i", str(x), "-o", str(out)]) == 1
    assert "takes 2 inputs, got 1" in capsys.readouterr().err
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((3, 5), np.float32))
    out2 = tmp_path / "o2.npy"
    assert main([str(prog), "-i", str(x), "-i", str(bad), "-o", str(out), "-o", str(out2)]) == 1
    assert "input 1 has shape (3, 5), expected ?x4" in capsys.readouterr().err
    assert main([str(prog), "-i", str(x), "-i", str(x), "-o", str(out)]) == 1
    assert "2 outputs but 1 -o paths" in capsys.readouterr().err
    broken = tmp_path / "broken.mlir"
    broken.write_text(PROGRAM.replace("tensor<?x4xf32>)", "tensor<?x4xf32)", 1))
    assert main([str(broken), "-i", str(x), "-i", str(x)]) == 1
    assert f"{broken}:1:" in capsys.readouterr().err
    assert not out.exists() and not out2.exists()
