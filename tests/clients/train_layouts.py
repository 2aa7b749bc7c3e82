"""Tensors of other layouts inside a training step (Note [Sparse tensors] in
memledger/trace/collector.py); each once crashed the trace while the script ran alone.

    python tests/clients/train_layouts.py --case sparse   # w += sparse COO delta in forward
                                                          # (peft's SHiRA), saved by autograd
    python tests/clients/train_layouts.py --case nested   # nn.TransformerEncoder evaluated
                                                          # with a padding mask: its fast path
                                                          # makes a nested tensor
    python tests/clients/train_layouts.py --case jagged   # an MLP trained on a batch of
                                                          # sequences of other lengths, a
                                                          # jagged nested tensor (a wrapper
                                                          # subclass: Note [Wrapper
                                                          # subclasses], trace/wrapped.py)
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class SparseDelta(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.register_buffer("idx", torch.randint(0, 64, (2, 32)))
        self.vals = nn.Parameter(torch.zeros(32))

    def forward(self, x):
        w = self.lin.weight.clone()
        w += torch.sparse_coo_tensor(self.idx, self.vals * 2.0, (64, 64))
        return F.linear(x, w, self.lin.bias)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["sparse", "nested", "jagged"], required=True)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if args.case == "jagged":
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    elif args.case == "sparse":
        model = nn.Sequential(SparseDelta(), nn.Tanh(), SparseDelta())
    else:
        model = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            64, 4, 128, dropout=0.0, batch_first=True), 2, enable_nested_tensor=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        model.train()
        if args.case == "jagged":
            lengths = torch.randint(5, 40, (8,), generator=g).tolist()
            x = torch.nested.nested_tensor([torch.randn(n, 64, generator=g) for n in lengths],
                                           layout=torch.jagged)
            loss = model(x).values().square().mean()
        else:
            loss = model(torch.randn(4, 32, 64, generator=g)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.case == "nested":
            model.eval()
            with torch.inference_mode():
                pad = torch.zeros(8, 32, dtype=torch.bool)
                pad[:, 16:] = True
                model(torch.randn(8, 32, 64, generator=g), src_key_padding_mask=pad)


if __name__ == "__main__":
    main()
