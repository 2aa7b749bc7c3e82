"""A tiny GPT replicated with DistributedDataParallel: every rank holds the whole model.

    torchrun --nproc_per_node 2 examples/train_ddp.py --steps 5
    memledger trace --nproc 2 examples/train_ddp.py --steps 2 -o ddp.ledger
    memledger show ddp.ledger            # every rank: parameters, gradients, DDP's buckets

DDP all-reduces gradients during backward through its gradient buckets (flat buffers of
about 25 MiB each, the first one smaller); the buckets are the `communication` category.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from _dist_common import batches, build_model, init_process_group, loss_fn, parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rank, world = init_process_group(args.backend)
    model = DDP(build_model(args))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = batches(args, rank)
    for step in range(args.steps):
        x, y = next(data)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}  ({world} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
