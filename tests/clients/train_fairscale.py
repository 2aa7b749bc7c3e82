"""A small pre-norm MLP language model trained with fairscale (0.4.13) as its users write it:
`fairscale.optim.OSS` (ZeRO-1: the optimizer's state sharded over the ranks) around
`torch.optim.AdamW`, `fairscale.nn.data_parallel.ShardedDataParallel` (ZeRO-2: each
gradient reduced to the rank that owns its parameter) and
`fairscale.nn.checkpoint.checkpoint_wrapper` on the blocks. Built from flags, seeded,
nothing downloaded.

    python tests/clients/train_fairscale.py --steps 3
    memledger trace tests/clients/train_fairscale.py --steps 2 -o fs.ledger -- --ckpt offload
    memledger trace --nproc 2 tests/clients/train_fairscale.py --steps 2 -o fs2.ledger
    memledger compare tests/clients/train_fairscale.py --steps 2 -p 'checkpoint:blocks.*'

One process makes its own gloo group of world size 1 (as fairscale's tests and tutorials
do); under torchrun (`--nproc N`) the group comes from the environment.

- `--wrap sdp`: OSS + ShardedDataParallel (fairscale's ZeRO-2 recipe); `--wrap oss`: OSS
  alone, the gradients all-reduced by hand before `step()` (ZeRO-1 with no wrapper);
- `--ckpt none|wrap|offload`: each of `blocks.*` under `checkpoint_wrapper(block)`, or
  `checkpoint_wrapper(block, offload_to_cpu=True)` (the saved inputs moved to the CPU,
  which on a CPU run is no move);
- `--broadcast-fp16`: OSS's `broadcast_fp16=True` (the updated shards broadcast in fp16);
- `--bug no-reduce` (with `--wrap oss`): the gradients never reduced: OSS's broadcast
  keeps the replicas equal, but each shard steps on its owner rank's gradient alone;
- `--bug set-to-none` (`--wrap sdp`, 2 ranks or more): `opt.zero_grad(set_to_none=True)`
  (torch 2's default) instead of ShardedDataParallel's own `zero_grad`: the gradients stop
  being views of its buckets, and from the second step on none is reduced (each rank's
  `p.grad` is its own backward's: checked by hand on 2 ranks); `doctor --nproc 2` says so;
- `--clip C`: `OSS.clip_grad_norm(C)` before `step()` (the gradient norm all-reduced over
  the shards, as fairscale's docs tell instead of torch's `clip_grad_norm_`).
"""

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from fairscale.nn.checkpoint import checkpoint_wrapper
from fairscale.nn.data_parallel import ShardedDataParallel
from fairscale.optim import OSS


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--wrap", choices=["sdp", "oss"], default="sdp")
    p.add_argument("--ckpt", choices=["none", "wrap", "offload"], default="none")
    p.add_argument("--broadcast-fp16", action="store_true")
    p.add_argument("--bug", choices=["no-reduce", "set-to-none"],
                   help="no-reduce: `--wrap oss` with the gradients never all-reduced; "
                   "set-to-none: `opt.zero_grad(set_to_none=True)` under ShardedDataParallel")
    p.add_argument("--clip", type=float, default=0.0,
                   help="OSS.clip_grad_norm(max_norm) before step (the norm over every shard)")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq", type=int, default=16)
    args = p.parse_args()

    own_group = not dist.is_initialized()
    if own_group:
        if "RANK" in os.environ:   # torchrun
            dist.init_process_group("gloo")
        else:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                    rank=0, world_size=1)
    rank = dist.get_rank()
    torch.manual_seed(0)   # the same initial weights on every rank
    model = Net(args.vocab, args.width, args.depth)
    if args.ckpt != "none":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = checkpoint_wrapper(block, offload_to_cpu=args.ckpt == "offload")
    opt = OSS(model.parameters(), optim=torch.optim.AdamW, lr=1e-3, weight_decay=0.01,
              broadcast_fp16=args.broadcast_fp16)
    net = ShardedDataParallel(model, opt) if args.wrap == "sdp" else model
    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq + 1), generator=gen)
        logits = net(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        if args.wrap == "oss" and args.bug != "no-reduce":
            for q in model.parameters():
                dist.all_reduce(q.grad)
                q.grad /= dist.get_world_size()
        if args.clip:
            opt.clip_grad_norm(args.clip)
        opt.step()
        if args.wrap == "sdp" and args.bug != "set-to-none":
            net.zero_grad(set_to_none=True)   # ShardedDataParallel's: its buckets' views kept
        else:
            opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}")
    if own_group:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
