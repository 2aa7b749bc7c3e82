"""Predicted vs measured peak on every causal-LM architecture transformers ships, each
shrunk from its default config (tests/clients/train_hf_arch.py), under five policies.

    .venv/bin/python benchmarks/hf_archs.py                        # every architecture
    .venv/bin/python benchmarks/hf_archs.py --archs mixtral,olmoe --loop="--amp"
    .venv/bin/python benchmarks/hf_archs.py --fake                 # fake ledger vs real
    .venv/bin/python benchmarks/hf_archs.py --loop="--lora"        # peft LoRA, all-linear
    .venv/bin/python benchmarks/hf_archs.py --task seq-cls         # every type with that head

Each architecture runs in a child process of its own (`--timeout` seconds; a library's
state or a slow trace stays there), through the tier's harness (tests/clients/harness.py:
the ledger and allocator passes, predict, and the measure worker). A row says OK when the
ledger (with its kernel scratch) equals the allocator and every policy's prediction equals
its measurement, else what differs; "cannot build" where the generic shrink makes no
working model (the architecture's own config rules), "script failed" where the untraced
script itself fails. `--fake` sets the fake ledger beside the real one instead.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def policies(glob: str) -> list[str]:
    from tests.clients.train_hf_arch import first_blocks
    one, two = first_blocks(glob)
    return [f"checkpoint:{glob}", f"checkpoint:{one}", f"selective:{glob}", f"offload:{glob}",
            f"checkpoint:{one}+offload:{two}"]


def one(arch: str, loop: list[str], fake: bool) -> dict:
    """In the child: the architecture's gaps, as JSON on stdout."""
    from tests.clients import train_hf_arch
    from tests.clients.harness import fake_client_gaps, gaps_of, run_client
    try:
        glob = train_hf_arch.blocks_glob(train_hf_arch.build(
            arch, "meta", "--lora" in loop, train_hf_arch.task_of(loop)))
    except Exception as e:   # noqa: BLE001 (the shrink's failure is the row)
        return {"arch": arch, "result": f"cannot build: {type(e).__name__}: "
                f"{str(e).splitlines()[0][:120] if str(e) else ''}"}
    argv = ["--arch", arch, "--steps", "3", *loop]
    span = ""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            if fake:
                g = fake_client_gaps("train_hf_arch.py", argv, policies(glob))
            else:
                run = run_client("train_hf_arch.py", argv, policies(glob))
                g = gaps_of(run)
                # the row means something only where a policy moves the peak
                low = min((p.measured for p in run.policies.values() if p.measured),
                          default=None)
                if low is None and not g:   # refused alike: nothing was compared
                    why = next(iter(run.policies.values())).predict_refusal or ""
                    return {"arch": arch, "glob": glob, "span": f"{run.allocator_peak:,}",
                            "result": f"every policy refused ({why.partition(': ')[2][:120]})"}
                span = f"{run.allocator_peak:,} -> {low:,}" if low else f"{run.allocator_peak:,}"
    except AssertionError as e:   # the harness: the script failed in a pass (its one line)
        where, _, why = str(e).partition(" of ")
        return {"arch": arch, "glob": glob, "result": f"script failed: {' '.join(where.split())}"
                f" ({why.partition(': exit ')[2][:160]})"}
    res = "OK" if not g else "; ".join(f"{k} {v:+,} B" if isinstance(v, int) else f"{k} {v}"
                                       for k, v in g.items())
    return {"arch": arch, "glob": glob, "span": span, "result": res}


def run_child(arch: str, loop: str, fake: bool, timeout: int) -> dict:
    cmd = [sys.executable, __file__, "--child", arch, f"--loop={loop}"] + (["--fake"] if fake
                                                                            else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"arch": arch, "result": f"timed out after {timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1][:160]
        return {"arch": arch, "result": f"child exit {p.returncode}: {tail}"}
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default="all", help="comma-separated model types, or 'all'")
    ap.add_argument("--loop", default="", help="the script's options: '--amp', '--accum 2', "
                    "'--lora'")
    from tests.clients.train_hf_arch import TASKS
    ap.add_argument("--task", default="causal-lm", choices=TASKS, metavar="TASK",
                    help=f"the head: {', '.join(TASKS)} (tests/clients/train_hf_arch.py)")
    ap.add_argument("--fake", action="store_true")
    ap.add_argument("--jobs", type=int, default=2, help="architectures run at once")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per architecture")
    ap.add_argument("--child", metavar="ARCH", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.loop.split(), a.fake)), flush=True)
        return
    loop = f"{a.loop} --task {a.task}".strip()
    if a.archs == "all":
        from tests.clients.train_hf_arch import archs
        chosen = archs(a.task)
    else:
        chosen = a.archs.split(",")
    counts = {"OK": 0, "gap": 0, "refused": 0, "other": 0}
    print("| architecture | layers | peak -> lowest measured under a policy | result |\n"
          "|---|---|---:|---|", flush=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        for row in pool.map(lambda x: run_child(x, loop, a.fake, a.timeout), chosen):
            kind = ("OK" if row["result"] == "OK" else "refused" if row["result"].startswith(
                "every policy refused") else "other" if row["result"].startswith(
                ("cannot build", "script failed", "timed out", "child exit")) else "gap")
            counts[kind] += 1
            print(f"| {row['arch']} | `{row.get('glob', '')}` | {row.get('span', '')} | "
                  f"{row['result']} |", flush=True)
    print(f"\n{counts['OK']} exact, {counts['gap']} with a gap, {counts['refused']} with every "
          f"policy refused alike, {counts['other']} not run (of {len(chosen)})")


if __name__ == "__main__":
    main()
