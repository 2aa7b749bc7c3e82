"""diffusers models built from config (no download) under a DDPM / latent-diffusion training
loop: `DDPMScheduler.add_noise`, MSE on the predicted noise, AdamW. UNet2DModel (resnet and
attention down/up blocks, GroupNorm, skip connections from the down blocks to the up
blocks), UNet2DConditionModel (cross-attention on random encoder states), AutoencoderKL
(reconstruction + KL), DiT (`DiTTransformer2DModel`, adaLN-zero, class labels).
`--grad-ckpt` is the model's own `enable_gradient_checkpointing()`; `--autocast bf16`.

    python tests/clients/train_diffusers.py --model unet --steps 3
    memledger trace tests/clients/train_diffusers.py --steps 2 -o u.ledger -- --model unet
    memledger predict u.ledger -p 'checkpoint:down_blocks.*'
    memledger doctor --steps-by forward tests/clients/train_diffusers.py -- --steps 0 --sample 4

`--sample N`: after training, a pipeline's denoising loop (as `DDPMPipeline.__call__`:
`scheduler.set_timesteps(N)`, then per timestep the model's noise prediction and
`scheduler.step(...).prev_sample`) under `torch.no_grad()`, with `--model unet`.
`--sample-bug grad` runs it without `no_grad`: each step's latents carry the graph of every
step before (the classic "sampling under gradients" leak).
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import torch.nn.functional as F
from diffusers import (AutoencoderKL, DDPMScheduler, DiTTransformer2DModel,
                       UNet2DConditionModel, UNet2DModel)

SIZE, T = 16, 100


def build(name: str):
    if name == "unet":
        return UNet2DModel(
            sample_size=SIZE, in_channels=3, out_channels=3, layers_per_block=1,
            block_out_channels=(16, 32), norm_num_groups=8, attention_head_dim=8,
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    if name == "cond":
        return UNet2DConditionModel(
            sample_size=SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
            block_out_channels=(16, 32), norm_num_groups=8, attention_head_dim=4,
            cross_attention_dim=16,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    if name == "vae":
        return AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, sample_size=SIZE,
            block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2)
    if name == "dit":
        return DiTTransformer2DModel(
            num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2,
            sample_size=SIZE // 2, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=8)
    raise SystemExit(f"unknown model {name!r}")


def loss_of(name, model, sched, batch, g):
    if name == "vae":   # recon + KL, the latent sampled with the script's generator
        x = torch.randn(batch, 3, SIZE, SIZE, generator=g)
        post = model.encode(x).latent_dist
        recon = model.decode(post.sample(generator=g)).sample
        return F.mse_loss(recon, x) + 1e-3 * post.kl().mean()
    chans, size = (3, SIZE) if name == "unet" else (4, SIZE // 2)
    clean = torch.randn(batch, chans, size, size, generator=g)
    noise = torch.randn(clean.shape, generator=g)
    t = torch.randint(0, T, (batch,), generator=g)
    noisy = sched.add_noise(clean, noise, t)
    if name == "unet":
        pred = model(noisy, t).sample
    elif name == "cond":
        enc = torch.randn(batch, 6, 16, generator=g)
        pred = model(noisy, t, encoder_hidden_states=enc).sample
    else:
        labels = torch.randint(0, 10, (batch,), generator=g)
        pred = model(noisy, timestep=t, class_labels=labels).sample
    return F.mse_loss(pred, noise)


ap = argparse.ArgumentParser()
ap.add_argument("--model", default="unet", choices=("unet", "cond", "vae", "dit"))
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=2)
ap.add_argument("--grad-ckpt", action="store_true")
ap.add_argument("--autocast", choices=("bf16",))
ap.add_argument("--sample", type=int, default=0, help="denoising steps after training (unet)")
ap.add_argument("--sample-bug", choices=("grad",), help="the denoising loop under gradients")
a = ap.parse_args()
torch.manual_seed(0)
model = build(a.model)
if a.grad_ckpt:
    model.enable_gradient_checkpointing()
model.train()
sched = DDPMScheduler(num_train_timesteps=T)
g = torch.Generator().manual_seed(1)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(a.steps):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
        loss = loss_of(a.model, model, sched, a.batch, g)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
if a.sample:
    model.eval()
    sched.set_timesteps(a.sample)
    latents = torch.randn(a.batch, 3, SIZE, SIZE, generator=g)
    with torch.enable_grad() if a.sample_bug else torch.no_grad():
        for t in sched.timesteps:
            noise_pred = model(latents, t).sample
            latents = sched.step(noise_pred, t, latents, generator=g).prev_sample
    print(f"sampled {tuple(latents.shape)} mean {latents.mean().item():.4f}")
