"""Quantization-aware training at 4 and 2 bits on 1-D keyword spotting, against Brevitas.

The task (tracker issues 24 §3 and 30 §9): ``kws_data.make_kws`` (synthetic tones and chirps
as 40x64 log-mel-like features, 12 keywords), 5,000 examples split 4,000/1,000 per seed; the
net is ``--blocks`` Conv1d(k=3)+BN+ReLU stages of 64 channels (3: 33k parameters; 4: 45k, the
shape of the keyword spotter issue 30 measured on), the mean over time and a linear
classifier, trained in float (Adam 3e-3 with cosine decay, 15 epochs, batch 64) per seed and
cached (``--cache``). Then, for each weight width, layer configuration, rounding and variant:

- layer configurations (``--layers``): ``all``, every weight at b bits (first and last layers
  too); ``firstlast``, the first conv's and the classifier's weights at 8 bits (the usual
  deployment; nanoir: the rules ``conv1.weight=8`` and ``fc.weight=8``);
- nanoir PTQ: ``nanoir.qat.prepare(model, ..., weight_bits=b, rounding=r)`` and ``calibrate``
  (512 training examples), every other option at its default: the program ``quantize`` gives;
- nanoir QAT: the same, then ``nanoir.qat.train`` for ``--epochs`` epochs (Adam, its default
  rate, batch 64, shuffled); the accuracy is ``nanoir.run(convert(qat))``'s, checked equal bit
  for bit to the QAT module's float64 eval output;
- Brevitas (when ``import brevitas`` works; it is not a nanoir dependency): the same float
  net as ``QuantConv1d``/``QuantLinear`` with per-channel power-of-two weight scales of the
  same widths, 8-bit power-of-two activations (input and every ReLU) and 8-bit power-of-two
  biases, BN kept as torch's, the same float weights, epochs of Adam at the same rate and
  batch; accuracy of its eval-mode forward. Brevitas rounds half to even; its figure stands in
  both rounding columns.

``--variants`` (JSON, ``{name: {"options": {...}, "low_bits": {...}}}``) runs nanoir once per
variant: ``options`` are extra ``prepare`` options (``{"learner": "lsq"}``), ``low_bits`` sets
the constants of :mod:`nanoir.qat.low_bits` (the 2-bit defaults: ``CALIBRATOR``, ``LEARNER``,
``RATE``) in the worker before preparing: the experiments that choose those defaults.

Prints one markdown table per layer configuration (mean of the seeds, each seed in brackets).

    python benchmarks/bench_qat_kws.py [--seeds 0,1,2] [--bits 4,2] [--layers all,firstlast]
        [--blocks 3] [--epochs 5] [--roundings trunc,half_even] [--variants JSON] [--jobs N]

Brevitas from a separate venv: ``--brevitas-python /tmp/brevitas-venv/bin/python`` runs its
part there (this file re-runs itself with ``--only-brevitas``) and says where the figure came
from. torch runs on one thread per process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kws_data import BANDS, CLASSES, make_kws  # noqa: E402

ROUNDINGS = ("trunc", "half_even")
QAT_EPOCHS, FLOAT_EPOCHS, BATCH, CHANNELS = 5, 15, 64, 64
QAT_RATE = 1e-3  # nanoir.qat.train's default rate; Brevitas gets the same
LAYERS = {"all": (), "firstlast": ("conv1.weight", "fc.weight")}
"""Layer configurations: the weights that keep 8 bits whatever the width under test."""
KEEP_BITS = 8


def make_model(blocks: int = 3, channels: int = CHANNELS):  # noqa: ANN201 - torch is lazy
    import torch
    from torch import nn

    class KwsNet(nn.Module):
        """``blocks`` Conv1d+BN+ReLU over time, the mean over time, a linear classifier."""

        def __init__(self) -> None:
            super().__init__()
            for i in range(1, blocks + 1):
                setattr(
                    self,
                    f"conv{i}",
                    nn.Conv1d(BANDS if i == 1 else channels, channels, 3, padding=1),
                )
                setattr(self, f"bn{i}", nn.BatchNorm1d(channels))
            self.blocks = blocks
            self.fc = nn.Linear(channels, CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for i in range(1, self.blocks + 1):
                x = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)).relu()
            return self.fc(x.mean(dim=2))

    return KwsNet()


def load_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 5,000 examples (data seed 0) split 4,000/1,000 by ``seed``."""
    x, y = make_kws(5000, seed=0)
    order = np.random.default_rng(seed).permutation(len(x))
    return x[order[:4000]], y[order[:4000]], x[order[4000:]], y[order[4000:]]


def loader(x: np.ndarray, y: np.ndarray, seed: int):  # noqa: ANN201
    import torch

    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    return torch.utils.data.DataLoader(
        data, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )


def fit(model, x, y, seed: int, epochs: int, lr: float, cosine: bool = False):  # noqa: ANN001, ANN201
    """Adam over ``model``'s parameters, cross entropy, batch 64, shuffled by ``seed``; with
    ``cosine`` the rate decays to 0 along a half cosine."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    batches = loader(x, y, seed)
    steps = epochs * len(batches)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1)) if cosine else None
    model.train()
    for _ in range(epochs):
        for xb, yb in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            if schedule is not None:
                schedule.step()
    return model.eval()


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((np.asarray(logits).argmax(1) == y).mean())


def float_model(seed: int, blocks: int, cache: str | None, split=None):  # noqa: ANN001, ANN201
    """``seed``'s float net, trained here or read from ``cache`` (a folder; written there)."""
    import torch

    split = split or load_split(seed)
    path = None if not cache else Path(cache) / f"kws_float_b{blocks}_s{seed}.pt"
    model = make_model(blocks)
    if path is not None and path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    torch.manual_seed(seed)
    model = fit(make_model(blocks), split[0], split[1], seed, FLOAT_EPOCHS, 3e-3, cosine=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(model.state_dict(), tmp)
        os.replace(tmp, path)
    return model


def layer_rules(layers: str) -> tuple[str, ...]:
    return tuple(f"{name}={KEEP_BITS}" for name in LAYERS[layers])


def nanoir_run(
    model, split, bits: int, layers: str, rounding: str, epochs: int, seed: int, variant: dict
):  # noqa: ANN001, E501
    """PTQ (epochs 0) or QAT accuracy of nanoir, checked bit for bit against the module."""
    import torch

    import nanoir
    import nanoir.qat
    import nanoir.qat.low_bits as low_bits

    saved = {k: getattr(low_bits, k) for k in variant.get("low_bits", {})}
    for k, v in variant.get("low_bits", {}).items():
        setattr(low_bits, k, v)
    try:
        options = dict(variant.get("options", {}))
        rules = tuple(options.pop("rules", ())) + layer_rules(layers)
        x_train, y_train, x_test, y_test = split
        torch.manual_seed(seed)
        q = nanoir.qat.prepare(
            model,
            (torch.from_numpy(x_train[:2]),),
            weight_bits=bits,
            rounding=rounding,
            rules=rules,
            **options,
        )
        nanoir.qat.calibrate(q, [x_train[i : i + 128] for i in range(0, 512, 128)])
        if epochs:
            nanoir.qat.train(q, loader(x_train, y_train, seed), epochs=epochs)
        (logits,) = nanoir.run(nanoir.qat.convert(q), x_test)
        if not np.array_equal(logits, nanoir.qat.evaluate(q, x_test)):
            raise SystemExit("convert(qat) differs from the QAT module")
        return accuracy(logits, y_test)
    finally:
        for k, v in saved.items():
            setattr(low_bits, k, v)


# -- Brevitas ---------------------------------------------------------------------------------


def brevitas_model(model, bits: int, layers: str):  # noqa: ANN001, ANN201
    """``model``'s float weights in Brevitas layers: per-channel power-of-two weight scales
    of ``bits`` bits (8 for the layers ``layers`` keeps), 8-bit power-of-two activations and
    biases."""
    import torch
    from brevitas import nn as qnn
    from brevitas.quant.fixed_point import (
        Int8ActPerTensorFixedPoint,
        Int8BiasPerTensorFixedPointInternalScaling,
        Int8WeightPerChannelFixedPoint,
        Uint8ActPerTensorFixedPoint,
    )
    from torch import nn

    def weight_quant(b: int) -> dict:
        class WeightPo2(Int8WeightPerChannelFixedPoint):
            bit_width = b
            narrow_range = False  # nanoir's codes: -2**(b-1) .. 2**(b-1)-1 (-2..1 at 2 bits)

        return {"weight_quant": WeightPo2, "bias_quant": Int8BiasPerTensorFixedPointInternalScaling}

    def wq(name: str) -> dict:
        return weight_quant(KEEP_BITS if name in LAYERS[layers] else bits)

    blocks = model.blocks

    class BrevitasKws(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = model.conv1.out_channels
            self.inp = qnn.QuantIdentity(
                act_quant=Int8ActPerTensorFixedPoint, return_quant_tensor=True
            )
            for i in range(1, blocks + 1):
                cin = BANDS if i == 1 else c
                setattr(
                    self, f"conv{i}", qnn.QuantConv1d(cin, c, 3, padding=1, **wq(f"conv{i}.weight"))
                )
                setattr(self, f"bn{i}", nn.BatchNorm1d(c))
                setattr(
                    self,
                    f"relu{i}",
                    qnn.QuantReLU(act_quant=Uint8ActPerTensorFixedPoint, return_quant_tensor=True),
                )
            self.pool = qnn.QuantIdentity(
                act_quant=Int8ActPerTensorFixedPoint, return_quant_tensor=True
            )
            self.fc = qnn.QuantLinear(c, CLASSES, **wq("fc.weight"))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.inp(x)
            for i in range(1, blocks + 1):
                x = getattr(self, f"relu{i}")(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(x)))
            x = self.pool(x.value.mean(dim=2) if hasattr(x, "value") else x.mean(dim=2))
            out = self.fc(x)
            return out.value if hasattr(out, "value") else out

    net = BrevitasKws()
    net.load_state_dict(model.state_dict(), strict=False)
    return net


def brevitas_run(model, split, bits: int, layers: str, seed: int, epochs: int) -> float:  # noqa: ANN001
    import torch

    x_train, y_train, x_test, y_test = split
    torch.manual_seed(seed)
    net = brevitas_model(model, bits, layers)  # its scales start from the first batches' statistics
    fit(net, x_train, y_train, seed, epochs, QAT_RATE)
    with torch.no_grad():
        return accuracy(net(torch.from_numpy(x_test)).numpy(), y_test)


# -- running ----------------------------------------------------------------------------------


def job(seed: int, kind: str, key: tuple, blocks: int, cache: str | None, epochs: int) -> tuple:
    """One measurement: ``kind`` "float" (key ()), "nanoir" (key (bits, layers, rounding,
    method, variant name, variant)) or "brevitas" (key (bits, layers)); returns
    ``(seed, kind, key, accuracy, CPU seconds)``."""
    import torch

    torch.set_num_threads(1)
    t0 = time.process_time()
    split = load_split(seed)
    model = float_model(seed, blocks, cache, split)
    if kind == "float":
        with torch.no_grad():
            acc = accuracy(model(torch.from_numpy(split[2])).numpy(), split[3])
    elif kind == "brevitas":
        bits, layers = key
        acc = brevitas_run(model, split, bits, layers, seed, epochs)
    else:
        bits, layers, rounding, method, _, variant = key
        n = epochs if method == "QAT" else 0
        acc = nanoir_run(model, split, bits, layers, rounding, n, seed, variant)
    return seed, kind, key, acc, time.process_time() - t0


def _job(args: tuple) -> tuple:
    return job(*args)


def run_jobs(work: list[tuple], jobs: int) -> list[tuple]:
    """Every job's result; each is also printed to stderr as it ends (a long run's partial
    results)."""
    out = []
    if jobs > 1 and len(work) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for result in pool.imap_unordered(_job, work):
                out.append(result)
                print("done", json.dumps(result[:4], default=str), file=sys.stderr, flush=True)
        return out
    for w in work:
        out.append(job(*w))
        print("done", json.dumps(out[-1][:4], default=str), file=sys.stderr, flush=True)
    return out


def pct(values: list[float]) -> str:
    per = " / ".join(f"{100 * v:.1f}" for v in values)
    return f"**{100 * np.mean(values):.2f}** ({per})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--bits", default="4,2")
    parser.add_argument("--layers", default="all,firstlast", help="all, firstlast")
    parser.add_argument("--roundings", default=",".join(ROUNDINGS))
    parser.add_argument("--blocks", type=int, default=3, help="Conv1d+BN+ReLU stages")
    parser.add_argument("--epochs", type=int, default=QAT_EPOCHS, help="QAT epochs")
    parser.add_argument("--variants", default='{"defaults": {}}', help="nanoir variants, JSON")
    parser.add_argument("--skip", default="", help="comma-separated: ptq, qat, brevitas")
    parser.add_argument("--brevitas-python", default=None, help="a python with brevitas")
    parser.add_argument("--cache", default="/tmp/nanoir_bench_qat_kws", help="float nets")
    parser.add_argument("--jobs", type=int, default=1, help="processes")
    parser.add_argument("--only-brevitas", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    bits = [int(b) for b in args.bits.split(",")]
    layers = [c for c in args.layers.split(",") if c]
    roundings = [r for r in args.roundings.split(",") if r]
    skip = set(filter(None, args.skip.split(",")))
    variants = json.loads(args.variants)
    unknown = sorted(set(layers) - set(LAYERS))
    if unknown:
        parser.error(f"--layers: unknown {unknown} (choose from {sorted(LAYERS)})")
    common = (args.blocks, args.cache, args.epochs)
    brevitas_work = [
        (seed, "brevitas", (b, c), *common) for seed in seeds for b in bits for c in layers
    ]

    if args.only_brevitas:
        out = run_jobs(brevitas_work, args.jobs)
        print(json.dumps([[s, list(k), a, t] for s, _, k, a, t in out]))
        return 0

    # the float nets first (one process per seed), so that the workers read them from the cache
    floats = run_jobs([(seed, "float", (), *common) for seed in seeds], min(args.jobs, len(seeds)))
    brevitas: dict[tuple, list[float]] = {}
    source, child = "not run", None
    work = []
    if "brevitas" not in skip:
        if args.brevitas_python:  # runs alongside the nanoir part, in its own processes
            cmd = [args.brevitas_python, __file__, "--only-brevitas", *sys.argv[1:], "--jobs", "1"]
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        else:
            try:
                import brevitas as brevitas_module
            except ImportError:
                source = "brevitas is not importable (give --brevitas-python)"
            else:
                work += brevitas_work
                source = f"brevitas {brevitas_module.__version__} in this process"
    methods = [m for m in ("PTQ", "QAT") if m.lower() not in skip]
    work += [
        (seed, "nanoir", (b, c, r, m, name, v), *common)
        for b in bits
        for c in layers
        for name, v in variants.items()
        for m in methods
        for r in roundings
        for seed in seeds
    ]
    t0 = time.perf_counter()
    results = run_jobs(work, args.jobs)
    seconds = time.perf_counter() - t0
    cpu = sum(r[4] for r in results)
    rows: dict[tuple, dict[int, float]] = {}
    for seed, kind, key, acc, _ in results:
        if kind == "brevitas":
            brevitas.setdefault(key, {})[seed] = acc
        else:
            rows.setdefault(key[:5], {})[seed] = acc
    if child is not None:
        out, err = child.communicate()
        if child.returncode == 0:
            for seed, key, acc, t in json.loads(out.strip().splitlines()[-1]):
                brevitas.setdefault(tuple(key), {})[seed] = acc
                cpu += t
            version = subprocess.run(
                [args.brevitas_python, "-c", "import brevitas; print(brevitas.__version__)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            source = f"brevitas {version} run by {args.brevitas_python}"
        else:
            source = f"failed in {args.brevitas_python}: {err.strip()[-300:]}"

    def cell(values: dict[int, float]) -> str:
        return pct([values[s] for s in seeds])

    float_acc = [a for _, _, _, a, _ in floats]
    print(
        f"seeds {seeds}; {args.blocks} conv blocks; {args.epochs} QAT epochs; "
        f"float (torch) {pct(float_acc)}"
    )
    print(f"Brevitas: {source}")
    for c in layers:
        kept = ", ".join(LAYERS[c]) or "none"
        print(f"\n### layers {c} (kept at {KEEP_BITS} bits: {kept})\n")
        print("| weight bits | method | " + " | ".join(roundings) + " |")
        print("|---|---|" + "---|" * len(roundings))
        for b in bits:
            for name in variants:
                for m in methods:
                    if (b, c, roundings[0], m, name) in rows:
                        label = f"nanoir {m}" + (
                            "" if list(variants) == ["defaults"] else f" {name}"
                        )
                        cells = [cell(rows[b, c, r, m, name]) for r in roundings]
                        print(f"| {b} | {label} | " + " | ".join(cells) + " |")
            if (b, c) in brevitas:
                v = cell(brevitas[b, c])
                print(
                    f"| {b} | Brevitas QAT (half_even) | " + " | ".join([v] * len(roundings)) + " |"
                )
    print(f"\n{seconds:.0f} s wall, {cpu:.0f} s CPU in the workers ({args.jobs} processes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
