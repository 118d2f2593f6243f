"""Quantization-aware training at 4 and 2 bits on 1-D keyword spotting, against Brevitas.

The task (tracker issue 24, section 3): ``kws_data.make_kws`` (synthetic tones and chirps as
40x64 log-mel-like features, 12 keywords), 5,000 examples split 4,000/1,000 per seed; the net
is three Conv1d(k=3)+BN+ReLU stages of 64 channels, the mean over time and a linear
classifier, trained in float (Adam 3e-3 with cosine decay, 15 epochs, batch 64) per seed. Then, for weight bits
4 and 2 and roundings trunc and half_even:

- nanoir PTQ: ``nanoir.qat.prepare(model, ..., weight_bits=b, rounding=r)`` and ``calibrate``
  (512 training examples), every other option at its default: the program ``quantize`` gives;
- nanoir QAT: the same, then ``nanoir.qat.train`` for 5 epochs (Adam, its default rate,
  batch 64, shuffled); the accuracy is ``nanoir.run(convert(qat))``'s, checked equal bit for bit
  to the QAT module's float64 eval output;
- Brevitas (when ``import brevitas`` works; it is not a nanoir dependency): the same float
  net as ``QuantConv1d``/``QuantLinear`` with per-channel power-of-two weight scales of b bits
  (every layer, first and last too), 8-bit power-of-two activations (input and every ReLU) and
  8-bit power-of-two biases, BN kept as torch's, the same float weights, 5 epochs of Adam at
  the same rate and batch; accuracy of its eval-mode forward. Brevitas rounds half to even; its
  figure stands in both rounding columns.

Prints one markdown table (mean of the seeds, then each seed). ``--options`` adds ``prepare``
options as JSON (experiments: ``'{"learner": "lsq"}'``); ``--skip brevitas,ptq`` leaves parts
out.

    python benchmarks/bench_qat_kws.py [--seeds 0,1,2] [--bits 4,2] [--options JSON]

Brevitas from a separate venv: ``--brevitas-python /tmp/brevitas-venv/bin/python`` runs its
part there (this file re-runs itself with ``--only-brevitas``) and says where the figure came
from. torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kws_data import BANDS, CLASSES, make_kws  # noqa: E402

ROUNDINGS = ("trunc", "half_even")
QAT_EPOCHS, FLOAT_EPOCHS, BATCH = 5, 15, 64
QAT_RATE = 1e-3  # nanoir.qat.train's default rate; Brevitas gets the same


def make_model(channels: int = 64):  # noqa: ANN201 - torch is imported lazily
    import torch
    from torch import nn

    class KwsNet(nn.Module):
        """Three Conv1d+BN+ReLU over time, the mean over time, a linear classifier."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = (
                nn.Conv1d(BANDS, channels, 3, padding=1),
                nn.BatchNorm1d(channels),
            )
            self.conv2, self.bn2 = (
                nn.Conv1d(channels, channels, 3, padding=1),
                nn.BatchNorm1d(channels),
            )
            self.conv3, self.bn3 = (
                nn.Conv1d(channels, channels, 3, padding=1),
                nn.BatchNorm1d(channels),
            )
            self.fc = nn.Linear(channels, CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.bn1(self.conv1(x)).relu()
            x = self.bn2(self.conv2(x)).relu()
            x = self.bn3(self.conv3(x)).relu()
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


def train_float(seed: int, x: np.ndarray, y: np.ndarray):  # noqa: ANN201
    import torch

    torch.manual_seed(seed)
    return fit(make_model(), x, y, seed, FLOAT_EPOCHS, 3e-3, cosine=True)


def nanoir_run(model, split, bits: int, rounding: str, epochs: int, seed: int, options: dict):  # noqa: ANN001
    """PTQ (epochs 0) or QAT accuracy of nanoir, checked bit for bit against the module."""
    import torch

    import nanoir
    import nanoir.qat

    x_train, y_train, x_test, y_test = split
    torch.manual_seed(seed)
    q = nanoir.qat.prepare(
        model,
        (torch.from_numpy(x_train[:2]),),
        weight_bits=bits,
        rounding=rounding,
        **options,
    )
    nanoir.qat.calibrate(q, [x_train[i : i + 128] for i in range(0, 512, 128)])
    if epochs:
        nanoir.qat.train(q, loader(x_train, y_train, seed), epochs=epochs)
    (logits,) = nanoir.run(nanoir.qat.convert(q), x_test)
    if not np.array_equal(logits, nanoir.qat.evaluate(q, x_test)):
        raise SystemExit("convert(qat) differs from the QAT module")
    return accuracy(logits, y_test)


# -- Brevitas ---------------------------------------------------------------------------------


def brevitas_model(model, bits: int):  # noqa: ANN001, ANN201
    """``model``'s float weights in Brevitas layers: per-channel power-of-two weight scales
    of ``bits`` bits, 8-bit power-of-two activations and biases."""
    import torch
    from brevitas import nn as qnn
    from brevitas.quant.fixed_point import (
        Int8ActPerTensorFixedPoint,
        Int8BiasPerTensorFixedPointInternalScaling,
        Int8WeightPerChannelFixedPoint,
        Uint8ActPerTensorFixedPoint,
    )
    from torch import nn

    class WeightPo2(Int8WeightPerChannelFixedPoint):
        bit_width = bits
        narrow_range = False  # nanoir's codes: -2**(b-1) .. 2**(b-1)-1 (-2..1 at 2 bits)

    wq = {"weight_quant": WeightPo2, "bias_quant": Int8BiasPerTensorFixedPointInternalScaling}

    class BrevitasKws(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = model.conv1.out_channels
            self.inp = qnn.QuantIdentity(
                act_quant=Int8ActPerTensorFixedPoint, return_quant_tensor=True
            )
            self.conv1 = qnn.QuantConv1d(BANDS, c, 3, padding=1, **wq)
            self.conv2 = qnn.QuantConv1d(c, c, 3, padding=1, **wq)
            self.conv3 = qnn.QuantConv1d(c, c, 3, padding=1, **wq)
            self.bn1, self.bn2, self.bn3 = (nn.BatchNorm1d(c) for _ in range(3))
            self.relu1, self.relu2, self.relu3 = (
                qnn.QuantReLU(act_quant=Uint8ActPerTensorFixedPoint, return_quant_tensor=True)
                for _ in range(3)
            )
            self.pool = qnn.QuantIdentity(
                act_quant=Int8ActPerTensorFixedPoint, return_quant_tensor=True
            )
            self.fc = qnn.QuantLinear(c, CLASSES, **wq)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.inp(x)
            x = self.relu1(self.bn1(self.conv1(x)))
            x = self.relu2(self.bn2(self.conv2(x)))
            x = self.relu3(self.bn3(self.conv3(x)))
            x = self.pool(x.value.mean(dim=2) if hasattr(x, "value") else x.mean(dim=2))
            out = self.fc(x)
            return out.value if hasattr(out, "value") else out

    net = BrevitasKws()
    net.load_state_dict(model.state_dict(), strict=False)
    return net


def brevitas_run(model, split, bits: int, seed: int) -> float:  # noqa: ANN001
    import torch

    x_train, y_train, x_test, y_test = split
    torch.manual_seed(seed)
    net = brevitas_model(model, bits)  # its scales start from the first batches' statistics
    fit(net, x_train, y_train, seed, QAT_EPOCHS, QAT_RATE)
    with torch.no_grad():
        return accuracy(net(torch.from_numpy(x_test)).numpy(), y_test)


def only_brevitas(seeds: list[int], bits: list[int]) -> dict[str, list[float]]:
    """Brevitas' accuracies per bits, trained from the same float nets (this process)."""
    out: dict[str, list[float]] = {}
    for seed in seeds:
        split = load_split(seed)
        model = train_float(seed, split[0], split[1])
        for b in bits:
            out.setdefault(str(b), []).append(brevitas_run(model, split, b, seed))
    return out


def seed_rows(
    seed: int, bits: list[int], skip: set[str], options: dict
) -> tuple[float, dict[tuple[int, str, str], float]]:
    """The float accuracy of ``seed``'s net and nanoir's PTQ and QAT accuracies by
    (bits, method, rounding)."""
    import torch

    torch.set_num_threads(1)
    split = load_split(seed)
    model = train_float(seed, split[0], split[1])
    with torch.no_grad():
        float_acc = accuracy(model(torch.from_numpy(split[2])).numpy(), split[3])
    rows = {}
    for b in bits:
        for rounding in ROUNDINGS:
            for label, epochs in (("PTQ", 0), ("QAT", QAT_EPOCHS)):
                if label.lower() not in skip:
                    rows[b, label, rounding] = nanoir_run(
                        model, split, b, rounding, epochs, seed, options
                    )
    return float_acc, rows


def pct(values: list[float]) -> str:
    per = " / ".join(f"{100 * v:.1f}" for v in values)
    return f"**{100 * np.mean(values):.2f}** ({per})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--bits", default="4,2")
    parser.add_argument("--options", default="{}", help="extra prepare options, JSON")
    parser.add_argument("--skip", default="", help="comma-separated: ptq, qat, brevitas")
    parser.add_argument("--brevitas-python", default=None, help="a python with brevitas")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel")
    parser.add_argument("--only-brevitas", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    bits = [int(b) for b in args.bits.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    options = json.loads(args.options)

    import torch

    torch.set_num_threads(1)
    if args.only_brevitas:
        print(json.dumps(only_brevitas(seeds, bits)))
        return 0

    brevitas: dict[str, list[float]] | None = None
    source = "not run"
    child = None
    if "brevitas" not in skip:
        if args.brevitas_python:  # runs alongside the nanoir part
            cmd = [args.brevitas_python, __file__, "--only-brevitas", "--seeds", args.seeds]
            child = subprocess.Popen(
                [*cmd, "--bits", args.bits],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        else:
            try:
                import brevitas as brevitas_module
            except ImportError:
                source = "brevitas is not importable (give --brevitas-python)"
            else:
                brevitas = only_brevitas(seeds, bits)
                source = f"brevitas {brevitas_module.__version__} in this process"

    t0 = time.perf_counter()
    work = [(seed, bits, skip, options) for seed in seeds]
    if args.jobs > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            results = pool.starmap(seed_rows, work)
    else:
        results = [seed_rows(*w) for w in work]
    floats = [r[0] for r in results]
    rows: dict[tuple[int, str, str], list[float]] = {}
    for _, seed_result in results:
        for key, acc in seed_result.items():
            rows.setdefault(key, []).append(acc)
    if child is not None:
        out, err = child.communicate()
        if child.returncode == 0:
            brevitas = json.loads(out.strip().splitlines()[-1])
            version = subprocess.run(
                [args.brevitas_python, "-c", "import brevitas; print(brevitas.__version__)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            source = f"brevitas {version} run by {args.brevitas_python}"
        else:
            source = f"failed in {args.brevitas_python}: {err.strip()[-300:]}"
    seconds = time.perf_counter() - t0
    print(f"seeds {seeds}; float (torch) {pct(floats)}; prepare options {options or 'defaults'}")
    print(f"Brevitas: {source}\n")
    print("| weight bits | method | trunc | half_even |\n|---|---|---|---|")
    for b in bits:
        for label in ("PTQ", "QAT"):
            if (b, label, "trunc") in rows:
                cells = [pct(rows[b, label, r]) for r in ROUNDINGS]
                print(f"| {b} | nanoir {label} | {cells[0]} | {cells[1]} |")
        if brevitas is not None:
            cell = pct(brevitas[str(b)])
            print(f"| {b} | Brevitas QAT (half_even) | {cell} | {cell} |")
    print(f"\nnanoir part: {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
