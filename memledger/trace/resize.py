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

Only one watch may be active at a time (nested collectors are not supported).
"""

from __future__ import annotations

from typing import Callable

import torch

OnResize = Callable[[torch.UntypedStorage, int, int], None]


class StorageResizeWatch:
    """Calls `on_resize(storage, old_nbytes, new_nbytes)` after every `UntypedStorage.resize_`."""

    def __init__(self, on_resize: OnResize) -> None:
        self._on_resize = on_resize
        self._had_own = False
        self._saved = None
        self._active = False

    def __enter__(self) -> "StorageResizeWatch":
        cls = torch.UntypedStorage
        self._had_own = "resize_" in cls.__dict__
        self._saved = cls.__dict__.get("resize_")
        original = cls.resize_          # the C method (or whatever was there)
        on_resize = self._on_resize

        def resize_(storage, size):
            old = storage.nbytes()
            out = original(storage, size)
            on_resize(storage, old, storage.nbytes())
            return out

        resize_.__wrapped__ = original  # type: ignore[attr-defined]
        cls.resize_ = resize_           # type: ignore[method-assign]
        self._active = True
        return self

    def __exit__(self, *exc) -> None:
        if not self._active:
            return
        self._active = False
        cls = torch.UntypedStorage
        if self._had_own:
            cls.resize_ = self._saved   # type: ignore[method-assign]
        else:
            del cls.resize_
