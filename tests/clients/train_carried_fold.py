"""A state carried between steps beside a Linear on a sliced input, in plain torch: the
shape of a log-space minGRU trained with truncated BPTT (tests/clients/train_scan.py
`--model log --tbptt`, whose tier skips without accelerated-scan and assoc-scan).

Each block: `lin` (no bias) to hidden and gate, the minGRU in log space (softplus, a
cumsum of the log gates, `logcumsumexp` of the log values, `exp`), with the state carried
in from the step before as a first row (`cat`), then `y[:, 1:]` (a slice: not contiguous)
through `out`, a Linear with a bias, whose `matmul` runs `clone`, `mm` and the bias added
in place, and a residual. The step's last row is carried into the next step, detached:
`activation` (exp saves its result) until the step's end, `other` from there (Note [A
state carried into the next step], ledger/carried.py).

    memledger trace tests/clients/train_carried_fold.py --steps 2 -o f.ledger -- --carry
    memledger compare tests/clients/train_carried_fold.py -p 'selective:blocks.0:save=mm' -- --carry

`--carry` carries the state (without it every step starts from none), `--contig` makes the
slice contiguous before `out` (one `addmm`), `--layers`, `--seq`, `--dim`, `--batch`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def log_g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, (F.relu(x) + 0.5).log(), -F.softplus(-x))


class LogMinGRU(nn.Module):
    def __init__(self, dim: int, contig: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim)
        self.contig = contig

    def forward(self, x: torch.Tensor, h: torch.Tensor | None):
        hidden, gate = self.lin(x).chunk(2, dim=-1)              # (B, T, D) each
        log_coeffs = -F.softplus(gate)
        log_values = -F.softplus(-gate) + log_g(hidden)
        if h is not None:                                        # the carried state first
            log_values = torch.cat([log_g(h).unsqueeze(1), log_values], 1)
            log_coeffs = F.pad(log_coeffs, (0, 0, 1, 0))
        a_star = log_coeffs.cumsum(1)
        y = (a_star + torch.logcumsumexp(log_values - a_star, 1)).exp()
        y = y[:, 1:] if h is not None else y                      # (B, T, D), strided
        if self.contig:
            y = y.contiguous()
        return x + self.out(y), y[:, -1]


class Net(nn.Module):
    def __init__(self, dim: int, layers: int, contig: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(LogMinGRU(dim, contig) for _ in range(layers))

    def forward(self, x: torch.Tensor, states: list):
        new = []
        for blk, h in zip(self.blocks, states):
            x, h = blk(x, h)
            new.append(h)
        return x, new


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--carry", action="store_true")
    p.add_argument("--contig", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.layers, args.contig)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    states = [None] * args.layers
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.dim)
        y, new = model(x, states)
        if args.carry:
            states = [h.detach() for h in new]
        loss = y.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
