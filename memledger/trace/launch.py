"""`--nproc N`: the two passes of `memledger trace`, each run on N ranks by torchrun.

    trace_ranks("examples/train_fsdp.py", [], "run.ledger", nproc=2, steps=2)
    # -> run.rank0.ledger, run.rank1.ledger (rank and world_size in each header)

torch's own launcher (`torch.distributed.run --standalone`, its Python API) starts the ranks and
rendezvous; every rank runs `memledger.trace.worker` on the script, writing its own file
(the paths are templates with `{rank}`). Both passes stop after the same optimizer step on
every rank: the collector (and the allocator pass) raise `StopTracing` from the step's post
hook, which every rank reaches after the same collectives, so no rank is left waiting in
one. The allocator pass is a second launch of the same world and steps, so rank r's
measured peak sits beside rank r's ledger.

Failures, one line each (exit codes of memledger/errors.py):
- a rank's script raised: exit 3, the rank that failed first named, every ledger kept;
- a rank hung in a collective: its watchdog stops it after `--timeout` seconds without an
  optimizer step (Note [A rank that never returns]): exit 3;
- the script never made a process group (each rank trained alone): exit 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from memledger.errors import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SCRIPT_FAILED,
    EXIT_USAGE,
    ScriptError,
)
from memledger.ledger.ranks import rank_file, rank_file_template
from memledger.ledger.writer import append_records
from memledger.outputs import check_output, commit, partial_path
from memledger.processes import several_workers, start_worker, zygote_address
from memledger.trace.session import check_script, history_broke

DEFAULT_TIMEOUT_S = 300.0   # seconds without an optimizer step before a rank is called hung
# torchrun gives the other ranks this long after SIGTERM before SIGKILL; the launcher waits
# for it beyond the watchdog's timeout before it stops torchrun itself.
_GRACE_S = 60.0


@dataclass
class RanksResult:
    ledger_paths: list[Path]
    steps: int
    measured: bool
    statuses: list[dict] = field(default_factory=list)


def torchrun_args(nproc: int, worker_args: list[str],
                     module: str = "memledger.trace.worker") -> list[str]:
    """The arguments of torch's launcher (`torch.distributed.run`, through
    memledger/trace/torchrun.py for a quiet failure) running the trace worker on `nproc`
    local ranks, each through memledger/warm_rank.py (Note [Warm ranks])."""
    return ["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "0",
            "-m", "memledger.warm_rank", module, *worker_args]


def _launch(nproc: int, worker_args: list[str], timeout_s: float, quiet: bool,
            module: str = "memledger.trace.worker") -> tuple[int, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default for nproc > 1, said quietly
    with several_workers():   # the launcher and every rank from one zygote: Note [Warm ranks]
        address = zygote_address(env)
        if address is not None:
            env["MEMLEDGER_ZYGOTE"] = address
        proc = start_worker("memledger.trace.torchrun", torchrun_args(nproc, worker_args, module),
                            capture_output=quiet, env=env, new_session=True)
    try:
        try:
            proc.wait(timeout=timeout_s + _GRACE_S if timeout_s > 0 else None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)  # its own session: pass the Ctrl-C on
            proc.wait()
            raise
        return proc.returncode, proc.output().decode(errors="replace")
    finally:
        proc.close()


def _statuses(tmp: Path, nproc: int) -> list[dict]:
    out = []
    for r in range(nproc):
        f = tmp / f"status.rank{r}.json"
        st = json.loads(f.read_text()) if f.exists() else {
            "code": EXIT_SCRIPT_FAILED, "reason": "killed before it could report", "steps": 0}
        out.append({"rank": r, **st})
    return out


def _failure(statuses: list[dict], ledgers: list[Path],
             partials: list[Path] | None = None) -> ScriptError | None:
    """One line naming the rank that failed first (the others usually fail because of it).
    The ledgers named are those whose partial file is renamed over them on the way out."""
    bad = [s for s in statuses if s["code"] != EXIT_OK]
    if not bad:
        return None
    kept = ", ".join(str(p) for p, part in zip(ledgers, partials or ledgers)
                     if part.exists() or p.exists())
    if all(s["code"] == EXIT_INTERRUPTED for s in bad) and len(bad) == len(statuses):
        return ScriptError(f"interrupted; the partial ledgers are kept: {kept}",
                           exit_code=EXIT_INTERRUPTED)
    # The first to stop is the cause: a hung rank's watchdog, a crash; ranks stopped by
    # torchrun (interrupted) or by a dead peer's closed connection come after it.
    first = min(bad, key=lambda s: (s["code"] == EXIT_INTERRUPTED, s.get("t", float("inf"))))
    others = len(bad) - 1
    tail = f" ({others} other rank{'s' * (others > 1)} stopped after it)" if others else ""
    return ScriptError(f"rank {first['rank']} failed: {first['reason']}{tail}; the partial "
                       f"ledgers are kept: {kept}", exit_code=EXIT_INTERNAL
                       if first["code"] == EXIT_INTERNAL else EXIT_SCRIPT_FAILED)


def trace_ranks(script: str | Path, argv: list[str], out: str | Path, nproc: int,
                steps: int = 3, measure: bool = True,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> RanksResult:
    """Trace `steps` optimizer steps of `script` on `nproc` ranks: one ledger per rank."""
    script = check_script(script)
    if nproc < 1:
        raise ScriptError("--nproc must be at least 1", exit_code=EXIT_USAGE)
    if steps < 1:
        raise ScriptError("--steps must be at least 1", exit_code=EXIT_USAGE)
    ledgers = [check_output(rank_file(out, r), "ledger", inputs=[script], ledger=True)
               for r in range(nproc)]
    # each rank streams into a partial file renamed over its ledger at the end, whatever
    # happened (memledger/outputs.py): never half a ledger at a rank's path
    partials = [partial_path(p) for p in ledgers]
    try:
        return _trace_ranks_into(script, argv, out, nproc, steps, measure, timeout_s,
                                 ledgers, partials)
    finally:
        for partial, ledger in zip(partials, ledgers):
            commit(partial, ledger)


def _trace_ranks_into(script: Path, argv: list[str], out: str | Path, nproc: int, steps: int,
                      measure: bool, timeout_s: float, ledgers: list[Path],
                      partials: list[Path]) -> RanksResult:
    template = str(partial_path(Path(rank_file_template(out))))
    common = ["--steps", str(steps), "--timeout", str(timeout_s)]
    with tempfile.TemporaryDirectory(prefix="memledger-ranks-") as tmp:
        status = str(Path(tmp) / "status.rank{rank}.json")
        try:
            _launch(nproc, ["ledger", "--out", template, "--status", status, *common,
                            str(script), "--", *argv], timeout_s, quiet=False)
        except KeyboardInterrupt:
            raise ScriptError(f"interrupted; the partial ledgers are kept: "
                              f"{', '.join(map(str, ledgers))}", exit_code=EXIT_INTERRUPTED) \
                from None
        statuses = _statuses(Path(tmp), nproc)
        err = _failure(statuses, ledgers, partials)
        if err is not None:
            raise err
        done = min(s["steps"] for s in statuses)
        if done == 0:   # first: a script that ended before training has no group to blame
            raise ScriptError("the script ran no optimizer step; memledger traces training "
                              "steps, so call optimizer.step() in the script", exit_code=EXIT_USAGE)
        if not all(s.get("dist", True) for s in statuses):
            raise ScriptError(
                f"--nproc {nproc}: {script} never initialised a process group, so each rank "
                "trained alone; call torch.distributed.init_process_group() in the script, "
                "or trace it without --nproc", exit_code=EXIT_USAGE)
        measured = measure and _allocator_pass(script, argv, nproc, done, timeout_s, Path(tmp),
                                               partials, out)
    return RanksResult(ledger_paths=ledgers, steps=done, measured=measured, statuses=statuses)


def _allocator_pass(script: Path, argv: list[str], nproc: int, steps: int, timeout_s: float,
                    tmp: Path, ledgers: list[Path], out: str | Path) -> bool:
    """The same ranks again, untraced, under the allocator: rank r's peak into rank r's ledger."""
    mtemplate = str(tmp / "measured.rank{rank}.json")
    status = str(tmp / "astatus.rank{rank}.json")
    snapshot = str(rank_file(out, 0)).replace(".rank0", ".rank{rank}") + ".cuda-snapshot.pickle"

    def launch(history: bool) -> tuple[int, str]:
        return _launch(nproc, ["allocator", "--out", mtemplate, "--status", status,
                               "--steps", str(steps), "--timing-steps", "2",
                               "--timeout", str(timeout_s),
                               *(("--snapshot", snapshot) if history else ()),
                               str(script), "--", *argv], timeout_s, quiet=True)

    code, output = launch(history=True)
    files = [tmp / f"measured.rank{r}.json" for r in range(nproc)]
    astatus = [tmp / f"astatus.rank{r}.json" for r in range(nproc)]
    if code != EXIT_OK and any(history_broke(json.loads(f.read_text()))
                               for f in astatus if f.exists()):
        # Note [The allocator's history and a checkpoint's re-run] (trace/session.py)
        print("memledger: the allocator pass failed with a SystemError that the ledger pass "
              "did not meet (the CUDA allocator's history breaks a checkpoint's re-run); "
              "measuring again without it: no allocator snapshots this time", file=sys.stderr)
        for f in [*files, *astatus, *(Path(snapshot.format(rank=r)) for r in range(nproc))]:
            f.unlink(missing_ok=True)
        code, output = launch(history=False)
    if code != EXIT_OK or not all(f.exists() for f in files):
        sys.stderr.write(output)
        print(f"memledger: allocator pass failed on {nproc} ranks (torchrun status {code}); "
              "the ledgers have no measured peak", file=sys.stderr)
        return False
    for f, ledger in zip(files, ledgers):
        append_records(ledger, json.loads(f.read_text())["records"])
    return True
