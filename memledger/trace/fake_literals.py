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

Rule 22: `.numpy()` of a fake tensor. Known values (Rule 3's shadows) are handed back as the
real run reads them; a single element is a scalar read, as `.item()` is (Rule 3's
stand-in, recorded as one): TabNet logs each batch's loss as
`loss.cpu().detach().numpy().item()` inside its `fit`, and a fake run stopped at its first
step ("cannot run fake at ...: `.numpy()` reads tensor values"; tests/clients/
train_tabnet.py). Anything larger (an evaluation's logits for a metric) still stops it.

# Note [What `.numpy()` keeps]
A real `t.numpy()` is a view of the tensor's memory: the array keeps the storage alive as
long as the array lives. pykan's `fit` logs each step's losses so, `results['train_loss'].
append(torch.sqrt(train_loss).cpu().detach().numpy())` (and the test loss and the
regularizer): three 4 B storages a step held to the end of `fit`, in the real ledger. The
fake run's arrays were copies, its storages freed at once, and its ledger read 12 B under
the real one at step 2's peak (tests/clients/train_kan_ema.py `--fit --opt adam`), every
policy with it. The array handed back now lives in a buffer that holds the fake tensor.

Rule 35: `format(t, spec)` of a 0-dim fake tensor (`f"{loss:.4f}"`). torch formats a plain
0-dim tensor as its `detach().item()`; a FakeTensor, a subclass, takes `object.__format__`,
which refuses any spec ("unsupported format string passed to FakeTensor.__format__": the
run stopped, exit 2, where `f"{loss.item():.4f}"` got Rule 3's stand-in) and with none
gave "FakeTensor(..., size=())" where the real run prints the number. The fake run now
formats it as torch formats a plain one: the same `detach` and `.item()` events as the
real run, the same stand-in (0.0, said once at the script's line) as `.item()`. A tensor of
more elements is formatted by `object` in both runs (a spec fails in both).

Rule 24: `F.one_hot`'s width read from values. The width is `num_classes`, or with
`num_classes=-1` the largest index plus one; where either comes from values a fake run does
not have, Rule 3's stand-in made it 0 (or 1) wide, and every size computed from it after was
wrong, silently: ST-MoE's router (`safe_one_hot`: `F.one_hot(positions, max(positions.max() +
2, capacity))`, then `[..., :capacity]`) dispatched 0 tokens to every expert, and the fake
ledger of tests/clients/train_stmoe.py read 593.2 KiB against the real run's 766.9 KiB (no
expert activations at all). A real run never gets a one_hot narrower than its largest
index (the kernel raises), and no bound on the width is known, so the run stops there:
exit 2 and the line (`one_hot` is composite: dispatch sees only its parts, so it is caught
here, where its arguments are still tensors). A width whose values are known (an integer,
a shadow) runs as before.

Rule 25: `copy.deepcopy` of a fake tensor that holds a real `constant` (FakeTensorMode keeps
a one-element literal so). `Tensor.__deepcopy__` deep-copies the tensor's `__dict__`, and
the real constant's storage copy, made inside the mode, fails ("Attempted to set the
storage of a tensor on device "meta" to a storage on different device "cpu"", under a
plain FakeTensorMode too): torchmetrics deep-copies each state's default as a metric is
built (`self._defaults[name] = deepcopy(default)` of `torch.tensor(0.0)`), so every fake
run stopped there. The copy is made without the constant, which is then cloned with the
modes off and set on it, as a real deep copy would hold one.

# Note [A deep copy keeps the whole storage]
Rule 32: a real `copy.deepcopy` of a tensor copies its whole storage (`Tensor.__deepcopy__`:
the typed storage's deep copy, then `set_` with the view's offset, sizes and strides), so a
view keeps its base's extent: `torch.linspace(0, 2 pi, nlon + 1)[:-1]` deep-copied holds
33 float64 (264 B) for its 32. A FakeTensor's `data_ptr()` is 0 to torch (Note [A data
pointer per fake storage]), and torch deep-copies such a tensor by `clone()`: the view's
extent only, 256 B. torch-harmonics deep-copies every tensor its `lru_cache(copy=True)`
hands out, its grids among them; `ResampleS2` keeps four such (its latitudes with the
poles and its longitudes), and `--model lsno` under `--fake` read 16 B under the real
ledger in `buffer`, every policy with it (tests/clients/train_harmonics.py). A deep copy of
a fake tensor whose storage is larger than its view (a plain FakeTensor, dense, a leaf) is
made here as torch makes the real one: a storage of the source's size (`new_empty`, at
this event, where the real run meets an untraced storage copy), a zero-dim `new_empty`
`set_` onto it (as torch's, whose 1-element storage goes at once), then `requires_grad`,
`.grad`, the slots and `__dict__` (Rule 3's shadows, Rule 12's mode) deep-copied as
torch's own code does. Every other deep copy is torch's.

# Note [A fake parameter's deep copy]
Rule 33. A real `nn.Parameter` is deep-copied by `Parameter.__deepcopy__`: one clone of its
data, made a parameter again; its `.grad` is left behind. Under FakeTensorMode
`nn.Parameter(fake)` takes torch's path for tensor subclasses and returns the FakeTensor
itself, flagged `_is_param` (so `isinstance(p, nn.Parameter)` holds), and `copy.deepcopy`
of it runs `Tensor.__deepcopy__`, which copies `.grad` as well: a second clone of each
parameter's size wherever a parameter holding a gradient is deep-copied. x-mlps-pytorch's
`Noisable` deep-copies the named parameters on every noised forward (to add seeded
parameter noise and run the net by `functional_call`); with gradient accumulation the
second micro-batch's forward copies parameters that hold the first's gradients: the fake
ledger of tests/clients/train_x_mlps.py `--net mlp --noisy --accum 2` read 12,236 B over
the real one at its peak (8 more 32 x 32 float32 clones, 4,096 B each, live at once), and
`offload:net.model.layers.*` 17,556 B over. The copy of a fake parameter is now made as a
real one's is: `nn.Parameter(p.data.clone(memory_format=torch.preserve_format),
p.requires_grad)`, put in the memo.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import _disable_current_modes

_FROM_DATA = (torch.tensor, torch.as_tensor)
_NUMPY = torch._C.TensorBase.numpy
_ONE_HOT = torch._C._nn.one_hot   # F.one_hot is this builtin
_DEEPCOPY = torch.Tensor.__deepcopy__
_FORMAT = torch.Tensor.__format__   # Rule 35


class KnownLiterals(TorchFunctionMode):
    """While entered, the known values of fake tensors inside `torch.tensor`'s data, and
    what `.numpy()` of a fake tensor gives (Rule 22): its known values, or for a single
    element the stand-in `scalar_of` makes and records; a 0-dim fake tensor formatted as
    its value (Rule 35)."""

    def __init__(self, fake_type: type, values_of: Callable[[torch.Tensor], Any],
                 scalar_of: Callable[[torch.Tensor], Any] | None = None,
                 unknown_width: Callable[[str], BaseException] | None = None) -> None:
        super().__init__()
        self.fake_type, self.values_of, self.scalar_of = fake_type, values_of, scalar_of
        self.unknown_width = unknown_width   # Rule 24: the error that stops the run

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _FROM_DATA and args and isinstance(args[0], (list, tuple)):
            args = (self._values(args[0]), *args[1:])
        elif func is _NUMPY and args and isinstance(args[0], self.fake_type) and \
                not args[0].requires_grad:
            out = self._numpy(args[0])   # Rule 22
            if out is not None:
                return out
        elif func is _ONE_HOT and self.unknown_width is not None and \
                (how := self._width_unknown(args, kwargs or {})):
            raise self.unknown_width(how)   # Rule 24
        elif func is _FORMAT and _formats_its_value(args, self.fake_type):
            # Rule 35: what torch's `Tensor.__format__` does for a plain 0-dim tensor, whose
            # `.item()` a fake run answers (Rule 3), at the line that formats it
            return args[0].detach().item().__format__(*args[1:])
        elif func is _DEEPCOPY and args and isinstance(args[0], self.fake_type):
            memo = args[1] if len(args) > 1 else (kwargs or {}).get("memo", {})
            if getattr(args[0], "constant", None) is not None:
                return _deepcopy_without_constant(func, args, kwargs or {})   # Rule 25
            if getattr(args[0], "_is_param", False):   # before Rule 32: a parameter's
                return _deepcopy_parameter(args[0], memo)   # copy clones its data: Rule 33
            if _keeps_more_than_its_view(args[0], self.fake_type):
                return _deepcopy_whole_storage(args[0], memo)   # Rule 32
        return func(*args, **(kwargs or {}))

    def _width_unknown(self, args: tuple, kwargs: dict) -> str:
        """Rule 24: how `one_hot`'s width depends on values this fake run does not have
        ("" where it does not)."""
        x = args[0] if args else kwargs.get("input")
        n = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
        if isinstance(n, torch.Tensor):
            known = not isinstance(n, self.fake_type) or self.values_of(n) is not None
            return "" if known else "is read from a tensor's values"
        if n == -1 and isinstance(x, self.fake_type) and x.numel() > 0 and \
                self.values_of(x) is None:
            return "is its input's largest value plus one (num_classes=-1)"
        return ""

    def _numpy(self, t: torch.Tensor) -> Any:
        """Rule 22: the numpy array a real `t.numpy()` gives, where a fake run can say it;
        None where it cannot (the call then fails as before)."""
        known = self.values_of(t)
        with _disable_current_modes():
            if known is not None:
                return _sharing(known.detach().cpu().numpy(), t)
            if t.numel() != 1 or self.scalar_of is None:
                return None
            value = self.scalar_of(t)
            return _sharing(torch.full(tuple(t.shape), value, dtype=t.dtype).numpy(), t)

    def _values(self, data: Any) -> Any:
        if isinstance(data, (list, tuple)):
            return type(data)(self._values(x) for x in data)
        if isinstance(data, self.fake_type):
            known = self.values_of(data)
            if known is not None:
                with _disable_current_modes():
                    return known.tolist()
        return data


def _formats_its_value(args: tuple, fake_type: type) -> bool:
    """Rule 35: `format(t, spec)` of a 0-dim fake tensor, which a real run formats as
    `t.detach().item()` (torch's `Tensor.__format__` for a plain tensor that is not on the
    meta device); every other tensor is formatted as `object` formats it, in both runs."""
    t = args[0] if args else None
    return isinstance(t, fake_type) and len(args) == 2 and t.dim() == 0 and \
        t.fake_device.type != "meta"


class _Holder(bytearray):
    """The memory of a fake tensor's `.numpy()`, which keeps the tensor (Rule 22)."""


def _sharing(values: Any, t: torch.Tensor) -> Any:
    """`values` (a numpy array) in an array that keeps `t`, and so its storage, alive as
    long as the array is, as a real `t.numpy()` shares the tensor's memory (Note [What
    `.numpy()` keeps])."""
    import numpy as np

    holder = _Holder(values.tobytes())
    holder.tensor = t
    return np.frombuffer(holder, dtype=values.dtype).reshape(values.shape)


def _deepcopy_parameter(p: torch.Tensor, memo: dict) -> torch.Tensor:
    """Rule 33: what `Parameter.__deepcopy__` makes of a real parameter, for a fake one:
    its data cloned, no gradient (Note [A fake parameter's deep copy])."""
    if id(p) in memo:
        return memo[id(p)]
    out = torch.nn.Parameter(p.data.clone(memory_format=torch.preserve_format),
                             p.requires_grad)
    memo[id(p)] = out
    return out


def _deepcopy_without_constant(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    """Rule 25: `copy.deepcopy` of a fake tensor with its real `constant` set aside, the
    copy given a clone of it made with the modes off."""
    t = args[0]
    constant = t.constant
    t.constant = None
    try:
        out = func(*args, **kwargs)
    finally:
        t.constant = constant
    with _disable_current_modes():
        out.constant = constant.clone()
    return out


def _keeps_more_than_its_view(t: torch.Tensor, fake_type: type) -> bool:
    """Rule 32: a plain dense fake leaf whose storage holds more than its view reaches
    (Note [A deep copy keeps the whole storage])."""
    if type(t) is not fake_type or t.layout is not torch.strided or not t.is_leaf or \
            t.is_conj() or t.is_neg() or t.fake_device.type == "meta":
        return False
    return t.untyped_storage().nbytes() > t.numel() * t.element_size()


def _deepcopy_whole_storage(t: torch.Tensor, memo: dict) -> torch.Tensor:
    """Rule 32: `copy.deepcopy(t)` of a fake tensor with the whole storage a real copy keeps
    (Note [A deep copy keeps the whole storage]); the steps after the storage are
    `Tensor.__deepcopy__`'s own."""
    import copy
    import copyreg

    if id(t) in memo:
        return memo[id(t)]
    with torch.no_grad():
        whole = t.new_empty((t.untyped_storage().nbytes() // t.element_size(),))
        out = t.new_empty([])
        out.set_(whole.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        del whole
        if t.requires_grad:
            out.requires_grad_()
        if t.grad is not None:
            out.grad = t.grad.__deepcopy__(memo)
        for slot in copyreg._slotnames(type(t)):
            if hasattr(t, slot):
                setattr(out, slot, copy.deepcopy(getattr(t, slot), memo))
        t._clear_non_serializable_cached_data()
        out.__dict__ = copy.deepcopy(t.__dict__, memo)
    memo[id(t)] = out
    return out
