"""CoCa (CoCa-pytorch, lucidrains) as its README builds it: a contrastive captioner, an image
encoder we supply (here a tiny patch embedding plus one transformer encoder layer of our
own, no torchvision) whose tokens are attention-pooled by learned queries; unimodal text
layers (`ParallelTransformerBlock`: rotary, multi-query, a causal mask and the rotary
table cached on the module in its first forward), multimodal layers (the same blocks plus
`CrossAttention` over the image tokens with a parallel SwiGLU feed-forward); the forward
with `return_loss=True` returns caption loss + contrastive loss together. The logits'
Linear is tied to the token embedding. Seeded, tiny, nothing downloaded.

    python tests/clients/train_coca.py --steps 3
    memledger trace tests/clients/train_coca.py --steps 2 -o coca.ledger
    memledger compare tests/clients/train_coca.py -p 'checkpoint:unimodal_layers.*' -- --steps 8

Options: `--pad` (pad the tail of half the captions with the pad id: the text CLS token
masked off them, the caption loss ignoring them), `--image-tokens` (hand the encoder's
tokens in as `image_tokens=`, the encoder outside the CoCa module), `--embeddings` (a
second, retrieval-style pass with `return_embeddings=True` whose cosine loss is added),
`--accum N`, `--amp` (bf16 autocast), `--validate` (a loss under no_grad in eval mode each
step), `--sgd` (momentum) or AdamW, `--clip`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from coca_pytorch.coca_pytorch import CoCa


class TinyImageEncoder(nn.Module):
    """Patches (4 x 4) to tokens of `dim`, positions, one pre-norm encoder layer."""

    def __init__(self, dim: int, image_size: int = 16, patch: int = 4) -> None:
        super().__init__()
        self.patch = patch
        self.to_tokens = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.randn((image_size // patch) ** 2, dim) * 0.02)
        self.layer = nn.TransformerEncoderLayer(dim, 2, dim * 2, dropout=0.0,
                                                batch_first=True, norm_first=True)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.to_tokens(images).flatten(2).transpose(1, 2)  # (B, n, dim)
        return self.layer(x + self.pos)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--image-dim", type=int, default=None)
    p.add_argument("--uni", type=int, default=2)
    p.add_argument("--multi", type=int, default=2)
    p.add_argument("--queries", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=12)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--pad", action="store_true")
    p.add_argument("--image-tokens", action="store_true")
    p.add_argument("--embeddings", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--clip", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    image_dim = args.image_dim or args.dim
    encoder = TinyImageEncoder(image_dim)
    coca = CoCa(dim=args.dim, img_encoder=None if args.image_tokens else encoder,
                image_dim=image_dim, num_tokens=num_tokens, unimodal_depth=args.uni,
                multimodal_depth=args.multi, dim_head=8, heads=args.heads,
                num_img_queries=args.queries, ff_mult=2, caption_loss_weight=1.,
                contrastive_loss_weight=1.)
    model = nn.ModuleDict({"coca": coca, "encoder": encoder}) if args.image_tokens else coca
    params = list(model.parameters())
    optim = (torch.optim.SGD(params, lr=1e-2, momentum=0.9) if args.sgd
             else torch.optim.AdamW(params, lr=1e-3))

    def batch():
        text = torch.randint(1, num_tokens, (args.batch, args.seq_len))
        if args.pad:
            text[: args.batch // 2, args.seq_len // 2:] = 0  # the pad id
        return text, torch.randn(args.batch, 3, 16, 16)

    def loss_of() -> torch.Tensor:
        text, images = batch()
        if args.image_tokens:
            loss = coca(text=text, image_tokens=encoder(images), return_loss=True)
        else:
            loss = coca(text=text, images=images, return_loss=True)
        if args.embeddings:
            t, i = coca(text=text, images=None if args.image_tokens else images,
                        image_tokens=encoder(images) if args.image_tokens else None,
                        return_embeddings=True)
            loss = loss + (1 - F.cosine_similarity(t, i, dim=-1)).mean()
        return loss

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
