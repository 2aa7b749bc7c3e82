"""Linear recurrences by scan: accelerated-scan 0.3.1's reference scan
(`accelerated_scan.ref.scan`, the pure-torch Blelloch tree that solves x_t = a_t x_{t-1} +
b_t over (B, C, T); its warp / triton kernels are CUDA only: `accelerated_scan.warp`
compiles a CUDA extension at import and fails on CPU, `accelerated_scan.scalar` needs
triton) and assoc-scan 0.0.6 (lucidrains' `AssocScan`: jax's associative_scan ported to
torch over (B, T, D), its combine a `torch.jit.script` function, `prev=` a carried
state), in small gated linear-RNN / minGRU models on random data. Seeded, tiny, CPU.

    python tests/clients/train_scan.py --steps 3 --model ref
    memledger trace tests/clients/train_scan.py --steps 2 -o s.ledger -- --model assoc --tbptt
    memledger compare tests/clients/train_scan.py -p 'checkpoint:blocks.*' -- --model log

Models (`--model`):

- `ref`: blocks of LayerNorm -> Linear to gates and tokens -> `ref.scan` over time in
  `--chunks` chunks (each chunk's first token takes the last chunk's state: a column
  of gate 1 prepended) -> Linear, with a residual.
- `assoc`: minGRU blocks (`AssocScan()(1 - z, z * h_tilde, prev=h0)`), `--reverse`
  adds a second AssocScan(reverse=True) over the same gates (a bidirectional block).
- `log`: minGRU in log space as the minGRU paper writes it (Heinsen's scan: cumsum of
  the log gates, logcumsumexp of the log values, exp), written here.

`--tbptt` carries each block's last state into the next step, detached (truncated BPTT);
`--optim adam|adamw|sgd`, `--accum N` (gradient accumulation), `--clip X` (clip the norm),
`--bug zero-in-accum`: `zero_grad()` inside the accumulation loop, before each backward
(every micro-batch's gradients but the last are wiped). (Not detaching the carried state
and backing it with `retain_graph=True` crashes at step 2 in torch itself: Adam's in-place
update changed a weight the kept graph saved.)
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from accelerated_scan.ref import scan as ref_scan
from assoc_scan import AssocScan


class RefScanBlock(nn.Module):
    """x + out(scan(sigmoid(g), (1 - sigmoid(g)) * silu(v))), the scan in chunks."""

    def __init__(self, dim: int, chunks: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.to_gv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        self.chunks = chunks

    def forward(self, x: torch.Tensor, h: torch.Tensor | None):
        g, v = self.to_gv(self.norm(x)).chunk(2, dim=-1)           # (B, T, D) each
        a = torch.sigmoid(g).transpose(1, 2)                         # (B, D, T)
        b = ((1 - torch.sigmoid(g)) * F.silu(v)).transpose(1, 2)
        outs = []
        for a_c, b_c in zip(a.chunk(self.chunks, -1), b.chunk(self.chunks, -1)):
            if h is not None:                                        # state in: gate 1
                a_c = torch.cat([torch.ones_like(a_c[..., :1]), a_c], -1)
                b_c = torch.cat([h.unsqueeze(-1), b_c], -1)
            y = ref_scan(a_c.contiguous(), b_c.contiguous())
            y = y[..., 1:] if h is not None else y
            h = y[..., -1]
            outs.append(y)
        y = torch.cat(outs, -1).transpose(1, 2)
        return x + self.out(y), h


class MinGRUBlock(nn.Module):
    """minGRU: z = sigmoid(k), h_t = (1 - z) h_{t-1} + z h~, by AssocScan."""

    def __init__(self, dim: int, reverse: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.to_hidden_and_gate = nn.Linear(dim, 2 * dim, bias=False)
        self.scan = AssocScan()
        self.back = AssocScan(reverse=True) if reverse else None
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None):
        hidden, gate = self.to_hidden_and_gate(self.norm(x)).chunk(2, dim=-1)
        z = gate.sigmoid()
        y = self.scan(1 - z, z * hidden, prev=h)
        nxt = y[:, -1]
        if self.back is not None:
            y = y + self.back(1 - z, z * hidden)
        return x + self.out(y), nxt


def g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x + 0.5, x.sigmoid())


def log_g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, (F.relu(x) + 0.5).log(), -F.softplus(-x))


class LogMinGRUBlock(nn.Module):
    """minGRU in log space (Heinsen's parallel scan): h = exp(a* + logcumsumexp(log v - a*))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.to_hidden_and_gate = nn.Linear(dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None):
        hidden, gate = self.to_hidden_and_gate(self.norm(x)).chunk(2, dim=-1)
        log_coeffs = -F.softplus(gate)                               # log(1 - z)
        log_values = -F.softplus(-gate) + log_g(hidden)              # log(z) + log(h~)
        if h is not None:
            log_values = torch.cat([log_g(h).unsqueeze(1), log_values], 1)
            log_coeffs = F.pad(log_coeffs, (0, 0, 1, 0))
        a_star = log_coeffs.cumsum(dim=1)
        y = (a_star + torch.logcumsumexp(log_values - a_star, dim=1)).exp()
        y = y[:, 1:] if h is not None else y
        return x + self.out(y), y[:, -1]


class ScanNet(nn.Module):
    def __init__(self, kind: str, vocab: int, dim: int, layers: int, chunks: int,
                 reverse: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        if kind == "ref":
            blocks = [RefScanBlock(dim, chunks) for _ in range(layers)]
        elif kind == "assoc":
            blocks = [MinGRUBlock(dim, reverse) for _ in range(layers)]
        else:
            blocks = [LogMinGRUBlock(dim) for _ in range(layers)]
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, states: list | None):
        x = self.emb(tokens)
        new = []
        for i, blk in enumerate(self.blocks):
            x, h = blk(x, None if states is None else states[i])
            new.append(h)
        return self.head(x), new


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="ref", choices=["ref", "assoc", "log"])
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--chunks", type=int, default=1)
    p.add_argument("--reverse", action="store_true")
    p.add_argument("--tbptt", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--bug", default="", choices=["", "zero-in-accum"])
    args = p.parse_args()
    torch.manual_seed(0)

    model = ScanNet(args.model, args.vocab, args.dim, args.layers, args.chunks, args.reverse)
    if args.optim == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    data = torch.randint(0, args.vocab, (args.batch, args.seq * args.steps * args.accum + 1))

    states = None
    pos = 0
    for step in range(args.steps):
        for _ in range(args.accum):
            chunk = data[:, pos:pos + args.seq + 1]
            pos += args.seq
            logits, new = model(chunk[:, :-1], states)
            loss = F.cross_entropy(logits.reshape(-1, args.vocab), chunk[:, 1:].reshape(-1))
            if args.tbptt:
                states = [h.detach() for h in new]
            if args.bug == "zero-in-accum":
                optim.zero_grad()
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}  ppl {math.exp(loss.item()):.2f}")


if __name__ == "__main__":
    main()
