"""A tiny pre-LN transformer classifier trained by pytorch_optimizer's optimizers (kozistr's
collection), as its README and docs build them. Seeded, tiny, nothing downloaded.

    python tests/clients/train_pto.py --opt soap --steps 3
    memledger trace tests/clients/train_pto.py --steps 2 -o soap.ledger -- --opt soap

`--opt`:

- `soap`: `SOAP(model.parameters())`: Adam in Shampoo's eigenbasis; per matrix a (d, d)
  statistics matrix `GG` and an eigenbasis `Q` for each of its dimensions (lists in the
  state), exp_avg and exp_avg_sq; its first step only builds the state (no update).
- `shampoo`: `Shampoo`: a momentum buffer and (d, d) `pre_cond_i` / `inv_pre_cond_i` per
  dimension of every parameter (1-D ones too).
- `muon`: `Muon` with two param groups as its docstring writes them: `use_muon=True` for
  the blocks' matrices (a momentum buffer), `use_muon=False` (AdamW: exp_avg, exp_avg_sq)
  for the embedding, head, biases and LayerNorm gains.
- `adopt`: `ADOPT`: exp_avg, exp_avg_sq (its first step fills exp_avg_sq only).
- `lookahead`: `Lookahead(AdamW(...), k=2)`: the slow weights made at construction, the
  base optimizer stepped inside Lookahead's own step.
- `lookahead_sgd`: `Lookahead(SGD(momentum=0.9), k=2, pullback_momentum='pullback')`: slow
  momenta made at construction, pulled into SGD's momentum buffers at each sync.
  `--eval-slow`: evaluate on the slow weights (`backup_and_load_cache()` /
  `clear_and_load_backup()`: a copy of every parameter in the state while evaluating).
- `create`: `create_optimizer(model, 'adamp', use_lookahead=True, weight_decay=1e-2)`: the
  library's factory, weight decay off for biases and LayerNorms (two param groups).
- `create:NAME`: `create_optimizer(model, NAME, lr=1e-3)`: any optimizer by the library's
  factory.
- `sf_adamw`: `ScheduleFreeAdamW`: `optimizer.train()` / `eval()` swap the parameters in
  place; the loop evaluates under `eval()` after each step.
- `ranger21`: `Ranger21`: gradient centralization and adaptive gradient clipping written
  into `p.grad` in place, positive-negative momentum, a built-in Lookahead.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, D, HEADS, SEQ, BATCH, N_CLASSES, DEPTH = 64, 32, 4, 16, 8, 4, 2


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.Sequential(*(Block() for _ in range(DEPTH)))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, N_CLASSES)

    def forward(self, idx):
        return self.head(self.norm(self.blocks(self.embed(idx))).mean(dim=1))


def make_optimizer(name: str, model: nn.Module):
    import pytorch_optimizer as po

    ps = list(model.parameters())
    if name == "soap":
        return po.SOAP(ps, lr=3e-3, precondition_frequency=2)
    if name == "shampoo":
        return po.Shampoo(ps, lr=1e-3)
    if name == "muon":
        hidden = [p for p in model.blocks.parameters() if p.ndim >= 2]
        rest = [p for p in model.blocks.parameters() if p.ndim < 2]
        rest += [*model.embed.parameters(), *model.norm.parameters(), *model.head.parameters()]
        return po.Muon([dict(params=hidden, lr=0.02, weight_decay=0.01, use_muon=True),
                        dict(params=rest, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01,
                             use_muon=False)])
    if name == "adopt":
        return po.ADOPT(ps, lr=1e-3)
    if name == "lookahead":
        return po.Lookahead(torch.optim.AdamW(ps, lr=1e-3), k=2, alpha=0.5)
    if name == "lookahead_sgd":
        # pullback: the base optimizer's momentum pulled toward slow momenta at each sync
        return po.Lookahead(torch.optim.SGD(ps, lr=1e-2, momentum=0.9), k=2, alpha=0.5,
                            pullback_momentum="pullback")
    if name == "create":
        return po.create_optimizer(model, "adamp", lr=1e-3, weight_decay=1e-2,
                                   use_lookahead=True, k=2)
    if name == "sf_adamw":
        return po.ScheduleFreeAdamW(ps, lr=1e-3, warmup_steps=2)
    if name == "ranger21":
        return po.Ranger21(ps, num_iterations=100, lr=1e-3)
    if name.startswith("create:"):   # any of the library's optimizers, by its factory
        return po.create_optimizer(model, name.split(":", 1)[1], lr=1e-3)
    raise SystemExit(f"unknown --opt {name}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--opt", default="soap")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--seq", type=int, default=SEQ)
    p.add_argument("--eval-slow", action="store_true",
                   help="Lookahead: evaluate on the slow weights (backup_and_load_cache)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = make_optimizer(args.opt, model)
    swaps = hasattr(opt, "eval") and hasattr(opt, "train")   # schedule-free
    gen = torch.Generator().manual_seed(1234)
    x_val = torch.randint(0, VOCAB, (args.batch, args.seq), generator=gen)
    for step in range(args.steps):
        x = torch.randint(0, VOCAB, (args.batch, args.seq), generator=gen)
        y = torch.randint(0, N_CLASSES, (args.batch,), generator=gen)
        model.train()
        if swaps:
            opt.train()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model.eval()
        if swaps:
            opt.eval()
        if args.eval_slow:   # evaluate the slow weights, as Lookahead's docs show
            opt.backup_and_load_cache()
        with torch.no_grad():
            val = model(x_val).square().mean()
        if args.eval_slow:
            opt.clear_and_load_backup()
        print(f"step {step}  loss {loss.item():.4f}  val {val.item():.4f}")


if __name__ == "__main__":
    main()
