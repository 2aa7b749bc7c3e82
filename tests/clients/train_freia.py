"""FrEIA 0.2 (tests/clients/train_freia.py): the Framework for Easily Invertible
Architectures. Invertible networks built as its README does (`Ff.SequenceINN` with
`append`, `Ff.GraphINN` from a list of nodes), with subnet constructors written here,
trained by maximum likelihood: the loss is `0.5 * z**2` summed minus the
log-Jacobian-determinant the network returns beside its output. Seeded, tiny, CPU,
nothing downloaded.

    python tests/clients/train_freia.py --steps 3 --model toy
    memledger trace tests/clients/train_freia.py --steps 2 -o f.ledger -- --model glow
    memledger compare tests/clients/train_freia.py -p 'checkpoint:module_list.*' -- --model toy

Models (`--model`):

- `toy`: a `SequenceINN` of `AllInOneBlock`s (soft permutation, learned Householder
  permutations) on a 2-D two-moons-like density.
- `glow`: a `SequenceINN` on 3 x 8 x 8 images: `ActNorm` (data-dependent init on the first
  batch), `GLOWCouplingBlock`s with conv subnets, `PermuteRandom`,
  `IRevNetDownsampling` (or `HaarDownsampling` with `--haar`), then `RNVPCouplingBlock`s
  after a `Flatten`.
- `graph`: a `GraphINN` on 3 x 8 x 8 images with a `ConditionNode` (a one-hot class):
  `HaarDownsampling`, `GLOWCouplingBlock`s, a `Split` whose one half leaves early
  through a `Flatten` and its own `OutputNode`, the other through a `Flatten` and
  conditional `AllInOneBlock`s to a second `OutputNode`. `--concat`: the two halves
  joined by a `Concat1d` into one output instead; FrEIA orders such a graph's nodes by
  iterating a set of them (`topological_order`), so which branch runs first, and which
  node each `module_list.k` is, changes from one process to the next.

Options: `--batch`, `--blocks`, `--width` (the subnets' hidden size), `--sgd` (SGD with
momentum instead of Adam), `--clip X` (clip the gradients' norm), `--accum N` (gradient
accumulation), `--cycle W` (add W times a cycle term: the inverse pass `rev=True` from
the detached latent must give back the input), `--sample W` (add W times a sampling
term: the inverse pass from fresh Gaussian noise, its mean squared), `--bug stale`
(a realistic loop bug: `zero_grad` is never called, so the gradients add up over steps),
`--bug clip-after-step` (with `--clip`: the gradients clipped after the step used them).
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

import FrEIA.framework as Ff
import FrEIA.modules as Fm


def mlp(width: int):
    def subnet(c_in: int, c_out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(c_in, width), nn.ReLU(), nn.Linear(width, c_out))
    return subnet


def conv(width: int):
    def subnet(c_in: int, c_out: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(width, c_out, 3, padding=1))
    return subnet


def toy_inn(args) -> Ff.SequenceINN:
    inn = Ff.SequenceINN(2)
    for k in range(args.blocks):
        inn.append(Fm.AllInOneBlock, subnet_constructor=mlp(args.width), permute_soft=True,
                   learned_householder_permutation=2 if k % 2 else 0)
    return inn


def glow_inn(args) -> Ff.SequenceINN:
    inn = Ff.SequenceINN(3, 8, 8)
    inn.append(Fm.ActNorm)
    for _ in range(args.blocks):
        inn.append(Fm.GLOWCouplingBlock, subnet_constructor=conv(args.width), clamp=1.5)
        inn.append(Fm.PermuteRandom, seed=None)
    inn.append(Fm.HaarDownsampling if args.haar else Fm.IRevNetDownsampling)
    inn.append(Fm.GLOWCouplingBlock, subnet_constructor=conv(args.width), clamp=1.5)
    inn.append(Fm.Flatten)
    for _ in range(args.blocks):
        inn.append(Fm.RNVPCouplingBlock, subnet_constructor=mlp(args.width), clamp=1.5)
        inn.append(Fm.PermuteRandom)
    return inn


def graph_inn(args, classes: int) -> Ff.GraphINN:
    cond = Ff.ConditionNode(classes, name="label")
    nodes = [Ff.InputNode(3, 8, 8, name="image")]
    nodes.append(Ff.Node(nodes[-1], Fm.HaarDownsampling, {}, name="haar"))
    for k in range(args.blocks):
        nodes.append(Ff.Node(nodes[-1], Fm.GLOWCouplingBlock,
                             {"subnet_constructor": conv(args.width), "clamp": 1.5},
                             conditions=[], name=f"conv_coupling{k}"))
    split = Ff.Node(nodes[-1], Fm.Split, {"section_sizes": (4, 8), "dim": 0}, name="split")
    nodes.append(split)
    early = Ff.Node(split.out0, Fm.Flatten, {}, name="flatten_early")
    late = Ff.Node(split.out1, Fm.Flatten, {}, name="flatten_late")
    nodes += [early, late]
    for k in range(args.blocks):
        nodes.append(Ff.Node(nodes[-1], Fm.AllInOneBlock,
                             {"subnet_constructor": mlp(args.width), "permute_soft": False},
                             conditions=cond, name=f"cond_block{k}"))
    if args.concat:
        nodes.append(Ff.Node([early.out0, nodes[-1].out0], Fm.Concat1d, {"dim": 0},
                             name="concat"))
        nodes.append(Ff.OutputNode(nodes[-1], name="z"))
    else:
        nodes += [Ff.OutputNode(early, name="z_early"), Ff.OutputNode(nodes[-1], name="z")]
    return Ff.GraphINN(nodes + [cond])


def batch_of(args, classes: int, gen: torch.Generator):
    if args.model == "toy":
        t = torch.rand(args.batch, generator=gen) * 3.1416
        upper = torch.rand(args.batch, generator=gen) < 0.5
        x = torch.stack([torch.cos(t) - upper * 1.0, torch.sin(t) * (1 - 2.0 * upper)], 1)
        return x + 0.05 * torch.randn(args.batch, 2, generator=gen), None
    x = torch.rand(args.batch, 3, 8, 8, generator=gen)
    c = None
    if args.model == "graph":
        y = torch.randint(0, classes, (args.batch,), generator=gen)
        c = nn.functional.one_hot(y, classes).float()
    return x, c


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="toy", choices=["toy", "glow", "graph"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--haar", action="store_true")
    p.add_argument("--concat", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--cycle", type=float, default=0.0)
    p.add_argument("--sample", type=float, default=0.0)
    p.add_argument("--bug", default="", choices=["", "stale", "clip-after-step"])
    args = p.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)   # PermuteRandom(seed=None) and AllInOneBlock draw numpy's generator
    classes = 4

    inn = {"toy": toy_inn, "glow": glow_inn,
           "graph": lambda a: graph_inn(a, classes)}[args.model](args)
    params = [q for q in inn.parameters() if q.requires_grad]
    optim = (torch.optim.SGD(params, lr=1e-3, momentum=0.9) if args.sgd
             else torch.optim.Adam(params, lr=1e-3))
    gen = torch.Generator().manual_seed(1)

    def inverse(z: torch.Tensor, c, sizes: list[int] | None, jac: bool = True):
        """The inverse pass from `z`, split back into the outputs' parts (`sizes`)."""
        zs = list(torch.split(z, sizes, 1)) if sizes else z
        back, _ = inn(zs, c=c, rev=True, jac=jac) if c is not None else \
            inn(zs, rev=True, jac=jac)
        return back[0] if isinstance(back, (tuple, list)) else back

    def loss_of() -> torch.Tensor:
        x, c = batch_of(args, classes, gen)
        z, log_jac_det = inn(x, c=c) if c is not None else inn(x)
        sizes = None
        if isinstance(z, (tuple, list)):
            sizes = [t.shape[1] for t in z] if len(z) > 1 else None
            z = torch.cat([t.flatten(1) for t in z], 1)
        loss = (0.5 * z.pow(2).sum(1) - log_jac_det).mean() / z.shape[1]
        if args.cycle:
            back = inverse(z.detach(), c, sizes)
            loss = loss + args.cycle * (back - x).pow(2).mean()
        if args.sample:
            noise = torch.randn(z.shape, generator=gen)
            xs = inverse(noise, c, sizes, jac=False)
            loss = loss + args.sample * xs.pow(2).mean()
        return loss

    for step in range(args.steps):
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip and args.bug != "clip-after-step":
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        optim.step()
        if args.clip and args.bug == "clip-after-step":
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        if args.bug != "stale":
            optim.zero_grad()
        print(f"step {step}  nll {loss.item():.4f}")


if __name__ == "__main__":
    main()
