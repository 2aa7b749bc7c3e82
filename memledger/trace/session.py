"""`memledger trace`: run the script twice in fresh processes and join the results.

The ledger pass records the ledger (streamed, so it survives whatever happens). The
allocator pass runs the same script beside it with no tracing, under the allocator's own
accounting, for the independent peak; its timed steps wait until the ledger pass is done
(Note [Warm allocator pass]). Both measure up to the same optimizer step, so they measure
the same stretch of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memledger.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_INTERNAL,
    EXIT_SCRIPT_FAILED,
    EXIT_USAGE,
    OutputError,
    ScriptError,
)
from memledger.ledger.names import traced_command
from memledger.ledger.writer import append_records
from memledger.outputs import check_output, commit, partial_path
from memledger.processes import dead_worker, start_worker
from memledger.trace.interrupts import Forwarder
from memledger.trace.optimizer_like import no_step_hint


@dataclass
class TraceResult:
    ledger_path: Path
    steps: int
    measured: bool


def check_script(script: str | Path) -> Path:
    p = Path(script)
    if not p.exists():
        raise ScriptError(f"no script at {str(script)!r}", exit_code=EXIT_USAGE)
    if p.is_dir():
        raise ScriptError(f"{str(script)!r} is a directory; give the training script's path",
                          exit_code=EXIT_USAGE)
    if p.suffix == ".ipynb":   # JSON: run as Python it fails on its first `null`
        raise ScriptError(f"{str(script)!r} is a Jupyter notebook, not a script; export it "
                          f"first: jupyter nbconvert --to script {shlex.quote(str(script))}",
                          exit_code=EXIT_USAGE)
    _refuse_a_ledger(p)
    return p


# Note [A ledger given as the script]
# `show`, `predict` and `plan` take a ledger; `trace`, `compare`, `doctor` and `measure` take
# the training script. A ledger passed to the second kind ran as Python: `memledger compare
# run.ledger -p ...` printed a traceback of the ledger's own line 1105 and "the doctor could
# not watch the script: script raised NameError: name 'true' is not defined" (exit 3), and
# `trace` wrote a partial ledger beside it. A file whose first line is a memledger header is
# refused before anything runs, naming the script the ledger traced.
def _refuse_a_ledger(p: Path) -> None:
    try:
        with p.open("rb") as f:
            first = f.readline(1 << 16)
    except OSError:
        return                                 # unreadable: running it says why
    if not first.lstrip().startswith(b"{"):
        return
    try:
        head = json.loads(first)
    except ValueError:
        return
    if not isinstance(head, dict) or not str(head.get("schema", "")).startswith("memledger."):
        return
    traced = ""
    if head.get("k") == "header" and head.get("script"):
        traced = "; it traced: " + traced_command(head)
    what = "a memledger ledger" if head.get("k") == "header" else \
        f"memledger output ({head['schema']})"
    raise ScriptError(f"{str(p)!r} is {what}, not a training script{traced}",
                      exit_code=EXIT_USAGE)


def check_writable(out: str | Path, inputs: tuple[str | Path, ...] = ()) -> Path:
    """A ledger path checked before any run: writable folder, not an input, and not an
    existing file that is not a ledger (memledger/outputs.py)."""
    return check_output(out, "ledger", inputs=inputs, ledger=True)


def _worker(mode: str, script: Path, argv: list[str], out: Path, steps: int,
            quiet: bool, extra: tuple[str, ...] = (), fw: Forwarder | None = None) -> dict:
    return _Worker(mode, script, argv, out, steps, quiet, extra, fw=fw).result()


# Note [Warm allocator pass]
# `memledger trace` runs the script twice, each in a fresh process. The allocator pass is
# started at once, beside the ledger pass, with --wait-for-go, and runs its measured steps
# right away: their peak comes from the allocator's own events (the profiler's, or CUDA's
# counters), which no timing moves, so they may share the machine with the ledger pass.
# At the end of its measured steps (worker.py `wait_for_go`) it blocks on stdin until the
# ledger pass is done and says how many steps it traced ("go 3"); only then come its timed
# steps and probes (trace/timing.py), which feed the cost model and must run alone:
#
#     ledger pass     | import | set-up | step 1 | step 2 | step 3 |               (ends)
#     allocator pass  | import | set-up | step 1 | step 2 | step 3 | wait | timed steps...
#
# Cases:
# 1. Both passes measure the same steps: the ledger traced `steps` and the allocator
#    waits after `steps` ("go 3", kept); or the script ended sooner in both (the allocator
#    never waits; its status says the same steps, kept: both cover up to the script's end).
# 2. The ledger pass traced fewer steps than the allocator pass measured (a script that
#    behaves differently under tracing, e.g. ends sooner): the allocator's "go 1" does not
#    match its 3 steps; it stops without timing and the parent drops its peak, saying so.
# 3. The ledger pass fails or is interrupted: the allocator pass is killed, its CUDA
#    snapshot (written under a partial name) removed: nothing is kept from it.
# 4. Ctrl-C: both workers get it (Note [One interrupt, delivered once]); the ledger pass
#    reports the interrupt, case 3 follows.
# Only the ledger pass's own traced times (the cost model's fallback where untraced module
# times are missing) can see the neighbour. The two runs of the script now overlap: a
# script that downloads a data set or writes a fixed file at set-up does it twice at once.
# `--nproc` (trace/launch.py) and `--fake` (no allocator pass) do not use this path.
#
# Note [Two passes, one port]
# A one-process distributed script binds a fixed port at set-up (the tutorial's
# `os.environ["MASTER_PORT"] = "12355"` before `init_process_group`): with the two passes
# at once, the second to bind failed with EADDRINUSE, which ended the trace with the
# script's traceback (or left the ledger without its measured peak). The worker says such a
# failure in one line (trace/script.py `port_taken`) and the parent runs that pass again
# once the other has let the port go: a ledger pass after the allocator pass is cancelled,
# an allocator pass after the ledger pass is done. A port that is still taken then belongs
# to another program, and the failure stands.
#
# Note [The allocator's history and a checkpoint's re-run]
# On CUDA the allocator pass records the caching allocator's history, for the snapshot it
# leaves beside the ledger. With torch's default history (stack traces at frees as well as
# allocations, context="all"), torch 2.11 on an H200 fails the re-run of any checkpointed
# region that holds a dropout: `SystemError: <built-in method dropout ...> returned NULL
# without setting an exception`, with or without C++ stacks; without the history, with
# context=None or with context="alloc" the same run is fine (docs/gpu.md, 2026-12-04). So
# a script that calls `torch.utils.checkpoint` itself (transformers'
# `gradient_checkpointing_enable()`) lost its measured peak. The probe now records stacks
# at allocation only (CudaProbe.start), which is all `import` reads. As a net for what that
# does not cover, a pass that fails with a SystemError where the ledger pass ran runs once
# more without the history: the peak is kept, the snapshot is not, and trace says so.
#
# Note [Memory-only traces]
# The timed steps, the three probes and the machine's calibration serve the time side of
# `predict`, `plan` and `compare`, and they are most of what `trace` costs beyond a plain
# run (tiny GPT: ~2x a plain run, docs/performance.md). `check` (CI's verb) reads peaks and
# the traced steps' own times, never those, so it traces without them (`timing=False`,
# worker `--timing-steps 0`): the allocator pass ends with its measured steps and never
# waits for "go". `memledger trace --no-timing` offers the same to a user who wants memory
# only; `predict` on such a ledger says its times are the traced steps' and the cache's.
class _Worker:
    """One worker process (`python -m memledger.trace.worker MODE ...`)."""

    def __init__(self, mode: str, script: Path, argv: list[str], out: Path, steps: int,
                 quiet: bool, extra: tuple[str, ...] = (), wait_for_go: bool = False,
                 fw: Forwarder | None = None) -> None:
        self.out = out
        self.quiet = quiet
        self.history = "--snapshot" in extra   # the allocator's history on, on CUDA
        self.fw = fw
        self._tmp = tempfile.TemporaryDirectory(prefix="memledger-")
        self.status = Path(self._tmp.name) / "status.json"
        args = [mode, "--out", str(out), "--status", str(self.status), "--steps", str(steps),
                *extra, *(("--wait-for-go",) if wait_for_go else ()), str(script), "--", *argv]
        # a quiet worker's output is kept (in a file) and shown only if the run fails
        self.proc = start_worker("memledger.trace.worker", args, capture_output=quiet,
                                 stdin_pipe=wait_for_go)
        if fw is not None:  # SIGINT/SIGTERM to memledger reach it: Note [One interrupt, ...]
            fw.attach(self.proc)

    def result(self, go: str | None = None) -> dict:
        """Wait for the worker (first telling a waiting one `go`) and read its status."""
        try:
            output = self.proc.communicate(go.encode() if go is not None else None)
        except KeyboardInterrupt:
            self.proc.wait()  # the child got the same Ctrl-C: let it finish writing
            self._done()
            raise ScriptError(f"interrupted; the partial ledger is kept at {self.out}",
                              exit_code=EXIT_INTERRUPTED) from None
        if self.status.exists():
            result = json.loads(self.status.read_text())
        else:
            err = dead_worker(self.proc.returncode, self.status.parent)
            result = {"code": getattr(err, "exit_code", EXIT_USAGE),
                      "reason": str(err).removeprefix("memledger: "), "steps": 0}
        self._done()
        if self.fw is not None and self.fw.interrupted:
            result = {**result, "code": EXIT_INTERRUPTED, "signals": self.fw.signals}
        # a pass whose port was taken, or whose allocator history broke it, runs again, its
        # output unshown (Notes [Two passes, one port], [The allocator's history and a
        # checkpoint's re-run])
        if self.quiet and result["code"] not in (EXIT_OK, EXIT_INTERRUPTED) and output and \
                not port_taken(result.get("reason", "")) and \
                not (self.history and history_broke(result)):
            sys.stderr.write(output.decode(errors="replace"))
        return result

    def cancel(self) -> None:
        """A worker that will not be needed, wherever it is: kill it (no output kept)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, ValueError):
            self.proc.communicate()
        self._done()

    def _done(self) -> None:
        self.proc.close()
        with contextlib.suppress(OSError):
            self._tmp.cleanup()


def trace_script(script: str | Path, argv: list[str], out: str | Path, steps: int = 3,
                 measure: bool | None = None, fake: bool = False,
                 device: str | None = None, world: int = 0, rank: int = 0,
                 steps_by: str = "optimizer", timing: bool = True) -> TraceResult:
    """Trace `steps` optimizer steps of `script` into the ledger `out`; raises on failure.
    `fake`: above FakeTensorMode for the target `device` (no allocator pass: docs/fake.md).
    `timing` False: the allocator pass stops after its measured steps (Note [Memory-only
    traces]): no timed steps, probes or calibration, so `predict` prices time from the
    traced steps and the cached calibration only.

    The ledger grows in a partial file beside `out` and is renamed over it at the end, kept
    whatever happened (see memledger/outputs.py, Note [Two writers, one output])."""
    script = check_script(script)
    if fake:
        from memledger.trace.fake_options import check_fake_options
        check_fake_options(device, measure)
        measure = False
    else:
        measure = True if measure is None else measure
    if not fake and device is not None:
        raise ScriptError("--device chooses a --fake run's target; without --fake the script "
                          "picks its own device: pass it to the script after --",
                          exit_code=EXIT_USAGE)
    out = check_output(out, "ledger", inputs=[script], ledger=True)
    if steps < 1:
        raise ScriptError("--steps must be at least 1", exit_code=EXIT_USAGE)
    fake_args = ("--fake", *(("--device", device) if device else ())) if fake else ()
    if steps_by != "optimizer":   # what ends a step: memledger/trace/steps.py
        steps = 1 if steps_by == "whole" else steps
        fake_args += ("--steps-by", steps_by)
    if world:   # one simulated rank of `world`: memledger/trace/fake_world.py
        if not fake:
            raise ScriptError("--world simulates ranks above FakeTensorMode: add --fake (or "
                              "run real ranks with --nproc)", exit_code=EXIT_USAGE)
        fake_args += ("--world", str(world), "--rank", str(rank))
    partial = partial_path(out)
    try:
        with Forwarder() as fw:
            return _trace_into(script, argv, out, partial, steps, measure, fake, fake_args, fw,
                               steps_by=steps_by, timing=timing)
    finally:
        commit(partial, out)


def _trace_into(script: Path, argv: list[str], out: Path, partial: Path, steps: int,
                measure: bool, fake: bool, fake_args: tuple[str, ...],
                fw: Forwarder, steps_by: str = "optimizer",
                timing: bool = True) -> TraceResult:
    allocator = start_allocator = None
    if measure:   # Note [Warm allocator pass]: it runs its measured steps beside the ledger's
        # On CUDA the allocator pass also leaves the allocator's own snapshot beside the
        # ledger (a torch pickle: read it with `memledger import`, never plain pickle),
        # under a partial name until its peak is kept.
        mtmp = tempfile.TemporaryDirectory(prefix="memledger-")
        snapshot = Path(str(out) + ".cuda-snapshot.pickle")

        def start_allocator(history: bool = True) -> _Worker:
            return _Worker("allocator", script, argv, Path(mtmp.name) / "measured.json",
                           steps, quiet=True, wait_for_go=True, fw=fw,
                           extra=(*(("--snapshot", str(partial_path(snapshot))) if history
                                    else ()),
                                  "--steps-by", steps_by,
                                  *(() if timing else ("--timing-steps", "0"))))
        allocator = start_allocator()
    try:
        res = _worker("ledger", script, argv, partial, steps, quiet=False, extra=fake_args,
                      fw=fw)
        if allocator is not None and port_taken(res.get("reason", "")):
            allocator.cancel()   # Note [Two passes, one port]: it holds the port
            allocator = None
            _say_passes_apart()
            res = _worker("ledger", script, argv, partial, steps, quiet=False,
                          extra=fake_args, fw=fw)
            allocator = start_allocator()
        _raise_for_ledger_pass(res, out, partial, fake, steps_by)
    except BaseException:
        if allocator is not None:
            allocator.cancel()
        if start_allocator is not None:
            mtmp.cleanup()
            _drop_snapshot(snapshot)
        raise
    measured = False
    if allocator is not None:
        try:
            measured = _join_allocator_pass(allocator, res["steps"], out, partial, snapshot,
                                            start_allocator)
        finally:
            mtmp.cleanup()
    return TraceResult(ledger_path=out, steps=res["steps"], measured=measured)


def port_taken(reason: str) -> bool:
    """A failure to bind a port in use (torch's TCPStore at a fixed MASTER_PORT: "... code:
    -98, name: EADDRINUSE, message: address already in use"): Note [Two passes, one port]."""
    return "EADDRINUSE" in reason or "address already in use" in reason.lower()


def history_broke(result: dict) -> bool:
    """An allocator pass that failed as the CUDA allocator's history makes a checkpoint's
    re-run fail: Note [The allocator's history and a checkpoint's re-run]."""
    return result.get("code") not in (EXIT_OK, EXIT_INTERRUPTED) and \
        "SystemError" in result.get("reason", "")


def _say_passes_apart() -> None:
    print("memledger: the script's fixed port (MASTER_PORT) was taken by its other pass "
          "running beside it; running the two passes one after the other", file=sys.stderr)


def _join_allocator_pass(allocator: _Worker, steps: int, out: Path, partial: Path,
                         snapshot: Path, restart=None) -> bool:
    """Let the allocator pass time its steps, then add its records to the ledger if they
    cover the steps the ledger pass traced (Note [Warm allocator pass]). True: added.
    `restart(history=True)`: the pass anew, for one that found its port taken (Note [Two
    passes, one port]) or, without the allocator's history, for one that history broke
    (Note [The allocator's history and a checkpoint's re-run])."""
    try:
        mres = allocator.result(go=f"go {steps}\n")
        if restart is not None and port_taken(mres.get("reason", "")):
            _say_passes_apart()
            mres = restart().result(go=f"go {steps}\n")
        if restart is not None and history_broke(mres):
            print("memledger: the allocator pass failed with a SystemError that the ledger "
                  "pass did not meet (the CUDA allocator's history breaks a checkpoint's "
                  "re-run); measuring again without it: no allocator snapshot this time",
                  file=sys.stderr)
            _drop_snapshot(snapshot)
            mres = restart(history=False).result(go=f"go {steps}\n")
    except BaseException:
        _drop_snapshot(snapshot)
        raise
    mpath = allocator.out
    kept = False
    try:
        if mres["code"] == EXIT_INTERRUPTED:
            raise ScriptError(f"{_interrupted(mres)} during the allocator pass; the ledger "
                              f"(complete, without the allocator's peak) is kept at {out}",
                              exit_code=EXIT_INTERRUPTED)
        if mres["code"] != EXIT_OK or not mpath.exists():
            print(f"memledger: allocator pass failed ({mres['reason']}); the ledger has no "
                  "measured peak", file=sys.stderr)
            return False
        if mres["steps"] != steps:   # case 2 of the Note
            print(f"memledger: the allocator pass measured {mres['steps']} step(s) where the "
                  f"ledger pass traced {steps} (does the script run differently when "
                  "traced?); the ledger has no measured peak", file=sys.stderr)
            return False
        records = json.loads(mpath.read_text())["records"]
        for rec in records:   # the snapshot under its own name now that the peak is kept
            if rec.get("snapshot") == str(partial_path(snapshot)):
                os.replace(partial_path(snapshot), snapshot)
                rec["snapshot"] = str(snapshot)
        append_records(partial, records)
        kept = True
        return True
    finally:
        if not kept:
            _drop_snapshot(snapshot)


def _drop_snapshot(snapshot: Path) -> None:
    with contextlib.suppress(OSError):
        partial_path(snapshot).unlink()


def _graph_carried_hint(reason: str) -> str:
    """A backward that ran into a graph an earlier step's backward freed: the doctor names
    what carried it (Note [A variable that carried the graph into a failed backward],
    trace/doctor_retention.py)."""
    if "backward through the graph a second time" not in reason:
        return ""
    return ("; if a step's forward reads what the last step computed (a hidden state "
            "not detached), `memledger doctor` on the script names it")


def _raise_for_ledger_pass(res: dict, out: Path, partial: Path, fake: bool,
                           steps_by: str = "optimizer") -> None:
    if res["code"] == EXIT_USAGE and fake:   # the script cannot run fake: one line
        raise ScriptError(res["reason"], exit_code=EXIT_USAGE)
    if res["code"] == EXIT_INTERRUPTED:
        raise ScriptError(f"{_interrupted(res)}; the partial ledger is kept at {out}",
                          exit_code=EXIT_INTERRUPTED)
    if res["code"] == EXIT_USAGE:  # memledger's own failure (a full disk), not the script's
        reason = res["reason"].replace(str(partial), str(out))
        raise OutputError(f"{reason}; what was recorded is kept at {out}")
    if res["code"] != EXIT_OK:   # the script's failure, or memledger's own (exit 70)
        raise ScriptError(f"{res['reason']}; the partial ledger is kept at {out}"
                          + _graph_carried_hint(res["reason"]),
                          exit_code=EXIT_INTERNAL if res["code"] == EXIT_INTERNAL
                          else EXIT_SCRIPT_FAILED)
    # under --steps-by forward the advice below named the flag the user had just given:
    # botorch's `fit_gpytorch_mll` (scipy's L-BFGS, no torch optimizer) of a GP, whose
    # gpytorch `Module.__call__` runs `forward` without nn.Module's hooks
    if res["steps"] == 0 and steps_by == "forward":
        raise ScriptError(
            f"the script ran no forward of a module that holds parameters, through "
            f"nn.Module's call ({res.get('events', 0)} ops seen), so --steps-by forward "
            "found no step (a model whose class calls its own forward, as gpytorch's "
            "models do, is not seen so); trace the whole script as one step (--steps-by "
            f"whole); ledger kept at {out}", exit_code=EXIT_USAGE)
    if res["steps"] == 0:
        raise ScriptError(
            f"the script ran no optimizer step ({res.get('events', 0)} ops seen)" + (
                no_step_hint(res.get("optimizer_like", ""),
                             unstepped=res.get("optimizer_unstepped", "")) or
                "; for evaluation, inference or a hand-written update count steps by forward "
                "passes (--steps-by forward) or trace the whole script (--steps-by whole)") +
            f"; ledger kept at {out}",
            exit_code=EXIT_USAGE)


def _interrupted(res: dict) -> str:
    sigs = res.get("signals") or []
    return "terminated (SIGTERM)" if "SIGTERM" in sigs else "interrupted"
