"""`memledger.trace()`: record a ledger of any block of code in this process.

    with memledger.trace() as ledger:
        train_some_steps()
    print(ledger.summary().peak.bytes)
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import torch

from memledger.ledger.writer import FileSink, MemorySink
from memledger.errors import EXIT_USAGE, ScriptError
from memledger.outputs import check_output, commit, partial_path
from memledger.trace.allocator import CpuProfilerProbe, CudaProbe
from memledger.trace.collector import FIRST_USE, Collector, StopTracing
from memledger.trace.script import _OUR_HOOKS_WARNING

if TYPE_CHECKING:
    from memledger.ledger.model import Ledger


class TracedLedger:
    """Stands for the Ledger while tracing; behaves as that Ledger once the block ends.

    The Ledger's tables are built on first use, not when the block ends: leaving the block
    costs only closing the record stream (see docs/performance.md, "The Python API"), and a
    block traced to a file that is never read in this process never pays for pandas.
    """

    def __init__(self) -> None:
        self._ledger: Ledger | None = None
        self._build: Any = None   # () -> Ledger, set when the block ends

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.ledger, name)

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            if self._build is None:
                raise RuntimeError("memledger: the ledger is ready when the `with trace()` "
                                   "block ends")
            self._ledger, self._build = self._build(), None
        return self._ledger


@contextlib.contextmanager
def trace(path: str | Path | None = None, measure: bool = False,
          max_steps: int | None = None, fake: bool = False,
          device: str | None = None, steps_by: str = "optimizer") -> Iterator[TracedLedger]:
    """Trace the block. `path` streams the ledger to a file; `measure` adds the allocator's
    peak (CUDA: always, it is free; CPU: runs the profiler alongside, which is slow).
    `max_steps`: trace that many training steps, then leave the block (the rest of it does
    not run, as `memledger trace --steps N` stops a script); the code after the block runs.
    `steps_by`: what ends a step, as `memledger trace --steps-by`: "optimizer" (a training
    step), "forward" (the next forward of a model: evaluation, inference) or "whole" (the
    block is one step); a block with no optimizer step otherwise traces 0 steps.
    `fake`: the block runs above FakeTensorMode (build the model inside the block so that
    its parameters are fake); `device` is its target, cpu or cuda (docs/fake.md).
    Under torchrun (several ranks) `path` names one file per rank: run.ledger ->
    run.rank0.ledger, ... and each header says its rank (docs/distributed.md).
    The ledger grows in a partial file beside `path` (`.run.ledger.<pid>.partial`) and is
    renamed over `path` when the block ends, however it ends: a crash mid-block leaves the
    partial file and whatever `path` held before, never half a ledger at `path`."""
    from memledger.trace.rank import rank_and_world, rank_header

    if device is not None and not fake:
        # a real block runs where its tensors are: `device="cuda"` alone was ignored, and a
        # CPU block read as if it had been ledgered for the GPU
        raise ScriptError(f"trace(device={device!r}) is the target of a fake run: pass "
                          "fake=True too, or drop device (a real block is traced on the "
                          "devices its tensors are on)", exit_code=EXIT_USAGE)
    from memledger.trace.steps import STEPS_BY

    if max_steps is not None and (isinstance(max_steps, bool) or
                                  not isinstance(max_steps, int) or max_steps < 1):
        # 0 and -1 traced one step, 2.5 three
        raise ScriptError(f"trace(max_steps={max_steps!r}): a number of steps, 1 or more "
                          "(None: every step of the block)", exit_code=EXIT_USAGE)
    if steps_by not in STEPS_BY:
        raise ScriptError(f"trace(steps_by={steps_by!r}): use one of {', '.join(STEPS_BY)}",
                          exit_code=EXIT_USAGE)
    header = {"script": "<api>", **rank_header(),
              **({"steps_by": steps_by} if steps_by != "optimizer" else {})}
    if path is not None and (rw := rank_and_world()) is not None and rw[1] > 1:
        from memledger.ledger.ranks import rank_file

        path = rank_file(path, rw[0])
    partial = None
    if path is not None:   # streamed beside `path`, renamed over it when the block ends
        path = check_output(path, "ledger", ledger=True)   # (memledger/outputs.py)
        partial = partial_path(path)
    sink = FileSink(partial) if partial is not None else MemorySink()
    handle = TracedLedger()
    if fake:
        from memledger.trace.fake import FakeTarget
        from memledger.trace.fake_options import check_fake_options

        try:
            check_fake_options(device, measure)
        except ScriptError as e:   # its words are the CLI's flags: say the API's arguments
            raise ScriptError(_api_words(str(e)), exit_code=e.exit_code) from None
        collector: Collector = FakeTarget.for_device(device).collector(
            sink, max_steps=max_steps, header=header, pre_existing=FIRST_USE,
            steps_by=steps_by)
    else:
        collector = Collector(sink, max_steps=max_steps, header=header,
                              pre_existing=FIRST_USE, steps_by=steps_by)
    cuda = CudaProbe(record_history=False) if torch.cuda.is_available() and not fake else None
    cpu = CpuProfilerProbe(ops=False) if measure else None   # the peak alone
    if cuda:
        cuda.start()
    if cpu:
        cpu.start()
    quiet = _quiet_our_hooks_warning()
    try:
        with collector:
            yield handle
    except StopTracing:
        # `max_steps` reached: the collector stops the block at its next op, as `memledger
        # trace --steps N` stops the script. That ends the block, not the program: the
        # exception escaped every `with memledger.trace(max_steps=N)` before. Another
        # block's stop (an outer one's, passing through) goes on up.
        if collector.max_steps is None or collector.steps_done < collector.max_steps:
            raise
    finally:
        _unquiet(quiet)
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
        if partial is not None:
            commit(partial, path)   # whole, or the old file untouched: never half of one
            sink.path = path
        handle._build = lambda: _build_ledger(sink, add_pre_existing=cpu is not None)


# torch warns at a `torch.compile(module)` call while global module hooks exist that they
# will fire an extra time for the wrapper. Inside the block those hooks are memledger's (it
# handles the wrapper), not the user's: under `pytest -W error` (or a `filterwarnings =
# error` ini) a marked test calling a compiled model failed on that warning. The filter is
# the CLI's (trace/script.py), added for the block only: the user's own hooks after the
# block still warn, and filters the block itself adds stay.


def _quiet_our_hooks_warning() -> tuple:
    warnings.filterwarnings("ignore", message=_OUR_HOOKS_WARNING, category=UserWarning)
    return warnings.filters[0]


def _unquiet(entry: tuple) -> None:
    try:
        warnings.filters.remove(entry)
    except ValueError:   # the block reset the filters itself (catch_warnings, resetwarnings)
        return
    mutated = getattr(warnings, "_filters_mutated", None)   # clears the per-module caches
    if mutated is not None:
        mutated()


def _api_words(message: str) -> str:
    """A --fake option error in the words of `trace()`'s arguments (trace/fake_options.py)."""
    for flag, arg in (("--fake", "fake=True"), ("--measure", "measure=True"),
                      ("--device cuda", "device=\"cuda\""), ("--device cpu", "device=\"cpu\""),
                      ("--device ", "device=")):
        message = message.replace(flag, arg)
    return message


def _build_ledger(sink: FileSink | MemorySink, add_pre_existing: bool) -> Ledger:
    from memledger.ledger.model import Ledger   # pandas: when the ledger is first read

    led = Ledger.from_records(sink.records) if isinstance(sink, MemorySink) \
        else Ledger.load(sink.path)
    if add_pre_existing:
        pre = led.on_device("cpu")
        pre = pre[pre["pre"]]
        for m in led.measurements:
            if m["source"].startswith("cpu-profiler"):
                m["peak_bytes"] += int(pre["bytes"].sum())
    return led
