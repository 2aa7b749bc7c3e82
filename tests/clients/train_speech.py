"""Speech-like sequence classifiers from two of lucidrains' libraries, as their READMEs build
them: `conformer` (Conformer blocks: half-step feed-forwards, relative-position attention,
a convolution module of pointwise conv, GLU, depthwise conv, BatchNorm and Swish) and
`nystrom-attention` (Nystromformer: attention through landmarks, a Moore-Penrose
pseudo-inverse by iteration, a depthwise-conv residual of the values). Random "filterbank"
frames in, seeded, tiny, nothing downloaded.

    python tests/clients/train_speech.py --steps 3 --model conformer
    memledger trace tests/clients/train_speech.py --steps 2 -o s.ledger -- --model nystrom
    memledger compare tests/clients/train_speech.py -p 'checkpoint:encoder.stack.layers.*' -- \
        --model conformer

Models (`--model`): `conformer` (`Conformer(dim, depth, ...)`: the stack the README
builds, or its blocks called one by one with `--mask`, as `ConformerBlock(x, mask=...)`
takes a boolean (batch, frames) mask that `Conformer.forward` does not pass on),
`nystrom` (`Nystromformer(dim, depth, ...)`: `--landmarks M`, `--pinv N` iterations,
`--no-residual`, `--mask`: a boolean frame mask; with frames not a multiple of M the
library pads the sequence at the front), `nattn` (one `NystromAttention` layer, as its
README's first example, `return_attn=True` with `--return-attn`).

Heads (`--head`): `cls` (mean over the frames, one label per utterance, cross-entropy),
`ctc` (a label sequence per utterance, `F.ctc_loss` over per-frame log-probabilities, as
a speech recognizer trains). Both: `--frames`, `--feats`, `--dim`, `--depth`,
`--dropout`, `--causal` (`conv_causal`: no BatchNorm, left padding), `--kernel`,
`--accum`, `--amp` (bf16 autocast), `--validate` (a loss in eval mode under no_grad each
step: BatchNorm reads its running statistics).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    """Filterbank frames -> dim -> the library's stack -> per-frame features."""

    def __init__(self, args) -> None:
        super().__init__()
        self.proj = nn.Linear(args.feats, args.dim)
        self.kind = args.model
        if args.model == "conformer":
            from conformer import Conformer
            self.stack = Conformer(
                dim=args.dim, depth=args.depth, dim_head=8, heads=2, ff_mult=2,
                conv_expansion_factor=2, conv_kernel_size=args.kernel,
                attn_dropout=args.dropout, ff_dropout=args.dropout,
                conv_dropout=args.dropout, conv_causal=args.causal)
        elif args.model == "nystrom":
            from nystrom_attention import Nystromformer
            self.stack = Nystromformer(
                dim=args.dim, depth=args.depth, dim_head=8, heads=2,
                num_landmarks=args.landmarks, pinv_iterations=args.pinv,
                attn_values_residual=not args.no_residual,
                attn_values_residual_conv_kernel=args.kernel,
                attn_dropout=args.dropout, ff_dropout=args.dropout)
        else:
            from nystrom_attention import NystromAttention
            self.attn = NystromAttention(
                dim=args.dim, dim_head=8, heads=2, num_landmarks=args.landmarks,
                pinv_iterations=args.pinv, residual=not args.no_residual,
                residual_conv_kernel=args.kernel, dropout=args.dropout)
        self.return_attn = args.return_attn

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.proj(x)                                    # (B, T, dim)
        if self.kind == "conformer":
            if mask is None:
                return self.stack(x)
            for block in self.stack.layers:
                x = block(x, mask=mask)
            return x
        if self.kind == "nystrom":
            return self.stack(x, mask=mask)
        if self.return_attn:
            out, attn = self.attn(x, mask=mask, return_attn=True)
            return out + attn.mean() * 0                    # keep the map in the graph
        return self.attn(x, mask=mask) + x


class Classifier(nn.Module):
    def __init__(self, args, classes: int) -> None:
        super().__init__()
        self.encoder = Encoder(args)
        self.head = nn.Linear(args.dim, classes)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.encoder(x, mask))             # (B, T, classes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="conformer", choices=["conformer", "nystrom", "nattn"])
    p.add_argument("--head", default="cls", choices=["cls", "ctc"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--frames", type=int, default=16)
    p.add_argument("--feats", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--kernel", type=int, default=5)
    p.add_argument("--landmarks", type=int, default=4)
    p.add_argument("--pinv", type=int, default=6)
    p.add_argument("--no-residual", action="store_true")
    p.add_argument("--return-attn", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    classes = 6                                 # ctc: blank (0) + 5 symbols
    model = Classifier(args, classes)
    optim = (torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.sgd
             else torch.optim.AdamW(model.parameters(), lr=1e-3))

    def loss_of() -> torch.Tensor:
        x = torch.randn(args.batch, args.frames, args.feats)
        lengths = torch.full((args.batch,), args.frames, dtype=torch.long)
        lengths[-1] = args.frames - 3
        mask = (torch.arange(args.frames)[None] < lengths[:, None]) if args.mask else None
        logits = model(x, mask).float()
        if args.head == "cls":
            if mask is None:
                pooled = logits.mean(1)
            else:
                pooled = (logits * mask[..., None]).sum(1) / lengths[:, None]
            return F.cross_entropy(pooled, torch.randint(0, classes, (args.batch,)))
        targets = torch.randint(1, classes, (args.batch, 4))
        target_lengths = torch.tensor([4] + [3] * (args.batch - 1))
        logp = logits.log_softmax(-1).transpose(0, 1)       # (T, B, classes)
        return F.ctc_loss(logp, targets, lengths, target_lengths, zero_infinity=True)

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
