"""Predicted vs measured peak and added step time for every (example x policy).

    .venv/bin/python benchmarks/accuracy.py                       # all examples, markdown
    .venv/bin/python benchmarks/accuracy.py --example gpt --rounds 2 --cycles 10

For each example: trace 3 steps once (`memledger trace`: ledger, allocator pass, untraced
module/op timings, the machine's calibration), then

1. predictions: `memledger predict --json` of every policy, run `--repeats` times in fresh
   processes on the same ledger; the spread of each added time across runs is reported
   (the goal is 0: nothing is timed while predicting).
2. peaks: one `measure_script` run per policy (a fresh process: the allocator's peak over
   3 steps).
3. added time, interleaved (memledger/measure/interleave.py, Note [Interleaved timing]):
   one process runs the script while the policies take turns, one optimizer step each,
   for `--cycles` cycles; added time = median step time under the policy - median step
   time of the baseline's turns. Repeated in `--rounds` processes; the median of rounds.

"ratio at trace speed" scales the prediction by how much slower this machine ran a
baseline step now than while `trace` took the ledger's timings (the speed column: on a
shared machine the neighbours' load slows even CPU time, through caches and shared cores,
and changes from minute to minute); "ratio" is the raw one.

`--retrace`: every round traces the example again right before its measurement (a user's
order: trace, then run), predicts from that ledger, and the ratio is each round's
prediction over the same round's measurement (the median of rounds); the speed between a
trace and its measurement is then a minute, not the whole run. The predictions column
lists each round's.

Step time is the thread CPU time of a step with OMP_NUM_THREADS=1 (one thread: CPU time is
the work itself, and the neighbours' load stretches it far less than wall time); the
wall-clock added time is printed too. Prints one markdown table per example, ready for
docs/accuracy.md ("Peak memory and added step time, every example x policy"); `--out FILE`
writes the same tables to FILE.

When is a ratio a hit or a miss? (docs/accuracy.md, "Which ratios the measurement can
judge") Each measured added time comes with a 90 % interval: 2,000 bootstrap resamples of
the timed steps (each round's policy and baseline steps resampled, the added time
recomputed as above, seed 0). The goal is 15 %, so a measurement can judge a ratio only if
its own interval lies within +-15 % of its median; otherwise the verdict is "unresolved"
and the table shows the interval instead of claiming a hit or a miss. A resolved ratio is
"hit" within 0.85-1.15, else "miss".

On a quiet machine (what the tables in docs/accuracy.md need; load average well under the
core count, nothing else running):

    .venv/bin/python benchmarks/accuracy.py --rounds 3 --cycles 10 --out /tmp/accuracy.md

(about 20 min for the three examples on 2 cores; the script sets OMP_NUM_THREADS=1 itself)

then paste /tmp/accuracy.md over the tables in docs/accuracy.md with the date and the load
averages printed in each table's heading. Delete the cached calibration first
(`python -m memledger.measure.calibrate` measures it again) if it was taken under load:
`memledger predict` says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
# One intra-op thread in every process (trace, measure workers): with two or more, idle
# OpenMP threads spin on a shared machine and CPU time stops measuring work.
os.environ["OMP_NUM_THREADS"] = "1"

from judge import added_interval, verdict  # noqa: E402
from memledger.measure.runner import measure_script  # noqa: E402
from memledger.replay.policies import parse_policy  # noqa: E402
from memledger.trace.session import trace_script  # noqa: E402

# name: (script, its arguments, policies)
BERT_ARGS = ["--model", "bert", "--layers", "3", "--hidden", "64", "--autocast", "bf16",
             "--accum", "2", "--clip", "1"]
EXAMPLES = {
    "gpt": ("examples/train_gpt.py", [], [
        "checkpoint:blocks.*", "checkpoint:blocks.[0-1]", "selective:blocks.*",
        "selective:@Block:save=addmm", "offload:blocks.*", "offload:blocks.*:min=1MiB",
        "checkpoint:blocks.[0-1]+offload:blocks.[2-3]", "checkpoint:**.mlp"]),
    "cnn": ("examples/train_cnn.py", [], [
        "checkpoint:blocks.*", "checkpoint:blocks.[0-1]", "selective:blocks.*",
        "offload:blocks.*", "offload:blocks.[1-2]",
        "checkpoint:blocks.0+offload:blocks.[1-2]"]),
    "mlp": ("examples/train_mlp.py", [], [
        "checkpoint:fc*", "selective:fc*", "offload:**", "offload:fc2",
        "checkpoint:fc1+offload:fc2"]),
    # a client nobody here wrote: transformers BERT built from config, bf16 autocast,
    # 2 micro-batches per step, clipping (tests/clients/train_hf.py)
    "bert": ("tests/clients/train_hf.py", BERT_ARGS, [
        "checkpoint:bert.encoder.layer.*", "selective:bert.encoder.layer.*",
        "offload:bert.encoder.layer.*", "checkpoint:bert.encoder.layer.0"]),
    # another: transformers LLaMA (RoPE, RMSNorm, SwiGLU, SDPA attention), 3 layers,
    # the KV cache off (checkpointing refuses a block that writes it)
    "llama": ("tests/clients/train_hf.py", ["--model", "llama", "--layers", "3", "--hidden",
                                            "64", "--no-cache", "--batch-size", "4"], [
        "checkpoint:model.layers.*", "selective:model.layers.*", "offload:model.layers.*",
        "checkpoint:model.layers.*.mlp"]),
    # torch's own nn.TransformerEncoder (pre-norm, nn.MultiheadAttention), AdamW + cosine
    "encoder": ("tests/clients/train_torch_encoder.py", ["--batch-size", "8"], [
        "checkpoint:encoder.layers.*", "selective:encoder.layers.*",
        "offload:encoder.layers.*", "checkpoint:**.self_attn"]),
}


def predictions(ledger: Path, policies: list[str], repeats: int) -> list[dict]:
    """`memledger predict --json` in `repeats` fresh processes; one dict per run."""
    cmd = [sys.executable, "-m", "memledger", "predict", str(ledger), "--json"]
    for p in policies:
        cmd += ["--policy", p]
    return [json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            for _ in range(repeats)]


def interleaved(script: str, args: list[str], policies: list[str], cycles: int) -> dict:
    """Step times of `policies` taking turns in one process (memledger.measure.interleave)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "t.json"
        steps = 3 + len(policies) * (cycles + 1) * 3       # turns of 3 steps
        cmd = [sys.executable, "-m", "memledger.measure.interleave", "--out", str(out),
               "--cycles", str(cycles)]
        for p in policies:
            cmd += ["--policy", p]
        subprocess.run(cmd + [script, "--", *args, "--steps", str(steps + 1)], check=True,
                       capture_output=True)
        return json.loads(out.read_text())


def cycles_for(step_s: float, cycles: int, min_seconds: float) -> int:
    """At least `cycles`, and enough that each policy's timed steps (2 of every turn of 3)
    take `min_seconds` a round: the MLP's 3.7 ms steps over 10 cycles gave each policy 74 ms
    of timed steps, and intervals wider than +-15 % (unresolved) on +0.2-1.2 ms."""
    if step_s <= 0:
        return cycles
    return max(cycles, math.ceil(min_seconds / (2 * step_s)))


def traced_predictions(name: str, pols: list[str], repeats: int) -> list[dict]:
    """Trace the example (3 steps, the timed steps and probes after them) and predict every
    policy from the ledger in `repeats` fresh processes."""
    script, args, _ = EXAMPLES[name]
    with tempfile.TemporaryDirectory() as tmp:
        led = Path(tmp) / f"{name}.ledger"
        # the script's own step count: 3 traced, the timed steps and the probes after them
        trace_script(str(ROOT / script), [*args, "--steps", "40"] if args else [], led,
                     steps=3)
        return predictions(led, pols, repeats)


def by_policy(run: dict) -> dict[str, dict]:
    return {p["policy"]: p for p in run["policies"]}


def predicted(pred: dict[str, dict], p: str) -> dict:
    text = parse_policy(p).text()
    return pred[text] if text in pred else pred[p]


def run(name: str, rounds: int, cycles: int, repeats: int, min_seconds: float = 0.0,
        retrace: bool = False) -> list[str]:
    script, args, pols = EXAMPLES[name]
    script = str(ROOT / script)
    runs = traced_predictions(name, pols, repeats)
    pred = by_policy(runs[0])
    spread = {p: max(abs(r["policies"][i]["added_time_s"] - runs[0]["policies"][i][
        "added_time_s"]) for r in runs) for i, p in enumerate(pred)}
    peaks = {p: measure_script(script, [*args, "--steps", "5"] if args else [], parse_policy(p),
                               steps=3, time_steps=1).peak_bytes
             for p in pols}
    cpu: dict[str, list[float]] = {p: [] for p in pols}
    wall: dict[str, list[float]] = {p: [] for p in pols}
    base_steps = []
    samples: dict[str, list] = {p: [] for p in pols}
    load0 = os.getloadavg()[0]
    cycles = cycles_for(runs[0].get("timed_step_s", 0.0), cycles, min_seconds)
    round_preds = [runs[0]]      # the prediction each round is compared with
    for r in range(rounds):
        if retrace and r > 0:
            again = traced_predictions(name, pols, repeats)
            round_preds.append(again[0])
            for p in pols:   # on every ledger, predictions must not move between runs
                spread[parse_policy(p).text()] = max(
                    spread.get(parse_policy(p).text(), 0.0),
                    *(abs(predicted(by_policy(a), p)["added_time_s"]
                          - predicted(by_policy(again[0]), p)["added_time_s"]) for a in again))
        t = interleaved(script, args, ["none"] + pols, cycles)
        base = statistics.median(t["cpu_s"]["none"])
        base_w = statistics.median(t["wall_s"]["none"])
        base_steps.append(base)
        for p in pols:
            key = str(parse_policy(p))
            cpu[p].append(statistics.median(t["cpu_s"][key]) - base)
            samples[p].append((t["cpu_s"][key], t["cpu_s"]["none"]))
            wall[p].append(statistics.median(t["wall_s"][key]) - base_w)
            print(f"  round {r + 1} {p}: {cpu[p][-1] * 1e3:+.2f} ms cpu", file=sys.stderr,
                  flush=True)
    if not retrace:
        round_preds = [runs[0]] * rounds
    timed_steps = [rp.get("timed_step_s", 0.0) for rp in round_preds]
    speeds = [b / t for b, t in zip(base_steps, timed_steps) if t]
    speed = statistics.median(speeds) if speeds else 1.0
    timed = statistics.median(timed_steps)
    lines = [f"### {script.rpartition('/')[2]} (baseline step {statistics.median(base_steps) * 1e3:.1f}"
             f" ms CPU, {timed * 1e3:.1f} ms when the ledger's timings were taken: speed "
             f"{speed:.2f}"
             f"{' (median of rounds, each traced again)' if retrace else ''};"
             f" {rounds} rounds x {cycles} interleaved cycles; predictions "
             f"identical over {repeats} runs: "
             f"{'yes' if max(spread.values()) == 0 else 'no, max spread %.3g ms' % (max(spread.values()) * 1e3)};"
             f" load average {load0:.1f} -> {os.getloadavg()[0]:.1f})",
             "",
             "| policy | predicted peak | measured peak | predicted added (band) | measured "
             "added (CPU, median) | 90 % interval | rounds | ratio | verdict | ratio at trace "
             "speed | wall added |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|"]
    for p in pols:
        pp = predicted(pred, p)
        per_round = [predicted(by_policy(rp), p)["added_time_s"] for rp in round_preds]
        added = statistics.median(cpu[p])
        lo, hi = added_interval(samples[p])
        if retrace:   # each round's prediction against its own measurement
            ratios = [a / m for a, m in zip(per_round, cpu[p]) if m > 0]
            r_mid = statistics.median(ratios) if ratios else None
            normed = [a * b / t / m for a, m, b, t in zip(per_round, cpu[p], base_steps,
                                                          timed_steps) if m > 0 and t]
            n_mid = statistics.median(normed) if normed else None
            shown = " / ".join(f"{a * 1e3:.2f}" for a in per_round) + " ms"
        else:
            r_mid = pp["added_time_s"] / added if added > 0 else None
            n_mid = pp["added_time_s"] * speed / added if added > 0 else None
            shown = (f"{pp['added_time_s'] * 1e3:.2f} ({pp['added_time_lo_s'] * 1e3:.2f}-"
                     f"{pp['added_time_hi_s'] * 1e3:.2f}) ms")
        ratio = f"{r_mid:.2f}" if r_mid is not None else "-"
        judged = verdict(r_mid * added, added, lo, hi) if r_mid is not None else "-"
        norm = f"{n_mid:.2f}" if n_mid is not None else "-"
        lines.append(
            f"| `{p}` | {pp['peak_bytes']:,} | {peaks[p]:,} | "
            f"{shown} | {added * 1e3:.2f} ms | "
            f"{lo * 1e3:.2f}-{hi * 1e3:.2f} ms | "
            f"{', '.join(f'{c * 1e3:.2f}' for c in cpu[p])} | {ratio} | {judged} | {norm} | "
            f"{statistics.median(wall[p]) * 1e3:.2f} ms |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__[__doc__.index("When is a ratio"):],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", choices=list(EXAMPLES), action="append")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--min-seconds", type=float, default=1.0,
                    help="more cycles for short steps: each policy's timed steps take at "
                         "least this long per round")
    ap.add_argument("--repeats", type=int, default=3, help="predict runs per ledger")
    ap.add_argument("--out", type=Path, help="also write the markdown tables to this file")
    ap.add_argument("--retrace", action="store_true",
                    help="trace again before each round; ratios per round (see above)")
    args = ap.parse_args()
    out = []
    for name in args.example or list(EXAMPLES):
        out += run(name, args.rounds, args.cycles, args.repeats, args.min_seconds,
                   args.retrace) + [""]
    print("\n".join(out))
    if args.out:
        args.out.write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
