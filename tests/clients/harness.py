"""Trace, predict and measure a client script in this process (for the test tier).

The same code paths as `memledger trace` and `memledger measure` (the trace worker's ledger
and allocator passes, the measure worker), called as functions instead of fresh processes:
transformers takes ~3 s of CPU to import, and a tier of 4 models x 5 policies in fresh
processes would cost minutes. Each run builds its model from scratch, so the CPU profiler
(which counts only what is allocated after it starts) sees the same bytes as a fresh
process would; `benchmarks/clients.py` measures the same clients in fresh processes.

A tier module (tests/clients/test_*_clients.py) never imports its library at its top level,
`pytest.importorskip` included: it skips with `skip_without` and imports in its tests or in
`imported_first` (Note [Tier modules import nothing at collection]).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gc
import importlib
import importlib.util
import inspect
import io
import json
import os
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memledger.errors import EXIT_OK, EXIT_USAGE, PolicyError
from memledger.ledger.model import Ledger
from memledger.ledger.writer import append_records
from memledger.measure import worker as measure_worker
from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict
from memledger.trace import worker as trace_worker
from memledger.trace.collector import made_before_the_script
from memledger.trace.script import earlier_objects_frozen

HERE = Path(__file__).resolve().parent

# class_resolver (pykeen's) registers every torch Optimizer subclass by its name when its
# torch module is first imported, and refuses two of one name: imported after
# pytorch_optimizer (whose RAdam is such a subclass), as a worker that ran that tier first
# did, every pykeen test errored at pykeen's import. Imported here, before any tier, it sees
# torch's own optimizers alone (3 ms). And before peft: peft imports bitsandbytes where it
# is installed (galore-torch's requirement), whose Adam, AdamW, SGD... are such subclasses
# too: imported after it, the harness itself failed to import ("Conflict on registration of
# name adam"), and every test module of the client tier with it.
try:
    import class_resolver.contrib.torch  # noqa: F401
except ImportError:   # the pykeen tier skips without it
    pass


# Note [Tier modules import nothing at collection]
# Every pytest-xdist worker imports every test module to collect it, and each worker paid
# every top-level import of every tier for the tests it never ran: `pytest --co` took
# ~16 s of CPU per worker, ~9 of them the tiers' libraries (`pytest.importorskip` imports
# too) and peft, which this harness imported at its top. So a tier module imports its
# library nowhere at its top level: it skips with `skip_without(...)`
# (`importlib.util.find_spec`, which imports nothing) and imports the library in
# `imported_first(...)`, a module-scoped fixture that runs before its first test, where
# what the library makes at import matters (Note [Tensors made at import]), or else inside
# its tests. This harness imports nothing heavier than torch and memledger at its top.
def skip_without(*names: str) -> None:
    """At a tier module's top: skip the module where one of `names` (top-level packages: a
    dotted name imports its parents) is not installed, without importing any (Note [Tier
    modules import nothing at collection])."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed", allow_module_level=True)


def imported_first(*names: str):
    """A module-scoped autouse fixture that imports `names` before the module's first test
    (Note [Tier modules import nothing at collection]): `_imported = imported_first(...)`
    at the module's top."""
    @pytest.fixture(scope="module", autouse=True)
    def _imported() -> None:
        for name in names:
            importlib.import_module(name)
    return _imported


# Note [Numbers that depend on the CPU]
# Which kernels an op runs depends on the CPU: with AVX-512 bf16 (the Intel boxes most tiers
# were pinned on) oneDNN runs bf16 matmuls natively and takes kernel scratch the allocator
# sees; on an AVX2-only CPU (an AMD EPYC box, 2026-12-06) the same matmuls take no scratch
# but some make other tensors, a bf16 LSTM is refused by oneDNN, and a convolution's
# scratch grows with the intra-op threads. A test pins the number of each kind it was
# measured on (`on_this_cpu`); on a kind it was not, it still holds the relations (ledger
# with scratch = allocator, predicted = measured), which are the product's claim. An AMD
# EPYC with AVX-512 bf16 (Zen 4, 2026-12-07) is a kind of its own: oneDNN runs the same bf16
# matmuls natively there, and six pins of the Intel kind read other bytes (egnn's allocator
# 613,828 B against 611,780, heavyball's 1,247,332 against 1,341,540, optimi's offload
# 231,712 against 228,768), every relation holding.
def cpu_kind() -> str:
    """"bf16" (Intel, AVX-512 with native bf16), "amd_bf16" (AMD, the same), "avx2", or
    torch's capability name otherwise."""
    import torch

    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return "amd_bf16" if _cpu_vendor() == "AuthenticAMD" else "bf16"
    return torch.backends.cpu.get_cpu_capability().lower()


def native_bf16() -> bool:
    """This CPU runs bf16 matmuls natively (either bf16 kind): kernel scratch the allocator
    sees, a bf16 LSTM oneDNN accepts."""
    return cpu_kind() in ("bf16", "amd_bf16")


@functools.cache
def _cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id ("" where there is none to read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def on_this_cpu(**pins: int | None) -> int | None:
    """The pin for this CPU's kind (`on_this_cpu(bf16=3_072, avx2=0)`); None where the test
    pinned none for it (Note [Numbers that depend on the CPU])."""
    return pins.get(cpu_kind())


def assert_pinned(actual: int, **pins: int | None) -> None:
    """`actual` equals this CPU kind's pin, where there is one."""
    pin = on_this_cpu(**pins)
    assert pin is None or actual == pin, f"{actual:,} != {pin:,} on a {cpu_kind()} CPU"


@dataclass
class PolicyRun:
    policy: str
    predicted: int | None = None    # None: refused
    measured: int | None = None     # None: refused
    predict_refusal: str = ""
    measure_refusal: str = ""


@dataclass
class ClientRun:
    script: str
    argv: list[str]
    ledger_peak: int
    allocator_peak: int
    ledger: Ledger
    policies: dict[str, PolicyRun] = field(default_factory=dict)

    @functools.cached_property
    def summary(self):
        """The ledger's Summary (`memledger show --json`), made when a test first reads it:
        0.1-0.4 s a ledger (its idle and largest-tensor tables), which most runs never read."""
        return self.ledger.summary()


def _fresh_library_state() -> None:
    """Each pass starts as in the fresh process the CLI gives it. accelerate keeps its state
    in process-wide singletons (AcceleratorState, GradientState: the accumulation counter);
    left by an earlier run in the same xdist worker (transformers' Trainer, another pass of
    the same script stopped mid-accumulation), `train_loops.py --loop accumulate` synced
    on other micro-batches: ledger 2,493,820 B against allocator 2,531,708 B in a full
    `make test`, 2,821,628 = 2,821,628 alone."""
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(True)
        state.GradientState._reset_state()
    # pyro keeps its parameters (and their gradients) in a process-wide param store until
    # the next script clears it: freed inside the next pass, they read as bytes given back
    # that the pass never saw made, 11,024 B under on train_pyro.py's `det` baseline
    params = sys.modules.get("pyro.poutine.runtime")
    if params is not None:
        params._PYRO_PARAM_STORE.clear()
    # transformers caches tensors process-wide in `lru_cache`s on static methods (RT-DETR's
    # anchors and sine position embeddings): a later pass found them made, and measured
    # 5,524 B under the pass that made them
    for cache in _transformers_caches():
        cache.cache_clear()
    # snntorch lists every spiking neuron ever made in a class attribute
    # (`SpikingNeuron.instances`), and `utils.reset(net)` resets the state of all of them:
    # an earlier pass's neurons got new zeros in the next pass, which read 5,184 B over the
    # ledger per earlier pass on train_snntorch.py --mode seq (allocator pass -5,184 B,
    # the fourth measured policy -20,736 B); a fresh process lists none
    neurons = sys.modules.get("snntorch._neurons.neurons")
    if neurons is not None:
        neurons.SpikingNeuron.instances.clear()
    # e3nn keeps its Clebsch-Gordan tables (float64 tensors) in module-level `lru_cache`s:
    # the allocator pass found the ledger pass's, and read 4,160 B under it on
    # train_e3nn.py's float64 potential
    # equiformer-pytorch keeps its equivariant basis (made in the model's __init__) in an
    # `lru_cache` over its on-disk cache: the allocator pass registered the ledger pass's
    # tensors as buffers, 36 B under it on train_equiformer.py
    # ring-attention-pytorch keeps `get_rank`, `get_world_size` and `is_distributed` in
    # `lru_cache`s: after a one-process pass, a simulated rank of 2 (`--fake --world 2`)
    # found world size 1 and ran with the ring off, 28,968 B against its 36,240 B alone;
    # se3-transformer-pytorch keeps its Q_J matrices (made at the first forward) the same way
    # torch-harmonics keeps its Legendre tables, quadrature nodes and DISCO filter tensors
    # in `functools.lru_cache`s behind a wrapper of its own (`torch_harmonics.cache.
    # lru_cache`, which hands back deep copies): the ledger pass made and kept them, the
    # allocator pass after it copied the cached ones, 256 B under the ledger on
    # train_harmonics.py's `sfno`
    for name in ("e3nn.o3._wigner", "equiformer_pytorch.basis",
                 "ring_attention_pytorch.distributed", "se3_transformer_pytorch.basis",
                 "torch_harmonics.legendre", "torch_harmonics.quadrature",
                 "torch_harmonics.convolution", "torch_harmonics.filter_basis"):
        mod = sys.modules.get(name)
        for fn in vars(mod).values() if mod is not None else ():
            for cache in (fn, *_closed_over(fn)):
                if hasattr(cache, "cache_clear"):
                    cache.cache_clear()
    # transfusion-pytorch's default `modality_processing="auto"` times its three layouts of
    # a batch's modalities on the first batch of each structure and keeps the fastest in a
    # module-level router (`ROUTER.cache`) for the process: the allocator pass and each
    # measure reused the ledger pass's pick, unmeasured, where the CLI's fresh processes
    # time again (72 B under the ledger's kernel scratch on train_transfusion.py)
    routing = sys.modules.get("transfusion_pytorch.modality_processing")
    if routing is not None:
        routing.ROUTER.clear()
    # TorchScript's profiling executor runs a scripted function's first calls as they are
    # written and, once profiled, an optimized graph of its own (fused, other temporaries):
    # geoopt's Poincare ball math (`torch.jit.script` functions) ran profiled in the ledger
    # pass and optimized in the allocator pass after it, 17,856 B under the ledger on
    # train_geoopt.py's `poincare` (`--steps 1`), equal in the CLI's fresh processes
    for fn in _scripted_functions():
        fn._debug_flush_compilation_cache()
    # a script stopped at its requested steps never reaches its `destroy_process_group()`:
    # the next pass found its gloo group made (`if not dist.is_initialized()` skipped its own
    # init) and `--fake --world`'s fake group could not be made ("trying to initialize the
    # default process group twice"), tests/clients/train_fairscale.py
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _closed_over(fn) -> list:
    """What a function's closure holds (torch-harmonics' `lru_cache` wrapper holds the
    `functools.lru_cache` it wraps); empty cells left out."""
    out = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:   # an empty cell
            continue
    return out


_SCRIPTED: list = []             # the module-level torch.jit.ScriptFunctions found so far
_SCANNED: set[str] = set()       # the modules looked through for them


def _scripted_functions() -> list:
    """The `torch.jit.ScriptFunction`s at the top level of the modules imported so far
    (each module looked through once)."""
    jit = sys.modules.get("torch.jit")
    for name in [n for n in list(sys.modules) if n not in _SCANNED]:
        _SCANNED.add(name)
        mod = sys.modules.get(name)
        if jit is None or mod is None:
            continue
        _SCRIPTED.extend(v for v in list(getattr(mod, "__dict__", {}).values())
                         if issubclass(type(v), jit.ScriptFunction))
    return _SCRIPTED


# Note [Each module looked through once]
# `_fresh_library_state` runs before every pass, and its look for transformers' method
# caches walked every class of every `transformers.models.*` module imported so far, each
# pass: 40 ms a pass in a process with 1,174 of them imported (374 model packages, as a
# worker has after the AutoConfig / AutoModel mappings and the HF tiers), for the same 23
# caches every time, and a worker runs hundreds of passes after its first HF tier. The
# caches are made when a module's classes are defined, so each module (by its object: a
# module imported again is a new one) is looked through once, when a pass first finds it
# in `sys.modules`, and the caches found are kept; every pass still clears all of them.
# `_scripted_functions` and `_storages_held_by_new_modules` look at each module once for
# the same reason.
_CACHES: list = []                     # the transformers method caches found so far
_CACHES_LOOKED_AT: dict[str, object] = {}   # module name -> the module object looked through


def _transformers_caches() -> list:
    """The `functools.lru_cache`s of the transformers models imported so far, behind the
    wrapper `compile_compatible_method_lru_cache` puts around each (Note [Each module
    looked through once])."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or mod is None or \
                _CACHES_LOOKED_AT.get(name) is mod:
            continue
        _CACHES_LOOKED_AT[name] = mod
        _CACHES.extend(_method_caches(mod, name))
    return _CACHES


def _method_caches(mod, name: str) -> list:
    """The caches held in the closures of the methods of the classes `mod` defines."""
    found = []
    for cls in vars(mod).values():
        if not isinstance(cls, type) or cls.__module__ != name:
            continue
        for attr in vars(cls).values():
            fn = getattr(attr, "__func__", attr)
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    inner = cell.cell_contents
                except ValueError:   # an empty cell
                    continue
                if hasattr(inner, "cache_clear"):
                    found.append(inner)
    return found


# Note [Each pass from a fresh process's state]
# The CLI runs every pass in a fresh process; the harness runs them one after another in
# the pytest process, where whatever an earlier test (or an earlier pass) left in torch's
# and Python's process-wide state is still set when the next script starts. A script that
# seeds everything itself (DeepXDE's `set_random_seed(0)`) is immune to the generators,
# but not to the rest: a script that sets `torch.set_default_dtype(torch.float64)` at its
# top (train_e3nn.py and train_egnn.py with `--dtype float64`) left it set for every later
# test in that process, and `set_grad_enabled(False)` left by one would fail the next
# script's backward. So each pass starts from the state a fresh process has: gradients on,
# float32 default dtype, no default device, deterministic algorithms and anomaly
# detection off, float32 matmuls at "highest", denormals kept. The global generators
# (torch's CPU one, numpy's, Python's `random`) start from OS entropy in a fresh process,
# so the CLI's passes of a script that does not seed draw other numbers each (Note [Two
# passes, other random numbers?], memledger/trace/rng_state.py; test_pml_clients.py names
# numpy so); here each pass is seeded from its place in the running test (its pytest
# phase's n-th pass: seed 5_400 + n), so the passes still draw apart as the CLI's do, and
# no test's numbers depend on which tests ran before it in the process. Intra-op threads
# are left alone: a test sets them on purpose (the `one_thread` fixture), and the suite's
# workers set them from OMP_NUM_THREADS. tests/clients/test_fresh_state.py pollutes each
# of these and shows a script's numbers unchanged.
_PASSES: dict[str, int] = {}   # the pytest phase ("path::test (call)") -> passes run in it


def _fresh_process_state() -> None:
    """torch's and the generators' process-wide state as a fresh process has it, the
    generators seeded by this pass's place in its test (Note [Each pass from a fresh
    process's state])."""
    import random

    import torch

    phase = os.environ.get("PYTEST_CURRENT_TEST", "")
    if phase not in _PASSES:
        _PASSES.clear()
    n = _PASSES[phase] = _PASSES.get(phase, -1) + 1
    torch.manual_seed(5_400 + n)
    random.seed(5_400 + n)
    if (np := sys.modules.get("numpy")) is not None:
        np.random.seed(5_400 + n)
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.use_deterministic_algorithms(False)
    torch.autograd.set_detect_anomaly(False)
    torch.set_float32_matmul_precision("highest")
    torch.set_flush_denormal(False)


def _call(main, argv: list[str]) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    _before_each_pass()
    _fresh_library_state()
    _fresh_process_state()
    # the collection after the call walks only what the call made (Note [Objects from
    # before the script], memledger/trace/script.py): 0.2-0.4 s less per call here
    with earlier_objects_frozen():
        try:
            return main(argv)
        finally:
            sys.argv[:], sys.path[:] = saved_argv, saved_path
            gc.collect()


def run_plainly(script: str, argv: list[str]) -> None:
    """`python script argv...` in this process, untraced, to its end (the run that saves
    what a test then resumes from): as each pass runs, from the same fresh library state,
    without a fresh interpreter's imports (torch and transformers, lightning or
    accelerate: 4-6 s of CPU each)."""
    from memledger.trace.script import run_script

    def main(args: list[str]) -> int:
        run_script(HERE / script, args)
        return 0

    _call(main, argv)


def run_client(script: str, argv: list[str], policies: list[str], steps: int = 2,
               timing_steps: int = 0, steps_by: str = "optimizer") -> ClientRun:
    # in-process, so the allocator pass (no collector) still measures the untraced run: a
    # tracer that kept memory alive would show as ledger != allocator here too
    """Trace `steps` steps (ledger + allocator pass, with `timing_steps` timed steps and the
    cost model's probes after them when > 0), then predict and measure each policy.
    `steps_by`: as `trace --steps-by` (every pass and `measure` count steps so)."""
    path = str(HERE / script)
    by = ("--steps-by", steps_by) if steps_by != "optimizer" else ()
    with tempfile.TemporaryDirectory(prefix="memledger-clients-") as tmp:
        led_path, alloc, status = Path(tmp) / "run.ledger", Path(tmp) / "alloc.json", \
            str(Path(tmp) / "status.json")
        _ledger_pass_into(led_path, script, argv, steps, by)
        code = _call(trace_worker.main, ["allocator", *by, "--out", str(alloc), "--status", status,
                                         "--steps", str(steps), "--timing-steps", str(timing_steps),
                                         path, "--", *argv])
        assert code == EXIT_OK, f"allocator pass of {script} {argv}: exit {code}" \
            f"{_said(Path(status))}"
        append_records(led_path, json.loads(alloc.read_text())["records"])
        led = Ledger.load(led_path)
        run = ClientRun(script, argv, led.peak().bytes, led.measured["peak_bytes"], led)
        for text in policies:
            pr = PolicyRun(text)
            try:
                pr.predicted = predict(led, [parse_policy(text)], bandwidth=1e9) \
                    .policies[0].peak_bytes
            except PolicyError as e:
                pr.predict_refusal = str(e)
            out = Path(tmp) / "measured.json"
            code = _call(measure_worker.main, ["--out", str(out), *by, "--policy", text, "--steps",
                                               str(steps), "--time-steps", "0", path, "--",
                                               *argv])
            res = json.loads(out.read_text())
            if code == EXIT_USAGE:
                pr.measure_refusal = res["error"]
            else:
                assert code == EXIT_OK, f"{script} under {text}: {res['error']}"
                pr.measured = res["peak_bytes"]
            run.policies[text] = pr
    return run


# Note [Tensors made at import]
# A library may make tensors when it is imported (egnn-pytorch: a (19,) float32, 76 B;
# peft: two 8 B). The CLI runs every pass in a process of its own, and each pass sees them
# made in its setup; here the first pass in a process imported the library and saw them,
# the next did not: the ledger pass read 76 B over the allocator pass, and every policy
# 76 B over measure, on whichever egnn test a pytest worker ran first (test order decided
# it). So the libraries a script imports at its top level are imported before its first
# pass, and no pass sees them made; peft, which scripts and libraries import inside
# functions (train_more2.py's `--model adalora`), before the first pass in the process,
# whatever its script. Those tensors exist before every pass then, and a pass that reads
# one (equiformer-pytorch's `RANDOM_ANGLES`, read only where its basis is computed) met it
# as made outside dispatch at that read, which the allocator pass never saw allocated:
# 120 B over. So the tensors the modules imported so far hold at their top level (a
# global, or one in a global list, tuple or dict) are named to the collector (Note
# [Storages an in-process caller made before the script], memledger/trace/collector.py),
# which leaves them out of the curve, and so are the tensors a class defined at a
# module's top level holds as class attributes (pytorch-frame's timestamp constant) and
# the default argument values of the functions a module defines and of its classes'
# methods: flow_matching's discrete sampler keeps `time_grid=torch.tensor([0.0, 1.0])` (8 B
# over the allocator pass), pypose's `IMUPreintegrator.__init__(pos=torch.zeros(3),
# rot=identity_SO3(), vel=torch.zeros(3))` 40 B that every IMUPreintegrator clones (its
# tier's ledger 31,948 against the allocator's 31,908 B; the CLI's was exact), peft's LoHa
# `HadaWeight.forward(..., scale=torch.tensor(1))`. Subclasses of Tensor count (that SO3 is
# a LieTensor), found by `type()`, which a lazy attribute cannot answer by importing. A
# tensor made at import and kept elsewhere (a closure, an instance) is not found: a tier
# whose library keeps one imports it in a module-scoped fixture, before its first pass
# (`imported_first`), as test_kornia_clients.py does. A plain object a class holds as an
# attribute is looked into, one level (torchode's `Dopri5.TABLEAU`, a `ButcherTableau` of
# five float64 tensors made at import: 616 B over the allocator pass before).
# The modules imported since the last pass (a tier's fixture, a test's own import) are
# looked through before every pass, not only a script's first: a tier's library is
# imported when its first test runs (Note [Tier modules import nothing at collection]),
# which may come after its script's first pass in this process.
_IMPORTED_FOR: set[str] = set()
_MODULES_LOOKED_AT: set[str] = set()


def _before_each_pass() -> None:
    """Import peft once, before the first pass in this process, and name to the collector
    the tensors held by the modules imported since the last pass (Note [Tensors made at
    import]); without peft, the peft tests skip."""
    if "peft" not in _IMPORTED_FOR:
        _IMPORTED_FOR.add("peft")
        with contextlib.suppress(ImportError):
            import peft  # noqa: F401
    made_before_the_script(_storages_held_by_new_modules())


def _import_its_imports(script: Path) -> None:
    """Import the modules `script` imports at its top level, before its first pass (Note
    [Tensors made at import]); one that fails to import is left to the pass, which says
    why."""
    if str(script) not in _IMPORTED_FOR:
        _IMPORTED_FOR.add(str(script))
        _import_top_level(script)


def _storages_held_by_new_modules() -> list:
    """The storages of the tensors that modules imported since the last call hold at their
    top level (a global, or an item of a global list, tuple or dict) or as a default
    argument of a function they define, their classes' methods included."""
    import torch

    # by `type()`: `isinstance` reads `__class__`, which a lazy or deprecated module
    # attribute answers by importing (transformers' auto mappings) or warning
    found = []
    for name in [n for n in list(sys.modules) if n not in _MODULES_LOOKED_AT]:
        _MODULES_LOOKED_AT.add(name)
        space = getattr(sys.modules.get(name), "__dict__", None)
        for v in list(space.values()) if type(space) is dict else ():
            kind = type(v)
            code = kind is types.FunctionType or issubclass(kind, type)   # def, class
            items = list(dict.values(v)) if kind is dict else v \
                if kind is list or kind is tuple else _held_by_code(v, name) if code else (v,)
            for t in items:
                if issubclass(type(t), torch.Tensor):
                    with contextlib.suppress(RuntimeError, NotImplementedError):
                        found.append(t.untyped_storage())
    return found


def _held_by_code(v, module: str) -> list:
    """What a function or class the module defines holds: a function's default argument
    values; a class's own attributes and its methods' defaults. pytorch-frame's
    `TimestampTensorMapper.CYCLIC_VALUES_NORMALIZATION_CONSTANT`, an int64 (6,) made at
    import that `TimestampEncoder` registers as a buffer (the ledger pass read its 48 B, the
    allocator pass never saw them allocated); flow_matching's
    `MixtureDiscreteEulerSolver.sample(..., time_grid=torch.tensor([0.0, 1.0]))`."""
    if type(v) is types.FunctionType:
        space, fns = {"__module__": v.__module__}, [v]
    else:   # a class's namespace read through `type.__dict__`, not its own lookup
        space = type.__dict__["__dict__"].__get__(v)
        fns = [f.__func__ if type(f) in (staticmethod, classmethod) else f
               for f in space.values()]   # by exact type, as above: no attribute read
    if space.get("__module__") != module:
        return []
    out = [] if type(v) is types.FunctionType else list(space.values())
    out += [x for a in out for x in _instance_fields(a)]
    for f in fns:
        f = inspect.unwrap(f) if type(f) is types.FunctionType else f   # `@torch.no_grad()`
        if type(f) is types.FunctionType:
            out += list(f.__defaults__ or ()) + list((f.__kwdefaults__ or {}).values())
    return out


def _instance_fields(a) -> list:
    """The fields of a plain object a class holds as an attribute: torchode's
    `Dopri5.TABLEAU`, a `ButcherTableau` made at import whose five float64 tensors (616 B)
    every solve reads (`tableau.to(...)`); the ledger pass met them as made outside
    dispatch at that read, the allocator pass never saw them allocated (616 B over it).
    Read through `object.__getattribute__`, so no lazy attribute imports."""
    kind = type(a)
    if kind.__module__ in ("builtins", "typing") or issubclass(kind, (type, types.ModuleType)) \
            or kind is types.FunctionType:
        return []
    try:
        fields = object.__getattribute__(a, "__dict__")
    except AttributeError:
        return []
    return list(fields.values()) if type(fields) is dict else []


def _import_top_level(script: Path) -> None:
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:   # noqa: BLE001 - the pass itself reports it
                pass


def _ledger_pass_into(led_path: Path, script: str, argv: list[str], steps: int,
                     fake: tuple[str, ...] = ()) -> None:
    _import_its_imports(HERE / script)
    code = _call(trace_worker.main, ["ledger", *fake, "--out", str(led_path), "--status",
                                     str(led_path.with_suffix(".status.json")), "--steps",
                                     str(steps), str(HERE / script), "--", *argv])
    assert code == EXIT_OK, f"ledger pass {' '.join(fake)} of {script} {argv}: exit {code}" \
        f"{_said(led_path.with_suffix('.status.json'))}"


def _said(status: Path) -> str:
    """A failed pass's one line (its status file's reason), for the assertion's message."""
    try:
        return f": {json.loads(status.read_text())['reason']}"
    except (OSError, ValueError, KeyError):
        return ""


def ledger_pass(script: str, argv: list[str], steps: int = 2,
                fake_device: str | None = None, steps_by: str = "optimizer",
                world: tuple[int, int] | None = None) -> Ledger:
    """The ledger pass alone, in this process: no allocator pass, so no kernel scratch and
    no measured peak, as a fake run has none. With `fake_device`, the ledger of `trace
    --fake --device FAKE_DEVICE` (Note [Fake runs]): set beside the real one, every row and
    every prediction should agree. `steps_by`: as `trace --steps-by`. `world` (N, r): as
    `trace --fake --world N --rank r` (Note [A simulated rank])."""
    extra = ("--fake", "--device", fake_device) if fake_device else ()
    if world:
        extra += ("--fake", "--world", str(world[0]), "--rank", str(world[1]))
    if steps_by != "optimizer":
        extra += ("--steps-by", steps_by)
    with tempfile.TemporaryDirectory(prefix="memledger-ledger-") as tmp:
        led_path = Path(tmp) / "run.ledger"
        _ledger_pass_into(led_path, script, argv, steps, extra)
        return Ledger.load(led_path)


def predicted_peak(led: Ledger, policy: str) -> int | None:
    """`predict`'s peak for one policy at a fixed bandwidth; None where replay refuses it."""
    try:
        return predict(led, [parse_policy(policy)], bandwidth=1e9).policies[0].peak_bytes
    except PolicyError:
        return None


def client_gaps(script: str, argv: list[str], policies: list[str]) -> dict[str, int | str]:
    """The differential check of the fuzz benchmarks: per policy (and "ledger": the ledger
    with its kernel scratch against the allocator), predicted - measured where they differ,
    or "refused by one side only"."""
    with contextlib.redirect_stderr(io.StringIO()):
        return gaps_of(run_client(script, argv, policies))


def gaps_of(run: ClientRun) -> dict[str, int | str]:
    """`client_gaps` of a run already made."""
    out: dict[str, int | str] = {}
    if (d := run.ledger.peak_with_scratch() - run.allocator_peak):
        out["ledger"] = d
    for text, p in run.policies.items():
        if p.predicted is None or p.measured is None:
            if (p.predicted is None) != (p.measured is None):
                out[text] = "refused by one side only"
        elif p.predicted != p.measured:
            out[text] = p.predicted - p.measured
    return out


def fake_client_gaps(script: str, argv: list[str],
                     policies: list[str]) -> dict[str, int | str]:
    """The fake ledger (`trace --fake --device cpu`) against the real one of the same run:
    its peak, each category at the peak, and each policy's predicted peak, where they
    differ. The real ledger is the ledger pass alone: kernel scratch and the measured peak
    come from the allocator, which a fake run has not (docs/fake.md, Known limitations)."""
    with contextlib.redirect_stderr(io.StringIO()):
        real = ledger_pass(script, argv)
        fake = ledger_pass(script, argv, fake_device="cpu")
    out: dict[str, int | str] = {}
    if (d := fake.peak().bytes - real.peak().bytes):
        out["ledger"] = d
    fa, ra = fake.at_peak(), real.at_peak()
    out.update({c: fa[c] - ra[c] for c in fa if c != "workspace" and fa[c] != ra[c]})
    for text in policies:
        pf, pr = predicted_peak(fake, text), predicted_peak(real, text)
        if pf != pr:
            out[text] = pf - pr if None not in (pf, pr) else "refused by one side only"
    return out


def doctor_with_ledger(script: str, argv: list[str], steps: int):
    """`memledger doctor --steps STEPS -o LEDGER script -- argv` in this process (the
    doctor's worker, its probe and a collector alongside): (DoctorReport, Ledger). The
    ledger should be the one `trace` records of the same run, byte for byte."""
    from memledger.doctor import worker as doctor_worker
    from memledger.doctor.findings import DoctorReport

    with tempfile.TemporaryDirectory(prefix="memledger-doctor-") as tmp:
        report, status, led = (Path(tmp) / n for n in ("doctor.json", "status.json",
                                                       "run.ledger"))
        code = _call(doctor_worker.main, ["--report", str(report), "--status", str(status),
                                          "--steps", str(steps), "--ledger", str(led),
                                          str(HERE / script), "--", *argv])
        assert code == EXIT_OK, f"doctor of {script} {argv}: exit {code}{_said(status)}"
        return (DoctorReport.model_validate(json.loads(report.read_text())),
                Ledger.load(led))


def assert_one_doctor_error(script: str, argv: list[str], steps: int, check: str | None,
                            line: str) -> None:
    """The doctor on `script` finds nothing (`check` None), or exactly one `check` error,
    located at the script line whose text is `line`."""
    from memledger.doctor.run import diagnose_in_process

    # as every pass starts (`_call`): the doctor's run is a script run like the others
    _fresh_library_state()
    _fresh_process_state()
    report, outcome = diagnose_in_process(HERE / script, argv, steps)
    assert outcome.code == 0, outcome.reason
    found = [(f.check, f.severity) for f in report.findings]
    if check is None:
        assert found == [], [f.line() for f in report.findings]
        return
    assert found == [(check, "error")], [f.line() for f in report.findings]
    lines = (HERE / script).read_text().splitlines()
    assert lines[report.findings[0].where.line - 1].strip() == line

