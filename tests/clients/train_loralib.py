"""loralib (Microsoft's LoRA), adan-pytorch, discrete-key-value-bottleneck-pytorch and
hyper-connections as their READMEs use them. Seeded, tiny, nothing downloaded.

    python tests/clients/train_loralib.py --steps 3 --model lora --validate
    memledger trace tests/clients/train_loralib.py --steps 2 -o lora.ledger -- --model lora
    memledger compare tests/clients/train_loralib.py -p 'checkpoint:blocks.*' -- --model lora

Models (`--model`):

- `lora`: a small causal transformer built from loralib's layers: `lora.Embedding` for the
  tokens, a fused q/k/v `lora.MergedLinear(dim, 3 * dim, r, enable_lora=[True, False,
  True])` (low-rank updates on q and v only), `lora.Linear` for the attention's output and
  the feed-forward, a plain `nn.Linear` head; `lora.mark_only_lora_as_trainable(model,
  bias='lora_only')` freezes every weight but the LoRA factors and the LoRA layers' biases.
  With `merge_weights=True` (loralib's default) `model.eval()` adds B @ A into each frozen
  weight in place and `model.train()` takes it out again: `--validate` runs a loss in eval
  mode under no_grad between steps, as the README's training loop evaluates.
  `--save` keeps `lora.lora_state_dict(model, bias='lora_only')` each step (cloned, as a
  checkpoint in memory would), `--no-merge` builds the layers with `merge_weights=False`,
  `--rank R` (LoRA rank, 4), `--lora-dropout P`.
- `dkvb`: `DiscreteKeyValueBottleneck` (a VQ codebook of keys over a random projection of
  the encoder's output, a learned value per key gathered by the code indices) with a small
  MLP `encoder` that the bottleneck runs in eval mode under no_grad (a frozen pretrained
  encoder), then a linear head to 10 classes. `--no-encoder` feeds random embeddings
  instead; `--keys ema` (the default: keys moved by the codebook's EMA in training) or
  `--keys frozen` (`ema_update=False`: keys fixed as initialised); `--codebooks C`
  (`num_memory_codebooks`, 2); `--library-params` hands the optimizer the values and head
  only (the encoder left out, as the paper trains).
- `hc`: hyper-connections used directly, as its README does: `get_init_and_expand_reduce_
  stream_functions(4)`, each block's branch (an attention or a feed-forward) wrapped by
  `init_hyper_conn(dim=..., branch=...)`, the residual stream expanded before the stack and
  reduced after. `--mhc` uses its manifold-constrained variant (`mc_get_init_...`,
  Sinkhorn-projected mixing), `--decorate` wraps each branch with `decorate_branch` where the
  blocks were built with no branch.

All: `--optim adan` (the default: Adan, three moment buffers and the previous gradient per
parameter) or `adam`, `--accum N`, `--clip`, `--steps`, `--dim`, `--depth`, `--batch`.
`--validate` (a loss in eval mode under no_grad after each step); `--train-once` calls
`model.train()` once before the loop instead of at each step's start (a loop bug: after
the first validation the model trains in eval mode).
"""

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, lin, qkv) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = qkv(dim, 3 * dim)
        self.out = lin(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)    # (B, h, n, d/h)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class FeedForward(nn.Module):
    def __init__(self, dim: int, lin) -> None:
        super().__init__()
        self.up = lin(dim, 4 * dim)
        self.down = lin(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, lin, qkv) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, lin, qkv)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim, lin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class LoRAGPT(nn.Module):
    def __init__(self, args, num_tokens: int) -> None:
        import loralib as lora
        super().__init__()
        merge = not args.no_merge
        r = args.rank

        def lin(i: int, o: int) -> nn.Module:
            return lora.Linear(i, o, r=r, lora_alpha=2 * r, lora_dropout=args.lora_dropout,
                               merge_weights=merge)

        def qkv(i: int, o: int) -> nn.Module:
            return lora.MergedLinear(i, o, r=r, lora_alpha=2 * r,
                                     lora_dropout=args.lora_dropout,
                                     enable_lora=[True, False, True], merge_weights=merge)

        self.emb = lora.Embedding(num_tokens, args.dim, r=r, lora_alpha=2 * r,
                                  merge_weights=merge)
        self.pos = nn.Parameter(torch.randn(args.seq_len, args.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(args.dim, 2, lin, qkv) for _ in range(args.depth))
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, num_tokens)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class DKVBClassifier(nn.Module):
    def __init__(self, args) -> None:
        from discrete_key_value_bottleneck_pytorch import DiscreteKeyValueBottleneck
        super().__init__()
        encoder = None
        if not args.no_encoder:
            # ends in a norm: the bottleneck `detach_()`es the encoder's output in place,
            # which torch refuses on the view a Linear returns for a 3-D input
            encoder = nn.Sequential(nn.Linear(8, args.dim), nn.GELU(),
                                    nn.Linear(args.dim, args.dim), nn.LayerNorm(args.dim))
        self.bottleneck = DiscreteKeyValueBottleneck(
            encoder=encoder, dim=args.dim, num_memories=32,
            num_memory_codebooks=args.codebooks, dim_memory=args.dim, decay=0.9,
            ema_update=args.keys == "ema")
        self.head = nn.Linear(args.dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        memories = self.bottleneck(x)                      # (B, n, dim_memory)
        return self.head(memories.mean(dim=1))


class HCNet(nn.Module):
    def __init__(self, args, num_tokens: int) -> None:
        import hyper_connections as hc
        super().__init__()
        get = (hc.mc_get_init_and_expand_reduce_stream_functions if args.mhc
               else hc.get_init_and_expand_reduce_stream_functions)
        init_hyper_conn, self.expand_stream, self.reduce_stream = get(4)
        self.emb = nn.Embedding(num_tokens, args.dim)
        self.decorate = args.decorate
        self.layers = nn.ModuleList()
        self.branches = nn.ModuleList()
        for i in range(args.depth):
            for branch in (nn.Sequential(nn.LayerNorm(args.dim),
                                         Attention(args.dim, 2, nn.Linear, nn.Linear)),
                           nn.Sequential(nn.LayerNorm(args.dim),
                                         FeedForward(args.dim, nn.Linear))):
                if self.decorate:
                    self.layers.append(init_hyper_conn(dim=args.dim, layer_index=i))
                    self.branches.append(branch)
                else:
                    self.layers.append(init_hyper_conn(dim=args.dim, branch=branch,
                                                       layer_index=i))
        self.norm = nn.LayerNorm(args.dim)
        self.head = nn.Linear(args.dim, num_tokens)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.expand_stream(self.emb(tokens))
        for i, layer in enumerate(self.layers):
            if self.decorate:
                x = layer.decorate_branch(self.branches[i])(x)
            else:
                x = layer(x)
        return self.head(self.norm(self.reduce_stream(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="lora", choices=["lora", "dkvb", "hc"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--no-merge", action="store_true")
    p.add_argument("--save", action="store_true")
    p.add_argument("--no-encoder", action="store_true")
    p.add_argument("--keys", default="ema", choices=["ema", "frozen"])
    p.add_argument("--codebooks", type=int, default=2)
    p.add_argument("--library-params", action="store_true")
    p.add_argument("--mhc", action="store_true")
    p.add_argument("--decorate", action="store_true")
    p.add_argument("--optim", default="adan", choices=["adan", "adam"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--train-once", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)

    num_tokens = 32
    if args.model == "lora":
        import loralib as lora
        model = LoRAGPT(args, num_tokens)
        lora.mark_only_lora_as_trainable(model, bias="lora_only")

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            logits = model(seq[:, :-1])
            return F.cross_entropy(logits.reshape(-1, num_tokens), seq[:, 1:].reshape(-1))
    elif args.model == "dkvb":
        model = DKVBClassifier(args)

        def loss_of() -> torch.Tensor:
            shape = (args.batch, 8, 8) if not args.no_encoder else (args.batch, 8, args.dim)
            x = torch.randn(shape)
            return F.cross_entropy(model(x), torch.randint(0, 10, (args.batch,)))
    else:
        model = HCNet(args, num_tokens)

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            logits = model(seq[:, :-1])
            return F.cross_entropy(logits.reshape(-1, num_tokens), seq[:, 1:].reshape(-1))

    if args.library_params and args.model == "dkvb":
        params = [model.bottleneck.values, *model.head.parameters()]
    else:
        params = [p for p in model.parameters() if p.requires_grad]
    if args.optim == "adan":
        from adan_pytorch import Adan
        optim = Adan(params, lr=1e-3, betas=(0.02, 0.08, 0.01), weight_decay=0.02)
    else:
        optim = torch.optim.Adam(params, lr=1e-3)

    saved = None
    model.train()
    for step in range(args.steps):
        if not args.train_once:
            model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(params, 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.save and args.model == "lora":
            saved = {k: v.clone() for k, v in lora.lora_state_dict(model, bias="lora_only").items()}
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")
    if saved is not None:
        print("saved", len(saved), "tensors")


if __name__ == "__main__":
    main()
