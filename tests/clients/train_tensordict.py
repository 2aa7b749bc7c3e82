"""tensordict's modules: a `TensorDictSequential` of `TensorDictModule`s, each reading and
writing keys of a `TensorDict` batch (as TorchRL's policies and value nets are built); the
loss reads `td["logits"]`. Blocks are `module.0`, `module.1`, ... (`TensorDictModule`s; `module.0.module` the MLP each wraps). Tiny,
seeded, nothing downloaded.

    python tests/clients/train_tensordict.py --steps 3
    memledger trace tests/clients/train_tensordict.py --steps 2 -o td.ledger
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(0)
    W = 64
    model = TensorDictSequential(
        TensorDictModule(nn.Sequential(nn.Linear(16, W), nn.GELU(), nn.Linear(W, W)),
                         in_keys=["obs"], out_keys=["h"]),
        TensorDictModule(nn.Sequential(nn.LayerNorm(W), nn.Linear(W, W), nn.GELU()),
                         in_keys=["h"], out_keys=["h2"]),
        TensorDictModule(nn.Linear(W, 4), in_keys=["h2"], out_keys=["logits"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        td = TensorDict({"obs": torch.randn(128, 16, generator=gen),
                         "label": torch.randint(0, 4, (128,), generator=gen)},
                        batch_size=[128])
        out = model(td)
        loss = F.cross_entropy(out["logits"], out["label"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
