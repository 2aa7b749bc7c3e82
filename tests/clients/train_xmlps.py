"""x-mlps-pytorch (tests/clients/train_xmlps.py): lucidrains' MLPs "from garden variety to
the exotic", built as its README builds them (`MLP(10, 16, 5)`), trained on random
regression targets. Seeded, tiny, nothing downloaded.

    python tests/clients/train_xmlps.py --steps 3 --model nff
    memledger trace tests/clients/train_xmlps.py --steps 2 -o x.ledger -- --model resnorm

Models (`--model`):

- `mlp`: `MLP(dim, 32, 32, dim)` (the README's).
- `ff`: `Feedforwards(dim, depth)` (pre-norm GELU feedforward residual blocks).
- `nff`: `nFeedforwards(dim, depth)` (nGPT-style: weights on the hypersphere through
  `torch.nn.utils.parametrize`, a slerp residual); `--norm-after-step` calls the
  library's `norm_weights_` on it after each optimizer step, as its nGPT recipe does.
- `grouped`: `GroupedMLP(dim, 32, dim, groups=2)` (one output per group).
- `resnorm`: `ResidualNormedMLP(dim, depth=4, residual_every=2)`, `--ortho` for its
  orthogonal residual update in float64.
- `attnres`: `AttnResidualNormedMLP(dim, depth=4, loops=2)` (attention over the earlier
  layers' hiddens, relative bias, LoRA).
- `weightonly`: `WeightOnlyMLP(dim, 32, dim, use_rmsnorm=True)`.
- `film`: `FiLMableMLP(dim, 32, dim, cond_dim=8)` with a conditioning vector.
- `noisable`: `Noisable(MLP(...))` called with `noise_for_params` seeds (the library's
  `functional_call` over noised copies of the parameters), plus a plain call.

`--opt adam|sgd`, `--accum N`, `--clip C`; `--keep-outputs` (a loop bug: every step's
output kept in a list).
"""

import argparse

import torch
import torch.nn.functional as F

from x_mlps_pytorch import (MLP, AttnResidualNormedMLP, Feedforwards, FiLMableMLP, GroupedMLP,
                            Noisable, ResidualNormedMLP, WeightOnlyMLP, nFeedforwards)
from x_mlps_pytorch.nff import norm_weights_

MODELS = ["mlp", "ff", "nff", "grouped", "resnorm", "attnres", "weightonly", "film", "noisable"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="mlp", choices=MODELS)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--opt", default="adam", choices=["adam", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--ortho", action="store_true")
    p.add_argument("--norm-after-step", action="store_true")
    p.add_argument("--keep-outputs", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    d = args.dim
    if args.model == "mlp":
        model = MLP(d, 32, 32, d)
    elif args.model == "ff":
        model = Feedforwards(d, args.depth)
    elif args.model == "nff":
        model = nFeedforwards(d, args.depth)
    elif args.model == "grouped":
        model = GroupedMLP(d, 32, d, groups=2)   # (b, d) -> (b, 2, d)
    elif args.model == "resnorm":
        model = ResidualNormedMLP(d, depth=4, residual_every=2, use_orthogonal_residual=args.ortho)
    elif args.model == "attnres":
        model = AttnResidualNormedMLP(d, depth=4, loops=2, lora_rank=4)
    elif args.model == "weightonly":
        model = WeightOnlyMLP(d, 32, d, use_rmsnorm=True)
    elif args.model == "film":
        model = FiLMableMLP(d, 32, d, cond_dim=8)
    else:
        model = Noisable(MLP(d, 32, 32, d), noise_scale=0.01)

    optim = torch.optim.Adam(model.parameters(), lr=1e-3) if args.opt == "adam" else \
        torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    cond = torch.randn(args.batch, 8)
    seeds = {name: i for i, (name, _) in enumerate(model.named_parameters())}

    def loss_of() -> torch.Tensor:
        x = torch.randn(args.batch, d)
        if args.model == "film":
            out = model(x, cond=cond)
        elif args.model == "noisable":
            noised = {n.removeprefix("model."): s for n, s in seeds.items()}
            out = model(x, noise_for_params=noised) + model(x)
        else:
            out = model(x)
        target = x.roll(1, dims=-1)
        return F.mse_loss(out, target.unsqueeze(1).expand_as(out) if out.ndim == 3 else
                          target), out

    kept = []
    for step in range(args.steps):
        for _ in range(args.accum):
            loss, out = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        if args.norm_after_step:
            norm_weights_(model)
        if args.keep_outputs:
            kept.append(out)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
