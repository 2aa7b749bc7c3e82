"""The recompute probe against the training steps it predicts, in ONE process, interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_vs_training.py --cycles 8
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_vs_training.py --example cnn

One process builds the example's model (benchmarks/added_time_parts.py) and, for
`--cycles` cycles, runs in turn: `--turn` plain training steps (fresh batch, cross-entropy,
zero_grad, backward, AdamW step), `--turn` steps with every probe region checkpointed by
memledger's own `apply_policy` (as `compare` and the interleaved benchmark run it; the
first step of each turn and the first cycle untimed), then `--probe-reps` repetitions of
`recompute_probe` itself (memledger/trace/timing.py, what `trace` records). Thread CPU
time, one thread. Each region's forward is timed as it runs, in training as in the probe,
so the re-run inside backward is measured, not assumed. It prints per source: the
plain step, the checkpointed step, added, re-run factor and the cost per region besides
the re-run (training: median(ckpt) - median(plain) - median(re-run), over regions; probe:
median of its repetitions' region_ns), with the load average before and after.
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

import torch  # noqa: E402

from added_time_parts import SETUPS  # noqa: E402
from memledger.measure.apply import apply_policy  # noqa: E402
from memledger.replay.policies import parse_policy  # noqa: E402
from memledger.trace.timing import ProbeInput, probe_regions, recompute_probe  # noqa: E402

clock = time.thread_time_ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", choices=list(SETUPS), default="gpt")
    ap.add_argument("--cycles", type=int, default=8)
    ap.add_argument("--turn", type=int, default=3)
    ap.add_argument("--probe-reps", type=int, default=2)
    ap.add_argument("--probe-turn", type=int, nargs="+", default=[2],
                    help="steps per mode in the probe, the first untimed (memledger/trace/"
                    "timing.py `_RegionSteps.reps`); several: each, side by side")
    args = ap.parse_args()
    torch.set_num_threads(1)
    setup, batch = SETUPS[args.example]
    model, batch_fn, loss_fn = setup(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    model.train()
    paths = probe_regions(model)
    named = dict(model.named_modules())
    policy = parse_policy("+".join(f"checkpoint:{p}" for p in paths))
    acc = {"fwd": 0, "rerun": 0, "phase": "fwd"}

    def timed(orig):
        def forward(*a, **k):
            t0 = clock()
            try:
                return orig(*a, **k)
            finally:
                acc["fwd" if acc["phase"] == "fwd" else "rerun"] += clock() - t0
        return forward

    def install() -> None:        # under apply_policy's wrapper, as the probe's `timed`
        for p in paths:
            m = named[p]
            m.forward = timed(type(m).forward.__get__(m))

    def step() -> tuple[int, int, int]:
        x, y = batch_fn()
        acc.update(fwd=0, rerun=0, phase="fwd")
        t0 = clock()
        out = model(x)
        loss = loss_fn(out, y)
        opt.zero_grad(set_to_none=True)
        acc["phase"] = "bwd"
        loss.backward()
        opt.step()
        return clock() - t0, acc["fwd"], acc["rerun"]

    rows = {"plain": [], "ckpt": []}
    turns = sorted(set(args.probe_turn))
    probes = {t: {"factor": [], "region_ns": []} for t in turns}
    load0 = os.getloadavg()[0]
    install()
    for _ in range(3):
        step()
    fixed = batch_fn()
    for c in range(args.cycles + 1):
        for mode in ("plain", "ckpt"):
            handle = apply_policy(model, policy) if mode == "ckpt" else None
            for k in range(args.turn):
                r = step()
                if c and k:
                    rows[mode].append(r)
            if handle is not None:
                handle.remove()       # pops our timing wrappers too
                install()
        if c:
            for p in paths:
                named[p].__dict__.pop("forward", None)
            for t in turns:   # each turn length in every cycle, side by side
                got = recompute_probe(ProbeInput(model, (fixed[0],)), clock,
                                      max_reps=args.probe_reps, turn=t)
                for key in probes[t]:
                    probes[t][key] += got.get(key, [])
            install()
    load1 = os.getloadavg()[0]

    def med(mode: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[mode]) / 1e6

    plain, ckpt, fwd, rerun = med("plain", 0), med("ckpt", 0), med("plain", 1), med("ckpt", 2)
    n = len(paths)
    print(f"{args.example}: {n} regions ({paths[0]} ...), {len(rows['ckpt'])} timed steps "
          f"per mode, {args.probe_reps} probe repetitions per cycle; thread CPU ms, medians; "
          f"load average {load0:.2f} -> {load1:.2f}")
    print("| source | plain step | checkpointed step | added | re-run factor | per region besides re-run |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| training (apply_policy) | {plain:.2f} | {ckpt:.2f} | {ckpt - plain:+.2f} | "
          f"{rerun / fwd:.3f} | {(ckpt - plain - rerun) / n:.3f} |")
    for t, probe in probes.items():
        if not probe["region_ns"]:
            continue
        f, reg = statistics.median(probe["factor"]), statistics.median(probe["region_ns"]) / 1e6
        q = sorted(probe["region_ns"])
        print(f"| recompute_probe, turn {t} | | | {f * fwd + reg * n:+.2f} (from its factor and "
              f"region) | {f:.3f} | {reg:.3f} (reps {q[0] / 1e6:.2f} to {q[-1] / 1e6:.2f}) |")


if __name__ == "__main__":
    main()
