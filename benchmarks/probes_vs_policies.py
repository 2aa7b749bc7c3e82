"""The one-pass probes against the policies they price, in ONE process, interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probes_vs_policies.py --cycles 10
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probes_vs_policies.py --example cnn

One process builds the example's model (benchmarks/added_time_parts.py) and, for
`--cycles` cycles, runs training steps (fresh batch, its loss, zero_grad, backward, AdamW)
under each policy in turn by memledger's own `apply_policy`, 3 steps a turn with the
first untimed, then one repetition of `context_probes` (memledger/trace/timing.py, what
`trace` records). Thread CPU time, medians. It prints each policy's added time over the
plain step, and beside them what the probes read on the same regions: the selective
probe (selective minus checkpointed step, Note [Selective probe in context]) and the
offload probe (offloaded minus plain step, Note [Offload probe in context]). The
no-save selective row (`save=no_op`, an op name nothing matches) isolates the caching mode's own cost from what
keeping the save list's outputs saves. The first cycle is not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from added_time_parts import SETUPS, timed_turn, training  # noqa: E402

from memledger.trace.timing import ProbeInput, context_probes, probe_regions  # noqa: E402

clock = time.thread_time_ns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", choices=list(SETUPS), default="gpt")
    p.add_argument("--cycles", type=int, default=10)
    args = p.parse_args()
    model, batch_fn, step = training(args.example)
    regions = probe_regions(model)
    def on_regions(kind: str, suffix: str = "") -> str:
        return "+".join(f"{kind}:{r}{suffix}" for r in regions)
    # save=no_op: a save list no op matches, so selective keeps nothing
    policies = ["none", on_regions("checkpoint"), on_regions("selective"),
                on_regions("selective", ":save=no_op"), on_regions("offload")]
    fixed = batch_fn()
    times: dict[str, list[int]] = {pol: [] for pol in policies}
    probes: dict[str, list[float]] = {"selective": [], "offload": []}
    for cycle in range(args.cycles + 1):
        for pol in policies:
            ns = timed_turn(model, pol, step)
            if cycle:
                times[pol] += ns
        got = context_probes(ProbeInput(model, (fixed[0],)), clock, pair_ns=1e12,
                             max_reps={"checkpoint": 1, "selective": 1, "offload": 1})
        if cycle:
            probes["selective"] += [v * len(regions) for v in got["selective"]["region_ns"]]
            probes["offload"] += got["offload"]["added_ns"]
    med = {pol: statistics.median(v) / 1e6 for pol, v in times.items()}
    print(f"{args.example}: {len(regions)} regions ({regions[0]} ...), {args.cycles} cycles; "
          f"thread CPU ms, medians; plain step {med['none']:.2f} ms")
    print("| policy | added over plain | the probe reads |")
    print("|---|---:|---:|")
    ckpt = med[policies[1]] - med["none"]
    for pol in policies[1:]:
        probe = ""
        if pol == policies[2]:
            probe = (f"{ckpt + statistics.median(probes['selective']) / 1e6:+.2f} "
                     "(checkpoint's measured + selective probe)")
        if pol == policies[4]:
            probe = f"{statistics.median(probes['offload']) / 1e6:+.2f}"
        name = pol.split("+")[0] + (" (every region)" if len(regions) > 1 else "")
        print(f"| `{name}` | {med[pol] - med['none']:+.2f} | {probe} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
