"""A CRNN with a bidirectional LSTM trained here with CTC: the Magik manual's front end
(``nanoir.testing.magik_models.MagikCRNN``, ``rnn="lstm"``, full width: 256 channels into the
LSTM) reading codes of digits and capital letters (``text_lines.CODE_ALPHABET``) from rendered
text lines.

Two geometries (:data:`GEOMETRIES`):

- ``wide``: 3x32x256 lines, the last two stride-2 convs (``conv8``, ``conv10``) made stride
  (2, 1), so the width is divided by 8 and the LSTM runs over T = 32 columns; codes of 4-10
  characters;
- ``manual``: the manual's own 3x32x128, T = 4; four steps read at most four labels (two
  equal neighbours need a blank between them), so its codes have 1-3 characters.

The network's output is the manual's: a sigmoid per class and column, ``[N * T, classes]``.
Training reads the logits before it (``fc2``'s output, through a hook) and applies CTC to
their log-softmax over classes (class 0 is the blank); greedy decoding takes the argmax per
column, the same for the sigmoids as for the logits. Training is a fixed number of Adam steps
on lines drawn fresh each step (one seed), so the weights do not depend on the machine's speed;
they are cached (``crnn-<geometry>.pt`` in the cache folder) with the CPU seconds and the
accuracy it reached on held-out lines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trained.text_lines import CODE_ALPHABET, code_line

__all__ = ["GEOMETRIES", "Geometry", "build_crnn", "code_set", "trained_crnn"]


@dataclass(frozen=True)
class Geometry:
    name: str
    height: int
    width: int
    steps_per_column: tuple[int, int]
    """Strides (height, width) of ``conv8`` and ``conv10`` (the manual's: 2, 2)."""
    lengths: tuple[int, int]
    """The codes' lengths, inclusive."""
    train_steps: int
    batch: int = 32
    lr: float = 2e-3


GEOMETRIES = {
    "wide": Geometry("wide", 32, 256, (2, 1), (4, 10), train_steps=450),
    "manual": Geometry("manual", 32, 128, (2, 2), (1, 3), train_steps=450),
}
"""The two CRNNs; ``train_steps`` chosen to keep each within 10 CPU minutes here."""

CLASSES = len(CODE_ALPHABET) + 1
"""Blank (0) and the alphabet."""


def build_crnn(geometry: Geometry) -> Any:
    """The manual's MagikCRNN (LSTM, full width), with ``geometry``'s strides on conv8 and
    conv10 (set on the modules: MagikCRNN takes no stride argument)."""
    from nanoir.testing.magik_models import MagikCRNN

    model = MagikCRNN(rnn="lstm", classes=CLASSES)
    model.conv8[0].stride = geometry.steps_per_column
    model.conv10[0].stride = geometry.steps_per_column
    return model


def code_set(geometry: Geometry, count: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """``count`` code lines ``[count, 3, H, W]`` and their codes."""
    rng = np.random.default_rng(seed)
    pairs = [
        code_line(rng, geometry.height, geometry.width, geometry.lengths) for _ in range(count)
    ]
    return np.stack([p[0] for p in pairs]), [p[1] for p in pairs]


def _encode(codes: list[str]) -> tuple[Any, Any]:
    import torch

    targets = [CODE_ALPHABET.index(c) + 1 for code in codes for c in code]
    return torch.tensor(targets), torch.tensor([len(c) for c in codes])


def decode_codes(columns: np.ndarray) -> list[str]:
    """Greedy CTC decoding of ``[N, T, classes]`` scores into codes."""
    from trained.measures import ctc_greedy

    return ["".join(CODE_ALPHABET[i - 1] for i in ctc_greedy(row, blank=0)) for row in columns]


def _train(geometry: Geometry, seed: int, log: Any) -> tuple[Any, float]:
    import torch

    torch.manual_seed(seed)
    model = build_crnn(geometry)
    captured: dict[str, Any] = {}
    model.fc2.register_forward_hook(lambda _m, _i, out: captured.__setitem__("logits", out))
    optimizer = torch.optim.Adam(model.parameters(), lr=geometry.lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, geometry.lr, total_steps=geometry.train_steps, pct_start=0.15
    )
    ctc = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    rng = np.random.default_rng(seed)
    start = time.process_time()
    model.train()
    for step in range(geometry.train_steps):
        pairs = [
            code_line(rng, geometry.height, geometry.width, geometry.lengths)
            for _ in range(geometry.batch)
        ]
        x = torch.from_numpy(np.stack([p[0] for p in pairs]))
        targets, lengths = _encode([p[1] for p in pairs])
        model(x)
        logits = captured["logits"].reshape(geometry.batch, -1, CLASSES)  # [N, T, C]
        log_probs = logits.log_softmax(-1).transpose(0, 1)  # CTC wants [T, N, C]
        steps = torch.full((geometry.batch,), log_probs.shape[0], dtype=torch.long)
        loss = ctc(log_probs, targets, steps, lengths)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == geometry.train_steps - 1:
            log(f"  crnn-{geometry.name} step {step}: CTC loss {loss.item():.3f}")
    model.eval()
    return model, time.process_time() - start


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
    model, seconds = _train(geometry, seed=1234, log=log)
    x, codes = code_set(geometry, 256, seed=999)
    with torch.no_grad():
        scores = model(torch.from_numpy(x)).reshape(len(x), -1, CLASSES).numpy()
    read = decode_codes(scores)
    accuracy = float(np.mean([a == b for a, b in zip(read, codes)]))
    record = {"cpu_seconds": seconds, "steps": float(geometry.train_steps), "accuracy": accuracy}
    cache.mkdir(parents=True, exist_ok=True)
    torch.save({"state": model.state_dict(), "record": record}, path)
    log(f"crnn-{geometry.name}: {seconds:.0f} CPU s, {accuracy:.0%} of held-out codes read")
    return model, record
