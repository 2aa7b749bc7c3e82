"""A data-parallel loop whose shapes come through collectives (Note [A symmetric world],
memledger/trace/fake_collectives.py), as ring-attention-pytorch's and soft-moe-pytorch's
`all_gather_variable_dim` do: each rank all-gathers its batch size, and where every rank's
is the same gathers the batches by `all_gather`, else pads each to the largest (`.item()`
of the sizes' max) and drops the padding after. The gathered batch, (world x batch, dim),
goes through a Linear. A global token count is then all-reduced (a literal, `dist.all_reduce`
by `--reduce`) and sizes a buffer the loss is scaled through. Plain torch, seeded, tiny.

    torchrun --nproc_per_node 2 tests/clients/train_symmetric.py --steps 2
    memledger trace --nproc 2 tests/clients/train_symmetric.py --steps 2 -o sym.ledger
    memledger trace --fake --world 2 tests/clients/train_symmetric.py --steps 2 -o f.ledger

`--into-tensor`: the batch gathered by `all_gather_into_tensor` into one (world x batch,
dim) tensor; `--functional`: the count all-reduced by `torch.distributed.
_functional_collectives.all_reduce` (a fresh result, then its wait).
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def gather_batches(x: torch.Tensor, into_tensor: bool) -> torch.Tensor:
    world = dist.get_world_size()
    size = torch.tensor(x.shape[0], dtype=torch.long)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    sizes = torch.stack(sizes)
    if (sizes == sizes[0]).all():
        if into_tensor:
            out = torch.empty(world * x.shape[0], *x.shape[1:])
            dist.all_gather_into_tensor(out, x)
            return out
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x)
        return torch.cat(parts)
    longest = int(sizes.amax().item())                 # ranks' batches differ: pad them
    padded = F.pad(x, (0, 0, 0, longest - x.shape[0]))
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    keep = (torch.arange(longest)[None, :] < sizes[:, None]).reshape(-1)
    return torch.cat(parts)[keep]


def global_count(n: int, how: str, functional: bool) -> int:
    count = torch.tensor(n)
    if functional:
        import torch.distributed._functional_collectives as funcol

        count = funcol.all_reduce(count, how, dist.group.WORLD)
    else:
        dist.all_reduce(count, op=getattr(dist.ReduceOp, how.upper()))
    return int(count.item())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--reduce", default="sum", choices=["sum", "max"])
    p.add_argument("--into-tensor", action="store_true")
    p.add_argument("--functional", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Linear(args.dim, args.dim)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.dim)
        big = gather_batches(x, args.into_tensor)
        n = global_count(args.batch * 16, args.reduce, args.functional)
        scale = torch.ones(n, args.dim) / n                   # sized by the global count
        loss = (model(big).pow(2).mean(0) * scale.sum(0)).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
