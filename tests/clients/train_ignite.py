"""pytorch-ignite's own loop: `create_supervised_trainer(model, optimizer, loss_fn)` and
`trainer.run(loader, max_epochs=...)`; the script never calls `optimizer.step()`. A small
CNN (`blocks.*`: conv, BatchNorm, ReLU) on random 16x16 images from a `TensorDataset`
`DataLoader`, or an MLP. Tiny, seeded, nothing downloaded.

    python tests/clients/train_ignite.py --case cnn --steps 3
    memledger trace tests/clients/train_ignite.py --steps 2 -o ig.ledger -- --case mlp

`--case`: cnn, mlp, accum (the MLP with `gradient_accumulation_steps=2`: one optimizer
step every two batches).
`--steps` is the number of optimizer steps; the trainer runs whole epochs of 4 batches.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def build(case):
    if case == "cnn":
        return nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()),
            nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()),
            nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)))
    return nn.Sequential(nn.Sequential(nn.Linear(32, 128), nn.GELU()),
                         nn.Sequential(nn.Linear(128, 128), nn.GELU()),
                         nn.Linear(128, 10))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="cnn")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    from ignite.engine import Events, create_supervised_trainer

    torch.manual_seed(0)
    model = build(args.case)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    n = 32 * 4
    shape = (3, 16, 16) if args.case == "cnn" else (32,)
    data = torch.utils.data.TensorDataset(torch.randn(n, *shape, generator=gen),
                                          torch.randint(0, 10, (n,), generator=gen))
    loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=False)
    accum = 2 if args.case == "accum" else 1
    trainer = create_supervised_trainer(model, opt, F.cross_entropy,
                                        gradient_accumulation_steps=accum)

    @trainer.on(Events.ITERATION_COMPLETED)
    def log(engine):
        print(f"iteration {engine.state.iteration}  loss {engine.state.output:.4f}")

    batches = args.steps * accum
    trainer.run(loader, max_epochs=-(-batches // len(loader)))


if __name__ == "__main__":
    main()
