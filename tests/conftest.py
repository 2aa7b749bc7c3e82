"""Shared fixtures: traced ledgers of the bundled examples, made once per test session."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib.util
import os
import sys
import weakref
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Under pytest-xdist each worker's traced scripts get the cores / workers intra-op threads:
# two workers each tracing with torch's default two threads ran four busy threads on a
# 2-core box, and every test that waits on a script waited longer. Set before any fixture
# keys the calibration cache on it (calib_cache.machine_key reads OMP_NUM_THREADS).
# Note [A worker's threads, whoever imported torch first]
# The variable reaches torch only if it is set before torch's import, and this file is
# not always first: pytest imports every installed plugin before any conftest, and one may
# import torch (torchtyping's, in the dev venv since the fifty-seventh session). Then this
# pytest process kept torch's default of one thread per core (2 here, 3 workers on 2 cores
# each running 2) while its traced children read 1: its in-process runs counted other
# per-thread kernel scratch than the pins were measured with. So where torch is imported
# already, its thread count is set to the same number here (`one_thread` below does the
# same for one test); the children still read the variable.
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // _workers))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# The suite's two pytest processes start ~80 workers between them: fork them all from one
# zygote each (Note [Warm starts], memledger/processes.py); 460 of the suite's 638 s of CPU
# had gone to starting workers cold. tests/unit/test_processes.py checks both ways.
os.environ.setdefault("MEMLEDGER_WARM_START", "1")
# The tests run `python -m memledger` from their own folders with the checkout on the path:
# set here, it is the pytest process's environment too, and the `memledger` runs of a test
# can fork their workers from that process's zygote (`cli_zygote` below).
os.environ.setdefault("PYTHONPATH", str(ROOT))
EXAMPLES = ROOT / "examples"


# Each worker imports torch, transformers, diffusers, scipy and the rest while it collects
# (~770,000 objects), and CPython's full collections walk them all: 0.5-1.8 s each, 7.5 s of
# a worker's 17.7 s of collection, and 7-14 s more while its tests ran (one suite run,
# `gc.callbacks` timing each collection). Nothing they import is garbage, so the collector
# is off while collecting, and what collection made is frozen before the first test, by
# memledger's own freeze (Note [Objects from before the script], memledger/trace/script.py)
# held open for the session: later collections walk only what tests make, and every
# in-process run inside it is a nested freeze, which asks nothing (the ask,
# `gc.get_freeze_count()`, walks the frozen objects: ~0.1 s here).
_imports_frozen = contextlib.ExitStack()


def _freeze_what_exists() -> None:
    from memledger.trace.script import earlier_objects_frozen

    _imports_frozen.enter_context(earlier_objects_frozen())   # turns the collector on


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    # xdist's controller collects nothing and runs no test: it imports nothing to freeze
    runs_tests = hasattr(session.config, "workerinput") or \
        session.config.getoption("dist", "no") == "no"
    if not runs_tests:
        return (yield)
    gc.disable()
    try:
        return (yield)
    finally:
        _freeze_what_exists()


# Note [The longest tests first]
# pytest-xdist's `load` scheduler hands out the tests in collection order: a chunk of
# consecutive tests to each worker at the start (a quarter of its share), then smaller
# ones as each worker's queue runs low. Collection puts tests/unit last, and its longest
# test (the compiled gates of test_verify_gates.py: the suite's longest in the fiftieth and
# fifty-fourth sessions' `--durations`, 43 s of a 621 s run, 182 s of a 1,791 s one) was
# handed out among the last: one worker ran it alone while the others had finished. So
# the tests marked `slow` (the suite's longest by `--durations`) are dealt round the
# workers' first chunks, each chunk starting with its share of them: every worker starts
# on long tests and the quick ones fill the end of every queue. All of them first in one
# run would land in one worker's first chunk: more than its share of the run once there
# are 4 workers or more. A simulation of the scheduler over the fifty-fourth session's
# durations (docs/performance.md, "Fifty-fourth session: test time"): 3 workers 1,905 s as
# collected, 1,792 s dealt (their sum over three: 1,791 s); 5 workers 1,186 s, 1,083 s.
# Any order is a valid one (the tests are order-independent), and every worker computes
# the same (xdist requires it): the chunk is xdist's own formula, and a scheduler that
# hands out otherwise still starts the long tests early. (Withdrawn once, c98e7e89, for a
# clean clone's failure that a fresh venv's peft 0.22.0 caused in either order; back since
# the fifty-fifth session, pinned by tests/unit/test_longest_first.py.)
def pytest_collection_modifyitems(config, items):
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    items[:] = longest_first(items, lambda item: item.get_closest_marker("slow") is not None,
                             workers)


def longest_first(items: list, is_slow, workers: int) -> list:
    """`items` in the order Note [The longest tests first] deals them to `workers` xdist
    workers: each first chunk starts with its share of the slow ones."""
    slow = [item for item in items if is_slow(item)]
    if not slow:
        return list(items)
    rest = [item for item in items if not is_slow(item)]
    chunk = max(len(items) // workers // 4, 2)   # xdist LoadScheduling's first hand
    dealt = []
    for hand in (slow[k::workers] for k in range(workers)):
        take = max(0, chunk - len(hand))
        dealt += hand + rest[:take]
        rest = rest[take:]
    return dealt + rest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # pytest's unraisable-exception plugin collects garbage at the session's end, in its
    # unconfigure (before this one: still frozen, it walks only what the tests left, which
    # is all that can hold an unraisable exception) and again in its cleanup (after this
    # one), as Python does at its exit: thawed, each walked every object the worker
    # imported, ~1 s of CPU apiece per process. Thawed (the freeze's count goes back to
    # zero) and frozen again at once, so the later two walk nothing.
    with contextlib.suppress(ImportError):   # a pytest without the key collects as it did
        from _pytest.unraisableexception import gc_collect_iterations_key
        config.stash[gc_collect_iterations_key] = 0
    _imports_frozen.close()
    gc.freeze()


@pytest.fixture
def thawed() -> Iterator[None]:
    """This process as a caller that froze nothing sees it (for the tests of the freeze)."""
    _imports_frozen.close()
    yield
    _freeze_what_exists()


@pytest.fixture(autouse=True)
def _argv_and_path_given_back() -> Iterator[None]:
    """A script run in-process sets sys.argv and puts its folder first on sys.path, as
    `python script.py` would (memledger/trace/script.py, `run_script`): each test gives
    them back, so no test runs with another's script folder on its path."""
    argv, path = sys.argv[:], sys.path[:]
    yield
    sys.argv[:], sys.path[:] = argv, path


class _Argument:
    pass


def _callee_let_go(x: _Argument) -> bool:
    ref = weakref.ref(x)
    del x
    return ref() is None


def python_calls_inlined() -> bool:
    """Whether a Python function called by Python owns its arguments alone (CPython 3.11+
    runs the call in the caller's eval loop), or its caller keeps them too until it returns
    (a frame evaluator is installed: Note [A frame evaluator left installed])."""
    return _callee_let_go(_Argument())


# Note [A frame evaluator left installed]
# `torch.compile(fn, fullgraph=True)` that fails to trace (`Unsupported`) leaves Dynamo's
# frame-evaluation shim installed in the interpreter (torch 2.13, CPython 3.11), with no
# callback (`set_eval_frame(None)`, `torch._dynamo.reset()` do not take it out). From then
# on CPython calls every Python function through the vectorcall path instead of inlining
# it, and the caller's stack keeps each argument until the callee returns: a temporary
# passed as an argument and dropped by the callee lives through the whole call. In a
# pytest process that had run such a script in-process
# (tests/unit/test_compiled_regions.py), torchdiffeq's adjoint backward kept its flipped
# time interval (`odeint(..., t[i - 1:i + 1].flip(0), ...)`, 8 B) through the backward
# solve, and `test_the_adjoint_node_holds_the_solution_through_its_backward_solve` read
# 136,200 B (ledger = allocator: the bytes were really held) against its 136,192 B in any
# process without it (the CLI's workers included): a work-stealing run ordered the two
# tests into one worker. Every test that runs scripts in this process measures a process
# in that state, so no test may leave it: the one that would is failed here.
@pytest.fixture(autouse=True)
def _no_frame_evaluator_left() -> Iterator[None]:
    before = python_calls_inlined()
    yield
    if before and not python_calls_inlined():
        pytest.fail("this test left a frame evaluator installed in the pytest process "
                    "(a failed fullgraph torch.compile run in-process?): every later "
                    "in-process trace keeps call arguments alive longer (Note [A frame "
                    "evaluator left installed], tests/conftest.py); run it in a child "
                    "process", pytrace=False)


# Note [The reading verbs in the pytest process]
# A test that needs `memledger trace` in a fresh process (two traces on one output, a
# signal to its pid, a port the other pass holds) read the ledger it wrote with `python -m
# memledger show` in another fresh process, and a few ran `python -m memledger trace` where
# only the trace's workers matter. `show` reads a file, and `trace`'s passes run in
# workers either way; a fresh interpreter for the command itself costs its imports
# (typer, rich, pandas, memledger): `python -m memledger show` of the GPT example's ledger
# read 0.40-0.50 s of CPU (user + sys), 1.29-1.38 s on the suite's own traced GPT ledger,
# `predict --json` 1.32 s, against 0.03-0.17 s and 0.23-0.85 s through `main` in a process
# that has memledger imported. So those go through `memledger.cli.main` in the pytest
# process (stdout redirected; `show`'s text folds at this process's width, so a sentence is
# looked for with its whitespace joined). The fresh-process way in stays tested where it is
# the claim: test_reliability_cli.py's FRESH cases and signals, test_output_width.py's
# tables piped at 80 columns, test_check_cli.py's exit codes.
# Note [The pytest processes a test starts load the plugins they name]
# A test of memledger's pytest plugin runs pytest in a fresh process (pytester's
# subprocess runs, the reliability cases' `pytest --memledger-json`, `pytest -n 2`). pytest
# loads every `pytest11` entry point installed in the environment at start-up, and the dev
# venv holds the client tiers' libraries and what they bring: jaxtyping, typeguard, anyio,
# platformdirs, and (fifty-seventh session) torchtyping, whose plugin imports torch. A bare
# `pytest --co` in an empty folder read 2.32-2.33 s of CPU (user) with every plugin
# autoloaded, 0.66-0.67 s without torchtyping's, 0.19-0.23 s with only memledger's loaded;
# and test_plugin_is_light_when_unused, which asserts that nothing imported torch at
# start-up, failed on torchtyping's import, not on ours. So these processes run with
# PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 and name the plugins they use by their entry point
# (`-p memledger`, `-p xdist`): the same plugin code the entry point loads, in a process
# whatever else the venv holds does not reach. pytest's own plugins (pytester, capture...)
# are not entry points and load as before. pytester's in-process runs keep autoloading:
# torch is imported in the pytest process already, and they cost no start-up.
OWN_PLUGINS = ("memledger", "xdist")


def own_plugins(args: list[str] | tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """(`-p NAME` for each of memledger's and xdist's entry points, then `args`; the
    environment variable that keeps pytest from loading any other installed plugin) for a
    pytest process a test starts (Note [The pytest processes a test starts load the plugins
    they name])."""
    named = [a for name in OWN_PLUGINS if importlib.util.find_spec(name)   # xdist: dev extra
             for a in ("-p", name)]
    return [*named, *args], {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


@pytest.fixture
def cli_zygote(monkeypatch) -> None:
    """`memledger` run in a subprocess by this test forks its workers from this process's
    zygote (Note [Warm starts], 7, in memledger/processes.py) instead of importing torch
    in a zygote of its own: 3-4 s of CPU less for each run that starts workers. A run with
    another environment (a variable that an import could read) starts its own, as before."""
    from memledger.processes import zygote_address

    address = zygote_address(dict(os.environ))
    if address is not None:
        monkeypatch.setenv("MEMLEDGER_ZYGOTE", address)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch's intra-op threads at 1 for the test, as under xdist (OMP_NUM_THREADS above):
    for a test whose exact bytes count kernel scratch made per thread (bf16 matmuls,
    LAPACK), which `make test PYTEST_WORKERS=0` would run on every core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load_example(name: str):
    """Import examples/train_<name>.py as a module (for its model classes)."""
    path = EXAMPLES / f"train_{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# A fixed calibration (this development machine's, rounded) so that traces and predictions
# in tests are deterministic and never spend seconds calibrating. ns; per_byte in ns/byte.
FIXED_CALIBRATION = {name: {"median": m, "lo": lo, "hi": hi} for name, (m, lo, hi) in {
    "ckpt_call_ns": (110_000, 69_000, 124_000), "ckpt_save_ns": (11_000, 8_600, 13_300),
    "sac_op_ns": (8_000, 6_200, 9_500), "sac_call_ns": (0, -28_000, 61_000),
    "offload_file_ns": (91_000, 75_000, 137_000), "offload_ns_per_byte": (1.35, 1.31, 1.42),
    "pack_ns": (260, 250, 370)}.items()}


@pytest.fixture(scope="session", autouse=True)
def calibration_cache(tmp_path_factory):
    """MEMLEDGER_CACHE_DIR: a fresh folder holding FIXED_CALIBRATION for the CPU."""
    import os

    from memledger.replay.calib_cache import machine_key, write_cached

    folder = tmp_path_factory.mktemp("memledger-cache")
    old = os.environ.get("MEMLEDGER_CACHE_DIR")
    os.environ["MEMLEDGER_CACHE_DIR"] = str(folder)
    write_cached({"key": machine_key("cpu"), "device": "cpu", "params": FIXED_CALIBRATION},
                 "cpu")
    yield folder
    if old is None:
        os.environ.pop("MEMLEDGER_CACHE_DIR", None)
    else:
        os.environ["MEMLEDGER_CACHE_DIR"] = old


def shared_dir(tmp_path_factory, name: str) -> Path:
    """A folder every pytest-xdist worker of this run sees (the workers' common temp root),
    so a session fixture's expensive files are made once per run, not once per worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent   # .../pytest-N/popen-gw0 -> .../pytest-N, shared by gw0, gw1...
    d = root / name
    d.mkdir(exist_ok=True)
    return d


@contextlib.contextmanager
def only_one_worker(folder: Path, name: str = "", wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `folder` (or on its part `name`): the other workers wait,
    then find the files. Yields False, holding nothing, where `wait` is off and another
    worker holds the lock."""
    with open(folder / f".lock{'-' + name if name else ''}", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def trace_example(tmp_path_factory):
    """`trace_example("mlp", steps=2)` -> the ledger of examples/train_mlp.py, traced with the
    allocator pass once per test run, whichever test or xdist worker asks first."""
    from memledger.trace.session import trace_script

    out = shared_dir(tmp_path_factory, "traced_examples")

    def trace(name: str, steps: int = 3, wait: bool = True) -> Path:
        path = out / f"{name}-{steps}steps.ledger"
        with only_one_worker(out, path.stem, wait) as mine:
            if mine and not path.exists():   # written under another name, renamed once
                partial = path.with_suffix(".partial")   # complete
                trace_script(EXAMPLES / f"train_{name}.py", [], partial, steps=steps)
                partial.rename(path)
        return path

    return trace


@pytest.fixture(scope="session")
def traced_examples(trace_example) -> dict[str, Path]:
    """{name: ledger path} for mlp, gpt and cnn, each traced for 3 steps with the allocator
    pass, once per test run (shared by the xdist workers). Each worker first traces those
    no other worker is tracing, then waits for the rest: two workers that ask at once trace
    two examples side by side, where one waited on the other's lock (~10 s of a core)."""
    names = ("mlp", "gpt", "cnn")
    for name in names:
        trace_example(name, steps=3, wait=False)
    return {name: trace_example(name, steps=3) for name in names}
