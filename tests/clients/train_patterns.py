"""Training patterns found in research code, each a mechanism of its own for the ledger:

- `ctx_attr`: a custom autograd Function that keeps a tensor as an attribute of `ctx`
  (`ctx.mask = ...`, `ctx.x = x`) instead of `save_for_backward`, so no saved-tensor hook
  sees it, inside each block of a residual MLP;
- `moco`: MoCo's contrastive loop: a query encoder, a key encoder updated as a momentum
  copy in place, a queue of past keys kept as a buffer and written in place each step, an
  InfoNCE loss over the positive and the queue;
- `tbptt`: truncated backpropagation through time: an LSTM reads a long sequence in
  chunks, one optimizer step per chunk, its state detached and carried to the next chunk.

    python tests/clients/train_patterns.py --case moco --steps 4
    memledger compare tests/clients/train_patterns.py -p 'checkpoint:blocks.*' -- --case ctx_attr
"""
import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn

W, B = 64, 32


class HardSwish(torch.autograd.Function):
    """x * relu6(x + 3) / 6, its backward from the input kept on ctx and a mask of the
    linear part, neither through save_for_backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        ctx.mid = (x > -3) & (x < 3)
        return x * F.relu6(x + 3) / 6

    @staticmethod
    def backward(ctx, g):
        x, mid = ctx.x, ctx.mid
        slope = torch.where(mid, (2 * x + 3) / 6, (x >= 3).to(x.dtype))
        return g * slope


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(W, 2 * W), nn.Linear(2 * W, W)

    def forward(self, h):
        return h + self.fc2(HardSwish.apply(self.fc1(h)))


class Net(nn.Module):
    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(W, 10)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def ctx_attr(steps: int, g: torch.Generator) -> None:
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for _ in range(steps):
        x, y = torch.randn(B, W, generator=g), torch.randint(0, 10, (B,), generator=g)
        F.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad()


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(nn.Linear(W, 2 * W), nn.ReLU(), nn.Linear(2 * W, W),
                                    nn.LayerNorm(W))
        self.proj = nn.Linear(W, 32)

    def forward(self, x):
        return F.normalize(self.proj(self.blocks(x)), dim=1)


class MoCo(nn.Module):
    def __init__(self, queue: int = 256, momentum: float = 0.99, t: float = 0.07) -> None:
        super().__init__()
        self.q = Encoder()
        self.k = copy.deepcopy(self.q)
        for p in self.k.parameters():
            p.requires_grad_(False)
        self.m, self.t = momentum, t
        self.register_buffer("queue", F.normalize(torch.randn(32, queue), dim=0))
        self.register_buffer("ptr", torch.zeros(1, dtype=torch.long))

    def forward(self, view_q, view_k):
        q = self.q(view_q)
        with torch.no_grad():
            for pk, pq in zip(self.k.parameters(), self.q.parameters()):
                pk.mul_(self.m).add_(pq.detach(), alpha=1 - self.m)
            k = self.k(view_k)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.clone().detach()
        logits = torch.cat([pos, neg], 1) / self.t
        with torch.no_grad():   # enqueue this batch's keys over the oldest
            at = int(self.ptr)
            self.queue[:, at:at + k.shape[0]] = k.T
            self.ptr[0] = (at + k.shape[0]) % self.queue.shape[1]
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.long))


def moco(steps: int, g: torch.Generator) -> None:
    model = MoCo()
    opt = torch.optim.SGD(model.q.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    for _ in range(steps):
        x = torch.randn(B, W, generator=g)
        a = x + 0.1 * torch.randn(B, W, generator=g)     # two "augmentations"
        b = x * (torch.rand(B, W, generator=g) > 0.1)
        model(a, b).backward()
        opt.step()
        opt.zero_grad()


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, W)
        self.rnn = nn.LSTM(W, W, batch_first=True)
        self.out = nn.Linear(W, 100)

    def forward(self, ids, state):
        h, state = self.rnn(self.emb(ids), state)
        return self.out(h), state


def tbptt(steps: int, g: torch.Generator, chunk: int = 16) -> None:
    model = Tagger()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    text = torch.randint(0, 100, (8, chunk * steps + 1), generator=g)
    state = None
    for i in range(steps):
        ids = text[:, i * chunk:(i + 1) * chunk]
        target = text[:, i * chunk + 1:(i + 1) * chunk + 1]
        logits, state = model(ids, state)
        state = tuple(s.detach() for s in state)   # carried, not backpropagated through
        F.cross_entropy(logits.reshape(-1, 100), target.reshape(-1)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["ctx_attr", "moco", "tbptt"], required=True)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    {"ctx_attr": ctx_attr, "moco": moco, "tbptt": tbptt}[args.case](args.steps, g)


if __name__ == "__main__":
    main()
