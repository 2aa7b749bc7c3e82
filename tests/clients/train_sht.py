"""simple-hierarchical-transformer (lucidrains) as its README trains it: a causal LM whose
token embeddings are compressed into several hierarchies (`hierarchies`: compression
factors, a causal strided `Conv1d` per hierarchy), each hierarchy run through its own
`HierarchicalBlock`s (axial attention over the compressed sequence, full or local windowed,
then a feed-forward, each behind a token shift), the hierarchies merged into the one that
predicts after every layer; the loss is next-token cross-entropy plus the predictive-coding
style next-latent loss (a chunk summarizer and latent dynamics per hierarchy, rolled out)
and a reconstruction loss per compressed hierarchy. Seeded, tiny, nothing downloaded.

    python tests/clients/train_sht.py --steps 3
    memledger trace tests/clients/train_sht.py --steps 2 -o sht.ledger -- --hier 1,2
    memledger compare tests/clients/train_sht.py -p 'checkpoint:layers.*' -- --hier 1,2

Options: `--hier 1,2,4` (compression factors), `--windows 0,4,none` (per hierarchy: a
local attention window, `0` no attention, `none` full attention), `--stride 1,2` (the
hierarchical strides), `--merge-all` (`hierarchy_merge_all`), `--predict-all`
(`predict_use_all_hierarchy`), `--rollouts N` (`num_rollouts`), `--no-detach`
(`detach_summaries=False`), `--no-recon` / `--no-latent` (those loss weights 0),
`--loss-type mse|smooth_l1`, `--flash` (`use_flash_attn`; 0.4.0 hands it to no block, so
nothing changes), `--accum N`, `--amp`
(bf16 autocast), `--clip`, `--generate N` (the model's own `generate` every step),
`--validate` (a loss under no_grad each step).
"""

import argparse

import torch

from simple_hierarchical_transformer import HierarchicalTransformer


def ints(s: str) -> tuple:
    return tuple(int(v) for v in s.split(","))


def windows(s: str) -> tuple:
    return tuple(None if v == "none" else int(v) for v in s.split(","))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--hier", type=ints, default=(1, 2))
    p.add_argument("--windows", type=windows, default=None)
    p.add_argument("--stride", type=ints, default=(1,))
    p.add_argument("--merge-all", action="store_true")
    p.add_argument("--predict-all", action="store_true")
    p.add_argument("--rollouts", type=int, default=1)
    p.add_argument("--no-detach", action="store_true")
    p.add_argument("--no-recon", action="store_true")
    p.add_argument("--no-latent", action="store_true")
    p.add_argument("--loss-type", default="mse_and_cosine_sim")
    p.add_argument("--flash", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--clip", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    stride = args.stride if len(args.stride) > 1 else args.stride[0]
    model = HierarchicalTransformer(
        num_tokens=32, dim=args.dim, depth=args.depth, seq_len=args.seq_len,
        dim_head=8, heads=2, ff_mult=2, hierarchies=args.hier,
        window_sizes=args.windows, hierarchical_stride=stride,
        hierarchy_merge_all=args.merge_all, predict_use_all_hierarchy=args.predict_all,
        num_rollouts=args.rollouts, detach_summaries=not args.no_detach,
        recon_loss_weight=0.0 if args.no_recon else 0.1,
        next_latent_loss_weight=0.0 if args.no_latent else 0.25,
        next_latent_loss_type=args.loss_type, dynamics_hidden_dim=args.dim,
        use_flash_attn=args.flash)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch() -> torch.Tensor:
        return torch.randint(0, 32, (args.batch, args.seq_len + 1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss, _ = model(batch(), return_loss=True)
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {model(batch(), return_loss=True)[0].item():.4f}")
        if args.generate:
            prime = torch.randint(0, 32, (1, 4))
            print("sample", model.generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
