"""PyTorch's OpInfo samples through nanoir, per kept Core ATen op (issue 32 §3): samples run,
correct, refused by name (torch.export's own failures apart), wrong, crashed; for the ops the
issue names, also whether they lower to nh with nq == nh.

    python benchmarks/bench_opinfo.py [--samples 5] [--out table.md]

Needs torch's test dependencies (``expecttest``). Prints one markdown row per kept core op
(its OpInfo entries' float32 samples, at most ``--samples`` each) and the totals.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch

from nanoir.testing.core_aten import ISSUE_OPS, kept_ops, opinfo_names
from nanoir.testing.opinfo import Tally, check_sample, float32_samples, load_op_db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated core op names")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    db = load_op_db()
    by_name = {o.name + (f".{o.variant_test_name}" if o.variant_test_name else ""): o for o in db}
    only = set(filter(None, args.only.split(",")))
    rows, totals, seen = [], Tally(), set()
    start = time.process_time()
    groups: dict[str, list[str]] = {}
    for op in kept_ops():
        groups.setdefault(op.split(".")[1], []).append(op)
    for name, overloads in groups.items():
        if only and name not in only:
            continue
        entries = [e for e in opinfo_names(overloads[0], db) if e in by_name]
        tally = Tally()
        for entry in entries:
            lower = entry in ISSUE_OPS
            for sample in float32_samples(by_name[entry], args.samples):
                outcome = check_sample(by_name[entry], sample, lower=lower)
                tally.add(outcome)
                if entry not in seen:
                    totals.add(outcome)
            seen.add(entry)
        notes = "; ".join(
            f"{k}: {v[:120]}" for k, v in tally.examples.items() if k not in ("correct", "hw_equal")
        )
        hw = (
            f"{tally['hw_equal']}/{tally['correct']}"
            if any(e in ISSUE_OPS for e in entries)
            else ""
        )
        rows.append(
            f"| {name} | {', '.join(entries) or '(no OpInfo)'} | {tally.run} | {tally['correct']} | "
            f"{tally['refused']} | {tally['export']} | {tally['wrong']} | {tally['crashed']} | {hw} | {notes} |"
        )
        print(rows[-1], flush=True)
    head = (
        "| core op | OpInfo entries | samples | correct | refused | torch.export | wrong | "
        "crashed | nh == nq | first refusal / failure |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    ran = totals.run
    summary = (
        f"\nsamples {ran}, correct {totals['correct']} ({100 * totals['correct'] / max(ran, 1):.1f}%), "
        f"refused {totals['refused']}, torch.export {totals['export']}, wrong {totals['wrong']}, "
        f"crashed {totals['crashed']}; lowered: nh == nq {totals['hw_equal']}, refused "
        f"{totals['hw_refused']}, wrong {totals['hw_wrong']}, crashed {totals['hw_crashed']} "
        f"({time.process_time() - start:.0f} s CPU)"
    )
    print(summary)
    if args.out:
        with open(args.out, "w") as f:
            f.write(head + "\n" + "\n".join(rows) + "\n" + summary + "\n")
    return 1 if totals["wrong"] or totals["crashed"] else 0


if __name__ == "__main__":
    sys.exit(main())
