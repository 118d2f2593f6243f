"""Quantization-aware training on the digits main job: the figures of tracker issue 12.

The net, data, split and QAT recipes are `examples/digits.py`'s (its `train`, `load_data`,
`QAT_RECIPES` and `qat_finetune`), per training seed (default 0, 1, 2: the split and the
float training both follow the seed). One run prints markdown tables of:

- float: the torch net's accuracy per seed and the mean;
- PTQ: `nanoir.quantize` of the BN-folded net with each configuration (4/1: 4-bit convs and
  1-bit fc; 1-bit: 4-bit conv1, 1-bit conv2, conv3 and fc), calibrator (absmax, mse) and
  rounding (trunc, half_even), on 512 training images;
- QAT: each recipe in both roundings (prepare, calibrate with mse, train, convert); the
  accuracy is that of `nanoir.run(convert(qat))`, checked equal bit for bit to the QAT
  module's float64 eval output; train seconds per seed (`nanoir.qat.train` alone);
- learners: each recipe (trunc) with `ema` and with `lsq` exponents, all else equal;
- the seconds of 15 QAT epochs (the 4/1 recipe's `train`, per seed).

    python benchmarks/bench_qat.py [--seeds 0,1,2] [--skip ptq,learners]

torch runs on 1 thread, as in `examples/digits.py` (the float nets depend on the thread count).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import digits  # noqa: E402

CONFIGS = {"4/1": digits.QAT_RECIPES["4/1-bit QAT"], "1-bit": digits.QAT_RECIPES["1-bit QAT"]}
ROUNDINGS = ("trunc", "half_even")


def pct(values: list[float]) -> str:
    """``mean (s0 / s1 / s2)`` in percent."""
    per = " / ".join(f"{100 * v:.1f}" for v in values)
    return f"**{100 * np.mean(values):.2f}** ({per})"


def qat_accuracy(qat_model, x: np.ndarray, y: np.ndarray) -> float:  # noqa: ANN001
    """Accuracy of the converted nq program, checked against the QAT module bit for bit."""
    import nanoir
    import nanoir.qat

    (logits,) = nanoir.run(nanoir.qat.convert(qat_model), x)
    if not np.array_equal(logits, nanoir.qat.evaluate(qat_model, x)):
        raise SystemExit("convert(qat) differs from the QAT module")
    return digits.accuracy(logits, y)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--float-epochs", type=int, default=8)
    parser.add_argument("--skip", default="", help="comma-separated: ptq, qat, learners")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    skip = set(filter(None, args.skip.split(",")))

    import torch
    from nanoir.lowering.fold_bn import FoldBnPass

    import nanoir

    torch.set_num_threads(1)
    nets = {}
    floats: list[float] = []
    for seed in seeds:
        x_train, y_train, x_test, y_test = digits.load_data(seed)
        model = digits.train(x_train, y_train, seed, args.float_epochs)
        with torch.no_grad():
            floats.append(digits.accuracy(model(torch.from_numpy(x_test)).numpy(), y_test))
        nets[seed] = (model, x_train, y_train, x_test, y_test)
    print(f"seeds {seeds}; float (torch) {pct(floats)}\n")

    if "ptq" not in skip:
        print("| configuration | calibrator | trunc | half_even |\n|---|---|---|---|")
        for label, recipe in CONFIGS.items():
            for calibrator in ("absmax", "mse"):
                cells = []
                for rounding in ROUNDINGS:
                    accs = []
                    for seed in seeds:
                        model, x_train, _, x_test, y_test = nets[seed]
                        module = nanoir.from_torch(model, (torch.from_numpy(x_train[:2]),))
                        FoldBnPass().apply(nanoir.make_context(), module)
                        options = {**recipe.options(rounding), "calibrator": calibrator}
                        options.pop("learner")
                        calibration = [x_train[i : i + 128] for i in range(0, 512, 128)]
                        nanoir.quantize(module, calibration, **options)
                        (logits,) = nanoir.run(module, x_test)
                        accs.append(digits.accuracy(logits, y_test))
                    cells.append(pct(accs))
                print(f"| {label} | {calibrator} | {cells[0]} | {cells[1]} |")
        print()

    train_seconds: dict[tuple[str, str], list[float]] = {}
    if "qat" not in skip:
        print(
            "| configuration | rounding | learner | rate (Adam) | epochs | PTQ start | after QAT "
            "| train s per seed |\n|---|---|---|---|---|---|---|---|"
        )
        for label, recipe in CONFIGS.items():
            for rounding in ROUNDINGS:
                starts, accs, secs = [], [], []
                for seed in seeds:
                    model, x_train, y_train, x_test, y_test = nets[seed]
                    start, _ = digits.qat_finetune(
                        model, x_train, y_train, recipe, seed=seed, rounding=rounding, epochs=0
                    )
                    starts.append(qat_accuracy(start, x_test, y_test))
                    qat_model, seconds = digits.qat_finetune(
                        model, x_train, y_train, recipe, seed=seed, rounding=rounding
                    )
                    accs.append(qat_accuracy(qat_model, x_test, y_test))
                    secs.append(seconds)
                train_seconds[label, rounding] = secs
                rate = f"{recipe.rate:g}{', cosine' if recipe.cosine else ''}"
                print(
                    f"| {label} | {rounding} | {recipe.learner} | {rate} | {recipe.epochs} | "
                    f"{100 * np.mean(starts):.2f} | {pct(accs)} | "
                    f"{' / '.join(f'{s:.1f}' for s in secs)} |"
                )
        print()

    if "learners" not in skip:
        print(
            "| configuration (trunc) | learner | rate (Adam) | epochs | after QAT "
            "| train s per seed |\n|---|---|---|---|---|---|"
        )
        for label, recipe in CONFIGS.items():
            for learner in ("ema", "lsq"):
                accs, secs = [], []
                for seed in seeds:
                    model, x_train, y_train, x_test, y_test = nets[seed]
                    qat_model, seconds = digits.qat_finetune(
                        model, x_train, y_train, recipe, seed=seed, learner=learner
                    )
                    accs.append(qat_accuracy(qat_model, x_test, y_test))
                    secs.append(seconds)
                rate = f"{recipe.rate:g}{', cosine' if recipe.cosine else ''}"
                print(
                    f"| {label} | {learner} | {rate} | {recipe.epochs} | {pct(accs)} | "
                    f"{' / '.join(f'{s:.1f}' for s in secs)} |"
                )
        print()

    secs = train_seconds.get(("4/1", "trunc"))
    if secs is None:
        secs = []
        for seed in seeds:
            model, x_train, y_train, _, _ = nets[seed]
            _, seconds = digits.qat_finetune(
                model, x_train, y_train, CONFIGS["4/1"], seed=seed, epochs=15
            )
            secs.append(seconds)
    elif CONFIGS["4/1"].epochs != 15:
        secs = [s * 15 / CONFIGS["4/1"].epochs for s in secs]
    print(
        f"15 QAT epochs (4/1, trunc, `nanoir.qat.train`): "
        f"{' / '.join(f'{s:.1f}' for s in secs)} s per seed (mean {np.mean(secs):.1f} s); "
        f"at {time.strftime('%H:%M')}, load average "
        f"{' '.join(f'{v:.1f}' for v in __import__('os').getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
