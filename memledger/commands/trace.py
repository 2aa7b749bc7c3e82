"""`memledger trace SCRIPT [-- ARGS]`: record the lifetime ledger of a training run."""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from memledger.commands.common import console, err_console, summarize_and_keep
from memledger.units import count, format_bytes


def trace(
    script: Annotated[Path, typer.Argument(help="the training script, run as __main__")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="arguments for the script, after --", show_default=False)] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="ledger file to write")] =
        Path("run.ledger"),
    steps: Annotated[int, typer.Option(help="optimizer steps to trace, then stop the script")] = 3,
    nproc: Annotated[Optional[int], typer.Option(
        help="run SCRIPT on N ranks under torchrun: one ledger per rank (run.rank0.ledger, ...)",
        min=1)] = None,
    timeout: Annotated[float, typer.Option(
        help="with --nproc: seconds without an optimizer step before a rank counts as hung")] =
        300.0,
    measure: Annotated[Optional[bool], typer.Option(
        help="also run the script untraced under the allocator for the independent peak "
             "[default: on; off with --fake]", show_default=False)] = None,
    fake: Annotated[bool, typer.Option(
        help="run above FakeTensorMode: shapes, no data, no memory (docs/fake.md)")] = False,
    device: Annotated[Optional[str], typer.Option(
        help="--fake: the target device, cpu or cuda (default: the script's own)")] = None,
    world: Annotated[Optional[int], typer.Option(
        help="with --fake: simulate one rank of an N-rank job (fake process group)",
        min=1, max=1024)] = None,
    rank: Annotated[int, typer.Option(help="with --world: the rank simulated", min=0)] = 0,
    steps_by: Annotated[str, typer.Option(
        help="what ends a step: optimizer (optimizer.step()), forward (the next forward of "
             "the model: evaluation, inference, a custom update) or whole (the whole "
             "script is one step; --steps is ignored)")] = "optimizer",
    timing: Annotated[bool, typer.Option(
        help="time untraced steps and probe checkpoint/offload costs for predict, plan and "
             "compare; --no-timing: memory only, faster")] = True,
) -> None:
    """Trace STEPS optimizer steps of SCRIPT into a ledger, then print where the peak is."""
    _check_options(nproc, fake, device, world, rank, steps_by)
    if nproc:
        from memledger.commands.ranks import trace_nproc

        trace_nproc(script, script_args or [], output, nproc, steps, measure is not False,
                    timeout)
        return
    from memledger.trace.session import trace_script

    # the summary below needs pandas: import it while the workers run the script
    threading.Thread(target=importlib.import_module, args=("memledger.ledger.summary",),
                     daemon=True).start()
    res = trace_script(script, script_args or [], output, steps=steps, measure=measure,
                       fake=fake, device=device, world=world or 0, rank=rank,
                       steps_by=_steps_by(steps_by), timing=timing)
    s = summarize_and_keep(res.ledger_path)
    short = f" (the script ended after {res.steps} of the {steps} asked)" \
        if res.steps < steps and steps_by != "whole" else ""
    line = (f"[bold]{escape(str(res.ledger_path))}[/]: {count(res.steps, 'step')}{short}, peak "
            f"[magenta]{format_bytes(s.peak.bytes)}[/] at step {s.peak.step} ({s.peak.phase})")
    if res.measured:
        # the two peaks of two programs when the script compiles: say which is which here,
        # not only in `show` (Note [Compiled code runs eager under the collector])
        line += f"; allocator peak {format_bytes(s.measured.peak_bytes)}" + (
            " (the ledger is the eager run, the allocator's the compiled one)"
            if s.compiled else "")
    if fake:
        line += f"; fake run on {s.device}, no allocator pass"
    console.print(line, soft_wrap=True)  # a long path must not split the line
    err_console.print(f"next: memledger show {res.ledger_path}", style="dim", markup=False)


def _check_options(nproc: int | None, fake: bool, device: str | None, world: int | None,
                   rank: int,
                   steps_by: str) -> None:
    """Refuse what would be ignored or fail later, before any file is touched: a bad
    --rank once surfaced in the worker, after the output ledger had been emptied."""
    from memledger.errors import EXIT_USAGE, ScriptError

    if nproc:
        given = [flag for flag, on in (("--fake", fake), ("--device", device is not None),
                                       ("--world", world is not None), ("--rank", rank > 0),
                                       ("--steps-by", steps_by != "optimizer")) if on]
        if given:
            raise ScriptError(f"{given[0]} does not apply with --nproc (a real run on N ranks); "
                              "simulate ranks with --fake --world N instead "
                              "(docs/distributed.md)", exit_code=EXIT_USAGE)
    if rank and not world:
        raise ScriptError("--rank needs --world N (the simulated job's size)",
                          exit_code=EXIT_USAGE)
    if world and rank >= world:
        raise ScriptError(f"--rank {rank} is not a rank of --world {world} (ranks are 0 to "
                          f"{world - 1})", exit_code=EXIT_USAGE)


def _steps_by(value: str, nproc: int | None = None, verb: str = "") -> str:
    """`--steps-by` checked; with `nproc`, refused unless "optimizer": ranks are `verb`
    (compared, measured, ...) by their optimizer steps."""
    from memledger.errors import ScriptError
    from memledger.trace.steps import STEPS_BY

    if value not in STEPS_BY:
        raise ScriptError(f"--steps-by {value!r}: use one of {', '.join(STEPS_BY)}",
                          exit_code=2)
    if nproc and value != "optimizer":
        raise ScriptError(f"--steps-by does not apply with --nproc (ranks are {verb} by "
                          "their optimizer steps); drop it", exit_code=2)
    return value
