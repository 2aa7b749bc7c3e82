"""An MLP trained under `torch.compile`, as a user who wants speed would write it.

    python tests/clients/train_compiled.py --steps 5
    memledger trace tests/clients/train_compiled.py --steps 2 -o compiled.ledger
    memledger show compiled.ledger       # says it is the eager run, with both peaks

Dynamo compiles nothing while a TorchDispatchMode is active, so the traced pass runs the
model eagerly; the allocator pass (no mode) runs the compiled code. `--backend aot_eager`
compiles without a C++ toolchain (AOTAutograd's partitioner still decides what is saved).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))                 # (B, H)
        x = torch.tanh(self.fc2(x)) * 2 + x     # (B, H): pointwise chains a compiler fuses
        return self.head(x)                     # (B, 10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--backend", default="inductor", help="inductor, aot_eager, eager")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torch.compile(MLP(128, args.hidden), backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 128, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
