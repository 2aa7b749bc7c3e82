"""What the three distributed examples share: flags, the process group, a tiny GPT and its batches.

Not an example itself: `train_ddp.py`, `train_fsdp.py` and `train_zero.py` import it (it sits
beside them, so `torchrun` and `memledger trace --nproc` find it on `sys.path`).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from train_gpt import GPT, GPTConfig


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=4)    # per rank
    p.add_argument("--n-layer", type=int, default=2)       # blocks
    p.add_argument("--n-embd", type=int, default=64)       # C
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--block-size", type=int, default=32)   # context length T
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--dtype", default="float32", help="parameters' dtype: float32, bfloat16")
    p.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (CUDA)")
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per optimizer step (train_fsdp.py: without gradient "
                        "sync but on the last)")
    return p.parse_args()


def init_process_group(backend: str) -> tuple[int, int]:
    """(rank, world size); torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    (`memledger trace --fake --world N` has made a fake process group already.)"""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" not in os.environ:
        raise SystemExit("run me under torchrun: torchrun --nproc_per_node 2 " + os.path.basename(
            __import__("sys").argv[0]))
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def build_model(args: argparse.Namespace) -> GPT:
    torch.manual_seed(0)   # the same initial weights on every rank
    cfg = GPTConfig(vocab_size=args.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
                    n_head=args.n_head, n_embd=args.n_embd, dropout=0.0)
    return GPT(cfg).to(getattr(torch, args.dtype))


def batches(args: argparse.Namespace, rank: int):
    """An endless stream of (x, y) token batches, different on every rank."""
    gen = torch.Generator().manual_seed(1234 + rank)
    data = torch.randint(args.vocab_size, (4_096,), generator=gen)   # a synthetic corpus
    T = args.block_size
    while True:
        ix = torch.randint(len(data) - T - 1, (args.batch_size,), generator=gen)
        x = torch.stack([data[i:i + T] for i in ix])                  # (B, T)
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        yield x, y


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
