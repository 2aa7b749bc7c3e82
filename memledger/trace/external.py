"""Storages whose memory torch's allocator did not hand out.

# Note [Memory torch's allocator did not hand out]
`torch.from_numpy` (and `torch.as_tensor` of an array), `torch.frombuffer`, `from_dlpack`,
`UntypedStorage.from_file` and `torch.load(mmap=True)` wrap memory another owner allocated:
numpy's heap, a Python buffer, a file mapping, or another storage's block (`from_dlpack` of
a torch tensor is a second storage object over the first one's bytes). The allocator pass
never sees those bytes (on CPU the profiler reports torch's CPU allocator, on CUDA the
counters are the caching allocator's), and neither does `measure`. diffusers'
`DDPMScheduler` keeps its `timesteps` as `torch.from_numpy(np.arange(...))`: every
diffusers ledger read 800 B (100 int64) over the allocator, and every policy was predicted
800 B over what `measure` measured.

Such a storage's `alloc` record says `"external": true`; the ledger keeps its row (lifetime,
uses, roles) but leaves it out of the device's curve, peak, categories and replay
(`Ledger.on_device`). Torch marks exactly these storages non-resizable, since it cannot
reallocate memory it does not own; every storage its allocators make is resizable.
"""

from __future__ import annotations


def external(st) -> bool:
    """Whether an untyped storage's memory came from outside torch's allocators."""
    try:
        return not st.resizable()
    except (RuntimeError, NotImplementedError, AttributeError):
        return False
