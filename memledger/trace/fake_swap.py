"""Rule 23 of Note [Fake runs] (trace/fake.py): a parameter made from a Python literal
moved with `module.to(...)`.

FakeTensorMode keeps a one-element literal (`torch.tensor(0.0)`) as a `constant` beside its
fake, and each such fake (and every alias of it: `nn.Parameter(t)` of a fake is
`t.detach()`) under a weak reference in its converter's `constant_storage_mapping`, to
forget the constant when the literal is written in place. `nn.Module._apply` swaps a fake
parameter for its converted copy (`torch.utils.swap_tensors`), which refuses a tensor any
weak reference points at: gpytorch's `ScaleKernel` makes `raw_outputscale` from
`torch.tensor(0.0)`, and botorch's `SingleTaskGP` moves the kernel it is handed to the
inputs' float64 (`self.to(train_X)`): every fake run of such a model stopped with
"_apply(): Couldn't swap ScaleKernel.raw_outputscale" (torch alone fails so too). While a
fake run records, a fake about to be swapped lets go of its constant first: the weak
references go, and its value is unknown from then on, as any parameter's is.

Note [A swap that changes nothing]
A fake run's `module.to(device)` to the device the parameters are on already swaps every
one of them: torch's `_apply` swaps a FakeTensor parameter always (for a real one it takes
`param.data = param`, which leaves it as it was), even where the conversion returned the
parameter itself, and the swap gives the parameter object a new TensorImpl. The gradient
accumulator of the old one, which the graph built so far holds, is poisoned. soft-moe-pytorch
calls `expert.to(self.device)` for every expert in every forward (`Experts.forward`, its
`all_experts_to_cpu_besides`): under the script's own non-reentrant checkpoint the re-run
in backward moved them again, and every `trace --fake` of it stopped with "Trying to execute
AccumulateGrad node that was poisoned by swap_tensors" (exit 3, blamed on the script, with a
stand-in's branch as the hint), where the real run trains (tests/clients/train_moe.py
--mode soft --grad-ckpt nonreentrant). While a fake run records, a swap of a fake with an
alias of itself that changes nothing (the same storage, offset, sizes, strides, dtype,
device, class and `requires_grad`; or the tensor itself, `.grad`'s swap) is skipped: the
parameter stays the object the real run keeps, its gradient accumulator and the hooks on it
with it. A conversion that changes anything (a dtype, a device the fake run keeps) still
swaps.
"""

from __future__ import annotations

from typing import Any

import torch


class ConstantsLetGo:
    """While entered, `torch.utils.swap_tensors` of a fake constant drops the constant (and
    the converter's weak references to that fake) before it swaps, and a swap that changes
    nothing is skipped (Note [A swap that changes nothing])."""

    def __init__(self, fake_type: type, converter: Any) -> None:
        self._fake_type, self._converter = fake_type, converter
        self._swap: Any = None

    def __enter__(self) -> "ConstantsLetGo":
        self._swap = swap = torch.utils.swap_tensors

        def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
            if self._changes_nothing(t1, t2):   # Note [A swap that changes nothing]
                return None
            for t in (t1, t2):
                if isinstance(t, self._fake_type) and getattr(t, "constant", None) is not None:
                    self._let_go(t)
            return swap(t1, t2)

        torch.utils.swap_tensors = swap_tensors
        return self

    def __exit__(self, *exc: object) -> None:
        if self._swap is not None:
            torch.utils.swap_tensors = self._swap
            self._swap = None

    def _changes_nothing(self, t1: Any, t2: Any) -> bool:
        if t1 is t2:
            return True
        if not (isinstance(t1, self._fake_type) and isinstance(t2, self._fake_type)) \
                or type(t1) is not type(t2) \
                or t1.layout is not torch.strided or t2.layout is not torch.strided:
            return False   # a sparse gradient has no storage to compare
        return (t1.untyped_storage()._cdata == t2.untyped_storage()._cdata
                and t1.storage_offset() == t2.storage_offset() and t1.shape == t2.shape
                and t1.stride() == t2.stride() and t1.dtype == t2.dtype
                and t1.device == t2.device and t1.requires_grad == t2.requires_grad)

    def _let_go(self, t: torch.Tensor) -> None:
        mapping = self._converter.constant_storage_mapping
        for key, refs in list(mapping.items()):
            kept = [r for r in refs if r() is not t]
            if len(kept) != len(refs):
                if kept:
                    mapping[key] = kept
                else:
                    del mapping[key]
        t.constant = None
