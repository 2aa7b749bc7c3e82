"""A knowledge-graph scorer in plain torch, as torchkge's DistMult / TransE score: one entity
table read four times a forward (heads and tails of the true facts and of the corrupted
ones), rows normalized, a relation table read twice; a margin loss, Adam. Seeded, tiny.

    python tests/clients/train_gathered_rows.py --steps 2
    memledger predict run.ledger -p checkpoint:ent_emb -p checkpoint:rel_emb

`checkpoint:ent_emb` re-runs an `nn.Embedding` call whose only save is its argument (the
ids): the re-run stops at that pack before any op, after forking the generator's state
(Note [A re-run that stops before its first op], replay/engine.py). `--score transe`:
`-||h + r - t||^2` instead of DistMult's `sum(h * r * t)`. `--sparse`: the tables
`sparse=True` and SparseAdam: two sparse gradients of one table are summed in backward.
`--own-checkpoint`: the script checkpoints each entity-table call itself.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Scorer(nn.Module):
    def __init__(self, n_ent: int, n_rel: int, dim: int, score: str, sparse: bool,
                 own: bool = False) -> None:
        super().__init__()
        self.own = own
        self.ent_emb = nn.Embedding(n_ent, dim, sparse=sparse)
        self.rel_emb = nn.Embedding(n_rel, dim, sparse=sparse)
        self.score = score

    def scores(self, h, t, r) -> torch.Tensor:
        ent = (lambda i: checkpoint(self.ent_emb, i, use_reentrant=False)) if self.own else \
            self.ent_emb
        h = F.normalize(ent(h), p=2, dim=1)     # (B, dim)
        t = F.normalize(ent(t), p=2, dim=1)
        r = self.rel_emb(r)
        if self.score == "transe":
            return -((h + r) - t).norm(p=2, dim=-1) ** 2
        return (h * r * t).sum(dim=1)

    def forward(self, h, t, r, nh, nt):
        return self.scores(h, t, r), self.scores(nh, nt, r)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--score", default="distmult", choices=["distmult", "transe"])
    p.add_argument("--sparse", action="store_true")
    p.add_argument("--own-checkpoint", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    n_ent, n_rel, batch = 40, 4, 16
    model = Scorer(n_ent, n_rel, 16, args.score, args.sparse, args.own_checkpoint)
    opt = (torch.optim.SparseAdam(list(model.parameters()), lr=1e-3) if args.sparse else
           torch.optim.Adam(model.parameters(), lr=1e-3))
    margin = nn.MarginRankingLoss(margin=0.5, reduction="sum")
    for _ in range(args.steps):
        h, t, nh, nt = (torch.randint(0, n_ent, (batch,)) for _ in range(4))
        r = torch.randint(0, n_rel, (batch,))
        opt.zero_grad()
        pos, neg = model(h, t, r, nh, nt)
        margin(pos, neg, torch.ones_like(pos)).backward()
        opt.step()


if __name__ == "__main__":
    main()
