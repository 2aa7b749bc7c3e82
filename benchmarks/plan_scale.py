"""How long `plan` takes on deep models: tiny GPTs with 4, 12 and 48 blocks.

    .venv/bin/python benchmarks/plan_scale.py            # traces 3 ledgers, ~3 min here

Each ledger: `memledger trace examples/train_gpt.py --steps 2 -- --n-layer N
--batch-size 2`. Then `plan(led, budget)` in-process at 80 % of the baseline peak (median of
3 runs, wall and process CPU time, ledger already loaded) with its parts: the block table
(one replay per block and option on the block's own storages), the exact solve, and the
Pareto front (16 evenly spaced budgets + 2 beside the knee; exhaustive when small); and
`memledger plan --json` end to end in a fresh
process (imports and ledger loading included).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["OMP_NUM_THREADS"] = "1"

from memledger.ledger.model import Ledger  # noqa: E402
from memledger.replay.engine import CPU_RNG_STATE_BYTES  # noqa: E402
from memledger.replay.plan import block_table, pareto_front, plan, repeated_blocks  # noqa: E402
from memledger.replay.predict import cost_model  # noqa: E402
from memledger.replay.prepared import Prepared  # noqa: E402
from memledger.trace.session import trace_script  # noqa: E402


def _time(fn, reps: int = 3) -> tuple[float, float, object]:
    walls, cpus, out = [], [], None
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus), out


def main() -> None:
    print("| blocks | events | storages | options | assignments | slots -> columns | "
          "method | plan wall (CPU) | table | solve | front | CLI end to end |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (4, 12, 48):
            path = Path(tmp) / f"gpt{n}.ledger"
            trace_script(ROOT / "examples/train_gpt.py",
                         ["--n-layer", str(n), "--batch-size", "2", "--steps", "14"], path,
                         steps=2)
            led = Ledger.load(path)
            budget = int(led.summary().measured.peak_bytes * 0.8)
            wall, cpu, rep = _time(lambda: plan(led, budget))
            prep = Prepared.from_ledger(led)
            model, _ = cost_model(led, prep)
            blocks = repeated_blocks(led)
            tw, _, table = _time(lambda: block_table(prep, model, blocks, CPU_RNG_STATE_BYTES))
            sw, _, _ = _time(lambda: table.solve(budget))
            fw, _, _ = _time(lambda: pareto_front(table))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "memledger", "plan", str(path), "--budget",
                            f"{budget}B", "--json"], check=True, capture_output=True)
            cli = time.perf_counter() - t0
            print(f"| {n} | {led.n_events:,} | {len(led.storages):,} | {len(rep.options)} | "
                  f"{rep.assignments:.3g} | {table.slots:,} -> {table.delta.shape[2]} | "
                  f"{rep.method} | {wall:.2f} s ({cpu:.2f} s) | {tw:.2f} s | {sw:.3f} s | "
                  f"{fw:.2f} s | {cli:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
