"""Blocks whose saved tensors are read oddly, as peft and state-space models have them:

    python tests/clients/train_branches.py --block dead --steps 3

- `dead`: a branch computed with gradients and used only detached (peft DoRA's
  `lora_B(lora_A(eye))` for its weight norm): `lora_A`'s output is saved by `lora_B` and
  never unpacked, its node gone with the forward;
- `attr`: a plain tensor attribute, not a buffer (peft FourierFT's `indices`), saved by
  `index_put` in every step's forward;
- `bcast`: a tensor saved by a sigmoid and by a broadcasting mul (Mamba's slow scan,
  `h[..., None] * A`), whose gradient autograd sums over the broadcast dimension after the
  mul's node returns; `bcast-plain` without the sigmoid.
"""

import argparse

import torch
from torch import nn

WIDTH = 64


class Block(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(WIDTH, WIDTH)
        if kind == "dead":
            self.lora_a = nn.Linear(WIDTH, 16, bias=False)
            self.lora_b = nn.Linear(16, WIDTH, bias=False)
        elif kind == "attr":
            self.spectrum = nn.Parameter(torch.randn(512))
            self.indices = torch.randint(0, WIDTH * WIDTH, (512,))   # 4,096 B of int64
        else:
            self.A = nn.Parameter(torch.randn(WIDTH, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "dead":
            w = self.lora_b(self.lora_a(torch.eye(WIDTH)))
            return x + torch.relu(self.fc(x)) * w.detach().norm(dim=1)
        if self.kind == "attr":
            w = torch.zeros(WIDTH * WIDTH).index_put((self.indices,), self.spectrum)
            return x + torch.relu(self.fc(x)) + x @ w.view(WIDTH, WIDTH)
        h = self.fc(x) if self.kind == "bcast-plain" else torch.sigmoid(self.fc(x))
        return x + (h.unsqueeze(-1) * self.A).sum(-1)


class Net(nn.Module):
    def __init__(self, kind: str, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(kind) for _ in range(depth))
        self.head = nn.Linear(WIDTH, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--block", choices=["dead", "attr", "bcast", "bcast-plain"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.block, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        loss = model(torch.randn(4, 32, WIDTH, generator=gen)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
