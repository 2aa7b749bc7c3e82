"""Grokking modular addition with two grokking-minded optimizers: grokadamw's `GrokAdamW`
(Eric Hartford: AdamW whose step keeps a gradient EMA per parameter, `grok_ema`, its
momentum decayed by a grokking signal that `grokking_signal_fns` closures compute from the
losses, the EMA times `lamb` added to the gradient, beta1 decayed layer by layer, each
parameter's gradient clipped inside the step; its state in `param_groups[i]['state']`, not
`optimizer.state`) and adam-atan2-pytorch's `AdamAtan2` family (lucidrains: Adam with
`atan2(m, sqrt(v))` in place of `m / (sqrt(v) + eps)`; `AdamAtan2ClipGrok` clips each
matrix's rows after the step, `AdoptAtan2` is ADOPT, whose second moment starts at the
first gradient squared and whose first step moves nothing, `MuonAdamAtan2` orthogonalizes
the momentum of the blocks' matrices by Newton-Schulz). Seeded, tiny, nothing
downloaded.

    python tests/clients/train_grokadamw.py --steps 3
    memledger trace tests/clients/train_grokadamw.py --steps 2 -o grok.ledger -- --signal gap
    memledger compare tests/clients/train_grokadamw.py -p 'checkpoint:blocks.*' -- --opt atan2

The model: a tiny transformer over the three tokens "a b =" (token and position embeddings,
`blocks` of pre-norm `Block`s: `Attention` (one qkv Linear, scaled_dot_product_attention,
an out Linear) and an `MLP`), a head over the P residues read at "=", cross-entropy on
(a + b) mod P over a random batch of pairs.

`--opt grok` (default): `GrokAdamW` with `--signal none` (no functions: the default signal
from `param_groups[i]['train_loss']` / `['eval_loss']`, set each step when `--validate`),
`gap` (the README's function of the train and validation losses, as floats), `tensor` (a
function returning the loss tensor itself: the optimizer averages and exponentiates it),
`raise` (a function that raises: the optimizer logs and ignores it), `--no-clip`
(`gradient_clipping=0`), `--gamma`. `--opt atan2 | clipgrok | adopt | muon` (`--normuon`:
a per-row second moment of the orthogonalized update): with `--regen R` (`regen_reg_rate`:
a `param_init` clone per parameter), `--cautious F` (`cautious_factor`), `--wd W`,
`--cautious-wd`, `--decoupled`. All: `--closure` (the batch, the loss and its backward
inside `optimizer.step(closure)`), `--accum N`, `--validate` (a loss under no_grad each
step), `--keep-zeros` (`zero_grad(set_to_none=False)`), `--reload-at K` (model and optimizer
saved with `torch.save` and loaded back after step K). `--bug no-zero-grad` (never zeroed),
`readme-closure` (the README's `optimizer.step(closure=lambda: loss_fn(model, data))`: the
closure computes the loss and no backward, so no parameter has a gradient and nothing moves).
"""

import argparse
import io

import torch
import torch.nn as nn
import torch.nn.functional as F

from adam_atan2_pytorch import AdamAtan2, AdamAtan2ClipGrok, AdoptAtan2, MuonAdamAtan2
from grokadamw import GrokAdamW


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)  # (B, h, T, hs)
        return self.out(o.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ModAdd(nn.Module):
    def __init__(self, p: int, dim: int, heads: int, depth: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(p + 1, dim)          # the P residues and "="
        self.pos = nn.Parameter(torch.randn(3, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, p)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos                     # (B, 3, dim)
        return self.head(self.norm(self.blocks(x))[:, -1])  # (B, P)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--p", type=int, default=31)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--opt", default="grok", choices=["grok", "atan2", "clipgrok", "adopt", "muon"])
    ap.add_argument("--signal", default="none", choices=["none", "gap", "tensor", "raise"])
    ap.add_argument("--no-clip", action="store_true")
    ap.add_argument("--gamma", type=float, default=0.1)
    ap.add_argument("--regen", type=float, default=0.0)
    ap.add_argument("--cautious", type=float, default=1.0)
    ap.add_argument("--wd", type=float, default=0.0)
    ap.add_argument("--cautious-wd", action="store_true")
    ap.add_argument("--decoupled", action="store_true")
    ap.add_argument("--normuon", action="store_true")
    ap.add_argument("--closure", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--keep-zeros", action="store_true")
    ap.add_argument("--reload-at", type=int, default=0)
    ap.add_argument("--bug", default="none", choices=["none", "no-zero-grad", "readme-closure"])
    args = ap.parse_args()
    torch.manual_seed(0)

    model = ModAdd(args.p, args.dim, args.heads, args.depth)
    losses = {"train": None, "eval": None}    # what the signal functions read

    def gap() -> float:   # the README's signal: how far validation trails training
        if losses["train"] is None or losses["eval"] is None or losses["train"] == 0:
            return 0.0
        return (losses["eval"] - losses["train"]) / losses["train"]

    def loss_tensor():    # a signal handed back as the loss tensor itself
        return losses["train_t"]

    def broken() -> float:
        raise RuntimeError("no validation loss yet")

    if args.opt == "grok":
        fns = {"none": None, "gap": [gap], "tensor": [loss_tensor],
               "raise": [broken, gap]}[args.signal]
        opt = GrokAdamW(model.parameters(), lr=1e-3, weight_decay=args.wd or 1e-2,
                        gamma=args.gamma, grokking_signal_fns=fns,
                        gradient_clipping=0.0 if args.no_clip else 1.0)
    elif args.opt == "muon":   # the blocks' matrices by Muon, the rest by AdamAtan2
        muon = [p for p in model.blocks.parameters() if p.ndim == 2]
        opt = MuonAdamAtan2(muon, list(model.parameters()), lr=1e-3, weight_decay=args.wd,
                            regen_reg_rate=args.regen, cautious_factor=args.cautious,
                            use_normuon=args.normuon)
    else:
        cls = {"atan2": AdamAtan2, "clipgrok": AdamAtan2ClipGrok, "adopt": AdoptAtan2}[args.opt]
        kw = dict(lr=1e-3, weight_decay=args.wd, regen_reg_rate=args.regen,
                  decoupled_wd=args.decoupled, cautious_factor=args.cautious)
        if args.opt != "adopt":
            kw["cautious_wd"] = args.cautious_wd
        opt = cls(model.parameters(), **kw)

    def batch():
        a = torch.randint(0, args.p, (args.batch,))
        b = torch.randint(0, args.p, (args.batch,))
        eq = torch.full_like(a, args.p)
        return torch.stack([a, b, eq], dim=1), (a + b) % args.p

    for step in range(args.steps):
        model.train()
        if args.bug == "readme-closure":
            tokens, y = batch()
            loss = opt.step(closure=lambda: F.cross_entropy(model(tokens), y))
        elif args.closure:
            def closure():
                opt.zero_grad(set_to_none=not args.keep_zeros)
                tokens, y = batch()
                out = F.cross_entropy(model(tokens), y)
                out.backward()
                return out
            loss = opt.step(closure)
        else:
            for _ in range(args.accum):
                tokens, y = batch()
                loss = F.cross_entropy(model(tokens), y)
                (loss / args.accum).backward()
            losses["train"], losses["train_t"] = loss.item(), loss.detach()
            for group in opt.param_groups:       # the default signal reads these
                group["train_loss"] = losses["train"]
            opt.step()
            if args.bug != "no-zero-grad":
                opt.zero_grad(set_to_none=not args.keep_zeros)
        print(f"step {step}  loss {loss.item():.4f}")
        if args.reload_at and step + 1 == args.reload_at:   # a checkpoint saved and resumed
            buf = io.BytesIO()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
            buf.seek(0)
            ck = torch.load(buf)
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])

        if args.validate:
            model.eval()
            with torch.no_grad():
                tokens, y = batch()
                losses["eval"] = F.cross_entropy(model(tokens), y).item()
            for group in opt.param_groups:
                group["eval_loss"] = losses["eval"]
            print(f"validation loss {losses['eval']:.4f}")


if __name__ == "__main__":
    main()
