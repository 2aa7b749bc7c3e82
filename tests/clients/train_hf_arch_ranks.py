"""Any of train_hf_arch.py's shrunk transformers models (`--arch`, `--task`) trained on
several ranks: DistributedDataParallel, or FSDP2 with one `fully_shard` per block of
`blocks_glob` and one on the root (`--fsdp`). Data from a generator seeded by rank; numpy's
global generator (SpecAugment's masks in the wav2vec2 family) seeded by rank too, so that
memledger's two passes draw the same masks.

    memledger trace --nproc 2 tests/clients/train_hf_arch_ranks.py --steps 2 -o u.ledger \\
        -- --arch unispeech --task ctc [--fsdp]
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_hf_arch as hf  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", required=True)
    p.add_argument("--task", choices=hf.TASKS, default="causal-lm")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--fsdp", action="store_true", help="FSDP2 per block (default: DDP)")
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    np.random.seed(rank)
    model = hf.build(a.arch, "cpu", False, a.task)
    model.train()
    inner = model
    if a.task == "image-text":   # counted before sharding: outside forward, FSDP2 would
        hf._image_tokens(model, hf._pixels(model, 1, torch.Generator()))   # not unshard
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for block in model.get_submodule(hf.blocks_glob(model).removesuffix(".*")):
            fully_shard(block)
        fully_shard(model)
    else:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1 + rank)
    for _ in range(a.steps):
        ids = torch.randint(3, hf.V, (8, hf.SEQ), generator=gen)
        batch = hf._batch(a.task, ids, gen, inner)
        target = batch.pop("target", None)   # a loss the script computes itself
        loss = hf._loss(model(**batch), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
