"""What follows a backward pass directly: the orders a loop may write after
`loss.backward()` with no op between (Note [A pass's end met first outside an op],
memledger/trace/collector.py).

    memledger trace tests/clients/train_pass_end.py --steps 2 -- --order drop

- `step`: the plain loop, `zero_grad(); loss.backward(); opt.step()`.
- `drop`: after each step, a probe pass (the loss of a second batch, its gradients never
  used) whose gradients `opt.zero_grad(set_to_none=True)` drops right after its backward.
- `forward`: `loss.backward()` then the next step's forward (`opt.step()` every second
  step: accumulation by hand).
- `keep`: two losses a step, each one's gradients kept by the script (`[p.grad for p in
  ...]`, no op) and cleared by the next `opt.zero_grad(set_to_none=True)`, the first right
  after its backward; their sum is put in `.grad` before the step (per-task gradients, as
  a PCGrad-style loop keeps them).
- `end`: the last thing the script does is a backward (`--steps` steps, then the
  gradients cleared and one more pass).

Plain torch, Adam, a three-layer MLP; `--batch` rows of `--dim` features.
"""

import argparse

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--order", choices=["step", "drop", "forward", "keep", "end"], required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--no-bias", action="store_true",
                    help="the first layer without a bias: its weight's gradient (an mm of "
                         "the batch it unpacks) is backward's last op")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.dim, 2 * args.dim, bias=not args.no_bias), nn.Tanh(),
                          nn.Linear(2 * args.dim, args.dim), nn.Tanh(),
                          nn.Linear(args.dim, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        x = torch.randn(args.batch, args.dim)
        return model(x).pow(2).mean()

    if args.order == "forward":
        for i in range(2 * args.steps):
            loss_of().backward()
            if i % 2:
                opt.step()
                opt.zero_grad(set_to_none=True)
        return
    params = list(model.parameters())
    if args.order == "keep":
        for _ in range(args.steps):
            kept = []
            for _ in range(2):
                opt.zero_grad(set_to_none=True)   # the second: right after a backward
                loss_of().backward()
                kept.append([p.grad for p in params])
            for p, *gs in zip(params, *kept):
                p.grad = sum(gs)
            opt.step()
        return
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()
        if args.order == "drop":
            loss_of().backward()             # a probe: its gradients are never used
            opt.zero_grad(set_to_none=True)  # dropped right after the backward
    if args.order == "end":
        opt.zero_grad(set_to_none=True)
        loss_of().backward()


if __name__ == "__main__":
    main()
