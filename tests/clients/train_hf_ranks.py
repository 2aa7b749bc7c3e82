"""A transformers Llama built from config (no download), trained on several ranks as a user
would: DistributedDataParallel, or FSDP2 with one `fully_shard` per decoder layer + the root.

    torchrun --nproc_per_node 2 tests/clients/train_hf_ranks.py --wrap fsdp --steps 3
    memledger trace --nproc 2 tests/clients/train_hf_ranks.py --steps 2 -o l.ledger -- --wrap ddp
    memledger trace --fake --world 8 tests/clients/train_hf_ranks.py -o s.ledger -- --wrap fsdp
    memledger doctor --nproc 2 tests/clients/train_hf_ranks.py -- --wrap ddp --accum 2 \\
        --bug no-sync-always

Gradient accumulation (`--accum K`) skips the gradient sync but on the last micro-batch:
DDP's `no_sync()`, FSDP2's `set_requires_gradient_sync(False)`. `--bug` plants a mistake a
user makes: `no-sync-always` (DDP: every micro-batch under `no_sync()`, so gradients are
never all-reduced and the ranks' replicas drift apart), `loss-sum` (the accumulated loss
not divided by K), `grad-sum` (`--wrap manual`: the gradients all-reduced by hand and not
divided by the world size). Tokens come from a generator seeded by rank (different data per rank).
"""

import argparse
import contextlib
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import torch
import torch.distributed as dist
import transformers

transformers.logging.set_verbosity_error()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--wrap", choices=["ddp", "fsdp", "manual"], default="fsdp",
                   help="manual: no wrapper; the gradients all-reduced by hand before step()")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--intermediate", type=int, help="MLP width (default 2 x hidden)")
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)   # 256 rows: 128 per rank on 2 ranks
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=2)   # per rank
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--bug", choices=["no-sync-always", "loss-sum", "grad-sum"])
    p.add_argument("--mixed", action="store_true",
                   help="FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)")
    args = p.parse_args()

    if not dist.is_initialized():   # `--fake --world N` made a fake group already
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)   # the same initial weights on every rank
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=args.hidden, intermediate_size=args.intermediate or 2 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        vocab_size=args.vocab, max_position_embeddings=args.seq, use_cache=False))
    if args.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
    elif args.wrap == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if args.mixed else MixedPrecisionPolicy()
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1234 + rank)
    for step in range(args.steps):
        for micro in range(args.accum):
            last = micro == args.accum - 1
            sync = last and args.bug != "no-sync-always"
            ctx = contextlib.nullcontext()
            if args.wrap == "ddp" and not sync:
                ctx = model.no_sync()
            elif args.wrap == "fsdp" and args.accum > 1:
                model.set_requires_gradient_sync(sync)
            ids = torch.randint(0, args.vocab, (args.batch_size, args.seq), generator=gen)
            with ctx:
                loss = model(input_ids=ids, labels=ids).loss
                (loss if args.bug == "loss-sum" else loss / args.accum).backward()
        if args.wrap == "manual":   # what DDP does, by hand: the mean over the ranks
            for q in model.parameters():
                dist.all_reduce(q.grad)
                if args.bug != "grad-sum":
                    q.grad /= dist.get_world_size()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step}  loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
