"""Whether Python's cyclic garbage collector is running right now.

A storage freed while it runs was held by a reference cycle (or by something a cycle
held): its memory stayed after the script let go of it, until the collector ran (Note
[Tensors only the garbage collector frees] in trace/doctor_garbage.py). The ledger marks
such frees (`"gc": 1` on the `free` record); `memledger trace` also lists, as the last
traced step ends (or at the close of a script that ends first), the storages still live
that are unreachable garbage then (a `garbage` record), and the summary says how much of the
peak they were.
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from memledger.trace.outside_state import storage_key


class GcWindow:
    """`running` is true between the collector's "start" and "stop" callbacks, while this
    watch is entered."""

    def __init__(self) -> None:
        self.running = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        self.running = phase == "start"

    def __enter__(self) -> "GcWindow":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.running = False
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:   # the script replaced gc.callbacks
            pass


def garbage_kept() -> list:
    """One collection with `gc.DEBUG_SAVEALL`: what the collector would free, taken out of
    `gc.garbage` and handed over instead of freed. Once the caller lets go of the list it is
    unreachable again, left to the next collection (or `gc.collect()` frees it now)."""
    n0 = len(gc.garbage)
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(flags)
    found = gc.garbage[n0:]
    del gc.garbage[n0:]
    return found


def garbage_sids(sids: dict[int, int]) -> list[int]:
    """The ledger's storages (`sids`: storage key -> sid) that are unreachable garbage now
    (`garbage_kept`; left to the next collection, later than the script's own would have
    freed it: a second collection to free it now would cost as much again)."""
    # by type(): a dead weakref.proxy among the garbage raises on isinstance
    found = {sids.get(storage_key(o), -1) for o in garbage_kept()
             if issubclass(type(o), torch.Tensor)}
    return sorted(s for s in found if s >= 0)
