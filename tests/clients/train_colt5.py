"""CoLT5-attention (lucidrains' conditional computation transformer) trained as its README
uses it: every token goes through a light branch (local attention, a narrow feedforward), a
`CoordinateDescentRouter` picks the few tokens a heavy branch sees (a differentiable top-k
by 20 iterations of coordinate descent, scores made 1 by straight-through), and the heavy
outputs are scattered back in place (`src[batch_range, indices] = routed_tokens`).

Modes:
  block   an encoder of `ConditionalRoutedTransformerBlock`s (routed attention with a
          local-attention light branch, routed feedforward) over embedded tokens with a
          padding mask (`block(x, mask=mask)`), token classification (cross-entropy on the
          unpadded tokens), AdamW
  ar      a causal language model: `ConditionalRoutedAutoregressiveAttention` (windowed
          routing, the light branch a causal LocalMHA, `--rotary` for the heavy branch's
          rotary embedding) then `ConditionalRoutedFeedForward`, next-token cross-entropy,
          AdamW, `clip_grad_norm_`
  vit     `ConditionalRoutedViT` on random images (routed image attention, routed
          feedforward), cross-entropy, Adam
  ff      one `ConditionalRoutedFeedForward` on random tokens, regression (MSE), Adam
  conv    a small conv net with a `ConditionalRoutedImageAttention(channel_first=True)` on
          its feature map between convolutions (BatchNorm, SiLU), cross-entropy, SGD with
          momentum
  local   local-attention's `LocalTransformer` (CoLT5's light branch library: windowed causal
          attention, 4 hyper-connection residual streams) trained by `model(x,
          return_loss=True)`, Adam; `--dynamic-pos-bias`, `--xpos`; `--generate N` samples
          N tokens (`model.generate`, a kv cache, under no_grad) after each step;
          `--global-routed`: a CoLT5 `ConditionalRoutedAttention` (no light branch) as its
          `global_attn_layer`, before each local layer

Options (`--help`): `--bf16` (the weights in bf16: the library's scatter-back refuses CPU
autocast, its zeros taking the input's fp32 and the heavy branch's output bf16),
`--routed-kv N`, `--mult-scores`, `--cosine`, `--flash` (SDPA), `--random-route`, `--accum N`,
`--vary-heavy`, `--ckpt reentrant|nonreentrant` (the script checkpoints each block itself).
The library's image attention fails where a window holds no more tokens than the heavy
count (its router returns no indices and `route_back` indexes with None): the ViT's window
here is 4 patches a side, 16 tokens for 4 heavy ones. Its `ConditionalRoutedCrossAttention`
names an undefined `should_route_queries` in 0.11.2 and is not used.

Tiny, seeded, random data, nothing downloaded.

    python tests/clients/train_colt5.py --mode ar --steps 3
    memledger trace tests/clients/train_colt5.py --steps 2 -o colt5.ledger -- --mode block
    memledger predict colt5.ledger --policy 'checkpoint:blocks.*' --policy 'offload:blocks.0'
"""

import argparse
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from colt5_attention import ConditionalRoutedAttention, \
    ConditionalRoutedAutoregressiveAttention, \
    ConditionalRoutedFeedForward, ConditionalRoutedImageAttention, \
    ConditionalRoutedTransformerBlock, ConditionalRoutedViT


def router_kwargs(args):
    kw = dict(n_iters=args.iters)
    if args.cosine:
        kw.update(cosine_sim_routing=True, cosine_sim_scale=8)
    return kw


class Encoder(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.dim)
        self.blocks = nn.ModuleList([ConditionalRoutedTransformerBlock(
            args.dim, light_dim_head=args.dim_head, light_heads=args.heads,
            light_window_size=args.window, heavy_dim_head=args.dim_head, heavy_heads=args.heads,
            light_ff_mult=0.5, heavy_ff_mult=4, num_heavy_ff_tokens=args.heavy,
            num_heavy_attn_tokens_q=args.heavy, num_heavy_attn_tokens_kv=args.heavy,
            router_kwargs=router_kwargs(args), num_routed_kv=args.routed_kv,
            multiply_keys_by_score=args.mult_scores, multiply_queries_by_score=args.mult_scores,
            use_flash_attn=args.flash) for _ in range(args.depth)])
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab)
        self.ckpt = args.ckpt

    def forward(self, tokens, mask, heavy=None):
        x = self.emb(tokens)
        for block in self.blocks:
            kw = dict(mask=mask, num_heavy_attn_tokens_q=heavy, num_heavy_attn_tokens_kv=heavy,
                      num_heavy_ff_tokens=heavy)
            if self.ckpt != "none" and self.training:
                x = checkpoint(partial(block, **kw), x, use_reentrant=self.ckpt == "reentrant")
            else:
                x = block(x, **kw)
        return self.head(self.norm(x))


class ConvNet(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, args.dim, 3, padding=1), nn.BatchNorm2d(args.dim),
                                  nn.SiLU())
        self.attn = ConditionalRoutedImageAttention(
            args.dim, num_heavy_tokens_q=args.heavy, num_heavy_tokens_kv=args.heavy,
            light_dim_head=args.dim_head, light_heads=args.heads, light_window_size=4,
            heavy_dim_head=args.dim_head, heavy_heads=args.heads,
            router_kwargs=router_kwargs(args), channel_first=True, use_flash_attn=args.flash)
        self.down = nn.Sequential(nn.Conv2d(args.dim, args.dim, 3, stride=2, padding=1),
                                  nn.BatchNorm2d(args.dim), nn.SiLU())
        self.head = nn.Linear(args.dim, 5)

    def forward(self, img):
        x = self.stem(img)
        x = self.attn(x) + x
        return self.head(self.down(x).mean(dim=(2, 3)))


class ARBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attn = ConditionalRoutedAutoregressiveAttention(
            args.dim, num_heavy_tokens_q=args.heavy, num_heavy_tokens_kv=args.heavy,
            light_dim_head=args.dim_head, light_heads=args.heads, light_window_size=args.window,
            heavy_window_size=args.window, heavy_dim_head=args.dim_head, heavy_heads=args.heads,
            router_kwargs=router_kwargs(args), rotary_emb=args.rotary, num_routed_kv=args.routed_kv,
            multiply_keys_by_score=args.mult_scores, multiply_queries_by_score=args.mult_scores,
            use_flash_attn=args.flash)
        self.ff = ConditionalRoutedFeedForward(args.dim, num_heavy_tokens=args.heavy,
                                               router_kwargs=router_kwargs(args))
        self.random_route = args.random_route

    def forward(self, x):
        x = self.attn(x, random_route=self.random_route) + x
        return self.ff(x) + x


class LM(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.dim)
        self.blocks = nn.ModuleList([ARBlock(args) for _ in range(args.depth)])
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="block", choices=["block", "ar", "vit", "ff", "local",
                                                       "conv"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--dim-head", type=int, default=8)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--heavy", type=int, default=4, help="tokens each router sends the heavy branch")
    ap.add_argument("--iters", type=int, default=20, help="coordinate-descent iterations")
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--rotary", action="store_true", help="(ar) rotary embedding, heavy branch")
    ap.add_argument("--pad", type=int, default=3, help="(block) padded tokens, second sequence")
    ap.add_argument("--routed-kv", type=int, default=1, help="key/value routes (num_routed_kv)")
    ap.add_argument("--mult-scores", action="store_true",
                    help="multiply_keys_by_score and multiply_queries_by_score")
    ap.add_argument("--cosine", action="store_true", help="cosine_sim_routing")
    ap.add_argument("--flash", action="store_true", help="use_flash_attn (SDPA)")
    ap.add_argument("--random-route", action="store_true", help="(ar) random routing")
    ap.add_argument("--bf16", action="store_true",
                    help="(block, ar) the model in bf16 (the library's scatter-back refuses "
                    "autocast: its zeros take the input's dtype, the heavy branch's bf16)")
    ap.add_argument("--accum", type=int, default=1, help="(block, ar) micro-batches a step")
    ap.add_argument("--vary-heavy", action="store_true",
                    help="(block) the heavy token count changes per step (num_heavy_*_tokens=)")
    ap.add_argument("--ckpt", default="none", choices=["none", "reentrant", "nonreentrant"],
                    help="(block) the encoder checkpoints each block itself")
    ap.add_argument("--dynamic-pos-bias", action="store_true", help="(local)")
    ap.add_argument("--xpos", action="store_true", help="(local) use_xpos")
    ap.add_argument("--global-routed", action="store_true",
                    help="(local) a CoLT5 routed attention (no light branch) before each layer "
                    "(global_attn_layer)")
    ap.add_argument("--generate", type=int, default=0, help="(local) tokens sampled a step")
    args = ap.parse_args()
    torch.manual_seed(0)

    if args.mode == "block":
        model = Encoder(args).to(torch.bfloat16 if args.bf16 else torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        mask = torch.ones(args.batch, args.seq, dtype=torch.bool)
        mask[-1, args.seq - args.pad:] = False
        for step in range(args.steps):
            opt.zero_grad(set_to_none=True)
            for _ in range(args.accum):
                tokens = torch.randint(0, args.vocab, (args.batch, args.seq))
                labels = tokens.roll(1, dims=1).masked_fill(~mask, -100)
                # --vary-heavy: more heavy tokens each step, as a curriculum would
                logits = model(tokens, mask, heavy=args.heavy + step if args.vary_heavy else None)
                loss = F.cross_entropy(logits.reshape(-1, args.vocab).float(),
                                       labels.reshape(-1), ignore_index=-100)
                (loss / args.accum).backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
    elif args.mode == "ar":
        model = LM(args).to(torch.bfloat16 if args.bf16 else torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        data = torch.randint(0, args.vocab, (32, args.seq + 1))
        for step in range(args.steps):
            opt.zero_grad(set_to_none=True)
            for _ in range(args.accum):
                batch = data[torch.randint(0, len(data), (args.batch,))]
                x, y = batch[:, :-1], batch[:, 1:]
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, args.vocab).float(), y.reshape(-1))
                (loss / args.accum).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
    elif args.mode == "vit":
        model = ConditionalRoutedViT(
            image_size=16, patch_size=4, num_classes=5, dim=args.dim, depth=args.depth,
            attn_num_heavy_tokens_q=args.heavy, attn_num_heavy_tokens_kv=args.heavy,
            attn_heavy_dim_head=args.dim_head, attn_heavy_heads=args.heads,
            attn_light_dim_head=args.dim_head, attn_light_heads=args.heads,
            attn_light_window_size=4, ff_num_heavy_tokens=args.heavy, ff_heavy_mult=4,
            ff_light_mult=0.5, router_kwargs=dict(n_iters=args.iters))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(args.steps):
            img = torch.randn(args.batch, 3, 16, 16)
            labels = torch.randint(0, 5, (args.batch,))
            loss = F.cross_entropy(model(img), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
    elif args.mode == "conv":
        model = ConvNet(args)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        for step in range(args.steps):
            img = torch.randn(args.batch, 3, 8, 8)
            labels = torch.randint(0, 5, (args.batch,))
            loss = F.cross_entropy(model(img), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
    elif args.mode == "local":
        from local_attention import LocalTransformer

        model = LocalTransformer(num_tokens=args.vocab, max_seq_len=args.seq + 1, dim=args.dim,
                                 depth=args.depth, causal=True, local_attn_window_size=args.window,
                                 dim_head=args.dim_head, heads=args.heads,
                                 use_dynamic_pos_bias=args.dynamic_pos_bias, use_xpos=args.xpos,
                                 xpos_scale_base=args.seq if args.xpos else None,
                                 global_attn_layer=ConditionalRoutedAttention(
                                     args.dim, num_heavy_tokens_q=args.heavy,
                                     num_heavy_tokens_kv=args.heavy, has_light_attn=False,
                                     heavy_dim_head=args.dim_head, heavy_heads=args.heads,
                                     router_kwargs=router_kwargs(args))
                                 if args.global_routed else None)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        data = torch.randint(0, args.vocab, (32, args.seq + 1))
        for step in range(args.steps):
            batch = data[torch.randint(0, len(data), (args.batch,))]
            loss = model(batch, return_loss=True)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")
            if args.generate:
                sample = model.generate(batch[:1, :4], args.generate)
                print("sample", sample.tolist())
    else:
        model = ConditionalRoutedFeedForward(args.dim, num_heavy_tokens=args.heavy,
                                             router_kwargs=dict(n_iters=args.iters))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        target = nn.Linear(args.dim, args.dim)
        target.requires_grad_(False)
        for step in range(args.steps):
            x = torch.randn(args.batch, args.seq, args.dim)
            loss = F.mse_loss(model(x), target(x))
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
