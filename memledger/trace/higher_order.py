"""Higher-order operators (flex_attention, cond, scan, ...) met by the collector's modes.

# Note [Higher-order operators run by their ops]
A higher-order operator (`torch._ops.HigherOrderOperator`: `flex_attention`, `cond`,
`while_loop`, `scan`, `map`) is an op that takes functions. Called eagerly under a
TorchDispatchMode, torch hands it to the mode only where the mode says
`supports_higher_order_operators`, and raises otherwise ("There was no rule registered
for HigherOrderOperator flex_attention and mode <...Collector...>"): the traced script
failed (exit 3) where it runs fine alone. native-sparse-attention-pytorch's `Transformer`
validating with `use_flex_sliding_window` under no_grad did so (tests/clients/
train_nsa.py --flex-eval --validate).

Such an op reaches the mode with the mode popped off the stack. Run as it is there, its
work would be one opaque op: its scores matrix (flex_attention on CPU runs its unfused
reference, 2 x 2 x 16 x 16 float32 scores = 4,096 B) made and freed where the collector
sees nothing, and its outputs met as made outside dispatch. So the mode runs the
operator's own eager implementation (its `CompositeExplicitAutograd` kernel, the one
torch itself runs below the modes) with the mode pushed back: every aten op inside
comes through the mode as the op it is, as in a script that wrote the reference out by
hand, and the fake collector's FakeTensorMode below answers them as it answers any op. The
autograd key is already below when the operator reaches the mode, so what autograd saves
is what its own autograd kernel saved (`FlexAttentionAutogradOp`). An operator without
such a kernel runs as it would without the mode (opaque).
"""

from __future__ import annotations

from torch._C import DispatchKey
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import _pop_mode, _push_mode


def is_higher_order(func) -> bool:
    return isinstance(func, HigherOrderOperator)


def run_by_its_ops(mode, func: HigherOrderOperator, args, kwargs):
    """`func(*args, **kwargs)` by its eager kernel with `mode` active, so that its ops
    come through `mode` (Note [Higher-order operators run by their ops])."""
    kernel = func.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
    if kernel is None:
        return func(*args, **(kwargs or {}))
    # pushed as is, not entered: entering a collector (re)installs its hooks
    _push_mode(mode)
    try:
        return kernel(*args, **(kwargs or {}))
    finally:
        _pop_mode()
