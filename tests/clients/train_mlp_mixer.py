"""MLP-Mixer (mlp-mixer-pytorch, lucidrains) as its README writes it: `MLPMixer(...)` is a
top-level `nn.Sequential`: an einops `Rearrange` into patches, a `Linear` patch embedding,
`depth` blocks (each an `nn.Sequential` of two `PreNormResidual`: token mixing by 1x1
`Conv1d` over the patches, channel mixing by `Linear`), a `LayerNorm`, a `Reduce` mean pool
and a `Linear` head, so the blocks are named `2`, `3`, ... Seeded, tiny, nothing downloaded.

    python tests/clients/train_mlp_mixer.py --steps 3
    memledger trace tests/clients/train_mlp_mixer.py --steps 2 -o mixer.ledger
    memledger compare tests/clients/train_mlp_mixer.py -p 'checkpoint:[2-3]'

`--arch permutator`: the package's Vision Permutator (`Permutator`, also a top-level
`nn.Sequential`: its blocks mix along height, width and channels by `ParallelSum` of
einops-rearranged Linears). `--depth N`, `--dropout P`, `--accum N` (gradient accumulation), `--amp` (bf16 autocast),
`--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn.functional as F

from mlp_mixer_pytorch import MLPMixer, Permutator


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--arch", default="mixer", choices=["mixer", "permutator"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    if args.arch == "mixer":
        model = MLPMixer(image_size=16, channels=3, patch_size=4, dim=args.dim,
                         depth=args.depth, num_classes=10, dropout=args.dropout)
    else:
        model = Permutator(image_size=16, patch_size=4, dim=args.dim, depth=args.depth,
                           num_classes=10, segments=4, dropout=args.dropout)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        img = torch.randn(args.batch, 3, 16, 16)
        return F.cross_entropy(model(img), torch.randint(0, 10, (args.batch,)))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
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
