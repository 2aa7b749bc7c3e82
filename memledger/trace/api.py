"""`memledger.trace()`: record a ledger of any block of code in this process.

    with memledger.trace() as ledger:
        train_some_steps()
    print(ledger.summary().peak.bytes)
"""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path
from typing import Any, Iterator

import torch

from memledger.ledger.model import Ledger
from memledger.ledger.writer import FileSink, MemorySink
from memledger.trace.allocator import CpuProfilerProbe, CudaProbe
from memledger.trace.collector import Collector


def _live_storage_keys() -> set[int]:
    """The storages of every tensor Python can reach now (parameters, optimizer state, the
    batch, ...). Those the block touches are recorded as live from event 0; the others
    (another test's tensors, say) are not the block's business and stay out of the ledger."""
    tensor = torch.Tensor
    keys = set()
    for o in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which wakes lazy proxies
        if issubclass(type(o), tensor):
            try:
                keys.add(o.untyped_storage()._cdata)
            except (RuntimeError, NotImplementedError):
                pass
    return keys


class TracedLedger:
    """Stands for the Ledger while tracing; behaves as that Ledger once the block ends."""

    def __init__(self) -> None:
        self._ledger: Ledger | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._ledger is None:
            raise RuntimeError("memledger: the ledger is ready when the `with trace()` block ends")
        return getattr(self._ledger, name)

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            raise RuntimeError("memledger: the ledger is ready when the `with trace()` block ends")
        return self._ledger


@contextlib.contextmanager
def trace(path: str | Path | None = None, measure: bool = False,
          max_steps: int | None = None, fake: bool = False,
          device: str | None = None) -> Iterator[TracedLedger]:
    """Trace the block. `path` streams the ledger to a file; `measure` adds the allocator's
    peak (CUDA: always, it is free; CPU: runs the profiler alongside, which is slow).
    `fake`: the block runs above FakeTensorMode (build the model inside the block so that
    its parameters are fake); `device` is its target, cpu or cuda (docs/fake.md)."""
    sink = FileSink(path) if path is not None else MemorySink()
    handle = TracedLedger()
    if fake:
        from memledger.trace.fake import FakeTarget
        from memledger.trace.fake_options import check_fake_options

        check_fake_options(device, measure)
        collector: Collector = FakeTarget.for_device(device).collector(
            sink, max_steps=max_steps, header={"script": "<api>"},
            pre_existing=_live_storage_keys())
    else:
        collector = Collector(sink, max_steps=max_steps, header={"script": "<api>"},
                              pre_existing=_live_storage_keys())
    cuda = CudaProbe(record_history=False) if torch.cuda.is_available() and not fake else None
    cpu = CpuProfilerProbe() if measure else None
    if cuda:
        cuda.start()
    if cpu:
        cpu.start()
    try:
        with collector:
            yield handle
    finally:
        measured = []
        if cpu:
            cpu.stop()
            # The profiler knows only what was allocated after it started: add what existed.
            measured += [{"k": "measured", "source": "cpu-profiler+pre-existing", "device": d,
                          "peak_bytes": p} for d, p in cpu.peaks().items()]
        if cuda:
            measured.append(cuda.stop())  # max_memory_allocated counts what existed too
        for m in measured:
            sink.write(m)
        sink.close()
        led = Ledger.from_records(sink.records) if isinstance(sink, MemorySink) \
            else Ledger.load(sink.path)
        if cpu:
            pre = led.storages[led.storages["pre"] & (led.storages["device"] == "cpu")]
            for m in led.measurements:
                if m["source"].startswith("cpu-profiler"):
                    m["peak_bytes"] += int(pre["bytes"].sum())
        handle._ledger = led
