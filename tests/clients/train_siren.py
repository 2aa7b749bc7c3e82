"""siren-pytorch (lucidrains) as its README writes it: a `SirenNet` (linear layers with
sine activations, `w0_initial` on the first) wrapped by a `SirenWrapper` that evaluates
it on its grid of pixel coordinates (a buffer, cloned with `requires_grad_()` in every
forward) and returns the MSE against an image; with `--latent D` a `Modulator` (ReLU
MLP over a latent, its hidden states multiplied into the sine layers' outputs in place)
conditions it, the latent learned too. Fits a tiny random image. Seeded, tiny, nothing
downloaded.

    python tests/clients/train_siren.py --steps 3
    memledger trace tests/clients/train_siren.py --steps 2 -o siren.ledger -- --latent 8
    memledger compare tests/clients/train_siren.py -p 'checkpoint:net.layers.*' -- --latent 8

Options: `--latent D` (modulation), `--dropout P`, `--final sigmoid` (final
activation), `--images N` (N images, one latent each, a wrapper call per image),
`--accum N`, `--amp` (bf16 autocast), `--validate` (render under no_grad, eval mode),
`--left-out` (a bug: the optimizer built from the wrapper's parameters alone, the
latents never learn).
"""

import argparse

import torch
import torch.nn as nn

from siren_pytorch import SirenNet, SirenWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--size", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--latent", type=int, default=None)
    p.add_argument("--images", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--final", default="none", choices=["none", "sigmoid"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--left-out", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    net = SirenNet(dim_in=2, dim_hidden=args.hidden, dim_out=3, num_layers=args.layers,
                   w0_initial=30., dropout=args.dropout,
                   final_activation=nn.Sigmoid() if args.final == "sigmoid" else None)
    wrapper = SirenWrapper(net, image_width=args.size, image_height=args.size,
                           latent_dim=args.latent)
    images = torch.rand(args.images, 3, args.size, args.size)
    params = list(wrapper.parameters())
    latents = None
    if args.latent:
        latents = nn.Parameter(torch.zeros(args.images, args.latent).normal_(0, 1e-2))
        if not args.left_out:   # the README makes the latent and shows no optimizer
            params.append(latents)
    optim = torch.optim.Adam(params, lr=1e-4)

    def loss_of() -> torch.Tensor:
        total = 0.
        for i in range(args.images):
            kw = {"latent": latents[i]} if latents is not None else {}
            total = total + wrapper(images[i:i + 1], **kw)
        return total / args.images

    for step in range(args.steps):
        wrapper.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            wrapper.eval()
            with torch.no_grad():
                kw = {"latent": latents[0]} if latents is not None else {}
                print("render", tuple(wrapper(**kw).shape))


if __name__ == "__main__":
    main()
