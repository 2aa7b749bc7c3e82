"""Plain torch: a sparse COO filter contracted with a dense operand, as torch-harmonics'
DISCO convolution does on its pure-torch path. A filter `psi` (indices int64 + float32
values, coalesced) is made in setup and kept as a plain attribute; a second sparse tensor
is made from the input in each step. `torch.sparse.mm` / `torch.bmm` with the dense
operand, backward into the dense weights, SGD.

Note [Fake sparse tensors] (memledger/trace/fake.py).

    python tests/clients/train_sparse_filter.py --steps 2
"""

import argparse

import torch
from torch import nn


def random_coo(rows: int, cols: int, nnz: int, batch: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(rows * 31 + cols)
    r = torch.randint(0, rows, (nnz,), generator=g)
    c = torch.randint(0, cols, (nnz,), generator=g)
    if batch:
        b = torch.randint(0, batch, (nnz,), generator=g)
        idx, size = torch.stack([b, r, c]), (batch, rows, cols)
    else:
        idx, size = torch.stack([r, c]), (rows, cols)
    return torch.sparse_coo_tensor(idx, torch.rand(nnz, generator=g), size).coalesce()


class Filter(nn.Module):
    def __init__(self, n: int, dim: int, nnz: int, shifts: int) -> None:
        super().__init__()
        self.psi = random_coo(n, n, nnz, batch=shifts)   # a plain attribute, not a buffer
        self.w = nn.Linear(dim, dim)

    def forward(self, x):   # x: (shifts, n, dim)
        return self.w(torch.bmm(self.psi, x)).relu()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--nnz", type=int, default=40)
    p.add_argument("--shifts", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    net = Filter(args.n, args.dim, args.nnz, args.shifts)
    opt = torch.optim.SGD(net.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x = torch.randn(args.shifts, args.n, args.dim)
        a = torch.sparse_coo_tensor(torch.stack([torch.arange(args.n),
                                                 torch.arange(args.n).flip(0)]),
                                    torch.ones(args.n), (args.n, args.n))
        y = net(x)
        z = torch.sparse.mm(a, y.sum(0))
        loss = z.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
