"""Untraced cost measurements for the time side of replay: module and op times.

The allocator pass (memledger/trace/worker.py) runs the script with no dispatch mode. After
its profiled steps it times further steps with two light instruments, one at a time:

- `ModuleTimer` (global module forward hooks): the thread CPU time of every module forward
  call, per step, in call order. Recomputing a checkpointed module re-runs exactly that
  forward (with autograd recording), so its untraced time is the recompute cost.
- `OpTimer` (a TorchDispatchMode that only reads the clock around `func`): each op's own
  kernel time in one step, in call order. Replay uses it to weigh the early-stopped part of
  a recompute and the ops selective checkpointing does not re-run; the mode's own overhead
  falls outside the timed interval.

Which clock: with one intra-op thread (`torch.get_num_threads() == 1`; CPU backward runs
in the calling thread) the thread's CPU time is the work itself, and on a shared machine
another process preempting this one stretches wall time but not this thread's CPU time.
With several threads an op's work is spread over OpenMP workers that the calling thread's
CPU time does not see (a 2-thread `addmm` showed half its work), so wall time is used.
The record names the clock (`thread_cpu` or `wall`).

Both are written as one `timing` record:

    {"k": "timing", "device": "cpu", "clock": "thread_cpu",
     "step_ns": [...], "unsettled_steps": 4,             # the kept steps' times; steps
                                                         # dropped as unsettled (Note
                                                         # [Timed steps in a settled process])
     "modules": [[[path, ns], ...] per kept step],       # forward calls in call order
     "ops": [[op, ns], ...],                             # one step, every op in call order
     "recompute_factor": [...], "ckpt_region_ns": [...],  # recompute_probe, per repetition
     "ckpt_probe_saves": 28.0, "ckpt_probe_regions": 4,
     "selective_probe": {"region_ns": [...], "paths": ["blocks.0", ...], "save_ops": [...]},
     "offload_probe": {"added_ns": [...], "storages": 40, "bytes": 9437184, "saves": 112,
                       "where": "files in /tmp (ext4)"}}          # offload_probe, CPU only
"""

from __future__ import annotations

import contextlib
import inspect
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

from memledger.crash import internal   # Note [memledger's own hooks fail as memledger]
from memledger.replay.calib_cache import load_average, machine_busy
from memledger.trace.compiled import compiled_inside, compiles_so_far, eager_stance
from memledger.trace.higher_order import is_higher_order, run_by_its_ops
from memledger.trace.roots import RootNames, module_parameters, named_modules
from memledger.trace.wrapped import defers, storage_ptrs



def pick_clock() -> tuple[str, object]:
    """("thread_cpu", time.thread_time_ns) with one intra-op thread, else ("wall", ...)."""
    if torch.get_num_threads() == 1:
        return "thread_cpu", time.thread_time_ns
    return "wall", time.perf_counter_ns


# Note [The probes call the model as the script did]
# The probes re-run the model on one batch the script gave it, after the timed steps. Two
# things of that call outlive the hook that sees it, and both change what a step costs:
# - keyword arguments: transformers models are called `model(**batch)`. The global forward
#   hooks see positional arguments only, so the root's own `with_kwargs` pre-hook (put on
#   when the root is first seen) takes the next call's arguments whole. Without it the
#   probes had nothing to run on any transformers model and the isolated calibration
#   priced its blocks.
# - autocast: a script under `torch.autocast` runs (and re-runs) its blocks in bf16/fp16,
#   re-casting weights inside every region (autocast's cast cache does not outlive the
#   forward). The probes enter the same autocast state, per device type, that was on when
#   the batch was taken.
@dataclass
class ProbeInput:
    """The model and one call of it as the script made it (Note [The probes call the model
    as the script did])."""

    module: torch.nn.Module
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    autocast: tuple = ()        # ((device_type, dtype), ...) enabled when the call was made
    # the script's optimizer: its kind runs in the probe's step (Note [The probe's
    # optimizer step]); None: the step ends at backward
    optimizer: Any = None

    def __call__(self):
        with contextlib.ExitStack() as stack:
            for device_type, dtype in self.autocast:
                stack.enter_context(torch.autocast(device_type=device_type, dtype=dtype))
            return self.module(*self.args, **self.kwargs)


def autocast_state() -> tuple:
    """((device_type, dtype), ...) for each device type whose autocast is on right now."""
    on = []
    for device_type in ("cpu", "cuda"):
        try:
            enabled = torch.is_autocast_enabled(device_type)
            dtype = torch.get_autocast_dtype(device_type)
        except TypeError:    # torch < 2.4: per-device functions
            cpu = device_type == "cpu"
            enabled = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
            dtype = torch.get_autocast_cpu_dtype() if cpu else torch.get_autocast_gpu_dtype()
        if enabled:
            on.append((device_type, dtype))
    return tuple(on)


class ModuleTimer:
    """Thread CPU time of each module forward call; paths as the collector names them
    (Note [The model], memledger/trace/roots.py). Top-level modules are named from the
    script's first call and first optimizer step on, timed or not, as the collector names
    them."""

    def __init__(self, clock=time.thread_time_ns) -> None:
        self._clock = clock
        self.root: ProbeInput | None = None
        self._root_hook = None
        self.steps: list[list[tuple[str, int]]] = []
        self._roots = RootNames()
        self._stack: list[tuple[str | None, int]] = []
        self.active = False
        self._hooks = [nn_module.register_module_forward_pre_hook(internal(self._pre)),
                       nn_module.register_module_forward_hook(internal(self._post),
                                                              always_call=True),
                       register_optimizer_step_pre_hook(internal(self._step))]

    def _step(self, optimizer, args, kwargs) -> None:
        self._roots.on_step(optimizer)   # the model is decided (Note [The model])
        if self.root is not None and self.root.optimizer is None:
            self.root.optimizer = _updating(optimizer, self.root.module)

    def start_step(self) -> None:
        self.active = True
        self.steps.append([])

    def _pre(self, module: torch.nn.Module, args) -> None:
        path, _ = self._roots.path(module, top_level=not self._stack)
        if not self.active:
            self._stack.append((None, 0))   # the depth only: top-level calls are named above
            return
        if path == "" and self.root is None and self._root_hook is None:
            # the model and one batch, for the probes: taken whole at the root's next call
            self._root_hook = module.register_forward_pre_hook(self._take_root,
                                                               with_kwargs=True)
        self._stack.append((path, self._clock()))

    def _take_root(self, module, args, kwargs) -> None:
        """Note [The probes call the model as the script did]."""
        self.root = ProbeInput(module, tuple(args), dict(kwargs), autocast_state())
        self._root_hook.remove()

    def _post(self, module, args, output) -> None:
        if not self._stack:
            return
        path, t0 = self._stack.pop()
        if path is not None and self.active and self.steps:
            self.steps[-1].append((path, self._clock() - t0))

    def remove(self) -> None:
        self.active = False
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._root_hook is not None:
            self._root_hook.remove()


class OpTimer(TorchDispatchMode):
    """Each op's thread CPU time, in call order (record_function markers skipped, as the
    collector skips them, so the k-th op here is the k-th event of a traced step)."""

    def __init__(self, clock=time.thread_time_ns) -> None:
        super().__init__()
        self._clock = clock
        self.ops: list[tuple[str, int]] = []

    # as the collector: compiled code runs eagerly here (with fullgraph=True it raised, and
    # the allocator pass lost its measured peak), and a wrapper subclass's own ops come
    # through, so that the k-th op is still the ledger's k-th event (Notes [Compiled code
    # runs eager under the collector], trace/compiled.py; [Wrapper subclasses], wrapped.py)
    def __enter__(self):
        eager_stance(True)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            eager_stance(False)

    # as the collector, a higher-order operator's ops one by one, so they match its events
    # (Note [Higher-order operators run by their ops], trace/higher_order.py)
    supports_higher_order_operators = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if types and defers(types):
            return NotImplemented
        if is_higher_order(func):
            return run_by_its_ops(self, func, args, kwargs)
        t0 = self._clock()
        out = func(*args, **(kwargs or {}))
        t1 = self._clock()
        if func.namespace != "profiler":
            self.ops.append((func.overloadpacket.__name__, t1 - t0))
        return out


# Note [Timing within a budget]
# The timed steps and the probes serve the cost model, and each costs whole training steps:
# a fixed 8 timed steps, 5 selective-probe and 5+ recompute-probe repetitions made the
# allocator pass 5.8x a plain 3-step run of a nanoGPT-sized model (1.9 s steps), against
# 2.4x on the tiny GPT (45 ms steps). Each now stops at TIMING_BUDGET_NS of its own work
# (at least 2 module-timed steps, 1 probe repetition): short steps keep every sample they
# had (tiny GPT: 7 module steps, 5 and 12 repetitions), long ones take fewer, and their
# band (the spread of fewer samples) says how much that costs.
TIMING_BUDGET_NS = 2.5e9


def over_budget(samples_ns: list, least: int = 2) -> bool:
    """True once `least` samples are in and they took TIMING_BUDGET_NS together."""
    return len(samples_ns) >= least and sum(samples_ns) >= TIMING_BUDGET_NS


# Note [Timed steps in a settled process]
# The timed steps follow the profiled ones at once, and the process may not have settled:
# on the MLP example (3-4 ms steps) timed steps 4-7 took 250-740 minor page faults each
# (memory the profiler's events had held went back to the system, and the steps mapped
# fresh pages again) and steps 8-10 none, as every later step of the run and every step of
# the interleaved measurement take none; the tiny GPT's timed steps take none from the
# first. A fault costs ~1 us of kernel time on the thread's own clock, so those steps (and
# the module forward times the recompute cost is made of) ran 1.2-1.3x the interleaved
# baseline's steps, in three of three runs side by side; the trace's timings had read the
# MLP at "speed 0.64" in docs/accuracy.md. So each module-timed step counts its minor
# faults, and only settled steps are kept: those with at most SETTLED_SLACK faults more
# than the fewest of any timed step. A model whose steady step maps fresh pages every step
# (tensors above glibc's mmap threshold) faults alike in every step and keeps them all.
# Module timing goes on past `module_steps` until at least half that many are settled (at
# most twice as many steps, within the budget): the MLP takes 8 instead of 7.
SETTLED_SLACK = 64        # pages: 256 KiB of fresh memory in a step is still "settled"


def minor_faults() -> int:
    """Minor page faults of this thread so far (of the process where threads are not
    counted apart; 0 where the platform counts none)."""
    try:
        import resource
    except ImportError:          # pragma: no cover - not Unix
        return 0
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    return resource.getrusage(who).ru_minflt


def settled(faults: list[int]) -> list[int]:
    """Indices of the steps that ran in a settled process (Note [Timed steps in a settled
    process]): at most SETTLED_SLACK minor faults above the fewest."""
    if not faults:
        return []
    least = min(faults)
    return [i for i, f in enumerate(faults) if f <= least + SETTLED_SLACK]


# Note [A stalled step]
# On a shared machine the scheduler can take the cores from a step for longer than the step
# itself: the tiny GPT traced beside a test run (wall clock, two intra-op threads) timed
# probe steps of 1.1-4.1 s among plain ones of 45-60 ms. A probe's reading is a difference
# of steps, so it carries such a stall whole (a recompute factor of 13.4, a per-region
# cost of -1,042 ms), and the band, the 10th-90th percentile of the readings, carried it to
# predict: `checkpoint:blocks.*` +30.2 ms (4.1-4277.3), offload (4.0-1315.8). The median
# was sound; the band a user reads was not. So a step that took more than STALL times the
# median of the steps of its kind is stalled: a module-timed step so slow is not kept
# (`StepTimers.settled`), and a probe's reading that takes a stalled step is dropped while
# one reading of its kind remains (`calm_readings`). (It once took two to remain: with two
# readings, one stalled, both were kept, and their median is their mean. TabTransformer
# traced with two threads on a loaded box read a recompute factor of 230 from such a pair,
# and predict priced `checkpoint:transformer` at +105 s a step against +27 ms on one
# thread, tests/clients/train_tabtf.py.) A slower kind of step has its own
# median (a checkpointed step is compared with checkpointed steps), and the steady spread
# of a step (+-25 % on the GPT above, quiet: +-10 %) stays well inside 1.5x. On one thread
# the clock is the thread's CPU time, which a preemption does not move: the rule rarely
# fires there. A stall is also at least STALL_NS longer than the median: a scheduler's
# slice is milliseconds, and a model of 0.2 ms steps spreads past 1.5x by itself (a test's
# three-layer net kept 3 of 5 readings on the thread's own clock without the floor).
STALL = 1.5
STALL_NS = 5_000_000


def stalled(times: list[float]) -> list[bool]:
    """Per time (ns): more than STALL x the median of `times`, and STALL_NS above it
    (Note [A stalled step])."""
    if not times:
        return []
    med = statistics.median(times)
    limit = max(STALL * med, med + STALL_NS)
    return [t > limit for t in times]


def calm_readings(readings: list[tuple]) -> list[tuple]:
    """The probe's readings whose steps did not stall (each reading's last item: True when
    none did), where any is left; all of them where none is (Note [A stalled step])."""
    calm = [r for r in readings if r[-1]]
    return calm or readings


class StepTimers:
    """Drives the two timers over the steps after the profiled ones: `module_steps` steps
    under ModuleTimer (fewer for long steps: Note [Timing within a budget]; more while the
    process settles: Note [Timed steps in a settled process]), then one under OpTimer. Call
    `on_step()` after each optimizer step; `done` once all is timed."""

    def __init__(self, module_steps: int, device: str = "cpu", probes: bool = True) -> None:
        self.module_steps = module_steps
        self.device = device
        self.probes = probes      # Note [No probes on several ranks]
        self.clock_name, self._clock = pick_clock()
        self.modules = ModuleTimer(self._clock)
        self.ops: OpTimer | None = None
        self.done = False
        self.sac_op: list[float] = []
        self.probe: dict = {}
        self.selective: dict = {}
        # why the probes did not run, when they did not (Note [No probes on several ranks]:
        # on ranks, from the start: however many steps the script runs)
        self.probes_skipped = "" if probes else "ranks"
        self.offload: dict = {}     # offload_probe: CPU only (on CUDA the copies run on a
                                    # side stream that this clock does not see)
        self.load_before = load_average()   # Note [Timings taken on a busy machine]
        self.step_ns: list[int] = []
        self.step_faults: list[int] = []   # minor page faults per module-timed step
        self.step_compiles: list[int] = []  # frames Dynamo compiled in each of them
        self._c = 0
        self._faults = minor_faults
        self._t = 0
        self._f = 0
        self._n = 0

    def on_step(self) -> None:
        if self.done:
            return
        now, faults = self._clock(), self._faults()
        if 0 < self._n and self.ops is None:       # a module-timed step just ended
            self.step_ns.append(now - self._t)
            self.step_faults.append(faults - self._f)
            self.step_compiles.append(compiles_so_far() - self._c)
        if self.ops is not None:          # the op-timed step just ended
            self.ops.__exit__(None, None, None)
            self.done = True
            if not self.probes:   # Note [No probes on several ranks]
                return
            if self.modules.root is None:   # Note [A model never called whole]
                self.probes_skipped = "uncalled"
                return
            if compiled_inside(self.modules.root):   # Note [No probes of compiled code]
                self.probes_skipped = "compiled"
                return
            self.sac_op = sac_probe(self.modules.root, len(self.ops.ops), self._clock)
            kept = [self.step_ns[i] for i in self.settled()]
            pair = 2 * statistics.median(kept) if kept else None
            # one pass (Note [One pass for the probes]); offload on the CPU only
            kinds = PROBE_KINDS if self.device == "cpu" else ("checkpoint", "selective")
            got = context_probes(self.modules.root, self._clock, kinds, pair_ns=pair)
            self.probe, self.selective = got["checkpoint"], got["selective"]
            self.offload = got.get("offload", {})
            return
        self._t, self._f, self._c = self._clock(), self._faults(), compiles_so_far()
        if self._more_module_steps():
            self.modules.start_step()
        else:
            self.modules.active = False
            self.ops = OpTimer(self._clock)
            self.ops.__enter__()
        self._n += 1

    # Note [A model never called whole]
    # The probes re-run the model's own forward on a batch it was called with (Note [The
    # probes call the model as the script did]). A script that only calls the model's
    # parts, through the model's methods (Note [A model called through its methods]),
    # gives it none: Stable-Baselines3's SAC collects with `policy.predict` and trains
    # through `actor.action_log_prob` and `critic(...)`, and `SACPolicy.forward` never
    # runs. predict said "the script ended before trace's probes ran ...; let it run 16
    # steps more than --steps" of a script that had run 1,950 more; the record now says
    # why (`probes_skipped: "uncalled"`), and so does predict.

    # Note [No probes of compiled code]
    # Every probe turn patches the regions' `forward` (plain, checkpointed, selective,
    # offloaded), a guard Dynamo checks: inside torch.compile'd code each turn compiles again
    # (seconds with inductor, up to Dynamo's recompile limit), and those turns are dropped
    # anyway (Note [A step that compiled], compiled.py), while predict refuses the policies
    # there (Note [Policies inside compiled code]). So the probes do not run on a model that
    # holds code compiled by a backend other than `eager`; the calibration prices the
    # policies outside it, and the record says why (`probes_skipped`).
    #
    # Note [No probes on several ranks]
    # Under torchrun every probe step is a forward and backward of the rank's model, with
    # the collectives DDP and FSDP put there, and how many steps each probe runs depends on
    # what that rank measured (its timed steps' length, a budget read off its own clock).
    # Two ranks that disagree by one step would wait on each other's collectives until the
    # launch's timeout killed them, losing the allocator's peaks of every rank. So on
    # several ranks the allocator pass times its steps and probes nothing: the cost model
    # uses the calibration's constants there, and the record says why (`probes_skipped:
    # "ranks"`), as predict does. Before it said nothing, and predict read the missing
    # probes as a script that ended too soon: "let it run 16 steps more than --steps" of a
    # 2-rank ring-attention LM that had run them and more (no count of steps would do).
    def settled(self) -> list[int]:
        """Indices of the module-timed steps kept (Note [Timed steps in a settled process]):
        none during which Dynamo compiled (Note [A step that compiled], compiled.py), and
        none stalled (Note [A stalled step])."""
        calm = [i for i in settled(self.step_faults) if not self.step_compiles[i]]
        slow = stalled([self.step_ns[i] for i in calm])   # Note [A stalled step]
        return [i for i, s in zip(calm, slow) if not s]

    def _more_module_steps(self) -> bool:
        if over_budget(self.step_ns) or self._n >= 2 * self.module_steps:
            return False
        return self._n < self.module_steps or \
            len(self.settled()) < (self.module_steps + 1) // 2

    def close(self) -> None:
        if self.ops is not None and not self.done:
            self.ops.__exit__(None, None, None)
            self.ops.ops = []             # a partial step matches nothing
        self.modules.remove()

    # Note [Timings taken on a busy machine]
    # The probes' costs are differences of timings, as the calibration's are (Note [A
    # calibration taken on a busy machine] in replay/calib_cache.py), and noise when other
    # processes take the cores: the GPT example traced at load average 5.8 on 2 cores timed
    # 1.2 s steps (65 ms quiet) and its probes read a recompute factor of 0.16, a negative
    # selective cost per op and an offload that saved 0.86 s. The record says so (`busy`,
    # the load average from the timers' start to the record): `predict` and `plan` print it
    # beside the times, as they do for a busy calibration.
    def record(self, device: str) -> dict | None:
        # whole module-timed steps (a step cut short has no step_ns), settled ones only
        kept = [i for i in self.settled() if self.modules.steps[i]]
        if not kept:
            return None
        return {"k": "timing", "device": device, "clock": self.clock_name,
                "step_ns": [self.step_ns[i] for i in kept],
                "unsettled_steps": len(self.step_ns) - len(self.settled()),
                **({"compiled_steps": n} if (n := sum(map(bool, self.step_compiles))) else {}),
                **({"probes_skipped": self.probes_skipped} if self.probes_skipped else {}),
                **({"busy": busy} if (busy := machine_busy(self.load_before)) else {}),
                "sac_op_ns": self.sac_op,
                "recompute_factor": self.probe.get("factor", []),
                "ckpt_region_ns": self.probe.get("region_ns", []),
                "ckpt_probe_saves": self.probe.get("saves_per_region", 0.0),
                "ckpt_probe_regions": self.probe.get("regions", 0),
                **({"ckpt_step_ns": self.probe["step_ns"]} if "step_ns" in self.probe else {}),
                **({"ckpt_probe_paths": self.probe["paths"], "ckpt_early_stop": True}
                   if self.probe.get("early_stop") else {}),
                **({"selective_probe": self.selective} if self.selective else {}),
                **({"offload_probe": self.offload} if self.offload else {}),
                "modules": [[[p, int(ns)] for p, ns in self.modules.steps[i]] for i in kept],
                "ops": [[o, int(ns)] for o, ns in (self.ops.ops if self.ops and self.done
                                                    else [])]}


def _recompute_everything(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.PREFER_RECOMPUTE


def sac_probe(root: ProbeInput | None, ops_per_step: int, clock, reps: int = 5) -> list[float]:
    """Selective checkpointing's cost per op *on this model's ops*: its forward under
    no_grad, plain and under SAC's caching mode (every op PREFER_RECOMPUTE), interleaved,
    `reps` times at most (Note [Timing within a budget]); (t_sac - t_plain) / ops in that
    forward. Run after the timed steps (it draws random numbers for dropout; nothing after
    it is measured). A generic op chain
    underprices real ops by half (tiny GPT: 16 us per op here, 8 us for 8x8 `sin`s)."""
    if root is None or not ops_per_step:
        return []
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    counter = OpTimer(clock)
    out = []
    try:
        with torch.no_grad():
            with counter:
                root()
            n = len(counter.ops)
            taken: list[int] = []
            for _ in range(reps):
                if over_budget(taken, least=1):
                    break
                t0 = clock()
                root()
                t1 = clock()
                fwd_ctx, _ = create_selective_checkpoint_contexts(_recompute_everything)
                with fwd_ctx:
                    root()
                t2 = clock()
                out.append(((t2 - t1) - (t1 - t0)) / max(n, 1))
                taken.append(t2 - t0)
    except Exception:      # a model this probe cannot re-run: the calibration's value serves
        return []
    return out


def _tensors(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [o for o in out if isinstance(o, torch.Tensor)]
    if isinstance(out, dict):
        return [o for o in out.values() if isinstance(o, torch.Tensor)]
    return []


# Note [A probe's loss]
# The probe's step backpropagates the sum of the model's first output (a transformers
# model's loss or logits, a plain model's tensor). Where that output has no gradient, the
# sum of the outputs that have one: Stable-Baselines3's `ActorCriticPolicy.forward` returns
# (actions, values, log_prob), its actions sampled integers, and every probe step raised
# "no differentiable output": no checkpoint, selective or offload cost was probed, while
# predict, seeing the selective op probe's numbers, said nothing of the calibration
# pricing them. The sum reaches both heads (`log_prob` through `mlp_extractor.policy_net`,
# `values` through `value_net`), as PPO's loss does.
def _first_tensor(out):
    found = _tensors(out)
    first = found[0] if found else None
    if first is None or first.requires_grad:
        return first
    graded = [t for t in found if t.requires_grad and t.is_floating_point()]
    return sum(t.float().sum() for t in graded) if graded else first


# Note [Recompute probe in context]
# What a checkpointed region adds to a training step, measured on *this model* after the
# timed steps, the way policies run it: region by region, each re-run inside backward right
# before its own gradients. The regions are the model's repeated blocks (the numbered
# children with the most parameters: `blocks.0`, `blocks.1`, ...; else the root's children
# that have parameters; else the whole model). Per repetition, one step plain and one with
# every region under memledger's checkpoint wrapper (early stop as `measure` runs it),
# forward + backward of `output.sum()`; each region's inner forward is timed as it runs,
# so the re-run inside backward is measured directly, up to early stop's raise (as many
# repetitions as ~2.5 s allows, 1 to 6: `probe_reps`; each mode runs twice and only its
# second step is timed, as the interleaved benchmark does: a step right after a switch is
# not a policy's usual step):
#     factor     = re-run / plain forward of the regions (over the re-run share: costs.py)
#     region_ns  = (t_ckpt - t_plain - re-run) / regions      (everything else, per region)
# with a step's own part taken out of region_ns (Note [A checkpointed step's own cost])
# and the saves made inside the regions are counted in the first untimed plain step. The
# cost model takes call = region_ns - saves per region x the calibration's per-save cost.
# Why: torch's checkpoint costs far more per call inside a real step than in isolation.
# Tiny GPT here (4 blocks, 28 saves each, one thread): re-run 1.05-1.08x the block's plain
# forward, and 0.6-1.5 ms per region besides (checkpointing only `ln_1`, one op, costs
# 1.0 ms per region; `gelu` 0.6 ms), against 84 us + 28 x 10 us from the isolated
# calibration on 64-float `sin` chains: that gap was the GPT's 0.75-0.87 ratio.
# That per-region cost moves with the machine, not only the model: 0.1-0.6 ms per GPT block
# quiet, 0.5-1.7 ms with two busy neighbours, in the same process; run side by side with
# training steps the probe reads what they pay at that moment (0.81-1.05 of their added
# time over 15 runs: benchmarks/probe_vs_training.py, docs/accuracy.md).
_NUMBERED = r"^(?:(?P<prefix>.+)\.)?(?P<index>\d+)$"   # a top-level index: prefix ''


def probe_regions(module: torch.nn.Module) -> list[str]:
    """The regions the recompute probe checkpoints (Note [Recompute probe in context])."""
    import re

    from memledger.ledger.names import numbered_layers

    groups: dict[str, list[str]] = {}
    mods = list(named_modules(module))
    for name, m in mods:
        hit = re.match(_NUMBERED, name)
        if hit and next(module_parameters(m), None) is not None:
            groups.setdefault(hit["prefix"] or "", []).append(name)
    if "" in groups:   # Note [A model that is itself a Sequential] (replay/plan.py)
        pipeline = numbered_layers((n, type(m).__name__) for n, m in mods)
        groups[""] = [n for n in groups[""] if n not in pipeline]
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    if groups:
        def n_params(k: str) -> int:
            mods = dict(named_modules(module))
            return sum(p.numel() for n in groups[k] for p in module_parameters(mods[n]))
        return groups[max(groups, key=n_params)]
    # the model's own children: torch.compile's wrapper holds the model as `_orig_mod`,
    # whose children are the model's (`plain_name`)
    kids = [n for n, m in dict(named_modules(module)).items()
            if n and "." not in n and next(module_parameters(m), None) is not None]
    return kids or [""]


def probe_reps(pair_ns: float, max_reps: int = 15) -> int:
    """Repetitions of the probe (2 plain + 2 checkpointed steps each) for a model whose plain
    + checkpointed pair of steps takes `pair_ns`: as many as TIMING_BUDGET_NS allows, at
    least one, at most `max_reps`. The difference of two whole steps is noisy on a shared
    machine (+-0.7 ms per GPT block at load 4), so short steps repeat it; a long step needs
    fewer, because what the probe measures beside the re-run (~0.1-1.7 ms per region) is
    small against its forward, and a fixed 5 repetitions of a 1 s step would cost 20 s, many
    times the user's own steps. Tiny GPT (pair ~0.1 s): 12; a 0.5 s pair: 2; 2 s: 1."""
    return max(1, min(int(TIMING_BUDGET_NS // max(2 * pair_ns, 1)), max_reps))


# Note [The probe's optimizer step]
# The probe's step was forward + backward of `output.sum()`, back to back. In a training
# step the optimizer runs between two backward passes, and a checkpointed region cost more
# there: in one process, every region of the MLP example checkpointed added 0.80-0.88 of
# the training step's added time to the probe's step (docs/accuracy.md), ~0.12 ms a region,
# per call and not per byte (the 5,130-parameter head as much as the 262,656-parameter
# fc2). Varied one part at a time (a helper session; docs/accuracy.md): cross-entropy, a
# fresh batch, zero_grad and an input that needs a gradient each moved it by <= 0.03 ms;
# AdamW run between the steps made up half of it (it streams parameters, gradients and
# both moments through the cache, and the re-run's machinery then runs cold: an 8 MiB
# scratch write between steps did much the same), and the rest is the optimizer step
# itself, which ran ~0.11 ms slower after a checkpointed backward (not explained: no page
# faults, same gradient strides). So the probe's step ends with the script's kind of
# optimizer step, inside the timed span, on copies of the trainable parameters whose
# gradients are the probe's own: the model's weights and the script's optimizer are not
# touched. Cost: the copies and that optimizer's state (Adam: 3x the trainable bytes)
# while the probes run, so a model whose 3x is more than a quarter of the device's free
# memory goes without the pass; a step that fails (LBFGS wants a closure, a device out of
# memory) drops it too, and the probe goes on without it.
class OptimizerPass:
    """One step of the script's kind of optimizer over copies of `module`'s trainable
    parameters, reading the gradients the probe's backward left on them."""

    def __init__(self, params: list, optimizer) -> None:
        self.params = params
        self.copies = [p.detach().clone() for p in params]
        kind = type(optimizer)
        # the settings its constructor takes (AdamW's defaults name one it sets itself)
        takes = inspect.signature(kind.__init__).parameters
        settings = {k: v for k, v in optimizer.defaults.items() if k in takes}
        self.optimizer = kind(self.copies, **settings)
        # its step without torch's step hooks: memledger's own count a training step at
        # each optimizer step (a probe step read as the script's ended the allocator pass
        # inside the probes), and the script's hooks are not the probe's to call
        step = kind.step
        self._step = step.__wrapped__ if getattr(step, "hooked", False) else step

    @classmethod
    def build(cls, module: torch.nn.Module, optimizer) -> "OptimizerPass | None":
        if optimizer is None:
            return None
        params = [p for p in module_parameters(module) if p.requires_grad]
        if not params or any(type(p.data) is not torch.Tensor for p in params):
            return None   # sharded (DTensor) or wrapped parameters: not copied
        need = 3 * sum(p.nbytes for p in params)   # copies + two moments (Adam's)
        if need > _room(params[0].device) // 4:
            return None   # a model near the memory's size: the probe goes without it
        try:
            return cls(params, optimizer)
        except Exception:   # a constructor that wants more than its defaults
            return None

    def step(self) -> "OptimizerPass | None":
        """Itself, or None once a step failed (and its copies are let go)."""
        try:
            for c, p in zip(self.copies, self.params):
                c.grad = p.grad
            self._step(self.optimizer)
            return self
        except Exception:
            return None


def _room(device: torch.device) -> int:
    """Free bytes on `device` (the CPU: physical memory available now; unknown: 0, so the
    optimizer pass is skipped)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        if device.type == "cpu":
            return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, RuntimeError, ValueError):
        pass
    return 0


def _updating(optimizer, module: torch.nn.Module):
    """`optimizer` if it updates a parameter of `module` (a GAN's other optimizer does
    not), else None."""
    mine = {id(p) for p in module_parameters(module)}
    held = (p for g in getattr(optimizer, "param_groups", ()) for p in g.get("params", ()))
    return optimizer if any(id(p) in mine for p in held) else None


class _RegionSteps:
    """Training steps of the probe's call (forward + backward of `output.sum()`, then the
    script's kind of optimizer step on copies: Note [The probe's optimizer step]) with the
    model's probe regions run plain or wrapped (checkpointed, offloaded), each region's
    forward timed as it runs: in forward, and again when a checkpoint re-runs it in
    backward (Note [Recompute probe in context])."""

    def __init__(self, root: ProbeInput, clock) -> None:
        self.root = root
        self.clock = clock
        self.named = dict(named_modules(root.module))
        self.paths = probe_regions(root.module)
        self.acc = {"fwd": 0, "rerun": 0, "saves": 0, "depth": 0, "phase": "fwd"}
        self.dropped: dict[str, str] = {}      # mode -> why it left the cycle
        self.update = OptimizerPass.build(root.module, root.optimizer)

    def _timed(self, orig):
        acc, clock = self.acc, self.clock

        def forward(*a, **k):
            t0 = clock()
            acc["depth"] += 1
            try:
                return orig(*a, **k)
            finally:
                acc["depth"] -= 1
                acc["fwd" if acc["phase"] == "fwd" else "rerun"] += clock() - t0
        return forward

    def _count(self, t):
        self.acc["saves"] += self.acc["depth"] > 0
        return t

    def run(self, wrap=None, counting: bool = False) -> tuple[int, int, int, int]:
        """(step, regions' forward, regions' re-run, saves inside regions) in ns; `wrap`
        (inner_forward, module) -> forward puts a policy's wrapper around each region."""
        acc = self.acc
        acc.update(fwd=0, rerun=0, saves=0, phase="fwd")
        self.root.module.zero_grad(set_to_none=True)   # fresh gradients, as training has
        for p in self.paths:
            m = self.named[p]
            inner = self._timed(type(m).forward.__get__(m))
            m.forward = wrap(inner, m) if wrap is not None else inner
        hooks = torch.autograd.graph.saved_tensors_hooks(self._count, lambda t: t) \
            if counting else contextlib.nullcontext()
        try:
            with hooks:
                t0 = self.clock()
                y = _first_tensor(self.root())
                acc["phase"] = "bwd"
                if y is None or not y.requires_grad:
                    raise RuntimeError("no differentiable output")
                y.float().sum().backward()
                if self.update is not None:
                    self.update = self.update.step()
                return self.clock() - t0, acc["fwd"], acc["rerun"], acc["saves"]
        finally:
            for p in self.paths:
                self.named[p].__dict__.pop("forward", None)

    def cycles(self, modes: dict, reps: dict[str, int], turn: int = 2):
        """Yield {mode: timed run} per repetition, the modes taking turns: each runs `turn`
        steps in a row and the first is not timed (a step right after a switch runs on an
        allocator shaped by the other mode, and a policy's steps follow its own); mode m
        takes part in the first reps[m] repetitions. `turn` 3 would cost fewer steps per
        repetition, but its pairs read less than `turn` 2's (tiny GPT: 1.2-2.6 ms less
        added time per step, in each of 4 runs of benchmarks/probe_vs_training.py
        --probe-turn 2 3: docs/performance.md), so the probes keep 2."""
        k, done = max(turn - 1, 1), 0

        def turn_of(wrap) -> list:
            self.run(wrap)
            before = compiles_so_far()
            runs = [self.run(wrap) for _ in range(k)]
            return runs if compiles_so_far() == before else []   # Note [A step that
                                                                  # compiled], compiled.py
        while any(done < reps[m] for m in modes):
            timed: dict[str, list] = {}
            for m, wrap in list(modes.items()):
                if done < reps[m]:
                    runs = self._or_drop(modes, m, lambda: turn_of(wrap))
                    if runs:
                        timed[m] = runs
            for i in range(k):
                yield {m: runs[i] for m, runs in timed.items()}
            done += k

    def warm_up(self, modes: dict) -> None:
        """One step of each mode (dropping a mode this model cannot run)."""
        for m, wrap in list(modes.items()):
            self._or_drop(modes, m, lambda: self.run(wrap))

    def _or_drop(self, modes: dict, m: str, steps):
        """steps(); a mode that raises (a model selective checkpointing cannot run, offload's
        copies on a full disk) leaves `modes`, and the others go on; `dropped` keeps why."""
        try:
            return steps()
        except Exception as e:
            del modes[m]
            self.dropped[m] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            return None


# Note [One pass for the probes]
# The recompute, selective and offload probes each compare two kinds of training step:
# plain and checkpointed, checkpointed and selective, plain and offloaded. Run one after
# the other they cost 12 steps a repetition (4 each); run as one cycle of offloaded,
# plain, checkpointed and selective turns the same comparisons cost 8, and every pair is
# still two neighbouring turns of one process (with the offloaded turn last, after the
# selective one, its ratio read 1.19 on the tiny GPT and 1.33 on the CNN in one quiet run,
# against 1.09-1.16 and 0.85-1.12 before). `context_probes` runs that cycle; the
# three probe functions below are it with one kind each (what the tests and benchmarks
# call). Each kind keeps its own cap on repetitions (checkpoint 6, the others 5), all
# sized by the same budget (`probe_reps`); the one-region turn (Note [A checkpointed
# step's own cost]) runs as often as checkpoint's, which went from 8 to 6 to pay for it:
# 56 training steps a pass on the tiny GPT, against 52. Checkpoint's cap was 15 when it
# ran alone; in the cycle its extra repetitions beyond the others' cost 4 steps each, and
# on the tiny GPT (15 then) they were half the pass. Its readings per repetition spread
# 0.4-1.1 ms per block quiet: the median of the first 8 of one trace's 15 was 0.709 ms,
# of all 15 0.713. The pair's cost sizes the repetitions: two
# timed training steps when the caller knows them (a long step is not run twice more just
# to be measured); else one step of each mode after a warm-up of each (a process's first
# wrapped step pays for its set-up).
PROBE_KINDS = ("checkpoint", "selective", "offload")
MAX_REPS = {"checkpoint": 6, "selective": 5, "offload": 5}


def context_probes(root: ProbeInput | None, clock, kinds=PROBE_KINDS,
                   pair_ns: float | None = None, turn: int = 2,
                   max_reps: dict | None = None, saves: int | None = None) -> dict[str, dict]:
    """{kind: its probe's record} for `kinds` (Notes [Recompute probe in context],
    [Selective probe in context], [Offload probe in context], [One pass for the probes]);
    a kind the model cannot be probed for maps to {}. `saves`: the saves inside the
    probe regions when something has counted them already (else an untimed plain step
    with a counting hook counts them: the hook costs time)."""
    out: dict[str, dict] = {k: {} for k in kinds}
    if root is None:
        return out
    from memledger.measure.apply import _checkpointed, _offloaded, _selective_context
    from memledger.measure.offload import Offloader, where_copies_go
    from memledger.replay.policies import DEFAULT_SAVE_OPS

    caps = {**MAX_REPS, **(max_reps or {})}
    steps = _RegionSteps(root, clock)
    n = len(steps.paths)
    # the cycle's order puts each compared pair side by side: offloaded, plain,
    # checkpointed, selective
    modes: dict = {}
    off, wraps = None, {"offload": 0}
    if "offload" in kinds:
        module = root.module
        params = {ptr for t in (*module_parameters(module), *module.buffers())
                  for ptr in storage_ptrs(t)}
        off = Offloader(skip_storages=params)

        def offloaded(inner, m):
            wraps["offload"] += 1            # once per region per offloaded step
            return _offloaded(inner, off)
        modes["offload"] = offloaded
    if "checkpoint" in kinds or "offload" in kinds:
        modes["plain"] = None
    first = steps.named[steps.paths[0]]
    if "checkpoint" in kinds and n > 1:    # Note [A checkpointed step's own cost]
        modes["one"] = lambda inner, m: (_checkpointed(inner, m, None) if m is first
                                         else inner)
    if "checkpoint" in kinds or "selective" in kinds:
        modes["checkpoint"] = lambda inner, m: _checkpointed(inner, m, None)
    if "selective" in kinds:
        sel = _selective_context(DEFAULT_SAVE_OPS)
        modes["selective"] = lambda inner, m: _checkpointed(inner, m, sel)
    pairs: dict[str, list] = {k: [] for k in kinds}
    ones: list = []           # (plain, one region checkpointed) of the checkpoint pairs
    try:
        if saves is None:
            saves = steps.run(counting=True)[3]
        if not saves:   # nothing saved in the regions (the script checkpoints them itself:
            return out  # Note [The script's own checkpoint]): nothing to re-run or offload
        if not pair_ns:
            steps.warm_up(modes)            # each mode's first step pays for its set-up
            if len(modes) < 2:
                return out
            base, wrapped = list(modes)[:2]
            pair_ns = steps.run(modes[base])[0] + steps.run(modes[wrapped])[0]
        want = {k: probe_reps(pair_ns, caps[k]) for k in kinds}
        reps = {"plain": max(want.get("checkpoint", 0), want.get("offload", 0)),
                "one": want.get("checkpoint", 0),
                "checkpoint": max(want.get("checkpoint", 0), want.get("selective", 0)),
                "selective": want.get("selective", 0), "offload": want.get("offload", 0)}
        runs = list(steps.cycles(modes, reps, turn))
        slow = _stalled_runs(runs)
        for kind, used in (("checkpoint", ("plain", "checkpoint", "one")),
                           ("selective", ("checkpoint", "selective")),
                           ("offload", ("plain", "offload"))):
            if kind not in kinds:
                continue
            a, b = used[:2]
            got = [(t[a], t[b], t.get("one"), not slow & {(i, m) for m in used})
                   for i, t in enumerate(runs) if a in t and b in t]
            got = calm_readings(got)                # Note [A stalled step]
            pairs[kind] = [(g[0], g[1]) for g in got]
            if kind == "checkpoint":
                ones = [g[2] for g in got]
    except Exception:      # a model these probes cannot run: the calibration serves
        return {k: {} for k in kinds}
    finally:
        where = where_copies_go() if off is not None else ""
        if off is not None:
            off.close()
    if pairs.get("checkpoint"):
        out["checkpoint"] = _checkpoint_record(pairs["checkpoint"], ones, n, saves,
                                               steps.paths)
    if pairs.get("selective"):
        out["selective"] = {"region_ns": [(s_[0] - c[0]) / n for c, s_ in pairs["selective"]],
                            "paths": steps.paths, "save_ops": list(DEFAULT_SAVE_OPS)}
    # one offloaded step's stream: every offloaded step writes the same storages, so the
    # Offloader's counters over all of them (timed or not) divide evenly; counting them in
    # a step of their own cost one more training step
    if "offload" in steps.dropped:    # said by predict: the calibration prices offload
        out["offload"] = {"failed": steps.dropped["offload"].removeprefix("OutputError: ")
                          .removeprefix("memledger: ")}
    if pairs.get("offload") and off.storages_out:
        r = wraps["offload"] / n
        out["offload"] = {"added_ns": [o[0] - p[0] for p, o in pairs["offload"]],
                          "bytes": round(off.bytes_out / r),
                          "storages": round(off.storages_out / r), "saves": saves,
                          "where": where}
    return out


def _stalled_runs(runs: list[dict]) -> set[tuple[int, str]]:
    """(repetition, mode) of the probe's stalled steps (Note [A stalled step]), each mode's
    steps against their own median."""
    out = set()
    for m in {m for t in runs for m in t}:
        idx = [i for i, t in enumerate(runs) if m in t]
        out |= {(i, m) for i, s in zip(idx, stalled([runs[i][m][0] for i in idx])) if s}
    return out


# Note [A checkpointed step's own cost]
# What checkpointing adds to a step is not all per region. MLP example, whole training
# steps, one process (OMP_NUM_THREADS=1 benchmarks/region_count.py --example mlp): fc1
# checkpointed +0.40 ms, fc1 and fc2 +0.76, all three +1.07 on a quiet machine (0.33 ms
# per region, 0.07 ms per step), +0.63, +1.04, +1.22 with two other jobs running (~0.3 ms
# per step), though each region re-runs one `t` (~10 us). Probed with every region
# checkpointed, the step's part was spread over the regions, and a policy on fewer regions
# than the probe's was priced low, the more so the busier the machine. So the cycle
# checkpoints the first region alone as well (mode "one"), and per repetition, with D =
# step - plain step - re-run time (what the checkpointed step paid besides re-running):
#     per region  (D_all - D_one) / (n - 1)        per step  D_one - per region
# The probe runs early stop as `measure` runs it (torch's default); it ran it off to time
# whole re-runs, so a Linear re-ran its `addmm` in the probe and not in the policy (early
# stop raises at addmm's packs, before its kernel): the selective probe, selective minus
# checkpointed, then read the caching mode's cost less an addmm, and the MLP's
# `selective:fc*` was priced at 0.62-0.72 of measured (0.90 after). The call cost now
# includes the stop's raise, and the re-run it times is the part early stop re-runs, so
# its factor is that re-run over the regions' plain forward, which the cost model divides
# by the same share the replay re-runs (memledger/replay/costs.py, `_probe_share`).
def _checkpoint_record(pairs: list, ones: list, n: int, saves: int, paths: list) -> dict:
    """The recompute probe's record (Note [A checkpointed step's own cost])."""
    region, step = [], []
    for (p, c), o in zip(pairs, ones):
        d_all = c[0] - p[0] - c[2]
        if o is None:
            region.append(d_all / n)
            continue
        d_one = o[0] - p[0] - o[2]
        region.append((d_all - d_one) / (n - 1))
        step.append(d_one - region[-1])
    return {"factor": [c[2] / max(p[1], 1) for p, c in pairs], "region_ns": region,
            **({"step_ns": step} if step else {}), "early_stop": _early_stop(),
            "regions": n, "saves_per_region": saves / n, "paths": list(paths)}


def _early_stop() -> bool:
    """Whether checkpoint stops its re-runs early here: torch's default, unless the script
    turned it off for everything (`set_checkpoint_early_stop(False)` around its loop)."""
    import torch.utils.checkpoint as ckpt

    flag = getattr(ckpt, "_enable_checkpoint_early_stop", None)
    return True if flag is None else bool(flag)


def recompute_probe(root: ProbeInput | None, clock, max_reps: int = 8,
                    pair_ns: float | None = None, turn: int = 2) -> dict:
    """{"factor": [...], "region_ns": [...], "saves_per_region": float, "regions": int}:
    what re-running this model's blocks inside backward costs, per repetition (Note
    [Recompute probe in context]); {} when the model cannot be probed. Gradients it leaves
    in `.grad` are never used: the pass ends after it."""
    return context_probes(root, clock, ("checkpoint",), pair_ns, turn,
                          {"checkpoint": max_reps})["checkpoint"]


# Note [Selective probe in context]
# Selective checkpointing costs what checkpointing does, plus its caching mode on every op
# of the region, forward and re-run (`sac_op`, sac_probe above), minus the save-list ops
# the re-run skips, plus what keeping their outputs costs. That last part the op times do
# not show, and it is not small: tiny GPT, 4 blocks, 24 saved matmul outputs, one thread,
# interleaved training steps: selective with nothing saved +30.3 ms over plain, with the
# default save list +25.8 ms: keeping the 24 outputs saved 4.5 ms, where the skipped ops
# took 8.4 ms of op time in a one-thread ledger, and `sac_op` x ops priced the no-save
# run at checkpoint + 9.0 ms (measured + 9.6 ms; scratch measurements, which
# benchmarks/probes_vs_policies.py now repeats with the probe beside them). Counting only
# the skipped op time put every selective policy at 0.58-0.91 of measured (MLP, CNN, GPT,
# BERT: docs/accuracy.md). So `trace` measures it on the model: the probe regions under
# selective checkpointing with the default save list, paired with the same regions plainly
# checkpointed, in real forward + backward steps (Note [One pass for the probes]; early
# stop as `measure` runs it, in both). Per repetition: (t_selective - t_checkpoint) /
# regions.
# The cost model (memledger/replay/costs.py) solves that for a cost per kept op, over the
# probe regions' own ops in the ledger. At most 5 repetitions, as the offload probe.
def selective_probe(root: ProbeInput | None, clock, max_reps: int = 5,
                    pair_ns: float | None = None) -> dict:
    """{"region_ns": [...], "paths": [...], "save_ops": [...]}: what selective checkpointing
    (the default save list) adds per probe region over plain checkpointing, per repetition
    (Note [Selective probe in context]); {} when the model cannot be probed."""
    return context_probes(root, clock, ("selective",), pair_ns,
                          max_reps={"selective": max_reps})["selective"]


# Note [Offload probe in context]
# The calibration prices offload from bursts of uniform storages written and read back in
# isolation (memledger/measure/calibrate.py): 0.35 ns per byte here. A training step streams
# the model's own storages every step, sizes mixed, with forward and backward between the
# writes and the reads; measured that way the tiny GPT's `offload:blocks.*` costs 18.5 ms a
# step against 14.0 ms priced (0.75; tmpfs, where the cost holds still), and every offload
# ratio was a miss (0.21-0.60 on ext4, which also drifts from process to process; that was
# the file-per-storage offloader, before Note [One file, slots reused]). With this probe,
# quiet: offload ratios 0.87-1.09 on the GPT, the CNN and a transformers BERT.
# So `trace` measures offload as it measured checkpointing: the probe regions offloaded
# with memledger's own Offloader (the folder `measure` writes to by default), in real
# forward + backward steps, interleaved with plain ones (Note [One pass for the probes]). Per
# repetition it records the added time; once, the storages and bytes written and the saves
# packed. At most 5 repetitions: its readings spread less than the recompute probe's (2-10 %
# on the tiny GPT). The cost model
# (memledger/replay/costs.py) scales the calibration's price of a storage (file + bytes x
# per_byte) so that the probe's own stream costs what it measured.
def offload_probe(root: ProbeInput | None, clock, max_reps: int = 5,
                  pair_ns: float | None = None, saves: int | None = None) -> dict:
    """{"added_ns": [...], "storages": n, "bytes": b, "saves": s, "where": str} per probe
    step (Note [Offload probe in context]); {} when the model cannot be probed. `saves`: the
    saves inside the probe regions when the recompute probe has counted them already
    (else a plain step of its own counts them)."""
    return context_probes(root, clock, ("offload",), pair_ns,
                          max_reps={"offload": max_reps}, saves=saves)["offload"]
