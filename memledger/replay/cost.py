"""Copy bandwidth for the offload cost model, measured with numpy (no torch).

CPU offload writes each saved storage to a file and reads it back (memledger/measure/
offload.py), so the bandwidth that matters is this machine's file write + read through the
page cache. `disk_bandwidth()` writes and reads 32 MiB once (about 20-50 ms) and returns
bytes per second for one direction (the mean of write and read), cached per process.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time

import numpy as np

CALIBRATION_BYTES = 32 * 2**20   # 32 MiB: large enough to amortise open/close


@functools.lru_cache(maxsize=1)
def disk_bandwidth(nbytes: int = CALIBRATION_BYTES) -> float:
    buf = np.ones(nbytes, dtype=np.uint8)
    back = np.empty_like(buf)
    with tempfile.TemporaryDirectory(prefix="memledger-bw-") as tmp:
        path = os.path.join(tmp, "bw.bin")
        t0 = time.perf_counter()
        buf.tofile(path)
        t1 = time.perf_counter()
        with open(path, "rb") as fh:
            fh.readinto(memoryview(back))
        t2 = time.perf_counter()
    return nbytes / max(((t1 - t0) + (t2 - t1)) / 2, 1e-9)
