"""The pure parts of the allocator probes (the CUDA path runs in benchmarks/gpu_check.py)."""

import pytest
import torch

from memledger.trace.allocator import cuda_stats_record, peaks_from_events


def test_cpu_peak_is_the_highest_running_sum():
    # alloc 256 KiB, alloc 256 KiB, free one, 4 + 8 bytes of kernel scratch, free 8
    events = [(1, "cpu", 262144), (2, "cpu", 262144), (3, "cpu", -262144), (4, "cpu", 4),
              (5, "cpu", 8), (6, "cpu", -8)]
    assert peaks_from_events(events) == {"cpu": 524288}


def test_events_are_ordered_by_time_and_kept_per_device():
    events = [(5, "cpu", -100), (1, "cpu", 100), (2, "cuda:0", 1000), (3, "cuda:0", -1000),
              (4, "cuda:0", 10)]
    assert peaks_from_events(events) == {"cpu": 100, "cuda:0": 1000}


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
