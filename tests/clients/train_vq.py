"""A VQ-VAE-style loop on lucidrains' vector_quantize_pytorch (pure PyTorch): an MLP
encoder (`enc.*`), a quantizer (`vq`), an MLP decoder (`dec.*`); reconstruction loss plus the
quantizer's auxiliary loss, AdamW. Tiny shapes, seeded, nothing downloaded.

    python tests/clients/train_vq.py --vq rvq --steps 3
    memledger trace tests/clients/train_vq.py --steps 2 -o vq.ledger -- --vq vq

`--vq`: vq (VectorQuantize, an EMA codebook updated in forward), rvq (ResidualVQ, three
quantizers), fsq (FSQ: finite scalar quantization, no codebook), lfq (LFQ: lookup-free,
an entropy loss).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

D = 32


class Net(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        import vector_quantize_pytorch as V
        self.kind = kind
        self.enc = nn.ModuleList(nn.Sequential(nn.LayerNorm(D), nn.Linear(D, D), nn.GELU())
                                 for _ in range(2))
        if kind == "vq":
            self.vq = V.VectorQuantize(dim=D, codebook_size=64, decay=0.8,
                                       commitment_weight=1.0)
        elif kind == "rvq":
            self.vq = V.ResidualVQ(dim=D, num_quantizers=3, codebook_size=64, decay=0.8)
        elif kind == "fsq":
            self.vq = V.FSQ(levels=[8, 5, 5], dim=D)
        else:
            self.vq = V.LFQ(dim=D, codebook_size=64, entropy_loss_weight=0.1)
        self.dec = nn.ModuleList(nn.Sequential(nn.LayerNorm(D), nn.Linear(D, D), nn.GELU())
                                 for _ in range(2))

    def forward(self, x):
        h = x
        for b in self.enc:
            h = h + b(h)
        out = self.vq(h)                       # (quantized, indices[, aux loss])
        q = out[0]
        aux = out[2].sum() if self.kind != "fsq" else torch.zeros(())
        for b in self.dec:
            q = q + b(q)
        return q, aux


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--vq", default="vq")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.vq)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = torch.randn(4, 16, D, generator=gen)
        y, aux = model(x)
        loss = F.mse_loss(y, x) + aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
