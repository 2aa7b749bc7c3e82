"""Music source separation with BS-RoFormer (lucidrains' band-split RoPE transformer), as its
users train it: `BSRoformer` or `MelBandRoformer` built from a config, a stereo mixture in,
the model's own loss out (`model(mix, target=stems)`: the STFT, the band split, axial
time/frequency transformers with hyper-connection residual streams, the mask estimators,
the iSTFT and an L1 plus multi-resolution STFT loss, all inside its forward), AdamW and
gradient clipping outside, as Music-Source-Separation-Training's train.py runs it. Random
audio, seeded (torch, and Python's `random`: hyper-connections picks each layer's initial
residual stream by `randrange`). Tiny, nothing downloaded.

    python tests/clients/train_bsroformer.py --steps 3 --model mel
    memledger trace tests/clients/train_bsroformer.py --steps 2 -o bsr.ledger -- --stems 2
    memledger compare tests/clients/train_bsroformer.py -p 'checkpoint:layers.*.*' --steps 2

Options: `--model bs|mel` (`MelBandRoformer`: overlapping mel bands picked by a gather and
averaged back by `scatter_add_`, a linear-attention transformer before the time and
frequency ones, dropout 0.1), `--stems N` (one mask estimator per stem, the target
(batch, stems, channels, time)), `--mono`, `--streams N` (hyper-connection residual
streams; 1: plain residuals), `--pope` (PoPE positions instead of rotary), `--accum N`
(micro-batches per step, the loss divided by N), `--clip` (the norm `clip_grad_norm_`
clips to; 0: none), `--autocast` (bf16 autocast on the CPU).
"""

import argparse
import contextlib
import random

import torch

from bs_roformer import BSRoformer, MelBandRoformer


def build(args) -> torch.nn.Module:
    common = dict(
        dim=args.dim, depth=args.depth, stereo=not args.mono, num_stems=args.stems,
        time_transformer_depth=1, freq_transformer_depth=1, dim_head=8, heads=2,
        stft_n_fft=64, stft_hop_length=16, stft_win_length=64,
        multi_stft_resolutions_window_sizes=(64, 32), multi_stft_hop_size=16,
        num_residual_streams=args.streams, use_pope=args.pope,
    )
    if args.model == "bs":
        # 33 frequencies (n_fft 64) in 5 bands, narrow at the bottom as the paper's
        return BSRoformer(freqs_per_bands=(2, 2, 4, 8, 17), mask_estimator_depth=1, **common)
    return MelBandRoformer(num_bands=8, sample_rate=8000, linear_transformer_depth=1,
                           **common)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="bs", choices=["bs", "mel"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--stems", type=int, default=1)
    p.add_argument("--mono", action="store_true")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--pope", action="store_true")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--autocast", action="store_true")
    args = p.parse_args()
    random.seed(0)   # hyper-connections picks each layer's initial residual stream by randrange
    torch.manual_seed(0)

    model = build(args)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    channels = 1 if args.mono else 2

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        stems = torch.randn(args.batch, args.stems, channels, args.length)
        mix = stems.sum(dim=1)
        return mix, stems if args.stems > 1 else stems[:, 0]

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            mix, target = batch()
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if args.autocast \
                else contextlib.nullcontext()
            with ctx:
                loss = model(mix, target=target)
            (loss / args.accum).backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
