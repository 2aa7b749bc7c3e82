"""Running a user's training script as `__main__`, unmodified, and reporting how it ended."""

from __future__ import annotations

import contextlib
import gc
import os
import runpy
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from memledger.crash import crash_line, is_internal
from memledger.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SCRIPT_FAILED,
    EXIT_USAGE,
    OutputError,
    PolicyError,
    plain,
)
from memledger.trace.collector import StopTracing
from memledger.trace.func_transforms import func_transforms_step_aside
from memledger.trace.own_ranks import OwnRanks, OwnRanksStop
from memledger.trace.session import port_taken


# torch warns once per torch.compile(module) that global module hooks will fire an extra
# time for the wrapper: those are memledger's (the collector's, the doctor's, the timers'),
# which handle the wrapper; the warning is not about the user's code
_OUR_HOOKS_WARNING = r"Using `torch.compile\(module\)` when there are global hooks on modules"


def run_script(script: str | Path, argv: list[str]) -> None:
    """Run `script` with `sys.argv = [script, *argv]`, as `python script argv...` would."""
    warnings.filterwarnings("ignore", message=_OUR_HOOKS_WARNING, category=UserWarning)
    script = Path(script).resolve()
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")


# Note [Objects from before the script]
# Before the script's first line a worker holds ~290,000 objects of its imports (torch,
# Dynamo, memledger). The cyclic garbage collector would walk them in every full
# collection, every explicit `gc.collect()` (0.15-0.3 s each here) and every
# `gc.get_objects()` scan of the doctor (four a step boundary, 0.1 s each: 90 % of a tiny
# script's in-process doctor run). None of them is the script's, so the script runs with
# them frozen (`gc.freeze()`: Python's permanent generation, which collections and
# `gc.get_objects()` skip); whatever the script makes is collected and seen as before.
# Dynamo is imported first (torch's first optimizer step would import it inside the
# script: 120,000 objects left unfrozen) and the zygote freezes what it imported
# (memledger/zygote.py, Python's advice before a fork), so warm and cold workers run alike.
# Only the outermost freeze thaws, when the script ends: an in-process caller (the test
# suite's harness, `diagnose_in_process`) gets its process back as it was. What changes
# for the script: full collections come sooner (they run once the objects that survived
# since the last one number a quarter of those that survived it, and frozen ones no longer
# count), so a cycle that outlives two younger collections is freed sooner than in a plain
# run; its bytes are the same, and every pass and measured run memledger makes runs so.
_frozen_depth = 0   # earlier_objects_frozen's own nesting


@contextlib.contextmanager
def earlier_objects_frozen():
    """Around a run of the script: what exists now is frozen for the garbage collector."""
    global _frozen_depth
    # nested, not outermost, without asking: `gc.get_freeze_count()` walks the whole frozen
    # generation (20 ms with transformers imported, once per pass of every in-process run)
    outermost = _frozen_depth == 0 and gc.get_freeze_count() == 0
    with contextlib.suppress(ImportError):   # a torch without it: the script lacks it too
        import torch._dynamo  # noqa: F401  (as the zygote's PRELOAD: frozen with the rest)

    gc.freeze()
    gc.enable()   # off while a worker imported (Note [Imports without the collector])
    _frozen_depth += 1
    try:
        yield
    finally:
        _frozen_depth -= 1
        if outermost:
            gc.unfreeze()


@dataclass
class ScriptOutcome:
    code: int                       # EXIT_OK, EXIT_SCRIPT_FAILED or EXIT_INTERRUPTED
    reason: str                     # one line
    error: BaseException | None = None   # the script's own exception, if it raised


# memledger's own hooks step aside while a transform runs (Note [torch.func transforms
# under memledger's hooks], trace/func_transforms.py); this is said where a hook of the
# script's own (its checkpoint, its offload) was on the stack too, which torch refuses
# without memledger as well: the "option that does without torch.func" it once advised
# for every such script (titans-pytorch has none) is no longer the way out.
FUNC_TRANSFORMS = (
    "{who} differentiates with torch.func (grad, vjp, jacrev) under saved-tensor hooks of "
    "the script's own (its checkpoint or offload around the call), which torch.func's "
    "transforms refuse with or without memledger; {fix}")


def _func_transforms_line(e: BaseException) -> str:
    """FUNC_TRANSFORMS naming who called torch.func: the script, or the library (and its
    line) between the script and torch (Opacus's `grad_sample_mode="functorch"` computes
    per-sample gradients so, inside `loss.backward()`; "the script" misled there)."""
    lib = library_caller(e)
    if lib is None:
        return FUNC_TRANSFORMS.format(
            who="the script", fix="call the transform outside those hooks")
    pkg, where = lib
    return FUNC_TRANSFORMS.format(
        who=f"`{pkg}` (called by the script) at {where}",
        fix=f"call `{pkg}` outside those hooks")


def _outside_frames(e: BaseException) -> list:
    """The frames of `e`'s traceback outside torch, memledger and the standard library,
    outermost first."""
    import sysconfig

    skip = tuple(os.path.realpath(d) + os.sep for d in (
        os.path.dirname(sys.modules["torch"].__file__),
        os.path.dirname(os.path.dirname(__file__)),           # memledger
        sysconfig.get_paths()["stdlib"]))
    return [fs for fs in traceback.extract_tb(e.__traceback__)
            if not os.path.realpath(fs.filename).startswith(skip)]


def _package(filename: str) -> str:
    parts = os.path.realpath(filename).split(os.sep)
    return next((parts[i + 1] for i in range(len(parts) - 2, -1, -1)
                 if parts[i] in ("site-packages", "dist-packages")), parts[-1])


def library_caller(e: BaseException) -> tuple[str, str] | None:
    """(package, "dir/file.py:line") of the innermost frame of `e`'s traceback outside torch,
    memledger and the standard library, when that frame is a library's, not the script's
    (None then): who, between the script and torch, did what failed."""
    from memledger.trace.where import is_user_file

    frames = _outside_frames(e)
    if not frames or is_user_file(frames[-1].filename):
        return None
    caller = frames[-1]
    parts = os.path.realpath(caller.filename).split(os.sep)
    return _package(caller.filename), f"{'/'.join(parts[-2:])}:{caller.lineno}"


# Note [The library the script called]
# A fake run's refusal of a value read names the library that read the values, the
# innermost frame outside torch, memledger and the standard library, "(called by the
# script)", and tells the user to trace with an option of it that skips that part. Where
# one library calls another, that named the inner one: pytorch-accelerated's
# `SaveBestModelCallback` saves through `Trainer.save_checkpoint`, then accelerate's
# `Accelerator.save`, which calls `torch.save`, and the line read "`accelerate` (called by
# the script) at utils/other.py:453 ...; trace with an option of `accelerate` that skips
# that part (e.g. no checkpoint saving)": the script never called accelerate, and the
# option (no SaveBestModelCallback) is pytorch-accelerated's. The library the script
# called is the first frame after the script's last one that is a library's; the line
# names it, and the inner one where they differ: "`pytorch_accelerated` (called by the
# script), in `accelerate` at utils/other.py:453: torch.save writes tensor values ...;
# trace with an option of `pytorch_accelerated` ...".
def library_called(e: BaseException) -> str | None:
    """The package of the first library frame after the script's last frame in `e`'s
    traceback: the library the script called, where `library_caller` names the one that
    did what failed (pytorch-accelerated's Trainer saving through accelerate's
    `Accelerator.save`: the script called `pytorch_accelerated`, and its option is the way
    out; Note [The library the script called])."""
    from memledger.trace.where import is_user_file

    frames = _outside_frames(e)
    last = max((i for i, fs in enumerate(frames) if is_user_file(fs.filename)), default=-1)
    return _package(frames[last + 1].filename) if last + 1 < len(frames) else None


# Note [A policy inside one graph]
# `measure` and `compare` put Python around each region they act on (checkpoint's
# wrapper, the nesting guard's reads of the saved-tensor hooks, the checks of state written
# outside a region). Code compiled with `torch.compile(model, fullgraph=True)` must trace
# all of it into one graph and cannot ("Attempted to call function marked as skipped":
# `_top_saved_tensors_default_hooks`), so such a policy failed with Dynamo's words alone.
# The reason now says what to do; without fullgraph those parts break the graph and run.
def _fullgraph_hint(e: BaseException) -> str:
    """A hint for Dynamo's refusal to put code in one graph ('' for other errors)."""
    if type(e).__module__ != "torch._dynamo.exc" or type(e).__name__ != "Unsupported":
        return ""
    return (" (torch.compile with fullgraph=True could not put this run's code in one "
            "graph: a policy's wrappers around compiled modules cannot be; measure the "
            "policy with the model compiled without fullgraph=True)")


# Note [A refusal a library wrapped]
# memledger refuses a policy while the script runs by raising inside the script's own
# calls: `measure`'s checks after a region's forward (Note [State written outside a
# region]: a forward that changed the tensor it was handed) raise a PolicyError from the
# region's wrapper, and a fake run's refusal of a value read (trace/fake.py) an error
# carrying `memledger_line`. A library that runs the modules of its graph inside `try:`
# and raises its own error `from` what it caught turns that into the script's failure:
# FrEIA's `GraphINN.forward` wraps every node's call (`raise RuntimeError(f"{node}
# encountered an error.") from e`), so `measure -p checkpoint:module_list.0` on a GraphINN
# whose inverse pass runs its `HaarDownsampling` (which scales its input in place, `x_perm
# *= self.fac_rev`) said "the script failed under 'checkpoint:module_list.0': script
# raised RuntimeError: Node 'haar' ... encountered an error." (exit 3, the traceback),
# where predict refused it in one line (tests/clients/train_freia.py --model graph
# --cycle). The outcome is now read off the first such error of memledger's in the
# exception's chain (`__cause__`, else `__context__`), as StopTracing, a BaseException,
# passes such a `try` untouched; an error of the script's own with none in its chain
# stays the script's.
def refusal_in_chain(e: BaseException) -> BaseException:
    """The first of memledger's refusals (a PolicyError, a full disk's OutputError, an
    error carrying `memledger_line`) in `e`'s chain of causes and contexts, `e` itself
    first; `e` where there is none (Note [A refusal a library wrapped])."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, (PolicyError, OutputError)) or getattr(cur, "memledger_line", None):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ if cur.__cause__ is not None else cur.__context__
    return e


def run_and_classify(script: str | Path, argv: list[str],
                     refuse=None) -> ScriptOutcome:
    """Run the script and say how it ended. Prints the script's traceback if it raised,
    unless `refuse(exc)` names it bad input (a ScriptOutcome, exit 2: what a --fake run
    cannot do), which is said in one line instead."""
    own = OwnRanks()   # Note [Ranks the script starts itself] in trace/own_ranks.py
    try:
        # Note [torch.func transforms under memledger's hooks] (trace/func_transforms.py)
        with own, earlier_objects_frozen(), func_transforms_step_aside():
            run_script(script, argv)
    except StopTracing:
        return ScriptOutcome(EXIT_OK, "stopped after the requested steps")
    except OwnRanksStop as e:
        return ScriptOutcome(EXIT_USAGE, str(e), e)
    except SystemExit as e:
        if e.code in (None, 0):
            return _finished(own)
        return ScriptOutcome(EXIT_SCRIPT_FAILED, f"script exited with status {e.code}", e)
    except KeyboardInterrupt as e:
        return ScriptOutcome(EXIT_INTERRUPTED, "interrupted (Ctrl-C)", e)
    except BaseException as e:  # the script's own failure: show it as Python would
        e = refusal_in_chain(e)   # Note [A refusal a library wrapped]
        if getattr(e, "memledger_line", None):  # cannot run fake (trace/fake.py): bad input
            return ScriptOutcome(EXIT_USAGE, e.memledger_line, e)
        if isinstance(e, (PolicyError, OutputError)):   # a policy refused while it ran, or
            # memledger's own file (offload's copies) met a full disk: not the script's
            return ScriptOutcome(EXIT_USAGE, str(e).removeprefix("memledger: "), e)
        if isinstance(e, RuntimeError) and "support saved tensor hooks" in str(e):
            return ScriptOutcome(EXIT_USAGE, _func_transforms_line(e), e)   # torch.func: not the
            # script's failure either; it runs without memledger's hooks
        if is_internal(e):   # Note [memledger's own hooks fail as memledger] (crash.py)
            return ScriptOutcome(EXIT_INTERNAL, crash_line(e), e)
        refused = refuse(e) if refuse is not None else None
        if refused is not None:
            return refused
        reason = plain(f"script raised {type(e).__name__}: {e}").splitlines()[0] + \
            _fullgraph_hint(e)
        if not port_taken(reason):   # that one is said in one line, and the parent runs
            print_script_traceback(e, Path(script).resolve())   # the pass again (Note [Two
        return ScriptOutcome(EXIT_SCRIPT_FAILED, reason, e)     # passes, one port])
    return _finished(own)


def _finished(own: OwnRanks) -> ScriptOutcome:
    line = own.after()
    return ScriptOutcome(EXIT_USAGE, line) if line else ScriptOutcome(EXIT_OK, "script finished")


_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # memledger/


def print_script_traceback(exc: BaseException, script: Path) -> None:
    """The traceback from the script's first frame on, without memledger's and runpy's
    (the doctor's and the collector's hooks run inside the script's calls: their frames
    are not the script's)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != str(script):
        tb = tb.tb_next
    te = traceback.TracebackException(type(exc), exc, tb if tb is not None
                                      else exc.__traceback__)
    te.stack = traceback.StackSummary.from_list(
        [f for f in te.stack if not os.path.abspath(f.filename).startswith(_OURS + os.sep)])
    sys.stderr.write("".join(te.format()))
