"""Fake runs: the collector above torch's `FakeTensorMode` (shapes, dtypes and devices, no
data, no memory). `memledger trace --fake`, `check --fake` and `memledger.trace(fake=True)`
all come here through `FakeCollector` (or `FakeTarget.collector`).

# Note [Fake runs]
The mode stack, innermost last, while a fake run is recorded:

    FakeTensorMode(allow_non_fake_inputs=True)   entered first, so the script's
                                                 nn.Module construction makes fake params
    FakeCollector (a Collector)                  sees every op first, as in a real run

Rules (numbered so that code can point here):

1. Every tensor the script makes is fake: its storage is a `meta` storage of the same
   nbytes, so the ledger's rows (created/freed events, bytes) are those of the real run.
   A tensor that exists for real (made before the mode, `torch.from_numpy` of a file read
   through numpy) is a *real tensor*: FakeTensorMode fakes a copy of it when an op reads
   it. It gets a `{"k": "real"}` record (`show` gives their count and bytes) and keeps its
   real device: a batch read from a file is host memory in the real run too, counted on a
   cpu target and off the device on a cuda one; but one over numpy's memory
   (`torch.from_numpy`), and the fake lifted from it, is `external` on a cpu target, as in
   the real run (Note [Memory torch's allocator did not hand out] in trace/external.py).
   The real source of a literal (`torch.tensor(0)` behind BatchNorm's
   `num_batches_tracked`, AdamW's scalars), which `aten.lift_fresh` turns into the fake
   tensor the run uses, exists only in fake runs: its row is on device `real:cpu`, which no
   query of the target counts.
2. Ops that fake tensors send through dispatch but that allocate nothing and that a real
   run never dispatches (`prim.device` on every `.device` read, `aten.sym_size`, ...) are not
   events: event numbers stay those of the real run. `.item()` (`_local_scalar_dense`)
   allocates nothing but is an event in a real run, so it is one in a fake run too, its
   value found first (Rule 3) and handed through the collector (`ITEM_VALUE`).
3. Data-dependent values get a stand-in and a `{"k": "standin"}` record naming the line
   that read it, a library's or the script's (once per line; Note [The frame a stand-in
   names]): `.item()`, `float(t)`, `int(t)`, `bool(t)`, `.tolist()`,
   `torch.equal(a, b)`, a tensor used as an index -> 0, 0.0 or False (integer and bool
   results of up to SHADOW_NUMEL
   elements whose inputs are known are computed for real instead); a bool that comes from a finiteness check gets the
   answer of a healthy run (`isnan(loss)` False, `isfinite(loss)` True), so
   `if not torch.isfinite(loss): continue` still trains. An op whose output *size* depends
   on values (torch tags it `dynamic_output_shape`: `nonzero`, `repeat_interleave` by a
   tensor, `unique_consecutive`, ...) runs for real when its inputs are known and the fake
   takes each output's real size (Qwen-VL's patch grids); with an unknown input, `nonzero(x)`
   gets its upper bound (x.numel(), x.dim()) int64 and `masked_select(x, m)` every element
   kept; `linalg_lstsq` its sizes from the shapes and the driver, the residuals of gelsd
   and gelss at their bound (Note [A least-squares fit in a fake run], trace/fake_lstsq.py).
   `x[m]` with a bool mask `m` gets its real size where the mask's values are known
   (a padding mask of token ids) and every element kept where not (Idefics' real images
   among padding ones) (`_mask_index_size`), and `ctc_loss` with known target lengths its
   real size (`_ctc_out`: wav2vec2's CTC head). Anything else data-dependent stops the
   run: exit 2 and the line. Float results are known too where the call fixes
   them (`torch.ones(B, T)`, KNOWN_FACTORIES) or all their fake inputs are known: BART's
   decoder asks whether its float `ones` mask is all true, and a stand-in False built an
   explicit causal mask the real run does not (+8,192 B); and vision models read each
   block's stochastic-depth rate out of `torch.linspace` element by element (a float
   `unbind`), where stand-in zeros built every drop path as the identity. A known tensor
   written from unknown values (`m[:, 8:] = x`) is forgotten (`_STALE`), never answered
   with old values.
4. FakeTensorMode memoises each output FakeTensor in a WeakValueDictionary; the weakref
   makes `torch.utils.swap_tensors` refuse it, and `nn.Module._apply` swaps fake
   parameters, so `model.to(device)` fails (pytorch/pytorch#170770, open in torch 2.13).
   The collector drops that memo entry for every output: the memo only dedupes a meta
   tensor that was just made and is never seen again.
5. Target device. Where the build can make fake CUDA tensors, the script's own devices
   are used. On a CPU-only build (`torch.version.cuda is None`) fake CUDA tensors can be
   created but not initialised or run backward, so with `--device cuda` every `device=`
   argument is rewritten to `cpu`, the CPU kernels' shapes stand in, and each fake storage
   is written as `cuda:0` with its size rounded as the CUDA caching allocator does
   (see `cuda_block_bytes`). The header says `"fake_kernels": "cpu"`. Rule 8 takes back
   what a CUDA run keeps on the host.
6. FLOPs: ops in `torch.utils.flop_counter`'s registry write `{"k": "flops", "ev", "n"}`
   records, so that replay can model time without torch (memledger/replay/fake_time.py).
7. Some libraries ask whether a tensor is a FakeTensor and take another path when it is:
   transformers' `is_tracing(t)` is true for one, and its masks then take the export-safe
   path (an explicit causal mask instead of SDPA's `is_causal`). The fake run traced code
   the real run does not run (Qwen2 +98,304 B, 3.4 %). While a fake run records, such a
   question gets the real run's answer (Note [Asked whether a tensor is fake],
   trace/fake_questions.py), and Rule 3 answers the questions about values that follow.
   A library known to branch on FakeTensor that memledger does not answer would get a
   `{"k": "fake_aware"}` record, and `show` would say so (FAKE_AWARE below).
8. Under Rule 5's rewrite every storage reads as `cuda:0`, but torch.optim's Adam, AdamW,
   and the others with a tensor `step` keep that counter on the host unless the group is
   `capturable` or `fused` (`torch.tensor(0.0)` in their `_init_group`, no device). Such a
   counter gets a `{"k": "host", "sid", "bytes"}` record: the reader moves it to `cpu` at
   its unrounded size, so a CUDA target's optimizer state is exactly 2 x the parameters
   for AdamW (it read 512 B more per parameter tensor: 149 KB on Llama-2 7B's 291).
9. Autograd saves a fake tensor through the collector's pack hook as it saves a real one
   (Note [What autograd saves], trace/collector.py): as a detached alias, made by
   FakeTensorMode with the collector looking away (no event). Before, a fake tensor was
   saved as itself: an op that saves its own output (`linalg.vector_norm`, `tanh`) then
   held its own graph node in a C++ cycle, and a graph backward never reached stayed
   alive. peft's DoRA makes one per adapted Linear at setup (the weight norm, whose graph
   `nn.Parameter(...)` drops): 4 x 64 x 64 x 4 B = 65,536 B of `activation` the real run
   frees at once, held to the end of the fake run (tests/clients/train_zoo.py --model
   llama-dora). The alias also lets the release of a saved fake storage be followed, as a
   real one's is (Note [When a saved storage is released]).
10. A kernel whose outputs' dtypes torch's fake implementation gets wrong is corrected
   (`_layer_norm_stats_in_float`, `_cpu_mixed_type`). `native_layer_norm` keeps its mean and rstd for
   backward (B·T values each). The CPU kernel makes them fp32 when the input is bf16/fp16
   and the weight fp32 (its mixed-type path: a LayerNorm under `torch.autocast("cpu")`, a
   bf16 activation into fp32 weights), the CUDA kernel always for a bf16/fp16 input (its
   accumulate type); torch's fake one (`native_layer_norm` in torch/_refs) casts them to
   the input's dtype on CPU. DistilBERT under CPU autocast bf16 (tests/clients/train_hf.py,
   B=2, T=32): each saved pair read 2 x 64 x 2 = 256 B where the real run keeps 512 B.
   The CPU kernels of group norm and batch norm take the same mixed-type path (their
   meta kernels too keep the input's dtype): a whole forward under CPU autocast with a
   GroupNorm(4, 32) at batch 64 read 1,024 B less saved than the real run, a BatchNorm1d(32)
   128 B (tests/clients/train_random.py --menu deep --amp); and group norm's backward meta
   kernel then made grad_input in the statistics' fp32 where the kernel makes it in the
   input's dtype (`_GradInputAsInput`). Their CUDA kernels are left to torch's rule: not
   yet compared on a GPU.
11. A kernel whose meta implementation disagrees with the CPU kernel standing in gets the
   CPU kernel's output (`_CpuKernel`). `_grouped_mm` (transformers' MoE experts, Mixtral,
   on CPU in fp32): the meta kernel copies the CUDA kernel's bf16-only check, so the fake
   run crashed where the real one trains, and on a CPU-only build makes a contiguous output
   where the CPU kernel (as the CUDA one) pads each row's stride to 16 bytes.
   `bernoulli.out` into a tensor of another dtype (a bool mask drawn from float
   probabilities): the fake kernel refuses the cast, the kernel draws in place (Note
   [Bernoulli draws into a bool tensor]).
12. A deep copy of a fake tensor keeps the run's mode (`_RunMode`): `copy.deepcopy(model)`
   copied the mode with each tensor, and the copies were then faked again as foreign.
13. FakeTensorMode's sparse ops keep no entries (`clone`, `_coalesce`, a sparse `t`: nnz
   0). Each sparse COO result keeps a real twin made by running the op for real on its
   inputs' twins, and takes the twin's entries and part storages (Note [Fake sparse
   tensors], trace/fake_sparse.py). An op whose inputs have no twin (or that fails for
   real) still loses them; it gets a stand-in record naming the line, not a silent 0 B.
   A sparse tensor made from a dense one whose values the run does not know
   (`dense.to_sparse()`, `.to_sparse_csr()`) counts every element an entry, the upper
   bound, said at its line as `nonzero`'s is (Note [A sparse tensor made from a dense
   one], trace/fake_sparse.py).
14. A reduced `mse_loss` (and `smooth_l1_loss`, `binary_cross_entropy`,
   `soft_margin_loss`) on the host keeps its unreduced input-sized buffer under the 0-dim
   loss; its row has those bytes (trace/fake_losses.py).
15. torch picks foreach or a per-tensor loop by the tensors' types (`_foreach_supported_types`)
   and the device; a fake parameter is a FakeTensor, so every fake run looped where a real
   CUDA run's optimizer takes foreach (+501,720 B on examples/train_mlp.py, seen on an
   H200). The fake run answers as the real one would (Note [Foreach as in the real run],
   trace/fake_questions.py).
16. Batch norm's kernels (CPU and CUDA) make their output dense in the format torch
   suggests for the input; the meta kernel keeps the input's strides. `bn(h.transpose(1,
   2)).transpose(1, 2)` (BatchNorm over a sequence's channels) then read as contiguous in a
   fake run, and the Linear after it skipped the copy of its input that the real run makes
   (131,072 B the fake ledger lacked, saved for backward; tests/clients/train_random.py
   --menu wide, `batchnorm`). Its output is made dense as the kernel makes it
   (`_DenseOutput`), forward and backward. Layer norm's backward (CPU and CUDA) makes its
   grad_input contiguous whatever the incoming gradient's strides; the meta kernel takes
   the gradient's. Behind a `transpose` (PVT-v2's and SegFormer's stage norm, then
   `reshape(B, H, W, C).permute(0, 3, 1, 2)`), the fake gradient reached the Linear
   below it transposed and its `reshape` copied it: 20,480 B the real run never makes,
   at the fake ledger's peak (`_DenseOutput` with no `like`: contiguous).
17. An in-place op on a view rebuilds the view's backward: as `AsStridedBackward0` for a
   plain tensor (a zeroed buffer the base's size in backward), by replaying the view for a
   FakeTensor (nothing). The fake run makes that buffer where the real run does, by a
   post-hook on the rebuilt node (Note [A view written in place, in backward],
   trace/fake_views.py).
18. Split sizes read from tensor values (`expert_size = gates.long().sum(0).tolist()`,
   then `inputs.split(expert_size)`: JetMoE's and other scatter-MoE routers) are Rule 3's
   stand-in zeros, which `split_with_sizes` refuses as not summing to the dimension. A real
   run never gets there (its sizes sum), so sizes that do not sum are stand-ins: the
   dimension is split evenly among as many parts (`even_split`), a router that balances
   its experts, and a stand-in record names the line. The parts' sizes move bytes between
   experts, not their sum: the experts' outputs, concatenated, are the real run's size.
19. `torch.tensor(list)` reads each element's memory itself, and a fake element has none:
   known elements (Rule 3's shadows) are replaced by their values (Qwen2-VL's rotary
   position deltas; trace/fake_literals.py).
20. A real tensor an op reads (weights loaded for real: `from_pretrained`, `torch.load`)
   is faked by FakeTensorMode for the op, once (its converter keeps the fake), and that
   fake is the same memory: its storage is the real one's sid. Before, the fake's storage
   was a storage of its own, first met as the output of the view that read it: every
   Linear's `t()` of its weight was a new 'activation' its `mm` saved, and a Llama
   fine-tuned from `from_pretrained` read 360,448 B (17 %) over its real run
   (tests/clients/train_resume.py --format from-pretrained). A literal's source (Rule 1)
   is not one: `lift_fresh` makes the fake the run uses, a storage on the target.
21. A random op whose result Rule 3 computes for real (`torch.randint`, `multinomial` of
   known weights, `randperm`) draws from the process's generator, which is where the real
   run's is only while every draw before it from that generator was made for real too:
   the draws a fake run does not make (a parameter's `uniform_` init, a dropout mask, any
   float draw) leave it behind. kornia's RandAugment picks its operations by `randperm`
   after the model's init: the fake run picked others, silently, and its
   ledger read 25,224 B over the real one. Such a draw stays (its values are a plausible
   run's), but is a stand-in, said once per line ("a draw of its own, not the real run's";
   Note [Draws a fake run makes for real] in trace/fake_random.py). A draw from a CPU
   generator whose values are not kept (a float draw), the script's own or the default
   one of a CPU target, is made for real all the same on scratch inputs, up to 2^20
   elements a draw and 2^26 in all per generator, so that generator stays with the real
   run's (its Rules 4 and 5: tests/doctor/sparse_embedding.py's ids, 7,680 B under the
   real ledger before); a draw counted by its inputs' values (`poisson`) leaves it behind,
   an attention kernel with `dropout_p=0` draws nothing (its Rule 6).
22. `.numpy()`: known values are handed back, a single element gets Rule 3's stand-in (a
   loss logged as `loss.detach().numpy().item()`: TabNet's `fit`); anything else stops
   the run as before (trace/fake_literals.py).
23. A fake about to be swapped by `module.to(...)` lets go of the literal FakeTensorMode
   keeps as its `constant` (and the weak references to it that made the swap fail):
   gpytorch's `ScaleKernel` moved to float64 by botorch (trace/fake_swap.py).
24. `F.one_hot` whose width (`num_classes`, or the input's largest value with -1) is read
   from values the run does not have stops the run (exit 2, the line): a stand-in width
   of 0 made ST-MoE's router dispatch no token, silently 23 % under (trace/fake_literals.py).
25. A deep copy of a fake tensor that keeps its literal as a real `constant` (one element:
   `torch.tensor(0.0)`) copies that constant with the modes off: inside the run's mode
   torch's own `Tensor.__deepcopy__` failed on it ("set the storage of a tensor on device
   meta to a storage on ... cpu", plain FakeTensorMode too), and every torchmetrics
   metric deep-copies its states' defaults as it is built (`add_state`), so a fake run
   stopped at the first metric (trace/fake_literals.py; tests/clients/
   train_ema_metrics.py).
26. A fake tensor's `data_ptr()` is its storage's address stand-in, not 0 for all: heavyball
   keys its optimizer state by address, and every fake run of it stopped at the first step
   (Note [A data pointer per fake storage], trace/fake_pointers.py).
27. `module.to(device)` to where the fake parameters are already is no swap: torch's
   `_apply` swaps a fake parameter always (a real one keeps its object), which poisoned
   the gradient accumulator the graph held; soft-moe-pytorch moves its experts in every
   forward, and a checkpoint's re-run of it stopped every fake run in backward (Note [A
   swap that changes nothing], trace/fake_swap.py).
28. A collective's results are not the fake process group's (Note [What a collective
   writes]): the tensors a c10d op writes (`all_gather`'s outputs, `all_reduce`'s tensors,
   ...) lose the values Rule 3 knew, and no shadow is computed by running one for real on
   the fake group, which moves nothing. Where the values it reads are known, it writes what
   it would if every rank held this rank's values, a stand-in said at its line (Note [A
   symmetric world], trace/fake_collectives.py): ring-attention-pytorch's gathered batch
   sizes, soft-moe-pytorch's token counts.
29. An op's output keeps the storage the op made, not its view's extent: FakeTensorMode's
   dispatch cache makes a cache hit's output anew by `empty_strided(shape, stride)`, and
   `torch.hann_window(64)` (periodic: 65 elements made, the first 64 returned) read
   260 B on its first call and 256 B on each later one, 4 B under the real run per window
   (BS-RoFormer's STFT windows, tests/clients/train_bsroformer.py: the fake ledger 12 B
   under the real one). The run's mode does not cache an output whose storage is larger
   than its view (`_RunMode`), and keeps caching the rest.
30. A DataLoader with worker processes loads in the run's own process, the workers' fetch
   unseen and each batch arriving as from shared memory, with the real run's events (Note
   [A DataLoader's workers in a fake run], trace/fake_loader.py): a forked worker of a fake
   run died at its collate, and `trace --fake` stopped with exit 3.
31. A `ZeroDivisionError` (or `math`'s domain error) the script raises after a stand-in
   zero was handed out is the fake run's limit: exit 2, one line naming the script's line,
   the library's, and the stand-in (Note [Arithmetic on a stand-in],
   trace/fake_arithmetic.py): DAdaptSGD divides by the square root of `.item()` sums, and a
   fake run ended in its `ZeroDivisionError`'s traceback, exit 3.
32. A deep copy of a fake tensor keeps its whole storage, as a real one does (a view of a
   larger storage copies the storage, not the view's extent): torch clones a fake tensor
   instead, and torch-harmonics' grids (views of `linspace(..., n + 1)[:-1]`, deep-copied
   by its `lru_cache(copy=True)`) read 8 B under the real run each (Note [A deep copy keeps
   the whole storage], trace/fake_literals.py).
33. A deep copy of a fake parameter copies what a real one's does, its values alone:
   under FakeTensorMode `nn.Parameter(...)` is a FakeTensor flagged `_is_param` (torch's
   path for tensor subclasses), so `copy.deepcopy` ran `Tensor.__deepcopy__`, which copies
   the gradient too, where a real run's `Parameter.__deepcopy__` clones the data only
   (Note [A fake parameter's deep copy], trace/fake_literals.py).
34. A bool read off values (Rule 3: `torch.allclose`, `torch.equal`, `bool(t)`, `.item()` of
   a bool tensor) where the code reading it raises on one way and not on the other (`assert
   torch.allclose(y, x)`, `if not ok.all(): raise ...`) gets the value that goes on, as a
   real run that trains does, said at its line with why: hl-gauss-pytorch's init checks
   `symexp(symlog(x))` against random `x` with an asserted `allclose`, and the stand-in
   False stopped every `--symlog` fake run there (Note [A check a run that trains passes],
   trace/fake_checks.py). Elsewhere the stand-in stays False.
35. `format(t, spec)` of a 0-dim fake tensor (`f"{loss:.4f}"`) is what torch makes of a
   plain tensor, `t.detach().item()` formatted, so it reads Rule 3's stand-in at its line
   as `f"{loss.item():.4f}"` does; before, FakeTensor's `object.__format__` refused the
   spec and the run stopped (exit 2), or with no spec printed "FakeTensor(...)"
   (trace/fake_literals.py).
36. A float draw whose values the real run draws too is computed for real and its values
   kept (a shadow, as Rule 3's integers): a draw from a CPU generator in step with the
   real run's (Rule 7 of Note [Draws a fake run makes for real]: the script's own, or the
   default one of a CPU target, no draw missed before it), of at most SHADOW_NUMEL
   elements, whose tensor inputs are known or read only for their kind (`torch.rand_like
   (x)`). Before, Rule 5 made it for real only to move the generator and dropped its
   values: dropout written by hand, `keep = torch.rand(32, 64) < 0.25`, was unknown, and
   the `masked_select`, `nonzero` and `to_sparse` it fed took their upper bounds (every
   element, a fake peak of 166,148 B against the real 80,032; tests/integration/
   test_fake_seeded_values.py); a seeded batch `torch.randn(B, D)` and the targets made
   from it were unknown, and hl-gauss-pytorch's support built from their running mean
   and variance read `.item()`'s stand-in 0.0 and stopped `--running-stats` at its
   "support must be increasing" assert. A draw in place into a tensor whose values are
   unknown (a parameter's `uniform_` init) keeps them unknown: its values are a model's
   size, and a model made known would be run for real. A draw from a generator behind
   keeps Rule 5's path (values dropped), since its values are not the real run's.

Worked example (MLP of examples/train_mlp.py, B=64, fp32, fake, target cpu): fc1.weight is
a fake 512×256 tensor whose meta storage has 512·256·4 = 524,288 bytes; its row is the
same 524,288 bytes made by `aten.empty` in setup as in the real run. Traced with
`--device cuda` on a CPU build the head's bias (10 floats = 40 bytes) becomes one 512-byte
block: 512 bytes on `cuda:0`, as `torch.cuda.memory_allocated` would count it.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch._prims_common import suggest_memory_format
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
    _BypassDispatchCache,
)
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.flop_counter import flop_registry

from memledger.trace.collector import Collector, _written_args, kept_as_made
from memledger.trace.external import external
from memledger.trace.fake_arithmetic import is_zero_error, zero_arithmetic_line
from memledger.trace.fake_checks import ANSWERED as CHECK_ANSWERED
from memledger.trace.fake_checks import passing_value, reading_frame
from memledger.trace.higher_order import is_higher_order, run_by_its_ops
from memledger.trace.fake_collectives import HANDS_ON, SYMMETRIC, symmetric_writes
from memledger.trace.fake_literals import KnownLiterals
from memledger.trace.fake_loader import LoadsInProcess
from memledger.trace.fake_lstsq import lstsq_is_bound, lstsq_outputs
from memledger.trace.fake_losses import reduced_loss_bytes
from memledger.trace.fake_pointers import DistinctPointers
from memledger.trace.fake_questions import ForeachAsReal, RealAnswers
from memledger.trace.fake_random import RandomDraws, seeded as _seeded
from memledger.trace.fake_sparse import SPARSE_LAYOUTS, twin_of
from memledger.trace.fake_sparse import as_real as sparse_as_real
from memledger.trace.fake_sparse import part_device as sparse_part_device
from memledger.trace.fake_sparse import stand_in_of as sparse_stand_in
from memledger.trace.fake_swap import ConstantsLetGo
from memledger.trace.fake_views import RebuiltViews
from memledger.trace.sharding import is_collective
from memledger.trace.warning_sites import WarningSites

aten = torch.ops.aten

# The CUDA caching allocator rounds every request up to a multiple of 512 bytes
# (kMinBlockSize = 512 and round_size() in c10/cuda/CUDACachingAllocator.cpp:
# "constexpr size_t kMinBlockSize = 512; // all sizes are rounded to at least 512 bytes").
CUDA_BLOCK_BYTES = 512

# Rule 2: dispatched for fake tensors only; they allocate nothing.
NOT_EVENTS = frozenset({
    torch.ops.prim.device.default, aten.sym_size.default, aten.sym_size.int,
    aten.sym_stride.default, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.is_contiguous.default,
    aten.is_contiguous.memory_format, aten.is_strides_like_format.default,
    aten.is_non_overlapping_and_dense.default,
})

_SET_STORAGE = aten.set_.source_Storage_storage_offset   # Rule 30
_SET_STORAGE0 = aten.set_.source_Storage

# Rule 1: `torch.tensor(literal)` makes a real tensor that this op turns into a fake one.
LIFT_FRESH = aten.lift_fresh.default
_REAL_TYPES = (torch.Tensor, torch.nn.Parameter)   # Rule 20: real tensors in a fake run

# Rule 3: `.item()` and everything that reads a value out of a tensor.
ITEM = aten._local_scalar_dense.default

# Rule 6: FLOP formulas by op packet. CPU attention kernels are not in torch's registry;
# they do the same work as the flash kernels, so they borrow those formulas.
FLOPS: dict[Any, Any] = dict(flop_registry)
for _cpu, _like in (("_scaled_dot_product_flash_attention_for_cpu",
                     "_scaled_dot_product_flash_attention"),
                    ("_scaled_dot_product_flash_attention_for_cpu_backward",
                     "_scaled_dot_product_flash_attention_backward")):
    if hasattr(aten, _cpu) and getattr(aten, _like) in flop_registry:
        FLOPS[getattr(aten, _cpu)] = flop_registry[getattr(aten, _like)]

# Rule 13: FakeTensorMode's sparse ops (`clone`, `_coalesce`, `sparse_mask`) return COO
# tensors with no entries whatever their input's. AccumulateGrad's copy of
# `nn.Embedding(sparse=True)`'s gradient is read as the gradient it copies (Note [A sparse
# gradient kept as made], trace/collector.py), so the gradient's own bytes are right; but
# the copy is what the script's optimizer reads, and SparseAdam's step on it makes nothing
# (tests/doctor/sparse_embedding.py --batch 256 --ids 20: 6,426,616 B of the step's
# temporaries, 41 % of the real peak). Now modelled by real twins (Note [Fake sparse
# tensors], trace/fake_sparse.py); an op the twins cannot answer still loses its entries,
# and the first such op on each line gets a stand-in record, `show` prints it.
SPARSE_NOTE = "nnz 0: FakeTensorMode kept no entries of this sparse tensor (its bytes read 0)"
SPARSE_PARTS_NOTE = ("nnz 0: FakeTensorMode runs this compressed sparse tensor with no "
                     "entries (its parts' bytes are the real run's; what is made from its "
                     "entries reads 0)")   # Note [Fake compressed layouts]
SPARSE_GRAD_NOTE = ("nnz 0: FakeTensorMode kept no entries of this sparse gradient (its own "
                    "bytes are counted; what reads it, a sparse optimizer's step, reads 0)")


def _lost_entries(args, out) -> bool:
    """Rule 13: a sparse result with no entries from a sparse input that had some."""
    if out.layout not in SPARSE_LAYOUTS or out._nnz() != 0:
        return False
    return any(isinstance(a, torch.Tensor) and a.layout in SPARSE_LAYOUTS and a._nnz() > 0
               for a in args)

# Rule 3: integer and bool results up to this many elements are also computed for real
# (batch indices, token ids, masks), so `data[i:i + T]` slices T tokens, as in the run.
SHADOW_NUMEL = 1 << 20   # 8 MiB of int64 at most
# Rule 7: imported by the script, these branch on FakeTensor; what that changes
# (none now: transformers' question is answered, trace/fake_questions.py)
FAKE_AWARE: dict[str, str] = {}

# Rule 1: the device name of a real storage in a fake ledger ("real:cpu"): queries of the
# target device never count it.
REAL_PREFIX = "real:"

FAKE_ERRORS = (DataDependentOutputException, DynamicOutputShapeException,
               UnsupportedOperatorException)

# Note [The frame a stand-in names]: directories end in a separator, so torch's does not
# hold torchmetrics, torchvision or torchmdnet, nor memledger's a memledger_* package
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def cuda_block_bytes(nbytes: int) -> int:
    """Bytes the CUDA caching allocator hands out for a request of `nbytes`.

    >>> cuda_block_bytes(40), cuda_block_bytes(512), cuda_block_bytes(513)
    (512, 512, 1024)
    """
    if nbytes <= 0:
        return 0   # malloc(0) returns no block
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def fake_cuda_kernels() -> bool:
    """Whether this build of torch can run fake CUDA tensors (Rule 5)."""
    return torch.version.cuda is not None or torch.version.hip is not None


@dataclass(frozen=True)
class FakeTarget:
    """Where the fake run pretends to be.

    device: the target device as the ledger names it ("cpu", "cuda:0"); "" for the
        script's own devices (each storage keeps its fake device).
    kernels: "cuda" (fake CUDA tensors) or "cpu" (CPU kernels stand in, Rule 5).
    rounding: allocator block size applied to every fake CUDA storage (0: none).
    """

    device: str = ""
    kernels: str = "cpu"
    rounding: int = 0

    @classmethod
    def for_device(cls, device: str | None) -> "FakeTarget":
        """The target for `--device` (validated by fake_options.check_fake_options)."""
        native = "cuda" if fake_cuda_kernels() else "cpu"
        if device is None:   # the script's own devices; CUDA storages (if any) rounded
            return cls("", native, CUDA_BLOCK_BYTES)
        dev = torch.device(device)
        if dev.type == "cpu":
            return cls("cpu", "cpu", 0)
        if dev.type != "cuda":
            raise ValueError(f"fake runs target cpu or cuda, not {device!r}")
        return cls(f"cuda:{dev.index or 0}", native, CUDA_BLOCK_BYTES)

    def storage_device(self) -> str:
        """The device name for a fake storage seen without its tensor (FSDP2's
        `storage.resize_`): the target, else where this build's fake kernels run."""
        return self.device or ("cuda:0" if self.kernels == "cuda" else "cpu")

    @property
    def remap(self) -> bool:
        """CPU kernels stand in for another device: rewrite `device=` arguments."""
        return self.kernels == "cpu" and self.device.startswith("cuda")

    def header(self) -> dict[str, Any]:
        return {"fake": True, "target_device": self.device or "(the script's own)",
                "fake_kernels": self.kernels,
                "rounding_bytes": self.rounding, "measured": "none (fake run: no allocator)"}

    def collector(self, sink, **kwargs) -> "FakeCollector":
        return FakeCollector(sink, target=self, **kwargs)


# Note [The frame a stand-in names]
# A stand-in record (Rule 3), and the one line of a fake run that cannot go on
# (`cannot_run_fake_line`, Rule 24's one-hot), name the innermost frame outside torch,
# memledger, runpy and frozen importlib: the line that read the value, a library's where
# a library read it (hl_gauss.py:131), the script's where the script did or torch's own
# Python did for it (`torch._assert`), as a library's warnings are shown at
# its line (Note [A warning the script's op raised]). The test was a prefix of the file's
# path, and torch's directory without its separator (`.../site-packages/torch`) is a
# prefix of every library whose name begins with "torch": torchmdnet's `resize_to_fit`,
# torchmetrics, torch_geometric, torchsde, ... were read as torch, and their lines named
# the script's call (torchmd-net `--model et`: 4 stand-ins, all at train_torchmdnet.py:103
# to :120, once per line, so "2 sizes took their upper bound"; now 15, at
# torchmdnet/models/utils.py:306 and on, "10 sizes"; the ledger is unchanged). Both
# directories now end in a separator. `show` and `check` print a library's file by its
# path under site-packages (`standin_site`, ledger/fake_info.py): `utils.py` alone names
# no one file.
def user_frame(skip_memledger: bool = True):
    """The innermost frame outside torch, memledger and runpy: the line that reads a value
    (Note [The frame a stand-in names])."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_TORCH) or (skip_memledger and fn.startswith(_HERE))
                or fn.startswith("<frozen") or fn.endswith("runpy.py")):
            return f
        f = f.f_back
    return None


def _where_text(filename: str, line: int) -> str:
    code = linecache.getline(filename, line).strip()
    return f"{os.path.relpath(filename) if filename else '?'}:{line}" + (
        f" `{code}`" if code else "")


def _shadow_of(t: torch.Tensor) -> torch.Tensor | None:
    """The real values behind a tensor, where known: a real tensor is its own; a fake one
    has a shadow (small integers computed for real) or a FakeTensorMode constant (the one
    it held before the op being recorded wrote it: Note [A literal written in place])."""
    if not isinstance(t, FakeTensor):
        return t
    if _BEFORE and (c := _BEFORE.get(id(t))) is not None:
        return c
    s = _shadow_tensor(t)
    if s is not None and s.untyped_storage()._cdata in _STALE:
        return None        # written by an op whose values are unknown: no longer the values
    return s if s is not None else t.constant


class _Shadow:
    """Rule 3: the real values behind a fake tensor, kept in its `__dict__`. `copy.deepcopy`
    of a module copies that dict inside the run's FakeTensorMode, where copying a real
    tensor's storage fails ("set the storage of a tensor on device meta to a storage on
    ... cpu": an EMA copy of GPT-2 whose zero biases were known); so a copy clones the
    values with the modes off."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __deepcopy__(self, memo) -> "_Shadow":
        with _disable_current_modes():
            return _Shadow(self.t.clone())


def _copied(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Write known values into a shadow in place (False where torch refuses: an expanded
    view's elements share memory)."""
    try:
        dst.copy_(src)
    except RuntimeError:
        return False
    return True


def _shadow_tensor(t) -> torch.Tensor | None:
    s = getattr(t, "_memledger_shadow", None)
    return s.t if s is not None else None


# Note [A literal written in place]
# A literal's fake (`self.register_buffer('running_mean', torch.tensor(100.))`) is known by
# the constant FakeTensorMode keeps for it (Rule 3). An in-place op whose other inputs are
# not FakeTensorMode constants (`running_mean.copy_(mean)`, `mean` known by our shadow)
# makes FakeTensorMode drop the constant before the op returns, so Rule 3, which looks at
# the inputs after the op, read the destination as unknown, and the op's result, known in
# every input, as unknown too. hl-gauss-pytorch's `RunningMeanVariance` updates its mean
# and variance so from each batch's targets; its support (`linspace` of mean +- 3 std) read
# Rule 3's stand-in 0.0, a support of one point, and its "support must be increasing"
# assert stopped `trace --fake -- --running-stats` (exit 3). So the constants an op writes
# are taken before it runs, and where FakeTensorMode dropped one, Rule 3 reads it as what
# it held before the op (`_BEFORE`, for that op alone): `_real` runs the op on a clone of
# it (FakeTensorMode's own constant is never written), and the result is the tensor's
# shadow from then on. Worked example: `torch.manual_seed(0); m = torch.tensor(100.);
# m.copy_(torch.randn(8).mean())` (the draw known by Rule 36): before, `m.item()` read the
# stand-in 0.0; now -0.2006, as the real run. Only the op being recorded reads `_BEFORE`.
_BEFORE: dict[int, torch.Tensor] = {}


def _written_constants(func, args) -> list[tuple[FakeTensor, torch.Tensor]]:
    """Note [A literal written in place]: (tensor, constant) of each FakeTensorMode constant
    the op writes in place, taken before it runs."""
    written = _written_args(func)
    if not written:
        return []
    return [(t, t.constant) for i in written if i < len(args)
            and isinstance(t := args[i], FakeTensor) and t.constant is not None]


# Rule 3: storages of shadows an op wrote without its values being known (`m[:, :5] = x` with
# `x` a fake activation). Their values are no longer the run's, so they are not answered.
_STALE: set[int] = set()


# Rule 3: what a finiteness check answers when the data is healthy (finite), by op packet.
# `torch.isfinite(x)` reaches dispatch as (x == x) * (abs(x) != inf). torch.distributions
# validates a parameter as `torch._is_all_true(constraint.check(x))`, `Real()` being `x == x`:
# `Categorical(logits=...)` (SophiaG's Hessian refresh samples its labels so) raised on the
# stand-in False until `_is_all_true` carried the answer through.
_INF = (float("inf"), float("-inf"))
_HEALTHY_LEAF = {aten.isnan: False, aten.isinf: False, aten.isposinf: False,
                 aten.isneginf: False}
_HEALTHY_SAME = frozenset({aten.any, aten.all, aten.clone, aten.detach, aten.alias,
                           aten.view, aten.reshape, aten.squeeze, aten.unsqueeze,
                           aten.expand, aten.select, aten._to_copy, aten.lift_fresh,
                           aten._is_all_true, aten._is_any_true})
_HEALTHY_NOT = frozenset({aten.logical_not, aten.bitwise_not})
_HEALTHY_OR = frozenset({aten.logical_or, aten.bitwise_or, aten.add})
_HEALTHY_AND = frozenset({aten.logical_and, aten.bitwise_and, aten.mul})


def _mark_healthy(func, args, out: torch.Tensor) -> None:
    """Tag a bool result with its value in a run whose data is finite, where the op says:
    `isnan(x).any()` -> False, `isfinite(loss)` -> True, `~isfinite(g).all()` -> False."""
    packet = getattr(func, "_overloadpacket", None)
    value = _HEALTHY_LEAF.get(packet)
    if value is None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        known = [getattr(a, "_memledger_healthy", None) for a in tensors]
        if packet in (aten.eq, aten.ne) and len(args) == 2:
            if args[0] is args[1]:                       # x == x: not NaN
                value = packet is aten.eq
            elif not isinstance(args[1], torch.Tensor) and args[1] in _INF:
                value = packet is aten.ne                # abs(x) != inf: finite
        elif not tensors or None in known:
            return
        elif packet in _HEALTHY_SAME:
            value = known[0]
        elif packet in _HEALTHY_NOT:
            value = not known[0]
        elif packet in _HEALTHY_OR:
            value = any(known)
        elif packet in _HEALTHY_AND:
            value = all(known)
    if value is not None:
        out._memledger_healthy = value


class _StandIn:
    """What runs in an op's place in a fake run; the collector names it as the op."""

    def __init__(self, op, name: str = "") -> None:
        self.op = op
        self.__name__ = name or op.__name__
        self._overloadpacket = op._overloadpacket
        # the op's own name, as the collector reads it for autocast's casts (Note [An
        # LSTM's oneDNN workspace]: an LSTM under bf16 autocast stopped the fake run at
        # its stand-in, "'_CpuKernel' object has no attribute '_opname'")
        self._opname = op._opname
        # the arguments it writes, read by the collector (Note [Storages grown inside an
        # op], Note [Written in place in forward]): batch norm's running statistics
        self._schema = op._schema
        self.is_view = op.is_view


class _FromShapes(_StandIn):
    """Rule 3: a value-sized op whose sizes its arguments' shapes fix (`make` makes them)."""

    def __init__(self, op, make, name: str = "") -> None:
        super().__init__(op, name)
        self.make = make

    def __call__(self, *args, **kwargs):
        return self.make(*args, **kwargs)


class _UpperBound(_FromShapes):
    """Rule 3: an op whose output size depends on values, replaced by its upper bound.
    `bound(*args, **kwargs)`: whether a size is a bound for these arguments (always,
    unless given); where not, `exact` runs in its place, named as the op."""

    def __init__(self, op, make, bound=None) -> None:
        super().__init__(op, make, f"{op.__name__}(upper bound)")
        self.bound = bound or (lambda *args, **kwargs: True)
        self.exact = _FromShapes(op, make)


class _RealSize(_StandIn):
    """Rule 3: a value-sized op whose input is known (shadowed): a fake of the real size
    (of each output's, for an op with several: `unique_consecutive`)."""

    def __init__(self, op, real: torch.Tensor | tuple[torch.Tensor, ...]) -> None:
        super().__init__(op)
        self.real = real

    def __call__(self, *args, **kwargs):
        device = args[0].device
        if isinstance(self.real, torch.Tensor):
            return torch.empty(self.real.shape, dtype=self.real.dtype, device=device)
        return tuple(torch.empty(r.shape, dtype=r.dtype, device=device) for r in self.real)

    # one is made per call; the collector caches per op (`_written_slots`, op names), so
    # each equals its op: those caches keep one per op, not every call's `real` tensor
    def __eq__(self, other) -> bool:
        return isinstance(other, _RealSize) and other.op == self.op

    def __hash__(self) -> int:
        return hash(self.op)


class _Valued(_StandIn):
    """Rule 2/3: `.item()` with its value found beforehand, run through the collector as the
    event it is in a real run. One instance (ITEM_VALUE): the collector caches per op."""

    def __init__(self, op) -> None:
        super().__init__(op)
        self.value = None

    def __call__(self, *args, **kwargs):
        value, self.value = self.value, None
        return value


ITEM_VALUE = _Valued(ITEM)
EQUAL = aten.equal.default
EQUAL_VALUE = _Valued(EQUAL)   # Rule 3: `torch.equal`, a Python bool read off values
ALLCLOSE = aten.allclose.default
ALLCLOSE_VALUE = _Valued(ALLCLOSE)   # ... and `torch.allclose`, another


INDEX = aten.index.Tensor
LAYER_NORM = aten.native_layer_norm.default
REDUCED = (torch.bfloat16, torch.float16)


class _StatsInFloat(_StandIn):
    """Rule 10: a normalisation whose statistics (outputs 1 and 2: mean and rstd, or the
    batch's mean and invstd) the real kernel makes in fp32; `dense`: Rule 16 first."""

    def __init__(self, op, dense: "_DenseOutput | None" = None) -> None:
        super().__init__(op)
        self.dense = dense

    def __call__(self, *args, **kwargs):
        # FakeTensorMode only: no events
        out = (self.dense or self.op)(*args, **kwargs)
        return (out[0], out[1].to(torch.float32), out[2].to(torch.float32), *out[3:])


LAYER_NORM_FP32_STATS = _StatsInFloat(LAYER_NORM)
GROUP_NORM = aten.native_group_norm.default
GROUP_NORM_FP32_STATS = _StatsInFloat(GROUP_NORM)


class _GradInputAsInput(_StandIn):
    """Rule 10: group norm's backward, whose meta kernel makes grad_input in the saved
    statistics' dtype (fp32 on the mixed-type path), where the kernel makes it in the
    input's (bf16): autograd then cast it, a 131,072 B fp32 buffer and a copy the real run
    never makes."""

    def __call__(self, *args, **kwargs):
        out = self.op(*args, **kwargs)   # FakeTensorMode only: no events
        if out[0] is None or out[0].dtype == args[1].dtype:
            return out
        return (out[0].to(args[1].dtype), *out[1:])


GROUP_NORM_BACKWARD = aten.native_group_norm_backward.default
GROUP_NORM_BACKWARD_AS_INPUT = _GradInputAsInput(GROUP_NORM_BACKWARD)


def _layer_norm_stats_in_float(args, kernels_for_cuda: bool) -> bool:
    """Rule 10: does the real kernel make this layer norm's mean and rstd in fp32?"""
    if kernels_for_cuda and args[0].dtype in REDUCED:   # CUDA: the accumulate type,
        return True                                     # whatever the weight
    return _cpu_mixed_type(args[0], args[2:4])


def _cpu_mixed_type(x, params) -> bool:
    """Rule 10: a CPU normalisation kernel's mixed-type path (a bf16/fp16 input, fp32
    weights: a norm under `torch.autocast("cpu")`), which keeps its statistics in fp32.
    False for a CUDA build's fake CUDA tensors (torch's own rule holds there)."""
    if x.dtype not in REDUCED or x.device.type != "cpu":
        return False
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.float32 for p in params)


GROUPED_MM = aten._grouped_mm.default


def _grouped_mm_out(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """Rule 11: `_grouped_mm`'s output as the CPU kernel makes it. The meta kernel copies the
    CUDA kernel's checks (bf16 inputs only) and, on a CPU-only build, returns a contiguous
    output; the CPU kernel takes fp32/fp16 too and, as the CUDA one, pads each row's
    stride to 16 bytes: a (10, 5) fp32 result has strides (8, 1) and a 308-byte storage."""
    dtype = out_dtype or mat_a.dtype
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:              # (M, K) x (K, N) by groups of K: one (M, N) per group
        size = [offs.shape[0], mat_a.shape[0], mat_b.shape[1]]
    elif a2:                   # tokens sorted by expert x (E, K, N)
        size = [mat_a.shape[0], mat_b.shape[-1]]
    elif b2:                   # (E, M, K) x (K, N)
        size = [mat_a.shape[1], mat_b.shape[1]]
    else:                      # batched
        size = [mat_a.shape[0], mat_a.shape[1], mat_b.shape[-1]]
    per = max(1, 16 // dtype.itemsize)
    row = -(-size[-1] // per) * per
    stride = [row, 1] if len(size) == 2 else [size[1] * row, row, 1]
    return torch.empty_strided(size, stride, dtype=dtype, device=mat_a.device)


class _CpuKernel(_StandIn):
    """Rule 11: an op whose meta kernel disagrees with the CPU kernel standing in."""

    def __init__(self, op, make) -> None:
        super().__init__(op)
        self.make = make

    def __call__(self, *args, **kwargs):
        return self.make(*args, **kwargs)


GROUPED_MM_CPU = _CpuKernel(GROUPED_MM, _grouped_mm_out)
OBS_FQ = aten._fused_moving_avg_obs_fq_helper.default


def _obs_fq_grown(x, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                  *rest, **kwargs):
    """Rule 11: eager QAT's per-channel observer. The CPU (and CUDA) kernel grows its empty
    `running_min`, `running_max`, `scale` and `zero_point` to one value per channel at the
    first call; the meta kernel leaves them empty (5,240 B of `buffer` short on
    tests/clients/train_mech.py --case qat)."""
    ch_axis = rest[3] if len(rest) > 3 else kwargs.get("ch_axis", 0)
    per_row = rest[4] if len(rest) > 4 else kwargs.get("per_row_fake_quant", False)
    if per_row and running_min.numel() == 0:
        n = x.shape[ch_axis]
        for t in (running_min, running_max, scale, zero_point):
            t.resize_(n)
    return OBS_FQ(x, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                  *rest, **kwargs)


OBS_FQ_CPU = _CpuKernel(OBS_FQ, _obs_fq_grown)
BERNOULLI_OUT = aten.bernoulli.out


# Note [Bernoulli draws into a bool tensor]
# Rule 11: `torch.bernoulli(p, out=mask)` with a bool `mask` and float `p` (tensorly-torch's
# tensor dropout draws the ranks it keeps so: `torch.bernoulli(torch.ones(rank) * (1 - p),
# out=torch.empty(rank, dtype=torch.bool))`). ATen's `bernoulli_out` is
# `result.resize_(self.sizes()); result.bernoulli_(self, gen)`: an in-place draw, which
# writes any dtype, so the CPU and CUDA kernels take it; torch's fake one (an `out_wrapper`
# around the functional op) draws in p's dtype and refuses to cast float32 into the bool
# out ("Attempting to cast from torch.float32 to out tensor with dtype torch.bool ...
# not safe!"). `trace --fake` of tests/clients/train_tltorch.py --dropout 0.3 stopped
# there with exit 3, "script raised RuntimeError", where the real run trains. The stand-in
# is the kernel's own two steps on the fake tensors: the out tensor, grown to p's shape
# where it is smaller, as the kernel grows it, and nothing else allocated.
def _bernoulli_into(p, *, generator=None, out):
    """Rule 11: `bernoulli.out` as ATen runs it (Note [Bernoulli draws into a bool tensor])."""
    out.resize_(p.shape)
    return out.bernoulli_(p, generator=generator)


BERNOULLI_OUT_CPU = _CpuKernel(BERNOULLI_OUT, _bernoulli_into)
MKLDNN_RNN_LAYER = aten.mkldnn_rnn_layer.default


# Note [An LSTM's oneDNN workspace]
# Rule 11: on CPU an LSTM in training runs each layer and direction through
# `mkldnn_rnn_layer`, whose fourth output is oneDNN's workspace (the gates and states of
# every time step, each part rounded up to a 4 KiB page), saved for the backward; the meta
# kernel returns it empty. A BiLSTM-CRF tagger (tests/clients/train_crf.py: 12 steps of 8
# sentences, 16 wide) keeps 114,688 B per direction there: its fake ledger read 229,376 B
# of activations under the real one (2 steps: 157,372 B against 386,748 B at the peak),
# and every policy's prediction with it. The size is oneDNN's to choose (page rounding,
# padded leading dimensions, its version's layout), so it is read from the kernel itself:
# the real op once per set of shapes on zeros, with no mode on (the memory is the fake
# run's own, never the ledger's), cached. Out of training the kernel makes none.
_RNN_WORKSPACE: dict[tuple, int] = {}


def _rnn_workspace_bytes(args: tuple) -> int:
    """Bytes of the workspace the CPU kernel makes for `mkldnn_rnn_layer(*args)`."""
    key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else
                tuple(a) if isinstance(a, (list, tuple)) else a for a in args)
    if key not in _RNN_WORKSPACE:
        with _disable_current_modes():
            real = [torch.zeros(a.shape, dtype=a.dtype) if isinstance(a, torch.Tensor) else a
                    for a in args]
            ws = MKLDNN_RNN_LAYER(*real)[3]   # undefined (None) out of training
            _RNN_WORKSPACE[key] = 0 if ws is None else ws.untyped_storage().nbytes()
            del real, ws
    return _RNN_WORKSPACE[key]


def _mkldnn_rnn_layer_kept(*args):
    """Rule 11: `mkldnn_rnn_layer` with the workspace the CPU kernel keeps for backward
    (Note [An LSTM's oneDNN workspace])."""
    out = MKLDNN_RNN_LAYER(*args)
    n = _rnn_workspace_bytes(args)
    if out[3] is None or out[3].numel() == n:
        return out
    return (*out[:3], torch.empty(n, dtype=out[3].dtype, device=out[3].device))


MKLDNN_RNN_LAYER_CPU = _CpuKernel(MKLDNN_RNN_LAYER, _mkldnn_rnn_layer_kept)


class _DenseOutput(_StandIn):
    """Rule 16: a kernel that makes its first output dense in the memory format torch
    suggests for its input (`empty_like(input, input.suggest_memory_format())`), where the
    meta kernel keeps the input's strides."""

    def __init__(self, op, like: int | None) -> None:
        super().__init__(op)
        self.like = like   # the argument whose format the output takes; None: contiguous

    def __call__(self, *args, **kwargs):
        out = self.op(*args, **kwargs)   # FakeTensorMode only: no events
        fmt = torch.contiguous_format if self.like is None else \
            suggest_memory_format(args[self.like])
        # a backward asked for no grad_input (a norm over the input features) returns None
        if out[0] is None or out[0].is_contiguous(memory_format=fmt):
            return out
        return (out[0].contiguous(memory_format=fmt), *out[1:])


# Rule 16: batch norm, forward (each overload it reaches; some are newer than others) and
# backward (whose grad_input takes the input's format, not the incoming gradient's); layer
# norm's backward (whose grad_input is contiguous)
DENSE_OUTPUT = {op: _DenseOutput(op, like) for name, overload, like in (
    ("native_batch_norm", "default", 0), ("_native_batch_norm_legit", "default", 0),
    ("_native_batch_norm_legit", "no_stats", 0),
    ("_native_batch_norm_legit_no_training", "default", 0),
    ("_batch_norm_with_update", "default", 0), ("native_batch_norm_backward", "default", 1),
    ("native_layer_norm_backward", "default", None))
    if hasattr(aten, name) for op in [getattr(getattr(aten, name), overload)]}
# Rule 10 on top: the forwards' statistics, where the CPU kernel keeps them in fp32
DENSE_FP32_STATS = {op: _StatsInFloat(op, dense) for op, dense in DENSE_OUTPUT.items()
                    if "backward" not in op.__name__}
CTC_LOSS = aten._ctc_loss.Tensor

# Rule 18: split sizes that do not sum to the dimension are stand-ins
SPLIT_WITH_SIZES = frozenset({aten.split_with_sizes.default})


def even_split(args: tuple, kwargs: dict | None) -> list[int] | None:
    """Rule 18: the even split of `split_with_sizes`'s dimension among its parts, where the
    sizes given (stand-ins) do not sum to it; None where they do."""
    kwargs = kwargs or {}
    x = args[0]
    sizes = args[1] if len(args) > 1 else kwargs.get("split_sizes")
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    if not isinstance(x, torch.Tensor) or not isinstance(sizes, (list, tuple)) or not sizes:
        return None
    try:
        n = int(x.shape[dim])
        if sum(int(v) for v in sizes) == n:
            return None
    except (TypeError, IndexError, RuntimeError):   # symbolic sizes: leave them to torch
        return None
    q, r = divmod(n, len(sizes))
    return [q + (i < r) for i in range(len(sizes))]


def _ctc_known_lengths(args) -> bool:
    """Rule 3: are the target lengths of a `ctc_loss` known (token counts of the script's
    own labels)? Then its outputs have their real size."""
    return len(args) > 3 and _shadow_of(args[3]) is not None


def _ctc_out(log_probs, targets, input_lengths, target_lengths, *rest, **kwargs):
    """Rule 3: `_ctc_loss`'s outputs from known target lengths, as the kernel sizes them: the
    loss per sample (B,) and log_alpha (B, T, 2 * max(target_lengths) + 1), saved for
    backward. torch's fake kernel refuses (the size is in the values); wav2vec2's CTC head
    (tests/clients/train_more2.py --model wav2vec2) stopped the run with exit 2."""
    with _disable_current_modes():
        tl = _shadow_of(target_lengths)
        longest = int(tl.max()) if tl.numel() else 0
    b = log_probs.shape[1]
    opts = {"dtype": log_probs.dtype, "device": log_probs.device}
    return (torch.empty((b,), **opts),
            torch.empty((b, log_probs.shape[0], 2 * longest + 1), **opts))


CTC_LOSS_KNOWN = _CpuKernel(CTC_LOSS, _ctc_out)


# Rule 3: factories whose values the call fixes: a float result of one is known
# (`attention_mask = torch.ones(B, T)`, BART's decoder), as are float results computed from
# known tensors only (`mask.to(torch.bool)`, `(1.0 - mask) * min`), up to SHADOW_NUMEL.
# `torch.linspace(0, drop_path_rate, depth)` is how vision models (Swin, ConvNeXt, CvT,
# Data2Vec, timm's) set each block's stochastic-depth rate; read as a stand-in 0, every
# block's `drop_path` was the identity and the fake ledger lacked its mask and the number
# `div` saves (Swin v2 -120 B at the peak, Data2Vec vision's peak moved).
# A float literal (`lift_fresh` of `torch.tensor([-1.0, 1.0])`) is known as its integer kin
# already were: kornia checks every augmentation's range by `bounds[0] <= factor[0]` on
# `factor.repeat(2) * torch.tensor([-1.0, 1.0])`, and the stand-in False raised "degrees out
# of bounds" in every fake run of RandomAffine, RandomRotation and RandomMotionBlur. One of
# a single element FakeTensorMode keeps itself (`constant`), and follows its in-place
# updates, which a shadow does not where the op returns nothing: Adam's `step` literal,
# stepped by `_foreach_add_` on a CUDA target, read 0 and divided by zero.
KNOWN_FACTORIES = frozenset({aten.ones, aten.zeros, aten.full, aten.ones_like, aten.zeros_like,
                             aten.full_like, aten.new_ones, aten.new_zeros, aten.new_full,
                             aten.arange, aten.scalar_tensor, aten.linspace, aten.logspace,
                             aten.eye})


# Note [A factory that reads only its tensor's kind]
# `w.new_zeros(n, dtype=torch.bool)` and `torch.zeros_like(x)` take from their tensor its
# dtype and device (`*_like` its shape and strides too), never its values. Rule 3 ran a
# factory for real only where every tensor argument was known, so one made from a fake
# weight or activation (whose values no fake run has) came out unknown although the call
# fixes every value. loralib's `MergedLinear` builds its mask of enabled rows so
# (`self.weight.new_zeros((out_features,), dtype=torch.bool)`, the rows `enable_lora` names
# set True) and scatters the LoRA update through it in every forward (`result[self.
# lora_ind] = x`): with the mask unknown, the index took Rule 3's upper bound (every row),
# and backward raised ("IndexPutBackward0 returned an invalid gradient ... got [48, 16]
# but expected shape compatible with [32, 16]"), ending `trace --fake` of a model the real
# run trains. So an unknown first argument of one of these stands in as an empty tensor
# of its dtype (with its shape and strides for `*_like`, whose numel is then the result's,
# at most SHADOW_NUMEL: nothing large is made).
_KIND_ONLY_NEW = frozenset({aten.new_ones, aten.new_zeros, aten.new_full})
_KIND_ONLY_LIKE = frozenset({aten.ones_like, aten.zeros_like, aten.full_like,
                             # Rule 36: a draw shaped like its tensor reads its kind alone
                             aten.rand_like, aten.randn_like, aten.randint_like})


def _kind_stand_in(func, t: torch.Tensor) -> torch.Tensor | None:
    """A real tensor standing in for the unknown tensor a factory reads only the kind of
    (Note [A factory that reads only its tensor's kind]), else None."""
    packet = getattr(func, "_overloadpacket", None)
    if t.layout is not torch.strided or packet not in _KIND_ONLY_NEW | _KIND_ONLY_LIKE:
        return None
    with _disable_current_modes():
        if packet in _KIND_ONLY_NEW:
            return torch.empty(0, dtype=t.dtype)
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)


# Rule 3: a known operand that decides an op's result whatever the other holds: `x & 0`
# is 0, `x | True` is True. A loop that runs "until every sequence is done" combines a
# stop it cannot know (a sampled token is EOS) with one it can (the length reached): each
# of transformers' `generate` steps does `unfinished & ~(is_eos | is_max_len)` and stops
# when `unfinished.max() == 0`. With the unknown half making the whole unknown, the
# stand-in (False) never said stop and `trace --fake` of a GRPO trainer ran forever; now
# the known half decides, and the fake run generates to the longest length a real run can.
_ZERO_DECIDES = frozenset({aten.bitwise_and, aten.logical_and, aten.mul})
_TRUE_DECIDES = frozenset({aten.bitwise_or, aten.logical_or})


def _absorbed(func, args, kwargs) -> torch.Tensor | None:
    """The result of a two-operand op decided by one known operand, or None."""
    packet = getattr(func, "_overloadpacket", None)
    zero = packet in _ZERO_DECIDES
    if not (zero or packet in _TRUE_DECIDES) or kwargs or len(args) != 2 or \
            not all(isinstance(a, torch.Tensor) for a in args):
        return None
    if any(a.is_floating_point() or a.is_complex() for a in args):
        return None            # 0 * nan is nan: a float operand decides nothing
    if not zero and packet is aten.bitwise_or and any(a.dtype != torch.bool for a in args):
        return None            # `x | 1` is not 1 for integers
    for a in args:
        s = _shadow_of(a)
        if s is None or not s.numel():
            continue
        with _disable_current_modes():
            decides = not s.any() if zero else bool(s.all())
        if decides:
            shape = torch.broadcast_shapes(args[0].shape, args[1].shape)
            dtype = torch.bool if packet in (aten.logical_and, aten.logical_or) else \
                torch.promote_types(args[0].dtype, args[1].dtype)
            with _disable_current_modes():
                return torch.full(shape, 0 if zero else 1, dtype=dtype)
    return None


def _float_known(func, args, out) -> bool:
    """Rule 3: is a float result's value known? A value-fixing factory's, a literal's (but
    where FakeTensorMode keeps it as a constant), or one whose tensor inputs are all known
    (shadowed or real), at least one of them."""
    if getattr(func, "_overloadpacket", None) in KNOWN_FACTORIES:
        return True
    if func is LIFT_FRESH:
        return getattr(out, "constant", None) is None
    n = 0
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, torch.Tensor):
                if _shadow_of(t) is None:
                    return False
                n += isinstance(t, FakeTensor)   # real inputs alone: not ours to compute
    return n > 0


def _mask_index_size(args) -> tuple[torch.Tensor, bool] | None:
    """`x[m]` (or `x[:, m]`) with one bool mask `m`: a meta tensor of the result's shape,
    x.shape[:d] + (m.sum(),) + x.shape[d + m.dim():], and True, where the mask's values are
    known (Rule 3: a padding mask of token ids); where they are not (Idefics' real images
    among padding ones, told by their pixels), its upper bound, every element kept, and
    False. None for any other indexing."""
    x, indices = args[0], args[1]
    tensors = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(tensors) != 1 or tensors[0][1].dtype not in (torch.bool, torch.uint8):
        return None
    d, m = tensors[0]
    if tuple(m.shape) != tuple(x.shape[d:d + m.dim()]):
        return None
    shadow = _shadow_of(m)
    if shadow is not None:
        with _disable_current_modes():
            n = int(shadow.bool().sum())
    return torch.empty((*x.shape[:d], m.numel() if shadow is None else n,
                        *x.shape[d + m.dim():]), dtype=x.dtype, device="meta"), \
        shadow is not None


def _masked_select_size(func, args) -> torch.Tensor | None:
    """Rule 3: `masked_select(x, m)` keeps as many elements as its mask, broadcast to both
    shapes, holds True, whatever x's values: a meta tensor of that size where the mask's
    values are known (equiformer's `rel_pos.masked_select(~eye)`, every pair but a node's
    own; before, the upper bound kept all n * n and the reshape to (b, n, n - 1, 3) raised).
    None for any other op, or an unknown mask (the upper bound applies)."""
    if func is not aten.masked_select.default or len(args) < 2 or \
            not isinstance(args[1], torch.Tensor):
        return None
    x, m = args[0], args[1]
    shadow = _shadow_of(m)
    if shadow is None:
        return None
    with _disable_current_modes():
        n = int(shadow.bool().expand(torch.broadcast_shapes(x.shape, m.shape)).sum())
    return torch.empty((n,), dtype=x.dtype, device="meta")


_VALUE_SIZED: dict = {}


def _value_sized(func) -> bool:
    """Rule 3: is the op's output size its input's values (torch tags it so: `nonzero`,
    `repeat_interleave` by a tensor, `unique`, ...)? Asked once per op."""
    sized = _VALUE_SIZED.get(func)
    if sized is None:
        sized = _VALUE_SIZED[func] = torch.Tag.dynamic_output_shape in getattr(
            func, "tags", ())
    return sized


UPPER_BOUNDS = {
    aten.nonzero.default: _UpperBound(aten.nonzero.default, lambda x: torch.empty(
        (x.numel(), x.dim()), dtype=torch.long, device=x.device)),
    aten.masked_select.default: _UpperBound(aten.masked_select.default, lambda x, m: torch.empty(
        (torch.broadcast_shapes(x.shape, m.shape).numel(),), dtype=x.dtype, device=x.device)),
    # Note [A least-squares fit in a fake run] (trace/fake_lstsq.py)
    aten.linalg_lstsq.default: _UpperBound(aten.linalg_lstsq.default, lstsq_outputs,
                                           lstsq_is_bound),
}


class _RunMode(FakeTensorMode):
    """Rule 12: the run's FakeTensorMode, which `copy.deepcopy` leaves as it is.

    A FakeTensor keeps its mode in its `__dict__`, and `Tensor.__deepcopy__` deep-copies that
    dict: `copy.deepcopy(model)` (eager QAT's `prepare_qat`, EMA copies) gave every copied
    parameter a mode of its own. The run's mode then took them for real tensors and faked
    them again (a weakref on each), and the copy's `.to(device)` failed to swap them:
    `_apply(): Couldn't swap Linear.weight` (tests/clients/train_mech.py --case qat)."""

    def __deepcopy__(self, memo):
        return self

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if type(out) is FakeTensor and out.layout in SPARSE_LAYOUTS:   # Rule 13: the
            out = sparse_as_real(func, args, kwargs, out, _shadow_of)   # real run's entries,
        return out                                      # before the collector reads them

    def _cache_key(self, state, func, args, kwargs):
        """Rule 30: `set_` onto a storage gets no cache key: the key holds the storage
        object itself, and FakeTensorMode's class-wide cache keeps its keys (a bypass
        too, as a negative entry), so each storage set so lived to the end of the run (a
        DataLoader worker's batch arriving, 786,432 B a step, never freed)."""
        if func is _SET_STORAGE or func is _SET_STORAGE0:
            raise _BypassDispatchCache("set_ onto a storage")
        return super()._cache_key(state, func, args, kwargs)

    def _validate_output_for_cache_entry(self, state, key, func, args, kwargs, output):
        """Rule 29: an output whose storage is larger than its view is not cached (a cache
        hit would make it at its view's size)."""
        super()._validate_output_for_cache_entry(state, key, func, args, kwargs, output)
        if isinstance(output, FakeTensor) and output.numel() and \
                output.untyped_storage().nbytes() > _extent_bytes(output):
            raise _BypassDispatchCache("storage larger than the view")


def of_the_run(t: object) -> bool:
    """Whether `t` is a tensor of memledger's own fake run (its `_RunMode`), not a
    compiler's or an exporter's fake tensor."""
    return isinstance(t, FakeTensor) and isinstance(getattr(t, "fake_mode", None), _RunMode)


def _extent_bytes(t: torch.Tensor) -> int:
    """The bytes a tensor's view spans in its storage, from its first element's offset."""
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


class FakeCollector(Collector):
    """A Collector that runs the script above its own FakeTensorMode (Note [Fake runs]).

    Example usage::

        target = FakeTarget.for_device("cuda")
        with target.collector(sink, max_steps=1):
            model = build_model()          # fake parameters: no memory
            train_one_step(model)

    Known limitations: values are stand-ins (Rule 3): control flow that depends on data
    takes the stand-in's branch; CUDA-only kernels (flash attention, cuBLAS workspace) are
    modelled by the CPU kernels' shapes when this build has no CUDA (docs/fake.md).
    """

    # Collector.PLAIN_TYPES: a fake tensor is read as a plain one. Each place it was missing
    # showed: the in-place folds (a fake backward read 786,432 B, 23 %, over the real run's
    # ledger: a 3-D parameter read slice by slice; a Linear's bias on a non-contiguous input,
    # offload +195,284 B), grown storages (eager QAT's observers, 5,240 B of `buffer` under:
    # tests/clients/train_mech.py --case qat), and a tensor a call keeps on its module
    # (`self.kept = h.detach()`: no `stash` record, so checkpoint held the region's input
    # past the next step's forward, +26,380 B; tests/clients/train_random.py, `kept`).
    PLAIN_TYPES = (torch.Tensor, FakeTensor)
    # `nn.Parameter(fake)` keeps the FakeTensor type (Note [A parameter's gradients, as
    # they are set], trace/param_attrs.py)
    PARAM_CLASSES = (torch.nn.Parameter, FakeTensor)
    # Rule 9: a saved fake tensor is aliased as a plain one is, and its release followed
    ALIAS_TYPES = PLAIN_TYPES + (torch.nn.Parameter,)

    def __init__(self, sink, target: FakeTarget | None = None, **kwargs) -> None:
        self.target = target or FakeTarget()
        header = {**self.target.header(), **(kwargs.pop("header", None) or {})}
        super().__init__(sink, header=header, **kwargs)
        self.fake_mode = _RunMode(allow_non_fake_inputs=True)    # Rule 12
        self._answers = RealAnswers()            # Rule 7
        self._foreach = ForeachAsReal(FakeTensor, "cuda" if self.target.remap else "")
        self._literals = KnownLiterals(FakeTensor, _shadow_of,   # Rules 19, 22-25, 32
                                       lambda t: self._standin(t, "Tensor.numpy"),
                                       unknown_width)
        self._views = RebuiltViews()             # Rule 17
        self._memo = self.fake_mode.fake_tensor_converter.tensor_memo
        self._standin_sites: dict[tuple[str, int, str], dict] = {}
        self.last_standin: dict | None = None   # the latest, for a script that then raises
        self.last_zero_standin: dict | None = None   # Rule 31: the latest zero handed out
        self._real_sids: set[int] = set()
        self._fakes_kept: dict[int, FakeTensor] = {}  # Rule 20: id(real tensor) -> its fake
        self._host_sids: set[int] = set()     # Rule 8
        self._lifting = False
        self._lift_source: int | None = None  # Rule 1: the lifted literal's real storage
        self._lift_external = False           # Rule 1: lifting memory torch did not allocate
        self._loss_bytes: int | None = None   # Rule 14: a reduced loss's host buffer
        self._looking_away = False   # Rule 9's saved alias, Rule 30's workers: no events
        self._loader = LoadsInProcess(self._workers_fetch, self._arrives)   # Rule 30
        self._from_workers: set[int] = set()   # Rule 30: the storage keys of a batch arriving
        self._fake_dev: dict[Any, str] = {}
        self._draws = RandomDraws(_shadow_of)  # Rule 21
        self._swaps = ConstantsLetGo(FakeTensor,     # Rule 23
                                     self.fake_mode.fake_tensor_converter)
        self._pointers = DistinctPointers(FakeTensor)   # Rule 26
        # Note [A warning the script's op raised]: shown at the library's line, not at
        # the `__torch_function__` of Rule 19's mode that passed the call on
        self._warning_sites = WarningSites("memledger.trace.fake_literals")
        self.flops = 0

    # ---- lifecycle: FakeTensorMode below the collector ---------------------------------
    def __enter__(self) -> "FakeCollector":
        _STALE.clear()
        self.fake_mode.__enter__()
        entered = []
        try:
            for part in (self._answers, self._foreach, self._literals, self._swaps,
                         self._pointers, self._loader, self._warning_sites):
                part.__enter__()
                entered.append(part)
            return super().__enter__()
        except BaseException:
            for part in reversed(entered):
                part.__exit__(*sys.exc_info())
            self.fake_mode.__exit__(*sys.exc_info())
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            super().__exit__(exc_type, exc, tb)
        finally:
            self._warning_sites.__exit__(exc_type, exc, tb)
            self._loader.__exit__(exc_type, exc, tb)
            self._pointers.__exit__(exc_type, exc, tb)
            self._swaps.__exit__(exc_type, exc, tb)
            self._literals.__exit__(exc_type, exc, tb)
            self._foreach.__exit__(exc_type, exc, tb)
            self._answers.__exit__(exc_type, exc, tb)
            self.fake_mode.__exit__(exc_type, exc, tb)

    def close(self, status: str = "ok", message: str = "") -> None:
        if not self._closed:   # Rule 7: libraries that branch on FakeTensor, before the end
            for lib, what in FAKE_AWARE.items():
                if lib in sys.modules:
                    self.sink.write({"k": "fake_aware", "lib": lib, "what": what})
        super().close(status, message)
        self._fakes_kept.clear()   # Rule 20: the run's fakes go with it

    # ---- the hot path -------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if is_higher_order(func):   # Note [Higher-order operators run by their ops]
            return run_by_its_ops(self, func, args, kwargs)
        if func in NOT_EVENTS or self._looking_away:    # Rules 2, 9 and 30
            return func(*args, **(kwargs or {}))
        if self._views.written:                     # Rule 17 (once per op: test first)
            self._views.before_op(func, args)
        if func is ITEM:                            # Rule 3
            # Rule 2: `.item()` is an event in a real run, so it is one here: without it a
            # script ending `opt.zero_grad(); print(loss.item())` had its gradients' free
            # fall after the last event, read as resident at the end (Mixtral: 1,019,136 B)
            ITEM_VALUE.value = self._item(func, args, kwargs or {})
            return super().__torch_dispatch__(ITEM_VALUE, types, args, kwargs)
        if func is EQUAL:                           # Rule 3, as `.item()`
            EQUAL_VALUE.value = self._equal(func, args, kwargs or {})
            return super().__torch_dispatch__(EQUAL_VALUE, types, args, kwargs)
        if func is ALLCLOSE:                        # Rule 3, as `torch.equal`
            ALLCLOSE_VALUE.value = self._equal(func, args, kwargs or {})
            return super().__torch_dispatch__(ALLCLOSE_VALUE, types, args, kwargs)
        if kwargs and self.target.remap and "device" in kwargs:   # Rule 5
            kwargs = self._remap(kwargs)
        if func is INDEX and (sized := _mask_index_size(args)) is not None:   # Rule 3
            if not sized[1]:
                self._note_standin(str(func), "upper bound: every element")
            func = _RealSize(func, sized[0])
        elif func is LAYER_NORM and _layer_norm_stats_in_float(args, self.target.remap):
            func = LAYER_NORM_FP32_STATS                 # Rule 10
        elif func is GROUPED_MM and args[0].device.type == "cpu":
            func = GROUPED_MM_CPU                        # Rule 11
        elif func is OBS_FQ:
            func = OBS_FQ_CPU                            # Rule 11
        elif func is BERNOULLI_OUT and kwargs and kwargs.get("out") is not None and \
                kwargs["out"].dtype != args[0].dtype:
            func = BERNOULLI_OUT_CPU                     # Rule 11
        elif func is MKLDNN_RNN_LAYER and not kwargs and not self.target.remap and \
                args[0].device.type == "cpu":
            func = MKLDNN_RNN_LAYER_CPU                  # Rule 11
        elif func is GROUP_NORM and not self.target.remap and \
                _cpu_mixed_type(args[0], args[1:3]):
            func = GROUP_NORM_FP32_STATS                 # Rule 10
        elif func is GROUP_NORM_BACKWARD and not self.target.remap and \
                _cpu_mixed_type(args[1], args[4:5]):
            func = GROUP_NORM_BACKWARD_AS_INPUT          # Rule 10
        elif func in DENSE_OUTPUT:                       # Rule 16, and 10 for the forward
            func = DENSE_FP32_STATS[func] if func in DENSE_FP32_STATS and \
                not self.target.remap and _cpu_mixed_type(args[0], args[1:3]) \
                else DENSE_OUTPUT[func]
        elif func is CTC_LOSS and _ctc_known_lengths(args):
            func = CTC_LOSS_KNOWN                        # Rule 3
        elif func in SPLIT_WITH_SIZES and (even := even_split(args, kwargs)) is not None:
            args = (args[0], even, *args[2:])            # Rule 18
            kwargs = {k: v for k, v in (kwargs or {}).items() if k != "split_sizes"}
            self._note_standin(str(func), f"even split: {even}")
        if _value_sized(func) and any(isinstance(a, FakeTensor) for a in args):
            known = self._real(func, args, kwargs or {})   # shadowed inputs: the real size
            if isinstance(known, torch.Tensor) or isinstance(known, tuple) and all(
                    isinstance(r, torch.Tensor) for r in known):
                func = _RealSize(func, known)
            elif (sized := _masked_select_size(func, args)) is not None:
                func = _RealSize(func, sized)
            elif (ub := UPPER_BOUNDS.get(func)) is not None:
                if ub.bound(*args, **(kwargs or {})):
                    self._note_standin(str(func), "upper bound: every element")
                    func = ub
                else:
                    func = ub.exact
        self._lifting = func is LIFT_FRESH          # Rule 1: a literal's real source
        self._lift_source = args[0].untyped_storage()._cdata \
            if self._lifting and args and isinstance(args[0], torch.Tensor) else None
        # ... whose memory numpy's may be (`torch.from_numpy`): so is the fake's, on the host
        self._lift_external = self._lifting and bool(args) and type(args[0]) is torch.Tensor \
            and external(args[0].untyped_storage())
        self._loss_bytes = reduced_loss_bytes(func, args, kwargs)   # Rule 14
        if not self._lifting:
            self._alias_real_inputs(args)               # Rule 20
        was = _written_constants(func, args)            # Note [A literal written in place]
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        except FAKE_ERRORS as e:   # Rule 3: the run stops here; exit 2 with the line
            e.memledger_line = cannot_run_fake_line(e, str(func))
            raise
        finally:
            self._lifting = self._lift_external = False
            self._loss_bytes = None
        if isinstance(out, FakeTensor):             # Rule 4
            self._forget(out)
        elif isinstance(out, (list, tuple)):
            for o in out:
                if isinstance(o, FakeTensor):
                    self._forget(o)
        for t, c in was:   # Note [A literal written in place]: what it held before the op
            if t.constant is None and _shadow_tensor(t) is None:
                _BEFORE[id(t)] = c
        try:
            self._known_result(func, args, kwargs, out)
        finally:
            _BEFORE.clear()
        if _seeded(func):                           # Rule 21
            self._draws.drew(self, func, args, kwargs or {}, out)
        if isinstance(out, FakeTensor) and out.layout in SPARSE_LAYOUTS and \
                (said := sparse_stand_in(out)) is not None:
            self._note_standin(str(func), said)   # Note [A sparse tensor made from a dense one]
        elif isinstance(out, FakeTensor) and out.layout in SPARSE_LAYOUTS and \
                _lost_entries(args, out):
            self._note_standin(str(func), SPARSE_GRAD_NOTE if kept_as_made(func, args)
                               else SPARSE_PARTS_NOTE if out.layout is not torch.sparse_coo
                               and twin_of(out) is not None
                               else SPARSE_NOTE)   # Rule 13: said, not a silent 0 B
        fl = FLOPS.get(getattr(func, "_overloadpacket", None))
        if fl is not None:                          # Rule 6
            n = int(fl(*args, **(kwargs or {}), out_val=out))
            if n:
                self.flops += n
                self.sink.write({"k": "flops", "ev": self._ev - 1, "n": n})
        return out

    def _known_result(self, func, args, kwargs, out) -> None:
        """Rule 3: the values of the op's result, where known (Rule 28 for a collective)."""
        if is_collective(func):                     # Rule 28
            self._collective_wrote(func, args, kwargs or {}, out)
        elif isinstance(out, FakeTensor):
            if out.dtype is torch.bool:
                _mark_healthy(func, args, out)              # Rule 3: finiteness checks
            if out.numel() <= SHADOW_NUMEL and (not out.is_floating_point()
                                                or _float_known(func, args, out)
                                                or self._drawn_in_step(func, args,
                                                                       kwargs or {}, out)):
                self._shadow(func, args, kwargs or {}, (out,))   # Rule 3: index integers
            elif hasattr(out, "_memledger_shadow"):
                self._stale(func, args, kwargs or {})
        elif isinstance(out, (list, tuple)) and out and isinstance(out[0], FakeTensor) \
                and len(out) <= SHADOW_NUMEL and (not out[0].is_floating_point()
                                                  or _float_known(func, args, out[0])):
            # unbind: `for i in ix`; and `[x.item() for x in torch.linspace(0, rate, n)]`
            self._shadow(func, args, kwargs or {}, out)

    def _drawn_in_step(self, func, args, kwargs, out) -> bool:
        """Rule 36: a float draw whose values the real run draws too: from a CPU generator
        in step with the real run's (Rule 7 of Note [Draws a fake run makes for real]), its
        tensor inputs known or read only for their kind (`torch.rand_like(x)`)."""
        if not _seeded(func) or not self._draws.in_step(self, args, kwargs, out):
            return False
        kind_only = getattr(func, "_overloadpacket", None) in _KIND_ONLY_LIKE
        flat = tree_flatten((args, kwargs))[0]
        return all(_shadow_of(t) is not None or (i == 0 and kind_only)
                   for i, t in enumerate(flat) if isinstance(t, torch.Tensor))

    def _item(self, func, args, kwargs):
        """Rule 3: the value `.item()` reads: the shadow's, a constant's, or a stand-in."""
        shadow = _shadow_of(args[0])
        if shadow is not None:
            with _disable_current_modes():
                return shadow.item()
        try:   # FakeTensorMode knows the values of small constants (optimizer step)
            return func(*args, **kwargs)
        except DataDependentOutputException:
            return self._standin(args[0])

    def _equal(self, func, args, kwargs) -> bool:
        """Rule 3: `torch.equal(a, b)`, a bool read off values: the shadows' answer where
        both are known, else a stand-in (said at the line): Rule 34's where the code reading
        it raises one way and not the other (`assert torch.allclose(...)`), else False.
        torch's own checks ask it too: `torch.istft` tests its window's overlap-add with `is_scalar_tensor_true`
        (`equal(envelope.abs().min() < 1e-11, ones)`), which a run that trains passes.
        `torch.allclose` the same: equiformer asks whether its edge vectors already point
        along the y axis (`if torch.allclose(x, y): return I`), which random points do not
        (before: exit 2, "aten.allclose.default reads tensor values")."""
        a, b = (_shadow_of(t) if isinstance(t, torch.Tensor) else None for t in args[:2])
        if a is not None and b is not None:
            with _disable_current_modes():
                return bool(func(a, b, *args[2:], **kwargs))
        if func is ALLCLOSE:   # FakeTensorMode has no rule for it: the stand-in at once
            return self._check_standin(str(func))   # Rule 34, else False
        try:
            return func(*args, **kwargs)
        except DataDependentOutputException:
            return self._check_standin(str(func))   # Rule 34, else False

    def _workers_fetch(self):
        """Rule 30: a DataLoader worker's fetch, made with the collector looking away."""
        self._looking_away = True
        try:
            yield
        finally:
            self._looking_away = False

    def _arrives(self, t: torch.Tensor) -> None:
        """Rule 30: `t`'s storage arrives next, as a batch from a worker does."""
        self._from_workers.add(t.untyped_storage()._cdata)

    def _from_another_process(self, st) -> bool:
        if st._cdata in self._from_workers:   # once: a freed storage's key may come again
            self._from_workers.discard(st._cdata)
            return True
        return super()._from_another_process(st)

    def _saved_alias(self, t: torch.Tensor) -> torch.Tensor:
        """Rule 9: the detached alias autograd keeps of a saved fake tensor."""
        if type(t) is not FakeTensor:
            return super()._saved_alias(t)
        self._looking_away = True   # FakeTensorMode (below) makes it; the ledger sees no event
        try:
            alias = t.detach()
        finally:
            self._looking_away = False
        # Rule 3: a saved tensor's known values go with it into backward: `h[mask] = v`
        # saves the bool mask (wav2vec2's SpecAugment, drawn with numpy), and its backward
        # indexes the gradient with it, a size only the mask's values give
        shadow = getattr(t, "_memledger_shadow", None)
        if shadow is not None:
            alias._memledger_shadow = shadow
        return alias

    def _real(self, func, args, kwargs):
        """The op run for real on its inputs' shadows (Rule 3), or None if one is unknown
        (unless a known operand decides the result alone: `_absorbed`)."""
        flat, spec = tree_flatten((args, kwargs))
        real = []
        for i, a in enumerate(flat):
            if isinstance(a, torch.Tensor):
                own = isinstance(a, FakeTensor) and _shadow_tensor(a) is None
                known = _shadow_of(a)
                a = known if known is not None or i else _kind_stand_in(func, a)
                if a is None:
                    return _absorbed(func, args, kwargs)
                if own:   # FakeTensorMode's own constant: an in-place op here must not
                    with _disable_current_modes():   # write it too (AdamW's `step += 1`
                        a = a.clone()                # counted twice: 6.0 after 3 steps)
            elif isinstance(a, torch.device):
                a = torch.device("cpu")
            real.append(a)
        r_args, r_kwargs = tree_unflatten(real, spec)
        if "device" in r_kwargs:
            r_kwargs["device"] = torch.device("cpu")
        op = getattr(func, "op", func)
        try:
            with _disable_current_modes():
                return op(*r_args, **r_kwargs)
        except Exception:   # a shadow is a convenience: without it the stand-in applies
            return None

    def _shadow(self, func, args, kwargs, outs) -> None:
        """Compute a small integer result for real from its inputs' shadows (Rule 3)."""
        r = self._real(func, args, kwargs)
        if r is None:
            self._stale(func, args, kwargs)
            return
        rs = (r,) if isinstance(r, torch.Tensor) else r
        if not isinstance(rs, (list, tuple)) or len(rs) != len(outs):
            return
        fresh = not _written_args(func) and not getattr(func, "is_view", True)
        for o, x in zip(outs, rs):
            if isinstance(o, FakeTensor) and isinstance(x, torch.Tensor) and \
                    x.shape == o.shape and x.layout is torch.strided:   # not a sparse
                o._memledger_shadow = _Shadow(x)      # gradient's `new_zeros(layout=...)`
                if fresh:   # a new storage that reuses a stale one's address is not stale
                    _STALE.discard(x.untyped_storage()._cdata)

    def _stale(self, func, args, kwargs) -> None:
        """Rule 3: an op wrote a shadowed tensor with values not known: forget its values
        (before, the shadow kept the old ones, and a mask filled from an activation read as
        the constant it started as)."""
        for i in _written_args(func):
            t = args[i] if i < len(args) else None
            s = _shadow_tensor(t)
            if s is not None:
                _STALE.add(s.untyped_storage()._cdata)
        t = kwargs.get("out")
        if isinstance(t, FakeTensor) and (s := _shadow_tensor(t)) is not None:
            _STALE.add(s.untyped_storage()._cdata)

    # Note [What a collective writes]
    # c10d's in-place collectives declare no writes in their schemas (`allgather_(Tensor[][]
    # output_tensors, Tensor[] input_tensors, ...)`, no `(a!)`), so Rule 3 kept what it knew
    # of their outputs from before the call. soft-moe-pytorch's distributed experts gather
    # every rank's token count (`gather_sizes`: `torch.tensor(n)`, then `all_gather` into
    # `torch.empty_like` buffers) and assert they are equal: small integers, so the empty
    # buffers' shadows had been made for real, and under `--fake --world 2` the run read
    # their uninitialised memory as the ranks' counts ([139786122122864, 7602432]: a
    # different branch per run, no stand-in said), and stopped at the assert with a
    # random draw of the script named as the last stand-in; a literal all-reduced
    # (`n = torch.tensor(len(batch)); dist.all_reduce(n)`) kept FakeTensorMode's constant,
    # this rank's count read as the sum. A simulated rank has no peers' values (the fake
    # process group moves nothing, and running a collective for real on it would hand
    # back this rank's values as the reduction's), so every tensor a collective may write
    # (each argument but its inputs; nothing for a send) is unknown from then on, except
    # where its inputs are known: then it holds what it would hold if every rank held this
    # rank's values (Note [A symmetric world], trace/fake_collectives.py: the gathered
    # counts are this rank's, twice, and soft-moe's assert holds as on the real ranks).
    def _collective_wrote(self, func, args, kwargs, out) -> None:
        schema = getattr(func, "_schema", None)
        if schema is None or "send" in schema.name:
            return
        with _disable_current_modes():
            spread = symmetric_writes(func, args, kwargs, out, _shadow_of)
        # a shadow that held known values before the call takes the new ones in place, so
        # that the views of it made before (`list(buf.chunk(2))` gathered into) know them too
        known_before = {id(t) for t, _ in spread if _shadow_of(t) is not None}
        for i, a in enumerate(schema.arguments):
            if a.name.startswith("input"):
                continue
            stack = [args[i] if i < len(args) else kwargs.get(a.name)]
            while stack:
                v = stack.pop()
                if isinstance(v, (list, tuple)):
                    stack.extend(v)
                    continue
                if (sh := _shadow_tensor(v)) is not None:
                    _STALE.add(sh.untyped_storage()._cdata)
                if isinstance(v, FakeTensor) and v.constant is not None:   # a literal's
                    self.fake_mode.fake_tensor_converter.invalidate_constant_aliases(
                        v.constant)
        for t, values in spread:
            if not isinstance(t, FakeTensor):
                continue
            sh = _shadow_tensor(t)
            with _disable_current_modes():
                if sh is None or id(t) not in known_before or not _copied(sh, values):
                    sh = values
                    t._memledger_shadow = _Shadow(sh)
            _STALE.discard(sh.untyped_storage()._cdata)
        if spread and schema.name.split("::")[-1] not in HANDS_ON:
            self._note_standin(str(func), SYMMETRIC)

    def _alias_real_inputs(self, args) -> None:
        """Rule 20: the fake of each real input, made now (the op then takes the same one
        from the converter's memo), is read as the real storage."""
        for a in args:
            if isinstance(a, (list, tuple)) and a and type(a[0]) in _REAL_TYPES:
                for b in a:
                    self._alias_real(b)
            elif type(a) in _REAL_TYPES:
                self._alias_real(a)

    def _alias_real(self, t) -> None:
        if type(t) not in _REAL_TYPES or id(t) in self._fakes_kept or \
                t.device.type == "meta" or t.layout is not torch.strided:
            return   # a tensor met before is aliased already (its fake is kept)
        fake = self.fake_mode.from_tensor(t)
        # the converter's memo holds its fakes weakly: kept while the real tensor lives, so
        # the op (and every later one) is handed this one
        self._fakes_kept[id(t)] = fake
        weakref.finalize(t, self._fakes_kept.pop, id(t), None)
        st = fake.untyped_storage()
        if st._cdata not in self._sids:
            self._alias(st, self._sid(t, self._ev))

    def _forget(self, t: FakeTensor) -> None:
        for r in weakref.getweakrefs(t):
            if type(r) is weakref.KeyedRef:
                self._memo.pop(r.key, None)

    def _remap(self, kwargs: dict) -> dict:
        dev = kwargs["device"]
        if dev is not None and torch.device(dev).type != "cpu":
            kwargs = {**kwargs, "device": torch.device("cpu")}
        return kwargs

    def _where(self, t: torch.Tensor, st) -> tuple[str, int]:
        fake_dev = getattr(t, "fake_device", None) if st.device.type == "meta" else None
        if fake_dev is None and st.device.type == "meta":   # Note [Fake sparse tensors]
            fake_dev = sparse_part_device(st)
        if fake_dev is None:   # Rule 1: a real tensor in a fake run
            self._real_next = True
            dev, n = super()._where(t, st)
            # only the literal's own source: a number the previous op's node saved is
            # registered at this op too (Note [Wrapped scalars saved for backward]), and it
            # exists in the real run (`h * 1.0` then `h[:, 0] = 0.0`: 8 B read off the target)
            source = self._lifting and st._cdata == self._lift_source
            return (REAL_PREFIX + dev if source else dev), n
        dev = self._fake_dev.get(fake_dev)
        if dev is None:
            dev = self.target.device if self.target.remap else str(fake_dev)
            self._fake_dev[fake_dev] = dev
        n = st.nbytes()
        if self._loss_bytes is not None and t.dim() == 0 and dev.startswith("cpu"):
            n = self._loss_bytes                        # Rule 14
        if self.target.rounding and dev.startswith("cuda"):
            n = cuda_block_bytes(n)
        return dev, n

    def _external(self, t, st) -> bool:
        """Rule 1: a fake lifted from a tensor over numpy's memory (`torch.from_numpy`) on a
        host target is that memory, which the allocator never sees (Note [Memory torch's
        allocator did not hand out] in trace/external.py); a real tensor is as it is."""
        if not isinstance(t, FakeTensor):
            return external(st)
        return self._lift_external and \
            self._fake_dev.get(getattr(t, "fake_device", None), "").startswith("cpu")

    def _new_storage(self, t, st, ev, op, pre, mod=None, before=False):
        self._real_next = False
        sid = super()._new_storage(t, st, ev, op, pre, mod=mod, before=before)
        if self._real_next:
            self._real_sids.add(sid)
            self.sink.write({"k": "real", "sid": sid})
        return sid

    # ---- Rule 17: a view written in place, in backward ------------------------------------
    def _note_mutated(self, func, written: tuple[int, ...], args, kwargs, ev: int,
                      overwritten: tuple[int, ...] = ()) -> None:
        super()._note_mutated(func, written, args, kwargs, ev, overwritten)
        self._views.note_written(args, written)

    # ---- Rule 8: optimizer step counters stay on the host --------------------------------
    def _mark_optimizer_state(self, opt: torch.optim.Optimizer) -> None:
        super()._mark_optimizer_state(opt)
        if not self.target.remap or not type(opt).__module__.startswith("torch.optim"):
            return
        for group in opt.param_groups:
            if group.get("capturable") or group.get("fused"):
                continue           # these keep `step` on the parameter's device
            for p in group["params"]:
                step = opt.state.get(p, {}).get("step")
                if isinstance(step, torch.Tensor) and step.dim() == 0:
                    sid = self._sid(step, self._ev)
                    if sid >= 0 and sid not in self._host_sids:
                        self._host_sids.add(sid)
                        self.sink.write({"k": "host", "sid": sid,
                                         "bytes": step.untyped_storage().nbytes()})

    # ---- stand-ins (Rule 3) -------------------------------------------------------------
    def _standin(self, t: torch.Tensor, op: str = "aten._local_scalar_dense"):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            value: Any = 0.0
        elif t.dtype == torch.bool:
            value = getattr(t, "_memledger_healthy", None)   # Rule 3: a finite run's answer
            if value is None:
                return self._check_standin(op)               # Rule 34, else False
        else:
            value = 0
        self._note_standin(op, value)
        return value

    def _check_standin(self, op: str) -> bool:
        """Rule 34: a bool read off values where the reading code raises on one way and
        not on the other gets the value that goes on (Note [A check a run that trains
        passes], trace/fake_checks.py); anywhere else Rule 3's False."""
        value = passing_value(reading_frame())
        if value is None:
            self._note_standin(op, False)
            return False
        self._note_standin(op, value, why=CHECK_ANSWERED)
        return value

    def _note_standin(self, op: str, value: Any, why: str = "") -> None:
        f = user_frame()
        filename, line = (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)
        site = (filename, line, op)
        if site in self._standin_sites:   # said once per line
            self.last_standin = self._standin_sites[site]
        else:
            self.last_standin = self._standin_sites[site] = {
                "k": "standin", "ev": self._ev, "op": op, "value": value, "file": filename,
                "line": line,
                "code": linecache.getline(filename, line).strip() if filename else "",
                **({"why": why} if why else {})}
            self.sink.write(self.last_standin)
        if type(value) in (int, float, bool) and value == 0:   # Rule 31
            self.last_zero_standin = self.last_standin


def standin_hint(rec: dict | None) -> str:
    """For a fake run whose script raised: the last value a fake run made up, which may
    have sent the script where a real run does not go ("" if none)."""
    if not rec:
        return ""
    return (f" (a fake run has no values: the last stand-in, {rec['value']!r} at "
            f"{_where_text(rec['file'], rec['line'])}, may have taken a branch a real run "
            "does not; docs/fake.md, Values)")


def cannot_run_fake_line(exc: BaseException, op: str) -> str:
    """One line naming the script line where a fake run cannot go on (exit 2)."""
    f = user_frame()
    where = _where_text(f.f_code.co_filename, f.f_lineno) if f is not None else "?"
    kind = ("makes a tensor whose size depends on its values"
            if isinstance(exc, DynamicOutputShapeException) else
            "has no fake (meta) kernel" if isinstance(exc, UnsupportedOperatorException)
            else "reads tensor values")
    return (f"memledger: cannot run fake at {where}: {op} {kind}, which a --fake run does "
            "not have; compute it from shapes in the script, or trace it for real")


def unknown_width(how: str) -> BaseException:
    """Rule 24: the error that stops a fake run at a `one_hot` whose width `how` depends on
    values, with its one line (exit 2): the script's line, and the library's where a
    library called one_hot (as `fake_refusal` names them)."""
    from memledger.trace.where import user_frame as script_frame

    f, mine = user_frame(), script_frame()
    where = _where_text(f.f_code.co_filename, f.f_lineno) if f is not None else "?"
    if f is not None and mine is not None and mine is not f:
        parts = os.path.realpath(f.f_code.co_filename).split(os.sep)
        pkg = next((parts[i + 1] for i in range(len(parts) - 2, -1, -1)
                    if parts[i] in ("site-packages", "dist-packages")), parts[-2])
        code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
        where = (f"{_where_text(mine.f_code.co_filename, mine.f_lineno)}: `{pkg}` (called by "
                 f"the script) at {'/'.join(parts[-2:])}:{f.f_lineno}" +
                 (f" `{code}`" if code else ""))
    err = RuntimeError(f"one_hot's width {how}")
    err.memledger_line = (  # type: ignore[attr-defined]
        f"memledger: cannot run fake at {where}: one_hot's width (num_classes) {how}, which "
        "a --fake run does not have (a stand-in would make it 0 or 1 wide, and every size "
        "computed from it wrong); trace it for real")
    return err


NO_CUDA_HINT = "not compiled with CUDA"


# Script code a fake run cannot run, recognised by torch's own message: (pattern, what it
# does, the library option that would skip it where a library does it). The option is named
# by what failed: a Keras-like loop's checkpoint callback saves with torch.save, and "e.g. no
# evaluation" sent its user to the wrong option (poutyne's ModelCheckpoint, helper hunt48a);
# `.numpy()` is an evaluation's metric or a fit on the data (pytorch-frame's
# MutualInformationSort hands sklearn the features: "no evaluation" alone named the wrong
# part, helper hunt52c). A 0-dim tensor formatted (`f"{loss:.3f}"`) is no longer one: it
# reads `.item()`'s stand-in (Rule 35); a larger one with a spec fails as in a real run.
VALUE_READS = (
    (".numpy() is not supported for tensor subclasses", "`.numpy()` reads tensor values",
     "no evaluation, no fit on the data's values"),
    ("Can't pickle local object 'WeakValueDictionary", "torch.save writes tensor values",
     "no checkpoint saving"),
    ("cannot pickle 'WeakValueDictionary", "torch.save writes tensor values",
     "no checkpoint saving"),
)


def fake_refusal(err: BaseException, target: FakeTarget, script: str,
                 zero_standin: dict | None = None):
    """What a fake run cannot do, as bad input (exit 2, one line naming the script's line):
    CUDA on a CPU-only build, script code that reads or writes tensor values, or arithmetic
    that fails on the stand-in zero `zero_standin` (Rule 31); None for the script's own
    failures."""
    from memledger.errors import EXIT_USAGE
    from memledger.trace.script import ScriptOutcome, library_called, library_caller

    if zero_standin is not None and is_zero_error(err):   # Rule 31
        return ScriptOutcome(EXIT_USAGE, zero_arithmetic_line(
            err, _script_frame(err, script), library_caller(err), zero_standin), err)
    text = str(err)
    if NO_CUDA_HINT in text or "not linked with support for cuda" in text:
        return ScriptOutcome(EXIT_USAGE, (
            "memledger: the script asked for CUDA and this torch has none; run the script on "
            f"cpu (e.g. `-- --device cpu`) and keep `--fake --device {target.device}`: the CPU "
            "kernels' sizes are ledgered as CUDA (docs/fake.md)"), err)
    chain = _chain(err)
    sub = next((w for e in chain if (w := _subclass_made(str(e)))), None)
    if sub is not None:
        return ScriptOutcome(EXIT_USAGE, (
            f"memledger: cannot run fake at {_script_frame(err, script)}: {sub}; trace it "
            "for real (docs/fake.md, Known limitations)"), err)
    what, skip = next(((w, o) for e in chain for pattern, w, o in VALUE_READS
                       if pattern in str(e)), (None, ""))
    if what is None:
        return None
    where = _script_frame(err, script)
    lib = library_caller(err)
    if lib is not None:   # the library the script called reads the values, not the script
        # (transformers' evaluation loop turns the logits it gathers into numpy arrays); the
        # option is the called library's, where another one it calls did it (Note [The
        # library the script called])
        called = library_called(err) or lib[0]
        via = "" if called == lib[0] else f", in `{lib[0]}`"
        return ScriptOutcome(EXIT_USAGE, (
            f"memledger: cannot run fake at {where}: `{called}` (called by the script){via} "
            f"at {lib[1]}: {what}, which a --fake run does not have; trace with an option of "
            f"`{called}` that skips that part (e.g. {skip}), or trace it for real"), err)
    return ScriptOutcome(EXIT_USAGE, (
        f"memledger: cannot run fake at {where}: {what}, which a --fake run does not have; "
        "skip it under --fake (e.g. log only when not faking) or trace it for real"), err)


def _chain(err: BaseException, depth: int = 8) -> list[BaseException]:
    """`err` and the errors it was raised from: a library may wrap torch's error in its
    own (MONAI's transforms raise "applying transform ..." from it)."""
    out = []
    while err is not None and len(out) < depth and err not in out:
        out.append(err)
        err = err.__cause__ or err.__context__
    return out


# torch's words when `as_subclass` (or `_make_subclass`) is asked to turn a fake tensor into
# a subclass of the script's: the tensor is a FakeTensor already and cannot be both
_SUBCLASS_MADE = re.compile(r"Creating a new Tensor subclass (\w+) but the raw Tensor object "
                            r"is already associated to a python object of type FakeTensor")


def _subclass_made(text: str) -> str | None:
    """What the script did, when it made a tensor of its own subclass from a fake one
    (MONAI's MetaTensor, made by `torch.as_tensor(x).as_subclass(MetaTensor)` in every
    transform): a --fake run's tensors are FakeTensors and cannot be another subclass."""
    m = _SUBCLASS_MADE.search(text)
    return None if m is None else (
        f"the script (or a library it calls) makes tensors of its own subclass {m.group(1)} "
        "(`as_subclass`), which torch's FakeTensor cannot become")


def _script_frame(err: BaseException, script: str) -> str:
    """`file:line` of the script's last frame in `err`'s traceback ('?' if none)."""
    target = os.path.abspath(script)
    tb, found = err.__traceback__, "?"
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if name == target:
            found = _where_text(name, tb.tb_lineno)
        tb = tb.tb_next
    return found
