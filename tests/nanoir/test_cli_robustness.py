"""Bad input and bad paths for `nanoir-opt`, `nanoir-run` and the file API (issue 11).

The rule: exit code 1, exactly one message and no traceback, nothing written, an existing
output unchanged (bytes and mode), no stray temporary file, special files still special;
SIGINT/SIGTERM: one line, exit code 130/143, no temporary file. The table runs each row
in-process; the signal cases and the lexer-hang row run as real subprocesses.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from nanoir.lowering.quantize import QuantizeError
from nanoir.runtime.arrays import load_arrays

import nanoir
from nanoir.cli import opt
from nanoir.cli import run as run_cli
from nanoir.errors import FileAccessError, FileFormatError
from nanoir.files import write_atomically

GOOD = """\
func.func @main(%x: tensor<?x2x6xf32>) -> tensor<?x2x6xf32> {
  %r = nf.relu %x : tensor<?x2x6xf32>
  func.return %r : tensor<?x2x6xf32>
}
"""

TWO_OUTPUTS = """\
func.func @main(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %r = nf.relu %x : tensor<?x4xf32>
  func.return %r, %x : tensor<?x4xf32>, tensor<?x4xf32>
}
"""

SYNTAX_ERROR = GOOD.replace("tensor<?x2x6xf32>\n  func", "tensor<?x2x6xf32\n  func", 1)

VERIFY_ERROR = """\
func.func @f(%x: tensor<?x4x8x8xf32>, %w: tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32> {
  %y = nf.conv %x, %w : (tensor<?x4x8x8xf32>, tensor<16x3x3x3xf32>) -> tensor<?x16x6x6xf32>
  func.return %y : tensor<?x16x6x6xf32>
}
"""

OLD = b"old output\n"
OLD_MODE = 0o640


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A bare .npy header (version 1.0) with no data after it."""
    import io

    from numpy.lib import format as npy

    f = io.BytesIO()
    npy.write_array_header_1_0(f, {"descr": descr, "fortran_order": False, "shape": shape})
    return f.getvalue()


def make_workspace(ws: Path) -> None:
    (ws / "good.mlir").write_text(GOOD)
    (ws / "two.mlir").write_text(TWO_OUTPUTS)
    (ws / "syntax.mlir").write_text(SYNTAX_ERROR)
    (ws / "verify.mlir").write_text(VERIFY_ERROR)
    (ws / "binary.mlir").write_bytes(b"\x80\x81\xfe\x00garbage")
    (ws / "model.onnx").write_bytes(b"\x08\x07\x12\x80\xffonnx protobuf")
    (ws / "unterminated.mlir").write_text('func.func @f() {\n  %0 = "abc')
    (ws / "bad.ne").write_text("let Conv_n1: Node = {\n    op_type=Conv\n    attr=[]\n};\n")
    (ws / "binary.ne").write_bytes(b"let \xff\xfe = 1")
    (ws / "folder.mlir").mkdir()
    (ws / "folder.npy").mkdir()
    (ws / "out.npy").mkdir()
    rng = np.random.default_rng(0)
    np.save(ws / "x.npy", rng.standard_normal((5, 2, 6)).astype(np.float32))
    np.save(ws / "x4.npy", rng.standard_normal((3, 4)).astype(np.float32))
    (ws / "empty.npy").write_bytes(b"")
    (ws / "huge.npy").write_bytes(npy_header((10**11, 2, 6)))  # promises 4.4 TiB, holds 0
    (ws / "short.npy").write_bytes(npy_header((5, 2, 6)) + b"\0" * 100)  # needs 240 bytes
    (ws / "text.npy").write_text("1 2 3\n")
    np.save(ws / "strings.npy", np.array(["a", "b"]))
    np.savez(ws / "archive.npz", x=np.zeros((5, 2, 6), np.float32))
    nan = rng.standard_normal((5, 2, 6)).astype(np.float32)
    nan[3, 1, 2] = np.nan
    np.save(ws / "nan.npy", nan)
    inf = rng.standard_normal((5, 2, 6)).astype(np.float32)
    inf[4, 0, 0] = -np.inf
    np.save(ws / "inf.npy", inf)
    (ws / "out").mkdir()


@dataclass(frozen=True)
class Row:
    """One bad command: ``argv`` with ``{ws}`` for the workspace and ``{out}`` for the output."""

    id: str
    cli: str
    argv: tuple[str, ...]
    expect: str
    out: str | None = "{ws}/out/result"
    existing: bool = True  # whether the output exists (OLD, mode OLD_MODE) beforehand


def q(calibration: str) -> str:
    return f'quantize{{calibration="{{ws}}/{calibration}"}}'


ROWS = [
    # nanoir-opt: bad programs
    Row("opt-syntax", "opt", ("{ws}/syntax.mlir", "-o", "{out}.mlir"), "syntax.mlir:3:3"),
    Row("opt-verify", "opt", ("{ws}/verify.mlir", "-o", "{out}.mlir"), "verify.mlir:2:3"),
    Row(
        "opt-binary-mlir",
        "opt",
        ("{ws}/binary.mlir", "-o", "{out}.mlir"),
        "binary.mlir:1:1: invalid UTF-8 byte 0x80",
    ),
    Row(
        "opt-onnx",
        "opt",
        ("{ws}/model.onnx", "-o", "{out}.mlir"),
        "model.onnx: not a readable ONNX model",
    ),
    Row("opt-missing", "opt", ("{ws}/nope.mlir", "-o", "{out}.mlir"), "No such file or directory"),
    Row("opt-directory", "opt", ("{ws}/folder.mlir", "-o", "{out}.mlir"), "Is a directory"),
    Row(
        "opt-bad-ne", "opt", ("{ws}/bad.ne", "-o", "{out}.mlir"), "bad.ne:3:5: error: expected ','"
    ),
    Row("opt-binary-ne", "opt", ("{ws}/binary.ne", "-o", "{out}.mlir"), "binary.ne:1:"),
    # nanoir-opt: bad calibration data (item 9)
    Row(
        "calib-empty",
        "opt",
        ("{ws}/good.mlir", "-p", q("empty.npy"), "-o", "{out}.mlir"),
        "empty.npy: the file is empty (0 bytes)",
    ),
    Row(
        "calib-huge-header",
        "opt",
        ("{ws}/good.mlir", "-p", q("huge.npy"), "-o", "{out}.mlir"),
        "huge.npy: truncated: its header promises a 100000000000x2x6 float32 array",
    ),
    Row(
        "calib-short",
        "opt",
        ("{ws}/good.mlir", "-p", q("short.npy"), "-o", "{out}.mlir"),
        "short.npy: truncated",
    ),
    Row(
        "calib-text",
        "opt",
        ("{ws}/good.mlir", "-p", q("text.npy"), "-o", "{out}.mlir"),
        "text.npy: not a .npy file",
    ),
    Row(
        "calib-strings",
        "opt",
        ("{ws}/good.mlir", "-p", q("strings.npy"), "-o", "{out}.mlir"),
        "strings.npy: holds <U1 values",
    ),
    Row(
        "calib-nan",
        "opt",
        ("{ws}/good.mlir", "-p", q("nan.npy"), "-o", "{out}.mlir"),
        "nan.npy', batch 0 (rows 0..4) holds NaN",
    ),
    Row(
        "calib-inf",
        "opt",
        ("{ws}/good.mlir", "-p", q("inf.npy"), "-o", "{out}.mlir"),
        "inf.npy', batch 0 (rows 0..4) holds infinity",
    ),
    Row(
        "calib-missing",
        "opt",
        ("{ws}/good.mlir", "-p", q("nope.npy"), "-o", "{out}.mlir"),
        "cannot read {ws}/nope.npy: No such file or directory",
    ),
    # nanoir-opt: bad output paths (item 10)
    Row(
        "opt-out-directory",
        "opt",
        ("{ws}/good.mlir", "-o", "{ws}/out"),
        "{ws}/out: it is a directory",
        out=None,
    ),
    Row(
        "opt-out-missing-dir",
        "opt",
        ("{ws}/good.mlir", "-o", "{ws}/nodir/x.mlir"),
        "directory {ws}/nodir does not exist",
        out=None,
    ),
    Row(
        "opt-out-under-file",
        "opt",
        ("{ws}/good.mlir", "-o", "{ws}/good.mlir/x.mlir"),
        "is not a directory",
        out=None,
    ),
    Row("opt-out-empty", "opt", ("{ws}/good.mlir", "-o", ""), "empty path", out=None),
    # nanoir-run: bad inputs (item 9)
    Row(
        "run-empty-npy",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/empty.npy", "-o", "{out}.npy"),
        "empty.npy: the file is empty (0 bytes)",
    ),
    Row(
        "run-huge-header",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/huge.npy", "-o", "{out}.npy"),
        "(4.4 TiB) but the file holds 0 bytes of data",
    ),
    Row(
        "run-npz-input",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/archive.npz", "-o", "{out}.npy"),
        "archive.npz: is a .npz archive; one .npy array is expected",
    ),
    Row(
        "run-text-npy",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/text.npy", "-o", "{out}.npy"),
        "not a .npy file",
    ),
    Row(
        "run-strings",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/strings.npy", "-o", "{out}.npy"),
        "holds <U1 values",
    ),
    Row(
        "run-missing-npy",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/nope.npy", "-o", "{out}.npy"),
        "cannot read {ws}/nope.npy: No such file or directory",
    ),
    Row(
        "run-dir-npy",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/folder.npy", "-o", "{out}.npy"),
        "Is a directory",
    ),
    Row("run-no-input", "run", ("{ws}/good.mlir", "-o", "{out}.npy"), "takes 1 inputs, got 0"),
    # nanoir-run: bad programs
    Row(
        "run-syntax",
        "run",
        ("{ws}/syntax.mlir", "-i", "{ws}/x.npy", "-o", "{out}.npy"),
        "syntax.mlir:3:3",
    ),
    Row(
        "run-onnx",
        "run",
        ("{ws}/model.onnx", "-i", "{ws}/x.npy", "-o", "{out}.npy"),
        "model.onnx: not a readable ONNX model",
    ),
    Row(
        "run-binary-mlir",
        "run",
        ("{ws}/binary.mlir", "-i", "{ws}/x.npy", "-o", "{out}.npy"),
        "invalid UTF-8 byte 0x80",
    ),
    Row(
        "run-bad-ne",
        "run",
        ("{ws}/bad.ne", "-i", "{ws}/x.npy", "-o", "{out}.npy"),
        "bad.ne:3:5: error: expected ','",
    ),
    # nanoir-run: output names (item 11) and paths (item 10)
    Row(
        "run-out-txt",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "-o", "{out}.txt"),
        "outputs are saved as .npy (one array) or .npz",
    ),
    Row(
        "run-out-no-suffix",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "-o", "{out}"),
        "outputs are saved as .npy (one array) or .npz",
    ),
    Row(
        "run-out-two-npz",
        "run",
        ("{ws}/two.mlir", "-i", "{ws}/x4.npy", "-o", "{out}.npy", "-o", "{ws}/out/b.npz"),
        "a .npz holds every output",
    ),
    Row(
        "run-out-twice",
        "run",
        ("{ws}/two.mlir", "-i", "{ws}/x4.npy", "-o", "{out}.npy", "-o", "{out}.npy"),
        "the same file as",
    ),
    Row(
        "run-out-count",
        "run",
        ("{ws}/two.mlir", "-i", "{ws}/x4.npy", "-o", "{out}.npy"),
        "the program has 2 outputs but 1 -o paths",
    ),
    Row(
        "run-out-directory",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "-o", "{ws}/out.npy"),
        "it is a directory",
        out=None,
    ),
    Row(
        "run-out-missing-dir",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "-o", "{ws}/nodir/y.npy"),
        "directory {ws}/nodir does not exist",
        out=None,
    ),
    # nanoir-run: stream options (item 13)
    Row(
        "run-mem-dim-negative",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--stream", "--mem-dim", "-1", "-o", "{out}.npy"),
        "--mem-dim -1 is not a dim of @main's inputs to stream: they have at most 3 dims, so "
        "the streamed dim is one of 2..2",
    ),
    Row(
        "run-mem-dim-too-big",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--stream", "--mem-dim", "99", "-o", "{out}.npy"),
        "--mem-dim 99 is not a dim",
    ),
    Row(
        "run-mem-dim-channels",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--stream", "--mem-dim", "1", "-o", "{out}.npy"),
        "--mem-dim 1 is not a dim of @main's inputs to stream",
    ),
    Row(
        "run-step-zero",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--stream", "--step", "0", "-o", "{out}.npy"),
        "--step must be at least 1, got 0",
    ),
    Row(
        "run-step-negative",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--stream", "--step", "-2", "-o", "{out}.npy"),
        "--step must be at least 1, got -2",
    ),
    Row(
        "run-report-with-output",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--report", "-o", "{out}.npy"),
        "writes no -o file",
    ),
    Row(
        "run-batch-size-zero",
        "run",
        ("{ws}/good.mlir", "-i", "{ws}/x.npy", "--report", "--batch-size", "0"),
        "--batch-size must be at least 1",
        out=None,
    ),
]


def snapshot(directory: Path) -> dict[str, tuple[bytes | None, int]]:
    return {
        p.name: (p.read_bytes() if p.is_file() else None, stat.S_IMODE(p.stat().st_mode))
        for p in directory.iterdir()
    }


def check_one_message(err: str, expect: str) -> None:
    assert "Traceback" not in err, err
    assert err.strip(), "no message"
    assert err.count("error:") <= 1, err
    assert expect in err, err


MAINS: dict[str, Callable[[list[str]], int]] = {"opt": opt.main, "run": run_cli.main}


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_or_path(row: Row, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_workspace(tmp_path)
    ws = str(tmp_path)
    out = row.out.replace("{ws}", ws) if row.out else ""
    argv = [a.replace("{out}", out).replace("{ws}", ws) for a in row.argv]
    outputs = [Path(a) for i, a in enumerate(argv) if i and argv[i - 1] == "-o" and row.out]
    for path in outputs:
        if row.existing:
            path.write_bytes(OLD)
            path.chmod(OLD_MODE)
    before = snapshot(tmp_path / "out")
    capsys.readouterr()
    assert MAINS[row.cli](argv) == 1
    captured = capsys.readouterr()
    check_one_message(captured.err, row.expect.replace("{ws}", ws))
    assert captured.out == ""
    assert snapshot(tmp_path / "out") == before  # existing outputs unchanged, no temp file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def tool(name: str, *args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which(name, path=str(Path(sys.executable).parent))
    assert exe, f"{name} is not installed next to this Python"
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run([exe, *args], stderr=subprocess.PIPE, timeout=120, **kw)  # type: ignore


def test_unterminated_string_does_not_hang(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    out = tmp_path / "out" / "result.mlir"
    out.write_bytes(OLD)
    proc = tool("nanoir-opt", str(tmp_path / "unterminated.mlir"), "-o", str(out))
    assert proc.returncode == 1
    check_one_message(proc.stderr.decode(), "unterminated.mlir:2:")
    assert out.read_bytes() == OLD and [p.name for p in out.parent.iterdir()] == ["result.mlir"]


def test_unwritable_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """/sys refuses new files even to root (where a chmod'ed directory would not)."""
    make_workspace(tmp_path)
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no /sys here")
    target = "/sys/nanoir-robustness-test.mlir"
    assert opt.main([str(tmp_path / "good.mlir"), "-o", target]) == 1
    check_one_message(capsys.readouterr().err, f"cannot write {target}:")
    assert not os.path.exists(target)


# -- special files, symlinks and modes (items 10, 12) ----------------------------------------


def private_null(directory: Path) -> Path:
    """A null device node of our own: the test never risks the real /dev/null (code that
    renames over its output would turn the node into a regular file)."""
    node = directory / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here: {e}")
    return node


def char_device(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    assert stat.S_ISCHR(st.st_mode)
    return st.st_mode, st.st_rdev


@pytest.mark.parametrize("cli", ["opt", "run"])
@pytest.mark.parametrize("via_link", [False, True])
def test_device_stays_a_device(cli: str, via_link: bool, tmp_path: Path) -> None:
    make_workspace(tmp_path)
    null = private_null(tmp_path / "out")
    before = char_device(null)
    target = null
    if via_link:
        target = tmp_path / "link"
        target.symlink_to(null)
    argv = [str(tmp_path / "good.mlir"), "-o", str(target)]
    if cli == "run":
        argv[1:1] = ["-i", str(tmp_path / "x.npy")]
    assert MAINS[cli](argv) == 0
    assert char_device(null) == before
    assert [p.name for p in null.parent.iterdir()] == ["null"]
    assert not via_link or target.is_symlink()


def test_dev_stdout_in_a_pipe(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    proc = tool("nanoir-opt", str(tmp_path / "good.mlir"), "-o", "/dev/stdout")
    assert proc.returncode == 0, proc.stderr
    assert b"nf.relu %x : tensor<?x2x6xf32>" in proc.stdout
    proc = tool(
        "nanoir-run",
        str(tmp_path / "good.mlir"),
        "-i",
        str(tmp_path / "x.npy"),
        "-o",
        "/dev/stdout",
    )
    assert proc.returncode == 0, proc.stderr
    y = np.load(__import__("io").BytesIO(proc.stdout))
    assert np.array_equal(y, np.maximum(np.load(tmp_path / "x.npy"), 0))


def test_dev_stdout_onto_a_file_appends_like_the_shell_said(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    log = tmp_path / "log.txt"
    log.write_bytes(b"first line\n")
    with open(log, "ab") as f:
        proc = tool("nanoir-opt", str(tmp_path / "good.mlir"), "-o", "/dev/stdout", stdout=f)
    assert proc.returncode == 0, proc.stderr
    assert log.read_bytes().startswith(b"first line\nbuiltin.module {")


def test_fifo_output_is_written_through(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    fifo = tmp_path / "out" / "pipe.mlir"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that opening to write won't block
    try:
        assert opt.main([str(tmp_path / "good.mlir"), "-o", str(fifo)]) == 0
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert b"nf.relu" in got
    assert [p.name for p in fifo.parent.iterdir()] == ["pipe.mlir"]


def test_symlink_keeps_the_link_and_replaces_its_target(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    target = tmp_path / "out" / "real.mlir"
    target.write_bytes(OLD)
    target.chmod(OLD_MODE)
    link = tmp_path / "link.mlir"
    link.symlink_to(target)
    assert opt.main([str(tmp_path / "good.mlir"), "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert b"nf.relu" in target.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == OLD_MODE
    assert sorted(p.name for p in target.parent.iterdir()) == ["real.mlir"]


def test_modes_existing_kept_new_from_the_umask(tmp_path: Path) -> None:
    existing = tmp_path / "kept.mlir"
    existing.write_bytes(OLD)
    existing.chmod(0o604)
    old_umask = os.umask(0o027)
    try:
        write_atomically(existing, "new\n")
        write_atomically(tmp_path / "new.mlir", "new\n")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(existing.stat().st_mode) == 0o604
    assert stat.S_IMODE((tmp_path / "new.mlir").stat().st_mode) == 0o640  # 0666 & ~027
    assert existing.read_text() == "new\n"


def test_fsync_before_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def replace(a: str, b: str) -> None:
        calls.append("replace")
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(tmp_path / "a.mlir", b"data")
    assert calls[:2] == ["fsync", "replace"]


def test_writer_callback_failure_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a.npy"
    target.write_bytes(OLD)

    def writer(f: object) -> None:
        f.write(b"half")  # type: ignore[attr-defined]
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        write_atomically(target, writer)
    assert target.read_bytes() == OLD and [p.name for p in tmp_path.iterdir()] == ["a.npy"]


# -- nanoir-run writes exactly the named file (item 11) ---------------------------------------


@pytest.mark.parametrize("name", ["y.npy", "Y.NPY", "y.NPZ", "y.npz"])
def test_run_writes_exactly_the_named_file(name: str, tmp_path: Path) -> None:
    make_workspace(tmp_path)
    out = tmp_path / "out" / name
    assert (
        run_cli.main([str(tmp_path / "good.mlir"), "-i", str(tmp_path / "x.npy"), "-o", str(out)])
        == 0
    )
    assert [p.name for p in out.parent.iterdir()] == [name]
    want = np.maximum(np.load(tmp_path / "x.npy"), 0)
    if name.lower().endswith(".npz"):
        with np.load(out) as npz:
            assert npz.files == ["output_0"] and np.array_equal(npz["output_0"], want)
    else:
        assert np.array_equal(np.load(out), want)


def test_run_streams_with_valid_options(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    out = tmp_path / "out" / "s.npy"
    assert (
        run_cli.main(
            [
                str(tmp_path / "good.mlir"),
                "-i",
                str(tmp_path / "x.npy"),
                "--stream",
                "--mem-dim",
                "2",
                "--step",
                "4",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert np.array_equal(np.load(out), np.maximum(np.load(tmp_path / "x.npy"), 0))


# -- the Python API: every error is a nanoir.Error ---------------------------------------------


def test_api_errors_are_nanoir_errors(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    with pytest.raises(FileFormatError, match=r"reads \.mlir \(MLIR\), \.ne") as info:
        nanoir.load(tmp_path / "model.tflite")
    assert isinstance(info.value, nanoir.Error) and isinstance(info.value, ValueError)
    with pytest.raises(FileFormatError, match="binary.mlir:1:1: invalid UTF-8 byte 0x80"):
        nanoir.load(tmp_path / "binary.mlir")
    with pytest.raises(FileAccessError, match="No such file") as access:
        nanoir.load(tmp_path / "missing.mlir")
    assert isinstance(access.value, nanoir.Error) and isinstance(access.value, OSError)
    module = nanoir.load(tmp_path / "good.mlir")
    with pytest.raises(nanoir.Error, match="nodir does not exist"):
        nanoir.save(module, tmp_path / "nodir" / "x.mlir")
    with pytest.raises(nanoir.Error, match="it is a directory"):
        nanoir.save(module, tmp_path / "folder.mlir")
    with pytest.raises(nanoir.Error, match=r"\.ne, \.onnx or \.mlir"):
        nanoir.save(module, tmp_path / "x.tflite")
    for name, message in [
        ("empty.npy", "empty"),
        ("huge.npy", "truncated"),
        ("text.npy", "not a .npy"),
        ("strings.npy", "<U1"),
    ]:
        with pytest.raises(nanoir.Error, match=re.escape(message)):
            load_arrays(tmp_path / name)
    (arr,) = load_arrays(tmp_path / "archive.npz")
    assert arr.shape == (5, 2, 6)


def test_quantize_api_names_the_batch_with_nan(tmp_path: Path) -> None:
    module = nanoir.parse(GOOD)
    good = np.ones((2, 2, 6))
    bad = np.ones((2, 2, 6))
    bad[1, 1, 1] = np.nan
    with pytest.raises(QuantizeError, match="calibration batch 1 holds NaN"):
        nanoir.quantize(module, [good, bad])


def test_npy_from_a_fifo(tmp_path: Path) -> None:
    make_workspace(tmp_path)
    fifo = tmp_path / "in.npy"
    os.mkfifo(fifo)
    data = (tmp_path / "x.npy").read_bytes()
    writer = threading.Thread(target=lambda: fifo.write_bytes(data), daemon=True)
    writer.start()
    try:
        (arr,) = load_arrays(fifo)
    finally:
        writer.join(timeout=30)
    assert np.array_equal(arr, np.load(tmp_path / "x.npy"))


# -- signals (item 14): real subprocesses ------------------------------------------------------

SIGNAL_SCRIPT = """\
import os, signal, sys, time
import numpy as np
import nanoir.files
from nanoir.cli import opt
from nanoir.cli import run as run_cli

SIG = getattr(signal, sys.argv[1])
real = nanoir.files._write_contents

def interrupted(f, contents):
    f.write(b"half of the output")
    f.flush()
    os.kill(os.getpid(), SIG)
    time.sleep(30)  # the signal's exception unwinds from here
    real(f, contents)

nanoir.files._write_contents = interrupted
main = opt.main if sys.argv[2] == "opt" else run_cli.main
sys.exit(main(sys.argv[3:]))
"""


def _default_sigint() -> None:
    """In the child: SIGINT back to its default. A shell starts background jobs (as CI may run
    this suite) with SIGINT ignored, children inherit that, and Python then installs no
    KeyboardInterrupt handler, so the signal under test would never arrive."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("cli", ["opt", "run"])
@pytest.mark.parametrize(
    ("sig", "code", "line"), [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")]
)
def test_signal_while_writing(cli: str, sig: str, code: int, line: str, tmp_path: Path) -> None:
    make_workspace(tmp_path)
    out = tmp_path / "out" / ("result.mlir" if cli == "opt" else "result.npy")
    out.write_bytes(OLD)
    out.chmod(OLD_MODE)
    argv = [str(tmp_path / "good.mlir"), "-o", str(out)]
    if cli == "run":
        argv += ["-i", str(tmp_path / "x.npy")]
    script = tmp_path / "signal_script.py"
    script.write_text(SIGNAL_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), sig, cli, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_default_sigint,
    )
    assert proc.returncode == code, proc.stderr
    assert proc.stderr == f"nanoir-{cli}: {line}\n"
    assert out.read_bytes() == OLD and stat.S_IMODE(out.stat().st_mode) == OLD_MODE
    assert [p.name for p in out.parent.iterdir()] == [out.name]


@pytest.mark.parametrize(
    ("sig", "code", "line"), [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")]
)
def test_signal_while_reading(sig: str, code: int, line: str, tmp_path: Path) -> None:
    """Blocked reading a FIFO that nobody writes to: the signal ends it with one line."""
    import signal
    import time

    fifo = tmp_path / "in.mlir"
    os.mkfifo(fifo)
    exe = shutil.which("nanoir-opt", path=str(Path(sys.executable).parent))
    assert exe
    proc = subprocess.Popen(
        [exe, str(fifo), "-o", str(tmp_path / "out.mlir")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    writer = None
    try:
        # A non-blocking open for writing succeeds once the program has the FIFO open for
        # reading; it then waits in read() for data that never comes.
        deadline = time.monotonic() + 60
        while writer is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        assert writer is not None, "nanoir-opt never opened its input"
        time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert err == f"nanoir-opt: {line}\n" and out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mlir"]


def test_stdout_closed_early_is_quiet(tmp_path: Path) -> None:
    """A reader that went away (`| head`): no traceback, the exit code of a SIGPIPE death."""
    make_workspace(tmp_path)
    exe = shutil.which("nanoir-opt", path=str(Path(sys.executable).parent))
    assert exe
    proc = subprocess.Popen(
        [exe, str(tmp_path / "good.mlir")], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.close()  # long before the program is printed
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == b""
