"""What checkpointing a region adds beyond its own forward, region by region size, in ONE
process, interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/region_cost.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/region_cost.py --example gpt \\
        --policy 'checkpoint:blocks.*' --policy 'checkpoint:**.ln_1' --cycles 8

The cost model (memledger/replay/costs.py, Note [Added time]) prices a checkpointed call
as its re-run forward plus a per-call term measured on the model's blocks. This checks
that assumption on regions of other sizes (a block, its MLP, one LayerNorm, one Linear):
each policy's added time over the plain step (memledger's own apply_policy, turns of 3
training steps, the first untimed; thread CPU time, medians over `--cycles`), the regions'
own plain forward (module hooks over 5 steps), and (added - forward) per region. A per-call
term that holds whatever the region's size reads about the same in every row (a Linear's
early stop re-runs only part of it, so its row reads lower).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from added_time_parts import SETUPS, timed_turn, training  # noqa: E402

clock = time.thread_time_ns
GPT_POLICIES = ["checkpoint:blocks.*", "checkpoint:**.mlp", "checkpoint:**.attn",
                "checkpoint:**.ln_1", "checkpoint:**.mlp.c_fc"]


def selected(names: list[str], selector: str) -> list[str]:
    """The outermost modules a `kind:selector` policy names (`*` one level, `**` any)."""
    rx = selector.replace(".", r"\.").replace("**", "\0").replace("*", "[^.]*") \
        .replace("\0", ".*")
    hit = [n for n in names if n and re.fullmatch(rx, n)]
    return [n for n in hit if not any(n != o and n.startswith(o + ".") for o in hit)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--example", choices=list(SETUPS), default="gpt")
    p.add_argument("--policy", action="append", help="checkpoint:SELECTOR (repeatable)")
    p.add_argument("--cycles", type=int, default=8)
    args = p.parse_args()
    model, _, step = training(args.example)
    policies = args.policy or GPT_POLICIES
    fwd: dict[str, list[int]] = {}
    started: dict[str, int] = {}
    hooks = []
    for name, m in model.named_modules():
        hooks.append(m.register_forward_pre_hook(
            lambda m, a, n=name: started.__setitem__(n, clock())))
        hooks.append(m.register_forward_hook(
            lambda m, a, o, n=name: fwd.setdefault(n, []).append(clock() - started[n])))
    for _ in range(5):
        step()
    for h in hooks:
        h.remove()
    times: dict[str, list[int]] = {pol: [] for pol in ["none", *policies]}
    for cycle in range(args.cycles + 1):
        for pol in times:
            ns = timed_turn(model, pol, step)
            if cycle:                   # the first cycle settles the process
                times[pol] += ns
    med = {pol: statistics.median(v) / 1e6 for pol, v in times.items()}
    print(f"{args.example}: plain step {med['none']:.2f} ms; {args.cycles} cycles, thread "
          "CPU ms, medians")
    print("| policy | regions | added | regions' forward | (added - forward) per region |")
    print("|---|---:|---:|---:|---:|")
    for pol in policies:
        regions = selected(list(fwd), pol.split(":", 1)[1])
        f = sum(statistics.median(fwd[n]) for n in regions) / 1e6
        add = med[pol] - med["none"]
        print(f"| `{pol}` | {len(regions)} | {add:+.2f} | {f:.2f} | "
              f"{(add - f) / max(len(regions), 1):+.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
