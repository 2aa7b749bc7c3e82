"""The MLP example trained with its forward and backward inside `optimizer.step(closure)`,
as Lightning's automatic optimization and LBFGS run them.

`--batch-inside`: the batch drawn inside the closure (each call a new one).

    python tests/clients/train_closure.py --optimizer lbfgs --steps 20
    memledger compare tests/clients/train_closure.py -p 'checkpoint:fc1' -- --optimizer lbfgs
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_mlp import MLP  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--optimizer", choices=["adam", "lbfgs"], default="adam")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-inside", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if args.optimizer == "adam" else \
        torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)   # 3 closures a step
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        x = y = None
        if not args.batch_inside:
            x = torch.randn(64, 256, generator=gen)
            y = torch.randint(0, 10, (64,), generator=gen)

        def closure():
            nonlocal x, y
            opt.zero_grad(set_to_none=True)
            if args.batch_inside:
                x = torch.randn(64, 256, generator=gen)
                y = torch.randint(0, 10, (64,), generator=gen)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss
        loss = opt.step(closure)
        if step % 10 == 0:
            print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
