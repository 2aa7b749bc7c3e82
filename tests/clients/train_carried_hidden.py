"""A recurrence trained by truncated BPTT whose carried hidden state is not detached
(plain torch): each step's sequence in `--chunks` chunks, each chunk's backward with
`retain_graph=True`, so the next chunk's backward goes through this chunk's graph again.
Each layer (`Cell`) hands its last hidden state `h[:, -1:]` to the next chunk, a view of a
storage its own Linear (`out`) saved; the next chunk's call saves it again.

    memledger trace tests/clients/train_carried_hidden.py --steps 1 -o c.ledger -- --case log,exp
    memledger predict c.ledger -p 'offload:layers.*'

`--case` (comma-separated): `log` (the carried state enters through `prev.log().exp()`,
as minGRU's log-space scan takes `prev_hidden.log()`: `log` saves it again), `exp` (the
scan's `cumsum` then `exp`, which saves its output), `plain` (neither: `prev * 1.0`),
`lse` (minGRU's log-space scan: the carried state's `log` and the new values' concatenated,
`logcumsumexp`, then `exp`, whose output its own backward and `out` save). `--keep` holds
each chunk's loss, so its graph (chunk 0's `out` node among it), to the optimizer step.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cell(nn.Module):
    def __init__(self, dim: int, case: str) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.case = case

    def forward(self, x, prev):
        h, g = self.proj(x).chunk(2, dim=-1)
        h = h.sigmoid() * g.sigmoid()  # (b, n, d), positive
        if "lse" in self.case:   # minGRU's log-space scan: the carried state's log first
            h = h.log() if prev is None else torch.cat((prev.log(), h.log()), dim=1)
            h = h.logcumsumexp(dim=1).exp()[:, -x.shape[1]:]
            return self.out(h), h[:, -1:]
        if prev is not None:
            p = prev.log() if "log" in self.case else prev * 1.0
            h = torch.cat((p.exp() if "log" in self.case else p, h), dim=1)
        h = h.cumsum(dim=1).exp() if "exp" in self.case else h.cumsum(dim=1)
        h = h[:, -x.shape[1]:]
        return self.out(h), h[:, -1:]


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, case: str) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, dim)
        self.layers = nn.ModuleList(Cell(dim, case) for _ in range(depth))
        self.head = nn.Linear(dim, 32, bias=False)

    def forward(self, tokens, hiddens):
        x = self.emb(tokens)
        nexts = []
        for layer, prev in zip(self.layers, hiddens):
            out, h = layer(x, prev)
            x = x + out
            nexts.append(h)
        return self.head(x), nexts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--case", default="log,exp")
    p.add_argument("--chunks", type=int, default=2)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--keep", action="store_true",
                   help="keep each chunk's loss (so its graph) to the optimizer step")
    args = p.parse_args()
    torch.manual_seed(0)
    dim, n, b = 16, 8, 4
    model = Net(dim, args.depth, args.case)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        tokens = torch.randint(0, 32, (b, n * args.chunks + 1))
        hiddens, kept = [None] * args.depth, []
        for c in range(args.chunks):
            logits, hiddens = model(tokens[:, c * n:(c + 1) * n], hiddens)
            loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, c * n + 1:(c + 1) * n + 1])
            loss.backward(retain_graph=True)
            if args.keep:
                kept.append(loss)
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
