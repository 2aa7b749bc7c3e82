"""julius (differentiable resampling and filters as nn.Modules) inside a small audio model,
as its README uses them: a denoiser that splits its input into frequency bands
(`julius.SplitBands`, gains learned per band), resamples by 5/4 (`julius.ResampleFrac`)
into a stack of convolution blocks, low-passes inside its forward (the functional
`julius.lowpass_filter`, which builds its filter module on every call, and a
`julius.LowPassFilters` module whose outputs it averages) and resamples back by 4/5 to the
input's length. Seeded, tiny, nothing downloaded.

    python tests/clients/train_julius.py --steps 3
    memledger trace tests/clients/train_julius.py --steps 2 -o julius.ledger -- --fft
    memledger compare tests/clients/train_julius.py -p 'checkpoint:blocks.*' -- --fft

`--fft` forces julius's FFT convolution (`fft_conv1d`: the padded signal cut into
overlapping frames by `as_strided`, `torch.fft.rfft`, a complex product, `irfft`) in every
filter; by default julius picks it where a filter is longer than 65 taps (SplitBands'
lowest cutoff), `F.conv1d` elsewhere; `--no-fft` forces `F.conv1d` everywhere.
`--channels C`, `--length T`, `--depth N`, `--accum N`, `--clip`, `--validate` (the loss
under no_grad in eval mode each step), `--sgd`.
"""

import argparse

import julius
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.conv = nn.Conv1d(ch, 2 * ch, 5, padding=2)
        self.proj = nn.Conv1d(ch, ch, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.proj(F.glu(self.conv(h), dim=1))  # (B, ch, T')


class Denoiser(nn.Module):
    def __init__(self, ch: int, depth: int, fft: bool | None):
        super().__init__()
        self.fft = fft
        self.bands = julius.SplitBands(sample_rate=1.0, cutoffs=[0.05, 0.2], fft=fft)
        self.gain = nn.Parameter(torch.ones(3))
        self.up = julius.ResampleFrac(4, 5)
        self.down = julius.ResampleFrac(5, 4)
        self.inp = nn.Conv1d(1, ch, 3, padding=1)
        self.blocks = nn.ModuleList(Block(ch) for _ in range(depth))
        self.lowpasses = julius.LowPassFilters([0.1, 0.3], fft=fft)
        self.out = nn.Conv1d(ch, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        bands = self.bands(x)  # (3, B, 1, T)
        x = (bands * self.gain[:, None, None, None]).sum(0)
        h = self.inp(self.up(x))  # (B, ch, 5T/4)
        for blk in self.blocks:
            h = blk(h)
        h = julius.lowpass_filter(h, 0.25, fft=self.fft)
        h = self.lowpasses(h).mean(0)
        return self.down(self.out(h), output_length=length)  # (B, 1, T)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--depth", type=int, default=2)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--fft", dest="fft", action="store_const", const=True, default=None)
    g.add_argument("--no-fft", dest="fft", action="store_const", const=False)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Denoiser(args.channels, args.depth, args.fft)
    optim = (torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.sgd
             else torch.optim.Adam(model.parameters(), lr=1e-3))

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.arange(args.length).float()
        freq = torch.rand(args.batch, 1, 1) * 0.05
        clean = torch.sin(2 * torch.pi * freq * t)  # (B, 1, T)
        return clean + 0.3 * torch.randn_like(clean), clean

    for step in range(args.steps):
        for _ in range(args.accum):
            noisy, clean = batch()
            loss = F.mse_loss(model(noisy), clean) / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        if args.validate:
            model.eval()
            with torch.no_grad():
                noisy, clean = batch()
                val = F.mse_loss(model(noisy), clean)
            model.train()
            print(f"step {step}: val {val.item():.4f}")
        print(f"step {step}: loss {loss.item() * args.accum:.4f}")


if __name__ == "__main__":
    main()
