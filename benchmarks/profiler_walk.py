"""What reading the CPU profiler's event tree costs (memledger/trace/allocator.py).

    python benchmarks/profiler_walk.py [--blocks 40] [--steps 3] [--repeat 5]

Profiles `--steps` training steps of an MLP of `--blocks` (Linear 64, GELU, LayerNorm)
blocks with Adam, as `measure` and the trace's allocator pass do (`CpuProfilerProbe`), then
times, side by side on that one profile, the two readings of its tree: `walk` (every
allocation and every aten call's name: the allocator pass, which reads kernel scratch and
collectives from them) and `_allocations` (the allocations alone: `measure`, which needs
the peak only). Prints the median of `--repeat` readings of each, their ratio, and checks
that both give one peak.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from memledger.trace.allocator import CpuProfilerProbe


def _profiled(blocks: int, steps: int) -> CpuProfilerProbe:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.LayerNorm(64))
        for _ in range(blocks)])
    opt = torch.optim.Adam(model.parameters())
    probe = CpuProfilerProbe()
    probe.start()
    for _ in range(steps):
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
        opt.zero_grad()
    probe.stop()
    return probe


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


if __name__ == "__main__":
    main()
