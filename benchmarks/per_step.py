"""The tracer's per-step cost, with as little noise as a shared machine allows.

    .venv/bin/python benchmarks/per_step.py --baseline DIR [--pairs 12] [--repeat 7]

Each measurement is one fresh process for one tree: the tiny GPT step of examples/train_gpt.py
(as `benchmarks/daily.py`'s API table), 10 steps untraced then 10 steps in one
`memledger.trace()`, alternated `--repeat` times, and the minimum CPU time of each (the run
the neighbours disturbed least); the ratio of the two minima is the reading. The baseline
tree (`git archive main | tar -x -C DIR`) and this one alternate, pair by pair, so that a
machine whose speed drifts reads both alike. Prints the ratios per pair and their medians.
Used by the forty-third session (docs/performance.md) where `daily.py`'s medians moved by
more than the change between two runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(steps: int, repeat: int) -> None:
    """In the tree on `sys.path[0]` (the working folder): print untraced and traced minima."""
    import memledger
    from tiny_gpt import tiny_gpt_step

    step, _, _ = tiny_gpt_step()

    for _ in range(3):
        step()
    with memledger.trace():   # warm: the tracer's own lazy imports
        step()
    plain, traced = [], []
    for _ in range(repeat):
        c = time.process_time()
        for _ in range(steps):
            step()
        plain.append(time.process_time() - c)
        c = time.process_time()
        with memledger.trace():
            for _ in range(steps):
                step()
        traced.append(time.process_time() - c)
    print(f"{min(plain)} {min(traced)} {memledger.__file__}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--baseline", required=True, help="another memledger checkout")
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        sys.path.insert(0, os.getcwd())
        measure(args.steps, args.repeat)
        return
    trees = {"baseline": Path(args.baseline).resolve(), "this tree": ROOT}
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)   # each tree imports its own memledger (its working folder)
    ratios: dict[str, list[float]] = {name: [] for name in trees}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    for i in range(args.pairs):
        for name, tree in trees.items():
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure",
                                  "--baseline", "-", "--repeat", str(args.repeat),
                                  "--steps", str(args.steps)], cwd=tree, env=env,
                                 check=True, capture_output=True, text=True).stdout
            plain, traced, where = out.strip().splitlines()[-1].split(" ", 2)
            assert Path(where).resolve().is_relative_to(tree), where
            ratios[name].append(float(traced) / float(plain))
            print(f"pair {i + 1:2d} {name:<10} untraced {float(plain):.3f} s, traced "
                  f"{float(traced):.3f} s: {ratios[name][-1]:.3f}x", flush=True)
    for name, xs in ratios.items():
        print(f"{name:<10} median {statistics.median(xs):.3f}x untraced "
              f"({args.steps} steps in one memledger.trace(), minimum of {args.repeat})")
    lower = sum(a < b for a, b in zip(ratios["this tree"], ratios["baseline"]))
    print(f"this tree lower in {lower} of {args.pairs} pairs; "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
