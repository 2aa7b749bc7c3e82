"""Rule 19 of Note [Fake runs] (trace/fake.py): `torch.tensor(values)` of a list that holds
fake tensors.

torch builds a tensor from a list by reading each element's memory itself, not through
dispatch, and a fake element has none ("The tensor has a non-zero number of elements, but
its data is not allocated yet"). Qwen2-VL's rotary positions end so:
`torch.tensor([positions.max() + 1 - len(ids) for each sample])`. While a fake run records,
an element whose values are known (Rule 3's shadows: small integers computed for real) is
replaced by them, as the real run reads them; an unknown one is left, and torch's error
stops the run as before. Only `torch.tensor` and `torch.as_tensor` of a list or tuple are
looked at; every other call passes through.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

_FROM_DATA = (torch.tensor, torch.as_tensor)


class KnownLiterals(TorchFunctionMode):
    """While entered, the known values of fake tensors inside `torch.tensor`'s data."""

    def __init__(self, fake_type: type, values_of: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.fake_type, self.values_of = fake_type, values_of

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _FROM_DATA and args and isinstance(args[0], (list, tuple)):
            args = (self._values(args[0]), *args[1:])
        return func(*args, **(kwargs or {}))

    def _values(self, data: Any) -> Any:
        if isinstance(data, (list, tuple)):
            return type(data)(self._values(x) for x in data)
        if isinstance(data, self.fake_type):
            known = self.values_of(data)
            if known is not None:
                with _disable_current_modes():
                    return known.tolist()
        return data
