"""PonderTransformer (ponder-transformer, lucidrains) as its README writes it: one `Block`
(attention + feed-forward + a halting head) run over and over, PonderNet style:
in training all `train_max_steps` repeats (13 for the default lambda_p 0.2, epsilon 0.05,
fewer with `--lambda-p` larger), each repeat's hiddens stacked and decoded, the
cross-entropy weighted by the geometric halting distribution plus a KL "ponder loss"
beside it; in eval mode the block repeats until a sampled halt (`--validate`). Seeded,
tiny, nothing downloaded.

    python tests/clients/train_ponder.py --steps 3
    memledger compare tests/clients/train_ponder.py -p 'checkpoint:block' -- --lambda-p 0.5

`--no-causal` (the halting input a mean over the sequence, not a running mean),
`--lambda-p P` (the prior; fewer repeats), `--accum N`, `--validate`, `--clip` (clip_grad_norm_).
"""

import argparse

import torch

from ponder_transformer import PonderTransformer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--lambda-p", type=float, default=0.2)
    p.add_argument("--no-causal", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--clip", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = PonderTransformer(num_tokens=32, dim=args.dim, max_seq_len=args.seq_len,
                              causal=not args.no_causal, dim_head=8, heads=args.heads,
                              ponder_lambda_p=args.lambda_p)
    optim = torch.optim.Adam(model.parameters(), lr=3e-4)

    def batch():
        seq = torch.randint(1, 32, (args.batch, args.seq_len + 1))
        return seq[:, :-1], seq[:, 1:]

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            x, y = batch()
            loss = model(x, labels=y)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                logits, layers = model(batch()[0])
                print(f"eval halted at {layers.tolist()}")


if __name__ == "__main__":
    main()
