"""Rule 14 of trace/fake.py: losses whose reduced CPU result keeps the unreduced buffer.

CPU's `mse_loss`, `smooth_l1_loss`, `binary_cross_entropy` and `soft_margin_loss` reduce
(mean or sum) into the first element of the element-wise loss they computed and return
that 0-dim view: the loss tensor holds the input-sized buffer for as long as the script
holds the loss (`F.mse_loss` of a (2, 3, 16, 16) fp32 prediction: 6,144 B, not 4). A
training loop keeps the last step's loss through the next forward (`loss = ...` rebinds it
after), so the fake ledger of a diffusers UNet read 6,140 B under the real one at its
forward peak. FakeTensorMode's meta result is a 4 B scalar; a fake run on a host target
counts the buffer. CUDA's kernels were not checked (no GPU here): left as FakeTensorMode
says.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# op -> position of its `reduction` argument (0: none, 1: mean, 2: sum; default mean)
_REDUCTION_ARG = {
    aten.mse_loss.default: 2,
    aten.smooth_l1_loss.default: 2,
    aten.binary_cross_entropy.default: 3,
    aten.soft_margin_loss.default: 2,
}


def reduced_loss_bytes(func, args, kwargs) -> int | None:
    """The bytes a host run's result of `func` holds where they exceed its 0-dim size."""
    at = _REDUCTION_ARG.get(func)
    if at is None or not args or not isinstance(args[0], torch.Tensor):
        return None
    reduction = args[at] if len(args) > at else (kwargs or {}).get("reduction", 1)
    if reduction == 0:
        return None
    x = args[0]
    return x.numel() * x.element_size()
