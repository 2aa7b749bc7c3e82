"""Titans (titans-pytorch) as its README and train_mac.py train it: a tiny
`MemoryAsContextTransformer` (segmented attention, persistent and long-term memory tokens,
hyper-connections, a `NeuralMemory` per layer) on random byte sequences, `return_loss=True`,
Adam, gradient clipping. Seeded, tiny, nothing downloaded.

The neural memory learns at test time: inside the forward it computes per-chunk gradients
of its inner memory MLP with `torch.func` (`vmap` of `grad` of a `functional_call`) and
applies them as weight updates through an associative scan; the outer backward runs through
all of that.

    python tests/clients/train_titans.py --steps 3
    memledger trace tests/clients/train_titans.py --steps 2 -o titans.ledger
    memledger compare tests/clients/train_titans.py --steps 2 -p 'checkpoint:layers.*'

Modes (`--mode`):

- `mac`: `MemoryAsContextTransformer(...)(seq, return_loss=True)`, the model's own loss.
- `mem`: a `NeuralMemory` alone in a small regressor (`mem` between an `inp` and a `head`
  Linear), its retrieved values regressed onto a target, as the README's first example
  calls it (`retrieved, mem_state = mem(seq)`).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from titans_pytorch import MemoryAsContextTransformer, NeuralMemory


class MemRegressor(nn.Module):
    def __init__(self, dim: int, chunk: int) -> None:
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.mem = NeuralMemory(dim=dim, chunk_size=chunk, heads=1, dim_head=dim)
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        retrieved, _ = self.mem(self.inp(x))
        return self.head(retrieved)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="mac", choices=["mac", "mem"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--segment", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--clip", type=float, default=0.5)
    args = p.parse_args()
    torch.manual_seed(0)
    if args.mode == "mac":
        model = MemoryAsContextTransformer(
            num_tokens=64, dim=args.dim, depth=args.depth, segment_len=args.segment,
            num_persist_mem_tokens=2, num_longterm_mem_tokens=2, dim_head=8, heads=2,
            ff_mult=2, num_residual_streams=2,
            neural_memory_kwargs=dict(dim_head=args.dim, heads=1))
    else:
        model = MemRegressor(args.dim, args.segment)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        if args.mode == "mac":
            seq = torch.randint(0, 64, (args.batch, args.seq_len + 1), generator=gen)
            loss = model(seq, return_loss=True)
        else:
            x = torch.randn(args.batch, args.seq_len, args.dim, generator=gen)
            loss = F.mse_loss(model(x), x.flip(1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
