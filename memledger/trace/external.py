"""Storages whose memory torch's allocator did not hand out.

# Note [Memory torch's allocator did not hand out]
`torch.from_numpy` (and `torch.as_tensor` of an array), `torch.frombuffer`, `from_dlpack`
and `torch.load(mmap=True)` wrap memory another owner allocated: numpy's heap, a Python
buffer, or another storage's block (`from_dlpack` of a torch tensor is a second storage
object over the first one's bytes; a tensor `torch.load(mmap=True)` gives is a storage over
a slice of the file's mapping, which the allocator counted once, whole). The allocator pass
never sees those bytes (on CPU the profiler reports torch's CPU allocator, on CUDA the
counters are the caching allocator's), and neither does `measure`. diffusers'
`DDPMScheduler` keeps its `timesteps` as `torch.from_numpy(np.arange(...))`: every
diffusers ledger read 800 B (100 int64) over the allocator, and every policy was predicted
800 B over what `measure` measured.

Such a storage's `alloc` record says `"external": true`; the ledger keeps its row (lifetime,
uses, roles) but leaves it out of the device's curve, peak, categories and replay
(`Ledger.on_device`). Torch marks such storages non-resizable, since it cannot reallocate
memory it does not own; every storage its allocators make is resizable. One exception on
CPU: shared memory (a DataLoader worker's batch, rebuilt in this process from the worker's
file descriptor; `UntypedStorage.from_file`) is non-resizable too, but its allocator
reports to the profiler, and the allocator pass counts it (a (64, 100) fp32 batch from one
worker: +25,600 B as it arrives; tests/integration/test_api_blocks.py), so the ledger does:
`is_shared()`. On CUDA every storage says it is shared, and memory opened from another
process is not this process's allocator's.

A second exception: a deserializer's storage. `torch.load` (its zip reader's records) and
safetensors' `load_file` hand back non-resizable storages whose memory torch's CPU
allocator did hand out (the profiler reports it); each reaches the collector as the
storage of `aten.set_` that rebuilds a tensor around it. Read as external, a run resumed
from a checkpoint lost its whole optimizer state from the ledger (`optimizer.load_state_dict`
keeps the loaded tensors): 1,093,728 B of 3.1 MiB under the allocator, `optimizer_state`
missing from every category (tests/clients/train_resume.py). A storage met at
`set_` is counted; where its memory maps a file (`torch.load(mmap=True)`, safetensors),
it is a slice of a mapping the profiler counts once, whole (Note [Storages over a mapped
file], trace/mapped.py).
"""

from __future__ import annotations


def external(st) -> bool:
    """Whether an untyped storage's memory came from outside torch's allocators."""
    try:
        if st.resizable():
            return False
        return st.device.type != "cpu" or not st.is_shared()
    except (RuntimeError, NotImplementedError, AttributeError):
        return False

