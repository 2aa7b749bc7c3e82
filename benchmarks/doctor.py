"""The doctor's cost against a plain `memledger trace` of the same steps, side by side.

    python benchmarks/doctor.py [--script examples/train_gpt.py] [--steps 3] [--repeat 3]

Each round runs, as a user would, in fresh processes through the CLI:

    memledger trace  SCRIPT --steps N -o t.ledger     (ledger pass + allocator pass)
    memledger doctor SCRIPT --steps N                 (probe only)
    memledger doctor SCRIPT --steps N -o d.ledger     (probe + Collector: a ledger with findings)

Rounds are interleaved so machine noise hits all three alike; it prints the median wall
time of each and the doctor's ratio to trace (the issue's bar: <= 1.2).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):   # 1: the doctor found something (still timed)
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr.decode()[-2000:]}")
    return dt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--script", default=str(ROOT / "examples" / "train_gpt.py"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    cli = [sys.executable, "-m", "memledger.cli"]
    times: dict[str, list[float]] = {"trace": [], "doctor": [], "doctor -o": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "trace": cli + ["trace", args.script, "--steps", str(args.steps),
                            "-o", f"{tmp}/t.ledger"],
            "doctor": cli + ["doctor", args.script, "--steps", str(args.steps)],
            "doctor -o": cli + ["doctor", args.script, "--steps", str(args.steps),
                                "-o", f"{tmp}/d.ledger"],
        }
        for _ in range(args.repeat):
            for name, cmd in runs.items():
                times[name].append(_run(cmd))
    base = statistics.median(times["trace"])
    print(f"{Path(args.script).name}, {args.steps} steps, median of {args.repeat} "
          "interleaved rounds (fresh processes, wall clock)")
    print(f"{'command':<12} {'median s':>9} {'÷ trace':>8}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<12} {m:9.2f} {m / base:8.2f}")


if __name__ == "__main__":
    main()
