"""The recompute probe against the training steps it predicts, in ONE process, interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_vs_training.py --cycles 8
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/probe_vs_training.py --example cnn

One process builds the example's model (benchmarks/added_time_parts.py) and, for
`--cycles` cycles, runs in turn: `--turn` plain training steps (fresh batch, cross-entropy,
zero_grad, backward, AdamW step), `--turn` with the first probe region checkpointed, `--turn`
steps with every probe region checkpointed by
memledger's own `apply_policy` (as `compare` and the interleaved benchmark run it; the
first step of each turn and the first cycle untimed), then `--probe-reps` repetitions of
`recompute_probe` itself (memledger/trace/timing.py, what `trace` records), with and
without the optimizer step in its step (`--probe-optimizer`). Thread CPU
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
    ap.add_argument("--probe-optimizer", nargs="+", choices=["with", "without"],
                    default=["with", "without"],
                    help="the probe's step with the script's kind of optimizer step (Note "
                    "[The probe's optimizer step], what trace runs) or without (before); "
                    "both: side by side")
    args = ap.parse_args()
    torch.set_num_threads(1)
    setup, batch = SETUPS[args.example]
    model, batch_fn, loss_fn = setup(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    model.train()
    paths = probe_regions(model)
    named = dict(model.named_modules())
    policies = {"ckpt": parse_policy("+".join(f"checkpoint:{p}" for p in paths)),
                "one": parse_policy(f"checkpoint:{paths[0]}")}
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

    rows = {"plain": [], "one": [], "ckpt": []}
    turns = sorted(set(args.probe_turn))
    probes = {(t, o): {"factor": [], "region_ns": [], "step_ns": []} for t in turns
              for o in args.probe_optimizer}
    load0 = os.getloadavg()[0]
    install()
    for _ in range(3):
        step()
    fixed = batch_fn()
    for c in range(args.cycles + 1):
        for mode in ("plain", "one", "ckpt"):
            handle = apply_policy(model, policies[mode]) if mode != "plain" else None
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
            for t, o in probes:   # each variant in every cycle, side by side
                got = recompute_probe(ProbeInput(model, (fixed[0],),
                                                 optimizer=opt if o == "with" else None),
                                      clock, max_reps=args.probe_reps, turn=t)
                for key in probes[t, o]:
                    probes[t, o][key] += got.get(key, [])
            install()
    load1 = os.getloadavg()[0]

    def med(mode: str, i: int) -> float:
        return statistics.median(r[i] for r in rows[mode]) / 1e6

    plain, ckpt, fwd, rerun = med("plain", 0), med("ckpt", 0), med("plain", 1), med("ckpt", 2)
    one, rerun_one = med("one", 0), med("one", 2)
    n = len(paths)
    print(f"{args.example}: {n} regions ({paths[0]} ...), {len(rows['ckpt'])} timed steps "
          f"per mode, {args.probe_reps} probe repetitions per cycle; thread CPU ms, medians; "
          f"load average {load0:.2f} -> {load1:.2f}")
    # besides the re-run (Note [A checkpointed step's own cost]): D = step - plain - re-run,
    # per region (D_all - D_one) / (n - 1), per step D_one - per region
    d_all, d_one = ckpt - plain - rerun, one - plain - rerun_one
    print("| source | plain step | first region checkpointed: added | all: added | re-run "
          "factor | D_one | D_all | per region | per step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    reg_t = (d_all - d_one) / max(n - 1, 1)
    print(f"| training (apply_policy) | {plain:.2f} | {one - plain:+.2f} | {ckpt - plain:+.2f} | "
          f"{rerun / fwd:.3f} | {d_one:.3f} | {d_all:.3f} | {reg_t:.3f} | {d_one - reg_t:.3f} |")
    for (t, o), probe in probes.items():
        if not probe["region_ns"]:
            continue
        f, reg = statistics.median(probe["factor"]), statistics.median(probe["region_ns"]) / 1e6
        per_step = statistics.median(probe["step_ns"]) / 1e6 if probe["step_ns"] else 0.0
        q = sorted(probe["region_ns"])
        print(f"| recompute_probe, turn {t}, {o} optimizer | | | "
              f"{f * fwd + reg * n + per_step:+.2f} (from its "
              f"parts) | {f:.3f} | {reg + per_step:.3f} | {reg * n + per_step:.3f} | {reg:.3f} "
              f"(reps {q[0] / 1e6:.2f} to {q[-1] / 1e6:.2f}) | {per_step:.3f} |")


if __name__ == "__main__":
    main()
