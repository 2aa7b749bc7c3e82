"""What the CPU profiler costs memledger, and reading its event tree (trace/allocator.py).

    python benchmarks/profiler_walk.py [--blocks 40] [--steps 3] [--repeat 5]

Profiles `--steps` training steps of an MLP of `--blocks` (Linear 64, GELU, LayerNorm)
blocks with Adam, as `measure` and the trace's allocator pass do (`CpuProfilerProbe`), then
times, side by side on that one profile, the two readings of its tree: `walk` (every
allocation and every aten call's name: the allocator pass, which reads kernel scratch and
collectives from them) and `_allocations` (the allocations alone: `measure`, which needs
the peak only). Prints the median of `--repeat` readings of each, their ratio, and checks
that both give one peak.

Then the profiled steps themselves, interleaved round-robin `--repeat` times: untraced, under
the profiler with its op events (`CpuProfilerProbe()`: the allocator pass), and with the
allocations alone (`CpuProfilerProbe(ops=False)`: measure, Note [A peak without the ops]);
median CPU seconds, the ratio to untraced, and a check that both profiles saw the same
allocations and one peak.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from memledger.trace.allocator import CpuProfilerProbe


def _profiled(blocks: int, steps: int, ops: bool | None = True) -> CpuProfilerProbe | None:
    """The steps under a probe (`ops`: as CpuProfilerProbe takes it), or untraced (None)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64))
        for _ in range(blocks)])
    opt = torch.optim.Adam(model.parameters())
    probe = CpuProfilerProbe(ops=ops) if ops is not None else None
    if probe:
        probe.start()
    for _ in range(steps):
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
        opt.zero_grad()
    if probe:
        probe.stop()
    return probe


def _profiling_costs(blocks: int, steps: int, repeat: int) -> None:
    modes = {"untraced": None, "profiled, ops (allocator pass)": True,
             "profiled, no ops (measure)": False}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    last: dict[str, CpuProfilerProbe | None] = {}
    for _ in range(repeat):
        for name, ops in modes.items():
            t = time.process_time()
            last[name] = _profiled(blocks, steps, ops)
            cpu[name].append(time.process_time() - t)
    with_ops, alone = last["profiled, ops (allocator pass)"], last["profiled, no ops (measure)"]
    assert with_ops.peaks() == alone.peaks(), (with_ops.peaks(), alone.peaks())
    assert len(with_ops.walk().allocs) == len(alone.walk().allocs)
    base = statistics.median(cpu["untraced"])
    print(f"\nthe steps (model built in each), median CPU of {repeat}, interleaved; both "
          f"profiles {len(alone.walk().allocs):,} allocations, peak {alone.peaks()['cpu']:,} B")
    print(f"{'run':<32}{'CPU s':>8}{'ratio':>8}")
    for name in modes:
        m = statistics.median(cpu[name])
        print(f"{name:<32}{m:>8.3f}{m / base:>7.2f}x")


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    probe = _profiled(a.blocks, a.steps)
    probe._tree()   # the tree is built once per profile; both readings share it

    def full():
        probe._walked = None
        return probe.walk()

    alone = probe.peaks()          # from the allocations alone (nothing walked yet)
    walk_s = _median_s(full, a.repeat)
    alloc_s = _median_s(probe._allocations, a.repeat)
    assert probe.peaks() == alone, (probe.peaks(), alone)   # now from the full walk
    n = len(probe.walk().allocs)
    print(f"{a.blocks} blocks, {a.steps} steps: {n:,} allocations, "
          f"{len(probe.walk().calls):,} aten calls, peak {alone['cpu']:,} B (both readings)")
    print(f"{'reading':<22}{'median s':>10}")
    print(f"{'walk (allocator pass)':<22}{walk_s:>10.3f}")
    print(f"{'_allocations (measure)':<22}{alloc_s:>10.3f}")
    print(f"ratio _allocations / walk: {alloc_s / walk_s:.2f}")
    _profiling_costs(a.blocks, a.steps, a.repeat)


if __name__ == "__main__":
    main()
