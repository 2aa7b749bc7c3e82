"""A script that leaves the process-wide state to the process, as many do: no seed (the
model's init and a random crop length per step come from torch's global generator, the
batch's order from numpy's), tensors in the default dtype, gradients on because they are
on by default. L-BFGS with a strong-Wolfe line search takes as many closure calls as the
values ask. In-process (tests/clients/harness.py) every one of those comes from whatever
the previous test left, unless each pass starts from a fresh process's state (Note [Each
pass from a fresh process's state] in the harness).

    python tests/clients/train_unseeded.py --steps 2
"""

import argparse

import numpy as np
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.LBFGS(model.parameters(), max_iter=4, history_size=3,
                            line_search_fn="strong_wolfe")
    data = torch.linspace(-1, 1, 32 * 8).reshape(32, 8)
    for step in range(args.steps):
        crop = int(torch.randint(8, 33, ()).item())   # a random crop, as augmentations draw
        rows = torch.from_numpy(np.random.permutation(32)[:crop])
        x = data[rows]
        y = x.sin().sum(1, keepdim=True)

        def closure():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            return loss

        loss = opt.step(closure)
        print(f"step {step}  crop {crop}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
