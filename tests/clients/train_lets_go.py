"""A custom `autograd.Function` whose backward lets go of what it unpacked before it returns
(Note [What a node lets go of before it returns], memledger/trace/collector.py), as
ring-attention-pytorch's ring flash attention does: it reads the saved tensor, drops it,
then makes a large scratch buffer. Under checkpoint or offload the re-made (or read back)
tensor is gone by then; in the baseline autograd's own reference keeps it.

    python tests/clients/train_lets_go.py --steps 2
    memledger compare tests/clients/train_lets_go.py -p 'offload:blocks.*'

Two blocks, each `Linear(64, 256)` then `ScaleByMean` (saves the Linear's output h, a
(16, 256) float32 = 16,384 B). Its backward reads h's mean, `del h`, and writes the
gradient through a (16, 4096) float32 scratch (262,144 B), where each step peaks.
`--keep` keeps h to the end of the backward (the scratch made while it is held).
"""

import argparse

import torch
import torch.nn as nn

KEEP = False


class ScaleByMean(torch.autograd.Function):
    """y = x * mean(|x|), the mean taken as a constant in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.abs().mean()

    @staticmethod
    def backward(ctx, g):
        (h,) = ctx.saved_tensors
        scale = h.abs().mean()
        if not KEEP:
            del h                                   # let go of it before the scratch
        work = torch.zeros(g.shape[0], 16 * g.shape[1])   # (16, 4096) fp32 = 262,144 B
        work[:, :g.shape[1]] = g
        return work[:, :g.shape[1]] * scale


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 256)
        self.out = nn.Linear(256, 64)

    def forward(self, x):
        return self.out(ScaleByMean.apply(self.proj(x)))


def main() -> None:
    global KEEP
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    KEEP = args.keep
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        x = torch.randn(16, 64)
        loss = model(x).square().mean()
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
