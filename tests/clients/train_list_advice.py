"""Plain-torch models whose policy refusals give advice (helper script for
tests/clients/test_list_advice.py; docs/decisions.md, fifty-sixth session, fix56h).

    python tests/clients/train_list_advice.py --case lists
    python tests/clients/train_list_advice.py --case beside

- `lists`: the model keeps its layers as a ModuleList of ModuleLists (`[wrapper(attn-like
  mix), wrapper(feed-forward)]`, each wrapper holding an activation), as x-transformers'
  decoder does under coconut-pytorch: `layers` and `layers.N` are containers (Note [What a
  container's refusal advises], replay/policies.py).
- `beside`: a time MLP called by the script before the network (`cond = time_mlp(t);
  model(x, cond)`), so the MLP is the model (Note [The model], trace/roots.py) and the
  network the module beside it (Note [The model named once]).
"""

import argparse

import torch
from torch import nn

D = 16


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fn = nn.Linear(D, D)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fn(x))


class Net(nn.Module):
    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleList([Wrapper(), Wrapper()]) for _ in range(depth))
        self.out = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        if cond is not None:
            x = x + cond
        for mix, ff in self.layers:
            x = ff(mix(x))
        return self.out(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["lists", "beside"], required=True)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    time_mlp = nn.Sequential(nn.Linear(1, D), nn.SiLU(), nn.Linear(D, D))
    params = [*model.parameters(), *(time_mlp.parameters() if args.case == "beside" else ())]
    opt = torch.optim.SGD(params, lr=1e-2)
    for _ in range(args.steps):
        x, t = torch.randn(8, D), torch.rand(8, 1)
        cond = time_mlp(t) if args.case == "beside" else None
        loss = model(x, cond).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
