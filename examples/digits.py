"""nanoir's main job on real data: a trained CNN all the way to an integer streaming program.

scikit-learn's handwritten digits (8x8 images, shipped inside scikit-learn: nothing is
downloaded) train a small CNN in torch with a fixed seed; nanoir imports it, folds batch
norm, quantizes it (8-bit, and a mixed 4-bit/1-bit weight configuration), lowers it to
integer nh ops, plans streaming along the image rows, exports the NanoEngine `.ne` text, and
runs the integer program whole and streamed on the held-out split. Two more configurations
are fine-tuned with quantization-aware training (`nanoir.qat`: calibrate from PTQ, train,
convert): the 4/1-bit one (15 epochs), and 1-bit weights everywhere but the first conv (45
epochs); their nh programs must give exactly the QAT model's outputs.

    python examples/digits.py            # prints one table; exits non-zero if a check fails
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits as float32 [N, 1, 8, 8] in [0, 1], split 75/25 with a fixed seed."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.75 * len(x))
    train, test = order[:cut], order[cut:]
    return x[train], y[train], x[test], y[test]


def make_model():  # noqa: ANN201 - torch is imported lazily
    import torch.nn as nn

    class DigitsNet(nn.Module):
        """conv-bn-relu x2, max pool, conv-bn-relu, linear: 8x8 digits to 10 classes."""

        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.conv3, self.bn3 = nn.Conv2d(16, 16, 3), nn.BatchNorm2d(16)
            self.pool = nn.MaxPool2d(2)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):  # noqa: ANN001, ANN202
            x = self.bn1(self.conv1(x)).relu()
            x = self.pool(self.bn2(self.conv2(x)).relu())
            x = self.bn3(self.conv3(x)).relu()
            return self.fc(x.flatten(1))

    return DigitsNet()


def train(x: np.ndarray, y: np.ndarray, seed: int, epochs: int):  # noqa: ANN201
    import torch

    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(xt), generator=gen).split(64):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    return model.eval()


@dataclass(frozen=True)
class QATRecipe:
    """One QAT configuration: ``nanoir.qat.prepare`` options, then ``train`` at ``rate``
    (Adam, batch 64, shuffled) for ``epochs``, with ``cosine`` decay of every rate."""

    weights: tuple[tuple[str, int], ...]
    """(regex over weight names, bits); other weights 8-bit."""
    learner: str
    rate: float
    cosine: bool
    epochs: int

    def options(self, rounding: str = "trunc", learner: str | None = None) -> dict:
        from nanoir.lowering.quantize import QuantRule

        return {
            "calibrator": "mse",
            "rounding": rounding,
            "learner": learner or self.learner,
            "rules": tuple(QuantRule(p, bits=b, kind="weight") for p, b in self.weights),
        }


FOUR_ONE = ((r"^conv\d\.weight$", 4), (r"^fc\.weight$", 1))
"""4-bit conv weights, a 1-bit classifier."""
ONE_BIT = ((r"^conv1\.weight$", 4), (r"^(conv[23]|fc)\.weight$", 1))
"""4-bit first conv, 1-bit weights everywhere else."""

QAT_RECIPES = {
    # Learned (LSQ) exponents, the rates decaying along a half cosine. The 1-bit weights need
    # a higher rate and more steps: 15 epochs reached 98.2-98.4% (3 seeds), 45 epochs 99.0%.
    # NanoEngine's EMA exponents reach 99.2% (trunc) but 98.7% (half_even) on 4/1, and 97.8%
    # on 1-bit (benchmarks/bench_qat.py, BENCHMARKS.md).
    "4/1-bit QAT": QATRecipe(FOUR_ONE, "lsq", 2e-3, True, 15),
    "1-bit QAT": QATRecipe(ONE_BIT, "lsq", 6e-3, True, 45),
}


def qat_finetune(  # noqa: ANN201 - torch is imported lazily
    model,  # noqa: ANN001
    x: np.ndarray,
    y: np.ndarray,
    recipe: QATRecipe,
    *,
    seed: int,
    rounding: str = "trunc",
    learner: str | None = None,
    rate: float | None = None,
    epochs: int | None = None,
):
    """prepare, calibrate (mse, 512 training images), train: the QAT module and the
    seconds of ``train`` alone."""
    import torch

    import nanoir.qat

    qat_model = nanoir.qat.prepare(
        model, (torch.from_numpy(x[:2]),), **recipe.options(rounding, learner)
    )
    nanoir.qat.calibrate(qat_model, [x[i : i + 128] for i in range(0, 512, 128)])
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = torch.utils.data.DataLoader(
        data, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    t0 = time.perf_counter()
    nanoir.qat.train(
        qat_model,
        loader,
        epochs=recipe.epochs if epochs is None else epochs,
        lr=recipe.rate if rate is None else rate,
        cosine=recipe.cosine,
    )
    return qat_model, time.perf_counter() - t0


@dataclass
class Row:
    level: str
    accuracy: float
    note: str = ""


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((np.argmax(logits, axis=1) == y).mean())


def weight_bytes(hw_module) -> int:  # noqa: ANN001
    """Bytes of the integer weights and biases when packed at their bit widths."""
    from nanoir.dialects import nh
    from xdsl.dialects.builtin import TensorType

    total = 0
    for op in hw_module.walk():
        if isinstance(op, nh.ConstantOp):
            t = op.result.type
            assert isinstance(t, TensorType)
            bits = t.get_element_type().width.data
            total += (int(np.prod(t.get_shape())) * bits + 7) // 8
    return total


def _elements(shape: tuple[int, ...]) -> int:
    """Values in one batch element of a cache (the batch dim is -1)."""
    return int(np.prod([d for d in shape if d > 0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument(
        "--qat-epochs", type=int, default=None, help="QAT epochs (default: each recipe's)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("digits_out"),
        help="where to write the .mlir and .ne files",
    )
    args = parser.parse_args(argv)

    import torch

    # One thread: the net is tiny, and on a shared 2-core machine torch's second (spinning)
    # thread made training 10-30x slower whenever another process held a core.
    torch.set_num_threads(1)
    from nanoir.lowering.fold_bn import FoldBnPass

    import nanoir

    x_train, y_train, x_test, y_test = load_data(args.seed)
    t0 = time.perf_counter()
    model = train(x_train, y_train, args.seed, args.epochs)
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(x_test)).numpy()
    rows = [Row("torch float", accuracy(torch_logits, y_test), f"trained in {train_s:.1f} s")]

    t0 = time.perf_counter()
    float_module = nanoir.from_torch(model, (torch.from_numpy(x_train[:2]),))
    FoldBnPass().apply(nanoir.make_context(), float_module)
    (nf_logits,) = nanoir.run(float_module, x_test)
    rows.append(Row("nf (float32)", accuracy(nf_logits, y_test)))
    calibration = [x_train[i : i + 128] for i in range(0, 512, 128)]

    configs: dict[str, dict | QATRecipe] = {
        "8-bit": {},
        # 4-bit conv weights, a 1-bit classifier; MSE-optimal exponents matter at these widths.
        "4/1-bit": QAT_RECIPES["4/1-bit QAT"].options(),
        **QAT_RECIPES,
    }
    failures: list[str] = []
    compile_s = time.perf_counter() - t0
    qat_s = 0.0
    for label, options in configs.items():
        t0 = time.perf_counter()
        qat_model = None
        if isinstance(options, QATRecipe):
            qat_model, _ = qat_finetune(
                model, x_train, y_train, options, seed=args.seed, epochs=args.qat_epochs
            )
            q = nanoir.qat.convert(qat_model)
            seconds = time.perf_counter() - t0
            epochs = options.epochs if args.qat_epochs is None else args.qat_epochs
            qat_s += seconds
            t0 += seconds  # QAT time is reported apart from the compile time
        else:
            q = float_module.clone()
            nanoir.quantize(q, calibration, **options)
        (nq_logits,) = nanoir.run(q, x_test)
        hw = nanoir.lower_to_hw(q.clone())
        hw.verify()
        # Stream along the image rows (dim 2), one row per step, all 8 columns at once.
        plan = nanoir.stream_plan(hw, mem_dim=2, steps=[(2, 1), (3, 8)])
        compile_s += time.perf_counter() - t0
        # Float inputs are quantized as the hw program's inputs say; outputs are exact reals.
        (hw_logits,) = nanoir.run(hw, x_test)
        (streamed,) = nanoir.stream(hw, [x_test], mem_dim=2, step=1)
        same = np.array_equal(hw_logits, nq_logits)
        same_streamed = np.array_equal(streamed, hw_logits)
        largest = max(plan.caches.values(), key=lambda c: _elements(c.shape))
        if qat_model is not None:
            qat_logits = nanoir.qat.evaluate(qat_model, x_test)  # float64, eval mode
            same_qat = np.array_equal(qat_logits, hw_logits)
            rows.append(
                Row(
                    f"torch {label}",
                    accuracy(qat_logits, y_test),
                    f"{epochs} epochs in {seconds:.1f} s; nh "
                    f"{'identical' if same_qat else 'DIFFERS'}",
                )
            )
            if not same_qat:
                failures.append(f"{label}: nh outputs differ from the QAT model's")
        rows.append(Row(f"nq {label}", accuracy(nq_logits, y_test)))
        rows.append(
            Row(
                f"nh {label}",
                accuracy(hw_logits, y_test),
                f"{'identical to nq' if same else 'DIFFERS from nq'}; "
                f"weights {weight_bytes(hw)} B packed",
            )
        )
        rows.append(
            Row(
                f"nh {label} streamed",
                accuracy(streamed, y_test),
                f"{'identical to whole' if same_streamed else 'DIFFERS from whole'}; "
                f"largest cache {largest.tensor_name} {list(largest.shape)} "
                f"({_elements(largest.shape)} values)",
            )
        )
        if not same:
            failures.append(f"{label}: nh outputs differ from nq")
        if not same_streamed:
            failures.append(f"{label}: streamed nh outputs differ from the whole-tensor run")
        if label == "8-bit" and rows[0].accuracy - rows[-2].accuracy > 0.01:
            failures.append("8-bit accuracy is more than 1 point below float")
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"digits_{label.replace('/', '_').replace(' ', '_')}"
        stem.with_suffix(".mlir").write_text(str(hw))
        nanoir.save(q, stem.with_suffix(".ne"))  # the NanoEngine Q-level program

    write_pictures(args.out, float_module, calibration, x_test, configs["4/1-bit"])
    width = max(len(r.level) for r in rows)
    print(f"{'level'.ljust(width)}  accuracy  notes")
    for r in rows:
        print(f"{r.level.ljust(width)}  {100 * r.accuracy:7.2f}%  {r.note}")
    print(
        f"compile time (import, fold-bn, quantize, lower, stream-plan; all configs): "
        f"{compile_s:.2f} s; QAT (prepare, calibrate, train, convert): {qat_s:.1f} s; "
        f"programs written to {args.out}/"
    )
    for f in failures:
        print(f"CHECK FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


def write_pictures(out: Path, float_module, calibration, x_test, options: dict) -> None:  # noqa: ANN001
    """The 4/1-bit program's pictures in ``out``: its quantization report on the held-out
    split as a figure (``digits_report.png``: SQNR, saturation and exponents per layer; needs
    matplotlib, in the examples extra) and its streamed integer program's op graph
    (``digits.svg``, when Graphviz's ``dot`` is installed)."""
    import shutil

    from nanoir.lowering.stream_plan import StreamPlanPass

    import nanoir

    q = float_module.clone()
    nanoir.quantize(q, calibration, **options)
    out.mkdir(parents=True, exist_ok=True)
    rep = nanoir.report(q, [x_test[i : i + 128] for i in range(0, len(x_test), 128)])
    try:
        rep.plot(out / "digits_report.png", title="digits, 4/1-bit PTQ: per-layer error")
        print(f"quantization report drawn to {out / 'digits_report.png'}")
    except nanoir.Error as e:  # matplotlib missing: say so, the checks above still count
        print(f"no report figure: {e}", file=sys.stderr)
    if shutil.which("dot") is not None:
        hw = nanoir.lower_to_hw(q)
        StreamPlanPass(mem_dim=2, steps="2:1,3:8").apply(nanoir.make_context(), hw)
        nanoir.draw(hw, out / "digits.svg")
        print(f"streamed integer program drawn to {out / 'digits.svg'}")


if __name__ == "__main__":
    sys.exit(main())
