"""A classifier on torch's own `nn.TransformerEncoder` (pre-norm, GELU, dropout), AdamW
with a cosine schedule, as many tutorials write one.

    python tests/clients/train_torch_encoder.py --steps 5
    memledger trace tests/clients/train_torch_encoder.py --steps 3 -o enc.ledger

`nn.MultiheadAttention` inside, which takes its fused fast path only in inference; in
training it runs `scaled_dot_product_attention` through its own projections.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.1,
                                           activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=4)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Classifier(256, args.hidden, args.heads, args.layers, 5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(args.steps, 1))
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        ids = torch.randint(0, 256, (args.batch_size, args.seq), generator=gen)
        y = torch.randint(0, 5, (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(ids), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
