"""A sparse embedding (sparse gradients) trained with SparseAdam, a dense head with Adam.

    python sparse_embedding.py                          # the doctor's test: small, no finding
    memledger trace sparse_embedding.py --steps 2 --no-timing -o sp.ledger -- --batch 256 --ids 20

The second is the run docs cite (Note [Sparse tensors] in memledger/trace/collector.py):
a 10,000 x 64 table, 256 rows of 20 ids.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(rows, width, sparse=True)
        self.head = nn.Linear(width, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids).mean(1))


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--ids", type=int, default=5, help="ids per row")
a = p.parse_args()
torch.manual_seed(0)
net = Net(10_000, 64)
sparse = torch.optim.SparseAdam(net.emb.parameters())
dense = torch.optim.Adam(net.head.parameters())
for step in range(a.steps):
    ids = torch.randint(0, 10_000, (a.batch, a.ids))
    y = torch.randint(0, 10, (a.batch,))
    F.cross_entropy(net(ids), y).backward()
    sparse.step()
    dense.step()
    sparse.zero_grad()
    dense.zero_grad()
