"""Simulated FSDP2 ranks: memledger's `--fake --world N` beside torch's `FSDPMemTracker`.

    python benchmarks/fsdp_anchor.py                        # GPT-2 XL and Llama-7B, 8 and 64 ranks
    python benchmarks/fsdp_anchor.py --models gpt2-xl --worlds 8

Both sides simulate rank 0 of an N-rank FSDP2 job (one `fully_shard` per block plus the
root), bf16 parameters, gradients and AdamW state, B=1, S=2048, one training step, under
`FakeTensorMode` with torch's fake process group:

- memledger: `memledger trace --fake --world N` of this file in `--train` mode (a fresh
  process), the ledger's peak and its categories there;
- the anchor: `torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` around the same
  step, in `--tracker` mode (a fresh process), its "peak" snapshot.

Printed: both peaks to the byte and their difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

B, S = 1, 2048


def build(name: str):
    import torch

    torch.manual_seed(0)
    # bf16 from construction (not `.to()`: under a plain FakeTensorMode `nn.Module._apply`
    # cannot swap fake parameters, pytorch/pytorch#170770; docs/fake.md rule 4)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        return _build(name)
    finally:
        torch.set_default_dtype(old)


def _build(name: str):
    if name == "gpt2-xl":
        from train_gpt import GPT, GPTConfig

        cfg = GPTConfig(vocab_size=50257, block_size=S, n_layer=48, n_head=25, n_embd=1600,
                        dropout=0.0)
        model, blocks, vocab = GPT(cfg), "blocks", cfg.vocab_size
    elif name == "llama-7b":
        from train_llama import SIZES, Llama

        cfg = replace(SIZES["7b"], max_seq_len=S)
        model, blocks, vocab = Llama(cfg), "layers", cfg.vocab_size
    else:
        raise SystemExit(f"unknown model {name!r}: gpt2-xl or llama-7b")
    return model, getattr(model, blocks), vocab


def shard(model, blocks) -> None:
    from torch.distributed.fsdp import fully_shard

    for block in blocks:
        fully_shard(block)
    fully_shard(model)


def one_step(model, opt, vocab: int) -> None:
    import torch
    import torch.nn.functional as F

    x = torch.randint(vocab, (B, S))
    y = torch.randint(vocab, (B, S))
    logits = model(x)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def train(name: str) -> None:
    """The traced script: `memledger trace --fake --world N` has made the process group."""
    import torch

    model, blocks, vocab = build(name)
    shard(model, blocks)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for _ in range(2):
        one_step(model, opt, vocab)


def tracker(name: str, world: int) -> dict:
    """FSDPMemTracker's peak for rank 0 of `world`, under FakeTensorMode (the anchor)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    from memledger.trace.fake_world import FakeWorld

    with FakeWorld(world, 0), FakeTensorMode(allow_non_fake_inputs=True):
        model, blocks, vocab = build(name)
        shard(model, blocks)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        fmt = FSDPMemTracker(model, opt)
        with fmt:
            for _ in range(2):
                one_step(model, opt, vocab)
                if _ == 0:
                    fmt.reset_mod_stats()
        peak = fmt.get_tracker_snapshot("peak")
    dev = next(iter(peak))
    return {"peak_bytes": int(peak[dev]["Total"]),
            "by_kind": {str(k): int(v) for k, v in peak[dev].items() if k != "Total"}}


def memledger_rank0(name: str, world: int, out: Path) -> dict:
    from memledger.ledger.model import Ledger

    subprocess.run([sys.executable, "-m", "memledger", "trace", "--fake", "--world", str(world),
                    "--steps", "2", __file__, "-o", str(out), "--", "--train", name],
                   check=True, stdout=subprocess.DEVNULL)
    led = Ledger.load(out)
    pk = led.peak()
    return {"peak_bytes": pk.bytes, "phase": pk.phase, "module": pk.module,
            "by_category": {k: v for k, v in led.by_category(pk.event).items() if v}}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--train", help="(internal) the traced script for one model")
    p.add_argument("--tracker", help="(internal) FSDPMemTracker for one model")
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--models", nargs="+", default=["gpt2-xl", "llama-7b"])
    p.add_argument("--worlds", nargs="+", type=int, default=[8, 64])
    args = p.parse_args()
    if args.train:
        return train(args.train)
    if args.tracker:
        print("RESULT=" + json.dumps(tracker(args.tracker, args.world)))
        return None
    print("| model | ranks | memledger rank-0 peak (B) | FSDPMemTracker peak (B) | "
          "difference (B) | memledger at its peak |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            for world in args.worlds:
                ml = memledger_rank0(name, world, Path(tmp) / f"{name}-{world}.ledger")
                res = subprocess.run([sys.executable, __file__, "--tracker", name, "--world",
                                      str(world)], check=True, capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
                tr = json.loads(next(ln for ln in res.stdout.splitlines()
                                     if ln.startswith("RESULT="))[len("RESULT="):])
                cats = ", ".join(f"{k} {v:,}" for k, v in ml["by_category"].items())
                print(f"| {name} | {world} | {ml['peak_bytes']:,} | {tr['peak_bytes']:,} | "
                      f"{ml['peak_bytes'] - tr['peak_bytes']:+,} | {ml['phase']}: {cats} |")
                print("  FSDPMemTracker at its peak: " + ", ".join(
                    f"{k} {v:,}" for k, v in tr["by_kind"].items() if v), file=sys.stderr)
    return None


if __name__ == "__main__":
    main()
