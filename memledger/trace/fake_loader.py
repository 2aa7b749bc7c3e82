"""A DataLoader's worker processes in a fake run: the batches are loaded in the run's process.

# Note [A DataLoader's workers in a fake run] (Rule 30 of Note [Fake runs], trace/fake.py)
`DataLoader(num_workers=N)` forks N workers, and each hands its batches over in shared
memory: default_collate stacks the samples into a storage made by `_new_shared`, and the
main process rebuilds a tensor around it (`torch.empty((0,))` then `set_(storage, ...)`,
torch._utils._rebuild_tensor) as the batch arrives (Note [Batches from other processes] in
trace/collector.py). A forked worker of a fake run keeps FakeTensorMode on its dispatch
stack (Note [A forked child traces nothing] takes off only the collector), its dataset's
tensors are fakes whose storages are `meta`, and the collate's shared storage is a real
one, so the worker died ("Attempted to set the storage of a tensor on device "meta" to a
storage on different device "cpu"") and `trace --fake` stopped with exit 3 where the
script runs: every script with workers (tests/clients/train_loader.py --workers 2), and
every pytorch-accelerated Trainer as its README uses it (its default loader takes
`num_workers=os.cpu_count()`). A fake batch cannot cross processes at all: a meta storage
has no memory to share.

While a fake run records, a DataLoader with workers loads in the run's own process, as
with `num_workers=0` (the same sampler, the same base seed drawn first), and what the
workers would do is done with the collector looking away: the dataset's `__getitem__` and
the collate are the workers' memory, which the real run's process never holds (a batch of
64 images of 3 x 32 x 32 fp32 is 64 samples of 12,288 B, then 786,432 B stacked, in the
worker). The batch then arrives as it does in the real run: each tensor rebuilt by the
same two ops, an `empty((0,))` and a `set_` onto the fetched storage, and that storage is
the data pipeline's `input` from its arrival, op "(shared memory)". Events and bytes are
the real run's, batch for batch. What is not modelled: the batches a real loader fetches
ahead and keeps while out of order (whole batches, as many as the workers' timing holds,
which differs between two real runs too), `worker_init_fn` (it runs in a worker, never in
the main process) and `pin_memory` of a CUDA target (the real run pins in a thread of its
own).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch.utils._pytree import tree_map_only
from torch.utils.data import DataLoader, IterDataPipe, MapDataPipe
from torch.utils.data.dataloader import (_BaseDataLoaderIter, _DatasetKind,
                                         _SingleProcessDataLoaderIter)


def _arrive(t: torch.Tensor) -> torch.Tensor:
    """The tensor the main process rebuilds around a worker's storage
    (torch._utils._rebuild_tensor): the same ops, so the same events."""
    out = torch.empty((0,), dtype=t.dtype, device=t.device)
    return out.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())


class _WorkersInProcess(_SingleProcessDataLoaderIter):
    """`_SingleProcessDataLoaderIter` for a loader with workers: each fetch is the
    workers' (no events), each batch arrives as from shared memory."""

    def __init__(self, loader: DataLoader, away: Callable[[], Iterator[None]],
                 arrived: Callable[[torch.Tensor], None]) -> None:
        _BaseDataLoaderIter.__init__(self, loader)   # the sampler and base seed, as a real run's
        self._num_workers = 0
        self._away, self._arrived = away, arrived
        if isinstance(self._dataset, (IterDataPipe, MapDataPipe)):
            torch.utils.data.graph_settings.apply_sharding(
                self._dataset, self._world_size, self._rank)
        self._dataset_fetcher = _DatasetKind.create_fetcher(
            self._dataset_kind, self._dataset, self._auto_collation, self._collate_fn,
            self._drop_last)

    def _next_data(self):
        index = self._next_index()   # the main process's sampler, seen as in a real run
        with self._away():
            data = self._dataset_fetcher.fetch(index)

        def arrive(t: torch.Tensor) -> torch.Tensor:
            self._arrived(t)
            return _arrive(t)
        return tree_map_only(torch.Tensor, arrive, data)


class LoadsInProcess:
    """While entered, a DataLoader with workers iterates in this process
    (Note [A DataLoader's workers in a fake run])."""

    def __init__(self, away: Callable[[], Iterator[None]],
                 arrived: Callable[[torch.Tensor], None]) -> None:
        self._away, self._arrived = contextmanager(away), arrived
        self._original: Callable | None = None

    def __enter__(self) -> "LoadsInProcess":
        original = self._original = DataLoader._get_iterator
        away, arrived = self._away, self._arrived

        def _get_iterator(loader: DataLoader):
            if loader.num_workers == 0:
                return original(loader)
            return _WorkersInProcess(loader, away, arrived)
        DataLoader._get_iterator = _get_iterator
        return self

    def __exit__(self, *exc: object) -> None:
        if self._original is not None:
            DataLoader._get_iterator = self._original
            self._original = None
