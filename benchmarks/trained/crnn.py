"""A CRNN with a bidirectional LSTM trained here with CTC: the Magik manual's front end
(``nanoir.testing.magik_models.MagikCRNN``, ``rnn="lstm"``) at half width (``width=0.5``: 128
channels into the LSTM, 128 hidden units each way) reading codes of digits and capital letters
(``text_lines.CODE_ALPHABET``) from rendered text lines. Half width because the full one
(256) had not left CTC's plateau after 300 steps with the warm-up below (140 CPU s) and would
not reach a useful accuracy within the budget; half width leaves it after ~250 steps.

Two geometries (:data:`GEOMETRIES`):

- ``wide``: 3x32x256 lines, the last two stride-2 convs (``conv8``, ``conv10``) made stride
  (2, 1), so the width is divided by 8 and the LSTM runs over T = 32 columns; codes of 4-10
  characters;
- ``manual``: the manual's own 3x32x128, T = 4: each step sees a 32-pixel column, and four
  steps read at most four labels (two equal neighbours need a blank between them), so its
  codes have 1-3 characters drawn two spaces apart (about one character per column).

The network's output is ``[N * T, classes]``, a softmax over the classes of each column
(:class:`CTCReader`; the manual's head is a sigmoid per class, which 8-bit codes tie).
Training reads the logits before it (``fc2``'s output, through a hook) and applies CTC to
their log-softmax (class 0 is the blank); greedy decoding takes the argmax per column.

Training: Adam on lines drawn fresh each step (one seed), gradients clipped, the rate decayed
over the last third; a fixed number of steps, so the weights do not depend on the machine's
speed (a CPU budget of :data:`BUDGET` seconds stops it early, and the record says so). CTC alone
sat on its plateau (every column blank, loss ~3.8 per character) for 800+ steps of 16 lines
here, more than the budget allows at full width; so the first ``warm_steps`` add a framewise
cross-entropy: the renderer knows where each character's centre lands, which gives each
column its character (blank elsewhere). After that, CTC alone. The weights are cached
(``crnn-<geometry>.pt`` in the cache folder) with the CPU seconds and the accuracy reached on
held-out lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanoir.testing.magik_models import MagikCRNN
from trained.text_lines import CODE_ALPHABET, code_line

__all__ = [
    "BUDGET",
    "GEOMETRIES",
    "Geometry",
    "build_crnn",
    "code_set",
    "frame_labels",
    "trained_crnn",
]


@dataclass(frozen=True)
class Geometry:
    name: str
    height: int
    width: int
    steps_per_column: tuple[int, int]
    """Strides (height, width) of ``conv8`` and ``conv10`` (the manual's: 2, 2)."""
    lengths: tuple[int, int]
    """The codes' lengths, inclusive."""
    spacing: int
    """Spaces drawn between a code's characters."""
    train_steps: int
    warm_steps: int
    """Steps with the framewise cross-entropy added to CTC."""
    batch: int = 16
    lr: float = 2e-3
    channels: float = 0.5
    """MagikCRNN's ``width`` (its channel scale)."""


GEOMETRIES = {
    "wide": Geometry("wide", 32, 256, (2, 1), (4, 10), 0, train_steps=2000, warm_steps=300),
    "manual": Geometry("manual", 32, 128, (2, 2), (1, 3), 2, train_steps=2500, warm_steps=300),
}
"""The two CRNNs; ``train_steps`` chosen to keep each within 10 CPU minutes here."""

BUDGET = 600.0
"""CPU seconds a training may take (issue 30: at most 10 CPU minutes)."""

CLASSES = len(CODE_ALPHABET) + 1
"""Blank (0) and the alphabet."""


class CTCReader(MagikCRNN):
    """MagikCRNN with CTC's output: a softmax over the classes of each column, where the
    manual's head has a sigmoid per class. Trained with CTC, several classes of a column have
    large logits; their sigmoids all sit near 1, where 8-bit codes tie them, and the argmax of
    a tie is the first class, the blank (measured with the sigmoid head on the T = 4 geometry:
    19% of strings equal at 21.9 dB, onnxruntime 43% at 37.9 dB). The body is MagikCRNN's
    forward for the LSTM; only the last line differs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv0(self.bn_in(x))
        m1 = self.pool(x)
        x = torch.cat([m1, self.conv1(m1)], dim=1)
        x = self.conv4(self.unpool(self.conv3(self.conv2(x))))
        m2 = self.pool(x)
        x = self.prelu(self.bn1(m2 + self.conv5(m2)))
        x = self.conv10(self.conv9(self.conv8(self.conv7(self.conv6(x)))))  # [N, C, 1, T]
        seq = self.rnn(x.squeeze(2).transpose(1, 2))[0]  # [N, T, C]
        y = self.fc2(self.bn_fc(self.fc1(seq.reshape(-1, self.hidden))))
        return torch.softmax(y, dim=-1)


def build_crnn(geometry: Geometry) -> Any:
    """The manual's MagikCRNN (LSTM, ``geometry.channels``) with CTC's softmax head
    (:class:`CTCReader`) and ``geometry``'s strides on conv8 and conv10 (set on the modules:
    MagikCRNN takes no stride argument)."""
    model = CTCReader(rnn="lstm", classes=CLASSES, width=geometry.channels)
    model.conv8[0].stride = geometry.steps_per_column
    model.conv10[0].stride = geometry.steps_per_column
    return model


def code_set(geometry: Geometry, count: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``count`` code lines ``[count, 3, H, W]`` and their codes."""
    rng = np.random.default_rng(seed)
    pairs = [
        code_line(rng, geometry.height, geometry.width, geometry.lengths, geometry.spacing)
        for _ in range(count)
    ]
    return np.stack([p[0] for p in pairs]), [p[1] for p in pairs]


def frame_labels(codes: list[str], centers: list[np.ndarray], width: int, steps: int) -> Any:
    """``[N, T]`` class per column: a character's class at the column its centre falls in,
    blank (0) elsewhere (a later character wins a shared column)."""
    import torch

    labels = np.zeros((len(codes), steps), np.int64)
    for n, (code, xs) in enumerate(zip(codes, centers)):
        columns = np.clip((xs * steps / width).astype(int), 0, steps - 1)
        labels[n, columns] = [CODE_ALPHABET.index(c) + 1 for c in code]
    return torch.from_numpy(labels)


def _encode(codes: list[str]) -> tuple[Any, Any]:
    import torch

    targets = [CODE_ALPHABET.index(c) + 1 for code in codes for c in code]
    return torch.tensor(targets), torch.tensor([len(c) for c in codes])


def decode_codes(columns: np.ndarray) -> list[str]:
    """Greedy CTC decoding of ``[N, T, classes]`` scores into codes."""
    from trained.measures import ctc_greedy

    return ["".join(CODE_ALPHABET[i - 1] for i in ctc_greedy(row, blank=0)) for row in columns]


def _train(geometry: Geometry, seed: int, log: Any) -> tuple[Any, float, int]:
    import torch

    torch.manual_seed(seed)
    model = build_crnn(geometry)
    captured: dict[str, Any] = {}
    model.fc2.register_forward_hook(lambda _m, _i, out: captured.__setitem__("logits", out))
    optimizer = torch.optim.Adam(model.parameters(), lr=geometry.lr)
    decay_from = 2 * geometry.train_steps // 3
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: (
            1.0
            if step < decay_from
            else 0.5
            * (1 + np.cos(np.pi * (step - decay_from) / (geometry.train_steps - decay_from)))
        ),
    )
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    rng = np.random.default_rng(seed)
    start = time.process_time()
    model.train()
    step = 0
    for step in range(geometry.train_steps):
        lines = [
            code_line(rng, geometry.height, geometry.width, geometry.lengths, geometry.spacing)
            for _ in range(geometry.batch)
        ]
        codes = [line[1] for line in lines]
        model(torch.from_numpy(np.stack([line[0] for line in lines])))
        logits = captured["logits"].reshape(geometry.batch, -1, CLASSES)  # [N, T, C]
        log_probs = logits.log_softmax(-1).transpose(0, 1)  # CTC wants [T, N, C]
        targets, lengths = _encode(codes)
        steps = torch.full((geometry.batch,), log_probs.shape[0], dtype=torch.long)
        loss = ctc(log_probs, targets, steps, lengths)
        total = loss
        if step < geometry.warm_steps:
            frames = frame_labels(
                codes, [line[2] for line in lines], geometry.width, logits.shape[1]
            )
            total = loss + torch.nn.functional.cross_entropy(
                logits.reshape(-1, CLASSES), frames.reshape(-1)
            )
        optimizer.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == geometry.train_steps - 1:
            log(f"  crnn-{geometry.name} step {step}: CTC loss {loss.item():.3f}")
        if time.process_time() - start > BUDGET:
            log(f"  crnn-{geometry.name}: stopped at the {BUDGET:.0f} CPU s budget, step {step}")
            break
    model.eval()
    return model, time.process_time() - start, step + 1


def trained_crnn(geometry: Geometry, cache: Path, log: Any = print) -> tuple[Any, dict[str, float]]:
    """The trained CRNN of ``geometry`` (from the cache, else trained and cached) and its
    training record: CPU seconds, steps, accuracy (codes read exactly) on 256 held-out lines."""
    import torch

    path = cache / f"crnn-{geometry.name}.pt"
    model = build_crnn(geometry)
    if path.exists():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["state"])
        model.eval()
        return model, saved["record"]
    log(f"training crnn-{geometry.name} ({geometry.train_steps} steps, one thread) ...")
    model, seconds, steps = _train(geometry, seed=1234, log=log)
    x, codes = code_set(geometry, 256, seed=999)
    with torch.no_grad():
        scores = model(torch.from_numpy(x)).reshape(len(x), -1, CLASSES).numpy()
    read = decode_codes(scores)
    accuracy = float(np.mean([a == b for a, b in zip(read, codes)]))
    record = {"cpu_seconds": seconds, "steps": float(steps), "accuracy": accuracy}
    cache.mkdir(parents=True, exist_ok=True)
    torch.save({"state": model.state_dict(), "record": record}, path)
    log(f"crnn-{geometry.name}: {seconds:.0f} CPU s, {accuracy:.0%} of held-out codes read")
    return model, record
