"""reformer-pytorch (lucidrains) as its README and its enwik8 example train it: a
`ReformerLM` wrapped in `TrainingWrapper` (`loss = model(x, return_loss=True)`: shift,
forward through `Autopadder`, cross-entropy), Adam, `clip_grad_norm_(..., 0.5)`, then
`optim.step(); optim.zero_grad()`, with `--accumulate` backward passes per step as the
example's GRADIENT_ACCUMULATE_EVERY.

Modes (each a tiny shape of the library's own documented usage):
  lm       reversible layers (`ReversibleSequence`: a custom autograd Function that runs
           the blocks under no_grad and rebuilds their activations in backward), LSH
           attention (random rotations, sort into buckets, gathers), chunked feed-forward
           (`ff_chunks`), the default fixed positional embedding per layer
  plain    the same model with `reverse_thres` above the length: `IrreversibleBlock`s,
           an ordinary autograd graph (the library's comparison point)
  axial    axial positional embedding, a product-key memory layer (`pkm_layers`), local
           attention heads beside LSH ones, memory key/values, a tied output embedding
  full     `use_full_attn=True`: full shared-QK attention instead of LSH
  encdec   `ReformerEncDec`: an encoder's embeddings handed to a decoder as keys
`--irreversible` gives any mode IrreversibleBlocks, `--layer-dropout` drops layers at
random (a draw from torch's generator each forward), `--dropout` LSH and FF dropout.

Tiny, seeded (LSH draws its rotations from torch's generator each forward), random tokens,
nothing downloaded.

    python tests/clients/train_reformer.py --mode lm --steps 3
    memledger trace tests/clients/train_reformer.py --steps 2 -o rf.ledger -- --mode lm
    memledger predict rf.ledger --policy 'offload:net.net.reformer.layers.blocks.*'
"""

import argparse

import torch

from reformer_pytorch import ReformerEncDec, ReformerLM
from reformer_pytorch.generative_tools import TrainingWrapper


def lm_kwargs(args) -> dict:
    return dict(num_tokens=args.tokens, dim=args.dim, depth=args.depth,
                max_seq_len=args.seq, heads=2, dim_head=args.dim // 2,
                bucket_size=args.bucket, n_hashes=2, ff_chunks=args.ff_chunks, causal=True,
                layer_dropout=args.layer_dropout, lsh_dropout=args.dropout,
                ff_dropout=args.dropout)


def build(args):
    kw = lm_kwargs(args)
    if args.mode == "encdec":
        model = ReformerEncDec(dim=args.dim, enc_num_tokens=args.tokens, enc_depth=args.depth,
                               enc_max_seq_len=args.seq, enc_bucket_size=args.bucket,
                               enc_heads=2, enc_dim_head=args.dim // 2, enc_n_hashes=2,
                               enc_ff_chunks=args.ff_chunks,
                               dec_num_tokens=args.tokens, dec_depth=args.depth,
                               dec_max_seq_len=args.seq, dec_bucket_size=args.bucket,
                               dec_heads=2, dec_dim_head=args.dim // 2, dec_n_hashes=2,
                               dec_ff_chunks=args.ff_chunks,
                               **({"enc_reverse_thres": 10 * args.seq,
                                   "dec_reverse_thres": 10 * args.seq}
                                  if args.irreversible else {}))
        return model
    if args.mode == "plain" or args.irreversible:
        kw["reverse_thres"] = 10 * args.seq        # IrreversibleBlock below this length
    if args.mode == "axial":
        # Autopadder pads the tokens with the memory key/values to whole bucket pairs
        kw.update(axial_position_emb=True, axial_position_shape=(2 * args.seq // args.bucket,
                                                                  args.bucket),
                  pkm_layers=(args.depth,), pkm_num_keys=32, n_local_attn_heads=1,
                  num_mem_kv=2 * args.bucket, weight_tie_embedding=True)
    elif args.mode == "full":
        kw["use_full_attn"] = True
    return TrainingWrapper(ReformerLM(**kw))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lm", "plain", "axial", "full", "encdec"], default="lm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64, help="tokens per sequence (x2 buckets)")
    ap.add_argument("--bucket", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--ff-chunks", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--layer-dropout", type=float, default=0.0)
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--irreversible", action="store_true",
                    help="any mode with IrreversibleBlocks (`plain` is `lm` so)")
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
                loss = model(x[:, :-1], x, return_loss=True)
            else:
                loss = model(x, return_loss=True)
            loss.backward()
        print(f"training loss: {loss.item():.4f}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()


if __name__ == "__main__":
    main()
