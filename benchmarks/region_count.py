"""What checkpointing k of a model's regions adds to a training step, k = 1 .. n, in ONE
process, interleaved: the per-step and per-region parts of Note [A checkpointed step's own
cost] (memledger/trace/timing.py), measured on whole training steps.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/region_count.py --example mlp --cycles 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/region_count.py --example cnn

Each cycle runs the plain step and then `checkpoint` on the first k probe regions
(`probe_regions`, what the trace's probe checkpoints) for every k, by memledger's own
`apply_policy`, one untimed step and 3 timed steps a turn (benchmarks/added_time_parts.py).
Thread CPU time, medians over the cycles after the first. A straight line through the
added times has the per-region cost as its slope and the per-step cost as its intercept.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
from added_time_parts import SETUPS, timed_turn, training  # noqa: E402

from memledger.trace.timing import probe_regions  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", choices=list(SETUPS), default="mlp")
    p.add_argument("--cycles", type=int, default=20)
    args = p.parse_args()
    model, _, step = training(args.example)
    regions = probe_regions(model)
    policies = ["none"] + ["+".join(f"checkpoint:{r}" for r in regions[:k])
                           for k in range(1, len(regions) + 1)]
    times: dict[str, list[int]] = {pol: [] for pol in policies}
    for cycle in range(args.cycles + 1):
        for pol in policies:
            ns = timed_turn(model, pol, step, timed=3)
            if cycle:
                times[pol] += ns
    base = statistics.median(times["none"])
    added = [(statistics.median(times[pol]) - base) / 1e6 for pol in policies[1:]]
    print(f"{args.example}: {len(regions)} regions ({', '.join(regions)}), {args.cycles} "
          f"cycles; thread CPU ms, medians; plain step {base / 1e6:.2f} ms")
    print("| regions checkpointed | added over plain |")
    print("|---:|---:|")
    for k, a in enumerate(added, 1):
        print(f"| {k} | +{a:.2f} |")
    if len(added) > 1:
        slope, icpt = np.polyfit(np.arange(1, len(added) + 1), added, 1)
        print(f"\nper region {slope:.2f} ms, per step {icpt:.2f} ms (least squares)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
