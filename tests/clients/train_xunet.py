"""x-unet's `XUnet` (lucidrains/x-unet) built from its README's config, trained as a
denoiser on random tensors with a plain Adam loop: a noisy image in, the noise out, MSE.

    python tests/clients/train_xunet.py --steps 3
    memledger trace tests/clients/train_xunet.py --steps 2 -o xu.ledger
    memledger compare tests/clients/train_xunet.py -p 'checkpoint:downs.*' -- --video

The model (`--dim 8`, `dim_mults=(1, 2)`): `nested_unet_depths=(2, 1)` (each resnet
block's second half a `NestedResidualUnet` of that depth, the UNet-squared paper),
`consolidate_upsample_fmaps=True`, `weight_standardize=True` (a `WeightStandardizedConv3d`
standardizes its weight in every forward), `num_self_attn_per_stage=(0, 1)` (a
`TransformerBlock` in the lower stage), `use_xattnres=--xattnres` (the README's cross-stage
attention residuals). Module paths: `downs.<i>.0` (a stage's first `ResnetBlock`),
`downs.<i>.1.<j>` (its other blocks), `downs.<i>.2.<j>` (attention), `downs.<i>.3`
(downsample), `mid`, `mid_attn`, `mid_after`, `ups.<i>.*` the same, and each nested
unet's `...block2.downs.<k>` / `...block2.ups.<k>`.

`--video`: `frame_kernel_size=3` and (batch, channels, frames, height, width) input, as the
README's 3-D example. `--size`: the image edge; `--batch`; `--frames`.
"""

import argparse

import torch
import torch.nn.functional as F


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--video", action="store_true")
    ap.add_argument("--frames", type=int, default=2)
    ap.add_argument("--xattnres", action="store_true")
    args = ap.parse_args()

    from x_unet import XUnet

    torch.manual_seed(0)
    unet = XUnet(
        dim=args.dim,
        channels=3,
        dim_mults=(1, 2),
        num_blocks_per_stage=(1, 1),
        num_self_attn_per_stage=(0, 1),
        nested_unet_depths=(2, 1),
        nested_unet_dim=8,
        consolidate_upsample_fmaps=True,
        weight_standardize=True,
        attn_heads=2,
        attn_dim_head=8,
        frame_kernel_size=3 if args.video else 1,
        use_xattnres=args.xattnres,
    )
    opt = torch.optim.Adam(unet.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    shape = (args.batch, 3, *((args.frames,) if args.video else ()), args.size, args.size)
    for _ in range(args.steps):
        clean = torch.rand(shape, generator=gen)
        noise = torch.randn(shape, generator=gen)
        pred = unet(clean + 0.5 * noise)
        loss = F.mse_loss(pred, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
