"""A tiny GPT trained with GaLore (galore-torch), as its README writes it: the 2-D weights
of the `attn` and `mlp` Linears in a param group with `rank`, `update_proj_gap`, `scale`
and `proj_type`, everything else in a plain group, one `GaLoreAdamW` (or `GaLoreAdafactor`)
over both; or bitsandbytes' own 8-bit optimizers over the whole model. The model: token
and position embeddings, `blocks.*` (LayerNorm, causal attention `attn.qkv` / `attn.proj`,
LayerNorm, `mlp.fc1` / GELU / `mlp.fc2`, residuals), a final LayerNorm and `head`; random
tokens, seeded; nothing downloaded.

    python tests/clients/train_galore.py --steps 3 --opt galore --gap 2
    memledger trace tests/clients/train_galore.py --steps 2 -o galore.ledger -- --gap 1

Flags:
- `--opt`: `galore` (GaLoreAdamW: Adam moments of each projected gradient, [rank, n] or
  [m, rank], and the projection matrix, recomputed by SVD every `update_proj_gap` steps),
  `galore-adafactor` (GaLoreAdafactor, `relative_step=False`), `galore-8bit`
  (GaLoreAdamW8bit: bitsandbytes' 8-bit Adam on the projected gradient; galore-torch 1.0
  calls `torch.cuda.synchronize()` in its step, which a CPU-only torch refuses;
  `--no-cuda-sync` makes that call a no-op),
  `bnb-adamw8bit`, `bnb-lion8bit`, `bnb-adamw` (bitsandbytes' optimizers, full rank: int8
  codes with a 256-entry code map and one fp32 absmax per 256 values, or fp32 state).
- `--width W` (the model width, 32), `--batch B` (8), `--dtype bfloat16` (the model in bf16,
  as GaLore's `torchrun_main.py --dtype bfloat16` trains it; the SVD runs in fp32).
- `--rank R`, `--gap K` (`update_proj_gap`), `--scale S`, `--proj-type std|reverse_std|
  right|left|full`.
- `--layerwise`: GaLore's README "per-layer weight updates": one optimizer per parameter,
  stepped by a `register_post_accumulate_grad_hook` inside backward, which also frees each
  gradient at once.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CTX, WIDTH, HEADS, DEPTH = 64, 16, 32, 4, 2


class Attention(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = MLP(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Embedding(CTX, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(DEPTH))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def param_groups(args, model: nn.Module) -> list[dict]:
    """GaLore's README: the `attn` and `mlp` Linears' weights in the GaLore group."""
    galore_params = []
    for module_name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if not any(key in module_name for key in ("attn", "mlp")):
            continue
        galore_params.append(module.weight)
    ids = [id(p) for p in galore_params]
    regular_params = [p for p in model.parameters() if id(p) not in ids]
    return [{"params": regular_params},
            {"params": galore_params, "rank": args.rank, "update_proj_gap": args.gap,
             "scale": args.scale, "proj_type": args.proj_type}]


def make_optimizer(args, groups):
    import bitsandbytes as bnb
    from galore_torch import GaLoreAdafactor, GaLoreAdamW, GaLoreAdamW8bit

    if args.opt == "galore":
        return GaLoreAdamW(groups, lr=0.01, no_deprecation_warning=True)
    if args.opt == "galore-adafactor":
        return GaLoreAdafactor(groups, lr=0.01, relative_step=False, scale_parameter=False)
    if args.opt == "galore-8bit":
        if args.no_cuda_sync:   # galore-torch 1.0 synchronizes CUDA in every step
            torch.cuda.synchronize = lambda *a, **k: None
        return GaLoreAdamW8bit(groups, lr=0.01, min_8bit_size=1024)
    if args.opt == "bnb-adamw8bit":
        return bnb.optim.AdamW8bit(groups, lr=0.01, min_8bit_size=1024)
    if args.opt == "bnb-lion8bit":
        return bnb.optim.Lion8bit(groups, lr=1e-3, min_8bit_size=1024)
    return bnb.optim.AdamW(groups, lr=0.01)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--opt", default="galore", choices=["galore", "galore-adafactor",
                                                       "galore-8bit", "bnb-adamw8bit",
                                                       "bnb-lion8bit", "bnb-adamw"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--width", type=int, default=WIDTH)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--gap", type=int, default=2, help="update_proj_gap")
    p.add_argument("--scale", type=float, default=0.25)
    p.add_argument("--proj-type", default="std",
                   choices=["std", "reverse_std", "right", "left", "full"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--layerwise", action="store_true")
    p.add_argument("--no-cuda-sync", action="store_true",
                   help="galore-8bit on a CPU-only torch: torch.cuda.synchronize as a no-op")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = GPT(args.width).to(getattr(torch, args.dtype))   # GaLore's torchrun_main.py: bf16
    if args.layerwise:   # GaLore's README: one optimizer per parameter, stepped in backward
        optimizer_dict = {}
        galore = {id(q) for q in param_groups(args, model)[1]["params"]}
        for q in model.parameters():
            group = {"params": [q]}
            if id(q) in galore:
                group.update(rank=args.rank, update_proj_gap=args.gap, scale=args.scale,
                             proj_type=args.proj_type)
            optimizer_dict[q] = make_optimizer(args, [group])

        def optimizer_hook(q):
            if q.grad is None:
                return
            optimizer_dict[q].step()
            optimizer_dict[q].zero_grad()

        for q in model.parameters():
            q.register_post_accumulate_grad_hook(optimizer_hook)
        optimizer = None
    else:
        optimizer = make_optimizer(args, param_groups(args, model))
    for step in range(args.steps):
        idx = torch.randint(0, VOCAB, (args.batch, CTX + 1), generator=gen)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
