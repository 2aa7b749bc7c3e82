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
    steps: Annotated[int, typer.Option(help="optimizer steps to watch, then stop the script")]
        = 3,
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="also record the ledger here, findings included (show, "
        "report and check read them)", dir_okay=False)] = None,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.doctor/1 JSON")] = False,
) -> None:
    """Check the training loop's mechanics (exit 1: findings; 3: the script failed).

    Cut graphs, frozen parameters that move, gradients leaking across steps, the token
    denominator of gradient accumulation, skipped updates, history kept across steps,
    dropout/BatchNorm in eval mode."""
    from memledger.doctor.run import doctor_script
    from memledger.report.findings import print_findings

    with stdout_to_stderr(json_):   # --json: stdout holds the JSON and nothing else
        rep = doctor_script(script, script_args or [], steps=steps, ledger=output)
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
