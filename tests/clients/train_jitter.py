"""A mixture-of-experts style router jitter: the MLP multiplies the tensor it is handed in
place (`hidden_states *= noise`, as transformers' Mixtral does with router_jitter_noise).

    python tests/clients/train_jitter.py --steps 3

Checkpointing the MLP would re-run it on the changed tensor (torch's checkpoint fails in
backward): predict and measure refuse it alike. Checkpointing the whole block is fine.
`--wrapped`: the model runs each layer inside `try:` and raises its own error `from` what
it caught, as FrEIA's `GraphINN` runs its nodes (Note [A refusal a library wrapped] in
memledger/trace/script.py).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Mlp(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            x *= torch.empty_like(x).uniform_(0.99, 1.01)
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln, self.mlp = nn.LayerNorm(width), Mlp(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


class Wrapping(nn.Sequential):
    """Each layer's failure raised as the library's own, the layer's error its cause."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self):
            try:
                x = layer(x)
            except Exception as e:
                raise RuntimeError(f"layer {i} encountered an error.") from e
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--wrapped", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = (Wrapping if args.wrapped else nn.Sequential)(*(Block(64) for _ in range(2)), nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
