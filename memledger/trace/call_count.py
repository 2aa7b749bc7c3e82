"""Module calls counted in the allocator pass, to tell whether both passes ran the same code.

# Note [Two passes, one run?]
`trace` runs the script twice (Note [Warm allocator pass], session.py), and the ledger's
peak is checked against the allocator pass's. A script that draws from a generator nobody
seeded (x-transformers' `layer_dropout` uses Python's `random`; a layer chosen by
`random.random()`) runs other layers in each pass, and `show` said only "the ledger counts
196,608 bytes (44%) more than the allocator saw". So the allocator pass counts the module
calls of its measured steps as the collector records them (a `scope` per call, outside
backward, in the thread that runs the script), and `show` says when the counts differ.
A library that picks by the clock does the same to a seeded script: transfusion-pytorch's
default `modality_processing="auto"` times three layouts of a batch's modalities on its
first batch of each structure and keeps the fastest, so each pass may keep another (one
projection per modality type, or one per modality): `train_transfusion.py --ema` read 356
module calls in the ledger pass and 348 in the allocator pass, and `show` named only an
unseeded random choice or the data, and said to seed generators the script had seeded; it
names the clock too, and says to fix such a choice by its setting.
Calls inside backward (a checkpoint's re-run) are left out on both sides: on CUDA they run
in autograd's threads. Not compared when Dynamo compiled frames (compiled code calls no
module hooks per submodule).
"""

from __future__ import annotations

import threading

import torch
from torch.nn.modules import module as nn_module


class ModuleCalls:
    """Counts module forward calls outside backward in the thread that made it, until
    `stop()`."""

    def __init__(self) -> None:
        self.n = 0
        self._thread = threading.get_ident()
        # at the call's end, as the collector writes its `scope`: a call during which the
        # measured steps ended (the first step left open ends as a root's forward begins,
        # trace/steps.py) is in neither count
        self._handle = nn_module.register_module_forward_hook(self._count, always_call=True)

    def _count(self, module, args, output) -> None:
        if threading.get_ident() == self._thread and torch._C._current_graph_task_id() == -1:
            self.n += 1

    def stop(self) -> int:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        return self.n
