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
"""

from __future__ import annotations

from typing import Any

import torch


class ConstantsLetGo:
    """While entered, `torch.utils.swap_tensors` of a fake constant drops the constant (and
    the converter's weak references to that fake) before it swaps."""

    def __init__(self, fake_type: type, converter: Any) -> None:
        self._fake_type, self._converter = fake_type, converter
        self._swap: Any = None

    def __enter__(self) -> "ConstantsLetGo":
        self._swap = swap = torch.utils.swap_tensors

        def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
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
