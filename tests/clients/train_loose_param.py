"""A model and a learned tensor of the script's own, no module's: a latent code per
example, an `nn.Parameter` handed to the forward (as siren-pytorch's README learns its
latent). Plain torch, seeded, tiny.

    python tests/clients/train_loose_param.py --steps 3
    memledger doctor tests/clients/train_loose_param.py -- --left-out

`--left-out`: the optimizer is built from the model's parameters alone, so the latents
get a gradient in every backward and never move (the bug the doctor names). `--by-hand`:
left out of the optimizer but moved by hand under no_grad (no bug). `--fresh`: a new
`nn.Parameter` in every step, its gradient read, never stepped (an adversarial
perturbation; no bug).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--left-out", action="store_true")
    p.add_argument("--by-hand", action="store_true")
    p.add_argument("--fresh", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = nn.Sequential(nn.Linear(8 + 4, 16), nn.Tanh(), nn.Linear(16, 1))
    latents = nn.Parameter(torch.randn(6, 4) * 0.01)   # one code per example: (6, 4) fp32
    params = list(model.parameters())
    if not (args.left_out or args.by_hand or args.fresh):
        params.append(latents)
    optim = torch.optim.SGD(params, lr=0.1)
    x, y = torch.randn(6, 8), torch.randn(6, 1)

    for step in range(args.steps):
        if args.fresh:
            latents = nn.Parameter(torch.zeros(6, 4))
        loss = F.mse_loss(model(torch.cat((x, latents), dim=-1)), y)
        loss.backward()
        optim.step()
        optim.zero_grad()
        if args.by_hand:
            with torch.no_grad():
                latents -= 0.1 * latents.grad
            latents.grad = None
        if args.fresh:
            print("perturbation grad", latents.grad.norm().item())
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
