"""Input limits of the array reader and the output paths, and the version (issue 19, items 9,
10 and 12b): a ``.npy`` header with a negative or impossible dim is one ``nanoir.Error`` on the
whole-array and the memory-mapped (``nanoir-run --stream``) path alike; a NUL byte in a path is
one ``nanoir.Error`` from ``save``, ``draw``, ``load`` and the array reader; ``nanoir.__version__``,
``nanoir-opt --version`` and ``nanoir-run --version`` give nanoir's version from the package
metadata (checked against ``pyproject.toml``) with xDSL's beside it.

Mutants checked (each, applied in a private copy, fails a test here):
- the negative-dim check in ``_check_npy_header`` removed: ``test_bad_dims_are_refused`` (the
  mmap path raises OverflowError, the whole path returns a wrong ``(2**32, 0)`` array) and
  ``test_stream_cli_refuses_a_negative_dim``;
- ``check_path_name`` made a no-op: ``test_nul_in_a_path``;
- ``version_format`` back to xDSL's version only: ``test_cli_versions``;
- the magic check before reading a non-regular input whole removed: ``test_dev_zero_input``
  (the subprocess runs out of its address-space limit or time).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.arrays import load_array, load_arrays

import nanoir
from nanoir.cli.run import main as run_main
from nanoir.testing.programs import examples, streaming_program

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _npy_with_shape(path: Path, shape: tuple[int, ...], data: int = 4096) -> Path:
    """A ``.npy`` whose header says ``shape`` (any ints), followed by ``data`` zero bytes."""
    descr = {"descr": "<f4", "fortran_order": False, "shape": shape}
    header = repr(descr).encode("latin1")
    pad = 64 - (10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    raw = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    if len(header) > 65535:  # version 2.0: a 4-byte header length
        raw = b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header
    path.write_bytes(raw + b"\0" * data)
    return path


# -- item 9: .npy dims ------------------------------------------------------------------------

negative_dims = st.lists(st.integers(-(2**70), 2**70), min_size=1, max_size=4).filter(
    lambda s: any(d < 0 for d in s)
)
huge_dims = st.lists(st.integers(0, 2**70), min_size=2, max_size=4).filter(
    lambda s: np.prod([float(d) for d in s if d]) * 4 >= 2.0**63 and 0 in s
)


@settings(max_examples=examples(60))
@given(shape=negative_dims | huge_dims, mmap=st.booleans())
def test_bad_dims_are_refused(
    tmp_path_factory: pytest.TempPathFactory, shape: list[int], mmap: bool
) -> None:
    """A negative dim, or dims whose product (ignoring zeros) has more than 2**63 bytes: NumPy
    raises OverflowError, reads ``-1`` as "the rest", or makes a wrong empty array."""
    path = _npy_with_shape(tmp_path_factory.mktemp("npy") / "x.npy", tuple(shape))
    with pytest.raises(nanoir.Error, match="its header promises an array of shape"):
        load_array(path, mmap=mmap)


def test_the_wrong_empty_array_of_a_negative_dim(tmp_path: Path) -> None:
    """NumPy alone reads shape (2**32, -2**32) as a (2**32, 0) array."""
    path = _npy_with_shape(tmp_path / "x.npy", (2**32, -(2**32)))
    for mmap in (False, True):
        with pytest.raises(nanoir.Error, match="a dim is negative"):
            load_array(path, mmap=mmap)


@settings(max_examples=examples(30))
@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), mmap=st.booleans())
def test_good_dims_still_read(
    tmp_path_factory: pytest.TempPathFactory, shape: list[int], mmap: bool
) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    path = tmp_path_factory.mktemp("npy") / "x.npy"
    np.save(path, x)
    assert np.array_equal(load_array(path, mmap=mmap), x)


@pytest.fixture(scope="module")
def hw_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stream")
    program = nanoir.parse(streaming_program())
    x = np.random.default_rng(0).standard_normal((2, 4, 24)).astype(np.float32)
    nanoir.quantize(program, [x], act_bits=8, weight_bits=4)
    nanoir.save(lower_to_hw(program), d / "hw.mlir")
    return d / "hw.mlir"


@pytest.mark.parametrize("shape", [(2, 4, -1), (-1, 2**63, 4), (2, 4, -(2**62)), (0, 4, 2**64)])
@pytest.mark.parametrize("stream", [True, False])
def test_stream_cli_refuses_a_negative_dim(
    hw_program: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shape: tuple[int, ...],
    stream: bool,
) -> None:
    x = _npy_with_shape(tmp_path / "x.npy", shape)
    out = tmp_path / "y.npz"
    args = [str(hw_program), "-i", str(x), "-o", str(out)] + (["--stream"] if stream else [])
    assert run_main(args) == 1
    err = capsys.readouterr().err
    assert str(x) in err and "its header promises an array of shape" in err
    assert "Traceback" not in err and err.count("\n") == 1 and not out.exists()


def test_dev_zero_input() -> None:
    """A non-regular input is read whole only after its first bytes are NumPy's (or zip's)
    magic: ``/dev/zero`` is refused after 6 bytes, in a subprocess bounded in time and space."""
    script = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from nanoir.runtime.arrays import load_arrays
        import nanoir
        try:
            load_arrays("/dev/zero")
        except nanoir.Error as e:
            print(e)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        proc.stdout == "/dev/zero: not a .npy file (it does not start with NumPy's magic bytes)\n"
    )


def test_a_fifo_input_is_still_read(tmp_path: Path) -> None:
    """``nanoir-run`` reads inputs from pipes (``/dev/stdin``): still whole, after the check."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = io.BytesIO()
    np.save(buf, x)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from nanoir.runtime.arrays import load_array; "
            "sys.stdout.write(repr(load_array('/dev/stdin').tolist()))",
        ],
        input=buf.getvalue(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == repr(x.tolist())


# -- item 10: NUL in a path -------------------------------------------------------------------

GOOD = """\
func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = nf.relu %x : tensor<2x3xf32>
  func.return %r : tensor<2x3xf32>
}
"""

names = st.tuples(
    st.text(alphabet="ab/.-_ ", max_size=6),
    st.text(alphabet="ab/.-_ ", max_size=6),
    st.sampled_from([".mlir", ".ne", ".onnx", ".svg", ".dot", ".npy", ""]),
).map(lambda t: t[0] + "\0" + t[1] + t[2])


@settings(max_examples=examples(40))
@given(name=names)
def test_nul_in_a_path(tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    d = tmp_path_factory.mktemp("nul")
    path = str(d / name) if not name.startswith("/") else name
    module = nanoir.parse(GOOD)
    for call in (
        lambda: nanoir.save(module, path),
        lambda: nanoir.draw(module, path),
        lambda: nanoir.load(path),
        lambda: load_arrays(path),
        lambda: load_array(path, mmap=True),
    ):
        with pytest.raises(nanoir.Error, match="the path holds a NUL byte"):
            call()
    assert sorted(p.name for p in d.iterdir()) == []


# -- item 12b: versions -------------------------------------------------------------------------


def _project_version() -> str:
    """``[project]``'s version, read from pyproject.toml (tomllib is 3.11+; nanoir runs on 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    project = text[text.index("[project]") :]
    found = re.search(r'^version\s*=\s*"([^"]+)"', project, re.M)
    assert found is not None
    return found.group(1)


def test_version_attribute() -> None:
    assert nanoir.__version__ == _project_version()
    assert "__version__" in dir(nanoir) and "__version__" not in nanoir.__all__


@pytest.mark.parametrize("tool", ["nanoir-opt", "nanoir-run"])
def test_cli_versions(tool: str) -> None:
    proc = subprocess.run(
        [str(BIN / tool), "--version"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    want = f"{tool} {_project_version()} (xdsl {metadata.version('xdsl')})\n"
    assert proc.stdout == want
