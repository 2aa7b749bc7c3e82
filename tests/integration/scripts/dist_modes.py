"""A tiny training script for the `--nproc` tests: python dist_modes.py MODE [OUT].

    nopg   never calls init_process_group: every rank trains alone
    early  exits before training, as a script whose GPU check fails (pytorch/examples)
    crash  rank 1 raises before its first optimizer step
    hang   after one step together, rank 1 never joins rank 0's all_reduce
    ok     both ranks all-reduce their gradients by hand, 3 steps
    api    as ok, inside `memledger.trace(OUT)`: one ledger per rank (run under torchrun)
    history  as ok, but each rank's first untraced run raises the SystemError the CUDA
           allocator's history gives a checkpoint's re-run (a marker per rank in OUT)
"""

import contextlib
import pathlib
import sys
import time

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _get_current_dispatch_mode

import memledger


def train(mode: str, rank: int) -> None:
    # the same model on every rank, each its own data, the same on every run: a ratio of
    # float sums (the doctor's evidence) must not move with unseeded data
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    torch.manual_seed(1 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if mode == "history" and _get_current_dispatch_mode() is None:   # the allocator pass
        marker = pathlib.Path(sys.argv[2]) / f"raised.{rank}"
        first = not marker.exists()
        marker.touch()
        # every rank has left its marker before any raises: a rank stopped before its
        # marker (torchrun stops the others once one fails) would raise in the next launch
        # too. A clean clone's `make test` under load once read "allocator pass failed on
        # 2 ranks" after the relaunch; that race is the one cause seen in the code
        dist.barrier()
        if first:
            raise SystemError("<built-in method dropout of type object at 0x7f> returned "
                              "NULL without setting an exception")
    for step in range(3):
        loss = model(torch.randn(4, 8)).square().sum()
        loss.backward()
        if mode == "crash" and rank == 1:
            raise ValueError("rank 1 broke on purpose")
        if mode == "hang" and rank == 1 and step == 1:
            time.sleep(60)
        if mode != "nopg":
            for p in model.parameters():
                dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()


mode = sys.argv[1]
if mode == "early":
    sys.exit()
if mode != "nopg":
    dist.init_process_group("gloo")
with memledger.trace(sys.argv[2]) if mode == "api" else contextlib.nullcontext():
    train(mode, dist.get_rank() if mode != "nopg" else 0)
