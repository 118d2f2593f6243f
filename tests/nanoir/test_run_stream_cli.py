"""``nanoir-run --stream``: the input memory-mapped and pushed through ``nanoir.Streamer``,
each output spooled to disk as it comes and written as the whole ``.npy`` at the end: the
files equal the whole-tensor run's byte for byte (1-D and 2-D programs, trailing dims after
the streamed one, several outputs, ``.npz``, printing), and a stream that fails leaves no
output file behind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from torch import nn

import nanoir
from nanoir.cli.row_spool import RowSpool
from nanoir.cli.run import main
from nanoir.frontend import from_torch
from nanoir.testing.programs import examples, streaming_program

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stream_cli")
    program = nanoir.parse(streaming_program())  # two streamed outputs, any stream length
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    nanoir.quantize(program, [x], act_bits=8, weight_bits=4)
    nanoir.save(lower_to_hw(program), d / "hw.mlir")
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((2, 4, 301)).astype(np.float32))
    torch.manual_seed(0)
    conv2d = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, (3, 1)))
    x2 = torch.randn(2, 3, 21, 5)
    module = from_torch(conv2d.eval(), x2)
    nanoir.quantize(module, [x2.numpy()])
    nanoir.save(lower_to_hw(module), d / "hw2d.mlir")
    np.save(d / "x2.npy", x2.numpy())
    return d


def _whole(d: Path, program: str, x: str, n: int, *extra: str) -> list[np.ndarray]:
    outs = [str(d / f"whole{k}.npy") for k in range(n)]
    assert (
        main([str(d / program), "-i", str(d / x), *[a for o in outs for a in ("-o", o)], *extra])
        == 0
    )
    return [np.load(o) for o in outs]


@pytest.mark.parametrize("step", [1, 4, 301])
@pytest.mark.parametrize("raw", [False, True])
def test_streamed_files_equal_the_whole_run(files: Path, step: int, raw: bool) -> None:
    extra = ["--raw"] if raw else []
    want = _whole(files, "hw.mlir", "x.npy", 2, *extra)
    outs = [str(files / f"s{k}.npy") for k in range(2)]
    argv = [str(files / "hw.mlir"), "-i", str(files / "x.npy"), "--stream", "--step", str(step)]
    assert main([*argv, *[a for o in outs for a in ("-o", o)], *extra]) == 0
    for o, w in zip(outs, want):
        got = np.load(o)
        assert got.dtype == w.dtype and got.shape == w.shape
        assert got.tobytes() == w.tobytes()
    assert main([*argv, "-o", str(files / "s.npz"), *extra]) == 0
    with np.load(files / "s.npz") as z:
        assert [z[k].tobytes() for k in z.files] == [w.tobytes() for w in want]


def test_trailing_dims_after_the_streamed_one(files: Path) -> None:
    (want,) = _whole(files, "hw2d.mlir", "x2.npy", 1)
    out = str(files / "s2d.npy")
    argv = [str(files / "hw2d.mlir"), "-i", str(files / "x2.npy"), "--stream", "--step", "2"]
    assert main([*argv, "-o", out]) == 0
    got = np.load(out)
    assert got.shape == want.shape == (2, 2, 19, 5)
    assert got.tobytes() == want.tobytes()


def test_printing_a_stream(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(files / "hw2d.mlir"), "-i", str(files / "x2.npy")]
    assert main(argv) == 0
    whole = capsys.readouterr().out
    assert main([*argv, "--stream", "--step", "3"]) == 0
    assert capsys.readouterr().out == whole


def test_a_failed_stream_writes_no_file(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(files / "bad.npy", np.zeros((2, 5, 30), np.float32))  # 5 channels, not 4
    out = files / "never.npy"
    argv = [str(files / "hw.mlir"), "-i", str(files / "bad.npy"), "--stream", "-o", str(out)]
    assert main([*argv, "-o", str(files / "never2.npy")]) == 1
    assert "shape" in capsys.readouterr().err
    assert not out.exists() and not (files / "never2.npy").exists()


@settings(max_examples=examples(30), deadline=None)
@given(
    st.integers(1, 3),
    st.lists(st.integers(0, 6), min_size=1, max_size=8),
    st.integers(1, 3),
    st.sampled_from(("int8", "int32", "float64")),
)
def test_row_spool_writes_the_concatenation(
    dim: int, pieces: list[int], lead: int, dtype: str
) -> None:
    """``RowSpool`` + ``write_npy`` == ``np.save(np.concatenate(pieces, axis=dim))``."""
    import io

    rng = np.random.default_rng(len(pieces))
    shape = [lead, 2, 3, 2][: dim + 2]
    arrays = []
    spool = RowSpool(dim)
    try:
        for n in pieces:
            s = list(shape)
            s[dim] = n
            a = (rng.standard_normal(s) * 50).astype(dtype)
            arrays.append(a)
            spool.add(a)
        f = io.BytesIO()
        spool.write_npy(f)
    finally:
        spool.close()
    f.seek(0)
    got = np.load(f)
    want = np.concatenate(arrays, axis=dim)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()
