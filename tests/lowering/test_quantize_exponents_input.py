"""Imported exponents and quantize's input files (issue 19, items 7 and 8).

An imported exponent is the user's statement, so it is used exactly as given or refused with
one ``nanoir.Error`` naming the tensor, the value and the range -60..60; never clamped, never
a traceback. Exponent files are read only if they are regular files of at most 16 MiB, checked
before they are opened; calibration files only if they are regular files.

Mutants checked (each, applied in a private copy, fails a test here):
- ``_exponent``'s range check removed (values clamped by ``_insert`` again): the out-of-range
  properties and ``test_edges_of_the_range``;
- the bool check in ``_exponent`` removed: ``test_hostile_values_are_refused``;
- ``checked_bits`` accepting ``True`` (the bool test removed): ``test_bits_must_be_ints``;
- the ``os.stat`` kind check in ``runtime.arrays.open_regular_file`` (which the exponent and
  calibration readers share) removed (the descriptor's check
  still refuses): ``test_the_kind_is_checked_before_any_open``; removed together with
  ``O_NONBLOCK`` (a plain open first): the FIFO subprocess test times out as well;
- ``O_NONBLOCK`` dropped from ``open_regular_file``'s open:
  ``test_a_path_swapped_for_a_fifo_after_the_stat`` times out;
- the descriptor's ``fstat`` re-check removed: the same test (a FIFO read as empty JSON);
- the size limit check removed: ``test_exponent_file_size_limit``;
- the ``_nesting`` depth check removed (``RecursionError`` or a parsed deep list instead):
  ``test_deep_json_is_refused``;
- ``regular_only=True`` dropped from ``load_calibration``: ``test_calibration_file_kinds``.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.lowering.quantize import (
    EXPONENT_FILE_LIMIT,
    MAX_JSON_DEPTH,
    QuantConfig,
    QuantizeError,
    QuantizePass,
    QuantRule,
    load_exponents,
)
from xdsl.dialects.builtin import ModuleOp

import nanoir
from nanoir.testing.programs import examples

NET = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x2xf32> {
  %w = nf.constant "fc.weight" dense<[[0.5, -0.25, 0.125, 1.0], [0.75, 0.5, -1.5, 0.25]]> : tensor<2x4xf32>
  %y = nf.linear %x, %w : (tensor<?x4xf32>, tensor<2x4xf32>) -> tensor<?x2xf32>
  %r = nf.relu %y : tensor<?x2xf32>
  func.return %r : tensor<?x2xf32>
}
"""
# Every quantized tensor of NET, with in-range exponents (fc.weight per output channel).
NAMES: dict[str, Any] = {"x": 3, "fc.weight": [4, 5], "y": 2, "r": 2}
LO, HI = -60, 60


def net() -> ModuleOp:
    return nanoir.parse(NET)


def exps_by_name(module: ModuleOp) -> dict[str, list[int]]:
    out = {}
    for op in module.walk():
        if isinstance(op, FakeQuantOp):
            src = op.input
            owner = getattr(src, "op", None)
            name = getattr(getattr(owner, "sym_name", None), "data", None) or src.name_hint
            out[name] = dense_to_numpy(op.exp).astype(np.int64).reshape(-1).tolist()
    return out


# -- item 8: values ----------------------------------------------------------------------------

out_of_range = st.one_of(
    st.integers(min_value=HI + 1),
    st.integers(max_value=LO - 1),
    st.sampled_from([61, 100, 200, -129, 10**18, 2**63, -(2**63) - 1, 10**5000]),
)
not_integers = st.one_of(
    st.sampled_from([True, False, None, math.nan, math.inf, -math.inf, "3", b"1"]),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.lists(st.integers(LO, HI), min_size=1, max_size=3).map(lambda v: [v]),  # nested
)


def _refused(value: Any, tensor: str = "x", as_record: bool = False) -> str:
    exponents = dict(NAMES)
    exponents[tensor] = {"exp": value} if as_record else value
    with pytest.raises(nanoir.Error) as e:
        nanoir.quantize(net(), exponents=exponents)
    assert isinstance(e.value, QuantizeError)
    return str(e.value)


@settings(max_examples=examples(60))
@given(value=out_of_range, tensor=st.sampled_from(["x", "y", "r"]), as_record=st.booleans())
def test_out_of_range_exponents_are_refused_not_clamped(
    value: int, tensor: str, as_record: bool
) -> None:
    message = _refused(value, tensor, as_record)
    assert f"tensor {tensor!r}" in message and "outside -60..60" in message
    if abs(value) < 2**64:  # the value itself, in decimal; a huge one by its digit count
        assert str(value) in message
    else:
        assert "digits" in message


@settings(max_examples=examples(60))
@given(value=not_integers, as_record=st.booleans())
def test_hostile_values_are_refused(value: Any, as_record: bool) -> None:
    message = _refused(value, "y", as_record)
    assert "tensor 'y'" in message and "not an integer" in message


@settings(max_examples=examples(40))
@given(
    per_channel=st.lists(
        st.integers(LO, HI) | st.integers(LO, HI).map(float), min_size=2, max_size=2
    ),
    bad_at=st.integers(0, 1),
    bad=out_of_range,
)
def test_a_bad_channel_is_named(per_channel: list[Any], bad_at: int, bad: int) -> None:
    """One bad entry of a per-channel list, a tuple or an array refuses the whole tensor."""
    good = dict(NAMES, **{"fc.weight": per_channel})
    m = net()
    nanoir.quantize(m, exponents=good)
    assert exps_by_name(m)["fc.weight"] == [int(v) for v in per_channel]
    for container in (list, tuple, lambda v: np.array(v, dtype=object)):
        values = list(per_channel)
        values[bad_at] = bad
        message = _refused(container(values), "fc.weight")
        assert "tensor 'fc.weight'" in message and "outside -60..60" in message


@settings(max_examples=examples(40))
@given(k=st.integers(LO, HI), as_float=st.booleans(), as_record=st.booleans())
def test_in_range_exponents_are_used_exactly(k: int, as_float: bool, as_record: bool) -> None:
    value: Any = float(k) if as_float else k
    m = net()
    nanoir.quantize(m, exponents=dict(NAMES, y={"exp": value} if as_record else value))
    assert exps_by_name(m)["y"] == [k]


def test_edges_of_the_range() -> None:
    for k in (LO, HI, np.int8(HI), np.int64(LO)):
        m = net()
        nanoir.quantize(m, exponents=dict(NAMES, x=k))
        assert exps_by_name(m)["x"] == [int(k)]
    for k in (LO - 1, HI + 1, np.int64(HI + 1), np.array([HI + 1]), np.array([1.5])):
        with pytest.raises(QuantizeError, match="tensor 'x'"):
            nanoir.quantize(net(), exponents=dict(NAMES, x=k))


def test_deeply_nested_values_through_the_api() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(QuantizeError, match="tensor 'x': exponent a list is not an integer"):
        nanoir.quantize(net(), exponents=dict(NAMES, x=deep))


def test_the_exponents_argument_and_names() -> None:
    for bad in ([1, 2], "x=3", 3):
        with pytest.raises(QuantizeError, match="exponents must map tensor names"):
            nanoir.quantize(net(), exponents=bad)  # type: ignore[arg-type]
    with pytest.raises(QuantizeError, match="keyed by tensor name"):
        nanoir.quantize(net(), exponents={**NAMES, 7: 1})  # type: ignore[dict-item]
    with pytest.raises(QuantizeError, match="axis of x is True"):
        nanoir.quantize(net(), exponents=dict(NAMES, x={"exp": 1, "axis": True}))
    with pytest.raises(QuantizeError, match="rounding of x is 3"):
        nanoir.quantize(net(), exponents=dict(NAMES, x={"exp": 1, "rounding": 3}))


@pytest.mark.parametrize("bits", [True, False, 8.5, math.nan, math.inf, "8", 3, 2**70, [8]])
def test_bits_must_be_ints(bits: Any) -> None:
    with pytest.raises(QuantizeError, match="bits"):
        nanoir.quantize(net(), exponents=dict(NAMES, x={"exp": 1, "bits": bits}))
    with pytest.raises(QuantizeError, match="act_bits"):
        QuantConfig(act_bits=bits)
    with pytest.raises(QuantizeError, match="rule 'x'"):
        QuantRule("x", bits=bits)


def test_integral_bits_are_their_int() -> None:
    m = net()
    nanoir.quantize(m, exponents=dict(NAMES, x={"exp": 1, "bits": 4.0}))
    fq = {op.input.name_hint: op for op in m.walk() if isinstance(op, FakeQuantOp)}
    assert fq["x"].bits.value.data == 4
    assert QuantConfig(weight_bits=np.int64(2)).weight_bits == 2


# -- item 8: the JSON file ---------------------------------------------------------------------


def _write(tmp_path: Path, text: str | bytes, name: str = "e.json") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _json(value: Any) -> str:
    """JSON text of ``value``; an integer too long for ``json.dumps`` written out by hand."""
    if isinstance(value, int) and value.bit_length() > 10_000:
        return ("-" if value < 0 else "") + "9" * 5_000
    return json.dumps(value)


@settings(max_examples=examples(40))
@given(
    value=out_of_range | not_integers.filter(lambda v: not isinstance(v, bytes)),
    as_record=st.booleans(),
)
def test_hostile_json_values(
    tmp_path_factory: pytest.TempPathFactory, value: Any, as_record: bool
) -> None:
    text = _json(value)
    entry = '{"exp": ' + text + "}" if as_record else text
    names = json.dumps(NAMES)[:-1]
    path = _write(tmp_path_factory.mktemp("e"), names + ', "r": ' + entry + "}")
    with pytest.raises(QuantizeError, match=re.escape(f"{path}: tensor 'r': exponent ")):
        load_exponents(path)


@settings(max_examples=examples(20))
@given(
    depth=st.integers(MAX_JSON_DEPTH + 1, 100_000),
    opener=st.sampled_from(["[", '{"a":', '{"exp": [']),
    filler=st.sampled_from(["", ' "[{\\"\\\\", ']),
)
def test_deep_json_is_refused(
    tmp_path_factory: pytest.TempPathFactory, depth: int, opener: str, filler: str
) -> None:
    """Counted before parsing; brackets inside strings (with escaped quotes) do not count."""
    closer = {"[": "]", '{"a":': "}", '{"exp": [': "]}"}[opener]
    inner = "[" + filler + "1]" if filler else "1"
    text = '{"x": ' + opener * (depth - 1) + inner + closer * (depth - 1) + "}"
    path = _write(tmp_path_factory.mktemp("e"), text)
    with pytest.raises(QuantizeError, match=f"nested more than {MAX_JSON_DEPTH} deep"):
        load_exponents(path)


def test_depth_limit_is_not_too_strict(tmp_path: Path) -> None:
    """At the limit the text is parsed (and refused for what it holds, not for its depth)."""
    depth = MAX_JSON_DEPTH - 1
    text = '{"x": ' + "[" * depth + "1" + "]" * depth + "}"
    with pytest.raises(QuantizeError, match="tensor 'x': exponent a list is not an integer"):
        load_exponents(_write(tmp_path, text))
    brackets = '"[{\\"' + "[" * 40 + '"'  # a name: brackets inside a string do not count
    record = '{"x": {"exp": [1, 2]}, ' + brackets + ": 3}"
    loaded = load_exponents(_write(tmp_path, record))
    assert loaded["x"]["exp"].tolist() == [1, 2] and loaded['[{"' + "[" * 40].tolist() == [3]


def test_json_that_is_not_an_object_or_not_json(tmp_path: Path) -> None:
    for text in ("[1, 2]", "3", "{", b"\xff\xfe\x00", '{"x": 1e999}'):
        with pytest.raises(QuantizeError, match=re.escape(str(_write(tmp_path, text)))):
            load_exponents(tmp_path / "e.json")


def test_json_record_round_trip(tmp_path: Path) -> None:
    record = {"exp": [4.0, -60], "bits": 4, "rounding": "floor", "axis": 0}
    path = _write(tmp_path, json.dumps(dict(NAMES, **{"fc.weight": record})))
    m = net()
    QuantizePass(exponents=str(path)).apply(nanoir.make_context(), m)
    assert exps_by_name(m)["fc.weight"] == [4, -60]


# -- item 7: which files are read, and how much ------------------------------------------------

OPT = str(Path(sys.executable).parent / "nanoir-opt")


def _opt_quantize(tmp_path: Path, option: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """``nanoir-opt -p quantize{option}`` in a subprocess: with a time limit, and an address
    space of 2 GiB, so that a regression (reading a device, waiting on a FIFO) fails quickly
    instead of exhausting the machine."""
    src = _write(tmp_path, NET, "net.mlir")
    limit = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from nanoir.cli.opt import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", limit, str(src), "-p", f"quantize{{{option}}}"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_message(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    for w in words:
        assert w in proc.stderr, proc.stderr


@pytest.mark.parametrize("option", ["exponents", "calibration"])
def test_a_device_is_refused_without_reading(tmp_path: Path, option: str) -> None:
    proc = _opt_quantize(tmp_path, f'{option}="/dev/zero"')
    _one_message(proc, "/dev/zero", "a device", "only a regular file")


@pytest.mark.parametrize("option", ["exponents", "calibration"])
def test_a_fifo_is_refused_without_waiting(tmp_path: Path, option: str) -> None:
    """No writer ever opens the FIFO: opening it for reading would block, and the timeout
    would fail the test. The stat check comes before any open."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = _opt_quantize(tmp_path, f'{option}="{fifo}"', timeout=30)
    _one_message(proc, str(fifo), "FIFO", "only a regular file")


def test_the_kind_is_checked_before_any_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.stat`` decides first: a FIFO, device or directory is never opened at all."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    opened: list[Any] = []

    def no_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(path)  # never really opened: a FIFO would block this process
        raise AssertionError(f"{path} was opened")

    monkeypatch.setattr(os, "open", no_open)
    monkeypatch.setattr("builtins.open", no_open)
    for path, kind in [(fifo, "FIFO"), ("/dev/zero", "a device"), (tmp_path, "a directory")]:
        with pytest.raises(QuantizeError, match=kind):
            load_exponents(path)
        with pytest.raises(QuantizeError, match=kind):
            QuantizePass(calibration=str(path)).apply(nanoir.make_context(), net())
    assert opened == []


SWAPPED = """
import os, sys
from nanoir.lowering.quantize import load_exponents
from nanoir.runtime.arrays import load_arrays
fifo, regular, which = sys.argv[1:]
real_stat = os.stat
os.stat = lambda p, *a, **k: real_stat(regular if os.fspath(p) == fifo else p, *a, **k)
try:
    load_exponents(fifo) if which == "exponents" else load_arrays(fifo, regular_only=True)
except Exception as e:
    print(type(e).__name__, e)
"""


@pytest.mark.parametrize("which", ["exponents", "calibration"])
def test_a_path_swapped_for_a_fifo_after_the_stat(tmp_path: Path, which: str) -> None:
    """The stat says "regular file" (as if the path were replaced by a FIFO just after it):
    the open does not block (O_NONBLOCK) and the open descriptor is checked again. Without a
    writer a blocking open would wait forever, so this runs in a subprocess with a timeout."""
    fifo, regular = tmp_path / "pipe", _write(tmp_path, "{}")
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-c", SWAPPED, str(fifo), str(regular), which],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert "FIFO (named pipe); only a regular file is read" in proc.stdout


def test_exponent_file_size_limit(tmp_path: Path) -> None:
    at_limit = tmp_path / "at.json"
    at_limit.write_bytes(b'{"x": 3}' + b" " * (EXPONENT_FILE_LIMIT - 8))
    assert EXPONENT_FILE_LIMIT == 16 * 2**20 and at_limit.stat().st_size == EXPONENT_FILE_LIMIT
    assert load_exponents(at_limit)["x"].tolist() == [3]
    over = tmp_path / "over.json"
    with open(over, "wb") as f:  # sparse: 1 GiB that costs no disk and must never be read
        f.truncate(2**30)
    proc = _opt_quantize(tmp_path, f'exponents="{over}"', timeout=30)
    _one_message(proc, str(over), "1073741824 bytes", "at most 16 MiB")
    over.write_bytes(b" " * (EXPONENT_FILE_LIMIT + 1))
    with pytest.raises(QuantizeError, match="at most 16 MiB"):
        load_exponents(over)


def test_exponent_file_kinds(tmp_path: Path) -> None:
    for path, words in [
        (tmp_path, "a directory"),
        (tmp_path / "missing.json", "No such file"),
        (str(tmp_path / "a\0b.json"), "NUL byte"),
    ]:
        with pytest.raises(QuantizeError, match=words):
            load_exponents(path)


def test_calibration_file_kinds(tmp_path: Path) -> None:
    with pytest.raises(QuantizeError, match="it is a directory; only a regular file"):
        QuantizePass(calibration=str(tmp_path)).apply(nanoir.make_context(), net())
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 4), np.float32))
    m = net()
    QuantizePass(calibration=str(x), bias_correction=False).apply(nanoir.make_context(), m)
    assert set(exps_by_name(m)) == {"x", "fc.weight", "y", "r"}


def test_cli_refuses_an_out_of_range_exponent(tmp_path: Path) -> None:
    path = _write(tmp_path, json.dumps(dict(NAMES, y=61)))
    proc = _opt_quantize(tmp_path, f'exponents="{path}"')
    _one_message(proc, f"{path}: tensor 'y': exponent 61 is outside -60..60")
    assert proc.stderr.count("\n") == 1
