"""A tiny GPT sharded with FSDP2 (`fully_shard`), one shard per rank, AdamW.

    torchrun --nproc_per_node 2 examples/train_fsdp.py --steps 5
    memledger trace --nproc 2 examples/train_fsdp.py --steps 2 -o fsdp.ledger
    memledger show fsdp.ledger           # every rank: peak, categories, the worst rank

Each block is its own FSDP unit (its parameters are all-gathered just before its forward and
backward, then freed); the root unit holds the embeddings, the final LayerNorm and the tied
head. Each rank keeps 1/world of every parameter, its gradient and its AdamW state.
"""

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from _dist_common import batches, build_model, init_process_group, loss_fn, parse_args


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    rank, world = init_process_group(args.backend)
    model = build_model(args)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)                     # the root: wte (= lm_head), wpe, ln_f
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    data = batches(args, rank)
    for step in range(args.steps):
        for micro in range(args.accum):   # --accum K: no reduce-scatter but on the last
            if args.accum > 1:
                model.set_requires_gradient_sync(micro == args.accum - 1)
            x, y = next(data)
            loss = loss_fn(model(x), y)
            if args.accum > 1:
                loss = loss / args.accum
            if micro == 0:
                opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}  ({world} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
