"""`memledger doctor SCRIPT`: the training mechanics checked before anything is compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from memledger.commands.common import console, err_console, print_json, stdout_to_stderr
from memledger.errors import CheckFailed
from memledger.units import count


def doctor(
    script: Annotated[Path, typer.Argument(help="the training script, run as __main__")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="arguments for the script, after --", show_default=False)] = None,
    steps: Annotated[int, typer.Option(
        help="steps to watch (optimizer steps, or as --steps-by counts them), then stop the "
             "script")] = 3,
    steps_by: Annotated[str, typer.Option(
        help="what ends a step, as `memledger trace --steps-by`: optimizer, forward "
             "(evaluation, inference, a hand-written update) or whole (the whole script)")]
        = "optimizer",
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="also record the ledger here, findings included (show, "
        "report and check read them)", dir_okay=False)] = None,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.doctor/1 JSON")] = False,
    nproc: Annotated[Optional[int], typer.Option(
        help="run SCRIPT on N ranks under torchrun: every rank watched, and the ranks' "
             "gradients compared (unsynced_gradients)", min=1)] = None,
    timeout: Annotated[float, typer.Option(
        help="with --nproc: seconds without an optimizer step before a rank counts as hung")] =
        300.0,
) -> None:
    """Check the training loop's mechanics (exit 1: findings; 3: the script failed).

    Cut graphs, frozen parameters that move, gradients leaking across steps, the token
    denominator of gradient accumulation, skipped updates, history kept across steps,
    dropout/BatchNorm in eval mode. For evaluation, inference and hand-written updates,
    count steps by forward passes (--steps-by forward)."""
    from memledger.commands.trace import _steps_by
    from memledger.doctor.run import doctor_script
    from memledger.report.findings import print_findings

    if _steps_by(steps_by, nproc, "watched") and nproc:
        _doctor_nproc(script, script_args or [], steps, output, json_, nproc, timeout)
        return
    with stdout_to_stderr(json_):   # --json: stdout holds the JSON and nothing else
        rep = doctor_script(script, script_args or [], steps=steps, ledger=output,
                            steps_by=steps_by)
    if json_:
        print_json(rep.to_json_dict())
    else:
        print_findings(rep, console, title=str(script))
    if output is not None:
        err_console.print(f"ledger with findings: {output} (memledger show {output})",
                          style="dim")
    if not rep.ok:
        raise CheckFailed(f"the doctor found {count(len(rep.findings), 'problem')} in {script} "
                          f"({count(len(rep.errors), 'error')}); see above")


def _doctor_nproc(script: Path, argv: list[str], steps: int, output: Optional[Path], json_: bool,
                  nproc: int, timeout: float) -> None:
    """`doctor --nproc N`: every rank's findings; the job's JSON per the several-ranks
    contract (the worst rank's report on top, every rank's under "ranks")."""
    from memledger.doctor.ranks import doctor_ranks, worst_rank
    from memledger.errors import EXIT_USAGE, ScriptError
    from memledger.report.findings import print_findings

    if output is not None:
        raise ScriptError("doctor --nproc records no ledger; trace the ranks with `memledger "
                          f"trace --nproc {nproc}` and run the doctor without -o",
                          exit_code=EXIT_USAGE)
    from memledger.trace.session import check_script

    with stdout_to_stderr(json_):
        reps = doctor_ranks(check_script(script), argv, steps, nproc, timeout)
    worst = worst_rank(reps)
    if json_:
        per_rank = [{"rank": r, **rep.to_json_dict()} for r, rep in enumerate(reps)]
        print_json({**per_rank[worst], "ok": all(rep.ok for rep in reps), "worst_rank": worst,
                    "ranks": per_rank})
    else:
        for r, rep in enumerate(reps):
            print_findings(rep, console, title=f"{script} (rank {r} of {nproc})")
    bad = [r for r, rep in enumerate(reps) if not rep.ok]
    if bad:
        rep = reps[worst]
        raise CheckFailed(f"the doctor found {count(len(rep.findings), 'problem')} in {script} "
                          f"on rank {worst} ({count(len(rep.errors), 'error')}); ranks with "
                          f"findings: {', '.join(map(str, bad))}; see above")
