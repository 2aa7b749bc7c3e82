"""Taylor-series linear attention (taylor-series-linear-attention 0.2.0, lucidrains) used
directly: `TaylorSeriesLinearAttn` (exp(q.k) by its second-order Taylor expansion, a
linear attention over features of size 1 + d + d^2) in a tiny token classifier, the
library's `ViT`, and `ChannelFirstTaylorSeriesLinearAttn` in a small conv net. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_taylor.py --steps 3
    memledger trace tests/clients/train_taylor.py --steps 2 -o ts.ledger -- --model vit

`--model seq` (default): blocks of `x + attn(x, mask=...)` then a feed-forward, options
`--prenorm` (the attention's own RMSNorm), `--gate` (`gate_value_heads`), `--one-kv`
(`one_headed_kv`), `--rotary`, `--shift` (`shift_tokens`), `--even` (`remove_even_power_
dups`), `--mask` (a padding mask), `--cross` (every other block attends to a context
sequence). `--model vit`: the library's ViT on 8x8 images. `--model image`: two convs
around a `ChannelFirstTaylorSeriesLinearAttn`. `--causal` asks for the causal attention
(its recurrent cache path), which needs pytorch-fast-transformers: without it the library
prints a line and calls `exit()` while the model is built. `--accum N`, `--clip`,
`--optim adam|sgd`, `--bug no-zero-grad`.
"""

import argparse

import torch
from torch import nn

from taylor_series_linear_attention import ChannelFirstTaylorSeriesLinearAttn, \
    TaylorSeriesLinearAttn
from taylor_series_linear_attention.vit import ViT


class Block(nn.Module):
    def __init__(self, dim: int, cross: bool, **kw) -> None:
        super().__init__()
        self.cross = cross
        self.attn = TaylorSeriesLinearAttn(dim, **kw)
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x, mask=None, context=None):
        x = x + self.attn(x, mask=None if self.cross else mask,
                          context=context if self.cross else None)
        return x + self.ff(self.norm(x))


class SeqClassifier(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        dim = args.dim
        self.embed = nn.Embedding(32, dim)
        kw = dict(dim_head=4, heads=2, causal=args.causal, prenorm=args.prenorm,
                  gate_value_heads=args.gate, one_headed_kv=args.one_kv,
                  rotary_emb=args.rotary, shift_tokens=args.shift,
                  remove_even_power_dups=args.even)
        self.blocks = nn.ModuleList(Block(dim, args.cross and i % 2 == 1, **kw)
                                    for i in range(args.depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, tokens, mask=None, context=None):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, mask=mask, context=context)
        return self.head(x.mean(dim=1))


class ImageNet(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 3, padding=1)
        self.attn = ChannelFirstTaylorSeriesLinearAttn(dim, dim_head=4, heads=2)
        self.head = nn.Linear(dim, 4)

    def forward(self, img):
        x = torch.relu(self.stem(img))
        x = x + self.attn(x)
        return self.head(x.mean(dim=(2, 3)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="seq", choices=["seq", "vit", "image"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=12)
    p.add_argument("--batch", type=int, default=2)
    for flag in ("--prenorm", "--gate", "--one-kv", "--rotary", "--shift", "--even",
                 "--mask", "--cross", "--causal", "--clip"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--optim", default="adam", choices=["adam", "sgd"])
    p.add_argument("--bug", default=None, choices=["no-zero-grad"])
    args = p.parse_args()
    torch.manual_seed(0)

    if args.model == "seq":
        model = SeqClassifier(args)
    elif args.model == "vit":
        model = ViT(image_size=8, patch_size=4, num_classes=4, dim=args.dim,
                    depth=args.depth, heads=2, dim_head=4)
    else:
        model = ImageNet(args.dim)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3) if args.optim == "adam" else \
        torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    for step in range(args.steps):
        for _ in range(args.accum):
            y = torch.randint(0, 4, (args.batch,))
            if args.model == "seq":
                tokens = torch.randint(0, 32, (args.batch, args.seq_len))
                mask = torch.ones_like(tokens, dtype=torch.bool)
                mask[0, -3:] = False
                context = torch.randn(args.batch, 5, args.dim) if args.cross else None
                logits = model(tokens, mask=mask if args.mask else None, context=context)
            else:
                logits = model(torch.randn(args.batch, 3, 8, 8))
            loss = nn.functional.cross_entropy(logits, y)
            (loss / args.accum).backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if args.bug != "no-zero-grad":
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
