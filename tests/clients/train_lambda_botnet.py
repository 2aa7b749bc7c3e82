"""Two conv-free attention layers in small image classifiers with BatchNorm, as their
READMEs build them. Seeded, tiny (8 x 8 images, 8-16 channels), nothing downloaded.

    python tests/clients/train_lambda_botnet.py --steps 3 --mode lambda
    memledger trace tests/clients/train_lambda_botnet.py --steps 2 -o b.ledger -- --mode botnet
    memledger compare tests/clients/train_lambda_botnet.py -p 'checkpoint:blocks.*' -- --mode lambda

Modes (`--mode`):

- `lambda`: lambda-networks' `LambdaLayer` (queries, keys and values by 1x1 convs, BatchNorm
  on queries and values, a content lambda from the softmaxed keys, a position lambda) in a
  ResNet-like net: a conv + BatchNorm + ReLU stem, `--depth` residual blocks of LambdaLayer,
  BatchNorm, ReLU, mean-pooled into a linear head. The position lambda is a relative
  position embedding over the whole (n x n) map, indexed by a plain tensor attribute made at
  init (`calc_rel_pos`), or with `--local R` a (1, R, R) `Conv3d` over the values.
  `--dim-u U`: the intra-depth dimension.
- `botnet`: bottleneck-transformer-pytorch's `BottleStack` (BottleBlocks: 1x1 conv,
  BatchNorm, ReLU, multi-head self-attention with absolute or, `--rel-pos`, relative
  position logits, average-pooled when the stack downsamples, BatchNorm, ReLU, 1x1 conv,
  BatchNorm, plus a conv shortcut) after a conv + BatchNorm + ReLU stem, as the README puts
  it in place of a ResNet's last stage. One `nn.ReLU()` is the activation the library hands
  to every block (a module called many times a forward). `--no-downsample`.
- `hybrid`: `--depth` LambdaBlocks, then a BottleStack of `--depth` layers.

The model is `stem`, `blocks` (the LambdaBlocks, `blocks.0.lam` their LambdaLayers) and
`stack` (the BottleStack: `stack.net.0`, ... its BottleBlocks), then `head`.

Both: `--accum N` (gradient accumulation), `--amp` (bf16 autocast), `--validate` (a loss
under no_grad in eval mode each step: BatchNorm's running statistics), `--sgd` (SGD with
momentum instead of AdamW).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from bottleneck_transformer_pytorch import BottleStack
from lambda_networks import LambdaLayer


class LambdaBlock(nn.Module):
    def __init__(self, dim: int, n: int, local: int | None, dim_u: int) -> None:
        super().__init__()
        self.lam = LambdaLayer(dim=dim, dim_out=dim, dim_k=4, heads=2, dim_u=dim_u,
                               n=None if local else n, r=local)
        self.bn = nn.BatchNorm2d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn(self.lam(x)))


class Net(nn.Module):
    """A conv + BatchNorm + ReLU stem, `lambdas` LambdaBlocks, then (`bottles` > 0) a
    BottleStack in place of a ResNet's last stage, as bottleneck-transformer-pytorch's
    README puts it, mean-pooled into a linear head."""

    def __init__(self, dim: int, lambdas: int, bottles: int, size: int, local: int | None,
                 dim_u: int, rel_pos: bool, downsample: bool) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(dim), nn.ReLU())
        self.blocks = nn.Sequential(*[LambdaBlock(dim, size, local, dim_u)
                                      for _ in range(lambdas)])
        self.stack = BottleStack(dim=dim, fmap_size=size, dim_out=2 * dim, proj_factor=2,
                                 num_layers=bottles, heads=2, dim_head=4,
                                 downsample=downsample, rel_pos_emb=rel_pos) \
            if bottles else nn.Identity()
        self.head = nn.Linear(2 * dim if bottles else dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stack(self.blocks(self.stem(x))).mean((2, 3)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="lambda", choices=["lambda", "botnet", "hybrid"])
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--local", type=int, default=None)
    p.add_argument("--dim-u", type=int, default=1)
    p.add_argument("--rel-pos", action="store_true")
    p.add_argument("--no-downsample", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    lambdas = args.depth if args.mode != "botnet" else 0
    bottles = args.depth if args.mode != "lambda" else 0
    model = Net(args.dim, lambdas, bottles, args.size, args.local, args.dim_u, args.rel_pos,
                not args.no_downsample)
    optim = (torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.sgd
             else torch.optim.AdamW(model.parameters(), lr=1e-3))

    def loss_of() -> torch.Tensor:
        img = torch.randn(args.batch, 3, args.size, args.size)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            logits = model(img)
        return F.cross_entropy(logits.float(), torch.randint(0, 10, (args.batch,)))

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
