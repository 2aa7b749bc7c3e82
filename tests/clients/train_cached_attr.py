"""A block that caches its causal mask as a plain attribute on its first call and slices
it in later calls (CoCa-pytorch's ParallelTransformerBlock: `self.mask`, `self.pos_emb`);
`--no-cache` makes the mask anew on every call (the control). A Linear, `--depth` blocks
(top-level `1`, `2`, ...), a head; Adam.

    memledger trace tests/clients/train_cached_attr.py --steps 2 -o c.ledger
    memledger predict c.ledger -p 'checkpoint:[1-2]' -p 'selective:[1-2]'
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int, cache: bool = True) -> None:
        super().__init__()
        self.cache = cache
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.mask = None

    def get_mask(self, n: int) -> torch.Tensor:
        if self.cache and self.mask is not None and self.mask.shape[-1] >= n:
            return self.mask[:n, :n]
        mask = torch.ones((n, n), dtype=torch.bool).triu(1)
        self.mask = mask
        return mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        sim = torch.einsum("bid,bjd->bij", x, x).masked_fill(self.get_mask(n), -1e4)
        h = sim.softmax(-1) @ x
        return x + self.fc2(torch.relu(self.fc1(h)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--no-cache", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    blocks = [Block(16, cache=not args.no_cache) for _ in range(args.depth)]
    model = nn.Sequential(nn.Linear(8, 16), *blocks, nn.Linear(16, 1))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        loss = model(torch.randn(4, 12, 8)).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
