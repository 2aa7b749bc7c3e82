"""The pure parts of the allocator probes (the CUDA path runs in benchmarks/gpu_check.py)."""

from pathlib import Path

import pytest
import torch

from memledger.trace.allocator import cuda_stats_record, peaks_from_events


def test_cpu_peak_is_the_highest_running_sum():
    # alloc 256 KiB, alloc 256 KiB, free one, 4 + 8 bytes of kernel scratch, free 8
    events = [(1, "cpu", 262144, 0xA), (2, "cpu", 262144, 0xB), (3, "cpu", -262144, 0xA),
              (4, "cpu", 4, 0xC), (5, "cpu", 8, 0xD), (6, "cpu", -8, 0xD)]
    assert peaks_from_events(events) == {"cpu": 524288}


def test_events_are_ordered_by_time_and_kept_per_device():
    events = [(5, "cpu", -100, 0xA), (1, "cpu", 100, 0xA), (2, "cuda:0", 1000, 0xA),
              (3, "cuda:0", -1000, 0xA), (4, "cuda:0", 10, 0xB)]
    assert peaks_from_events(events) == {"cpu": 100, "cuda:0": 1000}


def test_a_free_of_a_block_from_an_earlier_profile_is_not_counted():
    # Note [Frees from an earlier profile]: c10 reports the free of a block an earlier
    # profiling session saw made; this session made 512 KiB and freed nothing of its own
    events = [(1, "cpu", -1048576, 0xE), (2, "cpu", 524288, 0xF)]
    assert peaks_from_events(events) == {"cpu": 524288}


def test_the_probe_counts_this_sessions_blocks_only():
    from memledger.trace.allocator import CpuProfilerProbe

    first = CpuProfilerProbe()
    first.start()
    left = torch.empty(1 << 20, dtype=torch.uint8)
    first.stop()
    second = CpuProfilerProbe()
    second.start()
    del left
    kept = torch.empty(1 << 19, dtype=torch.uint8)
    second.stop()
    assert second.peaks()["cpu"] == kept.untyped_storage().nbytes() == 1 << 19


def test_the_peak_read_alone_equals_the_peak_read_with_the_walk():
    """measure reads the peak from the allocations alone (`_allocations`); the trace's
    allocator pass from the full walk it reads kernel scratch from: one number."""
    from memledger.trace.allocator import CpuProfilerProbe

    lin = torch.nn.Linear(64, 64)
    probe = CpuProfilerProbe()
    probe.start()
    x = torch.randn(32, 64)
    for _ in range(2):
        lin(x).relu().sum().backward()
    probe.stop()
    alone = probe.peaks()
    assert probe._walked is None
    probe.walk()
    assert probe.peaks() == alone and alone["cpu"] > 0


def _profiled(ops: bool):
    from memledger.trace.allocator import CpuProfilerProbe

    probe = CpuProfilerProbe(ops=ops)
    probe.start()
    a = torch.empty(1000)   # 4,000 B
    b = torch.ones(250)     # 1,000 B: 5,000 B live, the peak
    del a
    c = b * 2               # 1,000 B more, 2,000 B live
    probe.stop()
    del b, c
    return probe


def test_the_peak_without_the_ops_is_the_peak_with_them():
    """Note [A peak without the ops]: measure and the API profile the allocations alone;
    the same blocks, the same peak, and no op recorded."""
    with_ops, alone = _profiled(True), _profiled(False)
    assert alone.peaks() == with_ops.peaks() == {"cpu": 5_000}
    assert len(alone.walk().allocs) == len(with_ops.walk().allocs)   # the scalar 2 too
    assert alone.walk().calls == []
    assert "mul" in {name for _, _, name in with_ops.walk().calls}


def test_cuda_stats_record_from_memory_stats():
    stats = {"allocated_bytes.all.peak": 3 * 2**20, "reserved_bytes.all.peak": 4 * 2**20,
             "allocated_bytes.all.current": 2**20, "reserved_bytes.all.current": 2 * 2**20,
             "inactive_split_bytes.all.peak": 512, "num_ooms": 1, "num_alloc_retries": 2}
    rec = cuda_stats_record(stats)
    assert rec["peak_bytes"] == 3 * 2**20
    assert rec["reserved_peak_bytes"] == 4 * 2**20
    assert rec["fragmentation_bytes"] == 2**20        # reserved − allocated, now
    assert (rec["num_ooms"], rec["num_alloc_retries"]) == (1, 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_probe_counts_an_allocation():
    from memledger.trace.allocator import CudaProbe

    probe = CudaProbe(record_history=False)
    probe.start()
    x = torch.empty(2**20, dtype=torch.uint8, device="cuda")
    rec = probe.stop()
    del x
    assert rec["peak_bytes"] >= probe.baseline + 2**20


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_checkpoints_rerun_runs_under_the_probes_history(tmp_path):
    # Note [The allocator's history and a checkpoint's re-run] (trace/session.py): with
    # torch's default history, the re-run of a dropout failed with a SystemError
    from torch.utils.checkpoint import checkpoint

    from memledger.trace.allocator import CudaProbe

    block = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)).cuda()
    probe = CudaProbe()
    probe.start()
    checkpoint(block, torch.randn(8, 64, device="cuda"), use_reentrant=False).sum().backward()
    rec = probe.stop(str(tmp_path / "snap.pickle"))
    assert rec["peak_bytes"] > 0 and (tmp_path / "snap.pickle").stat().st_size > 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cublas_workspace_is_what_clearing_it_gives_back():
    # Note [The cuBLAS workspace]: no tensor is left, the workspace a matmul took is
    from memledger.trace.allocator import cublas_workspace_bytes

    x = torch.randn(256, 256, device="cuda")
    (x @ x).sum().item()
    del x
    assert cublas_workspace_bytes() > 0
    assert cublas_workspace_bytes() == 0   # cleared by the first call


def test_scratch_is_what_a_call_allocated_and_let_go_not_its_inputs():
    from memledger.trace.allocator import call_scratch

    K = 8192
    mem = [(10, 0xA, K),          # addmm's output, made before relu
           # BatchNorm backward: grad_input (kept) and empty_like scratch (freed inside)
           (21, 0xB, 4 * K), (22, 0xC, 4 * K), (23, 0xC, -4 * K),
           # TorchScript's relu: its output, then the addmm output it was given, freed
           # inside the call at its last use (was read as 8,192 B of scratch)
           (31, 0xD, K), (32, 0xA, -K)]
    calls = [(20, 25, "native_batch_norm_backward"), (30, 35, "relu"),
             (30, 34, "clamp_min"), (31, 31, "relu")]     # a same-name call nested: skipped
    assert call_scratch(mem, calls) == {"native_batch_norm_backward": [4 * K]}
    # however small (Note [Small scratch]: CPU BatchNorm's 512 B at 32 channels)
    assert call_scratch([(1, 0xE, 512), (2, 0xE, -512)], [(0, 3, "mm")]) == {"mm": [512]}
    assert call_scratch([(1, 0xE, 4), (2, 0xE, -4)], [(0, 3, "div")]) == {"div": [4]}


def test_a_composite_of_the_same_name_leaves_its_helpers_bytes_to_the_ledger():
    # Note [A composite op of the same name]: `where(c, x, 0.0)`, a `where` around
    # `scalar_tensor` (4 B, an event and a storage of the ledger) and `where.self` (its
    # output kept): no scratch. The inner `where`'s own scratch (an `empty` inside it,
    # which the mode never sees) stays; so does a kernel's inner call of another name.
    from memledger.trace.allocator import call_scratch

    mem = [(11, 0xA, 4), (13, 0xB, 1024), (17, 0xA, -4)]
    calls = [(10, 18, "where"), (11, 12, "scalar_tensor"), (13, 16, "where")]
    assert call_scratch(mem, calls) == {}
    mem += [(14, 0xC, 64), (15, 0xC, -64)]
    calls += [(14, 14, "empty")]
    assert call_scratch(mem, calls) == {"where": [64]}
    # `_safe_softmax` calling `_softmax`: the inner call's copy is the kernel's scratch
    assert call_scratch([(21, 0xD, 512), (22, 0xE, 256), (23, 0xD, -512)],
                        [(20, 24, "_safe_softmax"), (21, 23, "_softmax")]) == \
        {"_safe_softmax": [512], "_softmax": [512]}


def test_an_inner_call_that_kept_its_bytes_is_named_with_the_scratch_without_it():
    # Note [Inputs a fallback copies before the op]: `mul` of a conjugate view: the
    # fallback's `clone` (16,384 B, an event of the ledger) inside the call, the op's
    # output, then the clone freed inside: 16,384 B of scratch as the profiler reads it,
    # none of the op's own; `_safe_softmax`'s inner `_softmax` kept nothing at its end
    from memledger.trace.allocator import call_scratch

    K = 16_384
    mem = [(11, 0xA, K), (13, 0xB, K), (14, 0xA, -K),
           (21, 0xC, 512), (22, 0xD, 256), (23, 0xC, -512)]
    calls = [(10, 15, "mul"), (10, 12, "clone"),
             (20, 24, "_safe_softmax"), (21, 23, "_softmax")]
    nested: dict = {}
    assert call_scratch(mem, calls, nested=nested) == \
        {"mul": [K], "_safe_softmax": [512], "_softmax": [512]}
    assert nested == {"mul": [[0, [["clone", K, 0]]]]}
    # HolE's `new_zeros` of a conjugate view: the fallback's clone, then the kernel's own
    # `new_empty` (its output, kept): without the clone alone, no scratch
    nested = {}
    assert call_scratch([(1, 0xA, 1152), (3, 0xB, 2048), (5, 0xA, -1152)],
                        [(0, 6, "new_zeros"), (0, 2, "clone"), (3, 4, "new_empty")],
                        nested=nested) == {"new_zeros": [1152]}
    assert nested == {"new_zeros": [[0, [["clone", 1152, 0], ["new_empty", 2048, 0]]]]}


def test_calls_that_made_nothing_are_named():
    # Note [Calls that made nothing]: `sum(out=...)` (scratch, nothing kept), a `sum` that
    # made its 4 B output, one more `out=` call without scratch; `mm` made nothing and had
    # no scratch, so it is in neither
    from memledger.trace.allocator import call_scratch

    mem = [(1, 0xA, 8), (2, 0xA, -8), (11, 0xB, 4), (12, 0xC, 8), (13, 0xC, -8)]
    calls = [(0, 3, "sum"), (10, 14, "sum"), (20, 21, "sum"), (30, 31, "mm")]
    bare: dict = {}
    assert call_scratch(mem, calls, bare) == {"sum": [8, 8, 0]}
    assert bare == {"sum": [0, 2]}


def test_calls_inside_another_op_are_named_with_it():
    # Note [Calls inside another op]: `_softmax` inside `_safe_softmax` (which the ledger
    # records) and inside `softmax` (a composite the ledger never sees)
    from memledger.ledger.model import _calls_the_ledger_saw, _hidden_calls
    from memledger.trace.allocator import call_scratch

    K = 4096
    mem = [(11, 0xA, K), (12, 0xA, -K),        # scratch of the block's softmax
           (21, 0xB, 512), (22, 0xB, -512)]    # scratch of the sdpa's softmax
    calls = [(0, 5, "_safe_softmax"), (1, 4, "_softmax"),
             (10, 15, "softmax"), (10, 14, "_softmax"), (20, 25, "_softmax")]
    inside: dict = {}
    got = call_scratch(mem, calls, inside=inside)
    assert got == {"_softmax": [0, K, 512], "softmax": [K]}
    assert inside == {"_softmax": [[0, ["_safe_softmax"]], [1, ["softmax"]]]}
    hidden = _hidden_calls(inside["_softmax"], {"_safe_softmax": 0, "_softmax": 1})
    assert hidden == {0}
    assert _calls_the_ledger_saw(got["_softmax"], 2, set(), hidden) == [K, 512]
    assert _calls_the_ledger_saw(got["_softmax"], 3, set(), hidden) == [0, K, 512]
    assert _calls_the_ledger_saw(got["_softmax"], 1, set(), hidden) is None


@torch.library.custom_op("memledger_test::add_twice_", mutates_args=("p",))
def _add_twice_(p: torch.Tensor, g: torch.Tensor) -> None:
    """A library's own operator with a Python CPU kernel, as bitsandbytes' 8-bit optimizer
    updates are: `g + g` (made and freed inside the kernel, below the dispatch mode) added
    into `p`."""
    p.add_(g + g)


def test_an_op_of_another_namespace_is_a_call_with_its_scratch():
    """Note [Ops of other namespaces]: the profiler lists `memledger_test::add_twice_`, the
    dispatch mode `add_twice_.default`; the 4,096 B `g + g` made and freed inside its kernel
    is that call's scratch. Only `aten::` calls were read: the op was no call, and the
    bytes no call's scratch (the `add` that made them keeps them to its end)."""
    from memledger.trace.allocator import CpuProfilerProbe, _library_op, op_scratch

    p, g = torch.zeros(1024), torch.ones(1024)
    probe = CpuProfilerProbe()
    probe.start()
    for _ in range(2):
        torch.ops.memledger_test.add_twice_(p, g)
    probe.stop()
    assert sorted(c[2] for c in probe.walk().calls) == ["add"] * 2 + ["add_"] * 2 + \
        ["add_twice_"] * 2
    assert op_scratch(probe) == {"add_twice_": [4096, 4096]}   # before: {}
    assert float(p[0]) == 4.0
    # collectives (their buffers are Note [Collective scratch]'s), the profiler's own
    # ranges, TorchScript nodes and `record_function` labels are no op calls
    assert [_library_op(n) for n in ("bitsandbytes::optimizer_update_8bit_blockwise",
                                     "c10d::allreduce_", "_c10d_functional::all_reduce",
                                     "profiler::_record_function_enter_new",
                                     "prim::TupleConstruct", "## forward ##",
                                     "Optimizer.step#AdamW.step", "my label::x")] == \
        ["optimizer_update_8bit_blockwise", "", "", "", "", "", "", ""]


def test_a_free_heard_on_no_thread_goes_to_its_block():
    """Note [Frees on a thread the profiler does not follow]: the free lands on the first
    block at that pointer with none of its own heard, at its time or just before the
    pointer is handed out again; a block whose free was heard gets none."""
    from memledger.trace.unheard_frees import add_unheard_frees

    allocs = [(1, "cpu", 0x10, 100), (2, "cpu", 0x20, 50), (3, "cpu", 0x20, -50),
              (9, "cpu", 0x10, 80)]
    # 0x10 freed unheard at 5, handed out again at 9; 0x20's free was heard already
    got = add_unheard_frees(allocs, [(5, 0x10), (4, 0x20)])
    assert sorted(got) == sorted(allocs + [(5, "cpu", 0x10, -100)])
    assert peaks_from_events((t, d, b, p) for t, d, p, b in got) == {"cpu": 150}
    assert peaks_from_events((t, d, b, p) for t, d, p, b in allocs) == {"cpu": 180}
    # recorded after the pointer's next allocation (the finalizer ran late): placed before it
    assert (9, "cpu", 0x10, -100) in add_unheard_frees(allocs, [(12, 0x10)])
    assert add_unheard_frees(allocs, []) is allocs


class _Walked:
    """A probe whose event tree is given (CpuProfilerProbe.walk's reading)."""

    def __init__(self, allocs, calls):
        from memledger.trace.allocator import _Walk

        self._w = _Walk(allocs, calls)

    def walk(self):
        return self._w


def test_kernel_scratch_is_measured_per_device():
    # Note [Kernel scratch on a GPU]: one `opscratch` record per device, each from its own
    # device's blocks; a CUDA cross-entropy's 4 MiB block freed inside the call is its
    # scratch, the cuBLAS workspace made inside the first mm and kept is not
    from memledger.trace.allocator import allocation_devices, scratch_record

    M = 1 << 20
    allocs = [(11, "cuda:0", 0xA, 32 * M, False, 1), (12, "cuda:0", 0xB, 4096, False, 1),
              (21, "cuda:0", 0xC, 4 * M, False, 1), (22, "cuda:0", 0xD, 512, False, 1),
              (23, "cuda:0", 0xC, -4 * M, False, 1),
              (24, "cpu", 0xE, 64, False, 1), (25, "cpu", 0xE, -64, False, 1)]
    calls = [(10, 13, "mm"), (20, 26, "cross_entropy_loss")]
    probe = _Walked(allocs, calls)
    assert allocation_devices(probe) == ["cpu", "cuda:0"]
    gpu = scratch_record(probe, "cuda:0")
    assert gpu == {"k": "opscratch", "device": "cuda:0",
                   "ops": {"cross_entropy_loss": [4 * M]}}
    assert scratch_record(probe, "cpu")["ops"] == {"cross_entropy_loss": [64]}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_trace_on_cuda_places_the_kernels_scratch(tmp_path):
    # Note [Kernel scratch on a GPU]: a trace of the CNN on CUDA writes a cuda:0
    # `opscratch` record (cuDNN's convolution workspace), and what the ledger leaves to
    # `workspace` is the cuBLAS workspace and the allocator's rounding (on the H100:
    # 598,016 B of scratch at the peak, 13,672 B beyond cuBLAS's 68,157,440 B)
    from memledger.ledger.model import Ledger
    from memledger.trace.session import trace_script

    res = trace_script(Path(__file__).parents[2] / "examples" / "train_cnn.py",
                       ["--device", "cuda"], tmp_path / "cnn.ledger", steps=3)
    led = Ledger.load(res.ledger_path)
    recs = [r for r in led.extra.get("opscratch", []) if r["device"] == "cuda:0"]
    assert recs and max(max(v) for v in recs[-1]["ops"].values()) > 0
    cublas = int(led.measured.get("cublas_workspace_bytes") or 0)
    assert 0 <= led.measured["peak_bytes"] - led.peak_with_scratch() - cublas < 64 * 1024
