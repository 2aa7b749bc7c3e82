"""A residual MLP (`blocks.*`, then a 50-way head) trained under one loss per `--loss`,
each with a backward of its own: the losses whose derivative formulas torch writes in
place untraced but out of place under a dispatch mode (BCE with logits, clamp to tensor
bounds, masked_select), and their neighbours.

    python tests/clients/train_losses.py --loss bce_pos_weight --amp
    memledger trace tests/clients/train_losses.py --steps 3 -o l.ledger -- --loss clamp
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

N, D, C = 128, 64, 50


def loss_of(name: str, out: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if name.startswith("bce"):   # multi-label: BCEWithLogitsLoss
        y = (torch.rand(N, C, generator=gen) < 0.3).float()
        kw = {"bce_pos_weight": {"pos_weight": torch.full((C,), 2.0)},
              "bce_weight": {"weight": torch.rand(C, generator=gen)}}.get(name, {})
        return F.binary_cross_entropy_with_logits(out, y, **kw)
    if name == "label_smoothing":
        y = torch.randint(0, C, (N,), generator=gen)
        y[::3] = -100
        return F.cross_entropy(out, y, label_smoothing=0.1)
    if name == "kl":
        y = torch.randn(N, C, generator=gen).log_softmax(-1)
        return F.kl_div(out.log_softmax(-1), y, log_target=True, reduction="batchmean")
    if name == "huber":
        return F.smooth_l1_loss(out, torch.randn(N, C, generator=gen))
    if name == "clamp":   # bounds per class, as tensors: ClampBackward0
        lo, hi = torch.full((C,), -0.5), torch.full((C,), 0.5)
        return F.mse_loss(torch.clamp(out, min=lo, max=hi), torch.randn(N, C, generator=gen))
    if name == "masked_select":
        return out.masked_select(out > 0).square().mean()
    raise SystemExit(f"unknown --loss {name}")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(D, C)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loss", default="bce")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--amp", action="store_true", help="forward and loss under bf16 autocast")
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters())
    gen = torch.Generator().manual_seed(1)
    for _ in range(a.steps):
        x = torch.randn(N, D, generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
            loss = loss_of(a.loss, model(x), gen)
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
