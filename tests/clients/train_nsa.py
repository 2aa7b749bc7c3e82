"""Native Sparse Attention (native-sparse-attention-pytorch, lucidrains) as its README and
its enwik8 train.py use it: DeepSeek's three branches per attention layer, each gated per
head by a learned sigmoid (`to_strategy_combine`):

1. compressed: keys / values cut into overlapping windows (`ZeroPad2d` + `nn.Unfold`),
   each window compressed by an MLP to one token, attended causally (a mask made per call);
2. selected: the compressed attention's scores averaged per selection block, the top-k
   blocks per query (`topk`), their keys / values gathered (`repeat` to every query, then
   `gather` along the block axis) and attended under a mask built per call from the
   selection and a block-causal diagonal;
3. sliding window: local-attention's `LocalAttention` (exact window, autopad).

Seeded, tiny, nothing downloaded (random bytes stand in for enwik8).

    python tests/clients/train_nsa.py --steps 3
    memledger trace tests/clients/train_nsa.py --steps 2 -o nsa.ledger -- --kv-heads 1
    memledger compare tests/clients/train_nsa.py -p 'checkpoint:layers.*.0' -- --diff-topk

Modes (`--mode`):

- `lm` (default): the library's `Transformer` (`use_sparse_attn=True`, layers of
  `ModuleList([SparseAttention, FeedForward])` the model iterates in parts), next-token
  cross-entropy by `return_loss=True`, Adam, `--accum` micro-batches and clipping as
  train.py. `--validate` (a loss under no_grad in eval mode each step), `--generate N`
  (`Transformer.sample`, with `--cache` its key / value cache: `forward_inference` per
  token). Not offered: `use_sparse_attn=False` (0.2.3's `Transformer` passes `cache=` to
  its dense `Attention`, which takes none) and the flex paths (`use_flex_*`: on CPU
  flex_attention has no backward, "FlexAttention does not support backward on CPU").
- `attn`: one `SparseAttention` on random tokens as the README's usage, summed
  squared output as the loss, AdamW.

Both: `--kv-heads K` (grouped queries), `--no-share` (`query_heads_share_selected_kv=False`:
each query head selects its own blocks), `--diff-topk` (`use_diff_topk`: the selected
scores multiply the gathered keys by a straight-through gate), `--stride S`
(`compress_block_sliding_stride`), `--selected N` (`num_selected_blocks`), `--compress
KIND` (the compression network: `mlp` the default, `grouped` GroupedMLP, `conv`
ConvLinearCompress, `pool` AttentionPool, `single` SingleProjection, `transformer`
CompressTransformer), `--seq-len N` (not a multiple of the selection block: padded),
`--amp` (bf16 autocast).
"""

import argparse
import random

import torch
import torch.nn.functional as F

from native_sparse_attention_pytorch import SparseAttention
from native_sparse_attention_pytorch import compress_networks as nets
from native_sparse_attention_pytorch.transformer import Transformer


def compress_net(kind: str, heads: int, dim_head: int, block: int):
    if kind == "mlp":
        return None                      # the library's own: Linear, ReLU, Linear
    if kind == "grouped":
        return nets.GroupedMLP(dim_head, block, heads)
    if kind == "conv":
        return nets.ConvLinearCompress(heads, dim_head, block)
    if kind == "pool":
        return nets.AttentionPool(dim_head, block)
    if kind == "single":
        return nets.SingleProjection(dim_head, block, heads)
    return nets.CompressTransformer(1, heads * dim_head, heads)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="lm", choices=["lm", "attn"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--window", type=int, default=4)         # sliding_window_size
    p.add_argument("--block", type=int, default=4)          # compress_block_size
    p.add_argument("--stride", type=int, default=4)         # compress_block_sliding_stride
    p.add_argument("--sel-block", type=int, default=4)      # selection_block_size
    p.add_argument("--selected", type=int, default=2)       # num_selected_blocks
    p.add_argument("--compress", default="mlp",
                   choices=["mlp", "grouped", "conv", "pool", "single", "transformer"])
    p.add_argument("--no-share", action="store_true")
    p.add_argument("--diff-topk", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--cache", action="store_true")
    p.add_argument("--flex-eval", action="store_true")
    p.add_argument("--amp", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)

    kv_heads = args.kv_heads or args.heads
    sparse = dict(sliding_window_size=args.window, compress_block_size=args.block,
                  compress_block_sliding_stride=args.stride,
                  selection_block_size=args.sel_block, num_selected_blocks=args.selected,
                  use_diff_topk=args.diff_topk, query_heads_share_selected_kv=not args.no_share,
                  compress_mlp=compress_net(args.compress, kv_heads, args.dim_head, args.block))
    num_tokens = 32
    if args.mode == "lm":
        model = Transformer(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                            dim_head=args.dim_head, heads=args.heads, kv_heads=args.kv_heads,
                            ff_expansion_factor=2., use_sparse_attn=True,
                            use_flex_sliding_window=args.flex_eval,
                            sparse_attn_kwargs=sparse)
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

        def loss_of() -> torch.Tensor:
            data = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            # flex_attention has no backward on CPU: `--flex-eval` trains without it
            return model(data, return_loss=True,
                         disable_flex=args.flex_eval and torch.is_grad_enabled())
    else:
        model = SparseAttention(dim=args.dim, dim_head=args.dim_head, heads=args.heads,
                                kv_heads=args.kv_heads, causal=True, **sparse)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            return model(torch.randn(args.batch, args.seq_len, args.dim)).pow(2).mean()

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")
        if args.generate and args.mode == "lm":
            model.eval()
            prime = torch.randint(0, num_tokens, (1, args.seq_len // 2))
            out = model.sample(prime, args.seq_len // 2 + args.generate,
                               use_cache_kv=args.cache)
            print("sample", out.tolist())


if __name__ == "__main__":
    main()
