"""skorch's own loop: `NeuralNetClassifier(Module, ...).fit(X, y)` on numpy arrays; the
script never calls `optimizer.step()` (skorch steps its optimizer with a closure,
`optimizer_.step(step_fn)`, after a forward and backward inside `train_step`), splits off
a validation fold and runs it in eval mode under `no_grad` each epoch. An MLP (`blocks.*`)
with dropout. Tiny, seeded, nothing downloaded.

    python tests/clients/train_skorch.py --steps 3
    memledger trace tests/clients/train_skorch.py --steps 2 -o sk.ledger -- --steps 8

`--steps`: optimizer steps (batches of 32; 4 a training epoch of the 160 rows less the
validation fifth); `--no-valid`: no validation split.
"""

import argparse

import numpy as np
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Dropout(0.1)),
            nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Dropout(0.1))])
        self.out = nn.Linear(width, 3)

    def forward(self, X):
        for b in self.blocks:
            X = b(X)
        return self.out(X)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--no-valid", action="store_true")
    args = p.parse_args()
    from skorch import NeuralNetClassifier
    from skorch.dataset import ValidSplit

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    X = rng.standard_normal((160, 20)).astype(np.float32)
    y = rng.integers(0, 3, 160).astype(np.int64)
    per_epoch = 5 if args.no_valid else 4
    net = NeuralNetClassifier(MLP, max_epochs=-(-args.steps // per_epoch), lr=1e-3,
                              optimizer=torch.optim.AdamW, batch_size=32,
                              criterion=nn.CrossEntropyLoss,
                              train_split=None if args.no_valid else ValidSplit(5, stratified=False), verbose=0,
                              iterator_train__shuffle=False)
    net.fit(X, y)
    print("train loss", net.history[-1, "train_loss"])


if __name__ == "__main__":
    main()
