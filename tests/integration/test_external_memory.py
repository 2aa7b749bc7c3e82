"""Note [Memory torch's allocator did not hand out] (trace/external.py): a storage over
memory another owner allocated (numpy's heap, a Python buffer, another storage's block)
keeps its row in the ledger but is not on the device's curve, as the allocator never saw
its bytes. diffusers' DDPMScheduler keeps `timesteps` as `torch.from_numpy(...)`: every
diffusers ledger read 800 B over the allocator, and every prediction 800 B over measure."""

from __future__ import annotations

import numpy as np
import torch

import memledger


def test_memory_torch_did_not_allocate_is_kept_off_the_curve():
    with memledger.trace(measure=True) as led:
        t = torch.from_numpy(np.arange(1000))                          # 8,000 B, numpy's
        b = torch.frombuffer(bytearray(4096), dtype=torch.float32)     # 4,096 B, Python's
        x = torch.ones(1024)                                           # 4,096 B
        y = torch.utils.dlpack.from_dlpack(x)        # x's 4,096 B, a second storage object
        z = y[t[:512]] + b[:512]                     # index 2,048 B, then add 2,048 B
        del x, y, z
    st = led.storages
    assert sorted(st.loc[st["external"], "bytes"]) == [4096, 4096, 8000]
    assert sorted(led.on_device()["bytes"]) == [2048, 2048, 4096]
    # at the add: x, the index result and the sum; the allocator agrees to the byte
    assert led.peak().bytes == 4096 + 2048 + 2048
    assert led.measured["peak_bytes"] == led.peak_with_scratch() == 8192
