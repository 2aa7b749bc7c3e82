"""A fake tensor's `data_ptr()` in a fake run: one address per storage, as in a real run.

# Note [A data pointer per fake storage] (Rule 26 of Note [Fake runs], trace/fake.py)
A FakeTensor's storage is a `meta` storage, and its `data_ptr()` is 0 for every tensor (torch
warns that the access "will error" some day, and still returns 0 in 2.13). Libraries that
key tensors by their address then take every tensor for one: heavyball keys its optimizer
state by `(data_ptr(), numel, dtype, device)` (`_tensor_key`), so in a fake run `fc1.weight`
[64, 32] and `fc2.weight` [32, 64] (2,048 elements each) shared one entry, the state of one
was handed to the other, and every heavyball optimizer (AdamW included) stopped the fake run
at its first step ("Attempting to broadcast a dimension of length 64 ... [32, 64] ... [64,
32]") where the real run trains. While a fake run records, `Tensor.data_ptr` of a FakeTensor
answers the address of its storage's C++ object (`untyped_storage()._cdata`, alive as long
as the storage is, shared by its views) plus the view's offset in bytes: distinct storages
read apart, two views of one storage read as a real run's do. A tensor on the `meta` device
by the script's own choice reads 0, as in the real run; real tensors are not touched. The
storage's own `data_ptr()` stays 0 (the collector reads it), and so does a fake tensor's
for torch's own callers and memledger's: torch asks `data_ptr() == 0` of a tensor subclass
to tell a wrapper from a tensor with memory (`Tensor.__deepcopy__`, `__reduce_ex__`), and
a stand-in address made `copy.deepcopy` of a fake tensor copy a meta storage instead of
cloning: `prepare_qat`'s deep copy then lost the observers' buffers (1,236 B resident in the
real run, 0 in the fake one; tests/integration/test_fake.py).

# Note [torch's warning on a fake's data pointer, not shown]
torch's own answer for those callers comes with a warning, "Accessing the data pointer of
FakeTensor is deprecated and will error in PyTorch 2.5. This is almost definitely a bug in
your code ...", raised in C++ once per process (`TORCH_WARN_ONCE`) and so shown at the
innermost Python frame, the wrapper's `return _ORIGINAL(t)`: torchmetrics' `add_state`
deep-copies each state's default (`Tensor.__deepcopy__` asks `data_ptr() == 0`), and
`trace --fake` of tests/clients/train_ema_metrics.py printed "memledger/trace/
fake_pointers.py:52: UserWarning: Accessing the data pointer of FakeTensor ...". The
warning is not the script's: its tensors are plain ones in a real run, which warns
nothing, and the fake tensors are memledger's. Shown at the caller's line (Note [A warning
the script's op raised]) it would name torch/_tensor.py, blaming code that is right. So
the first such read is made with the warning ignored (inside `catch_warnings`, around
this one call); torch warns once per process, so every later read is made plainly and
costs nothing more. A script that reads a fake's pointer itself gets the stand-in address
above, which warns nothing either, as its real run does not.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

import memledger

_ORIGINAL = torch.Tensor.data_ptr
# callers that get torch's own answer (0): torch itself, and memledger
_OWN = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, memledger))


_warned = False   # torch has warned (unseen) of a fake's data pointer in this process


def _torchs_answer(t: torch.Tensor) -> int:
    """torch's `data_ptr()` of a fake tensor, without its warning (Note [torch's warning on
    a fake's data pointer, not shown])."""
    global _warned
    if _warned:
        return _ORIGINAL(t)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
        out = _ORIGINAL(t)
    _warned = True
    return out


class DistinctPointers:
    """While entered, `Tensor.data_ptr()` of a `fake_type` tensor is its storage's address
    stand-in (Note [A data pointer per fake storage])."""

    def __init__(self, fake_type: type) -> None:
        self._fake = fake_type
        self._saved = None

    def __enter__(self) -> "DistinctPointers":
        fake = self._fake

        def data_ptr(t: torch.Tensor) -> int:
            if not isinstance(t, fake):
                return _ORIGINAL(t)
            if sys._getframe(1).f_code.co_filename.startswith(_OWN):
                return _torchs_answer(t)
            if t.fake_device.type == "meta":   # the script's own meta tensor: 0, as for real
                return 0
            return t.untyped_storage()._cdata + t.storage_offset() * t.element_size()

        data_ptr.__doc__ = _ORIGINAL.__doc__
        self._saved = torch.Tensor.__dict__.get("data_ptr")
        torch.Tensor.data_ptr = data_ptr
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            del torch.Tensor.data_ptr
        else:
            torch.Tensor.data_ptr = self._saved
        self._saved = None
