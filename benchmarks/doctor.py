"""The doctor's cost against a plain `memledger trace` of the same steps, side by side.

    python benchmarks/doctor.py [--script examples/train_gpt.py] [--steps 3] [--repeat 3]

Each round runs, as a user would, in fresh processes through the CLI:

    memledger trace  SCRIPT --steps N -o t.ledger     (ledger pass + allocator pass)
    memledger trace  SCRIPT --steps N --no-measure    (the ledger pass alone)
    memledger doctor SCRIPT --steps N                 (probe only)
    memledger doctor SCRIPT --steps N -o d.ledger     (probe + Collector: a ledger with findings)

Rounds are interleaved so machine noise hits all three alike; it prints the median CPU
time (user + system of the command and its children, from `getrusage`: what the run costs,
and far steadier than wall time on a shared machine) and the median wall time of each, and
the doctor's ratios to trace (the issue's bar: <= 1.2).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one command and every process it started."""
    c0, t0 = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt, dc = time.perf_counter() - t0, _cpu() - c0
    if proc.returncode not in (0, 1):   # 1: the doctor found something (still timed)
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr.decode()[-2000:]}")
    return dc, dt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--script", default=str(ROOT / "examples" / "train_gpt.py"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    cli = [sys.executable, "-m", "memledger.cli"]
    times: dict[str, list[tuple[float, float]]] = {
        "trace": [], "trace --no-measure": [], "doctor": [], "doctor -o": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "trace": cli + ["trace", args.script, "--steps", str(args.steps),
                            "-o", f"{tmp}/t.ledger"],
            "trace --no-measure": cli + ["trace", args.script, "--steps", str(args.steps),
                                         "--no-measure", "-o", f"{tmp}/n.ledger"],
            "doctor": cli + ["doctor", args.script, "--steps", str(args.steps)],
            "doctor -o": cli + ["doctor", args.script, "--steps", str(args.steps),
                                "-o", f"{tmp}/d.ledger"],
        }
        for _ in range(args.repeat):
            for name, cmd in runs.items():
                times[name].append(_run(cmd))
    cpu0 = statistics.median(c for c, _ in times["trace"])
    wall0 = statistics.median(w for _, w in times["trace"])
    print(f"{Path(args.script).name}, {args.steps} steps, median of {args.repeat} "
          "interleaved rounds (fresh processes)")
    print(f"{'command':<18} {'CPU s':>8} {'÷ trace':>8} {'wall s':>8} {'÷ trace':>8}")
    for name, ts in times.items():
        c = statistics.median(c for c, _ in ts)
        w = statistics.median(w for _, w in ts)
        print(f"{name:<18} {c:8.2f} {c / cpu0:8.2f} {w:8.2f} {w / wall0:8.2f}")


if __name__ == "__main__":
    main()
