"""Charformer's GBST (charformer-pytorch, lucidrains) as its README writes it: byte
embeddings, a depthwise conv for positions, block representations mean-pooled over several
block sizes (each a clone of the sequence, padded for its offset), scored by a linear and
mixed by a softmax across block sizes (with the "consensus attention", a softmax over the
scores' own similarity), then mean-pooled down by `downsample_factor`. Its output feeds a
small `nn.TransformerEncoder` of our own. Seeded, tiny, nothing downloaded.

    python tests/clients/train_charformer.py --steps 3 --mode cls
    memledger trace tests/clients/train_charformer.py --steps 2 -o cf.ledger -- --mask
    memledger compare tests/clients/train_charformer.py -p 'checkpoint:encoder.layers.*'

Modes (`--mode`):

- `cls`: byte-level classification: GBST, the encoder, a mean over the downsampled
  positions (masked where `--mask`), a linear head; cross-entropy, AdamW.
- `mlm`: a masked byte loss: 15% of the bytes replaced by a mask byte, the encoder's
  output upsampled back to bytes (`repeat_interleave` by the downsample factor), logits
  over 257 bytes, cross-entropy on the masked positions only; Adam with clipping.

Both: `--mask` (a padding mask: rows of random lengths, GBST's masked means and its
masked scores), `--blocks offsets` (blocks `((1, 0), (2, 0), (3, 1), (4, 0))`, the
README's form, instead of `max_block_size=4`), `--no-consensus`
(`score_consensus_attn=False`), `--post-norm` (post-norm layers, torch's default
`enable_nested_tensor`: `--validate`'s eval forwards take the fast path on nested
tensors where `--mask`), `--accum N`, `--amp` (bf16 autocast), `--validate` (a loss
under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from charformer_pytorch import GBST

MASK_BYTE = 256


class ByteModel(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        blocks = {"blocks": ((1, 0), (2, 0), (3, 1), (4, 0))} if args.blocks == "offsets" \
            else {"max_block_size": 4}
        self.ds = 4
        self.tokenizer = GBST(num_tokens=257, dim=args.dim, downsample_factor=self.ds,
                              score_consensus_attn=not args.no_consensus, **blocks)
        layer = nn.TransformerEncoderLayer(args.dim, 2, dim_feedforward=2 * args.dim,
                                           dropout=args.dropout, batch_first=True,
                                           norm_first=not args.post_norm)
        # post-norm: torch's default `enable_nested_tensor=True`, so an eval forward under
        # no_grad with a padding mask runs the fast path on a nested tensor
        self.encoder = nn.TransformerEncoder(layer, args.depth,
                                             enable_nested_tensor=args.post_norm)
        self.head = nn.Linear(args.dim, 10 if args.mode == "cls" else 257)
        self.mode = args.mode

    def forward(self, x, mask=None):
        n = x.shape[1]
        h, m = self.tokenizer(x, mask=mask)
        h = self.encoder(h, src_key_padding_mask=None if m is None else ~m)
        if self.mode == "cls":
            if m is None:
                return self.head(h.mean(dim=1))
            w = m.unsqueeze(-1).to(h.dtype)
            return self.head((h * w).sum(1) / w.sum(1).clamp(min=1.0))
        h = h.repeat_interleave(self.ds, dim=1)[:, :n]
        return self.head(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="cls", choices=["cls", "mlm"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=30)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--blocks", default="max", choices=["max", "offsets"])
    p.add_argument("--no-consensus", action="store_true")
    p.add_argument("--post-norm", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = ByteModel(args)
    if args.mode == "cls":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loss_of() -> torch.Tensor:
        b, n = args.batch, args.seq_len
        x = torch.randint(0, 256, (b, n))
        mask = None
        if args.mask:
            lens = torch.randint(n // 2, n + 1, (b,))
            mask = torch.arange(n)[None, :] < lens[:, None]
        if args.mode == "cls":
            return F.cross_entropy(model(x, mask), torch.randint(0, 10, (b,)))
        picked = torch.rand(b, n) < 0.15
        if mask is not None:
            picked &= mask
        logits = model(x.masked_fill(picked, MASK_BYTE), mask)
        return F.cross_entropy(logits[picked], x[picked])

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.mode == "mlm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
