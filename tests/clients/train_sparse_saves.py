"""Plain torch: saves autograd makes of sparse and of dense tensors that are, at some
other time, a sparse tensor's parts. Note [A sparse save stays on the device]
(memledger/replay/engine.py).

    python tests/clients/train_sparse_saves.py --case hashed      # ids the model hashes
                                                                  # (an activation, saved
                                                                  # dense by the lookup),
                                                                  # then a sparse gradient's
                                                                  # indices
    python tests/clients/train_sparse_saves.py --case adjacency   # a sparse COO adjacency
                                                                  # the script makes each
                                                                  # step, saved sparse by
                                                                  # each layer's sparse.mm
    python tests/clients/train_sparse_saves.py --case csr         # the same adjacency in
                                                                  # compressed rows (CSR)
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Hashed(nn.Module):
    """Tokens hashed into buckets inside the model, looked up in a sparse table."""

    def __init__(self, buckets: int, dim: int) -> None:
        super().__init__()
        self.buckets = buckets
        self.table = nn.Embedding(buckets, dim, sparse=True)

    def forward(self, tokens):   # tokens: (B, T) int64
        ids = (tokens * 2_654_435_761 + 7) % self.buckets   # (B, T) int64, an activation
        return self.table(ids)


class HashModel(nn.Module):
    def __init__(self, buckets: int, dim: int) -> None:
        super().__init__()
        self.emb = Hashed(buckets, dim)
        self.head = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, tokens):   # a score per token, averaged
        return self.head(self.emb(tokens)).mean(1)


class GraphConv(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x, adj):   # adj: (N, N) sparse COO, x: (N, dim)
        return torch.sparse.mm(adj, self.lin(x)).relu()


class GCN(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(GraphConv(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x, adj):
        for layer in self.layers:
            x = layer(x, adj)
        return self.head(x)


def train_hashed(steps: int, g: torch.Generator, batch: int) -> None:
    model = HashModel(buckets=256, dim=8)
    sparse = torch.optim.SparseAdam(model.emb.parameters())
    dense = torch.optim.Adam(model.head.parameters())
    for _ in range(steps):
        tokens = torch.randint(0, 1 << 20, (batch, 16), generator=g)
        y = torch.rand(batch, 1, generator=g)
        F.binary_cross_entropy_with_logits(model(tokens), y).backward()
        sparse.step()
        dense.step()
        sparse.zero_grad()
        dense.zero_grad()


def train_adjacency(steps: int, g: torch.Generator, nodes: int, csr: bool = False) -> None:
    model = GCN(dim=16, depth=2)
    opt = torch.optim.Adam(model.parameters())
    for _ in range(steps):
        src = torch.randint(0, nodes, (4 * nodes,), generator=g)
        dst = torch.randint(0, nodes, (4 * nodes,), generator=g)
        adj = torch.sparse_coo_tensor(torch.stack([src, dst]), torch.rand(4 * nodes, generator=g),
                                      (nodes, nodes)).coalesce()
        if csr:   # compressed rows: (nodes + 1) row offsets, column indices, values
            adj = adj.to_sparse_csr()
        x = torch.randn(nodes, 16, generator=g)
        y = torch.randn(nodes, 1, generator=g)
        F.mse_loss(model(x, adj), y).backward()
        opt.step()
        opt.zero_grad()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["hashed", "adjacency", "csr"], required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--nodes", type=int, default=64)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if args.case == "hashed":
        train_hashed(args.steps, g, args.batch)
    else:
        train_adjacency(args.steps, g, args.nodes, csr=args.case == "csr")


if __name__ == "__main__":
    main()
