"""Whisper's encoder stem: two Conv1d + GELU, the second with stride 2, in bf16 on CPU.

    python tests/clients/train_conv1d.py --steps 3

Checkpointing the strided Conv1d alone (`checkpoint:2`) drops nothing: it saves its input
and weight only. Its backward kernel takes scratch while checkpoint's frame (the RNG state
it keeps) is still held: the frame goes when the node that unpacked the saves returns.
"""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(16, 64, 3, padding=1), nn.GELU(),
                          nn.Conv1d(64, 64, 3, stride=2, padding=1), nn.GELU()).bfloat16()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(4, 16, 64).bfloat16()
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
