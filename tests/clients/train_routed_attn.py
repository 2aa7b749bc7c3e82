"""deformable-attention and mixture-of-attention (lucidrains) as their READMEs write them,
tiny, seeded, nothing downloaded.

    python tests/clients/train_routed_attn.py --steps 2 --mode deform2d
    memledger trace tests/clients/train_routed_attn.py --steps 2 -o d.ledger -- --mode moa

Modes (`--mode`):

- `deform2d`: a stack of `DeformableAttention` (2D) blocks on random feature maps (offsets
  from a strided depthwise conv on the grouped queries, keys / values bilinearly sampled at
  the offset grid by `F.grid_sample`, a continuous position bias MLP), mean-pooled into a
  classifier; cross-entropy, AdamW.
- `deform1d`: the same with `DeformableAttention1D` on (b, d, n) sequences.
- `moa`: `MixtureOfAttention` (tokens routed to attention experts by colt5's coordinate
  descent router, the experts' outputs scattered back with `scatter_add`, unrouted tokens
  given a learned null token), a block with a feed-forward, regression to a random target.
- `moaar`: the library's causal `Transformer` (`MixtureOfAutoregressiveAttention`: local
  attention plus routed windows) as an LM, next-token cross-entropy, Adam.

`moa` only: `--local W` (local attention over windows of W beside the routed experts),
`--mask` (the last 5 tokens of the second sequence padding; the script calls each block
with `mask=`), `--average` (`average_routed`), `--iters N` (the router's coordinate-descent
iterations, 20 by default as colt5's).

`--depth N`, `--accum N`, `--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, attn: nn.Module, dim: int, conv: bool) -> None:
        super().__init__()
        self.attn = attn
        self.ff = (nn.Sequential(nn.Conv2d(dim, dim * 2, 1), nn.GELU(), nn.Conv2d(dim * 2, dim, 1))
                   if conv else nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim)))

    def forward(self, x, **kw):
        x = self.attn(x, **kw) + x
        return self.ff(x) + x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="deform2d", choices=["deform2d", "deform1d", "moa", "moaar"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--local", type=int, default=0)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--average", action="store_true")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    torch.manual_seed(0)
    d = args.dim

    if args.mode in ("deform2d", "deform1d"):
        from deformable_attention import DeformableAttention, DeformableAttention1D
        two = args.mode == "deform2d"
        make = DeformableAttention if two else DeformableAttention1D
        blocks = nn.Sequential(*[
            Block(make(dim=d, dim_head=8, heads=2, downsample_factor=2, offset_scale=2,
                       offset_kernel_size=4), d, conv=two) if two else
            Block(make(dim=d, dim_head=8, heads=2, downsample_factor=2, offset_scale=2,
                       offset_kernel_size=4), d, conv=False)
            for _ in range(args.depth)])
        if not two:
            # the 1D attention takes (b, d, n); its feed-forward wants (b, n, d)
            for b in blocks:
                b.ff = nn.Sequential(nn.Conv1d(d, d * 2, 1), nn.GELU(), nn.Conv1d(d * 2, d, 1))
        head = nn.Linear(d, 10)
        model = nn.ModuleDict({"blocks": blocks, "head": head})
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            x = torch.randn(args.batch, d, 8, 8) if two else torch.randn(args.batch, d, 32)
            h = model["blocks"](x)
            logits = model["head"](h.flatten(2).mean(-1))
            return F.cross_entropy(logits, torch.randint(0, 10, (args.batch,)))
    elif args.mode == "moa":
        from mixture_of_attention import MixtureOfAttention
        blocks = nn.Sequential(*[
            Block(MixtureOfAttention(dim=d, num_routed_queries=8, num_routed_key_values=8,
                                     num_experts=2, dim_head=8, heads=2, use_triton=False,
                                     local_attn=args.local > 0,
                                     local_attn_window_size=args.local or None,
                                     average_routed=args.average, n_iters=args.iters),
                  d, conv=False)
            for _ in range(args.depth)])
        model = nn.ModuleDict({"blocks": blocks})
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            x = torch.randn(args.batch, 16, d)
            if args.mask:
                # padded sequences: the mask rides through the blocks by keyword
                mask = torch.arange(16) < torch.tensor([[16], [11]])[: args.batch]
                h = x
                for b in model["blocks"]:
                    h = b(h, mask=mask)
                return F.mse_loss(h, torch.randn(args.batch, 16, d))
            return F.mse_loss(model["blocks"](x), torch.randn(args.batch, 16, d))
    else:
        from mixture_of_attention.transformer import Transformer
        # 32 tokens in windows of 8: with as many routed tokens as a window holds
        # (16, 4, 4) the library's own torch.cat fails (sizes 2 and 6)
        model = Transformer(dim=d, num_tokens=32, depth=args.depth, seq_len=32,
                            local_attn_window_size=8, num_routed_queries=4,
                            num_routed_key_values=4, num_experts=2, dim_head=8, heads=2,
                            use_triton=False)
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, 32, (args.batch, 33))
            logits = model(seq[:, :-1])
            return F.cross_entropy(logits.transpose(1, 2), seq[:, 1:])

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
