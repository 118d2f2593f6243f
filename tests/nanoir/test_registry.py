"""Every registered dialect and pass is registered under its own name (xdsl tests/test_cli.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nanoir.context import ALL_DIALECTS, NANOIR_DIALECTS, make_context
from nanoir.passes import ALL_PASSES, NANOIR_PASSES, PASS_SUMMARIES
from nanoir.universe import NANOIR_UNIVERSE


@pytest.mark.parametrize("name", sorted(ALL_DIALECTS))
def test_dialect_names(name: str) -> None:
    assert ALL_DIALECTS[name]().name == name


@pytest.mark.parametrize("name", sorted(ALL_PASSES))
def test_pass_names(name: str) -> None:
    assert ALL_PASSES[name]().name == name


def test_every_op_is_prefixed_by_its_dialect() -> None:
    for name, factory in NANOIR_DIALECTS.items():
        dialect = factory()
        assert dialect.operations, f"dialect {name} has no ops"
        for op in dialect.operations:
            assert op.name.startswith(f"{name}."), op.name
            assert op.__doc__ and "```mlir" in op.__doc__, f"{op.name} lacks an IR example"
        for attr in dialect.attributes:
            assert attr.name.startswith(f"{name}."), attr.name


def test_universe_exposes_the_nanoir_dialects() -> None:
    assert set(NANOIR_UNIVERSE.all_dialects) == set(NANOIR_DIALECTS)
    ctx = make_context()
    for name in NANOIR_DIALECTS:
        assert ctx.get_optional_dialect(name) is not None


def test_plain_xdsl_opt_loads_nanoir_ops(tmp_path: Path) -> None:
    """The ``xdsl.universe`` entry point lets stock ``xdsl-opt`` parse nanoir IR."""
    exe = shutil.which("xdsl-opt", path=str(Path(sys.executable).parent))
    assert exe, "xdsl-opt is not installed next to this Python"
    src = tmp_path / "q.mlir"
    src.write_text(
        "func.func @f(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {\n"
        "  %q = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x3xf32>\n"
        "  %y = nf.relu %q : tensor<?x3xf32>\n"
        "  func.return %y : tensor<?x3xf32>\n}\n"
    )
    proc = subprocess.run([exe, str(src)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "nq.fake_quant %x {bits = 4 : i64" in proc.stdout
    assert "nf.relu %q" in proc.stdout


@pytest.mark.parametrize("name", sorted(NANOIR_PASSES))
def test_pass_summaries_match_docstrings(name: str) -> None:
    doc = (ALL_PASSES[name]().__doc__ or "").strip().splitlines()[0]
    assert PASS_SUMMARIES[name] == doc


def test_help_lists_every_pass_with_a_summary() -> None:
    exe = shutil.which("nanoir-opt", path=str(Path(sys.executable).parent))
    assert exe
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120).stdout
    for name in ALL_PASSES:
        line = next((ln for ln in out.splitlines() if ln.strip().startswith(name + " ")), "")
        assert PASS_SUMMARIES[name].replace("``", "") in line, name
