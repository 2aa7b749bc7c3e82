"""torch.compile seen from outside: which modules run compiled code and under which backend,
and whether Dynamo compiled anything while a step was being timed.

# Note [Policies inside compiled code]
The ledger pass runs under a TorchDispatchMode, where Dynamo compiles nothing: the ledger
is the eager run (docs/how-it-works.md). `measure`'s wrappers on a module inside compiled
code are traced into the graph, and what the graph saves is then the compiler's choice: on
a residual MLP whose second block was compiled with `aot_eager`, `checkpoint:blocks.1`
measured 16.9 KiB above the baseline where the eager replay predicted 4.9 KiB, and
`offload:blocks.1` moved nothing where it predicted 24.8 KiB saved; under `inductor` the
re-run's fused kernels also changed the gradients' last bits. With the `eager` backend the
wrappers act as on the plain model and the replay is exact. So the trace writes one
`compiled` record per compiled module, with its path and backend, and `predict` refuses a
policy on a region inside code compiled by any backend but `eager` (memledger/replay/
compiled.py); `measure` still runs it, as the allocator measures it.

# Note [A step that compiled]
Dynamo compiles a frame at its first call, and again when a guard fails: a global module
hook installed for timing, `measure`'s wrapper patched into a module's `forward`, a new
input shape. Timed, such a step is compile time: the residual MLP's compiled block read
602 ms of forward in the one step the timers kept (a plain call takes 0.2 ms) and predict
priced checkpointing it at +394 ms per step where it measured +2 ms. So a timed step, or
a probe's timed run, during which Dynamo compiled a frame is dropped, as an unsettled step
is (Note [Timed steps in a settled process] in timing.py).
"""

from __future__ import annotations

import sys
import threading

import torch

from memledger.replay.compiled import EAGER_BACKEND   # the replay names it (no torch there)

UNKNOWN_BACKEND = "unknown"  # compiled, but the backend's name could not be read


def compiled_backend(module: torch.nn.Module) -> str | None:
    """The backend `torch.compile(module)` or `module.compile()` used (its registered name,
    or a custom backend function's `__name__`), UNKNOWN_BACKEND when compiled but unnamed,
    None when the module is not compiled."""
    ctx = getattr(module, "dynamo_ctx", None)   # torch.compile(module): an OptimizedModule
    if ctx is not None:
        callback = getattr(ctx, "callback", None)
    else:
        call = module.__dict__.get("_compiled_call_impl")   # module.compile()
        if call is None:
            return None
        callback = _closure_value(call, "callback")
    # Dynamo wraps the backend in layers (CatchErrorsWrapper, ConvertFrame,
    # WrapBackendDebug, the backend wrapper); the first with a name names it
    for _ in range(8):
        if callback is None:
            break
        name = getattr(callback, "compiler_name", None)
        if isinstance(name, str) and name:
            return name
        callback = getattr(callback, "_torchdynamo_orig_backend", None) or \
            getattr(callback, "_inner_convert", None)
    return UNKNOWN_BACKEND


def compiled_inside(root) -> bool:
    """Whether the model of a probe input (trace/timing.py ProbeInput) is, or holds, a module
    compiled by a backend other than `eager` (Note [No probes of compiled code])."""
    module = getattr(root, "module", None)
    if module is None:
        return False
    return any(b not in (None, EAGER_BACKEND) for b in map(compiled_backend, module.modules()))


def _closure_value(fn, name: str):
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None or name not in code.co_freevars:
        return None
    try:
        return cells[code.co_freevars.index(name)].cell_contents
    except (IndexError, ValueError):
        return None


def compiles_so_far() -> int:
    """Frames Dynamo has compiled plus graphs it captured in this process, a count that grows
    with every compile (Note [A step that compiled]); 0 when Dynamo was never imported (it
    is not imported here: that takes seconds). Both: a function compiled with
    `fullgraph=True` counts no frame in torch 2.13, only its graphs (torchao's `AdamW8bit`
    step: `frames` empty, `stats.unique_graphs` 2), and the trace read it as never
    compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    try:
        return int(utils.counters["frames"]["total"]) + \
            int(utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return 0


def compiler_compiles_so_far() -> int:
    """Graphs handed to an AOT-autograd backend in this process (inductor, `aot_eager`,
    cudagraphs): those whose compiled code may save, free and order its work other than
    the eager code (Note [A compile by the eager backend]); 0 when Dynamo was never
    imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    try:
        return int(utils.counters["aot_autograd"]["total"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return 0


# Note [A compile by the eager backend]
# torch runs an eager `flex_attention` call through `torch.compile(..., backend="eager",
# fullgraph=True)` of a one-line wrapper of its higher-order operator (torch/nn/attention/
# flex_attention.py), so a script that never compiles captured a graph in every pass:
# tests/clients/train_hop.py's allocator pass counted it, and `trace` said "the ledger is
# the eager run, the allocator's the compiled one", `show` "this ledger is the EAGER run
# (833,733 B); the compiled run's allocator peak is 897,716 B" where its scratch explains
# every byte (833,733 + 63,983 B), `predict` warned that its predictions (predicted =
# measured) "may not hold", and compare judged the gradients within a tolerance instead
# of bitwise. A graph the eager backend runs is the eager ops in their order; only an
# AOT-autograd backend (inductor, `aot_eager`) decides what is saved and fuses the work.
# So the allocator pass's `compiles` record also says how many graphs such a backend
# compiled (`aot`), and the peak comparison, predict's caveat and the gates' tolerance ask
# that; the module-call and generator comparisons still ask `frames` (Dynamo inlines a
# submodule's call past its hooks under any backend: Note [Two passes, one run?]). A
# ledger without `aot` (older) reads as compiled, as before.


# Note [Compiled code runs eager under the collector]
# Dynamo compiles nothing while a dispatch mode of ours is on the stack ("non-infra torch
# dispatch mode present"): it skips the frame and the code runs eagerly, op by op through
# the collector, which is what the ledger records (`show` says so). But code compiled
# with `fullgraph=True` raises there instead ("torch.compile with fullgraph=True found no
# compiled frames"): torchao's low-bit optimizers (`AdamW8bit`, `AdamW4bit`, `AdamWFp8`)
# compile their update so, and every such script failed under `trace` after running
# untraced. So the collector runs with torch.compile's "force_eager" stance while it is on
# (torch >= 2.6; `torch.compiler.set_stance`): compiled code runs as the eager code it was
# written as, fullgraph or not, as it did without the stance where Dynamo skipped it. So do
# the allocator pass's op-timed step (trace/timing.py OpTimer, a dispatch mode too: the
# pass lost its measured peak there) and the doctor's probe (a TorchFunctionMode, which
# Dynamo traces into: its frame reads failed `fullgraph=True`). The allocator pass's other
# steps, `measure` and the probes compile as the script asks. The stance is the process's:
# the first of them to start sets it and the last to end puts back the one before,
# whatever order they end in (two threads' blocks: A in, B in, A out, B out; each putting
# back what it found left "force_eager" on for good, and later compiled code in that
# process ran eagerly).
_EAGER_LOCK = threading.Lock()
_EAGER: dict = {"collectors": 0, "stance": None}


def eager_stance(on: bool) -> None:
    """One more (`on`) or one fewer collector (or doctor's probe) under torch.compile's
    "force_eager" stance."""
    with _EAGER_LOCK:
        _EAGER["collectors"] += 1 if on else -1
        if on and _EAGER["collectors"] == 1:
            import torch._dynamo

            stance = getattr(torch._dynamo, "set_stance", None)   # torch >= 2.6
            try:
                _EAGER["stance"] = stance("force_eager") if stance is not None else None
            except RuntimeError:   # "attempted to set_stance in a torch.compile region"
                _EAGER["stance"] = None
        elif not on and _EAGER["collectors"] == 0 and _EAGER["stance"] is not None:
            _EAGER["stance"].__exit__(None, None, None)
            _EAGER["stance"] = None
