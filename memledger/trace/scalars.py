"""Python numbers that reach an op as tensors: the bytes the dispatch mode never sees.

# Note [Wrapped scalars]
`x / 3.0`, `x.mul_(beta)`, `1 - x`: the op's schema takes a Tensor (`div.Tensor(Tensor
self, Tensor other)`), so torch wraps the Python number in a 0-dim CPU tensor marked as a
"wrapped number" (`scalar_to_tensor`: float64 for a float, int64 for an int, bool for a
bool, complex128 for a complex), calls the op, and frees it when the op returns. Inside the
op, TensorIterator casts that scalar to the op's common dtype when it differs (a float32
`x`: one more 0-dim tensor, 4 bytes, made and freed inside the kernel). A
`TorchDispatchMode` is handed the number back as a Python `float` (torch unwraps wrapped
numbers for Python), so the ledger has no storage for either; the CPU allocator counts both.

Measured with the CPU profiler (float32 `x` of 1,024 elements): `x / 3` allocates 8 B
before `aten::div`, 4 B inside it, frees the 4 B inside and the 8 B after it returns;
`x.mul_(0.5)` the same; a float64 `x * 0.5` only the 8 B (no cast); a bfloat16 `x + 1`
8 B and 2 B; `x + True` 1 B and 4 B. Both are live while the op's output is made, so they
count as one op's transient bytes, like kernel scratch (Note [Kernel scratch] in
trace/allocator.py): the collector writes `scalars` records (events, bytes) and
`Ledger.kernel_scratch` adds them where the op ran; replay adds them again where a re-run
calls the op again.

Where it shows: AdamW on CPU (single-tensor, not capturable) divides the square root of
each `exp_avg_sq` by a Python float, `div.Tensor`, 8 + 4 B. A transformers Qwen2 (2
layers, hidden 64) under `offload:model.layers.*` peaks inside that `div` in the optimizer
step: predicted 1,648,304 B, measured 1,648,312 B (the ledger's 1,648,300 at that op, plus
8 + 4); the baseline peaks in backward, where no op takes a number, so only the policy
read 8 B short.

A wrapped number is a CPU tensor whatever the op's device (CUDA kernels take it by value),
so only ops on CPU tensors count. An op's tensor output gives the common dtype (an
in-place op's output is its `self`).

# Note [Wrapped scalars saved for backward]
`div` and `mul` save their `other` for backward; when `other` is a wrapped number, the
node holds that 8 B tensor until its backward ran (or the graph goes), and no saved-tensor
hook sees it (autograd skips the hooks for wrapped numbers), so it is no activation of the
ledger's, and neither checkpoint nor offload moves it: it stays where it is under every
policy. Autograd sets the op's node on its output after the op returns, so the collector
looks at the next op: the node's `_saved_<argument name>` is the very tensor (the same
storage), which becomes a storage of the ledger from the op's event (`(wrapped number)`,
role `activation`, no `saved` record) with a weakref on its free like any other, and its
8 B leave the op's `scalars` bytes. In backward the node hands the same tensor to its ops
(`grad / other`): the mode sees the number again, but nothing new is allocated, only the
cast; a number the running node saved (by value) counts its cast alone.

Gemma2 (2 layers, hidden 64): each layer's attention scaling (`scores * scaling`) and
soft-capping (`/ cap`, `tanh(...) * cap`), and the logits' soft-capping, keep eight of
them at the baseline's peak in backward, 64 B the ledger lacked; carried to every policy
as unexplained bytes, they read checkpoint +40 B, selective +16 B and offload +64 B.
ALBERT's `gelu_new` constants (3 per call): 96 B.
CPU profiler, `y = x / 3.0; (y * 2.0).sum().backward()`: 8 B before the forward `div`,
freed under `evaluate_function: DivBackward0`; the backward `div` allocates only its 4 B
cast.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch

_current_node = torch._C._current_autograd_node
_Tensor = torch.Tensor
# bytes of the 0-dim tensor torch wraps a Python number in, and its dtype
_WRAPPED = {float: (8, torch.float64), int: (8, torch.int64), bool: (1, torch.bool),
            complex: (16, torch.complex128)}
NUMBERS = frozenset(_WRAPPED)


@functools.lru_cache(maxsize=None)
def tensor_slots(func) -> tuple[tuple[int, str], ...]:
    """(position, name) of an op's positional Tensor arguments: where a Python number is
    wrapped. Cached per op, so that the many ops handed only ints for int arguments (`t`,
    `transpose`, `softmax`'s dim) cost the tracer one lookup (a call per such op made the
    tiny GPT's traced step ~5 % slower)."""
    try:
        args = func._schema.arguments
    except AttributeError:   # not an OpOverload
        return ()
    return tuple((i, a.name) for i, a in enumerate(args)
                 if not a.kwarg_only and a.type.isSubtypeOf(torch._C.TensorType.get()))


class WrappedScalars:
    """Per op: the bytes of the Python numbers it was handed for Tensor arguments, with
    their casts (Note [Wrapped scalars]). Collects (event, bytes) until `take()`; a number
    autograd saved (Note [Wrapped scalars saved for backward]) goes to `on_saved(tensor,
    event)` instead, which makes it a storage of the ledger."""

    def __init__(self, on_saved: Callable[[torch.Tensor, int, str], bool]) -> None:
        self._on_saved = on_saved
        self.events: list[int] = []
        self.bytes: list[int] = []
        # ops whose autograd node may hold a number: (output, event, entry in `bytes`,
        # [(argument name, wrapped bytes, value)], module)
        self.pending: list[tuple[weakref.ref, int, int, list[tuple[str, int, Any]], str]] = []
        # id(node) -> the numbers it saved: its backward hands them to ops again, as the
        # tensors it holds (no new allocation, only the cast). Cleared at each step's end
        self.saved_by_node: dict[int, list[Any]] = {}

    def note(self, func, args: tuple, out: Any, ev: int, module: Callable[[], str]) -> None:
        """Called for an op that had a Python number among its positional arguments and
        takes a Tensor positionally (`tensor_slots`); `module()`: the module running it."""
        found = [(a, name) for i, name in tensor_slots(func) if i < len(args)
                 and type(a := args[i]) in NUMBERS]
        if not found:
            return
        # plain loops, not generators: ~500 such ops a tiny-GPT step (AdamW's `mul_(beta)`)
        t = None
        if isinstance(out, _Tensor):
            t = out
        elif isinstance(out, (list, tuple)):
            for o in out:
                if isinstance(o, _Tensor):
                    t = o
                    break
        first, grad = None, False
        for a in args:
            if isinstance(a, _Tensor):
                if first is None:
                    first = a
                grad = grad or a.requires_grad
        first = t if first is None else first
        if first is None or first.device.type != "cpu":
            return   # a CUDA op: the wrapped number is host memory, not the device's
        mine = self.saved_by_node.get(id(_current_node())) if self.saved_by_node else None
        out_dtype = t.dtype if t is not None else None
        total = 0
        for a, _ in found:
            nbytes, dtype = _WRAPPED[type(a)]
            if mine is None or a not in mine:   # a node's own saved number: no new tensor
                total += nbytes
            if out_dtype is not None and out_dtype != dtype:   # TensorIterator's cast
                total += out_dtype.itemsize
        self.events.append(ev)
        self.bytes.append(total)
        if grad and t is not None and torch.is_grad_enabled():
            # autograd sets the output's node after this op returns: look at the next op
            self.pending.append((weakref.ref(t), ev, len(self.events) - 1,
                                 [(name, _WRAPPED[type(a)][0], a) for a, name in found],
                                 module()))

    def resolve(self) -> None:
        """Note [Wrapped scalars saved for backward]: the numbers the ops' nodes saved."""
        pending, self.pending = self.pending, []
        for ref, ev, entry, names, mod in pending:
            out = ref()
            node = getattr(out, "grad_fn", None)
            if node is None:
                continue
            for name, nbytes, value in names:
                try:
                    saved = getattr(node, "_saved_" + name, None)
                except RuntimeError:   # freed already (a graph backward went through)
                    continue
                if isinstance(saved, torch.Tensor) and saved.dim() == 0 and \
                        self._on_saved(saved, ev, mod):
                    self.bytes[entry] -= nbytes   # a storage of the ledger now
                    self.saved_by_node.setdefault(id(node), []).append(value)

    def take(self) -> dict | None:
        """A `scalars` ledger record of what was noted since the last take, or None."""
        if self.pending:
            self.resolve()
        self.saved_by_node = {}
        if not self.events:
            return None
        rec = {"k": "scalars", "device": "cpu", "ev": self.events, "bytes": self.bytes}
        self.events, self.bytes = [], []
        return rec
