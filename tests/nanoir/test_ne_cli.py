"""The NanoEngine format in the tools: `nanoir-opt` (frontend by extension or flag, the
`nanoengine` target, located errors, atomic `-o`), `nanoir-run` on a `.ne` file, and
`nanoir.load` / `nanoir.save`."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nanoir.dialects import nf
from nanoir.grammar.ne import nq as ne_nq
from nanoir.grammar.ne.errors import NanoEngineSemanticError
from nanoir.grammar.ne.exporter import ExportError

import nanoir
from nanoir.cli.opt import main

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "readme_model.ne"

PADDED = """\
func.func @main(%x: tensor<?x2x4xf32>) -> tensor<?x2x6xf32> {
  %y = nf.pad %x {pads = array<i64: 0, 0, 1, 0, 0, 1>} : tensor<?x2x4xf32> -> tensor<?x2x6xf32>
  func.return %y : tensor<?x2x6xf32>
}
"""


def tool(name: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which(name, path=str(Path(sys.executable).parent))
    assert exe, f"{name} is not installed next to this Python"
    return subprocess.run([exe, *args], capture_output=True, input=stdin, timeout=120)


def located(marked: str) -> tuple[str, int, int]:
    at = marked.index("§")
    return (
        marked.replace("§", ""),
        marked.count("\n", 0, at) + 1,
        at - (marked.rfind("\n", 0, at) + 1) + 1,
    )


def test_emit_nanoengine_reproduces_the_sample() -> None:
    proc = tool("nanoir-opt", str(SAMPLE), "--emit=nanoengine")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == SAMPLE.read_bytes()


def test_stdin_needs_the_input_format_flag() -> None:
    proc = tool(
        "nanoir-opt", "--input-format=nanoengine", "-t", "nanoengine", stdin=SAMPLE.read_bytes()
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == SAMPLE.read_bytes()


def test_through_mlir_files_and_back(tmp_path: Path) -> None:
    mlir = tmp_path / "model.mlir"
    assert main([str(SAMPLE), "-o", str(mlir)]) == 0
    assert mlir.read_text().startswith("builtin.module attributes {ne.items = [")
    out = tmp_path / "again.ne"
    assert main([str(mlir), "--emit=nanoengine", "-o", str(out)]) == 0
    assert out.read_bytes() == SAMPLE.read_bytes()
    # -f works like --input-format, whatever the extension says.
    copy = tmp_path / "model.txt"
    copy.write_bytes(SAMPLE.read_bytes())
    out2 = tmp_path / "via_flag.ne"
    assert main([str(copy), "-f", "nanoengine", "-t", "nanoengine", "-o", str(out2)]) == 0
    assert out2.read_bytes() == SAMPLE.read_bytes()


def test_syntax_error_is_one_located_message(tmp_path: Path) -> None:
    # A missing ',' is noticed at the next token, on the next line.
    marked = SAMPLE.read_text().replace(
        "    op_type=Conv,\n    attr", "    op_type=Conv\n    §attr", 1
    )
    text, line, column = located(marked)
    bad = tmp_path / "bad.ne"
    bad.write_text(text)
    out = tmp_path / "out.ne"
    proc = tool("nanoir-opt", str(bad), "--emit=nanoengine", "-o", str(out))
    err = proc.stderr.decode()
    assert proc.returncode == 1
    assert err.startswith(f"{bad}:{line}:{column}: error: expected ',', found 'attr'")
    assert err.splitlines()[1] == text.splitlines()[line - 1]
    assert err.splitlines()[2] == " " * (column - 1) + "^"
    assert "Traceback" not in err and proc.stdout == b""
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.ne"]


def test_semantic_error_is_one_located_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marked = SAMPLE.read_text().replace("kernel_shape=[3, 3]", "§kernel_shape=[3, 5]", 1)
    text, line, column = located(marked)
    bad = tmp_path / "bad.ne"
    bad.write_text(text)
    out = tmp_path / "out.mlir"
    assert main([str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"{bad}:{line}:{column}: error: kernel_shape [3, 5] of Conv node 'Conv_n1' contradicts"
    )
    assert not out.exists()


def test_unknown_op_types_warn_with_a_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marked = SAMPLE.read_text().replace(
        "let Relu_n1: Node = {\n    op_type=Relu", "let §Relu_n1: Node = {\n    op_type=Hardmax"
    )
    text, line, column = located(marked)
    src = tmp_path / "hardmax.ne"
    src.write_text(text)
    assert main([str(src), "--emit=nanoengine"]) == 0
    captured = capsys.readouterr()
    assert captured.out == text
    assert (
        captured.err
        == f"{src}:{line}:{column}: warning: op type 'Hardmax' of node 'Relu_n1' is not known to nanoir; it is kept as nf.custom (it cannot run or be lowered)\n"
    )


def test_export_error_names_the_op_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(ne_nq.BY_CLASS, nf.PadOp)  # every nf op has a row: take Pad's away
    src = tmp_path / "pad.mlir"
    src.write_text(PADDED)
    out = tmp_path / "pad.ne"
    assert main([str(src), "--emit=nanoengine", "-o", str(out)]) == 1
    assert "error: nanoengine export: 'nf.pad' has no NanoEngine op type" in capsys.readouterr().err
    assert not out.exists()


def test_nanoir_run_reads_ne(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5))
    np.save(tmp_path / "x.npy", x)
    proc = tool(
        "nanoir-run", str(SAMPLE), "--input", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")
    )
    assert proc.returncode == 0, proc.stderr.decode()
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (2, 16, 2, 3)
    assert np.array_equal(y * 128, np.round(y * 128)) and np.abs(y * 128).max() <= 128


def test_load_and_save_pick_the_format_by_extension(tmp_path: Path) -> None:
    module = nanoir.load(SAMPLE)
    nanoir.save(module, tmp_path / "copy.ne")
    assert (tmp_path / "copy.ne").read_bytes() == SAMPLE.read_bytes()
    nanoir.save(module, tmp_path / "copy.mlir")
    again = nanoir.load(tmp_path / "copy.mlir")
    assert again.is_structurally_equivalent(module)
    nanoir.save(again, tmp_path / "again.ne")
    assert (tmp_path / "again.ne").read_bytes() == SAMPLE.read_bytes()
    with pytest.raises(ValueError, match=r"use a \.ne, \.onnx or \.mlir file name"):
        nanoir.save(module, tmp_path / "copy.txt")


def test_save_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(ne_nq.BY_CLASS, nf.PadOp)  # every nf op has a row: take Pad's away
    target = tmp_path / "pad.ne"
    target.write_text("old contents\n")
    with pytest.raises(ExportError, match="nf.pad"):
        nanoir.save(nanoir.parse(PADDED), target)
    assert target.read_text() == "old contents\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pad.ne"]  # no temporary file left


def test_load_reports_semantic_errors_with_a_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ne"
    bad.write_text(
        SAMPLE.read_text().replace(
            "    Q_n4.do();\n    Conv_n2.do();\n", "    Conv_n2.do();\n    Q_n4.do();\n"
        )
    )
    with pytest.raises(
        NanoEngineSemanticError,
        match=re.escape("node 'Conv_n2' reads 'Q_n4_o0' before node 'Q_n4' computes it"),
    ) as info:
        nanoir.load(bad)
    assert info.value.filename == str(bad) and info.value.line > 1


def test_stream_plan_then_export_reproduces_the_sample() -> None:
    """The planner's shapes are exactly the ones NanoEngine-PyTorch printed for this program."""
    spec = 'stream-plan{steps="2:1,3:5"}'
    proc = tool("nanoir-opt", str(SAMPLE), "-p", spec, "--emit=nanoengine")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SAMPLE.read_bytes()
