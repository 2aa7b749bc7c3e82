"""A cumprod in a training step, in plain torch: `Linear -> reshape -> .sum(-1).cumprod(-2)
-> Linear`, Adam, random data; `--complex`: the cumprod of a complex view
(`view_as_complex(z).cumprod(-2).real`), as gateloop-transformer's data-dependent relative
positions; `--prod dim`: a `prod(-1)` over a last dim of 4 instead; `--prod all`: the
`prod()` of a whole tensor (times a sum). Their backward's path under the tracer: Note [A
derivative formula that branches on the mode] (memledger/trace/untraced_formulas.py).

    memledger compare tests/clients/train_cumprod.py --steps 2 -p offload:body -- --complex
"""

import argparse

import torch
from torch import nn


class Body(nn.Module):
    def __init__(self, dim: int, length: int, complex_: bool, prod: str) -> None:
        super().__init__()
        self.length, self.complex, self.prod = length, complex_, prod
        self.proj = nn.Linear(dim, length * 4)
        self.out = nn.Linear(length, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x).reshape(x.shape[0], self.length, 2, 2)   # (B, L, 2, 2)
        if self.complex:
            c = torch.view_as_complex(h.contiguous()).cumprod(-2).real   # (B, L, 2)
            g = c.sum(-1)
        elif self.prod == "dim":
            g = h.flatten(2).prod(-1)   # (B, L)
        elif self.prod == "all":
            g = h.sum((-1, -2)) * (h * 0.9).prod()   # (B, L) times one number
        else:
            g = h.sum(-1).cumprod(-2).sum(-1)   # (B, L)
        return self.out(g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--length", type=int, default=16)
    ap.add_argument("--complex", action="store_true")
    ap.add_argument("--prod", choices=["dim", "all"], default="",
                    help="a `prod` instead: over the last dim, or of every element")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("body", Body(args.dim, args.length, args.complex, args.prod))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.dim) * 0.1 + 1.0
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
