"""Python numbers that reach an op as tensors: the bytes the dispatch mode never sees.

# Note [Wrapped scalars]
`x / 3.0`, `x.mul_(beta)`, `x + 1`: the op's schema takes a Tensor (`div.Tensor(Tensor
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

# Note [A view's node is not read]
An op that wraps a number and returns a view is an in-place op on a view (`H[..., -1, -1]
+= 1.0`: kornia's `convert_affinematrix_to_homography`, under every `warp_affine`). Its node
is not the view's `grad_fn`: autograd wraps it in a `CopySlices` on the base and gives the
view a new node, made when `grad_fn` is first read after the write, so the node read here
never held the number. Reading it is not free either: torch makes that node under a lock on
the view, and for a FakeTensor (whose views are replayed, trace/fake_views.py) by running
the view op again, through this mode. When the op that follows is that replay, made by
autograd for the write (`copy_` of `H[..., -1, -1] = ...`), the read here waited on the
lock its own caller held: `trace --fake` of a kornia spatial transformer hung for good
(the same lock Rule 17 of Note [Fake runs] steps around, `_replaying` in trace/fake_views.py,
for the read it makes on purpose); normflows' spline flows (`bin_locations[..., -1] +=
eps`) hung the same way (found by two helpers at once). Such outputs' nodes are not read;
the number an in-place `div_` on a view saves (8 B, inside the `CopySlices`) is found from
the view's base instead (Note [A number saved inside CopySlices]).

# Note [Numbers an op wraps itself]
The `.Scalar` overloads of the binary TensorIterator ops take the number as a `Scalar`, not
a Tensor, and their kernels wrap it themselves (`wrapped_scalar_tensor`, `scalar_to_tensor`)
before TensorIterator casts it: the same 0-dim tensor and cast as above, made and freed
inside the op. Python reaches them for comparisons (`x > 0.5` is `gt.Scalar`) and C++
composites reach them for arithmetic: on CPU `nn.Dropout` is `empty_like`, `bernoulli_`,
`div_.Scalar(noise, 1 - p)`, `mul`, and that `div_` takes 8 B (the double) + 4 B (its
float cast) the dispatch mode never saw. An in-place op makes no storage, so no kernel
scratch is matched to it either (Note [Kernel scratch] in trace/allocator.py; and it is
under `SCRATCH_MIN_BYTES`). vit-pytorch's ViT (dropout inside its attention), checkpointed
per attention block, peaks in the re-run's dropout: predicted 559,840 B, measured 559,852 B
(tests/clients/train_lucid.py --case vit).
Measured with the CPU profiler on every aten overload taking (Tensor, Scalar) or (Scalar,
Tensor), fp32/int64/bool tensors with a float, an int and a bool: the overloads in
`_WRAPS_SCALAR` allocate the wrapped number (8 B; 1 B for a bool) and, when the common
dtype differs from the number's, one element of the common dtype (for a comparison, whose
output is bool, the common dtype is the inputs' `result_type`: `gt.Scalar(fp32, 0.5)` 8 +
4 B, `eq.Scalar(int64, 0)` 8 B; Python's `1 - x` is `rsub.Scalar`: 8 + 4 B). `where(c, x,
0.0)` makes its 0-dim tensor with `scalar_tensor`, which the mode sees. Others take the
number by value and allocate nothing for it: `pow.Tensor_Scalar`, `clamp`, `fill_`, `leaky_relu`,
`hardtanh`, `lerp_.Scalar`, `masked_fill.Scalar`, `add.Tensor`'s `alpha`.

# Note [Numbers wrapped again under a dispatch mode]
torch unwraps a wrapped number for Python, so a `TorchDispatchMode` is handed `x * 3` as
`mul.Tensor(x, 3)`; when the mode calls `func(*args)` the number reaches a Tensor argument
again and torch wraps it a second time (8 B for a float or an int), inside the op, while
the first one (wrapped before the mode, and held by the op's node when autograd saved it)
is still live. The ledger's own mode never calls the op's kernel that way in the run the
allocator measures, but selective checkpoint runs its region's forward and its re-run
under modes of its own (`_CachingTorchDispatchMode`, `_CachedTorchDispatchMode`), so every
such op inside a selective region takes the number's bytes once more. A random model's
`softmax(h) * W` (tests/clients/train_random.py, `none/;none/;none/attention softmax
tanh`) peaks in the re-run's `mul`: the allocator pass measured 12 B of scratch there
under `selective:blocks.*` (4 B in the baseline), and the prediction read 8 B under
measured. Only numbers torch wraps before the op (a Tensor argument), not the `.Scalar`
overloads' (their kernel wraps them once whoever calls it, Note [Numbers an op wraps
itself]). Measured with the CPU profiler, `x * 3` (1,024 fp32 elements) under a mode that
only calls `func`: allocations 8, 8, 4 (the cast), 4,096, peak 4,116 B against 4,108 B
without the mode, whether or not `x` requires grad (saved or not, the number is wrapped
again). The `scalars` record carries those bytes per op (`wev`, `wbytes`); the replay adds
them where a selective region runs the op (engine.py, `_rewrapped_rows`).

# Note [Inputs an op casts]
On CPU a TensorIterator op handed tensors of different dtypes copies each input whose
dtype is not the common one (`torch.result_type`; a 0-dim tensor does not promote) into a
temporary of the common dtype, in the input's shape, and frees it before returning; an
in-place op whose `self` is not of the common dtype also computes into a temporary of the
common dtype and copies back. Measured with the CPU profiler: `bf16 + f32` (1,024
elements) allocates the output and a 4,096 B fp32 copy of the bf16 input; `f32.add_(bf16)`
the copy; `bf16.add_(f32)` a copy of each and the temporary output (8,192 B); `addcmul(f32,
bf16, bf16)` two copies; `where(c, bf16, f32)` one; `i64 < f32` one. The dispatch mode sees
none of them. Under bf16 autocast a block that adds a bf16 branch output to an fp32
residual pays one such copy per add: x-transformers' hyper-connections (`einsum(x, beta) +
residuals`, bf16 + fp32) under `checkpoint:attn_layers` peaked in the re-run at that add:
predicted 1,991,496 B, measured 1,999,688 B (the 8,192 B copy). The allocator pass measures
such a copy as the op's kernel scratch too (Note [Kernel scratch] in trace/allocator.py),
but only where it can match its calls of the op to the ledger's events, all of them or
none: there the copy was in `add`, whose calls the ledger counts differently in backward
(Note [In place but for the mode] in trace/collector.py), so none matched. The collector
writes the copies' bytes per op (`cev`, `cbytes` in the `scalars` records) and
`Ledger.kernel_scratch` takes them out of the matched scratch where it has it, so they
count once.
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

# Note [Numbers an op wraps itself]: overloads whose kernel wraps a Scalar argument
_WRAPS_SCALAR = frozenset(
    [f"{op}.{ov}" for op in ("add", "add_", "sub", "sub_", "subtract", "subtract_", "mul",
                              "mul_", "multiply", "multiply_", "div", "div_", "divide",
                              "divide_", "true_divide", "true_divide_", "floor_divide",
                              "floor_divide_", "remainder", "remainder_", "fmod", "fmod_",
                              "eq", "eq_", "ne", "ne_", "not_equal", "not_equal_", "lt",
                              "lt_", "le", "le_", "gt", "gt_", "ge", "ge_", "less", "less_",
                              "less_equal", "less_equal_", "greater", "greater_",
                              "greater_equal", "greater_equal_", "bitwise_and",
                              "bitwise_and_", "bitwise_or", "bitwise_or_", "bitwise_xor",
                              "bitwise_xor_", "copysign", "copysign_")
     for ov in ("Scalar", "Scalar_mode")]
    + ["rsub.Scalar", "remainder.Scalar_Tensor", "pow.Scalar", "bitwise_and.Scalar_Tensor",
       "bitwise_or.Scalar_Tensor", "bitwise_xor.Scalar_Tensor",
       "bitwise_left_shift.Tensor_Scalar", "bitwise_left_shift_.Tensor_Scalar",
       "bitwise_left_shift.Scalar_Tensor", "bitwise_right_shift.Tensor_Scalar",
       "bitwise_right_shift_.Tensor_Scalar", "bitwise_right_shift.Scalar_Tensor",
       "xlogy.Scalar_Other", "xlogy_.Scalar_Other", "xlogy.Scalar_Self",
       "special_xlog1py.other_scalar", "special_xlog1py.self_scalar",
       "special_zeta.other_scalar", "special_zeta.self_scalar", "isin.Tensor_Scalar"])
# how a slot's number becomes a tensor: wrapped by torch before the op, or by its kernel
TENSOR, SCALAR = 0, 1

# Note [Inputs an op casts]: the TensorIterator ops that take tensors of mixed dtypes
_CASTING_PACKETS = frozenset(
    n + sfx for n in ("add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide",
                      "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "maximum",
                      "minimum", "fmax", "fmin", "addcmul", "addcdiv", "lerp", "pow",
                      "atan2", "copysign", "hypot", "xlogy", "logical_and", "logical_or",
                      "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "where",
                      "clamp", "heaviside", "nextafter")
    for sfx in ("", "_")) - {"where_", "rsub_"}


@functools.lru_cache(maxsize=None)
def casts_inputs(func) -> bool:
    """Whether `func` is a TensorIterator op that casts mixed-dtype inputs (Note [Inputs an
    op casts]). One attribute read and a set lookup: the tracer asks for every op."""
    try:
        return func._overloadpacket.__name__ in _CASTING_PACKETS
    except AttributeError:
        return False


def _common(a: torch.Tensor, b: torch.Tensor) -> torch.dtype:
    return torch.result_type(a, b)


def cast_bytes(func, args: tuple, out: Any) -> int:
    """Bytes of the temporaries a CPU TensorIterator op makes to cast its inputs (and, in
    place, its output) to the common dtype: Note [Inputs an op casts]."""
    ts = [a for a in args if isinstance(a, _Tensor)]
    if func._overloadpacket.__name__ == "where" and ts:
        ts = ts[1:]   # the condition is read as bool, never cast
    if len(ts) < 2:
        return 0
    first = ts[0].dtype
    for t in ts[1:]:
        if t.dtype is not first:
            break
    else:
        return 0   # one dtype: nothing cast (asked first: cheaper than the device)
    if ts[0].device.type != "cpu":
        return 0
    common = _common(ts[0], ts[1])
    if len(ts) > 2:   # addcmul, addcdiv, lerp: fold in the third as its own category
        probe = torch.empty(() if ts[0].dim() == 0 and ts[1].dim() == 0 else (1,),
                            dtype=common, device="meta")
        for t in ts[2:]:
            common = _common(probe, t)
            probe = torch.empty(probe.shape if t.dim() == 0 else (1,), dtype=common,
                                device="meta")
    size = common.itemsize
    total = 0
    for t in ts:
        if t.dtype is not common:
            total += t.numel() * size
    if func._overloadpacket.__name__.endswith("_"):
        self_t = args[0] if args and isinstance(args[0], _Tensor) else None
        if self_t is not None and self_t.dtype is not common:
            total += self_t.numel() * size   # computed into a temporary, copied back
    return total


@functools.lru_cache(maxsize=None)
def tensor_slots(func) -> tuple[tuple[int, str, int], ...]:
    """(position, name, how) of an op's positional arguments where a Python number is made a
    tensor: its Tensor arguments (`TENSOR`: torch wraps the number before the op), and the
    Scalar arguments of the overloads that wrap them inside (`SCALAR`: Note
    [Numbers an op wraps itself]). Cached per op, so that the many ops handed only ints for
    int arguments (`t`, `transpose`, `softmax`'s dim) cost the tracer one lookup (a call per
    such op made the tiny GPT's traced step ~5 % slower)."""
    try:
        args = func._schema.arguments
        name = f"{func._overloadpacket.__name__}.{func._overloadname}"
    except AttributeError:   # not an OpOverload
        return ()
    how = SCALAR if name in _WRAPS_SCALAR else None
    number = torch._C.NumberType.get()
    out = []
    for i, a in enumerate(args):
        if a.kwarg_only:
            continue
        if a.type.isSubtypeOf(torch._C.TensorType.get()):
            out.append((i, a.name, TENSOR))
        elif how is not None and a.type == number and a.name != "alpha":   # by value
            out.append((i, a.name, how))
    return tuple(out)


# Note [A number where a tensor must be]
# A graph `torch.jit.trace` recorded keeps each Python number the traced code used as a 0-dim
# constant marked "wrapped number", and the graph hands that constant to ops as their `self`
# as well as their `other` (`aten::_local_scalar_dense`, `aten::view` of it, in the check
# run that `torch.jit.trace` makes of the graph it just recorded). A Python dispatch mode
# is handed every wrapped number as a Python float (torch issue #130726), and calling the
# op back with a number where its schema's `self` is a Tensor raises ("aten::view() Expected
# a value of type 'Tensor' for argument 'self' but instead found type 'float'"): the untraced
# script runs, the traced one failed at set-up with torch's traceback. e3nn's
# `e3nn.util.jit.compile` traces each activation's `normalize2mom` (`f(x).mul(cst)`):
# tests/clients/train_e3nn.py --compile ended "script raised RuntimeError" (exit 3). So
# where the op fails so, the collector hands it the number as the 0-dim tensor torch made
# (8 B for a float, `_WRAPPED`), made with the mode off: no event of the ledger's, as the
# graph's constant was none.
def rewrapped(func, args: tuple) -> tuple | None:
    """`args` with each Python number at a positional Tensor argument made a 0-dim tensor of
    the dtype torch wraps it in, or None where there is none (Note [A number where a tensor
    must be])."""
    fixed, found = list(args), False
    for i, _, how in tensor_slots(func):
        if how == TENSOR and i < len(args) and type(a := args[i]) in NUMBERS:
            fixed[i] = torch.tensor(a, dtype=_WRAPPED[type(a)][1])
            found = True
    return tuple(fixed) if found else None


# Note [A number saved inside CopySlices]
# An in-place op on a view that wraps a number (Note [A view's node is not read]) saves it
# as any other op does, but in a node autograd hides inside the CopySlices it makes for the
# view's base, and no attribute of a CopySlices reaches that node or its saves. nflows'
# rational-quadratic coupling layers scale their spline parameters in place, slices of
# the transform net's output (`unnormalized_widths /= np.sqrt(hidden_features)`, heights
# the same): each layer's two `div_` keep 8 B each until the layer's backward, and the
# ledger read 32 B under the allocator on two layers (tests/clients/train_nflows.py --mode
# nsf: 167,934 B against 167,966 B). The op's own node is read where autograd would make
# it, from the op and the kinds of its arguments: the op is called once more on 0-dim
# tensors of the same dtypes and `requires_grad` with the dispatch mode off and autograd's
# keys back on (a mode's `__torch_dispatch__` runs below autograd), and whether that node
# holds the number in `_saved_<argument>` is the answer, cached per op and kinds. The
# number the real node holds is not reachable, so a stand-in (a tensor of its dtype and
# value, made with the mode off) is the ledger's storage from the op's event, and the
# CopySlices holds it through a post hook of its own: freed when the CopySlices has run in
# backward (autograd lets go of the hidden node's saves right after its post hooks, with
# no op between), or with the node, when the graph goes unread. A backward that keeps its
# graph (`retain_graph=True`) keeps the real number past the node's run, the stand-in
# not: such a number reads as freed where its backward ran. A post hook makes autograd
# keep the node's incoming gradient until the hook has run, with no op between: the same
# event.
_no_dispatch = torch._C._DisableTorchDispatch
_KEYS = torch._C.DispatchKey
_PLAIN = (type(None), bool, int, float, str)


def _spec(func, args: tuple) -> tuple | None:
    """The kinds of an op's positional arguments, as `_saves_number` reads them: a tensor's
    dtype and `requires_grad`, a number's type where a Tensor goes, other values as they
    are; None where one is none of those (a list)."""
    slots = {i for i, _, how in tensor_slots(func) if how == TENSOR}
    out = []
    for i, a in enumerate(args):
        if isinstance(a, _Tensor):
            out.append(("t", a.dtype, a.requires_grad))
        elif i in slots and type(a) in NUMBERS:
            out.append(("n", type(a)))
        elif type(a) in _PLAIN:
            out.append(("v", a))
        else:
            return None
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _saves_number(func, spec: tuple, name: str) -> bool:
    """Whether the node autograd makes for `func` on arguments of these kinds (`_spec`)
    saves the number handed as `name` (Note [A number saved inside CopySlices]): the op
    called on 0-dim tensors, with autograd on; False where that call fails."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for k in (_KEYS.AutogradCPU, _KEYS.ADInplaceOrView, _KEYS.AutogradOther):
        exclude = exclude.remove(k)
    try:
        with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(),
                                             exclude), _no_dispatch(), torch.enable_grad():
            args = []
            for kind, *what in spec:
                if kind == "t":
                    t = torch.ones((), dtype=what[0])
                    args.append(t.requires_grad_().clone() if what[1] else t)
                else:
                    args.append(what[0](1) if kind == "n" else what[0])
            out = func(*args)
            t = out if isinstance(out, _Tensor) else out[0]
            saved = getattr(t.grad_fn, "_saved_" + name, None)
        return isinstance(saved, _Tensor) and saved.dim() == 0
    except Exception:   # an op 0-dim tensors cannot take: unseen, as before
        return False


class WrappedScalars:
    """Per op: the bytes of the Python numbers it was handed for Tensor arguments, with
    their casts (Note [Wrapped scalars]). Collects (event, bytes) until `take()`; a number
    autograd saved (Note [Wrapped scalars saved for backward]) goes to `on_saved(tensor,
    event)` instead, which makes it a storage of the ledger."""

    def __init__(self, on_saved: Callable[[torch.Tensor, int, str], bool]) -> None:
        self._on_saved = on_saved
        self.events: list[int] = []
        self.bytes: list[int] = []
        self.cast_events: list[int] = []   # Note [Inputs an op casts]
        # Note [Numbers wrapped again under a dispatch mode]: per op, the bytes of the
        # numbers torch wrapped before it, which a Python dispatch mode wraps again
        self.rewrap_events: list[int] = []
        self.rewrap_bytes: list[int] = []
        self.cast_bytes: list[int] = []
        # ops whose autograd node may hold a number: (output, event, entry in `bytes`,
        # [(argument name, wrapped bytes, value)], module)
        self.pending: list[tuple[weakref.ref, int, int, list[tuple[str, int, Any]], str]] = []
        # id(node) -> the numbers it saved: its backward hands them to ops again, as the
        # tensors it holds (no new allocation, only the cast). Cleared at each step's end
        self.saved_by_node: dict[int, list[Any]] = {}

    def note(self, func, args: tuple, out: Any, ev: int, module: Callable[[], str],
             slots: tuple[tuple[int, str, int], ...] | None = None) -> None:
        """Called for an op that had a Python number among its positional arguments and
        takes a Tensor positionally (`tensor_slots`, or `slots` when the caller has read
        them already); `module()`: the module running it."""
        if slots is None:
            slots = tensor_slots(func)
        found = [(a, name, how) for i, name, how in slots if i < len(args)
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
        total = rewrap = 0
        wrapped_here = []   # (name, bytes, number) torch wrapped before the op: autograd
        for a, name, how in found:   # may save those (Note [Wrapped scalars saved ...])
            nbytes, dtype = _WRAPPED[type(a)]
            cast = out_dtype
            if how == SCALAR and cast is torch.bool and first is not t:
                cast = torch.result_type(first, a)   # a comparison casts to the inputs'
            if how == SCALAR or mine is None or a not in mine:   # a node's own saved
                total += nbytes                                   # number: no new tensor
            if cast is not None and cast != dtype:   # TensorIterator's cast
                total += cast.itemsize
            if how == TENSOR:
                wrapped_here.append((name, nbytes, a))
                rewrap += nbytes
        self.events.append(ev)
        self.bytes.append(total)
        if rewrap:
            self.rewrap_events.append(ev)
            self.rewrap_bytes.append(rewrap)
        if wrapped_here and grad and t is not None and torch.is_grad_enabled():
            # autograd sets the output's node after this op returns: look at the next op
            # an in-place op on a view: its node hides inside the base's CopySlices (Note [A
            # number saved inside CopySlices]), judged by what the op is handed
            view = (func, _spec(func, args)) if t._is_view() else None
            self.pending.append((weakref.ref(t), ev, len(self.events) - 1, wrapped_here,
                                 module(), view))

    def resolve(self) -> None:
        """Note [Wrapped scalars saved for backward]: the numbers the ops' nodes saved."""
        pending, self.pending = self.pending, []
        for ref, ev, entry, names, mod, view in pending:
            out = ref()
            if out is None:
                continue
            if out._is_view():   # Note [A view's node is not read]
                if view is not None and view[1] is not None:
                    self._resolve_view(out, ev, entry, names, mod, *view)
                continue
            node = out.grad_fn
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

    def _resolve_view(self, out: torch.Tensor, ev: int, entry: int, names: list, mod: str,
                      func, spec: tuple) -> None:
        """Note [A number saved inside CopySlices]: the numbers an in-place op on a view
        saved, in the node its base's CopySlices holds."""
        base = out._base
        node = base.grad_fn if base is not None else None   # a base is no view: plain read
        if node is None or type(node).__name__ != "CopySlices":
            return
        for name, nbytes, value in names:
            if not _saves_number(func, spec, name):
                continue
            with _no_dispatch():   # a real CPU tensor as torch's is, in a fake run too
                stand_in = torch.tensor(value, dtype=_WRAPPED[type(value)][1])
            if not self._on_saved(stand_in, ev, mod):
                continue
            self.bytes[entry] -= nbytes   # a storage of the ledger now
            self.saved_by_node.setdefault(id(node), []).append(value)
            held = [stand_in]   # the node holds it: gone with the node, or as it has run
            node.register_hook(lambda _gi, _go, held=held: held.clear())

    def note_casts(self, func, args: tuple, out: Any, ev: int) -> None:
        """Note [Inputs an op casts]: called for an op `casts_inputs` names."""
        n = cast_bytes(func, args, out)
        if n:
            self.cast_events.append(ev)
            self.cast_bytes.append(n)

    def take(self) -> dict | None:
        """A `scalars` ledger record of what was noted since the last take, or None."""
        if self.pending:
            self.resolve()
        self.saved_by_node = {}
        if not self.events and not self.cast_events:
            return None
        rec = {"k": "scalars", "device": "cpu", "ev": self.events, "bytes": self.bytes}
        if self.cast_events:
            rec["cev"], rec["cbytes"] = self.cast_events, self.cast_bytes
        if self.rewrap_events:   # Note [Numbers wrapped again under a dispatch mode]
            rec["wev"], rec["wbytes"] = self.rewrap_events, self.rewrap_bytes
        self.events, self.bytes = [], []
        self.cast_events, self.cast_bytes = [], []
        self.rewrap_events, self.rewrap_bytes = [], []
        return rec
