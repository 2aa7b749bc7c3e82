"""A tensor a library makes at import, read by every step, in plain torch: the features are
projected by `PROJECTION` (tests/clients/made_at_import.py, 4,096 B made when that module is
imported), then an MLP regresses a target. In the CLI's fresh process both passes see the
import; in-process the test harness imports it before the first pass (Note [Tensors made
at import] in tests/clients/harness.py), so it exists before every pass.

    python tests/clients/train_made_at_import.py --steps 3
    memledger trace tests/clients/train_made_at_import.py --steps 2 -o mi.ledger
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # `tests.` from anywhere

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from tests.clients.made_at_import import PROJECTION  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1))
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x = torch.randn(args.batch, 16) @ PROJECTION
        loss = (model(x).squeeze(-1) - x.sum(-1)).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
