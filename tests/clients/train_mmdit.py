"""mmdit (tests/clients/train_mmdit.py): lucidrains' MMDiT, the joint-attention block of
Stable Diffusion 3 (text and image tokens, each with weights of its own, attend together
in one `JointAttention`; adaptive layer norms from a time conditioning; hyper-connection
residual streams that expand the batch), trained as a rectified-flow denoiser of random
"image" tokens given random "text" tokens. Seeded (torch, and Python's `random`:
hyper-connections picks each layer's initial residual stream by `randrange`), tiny,
nothing downloaded.

    python tests/clients/train_mmdit.py --steps 3 --model mmdit --cond --streams 2
    memledger trace tests/clients/train_mmdit.py --steps 2 -o m.ledger -- --model general
    memledger compare tests/clients/train_mmdit.py -p 'checkpoint:@JointAttention' -- --cond

Models (`--model`):

- `mmdit`: `mmdit.MMDiT` as its README builds it (two modalities, text and image;
  `--registers N` image register tokens, the last block's text feedforward skipped as the
  library does by default).
- `general`: `mmdit.mmdit_generalized_pytorch.MMDiT` with `--modalities 2` or `3` (text,
  image, audio; manifold-constrained hyper-connections where `--streams` > 1).
- `joint`: one `mmdit.JointAttention` over `--modalities` inputs with qk-rmsnorm, its
  outputs summed into a loss (the attention alone, as the README's first example).
- `adaptive`: `mmdit.adaptive_attention.AdaptiveAttention` (gigagan-style adaptive
  weights: 3 qkv / out weights mixed per token by softmax gates) over the text tokens
  (projected to the image width) followed by the image tokens.
- `hc`: hyper-connections on a plain pre-norm transformer (its
  `get_init_and_expand_reduce_stream_functions` idiom), `--streams` residual streams,
  `--fracs N` frac-connections, `--stream-embed` (a learned embedding per stream).

`--cond` (a time conditioning from a small MLP of the flow time), `--streams N` (residual
streams; 1 plain residuals), `--mask` (a random key-padding mask on the text tokens),
`--depth`, `--batch`, `--optim adam|adamw|sgd`, `--accum N` (gradient accumulation),
`--clip` (`clip_grad_norm_` to 1.0), `--amp` (the forward under bf16 autocast). `--bug
detach-time`: the time conditioning handed to the model detached from its MLP (a loop
bug: the MLP's parameters get no gradient). The time MLP and the network are one
`Denoiser` module, as DiT keeps its `t_embedder`: called first on its own, the MLP would
be the model policies act on (Note [The model], memledger/trace/roots.py).
"""

import argparse
import random

import torch
import torch.nn as nn

from hyper_connections import get_init_and_expand_reduce_stream_functions
from mmdit import JointAttention, MMDiT
from mmdit.adaptive_attention import AdaptiveAttention
from mmdit.mmdit_generalized_pytorch import MMDiT as GeneralMMDiT

DIMS = (16, 24, 8)   # text, image, audio feature widths
LENS = (6, 10, 4)    # tokens per modality


class TimeEmbed(nn.Module):
    """The flow time t in [0, 1] -> a conditioning vector (a sinusoid and an MLP)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.stack((torch.sin(t * 3.14), torch.cos(t * 3.14)), dim=-1))


class HCBlock(nn.Module):
    """A pre-norm attention + MLP block whose residuals are hyper-connections."""

    def __init__(self, dim: int, init_hc) -> None:
        super().__init__()
        self.attn = init_hc(branch=nn.Sequential(nn.LayerNorm(dim), SelfAttention(dim)))
        self.ff = init_hc(branch=nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim),
                                               nn.GELU(), nn.Linear(4 * dim, dim)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ff(self.attn(x))


class SelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


class HCTransformer(nn.Module):
    def __init__(self, dim: int, depth: int, streams: int, fracs: int = 1,
                 stream_embed: bool = False) -> None:
        super().__init__()
        init_hc, self.expand, self.reduce = get_init_and_expand_reduce_stream_functions(
            streams, num_fracs=fracs, dim=dim, add_stream_embed=stream_embed,
            disable=streams == 1 and fracs == 1)
        self.blocks = nn.ModuleList(HCBlock(dim, init_hc) for _ in range(depth))
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.expand(x)
        for b in self.blocks:
            x = b(x)
        return self.out(self.reduce(x))


class Denoiser(nn.Module):
    """The network and its time embedding in one module (as DiT keeps its `t_embedder`):
    tokens of each modality, their masks and the flow time -> the image tokens' velocity."""

    def __init__(self, net: nn.Module, kind: str, time_embed: nn.Module | None,
                 detach_time: bool) -> None:
        super().__init__()
        self.net, self.kind, self.time_embed = net, kind, time_embed
        self.detach_time = detach_time
        if kind == "adaptive":
            self.text_in = nn.Linear(DIMS[0], DIMS[1])

    def forward(self, tokens: list, masks: list, t: torch.Tensor) -> torch.Tensor:
        cond = self.time_embed(t) if self.time_embed is not None else None
        if cond is not None and self.detach_time:
            cond = cond.detach()   # the bug: the time MLP never learns
        if self.kind == "mmdit":
            return self.net(text_tokens=tokens[0], image_tokens=tokens[1], text_mask=masks[0],
                            time_cond=cond)[1]
        if self.kind == "general":
            return self.net(modality_tokens=tokens, modality_masks=masks, time_cond=cond)[1]
        if self.kind == "joint":
            outs = self.net(inputs=tuple(tokens), masks=tuple(masks))
            return outs[1] + sum(o.mean() for o in outs[::2])
        if self.kind == "adaptive":
            # the image tokens after the text tokens (projected to the image width), one
            # sequence; the library's gated output keeps its heads axis: summed here
            x = torch.cat((self.text_in(tokens[0]), tokens[1]), dim=1)
            return self.net(x).sum(1)[:, tokens[0].shape[1]:]
        return self.net(tokens[1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="mmdit",
                   choices=["mmdit", "general", "joint", "adaptive", "hc"])
    p.add_argument("--modalities", type=int, default=2, choices=[2, 3])
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--registers", type=int, default=0)
    p.add_argument("--fracs", type=int, default=1)
    p.add_argument("--stream-embed", action="store_true")
    p.add_argument("--cond", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--bug", default="none", choices=["none", "detach-time"])
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)

    n_mod = 2 if args.model == "mmdit" else args.modalities
    dims, lens = DIMS[:n_mod], LENS[:n_mod]
    dim_cond = 12 if args.cond else None
    if args.model == "mmdit":
        model = MMDiT(depth=args.depth, dim_text=dims[0], dim_image=dims[1], dim_cond=dim_cond,
                      dim_head=8, heads=2, num_residual_streams=args.streams,
                      num_register_tokens=args.registers)
    elif args.model == "general":
        model = GeneralMMDiT(depth=args.depth, dim_modalities=dims, dim_cond=dim_cond,
                             dim_head=8, heads=2, num_residual_streams=args.streams)
    elif args.model == "joint":
        model = JointAttention(dim_inputs=dims, dim_head=8, heads=2, qk_rmsnorm=True)
    elif args.model == "adaptive":
        model = AdaptiveAttention(dim=dims[1], dim_head=8, heads=2, num_adaptive_weights=3)
    else:
        model = HCTransformer(dims[1], args.depth, args.streams, args.fracs, args.stream_embed)
    model = Denoiser(model, args.model, TimeEmbed(dim_cond) if dim_cond else None,
                     args.bug == "detach-time")
    if args.optim == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        optim = (torch.optim.AdamW if args.optim == "adamw" else torch.optim.Adam)(
            model.parameters(), lr=1e-3)

    def flow_loss() -> torch.Tensor:
        """Rectified flow on the image tokens: x_t = (1 - t) noise + t data, the model's
        image output regressed on the velocity data - noise."""
        b = args.batch
        tokens = [torch.randn(b, n, d) for n, d in zip(lens, dims)]
        data, noise = tokens[1], torch.randn(b, lens[1], dims[1])
        t = torch.rand(b)
        tokens[1] = (1 - t[:, None, None]) * noise + t[:, None, None] * data
        masks = [None] * n_mod
        if args.mask:
            masks[0] = torch.rand(b, lens[0]) > 0.3
            masks[0][:, 0] = True
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            pred = model(tokens, masks, t)
        return ((pred.float() - (data - noise)) ** 2).mean()

    for step in range(args.steps):
        for _ in range(args.accum):
            loss = flow_loss()
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
