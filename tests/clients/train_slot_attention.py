"""Slot attention (slot_attention, lucidrains) as its README writes it: `SlotAttention`
(slots drawn from a learned Gaussian with `torch.randn` in every forward, then `iters`
rounds of attention over the inputs, softmax over the slots, a shared `nn.GRUCell` and a
residual MLP with an in-place ReLU), `MultiHeadSlotAttention` (`--heads`), and the
`AdaptiveSlotWrapper` (a straight-through Gumbel-softmax keep mask per slot, its noise by
`torch.rand_like`). A tiny CNN encoder with a position embedding feeds it; the slots are
decoded by a broadcast MLP to reconstruct the image (MSE), the keep mask scaling each
slot's contribution. Seeded, tiny, nothing downloaded.

    python tests/clients/train_slot_attention.py --steps 3
    memledger compare tests/clients/train_slot_attention.py -p 'checkpoint:slot_attn' -- --adaptive

`--iters N` (rounds), `--slots S`, `--heads H` (multi-head; 0: the plain one),
`--adaptive` (the wrapper), `--meta K` (`MetaSlotAttention`: the slots
quantized by a K-entry `VectorQuantize` codebook, k-means initialised on the first batch,
its EMA updated in every training forward, duplicates merged and masked; not with
`--adaptive`), `--accum N`, `--validate` (a loss under no_grad, eval mode).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from slot_attention import (AdaptiveSlotWrapper, MetaSlotAttention, MultiHeadSlotAttention,
                            SlotAttention)


class Model(nn.Module):
    def __init__(self, args):
        super().__init__()
        d = args.dim
        self.encoder = nn.Sequential(nn.Conv2d(3, d, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(d, d, 3, padding=1))
        self.pos = nn.Parameter(torch.randn(1, args.size * args.size, d) * 0.02)
        if args.heads:
            slot = MultiHeadSlotAttention(num_slots=args.slots, dim=d, heads=args.heads,
                                          dim_head=8, iters=args.iters, hidden_dim=32)
        else:
            slot = SlotAttention(num_slots=args.slots, dim=d, iters=args.iters,
                                 hidden_dim=32)
        self.adaptive, self.meta = args.adaptive, args.meta
        if args.meta:
            slot = MetaSlotAttention(slot, codebook_size=args.meta)
        self.slot_attn = AdaptiveSlotWrapper(slot) if args.adaptive else slot
        self.decoder = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 4))
        self.size = args.size

    def forward(self, img):
        b = img.shape[0]
        x = self.encoder(img).flatten(2).transpose(1, 2) + self.pos
        vq_loss = None
        if self.meta:
            slots, keep, vq_loss = self.slot_attn(x)
            keep = keep.float()
        elif self.adaptive:
            slots, keep = self.slot_attn(x)
        else:
            slots, keep = self.slot_attn(x), None
        # spatial broadcast decoder: each slot decoded at every pixel, mixed by a softmax
        out = self.decoder(slots[:, :, None, :] + self.pos[:, None])   # b s hw 4
        rgb, alpha = out[..., :3], out[..., 3]
        if keep is not None:
            alpha = alpha.masked_fill(keep[..., None] == 0, -1e4) + keep[..., None]
        mix = alpha.softmax(dim=1)[..., None]
        recon = (rgb * mix).sum(1).transpose(1, 2).reshape(b, 3, self.size, self.size)
        loss = F.mse_loss(recon, img)
        return loss if vq_loss is None else loss + vq_loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--heads", type=int, default=0)
    p.add_argument("--adaptive", action="store_true")
    p.add_argument("--meta", type=int, default=0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Model(args)
    optim = torch.optim.Adam(model.parameters(), lr=4e-4)
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = model(torch.rand(args.batch, 3, args.size, args.size))
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {model(torch.rand(args.batch, 3, args.size, args.size)).item():.4f}")


if __name__ == "__main__":
    main()
