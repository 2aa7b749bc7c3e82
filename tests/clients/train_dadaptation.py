"""D-Adaptation (`dadaptation`, facebookresearch) as its README writes it: learning-rate-free
optimizers, `lr=1.0`, the step size D estimated from the gradients. A tiny token classifier
(an `embed` Embedding, `blocks.*` of a residual Linear-GELU-Linear with a LayerNorm, a
`head`), seeded, nothing downloaded.

    python tests/clients/train_dadaptation.py --steps 3 --opt adam
    memledger trace tests/clients/train_dadaptation.py --steps 2 -o da.ledger -- --opt sgd
    memledger compare tests/clients/train_dadaptation.py -p 'checkpoint:blocks.*' -- --opt adam

`--opt adam|sgd|adagrad|adan|lion` (`DAdaptAdam`, ...). Their state is more than their
namesakes': DAdaptAdam keeps `s` beside `exp_avg` and `exp_avg_sq` (3 tensors a
parameter), DAdaptSGD `z`, `s` and `x0` (a clone of the parameter at its first step),
DAdaptAdaGrad `alphak`, `sk`, `x0` (and `weighted_sk` for a sparse gradient), DAdaptAdan
five; each step reads its sums back with `.item()` between two passes over the parameters.
`--decay W` weight decay (coupled: added into `p.grad` in place; `--decouple` for Adam's
AdamW form), `--bias-correction` (Adam), `--momentum M` (SGD, AdaGrad), `--growth 1.02`
(`growth_rate`), `--groups` (two parameter groups, the head's with `layer_scale=0.5` (Adam)
or `lr=0.0` (the others: a group D-Adaptation leaves alone)), `--sparse` (the embedding's
`sparse=True`; AdaGrad takes sparse gradients), `--accum N`, `--clip C`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from dadaptation import DAdaptAdaGrad, DAdaptAdam, DAdaptAdan, DAdaptLion, DAdaptSGD


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, classes: int, sparse: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, sparse=sparse)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h.mean(1))


def make_optimizer(args, model: Net) -> torch.optim.Optimizer:
    cls = {"adam": DAdaptAdam, "sgd": DAdaptSGD, "adagrad": DAdaptAdaGrad,
           "adan": DAdaptAdan, "lion": DAdaptLion}[args.opt]
    kw: dict = {"lr": 1.0 if args.opt != "lion" else 1e-1}
    if args.decay:
        kw["weight_decay"] = args.decay
    if args.decouple:
        kw["decouple"] = True
    if args.bias_correction:
        kw["use_bias_correction"] = True
    if args.momentum is not None:
        kw["momentum"] = args.momentum
    if args.growth:
        kw["growth_rate"] = args.growth
    if not args.groups:
        return cls(model.parameters(), **kw)
    head = list(model.head.parameters())
    rest = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    second = {"params": head, "layer_scale": 0.5} if args.opt == "adam" else \
        {"params": head, "lr": 0.0}
    return cls([{"params": rest}, second], **kw)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--opt", default="adam", choices=["adam", "sgd", "adagrad", "adan", "lion"])
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--decay", type=float, default=0.0)
    p.add_argument("--decouple", action="store_true")
    p.add_argument("--bias-correction", action="store_true")
    p.add_argument("--momentum", type=float, default=None)
    p.add_argument("--growth", type=float, default=None)
    p.add_argument("--groups", action="store_true")
    p.add_argument("--sparse", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Net(args.vocab, args.dim, args.depth, 4, args.sparse)
    opt = make_optimizer(args, model)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        opt.zero_grad()
        for _ in range(args.accum):
            tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)
            labels = torch.randint(0, 4, (args.batch,), generator=gen)
            loss = F.cross_entropy(model(tokens), labels) / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}  d {opt.param_groups[0]['d']:.3g}")


if __name__ == "__main__":
    main()
