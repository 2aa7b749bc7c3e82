"""A state cached in memory and loaded back after an evaluation, in plain torch (what
torch-lr-finder's `range_test(val_loader=...)` then `reset()` does): `copy.deepcopy` of the
model's `state_dict()` before training, one step, an evaluation loss under `no_grad`, then
`model.load_state_dict(cached)` (its `param.copy_(cached)`), and training on. The cached copy
is no batch (Note [A load into the model after an evaluation], trace/collector.py).

    memledger trace tests/clients/train_load_after_eval.py --steps 2 -o lae.ledger
"""

import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--no-eval", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cached = copy.deepcopy(model.state_dict())
    for step in range(args.steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step == 0:
            if not args.no_eval:
                with torch.no_grad():
                    val = F.cross_entropy(model(x), y)
                print(f"val {val.item():.4f}")
            model.load_state_dict(cached)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
