"""Report generation on a synthetic 1,000,000-event ledger (issue 6: target < 10 s).

    .venv/bin/python benchmarks/report.py [--events 1000000] [--keep out.ledger]

Builds a ledger file shaped like training (10 steps of forward / backward / optimizer: 1,000
parameters, an activation saved every 4th forward event and freed in reverse during
backward, temporaries, gradients, Adam-like state; about 1.1 records and 0.3 storages per
event, as in a traced examples/train_gpt.py: 3,080 records, 1,060 storages, 3,007 events),
then times, each in this one
process: loading it, `memledger report` (HTML), and `show --timeline`. Printed, not asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from io import StringIO
from pathlib import Path

from rich.console import Console

from memledger.ledger.model import Ledger
from memledger.ledger.writer import FileSink
from memledger.report.html import write_html
from memledger.report.timeline import render_timeline

N_PARAMS = 1_000
PARAM_BYTES = 4 * 256 * 256          # bytes = numel × 4 (fp32): a 256×256 weight


def write_synthetic(path: Path, n_events: int, steps: int = 10) -> int:
    """Write the ledger; return the number of records."""
    sink = FileSink(path, flush_every=4096)
    n = 0

    def w(rec: dict) -> None:
        nonlocal n
        sink.write(rec)
        n += 1

    w({"k": "header", "schema": "memledger.ledger/1", "script": "synthetic", "device": "cpu"})
    sid = 0
    w({"k": "phase", "ev": 0, "ph": "setup", "step": 1})
    for p in range(N_PARAMS):
        w({"k": "alloc", "sid": sid, "ev": 0, "bytes": PARAM_BYTES, "dev": "cpu",
           "dtype": "float32", "shape": [256, 256], "op": "empty", "mod": f"layers.{p}",
           "ph": "setup", "step": 1, "pre": True})
        w({"k": "role", "sid": sid, "role": "parameter", "name": f"layers.{p}.weight"})
        w({"k": "live", "sid": sid, "last": n_events - 1})
        sid += 1
    per_step = (n_events - 1) // steps
    ev = 1
    state_made = False
    for step in range(1, steps + 1):
        fwd, bwd = int(per_step * 0.4), int(per_step * 0.4)
        opt = per_step - fwd - bwd
        w({"k": "phase", "ev": ev, "ph": "forward", "step": step})
        saved = []
        for i in range(fwd):
            e = ev + i
            if i % 4 == 0:          # an activation: 64 KiB, saved, freed during backward
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": 65536, "dev": "cpu",
                   "dtype": "float32", "shape": [64, 256], "op": "aten.mm.default",
                   "mod": f"layers.{(i // 2) % N_PARAMS}", "ph": "forward", "step": step})
                w({"k": "saved", "sid": sid, "ev": e, "mod": f"layers.{(i // 2) % N_PARAMS}"})
                saved.append(sid)
            elif i % 4 == 2:        # a temporary: 16 KiB, dead after the next event
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": 16384, "dev": "cpu",
                   "dtype": "float32", "shape": [16, 256], "op": "aten.relu.default",
                   "mod": f"layers.{(i // 2) % N_PARAMS}", "ph": "forward", "step": step})
                w({"k": "free", "sid": sid, "ev": e + 1, "last": e})
            else:                   # a view or an in-place op: no new storage
                continue
            sid += 1
        ev += fwd
        w({"k": "phase", "ev": ev, "ph": "backward", "step": step})
        for i in range(bwd):
            e = ev + i
            if saved and i % 4 == 0:
                w({"k": "unpack", "sid": saved[-1], "ev": e})
                w({"k": "free", "sid": saved.pop(), "ev": e + 1, "last": e})
            elif i % 4 == 2:        # backward scratch
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": 65536, "dev": "cpu",
                   "dtype": "float32", "shape": [64, 256], "op": "aten.mm.default",
                   "mod": "", "ph": "backward", "step": step})
                w({"k": "free", "sid": sid, "ev": e + 1, "last": e})
                sid += 1
            if step == 1 and i < N_PARAMS:      # gradients, kept (zero_grad sets to 0)
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": PARAM_BYTES, "dev": "cpu",
                   "dtype": "float32", "shape": [256, 256], "op": "aten.mm.default",
                   "mod": f"layers.{i}", "ph": "backward", "step": step})
                w({"k": "role", "sid": sid, "role": "gradient"})
                w({"k": "live", "sid": sid, "last": n_events - 1})
                sid += 1
        ev += bwd
        w({"k": "phase", "ev": ev, "ph": "optimizer", "step": step})
        for i in range(opt):
            e = ev + i
            if not state_made and i < 2 * N_PARAMS:   # Adam: exp_avg and exp_avg_sq
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": PARAM_BYTES, "dev": "cpu",
                   "dtype": "float32", "shape": [256, 256], "op": "aten.zeros_like.default",
                   "mod": "", "ph": "optimizer", "step": step})
                w({"k": "role", "sid": sid, "role": "optimizer_state"})
                w({"k": "live", "sid": sid, "last": n_events - 1})
            elif i % 4 == 0:
                w({"k": "alloc", "sid": sid, "ev": e, "bytes": 4096, "dev": "cpu",
                   "dtype": "float32", "shape": [1024], "op": "aten.add.Tensor", "mod": "",
                   "ph": "optimizer", "step": step})
                w({"k": "free", "sid": sid, "ev": e + 1, "last": e})
            else:
                continue
            sid += 1
        state_made = True
        ev += opt
        w({"k": "step", "step": step, "ev": ev - 1, "ns": 0})
    w({"k": "end", "ev": n_events, "status": "ok", "message": ""})
    sink.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="also keep the synthetic ledger here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "synthetic.ledger"
        t0 = time.perf_counter()
        n_rec = write_synthetic(path, args.events)
        t1, c1 = time.perf_counter(), time.process_time()
        led = Ledger.load(path)
        t2, c2 = time.perf_counter(), time.process_time()
        out = write_html(led, Path(tmp) / "report.html", source="synthetic")
        t3, c3 = time.perf_counter(), time.process_time()
        con = Console(file=StringIO(), width=100)
        con.print(render_timeline(led, width=100))
        t4, c4 = time.perf_counter(), time.process_time()
        size = out.stat().st_size
    pk = led.peak()
    print(f"synthetic ledger: {led.n_events:,} events, {len(led.storages):,} storages, "
          f"{n_rec:,} records (written in {t1 - t0:.1f} s)")
    print(f"peak {pk.bytes:,} B at event {pk.event:,}")
    print(f"{'':<22}{'wall':>8}{'cpu':>8}   (cpu = this process; wall includes waiting for "
          "a shared CPU)")
    rows = [("load ledger", t2 - t1, c2 - c1),
            ("HTML report", t3 - t2, c3 - c2),
            ("load + HTML report", t3 - t1, c3 - c1),
            ("terminal timeline", t4 - t3, c4 - c3)]
    for name, wall, cpu in rows:
        print(f"{name:<22}{wall:7.2f}s{cpu:7.2f}s")
    print(f"HTML file {size / 2**10:.0f} KiB; target: load + report < 10 s wall -> "
          f"{'met' if t3 - t1 < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
