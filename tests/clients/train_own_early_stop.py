"""A two-tower scorer in plain torch whose script checkpoints its user-table lookup itself
(`torch.utils.checkpoint`, non-reentrant), as a memory-minded user might wrap a large
table: the item tower (a table, a Linear, a tanh) scores against the user rows; a logistic
loss, SGD. Seeded, tiny.

    python tests/clients/train_own_early_stop.py --steps 1
    memledger trace tests/clients/train_own_early_stop.py --steps 1

The checkpointed call (`nn.Embedding`) saves only its ids: torch re-runs it at their
unpack in backward, forks the CPU generator's state (`torch.get_rng_state()`, 5,056 B) and
stops at the ids' pack before any op runs (Note [The script's own checkpoint], 1, in
trace/script_checkpoint.py). The user rows' backward comes first (their call is made last),
while the item tower's saves and both gradients of the product are live: the fork sets the
step's peak. `--normalize`: the user rows go through `F.normalize` after the lookup.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class TwoTower(nn.Module):
    def __init__(self, n_users: int, n_items: int, dim: int, hidden: int,
                 normalize: bool) -> None:
        super().__init__()
        self.users = nn.Embedding(n_users, dim)
        self.items = nn.Embedding(n_items, dim)
        self.tower = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.normalize = normalize

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        v = self.tower(self.items(item))                        # (B, dim)
        u = checkpoint(self.users, user, use_reentrant=False)  # (B, dim)
        if self.normalize:
            u = F.normalize(u, dim=1)
        return (u * v).sum(dim=1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--normalize", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = TwoTower(40, 30, 16, args.hidden, args.normalize)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        user = torch.randint(0, 40, (args.batch,))
        item = torch.randint(0, 30, (args.batch,))
        label = torch.randint(0, 2, (args.batch,)).float()
        opt.zero_grad()
        F.binary_cross_entropy_with_logits(model(user, item), label).backward()
        opt.step()


if __name__ == "__main__":
    main()
