"""Structural pruning with torch-pruning (`torch_pruning`), as its README does it: a
`DependencyGraph` traced from example inputs, a pruner (`MetaPruner` with an importance,
`GroupNormPruner` or `BNScalePruner` for sparse training) that removes channels or heads
by replacing each pruned layer's parameters with smaller ones, then fine-tuning. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_pruning.py --steps 3 --mode cnn
    memledger trace tests/clients/train_pruning.py --steps 2 -o p.ledger -- --mode vit
    memledger compare tests/clients/train_pruning.py -p 'checkpoint:blocks.*' -- --mode vit

Models (`--mode`):

- `cnn`: a stem conv, residual blocks (conv-BN-ReLU-conv-BN plus the skip), a grouped
  conv (`--groups G`), global pool, a linear head (ignored by the pruner).
- `vit`: patch embedding by a conv, a learned position embedding (an unwrapped parameter
  the pruner is told of), pre-norm blocks of a hand-written multi-head attention (one qkv
  `nn.Linear`, heads told to the pruner by `num_heads`) and an MLP, a linear head.

Pruning (`--prune`):

- `before` (default): the pruner steps once before training; the optimizer is made after.
- `between`: train `--prune-at` steps, prune, then make a new optimizer and go on (the
  README's "prune, then fine-tune"); `--iterative N` prunes in N steps, one every step
  from `--prune-at` on, a new optimizer after each.
- `dg`: no pruner; `DependencyGraph.get_pruning_group` on one layer with chosen indices,
  `check_pruning_group`, `group.prune()` (the README's low-level example).
- `none`: no pruning (the same model, unpruned, for comparison).
- `sparse`: sparse training with `GroupNormPruner` (`--pruner bnscale`: `BNScalePruner`):
  `update_regularizer()` before the loop, `regularize(model)` after each backward (it adds
  to the parameters' `.grad` under no_grad), and the pruner steps after `--prune-at`
  steps, then a new optimizer.

Options: `--imp magnitude|taylor|lamp|random` (`taylor` runs a backward of a loss before
the pruner steps, as the README's Taylor example: the gradients are zeroed after),
`--ratio R` (`pruning_ratio`), `--heads-ratio R` (`vit`: `prune_num_heads=True`,
`head_pruning_ratio=R`), `--global` (`global_pruning`), `--round-to N`, `--interactive`
(`pruner.step(interactive=True)`, each group pruned by hand), `--sgd` (SGD with momentum
instead of AdamW), `--accum N`, `--ch C` (`cnn`'s channels), `--collect` (`gc.collect()` after pruning before the loop:
the dependency graph's reference cycle holds the example forward's graph till then).
"""

import argparse
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_pruning as tp


class Block(nn.Module):
    def __init__(self, ch: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(y)))


class ConvNet(nn.Module):
    def __init__(self, ch: int = 16, depth: int = 2, groups: int = 1, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(ch), nn.ReLU())
        self.blocks = nn.Sequential(*[Block(ch, groups) for _ in range(depth)])
        self.head = nn.Linear(ch, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(x.mean((2, 3)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        # the pruner shrinks qkv's outputs: read the sizes off the tensor, as its ViT
        # example does, not off the dim the block was built with
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)                          # (B, h, N, hd)
        attn = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        out = attn.softmax(-1) @ v                        # (B, h, N, hd)
        return self.proj(out.transpose(1, 2).reshape(b, n, -1))


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 2, heads: int = 4, classes: int = 10):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)      # 16 x 16 image -> 16 patches
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos   # (B, 16, dim)
        return self.head(self.norm(self.blocks(x)).mean(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="cnn", choices=["cnn", "vit"])
    p.add_argument("--prune", default="before",
                   choices=["before", "between", "dg", "sparse", "none"])
    p.add_argument("--pruner", default="groupnorm", choices=["groupnorm", "bnscale"])
    p.add_argument("--imp", default="magnitude", choices=["magnitude", "taylor", "lamp", "random"])
    p.add_argument("--ratio", type=float, default=0.5)
    p.add_argument("--heads-ratio", type=float, default=0.0)
    p.add_argument("--global", dest="global_pruning", action="store_true")
    p.add_argument("--round-to", type=int, default=None)
    p.add_argument("--interactive", action="store_true")
    p.add_argument("--iterative", type=int, default=1)
    p.add_argument("--prune-at", type=int, default=1)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--ch", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--collect", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    if args.mode == "cnn":
        model = ConvNet(ch=args.ch, depth=args.depth, groups=args.groups)
    else:
        model = TinyViT(depth=args.depth)
    example_inputs = torch.randn(1, 3, 16, 16)

    def batch():
        return torch.randn(args.batch, 3, 16, 16), torch.randint(0, 10, (args.batch,))

    def new_optimizer():
        if args.sgd:
            return torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        return torch.optim.AdamW(model.parameters(), lr=1e-3)

    importance = {"magnitude": tp.importance.GroupMagnitudeImportance(p=2),
                  "taylor": tp.importance.GroupTaylorImportance(),
                  "lamp": tp.importance.LAMPImportance(p=2),
                  "random": tp.importance.RandomImportance()}[args.imp]
    kw = dict(importance=importance, pruning_ratio=args.ratio, ignored_layers=[model.head],
              global_pruning=args.global_pruning, round_to=args.round_to,
              iterative_steps=args.iterative)
    if args.mode == "vit":
        heads = {m.qkv: m.num_heads for m in model.modules() if isinstance(m, Attention)}
        kw.update(num_heads=heads, unwrapped_parameters=[(model.pos, 2)],
                  prune_num_heads=args.heads_ratio > 0, head_pruning_ratio=args.heads_ratio)

    pruner = None
    if args.prune == "sparse":
        cls = tp.pruner.GroupNormPruner if args.pruner == "groupnorm" else tp.pruner.BNScalePruner
        pruner = cls(model, example_inputs, reg=1e-4, **kw)
        pruner.update_regularizer()
    elif args.prune not in ("dg", "none"):
        pruner = tp.pruner.MetaPruner(model, example_inputs, **kw)

    def prune_once() -> None:
        if args.prune == "dg":
            kw_dg = {"unwrapped_parameters": [(model.pos, 2)]} if args.mode == "vit" else {}
            dg = tp.DependencyGraph().build_dependency(model, example_inputs, **kw_dg)
            layer = model.stem[0] if args.mode == "cnn" else model.blocks[0].mlp[0]
            group = dg.get_pruning_group(layer, tp.prune_conv_out_channels
                                         if args.mode == "cnn" else tp.prune_linear_out_channels,
                                         idxs=[2, 6, 9])
            if dg.check_pruning_group(group):
                group.prune()
            return
        if args.imp == "taylor":
            # GroupTaylorImportance reads each weight's .grad: a loss's backward first
            x, y = batch()
            F.cross_entropy(model(x), y).backward()
        if args.interactive:
            for group in pruner.step(interactive=True):
                group.prune()
        else:
            pruner.step()
        model.zero_grad()
        if args.mode == "vit":
            # as the README's ViT example: the heads the pruner left, back into each block
            for m in model.modules():
                if isinstance(m, Attention):
                    m.num_heads = pruner.num_heads[m.qkv]

    if args.prune in ("before", "dg"):
        prune_once()
        if args.collect:
            gc.collect()   # the dependency graph's reference cycle holds its forward's graph
    optim = new_optimizer()
    done = 0
    for step in range(args.steps):
        model.train()
        if args.prune in ("between", "sparse") and args.prune_at <= step \
                and done < args.iterative:
            prune_once()
            done += 1
            optim = new_optimizer()
        for _ in range(args.accum):
            x, y = batch()
            loss = F.cross_entropy(model(x), y)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.prune == "sparse" and done == 0:
            pruner.regularize(model)
        optim.step()
        optim.zero_grad()
        n = sum(p.numel() for p in model.parameters())
        print(f"step {step}  loss {loss.item():.4f}  params {n}")


if __name__ == "__main__":
    main()
