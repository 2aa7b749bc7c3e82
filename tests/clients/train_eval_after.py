"""Plain torch: a training loop that evaluates the model after each step's backward, as
most loops do (a validation loss), the case `show`'s "saved for backward" must not take
for the step's (Note [The saves the step's backward reads], ledger/model.py).

    python tests/clients/train_eval_after.py --eval no_grad
    memledger show run.ledger        # "saved for backward": the step's, not the evaluation's

`--eval none` (no evaluation), `no_grad` (a validation loss under `torch.no_grad()`),
`grad` (the same with gradients on: a graph no backward reads, dropped at once), `kept`
(the same, the loss tensor kept until the next evaluation replaces it, its graph and the
activations it saved with it, as a loop that logs `val_loss` later does), `input_grad` (a
derivative of the validation loss with respect to the input, `autograd.grad`, a pass no
optimizer step follows). `--where after_step` (the default) evaluates after the
optimizer step, `before_step` between the backward and the optimizer step. The
evaluation's batch (`--eval-batch`) is larger than the training one, so its activations
are told apart by their bytes. SGD, random data.
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(torch.tanh(self.fc1(h)))


def evaluate(model: nn.Module, x: torch.Tensor, mode: str):
    if mode == "kept":
        return model(x).pow(2).mean()
    if mode == "no_grad":
        with torch.no_grad():
            return float(model(x).pow(2).mean())
    if mode == "grad":
        return float(model(x).pow(2).mean())
    x = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(model(x).pow(2).mean(), x)
    return float(g.abs().mean())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--eval", default="no_grad", choices=["none", "no_grad", "grad", "kept", "input_grad"])
    p.add_argument("--where", default="after_step", choices=["after_step", "before_step"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--eval-batch", type=int, default=32)
    p.add_argument("--dim", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(Block(args.dim), Block(args.dim))
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    val_loss = None
    for _ in range(args.steps):
        loss = model(torch.randn(args.batch, args.dim)).pow(2).mean()
        loss.backward()
        if args.eval != "none" and args.where == "before_step":
            val_loss = evaluate(model, torch.randn(args.eval_batch, args.dim), args.eval)
        optim.step()
        optim.zero_grad()
        if args.eval != "none" and args.where == "after_step":
            val_loss = evaluate(model, torch.randn(args.eval_batch, args.dim), args.eval)
    print(f"val_loss {float(val_loss):.4f}" if val_loss is not None else "no evaluation")


if __name__ == "__main__":
    main()
