"""A higher-order operator in a training script: an MLP over token features, trained; each
step ends with an evaluation under no_grad that attends over the features by
`flex_attention` (uncompiled: on CPU its unfused reference, which materializes the
(1, 1, 256, 256) float32 scores = 262,144 B). flex_attention is a `HigherOrderOperator`:
before, the collector's dispatch mode refused it and `memledger trace` failed (exit 3)
where the script runs fine (Note [Higher-order operators run by their ops],
memledger/trace/higher_order.py).

    python tests/clients/train_hop.py --steps 2
    memledger trace tests/clients/train_hop.py --steps 2 -o hop.ledger
"""

import argparse
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention


def causal(score, b, h, q_idx, kv_idx):
    return torch.where(q_idx >= kv_idx, score, -float("inf"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--tokens", type=int, default=256)
    args = p.parse_args()
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")

    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        x = torch.randn(args.tokens, 8)
        loss = F.mse_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            h = model(torch.randn(args.tokens, 8)).view(1, 1, args.tokens, 8)   # (B, H, L, D)
            out = flex_attention(h, h, h, score_mod=causal)
        print(f"step {step}  loss {loss.item():.4f}  eval {out.square().mean().item():.4f}")


if __name__ == "__main__":
    main()
