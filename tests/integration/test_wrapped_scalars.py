"""Note [Wrapped scalars] (trace/scalars.py): a Python number handed to an op whose schema
takes a Tensor is wrapped in a 0-dim CPU tensor the dispatch mode never sees, and cast
inside the op to the op's dtype; the allocator counts both."""

from __future__ import annotations

import torch

import memledger


def test_python_numbers_wrapped_as_tensors_are_counted_at_their_op():
    with memledger.trace() as led:
        x = torch.ones(1024)                              # 4,096 B
        y = x / 3.0                                       # 4,096 B; 8 B double + 4 B float cast
        y.mul_(0.5)                                       # 8 + 4
        z = torch.ones(4, dtype=torch.float64) * 0.5      # 8 (a double needs no cast)
        w = torch.ones(4, dtype=torch.bfloat16) + 1       # 8 B int64 + 2 B bfloat16 cast
        z.pow(2)                                          # pow.Tensor_Scalar: a Scalar, nothing
        v = x + True                                      # 1 B bool + 4 B float cast
        del x, y, z, w, v
    (rec,) = led.extra["scalars"]
    assert rec["bytes"] == [12, 12, 8, 10, 5]
    # the peak is at `x + True`: x, y, z (32 B), w (8 B) and v live, with v's 1 + 4 B
    # (measured with the CPU profiler: 1 B before `aten::add`, 4 B inside it)
    assert led.peak().bytes == 3 * 4096 + 32 + 8
    assert led.peak_with_scratch() == 3 * 4096 + 32 + 8 + 5
