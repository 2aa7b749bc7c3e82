"""Where the ledger and the allocator part: run a script untraced under the CPU profiler's
memory events, then traced, in this process; print both peaks, the storages live at each
peak that the other side does not have (counted by size, with the op that made them: the
innermost aten call around the allocation untraced, the ledger's op traced), and the
allocations around the untraced peak.

    python tools/peak_live_diff.py tests/clients/train_hf_arch.py --arch siglip \\
        --task image-cls --batch-size 32 --steps 2
    python tools/peak_live_diff.py --policy 'offload:blocks.*' examples/train_gpt.py

With `--policy` the untraced run is `measure`'s (the policy installed as measure installs
it) and the traced one is the baseline: the live sets then say what the policy moved, and
the allocations around the measured peak where a prediction and a measurement part.

The first question of every "ledger N B over the allocator" hunt (docs/accuracy.md): which
block one side holds and the other does not, and which op made it. The untraced side has
no dispatch mode, so what it lists is what the script really allocated; a block made
inside an op the mode never sees (a kernel's helper) shows its whole chain of calls. The
ledger here has no allocator pass, so kernel scratch is not in its peak (`memledger
trace` adds it).
"""

from __future__ import annotations

import bisect
import sys
import tempfile
from collections import Counter
from pathlib import Path

import memledger
from memledger.ledger.model import Ledger
from memledger.trace.allocator import CpuProfilerProbe
from memledger.trace.script import run_script

AROUND = 24   # allocations listed before the untraced peak's


def untraced(script: Path, args: list[str], policy: str | None = None
             ) -> tuple[int, list[tuple[int, str]], list[str]]:
    """(peak, [(bytes, op chain)] live at it, the allocations around it as lines)."""
    installer = None
    if policy:
        from memledger.measure.apply import install_policy
        from memledger.replay.policies import parse_policy
        installer = install_policy(parse_policy(policy))
    probe = CpuProfilerProbe()
    probe.start()
    try:
        _run(script, args)
    finally:
        probe.stop()
        if installer is not None:
            installer.remove()
    from torch._C._profiler import _EventType

    allocs, stack = [], [(n, ()) for n in probe.kineto_results.experimental_event_tree()]
    while stack:
        node, chain = stack.pop()
        if node.tag == _EventType.Allocation:
            f = node.extra_fields
            if str(f.device).startswith("cpu"):
                allocs.append((node.start_time_ns, int(f.ptr), int(f.alloc_size),
                               " > ".join(chain[-4:]) or "(no aten op)"))
            continue
        here = chain + (node.name.removeprefix("aten::"),) if node.name.startswith(
            ("aten::", "autograd::")) else chain
        stack.extend((c, here) for c in node.children)
    allocs.sort(key=lambda a: (a[0], a[2] > 0))   # frees first within a nanosecond
    live: dict[int, tuple[int, str]] = {}
    cur = peak = at = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for i, (_, ptr, size, chain) in enumerate(allocs):
        if size > 0:
            live[ptr] = (size, chain)
        elif ptr in live:
            del live[ptr]
        else:
            continue   # freed, made before the profile
        cur += size
        if cur > peak:
            peak, at, at_peak = cur, i, dict(live)
    lines = [f"{'*' if i == at else ' '} {size:>+12,}  {chain}"
             for i, (_, _, size, chain) in enumerate(allocs[max(at - AROUND, 0): at + 4],
                                                       start=max(at - AROUND, 0))]
    return peak, list(at_peak.values()), lines


def traced(script: Path, args: list[str]) -> Ledger:
    out = Path(tempfile.mkdtemp(prefix="peak-live-diff-")) / "run.ledger"
    with memledger.trace(out):
        _run(script, args)
    return Ledger.load(out)


def _run(script: Path, args: list[str]) -> None:
    saved_argv, saved_path = list(sys.argv), list(sys.path)   # run_script sets both
    try:
        run_script(script, args)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    policy = None
    if argv[0] == "--policy":
        policy, argv = argv[1], argv[2:]
    script, args = Path(argv[0]), argv[1:]
    peak_u, live_u, around = untraced(script, args, policy)
    led = traced(script, args)
    pk = led.peak()
    rows = led.live_at(pk.event)
    under = f" under {policy}" if policy else ""
    print(f"untraced{under} peak {peak_u:,} B; ledger peak {pk.bytes:,} B at event "
          f"{pk.event} ({pk.phase}, {pk.op} in {pk.module or '(script)'}): "
          f"{pk.bytes - peak_u:+,} B")
    by_u = Counter(b for b, _ in live_u)
    by_l = Counter(rows["bytes"].tolist())
    for size in sorted(set(by_u) | set(by_l), reverse=True):
        if by_u[size] == by_l[size]:
            continue
        ops_u = Counter(c for b, c in live_u if b == size)
        ops_l = Counter(rows.loc[rows["bytes"] == size, "op"].astype(str))
        print(f"{size:>12,} B  untraced {by_u[size]} x {dict(ops_u)}\n"
              f"{'':>16}ledger   {by_l[size]} x {dict(ops_l)}")
    print("\nallocations around the untraced peak (*):")
    print("\n".join(around))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
