"""Whether Python's cyclic garbage collector is running right now.

A storage freed while it runs was held by a reference cycle (or by something a cycle
held): its memory stayed after the script let go of it, until the collector ran (Note
[Tensors only the garbage collector frees] in trace/doctor_garbage.py). The ledger marks
such frees (`"gc": 1` on the `free` record) and the summary says how much of the peak
they were.
"""

from __future__ import annotations

import gc
from typing import Any


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
