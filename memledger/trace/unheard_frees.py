"""Frees the CPU profiler never hears: storages a collective was given, freed on its thread.

# Note [Frees on a thread the profiler does not follow]
c10's CPU allocator reports a block to the profiler only from a thread that carries the
profiler's thread-local state (the script's, the autograd engine's, the intra-op pool's).
gloo runs each collective on a worker thread of its own, and the work keeps the tensors it
was given until that thread lets go of it, a few microseconds after `wait()` returns. When
the script drops its last reference first, the storage is freed on gloo's thread: no event
comes, the allocator pass counts the block as live to the end, and its peak reads that
much over the ledger's (the collector's weakref finalizer hears a free on any thread).
fairscale (tests/clients/train_fairscale.py `--wrap sdp --ckpt wrap`, one rank):
ShardedDataParallel broadcasts every parameter at its start (`async_op=True`, each a view
of OSS's flat `ParamBucket`, then `wait()`); its first forward has OSS build a new bucket,
and the old one (50,688 B) went with the last broadcast's work. In about one full-suite
run in six, gloo's thread was descheduled between completing that work and letting go of
it, and the allocator's peak read 351,140 B against the ledger's 300,452 (a copy of the
script whose broadcasts' futures sleep 20 ms in a callback read it every time).

So while the probe runs, the storages handed to a process group's collectives from
Python (`torch.distributed`'s functions, a `ProcessGroup`'s methods) are watched with a
weakref finalizer; one that runs on a thread other than the script's records (time, data
pointer), and the probe adds that free to its events where none was heard for the block
(`add_unheard_frees`). The free is counted when it happened, on whichever thread: the
same time the ledger's finalizer records. Not watched: collectives a C++ caller issues
(DDP's reducer, functional collectives), whose buffers it keeps itself, and tensors a
script's own Python thread frees (docs/accuracy.md, fairscale).
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from bisect import bisect_right

# the ProcessGroup methods that hand tensors to a backend's worker
_COLLECTIVES = (
    "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced", "_allgather_base",
    "all_gather_single", "allreduce", "allreduce_coalesced", "alltoall", "alltoall_base",
    "broadcast", "gather", "reduce", "reduce_scatter", "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced", "scatter", "send", "recv", "recv_anysource",
)


class UnheardFrees:
    """Between start() and stop(): (time_ns, data pointer) of each CPU storage a collective
    was given that was freed on another thread than the one that started the watch."""

    def __init__(self) -> None:
        self.frees: list[tuple[int, int]] = []
        self._owner = 0
        self._watched: dict[int, weakref.finalize] = {}   # data pointer -> its finalizer
        self._saved: dict[str, object] = {}

    def start(self) -> None:
        pg = _process_group_class()
        if pg is None:
            return
        self._owner = threading.get_ident()
        for name in _COLLECTIVES:
            orig = pg.__dict__.get(name)
            if orig is None or getattr(orig, "_memledger_watch", False):
                continue   # another watch wraps it already
            self._saved[name] = orig
            setattr(pg, name, self._wrap(orig))

    def stop(self) -> list[tuple[int, int]]:
        pg = _process_group_class()
        for name, orig in self._saved.items():
            setattr(pg, name, orig)
        self._saved.clear()
        for fin in self._watched.values():
            fin.detach()
        self._watched.clear()
        return sorted(self.frees)

    def _wrap(self, orig):
        watch = self._watch

        @functools.wraps(orig)
        def collective(pg, *args, **kwargs):
            watch(args)
            return orig(pg, *args, **kwargs)

        collective._memledger_watch = True
        return collective

    def _watch(self, args, depth: int = 0) -> None:
        import torch

        for a in args:
            if isinstance(a, torch.Tensor):
                if a.device.type != "cpu" or a.is_sparse:
                    continue
                st = a.untyped_storage()
                ptr = st.data_ptr()
                if not ptr or not st.nbytes():
                    continue
                fin = self._watched.get(ptr)
                if fin is not None and fin.alive:
                    continue
                self._watched[ptr] = weakref.finalize(st, self._freed, ptr)
            elif isinstance(a, (list, tuple)) and depth < 2:
                self._watch(a, depth + 1)

    def _freed(self, ptr: int) -> None:
        if threading.get_ident() != self._owner:
            # the profiler's clock: its events' times are wall-clock nanoseconds
            self.frees.append((time.time_ns(), ptr))
        fin = self._watched.get(ptr)
        if fin is not None and not fin.alive:
            del self._watched[ptr]


def _process_group_class():
    try:
        from torch._C._distributed_c10d import ProcessGroup
    except ImportError:   # pragma: no cover - a torch built without distributed
        return None
    return ProcessGroup


def add_unheard_frees(allocs: list[tuple], frees: list[tuple[int, int]]) -> list[tuple]:
    """Pure part: `allocs` (time_ns, device, ptr, signed bytes, ...) as the profiler reported
    them; `frees` (time_ns, ptr) recorded on other threads. Each free goes to the first CPU
    block at that pointer allocated by then with no free of its own heard, as a negative
    event of the block's size (the rest of the row copied from its allocation), at its
    time or just before the pointer's next allocation, whichever is first. A block whose
    free was heard (a thread the profiler follows) gets none."""
    if not frees:
        return allocs
    by_ptr: dict[int, list[list]] = {}   # ptr -> [[alloc time, row, freed?], ...] in time order
    for row in sorted((r for r in allocs if str(r[1]).startswith("cpu")),
                      key=lambda r: (r[0], r[3] > 0)):
        blocks = by_ptr.setdefault(row[2], [])
        if row[3] > 0:
            blocks.append([row[0], row, False])
        elif blocks and not blocks[-1][2]:
            blocks[-1][2] = True
    out = list(allocs)
    for t, ptr in frees:
        blocks = by_ptr.get(ptr, [])
        starts = [b[0] for b in blocks]
        for i in range(bisect_right(starts, t)):
            if not blocks[i][2]:
                blocks[i][2] = True
                row = blocks[i][1]
                when = min(t, blocks[i + 1][0]) if i + 1 < len(blocks) else t
                out.append((when, row[1], ptr, -row[3], *row[4:]))
                break
    return out
