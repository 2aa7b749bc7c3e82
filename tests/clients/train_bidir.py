"""Two sequences attending to each other: bidirectional-cross-attention (lucidrains) as its
README writes it, one shared similarity matrix softmaxed along each sequence's length,
each sequence aggregating the other's values. Seeded, tiny, nothing downloaded.

    python tests/clients/train_bidir.py --steps 3
    memledger trace tests/clients/train_bidir.py --steps 2 -o bidir.ledger -- --mask both
    memledger compare tests/clients/train_bidir.py -p 'checkpoint:net.layers.*' -- --mask both

`--model tf` (default): `BidirectionalCrossAttentionTransformer` (prenorm attention, a
feedforward per sequence, `depth` layers in a `ModuleList` of `ModuleList`s) between a
video sequence (dim 32) and an audio sequence (`--context-dim`, 32 unless given; the
library's final context norm is built over `dim`, so `--final-norms` wants them equal),
pooled and classified into 10 classes from both. `--model attn`: one
`BidirectionalCrossAttention` layer (`--talking-heads`: a 1x1 Conv2d over each attention
map; `--dropout P`; `--prenorm`; `--return-attn`, the attention maps added to the loss by
their entropy) over two projected sequences. Both: `--mask x | context | both` (random
key-padding masks; the library fills the missing one with `torch.ones` in every call),
`--rel-pos` (a learned (heads, i, j) bias handed as `rel_pos_bias`), `--accum N`, `--clip`,
`--validate` (a loss under no_grad in eval mode each step), `--amp` (bf16 autocast).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from bidirectional_cross_attention import (BidirectionalCrossAttention,
                                           BidirectionalCrossAttentionTransformer)


class TwoStreams(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        dim, cdim = args.dim, args.context_dim or args.dim
        self.model = args.model
        if args.model == "tf":
            self.net = BidirectionalCrossAttentionTransformer(
                dim=dim, depth=args.depth, context_dim=cdim, heads=args.heads, dim_head=8,
                final_norms=args.final_norms, dropout=args.dropout,
                talking_heads=args.talking_heads)
        else:
            self.proj = nn.Linear(dim, dim)
            self.context_proj = nn.Linear(cdim, cdim)
            self.net = BidirectionalCrossAttention(
                dim=dim, context_dim=cdim, heads=args.heads, dim_head=8,
                dropout=args.dropout, talking_heads=args.talking_heads,
                prenorm=args.prenorm)
        self.rel_pos = nn.Parameter(torch.zeros(args.heads, args.seq, args.context_seq)) \
            if args.rel_pos else None
        self.head = nn.Linear(dim + cdim, 10)

    def forward(self, x, context, mask=None, context_mask=None, return_attn=False):
        if self.model == "attn":
            x, context = self.proj(x), self.context_proj(context)
        out = self.net(x, context, mask=mask, context_mask=context_mask,
                       return_attn=return_attn, rel_pos_bias=self.rel_pos)
        x, context = out[0], out[1]
        logits = self.head(torch.cat([x.mean(1), context.mean(1)], dim=-1))  # (B, 10)
        return (logits, *out[2:]) if return_attn else (logits,)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--model", default="tf", choices=["tf", "attn"])
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--context-dim", type=int, default=None)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=12)
    ap.add_argument("--context-seq", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--mask", default="none", choices=["none", "x", "context", "both"])
    ap.add_argument("--rel-pos", action="store_true")
    ap.add_argument("--talking-heads", action="store_true")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--prenorm", action="store_true")
    ap.add_argument("--final-norms", action="store_true")
    ap.add_argument("--return-attn", action="store_true")
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--clip", action="store_true")
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--amp", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)

    model = TwoStreams(args)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    cdim = args.context_dim or args.dim

    def batch():
        x = torch.randn(args.batch, args.seq, args.dim)                     # (B, i, dim)
        context = torch.randn(args.batch, args.context_seq, cdim)           # (B, j, cdim)
        mask = torch.rand(args.batch, args.seq) > 0.2 \
            if args.mask in ("x", "both") else None
        context_mask = torch.rand(args.batch, args.context_seq) > 0.2 \
            if args.mask in ("context", "both") else None
        return x, context, mask, context_mask, torch.randint(0, 10, (args.batch,))

    def loss_of(x, context, mask, context_mask, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            out = model(x, context, mask=mask, context_mask=context_mask,
                        return_attn=args.return_attn)
        loss = F.cross_entropy(out[0].float(), y)
        if args.return_attn:   # each map's entropy, a little of it
            for a in out[1:]:
                loss = loss + 1e-3 * -(a * a.clamp(min=1e-9).log()).sum(-1).mean()
        return loss

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of(*batch())
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of(*batch()).item():.4f}")


if __name__ == "__main__":
    main()
