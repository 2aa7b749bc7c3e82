"""What a user waits for many times a day: start-up, the Python API, `memledger trace`.

    .venv/bin/python benchmarks/daily.py                  # all four, ~4 minutes idle
    .venv/bin/python benchmarks/daily.py --only api --repeat 15

Every figure is measured side by side in this one run, modes interleaved round-robin so
that machine noise hits all alike, and printed as a median with its ratio to the anchor of
its table. Wall time and CPU time both: on a shared machine wall time mostly measures the
neighbours, CPU time (the process's own, children included) does not. One intra-op thread
everywhere (OMP_NUM_THREADS=1), as benchmarks/accuracy.py: idle OpenMP threads spin.

1. Start-up (fresh processes): `python -c pass` and `python -c "import torch"` are the
   anchors; `memledger --help` and `memledger show` of a small ledger should sit near the
   first, far below the second (goal: < 1 s wall).
2. The Python API (one process, the tiny GPT step of examples/train_gpt.py): one step
   untraced; one step inside `with memledger.trace():` (entering and leaving included, the
   ledger not read); the same plus the first read (`.summary()`, which builds the tables);
   the anchors `torch.profiler.profile(profile_memory=True, record_shapes=True,
   with_stack=True)` and `MemTracker` around one step, entry and exit included; and the
   per-step cost of N steps inside one block beside an empty TorchDispatchMode, the floor
   under any dispatch-mode tool (goals: one step ≤ 1.2×, per step ≤ 1.05×).
3. End to end (fresh processes): `python examples/train_gpt.py --steps 3` against
   `memledger trace examples/train_gpt.py --steps 3` (goal ≤ 2×), with `--no-timing` (memory only, as
   `check` traces) and with `--no-measure`,
   and each of its two passes alone (where the time goes); `memledger compare` of one
   policy (ten workers); and `trace` and `compare` again with cold starts
   (MEMLEDGER_WARM_START=0: every worker a fresh process, Note [Warm starts]).
4. Several ranks (fresh processes, gloo on the CPU): `torchrun --nproc-per-node 2
   examples/train_fsdp.py --steps 2` is the anchor; `memledger trace --nproc 2 --steps 1`
   of it (two torchrun launches: the ledger pass and the allocator pass), with warm ranks
   and cold (Note [Warm ranks], memledger/warm_rank.py).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
MEMLEDGER = [PY, "-m", "memledger"]


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_process(cmd: list[str], cwd: Path = ROOT,
                env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process, its children included (`env`: added to ours)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return time.perf_counter() - t0, _children_cpu() - c0


def table(title: str, rows: dict[str, list[tuple[float, float]]], anchor: str,
          unit: str = "ms") -> None:
    scale = 1e3 if unit == "ms" else 1.0
    base_w = statistics.median(w for w, _ in rows[anchor])
    base_c = statistics.median(c for _, c in rows[anchor])
    print(f"\n{title} (median of {len(rows[anchor])}; ratios to {anchor!r})")
    print(f"{'':<44}{'wall':>10}{'ratio':>8}{'CPU':>10}{'ratio':>8}")
    for name, xs in rows.items():
        w = statistics.median(x for x, _ in xs)
        c = statistics.median(x for _, x in xs)
        digits = 0 if unit == "ms" else 1
        print(f"{name:<44}{w * scale:>8.{digits}f}{unit:>2}{w / base_w:>7.2f}x"
              f"{c * scale:>8.{digits}f}{unit:>2}{c / base_c:>7.2f}x")


def round_robin(modes: dict[str, Callable[[], tuple[float, float]]], repeat: int,
                warmup: int = 1) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in modes}
    for i in range(warmup + repeat):
        for name, fn in modes.items():
            x = fn()
            if i >= warmup:
                out[name].append(x)
    return out


# ---- 1. start-up -------------------------------------------------------------------------
def startup(repeat: int, tmp: Path) -> None:
    ledger = tmp / "mlp.ledger"
    subprocess.run([*MEMLEDGER, "trace", "examples/train_mlp.py", "--steps", "2", "-o",
                    str(ledger)], check=True, cwd=ROOT, capture_output=True)
    # the same ledger without the summary `trace` kept (Note [The summary kept in the
    # ledger]): what `show` costs when it reads the ledger whole (a ledger from elsewhere)
    whole = tmp / "mlp-whole.ledger"
    data = ledger.read_bytes()
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1
    assert data[cut:].startswith(b'{"k":"summary"'), "trace kept no summary"
    whole.write_bytes(data[:cut])
    cmds = {
        "python -c pass": [PY, "-c", "pass"],
        "python -c 'import torch'": [PY, "-c", "import torch"],
        "memledger --help": [*MEMLEDGER, "--help"],
        "memledger show mlp.ledger (2 steps)": [*MEMLEDGER, "show", str(ledger)],
        "memledger show mlp.ledger --json": [*MEMLEDGER, "show", str(ledger), "--json"],
        "memledger show, read whole (no kept summary)": [*MEMLEDGER, "show", str(whole)],
        "memledger show --timeline (reads it whole)": [*MEMLEDGER, "show", str(ledger),
                                                       "--timeline"],
    }
    rows = round_robin({k: (lambda c=c: run_process(c)) for k, c in cmds.items()}, repeat)
    table("1. Start-up, fresh processes", rows, "python -c 'import torch'")


# ---- 2. the Python API -------------------------------------------------------------------
def _ours(name: str) -> bool:
    return name == "memledger" or name.startswith("memledger.")


def other_memledger(root: str) -> tuple[object, Callable[[], contextlib.AbstractContextManager]]:
    """The `memledger` package of another checkout (`--baseline`), imported beside this one
    in this process, and a context manager under which its modules are the ones `import`
    finds (its own lazy imports inside `trace()` resolve to it, not to this tree's)."""
    root = str(Path(root).resolve())
    mine = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in mine:
        del sys.modules[k]
    sys.path.insert(0, root)
    try:
        import memledger as other
        theirs = {k: v for k, v in sys.modules.items() if _ours(k)}
    finally:
        sys.path.remove(root)
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(mine)
    assert Path(other.__file__).resolve().is_relative_to(root), other.__file__

    @contextlib.contextmanager
    def swapped():
        now = {k: v for k, v in sys.modules.items() if _ours(k)}
        for k in now:
            del sys.modules[k]
        sys.modules.update(theirs)
        sys.path.insert(0, root)
        try:
            yield
        finally:
            sys.path.remove(root)
            theirs.update({k: v for k, v in sys.modules.items() if _ours(k)})
            for k in [k for k in sys.modules if _ours(k)]:
                del sys.modules[k]
            sys.modules.update(now)
    return other, swapped


def api(repeat: int, per_step_n: int, baseline: str | None = None) -> None:
    import torch

    import memledger
    from tiny_gpt import tiny_gpt_step

    step, model, opt = tiny_gpt_step()

    def timed(ctx_factory: Callable[[], contextlib.AbstractContextManager], n: int = 1,
              after: Callable[[object], None] | None = None,
              around: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
              ) -> Callable[[], tuple]:
        def run() -> tuple[float, float]:
            with around():   # the baseline's modules in place (not timed)
                c0, t0 = time.process_time(), time.perf_counter()
                with ctx_factory() as handle:
                    for _ in range(n):
                        step()
                if after is not None:
                    after(handle)
                t = time.perf_counter() - t0, time.process_time() - c0
            return t
        return run

    def profiler():
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      profile_memory=True, record_shapes=True,
                                      with_stack=True)

    def memtracker():
        from torch.distributed._tools.mem_tracker import MemTracker

        mt = MemTracker()
        mt.track_external(model, opt)
        return mt

    from torch.utils._python_dispatch import TorchDispatchMode

    class _EmptyMode(TorchDispatchMode):
        """The floor under any tool built on a dispatch mode: one Python call per op."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    for _ in range(3):
        step()
    modes = {
        "one step, untraced": timed(contextlib.nullcontext),
        "one step in memledger.trace() (entry+exit)": timed(memledger.trace),
        "  ... and the first read (.summary())": timed(memledger.trace,
                                                       after=lambda h: h.summary()),
        "one step in torch.profiler (entry+exit)": timed(profiler),
        "one step in MemTracker (entry+exit)": timed(memtracker),
        f"{per_step_n} steps, untraced": timed(contextlib.nullcontext, per_step_n),
        f"{per_step_n} steps in one memledger.trace()": timed(memledger.trace, per_step_n),
        f"{per_step_n} steps in an empty dispatch mode (floor)": timed(_EmptyMode, per_step_n),
    }
    if baseline:   # before/after in one run: the other checkout's tracer, same steps
        other, swapped = other_memledger(baseline)
        print(f"baseline: {Path(other.__file__).parent.parent}")
        modes["one step in memledger.trace(), baseline"] = timed(other.trace, around=swapped)
        modes[f"{per_step_n} steps in one memledger.trace(), baseline"] = timed(
            other.trace, per_step_n, around=swapped)
    rows = round_robin(modes, repeat)
    print(f"\n2. The Python API: tiny GPT (examples/train_gpt.py defaults), torch "
          f"{torch.__version__}, 1 thread")
    one = {k: v for k, v in rows.items() if k.startswith(("one", "  "))}
    table("   one step, entering and leaving included", one, "one step, untraced")
    many = {k: v for k, v in rows.items() if k.startswith(str(per_step_n))}
    table(f"   per step: {per_step_n} steps in one block", many, f"{per_step_n} steps, untraced")


# ---- 3. end to end -----------------------------------------------------------------------
def end_to_end(repeat: int, tmp: Path, model_args: list[str],
               baseline: str | None = None) -> None:
    """`baseline`: another checkout of memledger (e.g. `git archive main | tar -x -C DIR`)
    whose `memledger trace` runs in the same round-robin, for a before/after in one run."""
    script = "examples/train_gpt.py"
    cmds = {
        "python train_gpt.py --steps 3": [PY, script, "--steps", "3", *model_args],
        "memledger trace --steps 3": [*MEMLEDGER, "trace", script, "--steps", "3", "-o",
                                      str(tmp / "e2e.ledger"), "--", *model_args],
        # memory only (what `check` runs): Note [Memory-only traces] in trace/session.py
        "memledger trace --steps 3 --no-timing": [*MEMLEDGER, "trace", script, "--steps", "3",
                                                  "--no-timing", "-o",
                                                  str(tmp / "e2e-nt.ledger"), "--",
                                                  *model_args],
        "memledger trace --steps 3 --no-measure": [*MEMLEDGER, "trace", script, "--steps",
                                                   "3", "--no-measure", "-o",
                                                   str(tmp / "e2e-nm.ledger"), "--",
                                                   *model_args],
        # where the time goes: each pass alone, as `memledger trace` starts it
        "  ledger pass alone": [PY, "-m", "memledger.trace.worker", "ledger", "--out",
                                str(tmp / "pass.ledger"), "--steps", "3", script, "--",
                                *model_args],
        "  allocator pass alone (+8 timed steps, probes)": [
            PY, "-m", "memledger.trace.worker", "allocator", "--out", str(tmp / "pass.json"),
            "--steps", "3", script, "--", *model_args],
    }
    # Note [Warm starts] (memledger/processes.py): the same commands with every worker a
    # fresh `python -m` process, as before the zygote; compare starts ten workers
    cold = {"MEMLEDGER_WARM_START": "0"}
    compare = [*MEMLEDGER, "compare", script, "-p", "checkpoint:blocks.*", "--steps", "2",
               "--time-steps", "2", "--", *model_args]
    envs = {"memledger trace --steps 3, cold starts": cold,
            "memledger compare -p checkpoint:blocks.*, cold starts": cold}
    cmds["memledger trace --steps 3, cold starts"] = cmds["memledger trace --steps 3"]
    cmds["memledger compare -p checkpoint:blocks.* --steps 2 --time-steps 2"] = compare
    cmds["memledger compare -p checkpoint:blocks.*, cold starts"] = compare
    cwds = {}
    if baseline:   # run from its own folder: `python -m` puts the working folder first
        name = f"memledger trace --steps 3 (baseline {Path(baseline).name})"
        cmds[name] = [*MEMLEDGER, "trace", str(ROOT / script), "--steps", "3", "-o",
                      str(tmp / "e2e-base.ledger"), "--", *model_args]
        cwds[name] = Path(baseline).resolve()
    rows = round_robin({k: (lambda c=c, d=cwds.get(k, ROOT), e=envs.get(k):
                            run_process(c, d, e))
                        for k, c in cmds.items()}, repeat)
    size = " ".join(model_args) or "defaults"
    table(f"3. End to end, fresh processes (examples/train_gpt.py {size}, 3 steps)", rows,
          "python train_gpt.py --steps 3", unit="s")


# ---- 4. several ranks ----------------------------------------------------------------------
def ranks(repeat: int, tmp: Path) -> None:
    script = "examples/train_fsdp.py"
    trace = [*MEMLEDGER, "trace", "--nproc", "2", "--steps", "1", script, "-o",
             str(tmp / "ranks.ledger"), "--", "--steps", "2"]
    cmds = {"torchrun --nproc-per-node 2 train_fsdp.py": [
                PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                script, "--steps", "2"],
            "memledger trace --nproc 2 --steps 1": trace,
            "memledger trace --nproc 2, cold ranks": trace}
    envs = {"memledger trace --nproc 2, cold ranks": {"MEMLEDGER_WARM_START": "0"}}
    rows = round_robin({k: (lambda c=c, e=envs.get(k): run_process(c, ROOT, e))
                        for k, c in cmds.items()}, repeat)
    table("4. Several ranks, fresh processes (examples/train_fsdp.py, 2 ranks, gloo)", rows,
          "torchrun --nproc-per-node 2 train_fsdp.py", unit="s")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["startup", "api", "e2e", "ranks"])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--model-args", default="", help="end to end: train_gpt.py's model flags, "
                   "e.g. '--n-layer 6 --n-embd 384 --n-head 6 --block-size 256' (nanoGPT size)")
    p.add_argument("--per-step-n", type=int, default=10)
    p.add_argument("--baseline", help="a second memledger checkout (`git archive main | tar "
                   "-x -C DIR`) whose `memledger.trace()` (the API) and `memledger trace` (end "
                   "to end) run beside this one's: before/after in one run")
    args = p.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="memledger-daily-") as d:
        tmp = Path(d)
        if args.only in (None, "startup"):
            startup(args.repeat, tmp)
        if args.only in (None, "api"):
            api(args.repeat, args.per_step_n, args.baseline)
        if args.only in (None, "e2e"):
            end_to_end(max(3, args.repeat // 2), tmp, shlex.split(args.model_args),
                       args.baseline)
        if args.only in (None, "ranks"):
            ranks(max(3, args.repeat // 2), tmp)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
