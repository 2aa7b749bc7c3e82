"""`memledger measure SCRIPT --policy P`: run the script with the policy, for real."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from memledger.commands.common import console, print_json
from memledger.errors import PolicyError
from memledger.units import format_bytes


def measure(
    script: Annotated[Path, typer.Argument(help="the training script, run as __main__")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="arguments for the script, after --", show_default=False)] = None,
    # a list, so that a second -p is refused rather than silently replacing the first
    policy: Annotated[Optional[list[str]], typer.Option(
        "--policy", "-p", help="'kind:selector[:options]' joined by '+' (default: none); "
        "one: `compare` takes several")] = None,
    steps: Annotated[int, typer.Option(help="optimizer steps profiled for the peak")] = 3,
    time_steps: Annotated[int, typer.Option(
        help="further steps timed without profiling (median)")] = 5,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.measure/1 JSON")] = False,
    fake: Annotated[bool, typer.Option(hidden=True)] = False,
    nproc: Annotated[Optional[int], typer.Option(
        min=1, help="run SCRIPT on N ranks under torchrun: one result per rank")] = None,
    steps_by: Annotated[str, typer.Option(
        help="what ends a step, as `memledger trace --steps-by`: optimizer, forward "
             "(evaluation, inference, a custom update) or whole (the whole script is the "
             "one step profiled and timed; --steps and --time-steps are ignored)")]
        = "optimizer",
) -> None:
    """Measured allocator peak and median step time of SCRIPT with POLICY applied."""
    if fake:
        from memledger.trace.fake_options import refuse_fake
        refuse_fake("measure")
    from memledger.commands.trace import _steps_by
    from memledger.measure.runner import measure_script
    from memledger.replay.policies import policies_from_args

    _steps_by(steps_by, nproc, "measured")

    pols = policies_from_args(policy or ["none"])
    if len(pols) != 1:
        raise PolicyError(f"measure takes one policy, not {len(pols)} "
                          f"({', '.join(p.text() for p in pols)}): run it once per policy, "
                          f"or `memledger compare` for several side by side")
    if nproc:
        from memledger.commands.ranks import measure_nproc

        measure_nproc(script, script_args or [], pols[0], nproc, steps, time_steps, json_)
        return
    res = measure_script(script, script_args or [], pols[0], steps=steps, time_steps=time_steps,
                         steps_by=steps_by)
    if json_:
        print_json(res.to_json_dict())
        return
    console.print(f"[bold]{escape(str(script))}[/] with [cyan]{escape(res.policy)}[/]: peak "
                  f"[magenta]{format_bytes(res.peak_bytes)}[/] ({res.peak_bytes:,} B, "
                  f"{res.source}, {res.steps} steps); step time {res.step_time_s * 1e3:.1f} ms "
                  f"(median of {len(res.step_times_s)})")
    if res.regions:
        console.print(f"applied to {', '.join(res.regions)}", style="dim", markup=False)
