"""Three of lucidrains' small language models as their READMEs build them, seeded, tiny,
nothing downloaded:

    python tests/clients/train_tranception.py --steps 3 --model tranception
    memledger trace tests/clients/train_tranception.py --steps 2 -o t.ledger -- --model rela
    memledger compare tests/clients/train_tranception.py -p 'offload:layers.*.*' -- --depth 1

Models (`--model`):

- `tranception` (tranception-pytorch): a causal protein LM over 21 amino-acid tokens,
  blocks of an attention whose queries, keys and values are grouped by head, each group
  through a causal depthwise `Conv1d` of its own kernel size (none, 3, 5, 7), with a
  learned ALiBi bias per group, then a ReLU-squared feed-forward. Each
  `LearnedAlibiPosBias` caches its bias (distances times its learned slopes, so a tensor
  with a graph) as a buffer in its first forward and returns that in later ones: a second
  step's backward then runs into the first step's freed graph ("Trying to backward through
  the graph a second time"). The loop therefore drops the cache before each forward (the
  bias is remade from the slopes as they are now); `--keep-bias` does not, to show the
  library's failure.
- `tokenshift` (token-shift-gpt): `TokenShiftGPT` (feed-forwards whose gate is shifted
  along the sequence by cumulative sums over 1, 2, 4, ... tokens) through the library's
  `AutoregressiveWrapper`.
- `rela` (rela-transformer): `ReLATransformer` (attention by `relu` of the scores, values
  normed by a gated RMS norm) through its `AutoregressiveWrapper` (which ignores token 0).
  `--mem-kv N` (`num_memory_kv`: N learned key/value rows a head; 0, the library's
  default, still makes (0, inner) parameters), `--relu-squared`, `--no-ff`, `--mask`
  (a key padding mask: the last two tokens of every row masked).

All: Adam (`--sgd`: SGD), `--accum N`, `--clip` (clip_grad_norm_ 0.5), `--amp` (CPU bf16
autocast), `--validate` (a loss under no_grad in eval mode each step), `--generate N`
(tokenshift and rela: the wrapper's sampling, N tokens, each step).
"""

import argparse

import torch
import torch.nn.functional as F


def build(args):
    if args.model == "tranception":
        from tranception_pytorch import Tranception

        # the README's protein LM, tiny: 4 heads so the 4 conv groups get one each
        net = Tranception(dim=args.dim, depth=args.depth, heads=4, dim_head=4,
                          ds_conv_kernel_sizes=(0, 3, 5, 7), causal=True)
        num_tokens = 21

        def loss_of(ids):
            if not args.keep_bias:
                for m in net.modules():
                    if type(m).__name__ == "LearnedAlibiPosBias":
                        m.bias = None  # the cache holds last step's graph (see docstring)
            logits = net(ids[:, :-1])                                  # (B, N, 21)
            return F.cross_entropy(logits.transpose(1, 2), ids[:, 1:])

        return net, num_tokens, loss_of, None
    if args.model == "tokenshift":
        from token_shift_gpt import TokenShiftGPT
        from token_shift_gpt.autoregressive_wrapper import AutoregressiveWrapper

        net = TokenShiftGPT(num_tokens=32, dim=args.dim, max_seq_len=args.seq_len,
                            depth=args.depth, ff_mult=4)
        model = AutoregressiveWrapper(net)
        return model, 32, model, model.generate
    from rela_transformer import ReLATransformer
    from rela_transformer.autoregressive_wrapper import AutoregressiveWrapper

    net = ReLATransformer(num_tokens=32, dim=args.dim, depth=args.depth,
                          max_seq_len=args.seq_len, heads=2, dim_head=8,
                          num_memory_kv=args.mem_kv, no_ff=args.no_ff,
                          relu_squared=args.relu_squared)
    model = AutoregressiveWrapper(net)
    mask = None
    if args.mask:
        mask = torch.ones(args.batch, args.seq_len + args.mem_kv, dtype=torch.bool)
        mask[:, -2:] = False                              # keys: memory rows, then tokens

    def loss_of(ids):
        return model(ids, mask=mask) if mask is not None else model(ids)

    def generate(prime, n):
        return model.generate(prime, n)

    return model, 32, loss_of, generate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="tranception",
                   choices=["tranception", "tokenshift", "rela"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--keep-bias", action="store_true")
    p.add_argument("--mem-kv", type=int, default=0)
    p.add_argument("--relu-squared", action="store_true")
    p.add_argument("--no-ff", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)

    model, num_tokens, loss_of, generate = build(args)
    optim = (torch.optim.SGD(model.parameters(), lr=1e-2) if args.sgd
             else torch.optim.Adam(model.parameters(), lr=1e-3))

    def batch():
        return torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))  # (B, N+1)

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of(batch())
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of(batch()).item():.4f}")
        if args.generate and generate is not None:
            prime = torch.randint(1, num_tokens, (1, args.seq_len // 2))
            print("sample", generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
