"""Post-training quantization against onnxruntime's ``quantize_static`` (issue 20 section 4).

For each network of ``ptq_models.py`` (random weights, realistic BatchNorm statistics, seeded)
and the smooth images of ``ptq_images.py`` (32 calibration, 64 evaluation; the same for both
tools):

- float reference: the torch module in float64 on the evaluation images;
- ``ORT``: ``torch.onnx.export(..., dynamo=False, opset_version=17)``, then onnxruntime's
  ``quantize_static``: QDQ format, int8 per-channel weights, uint8 activations (its default,
  with a zero point), ``CalibrationMethod.MinMax``; run with onnxruntime's CPU provider (the
  reference of the gaps); ``ORT s8`` the same with int8 symmetric activations (no zero point,
  what signed codes cost at a free scale);
- ``nanoir``: ``compile_model(stop="folded")`` once, then ``nanoir.quantize`` per
  configuration and ``nanoir.run`` of the nq program (float64 fake-quant semantics, equal to
  the nh program's outputs by construction; ``--nh`` checks it on 4 images per configuration).

Configurations (nanoir's defaults otherwise: 8-bit weights, per-channel, 8-bit activations and
biases): ``absmax/trunc`` (NanoEngine's rule and rounding) and ``mse/half_even``, each without
bias correction; then, when ``nanoir.quantize`` takes the option, ``bias_correction=True`` and
``unsigned="auto"``; ``mse/trunc +bc`` is ``quantize``'s defaults (``absmax`` configurations
pass ``calibrator="absmax"``). A configuration whose option this nanoir does not take prints ``n/a``
(probed once on a tiny network), so the same command gives the final numbers when they land.

Printed (markdown): output SQNR in dB against the float reference over all 64 images (all
outputs' elements together), each configuration's gap to ORT (ORT minus nanoir: positive is
nanoir behind), the median gap, the issue's targets as PASS/FAIL; then per model, for the best
configuration, where the quantization error grows most (``nanoir.report`` rows in program
order: the largest fall of the SQNR against float below every earlier row's) and the row whose
own quantizer costs most (the lowest local SQNR). One thread everywhere.

    python benchmarks/bench_ptq.py [--models ResNet-18,CRNN] [--configs "absmax/trunc +bc"]
                                   [--size 64] [--nh] [--out ptq.md] [--jobs 2]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ptq_images import benchmark_images  # noqa: E402
from ptq_models import PTQ_MODELS, input_shape, make_ptq_model  # noqa: E402

BATCH = 16
"""Images per batch when calibrating and evaluating."""


@dataclass(frozen=True)
class Config:
    """A nanoir configuration: ``options`` passed to ``quantize``; ``needs`` the options it
    cannot run without; ``off`` options set (when this nanoir takes them) to keep the
    configuration what its name says whatever the defaults become."""

    name: str
    options: dict[str, Any]
    needs: tuple[str, ...] = ()
    off: dict[str, Any] = field(default_factory=dict)


_MSE = {"calibrator": "mse", "rounding": "half_even"}
CONFIGS = (
    Config("absmax/trunc", {"calibrator": "absmax"}, off={"bias_correction": False}),
    Config("mse/half_even", dict(_MSE), off={"bias_correction": False, "unsigned": "never"}),
    Config(
        "absmax/trunc +bc",
        {"calibrator": "absmax", "bias_correction": True},
        needs=("bias_correction",),
    ),
    Config(
        "mse/trunc +bc",
        {"calibrator": "mse", "bias_correction": True},
        needs=("bias_correction",),
    ),
    Config(
        "mse/half_even +unsigned",
        {**_MSE, "unsigned": "auto"},
        needs=("unsigned",),
        off={"bias_correction": False},
    ),
    Config(
        "mse/half_even +unsigned +bc",
        {**_MSE, "unsigned": "auto", "bias_correction": True},
        needs=("unsigned", "bias_correction"),
    ),
)
"""Every configuration the benchmark knows; those whose ``needs`` are missing print n/a."""

PROBES = {"bias_correction": True, "unsigned": "auto"}
"""The new options and a value to probe each with."""

TARGETS = (
    ("mse/half_even +unsigned +bc", "median gap <= 3 dB", 3.0, None),
    ("mse/trunc +bc", "median gap <= 4 dB, none > 8 dB behind", 4.0, 8.0),
)
"""Issue 20's targets: (configuration, text, median gap bound, largest gap bound); the second
is the defaults' (``mse``, ``trunc``, signed, bias correction)."""


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    """``10 log10(sum(ref²) / sum((value - ref)²))`` in float64; ``inf`` when exact."""
    reference = np.asarray(reference, np.float64)
    noise = float(np.sum((np.asarray(value, np.float64) - reference) ** 2))
    signal = float(np.sum(reference**2))
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal else -math.inf


def supported_options() -> dict[str, str]:
    """Which of :data:`PROBES` this nanoir's ``quantize`` takes: name -> "" if it does, else
    why not (quantize's own message), tried on a tiny network."""
    import torch

    import nanoir

    model = torch.nn.Sequential(torch.nn.Conv2d(2, 2, 1), torch.nn.ReLU()).eval()
    x = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32)
    folded = nanoir.compile_model(model, (torch.from_numpy(x),), stop="folded")
    found = {}
    for option, value in PROBES.items():
        try:
            nanoir.quantize(folded.clone(), [x], **{option: value})
            found[option] = ""
        except (nanoir.Error, TypeError, ValueError) as error:
            found[option] = str(error).splitlines()[0] if str(error) else type(error).__name__
    return found


def model_images(name: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The calibration and evaluation inputs of ``name``: images of its shape (a 2-D input
    ``[C, T]`` is a one-channel image, channel dim dropped)."""
    shape = input_shape(name, size)
    image = shape if len(shape) == 3 else (1, *shape)
    calibration, evaluation = benchmark_images(image)  # type: ignore[arg-type]
    return calibration.reshape(-1, *shape), evaluation.reshape(-1, *shape)


def batches(x: np.ndarray, size: int = BATCH) -> list[np.ndarray]:
    return [x[i : i + size] for i in range(0, len(x), size)]


def float_reference(model: Any, evaluation: np.ndarray) -> np.ndarray:
    """The torch module's outputs in float64."""
    import torch

    double = copy.deepcopy(model).double()
    with torch.no_grad():
        return np.concatenate(
            [double(torch.from_numpy(b).double()).numpy() for b in batches(evaluation)]
        )


class _Reader:
    """onnxruntime's CalibrationDataReader over the calibration batches."""

    def __init__(self, name: str, xs: list[np.ndarray]):
        self.feeds = iter([{name: x} for x in xs])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def _export(model: Any, example: Any, path: Path) -> None:
    """The float ONNX file: TorchScript exporter, opset 17, batch dim dynamic."""
    import torch

    torch.onnx.export(
        model,
        (example,),
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "n"}, "y": {0: "n"}},
    )


def ort_outputs(
    model: Any,
    calibration: np.ndarray,
    evaluation: np.ndarray,
    folder: Path,
    symmetric: bool = False,
) -> np.ndarray:
    """onnxruntime's quantize_static (QDQ, per-channel int8 weights, uint8 activations with
    a zero point, MinMax) of the exported model, run on the evaluation images; with
    ``symmetric``, int8 activations without zero point (as nanoir's signed codes, at a free
    scale)."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    ort.set_default_logger_severity(3)  # errors only: not every unused initializer it drops
    fp32, int8 = folder / "model.onnx", folder / "model.qdq.onnx"
    example = torch.from_numpy(calibration[:2])
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        _export(model, example, fp32)
    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's "consider pre-processing"
    quantize_static(
        str(fp32),
        str(int8),
        _Reader("x", batches(calibration)),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": symmetric},
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": b})[0] for b in batches(evaluation)])


def nanoir_outputs(program: Any, evaluation: np.ndarray) -> np.ndarray:
    import nanoir

    return np.concatenate([np.asarray(nanoir.run(program, b)[0]) for b in batches(evaluation)])


def nq_equals_nh(program: Any, x: np.ndarray) -> str:
    """ "yes" when the lowered (nh) program's outputs equal the nq program's bit for bit on
    ``x``, "NO" when not, "refused: ..." when lower-to-hw refuses."""
    import nanoir

    try:
        hw = nanoir.lower_to_hw(program.clone())
    except nanoir.Error as error:
        return "refused: " + str(error).splitlines()[-1][:80]
    want = nanoir.run(program, x)
    got = nanoir.run(hw, x)
    same = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(want, got))
    return "yes" if same else "NO"


@dataclass
class Worst:
    """Where the error grows most in one quantized program (``nanoir.report`` rows)."""

    drop_row: str
    drop_db: float
    """The largest fall of an activation's SQNR against float below the lowest of the
    activations before it in program order (the input's quantizer is where it starts)."""
    drop_to: float
    local_row: str
    local_db: float
    """The lowest SQNR of a fake-quant against its own input."""


def worst_layers(program: Any, evaluation: np.ndarray) -> Worst:
    import nanoir

    rows = nanoir.report(program, batches(evaluation)).rows
    acts = [r for r in rows if r.kind == "act" and math.isfinite(r.sqnr_vs_float)]
    drop, at, to = 0.0, acts[0].name if acts else "", acts[0].sqnr_vs_float if acts else math.nan
    floor = to
    for row in acts[1:]:
        if floor - row.sqnr_vs_float > drop:
            drop, at, to = floor - row.sqnr_vs_float, row.name, row.sqnr_vs_float
        floor = min(floor, row.sqnr_vs_float)
    local = min(rows, key=lambda r: r.sqnr)
    return Worst(at, drop, to, f"{local.name} ({local.kind})", local.sqnr)


@dataclass
class Result:
    name: str
    ort: float
    ort_symmetric: float
    """ORT with int8 symmetric activations (no zero point): what the sign bit costs it."""
    nanoir: dict[str, float | None]
    nh: dict[str, str]
    worst: Worst | None
    best: str
    seconds: float


def measure(
    name: str, size: int, configs: list[Config], found: dict[str, str], check_nh: bool
) -> Result:
    import torch

    import nanoir

    start = time.process_time()
    model = make_ptq_model(name)
    calibration, evaluation = model_images(name, size)
    reference = float_reference(model, evaluation)
    with tempfile.TemporaryDirectory() as folder:
        ort = sqnr_db(reference, ort_outputs(model, calibration, evaluation, Path(folder)))
        symmetric = ort_outputs(model, calibration, evaluation, Path(folder), symmetric=True)
        ort_symmetric = sqnr_db(reference, symmetric)
    folded = nanoir.compile_model(model, (torch.from_numpy(calibration[:2]),), stop="folded")
    scores: dict[str, float | None] = {}
    nh: dict[str, str] = {}
    programs: dict[str, Any] = {}
    for config in configs:
        if any(found.get(n) for n in config.needs):
            scores[config.name] = None
            continue
        options = {k: v for k, v in config.off.items() if found.get(k) == ""}
        options.update(config.options)
        program = folded.clone()
        nanoir.quantize(program, batches(calibration), **options)
        scores[config.name] = sqnr_db(reference, nanoir_outputs(program, evaluation))
        programs[config.name] = program
        if check_nh:
            nh[config.name] = nq_equals_nh(program, evaluation[:4])
    ran = {k: v for k, v in scores.items() if v is not None}
    best = max(ran, key=lambda k: ran[k])
    worst = worst_layers(programs[best], evaluation)
    return Result(name, ort, ort_symmetric, scores, nh, worst, best, time.process_time() - start)


def _db(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def table(results: list[Result], configs: list[Config], size: int) -> str:
    """The markdown report: SQNRs and gaps, medians, targets, worst layers."""
    import onnxruntime

    import nanoir

    names = [c.name for c in configs]
    lines = [
        f"nanoir {nanoir.__version__}, onnxruntime {onnxruntime.__version__}; images {size}x{size} "
        "(fixed shapes for the small nets); 32 calibration, 64 evaluation images; output SQNR "
        "(dB) against float torch in float64; ORT MinMax: uint8 activations with a zero point "
        "(the reference); ORT s8: int8 symmetric activations; gap = ORT MinMax - nanoir "
        "(positive: nanoir behind).",
        "",
        "| model | ORT MinMax | ORT s8 | " + " | ".join(f"{n} (gap)" for n in names) + " |",
        "|---|---:|---:|" + "---:|" * len(names),
    ]
    gaps: dict[str, list[float]] = {n: [] for n in names}
    for r in results:
        cells = []
        for n in names:
            s = r.nanoir.get(n)
            if s is None:
                cells.append("n/a")
                continue
            gaps[n].append(r.ort - s)
            cells.append(f"{s:.1f} ({r.ort - s:+.1f})")
        lines.append(
            f"| {r.name} | {r.ort:.1f} | {r.ort_symmetric:.1f} | " + " | ".join(cells) + " |"
        )
    medians = {n: statistics.median(g) if g else None for n, g in gaps.items()}
    lines.append(
        "| **median gap** | | | "
        + " | ".join("n/a" if medians[n] is None else f"{medians[n]:+.1f}" for n in names)
        + " |"
    )
    lines += ["", "Targets (issue 20 section 4):", ""]
    for config, text, median_bound, max_bound in TARGETS:
        g = gaps.get(config, [])
        if not g or len(g) != len(results):
            verdict = "n/a (configuration not run: option missing)"
        else:
            ok = statistics.median(g) <= median_bound and (max_bound is None or max(g) <= max_bound)
            verdict = (
                f"{'PASS' if ok else 'FAIL'} (median {statistics.median(g):+.1f} dB, "
                f"largest {max(g):+.1f} dB)"
            )
        lines.append(f"- `{config}`: {text}: {verdict}")
    if any(r.nh for r in results):
        lines += ["", "nq == nh (lower-to-hw, 4 images):", ""]
        for r in results:
            lines.append(f"- {r.name}: " + ", ".join(f"{k} {v}" for k, v in r.nh.items()))
    lines += [
        "",
        "Where the error grows, best configuration per model (`nanoir.report` on the 64 images):",
        "",
        "| model | best | largest fall of SQNR vs float | to dB | lowest own SQNR | dB | CPU s |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for r in results:
        w = r.worst
        assert w is not None
        lines.append(
            f"| {r.name} | {r.best} | {w.drop_row} (-{w.drop_db:.1f} dB) | {w.drop_to:.1f} | "
            f"{w.local_row} | {w.local_db:.1f} | {r.seconds:.0f} |"
        )
    return "\n".join(lines)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _measure(job: tuple[Any, ...]) -> Result:
    return measure(*job)


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated subset of: " + ", ".join(PTQ_MODELS))
    parser.add_argument(
        "--configs",
        help="comma-separated subset of the configurations: " + ", ".join(c.name for c in CONFIGS),
    )
    parser.add_argument("--size", type=int, default=64, help="image size (default 64)")
    parser.add_argument("--nh", action="store_true", help="also check nq == nh on 4 images")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="models measured at once, each in its own one-thread process (default 1)",
    )
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list(PTQ_MODELS)
    unknown = [n for n in names if n not in PTQ_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(PTQ_MODELS)}")

    import torch

    torch.set_num_threads(1)
    found = supported_options()
    for option, why in found.items():
        if why:
            emit(f"note: quantize({option}=...) is not available here ({why}): n/a")
    configs = list(CONFIGS)
    if args.configs:
        wanted = [c.strip() for c in args.configs.split(",")]
        configs = [c for c in CONFIGS if c.name in wanted]
        missing = sorted(set(wanted) - {c.name for c in configs})
        if missing:
            parser.error(f"unknown configuration(s) {', '.join(missing)}")
    results = []
    jobs = [(name, args.size, configs, found, args.nh) for name in names]
    if args.jobs > 1:
        pool = ProcessPoolExecutor(args.jobs, initializer=_one_thread)
        done: Any = pool.map(_measure, jobs)
    else:
        pool, done = None, map(_measure, jobs)
    for result in done:
        emit(
            f"{result.name}: ORT {result.ort:.1f} dB (s8 {result.ort_symmetric:.1f}), nanoir "
            + ", ".join(f"{k} {_db(v)}" for k, v in result.nanoir.items())
            + f" ({result.seconds:.0f} s CPU)"
        )
        results.append(result)
    if pool is not None:
        pool.shutdown()
    text = table(results, configs, args.size)
    emit("")
    emit(text)
    if args.out:
        args.out.write_text(text + "\n")
    return results


if __name__ == "__main__":
    main()
