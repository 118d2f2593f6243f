"""nanoir's reach: which third-party networks become integer programs, compiled as a new user would.

The corpus: the networks of ``reach_models.py`` (timm CNNs and transformers, torchaudio
models, written in plain torch), the 14 of ``ptq_models.py``, DenseNet-121 of
``compile_models.py``, ``nanoir.testing.MAGIK_MODELS`` (the manual's CRNN in every variant,
slim) plus the manual's CRNN at full width, and, as "blocks", ``OP_PROOF_MODELS``,
``PROOF_MODELS`` and the small Magik proof nets; then the second corpus,
``reach_models_more/`` (families the first lacks: more vision transformers and conv nets,
detectors, speech and audio, text), added to measure whether the reach generalises
(``--corpus more`` selects it; its first results, before any fix, are in
``reach_results.md``). Random weights (timm's initialisation where
the source builds it so), realistic BatchNorm statistics, small inputs (64x64 images, 1 s of
audio at 8 kHz or less).

Per network, the stages of ``nanoir.compile_model(model, (x,), calibration, stop="nh")`` with
every default, run one by one as ``compile_model`` runs them (``from_torch``, ``fold-bn``,
``quantize``, ``lower-to-hw``) so that the first refusal is attributed to its stage; then the
nq program and the nh program run on 4 held-out inputs (nq == nh bit for bit?) and the nh
output's SQNR against the float torch module in float64. Every network that quantizes is
also lowered with ``host=true`` (what the engine cannot run stays on the host): the
partitioned program runs against nq (bit for bit?), with its host ops and the engine's share
of the MACs and of the estimated time (``nanoir.estimate`` on the example target). Calibration: 2 batches of 4 (images:
``ptq_images``'s smooth images; audio: seeded tones in noise; features: smooth noise).
A non-``nanoir.Error`` exception is recorded as a crash (a traceback a user would see).

    python benchmarks/bench_reach.py [--only ResNet-10t,M5] [--corpus first|more]
                                     [--jobs 2] [--out reach.md] [--timeout 300]

``--out benchmarks/reach_results.md`` replaces only the measured part of that file (between
its ``<!-- measured -->`` markers), keeping the hand-written analysis.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCH = 4
"""Inputs per batch: the export example, each calibration batch and the evaluation batch."""
CALIBRATION_BATCHES = 2
BN_SEED = 2
"""The seed of the inputs that set the second corpus' BatchNorm statistics (the measured
inputs are drawn with seed 1)."""
BEGIN, END = "<!-- measured -->", "<!-- /measured -->"


@dataclass(frozen=True)
class Entry:
    """A corpus network: group (``timm``, ``torchaudio``, ``Magik``, ``small``, ``block``;
    the second corpus adds ``torchvision``, ``edge``, ``detection``, ``audio``, ``text``),
    where it comes from, how to build it, its input shape without the batch dim, the input
    kind (``image``, ``audio``, ``features``, ``ids``, ``tokens``) and the corpus it belongs
    to (``first`` or ``more``)."""

    name: str
    group: str
    source: str
    build: Callable[[], Any]
    shape: tuple[int, ...]
    kind: str
    corpus: str = "first"


def _reach(name: str) -> Callable[[], Any]:
    def build() -> Any:
        from reach_models import make_reach_model

        return make_reach_model(name)

    return build


def _more(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import torch
        from reach_models_more import make_more_model

        data = inputs(corpus()[name], 8, seed=BN_SEED)  # BN statistics: not the measured data
        return make_more_model(name, data=torch.from_numpy(data))

    return build


def _ptq(name: str) -> Callable[[], Any]:
    def build() -> Any:
        from ptq_models import make_ptq_model

        return make_ptq_model(name)

    return build


def _densenet() -> Any:
    import torch
    from compile_models import DenseNet121
    from ptq_models import timm_init

    from nanoir.testing import randomize_batch_norm

    torch.manual_seed(0)
    return randomize_batch_norm(timm_init(DenseNet121()), 0).eval()


def _magik(name: str) -> Callable[[], Any]:
    def build() -> Any:
        from nanoir.testing import make_magik_model

        return make_magik_model(name)

    return build


def _magik_full() -> Any:
    import torch

    from nanoir.testing import randomize_batch_norm
    from nanoir.testing.magik_models import MagikCRNN

    torch.manual_seed(0)
    return randomize_batch_norm(MagikCRNN("lstm", "zero", 10, 1.0), 0).eval()


def _block(registry: str, name: str) -> Callable[[], Any]:
    def build() -> Any:
        import nanoir.testing as t

        if registry == "op":
            return t.make_op_proof_model(name)
        return t.make_proof_model(name)

    return build


_KIND = {  # ptq_models' non-image inputs
    "KWS-1D": "features",
    "KWS-2D": "features",
}
_GROUP = {  # ptq_models' sources
    "SENet": "small",
    "ReLU6-MobileNetV2Stack": "small",
    "KWS-1D": "small",
    "KWS-2D": "small",
    "CRNN": "Magik",
}


def corpus() -> dict[str, Entry]:
    """Every network of the benchmark, by name, in table order."""
    from ptq_models import PTQ_MODELS, input_shape
    from reach_models import REACH_MODELS
    from reach_models_more import MORE_MODELS

    from nanoir.testing.magik_models import MAGIK_INPUTS, MAGIK_MODELS
    from nanoir.testing.op_proof_models import OP_PROOF_MODELS
    from nanoir.testing.proof_models import PROOF_MODELS

    entries: list[Entry] = []
    for name in PTQ_MODELS:
        group = _GROUP.get(name, "timm")
        kind = _KIND.get(name, "image")
        entries.append(Entry(name, group, "ptq_models.py", _ptq(name), input_shape(name, 64), kind))
    entries.append(
        Entry("DenseNet-121", "timm", "compile_models.py", _densenet, (3, 64, 64), "image")
    )
    for name, spec in REACH_MODELS.items():
        group = spec.source.split()[0]
        kind = "features"
        if len(spec.shape) == 3 and spec.shape[0] == 3:
            kind = "image"
        elif spec.shape[0] == 1 and len(spec.shape) == 2:
            kind = "audio"
        entries.append(Entry(name, group, spec.source, _reach(name), spec.shape, kind))
    for name in MAGIK_MODELS:
        shape = MAGIK_INPUTS[name][1:]
        group = "Magik" if name.startswith("MagikCRNN") else "block"
        kind = "ids" if name == "TextCNN" else "image"
        entries.append(Entry(name, group, "MAGIK_MODELS (slim)", _magik(name), shape, kind))
    entries.append(
        Entry("MagikCRNN-lstm-full", "Magik", "Magik manual CRNN", _magik_full, (3, 32, 128),
              "image")
    )  # fmt: skip
    for name, more in MORE_MODELS.items():
        entries.append(
            Entry(name, more.group, more.source, _more(name), more.shape, more.kind, "more")
        )
    for name in OP_PROOF_MODELS:
        shape = tuple(_example_shape(_block("op", name)))
        entries.append(Entry(name, "block", "OP_PROOF_MODELS", _block("op", name), shape, "auto"))
    for name in PROOF_MODELS:
        shape = tuple(_example_shape(_block("proof", name)))
        entries.append(Entry(name, "block", "PROOF_MODELS", _block("proof", name), shape, "auto"))
    return {e.name: e for e in entries}


def _example_shape(build: Callable[[], Any]) -> tuple[int, ...]:
    return tuple(build().make_example_input(1).shape[1:])


def inputs(entry: Entry, count: int, seed: int) -> np.ndarray:
    """``count`` inputs of ``entry``: smooth images (ImageNet-normalised for 3 channels),
    tones in noise for audio, smooth noise for features, token ids for ``ids``, and for
    ``tokens`` ids in ``[1, VOCAB)`` with each row's end padded by 0 from a random length
    between half and all of it."""
    from ptq_images import smooth_images

    rng = np.random.default_rng(seed)
    shape = entry.shape
    if entry.kind == "ids":
        from nanoir.testing.magik_models import TEXT_VOCAB

        return rng.integers(0, TEXT_VOCAB, (count, *shape)).astype(np.int64)
    if entry.kind == "tokens":
        from reach_models_more import VOCAB

        ids = rng.integers(1, VOCAB, (count, *shape))
        lengths = rng.integers(shape[-1] // 2, shape[-1] + 1, count)
        ids[np.arange(shape[-1]) >= lengths[:, None]] = 0
        return ids.astype(np.int64)
    if entry.kind == "image" or (entry.kind == "auto" and len(shape) == 3):
        return smooth_images(count, shape, seed)  # type: ignore[arg-type]
    if entry.kind == "audio":
        t = np.arange(shape[-1]) / 8000.0
        x = np.zeros((count, *shape))
        for _ in range(3):
            f = rng.uniform(80, 2000, (count, 1, 1))
            a = rng.uniform(0.05, 0.3, (count, 1, 1))
            x += a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi, (count, 1, 1)))
        return (x + 0.02 * rng.standard_normal(x.shape)).astype(np.float32)
    x = rng.standard_normal((count, *shape))  # features: smoothed along the last dim
    kernel = np.ones(3) / math.sqrt(3)
    x = np.apply_along_axis(lambda v: np.convolve(v, kernel, "same"), -1, x)
    return x.astype(np.float32)


@dataclass
class Result:
    name: str
    group: str
    source: str
    reached: str
    """The last stage that succeeded: ``-`` (none), ``nf``, ``folded``, ``nq``, ``nh``."""
    refusal: str
    """The first refusal (``Type: message``, shortened), or ``""``."""
    crash: bool
    """True when the refusal is not a ``nanoir.Error`` (a traceback for the user)."""
    same: str
    """nq == nh on the evaluation batch: ``yes``, ``NO``, or ``""`` when not reached or the
    run failed (then ``refusal`` says why)."""
    sqnr: float | None
    batch1: str
    """The nh program on the first input alone gives the batch run's first rows: ``yes``,
    ``NO`` or ``""`` (not run). The programs are imported with a dynamic batch, as
    ``compile_model`` does, and calibrated on batches of 4."""
    compile_seconds: float
    """CPU seconds of the four stages (to the refusal when refused)."""
    stage_seconds: dict[str, float]
    """CPU seconds per stage run: ``nf`` (torch.export and import), ``fold``, ``nq``, ``nh``."""
    ops: int
    corpus: str = "first"
    """``first`` (the networks ops were added for) or ``more`` (``reach_models_more``)."""
    host: str = ""
    """``lower-to-hw{host=true}`` (issue 34 §3) on the quantized program: ``yes`` when the
    partitioned program ran and equals nq bit for bit, ``NO`` when it differs, ``""`` when
    quantize was not reached, else the first refusal or crash (shortened)."""
    host_ops: int = 0
    """Ops the partition left on the host."""
    engine_macs: float | None = None
    """The engine's share of the MACs under ``host=true`` (``nanoir.estimate``)."""
    engine_time: float | None = None
    """The engine's share of the estimated time on the example target (its numbers are an
    example, not a vendor's)."""


def sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    reference = np.asarray(reference, np.float64)
    noise = float(np.sum((np.asarray(value, np.float64) - reference) ** 2))
    signal_ = float(np.sum(reference**2))
    if noise == 0:
        return math.inf
    return 10.0 * math.log10(signal_ / noise) if signal_ else -math.inf


def _flat(outputs: Any) -> np.ndarray:
    if isinstance(outputs, (tuple, list)):
        return np.concatenate([_flat(o) for o in outputs])
    return np.asarray(outputs.detach() if hasattr(outputs, "detach") else outputs).ravel()


def _short(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("supported ATen ops")]
    key = [
        line for line in lines[1:] if line.startswith(("- aten.", "reason:", "error:"))
    ]  # the frontend's op list and reasons, a parser's error line
    key = list(dict.fromkeys(key))  # the same op at several places: once
    text = " / ".join(lines[:1] + key[:2] if key else lines[-2:])
    text = text.replace("|", "\\|")
    name = type(error).__name__
    return f"{name}: {text[:240]}" + ("..." if len(text) > 240 else "")


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def measure(name: str, timeout: int = 300) -> Result:
    import copy

    import torch
    from nanoir.lowering.fold_bn import FoldBnPass

    import nanoir
    from nanoir.context import make_context
    from nanoir.frontend import from_torch
    from nanoir.pipeline import paused_gc

    entry = corpus()[name]
    torch.manual_seed(0)
    model = entry.build()
    data = inputs(entry, BATCH * (CALIBRATION_BATCHES + 1), seed=1)
    calibration = [data[i * BATCH : (i + 1) * BATCH] for i in range(CALIBRATION_BATCHES)]
    evaluation = data[CALIBRATION_BATCHES * BATCH :]
    example = torch.from_numpy(calibration[0])
    reached, refusal, crash, same, sqnr, batch1 = "-", "", False, "", None, ""
    module = None
    seconds, ops = 0.0, 0
    stages: dict[str, float] = {}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    start = clock = time.process_time()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.process_time()
        stages[stage], clock = now - clock, now

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with paused_gc():  # compile_model's stages, one by one
                module = from_torch(model, (example,))
                reached = "nf"
                lap("nf")
                ops = sum(1 for _ in module.walk()) - 2  # the nf ops (not module, func)
                FoldBnPass().apply(make_context(), module)
                reached = "folded"
                lap("fold")
                nanoir.quantize(module, calibration)
                reached = "nq"
                lap("nq")
                hw = nanoir.lower_to_hw(module.clone())
                reached = "nh"
                lap("nh")
            seconds = time.process_time() - start
            want = _flat(nanoir.run(module, evaluation))
            got = _flat(nanoir.run(hw, evaluation))
            same = "yes" if np.array_equal(want, got) else "NO"
            double = copy.deepcopy(model).double()
            with torch.no_grad():
                x = torch.from_numpy(evaluation)
                ids = entry.kind in ("ids", "tokens")
                reference = _flat(double(x if ids else x.double()))
            sqnr = sqnr_db(reference, got)
            one = nanoir.run(hw, evaluation[:1])
            four = nanoir.run(hw, evaluation)
            rows = all(
                np.array_equal(np.ravel(a), np.ravel(b)[: np.size(a)]) for a, b in zip(one, four)
            )
            batch1 = "yes" if rows and len(one) == len(four) else "NO"
    except _Timeout:
        refusal = f"timeout after {timeout} s"
        crash = True
    except nanoir.Error as error:
        refusal = _short(error)
        if "_Timeout" in str(error):  # the alarm went off inside nanoir.run, which wraps it
            refusal, crash = f"timeout after {timeout} s (running)", True
    except Exception as error:  # noqa: BLE001 -- a traceback a user would see: a defect
        refusal, crash = _short(error), True
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if not seconds:  # refused: the time until the refusal
        seconds = time.process_time() - start
    host = (
        _host_run(module, evaluation, timeout) if reached in ("nq", "nh") else ("", 0, None, None)
    )
    return Result(name, entry.group, entry.source, reached, refusal, crash, same, sqnr, batch1, seconds,
                  stages, ops, entry.corpus, *host)  # fmt: skip


def _host_run(
    module: Any, evaluation: np.ndarray, timeout: int
) -> tuple[str, int, float | None, float | None]:
    """``lower-to-hw{host=true}`` on the quantized program, run against nq: (result, host
    ops, the engine's share of MACs and of the estimated time on the example target)."""
    from nanoir.dialects.functions import find_function
    from nanoir.lowering.hw.host import host_ops

    import nanoir

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mixed = nanoir.lower_to_hw(module.clone(), host=True)
            kept = len(host_ops(find_function(mixed, None)))
            cost = nanoir.estimate(mixed, nanoir.Target.example())
            want = _flat(nanoir.run(module, evaluation))
            got = _flat(nanoir.run(mixed, evaluation))
        same = "yes" if np.array_equal(want, got) else "NO"
        return same, kept, cost.engine_share_macs, cost.engine_share_time
    except _Timeout:
        return f"timeout after {timeout} s", 0, None, None
    except Exception as error:  # noqa: BLE001 -- recorded as the host run's refusal or crash
        crash = "" if isinstance(error, nanoir.Error) else "CRASH "
        return crash + _short(error), 0, None, None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _share(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


_STAGE_MARK = {"nf": ("nf",), "folded": ("nf",), "nq": ("nf", "nq"), "nh": ("nf", "nq", "nh")}


def _marks(r: Result) -> tuple[str, str, str]:
    done = _STAGE_MARK.get(r.reached, ())
    first_missing = True
    cells = []
    for stage in ("nf", "nq", "nh"):
        if stage in done:
            cells.append("yes")
        elif first_missing:
            cells.append("**no**")
            first_missing = False
        else:
            cells.append("")
    return cells[0], cells[1], cells[2]


def integer(r: Result) -> bool:
    """Became an integer program: lowered to nh, nq == nh on the evaluation batch."""
    return r.reached == "nh" and r.same == "yes"


def _commit() -> str:
    """The repository's commit, ``+ edits`` when the working tree differs from it."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return head + (" + uncommitted edits" if dirty else "")


def _defaults() -> str:
    """quantize's defaults as this nanoir has them."""
    from nanoir.lowering.quantize import QuantConfig

    c = QuantConfig()
    rounding = getattr(c.rounding, "name", str(c.rounding)).lower()
    return (
        f"{c.weight_bits}-bit weights per channel, {c.act_bits}-bit activations, "
        f"{c.calibrator}, {rounding}, unsigned {c.unsigned}"
    )


def _stages(r: Result) -> str:
    s = r.stage_seconds
    return "/".join(f"{s[k]:.0f}" for k in ("nf", "nq", "nh") if k in s)


def table(results: list[Result]) -> str:
    import torch

    import nanoir

    lines = [
        f"nanoir {nanoir.__version__} at {_commit()}, torch {torch.__version__}; "
        f"`compile_model` defaults ({_defaults()}, bias correction), "
        f"{CALIBRATION_BATCHES} calibration batches "
        f"of {BATCH}, nq and nh run on {BATCH} held-out inputs. SQNR: nh output vs the float "
        "torch module in float64 (dB). Compile: CPU seconds of `compile_model`'s four stages "
        "(export+import / fold / quantize / lower; to the refusal when refused). batch 1: the nh "
        "program run on one input gives the 4-input run's first rows.",
        "",
        "| network | group | source | nf | nq | nh | nq == nh | SQNR dB | batch 1 | compile s (nf/q/nh) | nf ops "
        "| first refusal | host=true: nq == mixed | host ops | engine MACs / time |",
        "|---|---|---|:-:|:-:|:-:|:-:|---:|:-:|---:|---:|---|:-:|---:|---:|",
    ]
    for r in results:
        nf, nq, nh = _marks(r)
        sq = "" if r.sqnr is None else ("inf" if math.isinf(r.sqnr) else f"{r.sqnr:.1f}")
        why = ("CRASH " if r.crash else "") + r.refusal
        lines.append(
            f"| {r.name} | {r.group} | {r.source} | {nf} | {nq} | {nh} | {r.same} | {sq} | {r.batch1} | "
            f"{r.compile_seconds:.0f} ({_stages(r)}) | {r.ops} | {why} | {r.host} | "
            f"{r.host_ops if r.host else ''} | "
            f"{_share(r.engine_macs)}{' / ' if r.engine_macs is not None else ''}"
            f"{_share(r.engine_time)} |"
        )
    nets = [r for r in results if r.group != "block"]
    blocks = [r for r in results if r.group == "block"]
    lines += [
        "",
        f"**{sum(map(integer, nets))} of {len(nets)} networks become integer programs** "
        f"(lower to nh with nq == nh bit for bit); blocks: {sum(map(integer, blocks))} of "
        f"{len(blocks)}.",
    ]
    imported = [r for r in nets if r.reached != "-"]
    lines.append(
        f"**host=true: {sum(r.host == 'yes' for r in imported)} of {len(imported)} networks that "
        "import run end to end** (quantize, `lower_to_hw(host=True)`, run; the partitioned "
        "program equals nq bit for bit), "
        f"{sum(r.host_ops > 0 for r in imported)} of them with ops on the host. Engine share: "
        "of the MACs, and of the time `nanoir.estimate` gives on the example target "
        "(`examples/targets/nanoengine_example.toml`, example numbers)."
    )
    groups: dict[str, list[Result]] = {}
    for r in nets:
        groups.setdefault(r.group, []).append(r)
    lines.append(
        "By group: "
        + ", ".join(f"{g} {sum(map(integer, rs))}/{len(rs)}" for g, rs in groups.items())
        + "."
    )
    corpora = {c: [r for r in nets if r.corpus == c] for c in ("first", "more")}
    if all(corpora.values()):
        first, more = corpora["first"], corpora["more"]
        lines.append(
            f"By corpus: first {sum(map(integer, first))}/{len(first)}, second "
            f"(reach_models_more, not tuned for) {sum(map(integer, more))}/{len(more)}."
        )
    return "\n".join(lines)


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _measure(job: tuple[str, int]) -> Result:
    return measure(*job)


def write_out(path: Path, text: str) -> None:
    """Replace the measured part of ``path`` (between the markers), or write it whole."""
    block = f"{BEGIN}\n{text}\n{END}"
    if path.exists():
        old = path.read_text()
        if BEGIN in old and END in old:
            head, rest = old.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            path.write_text(head + block + tail)
            return
    path.write_text(block + "\n")


def main(argv: list[str] | None = None, emit: Callable[[str], None] = print) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated subset of the networks")
    parser.add_argument(
        "--corpus",
        choices=("first", "more"),
        help="only the first corpus or only the second (reach_models_more); default both",
    )
    parser.add_argument("--list", action="store_true", help="print the networks and exit")
    parser.add_argument("--jobs", type=int, default=1, help="networks at once (default 1)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per network")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    entries = corpus()
    if args.corpus:
        entries = {n: e for n, e in entries.items() if e.corpus == args.corpus}
    if args.list:
        for e in entries.values():
            emit(f"{e.name}\t{e.group}\t{e.source}\t{e.shape}\t{e.corpus}")
        return []
    names = args.only.split(",") if args.only else list(entries)
    unknown = [n for n in names if n not in entries]
    if unknown:
        parser.error(f"unknown network(s) {', '.join(unknown)}; --list lists them")
    jobs = [(name, args.timeout) for name in names]
    if args.jobs > 1:
        pool = ProcessPoolExecutor(args.jobs, initializer=_one_thread)
        done: Any = pool.map(_measure, jobs)
    else:
        pool, done = None, map(_measure, jobs)
    results = []
    for r in done:
        sq = "" if r.sqnr is None else f" SQNR {r.sqnr:.1f} dB"
        emit(
            f"{r.name}: reached {r.reached}, nq==nh {r.same or '-'}{sq}, "
            f"{r.compile_seconds:.1f} s CPU ({_stages(r)}) {('CRASH ' if r.crash else '') + r.refusal}"
            f"; host=true {r.host or '-'} ({r.host_ops} host ops, engine "
            f"{_share(r.engine_macs) or '-'} of MACs, {_share(r.engine_time) or '-'} of time)"
        )
        results.append(r)
    if pool is not None:
        pool.shutdown()
    text = table(results)
    emit("")
    emit(text)
    if args.out:
        write_out(args.out, text)
    return results


if __name__ == "__main__":
    main()
