"""Replay throughput, and predicting vs measuring on the tiny GPT.

    .venv/bin/python benchmarks/replay.py                 # 1,000,000 events, 100 policies
    .venv/bin/python benchmarks/replay.py --events 200000 --policies 20 --no-measure

Part 1 builds a synthetic ledger of a 32-block model (each block call: 30 events, 12 saved
activations of 1-4 MiB and 8 temporaries, about as many storages per event as the tiny GPT, saved in forward and unpacked in a mirrored
backward) repeated over as many steps as it takes to reach --events events, then replays
it under --policies policies (checkpoint / selective / offload over block subsets, and
combinations) and prints events per second for each (target: >= 1e7).

Part 2 traces examples/train_gpt.py once, then times `predict` (load + replay) and
`measure` (a fresh process) for the same policy and prints the ratio (target: >= 100x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memledger.ledger.model import Ledger  # noqa: E402
from memledger.replay.engine import replay  # noqa: E402
from memledger.replay.policies import parse_policy  # noqa: E402
from memledger.replay.prepared import Prepared  # noqa: E402

BLOCKS = 32
EV_PER_CALL = 30


def synthetic(n_events: int) -> Ledger:
    recs = [{"k": "header", "schema": "memledger.ledger/1"}]
    sid, ev, step = 0, 0, 1
    per_step = 2 * BLOCKS * EV_PER_CALL + 2
    while ev + per_step <= n_events:
        recs.append({"k": "phase", "ev": ev, "ph": "forward", "step": step})
        b0 = ev + BLOCKS * EV_PER_CALL + 1            # backward starts here
        allocs, frees = [], []
        for i in range(BLOCKS):
            e0 = ev + i * EV_PER_CALL
            bw = b0 + (BLOCKS - 1 - i) * EV_PER_CALL   # this block's backward
            for j in range(12):                        # saved activations, 1-4 MiB
                c = e0 + 2 + 2 * j
                allocs.append({"k": "alloc", "sid": sid, "ev": c, "bytes": (j % 4 + 1) << 20,
                               "op": "addmm.default" if j % 2 else "gelu.default",
                               "ph": "forward", "step": step})
                u = bw + 2 + 2 * (11 - j)
                recs += [{"k": "saved", "sid": sid, "ev": c + 1, "mod": f"blocks.{i}"},
                         {"k": "unpack", "sid": sid, "ev": u},
                         {"k": "fwdlast", "sid": sid, "last": c + 3}]
                frees.append({"k": "free", "sid": sid, "ev": u + 1, "last": u})
                sid += 1
            for j in range(8):                         # temporaries
                c = e0 + 3 + 3 * j
                allocs.append({"k": "alloc", "sid": sid, "ev": c, "bytes": 1 << 19,
                               "op": "mul.Tensor", "ph": "forward", "step": step})
                frees.append({"k": "free", "sid": sid, "ev": c + 2, "last": c + 1})
                sid += 1
            recs.append({"k": "scope", "mod": f"blocks.{i}", "cls": "Block", "ev0": e0,
                         "ev1": e0 + EV_PER_CALL, "ph": "forward", "step": step, "ns": 100_000})
        recs += allocs + frees
        recs += [{"k": "phase", "ev": b0, "ph": "backward", "step": step},
                 {"k": "step", "step": step, "ev": ev + per_step - 1, "ns": 10_000_000}]
        ev += per_step
        step += 1
    recs.append({"k": "end", "ev": ev, "status": "ok"})
    return Ledger.from_records(recs)


def policies(n: int) -> list[str]:
    kinds = ["checkpoint", "selective", "offload"]
    out = ["none"]
    k = 1
    while len(out) < n:
        hi = k % BLOCKS
        kind = kinds[k % 3]
        if k % 5 == 0:
            out.append(f"checkpoint:blocks.{hi // 2}+offload:blocks.{hi // 2 + BLOCKS // 2}")
        elif k % 7 == 0:
            out.append(f"{kind}:@Block")
        else:
            out.append(f"{kind}:blocks.{hi}")
        k += 1
    return out[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--policies", type=int, default=100)
    ap.add_argument("--no-measure", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    led = synthetic(args.events)
    t1 = time.perf_counter()
    prep = Prepared.from_ledger(led)
    t2 = time.perf_counter()
    print(f"synthetic ledger: {led.n_events:,} events, {len(led.storages):,} storages, "
          f"{len(led.scopes):,} module calls (built in {t1 - t0:.1f} s, prepared in "
          f"{t2 - t1:.2f} s)")
    rates = []
    print(f"{'policy':44s} {'peak MiB':>9s} {'ms':>7s} {'events/s':>10s}")
    for text in policies(args.policies):
        pol = parse_policy(text)
        t = time.perf_counter()
        r = replay(prep, pol)
        dt = time.perf_counter() - t
        rates.append(led.n_events / dt)
        print(f"{text:44s} {r.peak_bytes / 2**20:9.1f} {dt * 1e3:7.1f} {rates[-1]:10.3g}")
    print(f"events/s over {len(rates)} policies: min {min(rates):.3g}, median "
          f"{statistics.median(rates):.3g}, max {max(rates):.3g} (target >= 1e7)")
    if args.no_measure:
        return
    _predict_vs_measure()


def _predict_vs_measure() -> None:
    from memledger.measure.runner import measure_script
    from memledger.replay.predict import predict
    from memledger.trace.session import trace_script

    pol = parse_policy("checkpoint:blocks.*")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gpt.ledger"
        trace_script("examples/train_gpt.py", [], out, steps=3, measure=False)
        t = time.perf_counter()
        rep = predict(Ledger.load(out), [pol])
        t_pred = time.perf_counter() - t
    t = time.perf_counter()
    m = measure_script("examples/train_gpt.py", [], pol, steps=3, time_steps=5)
    t_meas = time.perf_counter() - t
    print(f"tiny GPT, {pol.text()}: predict {t_pred * 1e3:.0f} ms (load + replay), measure "
          f"{t_meas:.1f} s (fresh process, 3 + 5 steps): measure/predict = "
          f"{t_meas / t_pred:.0f}x (target >= 100x); peaks {rep.policies[0].peak_bytes:,} "
          f"predicted vs {m.peak_bytes:,} measured")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
