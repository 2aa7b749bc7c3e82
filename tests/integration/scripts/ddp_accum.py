"""DDP with gradient accumulation, right or wrong: python ddp_accum.py [--no-sync-always].

Two micro-batches per step; all but the last under `no_sync()`, or (--no-sync-always, the
bug) every one: DDP then never all-reduces, and each rank steps on its own gradient.
Run under torchrun (`memledger doctor --nproc 2`).
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)                                   # equal replicas at the start
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)))
opt = torch.optim.AdamW(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(dist.get_rank())   # different data per rank
for step in range(3):
    for micro in range(2):
        last = micro == 1 and "--no-sync-always" not in sys.argv
        x = torch.randn(4, 8, generator=gen)
        if last:
            (model(x).square().mean() / 2).backward()
        else:
            with model.no_sync():
                (model(x).square().mean() / 2).backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
