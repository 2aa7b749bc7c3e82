"""A model the script never calls, only its parts, from its own loop (Note [A model held by
the script], memledger/trace/roots.py): plain torch, AdamW, tiny sizes.

- `loop`: an `nn.ModuleDict` of a `Sequential` of two residual MLP blocks and a head, its
  blocks called one by one in the script's loop (`for b in model["blocks"]: h = b(h)`), as
  mixture-of-attention's padded sequences are run (tests/clients/train_routed_attn.py
  --mask). No module holds a forward the script calls.
- `parts`: the common research shape, a model class whose forward the script never calls:
  `x = model.embed(ids); for blk in model.blocks: x = blk(x); logits = model.head(x)`,
  cross-entropy over the next token.
- `gan`: a generator and a discriminator held separately (`G`, `D`) and a loss module held
  nowhere (`bce`), each called as a whole: they stay apart (Note [Root names]).

`--unused` adds a layer to `parts`' model that the optimizer holds and the loop never
calls (a doctor finding, naming its parameters). `--ema` keeps an EMA wrapper as ema-pytorch's `EMA(model)` is (the model and a frozen copy)
and evaluates the copy after each step; `--in-function` runs the step in a function of the
script whose local binds the model (else the loop is the script's module-level code).

    memledger predict run.ledger -p 'checkpoint:blocks.*'
    memledger measure tests/clients/train_parts_loop.py -p 'checkpoint:blocks.*' -- --case parts
"""

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class LM(nn.Module):
    """Its forward exists, but the script runs the parts itself."""

    def __init__(self, vocab: int, d: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:   # never called by the script
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


class EMA(nn.Module):
    """ema-pytorch's shape: the model, its frozen copy, and a `__call__` running the copy."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.online_model = model
        self.ema_model = copy.deepcopy(model).requires_grad_(False)

    @torch.no_grad()
    def update(self, decay: float = 0.9) -> None:
        for e, p in zip(self.ema_model.parameters(), self.online_model.parameters()):
            e.lerp_(p, 1 - decay)


p = argparse.ArgumentParser()
p.add_argument("--case", choices=["loop", "parts", "gan"], default="loop")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--ema", action="store_true")
p.add_argument("--in-function", action="store_true")
p.add_argument("--unused", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
d, batch, n = 16, 4, 8
if args.case == "loop":
    model = nn.ModuleDict({"blocks": nn.Sequential(Block(d), Block(d)), "head": nn.Linear(d, 1)})
elif args.case == "parts":
    model = LM(32, d, 2)
    if args.unused:   # a layer the optimizer trains that the loop never calls
        model.proj = nn.Linear(d, d)
else:
    G = nn.Sequential(nn.Linear(8, d), nn.GELU(), nn.Linear(d, d))
    D = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
    bce = nn.BCEWithLogitsLoss()
    opt_g = torch.optim.AdamW(G.parameters(), lr=1e-3)
    opt_d = torch.optim.AdamW(D.parameters(), lr=1e-3)
if args.case != "gan":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = EMA(model) if args.ema else None


def batch_of() -> tuple[torch.Tensor, torch.Tensor]:
    if args.case == "parts":
        ids = torch.randint(0, 32, (batch, n + 1))
        return ids[:, :-1], ids[:, 1:]
    return torch.randn(batch, n, d), torch.randn(batch, n, 1)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The step's loss, the model's parts called from a frame whose local binds it."""
    if args.case == "loop":
        h = x
        for b in model["blocks"]:
            h = b(h)
        return F.mse_loss(model["head"](h), y)
    h = model.embed(x)
    for blk in model.blocks:
        h = blk(h)
    return F.cross_entropy(model.head(h).flatten(0, 1), y.flatten())


for step in range(args.steps):
    if args.case == "gan":
        z, real = torch.randn(batch, 8), torch.randn(batch, d)
        fake = G(z)
        d_loss = bce(D(real), torch.ones(batch, 1)) + bce(D(fake.detach()), torch.zeros(batch, 1))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = bce(D(fake), torch.ones(batch, 1))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        continue
    x, y = batch_of()
    if args.in_function:
        loss = loss_of(model, x, y)
    elif args.case == "loop":
        h = x
        for b in model["blocks"]:
            h = b(h)
        loss = F.mse_loss(model["head"](h), y)
    else:
        h = model.embed(x)
        for blk in model.blocks:
            h = blk(h)
        loss = F.cross_entropy(model.head(h).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if ema is not None:
        ema.update()
        with torch.no_grad():   # the copy evaluated, through its own parts
            h = x if args.case == "loop" else ema.ema_model.embed(x)
            for b in (ema.ema_model["blocks"] if args.case == "loop" else ema.ema_model.blocks):
                h = b(h)
