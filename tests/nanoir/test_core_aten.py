"""The Core ATen ops (issue 32 §3): every op torch tags ``core`` that means something in
inference is mapped onto nf ops or refused by name with a reason, and PyTorch's own OpInfo
samples run through the frontend with none wrong and none crashing.

Left out of the Core ATen list (``nanoir.testing.core_aten.LEFT_OUT``, each with the reason):

- random sampling: ``rand``, ``randn``, ``randperm``; ``native_dropout`` (training);
- uninitialised memory: ``empty``, ``empty_strided``;
- ``out=`` variants: ``atan2.out``;
- complex values / FFT: ``_fft_r2c``, ``_fft_c2r`` (refused by name when met);
- autograd only: ``*_backward`` (adaptive_avg_pool2d, avg_pool2d, convolution, embedding_dense,
  max_pool2d_with_indices, native_group_norm, native_layer_norm);
- ``sym_*`` shape queries: ``sym_numel``, ``sym_size``, ``sym_storage_offset``, ``sym_stride``;
- training-mode batch norm: ``_native_batch_norm_legit`` (its no-training form is kept).

The OpInfo catalogue (``torch.testing._internal.common_methods_invocations.op_db``) is an
internal API pinned with torch, and needs torch's test dependency ``expecttest``: without it
the OpInfo tests are skipped, saying so. In CI they run a few float32 samples per op (the ops
issue 32 names: up to 3, each lowered to nh with nq == nh; the other kept ops: 1); the full
run (5 samples per OpInfo entry, every kept op) is ``NANOIR_OPINFO=full`` (or
``benchmarks/bench_opinfo.py``, which prints the table).

Mutants checked (each made the tests named fail; applied in place and restored):
- a refusal handler dropped from ``core_aten.REFUSED`` (``aten.nonzero.default``):
  test_every_kept_op_is_mapped_folded_or_refused;
- ``masked_fill`` filling where the mask is false (``where(mask, x, v)``):
  test_opinfo_samples (masked_fill's samples are wrong).
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from nanoir.frontend.torch_import import ATEN_HANDLERS
from nanoir.testing.core_aten import (
    FOLDED,
    ISSUE_OPS,
    LEFT_OUT,
    core_ops,
    kept_ops,
    opinfo_names,
)
from nanoir.testing.opinfo import Tally, check_sample, float32_samples, load_op_db

torch.set_num_threads(1)

FULL = os.environ.get("NANOIR_OPINFO") == "full"


def test_left_out_ops_are_core_ops() -> None:
    """Each left-out name is a Core ATen op (so the list cannot go stale silently)."""
    names = {op.split(".")[1] for op in core_ops()} | {
        ".".join(op.split(".")[1:]) for op in core_ops()
    }
    assert set(LEFT_OUT) <= names, set(LEFT_OUT) - names
    assert len(kept_ops()) > 150


def test_every_kept_op_is_mapped_folded_or_refused() -> None:
    """Every kept Core ATen overload has a handler (mapping it, or refusing it by name with
    the reason) or builds a constant the importer folds."""
    missing = [
        op for op in kept_ops() if op not in ATEN_HANDLERS and op.split(".")[1] not in FOLDED
    ]
    assert not missing


@pytest.fixture(scope="module")
def op_db() -> dict[str, object]:
    try:
        db = load_op_db()
    except ImportError as e:
        pytest.skip(f"torch's OpInfo catalogue cannot be imported ({e}); pip install expecttest")
    return {o.name + (f".{o.variant_test_name}" if o.variant_test_name else ""): o for o in db}


def _run(op_db: dict[str, object], entries: list[str], limit: int, lower: bool) -> Tally:
    tally = Tally()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for entry in entries:
            for sample in float32_samples(op_db[entry], limit):
                tally.add(check_sample(op_db[entry], sample, lower=lower))
    return tally


def _report(title: str, rows: dict[str, Tally]) -> str:
    lines = [f"{title}: op, samples, correct, refused, torch.export, wrong, crashed, nh == nq"]
    for name, t in rows.items():
        lines.append(
            f"  {name}: {t.run} {t['correct']} {t['refused']} {t['export']} {t['wrong']} "
            f"{t['crashed']} {t['hw_equal']}/{t['correct']}"
        )
    return "\n".join(lines)


def test_issue_ops_pass_their_samples(op_db: dict[str, object]) -> None:
    """Each OpInfo entry of an op issue 32 names: no sample wrong or crashing, at most its
    refusals by name; every sample that imports lowers to nh with nq == nh bit for bit (or
    is refused by lower-to-hw by name: a 0-d value has no nh layout)."""
    rows = {e: _run(op_db, [e], 5 if FULL else 3, lower=True) for e in ISSUE_OPS if e in op_db}
    print(_report("issue 32's ops", rows))
    for name, t in rows.items():
        assert t["wrong"] == t["crashed"] == 0, (name, t.examples)
        assert t["hw_wrong"] == 0, (name, t.examples)


def test_opinfo_samples(op_db: dict[str, object]) -> None:
    """Every kept Core ATen op's OpInfo samples (1 per entry in CI, 5 in the full run): none
    wrong, none crashed; in the full run at least 60% of them import and match torch."""
    groups: dict[str, list[str]] = {}
    for op in kept_ops():
        groups.setdefault(op.split(".")[1], [])
    rows: dict[str, Tally] = {}
    seen: set[str] = set()
    total = Tally()
    db_list = list(op_db.values())
    for name in groups:
        entries = [e for e in opinfo_names(f"aten.{name}.default", db_list) if e in op_db]
        entries = [e for e in entries if e not in seen]
        seen.update(entries)
        if not entries:
            continue
        t = _run(op_db, entries, 5 if FULL else 1, lower=False)
        rows[name] = t
        for kind, count in t.counts.items():
            total.counts[kind] = total.counts.get(kind, 0) + count
        for kind, detail in t.examples.items():
            total.examples.setdefault(kind, f"{name}: {detail}")
    print(_report("kept Core ATen ops", rows))
    print(f"total: {total.counts}")
    assert total["wrong"] == 0, total.examples.get("wrong")
    assert total["crashed"] == 0, total.examples.get("crashed")
    if FULL:
        assert total["correct"] >= 0.6 * total.run, total.counts
