"""What the ledger pass's garbage scan costs (trace/gc_window.py), measured in the pass.

    python benchmarks/gc_scan.py [--script examples/train_gpt.py] [--steps 3] [--repeat 3]
                                 [--ends-by-itself]

Each round runs, in a fresh process, the ledger pass as `memledger trace` does
(`python -m memledger.trace.worker ledger ...`) with `garbage_sids` wrapped in a timer, and
prints the scan's wall time beside the whole pass's and the number of objects the collector
walked. The scan is one full collection with `gc.DEBUG_SAVEALL` as the last step ends,
while the imports are still frozen for the collector; with `--ends-by-itself` the script
(given `--steps` itself) stops before the pass asks it to, and the scan runs at the
close, after the runner has unfrozen them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
from memledger.trace import collector, gc_window
inner = gc_window.garbage_sids
taken = []
def timed(sids):
    t0 = time.perf_counter()
    out = inner(sids)
    taken.append((time.perf_counter() - t0, len(gc.get_objects())))
    return out
collector.garbage_sids = timed
from memledger.trace import worker
sys.argv = ["worker", *sys.argv[1:]]
t0 = time.perf_counter()
try:
    worker.main(sys.argv[1:])
finally:
    print("SCAN " + json.dumps({"scan": taken, "pass": time.perf_counter() - t0}),
          file=sys.stderr)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--script", default=str(ROOT / "examples" / "train_gpt.py"))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--ends-by-itself", action="store_true",
                   help="the script runs --steps and the pass asks 2 more: a close scan")
    a = p.parse_args()
    asked = a.steps + 2 if a.ends_by_itself else a.steps
    script_args = ["--", "--steps", str(a.steps)] if a.ends_by_itself else []
    scans, passes, objects = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.repeat):
            out = Path(tmp) / f"{k}.ledger"
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, "ledger", "--out", str(out), "--status",
                 str(Path(tmp) / f"{k}.status"), "--steps", str(asked), a.script,
                 *script_args],
                cwd=ROOT, capture_output=True, text=True)
            line = next((ln for ln in proc.stderr.splitlines() if ln.startswith("SCAN ")), None)
            if line is None:
                sys.exit(f"the ledger pass failed: {proc.stderr[-2000:]}")
            got = json.loads(line[5:])
            if not got["scan"]:
                sys.exit("no scan ran (the script ended before its last step?)")
            scans.append(got["scan"][0][0])
            objects.append(got["scan"][0][1])
            passes.append(got["pass"])
    scan, whole = statistics.median(scans), statistics.median(passes)
    where = "at the close" if a.ends_by_itself else "as the last step ends"
    print(f"{Path(a.script).name}, {a.steps} steps, scan {where}, median of {a.repeat} "
          "fresh processes")
    print(f"garbage scan   {scan * 1e3:8.1f} ms   ({objects[0]:,} objects tracked after it)")
    print(f"ledger pass    {whole * 1e3:8.1f} ms   (scan {100 * scan / whole:.1f}% of it)")


if __name__ == "__main__":
    main()
