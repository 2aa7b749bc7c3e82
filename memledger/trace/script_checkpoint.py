"""The script's own activation checkpointing, as the trace sees it.

# Note [The script's own checkpoint]
A script may checkpoint modules itself: transformers' `gradient_checkpointing_enable()`,
`torch.utils.checkpoint.checkpoint(block, x)` in a forward. Two things follow.

1. Bytes the dispatcher never sees. To re-run a region with the same random numbers,
   checkpoint keeps the CPU generator's state (`torch.get_rng_state()`, 5,056 B, made in
   C++ and never handed to an op) from the region's forward until its frame is freed after
   its backward; and each re-run forks the generator (`torch.random.fork_rng`), one more
   copy from the re-run's first op to its last. The allocator counts both. The collector
   finds the first through the checkpoint call on the Python stack (the non-reentrant
   generator's `fwd_cpu_state`, or the reentrant Function's `ctx.fwd_cpu_state`) and
   records it as a storage (op `get_rng_state`), freed when torch frees it; the second it
   records over the events that run under checkpoint's re-run hooks (op `fork_rng`), and
   for a re-run that stops before any op runs under them, at an event of its own (Note [A
   re-run of the script's that stops before its first op] in collector.py).
   Example: transformers GPT-2 (2 layers, hidden 64) with gradient_checkpointing_enable()
   read 5,080 B under the allocator at its peak (in layer 0's re-run) before, 24 B after.
2. A policy must not checkpoint such a region again, nor a region inside or around it: the
   checkpoints nest, and what they keep is neither prediction (selective over GPT-2's own
   checkpointed layers kept 192,088 B more than the replay, which sees nothing saved
   there). Nor may it offload a module whose call runs inside the script's checkpoint:
   offload's hooks, innermost, take the saved tensors the checkpoint drops. The ledger
   writes a `script_ckpt` record (`mod`, `first`, `ev`) per checkpointed call; replay,
   `measure` and the probes refuse those policies, with the fix in one line
   (memledger/replay/script_checkpoint.py has the rules).
3. The early stop. A non-reentrant re-run stops by raising (`_StopRecomputationError`) from
   its pack hook as the last saved tensor is packed again. An op that saves its outputs
   packs them after it ran: a post-LN layer's final `native_layer_norm` packs its mean and
   rstd, the stop raises inside that op, and its output, which nothing saved, is freed
   before the op returns. The allocator pass sees it made and freed inside one op and
   measures it as that op's kernel scratch (Note [Kernel scratch] in trace/allocator.py);
   the ledger pass sees the op's output made and freed before the next op. Counted as
   both, the peak inside such a re-run read one output too high: transformers RoBERTa
   (2 layers, hidden 64, batch 4, seq 32) with gradient_checkpointing_enable(): the
   ledger with scratch 32,768 B over the allocator, and every policy with it. The
   collector writes a `stopped` record (`sid`, `ev`) for each output of the stopped op
   freed by the stop (`stopping_pack` says the stop is in flight and which tensor's pack
   raised it: one made by the op itself means its outputs were packed after it ran, not
   its inputs before); the ledger takes those bytes off that op's measured scratch
   (`Ledger.kernel_scratch`).

The region is the module the checkpointed function belongs to (a module, its bound
method, or a `functools.partial` over either or over a function taking the module first,
as transformers does); failing that, the module whose forward called checkpoint. A
function of no module (`checkpoint_sequential`'s segments) makes each outermost module
call under it a region of its own: body.0 and body.1 for a segment of two.
Everything here reads torch's private frames, so each step falls back to nothing rather
than fail: the ledger then misses the 5,056 B, as it did before.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from memledger.trace.where import is_user_file, library_path

_top_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_CHECKPOINT_FILE = os.path.join("utils", "checkpoint.py")
_MODULE = "torch.utils.checkpoint"
FORWARD_HOOK = "_checkpoint_hook.__init__.<locals>.pack_hook"
RECOMPUTE_HOOK = "_recomputation_hook.__init__.<locals>.pack_hook"


def checkpoint_pack_hook(qualname: str = FORWARD_HOOK):
    """The innermost saved-tensors pack hook when it is torch's non-reentrant checkpoint's
    (`FORWARD_HOOK`: a checkpointed forward; `RECOMPUTE_HOOK`: its re-run), else None."""
    top = _top_hooks(False)
    if top is None:
        return None
    pack = top[0]
    if getattr(pack, "__module__", None) == _MODULE and \
            getattr(pack, "__qualname__", None) == qualname:
        return pack
    return None


def stopping_pack(pack) -> torch.Tensor | None:
    """While a re-run's early stop is in flight (its `_StopRecomputationError` raised and not
    yet caught), the tensor whose pack raised it; else None. `pack`: the innermost pack hook,
    `checkpoint_pack_hook(RECOMPUTE_HOOK)`. The stop is in flight when the frame stops early
    and every tensor its forward saved has been packed again (the last pack raises at once;
    the hook is popped as the exception leaves the re-run). Note [The script's own
    checkpoint], 3."""
    try:
        fn = getattr(pack, "__wrapped__", pack)   # torch._dynamo.disable's wrapper
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        gid = cells["gid"].cell_contents
        frame = cells["target_frame_ref"].cell_contents()
        if frame is None or not frame.early_stop or not frame.weak_holders or \
                frame.recomp_counter[gid] != len(frame.weak_holders):
            return None
        holder = frame.weak_holders[-1]()
        handle = holder.handles.get(gid) if holder is not None else None
        return frame.recomputed[gid].get(handle) if handle is not None else None
    except (AttributeError, KeyError, TypeError, ValueError):   # torch's private frames
        return None


@dataclass
class CheckpointCall:
    """The innermost torch.utils.checkpoint call on the Python stack."""

    module: nn.Module | None          # what it checkpoints, if a module
    rng_state: torch.Tensor | None    # the generator state it keeps for the re-run
    key: object                       # one per call: weakly referenceable, dedups it


def find_checkpoint_call() -> CheckpointCall | None:
    """Walk the stack to torch's checkpoint frames (cost: one walk per checkpointed call)."""
    f = sys._getframe(1)
    caller_self = None
    while f is not None:
        code = f.f_code
        if code.co_filename.endswith(_CHECKPOINT_FILE):
            loc = f.f_locals
            if code.co_name == "forward" and "run_function" in loc:   # reentrant Function
                ctx = loc.get("ctx")
                return CheckpointCall(module_of(loc["run_function"]),
                                      _tensor(getattr(ctx, "fwd_cpu_state", None)), ctx)
            if code.co_name == "recompute_fn":                          # a non-reentrant re-run
                return CheckpointCall(None, _tensor(loc.get("fwd_cpu_state")), None)
            if code.co_name == "checkpoint" and "function" in loc:      # non-reentrant
                gen = loc.get("gen")
                gen_locals = gen.gi_frame.f_locals if gen is not None and \
                    gen.gi_frame is not None else {}
                caller = f.f_back
                if caller is not None:
                    caller_self = caller.f_locals.get("self")
                module = module_of(loc["function"])
                if module is None and isinstance(caller_self, nn.Module):
                    module = caller_self
                return CheckpointCall(module, _tensor(gen_locals.get("fwd_cpu_state")), gen)
        f = f.f_back
    return None


def rerun_region() -> nn.Module | None:
    """From inside a non-reentrant re-run (its `recompute_fn` on the stack): the module it
    re-runs, or None (a function of no module). Note [A re-run of the script's that stops
    before its first op] in collector.py."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "recompute_fn" and code.co_filename.endswith(_CHECKPOINT_FILE):
            return module_of(f.f_locals.get("fn"))
        f = f.f_back
    return None


# Note [The module a checkpointed function runs first]
# Where the script checkpoints a function that is no module's bound method (torch's
# `checkpoint_sequential`, which En-transformer's `EnTransformer(checkpoint=True)` calls
# over its blocks, checkpoints a closure `run_function(start, end, functions)`), the trace
# names the script's region by the outermost module called under it (`layers.0`), and
# measure named it by the module being entered: a policy on a module inside the block
# (`offload:@FeedForward`, `layers.0.ff.fn`) was refused by predict "inside the script's
# own checkpoint of layers.0" and by measure "of layers.0.ff.fn", and
# `checkpoint:@EquivariantAttention` as "and the script already checkpoints layers.0" against
# "which the script already checkpoints" (tests/clients/train_entransformer.py --ckpt).
# Measure now reads the same module off the stack: the outermost module call between the
# checkpoint's frame and the region being entered.
def outermost_call_under_checkpoint() -> nn.Module | None:
    """The module of the outermost `Module._call_impl` frame below torch's innermost
    checkpoint frame on the stack, or None (Note [The module a checkpointed function runs
    first])."""
    f = sys._getframe(1)
    outer = None
    while f is not None:
        code = f.f_code
        if code.co_filename.endswith(_CHECKPOINT_FILE) and code.co_name in (
                "forward", "checkpoint", "recompute_fn"):
            return outer
        if code.co_name == "_call_impl" and code.co_filename == _CALL_IMPL_FILE:
            me = f.f_locals.get("self")
            if isinstance(me, nn.Module):
                outer = me
        f = f.f_back
    return None


_CALL_IMPL_FILE = nn.Module._call_impl.__code__.co_filename


# Note [A policy checkpoint around a checkpointed function]
# Rule 1 of replay/script_checkpoint.py (no policy checkpoint nested with the script's)
# was met at a module call under the script's checkpoint, on both sides. A checkpointed
# function that calls no module (gateloop-transformer's GateLoopedAttention runs
# `checkpoint(gate_loop_operator, q, k, v, a)` in its forward) is never met so, and a
# policy checkpoint of the calling module, or of one around it, ran one checkpoint inside
# the other unrefused. Nested, torch's checkpoints do not run as the replay prices one:
# under the policy's non-reentrant checkpoint, the script's reentrant one runs its
# function without gradients and saves its inputs through the policy's hooks; the
# policy's re-run runs it (without gradients) again, and its own backward a third time,
# each with a generator state of its own (and the reverse nesting re-runs the inner one
# inside the outer's re-run). tests/clients/train_fn_checkpoint.py --reentrant:
# `checkpoint:@Mixer` predicted 40,820 B against 39,796 B measured; gateloop's
# `checkpoint:@GateLoopedAttention` 178,792 against 172,648 B. The non-reentrant kind
# agreed there by chance; the module rule refuses both kinds, and so does this one.
# Both sides now meet such a call where torch's checkpoint asks for the generator state
# of its first run (`torch.get_rng_state()`, Note [Generator states the script keeps]):
# `function_checkpoint_site` names the function, the line that called checkpoint and
# the module whose call it runs in (the innermost `Module._call_impl` on the stack). The
# trace writes a `script_ckpt_fn` record (`mod`, `fn`, `at`, `ev`) when that module's
# call ends, unless a module call ran under the checkpoint (the module rule has it
# then); `measure`'s nesting guard watches the state a checkpoint asks for inside a
# checkpointed region's first run and refuses when the region's forward returns, unless
# a module call under it was refused first. (Met since where the first run begins,
# whether or not it keeps a state: Note [A checkpoint that keeps no generator state].)
@dataclass
class FunctionCheckpoint:
    """The script's checkpoint of a function that is no module's."""

    caller: nn.Module | None   # the module whose call runs it (innermost on the stack)
    fn: str                    # the function's name
    at: str                    # file:line of the call to checkpoint
    key: object                # the call (as CheckpointCall.key)
    lib: str = ""              # the installed package that calls checkpoint ('' the user's
    # own code): Note [A checkpoint a library makes]


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")


# Note [A checkpoint that keeps no generator state]
# Both sides met the script's checkpoint of a function that calls no module where its
# first run asks for the generator state (Note [A policy checkpoint around a checkpointed
# function]). With `preserve_rng_state=False` it asks for none, and neither side met it:
# tests/clients/train_fn_checkpoint.py --no-rng-state, reentrant: `checkpoint:layers.0`
# predicted 21,300 B against 20,788 B measured, `checkpoint:@Mixer` 25,652 against
# 24,628 B, `selective:layers.1.mix` 21,116 both, none refused; non-reentrant: 20,788,
# 24,628 and 21,116 B, equal by chance, none refused. Every first run of either kind,
# state or none, asks `_get_autocast_kwargs` (torch/utils/checkpoint.py) for the autocast
# state to re-run under, before the state and before the function runs; that module
# global, looked up at each call, is wrapped while watched (`CheckpointRunWatch`, the
# collector's for the whole trace, measure's nesting guard's over a region's first run),
# and both sides now meet the call there: the trace writes its `script_ckpt_fn` record
# and counts the call (`_ckpt_calls`: the re-run watch, and the stash probe that must
# not read a save such a checkpoint packed), measure's guard notes the site. Nothing
# else in torch calls it; a caller outside checkpoint.py is not a checkpoint's run.
# Should torch rename it, nothing is wrapped and the pins in
# tests/clients/test_fn_checkpoint.py fail.
_RUN_HOOK = "_get_autocast_kwargs"
_RUN_CALLERS = ("forward", "_checkpoint_without_reentrant_generator")


class CheckpointRunWatch:
    """While entered, `on_run()` as each torch checkpoint's first run begins (either kind,
    whether or not it keeps a generator state: Note [A checkpoint that keeps no generator
    state]), from inside it: `function_checkpoint_site()` reads the call."""

    def __init__(self, on_run: Callable[[], None]) -> None:
        self._on_run = on_run
        self._saved: tuple[object, object] | None = None

    def __enter__(self) -> "CheckpointRunWatch":
        module = sys.modules.get(_MODULE)   # imported with torch
        original = getattr(module, _RUN_HOOK, None) if module is not None else None
        if original is None:
            return self
        on_run = self._on_run

        @functools.wraps(original)
        def get_autocast_kwargs(*args, **kwargs):
            f = sys._getframe(1)
            while f is not None and f.f_code.co_filename == __file__:
                f = f.f_back   # another watch's wrapper (measure's guard under the trace's)
            if f is not None and f.f_code.co_filename.endswith(_CHECKPOINT_FILE) and \
                    f.f_code.co_name in _RUN_CALLERS:
                on_run()
            return original(*args, **kwargs)

        setattr(module, _RUN_HOOK, get_autocast_kwargs)
        self._saved = (module, original)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            module, original = self._saved
            setattr(module, _RUN_HOOK, original)
            self._saved = None


def function_checkpoint_site() -> FunctionCheckpoint | None:
    """From inside torch's checkpoint (its first run beginning: `CheckpointRunWatch`): the
    call, when what it checkpoints is no module's (Note [A policy checkpoint around a
    checkpointed function]); else None."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_filename.endswith(_CHECKPOINT_FILE) and code.co_name == "checkpoint" \
                and "function" in f.f_locals:
            break
        f = f.f_back
    if f is None:
        return None
    function = f.f_locals["function"]
    if module_of(function) is not None:
        return None
    key = f.f_locals.get("gen")
    site = f.f_back
    while site is not None and site.f_code.co_filename.startswith(_TORCH_DIR):
        site = site.f_back   # torch's own wrappers (dynamo's disable)
    if key is None:          # the reentrant kind: its Function's ctx, above
        g = sys._getframe(1)
        while g is not None and g is not f:
            if g.f_code.co_filename.endswith(_CHECKPOINT_FILE) and \
                    g.f_code.co_name == "forward" and "ctx" in g.f_locals:
                key = g.f_locals["ctx"]
                break
            g = g.f_back
    caller = None
    c = site
    while c is not None:
        if c.f_code.co_filename.endswith(_MODULE_FILE) and c.f_code.co_name == "_call_impl":
            caller = c.f_locals.get("self")
            break
        c = c.f_back
    inner = getattr(function, "func", function)   # a partial's function
    name = getattr(inner, "__qualname__", None) or type(inner).__name__
    at, lib = _call_site(site)
    return FunctionCheckpoint(caller if isinstance(caller, nn.Module) else None, name, at,
                              key, lib)


# Note [A checkpoint a library makes]
# The refusal of a policy checkpoint around the script's own checkpointed function said
# "turn the script's checkpointing off to compare policies". Where the checkpoint is a
# library's (memory-efficient-attention-pytorch checkpoints each attention chunk when its
# model is built with `memory_efficient=True`, tests/clients/train_memeff.py), the script
# has no checkpointing to turn off: the switch is the library's. So the site records the
# installed package it lies in, named by its path under site-packages
# (`memory_efficient_attention_pytorch/memory_efficient_attention.py:134`, where a user's
# own file is named by its file name), and the line says that package's option is the
# switch (replay/script_checkpoint.py).
def _call_site(site) -> tuple[str, str]:
    """(file:line, package): a user file by its name and '' for the package; a library's
    by its path under its site directory and its top-level package."""
    if site is None:
        return "?", ""
    name = site.f_code.co_filename
    if is_user_file(name):
        return f"{os.path.basename(name)}:{site.f_lineno}", ""
    rel = library_path(name)
    return f"{rel}:{site.f_lineno}", rel.split(os.sep, 1)[0].removesuffix(".py")


def module_of(fn) -> nn.Module | None:
    """The module a checkpointed callable runs: the module, its bound method, or a partial
    over either (or over a function whose first argument is the module)."""
    for _ in range(4):   # partials of partials, bound methods of partials: a few levels
        if isinstance(fn, nn.Module):
            return fn
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, nn.Module):
            return owner
        if isinstance(fn, functools.partial):
            if fn.args and isinstance(fn.args[0], nn.Module):
                return fn.args[0]
            fn = fn.func
            continue
        return None
    return None


def _tensor(x) -> torch.Tensor | None:
    return x if isinstance(x, torch.Tensor) else None


class CheckpointFrames:
    """What the collector knows of each checkpoint call met so far: (the module it
    checkpoints or None, the module-stack depth of its first call), held weakly (a call's
    key, its pack hook or its reentrant ctx, dies with it)."""

    def __init__(self) -> None:
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, key: object) -> tuple[str | None, int] | None:
        try:
            return self._known.get(key)
        except TypeError:   # not weakly referenceable: met anew each time
            return None

    def put(self, key: object, region: str | None, depth: int) -> None:
        try:
            self._known[key] = (region, depth)
        except TypeError:
            pass
