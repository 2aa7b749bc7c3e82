"""The random state set back every step (check `rng_reset`): a model with dropout trained
on a noisy target (randn noise, as a diffusion or denoising loss draws it).

    python rng_reset.py                         # torch.manual_seed(0) at the top of each step
    python rng_reset.py --how set_rng_state     # torch.set_rng_state(saved) each step
    python rng_reset.py --how generator         # a Generator seeded alike, made each step
    python rng_reset.py --how validation        # a validation seeds (no restore) each step
    python rng_reset.py --fixed                 # seeded once, before the loop
    python rng_reset.py --fixed --how generator # one Generator, made before the loop
    python rng_reset.py --form step_seed        # manual_seed(1000 + step): a new seed a step
    python rng_reset.py --form fork_rng         # a seeded validation under fork_rng each step
    python rng_reset.py --form restore          # the same by hand: get_rng_state, seed, restore
    python rng_reset.py --form checkpoint       # dropout blocks under torch.utils.checkpoint
    python rng_reset.py --form reentrant        # the same, use_reentrant=True (2nd block)
    python rng_reset.py --form no_draws         # seeded each step, but nothing random drawn
    python rng_reset.py --form peek             # a sample drawn and the state put back, no
                                                # seed; the training draws nothing
    python rng_reset.py --device cuda           # any of these on a GPU: the CUDA generator
                                                # (--form restore restores the CPU's only:
                                                # there, a true finding)
    python rng_reset.py --form eval_seed        # a no_grad validation seeds each step; the
                                                # training draws nothing
"""
import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--how", choices=["manual_seed", "set_rng_state", "generator", "validation"],
               default="manual_seed")
p.add_argument("--fixed", action="store_true")
p.add_argument("--form", choices=["", "step_seed", "fork_rng", "restore", "checkpoint",
                                  "reentrant", "no_draws", "peek", "eval_seed"], default="")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--device", default="cpu")   # cuda: the CUDA generator's state is read
ARGS = p.parse_args()


class Net(nn.Module):
    def __init__(self, p: float = 0.2):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(p)) for _ in range(2))
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        for i, b in enumerate(self.blocks):
            # reentrant: a checkpoint whose input requires grad (else its block is cut)
            if ARGS.form == "checkpoint" or (ARGS.form == "reentrant" and i > 0):
                x = checkpoint(b, x, use_reentrant=ARGS.form == "reentrant")
            else:
                x = b(x)
        return self.head(x)


torch.manual_seed(0)
model = Net(0.0 if ARGS.form in ("no_draws", "peek", "eval_seed") else 0.2).to(ARGS.device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.linspace(-1, 1, 8 * 16, device=ARGS.device).reshape(8, 16)   # nothing random
saved = torch.get_rng_state()
gen = torch.Generator(ARGS.device).manual_seed(0)


def validate():
    model.eval()
    with torch.no_grad():
        val = model(torch.randn(4, 16, device=ARGS.device))   # the same inputs each time
    model.train()
    return val


for step in range(ARGS.steps):
    if ARGS.form == "step_seed":
        torch.manual_seed(1000 + step)
    elif ARGS.form == "fork_rng":
        with torch.random.fork_rng(devices=[] if ARGS.device == "cpu" else [0]):
            torch.manual_seed(0)
            validate()
    elif ARGS.form == "restore":
        state = torch.get_rng_state()
        torch.manual_seed(0)
        validate()
        torch.set_rng_state(state)
    elif ARGS.form == "peek":
        state = torch.get_rng_state()
        torch.randn(4, 16, device=ARGS.device)   # a sample to log
        torch.set_rng_state(state)
    elif ARGS.form in ("no_draws", "eval_seed"):
        torch.manual_seed(0)
        if ARGS.form == "eval_seed":
            validate()
    elif ARGS.fixed or ARGS.form:
        pass
    elif ARGS.how == "manual_seed":
        torch.manual_seed(0)
    elif ARGS.how == "set_rng_state":
        torch.set_rng_state(saved)
    elif ARGS.how == "generator":
        gen = torch.Generator(ARGS.device).manual_seed(0)
    elif ARGS.how == "validation":
        torch.manual_seed(0)   # for validation samples alike each time; left seeded
        validate()
    if ARGS.how == "generator":
        noise = torch.randn(8, 1, generator=gen, device=ARGS.device)
    elif ARGS.form in ("no_draws", "peek", "eval_seed"):
        noise = torch.zeros(8, 1, device=ARGS.device)
    else:
        noise = torch.randn(8, 1, device=ARGS.device)
    loss = (model(data) - noise).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
