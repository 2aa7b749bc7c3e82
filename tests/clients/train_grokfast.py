"""Grokking modular addition with Grokfast: grokfast-pytorch's `GrokFastAdamW` (lucidrains:
Adam whose step keeps an EMA of each gradient in the optimizer state, `grok_exp_avg`, and
adds it, times `grokfast_lamb`, to the gradient in place before Adam's moments), or the
paper's own gradient filters applied between backward and step (ironjr/grokfast's
`gradfilter_ema` / `gradfilter_ma`, copied below as its README has a user paste them: a
dict of EMAs, or a deque per parameter of the last `window` gradients, kept across steps by
the script). Seeded, tiny, nothing downloaded.

    python tests/clients/train_grokfast.py --steps 3
    memledger trace tests/clients/train_grokfast.py --steps 2 -o grok.ledger -- --filter ma
    memledger compare tests/clients/train_grokfast.py -p 'checkpoint:blocks.*' -- --after 1

The model: the two operands' embeddings (`nn.Embedding(P, dim)`) concatenated, `blocks` of
a residual MLP (`Block`: LayerNorm, Linear, GELU, Linear), a head over the P residues,
cross-entropy on (a + b) mod P over a random batch of pairs.

`--opt grokfast` (default): `GrokFastAdamW` with `--after N` (`grokfast_after_step`: the
EMA state made at step N + 1, after Adam's), `--wd` (decoupled weight decay), `--regen R`
(`regen_reg_rate`: a clone of each parameter kept as `param_init`), `--spectral`
(`add_spectral_entropy_reg`: a step pre-hook that takes `svdvals` of each matrix and runs
its own backward inside `optimizer.step()`; `--lowrank`: `torch.svd_lowrank(q=4)`, random
projections, instead), `--off-at K` (`turn_off_grokfast()` and
`clear_grokfast_state()` after step K). `--opt adamw`: torch's AdamW, with `--filter ema`
or `--filter ma` (`--window W`, `--lamb`, `--alpha`) between backward and step.
Both: `--accum N`, `--clip`, `--keep-zeros` (`zero_grad(set_to_none=False)`),
`--validate` (a loss under no_grad each step). `--bug no-zero-grad` (never zeroed),
`zero-before-step` (`zero_grad(set_to_none=False)` between backward and the filter),
`filter-after-step` (the filter run after `opt.step()`, its gradients thrown away).
"""

import argparse
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F

from grokfast_pytorch import GrokFastAdamW


# ironjr/grokfast grokfast.py, as its README has a user paste it (Lee et al. 2024)
def gradfilter_ma(m, grads=None, window_size=100, lamb=5.0, filter_type="mean",
                  warmup=True, trigger=False):
    if grads is None:
        grads = {n: deque(maxlen=window_size) for n, p in m.named_parameters()
                 if p.requires_grad and p.grad is not None}
    for n, p in m.named_parameters():
        if p.requires_grad and p.grad is not None:
            grads[n].append(p.grad.data.detach())
            if not warmup or len(grads[n]) == window_size and not trigger:
                if filter_type == "mean":
                    avg = sum(grads[n]) / len(grads[n])
                elif filter_type == "sum":
                    avg = sum(grads[n])
                else:
                    raise ValueError(f"Unrecognized filter_type {filter_type}")
                p.grad.data = p.grad.data + avg * lamb
    return grads


def gradfilter_ema(m, grads=None, alpha=0.98, lamb=2.0):
    if grads is None:
        grads = {n: p.grad.data.detach() for n, p in m.named_parameters()
                 if p.requires_grad and p.grad is not None}
    for n, p in m.named_parameters():
        if p.requires_grad and p.grad is not None:
            grads[n] = grads[n] * alpha + p.grad.data.detach() * (1 - alpha)
            p.grad.data = p.grad.data + grads[n] * lamb
    return grads


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ModAdd(nn.Module):
    def __init__(self, p: int, dim: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(p, dim)
        self.proj = nn.Linear(2 * dim, dim)
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, p)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        x = self.proj(torch.cat([self.embed(a), self.embed(b)], dim=-1))  # (B, dim)
        return self.head(self.blocks(x))                                  # (B, P)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--p", type=int, default=31)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--opt", default="grokfast", choices=["grokfast", "adamw"])
    ap.add_argument("--after", type=int, default=0)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--regen", type=float, default=0.0)
    ap.add_argument("--spectral", action="store_true")
    ap.add_argument("--lowrank", action="store_true")
    ap.add_argument("--off-at", type=int, default=0)
    ap.add_argument("--filter", default="none", choices=["none", "ema", "ma"])
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--lamb", type=float, default=2.0)
    ap.add_argument("--alpha", type=float, default=0.98)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--clip", action="store_true")
    ap.add_argument("--keep-zeros", action="store_true")
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--bug", default="none",
                    choices=["none", "no-zero-grad", "zero-before-step", "filter-after-step"])
    args = ap.parse_args()
    torch.manual_seed(0)

    model = ModAdd(args.p, args.dim, args.depth)
    if args.opt == "grokfast":
        opt = GrokFastAdamW(model.parameters(), lr=1e-3, weight_decay=args.wd,
                            regen_reg_rate=args.regen, grokfast_after_step=args.after,
                            grokfast_lamb=args.lamb, grokfast_alpha=args.alpha,
                            add_spectral_entropy_reg=args.spectral,
                            use_svd_lowrank=args.lowrank, svd_lowrank_kwargs=dict(q=4))
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=args.wd)

    def batch():
        a = torch.randint(0, args.p, (args.batch,))
        b = torch.randint(0, args.p, (args.batch,))
        return a, b, (a + b) % args.p

    grads = None
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            a, b, y = batch()
            loss = F.cross_entropy(model(a, b), y)
            (loss / args.accum).backward()
        if args.bug == "zero-before-step":   # the gradients zeroed before the step reads them
            opt.zero_grad(set_to_none=False)
        if args.bug == "filter-after-step":
            opt.step()
        if args.filter == "ema":
            grads = gradfilter_ema(model, grads=grads, alpha=args.alpha, lamb=args.lamb)
        elif args.filter == "ma":
            grads = gradfilter_ma(model, grads=grads, window_size=args.window, lamb=args.lamb)
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if args.bug != "filter-after-step":
            opt.step()
        if args.bug != "no-zero-grad":
            opt.zero_grad(set_to_none=not args.keep_zeros)
        if args.off_at and step + 1 == args.off_at and args.opt == "grokfast":
            opt.turn_off_grokfast()
            opt.clear_grokfast_state()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                a, b, y = batch()
                acc = (model(a, b).argmax(-1) == y).float().mean()
                print(f"validation accuracy {acc.item():.3f}")


if __name__ == "__main__":
    main()
