"""Pyro's optimization loop in torch alone: one `torch.optim.Adam` per parameter, made the
first time the parameter is stepped, and every one stepped after one backward (pyro's
`PyroOptim` inside `SVI.step`). The model is a residual MLP (`layers.*`); a second
top-level module, `Guide`, holds a learned scale and shift applied to the model's output
(an `AutoDelta` guide's parameters: the optimizer steps them, the model does not hold them).

`--order`: sorted (the parameters in a fixed order), reversed, or set (as pyro iterates
them: a Python set of tensors, in the order of their addresses, which differs run to
run).

    python tests/clients/train_per_param_opt.py --order set --steps 3
"""

import argparse

import torch
from torch import nn

W = 32


class Guide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.shift = nn.Parameter(torch.zeros(1))

    def forward(self, y):
        return y * self.scale + self.shift


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--order", default="sorted")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(W, W), nn.GELU()) for _ in range(3)))
    guide = Guide()
    x, y = torch.randn(64, W), torch.randn(64, W)
    params = [*model.parameters(), *guide.parameters()]
    opts: dict[nn.Parameter, torch.optim.Optimizer] = {}
    for step in range(args.steps):
        loss = ((guide(model(x)) - y) ** 2).mean()
        loss.backward()
        order = {"sorted": params, "reversed": params[::-1], "set": set(params)}[args.order]
        for q in order:
            if q not in opts:
                opts[q] = torch.optim.Adam([q], lr=1e-3)
            opts[q].step()
            q.grad = None
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
