"""QAT on several processes: the digits net fine-tuned at 4-bit weights under torchrun.

    torchrun --nproc-per-node=2 examples/qat_ddp.py [--epochs 4] [--checkpoint qat.pt]
    python examples/qat_ddp.py        # one process, the same code

Every rank trains the same float net (same seed), calibrates on its own shard of the
calibration images (the statistics are reduced over the ranks), and fine-tunes with a
``DistributedSampler`` (``nanoir.qat.train`` wraps the module in DDP); with ``--checkpoint``
an interrupted run started again with the same command resumes after its last finished
epoch. Rank 0 checks that every rank converted to the same program, and prints the integer
program's accuracy on the held-out split. Needs the ``examples`` extra (scikit-learn, torch).
"""

from __future__ import annotations

import argparse
import hashlib
import os

import numpy as np
import torch
import torch.distributed as dist
from digits import load_data, make_model  # this folder (python puts it on sys.path)
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import nanoir
from nanoir import qat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--checkpoint", default=None, help="resumable checkpoint file")
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.set_num_threads(1)

    x, y, x_test, y_test = load_data(seed=0)
    torch.manual_seed(0)  # the same float net on every rank
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(5):
        for i in range(0, len(x), 64):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                model(torch.from_numpy(x[i : i + 64])), torch.from_numpy(y[i : i + 64])
            )
            loss.backward()
            opt.step()
    model.eval()

    q = qat.prepare(model, (torch.from_numpy(x[:2]),), weight_bits=4, calibrator="mse")
    qat.calibrate(q, [x[rank:512:world]])  # this rank's shard; reduced over the ranks
    data = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    losses = qat.train(q, loader, epochs=args.epochs, lr=1e-3, checkpoint=args.checkpoint)

    program = qat.convert(q)  # the same on every rank
    digest = hashlib.sha256(str(program).encode()).hexdigest()
    digests = [digest] * world
    if dist.is_initialized():
        dist.all_gather_object(digests, digest)
    if rank == 0:
        assert len(set(digests)) == 1, "the ranks converted to different programs"
        hw = nanoir.lower_to_hw(program.clone())
        (logits,) = nanoir.run(hw, x_test)
        accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
        print(f"{world} process(es), losses {[round(v, 4) for v in losses]}")
        print(f"one program on every rank ({digest[:12]}); nh accuracy {accuracy:.1%}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
