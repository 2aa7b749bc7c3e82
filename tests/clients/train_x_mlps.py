"""x-mlps-pytorch (tests/clients/train_x_mlps.py): the library's MLP variants as the trunk of
an actor-critic (policy logits and a value from one net, trained by a cross entropy on
actions weighted by advantages plus an MSE on returns), as its README uses them for RL.
Random observations, actions and returns, seeded, tiny, nothing downloaded.

    python tests/clients/train_x_mlps.py --steps 3 --net residual
    memledger trace tests/clients/train_x_mlps.py --steps 2 -o x.ledger -- --net nff
    memledger compare tests/clients/train_x_mlps.py -p 'checkpoint:net.layers.*' -- --net ff

Nets (`--net`):

- `mlp`: `create_mlp(dim, depth, dim_in, dim_out)` (Linear + ReLU, `layers.*`).
- `ff`: `Feedforwards` (pre-RMSNorm residual feedforwards, GELU, `layers.*`, a final norm).
- `nff`: `nFeedforwards` (nGPT's normalized feedforwards: every weight an L2-normalized
  parametrization, `torch.nn.utils.parametrize`, made again at each read; learned scales),
  `--manual-norm`: plain weights renormalized in place after each step (`norm_weights_()`).
- `residual`: `ResidualNormedMLP` (blocks of `residual_every` normed Linear + SiLU, a residual
  around each; `--orthogonal` its orthogonal residual update in float64, `--film` FiLM
  conditioning on a goal through a `cond_encoder`).

`--noisy`: the net wrapped in `Noisable`, trained through seeded parameter noise (each
parameter deep-copied, noised and run by `functional_call`) on every training forward.

Options: `--optim adam|adamw|sgd`, `--accum N`, `--clip`, `--validate` (values under no_grad
in eval each step). `--bug no-zero`: the gradients never cleared between steps.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from x_mlps_pytorch import (Feedforwards, Noisable, ResidualNormedMLP, create_mlp,
                            nFeedforwards)


class ActorCritic(nn.Module):
    def __init__(self, net: nn.Module, actions: int, film: bool, noisy: bool) -> None:
        super().__init__()
        self.actions, self.film = actions, film
        # Noisable: parameter-space exploration noise, a seed per parameter (the library's
        # `noise_for_params`): it deep-copies the parameters, adds the seeded noise and runs
        # the net by `torch.func.functional_call`
        self.net = Noisable(net, noise_scale=1e-2) if noisy else net
        self.seed = 0

    def forward(self, obs, goal=None):
        kw = dict(cond=goal) if self.film else {}
        if isinstance(self.net, Noisable) and self.training:
            self.seed += 1
            names = [n for n, _ in self.net.model.named_parameters()]
            kw["noise_for_params"] = {n: self.seed * 1000 + i for i, n in enumerate(names)}
        out = self.net(obs, **kw)
        return out[..., :self.actions], out[..., self.actions]    # (B, A) logits, (B,) value


def build(args, obs_dim: int, actions: int) -> nn.Module:
    d, out = args.dim, actions + 1
    if args.net == "mlp":
        return create_mlp(d, args.depth, dim_in=obs_dim, dim_out=out)
    if args.net == "ff":
        return Feedforwards(d, args.depth, dim_in=obs_dim, dim_out=out, final_norm=True)
    if args.net == "nff":
        return nFeedforwards(d, args.depth, dim_in=obs_dim, dim_out=out,
                             manual_norm_weights=args.manual_norm)
    kw = dict(film=True, cond_dim=d, cond_encoder=nn.Linear(4, d)) if args.film else {}
    return ResidualNormedMLP(d, depth=args.depth, residual_every=2, dim_in=obs_dim,
                             dim_out=out, use_orthogonal_residual=args.orthogonal, **kw)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--net", default="mlp", choices=["mlp", "ff", "nff", "residual"])
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--manual-norm", action="store_true")
    p.add_argument("--orthogonal", action="store_true")
    p.add_argument("--film", action="store_true")
    p.add_argument("--noisy", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--bug", default="none", choices=["none", "no-zero"])
    args = p.parse_args()
    torch.manual_seed(0)

    obs_dim, actions = 10, 4
    model = ActorCritic(build(args, obs_dim, actions), actions, args.film, args.noisy)
    if args.optim == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def batch():
        obs = torch.randn(args.batch, obs_dim)
        goal = torch.randn(args.batch, 4) if args.film else None
        act = torch.randint(0, actions, (args.batch,))
        ret = torch.randn(args.batch)
        return obs, goal, act, ret

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            obs, goal, act, ret = batch()
            logits, value = model(obs, goal)
            advantage = (ret - value).detach()
            policy_loss = (F.cross_entropy(logits, act, reduction="none") * advantage).mean()
            loss = policy_loss + 0.5 * F.mse_loss(value, ret)
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        if args.manual_norm:
            getattr(model.net, "model", model.net).norm_weights_()
        if args.bug != "no-zero":
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                obs, goal, _, ret = batch()
                print(f"validation value error {(model(obs, goal)[1] - ret).abs().mean():.4f}")


if __name__ == "__main__":
    main()
