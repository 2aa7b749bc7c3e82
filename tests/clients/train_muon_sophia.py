"""A tiny nanoGPT trained by Muon (muon-optimizer, Keller Jordan's `muon.py`) or SophiaG
(sophia-opt, the paper's `SophiaG`) as their READMEs write them. Seeded, tiny, nothing
downloaded.

    python tests/clients/train_muon_sophia.py --opt sophia --hess-every 2 --steps 4
    memledger trace tests/clients/train_muon_sophia.py --steps 2 -o m.ledger -- --opt muon
    memledger compare tests/clients/train_muon_sophia.py -p 'checkpoint:blocks.*' -- --opt muon

The model: token and position embeddings, `blocks` of pre-LN causal self-attention (one
`c_attn` Linear, `scaled_dot_product_attention`) and a GELU MLP, a final LayerNorm and an
`lm_head` tied to the token embedding (`--untied`: its own weight), next-token
cross-entropy. `model(x)` (no targets) returns the logits of every position.

`--opt`:

- `muon`: `SingleDeviceMuonWithAuxAdam` with the README's two groups: the blocks' matrices
  (`p.ndim >= 2`) with `use_muon=True` (a momentum buffer each; the step orthogonalises the
  Nesterov update by five Newton-Schulz iterations in bf16), the blocks' gains and biases,
  the embeddings and the head with `use_muon=False` (its own AdamW: exp_avg, exp_avg_sq, an
  int step).
- `muon-dist`: `MuonWithAuxAdam`, the distributed variant, in a gloo world of 1 (its step
  all-gathers each updated matrix over the group).
- `muon-split`: `SingleDeviceMuon` for the matrices and `torch.optim.AdamW` for the rest,
  two optimizers stepped one after the other.
- `sophia`: `SophiaG(lr, betas=(0.965, 0.99), rho=0.01, weight_decay=0.1)` stepped with
  `bs` = tokens per step; every `--hess-every K` steps (at steps K-1, 2K-1, ...) the
  README's Hessian refresh: a forward without targets, labels sampled from the logits by
  `Categorical`, their cross-entropy's backward, `optimizer.update_hessian()`, then
  `zero_grad(set_to_none=True)` and `model.zero_grad()`.
- `adamw`: torch's AdamW on everything (the baseline).

Also: `--accum N` (gradient accumulation), `--clip C` (clip_grad_norm_ before the step),
`--scaler` (nanoGPT's `GradScaler`, disabled on CPU as its fp32 run has it, the Sophia
step through `scaler.step(optimizer, bs=...)`), `--validate` (a loss under no_grad in eval
mode each step), `--amp` (bf16 autocast), `--free-refresh` (`del` the refresh's logits,
distribution, labels and loss after `update_hessian()`: the README keeps them to the next
refresh), `--depth`, `--dim`, `--heads`, `--seq`, `--batch`.
"""

import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, seq: int, tied: bool) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)
        if tied:
            self.wte.weight = self.lm_head.weight   # nanoGPT's weight tying

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def optimizers(name: str, model: GPT):
    """As each README builds its optimizer(s)."""
    if name.startswith("muon"):
        import muon

        hidden = [p for p in model.blocks.parameters() if p.ndim >= 2]
        gains = [p for p in model.blocks.parameters() if p.ndim < 2]
        rest = [*model.lm_head.parameters(), *model.wpe.parameters(), *model.ln_f.parameters()]
        if model.wte.weight is not model.lm_head.weight:
            rest.append(model.wte.weight)
        if name == "muon-split":
            return [muon.SingleDeviceMuon(hidden, lr=0.02, weight_decay=0.01),
                    torch.optim.AdamW(gains + rest, lr=3e-4, betas=(0.9, 0.95),
                                      weight_decay=0.01)]
        groups = [dict(params=hidden, use_muon=True, lr=0.02, weight_decay=0.01),
                  dict(params=gains + rest, use_muon=False, lr=3e-4, betas=(0.9, 0.95),
                       weight_decay=0.01)]
        if name == "muon-dist":
            return [muon.MuonWithAuxAdam(groups)]
        return [muon.SingleDeviceMuonWithAuxAdam(groups)]
    if name == "sophia":
        from sophia_opt import SophiaG

        return [SophiaG(model.parameters(), lr=2e-4, betas=(0.965, 0.99), rho=0.01,
                        weight_decay=1e-1)]
    return [torch.optim.AdamW(model.parameters(), lr=1e-3)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--opt", default="muon",
                   choices=["muon", "muon-dist", "muon-split", "sophia", "adamw"])
    p.add_argument("--hess-every", type=int, default=2)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--untied", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--scaler", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--free-refresh", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    if args.opt == "muon-dist":
        import torch.distributed as dist

        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29571")
            dist.init_process_group("gloo", rank=0, world_size=1)

    model = GPT(args.dim, args.depth, args.heads, args.seq, tied=not args.untied)
    opts = optimizers(args.opt, model)
    scaler = torch.amp.GradScaler("cpu", enabled=False) if args.scaler else None
    tokens = args.batch * args.seq * args.accum   # Sophia's `bs`: tokens per step

    def batch():
        data = torch.randint(0, VOCAB, (args.batch, args.seq + 1))
        return data[:, :-1], data[:, 1:].contiguous()

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            x, y = batch()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                _, loss = model(x, y)
            loss = loss / args.accum
            (scaler.scale(loss) if scaler else loss).backward()
        if args.clip:
            if scaler:
                for opt in opts:
                    scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for opt in opts:
            kw = {"bs": tokens} if args.opt == "sophia" else {}
            if scaler:
                scaler.step(opt, **kw)
            else:
                opt.step(**kw)
        if scaler:
            scaler.update()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item() * args.accum:.4f}")

        if args.opt == "sophia" and step % args.hess_every == args.hess_every - 1:
            # the README's refresh of the Hessian's EMA: labels sampled from the model
            logits, _ = model(x)
            samp_dist = torch.distributions.Categorical(logits=logits)
            y_sample = samp_dist.sample()
            loss_sampled = F.cross_entropy(logits.view(-1, logits.size(-1)), y_sample.view(-1),
                                           ignore_index=-1)
            loss_sampled.backward()
            opts[0].update_hessian()
            opts[0].zero_grad(set_to_none=True)
            model.zero_grad()
            if args.free_refresh:   # not in the README: its tensors otherwise live on
                del logits, samp_dist, y_sample, loss_sampled

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {model(*batch())[1].item():.4f}")


if __name__ == "__main__":
    main()
