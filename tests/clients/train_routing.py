"""routing-transformer (lucidrains) as its README and its enwik8 example train it: a
`RoutingTransformerLM` wrapped in `AutoregressiveWrapper` (`loss = model(x,
return_loss=True)`: shift, forward through `Autopadder`, cross-entropy plus the k-means
commitment loss the model returns beside its logits), Adam, `clip_grad_norm_(..., 0.5)`,
then `optim.step(); optim.zero_grad()`, with `--accumulate` backward passes per step as the
example's GRADIENT_ACCUMULATE_EVERY.

The k-means routing: each attention layer's `Kmeans` initialises its means from the first
batch (no_grad, a buffer copied in place), routes queries to clusters by the means (no
grad), adds a commitment loss (MSE to the routed means), and in training keeps the batch's
new means in a module attribute (`self.new_means`) until they are folded into the
`means` buffer: by a module backward hook the LM registers (the default,
`_register_kmeans_update=True`), or with `--manual` by `model.update_kmeans()` after
`loss.backward()`, as the README says to when the hook is turned off.

Modes (each a tiny shape of the library's documented usage):
  lm       causal, shared QK (the default for causal), rotary positions, chunked FF
  rev      the same with `reversible=True` (ReversibleSequence: a custom autograd
           Function that runs the blocks under no_grad and rebuilds them in backward)
  local    local attention heads beside the routed ones (local-attention), Autopadder
           padding to the local window, memory key/values, a tied output embedding
  mix      a product-key memory layer and a mixture-of-experts layer (their aux loss)
  encdec   `RoutingTransformerEncDec`: an encoder's embeddings handed to a decoder as
           context (routed cross-attention, not causal, own QK)

Tiny, seeded (the k-means init draws a permutation from torch's generator), random tokens,
nothing downloaded.

    python tests/clients/train_routing.py --mode lm --steps 3
    memledger trace tests/clients/train_routing.py --steps 2 -o rt.ledger -- --mode lm
    memledger predict rt.ledger --policy 'checkpoint:net.net.routing_transformer.layers.layers.*'
"""

import argparse

import torch

from routing_transformer import AutoregressiveWrapper, RoutingTransformerEncDec, \
    RoutingTransformerLM


def lm_kwargs(args) -> dict:
    return dict(num_tokens=args.tokens, dim=args.dim, depth=args.depth,
                max_seq_len=args.seq, heads=2, dim_head=args.dim // 2,
                window_size=args.window, causal=True, ff_chunks=args.ff_chunks,
                attn_dropout=args.dropout, ff_dropout=args.dropout,
                _register_kmeans_update=not args.manual)


def build(args):
    if args.mode == "encdec":
        return RoutingTransformerEncDec(
            dim=args.dim, enc_num_tokens=args.tokens, enc_depth=args.depth,
            enc_heads=2, enc_dim_head=args.dim // 2, enc_max_seq_len=args.seq,
            enc_window_size=args.window, dec_num_tokens=args.tokens, dec_depth=args.depth,
            dec_heads=2, dec_dim_head=args.dim // 2, dec_max_seq_len=args.seq,
            dec_window_size=args.window)
    kw = lm_kwargs(args)
    if args.mode == "rev":
        kw["reversible"] = True
    elif args.mode == "local":
        kw.update(n_local_attn_heads=1, local_attn_window_size=args.window,
                  num_mem_kv=2, tie_embedding=True)
    elif args.mode == "mix":
        kw.update(pkm_layers=(1,), pkm_num_keys=32, moe_layers=(args.depth,),
                  moe_num_experts=2)
    return AutoregressiveWrapper(RoutingTransformerLM(**kw))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lm", "rev", "local", "mix", "encdec"], default="lm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--ff-chunks", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--manual", action="store_true",
                    help="no k-means backward hook: `model.update_kmeans()` after backward")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = build(args)
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    for i in range(args.steps):
        model.train()
        for _ in range(args.accumulate):
            # the example samples a window of enwik8 bytes; random tokens stand in
            x = torch.randint(0, args.tokens, (args.batch, args.seq + 1))
            if args.mode == "encdec":
                loss, aux = model(x[:, :-1], x, return_loss=True)
                loss = loss + aux
            else:
                loss = model(x, return_loss=True)
            loss.backward()
            if args.manual:
                model.update_kmeans()
        print(f"training loss: {loss.item():.4f}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()


if __name__ == "__main__":
    main()
