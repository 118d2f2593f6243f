"""Every public function of ``nanoir.__all__`` (and of ``nanoir.qat``) refuses bad arguments
with a ``nanoir.Error`` whose message names the argument and what it takes, never a bare
``TypeError``/``ValueError``/``AttributeError`` from deep inside (issue 19, item 12).

The table has one row per function and bad argument: wrong types (``None``, a string where a
program is expected, a float where an int is), wrong shapes, ranks and dtypes of arrays, NaN
where the level refuses it, unknown option names and values, a program of the wrong level,
missing files. ``test_every_public_function_has_a_row`` keeps it complete as the API grows.

Mutants this file catches (each applied in a copy and seen to fail here): ``find_function``
without its ModuleOp check (run/compile_module/Streamer/stream/stream_plan of None raise
AttributeError); ``compile_model`` raising a bare ValueError for ``stop``; ``numeric_dtype``
without its kind check (``dtype=str`` accepted); ``as_array`` catching nothing (a ragged list
is a bare ValueError); ``Streamer.streams_input`` without its index check (index 1 read a
result's flag); ``stream`` taking a runner made for another program.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from nanoir.lowering.lower_to_hw import lower_to_hw
from nanoir.runtime.stream import StreamRunner

import nanoir
from nanoir.testing.programs import streaming_program

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 24)).astype(np.float32)
NAN = X.copy()
NAN[0, 1, 2] = np.nan
NF = nanoir.parse(streaming_program())
NQ = nanoir.parse(streaming_program())
nanoir.quantize(NQ, [X], act_bits=8, weight_bits=4)
HW = lower_to_hw(NQ.clone())
MODEL = torch.nn.Sequential(torch.nn.Conv1d(4, 3, 3), torch.nn.ReLU()).eval()
TX = torch.from_numpy(X)
MISSING = "/nonexistent-nanoir-dir/m.mlir"


def _nf() -> Any:
    return NF.clone()


def _qat() -> Any:
    return nanoir.qat.prepare(MODEL, (TX,))


CASES: list[Any] = [
    # name, call, what the message must say (a regex naming the argument and what it takes)
    ("Streamer", lambda: nanoir.Streamer(None), r"module must be a program .*got NoneType"),
    ("Streamer", lambda: nanoir.Streamer("x.mlir"), r"module must be a program .*got str"),
    ("Streamer", lambda: nanoir.Streamer(HW, -1), r"mem_dim must be .* 2\.\.rank-1"),
    ("Streamer", lambda: nanoir.Streamer(HW, "2"), r"mem_dim must be an int, got str"),
    ("Streamer", lambda: nanoir.Streamer(HW, None), r"mem_dim must be an int, got NoneType"),
    ("Streamer", lambda: nanoir.Streamer(HW, 2.0), r"mem_dim must be an int, got float"),
    ("Streamer", lambda: nanoir.Streamer(HW, function=3), r"function must be a name"),
    ("Streamer", lambda: nanoir.Streamer(HW, function="nope"), r"no function @nope"),
    ("Streamer", lambda: nanoir.Streamer(NF, dtype="nope"), r"dtype must be a NumPy float or"),
    ("Streamer", lambda: nanoir.Streamer(NF, dtype=str), r"dtype must be a NumPy float or"),
    ("Streamer", lambda: nanoir.Streamer(HW, raw="yes"), r"raw must be True or False"),
    ("Streamer.push", lambda: nanoir.Streamer(HW).push(NAN), r"input 0 has NaN at index"),
    ("Streamer.push", lambda: nanoir.Streamer(NQ).push(NAN), r"input 0 has NaN at index"),
    ("Streamer.push", lambda: nanoir.Streamer(HW).push("abc"), r"input 0 has non-numeric"),
    ("Streamer.push", lambda: nanoir.Streamer(HW).push([[1], [1, 2]]), r"input 0 is not an a"),
    ("Streamer.push", lambda: nanoir.Streamer(HW).push(X[0]), r"input 0 has shape \(4, 24\)"),
    ("Streamer.push", lambda: nanoir.Streamer(HW).push(X, X), r"takes 1 input"),
    (
        "Streamer.push",
        lambda: nanoir.Streamer(HW).push(np.zeros((2, 5, 0), np.float32)),
        r"input 0 has shape \(2, 5, 0\), expected \?x4x\?",
    ),
    ("Target", lambda: nanoir.Target.load("/nonexistent/t.toml"), r"cannot read target"),
    ("estimate", lambda: nanoir.estimate(None), r"module must be a program .*got NoneType"),
    ("estimate", lambda: nanoir.estimate("x.mlir"), r"module must be a program .*got str"),
    ("fold_bn", lambda: nanoir.fold_bn(None), r"fold_bn takes a program .*got NoneType"),
    ("fold_bn", lambda: nanoir.fold_bn("x.mlir"), r"fold_bn takes a program .*got str"),
    ("inspect", lambda: nanoir.inspect(None), r"module must be a program .*got NoneType"),
    ("inspect", lambda: nanoir.inspect("x.mlir"), r"module must be a program .*got str"),
    ("compile_model", lambda: nanoir.compile_model(MODEL, (TX,), stop="x"), r"stop must be one"),
    ("compile_model", lambda: nanoir.compile_model(MODEL, (TX,), stop=None), r"stop must be"),
    ("compile_model", lambda: nanoir.compile_model(None, (TX,)), r"model must be a torch"),
    ("compile_model", lambda: nanoir.compile_model(MODEL, None), r"example_inputs must be"),
    (
        "compile_model",
        lambda: nanoir.compile_model(MODEL, (TX,), [TX], stop="streamed", stream=3),
        r"stream must be a dict",
    ),
    (
        "compile_model",
        lambda: nanoir.compile_model(MODEL, (TX,), [TX], stop="streamed", stream={"x": 1}),
        r"stream has unknown option\(s\) x \(stream-plan takes mem_dim",
    ),
    ("compile_model", lambda: nanoir.compile_model(MODEL, (TX,), [NAN]), r"NaN"),
    pytest.param(
        "compile_model",
        lambda: nanoir.compile_model(MODEL, (TX,), [TX], bogus=1),
        r"bogus",
    ),
    pytest.param(
        "compile_model",
        lambda: nanoir.compile_model(MODEL, (TX,), "abc"),
        r"calibration",
    ),
    ("compile_module", lambda: nanoir.compile_module(None), r"module must be a program"),
    ("compile_module", lambda: nanoir.compile_module("abc"), r"module must be a program"),
    ("compile_module", lambda: nanoir.compile_module(NF, dtype="nope"), r"dtype must be"),
    ("compile_module", lambda: nanoir.compile_module(NF, function=3), r"function must be"),
    pytest.param("draw", lambda: nanoir.draw(None, "/tmp/g.svg"), r"module"),
    pytest.param("draw", lambda: nanoir.draw(NF, None), r"path"),
    ("draw", lambda: nanoir.draw(NF, "/tmp/g.xyz"), r"\.xyz"),
    ("from_torch", lambda: nanoir.from_torch(None, (TX,)), r"model must be a torch\.nn\.Module"),
    ("from_torch", lambda: nanoir.from_torch("m.pt", (TX,)), r"model must be a torch\.nn\.Mod"),
    ("from_torch", lambda: nanoir.from_torch(MODEL, None), r"example_inputs must be a tensor"),
    ("from_torch", lambda: nanoir.from_torch(MODEL, (torch.zeros(2, 5, 24),)), r"5 channels"),
    ("load", lambda: nanoir.load(MISSING), r"nonexistent-nanoir-dir"),
    ("load", lambda: nanoir.load(__file__), r"\.py"),
    pytest.param("load", lambda: nanoir.load(None), r"path"),
    pytest.param("load", lambda: nanoir.load(3), r"path"),
    ("lower_to_hw", lambda: nanoir.lower_to_hw(None), r"module must be a program"),
    ("lower_to_hw", lambda: nanoir.lower_to_hw("abc"), r"module must be a program"),
    ("lower_to_hw", lambda: nanoir.lower_to_hw(_nf()), r"not quantized"),
    pytest.param(
        "make_context",
        lambda: nanoir.make_context(allow_unregistered="x"),
        r"allow_unregistered",
    ),
    ("parse", lambda: nanoir.parse("garbage"), r"garbage"),
    pytest.param("parse", lambda: nanoir.parse(None), r"text"),
    pytest.param("parse", lambda: nanoir.parse(3), r"text"),
    ("quantize", lambda: nanoir.quantize(None, [X]), r"module must be a program"),
    ("quantize", lambda: nanoir.quantize(_nf(), [NAN]), r"NaN"),
    ("quantize", lambda: nanoir.quantize(_nf(), [X[:, :3]]), r"shape"),
    ("quantize", lambda: nanoir.quantize(_nf(), [X[:0]]), r"batch 0 has no rows"),
    ("quantize", lambda: nanoir.quantize(_nf(), ["abc"]), r"batch 0 is an array of strings"),
    ("quantize", lambda: nanoir.quantize(_nf(), [None]), r"batch 0 is None"),
    ("quantize", lambda: nanoir.quantize(_nf(), [X.astype(np.complex64)]), r"complex numbers"),
    ("quantize", lambda: nanoir.quantize(_nf(), [X], act_bits=0), r"act_bits"),
    ("quantize", lambda: nanoir.quantize(_nf(), [X], exponents=MISSING), r"nonexistent-nano"),
    pytest.param(
        "quantize",
        lambda: nanoir.quantize(_nf(), [X], bogus=1),
        r"bogus",
    ),
    pytest.param("quantize", lambda: nanoir.quantize(_nf(), 3), r"calibration"),
    pytest.param(
        "quantize",
        lambda: nanoir.quantize(_nf(), "abc"),
        r"calibration",
    ),
    ("report", lambda: nanoir.report(None, [X]), r"module must be a program"),
    ("report", lambda: nanoir.report(NQ, [NAN]), r"NaN"),
    ("report", lambda: nanoir.report(NQ, [X[:, :3]]), r"shape"),
    pytest.param("report", lambda: nanoir.report(NQ, 3), r"data"),
    ("run", lambda: nanoir.run(None, X), r"module must be a program"),
    ("run", lambda: nanoir.run("abc", X), r"module must be a program"),
    ("run", lambda: nanoir.run(HW, NAN), r"input 0 has NaN at index \(0, 1, 2\)"),
    ("run", lambda: nanoir.run(NQ, NAN), r"NaN"),
    ("run", lambda: nanoir.run(HW, X[0]), r"input 0 has shape \(4, 24\), expected \?x4x\?"),
    ("run", lambda: nanoir.run(HW, X[:, :3]), r"input 0 has shape \(2, 3, 24\)"),
    ("run", lambda: nanoir.run(HW, "abc"), r"input 0 has non-numeric dtype"),
    ("run", lambda: nanoir.run(NF, X.astype(bool)), r"input 0 has non-numeric dtype bool"),
    ("run", lambda: nanoir.run(NF, [[1], [1, 2]]), r"input 0 is not an array"),
    ("run", lambda: nanoir.run(HW, X, X), r"takes 1 inputs, got 2"),
    ("run", lambda: nanoir.run(HW, X.astype(np.int16) * 200), r"input 0 has code .* outside i8"),
    ("run", lambda: nanoir.run(NF, X, dtype="nope"), r"dtype must be a NumPy float or integer"),
    ("run", lambda: nanoir.run(NF, X, function=3), r"function must be a name \(str\)"),
    ("run", lambda: nanoir.run(NF, X, raw="yes"), r"raw must be True or False"),
    pytest.param("save", lambda: nanoir.save(None, "/tmp/o.mlir"), r"module"),
    pytest.param("save", lambda: nanoir.save(NF, None), r"path"),
    ("save", lambda: nanoir.save(NF, "/tmp/o.xyz"), r"\.xyz"),
    ("save", lambda: nanoir.save(NF, MISSING), r"nonexistent-nanoir-dir"),
    ("save", lambda: nanoir.save(NQ, "/tmp/o.onnx", onnx_flavor="x"), r"onnx_flavor|'x'"),
    ("stream", lambda: nanoir.stream(None, [X]), r"module must be a program"),
    ("stream", lambda: nanoir.stream(HW, None), r"inputs must be a list of arrays"),
    ("stream", lambda: nanoir.stream(HW, X), r"inputs must be a list of arrays.*ndarray"),
    ("stream", lambda: nanoir.stream(HW, [NAN]), r"input 0 has NaN"),
    ("stream", lambda: nanoir.stream(HW, [X], step=0), r"step must be >= 1, got 0"),
    ("stream", lambda: nanoir.stream(HW, [X], step="2"), r"step must be an int, got str"),
    ("stream", lambda: nanoir.stream(HW, [X], step=1.5), r"step must be an int, got float"),
    ("stream", lambda: nanoir.stream(HW, [X], mem_dim=-1), r"mem_dim must be .* 2\.\.rank-1"),
    ("stream", lambda: nanoir.stream(HW, [X], mem_dim="2"), r"mem_dim must be an int"),
    ("stream", lambda: nanoir.stream(HW, [X], runner=3), r"runner must be a StreamRunner"),
    (
        "stream",
        lambda: nanoir.stream(HW, [X], runner=StreamRunner(NQ)),
        r"runner was made for another program",
    ),
    ("Streamer.streams_input", lambda: nanoir.Streamer(HW).streams_input(1), r"index must be"),
    ("stream_plan", lambda: nanoir.stream_plan(None), r"module must be a program"),
    ("stream_plan", lambda: nanoir.stream_plan(HW, mem_dim=-1), r"mem_dim -1 must be a spatial"),
    ("stream_plan", lambda: nanoir.stream_plan(HW, mem_dim="2"), r"mem_dim must be an int"),
    ("stream_plan", lambda: nanoir.stream_plan(HW, steps="x"), r"steps entry 'x'"),
    ("stream_plan", lambda: nanoir.stream_plan(HW, steps=3), r"steps must be"),
    ("stream_plan", lambda: nanoir.stream_plan(HW, steps=[(2, 0)]), r"step along dim 2 must"),
    ("qat.QATModule", lambda: nanoir.qat.QATModule(None, None), r"module must be a program"),
    ("qat.prepare", lambda: nanoir.qat.prepare(None, (TX,)), r"model must be a torch"),
    ("qat.prepare", lambda: nanoir.qat.prepare(MODEL, (TX,), act_bits="x"), r"act_bits"),
    pytest.param("qat.prepare", lambda: nanoir.qat.prepare(MODEL, None), r"example_inputs"),
    ("qat.calibrate", lambda: nanoir.qat.calibrate(_qat(), [TX], calibrator="x"), r"calibrator"),
    pytest.param("qat.calibrate", lambda: nanoir.qat.calibrate(None, [TX]), r"qat"),
    ("qat.calibrate", lambda: nanoir.qat.calibrate(_qat(), [TX[:0]]), r"rows|empty"),
    ("qat.calibrate", lambda: nanoir.qat.calibrate(_qat(), ["abc"]), r"numeric|number"),
    pytest.param("qat.train", lambda: nanoir.qat.train(None, [], epochs=1), r"qat"),
    pytest.param("qat.train", lambda: nanoir.qat.train(_qat(), [(TX, TX)], epochs="x"), r"epochs"),
    pytest.param("qat.train", lambda: nanoir.qat.train(_qat(), None, epochs=1), r"data"),
    pytest.param("qat.convert", lambda: nanoir.qat.convert(None), r"qat"),
    pytest.param("qat.evaluate", lambda: nanoir.qat.evaluate(None, TX), r"qat"),
    pytest.param(
        "qat.evaluate",
        lambda: nanoir.qat.evaluate(_qat(), torch.zeros(2, 5, 24)),
        r"shape|channels",
    ),
    pytest.param("qat.export_exponents", lambda: nanoir.qat.export_exponents(None), r"qat"),
    pytest.param(
        "qat.save_exponents", lambda: nanoir.qat.save_exponents(None, "/tmp/e.json"), r"qat"
    ),
    pytest.param(
        "qat.save_exponents",
        lambda: nanoir.qat.save_exponents(_qat(), MISSING),
        r"nonexistent-nanoir-dir",
    ),
    pytest.param("qat.float_program", lambda: nanoir.qat.float_program(None), r"qat"),
    pytest.param("qat.Quantizer", lambda: nanoir.qat.Quantizer(*[None] * 9), r"name"),
    pytest.param(
        "qat.fake_quant_value",
        lambda: nanoir.qat.fake_quant_value(None, 8, torch.tensor(3), "half_even"),
        r"x",
    ),
    pytest.param("qat.floor_log2", lambda: nanoir.qat.floor_log2(None), r"s"),
    pytest.param("qat.round_codes", lambda: nanoir.qat.round_codes(None, "half_even"), r"v"),
]


def _name(case: Any) -> str:
    return (case.values if hasattr(case, "values") else case)[0]


@pytest.mark.parametrize(("name", "call", "message"), CASES)
def test_a_bad_argument_is_a_nanoir_error(name: str, call: Callable[[], Any], message: str) -> None:
    """Anything but a ``nanoir.Error`` escapes ``pytest.raises`` and fails the row."""
    with pytest.raises(nanoir.Error, match=message):
        call()


def _public_functions() -> set[str]:
    names = set()
    for n in nanoir.__all__:
        obj = getattr(nanoir, n)
        if inspect.ismodule(obj):
            names |= {
                f"{n}.{m}"
                for m in obj.__all__
                if callable(getattr(obj, m))
                and not (
                    inspect.isclass(getattr(obj, m)) and issubclass(getattr(obj, m), Exception)
                )
            }
        elif not (inspect.isclass(obj) and issubclass(obj, Exception)):
            names.add(n)
    return names


def test_every_public_function_has_a_row() -> None:
    covered = {
        _name(c).split(".")[0] if _name(c).startswith("Streamer") else _name(c) for c in CASES
    }
    missing = _public_functions() - covered
    assert not missing, f"add rows for {sorted(missing)}"
    assert "Streamer.push" in {_name(c) for c in CASES}


def test_the_errors_keep_their_builtin_bases() -> None:
    """Code written against what these calls raised before still catches them."""
    with pytest.raises(ValueError):
        nanoir.compile_model(MODEL, (TX,), stop="x")
    with pytest.raises(TypeError):
        nanoir.Streamer(HW, "2")
    with pytest.raises(RuntimeError):  # ExecutionError, as run's other input errors
        nanoir.run(HW, NAN)
