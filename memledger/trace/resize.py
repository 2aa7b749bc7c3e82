"""Seeing `UntypedStorage.resize_`, which allocates and frees outside the dispatcher.

# Note [Storages resized outside dispatch]
FSDP2 keeps one storage per unsharded parameter for the whole run and frees it between uses
by resizing it: `free_storage` calls `storage.resize_(0)` after a block's forward and
backward, `alloc_storage` calls `storage.resize_(nbytes)` before the next all-gather
(torch/distributed/fsdp/_fully_shard/_fsdp_param.py). `UntypedStorage.resize_` goes
straight to c10 (`resize_bytes_cpu`), not through the dispatcher, so a `TorchDispatchMode`
never sees it and no weakref fires: the storage object lives on. Without this watch a
2-layer GPT block's unsharded parameters (49,984 floats = 199,936 B) would count as live
from the first all-gather to the end, and each all-gather again on top.

torch has no hook for a storage resize, so while a collector is active this class puts a
thin wrapper on `torch.UntypedStorage.resize_` (the class attribute only: the C method of
`torch._C.StorageBase` stays untouched) and removes it on exit. The wrapper calls the
original and then tells the collector the storage's bytes before and after:

    resize_(0)        199,936 B -> 0 B      the collector writes a `free` for its sid
    resize_(199936)   0 B -> 199,936 B      a new sid (`alloc`, op `resize_`) on the same storage

Watches may overlap (a block nested in another, blocks in two threads): one wrapper is
installed while any watch is active and tells every active watch, in the order they began;
the last watch to end removes it. Each watch used to install its own wrapper over the one
before and put back on exit what it found: two blocks in two threads that ended in the
order they began (A in, B in, A out, B out) left A's wrapper on `resize_` for good, and
with it A's collector and every record it held.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

OnResize = Callable[[torch.UntypedStorage, int, int], None]

_LOCK = threading.Lock()
_WATCHES: list["StorageResizeWatch"] = []   # active, in the order they began
_SAVED: list = []   # [had its own resize_, what it was] while the wrapper is on


def _install() -> None:
    cls = torch.UntypedStorage
    _SAVED[:] = ["resize_" in cls.__dict__, cls.__dict__.get("resize_")]
    original = cls.resize_          # the C method (or whatever was there)

    def resize_(storage, size):
        old = storage.nbytes()
        out = original(storage, size)
        new = storage.nbytes()
        for watch in tuple(_WATCHES):
            watch._on_resize(storage, old, new)
        return out

    resize_.__wrapped__ = original  # type: ignore[attr-defined]
    cls.resize_ = resize_           # type: ignore[method-assign]


def _uninstall() -> None:
    cls = torch.UntypedStorage
    had_own, saved = _SAVED
    if had_own:
        cls.resize_ = saved         # type: ignore[method-assign]
    else:
        del cls.resize_
    _SAVED.clear()


class StorageResizeWatch:
    """Calls `on_resize(storage, old_nbytes, new_nbytes)` after every `UntypedStorage.resize_`."""

    def __init__(self, on_resize: OnResize) -> None:
        self._on_resize = on_resize
        self._active = False

    def __enter__(self) -> "StorageResizeWatch":
        with _LOCK:
            if not _WATCHES:
                _install()
            _WATCHES.append(self)
            self._active = True
        return self

    def __exit__(self, *exc) -> None:
        with _LOCK:
            if not self._active:
                return
            self._active = False
            _WATCHES.remove(self)
            if not _WATCHES:
                _uninstall()
