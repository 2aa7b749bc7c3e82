"""`memledger compare SCRIPT --policy A --policy B`: gates first, then performance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from memledger.commands.common import (
    console,
    err_console,
    print_json,
    stage_progress,
    stdout_to_stderr,
)
from memledger.errors import CheckFailed, PolicyError, ScriptError
from memledger.outputs import check_output
from memledger.units import count


def errors_line(rep) -> str:
    """compare's last line when it met bad input on the way (exit 2): the policies not run,
    whose rows above say why, or the one error no row shows (a script too short to time)."""
    bad = [p.policy for p in rep.policies if p.failed_gate == "policy"]
    if bad:
        which = ", ".join(bad)
        return (f"{count(len(bad), 'policy', 'policies')} not run, bad input for this "
                f"script: {which} (each row says why); compare reported what it could judge")
    return f"{rep.errors[0]}; compare reported what it could judge"


def compare(
    script: Annotated[Path, typer.Argument(help="the training script, run as __main__")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="arguments for the script, after --", show_default=False)] = None,
    policy: Annotated[Optional[list[str]], typer.Option(
        "--policy", "-p", help="'kind:selector[:options]' joined by '+', or a policy .toml; "
        "repeat for several", show_default=False)] = None,
    steps: Annotated[int, typer.Option(help="optimizer steps compared (and profiled)")] = 3,
    time_steps: Annotated[int, typer.Option(
        help="further steps timed without profiling (median)")] = 5,
    rtol: Annotated[Optional[float], typer.Option(
        help="relative tolerance for gradients and state (default: bitwise on CPU, 1e-5 on "
        "CUDA)", show_default=False)] = None,
    performance: Annotated[bool, typer.Option(
        help="after the gates, predict and measure peak and step time")] = True,
    doctor: Annotated[bool, typer.Option(
        help="first check the baseline's training mechanics (memledger doctor); an error "
        "there stops compare with exit 1")] = True,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.compare/1 JSON")] = False,
    html: Annotated[Optional[Path], typer.Option(
        help="also write a self-contained HTML report here", dir_okay=False)] = None,
    fake: Annotated[bool, typer.Option(hidden=True)] = False,
    nproc: Annotated[Optional[int], typer.Option(
        min=1, help="run SCRIPT on N ranks under torchrun: every rank gated and measured, "
        "a policy rejected on any rank rejected")] = None,
    steps_by: Annotated[str, typer.Option(
        help="what ends a step, as `memledger trace --steps-by`: optimizer, forward (a "
             "hand-written update: gradients read as each backward returns) or whole (the "
             "script is one step); the doctor runs on optimizer steps only")] = "optimizer",
) -> None:
    """Gate each POLICY on inputs, gradients and update, then predicted vs measured (exit 1: rejected).

    Gates run first (same inputs, same gradients, an effective update, against a baseline
    run twice); only policies that pass get a performance verdict: ADOPT, OK or REJECT."""
    if fake:
        from memledger.trace.fake_options import refuse_fake
        refuse_fake("compare")
    if html is not None:  # before minutes of runs, not after (docs/reliability.md)
        check_output(html, "HTML report", inputs=[script])
    from memledger.commands.trace import _steps_by
    from memledger.replay.policies import policies_from_args
    from memledger.report.compare_table import compare_table, reasons

    _steps_by(steps_by, nproc, "compared")

    pols = policies_from_args(policy or [])
    if not pols:
        raise ScriptError("give at least one --policy, e.g. --policy 'checkpoint:blocks.*'",
                          exit_code=2)
    if steps < 1 or time_steps < 1:
        raise ScriptError("--steps and --time-steps must be at least 1", exit_code=2)
    if rtol is not None and not rtol >= 0:
        raise ScriptError(f"--rtol must be >= 0, got {rtol!r}", exit_code=2)
    from memledger.verify.compare import run_compare  # torch: only when comparing

    runs = 1 + len(pols) + (3 + len(pols) if performance else 0) + doctor   # run_compare's
    # stages
    with stdout_to_stderr(json_), stage_progress(runs) as say:   # --json: stdout is JSON only
        if nproc:
            from memledger.verify.compare_ranks import run_compare_ranks

            ranks = run_compare_ranks(script, script_args or [], pols, nproc, steps=steps,
                                      time_steps=time_steps, rtol=rtol,
                                      performance=performance, doctor=doctor, progress=say)
            rep = ranks.job
        else:
            rep = run_compare(script, script_args or [], pols, steps=steps,
                              time_steps=time_steps, rtol=rtol, performance=performance,
                              doctor=doctor, progress=say, steps_by=steps_by)
    if json_:
        print_json(ranks.to_json_dict() if nproc else rep.to_json_dict())
    else:
        console.print(compare_table(rep))
        if nproc:
            from memledger.report.compare_ranks_table import ranks_table
            console.print(ranks_table(ranks.ranks, rep, ranks.worst))
        for line in reasons(rep):
            console.print(line, soft_wrap=True)
    if html is not None:  # after the verdict: a failed write never hides it
        from memledger.report.compare_html import write_compare_html
        write_compare_html(rep, html)
        err_console.print(f"wrote {html}", style="dim", markup=False)
    if rep.errors:   # after every verdict it could give: Note [One bad policy among several]
        raise PolicyError(errors_line(rep))
    if rep.rejected:
        n = sum(p.verdict == "REJECT" for p in rep.policies)
        raise CheckFailed(f"{n} of {len(rep.policies)} policies rejected; see the reasons "
                          "above (the gate, the tensor, the step)")


