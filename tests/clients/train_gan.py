"""A GAN's training loop: two models, two optimizers, two optimizer steps per iteration.

    python tests/clients/train_gan.py --steps 5
    memledger trace tests/clients/train_gan.py --steps 2 -o gan.ledger

The generator is called first, so it is the model policies act on (memledger applies a
policy to the first top-level module with parameters the script calls); the ledger names
the discriminator's modules `D.*` (Note [Root names]). The discriminator runs three times per
iteration (real, detached fake, fake), and the generator's output is kept for its step.
"""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5, help="iterations (two optimizer steps each)")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 32))
    D = nn.Sequential(nn.Linear(32, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1))
    opt_g = torch.optim.Adam(G.parameters(), 2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    n = args.batch_size
    for it in range(args.steps):
        real, z = torch.randn(n, 32), torch.randn(n, 16)
        fake = G(z)
        opt_d.zero_grad()
        loss_d = bce(D(real), torch.ones(n, 1)) + bce(D(fake.detach()), torch.zeros(n, 1))
        loss_d.backward()
        opt_d.step()
        opt_g.zero_grad()
        loss_g = bce(D(fake), torch.ones(n, 1))
        loss_g.backward()
        opt_g.step()
        print(f"iteration {it}  loss_d {loss_d.item():.4f}  loss_g {loss_g.item():.4f}")


if __name__ == "__main__":
    main()
