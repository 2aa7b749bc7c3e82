"""Tracing overhead on the tiny-GPT training step, side by side in one process.

    python benchmarks/overhead.py [--steps 12] [--warmup 3] [--n-embd 128 --batch-size 8]

Runs the same training step (examples/train_gpt.py's model, AdamW) untraced, under
memledger's collector, under `torch.profiler(profile_memory=True, record_shapes=True,
with_stack=True)` (what its memory timeline needs) and under
`torch.distributed._tools.mem_tracker.MemTracker`, and prints the median step time of each
as a ratio to untraced. Modes are interleaved round-robin so machine noise hits all alike.
"empty dispatch" is a TorchDispatchMode that does nothing: the floor under any tool that
sees every op from Python; "empty dispatch, unwrapped" the same without the Dynamo guard
torch wraps around a mode's calls, which memledger's collector goes without.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memledger.ledger.writer import FileSink  # noqa: E402
from memledger.trace.collector import Collector  # noqa: E402


def build(args):
    from tiny_gpt import tiny_gpt_step

    step, model, opt = tiny_gpt_step(args.batch_size, threads=None, n_layer=args.n_layer,
                                     n_embd=args.n_embd, block_size=args.block_size)
    return model, opt, step


class _EmptyMode(TorchDispatchMode):
    """The floor for any tool built on a Python dispatch mode: one Python call per op."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _EmptyModeUnwrapped(_EmptyMode):
    """The same without torch's `_disable_dynamo` wrapper around each call, as memledger's
    collector runs (Note [No Dynamo wrapper around the hot path], trace/collector.py)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):   # set on this class,
        return func(*args, **(kwargs or {}))                            # so none is wrapped


class _ClosingCollector(Collector):
    """The collector plus closing its file, as the worker does at the end of a run."""

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.sink.close()


def modes(model, opt):
    """name -> a context manager factory; each wraps exactly one step."""
    from torch.distributed._tools.mem_tracker import MemTracker

    ledger_file = Path(tempfile.mkdtemp(prefix="memledger-bench-")) / "step.ledger"

    def memledger_ctx():  # the real ledger pass writes JSON lines to a file as it goes
        return _ClosingCollector(FileSink(ledger_file))

    def allocator_pass_ctx():  # what `memledger trace`'s second pass runs under (CPU)
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      profile_memory=True)

    def profiler_ctx():
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      profile_memory=True, record_shapes=True, with_stack=True)

    def memtracker_ctx():
        mt = MemTracker()
        mt.track_external(model, opt)
        return mt

    return {"untraced": contextlib.nullcontext, "empty dispatch": _EmptyMode,
            "empty dispatch, unwrapped": _EmptyModeUnwrapped,
            "memledger": memledger_ctx, "memledger alloc pass": allocator_pass_ctx,
            "torch.profiler": profiler_ctx, "MemTracker": memtracker_ctx}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, opt, step = build(args)
    ctxs = modes(model, opt)
    times: dict[str, list[float]] = {name: [] for name in ctxs}
    for i in range(args.warmup + args.steps):
        for name, make in ctxs.items():       # round-robin: noise hits every mode alike
            ctx = make()
            t0 = time.perf_counter()
            with ctx:
                step()
            dt = time.perf_counter() - t0
            if i >= args.warmup:
                times[name].append(dt)
    base = statistics.median(times["untraced"])
    print(f"tiny GPT step (n_layer={args.n_layer}, n_embd={args.n_embd}, T={args.block_size}, "
          f"B={args.batch_size}), torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {args.steps} steps")
    print(f"{'mode':<22}{'median step':>14}{'ratio':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<22}{med * 1e3:>11.1f} ms{med / base:>8.2f}x")


if __name__ == "__main__":
    main()
