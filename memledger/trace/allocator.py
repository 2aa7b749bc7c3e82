"""The allocator's own view of memory: the independent check on the ledger.

# Note [What the CPU allocator sees]
With `profile_memory=True` the profiler receives one `[memory]` event per allocation and
free from c10's CPU allocator (positive bytes for an allocation, negative for a free).
Only blocks allocated while profiling are known to it (c10 `ProfiledCPUMemoryReporter`
keeps a size table from profiler start), so the CLI starts the profiler before the script
runs: then the running sum of events is the process's live tensor bytes, and its maximum
is the measured peak. Kernel-internal scratch (e.g. 4 + 8 bytes inside a `sum`) appears
here and never in the dispatch mode: that difference is the `workspace` category.

On CUDA the caching allocator counts for itself: `max_memory_allocated` after
`reset_peak_memory_stats`, reserved bytes (segments held from the driver), and the gap
between the two (fragmentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from memledger.trace.unheard_frees import UnheardFrees, add_unheard_frees


class CpuProfilerProbe:
    """Peak live bytes per device from the profiler's allocator events.

    `ops=False`: the allocations alone, for a reading that needs only the peak (`measure`,
    the Python API): Note [A peak without the ops]."""

    source = "cpu-profiler"

    def __init__(self, ops: bool = True) -> None:
        # The autograd profiler that `torch.profiler.profile(activities=[CPU],
        # profile_memory=True)` drives, used directly: the same Kineto session and memory
        # events, without its `prepare_trace`, whose `hasattr(torch, "_inductor")` imports
        # torch._inductor and torch._dynamo (~1.5 s CPU per process, measured here:
        # docs/performance.md) only to read a CUDA-graphs flag.
        self._prof = torch.autograd.profiler.profile(
            use_cpu=True, profile_memory=True, use_kineto=True)
        self._ops = ops
        self._results = None   # the op-less session's (its profile object never ran)
        self._walked: _Walk | None = None
        # Note [Frees on a thread the profiler does not follow] (trace/unheard_frees.py)
        self._watch = UnheardFrees()
        self._unheard: list[tuple[int, int]] = []

    def start(self) -> None:
        self._watch.start()
        if self._ops or not _start_without_ops(self._prof):
            self._ops = True
            self._prof.__enter__()

    def stop(self) -> None:
        if self._ops:
            self._prof.__exit__(None, None, None)
        else:
            from torch.autograd import _disable_profiler

            self._results = _disable_profiler()
        self._unheard = self._watch.stop()

    def release(self) -> None:
        """Let the recorded events go (after peaks() and the other readings are taken)."""
        self._prof = self._walked = self._results = None

    def walk(self) -> "_Walk | None":
        """The profile's event tree read once for every reading (peaks, kernel scratch,
        collectives): each allocation (time, device, ptr, signed bytes, made inside a c10d
        op, thread) and each aten call (start, end, name). None where torch has no tree."""
        if self._walked is not None:
            return self._walked
        tree, alloc = self._tree()
        if tree is None:   # pragma: no cover - older torch
            return None
        allocs, calls = [], []
        stack = [(n, False) for n in tree]
        while stack:
            node, in_comm = stack.pop()
            if node.tag == alloc:
                f = node.extra_fields
                allocs.append((node.start_time_ns, str(f.device), int(f.ptr),
                               int(f.alloc_size), in_comm, node.start_tid))
                continue
            name = node.name   # each read builds a new str
            if name.startswith("aten::"):
                calls.append((node.start_time_ns, node.end_time_ns, name[6:]))
            elif not in_comm:
                in_comm = name.startswith("c10d::")
                # Note [Ops of other namespaces]
                if not in_comm and (op := _library_op(name)):
                    calls.append((node.start_time_ns, node.end_time_ns, op))
            children = node.children
            if children:
                stack.extend([(c, in_comm) for c in children])
        self._walked = _Walk(add_unheard_frees(allocs, self._unheard), calls)
        return self._walked

    @property
    def kineto_results(self):
        return self._results if self._results is not None else self._prof.kineto_results

    def peaks(self) -> dict[str, int]:
        """{device: highest sum of the blocks allocated since start() and still live}
        (Note [Frees from an earlier profile])."""
        # measure reads the peak alone: the allocations, not every op's name
        allocs = (a[:4] for a in self._walked.allocs) if self._walked is not None \
            else self._allocations()
        if allocs is None:   # pragma: no cover - older torch
            events = [e for e in self.kineto_results.events() if e.name() == "[memory]"]
            return peaks_from_events(
                (e.start_ns(), _device_name(e), int(e.nbytes()), 0) for e in events)
        return peaks_from_events((t, "cpu" if dev.startswith("cpu") else dev, b, ptr)
                                 for t, dev, ptr, b in allocs)

    def _tree(self):
        """(the profile's event tree, the tag of an allocation node); (None, None) where
        torch has no tree."""
        try:
            from torch._C._profiler import _EventType

            return self.kineto_results.experimental_event_tree(), _EventType.Allocation
        except (AttributeError, ImportError, RuntimeError):  # pragma: no cover - older torch
            return None, None

    def _allocations(self) -> "list | None":
        """(time, device, ptr, signed bytes) of each allocation in the event tree: `walk`
        without the op names it also reads (benchmarks/profiler_walk.py times both)."""
        tree, alloc = self._tree()
        if tree is None:   # pragma: no cover - older torch
            return None
        stack, out = list(tree), []
        while stack:
            node = stack.pop()
            if node.tag == alloc:
                f = node.extra_fields
                out.append((node.start_time_ns, str(f.device), int(f.ptr), int(f.alloc_size)))
            else:
                stack.extend(node.children)
        return add_unheard_frees(out, self._unheard)


# Note [A peak without the ops]
# The profiler records an event for every aten op (RecordFunction callbacks) beside the
# allocator's events, and most of its cost is the ops: a 20-layer MLP's 3 steps of Adam
# took 0.014 s plain, 0.051 s profiled, 0.034 s with the allocations alone; the same 3,224
# allocations and the same peak (1,364,396 B). The walk and kernel scratch read the ops
# (op names, what ran inside a c10d op); a reading of the peak alone does not, so it
# starts the same Kineto session with callbacks for one record scope no training script
# enters (the mobile interpreter's), and the allocator still reports every block to it.
# A torch whose `_enable_profiler` takes no scopes profiles the ops as before.
def _start_without_ops(prof) -> bool:
    """Start `prof`'s Kineto session (its config and activities) recording allocations and
    no op. False, having started nothing, where this torch cannot."""
    try:
        from torch._C._profiler import RecordScope
        from torch.autograd import _enable_profiler, _prepare_profiler

        config = prof.config()
        _prepare_profiler(config, prof.kineto_activities)
        _enable_profiler(config, prof.kineto_activities, {RecordScope.LITE_INTERPRETER})
    except (ImportError, AttributeError, TypeError):   # pragma: no cover - older torch
        return False
    return True


# Note [Ops of other namespaces]
# An operator a library registers with `torch.library` (`bitsandbytes::` here) goes through
# the dispatcher as aten's do: the dispatch mode sees it as one op, named without its
# namespace as aten's are (`optimizer_update_8bit_blockwise.default`), and the profiler
# lists it as `bitsandbytes::optimizer_update_8bit_blockwise`. Its kernel, a Python
# function registered for the CPU key, runs torch ops of its own below the mode:
# bitsandbytes' 8-bit Adam dequantizes both moments to fp32, casts the gradient and the
# parameter to fp32, and frees all of it before it returns, scratch the allocator sees
# and the mode never does. Only `aten::` calls were read here, so that op had no call and
# no scratch, and its inner calls read as calls of their own that the ledger never saw:
# on `bnb.optim.AdamW8bit` over a width-128 GPT (tests/clients/train_galore.py), the
# allocator's peak, inside the last 8-bit update, was 1,295,112 B above the ledger's with
# its scratch, and every policy was predicted off (checkpoint 3,520 B over measured,
# offload 7,424 B under). The calls of every namespace are read now (the collectives'
# aside: their buffers are Note [Collective scratch]'s), each by the name the mode gives
# it, so the op's scratch lands at its own event, and its inner calls, inside an op the
# ledger records, are dropped as Note [Calls inside another op] says.
_NOT_OPS = frozenset({"c10d", "_c10d_functional", "c10d_functional", "profiler", "prim"})


def _library_op(name: str) -> str:
    """The op name a profiler event `namespace::op` stands for, as the dispatch mode names
    it (without its namespace); "" for a collective's, the profiler's own, a TorchScript
    node's, or a range that is no operator (`record_function` labels)."""
    ns, sep, op = name.partition("::")
    if not sep or ns in _NOT_OPS or not ns.isidentifier() or not op.isidentifier():
        return ""
    return op


@dataclass
class _Walk:
    """`CpuProfilerProbe.walk`'s reading of the event tree."""

    allocs: list   # (time_ns, device, ptr, signed bytes, inside a c10d op, thread id)
    calls: list    # (start_ns, end_ns, aten op name)


# Note [Frees from an earlier profile]
# c10's CPU memory reporter keeps its table of block sizes across profiling sessions: a
# block allocated while an earlier profile ran in this process, freed during this one,
# comes as a negative event of its full size, and a running sum of events would drop
# below what this session made (a tensor left from the first profile, 1 MiB, freed in the
# second: that session's peak read 0). The peak therefore counts by pointer: a free is
# counted only for a block allocated since start(). Every pass and measurement of the CLI
# profiles once in a fresh process; the in-process harness of the client tests measures
# policy after policy in one process, and after a refused selective measurement left
# tensors that went during the next one, `offload:blocks.*` read 184,464 B under its
# prediction (tests/clients/train_random.py `--menu deep`, seed 12), exact alone.
def peaks_from_events(events) -> dict[str, int]:
    """Pure part of the CPU probe: events are (time_ns, device, signed bytes, ptr); a free
    whose ptr no allocation of these events made is not counted (0: always counted)."""
    live: dict[str, int] = {}
    peak: dict[str, int] = {}
    made: set[tuple[str, int]] = set()
    for _, dev, nbytes, ptr in sorted(events, key=lambda e: (e[0], e[2] > 0)):
        if ptr:
            if nbytes > 0:
                made.add((dev, ptr))
            elif (dev, ptr) in made:
                made.discard((dev, ptr))
            else:
                continue
        live[dev] = live.get(dev, 0) + nbytes
        if live[dev] > peak.get(dev, 0):
            peak[dev] = live[dev]
    return peak


def _device_name(e) -> str:
    kind = str(e.device_type()).split(".")[-1].lower()
    return "cpu" if kind == "cpu" else f"{kind}:{max(e.device_index(), 0)}"


class CudaProbe:
    """The caching allocator's counters for one CUDA device."""

    source = "cuda-allocator"

    def __init__(self, device: int = 0, record_history: bool = True) -> None:
        self.device = device
        self.record_history = record_history
        self.baseline = 0
        self.oom: dict[str, Any] | None = None

    def start(self) -> None:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.baseline = torch.cuda.memory_allocated(self.device)
        if self.record_history:
            # stacks at allocation only: with stacks at frees too (torch's default,
            # context="all") a checkpoint's re-run fails on CUDA (Note [The allocator's
            # history and a checkpoint's re-run], trace/session.py); `import` reads only
            # the allocations' frames
            torch.cuda.memory._record_memory_history(max_entries=100_000, context="alloc")

    def note_oom(self, exc: BaseException) -> None:
        self.oom = {k: v for k, v in cuda_oom_record(exc, self.device).items() if k != "k"}

    def stop(self, snapshot_path: str | None = None) -> dict[str, Any]:
        """The measured record; with history on, also dump the allocator's snapshot (its
        segments, blocks and events, for `memledger import`) to `snapshot_path`."""
        torch.cuda.synchronize(self.device)
        stats = torch.cuda.memory_stats(self.device)
        rec = {"k": "measured", "source": self.source, "device": f"cuda:{self.device}",
               **cuda_stats_record(stats)}
        if self.record_history:
            if snapshot_path:
                torch.cuda.memory._dump_snapshot(snapshot_path)
                rec["snapshot"] = str(snapshot_path)
            torch.cuda.memory._record_memory_history(enabled=None)
        if self.oom:
            rec["oom"] = self.oom
        return rec


# Note [The cuBLAS workspace]
# On CUDA the ledger's peak falls short of the allocator's by about 65 MiB in every run
# of an H200 (docs/gpu.md): cuBLAS's workspace, allocated through the caching allocator
# per thread (and stream) that runs a matmul and never freed: 32 MiB on sm90 for the
# script's thread and as much for the autograd engine's, plus 1 MiB of cuBLASLt workspace
# per thread that ran a biased Linear. No tensor holds it, so no ledger can. The allocator
# pass measures it after its measured steps: what `torch._C._cuda_clearCublasWorkspaces()`
# gives back (the next matmul allocates it again, from the allocator's cache). `show`
# names that part of the gap.
def cublas_workspace_bytes(device: int = 0) -> int | None:
    """Bytes the caching allocator holds for cuBLAS's workspaces now, by clearing them;
    None where torch has no such call or it fails."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return None
    try:
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        clear()
        return max(0, before - torch.cuda.memory_allocated(device))
    except RuntimeError:
        return None


# Note [Blocks larger than asked]
# The CUDA caching allocator hands out blocks of its own sizes: each request rounded up to
# 512 B, and a cached large block (over 1 MiB) handed out whole when what would be left of
# it is 1 MiB or less. `max_memory_allocated` counts the blocks; the ledger counts the
# storages' bytes. On an H100 (docs/gpu.md, forty-third session) GPT-2 4 x 256 held
# 4,195,828 B at the allocator's peak that neither a tensor, the kernels' scratch (Note
# [Kernel scratch on a GPU]) nor cuBLAS's workspace explains, and 1,050,100 B under
# `checkpoint:transformer.h.*`: replay carried the first to the policy, 2 MiB over with
# the cuBLASLt workspace below it. The allocator also counts what was asked
# (`requested_bytes`, torch >= 2.1); allocated peak - requested peak is a floor on the
# rounding at the allocated peak (the requested peak is at least what was asked then), so
# the ledger keeps it and `show` names that part of the gap. Predicting it per policy needs
# the allocator's block choices replayed (left open: docs/gpu.md).
def cuda_stats_record(stats: dict[str, Any]) -> dict[str, int]:
    """Pure part of the CUDA probe: the counters a ledger keeps, from `memory_stats()`."""
    peak_alloc = int(stats.get("allocated_bytes.all.peak", 0))
    peak_reserved = int(stats.get("reserved_bytes.all.peak", 0))
    return {
        "peak_bytes": peak_alloc,
        "reserved_peak_bytes": peak_reserved,
        "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
        # bytes the allocator holds but cannot hand out as one block: reserved minus allocated
        "fragmentation_bytes": max(0, int(stats.get("reserved_bytes.all.current", 0))
                                   - int(stats.get("allocated_bytes.all.current", 0))),
        "inactive_split_peak_bytes": int(stats.get("inactive_split_bytes.all.peak", 0)),
        # Note [Blocks larger than asked]
        **({"requested_peak_bytes": int(stats["requested_bytes.all.peak"])}
           if "requested_bytes.all.peak" in stats else {}),
        "num_ooms": int(stats.get("num_ooms", 0)),
        "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
    }


def cuda_oom_record(exc: BaseException, device: int = 0) -> dict[str, Any]:
    """An `oom` ledger record: the message and the allocator's counters when it happened."""
    message = str(exc).splitlines()[0] if str(exc) else "CUDA out of memory"
    return {"k": "oom", "device": f"cuda:{device}", "message": message,
            **cuda_stats_record(torch.cuda.memory_stats(device))}


# Kernel scratch below this many bytes is left to the `workspace` category: none (Note
# [Small scratch]).
SCRATCH_MIN_BYTES = 1


def op_scratch(probe: CpuProfilerProbe, bare: dict[str, list[int]] | None = None,
               inside: dict[str, list] | None = None, nested: dict[str, list] | None = None,
               device: str = "cpu") -> dict[str, list[int]]:
    """{aten op name: scratch bytes of each call, in call order}, for ops with any scratch
    on `device` ("cpu", "cuda:0": Note [Kernel scratch on a GPU]); `bare` gets, for those
    ops, the calls that made nothing (Note [Calls that made nothing]).

    # Note [Kernel scratch]
    Some CPU kernels allocate scratch that the dispatch mode never sees: BatchNorm's
    backward allocates `empty_like(input)` beside its `grad_input` and frees it before
    returning (B=16, C=16, 32x32, fp32: 1,048,576 bytes of scratch). For each call of an op
    (outermost call of that name): scratch = the highest bytes the call itself allocated and
    still held inside it - what it still holds at its end (its outputs). Replay matches the
    k-th call here with the k-th event of that op in the ledger (the same script, the same
    steps) and adds the scratch for that one event, so a policy that moves the peak next to
    such a kernel still predicts the allocator's peak.

    Counted by pointer (`call_scratch`): a free inside the call of memory allocated before
    it is not the call's scratch. TorchScript's interpreter drops a value at its last use
    inside the op that uses it (`aten::relu` frees the `addmm` output it was given), and a
    running sum of live bytes read that free as 8,192 B of scratch in every `relu` of a
    scripted MLP: the ledger's peak came out 15,872 B (4.9 %) above the allocator's, and
    `compare` predicted the baseline's peak 2.4 % high.

    # Note [Small scratch]
    Scratch of any size is kept per call (it was left to `workspace` below 4,096 B). The
    workspace is what replay carries to every policy's peak, as bytes no op explains all
    run long; scratch that belongs to one op is not that. CPU `native_batch_norm` (training,
    fp32, C channels) allocates, besides its output and save_mean / save_invstd, two more
    C-vectors and a `zeros` of one per thread, and frees them inside: (2 + threads)·C·4 B,
    512 B at C = 32 on 2 threads (384 on 1, 768 on 4). PyG's GPSConv (three BatchNorms per
    layer, tests/clients/train_pyg.py --case gps) peaks in its last BatchNorm's forward, so
    the baseline's gap was those bytes, and `offload:convs.*`, which peaks in backward, was
    predicted 745,384 B against 744,872 B measured (2 threads).
    Small scratch is also the 4 B cast of a wrapped Python number inside `div` (Note
    [Wrapped scalars] in trace/scalars.py), which the `scalars` records count already:
    `Ledger.kernel_scratch` takes an event's wrapped numbers and casts off its scratch, so
    they count once. (It takes the 8 B torch wraps *before* the op off too, which the op's
    scratch never held: 8 B short at an op that took a Python number and has scratch of
    its own besides the cast; no TensorIterator op does.)
    """
    walked = probe.walk()
    if walked is None:   # pragma: no cover - older torch
        return {}
    mem = [(t, ptr, b) for t, dev, ptr, b, _, _ in walked.allocs if dev.startswith(device)]
    return call_scratch(mem, walked.calls, bare, inside, nested)


def scratch_record(probe: CpuProfilerProbe, device: str) -> dict[str, Any]:
    """The ledger's `opscratch` record for `device`: each op's scratch per call, with the
    calls that made nothing (Note [Calls that made nothing]), those made inside other ops
    (Note [Calls inside another op]) and the fallbacks' copies (Note [Inputs a fallback
    copies before the op]) where there are any."""
    bare: dict[str, list[int]] = {}
    inside: dict[str, list] = {}
    nested: dict[str, list] = {}
    ops = op_scratch(probe, bare, inside, nested, device=device)
    return {"k": "opscratch", "device": device, "ops": ops,
            **({"bare": bare} if bare else {}), **({"inside": inside} if inside else {}),
            **({"nested": nested} if nested else {})}


def allocation_devices(probe: CpuProfilerProbe) -> list[str]:
    """The devices the profiled steps allocated on ("cpu" first, then "cuda:0", ...)."""
    walked = probe.walk()
    if walked is None:   # pragma: no cover - older torch
        return []
    seen = {dev for _, dev, _, _, _, _ in walked.allocs}
    return sorted(seen, key=lambda d: (d != "cpu", d))


# Note [Kernel scratch on a GPU]
# The CUDA caching allocator reports its blocks to the profiler as the CPU allocator does,
# so kernel scratch is measured per call on a GPU the same way (Note [Kernel scratch]),
# from the same events. Before, only the CPU's was: on CUDA, everything the allocator
# held beyond the ledger's tensors at the baseline's peak was `workspace`, which replay
# carries to every policy's peak. GPT-2 (transformers, 4 x 256, on an H200) holds a 4 MiB
# cross-entropy block at its baseline's peak and 1 MiB of other scratch at the peak under
# `checkpoint:`; carrying the 4 MiB predicted the policy 2 MiB over measured with the
# cuBLAS workspaces' difference (docs/gpu.md). cuBLAS's own workspace (32 MiB a handle,
# made inside the first matmul on a thread and kept) is held at that call's end, so it is
# not scratch: it stays `workspace`.


# Note [Calls that made nothing]
# Replay matches the k-th call of an op here with the k-th ledger event at which that op
# made a storage, and drops an op whose counts differ (the runs diverged). A call that makes
# no storage (`torch.sum(x, -2, out=buf)`, an in-place op, a view) is a call here and no such
# event there, so one of them dropped every call's scratch of that name. linear_operator's
# conjugate gradients (tests/clients/train_gpytorch.py --case cg) run `sum`, `mul`, `lt`
# with `out=` inside a TorchScript function, 216 `sum` calls against the ledger's 54
# events; the loss's backward peaks inside a `sum` whose kernel takes 8 B of scratch, and
# the ledger read 8 B under the allocator. So the calls whose own allocations are all gone
# at their end are named too (`bare` in the `opscratch` record, their places in the call
# order); where the counts differ, replay matches the others (`Ledger.kernel_scratch`).
# Their own scratch went unplaced that way; the ledger now names the events that made
# nothing, and replay places those calls too (Note [Ops that made nothing, placed] in
# trace/collector.py).
# Note [Calls inside another op]
# The dispatch mode sees an op at the Python key; an op a kernel calls inside it (CPU
# `_safe_softmax` calls `_softmax`) never reaches the mode, while the profiler lists it. An
# sdpa block followed by a softmax ran `_softmax` 4 times in the profile for the ledger's 2
# events, so the counts differed and replay dropped every `_softmax` call's scratch: the
# block's own softmax copies its transposed input (131,072 B), and `checkpoint:blocks.*`,
# which peaks in that softmax's re-run, was predicted 131,072 B under measured (wide seed
# 148). So for each op with scratch, the calls made inside calls of other names are named
# with those names (`inside` in the `opscratch` record); where the counts differ, replay
# drops the calls made inside an op the ledger records (`Ledger.kernel_scratch`). A call
# inside a composite op the mode never sees (`softmax` around `_softmax`) stays.
# Note [A composite op of the same name]
# `torch.where(c, x, 0.0)` is `where.ScalarOther`, a composite that makes the number a
# 0-dim tensor (`scalar_tensor`) and calls `where.self`: the profiler lists one `where`
# around `scalar_tensor` and another `where`, the dispatch mode sees `scalar_tensor` and
# `where.self`, each an event, the number a storage of the ledger. Measured around the
# outer call, the number (4 B) read as `where`'s scratch as well: MiniMax's decay masks
# (transformers, built in setup), `offload` 4 B over measured where the policy put the peak
# in setup. A call that has a call of its own name inside is such a composite, whose other
# calls outside that one the mode sees as ops of their own: what they allocate is not
# scratch of the call (`_helpers_the_mode_sees`). An op's own kernel calling ops of other
# names (`_safe_softmax` calling `_softmax`) has no call of its own name inside, and keeps
# its inner calls' bytes as its scratch (Note [Calls inside another op]).
# Note [Inputs a fallback copies before the op]
# An op handed a conjugate (or negative) view, RotatE's `h * r` against `t.conj()` in its
# backward (pykeen, tests/clients/train_pykeen.py --mode rotate), runs torch's
# conjugate fallback first: it `clone`s the view into a plain tensor, then redispatches
# the op. The fallback sits above the Python key, so the dispatch mode sees the `clone`
# as an event of its own, just before the op's, and the ledger holds the copy as a
# storage (made at that event, freed after the op); the profiler lists the `clone` inside
# the op's call, and its copy, freed inside, read as the op's scratch. So the ledger
# counted the copy twice at the op: 164,432 B against the allocator's 148,048 B with
# the scratch, and `checkpoint:interaction` predicted 190,864 B against 174,480 B
# measured. The calls inside an op's call that kept what they made to their own end (the
# fallback's copies) are named in order with their bytes (`nested` in the `opscratch`
# record), each with the call's scratch without it and the ones before it; where the
# ledger's events just before the op's are the first k of those calls (the same names,
# the same bytes made), replay takes the scratch without those k (`Ledger.kernel_scratch`).
# The fallback's copies come first; after them the op's own kernel may call more:
# HolE's circular correlation (pykeen) reaches `new_zeros` with a conjugate view in its
# backward, whose call lists the fallback's `clone` (1,152 B, an event) and then the
# `new_empty` that makes its output (no event), and `offload:interaction` was predicted
# 256 B over measured with the clone counted twice at the `new_zeros`. A kernel's own
# inner call (`_safe_softmax` calling `_softmax`) is no event of the ledger there, and
# keeps its bytes as scratch.
def _inner_calls(ordered: list[tuple[int, int, str]], i: int) -> list[tuple[int, int, str]]:
    """The calls directly inside `ordered[i]` (not inside another inner call), of other
    names; `ordered`: sorted by start, then longest first."""
    start, end, op = ordered[i]
    kids: list[tuple[int, int, str]] = []
    for j in range(i + 1, len(ordered)):
        s, e, name = ordered[j]
        if s >= end:
            break
        if e <= end and not (kids and s < kids[-1][1]):
            kids.append((s, e, name))
    return [k for k in kids if k[2] != op]


def _scratch_without(steps: list[tuple[int, int]], whose: dict[int, int],
                     calls: set[int]) -> int:
    """A call's scratch (most held inside minus held at its end) without the bytes that
    the inner calls `calls` made and kept (`whose`: pointer to inner call)."""
    held = most = 0
    for ptr, size in steps:
        if whose.get(ptr, -1) not in calls:
            held += size
            most = max(most, held)
    return most - held


def _frees_by_pointer(mem: list[tuple[int, int, int]]) -> dict[int, list[int]]:
    """{pointer: the times it was freed}, of `mem` (time, ptr, signed bytes)."""
    out: dict[int, list[int]] = {}
    for t, ptr, size in mem:
        if size < 0:
            out.setdefault(ptr, []).append(t)
    return out


def _kept_by_inner_calls(ordered: list[tuple[int, int, str]], i: int,
                         window: list[tuple[int, int, int]], scratch: int) -> list:
    """`nested`'s entry for the call `ordered[i]` (Note [Inputs a fallback copies before
    the op]): per inner call that made bytes and kept them to its own end, in order,
    [name, bytes kept, the call's scratch without them and the ones before]; [] where
    there is none, or where taking them off changes no scratch. `window`: the (time, ptr,
    signed bytes) inside the call."""
    kids = _inner_calls(ordered, i)
    if not kids:
        return []
    kept = [0] * len(kids)   # bytes each inner call made and still held at its end
    gone = _frees_by_pointer(window)
    whose: dict[int, int] = {}   # ptr: the inner call that made it and kept it
    steps: list[tuple[int, int]] = []   # (ptr, signed bytes) the call's scratch counts
    mine: set[int] = set()
    for t, ptr, size in window:
        if size > 0:
            mine.add(ptr)
            k = next((j for j, (s, e, _) in enumerate(kids) if s <= t <= e), None)
            if k is not None and not any(t <= g <= kids[k][1] for g in gone.get(ptr, ())):
                kept[k] += size
                whose[ptr] = k
            steps.append((ptr, size))
        elif ptr in mine:
            mine.discard(ptr)
            steps.append((ptr, size))
    # the fallback's copies come first, then the op's own kernel's calls
    keepers = [k for k, b in enumerate(kept) if b]
    inner = [[kids[k][2], kept[k], _scratch_without(steps, whose, set(keepers[:n + 1]))]
             for n, k in enumerate(keepers)]
    return inner if any(own != scratch for _, _, own in inner) else []


def _helpers_the_mode_sees(ordered: list[tuple[int, int, str]], i: int) -> list[tuple[int, int]]:
    """(start, end) of the calls inside `ordered[i]`, a composite around a call of its own
    name, that are not inside such a call (Note [A composite op of the same name]); []
    for any other call. `ordered`: sorted by start, then longest first."""
    start, end, op = ordered[i]
    inner: list[tuple[int, int, str]] = []
    for j in range(i + 1, len(ordered)):
        s, e, name = ordered[j]
        if s >= end:
            break
        if e <= end:
            inner.append((s, e, name))
    same = [(s, e) for s, e, name in inner if name == op]
    if not same:
        return []
    return [(s, e) for s, e, name in inner if name != op
            and not any(a <= s and e <= b for a, b in same)]


def call_scratch(mem: list[tuple[int, int, int]],
                 calls: list[tuple[int, int, str]],
                 bare: dict[str, list[int]] | None = None,
                 inside: dict[str, list] | None = None,
                 nested: dict[str, list] | None = None
                 ) -> dict[str, list[int]]:
    """Pure part of `op_scratch`: `mem` (time, ptr, signed bytes) of every CPU allocation
    and free, `calls` (start, end, op name) of every aten call. Per outermost call of a
    name, in call order: max over the call of (bytes it allocated and has not freed) minus
    that at its end; frees of memory allocated before the call do not count. `bare`, when
    given, gets for each op with scratch the places of its calls that hold nothing of their
    own at their end (Note [Calls that made nothing]); `inside`, the places of its calls
    made inside calls of other names, and those names (Note [Calls inside another op]);
    `nested`, for the calls whose inner calls of other names kept what they made to the
    call's end: [place, [[inner name, bytes kept, scratch without it and the ones before
    it], ...]] (Note [Inputs a fallback copies before the op])."""
    from bisect import bisect_left, bisect_right

    mem = sorted(mem, key=lambda m: (m[0], m[2] > 0))   # frees first within one tick
    times = [m[0] for m in mem]
    out: dict[str, list[int]] = {}
    open_until: dict[str, int] = {}       # skip a call nested in a call of the same name
    made_nothing: dict[str, list[int]] = {}
    within: dict[str, list] = {}   # op: [[place, [outer names]], ...]
    enclosing: list[tuple[int, str]] = []   # (end, name) of the calls open at `start`
    ordered = sorted(calls, key=lambda c: (c[0], -c[1]))
    for i, (start, end, op) in enumerate(ordered):
        while enclosing and enclosing[-1][0] <= start:
            enclosing.pop()
        opened = enclosing[:]
        enclosing.append((end, op))
        if start < open_until.get(op, -1):
            continue
        open_until[op] = end
        if opened and (outer := sorted({name for _, name in opened if name != op})):
            within.setdefault(op, []).append([len(out.get(op, ())), outer])
        lo, hi = bisect_left(times, start), bisect_right(times, end)
        if lo == hi:   # nothing allocated or freed inside (most calls): nothing held
            out.setdefault(op, []).append(0)
            made_nothing.setdefault(op, []).append(len(out[op]) - 1)
            continue
        mine: set[int] = set()
        held = most = 0
        seen = _helpers_the_mode_sees(ordered, i)
        for t, ptr, size in mem[lo:hi]:
            if size > 0:
                if seen and any(s <= t <= e for s, e in seen):
                    continue
                mine.add(ptr)
                held += size
            elif ptr in mine:
                mine.discard(ptr)
                held += size
            most = max(most, held)
        scratch = most - held
        out.setdefault(op, []).append(scratch if scratch >= SCRATCH_MIN_BYTES else 0)
        if held == 0:
            made_nothing.setdefault(op, []).append(len(out[op]) - 1)
        # read again, by inner call, only a call with scratch (a few of them)
        if nested is not None and scratch > 0 and not seen and \
                (inner := _kept_by_inner_calls(ordered, i, mem[lo:hi], scratch)):
            nested.setdefault(op, []).append([len(out[op]) - 1, inner])
    found = {op: v for op, v in out.items() if any(v)}
    if nested is not None:
        for op in [op for op in nested if op not in found]:
            del nested[op]
    if bare is not None:
        bare.update({op: made_nothing[op] for op in found if op in made_nothing})
    if inside is not None:
        inside.update({op: within[op] for op in found if op in within})
    return found


def collective_bytes_at_peak(probe: CpuProfilerProbe) -> dict[str, int]:
    """The CPU peak counted by pointer, and the bytes the collectives held for themselves at it.

    # Note [Collective scratch]
    A collective's own buffers are allocated inside its kernel (gloo copies the input of
    `_allgather_base_` into a flat buffer of the output's size, 199,936 B for a 2-layer GPT
    block on 2 ranks, and an async work keeps it until the work is waited on); the dispatch
    mode is switched off inside the op it is handling, so the ledger never sees them, while
    the allocator does. The profiler's event tree nests each allocation under the op that
    made it: an allocation under a `c10d::` op (or made on another thread: gloo's workers)
    is a collective's, and is freed by the same pointer. Summing those live at the
    allocator's peak names the part of `measured - ledger peak` that is communication.

    Counting by pointer also mends the running sum of Note [What the CPU allocator sees]
    where a free happens on a thread the profiler does not follow (gloo's workers release
    an async work's tensors): its event never comes, and a plain running sum would keep
    those bytes forever (199,936 B too high on a 2-rank FSDP2 GPT). When a pointer is
    handed out again while it is still live, the block it held was freed unseen: it leaves
    the count then. Returns {} when the tree is unavailable.
    """
    walked = probe.walk()
    if walked is None:   # pragma: no cover - older torch
        return {}
    # (time, ptr, bytes ±, in c10d, tid)
    allocs = [(t, ptr, b, comm, tid) for t, dev, ptr, b, comm, tid in walked.allocs
              if dev.startswith("cpu")]
    if not allocs:
        return {}
    return pointer_peak(allocs)


def pointer_peak(allocs: list[tuple[int, int, int, bool, int]]) -> dict[str, int]:
    """Pure part of `collective_bytes_at_peak`: allocs are (time, ptr, signed bytes,
    made inside a c10d op, thread id); the first allocation's thread is the script's.

    An allocation whose bytes overlap a block still counted live proves that block was
    freed unseen (two live blocks never share an address): it leaves the count then.
    Example: a 482,304 B block at 0x1000 freed on gloo's thread (no event), then 8,192 B
    handed out at 0x1000 + 4,096: the 482,304 B leave, the 8,192 B come in."""
    from bisect import bisect_left, insort

    # frees before allocations at the same nanosecond: a pointer freed and handed out again
    # within one clock tick is not an unseen free
    allocs = sorted(allocs, key=lambda a: (a[0], a[2] > 0))
    tid0 = allocs[0][4]
    live_ptrs: dict[int, tuple[int, bool]] = {}   # ptr -> (bytes, collective)
    starts: list[int] = []                         # live_ptrs' keys, sorted
    live = comm = peak = comm_at_peak = comm_peak = unseen = 0

    def drop(ptr: int) -> None:
        nonlocal live, comm
        old, was_comm = live_ptrs.pop(ptr)
        del starts[bisect_left(starts, ptr)]
        live -= old
        comm -= old if was_comm else 0

    for _, ptr, size, in_comm, tid in allocs:
        if size > 0:
            # live blocks that this one overlaps: their frees were never reported. Live
            # blocks never overlap each other, so their ends rise with their starts.
            i = bisect_left(starts, ptr + size) - 1
            while i >= 0 and starts[i] + live_ptrs[starts[i]][0] > ptr:
                drop(starts[i])
                unseen += 1
                i -= 1
            is_comm = in_comm or tid != tid0
            live_ptrs[ptr] = (size, is_comm)
            insort(starts, ptr)
            live += size
            comm += size if is_comm else 0
        elif ptr in live_ptrs:
            drop(ptr)
        else:   # freed, never seen allocated (before the profile): as the running sum does
            live += size
        comm_peak = max(comm_peak, comm)
        if live > peak:
            peak, comm_at_peak = live, comm
    return {"peak_bytes": peak, "collective_at_peak_bytes": comm_at_peak,
            "collective_peak_bytes": comm_peak, "unseen_frees": unseen}
