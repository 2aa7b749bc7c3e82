"""What checkpointing one region adds to the recompute probe's step and to the script's own
step, side by side in one process (docs/accuracy.md, "Where the MLP's miss sits").

    .venv/bin/python benchmarks/probe_step_vs_script.py [--region fc1] [--cycles 60]

The MLP example (examples/train_mlp.py), one intra-op thread, thread CPU time. Three kinds
of step, each plain and with `--region` under memledger's checkpoint wrapper (the one
`measure` and the probe use), interleaved, the first step after each switch untimed:
- script: the script's step (new batch, cross-entropy, backward, Adam's step);
- no optimizer: the same loss on one fixed batch, backward, no optimizer step;
- probe: the probe's step (memledger/trace/timing.py `_RegionSteps.run`): the model on one
  fixed batch, `output.sum().backward()`.
Prints each kind's median step and what the checkpointed region added.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from train_mlp import MLP  # noqa: E402

from memledger.measure.apply import _checkpointed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--region", default="fc1", choices=["fc1", "fc2", "head"])
    ap.add_argument("--cycles", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    fixed_x = torch.randn(64, 256, generator=gen)
    fixed_y = torch.randint(0, 10, (64,), generator=gen)
    clock = time.thread_time_ns
    region = getattr(model, args.region)

    def wrap(on: bool) -> None:
        region.__dict__.pop("forward", None)
        if on:
            region.forward = _checkpointed(type(region).forward.__get__(region), region, None)

    def script() -> int:
        x = torch.randn(64, 256, generator=gen)
        y = torch.randint(0, 10, (64,), generator=gen)
        t0 = clock()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return clock() - t0

    def no_optimizer() -> int:
        t0 = clock()
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(fixed_x), fixed_y).backward()
        return clock() - t0

    def probe() -> int:
        t0 = clock()
        model.zero_grad(set_to_none=True)
        model(fixed_x).float().sum().backward()
        return clock() - t0

    kinds = {"script": script, "no optimizer": no_optimizer, "probe": probe}
    times: dict[tuple[str, bool], list[int]] = {(k, on): [] for k in kinds for on in (0, 1)}
    for _ in range(args.cycles):
        for kind, step in kinds.items():
            for on in (False, True):
                wrap(on)
                step()                              # the first step after a switch
                times[(kind, on)].append(step())
    wrap(False)
    print(f"{args.region} checkpointed, {args.cycles} cycles, median thread CPU per step:")
    for kind in kinds:
        plain, ckpt = (statistics.median(times[(kind, on)]) / 1e6 for on in (0, 1))
        print(f"  {kind:<13} plain {plain:6.3f} ms  checkpointed {ckpt:6.3f} ms  "
              f"added {ckpt - plain:+.3f} ms")


if __name__ == "__main__":
    main()
