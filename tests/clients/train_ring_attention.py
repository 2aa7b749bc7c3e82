"""Ring attention (ring-attention-pytorch, lucidrains) as its README and its `assert.py`
use it: a `RingTransformer` language model (token embedding, rotary positions, blocks of
`RingAttention` + a feed-forward, logits; the loss from `return_loss=True`), its attention a
blockwise "flash" attention written as one `autograd.Function` (forward under no_grad, its
own backward re-computing the attention weights bucket by bucket). With `--ring` and
several ranks (torchrun, gloo) the sequence is sharded across the ranks, and the keys and
values travel around the ring (`batch_isend_irecv` to the right neighbour, then a barrier)
in the forward, keys, values and their gradients in the backward; the model is wrapped in
DDP as `assert.py` does. The sequence (15 tokens by default) is not a multiple of a
rank's share: the library pads it and makes the mask itself (with a sequence that needs no
padding and no mask, 0.5.20's `RingTransformer.forward` indexes `mask[:, 1:]` of None). On one process (no group, or a group of one) the ring is off and
the same model attends over its whole sequence. Seeded, tiny, nothing downloaded.

    python tests/clients/train_ring_attention.py --steps 3
    torchrun --nproc_per_node 2 tests/clients/train_ring_attention.py --ring --steps 3
    memledger trace tests/clients/train_ring_attention.py --steps 2 -o ring.ledger
    memledger trace --nproc 2 tests/clients/train_ring_attention.py --steps 2 -o ring.ledger \\
        -- --ring
    memledger compare tests/clients/train_ring_attention.py -p 'checkpoint:layers.*.*'

Options: `--ring` (`ring_attn=True`: the sequence sharded across ranks, `ring_seq_size` =
seq / world), `--striped` (striped ring attention: the sequence permuted across the ranks),
`--causal`, `--lookback N` (`max_lookback_seq_len`), `--gqa G` (grouped-query heads),
`--bucket B` (flash bucket size), `--regular` (`force_regular_attn`: plain softmax
attention through autograd), `--accum K`, `--clip`, `--validate` (a loss under no_grad in
eval mode each step), `--no-ddp` (several ranks without DDP: each rank steps on its own
gradients).
"""

import argparse
import math
import os

import torch
import torch.distributed as dist

from ring_attention_pytorch import RingTransformer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--seq", type=int, default=15)   # padded to a multiple of ring_seq_size
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--bucket", type=int, default=4)
    p.add_argument("--gqa", type=int, default=1)
    p.add_argument("--lookback", type=int, default=None)
    p.add_argument("--ring", action="store_true")
    p.add_argument("--striped", action="store_true")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--regular", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--no-ddp", action="store_true")
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(0)

    num_tokens = 32
    model = RingTransformer(
        num_tokens=num_tokens, dim=args.dim, depth=args.depth, causal=args.causal,
        dim_head=args.dim_head, heads=args.heads, num_grouped_query_heads=args.gqa,
        bucket_size=args.bucket, ring_attn=args.ring, striped_ring_attn=args.striped,
        ring_seq_size=args.bucket * math.ceil(args.seq / (world * args.bucket)),
        max_lookback_seq_len=args.lookback, force_regular_attn=args.regular,
        use_cuda_kernel=False)
    net = model
    if world > 1 and not args.no_ddp:
        net = torch.nn.parallel.DistributedDataParallel(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    gen = torch.Generator().manual_seed(1 + rank)   # each rank its own batch, as a sampler
    def batch() -> torch.Tensor:
        # seq + 1 tokens: the model shifts them into inputs and labels
        return torch.randint(0, num_tokens, (args.batch, args.seq + 1), generator=gen)

    for step in range(args.steps):
        net.train()
        for _ in range(args.accum):
            loss = net(batch(), return_loss=True) / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad(set_to_none=True)
        if args.validate:
            net.eval()
            with torch.no_grad():
                val = net(batch(), return_loss=True)
            print(f"step {step} val {val.item():.4f}")
        print(f"step {step} loss {loss.item() * args.accum:.4f}")

    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
