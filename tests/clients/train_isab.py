"""isab-pytorch (tests/clients/train_isab.py): lucidrains' Induced Set Attention Block
(`ISAB(dim, heads, num_latents, latent_self_attend)`: a set attends to m inducing points
and back, masked over set elements) in a Set Transformer written here: an ISAB encoder
stack and a pooling-by-attention head (`PMA`: learned seeds attend to the set), trained on
random variable-size sets (padded, masked) with a regression loss plus a
permutation-invariance term (the same sets shuffled must give the same output). Seeded,
tiny, nothing downloaded.

    python tests/clients/train_isab.py --steps 3
    memledger trace tests/clients/train_isab.py --steps 2 -o i.ledger -- --latents carried
    memledger compare tests/clients/train_isab.py -p 'checkpoint:@ISAB' -- --self-attend

`--latents learned` (each ISAB its own `num_latents` parameter), `carried` (the script
hands learned latents to the first block and carries the latents each block returns to
the next), `shared` (the script hands its one latents parameter to every block) or
`sliced` (the first `--latents-n` elements of each set, a view of the block's input), `--self-attend` (latent_self_attend), `--inverted` (inverted attention),
`--dim`, `--heads`, `--latents-n`, `--blocks`, `--batch`, `--max-set`, `--perm W` (the
permutation-invariance term's weight; 0 leaves it out), `--accum N`, `--clip C`, `--sgd`,
`--bf16` (the forward and loss under CPU autocast to bfloat16), `--validate` (a loss in
eval under no_grad each step), `--bug stale` (zero_grad never called), `--bug clip-after-step`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from isab_pytorch import ISAB


class PMA(nn.Module):
    """Pooling by multihead attention: `seeds` learned queries attend to the masked set."""

    def __init__(self, dim: int, heads: int, seeds: int) -> None:
        super().__init__()
        self.seeds = nn.Parameter(torch.randn(seeds, dim))
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self.seeds.unsqueeze(0).expand(x.shape[0], -1, -1)
        out, _ = self.attn(q, x, x, key_padding_mask=~mask, need_weights=False)
        return self.norm(out + q)


class SetTransformer(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.mode = args.latents
        self.n = args.latents_n
        self.embed = nn.Linear(3, args.dim)
        n = args.latents_n if self.mode == "learned" else None
        self.blocks = nn.ModuleList(
            ISAB(dim=args.dim, heads=args.heads, num_latents=n,
                 latent_self_attend=args.self_attend, inverted_attention=args.inverted)
            for _ in range(args.blocks))
        self.norms = nn.ModuleList(nn.LayerNorm(args.dim) for _ in range(args.blocks))
        self.latents = nn.Parameter(torch.randn(args.latents_n, args.dim)) \
            if self.mode in ("carried", "shared") else None
        self.pool = PMA(args.dim, args.heads, 1)
        self.head = nn.Linear(args.dim, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        lat = self.latents
        for block, norm in zip(self.blocks, self.norms):
            if self.mode == "carried":
                out, lat = block(h, latents=lat, mask=mask)
            elif self.mode == "shared":
                out, _ = block(h, latents=self.latents, mask=mask)
            elif self.mode == "sliced":
                out, _ = block(h, latents=h[:, :self.n], mask=mask)
            else:
                out, _ = block(h, mask=mask)
            h = norm(h + out)
        return self.head(self.pool(h, mask).squeeze(1))


def batch_of(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sizes = torch.randint(2, args.max_set + 1, (args.batch,))
    mask = torch.arange(args.max_set)[None, :] < sizes[:, None]
    x = torch.randn(args.batch, args.max_set, 3) * mask[..., None]
    # targets: the mean and the max norm of each set (permutation invariant)
    norms = x.norm(dim=-1).masked_fill(~mask, 0.0)
    y = torch.stack([x.sum(1)[:, 0] / sizes, norms.amax(1)], dim=-1)
    return x, mask, y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--latents", default="learned", choices=["learned", "carried", "shared", "sliced"])
    p.add_argument("--self-attend", action="store_true")
    p.add_argument("--inverted", action="store_true")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--latents-n", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-set", type=int, default=12)
    p.add_argument("--perm", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--bug", default="", choices=["", "stale", "clip-after-step"])
    args = p.parse_args()
    torch.manual_seed(0)

    model = SetTransformer(args)
    params = list(model.parameters())
    optim = torch.optim.SGD(params, lr=1e-2, momentum=0.9) if args.sgd \
        else torch.optim.Adam(params, lr=1e-3)

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            x, mask, y = batch_of(args)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                pred = model(x, mask)
                loss = F.mse_loss(pred.float(), y)
                if args.perm:
                    perm = torch.randperm(args.max_set)
                    loss = loss + args.perm * F.mse_loss(model(x[:, perm], mask[:, perm]),
                                                         pred)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip and args.bug != "clip-after-step":
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        optim.step()
        if args.clip and args.bug == "clip-after-step":
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        if args.bug != "stale":
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                x, mask, y = batch_of(args)
                print(f"validation loss {F.mse_loss(model(x, mask), y).item():.4f}")


if __name__ == "__main__":
    main()
