"""pause-transformer (tests/clients/train_pause.py): lucidrains' Pause Transformer: a
causal decoder whose every token is followed by `max_pause_length` learned pause tokens
("thinking" tokens, a parameter repeated over the batch and sequence); each layer's
attention and feedforward run twice, once over the main sequence and once over every
token's pause tokens (packed, folded into the batch), and the last pause token of the
previous position is folded back into the main stream (`IntegratePreviousThought`).
Trained as its README does (`loss = model(x, return_loss = True); loss.backward()`), tiny
sizes, random tokens. Seeded, nothing downloaded. 0.0.7's attention masks with a float
mask, which torch refuses: `BoolMaskCausalAttention` below is the user's one-line fix.

    python tests/clients/train_pause.py --steps 3
    memledger trace tests/clients/train_pause.py --steps 2 -o p.ledger -- --pause 3
    memledger compare tests/clients/train_pause.py -p 'checkpoint:layers.*' --

Options: `--pause N` max pause length (2), `--arrest` (no pausing: the plain decoder),
`--no-integrate` (no previous-pause integration), `--uniform` (random pause lengths per
token, `rand_uniform_pausing`), `--dim`, `--depth`, `--batch`, `--seq`, `--accum N`
(gradient accumulation), `--clip X` (clip_grad_norm_), `--optim adam|adamw|sgd`, `--amp` (the forward under
bfloat16 autocast),
`--bug no-zero-grad` (a loop that never zeroes the gradients: the doctor's finding).
"""

import argparse
import contextlib

import torch
from torch import einsum

from pause_transformer import PauseTransformer
from pause_transformer.pause_transformer import CausalAttention


class BoolMaskCausalAttention(CausalAttention):
    """The library's CausalAttention with its causal mask made boolean: 0.0.7 builds it as
    `torch.ones((i, j)).triu(...)` (float32), which `masked_fill` has refused since torch
    2.x ("masked_fill_ only supports boolean masks"), so the model as published cannot run
    a forward. Same parameters, same arithmetic otherwise; swapped in by `__class__`."""

    def forward(self, x):
        x = self.norm(x)
        q, k, v = self.to_qkv(x)
        q = q * self.scale
        sim = einsum("b h i d, b h j d -> b h i j", q, k)
        i, j = sim.shape[-2:]
        causal_mask = torch.ones((i, j), device=x.device, dtype=torch.bool).triu(j - i + 1)
        sim = sim.masked_fill(causal_mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out), torch.stack((k, v))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--pause", type=int, default=2)
    p.add_argument("--arrest", action="store_true")
    p.add_argument("--no-integrate", action="store_true")
    p.add_argument("--uniform", action="store_true")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--amp", action="store_true")
    p.add_argument("--bug", default="", choices=["", "no-zero-grad"])
    args = p.parse_args()
    torch.manual_seed(0)

    model = PauseTransformer(num_tokens=args.tokens, dim=args.dim, depth=args.depth,
                             max_pause_length=args.pause, dim_head=8, heads=args.heads)
    for attn, _ in model.layers:
        attn.__class__ = BoolMaskCausalAttention
    if args.optim == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16) if args.amp \
            else contextlib.nullcontext()

    model.train()
    for step in range(args.steps):
        for _ in range(args.accum):
            x = torch.randint(0, args.tokens, (args.batch, args.seq + 1))
            with amp():
                loss = model(x, return_loss=True, arrest_pausing=args.arrest,
                             no_prev_pause_integration=args.no_integrate,
                             rand_uniform_pausing=args.uniform)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        if args.bug != "no-zero-grad":
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
