"""A tiny GPT under DDP with ZeroRedundancyOptimizer: AdamW state sharded across ranks.

    torchrun --nproc_per_node 2 examples/train_zero.py --steps 5
    memledger trace --nproc 2 examples/train_zero.py --steps 2 -o zero.ledger
    memledger show zero.ledger           # optimizer state: about 1/world of plain DDP's

Parameters and gradients are whole on every rank (DDP); each rank's AdamW keeps state only
for the parameters it owns and broadcasts them to the others after its step.
"""

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from _dist_common import batches, build_model, init_process_group, loss_fn, parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rank, world = init_process_group(args.backend)
    model = DDP(build_model(args))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                  lr=3e-4, weight_decay=0.1)
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
