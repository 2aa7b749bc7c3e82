"""Plain torch: a sparse embedding table (`nn.Embedding(sparse=True)`, or with `--bag` an
`nn.EmbeddingBag(mode="sum", sparse=True)` summed under per-sample weights, as a
product-key memory's values are) under a Linear head, gradients accumulated over
`--accumulate` backward passes per step (AccumulateGrad adds each micro-batch's sparse
gradient into the last in place: `add_` on sparse tensors, new indices and values), then
SparseAdam on the table (`--sgd`: SGD, which adds the sparse gradient into the weight
without coalescing a copy) beside Adam on the head. `--drop` lets go of the ids after
forward, so only the graph, then the gradient, holds them. `--memory`: a product-key
memory's shape instead, a `Memory` module that makes its ids in forward (a top-k over a
projection of the input, the scores softmaxed as the bag's weights) under a root `Net`, so
a policy can checkpoint the lookup (`checkpoint:mem`).

Note [Sparse parts replaced inside an op] (memledger/trace/collector.py).

    python tests/clients/train_sparse_accum.py --bag --sgd --steps 2
"""

import argparse

import torch
from torch import nn


class Memory(nn.Module):
    def __init__(self, rows: int, dim: int, k: int) -> None:
        super().__init__()
        self.k = k
        self.proj = nn.Linear(dim, rows)
        self.values = nn.EmbeddingBag(rows, dim, mode="sum", sparse=True)

    def forward(self, x):
        scores, ids = self.proj(x).topk(self.k, dim=-1)
        return self.values(ids, per_sample_weights=scores.softmax(-1))


class Net(nn.Module):
    def __init__(self, rows: int, dim: int, k: int) -> None:
        super().__init__()
        self.mem = Memory(rows, dim, k)
        self.head = nn.Linear(dim, 1)

    def forward(self, x):
        return self.head(self.mem(x) + x)


def memory_main(args) -> None:
    torch.manual_seed(0)
    net = Net(args.rows, args.dim, args.ids)
    values = [net.mem.values.weight]
    rest = [p for p in net.parameters() if p is not values[0]]
    opts = [torch.optim.SparseAdam(values, lr=1e-2), torch.optim.Adam(rest, lr=1e-3)]
    for _ in range(args.steps):
        for _ in range(args.accumulate):
            loss = net(torch.randn(args.batch, args.dim)).pow(2).mean()
            (loss / args.accumulate).backward()
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--accumulate", type=int, default=2)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--ids", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--bag", action="store_true")
    ap.add_argument("--drop", action="store_true")
    ap.add_argument("--sgd", action="store_true")
    ap.add_argument("--memory", action="store_true")
    args = ap.parse_args()
    if args.memory:
        return memory_main(args)
    torch.manual_seed(0)
    table = (nn.EmbeddingBag(args.rows, args.dim, mode="sum", sparse=True) if args.bag
             else nn.Embedding(args.rows, args.dim, sparse=True))
    head = nn.Linear(args.dim, 1)
    opts = [torch.optim.SGD(table.parameters(), lr=1e-2) if args.sgd
            else torch.optim.SparseAdam(table.parameters(), lr=1e-2),
            torch.optim.Adam(head.parameters(), lr=1e-3)]
    for _ in range(args.steps):
        for _ in range(args.accumulate):
            ids = torch.randint(0, args.rows, (args.batch, args.ids))
            if args.bag:
                out = table(ids, per_sample_weights=torch.rand(args.batch, args.ids))
            else:
                out = table(ids).sum(1)
            if args.drop:
                del ids
            loss = head(out).pow(2).mean()
            (loss / args.accumulate).backward()
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad()


if __name__ == "__main__":
    main()
