"""The collector: the only code that hooks torch while a ledger is recorded.

One object wires five of torch's own mechanisms and writes ledger records as they fire:

- a `TorchDispatchMode` sees every op: the storages it creates and every storage it reads
  (so *last use* is known), plus `record_function` markers (optimizer.zero_grad's phase);
- a weakref on each untyped storage sees its free;
- `saved_tensors_hooks` see what autograd saves for backward (pack) and when backward
  reads it (unpack);
- global module forward hooks give the module path and the forward phase;
- global optimizer step hooks give step boundaries, gradients and optimizer state.

# Note [Events]
Every op the dispatch mode sees is one event, numbered from 0. A storage created by event 7
and freed right after event 11 gets `ev=7` on its alloc record and `ev=12` on its free
record: it is live on [7, 12). Frees that happen between ops (Python dropping a reference)
take the index of the next event, so outputs and the inputs they replace overlap for one
event, exactly as the allocator sees them.

# Note [When a step ends]
A training step ends when every parameter that had a gradient when the first optimizer
stepped has been stepped by some optimizer since (trace/steps.py, worked example there; the
parameters are those of the optimizers that stepped so far and, for the first step, of the
root modules that ran forward: no walk over the process's objects):
one optimizer, at its `step()`; a backbone optimizer and a head optimizer after one
backward, at the second `step()` (so `--steps 2` traces two iterations, not one). A
parameter with a gradient that no optimizer steps leaves the step open until the next
top-level forward begins (or an optimizer steps again), which ends it; after the first step
only optimizers' parameters count, and a step ends only at an optimizer's `step()`, exactly
as the workers that only count steps (OptimizerSteps) end it. A GAN's step is then one
iteration from the generator's `step()` to the discriminator's next (the discriminator's
parameters get gradients from the generator's loss too); when the collector also ended it
at the next forward, its steps and the allocator pass's covered different events, and
`show` reported 99,348 B (20 %) the ledger did not explain. Once the requested
steps are traced, nothing more is recorded, and the next op either raises `StopTracing`
again (the in-process API) or, in the trace worker, closes the ledger and ends the process:
a script whose bare `except:` swallowed the first one stops at its next torch op instead of
running every remaining step untraced (8 iterations for `--steps 2` before this).

# Note [Cleanup while the stop unwinds]
An op that runs while StopTracing propagates (a `finally` or a context manager's exit on
the way out) is cleanup, not a script that swallowed the stop: botorch's
`fit_gpytorch_mll` fits inside `module_rollback_ctx`, whose `finally` reads the model's
state dict and copies parameters back as the stop passes. Taken for a swallowed stop, the
trace worker ended its process there (harmless in a process of its own, fatal to the test
process that runs it in-process), and the in-process API raised a second StopTracing out of
the `finally`, leaving the rest of the cleanup undone. Such ops run untraced; so do those
in a handler that caught the stop, until it ends (`sys.exc_info()` is the stop there too),
and the next op after it still stops the script.

# Note [Sparse tensors]
A sparse COO tensor has no storage of its own: its indices and its values are two dense
tensors, and those are what the allocator holds. `nn.Embedding(sparse=True)` makes its
gradient that way (10,000 x 64 table, 256 x 20 ids: 2 x 5,120 x 8 B of indices + 5,120 x 64
x 4 B of values per gradient; `memledger trace tests/doctor/sparse_embedding.py --steps 2
--no-timing -- --batch 256 --ids 20`), and SparseAdam coalesces and copies them; counted as nothing,
they left 1,310,732 B (8.4 %) of the allocator's peak unexplained. They are recorded as the
two storages, read with the dispatch mode off (no event). That left the example 40,948 B
(0.26 %) over the allocator: AccumulateGrad's copy of the gradient, which an untraced run
does not make (Note [A sparse gradient kept as made]); now every byte. A sparse tensor
autograd saves (`w += sparse` in forward, as peft's SHiRA
adds its delta) is recorded by its values; its parts are not followed for release. A nested
tensor's buffer is a storage like any other, recorded with its flat size as its shape
(`nn.TransformerEncoder`'s fast path under `src_key_padding_mask`), and its sizes, strides
and offsets are storages of their own (Note [A nested tensor's sizes]). A CSR, CSC, BSR or
BSC tensor is its three parts, compressed indices, plain indices and values (`sparse_parts`),
each a storage like a COO tensor's (`adj.to_sparse_csr()` of a 64-node adjacency makes its
65 row offsets, 520 B, and takes the COO's column indices and values as views: not counted
before, the ledger read 520 B under the allocator; tests/clients/train_sparse_saves.py
--case csr). A save of any sparse tensor is recorded by its values, with `sparse: 1` (Note
[A sparse save stays on the device], replay/engine.py). A fake run's sparse results get the
real run's entries from real twins (Note [Fake sparse tensors], trace/fake_sparse.py).

# Note [Phases at a module call]
The phase follows autograd's graph task lazily, at the next op. A forward that begins right
after `loss.backward()` with no op between (gradient accumulation over one batch, as
accelerate's `accumulate()` runs it when the optimizer's step is skipped) would then start
while the phase still reads backward: its root would not be seen, its calls not be forward
calls, and every policy predicted no change while checkpoint measured 576,960 B less (3
blocks of Linear(64, 256), batch 128, 2 micro-batches). The module pre-hook asks autograd
too.

# Note [What autograd saves]
`pack` returns a detached alias of the tensor (same storage, no `grad_fn`): autograd would
hold the same storage anyway, so tracing adds no bytes. Not the tensor itself: an op that
saves its own output (`tanh`, `exp`, `sigmoid`) would then have its graph node hold a
tensor that holds the node, a reference cycle in C++ that `gc.collect()` cannot see. A
graph that backward never reaches (an output detached, an evaluation under grad) is then
never freed: a 512 x 512 fp32 `tanh` output (1,048,576 B) leaked once per step. Without
hooks autograd saves outputs without their `grad_fn` for this very reason; the alias does
the same. The alias is made with the dispatch mode switched off, so it is no event.
A saved tensor that is a parameter stays a parameter (see ROLE_PRIORITY).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import os
import sys
import threading
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch.nn.modules import module as nn_module
from torch.nn.parameter import Parameter as _Parameter
from torch.nn.parameter import UninitializedTensorMixin as _Uninitialized
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from memledger.ledger.schema import SCHEMA, SHARED_MEMORY_OP, WRAPPED_NUMBER_OP
from memledger.ledger.writer import Sink
from memledger.trace.optimizer_like import optimizer_like_alive, unstepped_name
from memledger.trace.optimizer_state import held_tensors
from memledger.trace.outside_state import (
    _MODULE_OWN,
    ARGUMENT_CHANGED,
    INPUT_WRITTEN,
    OWN_STATE,
    PAIRED_HOOKS,
    argument_versions,
    attribute_tensors,
    changed_containers,
    handed_containers,
    listen_for_routed_calls,
    paired_hooks,
    watch_routed_outputs,
    storage_key,
    written_arguments,
    written_state,
)
from memledger.trace.compiled import compiled_backend, eager_stance
from memledger.trace.dropped_grads import DroppedGradients
from memledger.trace.step_holders import SuspendedGenerators, step_holders
from memledger.trace.param_attrs import watch_parameter_attributes
from memledger.trace.external import external
from memledger.trace.gc_window import GcWindow, garbage_sids
from memledger.trace.higher_order import is_higher_order, run_by_its_ops
from memledger.trace.mapped import MappedFiles
from memledger.trace.modes import modes_at_backward
from memledger.trace.nested_backward import Suspended, started_inside
from memledger.trace.node_makers import NodeMakers
from memledger.trace.interrupts import redeliver
from memledger.trace.steps import ForwardStarts, StepBoundary, weight_read
from memledger.trace.resize import StorageResizeWatch
from memledger.trace.rng_state import OP as _RNG_STATE_OP
from memledger.trace.rng_state import RngStateWatch
from memledger.crash import internal
from memledger.trace.roots import (
    _NOT_THE_SCRIPT,
    ByModule,
    RootNames,
    _frame_locals,
    all_parameters,
    building_a_module,
    containers,
    module_aliases,
    module_named_parameters,
    module_parameters,
    named_modules,
    paths_under,
    plain_name,
    script_modules,
)
from memledger.trace.scalars import NUMBERS as _NUMBERS
from memledger.trace.scalars import WrappedScalars
from memledger.trace.scalars import casts_inputs as _casts_inputs
from memledger.trace.scalars import rewrapped as _rewrapped
from memledger.trace.scalars import tensor_slots as _tensor_slots
from memledger.trace.script_checkpoint import (
    RECOMPUTE_HOOK,
    CheckpointFrames,
    CheckpointRunWatch,
    checkpoint_pack_hook,
    find_checkpoint_call,
    function_checkpoint_site,
    rerun_region,
    stopping_pack,
)
from memledger.trace.sharding import _PLAIN, ShardingMixin, is_collective, local_tensor
from memledger.trace.untraced_formulas import UntracedFormulas
from memledger.trace.wrapped import defers as _defers
from memledger.trace.wrapped import inner_tensors, wrapped_parts

_graph_task_id = torch._C._current_graph_task_id
# Note [Gradients named as the engine finishes]
_ENGINE = torch.autograd.Variable._execution_engine
_grad_enabled = torch.is_grad_enabled
_SPARSE_COO = torch.sparse_coo
_RF_ENTER = torch.ops.profiler._record_function_enter_new.default
_RF_EXIT = torch.ops.profiler._record_function_exit._RecordFunction
_Tensor = torch.Tensor
_no_dispatch = torch._C._DisableTorchDispatch
_use_count = torch._C._storage_Use_Count
# phases after which no backward pass of the step follows, or in which the script lets go
# of nothing (backward): a storage held over is not checked in them (Note [Let go of
# between two backward passes]), so a loop's optimizer step costs no check per op
_NO_PASS_AHEAD = ("backward", "optimizer")
_NONE: frozenset = frozenset()   # a call whose module holds no buffers
_LIFT_FRESH = torch.ops.aten.lift_fresh.default
# ops that hand a tensor's value to Python (`if flag:`, `.item()`): Note [A flag read to Python]
_TO_PYTHON = frozenset([torch.ops.aten.is_nonzero.default,
                        torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default])
_SET_STORAGE = torch.ops.aten.set_.source_Storage_storage_offset
_SET_STORAGE0 = torch.ops.aten.set_.source_Storage
_current_node = torch._C._current_autograd_node
# the saved-tensor hooks in force (Note [The script's own saved-tensor hooks]); private, so
# looked up softly: without it the note is never written
_top_saved_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def _node_now() -> int:
    """The sequence number of the autograd node running now (-1: none). Not `id()` of the
    node object: that wrapper is made per call and freed at once, so the next node's
    wrapper takes the same address, and holding it would keep the node (and what a custom
    Function's ctx holds) alive."""
    n = _current_node()
    return -1 if n is None else n._sequence_nr()


@functools.lru_cache(maxsize=None)
def _storage_subclass(tp: type) -> bool:
    """A tensor subclass whose storage is its own, read as a plain tensor's: one that
    overrides no `__torch_dispatch__` and wraps no tensors (MONAI's MetaTensor, which only
    carries metadata beside its data through `__torch_function__`; nn.Parameter)."""
    return tp.__torch_dispatch__ is _Tensor.__torch_dispatch__ and \
        not hasattr(tp, "__tensor_flatten__")


def _deep_graph(t: torch.Tensor) -> bool:
    """Whether `t`'s autograd graph has an op below its own that is not a leaf's: what the
    op that made it read was made by ops too (a ReLU output: its Linear, its LayerNorm),
    not only parameters and buffers (`weight_orig * mask`). Note [Tensors a call keeps on
    its module]."""
    node = t.grad_fn
    if node is None:
        return False
    return any(f is not None and getattr(f, "variable", None) is None
               for f, _ in node.next_functions)


_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def _saved_tensors_of(node) -> list[torch.Tensor]:
    """The tensors an autograd node saved (its `_saved_*` fields, a custom Function's
    `saved_tensors`); none once backward freed them."""
    names = _SAVED_NAMES.get(type(node))
    if names is None:
        names = _SAVED_NAMES[type(node)] = tuple(
            a for a in dir(node) if a.startswith("_saved_") or a == "saved_tensors")
    out: list[torch.Tensor] = []
    for name in names:
        try:
            v = getattr(node, name)
        except RuntimeError:   # freed by a backward already
            continue
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(x, torch.Tensor):
                out.append(x)
    return out


def _running_stats_bytes(module) -> int:
    """The bytes `measure` copies, per re-run, to put a training BatchNorm's statistics
    back (Note [BatchNorm under recompute], measure/apply.py); 0 for any other module."""
    if not (isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.training
            and module.track_running_stats):
        return 0
    return sum(b.nbytes for b in module.buffers(recurse=False) if b is not None)


@functools.lru_cache(maxsize=None)
def _written_args(func) -> tuple[int, ...]:
    """Positions of the arguments an op writes in place (`Tensor(a!) self`); Note [Written
    in place in forward]."""
    schema = getattr(func, "_schema", None)
    return tuple(i for i, a in enumerate(schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write) if schema else ()


# ops that overwrite what they write: its values before do not reach the values after
# (Note [A state the region reads before it writes])
_OVERWRITES = frozenset({"copy_", "fill_", "zero_"})


def _overwritten_args(func) -> tuple[int, ...]:
    """Of `_written_args`, those whose values before the op it never reads: `copy_`'s,
    `fill_`'s and `zero_`'s self, an `out=` argument (keyword-only)."""
    schema = getattr(func, "_schema", None)
    if not schema:
        return ()
    pure = schema.name.split("::")[-1] in _OVERWRITES
    return tuple(i for i, a in enumerate(schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write
                 and (pure or a.kwarg_only))


@functools.lru_cache(maxsize=None)
def _written_slots(func) -> tuple[tuple[int, str], ...]:
    """(position, name) of each single-tensor argument an op writes (`Tensor(a!) self`,
    `*, Tensor(a!) out`): Note [Storages grown inside an op]. Lists (`Tensor(a!)[]`, the
    foreach ops) are left out."""
    schema = getattr(func, "_schema", None)
    if not schema:
        return ()
    return tuple((i, a.name) for i, a in enumerate(schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write
                 and str(a.type) in ("Tensor", "Optional[Tensor]"))


# what autograd's engine runs on a node's outputs after the node returned (validate_outputs:
# a broadcast gradient summed to its input's shape, a cast to its dtype)
_GRAD_LAYOUT_OPS = frozenset({torch.ops.aten.sum.dim_IntList, torch.ops.aten._to_copy.default})
_ADD = torch.ops.aten.add.Tensor
_CLONE = torch.ops.aten.clone.default
_ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
_TO_COPY = torch.ops.aten._to_copy.default
_SAFE_SOFTMAX = getattr(getattr(torch.ops.aten, "_safe_softmax", None), "default", None)
_COPY = torch.ops.aten.copy_.default
_aten = torch.ops.aten
# Note [Batches from other processes]
# A DataLoader with workers hands each batch over in shared memory: the main process maps
# the worker's storage, with no op of its own, and the collector first sees it at the op
# that rebuilds the tensor around it, as it arrives. The loader fetches ahead
# (`prefetch_factor` batches per worker) and keeps what comes back out of order, so
# batches wait in the main process before the step uses them: `memledger trace
# tests/clients/train_loader.py --steps 4 -- --workers 4` (64 x 3 x 32 x 32 fp32 images, a
# small MLP) holds 4 or 5 batches at its peak, 3.1-3.9 MB of 12.6-13.4 MB, where the same
# script without workers peaks at 9.8 MiB. Read as made between steps and never used, the
# waiting ones were `temporary`; a storage in shared memory the script did not make is the
# data pipeline's, so it is `input` from the moment it arrives, its op SHARED_MEMORY_OP.
# How many wait at one moment depends on the workers' timing, so the allocator pass's run
# of the script may hold a batch more or less at its peak than the traced run did.

# Note [In place but for the mode]: backward ops torch runs out of place under a mode only
# -> the in-place op the untraced run calls (its name in the allocator pass's profile)
_OUT_OF_PLACE_UNDER_MODE = {
    _ADD: "add_", _aten.index_put.default: "_index_put_impl_", _aten.scatter.src: "scatter_",
    _aten.scatter.value: "scatter_", _aten.scatter_add.default: "scatter_add_",
    _aten.index_add.default: "index_add_", _aten.masked_scatter.default: "masked_scatter_"}
# Note [A derivative formula in place but for the mode]: the autograd nodes whose formula
# writes temporaries of its own in place untraced -> the ops it runs out of place under a
# mode -> the in-place op the untraced run calls
_FORMULAS_IN_PLACE = {
    "BinaryCrossEntropyWithLogitsBackward0": {_aten.sub.Tensor: "sub_",
                                              _aten.mul.Tensor: "mul_"},
    # `clamp(x, min=t, max=t)`: (x >= min).logical_and_(x <= max)
    "ClampBackward0": {_aten.logical_and.default: "logical_and_"},
}


# Note [One lookup per op]
# The dispatch mode asks ~10 questions of every op (does it write an argument in place,
# take Python numbers, cast its inputs, is it a view, a collective, its name): ~1,350 ops
# a tiny-GPT step. Asked of the op each time, through `functools.lru_cache` and `in` on
# sets, each was a call of `OpOverload.__hash__`, a Python function (~5 a op, 42,710 of
# them in 10 traced steps). The answers are read once per op object into an `_Op`, found
# by `id(func)` (a C-level int hash); the `_Op` holds its op, so the id is never reused.
# Only exact `OpOverload`s go by id: a fake run's stand-ins are made per call and equal
# their op (trace/fake.py, `_RealSize`), so they are found by equality as before.
_OP_OVERLOAD = torch._ops.OpOverload


class _Op:
    """What the collector's hot path asks of one op (Note [One lookup per op])."""

    __slots__ = ("func", "name", "grow", "written", "overwritten", "slots", "casts", "view",
                 "layout", "in_place", "comm")

    def __init__(self, func) -> None:
        self.func = func
        self.name = getattr(func, "__name__", str(func))
        self.grow = _written_slots(func)        # Note [Storages grown inside an op]
        self.written = _written_args(func)      # Note [Written in place in forward]
        self.overwritten = _overwritten_args(func)   # Note [A state the region reads ...]
        self.slots = _tensor_slots(func)        # Note [Wrapped scalars]
        self.casts = _casts_inputs(func)        # Note [Inputs an op casts]
        self.view = getattr(func, "is_view", False)
        self.layout = func in _GRAD_LAYOUT_OPS
        self.in_place = func in _OUT_OF_PLACE_UNDER_MODE   # Note [In place but for the mode]
        self.comm = is_collective(func)


_OPS_BY_ID: dict[int, _Op] = {}
_OPS_BY_EQUALITY: dict[Any, _Op] = {}


def _op_info(func) -> _Op:
    info = _OPS_BY_ID.get(id(func))
    if info is not None:
        return info
    if type(func) is _OP_OVERLOAD:
        info = _OPS_BY_ID[id(func)] = _Op(func)
        return info
    info = _OPS_BY_EQUALITY.get(func)
    if info is None:
        info = _OPS_BY_EQUALITY[func] = _Op(func)
    return info


# the forwards whose `F.linear` (or the C++ `at::linear` of torch's CPU RNN layers, which
# project a whole transposed input at once) Note [A Linear's bias, added in place but for
# the mode] folds
_LINEAR_FORWARDS = frozenset(
    [getattr(torch.nn, m).forward.__code__ for m in ("Linear", "RNN", "LSTM", "GRU")]
    # torch's functional multi-head attention projects through `linear` and adds no bias
    # of its own (SigLIP's pooling head: a probe attending over a batch-first input)
    + [f.__code__ for f in (getattr(torch.nn.functional, n, None) for n in (
        "multi_head_attention_forward", "_in_projection_packed", "_in_projection"))
       if hasattr(f, "__code__")])
_MODE_WRAPPERS = ("eval_frame.py", "_compile.py")   # torch's wrappers around a mode's call
_CLAMP_MIN = torch.ops.aten.clamp_min.default
_CTC_LOSS = torch.nn.functional.ctc_loss.__code__   # Note [CTC's target lengths]
_AUTOCAST_LOW = (torch.float16, torch.bfloat16)


_TRACE_DIR = os.path.dirname(os.path.abspath(__file__))   # the collectors' own frames
_OURS = os.path.dirname(_TRACE_DIR) + os.sep   # memledger's frames
_METHOD_WALK = 64   # frames, at most: Note [Work a module's method does outside any call]


# Note [Autocast's cache in a re-run]
# Under autocast, the low-precision copy of a parameter (an fp32 leaf that requires grad,
# cast by an op on autocast's list) is kept in autocast's cache, which is cleared when the
# outermost autocast context exits (torch/amp/autocast_mode.py: `__exit__` clears it when
# the nesting count returns to 0). A Linear's bias cast, which no op saves, lives to its
# block's `with autocast` exit. In a checkpoint's re-run it lives longer: torch's checkpoint
# wraps the re-run in two autocast contexts of its own (`recompute_fn`), which count as
# nesting even when disabled, so the block's own exit leaves the count at 1 and the cast
# stays to the re-run's end (its early stop): 64 B under measured on a bf16 block, seeds
# 48, 71, 74, 75 of the wide random models. The `acast` record names such casts and the
# parameter cast (`src`); replay holds their re-made copies to the segment's end
# (`_recomputed_rows`). A block with two autocast regions that call one Linear casts its
# weight twice in forward and once in the re-run, whose second region finds the first
# region's cast still cached: replay re-makes one cast per parameter and segment, held
# as long as the later ones would have been (`_one_cast_per_rerun`; +2,112 B before, wide
# seed 153). Inside the autocast kernel the autocast key is excluded, so
# `torch.is_autocast_enabled()` reads False there; the nesting count (read by a balanced
# increment and decrement) says whether an autocast context is open. Only autocast's own
# casts are cached: a model's `self.D.to(dtype)` under autocast (Mamba-2 mixers in Bamba,
# Nemotron-H) is an fp32 leaf cast to bf16 too, freed at once, and holding its re-made
# copy to the re-run's end read +8 B. At the mode the two look alike; autocast's is read
# next (after views) by an op on its lower-precision list, so a cast is named `acast` only
# when the next op but views is one (`_autocast_casts_read_by`).

# the ops autocast runs in lower precision (its CPU and CUDA lists), as the dispatch mode
# sees them: a cast of a parameter that autocast caches is read next by one of these
# (after views: F.linear's `t` of the weight); the model's own `p.to(torch.bfloat16)`
# under autocast, read by anything else, is not cached (Note [Autocast's cache in a re-run])
_LOWER_PRECISION_OPS = frozenset((
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "matmul", "linear",
    "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution",
    "mkldnn_rnn_layer", "_prelu_kernel", "prelu", "_addmm_activation",
    "_native_multi_head_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention",
    "cudnn_convolution", "cudnn_convolution_transpose", "_grouped_mm", "lstm_cell",
    "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "linalg_vecdot"))


def _autocast_caches(args, out) -> bool:
    """Whether autocast keeps this `_to_copy` output in its cache (aten's `cached_cast`:
    an fp32 leaf that requires grad, cast to lower precision inside an autocast context)."""
    a = args[0] if args else None
    if not (isinstance(a, _Tensor) and isinstance(out, _Tensor)) or a.dtype != torch.float32 \
            or out.dtype not in (torch.bfloat16, torch.float16) or not a.requires_grad \
            or not a.is_leaf or a._is_view() or not torch.is_autocast_cache_enabled():
        return False
    depth = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()
    return depth > 1


def _called_by_linear() -> bool:
    """The op running now was called (through F.linear) by `nn.Linear.forward`, or by a
    torch RNN layer's (through at::linear): Note [A Linear's bias, added in place but for
    the mode]."""
    return _caller_in(_LINEAR_FORWARDS) is not None


def _caller_in(codes) -> Any:
    """The Python frame that called the op running now, where its code is one of `codes`.
    Above it come the collectors' `__torch_dispatch__` frames (two in a fake run:
    FakeCollector's calls Collector's, and a fixed depth missed a fold there, +195,284 B)
    and torch's wrappers around a mode's call."""
    f = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return None
        if f.f_code in codes:
            return f
        name = f.f_code.co_filename
        if not (name.endswith(_MODE_WRAPPERS) or name.startswith(_TRACE_DIR)):
            return None
        f = f.f_back
    return None


# Note [CTC's target lengths]
# `F.ctc_loss` with reduction "mean" divides each sequence's loss by its target length,
# clamped to 1 (aten/src/ATen/native/LossCTC.cpp, `get_clamped_target_length`). Untraced,
# torch reads tensor lengths into a list and makes the divisor from it in the loss's dtype
# (`at::tensor(lengths, res.options()).clamp_min(1)`): 8 sequences, 32 B of float32. For
# a "subclass-like" tensor, and a dispatch mode makes every tensor one, it clamps the
# lengths tensor itself: int64, 64 B, which the division casts (32 B of scratch) and
# `DivBackward0` saves to backward. transformers' CTC heads (SEW, UniSpeech, WavLM:
# `ctc_loss_reduction="mean"`) read 48 B over the allocator with scratch, at the loss. So
# the collector clamps the lengths cast to the loss's dtype, as the untraced run does: the
# cast is a temporary the ledger never sees (torch's list-made tensor is one untraced),
# the clamp's output has the untraced bytes and dtype, and the values are the same.
def _ctc_divisor_dtype(args) -> torch.dtype | None:
    """The loss's dtype where the op running now is the clamp `F.ctc_loss` runs on its
    integer target lengths (float32 for a half-precision input: autocast's fp32 list has
    ctc_loss); else None."""
    lengths = args[0] if args else None
    if not isinstance(lengths, _Tensor) or lengths.is_floating_point() or lengths.dim() > 1:
        return None
    frame = _caller_in((_CTC_LOSS,))
    log_probs = frame.f_locals.get("log_probs") if frame is not None else None
    if not isinstance(log_probs, _Tensor):
        return None
    # torch's CTC kernels take float32 and float64 only: a half-precision input that got as
    # far as this clamp was cast by autocast (its key is off here, so the flag reads False)
    return torch.float32 if log_probs.dtype in _AUTOCAST_LOW else log_probs.dtype


_ROW_COMPRESSED = (torch.sparse_csr, torch.sparse_bsr)
_COLUMN_COMPRESSED = (torch.sparse_csc, torch.sparse_bsc)


def sparse_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The parts of a sparse tensor, values last, read without events: (indices, values) of
    a COO one; (compressed indices, plain indices, values) of a CSR, CSC, BSR or BSC one
    (Note [Sparse tensors]); () otherwise."""
    layout = t.layout
    if layout is torch.sparse_coo:
        with _no_dispatch():
            return (t._indices(), t._values())
    if layout in _ROW_COMPRESSED:
        with _no_dispatch():
            return (t.crow_indices(), t.col_indices(), t.values())
    if layout in _COLUMN_COMPRESSED:
        with _no_dispatch():
            return (t.ccol_indices(), t.row_indices(), t.values())
    return ()


# Note [A nested tensor's sizes]
# A strided nested tensor holds, beside its buffer, three int64 tensors of its own: each
# component's sizes, strides (n x dim each) and storage offset (n). Torch makes them in
# the op that makes the tensor (a view op too: `transpose` gives new sizes and strides over
# the same buffer) and the allocator holds them as long as the tensor. The ledger counted
# the buffer alone: nn.TransformerEncoder evaluated under no_grad with a padding mask (its
# fast path: `_nested_tensor_from_mask`, the layers on the nested tensor, `to_padded_tensor`)
# read 5,120 B under the allocator with its evaluation batch of 64 the run's peak: two
# nested tensors alive, 2 x (1,024 + 1,024 + 512) B (tests/clients/train_layouts.py --case
# nested --eval-batch 64, 3,959,396 against 3,964,516 B). They are recorded as storages
# the op made, each by its own storage, so one shared by two nested tensors is counted
# once and freed with the last.
def nested_parts(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(sizes, strides, storage offsets) of a strided nested tensor, read without events;
    () for a jagged one (a wrapper subclass, Note [Wrapper subclasses])."""
    if t.layout is not torch.strided:
        return ()
    with _no_dispatch():
        return (t._nested_tensor_size(), t._nested_tensor_strides(),
                t._nested_tensor_storage_offsets())


@dataclass
class _Lent:
    """Note [A sparse gradient kept as made]: a storage a sparse gradient's copies stand for."""

    start: int              # event the copies began
    keeps_role: bool        # made before this backward (the batch's ids): its role stays
    copies: int = 0         # copies alive
    own: int = -1           # event the script let go of it (-1: not yet)


def kept_as_made(func, args) -> bool:
    """Is this op AccumulateGrad's copy of a sparse gradient that an untraced run keeps as it
    was made? Note [A sparse gradient kept as made]."""
    if func is not _CLONE or not args or args[0].layout is not _SPARSE_COO or _grad_enabled():
        return False
    n = _current_node()
    return n is not None and n.name() == _ACCUMULATE_GRAD and all(
        p.is_contiguous() for p in sparse_parts(args[0]))


def _let_go(watch: dict[int, list]) -> list[tuple[int, Any]]:
    """Take out of `watch` (sid -> [storage weakref, autograd's aliases alive, their
    weakrefs]) the storages that only autograd holds now, or that are gone: [(sid, the
    storage or None)] (Note [When a saved storage is released])."""
    out = []
    for sid, (ref, packs, _) in list(watch.items()):
        st = ref()
        if st is None or _use_count(st._cdata) <= 1 + packs:
            del watch[sid]
            out.append((sid, st))
    return out


def _alias_gone(entry: list, _ref) -> None:
    """A saved alias went (its node with it): Note [When a saved storage is released]."""
    entry[1] -= 1


# torch's frames that call a module's global forward pre-hooks, with the call's `kwargs`
_MODULE_FILE = nn_module.Module._call_impl.__code__.co_filename
_CALL_FRAMES = frozenset({"inner", "_call_impl"})


_FORWARD_PHASES = ("forward", "loss")   # Note [A batch is what no step made]


def _nested_tensors(obj, depth: int = 0, seen: set[int] | None = None):
    """The tensors in `obj` through tuples, lists, dicts and objects' attributes (Note
    [Tensors handed inside an object]) at any depth: checkpoint's frame
    holds the whole arguments, and Funnel hands each layer its relative position
    embeddings as a list (one per block) of lists of tensors inside a tuple; read one level
    deep, the replay let 24,576 B of them go while `measure` kept them to the layer's
    backward (tests/clients/train_more3.py)."""
    if isinstance(obj, _Tensor):
        yield obj
    elif depth < 8 and isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _nested_tensors(o, depth + 1, seen)
    elif depth < 8 and isinstance(obj, dict):
        for o in obj.values():
            yield from _nested_tensors(o, depth + 1, seen)
    elif depth < 8 and (held := object_attributes(obj)):   # Note [Tensors handed inside
        seen = set() if seen is None else seen             # an object]: each object once,
        if id(obj) not in seen:                            # so that one pointing back (a
            seen.add(id(obj))                              # parent) walks nothing again
            for _, o in held:
                yield from _nested_tensors(o, depth + 1, seen)


# Note [Tensors handed inside an object]
# A call's arguments may hold their tensors in an object that is neither a tuple, a list
# nor a dict: pytorch-frame hands every model and encoder a `TensorFrame` (its batch in
# `feat_dict`, a dict of tensors and of `MultiNestedTensor`s, each a `values` and an
# `offset` tensor), PyG a `Data`, a script its own dataclass. torch's checkpoint keeps the
# whole argument, so what the object holds lives until the region's backward; the walk
# stopped at the object, the replay did not know, and let such a tensor go where the
# script did. tests/clients/train_held_in_object.py (blocks handed a dataclass whose
# tensor each scales by a number, which saves nothing; 3 blocks of width 16, batch 64):
# `checkpoint:1` predicted 125,200 B against 129,296 measured (the (64, 16) fp32 handed
# in, 4,096 B), `checkpoint:*` 8,840 B under, `selective:*` 12,288 B under, where the
# same blocks handed a dict were exact; and the batch inside the object was never
# `input` (pytorch-frame's features read `temporary`). An object's attributes (its
# `__dict__`) are walked as a dict's values are; not a module's (its tensors are
# parameters and buffers, which the callers skip, and its submodules a tree to walk
# on every call), nor a class's, a function's or a Python module's. compare's inputs gate
# read the model's arguments the same way (verify/capture.py `_tensors`) and digested
# no feature of a TensorFrame batch, only the targets the loss reads: it reads them now,
# labelled by attribute (`forward arg[0].feat_dict[<stype.numerical: 'numerical'>]`).
_NOT_HOLDERS = (torch.nn.Module, type, types.FunctionType, types.ModuleType)


def object_attributes(obj) -> list[tuple[str, Any]]:
    """(name, value) of `obj`'s attributes where it is an object that may hold a call's
    tensors (Note [Tensors handed inside an object]); [] otherwise."""
    try:   # a class's `__getattr__` may answer for a missing `__dict__`, or raise
        held = obj.__dict__
    except Exception:   # noqa: BLE001 - not an object we can read: nothing handed in it
        return []
    if type(held) is not dict or not held or isinstance(obj, _NOT_HOLDERS):
        return []
    return list(held.items())


class FirstUse:
    """`Collector(pre_existing=FIRST_USE)`: a storage the block first meets as an op's input
    existed before the block. See Note [Pre-existing storages, found on first use]."""

    def __contains__(self, key: object) -> bool:
        return True


FIRST_USE = FirstUse()


# Note [Storages an in-process caller made before the script]
# The CLI runs each pass in a fresh process, so a storage its collector first meets as an
# op's input was made just now outside the dispatcher, and the allocator pass, profiling
# from the script's first line, saw it made too (Note [Pre-existing storages, found on
# first use]). An in-process caller breaks that: the test suite's harness imports a
# script's libraries before its first pass (Note [Tensors made at import] in
# tests/clients/harness.py), so a tensor a library makes at import exists before every
# pass. The allocator pass never sees it allocated, and `measure` neither; the ledger pass
# counted it from its first use, as made there outside dispatch. equiformer-pytorch's
# `RANDOM_ANGLES` (5 x 3 float64, 120 B, made in `equiformer_pytorch.basis` at import and
# read only where the basis is computed, not loaded from its disk cache): with the cache
# off the ledger with its scratch read 314,092 B against the allocator's 313,972 B, and
# every policy 120 B over measured. Such a caller names those storages
# (`made_before_the_script`); each is kept as a row and left out of the device's curve, as
# memory the allocator did not hand out in the run is (Note [Memory torch's allocator did
# not hand out], trace/external.py). The storages are held here, so that no later storage
# takes a held one's address. The API's blocks keep their rule (live from event 0, and
# their bytes added to the profiler's peak: trace/api.py).
_BEFORE_THE_SCRIPT: dict[int, Any] = {}   # storage key -> the storage, held
BEFORE_THE_SCRIPT_OP = "(made before the script)"


def made_before_the_script(storages: Iterable[Any]) -> None:
    """Name untyped storages made in this process before the script's passes (Note
    [Storages an in-process caller made before the script])."""
    for st in storages:
        _BEFORE_THE_SCRIPT[st._cdata] = st


def is_pinned(t: torch.Tensor) -> bool:
    """Whether `t` lives in pinned host memory (Note [Pre-existing storages, found on first
    use]); False where torch has no accelerator to pin for (a CPU-only build). Asked only
    once CUDA is initialized (pinning initializes it): `is_pinned()` asks the driver, which
    could make a CUDA context for a run that never used the GPU."""
    if t.device.type != "cpu" or not torch.cuda.is_initialized():
        return False
    try:
        with _no_dispatch():
            return t.is_pinned()
    except (RuntimeError, NotImplementedError):
        return False

# Note [Pre-existing storages, found on first use]
# `memledger.trace()` wraps a block of a running process: parameters, optimizer state and
# the batch exist before it. Every op's outputs are seen, so a storage the block first meets
# as an *input* was made before the block, or made just now outside the dispatcher. The
# API counts it as pre-existing (live from event 0, `pre`), without walking every object of
# the process at entry (~300,000 objects, ~65 ms of CPU in a pytest process: most of the
# API's entry cost). One creation outside the dispatcher is common and told apart:
# `torch.tensor(1.0)` is built in C++ and first seen as the input of `aten.lift_fresh`, so
# that input counts as made at that event. Known limitation: a `torch.from_numpy` or
# `torch.load` inside the block counts from event 0 (the allocator never sees numpy's
# memory either). Example: fc.weight (1,000 B) made before the block and first used at event
# 40 is live from event 0 (the block's peak includes it wherever it is); `b =
# torch.tensor([1., 2.])` at event 7 is an 8 B storage made at event 7.
# The other common one: a tensor that arrives from another process (a batch from
# `DataLoader(num_workers=N)`, anything through a torch.multiprocessing queue) is its
# storage rebuilt from shared memory, outside the dispatcher, then put in an empty tensor
# by `aten.set_.source_Storage*`, which the mode sees with that storage on its first
# argument. It counted from event 0: every batch of the block was live from the start,
# and the peak grew by a batch per step (Linear(100, 50) + Adam, batches of 64 x 100 fp32
# from two workers: 381,928 B over ten steps for 124,008 + 25,600 + 512 B). A storage
# first met at `set_` is made at that event (one the script re-seats on purpose, `t.set_(
# old.untyped_storage())` of an older tensor never used in the block, reads as made there).
# The third: `DataLoader(pin_memory=True, num_workers=N)` pins each batch in a thread of
# its own (`pin_memory_thread`), where this thread's dispatch mode does not reach, and the
# main thread first meets the pinned copy as the input of `.to("cuda", non_blocking=True)`.
# It counted from event 0 too (a batch more per step, host memory). A pinned storage first
# met in the block is made at that event: the loader made it at most its prefetch ahead
# (2 batches per worker), and a pinned copy is made for a batch, not kept from before.
# Known limitation: a pinned staging buffer the script made *before* the block and first
# uses inside it counts from that first use. (`t.pin_memory()` in the traced thread is
# `aten._pin_memory`, an op whose output the mode sees: made at its event, CLI and API
# alike. The CLI traces from the script's start, so every storage it first meets as an
# input is made at that event already.) CPU-only torch cannot pin (`pin_memory()` raises
# "Cannot access accelerator device", DataLoader skips pinning with a warning).


# Note [A forked child traces nothing]
# A process forked inside a block (the workers of `DataLoader(num_workers=N)`, forked by
# default on Linux) starts with the forking thread's dispatch mode on its stack and the
# global hooks in place: every op of the worker's dataset and collate ran through the
# collector, into a sink that writes nothing there (Note [A forked child writes nothing]
# in ledger/writer.py), and loading 128 batches of 64 x 100 from one worker took 4.1 s
# instead of 0.35 s (a bare pass-through mode alone: 2.1 s). In the child each active
# collector now leaves the dispatch stack (modes above it are put back), takes its hooks
# off, and lets any op that still reaches it through unrecorded (the `_done` branch, off
# the hot path); its `__exit__`, should the child leave the block, pops nothing. The
# kernels of Note [A derivative formula that branches on the mode] go too (torch's back).
_ACTIVE: "weakref.WeakSet[Collector]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    ours = list(_ACTIVE)
    if not ours:
        return
    UntracedFormulas.forget_in_child()
    for c in ours:
        c._forked = c._done = True
        c._formulas = False
        for h in c._handles:
            h.remove()
        c._handles = []
    try:
        from torch.utils import _python_dispatch as pd

        popped = []
        while torch._C._len_torch_dispatch_stack():
            popped.append(pd._pop_mode())
        for mode in reversed(popped):
            if not any(mode is c for c in ours):
                pd._push_mode(mode)
        pd._is_in_torch_dispatch_mode = torch._C._len_torch_dispatch_stack() > 0
    except Exception:   # noqa: BLE001 - the child still works, only slower (the `_done` branch)
        pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class StopTracing(BaseException):
    """Raised from the optimizer step hook once the requested steps are traced.

    A BaseException so that a script's `except Exception:` does not swallow it. It says
    what it is: a trainer that logs what ended its run (ignite's Engine: "Engine run is
    terminating due to exception: ") printed nothing after the colon.
    """

    def __init__(self, message: str = "memledger stops the script: the steps asked for "
                                      "are done") -> None:
        super().__init__(message)


# Note [Gradients a parameter holds by another name]
# Some libraries keep gradients on the parameter under a name of their own: opacus'
# per-sample gradients (`p.grad_sample`, batch x the weight's shape, and `p.summed_grad`),
# Megatron-style fp32 `p.main_grad`. Made by a backward hook, they read `temporary`: on
# opacus' DP-SGD of a 3-block MLP, 3.6 MiB, 94 % of the peak, under "temporary · zeros".
# At each optimizer step a parameter's own attributes whose name says `grad` are its
# gradients too, named `<parameter>.<attribute>`.
def _gradient_attributes(p: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    out = []
    for attr, v in p.__dict__.items():
        if "grad" not in attr:
            continue
        if isinstance(v, torch.Tensor):
            out.append((attr, v))
        elif isinstance(v, (list, tuple)):   # one per call of a module used twice
            out += [(f"{attr}.{i}", t) for i, t in enumerate(v) if isinstance(t, torch.Tensor)]
    return out


def _own_call(module: torch.nn.Module) -> bool:
    """Its class defines a `__call__` of its own (gpytorch's `Module`), which runs
    `forward` without torch's module hooks."""
    return type(module).__call__ is not torch.nn.Module.__call__


class Collector(ShardingMixin, TorchDispatchMode):
    """Records a lifetime ledger of every storage while active.

    Example usage::

        sink = MemorySink()
        with Collector(sink) as c:
            train_some_steps()
        Ledger.from_records(sink.records)

    Known limitations: one thread (the autograd engine's CPU work runs in the caller's
    thread; CUDA backward runs in engine threads that inherit the mode; other threads'
    modules and optimizers are ignored: Note [Other threads' modules]); tensor subclasses
    without storages (sparse, nested) are not counted.
    """

    # The types of tensor whose storage is the tensor's own, read as a plain tensor is:
    # for the in-place folds (Note [In place but for the mode], Note [A Linear's bias, ...]),
    # grown storages (Note [Storages grown inside an op]), tensors a call keeps on its module
    # (Note [Tensors a call keeps on its module]) and buffers it makes. FakeCollector adds
    # FakeTensor: a fake run's tensors are all of that type.
    PLAIN_TYPES: tuple[type, ...] = (_Tensor,)
    # the classes a parameter has: Note [A parameter's gradients, as they are set]
    PARAM_CLASSES: tuple[type, ...] = (torch.nn.Parameter,)
    # flex_attention, cond, scan...: run by their ops (Note [Higher-order operators run by
    # their ops], trace/higher_order.py); torch refused them to the mode before
    supports_higher_order_operators = True

    def _own_storage(self, t) -> bool:
        """`t`'s storage is its own (Note [Tensors a call keeps on its module]): a plain
        tensor, or a subclass that only carries metadata beside it (`_storage_subclass`:
        the activations of a model fed MONAI's MetaTensor are MetaTensors)."""
        tp = type(t)
        return tp in self.PLAIN_TYPES or (issubclass(tp, _Tensor) and _storage_subclass(tp))

    # Note [No Dynamo wrapper around the hot path]
    # torch wraps a dispatch mode's `__torch_dispatch__` in `torch._disable_dynamo`, so that
    # Dynamo never compiles inside it: two more Python frames and a stance lookup on every
    # op (~7 µs of the ~17 µs a traced op costs here, cProfile of the tiny GPT). Dynamo
    # compiles nothing while this mode is on the stack anyway (it skips the frame: "non-
    # infra torch dispatch mode present"), and the collector runs compiled code under the
    # "force_eager" stance (Note [Compiled code runs eager under the collector]), so the
    # wrapper guards nothing here. Subclasses (FakeCollector) inherit the answer.
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self, sink: Sink, max_steps: int | None = None,
                 header: dict[str, Any] | None = None,
                 on_steps_done: Callable[[], None] | None = None,
                 pre_existing: Iterable[int] = (), steps_by: str = "optimizer",
                 scan_garbage: bool = False) -> None:
        super().__init__()
        # list the live storages that are unreachable garbage as the last step ends (<1 ms:
        # the imports still frozen), or at the close (~0.13 s; benchmarks/gc_scan.py);
        # left out of `memledger.trace()` blocks, whose exit is timed
        self._scan_garbage = scan_garbage
        self._garbage_end: list[int] | None = None   # listed as the last step ended
        self._steps_by = steps_by    # what ends a step: trace/steps.py, STEPS_BY
        self._forwards = 0           # root forwards begun (steps_by="forward")
        self._forward_starts = ForwardStarts()
        # Storages (by _cdata) alive before tracing began. Only keys: holding the tensors
        # would keep them alive. One seen later is recorded as live from event 0.
        self._pre_existing = pre_existing if isinstance(pre_existing, FirstUse) \
            else frozenset(pre_existing)
        self._lifting = False   # the op running is aten.lift_fresh or set_ (the Note above)
        self._setting = False   # ... set_: a deserializer's storage (trace/external.py)
        # (weakref, role, name) of a lazy module's state not made yet: Note [Lazy parameters]
        self._lazy: list[tuple[weakref.ref, str, str]] = []
        self.sink = sink
        self.max_steps = max_steps
        self.on_steps_done = on_steps_done
        # Called (instead of raising again) at the first op after a swallowed StopTracing;
        # the trace worker closes the ledger there and exits: Note [When a step ends].
        self.on_stop_swallowed: Callable[[], None] | None = None
        self._header = header or {}
        self._ev = 0                       # index of the next event
        self._next_sid = 0
        self._step_sids = (0, 0)   # Note [A history the script keeps]: the sids the
        # step before made, [its start, its end), for `_write_holders`
        # Note [A state a suspended generator holds] (trace/step_holders.py)
        self._generators = SuspendedGenerators()
        # Note [A batch is what no step made]: the sid spans of the forward and loss
        # phases ([start, end), end None while open), and what was made from them outside
        self._fwd_spans: list[list] = []
        self._state_made: set[int] = set()
        self._sids: dict[int, int] = {}    # storage _cdata -> sid, while alive
        self._last: dict[int, int] = {}    # sid -> last event that used it
        self._refs: dict[int, tuple[int, int, weakref.ref]] = {}  # id(ref) -> (sid, key, ref)
        self._outside: set[int] = set()    # sids made in setup/other phases (batch candidates)
        self._closure_batch = False   # Note [A batch made in a closure]
        self._in_setup: set[int] = set()   # sids made before the first step (setup)
        self._inputs: set[int] = set()     # sids marked `input` (a step's batch)
        # Note [A batch made after an evaluation]: sids made in the loss phase a forward
        # without gradients left open, and whether the last root forward was one
        self._after_eval: set[int] = set()
        self._after_graphless = False
        self._after_graded: set[int] = set()   # the same after a forward with gradients
        # Note [The pass that writes the gradients] (ledger/model.py): the parameters'
        # `.grad` (storage, version) as the running backward pass began
        self._grads_at_pass: dict[int, tuple[int | None, int]] | None = None
        # Note [Written in place from the step before] (ledger/held_roles.py): sid read ->
        # (the event of an op that read it and wrote another in place, that one's sid)
        self._into: dict[int, tuple[int, int]] = {}
        # the optimizers stepped so far: Note [State made between steps]
        self._optimizers: weakref.WeakSet = weakref.WeakSet()
        self._cast_from: dict[int, int] = {}   # Note [A batch cast before the model]: sid -> source
        self._zero_grad_from = ""   # the phase a zero_grad began in: Note [A zero_grad inside the loss]
        self._saved_mod: dict[int, str] = {}
        self._roles_written: set[tuple[int, str]] = set()  # sids are never reused
        self._unnamed_roles: set[tuple[int, str]] = set()  # of those, written without a name
        # sid -> the roles written for it (role, name, shard): Note [Storages grown inside an op]
        self._sid_roles: dict[int, list[tuple[str, str, str]]] = {}
        self._grad_watch = DroppedGradients()   # Note [A gradient dropped from .grad]
        self._never_called = ByModule()   # Note [Modules never called]: module -> name
        # paths whose method made a storage outside any call: Note [Work a module's method
        # does outside any call]
        self._methods_seen: set[str] = set()
        # op (its _Op) -> the events at which it made no storage and is no view: Note [Ops
        # that made nothing, placed]; written as `bare` records at each step's end
        self._made_nothing: dict[_Op, list[int]] = {}
        self._names: dict[Any, str] = {}   # a cache for the hot path: dtype, device names
        self._phase = "setup"
        self._step = 1                     # the step in progress (1-based)
        self._steps_done = 0
        self._step_t0 = time.perf_counter_ns()
        self._mod_stack: list[tuple[str, int, int, bool]] = []  # (path, ev0, t0, is_root)
        self._read_from: str | None = None   # the phase a top-level weight read began in
        self._param_names: dict[int, str] = {}  # id(param) -> name
        self._roots = RootNames()          # module paths, the model: trace/roots.py
        self._rf_stack: list[str] = []
        self._sid_marks: list[int] = []    # per open module call: its first new sid
        self._arg_versions: list[list] = []   # and its tensor arguments' versions
        # id(list or dict) -> (it, [(path, ev0, ev1, its items' identities)] per call
        # handed it), judged as the model's outermost call returns, or as soon as nothing
        # else holds it (Note [A list changed after the call], trace/outside_state.py)
        self._handed: dict[int, tuple[Any, list]] = {}
        self._attr_sids: list[dict] = []      # and its module's tensor attributes' sids
        # and the names of its buffers that held a tensor of no elements (sinabs' empty
        # membrane): Note [A state filled on the first call] (replay/emptied_cache.py)
        self._empty_bufs: list[frozenset] = []
        self._attr_watch: dict[int, int] = {}  # those sids -> last use, when freed before
        #                                        the call ends (-1: live or never used)
        # those sids -> (last use before the reads to Python that end its uses, the last of
        # those reads): Note [A flag read to Python]
        self._to_python: dict[int, tuple[int, int]] = {}
        # (module, path, ev0, ev1) of the last call of a module with forward hooks of its
        # own, for `_routed` (Note [A backward hook made by hand], trace/outside_state.py)
        self._hooked_call: tuple | None = None
        # saved storages something besides autograd still holds: sid -> [weakref, aliases
        # alive, their weakrefs] (Note [When a saved storage is released])
        self._held: dict[int, list] = {}
        # saved buffers, the same entries, in `_held` only while a call of the module that
        # holds them is open (Note [A saved buffer its module lets go of])
        self._state_saves: dict[int, list] = {}
        # those still held as a backward pass began, watched until the step's next pass:
        # sid -> the same entry; and the events at which the script let go of them since
        # (Note [Let go of between two backward passes])
        self._held_over: dict[int, list] = {}
        self._between: dict[int, int] = {}
        # those still held by the script when a backward began, watched while autograd
        # holds them too (Note [Let go of after backward, while a kept graph holds it])
        self._held_past: dict[int, list] = {}
        self._lent: dict[int, _Lent] = {}   # Note [A sparse gradient kept as made]
        # Note [Sparse parts replaced inside an op]: the sids that are a sparse tensor's
        # part, whether an op is running, and the frees it made that wait for its end
        self._sparse_parts: set[int] = set()
        self._in_op = False
        self._freed_in_op: list[tuple[Callable[[int], None], int]] = []
        self._aliases: dict[int, weakref.ref] = {}   # `_alias`: weakref id -> weakref
        self._mapped = MappedFiles()   # Note [Storages over a mapped file]
        self._backward_sid = 0   # the first sid made in the current backward
        # id(weakref) -> [weakref, sid, save event, nth, backward passes begun at the save,
        # the node that first unpacked it (-1: none), its pass, passes begun outside a
        # module call at the save]: forward saves' aliases, to see autograd let go of one
        # unread (Note [A save autograd let go of unread]) or after it was read (Note [A
        # node a kept graph holds on])
        self._save_refs: dict[int, list] = {}
        self._bw_passes = 0
        self._outer_passes = 0   # Note [A pass inside the forward]
        # path -> (weak module, its training flag) at its latest call under grad since the
        # last backward began, and that backward's first event: Note [A re-run in another
        # mode] (trace/modes.py)
        self._fwd_modes: dict[str, tuple[weakref.ref, bool]] = {}
        self._bw_began = -1
        self._looked_for_optimizer = False
        self.optimizer_like = ""   # Note [An optimizer torch's hooks do not see]
        self.optimizer_unstepped = ""   # Note [An optimizer that never steps]
        self._appliers = False   # Note [An optimizer that applies gradients]
        # the phase and the module calls open when the running backward began (Note [A
        # backward called inside a forward])
        self._bw_from: tuple[str, int] = ("other", 0)
        self._bw_steps = 0   # optimizer steps running inside a backward pass: Note [An
                             # update inside backward is the optimizer's]
        # Note [Saved again by a graph-building backward]: sids the running node's ops saved
        # again, and the weak references to those saves
        self._saved_again: set[int] = set()
        self._again_refs: dict[int, weakref.ref] = {}
        # Note [What a node lets go of before it returns]: sid -> [a weakref to autograd's
        # alias of it, its storage's use count as backward unpacked it, the event the node
        # let go of it or -1]
        self._unpack_watch: dict[int, list] = {}
        # per storage, the saves written at the current save event (`_saved`)
        self._saves_at: tuple[int, dict[int, int]] = (-1, {})
        self._bw_module = ""
        # the module of the last unpack, and the module whose call made the node running
        # (None: not known): Note [The module of a backward op]
        self._bw_unpacked = ""
        self._node_made: str | None = None
        self._node_makers = NodeMakers(threading.get_ident())
        # the module stack's depth below the outermost call made while autograd's engine ran
        # a node (-1: none open): Note [A module called inside backward]
        self._bw_call_depth = -1
        # Note [When an unpacked tensor goes]: the node now unpacking, its unpacks, its end
        self._unpack_node = -1
        # (sid, event, its save's event, read by a graph-building backward: Note [Read by a
        # backward that builds a graph], the save's nth at its event)
        self._unpacks: list[tuple[int, int, int, bool, int]] = []
        # Note [A backward pass run inside a node] (trace/nested_backward.py): the graph task
        # of the node now unpacking, and the nodes whose apply runs the passes under it
        self._unpack_task = -1
        self._suspended: list[Suspended] = []
        self._walking = False   # reading a kept tensor's graph: its unpacks are not backward's
        self._acast_pending: list[dict] = []   # casts autocast may cache, until read
        self._apply_end = 0
        # Note [In place but for the mode]: the node running, its first sid; the input an
        # untraced run would have written in place, (sid, event)
        self._node, self._node_sid = -1, 0
        self._twin: tuple[int, int, int, str] = (-1, -1, -1, "")   # in, event, out, op
        # Note [A derivative formula in place but for the mode]: the running node's ops to
        # fold, and its temporaries an op read as its first input -> (event, out, op)
        self._formula: dict | None = None
        self._chain: dict[int, tuple[int, int, str]] = {}
        # Note [The attention mask, added in place but for the mode]: an add's (in, event,
        # out) that may be attention's, and the free of its input, held until the next op
        self._mask_twin: tuple[int, int, int] = (-1, -1, -1)
        self._free_held: dict | None = None
        self._released = False     # the node let go of what it unpacked: its apply is over
        # the engine ran validate_outputs on the node's gradients (a broadcast sum, a cast):
        # its apply has returned (Note [When an unpacked tensor goes])
        self._validated = False
        # ... and the event after its last such sum or cast: when autograd let go of it
        # (Note [A copy the force graph holds, let go with its node], replay/engine.py)
        self._val_end = 0
        # Note [The script's own checkpoint]: its calls met so far, and the open re-run's
        # (pack hook, sid of its generator fork) while one runs
        self._ckpt_frames = CheckpointFrames()
        self._ckpt_calls = 0
        # Note [A policy checkpoint around a checkpointed function] (trace/script_checkpoint.py):
        # id(call) -> (call, record, module-stack depth), written as the caller's call ends
        self._fn_ckpts: dict[int, tuple[object, dict, int]] = {}
        self._fork: tuple[Any, int | None] = (None, None)
        # Note [A re-run of the script's that stops before its first op]: id(weak ref) ->
        # (ref, event, bytes, region module, module now) of each fork not yet seen over ops
        self._early_forks: dict[int, tuple] = {}
        self._op_made = 0   # the first sid the latest op made (its outputs: sids from here)
        self._mutated: set[tuple[int, int]] = set()   # Note [Written in place in forward]
        # sid -> the last forward (or loss) event whose op read its values: Note [A state
        # the region reads before it writes]
        self._reads: dict[int, int] = {}
        self._makers: dict[int, weakref.ref] = {}   # sid -> the forward op's output that made it
        self._nograd_depth: int | None = None   # module depth looked at without gradients
        self._handles: list[Any] = []
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks_noted = False   # Note [The script's own saved-tensor hooks]
        self._closed = False
        self._done = False                 # max_steps reached: Note [When a step ends]
        self._forked = False               # Note [A forked child traces nothing]
        self._steps = StepBoundary()       # Note [When a step ends]
        self._threads = 1                  # most Python threads seen at a step's end
        self._init_sharding()  # Note [Sharded storages]
        self._owner = threading.get_ident()   # the tracing thread: set again at __enter__
        self._resize_watch = StorageResizeWatch(self._only_ours(self._on_resize))
        # Note [Generator states the script keeps] in trace/rng_state.py
        self._rng_watch = RngStateWatch(self._only_ours(self._on_rng_state),
                                        self._only_ours(self._on_checkpoint_state))
        # Note [A checkpoint that keeps no generator state] (trace/script_checkpoint.py)
        self._ckpt_watch = CheckpointRunWatch(self._only_ours(self._on_checkpoint_run))
        self._eager = False   # Note [Compiled code runs eager under the collector]
        self._scalars = WrappedScalars(self._wrapped_saved)   # Note [Wrapped scalars]
        self._gc = GcWindow()   # frees inside a garbage collection are marked (gc_window.py)
        self._formulas = False   # holds UntracedFormulas (Note [A derivative formula ...])

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "Collector":
        self.sink.write({"k": "header", "schema": SCHEMA, "torch": torch.__version__,
                         "started_unix": time.time(), **self._header})
        self.sink.write({"k": "phase", "ev": 0, "ph": "setup", "step": 1})
        self._owner = threading.get_ident()
        self._node_makers = NodeMakers(self._owner)
        ours = self._only_ours   # the hooks are global: Note [Other threads' modules]
        self._handles = [
            nn_module.register_module_forward_pre_hook(ours(self._pre_call)),
            # before _module_post, which pops the call this one reads
            nn_module.register_module_forward_hook(ours(self._call_end), with_kwargs=True,
                                                   always_call=True),
            nn_module.register_module_forward_hook(ours(self._module_post), always_call=True),
            register_optimizer_step_pre_hook(ours(self._opt_pre)),
            register_optimizer_step_post_hook(ours(self._opt_post)),
            # Note [A parameter's gradients, as they are set] (trace/param_attrs.py)
            watch_parameter_attributes(ours(self._gradient_attribute), self.PARAM_CLASSES),
            # Note [A backward hook made by hand] (trace/outside_state.py)
            listen_for_routed_calls(ours(self._routed)),
        ]
        self._saved_hooks.__enter__()
        # Note [A derivative formula that branches on the mode] (trace/untraced_formulas.py)
        UntracedFormulas.acquire()
        self._formulas = True
        self._resize_watch.__enter__()
        self._rng_watch.__enter__()
        self._ckpt_watch.__enter__()
        self._gc.__enter__()
        eager_stance(True)   # Note [Compiled code runs eager under the collector], compiled.py
        self._eager = True
        _ACTIVE.add(self)
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._forked:   # a forked child took the mode off already
            super().__exit__(exc_type, exc, tb)
        _ACTIVE.discard(self)
        if self._eager:
            eager_stance(False)
            self._eager = False
        self._resize_watch.__exit__(exc_type, exc, tb)
        self._rng_watch.__exit__(exc_type, exc, tb)
        self._ckpt_watch.__exit__(exc_type, exc, tb)
        self._gc.__exit__(exc_type, exc, tb)
        self._saved_hooks.__exit__(exc_type, exc, tb)
        if self._formulas:
            self._formulas = False
            UntracedFormulas.release()
        for h in self._handles:
            h.remove()
        self._handles = []
        if exc_type is None or issubclass(exc_type, StopTracing) or (
                issubclass(exc_type, SystemExit) and exc.code in (None, 0)):
            status, message = "ok", ""
        elif issubclass(exc_type, KeyboardInterrupt):
            status, message = "interrupted", "interrupted (Ctrl-C)"
        else:
            status, message = "error", f"{exc_type.__name__}: {exc}"
        self.close(status, message)

    # Note [Other threads' modules]
    # Module hooks, optimizer hooks and the storage resize watch are process-wide, while the
    # dispatch mode and the saved-tensor hooks belong to the thread that entered the block
    # (and to the autograd engine threads it starts, which inherit them). Another thread's
    # model (an evaluation thread, a server beside a `memledger.trace()` block, the main
    # thread while a worker thread traces) fired the hooks: its parameters and batches were
    # named into this ledger as pre-existing parameters and inputs, and its optimizer ended
    # this ledger's steps. A Linear(100, 50) + Adam traced beside a thread running a
    # 20-20-1 MLP read 21,964 B of parameters, not 20,200, and inputs of 28,160 B, not 3,200.
    # A hook now acts only in the tracing thread or in a thread where this mode is active.
    def _ours(self) -> bool:
        if threading.get_ident() == self._owner:
            return True
        return any(m is self for m in _get_current_dispatch_mode_stack())

    def _only_ours(self, hook: Callable[..., Any]) -> Callable[..., Any]:
        ours = self._ours
        hook = internal(hook)   # Note [memledger's own hooks fail as memledger] (crash.py)

        def hook_if_ours(*args: Any, **kwargs: Any) -> Any:
            return hook(*args, **kwargs) if ours() else None

        return hook_if_ours

    def close(self, status: str = "ok", message: str = "") -> None:
        """Write what is still live and the end record; flush. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._free_held is not None:   # no op came after it: as recorded
            self.sink.write(self._free_held)
            self._free_held = None
        self._resume_all(self._ev)
        self._unpacks_done()
        if self.optimizer_unstepped:   # what it made after the last root forward (Note [An
            self._mark_held_by_optimizers()   # optimizer that never steps])
        if self._steps_by == "optimizer":   # a step its optimizers began and left open
            open_step = self._steps.open    # (a trainable parameter none steps, the first
        else:                               # step: trace/steps.py)
            open_step = bool(self._forwards) or self._steps_by == "whole"
        if status == "ok" and not self._done and open_step:
            try:
                self._end_step()         # the script's end closes the open step
            except StopTracing:
                pass
        for _, (sid, _, _) in list(self._refs.items()):
            if sid in self._resized_away:
                continue
            self.sink.write(self._last_into({"k": "live", "sid": sid,
                                             "last": self._last.get(sid, -1)}))
        for slices, rest in self._mapped.remaining():   # Note [Storages over a mapped file]
            if rest is not None:
                slices = [*slices, self._write_rest(rest)]
            for sid in slices:
                self.sink.write({"k": "live", "sid": sid, "last": self._last.get(sid, -1)})
        for sid, lent in self._lent.items():   # Note [A sparse gradient kept as made]
            if lent.copies:
                self.sink.write({"k": "lent", "sid": sid, "ev": lent.start, "until": -1})
            if lent.own >= 0:
                self.sink.write({"k": "lent", "sid": sid, "own": lent.own})
                self.sink.write({"k": "live", "sid": sid, "last": self._last.get(sid, -1)})
        if self._scan_garbage and status == "ok":
            sids = self._garbage_end if self._garbage_end is not None else \
                garbage_sids(self._sids)   # after the `live` records (gc_window.py)
            if sids:
                self.sink.write({"k": "garbage", "sids": sids})
        self._write_scalars()
        self.sink.write({"k": "end", "ev": self._ev, "status": status, "message": message,
                         "steps": self._steps_done,
                         # no frees written after the last step: Note [Resident at the end]
                         **({"held": True} if self._done else {}),
                         **({"threads": self._threads} if self._threads > 1 else {})})
        self.sink.flush()

    def _wrapped_saved(self, t: torch.Tensor, ev: int, mod: str) -> bool:
        """A Python number op `ev` was handed, which its autograd node saved (Note [Wrapped
        scalars saved for backward] in trace/scalars.py): a storage of its own from `ev`
        until the node goes, saved for backward (no saved-tensor hook ever sees it)."""
        st = t.untyped_storage()
        if st._cdata in self._sids:
            return False
        sid = self._new_storage(t, st, ev, WRAPPED_NUMBER_OP, pre=False, mod=mod)
        self._last[sid] = ev
        self.sink.write({"k": "role", "sid": sid, "role": "activation"})
        return True

    def _write_scalars(self) -> None:
        rec = self._scalars.take()
        if rec is not None:
            self.sink.write(rec)
        self._write_made_nothing()

    # Note [Ops that made nothing, placed]
    # The allocator pass measures kernel scratch per call of an op (Note [Kernel scratch] in
    # trace/allocator.py), and `Ledger.kernel_scratch` puts the k-th call's scratch at the
    # k-th event of that op; but an event's op was known only from the storages it made, so
    # the scratch of a call that made none (`torch.mm(a, b, out=tile)`, an in-place op) had
    # no event to go to and was dropped (Note [Calls that made nothing]). TRL's fused LM
    # head projects each tile with `torch.mm(hidden, w.t(), out=tile)` into a strided slice
    # of a preallocated buffer; the bf16 CPU kernel takes 22,016 B of scratch inside that
    # call (a 2-layer Llama, 30 tokens, SFT), and the SFT trace's peak is that `mm`: the
    # ledger read 13,294 B under the allocator, DPO 7,232 B. So the events at which an op
    # that is no view made no storage are written too, by op (`bare` records: `op`, `ev`,
    # one per op at each step's end and at the end of the trace); replay matches an op's
    # calls against all its events, made something or not.
    def _write_made_nothing(self) -> None:
        if not self._made_nothing:
            return
        for op, evs in self._made_nothing.items():   # keyed by _op_info
            self.sink.write({"k": "bare", "op": op.name, "ev": evs})
        self._made_nothing = {}

    @property
    def steps_done(self) -> int:
        return self._steps_done

    @property
    def events(self) -> int:
        return self._ev

    # ---- the hot path: one call per op ---------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._done:  # Note [When a step ends]: the script swallowed StopTracing
            if self._forked or func is _RF_EXIT or func is _RF_ENTER or \
                    isinstance(sys.exc_info()[1], StopTracing):
                # a forked child (Note [A forked child traces nothing]), step()'s own
                # profiler scope closing, or cleanup while the stop unwinds (Note [Cleanup
                # while the stop unwinds])
                return func(*args, **(kwargs or {}))
            if self.on_stop_swallowed is not None:
                self.on_stop_swallowed()
            raise StopTracing()
        if types and _defers(types):   # Note [Wrapper subclasses]: its ops come through us
            return NotImplemented
        if type(func) is not _OP_OVERLOAD and is_higher_order(func):
            return run_by_its_ops(self, func, args, kwargs)
        if kwargs is None:
            kwargs = {}
        if self._handed:   # Note [A handed list let go of between calls]
            self._judge_handed(every=False)
        op = _op_info(func)   # Note [One lookup per op]
        grow = op.grow
        if grow:   # Note [Storages grown inside an op]
            grow = self._written_sizes(grow, args, kwargs)
        self._in_op = True   # Note [Sparse parts replaced inside an op]
        try:
            if func is _CLAMP_MIN and (dtype := _ctc_divisor_dtype(args)) is not None:
                out = func(args[0].to(dtype), *args[1:], **kwargs)   # Note [CTC's target lengths]
            else:
                try:
                    out = func(*args, **kwargs)
                except RuntimeError:   # Note [A number where a tensor must be] (scalars.py)
                    fixed = _rewrapped(func, args)
                    if fixed is None:
                        raise
                    out = func(*fixed, **kwargs)
        finally:
            self._in_op = False
        if func is _RF_ENTER or func is _RF_EXIT:
            self._record_function(func, args)
            if self._freed_in_op:
                self._settle_frees_in_op()
            return out
        ev = self._ev
        self._ev = ev + 1
        if self._free_held is not None:   # Note [The attention mask, added in place ...]
            self._settle_held_free(func, args)
        if self._scalars.pending:   # the last op's node is set now: Note [Wrapped scalars]
            self._scalars.resolve()
        if self._held:
            self._check_released(ev)
        if self._held_over and self._phase not in _NO_PASS_AHEAD:
            self._check_let_go_between(ev)
        if self._held_past:
            self._check_let_go(ev)
        self._setting = func is _SET_STORAGE or func is _SET_STORAGE0
        self._lifting = func is _LIFT_FRESH or self._setting
        in_task = _graph_task_id() != -1
        if self._bw_steps and not in_task:   # a step that raised inside backward never
            self._bw_steps = 0               # returned (Note [An update inside backward...])
        if in_task != (self._phase == "backward") and not self._bw_steps:
            self._switch_backward(ev)
        if self._ckpt_calls and self._phase == "backward":
            self._watch_recompute(ev)
        phase = self._phase   # no call below changes it (module and optimizer hooks do)
        last = self._last
        sids = self._sids
        if self._attr_watch and func in _TO_PYTHON:   # Note [A flag read to Python]
            self._read_to_python(args, ev)
        numbers = False
        # Note [A state the region reads before it writes]: a forward op's inputs are read
        # (a view's are not; an op that writes notes its reads in `_note_mutated`)
        reads = self._reads if (phase == "forward" or phase == "loss") and not op.view \
            and not op.written else None
        # Note [The reads of a write in place, from the op's own lookups]: the sids this
        # loop finds, for `_note_into`
        into = [] if op.grow and phase != "backward" and not (
            (phase == "forward" or phase == "loss") and op.written) else None
        for a in args:
            if isinstance(a, _Tensor):
                # `_sid`'s common case inline: a plain tensor's storage seen before
                sid = None
                if a.__class__ in _PLAIN:
                    try:
                        sid = sids.get(a.untyped_storage()._cdata)
                    except (RuntimeError, NotImplementedError):
                        pass
                if into is not None:
                    into.append((a, sid))   # None: looked up again, as before
                if sid is None:
                    sid = self._sid(a, ev)
                last[sid] = ev
                if reads is not None:
                    reads[sid] = ev
            elif isinstance(a, (list, tuple)):
                for b in a:
                    if isinstance(b, _Tensor):
                        sid = self._sid(b, ev)
                        last[sid] = ev
                        if reads is not None:
                            reads[sid] = ev
            elif a.__class__ in _NUMBERS:
                numbers = True
        for a in kwargs.values():
            if isinstance(a, _Tensor):
                sid = self._sid(a, ev)
                last[sid] = ev
                if reads is not None:
                    reads[sid] = ev
        if phase == "backward":
            n = _current_node()   # as _node_now(), with the node's name at hand
            node = -1 if n is None else n._sequence_nr()
            if node != self._node:   # Note [In place but for the mode]: its first storage
                self._node, self._node_sid = node, self._next_sid
                # Note [A derivative formula in place but for the mode]: its ops to fold
                self._formula = None if n is None else _FORMULAS_IN_PLACE.get(n.name())
                self._chain.clear()
                # Note [The module of a backward op]: the module whose call made the node,
                # else the last unpack's
                made = self._node_made = self._node_makers.of(node)
                self._bw_module = self._bw_unpacked if made is None else made
            if (self._unpacks or self._suspended) and node != self._unpack_node:
                self._another_node(node, ev)
            if self._unpack_watch:
                self._check_unpacks_let_go(ev)
            if func is _CLONE and kept_as_made(func, args):
                self._keep_as_made(args[0], out, ev)   # before its parts get sids of their own
        made = self._op_made = self._next_sid
        if isinstance(out, _Tensor):
            sid = None   # `_output`'s common case inline: a view or an in-place write
            if out.__class__ in _PLAIN:
                try:
                    sid = sids.get(out.untyped_storage()._cdata)
                except (RuntimeError, NotImplementedError):
                    pass
            if sid is None:
                self._output(out, ev, op)
            else:
                last[sid] = ev
        elif isinstance(out, (list, tuple)):
            for o in out:
                if isinstance(o, _Tensor):
                    self._output(o, ev, op)
        if grow:
            for t, st, nbytes in grow:
                if st.nbytes() != nbytes:
                    self._grown(t, st, nbytes, ev)
                    if into is not None:   # a storage read has a new sid: every one
                        into = ()          # looked up again
        # Note [Ops that made nothing, placed]; not every op has `is_view` (a fake run's
        # stand-ins, trace/fake.py, have their op's; a higher-order op has none)
        if self._next_sid == made and not op.view:
            evs = self._made_nothing.get(op)
            if evs is None:
                self._made_nothing[op] = [ev]
            else:
                evs.append(ev)
        if self._unpacks and self._next_sid != made and not op.layout \
                and not self._released and not (func is _ADD and self._validated):
            self._apply_end = ev + 1
        elif self._unpacks and op.layout:
            self._validated = True   # an `add` from here on is the engine's accumulation
            self._val_end = ev + 1
        if self._acast_pending and func is not _TO_COPY and not func.is_view:
            self._autocast_casts_read_by(func)
        if func is _TO_COPY and (phase == "setup" or phase == "other"):
            self._note_cast(args, out, ev)   # Note [A batch cast before the model]
        if phase == "other" and self._next_sid != made and self._fwd_spans:
            # Note [A batch is what no step made]
            self._note_state_made(args, kwargs, made)
        if func is _TO_COPY and phase != "backward" and _autocast_caches(args, out):
            self._acast_pending.append({"k": "acast", "sid": self._sid(out, ev),
                                        "src": self._sid(args[0], ev)})
        if phase == "backward":
            if op.in_place:   # cheap first
                self._in_place_twin(func, args, out, ev)
            elif self._formula is not None and func in self._formula:
                self._formula_twin(func, args, out, ev)
            # the script's own checkpoint re-runs forward ops in backward: the forward's
            # folds apply to them too (w2v-BERT's math attention under its own checkpoint)
            if func is _ADD and self._fork[0] is not None and self._twin[1] != ev:
                self._forward_add_twins(args, out, ev)
        elif func is _ADD:
            self._forward_add_twins(args, out, ev)
        if numbers and op.slots:   # Note [Wrapped scalars] in trace/scalars.py
            self._scalars.note(func, args, out, ev, self._module_now, op.slots)
        if op.casts:   # Note [Inputs an op casts] in trace/scalars.py
            self._scalars.note_casts(func, args, out, ev)
        # Note [A load into the model after an evaluation]
        if phase == "loss" and not (op.written and self._writes_model_state(
                func, op.written, args, kwargs)):
            self._mark_loss_inputs(args)
        if (phase == "forward" or phase == "loss") and (w := op.written):
            self._note_mutated(func, w, args, kwargs, ev, op.overwritten)
        elif into is not None:   # Note [Written in place from the step before]
            self._note_into(op.grow, args, kwargs, ev, into)   # (ledger/held_roles.py)
        if op.comm:   # a c10d collective
            self._mark_communication(func, args, out)
        if func is _COPY and phase == "setup":   # Note [Sharded storages], 5
            self._note_copy(args)
        if self._freed_in_op:   # Note [Sparse parts replaced inside an op]
            self._settle_frees_in_op()
        return out

    # Note [Sparse parts replaced inside an op]
    # An op on a sparse COO tensor in place replaces its parts: AccumulateGrad adds a second
    # micro-batch's sparse gradient into the first (`grad += new`, `add_` on sparse), and
    # `add_out_sparse` makes the sum's indices and values as new tensors, sets them on the
    # gradient, and only then frees the old ones. The old parts' weakrefs fire inside the
    # op, at the event the op is about to take, and the sum's parts are read at that event
    # too: the ledger had the old parts gone while the new ones came, and lost their overlap
    # (an EmbeddingBag(sparse=True) of 8 x 8 memories, 256 ids of 16 floats, accumulated
    # twice: 2,048 + 16,384 B; product-key-memory's `--sparse --accumulate 2` at depth 1,
    # ledger 156,612 B against allocator 174,036 B). A sparse part freed while an op runs
    # (and the copy Note [A sparse gradient kept as made] reads as one) is freed after it,
    # at the next event; a dense storage freed inside an op keeps the op's event.

    def _note_sparse_parts(self, sids: list[int]) -> None:
        """Remember (and write once, as a `sparse` record: Note [A sparse gradient's part
        ends no backward], replay/engine.py) the sids of a sparse tensor's parts."""
        for sid in sids:
            if sid >= 0 and sid not in self._sparse_parts:
                self._sparse_parts.add(sid)
                self.sink.write({"k": "sparse", "sid": sid})

    def _settle_frees_in_op(self) -> None:
        pending, self._freed_in_op = self._freed_in_op, []
        for then, sid in pending:
            self._sparse_parts.discard(sid)
            then(sid)

    # Note [Storages grown inside an op]
    # An op may resize a tensor it was handed to write: an `out=` argument of the wrong size
    # (`torch.mm(a, b, out=buf)` with `buf = torch.empty(0)`), `x.resize_(n)`, and kernels
    # that resize their state arguments inside (eager QAT's `fused_moving_avg_obs_fake_quant`
    # grows each per-channel observer's empty `min_val` / `max_val`, and the fake quantizer's
    # `scale` / `zero_point`, to one value per channel at the first forward). The storage
    # object stays the same, so no new output and no free is seen: the ledger kept the old
    # size (QAT on two 32-128-32 blocks: 5,240 B under the allocator, 8 x 512 + 8 x 128 +
    # 4 x 40 B). So the sizes of the single tensors an op writes are read before it runs, and
    # one that changed is written as resized at the op's event: its old bytes freed, its new
    # ones a new sid (op `resize_`) that keeps the old one's roles (a buffer stays a buffer).

    def _written_sizes(self, slots, args, kwargs) -> list:
        out = []
        for i, name in slots:
            t = args[i] if i < len(args) else kwargs.get(name)
            if type(t) in self.PLAIN_TYPES:   # a subclass's storage is its own
                try:
                    st = t.untyped_storage()
                except (RuntimeError, NotImplementedError):
                    continue
                out.append((t, st, st.nbytes()))
        return out

    def _grown(self, t: torch.Tensor, st, old: int, ev: int) -> None:
        key = st._cdata
        roles = self._sid_roles.get(self._sids.get(key, -1), ())
        saved, self._ev = self._ev, ev
        try:
            self._on_resize(st, old, st.nbytes(), t)
        finally:
            self._ev = saved
        sid = self._sids.get(key, -1)
        for role, name, shard in roles:
            if sid >= 0:
                self._role(t, role, name, shard)

    # Note [Written in place in forward]
    # torch's selective checkpoint keeps the outputs of its save list (`addmm`, `mm`, ...) in
    # a cache and hands them to the re-run; one changed in place afterwards fails there
    # ("Tensor cached during selective activation checkpoint has been mutated"). peft's
    # AdaLoRA adds its update into the base layer's `addmm` output (`result += ...`), a
    # `ReLU(inplace=True)` rewrites the Linear's. So that `predict` and `plan` refuse what
    # `measure` cannot run, a `mutated` record (`sid`, `ev`, `op`) names the first op that
    # wrote each storage in place before backward (the arguments its schema marks `a!`),
    # once per storage and step: a BatchNorm's running stats are one record a step (once
    # per storage missed state whose first write was a call while the model was built:
    # spectral_norm's registration runs its power iteration).
    # peft 0.22 scales a LoRA update in place (`delta = B @ A; delta.mul_(scaling)`, 0.21
    # `* scaling`), and its `ParamWrapper` (LoRA on a bare parameter: Mixtral's router
    # weight) computes that update through a parametrization in every forward: the `mm` is
    # kept and then changed, and torch refuses `selective:` there. The refusal is right,
    # and both sides say it in one line (tests/clients/train_param_delta.py).
    #
    # torch tells a change by the cached output's version counter, which the output shares
    # with its views (and detached copies) but not with a tensor that merely aliases its
    # storage: `q @ k.transpose(2, 3)` on 4-D tensors is `bmm` then `_unsafe_view`, and
    # LLMs-from-scratch's attention fills the latter's mask in place (`masked_fill_`);
    # torch's cache of the `bmm` never sees it, and the re-run fills the same mask again.
    # predict refused `selective` there, which `measure` ran and the gates passed. So a
    # storage made in forward counts only when the tensor written is the op's output or a
    # view of it (`_base`, as views share the counter); the counter itself is bumped above
    # the dispatch mode, after the op has returned here, so it cannot be read instead.
    #
    # An `out=` argument is written as well: spectral_norm's power iteration writes its `_u`
    # and `_v` buffers by `F.normalize(..., out=self._u)` in every training forward (a
    # re-run would write them again: Note [State a re-run writes again], replay/stateful.py).
    # Note [A state the region reads before it writes]
    # A region's forward that writes state in place (a buffer, a tensor made before the
    # call) is refused under checkpoint and selective because the re-run starts from what
    # the forward left (Note [State a re-run writes again], replay/stateful.py). That holds
    # where the forward reads the state before writing it (a counter's `+= 1`, a metric's
    # running sums, spectral_norm's `_v` read by the power iteration that then writes it),
    # not where it only fills it: rotary-embedding-torch's `RotaryEmbedding` computes its
    # frequencies on its first call and copies them into its `cached_freqs` buffer
    # (`cached_freqs[:n] = freqs`, a `copy_`), and later calls slice the buffer instead,
    # the choice made on a Python int (`cached_freqs_seq_len`). A checkpoint's re-run of the
    # first call finds the cache filled and reads back the values the forward computed:
    # measure ran `checkpoint:layers.*.*` on BS-RoFormer (2,965,204 B) with the gradients
    # bitwise equal, and predict refused it ("whose forward writes ...cached_freqs in
    # place") for every attention with rotary positions (tests/clients/train_bsroformer.py).
    # So the trace keeps, per storage, the last forward or loss event whose op read its
    # values (`_reads`: any tensor input of an op that is no view; an op that writes reads
    # what it writes but where it overwrites it, `copy_`, `fill_`, `zero_`, an `out=`), and
    # each `mutated` record carries it (`rd`: that event, the write's own where the op reads
    # what it writes, -1 if none). The replay refuses a call whose forward read one of the
    # states it wrote, before that write, inside the call (engine.py
    # `_refuse_rewritten_state`), and one whose fill the next steps repeat (a fill made on
    # every call, as the re-run makes it again: measure refuses what the re-run writes).
    def _note_mutated(self, func, written: tuple[int, ...], args, kwargs, ev: int,
                      overwritten: tuple[int, ...] = ()) -> None:
        reads = self._reads
        for i in written:
            a = args[i] if i < len(args) else kwargs.get(func._schema.arguments[i].name)
            if isinstance(a, _Tensor):
                sid = self._sids.get(storage_key(a), -1)
                maker = self._makers.get(sid)
                if maker is not None and (made := maker()) is not a and \
                        (made is None or a._base is not made):
                    continue   # aliases the storage, not the output torch would cache
                if sid >= 0 and (sid, self._step) not in self._mutated:
                    self._mutated.add((sid, self._step))
                    rd = reads.get(sid, -1) if i in overwritten else ev
                    self.sink.write({"k": "mutated", "sid": sid, "ev": ev,
                                     "op": func.__name__, "rd": rd})
        names = func._schema.arguments
        for i, a in enumerate((*args, *(kwargs.get(n.name) for n in names[len(args):]))):
            if i in overwritten:
                continue
            for t in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(t, _Tensor):
                    if (sid := self._sids.get(storage_key(t), -1)) >= 0:
                        reads[sid] = ev

    # Note [The reads of a write in place, from the op's own lookups]
    # `_note_into` runs at every op outside forward and backward that writes one tensor in
    # place: AdamW's single-tensor update is 7 of them per parameter (`lerp_`, `mul_`,
    # `addcmul_`, `add_`, `addcdiv_`, ...), 364 a step on the tiny GPT of
    # benchmarks/overhead.py. It looked each tensor argument's storage up again
    # (`untyped_storage()` makes a Python storage object each call), work the hot loop
    # above has just done: up to ~2 % of a traced step by cProfile, an upper bound
    # (performance.md, fifty-sixth session). The loop now hands over what it found, (tensor, sid) per positional
    # tensor, and only what it did not settle inline is looked up again here: a tensor of
    # another class (a subclass, a fake tensor), a storage first met at this op (a wrapped
    # scalar) or one that has none (sparse), and the keyword arguments, exactly as before.
    # An inline hit is the storage's mapping, and nothing between the loop and this call
    # changes an argument's mapping but a storage grown inside the op (Note [Storages grown
    # inside an op]: a new sid); the op then hands `()`, and every argument is looked up
    # again. The records are the same, byte for byte (tests/unit/test_note_into.py).
    def _note_into(self, slots: tuple[tuple[int, str], ...], args, kwargs, ev: int,
                   found: list | tuple = ()) -> None:
        """Each tensor an op outside forward and backward read beside the one tensor it
        wrote in place (`new.add_(old)`): the storage written, should this read be its last
        (Note [Written in place from the step before], ledger/held_roles.py). Lists (the
        foreach ops) are left out. `found`: the hot loop's (tensor, sid or None) per
        positional tensor argument, `()` to look every argument up (Note [The reads of a
        write in place, from the op's own lookups])."""
        i, name = slots[0]
        w = args[i] if i < len(args) else kwargs.get(name)
        if not isinstance(w, _Tensor):
            return
        sids = self._sids
        into = -1
        if found:
            for a, sid in found:
                if a is w:
                    if sid is not None:
                        into = sid
                    break
        if into < 0:
            into = sids.get(storage_key(w), -1)
            if into < 0:
                return
        notes = self._into
        if found.__class__ is list:
            for a, sid in found:
                if a is not w:
                    if sid is None:
                        sid = sids.get(storage_key(a), -1)
                    if sid >= 0 and sid != into:
                        notes[sid] = (ev, into)
            if not kwargs:
                return
            rest = kwargs.values()
        else:
            rest = (*args, *kwargs.values())
        for a in rest:
            if a is not w and isinstance(a, _Tensor):
                sid = sids.get(storage_key(a), -1)
                if sid >= 0 and sid != into:
                    notes[sid] = (ev, into)

    def _last_into(self, rec: dict) -> dict:
        """`rec` (a free or live record) with `into` where its storage's last read wrote
        another in place (Note [Written in place from the step before])."""
        if self._into and (w := self._into.pop(rec["sid"], None)) is not None and \
                w[0] == rec["last"] >= 0:
            rec["into"] = w[1]
        return rec

    def _sid(self, t: torch.Tensor, ev: int) -> int:
        """The sid of an input's storage.

        A storage never seen before either existed when tracing began (it is live from
        event 0) or was made outside the dispatcher just now (a Python scalar wrapped as a
        tensor, `torch.from_numpy`, C++ internals).
        """
        if type(t) not in _PLAIN:   # inline: most inputs are plain tensors
            t = local_tensor(t)  # Note [Sharded storages]
            if type(t) not in _PLAIN and (inner := inner_tensors(t)):
                for _, part in inner[1:]:      # Note [Wrapper subclasses]
                    self._last[self._sid(part, ev)] = ev
                return self._sid(inner[0][1], ev)
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            parts = sparse_parts(t)   # Note [Sparse tensors]; nested: not counted
            sids = [self._sid(part, ev) for part in parts]
            self._note_sparse_parts(sids)   # Note [Sparse parts replaced inside an op]
            for sid in sids[:-1]:
                self._last[sid] = ev
            return sids[-1] if sids else -1
        key = st._cdata
        sid = self._sids.get(key)
        if sid is None:
            if key in self._pre_existing and not self._lifting and not is_pinned(t):
                sid = self._new_storage(t, st, 0, "", pre=True)
            elif self._from_another_process(st):   # Note [Batches from other processes]
                sid = self._new_storage(t, st, ev, SHARED_MEMORY_OP, pre=False)
                self._outside.discard(sid)
                self.sink.write({"k": "role", "sid": sid, "role": "input"})
            elif key in _BEFORE_THE_SCRIPT and not self._lifting:
                # Note [Storages an in-process caller made before the script]
                sid = self._new_storage(t, st, ev, BEFORE_THE_SCRIPT_OP, pre=False,
                                        before=True)
            else:
                sid = self._new_storage(t, st, ev, "(outside dispatch)", pre=False)
        return sid

    def _from_another_process(self, st) -> bool:
        """Whether a storage first met here is a batch another process handed over."""
        return st.is_shared()

    def _output(self, t: torch.Tensor, ev: int, op: _Op) -> None:
        if type(t) not in _PLAIN:
            t = local_tensor(t)
            if type(t) not in _PLAIN and (inner := inner_tensors(t)):
                for _, part in inner:          # Note [Wrapper subclasses]
                    self._output(part, ev, op)
                return
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            for part in sparse_parts(t):   # Note [Sparse tensors]
                self._output(part, ev, op)
                self._note_sparse_parts([self._sids.get(part.untyped_storage()._cdata, -1)])
            return
        sid = self._sids.get(st._cdata)
        if sid is None:  # a new storage: this op created it
            sid = self._new_storage(t, st, ev, op.name, pre=False)
            if self._phase == "forward" or self._phase == "loss":   # Note [Written in place
                self._makers[sid] = weakref.ref(t)                  # in forward]
        self._last[sid] = ev
        if t.is_nested:
            for part in nested_parts(t):   # Note [A nested tensor's sizes]
                self._output(part, ev, op)

    def _new_storage(self, t: torch.Tensor, st, ev: int, op: str, pre: bool,
                     mod: str | None = None, before: bool = False) -> int:
        sid = self._next_sid
        self._next_sid = sid + 1
        key = st._cdata
        self._sids[key] = sid
        ref = weakref.ref(st, self._on_free)
        self._refs[id(ref)] = (sid, key, ref)
        phase = self._phase
        dev, nbytes = self._where(t, st)
        dtype = self._names.get(t.dtype)
        if dtype is None:
            dtype = self._names[t.dtype] = str(t.dtype).removeprefix("torch.")
        rec = {
            "k": "alloc", "sid": sid, "ev": 0 if pre else ev, "bytes": nbytes,
            "dev": dev, "dtype": dtype,
            # a nested tensor has no one shape: its buffer's, flat (Note [Sparse tensors])
            "shape": list(t.shape) if not t.is_nested else [nbytes // t.element_size()],
            "op": op, "mod": self._module_now() if mod is None else mod,
            "ph": "setup" if pre else phase, "step": self._step, **({"pre": True} if pre else {}),
        }
        # Note [Memory torch's allocator did not hand out] in trace/external.py; a slice of
        # a mapped file is counted, with the mapping (Note [Storages over a mapped file])
        ext = before or self._external(t, st)
        if (ext or self._setting) and dev == "cpu" and external(st) and \
                self._mapped.add(sid, st.data_ptr(), nbytes, rec, not self._setting):
            ext = False
        if ext:
            rec["external"] = True
        self.sink.write(rec)
        if pre or phase == "setup" or phase == "other" or (
                phase == "optimizer" and self._closure_batch):
            self._outside.add(sid)
            if pre or phase == "setup":
                self._in_setup.add(sid)
        elif phase == "loss":   # Note [A batch made after an evaluation]
            (self._after_eval if self._after_graphless else self._after_graded).add(sid)
        return sid

    def _external(self, t: torch.Tensor, st) -> bool:
        """Note [Memory torch's allocator did not hand out] (FakeCollector: a fake's source):
        a storage first met at `set_` is a deserializer's, counted."""
        return not self._setting and external(st)

    def _where(self, t: torch.Tensor, st) -> tuple[str, int]:
        """The device name and bytes of a new storage (FakeCollector: the fake device)."""
        dev = self._names.get(st.device)
        if dev is None:
            dev = self._names[st.device] = str(st.device)
        return dev, st.nbytes()

    def _on_free(self, ref: weakref.ref) -> None:
        try:
            self._record_free(ref)
        except KeyboardInterrupt:  # Python would swallow it here: Note [One interrupt, ...]
            redeliver()

    def _record_free(self, ref: weakref.ref) -> None:
        if self._done:   # the script unwinding after the last step: held at its end, and
            return       # written `live` at the close (Note [Resident at the end], ledger/model.py)
        entry = self._refs.pop(id(ref), None)
        if entry is None or self._closed:
            return
        sid, key, _ = entry
        if sid in self._resized_away:  # its free was written at the resize
            self._resized_away.discard(sid)
            return
        if self._sids.get(key) == sid:
            del self._sids[key]
        if self._lent and (lent := self._lent.get(sid)) is not None:
            if lent.copies:   # Note [A sparse gradient kept as made]: freed with the copy
                lent.own = self._ev
                return
            del self._lent[sid]
        if self._in_op and sid in self._sparse_parts:   # Note [Sparse parts replaced inside
            self._freed_in_op.append((self._write_free, sid))   # an op]: after the op
            return
        self._sparse_parts.discard(sid)
        if self._mapped and (held := self._mapped.gone(sid)) is not None:
            self._mapping_gone(*held)   # Note [Storages over a mapped file]
            return
        self._write_free(sid)

    def _mapping_gone(self, slices: list[int], rest: dict | None) -> None:
        """Note [Storages over a mapped file] (trace/mapped.py): the last slice of a mapping
        went; its slices and the file's rest are freed with it."""
        if rest is not None:
            sid = self._write_rest(rest)
            self.sink.write({"k": "free", "sid": sid, "ev": self._ev, "last": rest["ev"]})
        for sid in slices:
            self._write_free(sid)

    def _write_rest(self, rest: dict) -> int:
        """A mapped file's rest, its alloc record written now with a sid of its own."""
        sid = self._next_sid
        self._next_sid = sid + 1
        self.sink.write({**rest, "sid": sid})
        return sid

    def _write_free(self, sid: int) -> None:
        """The free record of `sid`, at the current event (and what goes with it)."""
        self._outside.discard(sid)
        self._after_eval.discard(sid)
        self._after_graded.discard(sid)
        self._cast_from.pop(sid, None)
        ev = self._ev
        if self._twin[:2] == (sid, ev - 1):   # Note [In place but for the mode]
            ev -= 1
            self.sink.write({"k": "inplace", "sid": self._twin[2], "op": self._twin[3],
                             "in": sid})
        elif self._chain and (link := self._chain.pop(sid, None)) is not None and \
                self._last.get(sid) == link[0]:   # Note [A derivative formula in place ...]
            ev = link[0]
            self.sink.write({"k": "inplace", "sid": link[1], "op": link[2], "in": sid})
        if self._unpacks and not self._released:
            self._released = any(u[0] == sid for u in self._unpacks)
        if self._fork[0] is not None and sid >= self._op_made:
            self._stopped_output(sid, ev - 1)
        self._saved_mod.pop(sid, None)
        if self._held.pop(sid, None) is not None:   # freed while the script held it: it let
            self.sink.write({"k": "released", "sid": sid, "ev": ev})   # go at the free
        if self._held_over.pop(sid, None) is not None and self._phase != "backward":
            self._between[sid] = ev   # Note [Let go of between two backward passes]
        rec = self._last_into({"k": "free", "sid": sid, "ev": ev,
                               "last": self._last.pop(sid, -1)})
        if sid in self._attr_watch:   # a call's module attribute, freed inside the call
            self._attr_watch[sid] = rec["last"]
        if self._gc.running:   # held by a reference cycle until now (gc_window.py)
            rec["gc"] = 1
        if self._mask_twin[:2] == (sid, ev - 1) and self._free_held is None:
            self._free_held = rec   # Note [The attention mask, added in place but for ...]
            return
        self.sink.write(rec)

    # Note [A sparse gradient kept as made]
    # A leaf's first gradient that is sparse (`nn.Embedding(sparse=True)`: indices, a view of
    # the batch's ids, and values, the incoming gradient) is kept by AccumulateGrad as it is
    # made, untraced, when nothing else holds its parts; under any dispatch mode it is
    # cloned instead (`clone` reaches the mode from AccumulateGrad). The clone's two new
    # storages were counted beside the ones the untraced run keeps: 40,960 B over the
    # allocator for a 256 x 20 batch of ids (tests/doctor/sparse_embedding.py). Each part of
    # the copy is read as the storage it was copied from, which lives as long as either
    # does; the free of the one the script dropped waits for the other's. A part made
    # before this backward (the ids) keeps its role: its bytes are the batch's, once.

    def _keep_as_made(self, grad: torch.Tensor, copy: torch.Tensor, ev: int) -> None:
        for part, twin in zip(sparse_parts(grad), sparse_parts(copy)):
            st = twin.untyped_storage()
            if st._cdata in self._sids:
                continue
            sid = self._sid(part, ev)
            self._alias(st, sid, self._copy_gone)
            lent = self._lent.get(sid)
            if lent is None:
                self._lent[sid] = _Lent(start=ev, keeps_role=sid < self._backward_sid)
            elif not lent.copies:
                lent.start = ev
            self._lent[sid].copies += 1

    def _alias(self, st, sid: int, then: Callable[[int], None] | None = None) -> None:
        """Read storage `st` as `sid` while `st` lives (a second storage object over memory
        the ledger already has: Note [A sparse gradient kept as made]; a fake run's fake of
        a real input, Note [Fake runs] Rule 20); `then(sid)` when `st` goes."""
        key = st._cdata
        self._sids[key] = sid

        def gone(ref: weakref.ref) -> None:
            self._aliases.pop(id(ref), None)
            if self._sids.get(key) == sid:
                del self._sids[key]
            if then is not None:
                then(sid)

        ref = weakref.ref(st, gone)
        self._aliases[id(ref)] = ref

    def _copy_gone(self, sid: int) -> None:
        """A copy of Note [A sparse gradient kept as made] was freed: the storage it stood for
        is freed now if the script had dropped it."""
        if self._done or self._closed:
            return
        if self._in_op:   # Note [Sparse parts replaced inside an op]: after the op
            self._freed_in_op.append((self._copy_gone, sid))
            return
        lent = self._lent[sid]
        lent.copies -= 1
        if lent.copies:
            return
        self.sink.write({"k": "lent", "sid": sid, "ev": lent.start, "until": self._ev})
        if lent.own >= 0:   # the script had let go: freed now
            del self._lent[sid]
            self.sink.write({"k": "lent", "sid": sid, "own": lent.own})
            self._write_free(sid)

    def _keeps_role(self, part: torch.Tensor) -> bool:
        """Note [A sparse gradient kept as made]: a part of a gradient that is the batch."""
        lent = self._lent.get(self._sids.get(part.untyped_storage()._cdata, -1))
        return lent is not None and lent.keeps_role

    def _stopped_output(self, sid: int, ev: int) -> None:
        """An output of the latest op (event `ev`), freed inside a script checkpoint's re-run:
        when the re-run's early stop raised from that op's own output pack, it was freed
        inside the op, where the allocator pass counts it as kernel scratch. Note [The
        script's own checkpoint], 3 (trace/script_checkpoint.py)."""
        pack = checkpoint_pack_hook(RECOMPUTE_HOOK)   # None once the stop was caught
        x = stopping_pack(pack) if pack is not None else None
        if x is None:
            return
        try:
            packed = self._sids.get(x.untyped_storage()._cdata, -1)
        except (RuntimeError, NotImplementedError):
            return
        if packed >= self._op_made:   # packed after the op ran: one of its outputs
            self.sink.write({"k": "stopped", "sid": sid, "ev": ev})

    # Note [In place but for the mode]
    # While any dispatch mode is active torch treats every tensor as a subclass and takes the
    # out-of-place branch of a few backward paths: autograd sums two gradients flowing into
    # one input with `a + b` instead of `a.add_(b)` (when it holds the last reference to `a`),
    # and the backward of indexing, gather, topk/sort and index_select fill a zero tensor
    # with `index_put` / `scatter_add` / `scatter` / `index_add` instead of their in-place
    # forms. Traced, each makes a second buffer the untraced run never has: a (4, 128, 128)
    # fp32 parameter read slice by slice (`W[i]`, eager MoE experts) put the ledger 196,608 B
    # over the allocator, the backward of `lin(x)[idx]` 850,944 B over. When the input the
    # untraced run would write into dies right after such an op (nothing else held it), its
    # free is written at the op's own event: the new buffer takes its place, as in place,
    # and an `inplace` record names the op the untraced run calls (`add_`): kernel scratch
    # is matched to ledger events by op name and call order (Note [Kernel scratch]), and
    # the residual `x + h` of a bf16 autocast block (a 32,768 B fp32 copy of h inside the
    # kernel) was matched to a gradient sum the untraced run does not call `add`.
    # An addition counts only when its first input came from an earlier node (a buffered
    # gradient), not one the node computing now made (a sum inside a derivative formula),
    # and only without grad mode (create_graph keeps autograd out of place anyway).
    # The sum mirrors torch's `can_accumulate_inplace` (autograd/input_buffer.cpp): in place
    # only into a buffered gradient that holds the last reference to its storage. A view
    # does not: its base shares the storage. A tied embedding and head (`head.weight =
    # emb.weight`) sums the head's gradient, a transposed view of its `mm`, with the
    # embedding's: torch adds out of place there, and folding it put the ledger 1,040,384 B
    # (18 %) under the allocator.

    def _in_place_twin(self, func, args, out, ev: int) -> None:
        a = args[0] if args else None
        if type(a) not in self.PLAIN_TYPES or not isinstance(out, _Tensor):
            return
        if a.layout is not torch.strided:
            # two sparse gradients of one embedding (called twice in a forward) are summed
            # out of place untraced too (`can_accumulate_inplace` wants a dense buffer), and
            # a sparse tensor has no storage to ask of (Note [Sparse tensors])
            return
        sid = self._sids.get(a.untyped_storage()._cdata, -1)
        if sid < 0 or a.untyped_storage().nbytes() != out.untyped_storage().nbytes():
            return
        if func is _ADD and (_grad_enabled() or sid >= self._node_sid or a.shape != out.shape
                             or not a.is_contiguous() or a._is_view()):
            return
        made = self._sids.get(out.untyped_storage()._cdata, -1)
        self._twin = (sid, ev, made, _OUT_OF_PLACE_UNDER_MODE[func])

    # Note [A derivative formula in place but for the mode]
    # Some derivative formulas (torch/csrc/autograd/FunctionsManual.cpp) chain in-place
    # ops on temporaries of their own unless a tensor is "subclass-like", and a mode makes
    # every tensor one. The backward of `F.binary_cross_entropy_with_logits` with a
    # `pos_weight` is `t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t)` then
    # `.mul_(grad)` untraced: three (N, C) buffers; traced, `.sub(target).mul(...).sub(t)`
    # and `.mul(grad)` each make a new one, and C++ keeps a chain's temporaries to the end
    # of its statement: six buffers at once, and a multi-label head under bf16 autocast read
    # 41,600 B over the allocator (its peak is that backward). So an op the table names
    # (`_FORMULAS_IN_PLACE`, by node), whose first input is a temporary the same node made,
    # of the output's size, is folded as Note [In place but for the mode] folds a gradient
    # sum, where that input is read by nothing after it: its free, whenever it comes, is
    # written at the op's event, with an `inplace` record naming the untraced op. The
    # condition is checked at the free (`_chain`), since a chain's temporaries outlive
    # their last read. A temporary read again (`t`, read by the last `sub`) is kept, as
    # the untraced run keeps it. Only the table's nodes: a formula that is out of place
    # both ways (`grad * (-self * self + 1).rsqrt()`) holds its temporaries untraced too.
    def _formula_twin(self, func, args, out, ev: int) -> None:
        sid = self._writable_into(args[0] if args else None, out)
        if sid >= self._node_sid:
            self._chain[sid] = (ev, self._sids.get(out.untyped_storage()._cdata, -1),
                                self._formula[func])

    def _writable_into(self, a, out) -> int:
        """The sid of `a` where the untraced run could have written `out` into it in place
        (a plain tensor the ledger knows, contiguous, not a view, of `out`'s shape, dtype
        and bytes); else -1."""
        if type(a) not in self.PLAIN_TYPES or not isinstance(out, _Tensor) or \
                a.shape != out.shape or a.dtype != out.dtype or a._is_view() or \
                not a.is_contiguous():
            return -1
        sid = self._sids.get(a.untyped_storage()._cdata, -1)
        return sid if a.untyped_storage().nbytes() == out.untyped_storage().nbytes() else -1

    def _forward_add_twins(self, args, out, ev: int) -> None:
        """A forward `add` that is in place untraced: a Linear's bias, or math attention's
        mask (the two Notes below)."""
        self._linear_bias_twin(args, out, ev)
        if self._twin[1] != ev:
            self._attention_mask_twin(args, out, ev)

    # Note [A Linear's bias, added in place but for the mode]
    # `F.linear` of an input it cannot flatten into one `addmm` (a non-contiguous one, as
    # `x.transpose(1, 2)` in an MLP-Mixer's token mixing) runs `matmul` and then adds the
    # bias: `output.add_(bias)` untraced, `add(output, bias)` under any dispatch mode (torch
    # takes the out-of-place branch for "subclass-like" tensors, and a mode makes every
    # tensor one). Traced, the `matmul` output and the sum were both live for one event, a
    # buffer the untraced run never has: where a policy moved the peak into forward, on such
    # a layer (tests/clients/train_random.py, `transpose` before `attention`), `offload`
    # was predicted 195,284 B over measured. The sum is folded into its input as Note [In
    # place but for the mode] folds a gradient's, when the op is called by `nn.Linear`'s
    # forward (read off the Python frames above the mode) and the input dies right after.
    # `F.linear` called elsewhere is not told apart from a script's own `x @ w.t() + b`,
    # which is out of place untraced too, and stays as traced; torch's functional
    # multi-head attention is not elsewhere: its key/value projection of a batch-first
    # input (`nn.MultiheadAttention(batch_first=True)`, a query other than the key: SigLIP's
    # attention-pooling head) is this sum, which set the ledger's peak at a `mm` and its
    # sum both live where the untraced run had one (the peak bytes agreed by chance, and
    # the 8 B of scratch of the `add`s inside `repeat` were matched one `add` off). torch's
    # CPU RNN layers (GRU, LSTM, RNN) project their whole input through `at::linear` before
    # the time loop, and with `batch_first` that input is a transpose: the same sum, inside
    # `nn.GRU.forward`, which runs no add of its own in Python (a GRU block,
    # `offload:blocks.*`: 125,268 B over measured; tests/clients/train_random.py `--menu
    # deep`).
    def _linear_bias_twin(self, args, out, ev: int) -> None:
        if len(args) != 2 or not isinstance(args[1], _Tensor) or args[1].dim() != 1:
            return
        if (sid := self._writable_into(args[0], out)) >= 0 and _called_by_linear():
            made = self._sids.get(out.untyped_storage()._cdata, -1)
            self._twin = (sid, ev, made, "add_")

    # Note [The attention mask, added in place but for the mode]
    # torch's math attention (`_scaled_dot_product_attention_math`, the CPU path for a
    # float mask under bf16 autocast, and any backend that cannot take its inputs) adds
    # the mask into the scores in place, `attn.add_(mask)`, unless a tensor is
    # "subclass-like", and a dispatch mode makes every tensor one: traced, the scores and
    # their sum are both live for one event, a buffer the untraced run never has. Doge's
    # attention (transformers, bf16 autocast) has its peak in a checkpoint's re-run at
    # that add: (8, 4, 64, 64) fp32 scores, predicted 391,164 B over measured under
    # `checkpoint:model.layers.*`. The sum is folded into the scores as the gradient sums
    # of Note [In place but for the mode] are, when the scores die right after the add and
    # the op after it is the math path's `_safe_softmax` of the sum, which only that path
    # calls: a script's own `scores + mask` (eager attention) is out of place untraced too.
    # The scores' free comes between the two ops, so it is held until the next op says
    # which event it belongs to (`_settle_held_free`).
    def _attention_mask_twin(self, args, out, ev: int) -> None:
        if _SAFE_SOFTMAX is None or len(args) != 2:
            return
        if (sid := self._writable_into(args[0], out)) >= 0:
            self._mask_twin = (sid, ev, self._sids.get(out.untyped_storage()._cdata, -1))

    def _settle_held_free(self, func, args) -> None:
        """Write the held free of an add's input: at the add, folded, when this op is the
        math attention's softmax of the sum (Note [The attention mask, added in place but
        for the mode]); else where it happened."""
        rec, self._free_held = self._free_held, None
        sid, at, made = self._mask_twin
        if func is _SAFE_SOFTMAX and args and isinstance(args[0], _Tensor) and \
                self._sids.get(args[0].untyped_storage()._cdata, -1) == made:
            rec["ev"] = at
            self.sink.write({"k": "inplace", "sid": made, "op": "add_", "in": sid})
        self.sink.write(rec)

    def _module_now(self) -> str:
        if self._fsdp_units and (unit := self._fsdp_module()) is not None:
            return unit  # Note [Sharded storages], 4.
        if self._phase == "backward":
            if 0 <= self._bw_call_depth < len(self._mod_stack):
                return self._mod_stack[-1][0]   # Note [A module called inside backward]
            return self._bw_module
        if self._phase in ("optimizer", "zero_grad"):
            return "optimizer"
        if self._mod_stack:
            return self._mod_stack[-1][0]
        # Note [Work a module's method does outside any call]: a walk only where no module
        # call is open, once the model has a name
        return self._method_module() if self._roots.paths.nonempty() else ""

    # Note [Work a module's method does outside any call]
    # A module's work may run through a method the script calls directly, no module call:
    # xlstm's greedy decoding calls `model.step(tok, state)`, which runs each block's
    # `step`, down to `mLSTMCell.step`, whose recurrent state math made every temporary at
    # the peak; only the Linear layers inside were module calls. With no call open, those
    # temporaries read "(script)" in the module column and the peak "in the script
    # (outside any module)" (tests/clients/train_xlstm.py --mode generate; plain torch:
    # tests/clients/train_method_call.py). A storage made where no module call is open
    # (after the model was named: not while it is built) is now the module's whose method
    # is innermost on the Python stack: the first frame, outside torch and memledger,
    # whose `self` is a module of the model below its root (the root's own methods,
    # `training_step`, stay the script's, as before). Its path is written as the module
    # does in a call, so `show` names `xlstm_block_stack.blocks.0.xlstm.mlstm_cell`. The
    # walk costs nothing inside module calls (most storages, in training all but the
    # loss's: docs/performance.md, forty-seventh session), and stops where the script's
    # frames end (the runner above them is memledger's). The first time a module's method
    # makes something so, a `method` record (`mod`, `name`: its outermost public method on
    # the stack) lets predict name the method that ran where it refuses a policy on the
    # module (Note [Modules run through another method], replay/policies.py), as measure
    # does from its wrappers. A method called inside another module's call (`self.cell.
    # step(x)` in the parent's forward) is not looked for: that would be a walk per storage
    # made in every call; its work stays the caller's.
    def _method_module(self) -> str:
        f = sys._getframe(2)
        paths = self._roots.paths
        script = False   # past memledger's and torch's frames below the script's
        for _ in range(_METHOD_WALK):
            if f is None:
                return ""
            code = f.f_code
            if code.co_filename.startswith(_NOT_THE_SCRIPT):
                if script and code.co_filename.startswith(_OURS):
                    return ""   # the runner: the script's frames ended
                f = f.f_back
                continue
            script = True
            if code.co_argcount and code.co_varnames[0] == "self":
                with _frame_locals(f) as local:
                    me = local.get("self")
                path = paths.get(me) if isinstance(me, torch.nn.Module) else None
                if path:
                    if path not in self._methods_seen:
                        self._note_method(path, me, f)
                    return path
            f = f.f_back
        return ""

    def _note_method(self, path: str, me: torch.nn.Module, f) -> None:
        """The first storage `me`'s method made outside any call: a `method` record naming
        its outermost public method on the stack (from frame `f` up)."""
        self._methods_seen.add(path)
        name = ""
        while f is not None:
            code = f.f_code
            # as measure wraps them: public, beyond nn.Module's own API, not torch's
            if code.co_argcount and code.co_varnames[0] == "self" and \
                    not code.co_name.startswith("_") and code.co_name != "forward" and \
                    not hasattr(torch.nn.Module, code.co_name) and \
                    not code.co_filename.startswith(_NOT_THE_SCRIPT):
                with _frame_locals(f) as local:
                    if local.get("self") is me:
                        name = code.co_name
            f = f.f_back
        if name:
            self.sink.write({"k": "method", "mod": path, "name": name, "ev": self._ev})

    # ---- phases ---------------------------------------------------------------------------
    def _set_phase(self, phase: str, ev: int | None = None) -> None:
        if phase in ("backward", "optimizer"):   # Note [A batch made after an evaluation]
            self._after_eval.clear()
            self._after_graded.clear()
            self._after_graphless = False
        if phase != self._phase:
            # Note [A batch is what no step made]: the forward's and the loss's sid spans
            fwd, spans = phase in _FORWARD_PHASES, self._fwd_spans
            if fwd and (not spans or spans[-1][1] is not None):
                spans.append([self._next_sid, None])
            elif not fwd and spans and spans[-1][1] is None:
                spans[-1][1] = self._next_sid
            self._phase = phase
            self.sink.write({"k": "phase", "ev": self._ev if ev is None else ev, "ph": phase,
                             "step": self._step})

    def _switch_backward(self, ev: int) -> None:
        if self._phase != "backward":
            self._bw_from = (self._phase, len(self._mod_stack))
            self._set_phase("backward", ev)
            self._makers.clear()   # only forward's writes count (Note [Written in place...])
            self._backward_sid = self._next_sid   # Note [A sparse gradient kept as made]
            self._bw_module = self._bw_unpacked = ""   # Note [A backward pass's first nodes]
            self._node_made = None
            # For replay: the last forward use of everything autograd holds (see
            # memledger/replay/engine.py, Note [Replay of a checkpointed region]).
            for sid in list(self._saved_mod):
                self.sink.write({"k": "fwdlast", "sid": sid, "last": self._last.get(sid, -1)})
            for sid in self._held:   # still held by the script at backward: never released
                self.sink.write({"k": "released", "sid": sid, "ev": -1})
            self._held_past.update(self._held)   # Note [Let go of after backward, ...]
            self._pass_begins()   # (clears _held) Note [Let go of between two backward passes]
            # saves stay watched into backward (Note [A node a kept graph holds on]), but
            # not those an earlier pass left unread: read by none, freed with the graph
            # (passes begun inside a module's forward aside: Note [A pass inside the
            # forward])
            self._bw_passes += 1
            self._grads_at_pass = self._grad_versions()   # Note [The pass that writes ...]
            outer = self._outer_passes   # Note [A pass inside the forward]
            self._outer_passes += not self._bw_from[1]
            self._bw_began = modes_at_backward(self.sink, self._fwd_modes, self._bw_began, ev,
                                               self._roots.paths.items)
            self._save_refs = {k: e for k, e in self._save_refs.items()
                               if e[5] >= 0 or e[7] == outer}
            if _graph_task_id() != -1:   # Note [Gradients named as the engine finishes]
                _ENGINE.queue_callback(self._name_pass_gradients_last)
        else:  # backward just ended: the gradients now exist
            if self._bw_passes == 2 and not self._looked_for_optimizer and (
                    not self._steps_done if self._steps_by == "optimizer" else
                    not self._optimizers):   # Note [An optimizer torch's hooks do not see]
                self._looked_for_optimizer = True   # (optimizer_like.py)
                appliers: list = []   # Note [An optimizer that applies gradients]
                self.optimizer_like, unstepped = optimizer_like_alive(appliers)
                if not self.optimizer_like and unstepped:   # Note [An optimizer that
                    self.optimizer_unstepped = unstepped_name(unstepped)   # never steps]
                    self._optimizers.update(unstepped)
                if not self._optimizers and appliers:
                    self._optimizers.update(appliers)
                    self._appliers = True
                self._mark_held_by_optimizers()
            self._resume_all(ev)
            self._unpacks_done(ev)
            self._node_makers.pass_ended()   # Note [The module that made a node]
            self._set_phase(self._phase_after_backward(), ev)
            self._mark_gradients()
            self._pass_wrote_grads(ev)

    def _pass_wrote_grads(self, ev: int) -> None:
        """Note [The pass that writes the gradients] (ledger/model.py): at a pass's end
        (the phase switch, or an optimizer step or a `record_function` met first, as
        `opt.step()` right after `loss.backward()` is), whether it changed a `.grad`."""
        if self._grads_at_pass is not None and self._grad_versions() != self._grads_at_pass:
            self.sink.write({"k": "wrote_grads", "ev": ev})
        self._grads_at_pass = None

    # Note [A pass's end met first outside an op]
    # A backward pass's end (the unpack records of its last node, the nodes set aside, the
    # phase after it, and the gradients named and the dropped-gradient watch filled by
    # `_mark_gradients`) ran at the first op outside the graph task, or at a module call
    # (Note [Phases at a module call], Note [A backward that ends its module's forward]).
    # `Optimizer.zero_grad` and `Optimizer.step` open with a `record_function`, which
    # returns before that switch, and the step's pre-hook sets the phase "optimizer": a
    # `zero_grad()` or `step()` right after `loss.backward()` took the phase from
    # "backward" straight on, and the pass's end never ran. For `step()` the optimizer's
    # hooks name the gradients anyway; for a `zero_grad(set_to_none=True)` right after the
    # backward, the pass's new gradients were never named, and the watch never saw their
    # drop: a loop that keeps each loss's gradients (`[p.grad for p in params]`, no op)
    # and clears them for the next loss read the first loss's 16,900 B `temporary` at the
    # peak, inside the optimizer's step, where the second's read `other` (a past gradient):
    # `show` said the step's own temporaries were 32.8 KiB, not 16.2
    # (tests/clients/train_pass_end.py `--order keep`). The pass's end now also runs at a
    # `record_function`'s entry and at an optimizer's step pre-hook, whichever comes first
    # (the rule the op path uses: the phase is "backward" and no graph task runs). A
    # backward the script's last work leaves as before: the model and its gradients are
    # freed as the script returns, before the trace closes.
    def _pass_end_met(self) -> None:
        if self._phase == "backward" and _graph_task_id() == -1 and not self._bw_steps:
            self._switch_backward(self._ev)

    def _record_function(self, func, args) -> None:
        if self._grads_at_pass is not None and self._phase == "backward" and \
                _graph_task_id() == -1:   # a pass's end no op has switched yet
            self._pass_wrote_grads(self._ev)
        if func is _RF_ENTER:
            name = str(args[0]) if args else ""
            self._pass_end_met()   # Note [A pass's end met first outside an op]
            self._rf_stack.append(name)
            self._fsdp_enter(name)
            if name.startswith("Optimizer.zero_grad"):
                self._zero_grad_from = self._phase   # Note [A zero_grad inside the loss]
                self._set_phase("zero_grad")
        elif self._rf_stack:
            name = self._rf_stack.pop()
            self._fsdp_exit()
            if name.startswith("Optimizer.zero_grad"):
                self._set_phase("loss" if self._zero_grad_from == "loss"
                                else self._phase_between())
                self._gradients_dropped()   # Note [A gradient dropped from .grad]

    # Note [A zero_grad inside the loss]
    # Keras-style loops clear the gradients after the forward, before the loss: deepctr-
    # torch's `fit` runs `y_pred = model(x)`, `optim.zero_grad()`, then the loss and its
    # L2 penalty over every embedding table, then `backward()`. zero_grad's end set the
    # phase to "other", so that loss was no loss: the binary cross-entropy, the penalty's
    # temporaries and the sums read phase `other`, and the (64,) targets the loss read were
    # `activation`, not the batch (256 B a step; tests/clients/test_deepctr_clients.py).
    # The step's order is what matters: a zero_grad begun in the loss phase (the model's
    # forward has returned, backward has not begun) returns to it. One begun elsewhere
    # (before the forward, after the step) ends as before.

    # Note [A closure's step]
    # Lightning's automatic optimization (and LBFGS) runs forward and backward inside
    # `optimizer.step(closure)`: the step's pre-hook fires before the closure, the update
    # after it returns. Backward's end and zero_grad's set the phase back to "optimizer"
    # there, not "other": the MLP trained that way peaked "at step 2 · other · div.Tensor
    # in the script" where the same loop written plainly peaks "in optimizer".
    # Note [A backward called inside a forward]
    # A module's forward may run backward itself and go on: recurrent-memory-transformer's
    # wrapper with `memory_replay_backprop=True` runs every segment under no_grad, then,
    # still inside its forward, re-runs each segment with grad (a call of its
    # `transformer`) and calls `backward` twice per segment. Backward's end set the phase
    # to "other", so each re-run after the first was no forward call: predict's
    # `offload:transformer.layers.*.*` acted on one segment of three and read the
    # baseline's 1,628,832 B where measure, which offloads every call, measured 733,040 B
    # (2 layers, dim 32, 3 segments of 16 tokens). Where the call that was open when the
    # backward began is still open when it ends, and that backward began in the forward
    # (or the loss), the phase goes back to it. A backward started outside any module call
    # (the script's `loss.backward()`, an optimizer's closure) ends as before.
    # Note [A backward that ends its module's forward]
    # The end of a backward is seen at the next op outside it (or the next module call).
    # torch-struct's `marginals` are the gradient of the log-partition, taken in the
    # forward (`torch.autograd.grad(logZ, potentials, create_graph=True)`), and that grad
    # is the module's last work: the next op was the script's loss, after the module and
    # the model had returned, so both scopes were written with phase "backward", the loss
    # read "other", and predict found no call of the module (`checkpoint:marg` refused as
    # "never called as a module" while measure ran it; tests/clients/train_grad_inside.py).
    # A module's return is a point outside the backward too: where no graph task runs, the
    # backward has ended there, and the rule above sends the phase back to the forward.
    def _phase_after_backward(self) -> str:
        phase, depth = self._bw_from
        if depth and len(self._mod_stack) >= depth and phase in ("forward", "loss"):
            return phase
        return self._phase_between()

    def _phase_between(self) -> str:
        """The phase after backward or zero_grad: "optimizer" inside an optimizer's step."""
        return "optimizer" if any(n.startswith("Optimizer.step#") for n in self._rf_stack) \
            else "other"

    # ---- modules --------------------------------------------------------------------------
    # Note [A model whose own call no hook sees]
    # The forward phase begins at a top-level call of a module that holds parameters: the
    # model's, or a part of it that its method calls (Note [A model called through its
    # methods]). gpytorch's models have a `__call__` of their own, which runs `forward`
    # with no torch module hook, and what their forward calls as modules holds no
    # parameters: botorch's `SingleTaskGP` calls its `Normalize` input transform first, the
    # marginal likelihood the noise constraint's `Softplus`. No step of a GP fit had a
    # forward phase: the training inputs read `other` (768 B in the Adam tutorial's loop),
    # the forward's work `other`, and predict found no module call in "the traced forward"
    # (`checkpoint:model.input_transform` refused, while measure applied it). So the
    # first top-level call in a step of a module the model holds begins the forward too,
    # parameters or not; later ones, in the forward, begin the loss as before (a loss
    # module the model holds: Lightning's `self.loss_fn` in `training_step`).
    def _opens_forward(self, module: torch.nn.Module) -> bool:
        if self._phase in ("forward", "loss"):
            return False
        model = self._roots.model()
        return model is not None and model is not module and \
            any(m is module for m in model.modules())

    # Note [The next batch, at a step's end]
    # A step that ends at the next root forward (`--steps-by forward`, the first step, and
    # every step whose updates ran inside backward: Note [An optimizer stepped inside
    # backward], trace/steps.py) ends after the loop made the next batch, and the batch was
    # marked `input` only after the step's end, at that forward. The last traced step's
    # end stops the script there, so its next batch never was: `show`'s "resident at the
    # end" read it `temporary` (tests/clients/train_optimi.py `--opt adamw --bf16
    # --release`: 548 B temporary, the (4, 17) int64 batch and the loss, where the same
    # loop stepped after backward reads 544 B input, 4 B temporary). The forward's
    # arguments are marked before the step ends, and what the optimizers hold (Note [State
    # made between steps]: LOMO's gradient norms, made after the forward); only the
    # category moves.
    def _end_step_at_forward(self, module: torch.nn.Module, args) -> None:
        if next(module_parameters(module), None) is not None or self._opens_forward(module):
            self._mark_inputs(args)
            self._mark_held_by_optimizers()   # Note [State made between steps]
        self._end_step()

    def _module_pre(self, module: torch.nn.Module, args) -> None:
        if self._phase == "backward" and _graph_task_id() == -1:
            # backward ended and no op has run since (the next micro-batch's forward right
            # after `loss.backward()`, as accelerate's accumulation runs it): the phase
            # switches here, else that forward would count as backward's (Note [Phases at
            # a module call])
            self._switch_backward(self._ev)
        # a parametrized weight's read is no forward (Note [A parametrized weight read is
        # no forward], trace/steps.py): no step's end, no batch marked, and the phase it
        # was read in comes back when it returns
        read = not self._mod_stack and self._phase != "backward" and weight_read(module)
        is_root = not self._mod_stack and self._phase != "backward" and not read
        # a call while a module is built keeps the phase (Note [A module called while a
        # module is built], trace/roots.py)
        built = (read or is_root) and self._phase == "setup" and building_a_module()
        if read and not built:
            self._read_from = self._phase
            if _grad_enabled():   # one without gradients keeps its phase (Note [A weight
                self._set_phase("forward")   # read without gradients], trace/steps.py)
        if self._roots.stale(module):   # Note [A module registered after the first call]
            self._name_found(self._roots.look_again())   # (trace/roots.py)
        path, new = self._roots.path(module, top_level=not self._mod_stack)
        if new:   # the module, or the one whose method called it (trace/roots.py)
            self._register_root(self._roots.root)
        elif path is None:   # Note [Modules the model makes in its forward]
            path = f"{self._mod_stack[-1][0]}.{type(module).__name__}".lstrip(".")
        # the first step, left open by its optimizers, ends when the next forward begins
        # (not LBFGS's closure, in step()); later steps as OptimizerSteps ends them, and
        # each step whose optimizers ran inside backward as the first (Note [An optimizer
        # stepped inside backward], trace/steps.py): never at a re-run inside backward,
        # where an optimizer's step may have left the phase "other"
        if is_root and self._steps.open and self._steps.ends_at_forward and \
                self._steps_by == "optimizer" and _graph_task_id() == -1:
            self._end_step_at_forward(module, args)
        if is_root:
            has_params = next(module_parameters(module), None) is not None
            if has_params and self._steps_by == "forward" and \
                    self._forward_starts.begins(module):   # Note [A forward through the
                if self._forwards:                        # model's methods], trace/steps.py
                    self._end_step_at_forward(module, args)   # a new root forward: the
                    # previous step ended
                self._forwards += 1
            if has_params or (not built and self._opens_forward(module)):
                if self._after_eval and _grad_enabled():
                    # Note [A batch made after an evaluation]
                    self._outside |= self._after_eval
                    self._after_eval.clear()
                if self._after_graded:   # the same, after one with gradients
                    if _grad_enabled():
                        self._batch_after_graded(args)
                    self._after_graded.clear()
                self._after_graphless = False
                self._closure_batch = False
                begins = self._phase != "forward"
                self._set_phase("forward")
                if begins:   # `model.zero_grad()`, `p.grad = None` (Note [A gradient
                    self._gradients_dropped()   # dropped from .grad])
                self._mark_held_by_optimizers()   # Note [State made between steps]
                # Note [A state a suspended generator holds] (trace/step_holders.py)
                self._generators.note(sys._getframe(1))
                self._mark_inputs(args)
                if begins and module not in self._roots.prefix:
                    # Note [Parts called in a forward no hook sees]: the forward's own
                    # arguments are the batch
                    self._mark_inputs(self._outer_forward_args())
                self._foreign_saved_hooks()
            elif self._phase == "forward" and not self._part_in_its_forward(module):
                self._set_phase("loss")
        if self._bw_call_depth < 0 and self._phase == "backward" and \
                _current_node() is not None:
            self._bw_call_depth = len(self._mod_stack)
        self._mod_stack.append((path, self._ev, time.perf_counter_ns(), is_root))
        self._node_makers.note(path)   # Note [The module that made a node]
        if self._phase != "backward":
            if _grad_enabled():   # Note [A re-run in another mode] (trace/modes.py)
                self._fwd_modes[path] = (weakref.ref(module), module.training)
            self._see_script_checkpoint(path)

    # Note [A module called inside backward]
    # A backward op is named by the module whose save its node unpacked, or whose call made
    # the node (Note [The module of a backward op]): autograd does not say which module a
    # node belongs to.
    # A module *called* while a node runs is another matter: its forward hooks say which
    # one runs, and its ops are its own. reformer-pytorch's reversible layers make each
    # block's input again in `_ReversibleFunction.backward` by calling the block's `f` and
    # `g` (attention, feed-forward or a product-key memory) under enable_grad, and every
    # op of those calls, and of the backward passes they start, read "in net.net.norm"
    # (the last module whose save backward had unpacked): the step's peak was
    # "_embedding_bag in net.net.norm" where the PKM layer's EmbeddingBag ran, and the LSH
    # hash that backward computes and drops was "saved for backward ... in net.net.norm".
    # From the outermost call a node makes until it returns, ops and saves are named by
    # the innermost module running; the saves carry that name to the nodes that unpack
    # them (the nested backward the custom backward starts). A checkpoint's re-run (the
    # script's own, inside an unpack) is such a call too.

    # ---- the script's own checkpoint: Note [The script's own checkpoint] -------------------
    def _see_script_checkpoint(self, path: str) -> None:
        """At a module call: record a checkpoint call of the script's met for the first
        time (its region, and the generator state it keeps), and each further outermost
        call under a checkpointed function of no module."""
        pack = checkpoint_pack_hook()
        depth = len(self._mod_stack)
        if pack is None:
            if torch.is_grad_enabled():
                return                  # neither kind of checkpoint's forward
            if self._nograd_depth is not None and depth > self._nograd_depth:
                return   # inside a call already looked at (an evaluation's every module
            self._nograd_depth = depth   # would walk the stack otherwise)
        known = self._ckpt_frames.get(pack) if pack is not None else None
        if known is None:
            call = find_checkpoint_call()   # the reentrant kind: keyed by its ctx
            if call is None:
                return
            key = pack if pack is not None else call.key
            self._fn_ckpts.pop(id(call.key), None)   # a module runs under it: not a function's
            known = self._ckpt_frames.get(key)
            if known is None:
                region = self._roots.paths.get(call.module) \
                    if call.module is not None else None
                self._ckpt_frames.put(key, region, depth)
                self._ckpt_calls += 1
                self.sink.write({"k": "script_ckpt", "mod": region or path, "first": path,
                                 "ev": self._ev})
                t = call.rng_state
                if t is not None and t.untyped_storage()._cdata not in self._sids:
                    self._new_storage(t, t.untyped_storage(), self._ev, "get_rng_state",
                                      pre=False, mod=region or path)
                return
        region, first_depth = known
        if region is None and depth == first_depth:   # checkpoint_sequential's next module
            self.sink.write({"k": "script_ckpt", "mod": path, "first": path, "ev": self._ev})

    def _on_rng_state(self, t: torch.Tensor) -> None:
        """A generator state the script took (Note [Generator states the script keeps] in
        trace/rng_state.py): a storage from the current event, freed when torch frees it."""
        if self._closed or self._done:
            return
        st = t.untyped_storage()
        if st._cdata not in self._sids:
            self._new_storage(t, st, self._ev, _RNG_STATE_OP, pre=False)

    # Note [A checkpointed function that calls no module]
    # The script's checkpoint is met at the first module call under it (Note [The script's
    # own checkpoint], 1): its generator state, and the call's count that turns the watch
    # on its re-runs' forks on. A checkpointed function that calls no module is never met
    # so: gateloop-transformer's GateLoopedAttention runs `checkpoint(gate_loop_operator,
    # q, k, v, a)` (reentrant, torch's default then), a scan of einsums and complex
    # products, and the ledger missed the state the call keeps to its backward and the fork
    # its re-run takes: 10,112 B (2 x 5,056) under the allocator at the peak, inside a
    # re-run (tests/clients/train_gateloop.py, 2 layers, dim 16). torch's checkpoint asks
    # `torch.get_rng_state()` for both, and the watch that sees the script's own states
    # (Note [Generator states the script keeps], trace/rng_state.py) now hands those to
    # this: the first run's state is recorded as the module path would (op
    # `get_rng_state`; a storage already recorded is not recorded twice; the call is
    # counted where its first run begins, `_on_checkpoint_run`); a reentrant re-run's fork (taken in `CheckpointFunction.backward`, held while
    # the function runs again, no hook marks it) is recorded as a storage, op `fork_rng`,
    # freed when `fork_rng` lets it go. A non-reentrant re-run's fork stays with
    # `_watch_recompute`, which records it over the re-run's ops (or at an event of its
    # own where none runs: Note [A re-run of the script's that stops before its first op]).
    #
    # Note [A checkpoint whose first run is in backward]
    # A checkpoint can first run while backward runs: a reversible layer re-makes its
    # input in its Function's backward by calling the block again under enable_grad, and
    # memory-efficient-attention-pytorch's `Attention(memory_efficient=True)` checkpoints
    # each (q, k) chunk's summary (`checkpoint(summarize_qkv_chunk, ...)`, reentrant) only
    # when its inputs require grad, so in its `Transformer` (reversible, forward under
    # no_grad) every chunk checkpoint runs first inside `_ReversibleFunction.backward`.
    # Each keeps its generator state (5,056 B) to its own backward. Such a call is no
    # region a policy can act on (the walk of Note [The script's own checkpoint] stops at
    # backward), so its state was dropped, and the ledger read 15,168 B (3 x 5,056) under
    # the allocator at the peak (tests/clients/train_memeff.py --mode lm, any depth: the
    # last block's chunk states while its re-run's backward runs). It is recorded as a
    # state the script keeps (op `torch.get_rng_state`, not `get_rng_state`, which replay
    # reads as a checkpoint frame's), freed when torch frees it. tests/clients/
    # train_ckpt_in_backward.py pins it in plain torch.
    def _on_checkpoint_state(self, t: torch.Tensor, where: str) -> None:
        if self._closed or self._done:
            return
        if where == "recompute_fn":   # a non-reentrant re-run's fork: `_watch_recompute`,
            if self._phase == "backward":   # or Note [A re-run of the script's that stops
                self._note_rerun_fork(t)    # before its first op]
            return
        st = t.untyped_storage()
        if st._cdata in self._sids:
            return
        if where == "backward":   # a reentrant re-run's fork
            if self._phase == "backward":
                self._new_storage(t, st, self._ev, "fork_rng", pre=False)
            return
        if self._phase == "backward":   # Note [A checkpoint whose first run is in backward]
            self._new_storage(t, st, self._ev, _RNG_STATE_OP, pre=False)
            return
        call = find_checkpoint_call()
        region = self._roots.paths.get(call.module) \
            if call is not None and call.module is not None else None
        self._new_storage(t, st, self._ev, "get_rng_state", pre=False, mod=region)

    def _on_checkpoint_run(self) -> None:
        """A torch checkpoint's first run begins, whether or not it keeps a generator state
        (Note [A checkpoint that keeps no generator state], trace/script_checkpoint.py):
        count the call, and note it if it checkpoints a function of no module."""
        if self._closed or self._done or self._phase == "backward":
            return
        self._ckpt_calls += 1
        site = function_checkpoint_site()   # Note [A policy checkpoint around a checkpointed
        if site is not None and site.key is not None and self._mod_stack:   # function]
            mod = self._roots.paths.get(site.caller) if site.caller is not None else None
            self._fn_ckpts[id(site.key)] = (site.key, {
                "k": "script_ckpt_fn", "mod": mod if mod is not None else self._mod_stack[-1][0],
                "fn": site.fn, "at": site.at, "lib": site.lib, "ev": self._ev},
                len(self._mod_stack))

    def _write_function_checkpoints(self, depth: int, grad: bool) -> None:
        """The script's checkpoints of a function, under which no module ran, met in the
        call that just ended (at module-stack `depth`); not where that call ran without
        gradients (an evaluation: no policy acts on it)."""
        for k, (_, rec, d) in list(self._fn_ckpts.items()):
            if d > depth:
                del self._fn_ckpts[k]
                if grad:
                    self.sink.write(rec)

    def _watch_recompute(self, ev: int) -> None:
        """In backward: the generator fork of a re-run, live while its ops run."""
        pack = checkpoint_pack_hook(RECOMPUTE_HOOK)
        open_pack, sid = self._fork
        if pack is open_pack:
            return
        if pack is not None:   # its re-run runs ops: recorded over them, below
            self._early_forks.clear()
        if sid is not None:
            self.sink.write({"k": "free", "sid": sid, "ev": ev, "last": -1})
        self._fork = (pack, None)
        if pack is None:
            return
        call = find_checkpoint_call()
        if call is not None and call.rng_state is not None:
            sid = self._next_sid
            self._next_sid = sid + 1
            n = call.rng_state.untyped_storage().nbytes()
            self.sink.write({"k": "alloc", "sid": sid, "ev": ev, "bytes": n, "dev": "cpu",
                             "dtype": "uint8", "shape": [n], "op": "fork_rng",
                             "mod": self._module_now(), "ph": "backward",
                             "step": self._step})
            self._fork = (pack, sid)

    # Note [A re-run of the script's that stops before its first op]
    # `_watch_recompute` records a non-reentrant re-run's generator fork over the ops that
    # run under the re-run's pack hook. A re-run whose region's saves were all made before
    # it ran (an `nn.Embedding` call saves only its ids) stops as its first op packs them,
    # before that op runs (Rule 3 of Note [A re-run that stops before its first op],
    # replay/engine.py, where a policy's re-run is priced so): no op runs under the hook,
    # and the fork (5,056 B), live from `fork_rng`'s `torch.get_rng_state()` to the stop,
    # was never recorded. tests/clients/train_own_early_stop.py (a two-tower scorer that
    # checkpoints its user-table call itself; 1 step): the ledger read 18,696 B against the
    # allocator's 21,192 B, the fork at the user rows' EmbeddingBackward the step's peak.
    # Each such fork is noted as torch takes it (`_note_rerun_fork`: its event, weakly its
    # storage), dropped once an op runs under a re-run's hook, and recorded when torch
    # frees it with no op run since: it lives between two events, after the frees that came
    # before it (the node before let go of its temporaries) and before the unpacking node's
    # first op, so it is given an event of its own, the one no op took yet, and the ops
    # from there on are numbered one further (no op is lost: the allocator pass's kernel
    # scratch is placed by each op's k-th call, Note [Kernel scratch]). The replay reads it
    # as any fork of the script's re-runs: a storage of op `fork_rng`. Cost: one weak
    # reference per re-run, none on the per-op path.
    def _note_rerun_fork(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        ref = weakref.ref(st, self._on_rerun_fork_gone)
        self._early_forks[id(ref)] = (ref, self._ev, st.nbytes(), rerun_region(),
                                      self._module_now())

    def _on_rerun_fork_gone(self, ref: weakref.ref) -> None:
        try:
            entry = self._early_forks.pop(id(ref), None)
            if entry is None or self._closed or self._done:
                return
            _, ev, n, module, now = entry
            if self._ev != ev or self._phase != "backward":
                return   # an op ran since: not a re-run that stopped before its first op
            region = self._roots.paths.get(module) if module is not None else None
            sid = self._next_sid
            self._next_sid = sid + 1
            self.sink.write({"k": "alloc", "sid": sid, "ev": ev, "bytes": n, "dev": "cpu",
                             "dtype": "uint8", "shape": [n], "op": "fork_rng",
                             "mod": region or now, "ph": "backward", "step": self._step})
            self._ev = ev + 1
            self.sink.write({"k": "free", "sid": sid, "ev": ev + 1, "last": -1})
        except KeyboardInterrupt:  # Python would swallow it here: Note [One interrupt, ...]
            redeliver()

    # Note [Modules the model makes in its forward]
    # A module no top-level module holds (made inside a forward and dropped: litgpt's
    # `GPT.forward` calls `nn.Identity()` as its `clamp_head` when the config has no
    # logit soft-capping; or one kept in a plain list) is named by its caller's path and
    # its class (`Identity`, `blocks.0.Dropout`) so that its ops have a module. It is no
    # module of the model's `named_modules()`, so no policy can wrap it: `measure` refused
    # `checkpoint:Identity` ("matches no module; the model's modules are lm_head (Linear),
    # ...") while predict listed "Identity (Identity)" among the modules the traced forward
    # called and predicted 256,508 B for it (tests/clients/train_litgpt.py --layers 1);
    # `@Class` selected the throwaway calls beside the model's own modules of that class
    # in predict alone (tests/clients/train_made_in_forward.py: a model holding one
    # Sequential and making another per call, `checkpoint:@Sequential` predicted
    # 1,070,240 B, measured 1,081,568; `offload:@SiLU` 1,060,128 against 1,076,512). Its
    # calls' scopes carry `unowned`: the replay lists and selects the model's own modules
    # alone (replay/prepared.py `scope_model`); a region around the call still holds its
    # ops, as measure's does.
    def _module_post(self, module, args, output) -> None:
        if self._lazy:
            self._name_lazy()
        if not self._mod_stack:
            return
        if self._phase == "backward" and _graph_task_id() == -1 and not self._bw_steps:
            # a backward the forward ran as its last work ended (Note [A backward that ends
            # its module's forward])
            self._switch_backward(self._ev)
        path, ev0, t0, is_root = self._mod_stack.pop()
        self._node_makers.note(self._mod_stack[-1][0] if self._mod_stack else None)
        if self._fn_ckpts:   # Note [A policy checkpoint around a checkpointed function]
            self._write_function_checkpoints(len(self._mod_stack), _grad_enabled())
        if len(self._mod_stack) <= self._bw_call_depth:
            self._bw_call_depth = -1
        if self._nograd_depth is not None and len(self._mod_stack) < self._nograd_depth:
            self._nograd_depth = None
        rec = {"k": "scope", "mod": path, "ev0": ev0, "ev1": self._ev, "ph": self._phase,
               "step": self._step, "ns": time.perf_counter_ns() - t0,
               "cls": type(module).__name__}
        if not _grad_enabled():   # called without gradients (an evaluation): no policy acts
            rec["nograd"] = True  # on it (measure's wrappers run it plainly)
        elif (stats := _running_stats_bytes(module)):
            rec["stats"] = stats
        if self._roots.paths.get(module) is None:   # Note [Modules the model makes in its
            rec["unowned"] = True                    # forward]
        self.sink.write(rec)
        if self._sharded_slots:
            self._mark_unsharded(module, path)
        if is_root and self._phase == "forward" and not self._part_in_its_forward(module):
            self._set_phase("loss")
            self._after_graphless = not _grad_enabled()
        elif not self._mod_stack and self._read_from is not None:   # a weight read's end
            self._set_phase(self._read_from)
            self._read_from = None

    # Note [Parts called in a forward no hook sees]
    # A top-level module call that returns ends the forward, and a parameterless one in the
    # forward begins the loss (a loss module). Where the model's own forward runs without a
    # module call (`self.model.forward(x)`, as ncps' Lightning example writes its
    # `training_step`; a model called through its methods), its parts are the top-level
    # calls: each one's return read as the forward's end, and each Tanh or Sigmoid of ncps'
    # CfC cell (`self.tanh(ff1)` in `CfCCell.forward`, itself run by `.forward()`) as a loss
    # module, so the phase flipped between forward and loss 72 times in two steps of
    # tests/clients/train_ncps.py --call forward, and the step's peak read "in loss" (by
    # phase: forward 29,376 B, loss 30,112 B, where `model(x)` reads forward 30,112 B, loss
    # 29,184 B). A part of a top-level module called from a `forward` of a module that
    # top-level module holds (the first frame outside torch and memledger) is inside that
    # forward: it neither ends the forward nor begins the loss. A loss module the model
    # holds, called from `training_step`, still begins the loss (Note [A model whose own
    # call no hook sees]).
    def _part_in_its_forward(self, module: torch.nn.Module) -> bool:
        """Whether `module`, called at the top level, is a part of a top-level module (not
        one itself) whose call comes from a `forward` of a module that holds it."""
        if module in self._roots.prefix or self._roots.paths.get(module) is None:
            return False
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_NOT_THE_SCRIPT):
            f = f.f_back
        if f is None or f.f_code.co_name != "forward" or not f.f_code.co_argcount or \
                f.f_code.co_varnames[0] != "self":
            return False
        with _frame_locals(f) as local:
            me = local.get("self")
        return isinstance(me, torch.nn.Module) and me is not module and \
            self._top_or_part(me)

    def _top_or_part(self, me: torch.nn.Module) -> bool:
        """A top-level module, or a part of one."""
        return me in self._roots.prefix or self._roots.paths.get(me) is not None

    def _outer_forward_args(self) -> list:
        """The arguments of the outermost `forward` of a top-level module or a part of one
        on the stack, outside torch and memledger (a forward called directly): the batch
        the model was handed (Note [Parts called in a forward no hook sees])."""
        found: list = []
        f = sys._getframe(1)
        while f is not None:
            code = f.f_code
            if code.co_name == "forward" and code.co_argcount and \
                    code.co_varnames[0] == "self" and \
                    not code.co_filename.startswith(_NOT_THE_SCRIPT):
                names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount +
                                         bool(code.co_flags & inspect.CO_VARARGS)]
                with _frame_locals(f) as local:
                    me = local.get("self")
                    if isinstance(me, torch.nn.Module) and self._top_or_part(me):
                        found = [local.get(n) for n in names[1:]]
            f = f.f_back
        return found

    def _pre_call(self, module, args) -> None:
        """The one global pre-hook: two hooks in a row cost a hook call more per module
        call, and `_call_begin` ran right after `_module_pre` as a second hook did."""
        self._module_pre(module, args)
        self._call_begin(module, args)

    @staticmethod
    def _call_kwargs() -> dict | None:
        """The keyword arguments of the module call whose global pre-hook runs now, read
        off torch's `Module._call_impl` (its `inner`, which calls the hooks): torch hands a
        global pre-hook none (Note [A tensor handed in a tuple or by keyword],
        trace/outside_state.py). None where no such frame is near."""
        f = sys._getframe(2)
        for _ in range(6):
            if f is None:
                return None
            if f.f_code.co_filename == _MODULE_FILE and f.f_code.co_name in _CALL_FRAMES:
                with _frame_locals(f) as local:
                    kwargs = local.get("kwargs")
                return kwargs if isinstance(kwargs, dict) else None
            f = f.f_back
        return None

    def _call_begin(self, module, args) -> None:
        if module._forward_hooks:   # Note [A backward hook made by hand] (outside_state.py)
            watch_routed_outputs(module)
        self._sid_marks.append(self._next_sid)   # storages made from here on: this call's
        self._arg_versions.append(argument_versions(args, self._call_kwargs())
                                  if self._phase != "backward" else [])
        attrs = self._attribute_sids(module) if self._phase != "backward" else {}
        if not self._attr_sids:   # an outermost call: the last one's watch is done
            self._attr_watch.clear()
            self._to_python.clear()
        self._attr_sids.append(attrs)
        self._empty_bufs.append(frozenset(
            k for k, v in module._buffers.items() if type(v) in self.PLAIN_TYPES
            and not v.numel()) if module._buffers else _NONE)
        for sid in attrs.values():
            self._attr_watch.setdefault(sid, -1)
            if sid in self._state_saves:   # Note [A saved buffer its module lets go of]
                self._held[sid] = self._state_saves[sid]

    # Note [A handed list let go of between calls]
    # The table of handed lists and dicts (`_handed`, Note [A list changed after the call],
    # trace/outside_state.py) holds each one, and through it the tensors in it, until it is
    # judged; it was judged only as a module call returned. A model that hands a call a
    # list and lets go of it before the next call returns kept it alive in the trace alone:
    # infini-transformer-pytorch's `InfiniTransformerWrapper` hands the model the
    # previous segment's memories (`past_memories`, a list of (kv, norm) pairs), rebinds
    # its variable to the new ones as the call returns, and then runs the segment's
    # cross-entropy, mask and mean in its own forward, no module called. The old pairs
    # (4,096 + 512 B a layer at batch 8, 2 heads of 8) lived on until the wrapper itself
    # returned: saved by the next segment's retrieval, they were written `released` at
    # the wrapper's end, not where the script let go of them (Note [When a saved storage
    # is released]), and `offload:model.layers.0.0` was predicted 4,608 B over measured,
    # the pair held through the cross-entropy where the peak is (tests/clients/
    # train_infini.py --mode loss --segments 2 --depth 1 --batch 8). Unsaved, the same
    # would have kept them on the ledger's curve. So the table is looked at before every
    # op while it holds anything, and a container nothing else holds is judged and let
    # go of there: before the op, so its tensors are freed where the script's own run
    # frees them. Cost: a refcount read per container held, per op, while one is held.
    def _judge_handed(self, every: bool) -> None:
        """Write a `stateful` ARGUMENT_CHANGED record for each call whose list or dict
        argument changed after it returned; judged for all as the model's outermost call
        returns (`every`), else for those nothing but this table holds any more, so the
        table never keeps a list (and the tensors in it) past its life (Note [A list
        changed after the call], trace/outside_state.py)."""
        for key, (c, calls) in list(self._handed.items()):
            # held here by the table's tuple, `c` and getrefcount's own argument
            if not every and sys.getrefcount(c) > 3:
                continue
            for p, e0, e1, items in calls:
                if changed_containers([(c, items)]):
                    self.sink.write({"k": "stateful", "mod": p, "ev0": e0, "ev1": e1,
                                     "obj": ARGUMENT_CHANGED, "sids": []})
            del self._handed[key]

    def _attribute_sids(self, module) -> dict[str, int]:
        """{attribute: sid} of the plain tensors `module` keeps as buffers or attributes
        (Note [State a re-run writes again], replay/stateful.py; Note [A buffer replaced
        from the one before]), buffers first."""
        sids = self._sids
        out = {k: sid for k, v in module._buffers.items()
               if type(v) in self.PLAIN_TYPES and (sid := sids.get(storage_key(v), -1)) >= 0}
        out.update({k: sid for k, v in module.__dict__.items()
                    if type(v) in self.PLAIN_TYPES and k not in _MODULE_OWN
                    and (sid := sids.get(storage_key(v), -1)) >= 0})
        return out

    def _call_end(self, module, args, *kwargs_output) -> None:
        """Keyword inputs and state written outside the call (global pre-hooks get no
        kwargs, so both are read when the call returns). When the forward raised (a
        checkpoint's re-run stopping early raises on purpose), torch calls this hook
        without kwargs: (module, args, output)."""
        first_new = self._sid_marks.pop() if self._sid_marks else self._next_sid
        versions = self._arg_versions.pop() if self._arg_versions else []
        attrs = self._attr_sids.pop() if self._attr_sids else {}
        empty = self._empty_bufs.pop() if self._empty_bufs else _NONE
        if not self._mod_stack or len(kwargs_output) != 2:
            return
        kwargs = kwargs_output[0]
        path, ev0, _, is_root = self._mod_stack[-1]
        # the model's keyword tensors (`model(input_ids=ids)`) are the batch too; a role
        # holds for the storage's whole life, so the moment does not matter
        if kwargs and is_root and self._phase == "forward":
            self._mark_inputs(kwargs.values())
        if self._phase == "backward":
            return
        self._note_args(path, ev0, args, kwargs, module)
        sids = self._sids
        # Note [What a call hands back] (replay/engine.py `_restashed`)
        ret = [sid for t in _nested_tensors(kwargs_output[1])
               if (sid := sids.get(storage_key(t), -1)) >= first_new]
        if ret:
            self.sink.write({"k": "ret", "mod": path, "ev0": ev0, "sids": ret})
        if written_arguments(versions):   # Note [State written outside a region]
            self.sink.write({"k": "stateful", "mod": path, "ev0": ev0, "ev1": self._ev,
                             "obj": INPUT_WRITTEN, "sids": []})
        for c, items in handed_containers(args, kwargs):   # Note [A list changed after
            self._handed.setdefault(id(c), (c, []))[1].append(   # the call]
                (path, ev0, self._ev, items))
        if self._handed:
            self._judge_handed(every=is_root)
        if paired_hooks(module):   # Note [Hooks paired across forward and backward]
            self.sink.write({"k": "stateful", "mod": path, "ev0": ev0, "ev1": self._ev,
                             "obj": PAIRED_HOOKS, "sids": []})
        if module._forward_hooks:   # its own hooks run after this one: `_routed` judges
            self._hooked_call = (module, path, ev0, self._ev)
        for obj, keys in written_state(args, kwargs,
                                       lambda k: sids.get(k, -1) >= first_new):
            # Note [State written outside a region] (memledger/trace/outside_state.py)
            self.sink.write({"k": "stateful", "mod": path, "ev0": ev0, "ev1": self._ev,
                             "obj": obj, "sids": [sids[k] for k in keys]})
        handed = {sid for a in (*args, *(kwargs or {}).values()) if isinstance(a, _Tensor)
                  and (sid := sids.get(storage_key(a), -1)) >= 0} if attrs else set()
        replaced = self._replaced_own_state(module, attrs, first_new, ev0, handed) \
            if attrs else []
        if self._state_saves:   # Note [A saved buffer its module lets go of]
            self._state_kept(module, attrs)
        if replaced:   # Note [A buffer replaced from the one before]
            self.sink.write({"k": "stateful", "mod": path, "ev0": ev0, "ev1": self._ev,
                             "obj": OWN_STATE, "sids": [], "attrs": [k for k, _ in replaced],
                             "ev": min(e for _, e in replaced)})
        kept_on = [(sid, v) for v in attribute_tensors(module) if self._own_storage(v)
                   and (sid := sids.get(storage_key(v), -1)) >= first_new]
        if attrs and module._buffers:   # Note [A buffer a re-run sets again]
            kept_on += self._rebound_buffers(module, attrs, first_new, ev0, handed)
        if kept_on:   # Note [Tensors a call keeps on its module]
            deep = [(sid, v) for sid, v in kept_on if _deep_graph(v)]
            rec = {"k": "stash", "mod": path, "ev0": ev0, "ev1": self._ev,
                   "sids": [sid for sid, _ in kept_on],
                   "graph": [sid for sid, _ in deep]}
            # reading a save packed by the script's own checkpoint would re-run its region
            if deep and not self._ckpt_calls and \
                    (reach := self._graph_saves([v for _, v in deep])) is not None:
                rec["reach"] = reach
            self.sink.write(rec)
        kept = [(sid, v) for v in module._buffers.values() if type(v) in self.PLAIN_TYPES
                and (sid := sids.get(storage_key(v), -1)) >= first_new] \
            if module._buffers else []
        if kept:   # Note [A buffer a call makes and later calls reuse]
            # `graph`: Note [A buffer kept without a graph] (replay/engine.py)
            rec = {"k": "kept", "mod": path, "ev0": ev0, "sids": [sid for sid, _ in kept],
                   "graph": [sid for sid, v in kept if _deep_graph(v)]}
            if any(attrs.get(k) in handed for k in module._buffers):
                rec["handed"] = 1   # its buffer's old value was an argument of the call
            if self._flags_set(module, attrs, [sid for sid, _ in kept], ev0):
                rec["flag"] = 1     # Note [A first fill behind a flag] (replay/engine.py)
            # Note [A cache emptied before every call] (replay/engine.py): those kept where
            # the module held no tensor of that name as the call began, or one of no
            # elements (Note [A state filled on the first call]), and of them those with an
            # autograd graph (the fill's ops saved tensors a re-run would not)
            filled = [(k, v) for k, v in module._buffers.items()
                      if (k not in attrs or k in empty) and type(v) in self.PLAIN_TYPES
                      and sids.get(storage_key(v), -1) >= first_new]
            if filled:
                rec["fill"] = 2 if any(v.grad_fn is not None for _, v in filled) else 1
            self.sink.write(rec)

    # Note [A saved buffer its module lets go of]
    # A buffer is model state: the module holds it into backward, so offload leaves it on
    # the device and its saves are not followed for their release (Note [When a saved
    # storage is released]). A spiking neuron (sinabs' LIF, tests/clients/train_sinabs.py)
    # keeps its membrane as a buffer it rebinds to the last time step's at the end of each
    # call, and the loop resets it in place (`zero_()`, `detach_()`) before the next
    # sample; the next call's first time step saves it (`alpha * v_mem`, alpha trained)
    # and the call rebinds the buffer: from there only autograd holds the old one.
    # measure's offloader skips the model's buffers by the tensors it was given, and this
    # one is another: it takes it off the device, and the bytes go at the rebind. The
    # replay kept them to the save's backward: a (4, 16) fp32 membrane, 256 B over
    # measured on `offload:1` of tests/clients/train_kept_state.py (and on `offload:1` of
    # sinabs' dense net). So a saved buffer's saves are counted as any save's, in an entry
    # kept in `_state_saves`, and the entry is in `_held` while a call of the module that
    # holds the buffer is open: an op after the rebind finds only autograd holding it and
    # writes `released` there, before the op that runs next (the call's `torch.stack`,
    # where the peak is: read at the call's end, `released` came one event late and the
    # replay was still 256 B over on `offload:*`). A call that ends with the module still
    # holding it takes the entry out of `_held` again, so a batch norm's running
    # statistics are watched for the one op of its call, not for every op to backward.
    # The replay moves a buffer released so as it moves the batch the script let go of
    # (`movable`, replay/engine.py).
    def _state_kept(self, module, attrs: dict[str, int]) -> None:
        """At the end of a call of `module`: the saved buffers (`attrs`, as the call began)
        it still holds are watched no more; those it let go of are autograd's."""
        sids, bufs = self._sids, module._buffers
        for k, sid in attrs.items():
            if sid not in self._state_saves:
                continue
            v = bufs.get(k, module.__dict__.get(k))
            if v is None or sids.get(storage_key(v), -1) != sid:
                self._state_saves.pop(sid)   # `_held` has it until the last holder goes
            elif not any(sid in a.values() for a in self._attr_sids):
                self._held.pop(sid, None)

    def _routed(self, module) -> None:
        """The call `_call_end` just ended handed its outputs through an autograd Function
        of its own hooks' (Note [A backward hook made by hand] in trace/outside_state.py)."""
        call, self._hooked_call = self._hooked_call, None
        if call is not None and call[0] is module and self._phase != "backward":
            self.sink.write({"k": "stateful", "mod": call[1], "ev0": call[2], "ev1": call[3],
                             "obj": PAIRED_HOOKS, "sids": []})

    # Note [A buffer a re-run sets again]
    # A call that replaces its module's buffer by one it made from the one before (or from
    # its argument, which is that buffer: snntorch's `self.lif2(cur2, mem2)` sets
    # `self.mem = mem`, then the new membrane) sets it again in its re-run, as a call
    # keeping a plain attribute does (Note [Tensors a call keeps on its module]): the
    # re-made membrane replaces the one the forward left and the module holds it until
    # the next call replaces it. Only attributes had `stash` records, so the replay let
    # the re-run's membrane go with its region's backward while measure held it: 4 B under
    # on tutorial 5's network (`checkpoint:lif2`, --num-steps 3: 456,672 B predicted,
    # 456,676 B measured), 80 B at batch 2. Such buffers are stashed too now. Not one made
    # anew without reading the old (ALiBi's bias made bigger): its re-run finds the new one
    # and re-makes nothing.
    def _rebound_buffers(self, module, before: dict[str, int], first_new: int, ev0: int,
                         handed: set[int]) -> list[tuple[int, torch.Tensor]]:
        """(sid, tensor) of the module's buffers the call replaced by a tensor it made,
        having read the one before or been handed it (Note [A buffer a re-run sets
        again])."""
        sids = self._sids
        out = []
        for k, v in module._buffers.items():
            old = before.get(k)
            if old is None or type(v) not in self.PLAIN_TYPES:
                continue
            sid = sids.get(storage_key(v), -1)
            if sid >= first_new and (old in handed or self._read_into_tensors(old) >= ev0):
                out.append((sid, v))
        return out

    # Note [A flag read to Python]
    # A module may keep a flag as a buffer, test it and set it once: nflows' ActNorm
    # initialises itself from its first training batch (`if self.training and not
    # self.initialized:`, then its parameters' `.data` and `self.initialized.data =
    # torch.tensor(True)` under no_grad). That call read its buffer and replaced it, so it
    # was taken for state carried from call to call (Note [A buffer replaced from the one
    # before]): predict refused `checkpoint:_transform._transforms.*` ("replaces
    # ..._transforms.0.initialized by a tensor made from the one before") while measure ran
    # it, 145,030 B (tests/clients/train_nflows.py --mode nsf), and the re-run, which finds
    # the flag set and skips the initialisation, computes what the forward computed after
    # it. A value read to Python only (`is_nonzero`, `_local_scalar_dense`, `item`: an
    # `if` on it) made no tensor: the new buffer was not made from it. So the uses of a
    # watched storage that end in such reads count from the last use before them; a tensor
    # op that reads the flag (`self.count + 1`) still makes the new value from the old.
    # A branch the flag chose is measure's to judge, as it was: it compares what the re-run
    # leaves with what the forward left.
    def _read_to_python(self, args: tuple, ev: int) -> None:
        """An op handing a watched storage's value to Python (Note [A flag read to
        Python]): its last use before such reads is kept."""
        a = args[0] if args else None
        if not isinstance(a, _Tensor):
            return
        try:
            sid = self._sids.get(a.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError):
            return
        if sid is None or sid not in self._attr_watch:
            return
        prev = self._last.get(sid, -1)
        seen = self._to_python.get(sid)
        self._to_python[sid] = (seen[0] if seen is not None and seen[1] == prev else prev, ev)

    def _flags_set(self, module, before: dict[str, int], kept: list[int], ev0: int) -> bool:
        """Whether each buffer the call made (`kept`: their sids) replaced one the call read
        to Python alone, a flag (Note [A flag read to Python]; Note [A first fill behind a
        flag] in replay/engine.py)."""
        sids = self._sids
        for k, v in module._buffers.items():
            if type(v) not in self.PLAIN_TYPES or sids.get(storage_key(v), -1) not in kept:
                continue
            old = before.get(k)
            seen = self._to_python.get(old) if old is not None else None
            if seen is None or seen[1] < ev0 or self._read_into_tensors(old) >= ev0:
                return False
        return True

    def _read_into_tensors(self, sid: int) -> int:
        """The last use of a watched storage by an op that did not hand its value to Python
        (Note [A flag read to Python]), freed or not; -1 for none."""
        used = max(self._last.get(sid, -1), self._attr_watch.get(sid, -1))
        seen = self._to_python.get(sid)
        return seen[0] if seen is not None and seen[1] == used else used

    # Note [A buffer replaced from the one before]
    # A module may keep its state in a buffer it rebinds on every call: snntorch's spiking
    # neurons with `init_hidden=True` hold their membrane as the buffer `mem` and do
    # `self.mem = beta * self.mem + input_` per time step (the state carried across the
    # calls of one sample, reset by `utils.reset(net)` per batch). A re-run of such a call
    # (checkpoint, selective) reads the membrane the forward's last time step left, not the
    # one its own time step read, and computes other spikes. Only plain attributes were
    # watched (Metric.forward's sums), so predict priced `checkpoint:2` on tutorial 7's
    # network (378,756 B) while measure refused it by a by-product, the attribute `reset`
    # (train_snntorch.py --mode seq). Buffers are watched too now, and the record names the
    # attributes (buffers first, as measure looks) and the event of the earliest last read
    # of a replaced value: the re-run reads the stale state there (`ev`, judged against
    # torch's early stop as a write is). Not a replaced value the call was handed as an
    # argument: tutorial 5's neurons take the membrane explicitly (`self.lif1(cur1, mem1)`,
    # then `self.mem = mem` inside), and a re-run reads the saved argument, the same
    # values; counting that read refused `checkpoint:lif1`, whose gradients are unchanged.
    def _replaced_own_state(self, module, before: dict[str, int], first_new: int,
                            ev0: int, handed: set[int]) -> list[tuple[str, int]]:
        """(attribute, its old value's last read) of each tensor buffer or attribute of
        the module the call replaced by a tensor it made, having read the one it replaces
        (Metric.forward: the old sums cloned, then added to), unless it read it as one of
        its own arguments (`handed`: their sids; Note [A buffer replaced from the one
        before])."""
        sids = self._sids
        found = []
        for k, old in before.items():
            # a ScriptModule's `_buffers` (OrderedDictWrapper) has no `.get`: e3nn's traced
            # activations crashed the trace (tests/clients/test_e3nn_clients.py)
            v = module._buffers[k] if k in module._buffers else module.__dict__.get(k)
            used = self._read_into_tensors(old)   # Note [A flag read to Python]
            if type(v) in self.PLAIN_TYPES and old not in handed and \
                    sids.get(storage_key(v), -1) >= first_new and used >= ev0:
                found.append((k, used))
        return found

    def _autocast_casts_read_by(self, func) -> None:
        """The casts made since the last op but views are autocast's (`acast` records) if
        this op is one autocast runs in lower precision, else the script's own `.to()`."""
        if func._opname in _LOWER_PRECISION_OPS:
            for rec in self._acast_pending:
                self.sink.write(rec)
        self._acast_pending.clear()

    def _graph_saves(self, kept: list, budget: int = 5000) -> list[int] | None:
        """The storages that the autograd graphs of `kept` save: a re-run's copy of them
        holds those of its region, and only those (Note [Tensors a call keeps on its
        module]). The whole graph back to the step's inputs, as the region that re-runs
        the call is not known here; None past `budget` nodes (a deep model keeping such a
        tensor in every layer), where replay holds every save made before the copy."""
        seen: set[int] = set()
        out: set[int] = set()
        todo = [v.grad_fn for v in kept]
        self._walking = True
        # reading a save makes autograd hand back a fresh alias of it, an op the mode would
        # record as an event using the storage (Note [A graph read unseen])
        off = _no_dispatch()
        off.__enter__()
        try:
            while todo:
                node = todo.pop()
                if node is None or hasattr(node, "variable"):   # a leaf's AccumulateGrad
                    continue
                seq = node._sequence_nr()
                if seq in seen:
                    continue
                if len(seen) >= budget:
                    return None
                seen.add(seq)
                for t in _saved_tensors_of(node):
                    sid = self._sids.get(storage_key(t), -1)
                    if sid >= 0:
                        out.add(sid)
                todo.extend(f for f, _ in node.next_functions)
        finally:
            off.__exit__(None, None, None)
            self._walking = False
        return sorted(out)

    # Note [A graph read unseen]
    # `_graph_saves` reads the saves of a kept tensor's graph (`node._saved_self`), and
    # autograd answers each read with a new alias of the saved tensor: with the mode on,
    # one event per save, each a use of its storage. The walk runs as a call returns, so
    # every activation and weight the graph saved read as used there: MONAI's DynUNet
    # keeps its deep-supervision heads in a list its skip layers share, whose graphs reach
    # the whole network, and the walk at the model's return put 44 events after forward
    # that moved every save's last forward use past it. Offload then held each offloaded
    # storage to that point: `offload:skip_layers` predicted 34,069,872 B, measured
    # 33,112,404. The walk runs with the dispatch mode off: no events, no uses.

    # Note [Tensors a call keeps on its module]
    # A call may keep a tensor it made as a plain attribute of its module (or in a list,
    # tuple or dict attribute: MONAI's DynUNet writes its deep-supervision heads into one
    # list its skip layers share, `attribute_tensors`): pruning's
    # forward pre-hook sets `fc1.weight = weight_orig * weight_mask` before every forward
    # (as the old `torch.nn.utils.weight_norm` and `spectral_norm` hooks do), a model may
    # keep its last attention map. The module holds it into backward (`released` -1), and
    # checkpoint's re-run sets the attribute again: the re-made tensor replaces the one
    # forward made, which goes there, and the module holds the new one until the next
    # forward. A `stash` record (the call's module and first event, the storages) lets
    # replay say so (memledger/replay/engine.py, Rule 10). Its `graph` names those whose
    # autograd graph runs deeper than one op on leaves (`_deep_graph`: a ReLU output kept as
    # `self.h`, not a pruned weight `weight_orig * mask`): a re-run's copy of one of those
    # keeps the re-run's saves while the module holds it (engine.py `_kept_remakes`). Its
    # `reach` names the storages those graphs save (`_graph_saves`, walked once here):
    # RecurrentGemma keeps its scan's last state, whose graph is one branch of the layer,
    # so a checkpointed layer holds those saves and not the others.

    # Note [A buffer a call makes and later calls reuse]
    # A module may make a tensor on its first call and keep it as a buffer for later calls
    # (x-transformers' ALiBi: `register_buffer('bias', ...)` when none is big enough, else
    # `self.bias[..., -i:, -j:]`): the call that made it and a re-run of that call run
    # different ops (the re-run finds the buffer and slices it). torch's selective
    # checkpoint replays the forward's ops by kind and count and raises on one the forward
    # did not run ("aten.slice.Tensor encountered during backward but not found in
    # storage"), so `measure` refused `selective` there while `predict` predicted it. A
    # `kept` record (the call's module and first event, the storages it put in its module's
    # buffers) lets predict refuse it too, where a later call of the module made none
    # (it reused the buffer): engine.py `_refuse_selective_reused`. A module that
    # registers a new buffer on every call re-makes it in the re-run as well: not refused.
    # `handed`: the buffer the call replaced was also one of its arguments (snntorch's
    # `self.lif1(cur1, mem1)` with `self.mem = mem` inside), so its re-run reads the saved
    # argument, not what its forward left (Note [A buffer replaced from the one before]).

    # Note [Weights put in a module's parameters]
    # A differentiable optimizer (torchopt's MetaSGD and MetaAdam) writes its new weights
    # into the modules' `_parameters` as non-leaf tensors (`w1 = w0 - lr * g0`), and
    # `torch.func.functional_call` hands a call its tensors the same way for the length of
    # the call. measure's checkpoint keeps what the region's `_parameters` held at its call
    # and puts it back for the re-run (Note [Parameters handed in], measure/apply.py), so
    # the frame holds those tensors until the region's backward is done, as it holds the
    # arguments. With MetaSGD the script lets go of a step's fast weights when the next
    # inner step (or `recover_state_dict`) replaces them: a fast bias autograd never saved
    # (256 B per Linear(64, 64)) was let go there in the replay and held by measure, 768 B
    # under measured on three checkpointed blocks (tests/clients/train_torchopt.py,
    # `--mode maml --inner 2`). They are written with the call's arguments, for every call
    # whose subtree holds them (measure takes the whole subtree of the region); a model's
    # own `nn.Parameter`s are skipped by type, one isinstance per parameter per call.
    def _note_args(self, path: str, ev0: int, args, kwargs, module=None) -> None:
        """The storages a call was handed (not parameters or buffers): checkpoint keeps a
        region's arguments until its backward, even those autograd does not save (the
        hidden states entering a frozen LoRA base model's block), and the tensors put in
        its modules' `_parameters` that are not the model's parameters (Note [Weights put
        in a module's parameters]). For replay."""
        found = []
        handed = () if module is None else [
            t for m in module.modules() for t in m._parameters.values()
            if t is not None and not isinstance(t, _Parameter)]
        for t in (*_nested_tensors((*args, *(kwargs or {}).values())), *handed):
            sid = self._sids.get(storage_key(t), -1)
            if sid >= 0 and (sid, "parameter") not in self._roles_written and \
                    (sid, "buffer") not in self._roles_written:
                found.append(sid)
        if found:
            self.sink.write({"k": "args", "mod": path, "ev0": ev0, "sids": found})

    def _register_root(self, root: torch.nn.Module) -> None:
        """A top-level module just named (trace/roots.py): its parameters' and buffers'
        names, and a `root` record when it is not the model."""
        prefix = self._roots.prefix[root]
        self._note_compiled(root, prefix)
        if self._roots.retired:   # Note [A label the model's child takes] (trace/roots.py)
            self.sink.write({"k": "retired", "mods": self._roots.retired, "ev": self._ev})
        for other in self._roots.renamed:   # labelled again: a root record, names
            label = self._roots.prefix[other]
            self.sink.write({"k": "root", "mod": label, "ev": self._ev})
            self._name_state(other, label, again=True)
        if prefix:   # not the model: a GAN's discriminator, a loss module called on its own
            self.sink.write({"k": "root", "mod": prefix, "ev": self._ev})
        else:
            if self._roots.absorbed:   # it holds the module that was the model until now
                self.sink.write({"k": "model", "ev": self._ev})   # (Note [The model]): renamed
            self._note_containers(root)
        self._steps.saw_root(root)   # its parameters count for the first step: trace/steps.py
        for mname, mod in root.named_modules():
            for pname, p in module_named_parameters(mod, recurse=False):
                self._note_sharded(mod, pname, p)
        self._name_state(root, prefix, again=bool(self._roots.absorbed))

    def _note_containers(self, model: torch.nn.Module) -> None:
        """A `container` record per module of the model with no forward of its own, for
        predict to say why a policy cannot select it (Note [Containers], replay/policies.py)."""
        for path, cls in containers(model).items():
            self.sink.write({"k": "container", "mod": path, "cls": cls, "ev": self._ev})
        # Note [A module under a second path] (trace/roots.py): a selector of `layers.2`
        # where one block is `layers.0`, `layers.1` and `layers.2`
        second = module_aliases(model)
        if second:
            self.sink.write({"k": "aliases", "mods": second, "ev": self._ev})
        # Note [Modules run through another method] (replay/policies.py): a module that
        # never runs as a call is known to predict by its parameters' names alone; its class
        # lets `@Class` find it too; and by its buffers' (Note [A module that holds buffers
        # alone], replay/prepared.py): nflows' permutations hold one index buffer, and
        # `offload:@ReversePermutation` read "matches no module" in predict while measure
        # said the module runs through another method (tests/clients/train_nflows.py
        # --mode reverse)
        held = {name: type(m).__name__ for name, m in named_modules(model)
                if name and (next(module_parameters(m), None) is not None
                             or next(m.buffers(), None) is not None)}
        if held:
            self.sink.write({"k": "classes", "cls": held, "ev": self._ev})
        # Note [A class with a call of its own] (replay/policies.py)
        own = [name for name, m in named_modules(model) if name in held and _own_call(m)]
        if own:
            self.sink.write({"k": "own_call", "mods": own, "ev": self._ev})

    def _note_compiled(self, root: torch.nn.Module, prefix: str) -> None:
        """A `compiled` record per torch.compile'd module under a new root, with its backend:
        Dynamo compiles nothing under a dispatch mode, so this ledger is the eager run
        (docs/decisions.md, issue 9; `show` says so), and predict refuses policies inside
        code a real backend compiled (Note [Policies inside compiled code], compiled.py)."""
        seen = set()
        for mod, path in paths_under(root, prefix):
            backend = compiled_backend(mod)
            if backend is not None and path not in seen:
                seen.add(path)      # torch.compile's wrapper and the module it wraps
                self.sink.write({"k": "compiled", "mod": type(mod).__name__, "path": path,
                                 "backend": backend})

    # Note [Lazy parameters]
    # A lazy module (`nn.LazyLinear`, PyG's layers built with `in_channels=-1`, as its
    # `to_hetero` and `HeteroConv` models are) holds `UninitializedParameter`s until its
    # first forward, which touch no storage: asking one for it raises ("Attempted to use an
    # uninitialized parameter"). The collector names a root's state at its first forward
    # pre-hook, before the lazy module's own pre-hook materializes them, and the trace of
    # a two-line `LazyLinear` script failed there (exit 3). Such a tensor is named without
    # its role, and its role is written once it has a storage: at the next module call's
    # end or optimizer step (an `empty` the dispatch mode saw in the lazy module's forward
    # made it, so it is that storage's role from its creation on). The same object becomes a
    # plain Parameter (its class is swapped in place), so the name kept by `id` holds. Its
    # first call saved it before it had the role, so it is then taken off the saved
    # storages followed for their release (Note [When a saved storage is released]), as
    # model state is: followed, it read as a storage the script held into backward, which
    # a checkpoint's re-run makes again and the script keeps (replay's Rule 10), holding
    # each re-run's saves to the end: PyG's hetero model (three `HeteroConv` layers built
    # lazily) `checkpoint:convs.*` predicted 402,820 B, measured 328,068 B, exact once its
    # sizes were given (tests/clients/train_pyg.py --case hetero, hetero_eager).
    def _name_lazy(self) -> None:
        """Roles for lazy state made since it was named: Note [Lazy parameters]."""
        waiting = []
        for ref, role, name in self._lazy:
            t = ref()
            if t is None:
                continue
            if isinstance(t, _Uninitialized):
                waiting.append((ref, role, name))
            else:
                self._role(t, role, name)
                # model state is not followed for its release (Note [When a saved storage
                # is released]); the lazy module's first call saved it before its role
                self._held.pop(self._sid(t, self._ev), None)
        self._lazy = waiting

    # Note [Gradients renamed with the model]
    # When the first optimizer step names another top-level module the model (Note [The
    # model], trace/roots.py), its parameters are written again under their new names, and
    # so are the gradients they hold then: those were named at the end of the backward
    # before, under the old prefix. Stable-Baselines3's DQN calls `q_net_target` (under
    # no_grad) before `q_net`, so the first step's gradients read `QNetwork.q_net.2.weight`
    # and every later step's `q_net.2.weight`, one tensor by two names in `show` (its idle
    # table folds a tensor's steps by name). Module calls keep the names they ran under.
    # Note [A computed tensor in a module's parameters]
    # A module's `_parameters` may hold a tensor some op computed, no nn.Parameter: higher's
    # `innerloop_ctx(model, opt, copy_initial_weights=False)` builds a functional copy of
    # the model whose first fast weights are `p.clone()` of the model's parameters, and
    # that copy's first call is where its state is named. Those clones read as parameters
    # named `0.0.weight`..., beside the parameters they were cloned from: `show` said
    # "parameter 6.2 KiB" at the peak of tests/clients/train_higher.py (2 steps), twice the
    # 3,184 B the net holds, and its saved activations 3,184 B short, for one task's
    # clones that its inner forwards save for the outer backward. A tensor with a
    # `grad_fn` is a value of the graph (its gradient flows to what made it, and nothing
    # steps it), so it takes no `parameter` role: it is what its saves and uses make it,
    # an activation here, as the later fast weights (`w - lr * g`) already were (Note
    # [Weights put in a module's parameters]). A leaf put there (higher's default
    # `copy_initial_weights=True`: `p.clone().detach().requires_grad_()`) keeps the role,
    # as a parameter that no optimizer holds. The optimizer's own parameters are leaves
    # and get theirs at each step (`_mark_parameters`).
    def _name_state(self, root: torch.nn.Module, prefix: str, again: bool = False) -> None:
        """The `parameter` and `buffer` roles of a top-level module's tensors, named under
        `prefix`; `again`: renamed, so written again (the ledger reads the last name).
        Not the tensors of a module held under another path: the model inside a wrapper
        named beside it (Note [A wrapper of the model], trace/roots.py), whose gradients
        read `EMA.online_model.blocks.0.fc1.weight` from the wrapper's first call on."""
        elsewhere = self._named_elsewhere(root, prefix)
        for role, tensors in (("parameter", module_named_parameters(root)),
                              ("buffer", root.named_buffers())):
            for name, t in tensors:
                if id(t) in elsewhere:
                    continue
                full = ".".join(x for x in (prefix, plain_name(name)) if x)
                if role == "parameter":
                    self._param_names[id(t)] = full
                if isinstance(t, _Uninitialized):   # Note [Lazy parameters]
                    self._lazy = [x for x in self._lazy if x[0]() is not t]
                    self._lazy.append((weakref.ref(t), role, full))
                    continue
                if role == "parameter" and t.grad_fn is not None:
                    continue   # Note [A computed tensor in a module's parameters]
                if again:
                    self._roles_written.discard((self._sid(t, self._ev), role))
                    g = t.grad if role == "parameter" else None
                    if g is not None and g.layout is torch.strided:   # Note [Gradients
                        self._roles_written.discard(                  # renamed with the model]
                            (self._sid(g, self._ev), "gradient"))
                        self._role(g, "gradient", full)
                self._role(t, role, full, shard="sharded" if role == "parameter" and getattr(
                    t, "_local_tensor", None) is not None else "")

    def _name_found(self, found: list[tuple[torch.nn.Module, str]]) -> None:
        """The parameters and buffers of modules registered after their top-level module's
        first call, named by their paths (Note [A module registered after the first call],
        trace/roots.py), as `_name_state` names those there at that call."""
        for m, path in found:
            for role, tensors in (("parameter", module_named_parameters(m, recurse=False)),
                                  ("buffer", m.named_buffers(recurse=False))):
                for name, t in tensors:
                    if t is None:
                        continue
                    full = ".".join(x for x in (path, plain_name(name)) if x)
                    if role == "parameter":
                        self._param_names[id(t)] = full
                    if isinstance(t, _Uninitialized):   # Note [Lazy parameters]
                        self._lazy.append((weakref.ref(t), role, full))
                        continue
                    if role == "parameter" and t.grad_fn is not None:
                        continue   # Note [A computed tensor in a module's parameters]
                    self._role(t, role, full)

    def _named_elsewhere(self, root: torch.nn.Module, prefix: str) -> set[int]:
        """ids of the parameters and buffers under `root` held only by modules whose path is
        not the one `prefix` gives them (they keep another top-level module's names); a
        submodule two blocks share keeps its first path, and its tensors are named there."""
        own: set[int] = set()
        other: set[int] = set()
        for m, path in paths_under(root, prefix):
            mine = self._roots.paths.get(m) == path
            for t in (*m._parameters.values(), *m._buffers.values()):
                if t is not None:
                    (own if mine else other).add(id(t))
        return other - own

    # Note [A batch made after an evaluation]
    # The batch is what the script makes outside the step (setup, or the `other` phase after
    # an optimizer step) and hands the model or the loss (Note [A batch in a dict]). A loop
    # that evaluates after each step (`with torch.no_grad(): val = model(x_val)`) leaves the
    # phase at `loss` when that forward returns, and the next step's batch was made there,
    # inside the phase of a step: no candidate, it read as `activation` (the embedding and
    # the loss save it), the first step's batch as `input` (tests/clients/train_pto.py, any
    # `--opt`: 1,088 B of step 2's x and y at the peak filed as activation;
    # train_optimizers.py the same, 4,608 B). Storages made in the loss phase a forward
    # without gradients left open become candidates when the next forward with gradients
    # begins: the batch then, made between the evaluation and the step; a backward or an
    # optimizer step in between (an evaluation in the middle of a step, before its loss)
    # forgets them: they are that step's own.
    # An evaluation run with gradients (a validation loss kept as a tensor, logged later)
    # leaves the phase at `loss` too, and the next step's batch read `activation`:
    # tests/clients/train_eval_after.py `--eval kept` (after the optimizer step, 2 steps)
    # filed step 2's (8, 16) batch, 512 B, as `0.fc1`'s activation, in "saved for
    # backward" (3,584 B for the step's 3,072). Everything made after a forward with
    # gradients is not a candidate: a step that calls the model twice hands the second
    # call what it made from the first (`h = model(x); out = model(h * mask)`), the step's
    # own. What tells a batch is that no graph made it: an argument of the next root
    # forward with gradients (no backward or optimizer step between) made in that loss
    # phase, with no `grad_fn` and not requiring grad (`_batch_after_graded`) is a
    # candidate, and the forward marks it `input`. A second call's batch in a siamese
    # step is one too, as it is. After: at the peak `activation` 12,800 -> 12,288 B,
    # `input` 2,048 -> 2,560; "saved for backward" 3,072 B.
    # Note [A batch in a dict]
    # The model's arguments made outside the step are its batch (`input`), looked for
    # through tuples, lists and dicts as checkpoint's are (`_nested_tensors`): a model
    # called `model(batch)` with `batch = {"x": ..., "y": ...}` had only the tensors the
    # loss read filed as input, and `x` (64x16 fp32, 4,096 B) as the first Linear's
    # `activation`, in `show`'s saved-for-backward table by module too, where `model(x)`
    # files it as input (tests/integration/test_api_blocks.py, a Linear on `batch["x"]`).
    # Peaks and predictions do not change: the replay follows each storage's own life.
    def _batch_after_graded(self, args) -> None:
        """The arguments of a forward with gradients that were made, with no graph, after
        the last root forward with gradients returned (and no backward or optimizer step
        since): the batch after an evaluation run with gradients (Note [A batch made after
        an evaluation]). Read with torch functions off, as the doctor's probe watches."""
        with torch._C.DisableTorchFunction():
            for a in _nested_tensors(tuple(args)):
                sid = self._sids.get(storage_key(a), -1)
                if sid in self._after_graded and a.grad_fn is None and not a.requires_grad:
                    self._outside.add(sid)

    def _mark_inputs(self, args) -> None:
        for a in _nested_tensors(tuple(args)):
            self._mark_input(self._sid(a, self._ev))

    def _mark_loss_inputs(self, args) -> None:
        """Loss targets: tensors made outside the step that the loss reads are the batch too."""
        for a in args:
            if isinstance(a, _Tensor):
                try:
                    sid = self._sids.get(a.untyped_storage()._cdata)
                except (RuntimeError, NotImplementedError):
                    continue
                self._mark_input(sid)

    # Note [A load into the model after an evaluation]
    # The loss phase marks what its ops read from outside the step as the batch (the
    # targets). A forward without gradients (an evaluation) leaves that phase open until the
    # next forward, and what the script runs in between was read as the loss too.
    # torch-lr-finder's `range_test(val_loader=...)` ends each step with a validation loss
    # under `no_grad`, and `reset()` then loads the state it cached in memory at its start
    # (`copy.deepcopy(model.state_dict())`) by `param.copy_(cached)`: each cached copy was
    # filed as `input`, 36,752 B of a 4,608 B batch at the peak ("other" without the
    # validation: tests/clients/train_lr_finder.py --val). No loss writes the model's
    # parameters, buffers or optimizer state in place; an op that does (a `load_state_dict`,
    # an EMA update) is the script's, and what it reads is not the batch. Only the category
    # moves: peaks and predictions follow each storage's own life.
    def _writes_model_state(self, func, written: tuple[int, ...], args, kwargs) -> bool:
        roles = self._roles_written
        for i in written:
            a = args[i] if i < len(args) else kwargs.get(func._schema.arguments[i].name)
            if isinstance(a, _Tensor):
                sid = self._sids.get(storage_key(a), -1)
                if (sid, "parameter") in roles or (sid, "buffer") in roles or \
                        (sid, "optimizer_state") in roles:
                    return True
        return False

    def _mark_input(self, sid: int | None) -> None:
        """`sid` is the batch, and so is what it was cast from outside the step (Note [A
        batch cast before the model])."""
        while sid in self._outside:
            self._outside.discard(sid)
            self._inputs.add(sid)
            self.sink.write({"k": "role", "sid": sid, "role": "input"})
            sid = self._cast_from.pop(sid, None)

    # Note [A batch cast before the model]
    # A loop that casts its batch before the model call (`x = x_train.to(device).float()`,
    # as deepctr-torch's `fit` does with the float64 table its DataLoader collates) hands
    # the model the copy; the batch it was copied from stays referenced through the step.
    # Only the copy was marked `input`: the source, made outside the step as well, read
    # `other` in the first step (collated in `setup`) and `temporary` from the second on
    # (collated in `other`): 2,560 B of DeepFM's (64, 5) fp64 batch at the peak, 9,216 B
    # of DIN's (64, 18), one object filed two ways (tests/clients/test_deepctr_clients.py).
    # A `_to_copy` made outside the step from a storage made outside it remembers its
    # source; marking the copy `input` marks the source (and its own source) too. Only the
    # category moves: peaks and predictions follow each storage's own life.
    def _note_cast(self, args, out, ev: int) -> None:
        if not (args and isinstance(args[0], _Tensor) and isinstance(out, _Tensor)):
            return
        try:
            src = self._sids.get(args[0].untyped_storage()._cdata)
            dst = self._sids.get(out.untyped_storage()._cdata)
        except (RuntimeError, NotImplementedError):
            return
        if src is not None and dst is not None and src != dst and src in self._outside \
                and dst in self._outside:
            self._cast_from[dst] = src

    # ---- roles ----------------------------------------------------------------------------
    # Note [A role written before, told at once]
    # The optimizer's hooks name every state tensor and gradient, and a pass's end every
    # gradient, at each step: about 630 `_role` calls a step on the tiny GPT of
    # benchmarks/overhead.py (52 parameters: 312 at the optimizer's two hooks, `exp_avg`,
    # `exp_avg_sq` and `step` each; 156 gradients; 104 parameters), nearly all of a role
    # the ledger already has. Each went through the checks for lazy, sparse and wrapped
    # tensors and `_sid` before finding the role written. A plain tensor (the class itself:
    # no lazy parameter, no wrapper) whose storage has a sid and already carries the role
    # (named, or asked without a name) returns at once: what the full path below decides
    # for it, without its lookups.
    def _role(self, t: torch.Tensor, role: str, name: str = "", shard: str = "") -> None:
        if t.__class__ in _PLAIN:   # Note [A role written before, told at once]
            try:
                sid = self._sids.get(t.untyped_storage()._cdata)
            except (RuntimeError, NotImplementedError):   # sparse: the full path
                sid = None
            if sid is not None and (sid, role) in self._roles_written and not (
                    name and (sid, role) in self._unnamed_roles):
                return
        if isinstance(t, _Uninitialized):   # no storage yet: Note [Lazy parameters]
            return
        if t.layout is not torch.strided and (parts := sparse_parts(t)):
            for part in parts:   # a sparse gradient: its indices and its values
                if not (self._lent and self._keeps_role(part)):
                    self._role(part, role, name, shard)
            return
        if (inner := wrapped_parts(t)):
            for attr, part in inner:   # Note [Wrapper subclasses]: 8-bit Adam's codes, scale
                self._role(part, role, f"{name}.{attr}" if name else "", shard)
            return
        sid = self._sid(t, self._ev)
        # written once, or again when a name comes after a role written without one (a
        # closure's step marks the parameters before the forward inside it names them:
        # Note [A closure's step]); the ledger reads the last name
        if sid >= 0 and ((sid, role) not in self._roles_written or (
                name and (sid, role) in self._unnamed_roles)):
            self._roles_written.add((sid, role))
            if name:
                self._unnamed_roles.discard((sid, role))
            else:
                self._unnamed_roles.add((sid, role))
            self._outside.discard(sid)
            rec = {"k": "role", "sid": sid, "role": role}
            if name:
                rec["name"] = name
            if shard:  # "sharded" | "unsharded": Note [Sharded storages]
                rec["shard"] = shard
            self.sink.write(rec)
            self._sid_roles.setdefault(sid, []).append((role, name, shard))
            if shard == "sharded":   # the full weight it was cut from: Note [Sharded storages], 5
                self._name_original(sid, name)

    # Note [One storage, the gradients of several parameters]
    # `.grad` may be a view of a storage other parameters' gradients share: torchjd's
    # `jac_to_grad` splits one aggregated vector (8,802 floats, 35,208 B) into every
    # parameter's `.grad`, as a flat gradient buffer does. The storage took its first
    # parameter's name, and `show` read "gradient · inp.weight" for 34.4 KiB where
    # `inp.weight` is 1.3 KiB; it reads "inp.weight (and 11 more)" now.
    def _mark_gradients(self, params=None) -> None:
        if params is None:   # Note [Every parameter of a model, in one walk] (roots.py)
            params = [p for m in self._roots.alive() for p in all_parameters(m)]
        shared = self._grad_storages_shared(params)
        for p in params:
            # a module may hold a non-leaf in `_parameters` (MAML's fast weights, Note
            # [Weights put in a module's parameters]): it has no `.grad`, and reading one
            # warns in the script's output
            if p.is_leaf and p.grad is not None:
                self._name_gradient(p, shared)
                if type(p.grad) in self.PLAIN_TYPES:   # Note [A gradient dropped from .grad]
                    key = storage_key(p.grad)
                    if self._grad_watch.held(p, key, self._sids.get(key)):
                        self.sink.write({"k": "ungrad", "sid": self._sids[key], "ev": -1,
                                         "at": self._ev})
            if p.__dict__:   # Note [Gradients a parameter holds by another name]
                name = self._param_names.get(id(p), "")
                for attr, t in _gradient_attributes(p):
                    self._role(t, "gradient", f"{name}.{attr}" if name else "")
        # FSDP2 without gradient sync (accumulation) keeps the micro-batch's gradients on
        # the unsharded parameters it gathered: they were counted as temporaries
        for ref, name in list(self._unsharded_params.values()):
            p = ref()
            if p is not None and p.grad is not None:
                self._role(p.grad, "gradient", name)
        self._gradients_dropped()

    def _grad_storages_shared(self, params) -> collections.Counter:
        """storage key -> how many of `params`' `.grad` lie in it (Note [One storage, the
        gradients of several parameters])."""
        return collections.Counter(
            storage_key(p.grad) for p in params
            if p.is_leaf and p.grad is not None and type(p.grad) in self.PLAIN_TYPES)

    def _name_gradient(self, p: torch.Tensor, shared: collections.Counter) -> None:
        """The role of leaf `p`'s `.grad` (not None): `gradient`, by the parameter's name."""
        name = self._param_names.get(id(p), "")
        more = shared.get(storage_key(p.grad), 0) - 1 \
            if type(p.grad) in self.PLAIN_TYPES else 0
        self._role(p.grad, "gradient", f"{name} (and {more} more)"
                   if name and more > 0 else name)

    # Note [Gradients named as the engine finishes]
    # A pass's end names its gradients (`_mark_gradients`), and it runs at the first op,
    # module call, `record_function` or step after the pass (Note [A pass's end met first
    # outside an op]). A backward that is the script's last work meets none of those: the
    # script returns, its model and optimizer are freed before the trace closes, and the
    # gradients left the ledger as what backward made them, `temporary`: "resident at the
    # end" read 16,908 B `temporary` and no `gradient` after a last `loss.backward()`
    # (tests/clients/train_pass_end.py --order end: the 16,900 B of the MLP's gradients
    # and the loss's 8 B). At a pass's start (its first op inside the graph task) the
    # collector queues a callback on the autograd engine, which runs it when the graph
    # task has run its last node (every AccumulateGrad done, still inside the task): it
    # names each `.grad` of the model's leaf parameters `gradient`, by the rule of
    # `_mark_gradients`, and nothing else (the pass's end still runs where it did). A
    # role is written once per storage, so the pass's end writes nothing again. A
    # gradient set to None by hand right after the backward with no op between (DINO's
    # last layer, early in training) is named too, as it was a gradient. Read with
    # torch functions off: the doctor's probe takes a `.grad` read for the script's.
    # The callback queues itself once more as it first runs, so that it runs after every
    # callback queued before then: FSDP2's final callback, queued at the pass's start too,
    # reshards the root's parameters and puts each sharded gradient in `.grad`; run before
    # it, the unsharded gradients would be named `gradient` (tests/integration/
    # test_ranks_cli.py: 311,040 B of `gradient` where the sharded ones are 237,056 B).
    def _name_pass_gradients_last(self) -> None:
        _ENGINE.queue_callback(self._name_pass_gradients)

    def _name_pass_gradients(self) -> None:
        if self._done or self._closed:
            return
        with torch._C.DisableTorchFunction():
            params = [p for m in self._roots.alive() for p in all_parameters(m)
                      if p.is_leaf and p.grad is not None]
            shared = self._grad_storages_shared(params)
            for p in params:
                self._name_gradient(p, shared)

    def _grad_versions(self) -> dict[int, tuple[int | None, int]]:
        """id(parameter) -> (its `.grad`'s storage, version) for the parameters with one:
        a backward pass that accumulates into `.grad` (a new storage, or `+=` in place)
        changes it, `torch.autograd.grad` does not (Note [The pass that writes the
        gradients], ledger/model.py). About 1 us a parameter, twice a pass. Read with
        torch functions off: the doctor's probe takes a `.grad` read for the script's."""
        out = {}
        with torch._C.DisableTorchFunction():
            for m in self._roots.alive():
                for p in all_parameters(m):   # Note [Every parameter of a model, in one walk]
                    g = p.grad if p.is_leaf else None
                    if g is not None:
                        try:
                            out[id(p)] = (storage_key(g), g._version)
                        except (RuntimeError, NotImplementedError):
                            out[id(p)] = (storage_key(g), -1)
        return out

    def _gradients_dropped(self) -> None:
        """Note [A gradient dropped from .grad] (trace/dropped_grads.py)."""
        if self._done or self._closed:
            return
        for sid in self._grad_watch.look(self._sids):
            self.sink.write({"k": "ungrad", "sid": sid, "ev": self._ev})

    def _gradient_attribute(self, p: torch.Tensor, attr: str, t: torch.Tensor) -> None:
        """`p.<attr> = t`, a gradient by another name (Note [A parameter's gradients, as
        they are set], trace/param_attrs.py)."""
        if type(t) in self.PLAIN_TYPES:
            name = self._param_names.get(id(p), "")
            self._role(t, "gradient", f"{name}.{attr}" if name else "")

    # Note [An update inside backward is the optimizer's]
    # An optimizer stepped inside backward (optimi's gradient release, torchtune's optimizer
    # in backward: Note [An optimizer stepped inside backward], trace/steps.py) set the
    # phase "optimizer", and its first op, inside the autograd engine's graph task, switched
    # it back to "backward" as a new backward pass: the update's ops read as backward's (the
    # peak of tests/clients/train_optimi.py `--opt adamw --release --batch 1 --seq 4
    # --depth 3`, AdamW's `sqrt`, read "backward · sqrt in blocks.2.self_attn", and
    # `by_phase_peak` had no "optimizer"), every parameter's update began a backward pass
    # again (its `fwdlast` records written anew, 29 passes a backward), and `show`'s
    # activations "live just before backward", read before the last of those, were 0 B
    # (`--opt adamw --bf16 --release`: 109,324 B saved, as the same loop stepped after
    # backward reads). A step begun inside a backward pass keeps the phase "optimizer"
    # until it returns, then backward goes on, the same pass.
    # Note [A batch made in a closure]
    # `optimizer.step(closure)` with the batch drawn inside the closure (the README of
    # grokadamw has the closure compute the loss; tests/clients/train_grokadamw.py
    # `--closure` draws the batch there too): the batch was made in the phase "optimizer",
    # after the step's pre-hook, and only storages made in "setup" or "other" are batch
    # candidates, so the (64, 3) int64 tokens the embedding saves and the (64,) targets the
    # loss reads, 2,048 B, read `activation` where the same loop with the batch drawn
    # before the forward reads them `input` (`show`'s saved-for-backward table named `tok`
    # for the indices). What a step makes before its first forward is a candidate too (an
    # optimizer's own tensors are its state, named at the hooks, or freed in the step);
    # only the category moves: peaks and predictions follow each storage's own life.
    def _opt_pre(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        self._pass_end_met()   # Note [A pass's end met first outside an op]
        self._closure_batch = True
        if self._grads_at_pass is not None and self._phase == "backward" and \
                _graph_task_id() == -1:   # Note [The pass that writes the gradients]
            self._pass_wrote_grads(self._ev)
        if self._bw_steps or (self._phase == "backward" and _graph_task_id() != -1):
            self._bw_steps += 1
        if not self._nested_step() and self._steps.pre(opt) and \
                self._steps_by == "optimizer":   # a step left open by an optimizer that
            self._end_step()                     # never steps
        self._set_phase("optimizer")
        moved = self._roots.on_step(opt)        # Note [The model] (trace/roots.py)
        if moved:   # the model's names are the student's from here; the teacher's: its class
            # `was`: the label the student had, no other top-level module's from here
            # (Note [A model's former label], replay/prepared.py)
            self.sink.write({"k": "model", "ev": self._ev, "was": self._roots.was})
            self.sink.write({"k": "root", "mod": self._roots.prefix[moved[1]], "ev": self._ev})
            self._note_containers(moved[0])
            for root in moved[::-1]:   # the new model's names last: the ledger reads the
                # last, and a wrapper that held the model names it too (Note [A wrapper of
                # the model], trace/roots.py)
                self._name_state(root, self._roots.prefix[root], again=True)
        if self._lazy:
            self._name_lazy()
        self._mark_parameters(opt)
        self._mark_optimizer_state(opt)
        self._name_buffers_again()
        self._name_modules_never_called()

    # Note [A buffer replaced by assignment]
    # A module may replace a registered buffer by assigning a new tensor to its name
    # (`self.buf = self.buf.to(x.dtype)`; nn.Module's __setattr__ keeps it in `_buffers`).
    # Buffers were named when their top-level module was first called, so the new storage
    # read as an unnamed `temporary` made in the step: pytorch-metric-learning's
    # CrossBatchMemory casts its queue to the embeddings' dtype at every call
    # (`self.embedding_memory = c_f.to_device(..., dtype=embeddings.dtype)`), and under bf16
    # autocast the 2,560 B bf16 queue, kept to the end of the run, read "temporary ·
    # loss_func · _to_copy" while the fp32 one it replaced was `loss_func.embedding_memory`.
    # As for parameters (re-read from the optimizer's groups at every step), the buffers of
    # the top-level modules are read again at every optimizer step and a storage not yet a
    # buffer gets the role and the name; one already named is written once.
    def _name_buffers_again(self) -> None:
        for root in self._roots.alive():
            prefix = self._roots.prefix.get(root, "")
            for name, t in root.named_buffers():
                if type(t) in self.PLAIN_TYPES:
                    self._role(t, "buffer", ".".join(x for x in (prefix, plain_name(name)) if x))
            for path, mod in root.named_modules():   # Note [A tensor a module holds unregistered]
                for name, t in vars(mod).items():
                    if type(t) in self.PLAIN_TYPES and t.requires_grad is False \
                            and self._made_before_steps(t):
                        self._role(t, "buffer", ".".join(
                            x for x in (prefix, plain_name(path), name) if x))

    # Note [A tensor a module holds unregistered]
    # A module may keep a constant tensor as a plain attribute, not a registered buffer:
    # lambda-networks' LambdaLayer sets `self.rel_pos = calc_rel_pos(n)` (an int64 (n*n,
    # n*n, 2) index made at init) and indexes its relative position embedding with views of
    # it in every forward; `index` saves the indices, so the storage took the role
    # `activation` and `show` counted it with what the step saved: on
    # tests/clients/train_lambda_botnet.py `--mode lambda` (n = 8, two layers) 128 KiB of
    # the 400.8 KiB "activation" at the peak and of the 409.2 KiB "saved for backward"
    # (64 KiB in each block's), which no policy frees: it lives from setup to the end. A
    # plain tensor a module of the model holds, made before the first step and not requiring
    # grad, is model state: it takes the role `buffer` (above `activation`) and the name of
    # the attribute, read at every optimizer step as the buffers are. One made in a step (a
    # cache, `self.last_attn = attn`) keeps the category its use gives it, and so does one
    # the step took as its input: a GP keeps its training data so (gpytorch's ExactGP:
    # `self.train_targets`, tests/clients/test_botorch_clients.py's 128 B of targets),
    # data the script hands the model, an `input`. measure's offloader leaves such a
    # constant on the device as it leaves buffers (Note [A constant a module holds, left
    # on the device], measure/apply.py), as the replay does.
    def _made_before_steps(self, t: torch.Tensor) -> bool:
        if t.layout is not torch.strided or t.is_nested:   # no one storage to ask of
            return False
        sid = self._sids.get(t.untyped_storage()._cdata, -1)
        return sid in self._in_setup and sid not in self._inputs

    # Note [Modules never called]
    # A module the script keeps but never calls in a step has no root to name it: an EMA
    # copy (`ema = torch.optim.swa_utils.AveragedModel(model)`, updated by
    # `ema.update_parameters(model)`), a frozen copy for a later evaluation. Its weights read
    # "other · (script) · clone" in `show` (a GPT-2's EMA: 463 KiB, a seventh of the peak,
    # with no name). At each optimizer step the script's frame is read for modules (as Note
    # [Root names] reads it for a root's name); one that is neither a top-level module
    # called so far nor inside one gets its parameters and buffers named under the script's
    # name for it (`ema.module.transformer.wte.weight`), in the role `other`: the lowest,
    # so a module called later, whose tensors become parameters, keeps that category.
    # Note [A module that refuses to be walked]
    # A library's module may refuse to be walked until it is configured: pytorch-frame's
    # `StypeEncoder`s (`LinearEncoder()`, `EmbeddingEncoder()`) are made bare and given
    # their column stats by the model they are handed to; until then their
    # `named_modules`, `named_parameters` and `__call__` raise "module is not
    # fully-specified yet". A script that makes one it hands to no model (one numerical
    # encoder made for every model, used by some) runs, since nothing walks it; the walk
    # above read it at the first optimizer step and the trace died, exit 70 ("internal
    # error (ValueError: The 'LinearEncoder' module is not fully-specified yet"). Such a
    # module holds no tensors to name (it makes them when configured) and cannot have run,
    # so it is left unnamed; so is any module whose walk raises: naming is a courtesy of
    # `show`, never worth the trace.
    def _name_modules_never_called(self) -> None:
        for name, module in script_modules():
            if module in self._roots.prefix or module in self._roots.paths or \
                    module in self._never_called:
                continue
            self._never_called[module] = name
            try:
                held = [*module_named_parameters(module), *module.named_buffers()]
            except Exception:   # noqa: BLE001 - Note [A module that refuses to be walked]
                continue
            for pname, t in held:
                self._role(t, "other", f"{name}.{plain_name(pname)}")

    def _mark_parameters(self, opt: torch.optim.Optimizer) -> None:
        """The roles of `opt`'s parameters and their gradients, read from its groups."""
        params = [p for g in opt.param_groups for p in g["params"]]
        for p in params:   # every step: a storage made again since it was named gets its role
            # (FSDP2's lazy init re-makes an unevenly padded shard after the model's first
            # forward pre-hook named it; a simulated rank then read it as `temporary`)
            self._role(p, "parameter", self._param_names.get(id(p), ""),
                       shard="sharded" if getattr(p, "_local_tensor", None) is not None else "")
        self._mark_gradients(params)

    # Note [A parameter's storage swapped inside step()]
    # An optimizer may give a parameter a new storage inside its step: GaLore's 8-bit AdamW
    # (galore-torch's `GaLoreAdamW8bit`) keeps `p.saved_data = p.data.clone()`, points
    # `p.data` at the projected gradient's shape for bitsandbytes' update, sets `p.grad` to
    # the projected gradient, and ends with `p.data = p.saved_data.add_(...)`: after the
    # step, the parameter's data is the clone made in it, and its `.grad` the projection
    # (an `mm`'s output). The roles were read at the step's start only, so a step the trace
    # ended with left both as they were made: on tests/clients/train_galore.py
    # `--opt galore-8bit` (2 steps, width 32) the last step's eight weights (98,304 B) read
    # `gradient · <weight>.saved_data` (Note [A parameter's gradients, as they are set]
    # took the attribute for one) and their projected gradients (24,576 B) `temporary`:
    # `resident` said 22,016 B of parameters for a model of 120,320 B. The parameters and
    # their gradients are read again when the step returns.
    def _opt_post(self, opt: torch.optim.Optimizer, args, kwargs) -> None:
        self._closure_batch = False
        self._mark_parameters(opt)
        self._mark_optimizer_state(opt)
        in_backward = self._bw_steps == 1   # Note [An update inside backward is the
        self._bw_steps = max(self._bw_steps - 1, 0)   # optimizer's]
        if self._nested_step():  # ZeRO's inner optimizer: the outer step counts
            return
        if not self._steps.post(opt) or self._steps_by != "optimizer":  # another optimizer
            # still has to step, or steps are counted otherwise
            self._set_phase("backward" if in_backward else "other")
            return
        self._end_step()

    def _end_step(self) -> None:
        """Note [When a step ends]."""
        self._steps.reset()
        self._threads = max(self._threads, threading.active_count())
        now = time.perf_counter_ns()
        self.sink.write({"k": "step", "step": self._step, "ev": self._ev - 1,
                         "ns": now - self._step_t0})
        self._write_holders()
        self._forget_old_spans()
        self._step_t0 = now
        self._steps_done += 1
        self._step += 1
        self._makers.clear()
        self._held_over.clear()   # Note [Let go of between two backward passes]: no pass
        self._between.clear()     # of this step follows
        self._set_phase("other")
        self._write_scalars()
        self.sink.flush()
        if self.max_steps is not None and self._steps_done >= self.max_steps:
            if self.on_steps_done is not None:
                self.on_steps_done()
            self._done = True
            if self._scan_garbage:   # now, while the script's frames hold what they hold:
                # unwound by the stop, a frame a traceback keeps turns its locals to garbage
                self._garbage_end = garbage_sids(self._sids)
            raise StopTracing()

    # Note [A batch is what no step made]
    # What the script makes outside a step (between two steps, or after a backward) and
    # hands the model is its batch (`_outside`, marked `input` by the next root forward:
    # Note [A batch in a dict]). A running buffer the script keeps from the step's output
    # and hands the next forward is made there too: tests/clients/train_carried_buffer.py
    # `--where after` (`buf = buf * 0.5 + z.detach() * 0.5` after `opt.step()`, `model(x,
    # buf)`; 3 steps) read each buffer `input` (resident `input` 1,056 B: the batch's 544
    # and step 2's buffer, 512), `--where update` (before `opt.step()`) the same, where
    # `--where loss` reads it as state (Note [A state the script updates outside the
    # forward], ledger/carried.py). A batch is data no step made (a loader's, `randn`, a
    # cast or a copy of them); the buffer is made from the step's forward products. So an
    # op in the `other` phase that reads a storage made in a forward or loss phase of this
    # step or the one before (their sid spans, `_fwd_spans`, kept from the step before's
    # start: `_step_sids`), or one so made outside (`_state_made`: the old buffer, `buf *
    # 0.5`), makes no batch candidates. A storage made from a gradient (an adversarial
    # example, `x + eps * x.grad.sign()`) is still one: a backward is none of those
    # phases. The buffer then reads by its lifetime (Note [Kept by the script across a
    # step], ledger/held_roles.py): `other`, from where it was made, the script's state.
    # After: `--where after` resident `input` 544, `other` 512; `--where update` the same.
    # Cost: in the `other` phase only, one lookup per tensor argument of an op that made a
    # storage.
    def _note_state_made(self, args, kwargs, made: int) -> None:
        lo, sids, spans = self._step_sids[0], self._sids, self._fwd_spans
        state = self._state_made
        for a in (*args, *kwargs.values()):
            if not isinstance(a, _Tensor):
                continue
            try:
                sid = sids.get(storage_key(a), -1)
            except (RuntimeError, NotImplementedError):
                continue
            if sid < lo or sid >= made:
                continue
            if sid in state or any(b <= sid and (e is None or sid < e) for b, e in spans):
                for new in range(made, self._next_sid):
                    self._outside.discard(new)
                    state.add(new)
                return

    def _forget_old_spans(self) -> None:
        """Note [A batch is what no step made]: spans and sids before the step before."""
        lo = self._step_sids[0]
        self._fwd_spans = [s for s in self._fwd_spans if s[1] is None or s[1] > lo]
        self._state_made = {s for s in self._state_made if s >= lo}

    def _write_holders(self) -> None:
        """Note [Who holds a saved storage at a step's end] (trace/step_holders.py), and
        the step before's products the frames hold (Note [A history the script keeps],
        ledger/held_roles.py)."""
        sids, saved = self._sids, self._saved_mod
        lo, hi = self._step_sids   # sids the step before made: [its start, its end)
        self._step_sids = (hi, self._next_sid)

        def sid_of(t) -> int:   # saved; the step before's; this step's (Note [A state
            sid = sids.get(storage_key(t), -1)   # no op saved], ledger/carried.py)
            return sid if sid in saved or lo <= sid else -1

        try:
            held, libs = step_holders(sys._getframe(1), sid_of, self._generators.frames())
        except Exception:   # noqa: BLE001 - an object of the script's that refuses to be
            return          # read (a proxy's `__class__`): a label is never worth the trace
        names = {k: v for k, v in ((k, [s for s in v if s in saved]) for k, v in held.items())
                 if v}
        products = {k: v for k, v in ((k, [s for s in v if s not in saved and s < hi])
                                      for k, v in held.items()) if v}
        setup = self._in_setup   # the first step's `hi` is 0: not what setup made
        made = {k: v for k, v in ((k, [s for s in v if s not in saved and s >= hi and
                                       s not in setup]) for k, v in held.items()) if v}
        if names or products or made:
            rec = {"k": "holders", "step": self._step, "ev": self._ev - 1, "names": names}
            if products:
                rec["products"] = products
            if made:
                rec["made"] = made
            if libs:
                rec["libs"] = [fn for fn in libs if any(k.startswith(fn + ":")
                                                        for k in (*names, *made))]
            self.sink.write(rec)

    # Note [State made between steps]
    # The optimizer's state is read at its step hooks (Note [State outside optimizer.state]),
    # but an optimizer may fill its state between two steps: Lookahead's
    # `backup_and_load_cache()` keeps a copy of every parameter in `state[p]
    # ['backup_params']` and loads the slow weights for an evaluation, and
    # `clear_and_load_backup()` copies the copies back and deletes them before the next step
    # (pytorch_optimizer's docs evaluate so; tests/clients/train_pto.py --opt lookahead_sgd
    # --eval-slow). No step hook saw them, and the `copy_` that read them after the
    # evaluation's forward, in the loss phase, filed them as `input`: 77,328 B of "the batch"
    # that were a copy of the model held by the optimizer. The optimizers stepped so far are
    # read again when a root forward begins (one walk of their own objects per forward).
    def _mark_held_by_optimizers(self) -> None:
        for opt in list(self._optimizers):
            self._mark_optimizer_state(opt)

    def _roots_parameters(self) -> list:
        """The parameters of the top-level modules alive (Note [An optimizer that applies
        gradients], trace/optimizer_like.py: not the state of an optimizer that holds
        them)."""
        return [p for m in self._roots.alive() for p in all_parameters(m)]

    def _mark_optimizer_state(self, opt: torch.optim.Optimizer) -> None:
        """Note [State outside optimizer.state] (trace/optimizer_state.py)."""
        with contextlib.suppress(TypeError):   # one that takes no weak reference
            self._optimizers.add(opt)
        names = self._param_names
        params = self._roots_parameters() if self._appliers else ()
        for t, name in held_tensors(opt, lambda k: names.get(
                id(k) if isinstance(k, _Tensor) else k, ""), params):
            self._role(t, "optimizer_state", name)

    # ---- saved tensors --------------------------------------------------------------------
    # Note [The script's own saved-tensor hooks]
    # Autograd calls only the innermost pair of saved-tensor hooks. A script that runs its
    # forward under its own (`torch.autograd.graph.save_on_cpu()`, a library's offloader)
    # hides every save inside from the collector's pack hook: the ledger then has no
    # `saved` records there, the copies its hook makes read as temporaries, and replay
    # cannot move what it never saw saved (the peak itself stays exact: every byte is
    # still an op's). At each root forward the collector looks at the hooks in force, and
    # the first time they are not its own (nor a checkpoint's, Note [The script's own
    # checkpoint]) writes a `hooks` record with their pack function's name: `show` and
    # `predict` say so.
    def _foreign_saved_hooks(self) -> None:
        if self._hooks_noted or _top_saved_hooks is None:
            return
        try:
            top = _top_saved_hooks(False)
        except (RuntimeError, TypeError):
            return
        if top is None or top[0] == self._pack or checkpoint_pack_hook() is not None:
            return
        self._hooks_noted = True
        pack = top[0]
        name = getattr(pack, "__qualname__", "") or type(pack).__name__
        self.sink.write({"k": "hooks", "ev": self._ev, "pack": name[:200],
                         "module": getattr(pack, "__module__", "") or ""})

    def _saved(self, sid: int, mod: str, sparse: bool = False) -> int:
        """Write a `saved` record; returns how many saves of `sid` this event had before it
        (Note [A save autograd let go of unread]: which of them an `unread` names).
        `sparse`: the saved tensor was a sparse one, `sid` its values (Note [A sparse save
        stays on the device], replay/engine.py)."""
        self._saved_mod[sid] = mod
        ev = self._ev - 1
        if self._saves_at[0] != ev:
            self._saves_at = (ev, {})
        k = self._saves_at[1].get(sid, 0)
        self._saves_at[1][sid] = k + 1
        rec = {"k": "saved", "sid": sid, "ev": ev, "mod": mod}
        if sparse:
            rec["sparse"] = 1
        if not mod and not self._mod_stack:
            rec["script"] = 1   # Note [A save just after the model's forward returned]
        self.sink.write(rec)
        return k

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if (inner := wrapped_parts(t)):   # Note [Wrapper subclasses]: a save of each tensor
            mod = self._module_now()       # it holds, held by the wrapper autograd keeps
            for _, part in inner:
                sid = self._sid(part, self._ev)
                if sid >= 0:
                    self._saved(sid, mod)
                    self._note_held(sid, part, t)
            return t
        sid = self._sid(t, self._ev)
        if sid >= 0:
            mod = self._module_now()
            # a tensor with no storage of its own (a sparse layout) is saved by its values,
            # and the record says so: measure's offloader leaves such a save on the device
            # (Note [A sparse save stays on the device], replay/engine.py)
            nth = self._saved(sid, mod, t.layout is not torch.strided)
            alias = self._saved_alias(t)
            if self._phase == "backward" and alias is not t:
                self._watch_saved_again(sid, alias)
            self._note_held(sid, t, alias)
            if alias is not t:   # Note [The module of a backward op]: this save's module
                alias._memledger_mod = mod
                alias._memledger_version = t._version   # Note [Saved and then changed]
                # Note [Which save an unpack reads] (replay/prepared.py): this save's event
                alias._memledger_sev = self._ev - 1
                alias._memledger_nth = nth   # Note [Two saves at one event, read in one pass]
                if self._phase != "backward":
                    ref = weakref.ref(alias, self._on_save_gone)
                    self._save_refs[id(ref)] = [ref, sid, self._ev - 1, nth,
                                                self._bw_passes, -1, -1, self._outer_passes]
                    alias._memledger_ref = id(ref)
            return alias
        alias = self._saved_alias(t)
        if alias is not t:
            alias._memledger_version = t._version
        return alias

    # Note [What autograd saves]: the alias autograd keeps; other tensor subclasses as they
    # are. FakeCollector adds FakeTensor (its alias made through FakeTensorMode, no event).
    ALIAS_TYPES: tuple[type, ...] = PLAIN_TYPES + (torch.nn.Parameter,)

    def _saved_alias(self, t: torch.Tensor) -> torch.Tensor:
        if type(t) is _Tensor or type(t) is torch.nn.Parameter:
            with _no_dispatch():
                return t.detach()   # Note [What autograd saves]: no cycle through grad_fn
        return t

    # Note [When a saved storage is released]
    # Checkpoint and offload take autograd's references to a saved storage away; it is then
    # freed when the script's own references go: a local of the caller's frame, a view, a
    # KV cache. Last use does not tell when that is (`h = ln1(x)` in a block's forward lives
    # until the block returns, after its last use by the attention). The storage's use count
    # does: it is 1 (its Python object, which the collector made) + 1 per alias autograd holds
    # (one per save, Note [What autograd saves]) + 1 per other tensor on it. The first event
    # at which nothing else holds it is written as `released`; `ev: -1` when the script
    # still holds it as backward starts (offload cannot free it). Example: a (4, 64, 128)
    # fp32 `h` (131,072 B) saved twice is released at the event after its block returns,
    # when its use count falls from 4 to 3. Parameters and buffers are not followed.
    # An alias counts while it lives: a save on a dead branch (its node never on the loss's
    # path) goes with that branch's graph, in forward, and its alias with it. Counted to
    # the end, the script's own tensors a dead branch had saved (PyG's `HeteroConv`, whose
    # last layer's author branch reaches no loss, saves the edge index the script keeps)
    # read as released when that branch went, and `offload` was predicted to free them:
    # `offload:convs.*` 300,164 B against 302,212 B measured (tests/clients/train_pyg.py
    # --case hetero_eager); train_mech.py --case two_kinds 192,496 B against 193,008 B.
    # A saved storage freed while the script still held it (a dead branch's, in forward,
    # with the script's last reference: the function that made it returned) is released
    # at that free; written as unknown, replay freed it under offload at its last save,
    # while the function still held it: lucidrains' VectorQuantize (EMA codebook, a
    # `torch.cat` saved twice on a branch no loss reaches) `offload:vq` 8,192 B under
    # measured, ResidualVQ `offload:vq` and `selective:vq` too.
    def _note_held(self, sid: int, t: torch.Tensor, alias: torch.Tensor) -> None:
        if self._phase == "backward" and alias is not t and \
                (entry := self._held_over.get(sid)) is not None:
            # a graph-building pass saving a storage still watched: autograd's, not the
            # script's (Note [Let go of between two backward passes])
            entry[1] += 1
            entry[2].append(weakref.ref(alias, functools.partial(_alias_gone, entry)))
            return
        if self._phase == "backward" or (sid, "parameter") in self._roles_written or \
                alias is t:
            return   # (an alias that is the tensor itself adds no use)
        if (sid, "buffer") in self._roles_written:
            # counted, and followed only inside its module's calls (Note [A saved buffer
            # its module lets go of])
            entry = self._state_saves.get(sid)
            if entry is None:
                if sid in self._held or type(t) not in self.ALIAS_TYPES or \
                        t.layout is not torch.strided:
                    return   # (followed as a save before it was named a buffer: as before)
                entry = self._state_saves[sid] = [weakref.ref(t.untyped_storage()), 0, []]
                if any(sid in a.values() for a in self._attr_sids):
                    self._held[sid] = entry
            entry[1] += 1
            entry[2].append(weakref.ref(alias, functools.partial(_alias_gone, entry)))
            return
        entry = self._held.get(sid)
        if entry is None and (entry := self._held_past.get(sid)) is not None:
            # saved again in a later forward while an earlier graph still holds it: one
            # count of autograd's holds (Note [Saved again by the next chunk's forward])
            self._held[sid] = entry
        if entry is None and (entry := self._held_over.get(sid)) is not None:
            # held by the script as a pass began, its saves since let go of: the same
            # entry, so the let-go is `between` (Note [A pass inside the forward])
            self._held[sid] = entry
        if entry is None:
            if type(t) not in self.ALIAS_TYPES or t.layout is not torch.strided:
                return   # a sparse save's parts are not followed (Note [Sparse tensors])
            entry = self._held[sid] = [weakref.ref(t.untyped_storage()), 0, []]
        entry[1] += 1
        entry[2].append(weakref.ref(alias, functools.partial(_alias_gone, entry)))

    # Note [A save autograd let go of unread]
    # A node whose output the script drops at once dies at once, and so do its saves: they
    # hold their storage no longer and are never unpacked. `h.abs()` with its result
    # dropped (torchdiffeq's `t.to(y.abs().dtype)` before each call of the dynamics) saves
    # `h` outside every region; `h` is saved again inside the offloaded region. Read as a
    # holder to the end, that save kept `h` on the device in the replay, while the real
    # offloader moved the region's save and `h` went when the script let go of it: rk4
    # `offload:func` predicted 231,928 B, measured 207,668 B. So each forward save's alias
    # is watched, and its death before backward (the node's) is written as `unread` (`sid`,
    # `sev`: the save's event, `ev`); replay/engine.py reads that save as held to there.
    # Two saves of one storage at one event (a ReLU saving its output after it ran, then
    # `h.abs()`, dropped, saving its input before it runs: both recorded at the ReLU) are
    # told apart by `nth`, the save's place among that event's saves of the storage. Paired
    # in order, the ReLU's save read as the dead one and the block's checkpoint dropped
    # nothing: `checkpoint:blocks.*` 132,396 B under measured (tests/clients/
    # train_random.py `none/;none/relu;dead_save/`).
    # Note [A node a kept graph holds on]
    # Autograd lets go of a node's saves once the node ran, unless the backward keeps its
    # graph (`autograd.grad(..., create_graph=True)`: a gradient penalty, MAML's inner step;
    # `retain_graph=True`): then the node and its saves live until the script drops the
    # graph. An unpack record's `rel` (Note [When an unpacked tensor goes]) is the next
    # node's first op, which is when a node is let go of in a backward that frees as it
    # goes. Under a checkpoint a node's saves hold the region's frame (its arguments and
    # RNG state, Rule 4 of the replay): a WGAN-GP critic under `checkpoint:*` peaked inside
    # the penalty's `autograd.grad`, with the frames of the blocks whose nodes had run
    # still held, 15,168 B (three 5,056 B CPU generator states) over predicted. So an
    # unpacked save's alias stays watched, and its death once a node other than the first
    # that unpacked it has unpacked, or in a later pass (the penalty's backward runs the
    # critic's nodes again), or after its backward, is written as `let_go`
    # (`sid`, `sev`, `ev`, `nth`, as `unread`): the replay holds the frame to there. A node
    # that lets go as it returns does so before the next one unpacks: nothing written.
    def _on_save_gone(self, ref: weakref.ref) -> None:
        try:
            entry = self._save_refs.pop(id(ref), None)
            if entry is None or self._closed:
                return
            if entry[5] < 0:   # never unpacked: Note [A save autograd let go of unread]
                if self._phase != "backward" and entry[7] == self._outer_passes:
                    self.sink.write({"k": "unread", "sid": entry[1], "sev": entry[2],
                                     "ev": self._ev, "nth": entry[3]})
            elif entry[5] != self._unpack_node or entry[6] != self._bw_passes or \
                    self._phase != "backward":
                self.sink.write({"k": "let_go", "sid": entry[1], "sev": entry[2],
                                 "ev": self._ev, "nth": entry[3]})
        except KeyboardInterrupt:  # Python would swallow it here: Note [One interrupt, ...]
            redeliver()

    # Note [Let go of between two backward passes]
    # A step may run several backward passes (MAML's inner steps, each an
    # `autograd.grad(create_graph=True)`, then the outer loss's backward). A storage the
    # script still holds as one pass begins is written `released` -1 (Note [When a saved
    # storage is released]), yet the script may let go of it before the next pass, which
    # reads it again: torchopt's MetaSGD keeps a step's fast weight `w1` in the module's
    # `_parameters` through the next inner pass and replaces it by `w2` after, and the
    # outer backward reads the saves of `w1` again. Offload moves such a storage's saves
    # and the real run frees it when the script lets go of it; read as held to its
    # baseline free (which the graph the inner pass built kept: it saved `w1` again), the
    # replay kept it and its read-back copy both, 16,384 B per Linear(64, 64) weight over
    # measured (tests/clients/train_torchopt.py `--mode maml --inner 2`, `offload:blocks.*`).
    # So the storages held as a pass begins stay watched until the step's next pass begins
    # (their saves in that graph-building pass counted as autograd's), and one let go of
    # outside backward in between gets a `between` record (`sid`, `ev`), written as the
    # next pass begins; none where no pass follows in the step (a loop's locals, let go
    # of in the next step's forward, keep -1 and mean what they meant).
    # Note [A pass inside the forward]
    # `torch.autograd.functional.jacobian(..., vectorize=True)` inside a module's forward
    # (pypose's EKF linearizes its system at each filter step; tests/clients/
    # train_jacobian_inside.py) runs a backward pass over a graph of its own, in the middle
    # of the forward. Two records read it as the step's backward:
    # - The state `x` the Jacobian's part saved (as its detached input) was held by the
    #   script as that pass began: `released` -1. Its saves in that graph died with it, and
    #   the `_held` entry opened by the next save (the loss's path) counted only that one,
    #   so the let-go the entry saw was written as `released`, but not as `between` (the
    #   stale `_held_over` entry never matched): the first record, -1, won. `offload:g`
    #   kept the batch on the device: `--ref none` (3 frames, 1 step) 424 B predicted
    #   against 408 B measured. A forward save of a storage in `_held_over` now counts in
    #   that entry, as one in `_held_past` does.
    # - A save made before that pass and let go of unread after it (a reference call's
    #   graph dropped as the forward returns) wrote no `unread` (only saves since the last
    #   pass began did), so the replay held its read-back copy to the storage's free:
    #   `--ref drop` 456 against 452 (and 16 B under once the rounds were replayed). So the
    #   passes that count here are those begun outside every module call (`_bw_from`'s
    #   depth 0; a training loop's `backward()`, MAML's inner `autograd.grad`); a pass
    #   begun inside a module's forward leaves the saves watched and `unread` written.
    def _pass_begins(self) -> None:
        for sid, ev in self._between.items():
            self.sink.write({"k": "between", "sid": sid, "ev": ev})
        self._between.clear()
        self._held_over = dict(self._held)
        self._held.clear()
        self._state_saves.clear()   # the module kept them into backward: resident

    def _check_let_go_between(self, ev: int) -> None:
        for sid, _ in _let_go(self._held_over):
            self._between[sid] = ev

    def _check_released(self, ev: int) -> None:
        for sid, st in _let_go(self._held):
            if st is not None:
                self.sink.write({"k": "released", "sid": sid, "ev": ev})

    # Note [Let go of after backward, while a kept graph holds it]
    # A storage the script holds as a backward begins is `released` -1: offload cannot free
    # it in forward. Its free is where the last holder let go. Where autograd's graph
    # outlives the backward (`retain_graph=True` and a loss the script keeps: the
    # repository train.py of recurrent-memory-transformer sums each micro-batch's loss,
    # graph and all), that last holder is the graph, and the free the step's end; under
    # offload the graph holds the copy on disk, and the storage goes where the script let
    # go of it. Three micro-batches of a (40, 32) fp32 batch `x` kept in a variable until
    # the next batch: `offload:*` predicted 133,644 B against 123,404 B measured, the two
    # earlier batches (5,120 B each) held to the step's end. So such storages stay
    # watched after the backward began, while an alias of theirs lives, and the first event
    # at which only autograd holds one is written as `unheld` (`sid`, `ev`). A storage the
    # script and the graph let go of at once (a graph freed by its backward) writes none.
    # Note [Saved again by the next chunk's forward]
    # Truncated BPTT whose carried hidden state is not detached (each chunk's backward with
    # `retain_graph=True`): chunk 0's layer saves its output `h`, and `h[:, -1:]`, which the
    # script carries, is saved again by chunk 1's call (minGRU's `prev_hidden.log()`). As
    # chunk 0's backward began, `h` was moved to `_held_past` with one save; chunk 1's save
    # then opened a new `_held` entry counting only itself. Once the script let go of `h`
    # (the carried list rebound after chunk 1's forward) autograd held it twice, each entry
    # counted once, and neither wrote its let-go: `released` -1 as chunk 1's backward
    # began, and offload's replay held `h` to the step's end (2,048 B over measured on
    # tests/clients/train_carried_hidden.py, Note [Saved again after its read-back] in
    # replay/engine.py). A forward save of a storage still in `_held_past` now counts in
    # that same entry, so both watches see every save autograd holds.
    def _check_let_go(self, ev: int) -> None:
        for sid, (ref, packs, _) in list(self._held_past.items()):
            st = ref()
            if st is None or packs <= 0:
                del self._held_past[sid]   # freed, or autograd holds it no more
            elif _use_count(st._cdata) <= 1 + packs:
                del self._held_past[sid]
                self.sink.write({"k": "unheld", "sid": sid, "ev": ev})

    # Note [Read by a backward that builds a graph]
    # `autograd.grad(..., create_graph=True)` runs backward with gradients on: the ops of each
    # node's formula go into a new graph, which saves what the node unpacked (TanhBackward0's
    # `tanh_backward(grad, y)` saves `y`). Under a policy that is a re-made tensor or an
    # offload copy, held by that graph, and a later graph-building pass unpacks the region's
    # saves again and makes more. The replay prices one graph-building read per save (a
    # gradient penalty, MAML's inner step: exact); a physics-informed network's `u_x` and then
    # `u_xx` read them in two, and `checkpoint:blocks.*` measured 360,448 B over predicted.
    # Unpacks in such a pass are written with `g: 1`; predict refuses a policy on a region
    # whose saves two graph-building passes read (replay/engine.py), measure still runs it.
    # Note [Saved again by a graph-building backward]
    # An op of a node's formula in a graph-building backward that reads what the node
    # unpacked saves it again. In the baseline that save is the same storage; under a policy
    # it is the read-back copy (offload) or the re-made tensor (checkpoint), held by the new
    # graph, not by the node that unpacked it, until that graph lets go of it (the later
    # pass through it: a gradient penalty's backward, AdaHessian's Hessian pass in `step()`).
    # The replay let it go as the node returned: AdaHessian under `offload:*` measured
    # 173,568 B over predicted. Such an unpack is written with `again: 1`, and the new
    # save's alias is watched: its death is written as `again` (`sid`, `uev`: the unpack's
    # event, `ev`), which the ledger reads as the end of what that unpack read back.
    def _watch_saved_again(self, sid: int, alias: torch.Tensor) -> None:
        for s, uev, *_ in reversed(self._unpacks):
            if s == sid:
                self._saved_again.add(sid)
                ref = weakref.ref(alias, functools.partial(self._on_again_gone, sid, uev))
                self._again_refs[id(ref)] = ref
                return

    def _on_again_gone(self, sid: int, uev: int, ref: weakref.ref) -> None:
        try:
            if self._again_refs.pop(id(ref), None) is not None and not self._closed:
                self.sink.write({"k": "again", "sid": sid, "uev": uev, "ev": self._ev})
        except KeyboardInterrupt:  # Python would swallow it here: Note [One interrupt, ...]
            redeliver()

    # Note [When an unpacked tensor goes]
    # A saved tensor that checkpoint made again in backward is held by the node that unpacked
    # it until that node's apply returns, not until autograd releases the node: autograd then
    # sums a broadcast gradient to its input's shape (a Linear's bias gradient, after the
    # node returned) with the re-made tensor already gone, where without checkpoint the saved
    # tensor is still held. So each unpack record says when its node returned (`end`): the
    # event after the node's last op that made a storage, not counting those sums and casts
    # nor what runs once the node let go of what it unpacked (the sum of two gradients
    # flowing into one input, after autograd released the node: a model called twice).
    # Nor the engine's own sum of two gradients flowing into one input while it still holds
    # the node (what the node unpacked, the script holds too, so nothing tells that release):
    # once validate_outputs ran on the node's gradients (a sum or cast of `_GRAD_LAYOUT_OPS`)
    # its apply has returned, and the `add` that follows is the input buffer's. A Linear
    # called twice in a block (tests/clients/train_random.py `residual_keep/branch
    # branch;none/;none/`, the block's input kept by the model): its bias gradients are
    # summed there, and `offload:blocks.*` held the read-back input through that sum, 128 B
    # over measured (the offloader's copy had gone with the apply). A custom backward that
    # calls `sum(dim)` and then `add` inside its apply would end there too soon.
    # A node whose backward runs backward passes of its own (a reentrant checkpoint,
    # torchdiffeq's adjoint) is set aside while they run and ends where its apply does
    # (Note [A backward pass run inside a node], trace/nested_backward.py).
    # The node is autograd's current node, told apart by its sequence number. Example:
    # BERT's layers under `checkpoint`, a 64-wide bias: the peak fell inside that sum, 256 B
    # over measured.
    # Note [The module of a backward op]
    # A backward op is named by the module whose save its node unpacked, the module of
    # *that* save: a storage several modules saved (a UNet's text states, which every
    # cross-attention saves) named every node that unpacked it by its last saver. In
    # diffusers' UNet2DConditionModel checkpointing its own transformer blocks, the first
    # down block's backward unpacks those states (the script's checkpoint re-runs the
    # block on them; what the re-run saves, its nodes unpack unseen), and its whole
    # backward, the step's peak with it, read "in up_blocks.1.attentions.1". The alias
    # autograd keeps carries its save's module. A node is named first by the module whose
    # call made it (Note [The module that made a node], trace/node_makers.py): a node that
    # unpacks nothing a module saved (a `chunk`'s, a `sum`'s, a cast's) kept the last
    # unpack's module, another node's. The maker wins over the save: a save is packed while
    # the call that makes its node runs, so the two agree for a node's own saves, and they
    # part only where the unpack is not the node's: the script's own checkpoint re-runs its
    # region at the first unpack of the region's first node, which unpacks the region's
    # inputs (saved by the call that ran `checkpoint`) while its own saves come back unseen
    # (diffusers' UNet checkpointing its transformer blocks: the GEGLU's gradient, the
    # step's peak, read "down_blocks.0.attentions.0", the caller's); a node whose apply
    # runs backward passes of its own (a reversible layer's Function) comes back to its own
    # ops after the nested passes' unpacks. The save's module names the node where its
    # maker is not known: made where no module call is open (a module's method run outside
    # any call names its saves by the frame walk: Note [Work a module's method does outside
    # any call]), on another thread, AccumulateGrad; else the last unpack's, as before.
    # Note [A backward pass's first nodes]
    # The nodes a backward pass runs first are often the loss's own and unpack nothing a
    # module saved (`mean`, a division by a Python number: mmengine's `OptimWrapper`
    # backward-s `loss / accumulative_counts`); made where no module call is open, they are
    # named by the last unpack's module (Note [The module that made a node] knows only the
    # nodes made inside a call; a loss made in the model's own forward is the model's). It
    # was left as the last pass's last unpack made it: every backward after the
    # first (the second micro-batch, the next step) named those ops by the module nearest
    # the input, `embed`, while the first pass named them "" (the script). Two micro-batches
    # of `m(x, e).mean() / 2` through `a` then `b`: the second pass's 4 B quotient and
    # 1,024 B mean gradient read "in a". Each pass now starts from "" (tests/integration/
    # test_backward_module_names.py).
    # Note [Saved and then changed]
    # Autograd checks, as backward unpacks a saved tensor, that nothing changed it in place
    # since it was saved (its version counter), and raises "one of the variables needed for
    # gradient computation has been modified by an inplace operation". With saved-tensor
    # hooks installed it leaves that check out, so under the ledger pass a script that
    # fails untraced ran on: `h = relu(fc1(x)); h[..., :16].mul_(0.5)` (relu saved `h`)
    # traced to a ledger with gradients computed from the changed `h`, while the allocator
    # pass, with no hooks, failed. The alias a save hands autograd keeps the version it
    # had (the alias shares the tensor's version counter), and the unpack raises autograd's
    # error when it moved: the trace fails where the script does.
    def _unpack(self, t: torch.Tensor) -> torch.Tensor:
        if self._walking:   # `_graph_saves` reading a node's saves, not backward
            return t
        saved = getattr(t, "_memledger_version", None)
        if saved is not None and t._version != saved:
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by "
                f"an inplace operation: [{t.type()} {list(t.shape)}] is at version "
                f"{t._version}; expected version {saved} instead (raised by memledger's "
                f"saved-tensor hooks in autograd's place: the script fails so untraced too)")
        watched = False
        for part in [p for _, p in wrapped_parts(t)] or [t]:   # Note [Wrapper subclasses]
            sid = self._sid(part, self._ev)
            if sid < 0:
                continue
            node = _node_now()
            mod = getattr(t, "_memledger_mod", None) or self._saved_mod.get(sid)
            if mod is not None:
                self._bw_unpacked = mod
                if node != self._node or self._node_made is None:
                    self._bw_module = mod   # (a node's first op looks up its maker)
            if (node != self._unpack_node or not self._unpacks) and \
                    not self._another_node(node):
                self._unpack_node, self._apply_end = node, self._ev
                self._unpack_task = _graph_task_id()
                self._validated, self._val_end = False, 0
            self._unpacks.append((sid, self._ev, getattr(t, "_memledger_sev", -1),
                                  torch.is_grad_enabled(), getattr(t, "_memledger_nth", 0)))
            watched = self._watch_unpacked(sid, t, part)
        entry = self._save_refs.get(getattr(t, "_memledger_ref", -1))
        if entry is not None and entry[5] < 0:   # Note [A node a kept graph holds on]: the
            entry[5:] = self._unpack_node, self._bw_passes   # unpack its save pairs with
        # the node gets an alias of its own, whose hold the storage's use count shows
        # (Note [What a node lets go of before it returns])
        return self._saved_alias(t) if watched else t

    # Note [What a node lets go of before it returns]
    # Under checkpoint or offload, what an unpack hands a node (the re-made tensor, the copy
    # read back) is held by the node's own references alone, and goes when the node lets go
    # of it, which a Python `autograd.Function` may do long before its backward returns.
    # ring-attention-pytorch's `RingFlashAttentionFunction.backward` unpacks q, k, v, o and
    # lse, stacks k and v with their gradients to send them around the ring, and rebinds
    # `k, v, dk, dv` to that stack's parts in its first loop turn: the k it unpacked (2,048
    # B) and the qkv storage v is a view of (6,144 B) go there. The replay held them to the
    # node's end (Note [When an unpacked tensor goes]), through the whole ring loop where
    # the step peaks: on 2 ranks (gloo, `--ring --causal --no-ddp`) `offload:layers.1.0`
    # and `checkpoint:layers.*.*` were predicted 8,192 B over measured. In the traced run
    # autograd's alias still holds the storage, so the node's letting go shows only in the
    # storage's use count: read as the unpack hands it over (its alias, the graph's other
    # saves, the script's references) and again at each op while the node runs, the first
    # op at which it is back to that count is where the node held it no more, and that
    # unpack's `end` is written there when it comes before the node's return. The unpack
    # hands the node an alias of its own (detached, as the save's): autograd gives a node
    # the very tensor an unpack returns where nothing needs grad (lse, a rotary table),
    # and the node's hold of autograd's own alias changes no count (every such unpack read
    # as let go of at the next op). A C++ node holds what it unpacked to its return, so
    # nothing changes for it. Plain strided tensors only (a wrapper subclass's parts are not
    # followed, and get autograd's alias as before).
    def _watch_unpacked(self, sid: int, t: torch.Tensor, part: torch.Tensor) -> bool:
        if part is not t or type(t) not in self.ALIAS_TYPES or \
                type(t) is torch.nn.Parameter or t.layout is not torch.strided:
            return False
        w = self._unpack_watch.get(sid)
        if w is not None:
            w[2] = -1   # unpacked again by the node: held again
            return True
        # Watched through the alias autograd holds (it lives until the node is let go of),
        # not the storage's Python object, which may go (its weak reference with it) while
        # the storage lives; counted with a storage object held at both readings (one use
        # each time), before the node's own alias is made: the node holds one use more
        # while it holds that alias, or any tensor made from it.
        self._unpack_watch[sid] = [weakref.ref(part), _use_count(part.untyped_storage()._cdata),
                                   -1]
        return True

    def _check_unpacks_let_go(self, ev: int) -> None:
        for w in self._unpack_watch.values():
            if w[2] < 0 and (alias := w[0]()) is not None and \
                    _use_count(alias.untyped_storage()._cdata) <= w[1]:
                w[2] = ev

    def _another_node(self, node: int, rel: int | None = None) -> bool:
        """An op or an unpack of `node`, not the node now unpacking: write that node's
        records, or set it aside where `node` runs in a backward pass its apply started, or
        take back the node set aside where `node` is it (Note [A backward pass run inside a
        node], trace/nested_backward.py). True where the running state is now `node`'s."""
        task = _graph_task_id()
        while self._suspended and self._suspended[-1].task == task:
            top = self._suspended[-1]
            self._unpacks_done(rel)   # the nested pass's last node
            self._take_back(self._suspended.pop())
            if top.node == node:
                return True
            # another node of its pass: it returned right after its nested pass, here
            self._apply_end = self._ev if rel is None else rel
        if self._unpacks and task != self._unpack_task and started_inside(self._unpack_node):
            self._suspended.append(Suspended(
                self._unpack_node, self._unpack_task, self._unpacks, self._apply_end,
                self._validated, self._released, self._saved_again))
            self._unpacks, self._saved_again = [], set()
            self._unpack_node, self._unpack_task, self._apply_end = node, task, self._ev
            self._validated = self._released = False
            self._val_end = 0
            return True
        self._unpacks_done(rel)
        return False

    def _take_back(self, top: Suspended) -> None:
        self._unpack_node, self._unpack_task, self._unpacks = top.node, top.task, top.unpacks
        self._apply_end, self._validated, self._released = \
            top.apply_end, top.validated, top.released
        self._saved_again = top.saved_again

    def _resume_all(self, rel: int) -> None:
        """Write every node set aside (a nested pass that raised, a backward that ended
        with one still open): they end here."""
        while self._suspended:
            self._unpacks_done(rel)
            self._take_back(self._suspended.pop())
            self._apply_end = rel

    def _unpacks_done(self, rel: int | None = None) -> None:
        """Write the running node's unpack records. `rel`: the event before which autograd
        let go of the node (the next node's first op, or the first op after backward): its
        broadcast sums ran with the node still held, and so did what the node's saves
        kept alive (a checkpoint's frame and RNG state: a Linear's bias gradient is summed
        with its frame still there, Note [When an unpacked tensor goes])."""
        end = self._apply_end
        rel = self._ev if rel is None else rel
        watch = self._unpack_watch
        for sid, ev, sev, graph, nth in self._unpacks:
            w = watch.get(sid)   # Note [What a node lets go of before it returns]
            gone = w[2] if w is not None and 0 <= w[2] < end else end
            rec = {"k": "unpack", "sid": sid, "ev": ev, "end": gone, "rel": rel}
            if end < self._val_end <= rel:   # its gradients' broadcast sums ran after its
                rec["val"] = self._val_end   # apply (Note [A copy the force graph holds...])
            if sev >= 0:   # Note [Which save an unpack reads] (replay/prepared.py)
                rec["sev"] = sev
                if nth:   # Note [Two saves at one event, read in one pass] (ledger/model.py)
                    rec["nth"] = nth
            if graph:   # Note [Read by a backward that builds a graph]
                rec["g"] = 1
            if sid in self._saved_again:
                rec["again"] = 1
            self.sink.write(rec)
        for sid, *_ in self._unpacks:
            watch.pop(sid, None)
        self._unpacks.clear()
        self._saved_again.clear()
        self._released = False
        self._validated, self._val_end = False, 0
