"""Predicted vs measured peak and added step time for every (example x policy).

    .venv/bin/python benchmarks/accuracy.py                       # all examples, markdown
    .venv/bin/python benchmarks/accuracy.py --example gpt --time-steps 10

For each example: trace 3 steps (`memledger trace`, with its allocator pass), measure the
baseline (`none`) for its untraced step time, then for each policy predict (replay, with
that step time to scale traced recompute times) and measure (a fresh process: peak over 3
steps, median of --time-steps further steps). Added time = step time - baseline step time,
in process CPU time with OMP_NUM_THREADS=1 (the development machines are shared: wall time
there mostly measures the neighbours, and spinning OpenMP threads inflate multi-threaded CPU
time; the wall-time difference is printed too).
Prints one markdown table per example, ready for docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# One intra-op thread in every process (trace, measure workers): with two or more, idle
# OpenMP threads spin on a shared machine and CPU time stops measuring work.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from memledger.ledger.model import Ledger  # noqa: E402
from memledger.measure.runner import measure_script  # noqa: E402
from memledger.replay.policies import parse_policy  # noqa: E402
from memledger.replay.predict import predict  # noqa: E402
from memledger.trace.session import trace_script  # noqa: E402

EXAMPLES = {
    "gpt": ("examples/train_gpt.py", [
        "checkpoint:blocks.*", "checkpoint:blocks.[0-1]", "selective:blocks.*",
        "selective:@Block:save=addmm", "offload:blocks.*", "offload:blocks.*:min=1MiB",
        "checkpoint:blocks.[0-1]+offload:blocks.[2-3]", "checkpoint:**.mlp"]),
    "cnn": ("examples/train_cnn.py", [
        "checkpoint:blocks.*", "checkpoint:blocks.[0-1]", "selective:blocks.*",
        "offload:blocks.*", "offload:blocks.[1-2]",
        "checkpoint:blocks.0+offload:blocks.[1-2]"]),
    "mlp": ("examples/train_mlp.py", [
        "checkpoint:fc*", "checkpoint:act", "selective:@ReLU", "offload:**",
        "offload:fc2", "checkpoint:act+offload:fc2"]),
}


def run(name: str, time_steps: int) -> list[str]:
    script, pols = EXAMPLES[name]
    with tempfile.TemporaryDirectory() as tmp:
        led_path = Path(tmp) / f"{name}.ledger"
        trace_script(script, [], led_path, steps=3)
        led = Ledger.load(led_path)
    base = measure_script(script, [], parse_policy("none"), steps=3, time_steps=time_steps)
    policies = [parse_policy("none")] + [parse_policy(p) for p in pols]
    rep = predict(led, policies, step_time_s=base.step_cpu_time_s)
    lines = [f"### {script} (baseline step: {base.step_time_s * 1e3:.1f} ms wall, "
             f"{base.step_cpu_time_s * 1e3:.1f} ms CPU, untraced)", "",
             "| policy | predicted peak | measured peak | error | predicted added | "
             "measured added (CPU) | ratio | measured added (wall) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for pol, pred in zip(policies, rep.policies):
        m = base if pol.is_baseline else measure_script(script, [], pol, steps=3,
                                                        time_steps=time_steps)
        err = (pred.peak_bytes - m.peak_bytes) / m.peak_bytes * 100
        added = m.step_cpu_time_s - base.step_cpu_time_s
        wall = m.step_time_s - base.step_time_s
        ratio = f"{pred.added_time_s / added:.2f}" if not pol.is_baseline and added > 0 else "-"
        lines.append(f"| `{pol.text()}` | {pred.peak_bytes:,} | {m.peak_bytes:,} | "
                     f"{err:+.2f} % | {pred.added_time_s * 1e3:.1f} ms | {added * 1e3:.1f} ms | "
                     f"{ratio} | {wall * 1e3:.1f} ms |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", choices=list(EXAMPLES), action="append")
    ap.add_argument("--time-steps", type=int, default=10)
    args = ap.parse_args()
    out = []
    for name in args.example or list(EXAMPLES):
        out += run(name, args.time_steps) + [""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
