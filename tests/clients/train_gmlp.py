"""gMLP (g-mlp-pytorch, lucidrains) as its README writes it: blocks of a spatial gating
unit (`SpatialGatingUnit`: half the channels normed and mixed along the sequence by a
learned (heads, n, n) matrix, times the other half), optionally with its "tiny attention"
(`attn_dim`) added to the gate, stochastic depth (`prob_survival`: layers dropped at random
each training forward, the survivors run through an `nn.Sequential` made in the forward).
Seeded, tiny, nothing downloaded.

    python tests/clients/train_gmlp.py --steps 3 --mode lm
    memledger trace tests/clients/train_gmlp.py --steps 2 -o gmlp.ledger -- --mode vision
    memledger compare tests/clients/train_gmlp.py -p 'checkpoint:layers.*' -- --mode vision

Modes (`--mode`):

- `lm`: a causal `gMLP` language model (`num_tokens`, `causal=True`: the spatial weight
  sliced to the sequence and masked above the diagonal in every forward) trained through
  the library's `AutoregressiveWrapper` (next-token cross-entropy), Adam with clipping, as
  its enwik8 train.py. `--circulant` (`circulant_matrix=True`: the (n, n) weight built
  from a length-n vector by pad, repeat and reshape, times absolute position vectors),
  `--shift S` (`shift_tokens`: channel groups shifted along the sequence by `F.pad`).
- `vision`: `gMLPVision` on random images (patches by an einops `Rearrange`, mean-pooled
  by `Reduce`), cross-entropy, AdamW.

Both: `--attn D` (the tiny attention, `attn_dim=D`), `--heads H` (multi-head spatial
gating), `--survival P` (`prob_survival`), `--act tanh` (the gate's activation: one module
the library shares among all blocks), `--accum N` (gradient accumulation), `--amp` (bf16
autocast), `--validate` (a loss under no_grad in eval mode each step). `lm` only:
`--train-len N` (train on N < `--seq-len` tokens: the causal weight sliced to N),
`--generate N` (sample N tokens each step with the wrapper's `generate`, as train.py does).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from g_mlp_pytorch import gMLP, gMLPVision
from g_mlp_pytorch.autoregressive_wrapper import AutoregressiveWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="lm", choices=["lm", "vision"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--attn", type=int, default=None)
    p.add_argument("--survival", type=float, default=1.0)
    p.add_argument("--circulant", action="store_true")
    p.add_argument("--shift", type=int, default=0)
    p.add_argument("--act", default="identity", choices=["identity", "tanh"])
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--train-len", type=int, default=None)
    p.add_argument("--amp", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    act = nn.Tanh() if args.act == "tanh" else nn.Identity()
    num_tokens = 32
    if args.mode == "lm":
        net = gMLP(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                   seq_len=args.seq_len, heads=args.heads, attn_dim=args.attn,
                   prob_survival=args.survival, causal=True,
                   circulant_matrix=args.circulant, shift_tokens=args.shift, act=act)
        model = AutoregressiveWrapper(net)
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

        def loss_of() -> torch.Tensor:
            n = args.train_len or args.seq_len
            return model(torch.randint(0, num_tokens, (args.batch, n + 1)))
    else:
        model = gMLPVision(image_size=16, patch_size=4, num_classes=10, dim=args.dim,
                           depth=args.depth, heads=args.heads, attn_dim=args.attn,
                           prob_survival=args.survival)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            img = torch.randn(args.batch, 3, 16, 16)
            return F.cross_entropy(model(img), torch.randint(0, 10, (args.batch,)))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.mode == "lm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")
        if args.generate and args.mode == "lm":
            # as the enwik8 train.py samples: the wrapper's generate (no_grad, eval mode)
            prime = torch.randint(0, num_tokens, (1, args.seq_len))
            sample = model.generate(prime[0], args.generate)
            print("sample", sample.tolist())


if __name__ == "__main__":
    main()
