"""`memledger plan LEDGER --budget 1.5GiB [--measure]`: the cheapest policy predicted to fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from memledger.commands.common import console, err_console, open_ledger, print_json, \
    stdout_to_stderr
from memledger.errors import CheckFailed
from memledger.ledger.names import traced_command
from memledger.report.names import policy_cell
from memledger.units import count, format_bytes, parse_bytes, parse_duration, parse_share


def plan(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    budget: Annotated[str, typer.Option(
        help="peak to fit under, e.g. 1.5GiB or 800MB, or a share of the baseline peak: 80%")],
    json_: Annotated[bool, typer.Option("--json", help="print memledger.plan/1 as JSON")] = False,
    step_time: Annotated[Optional[str], typer.Option(
        help="untraced step time, e.g. 25ms (only for ledgers without untraced timings)")] = None,
    bandwidth: Annotated[Optional[float], typer.Option(
        help="offload copy bandwidth in bytes/s (default: the machine's calibration)")] = None,
    measure: Annotated[bool, typer.Option(
        "--measure", help="run the chosen policy and the runner-up for real; fall back when "
        "the measured peak does not fit")] = False,
    script: Annotated[Optional[Path], typer.Option(
        help="--measure: the training script (default: the one the ledger traced)")] = None,
    time_steps: Annotated[int, typer.Option(help="--measure: timed steps per run")] = 20,
    front: Annotated[bool, typer.Option(help="print the Pareto front")] = True,
    front_points: Annotated[int, typer.Option(
        min=2, help="Pareto points listed at most (a longer front is thinned: endpoints "
        "and knee kept)")] = 16,
    flops: Annotated[Optional[float], typer.Option(
        help="fake ledgers: target FLOP/s for modelled time, e.g. 4e14 (default per device, "
             "docs/fake.md)")] = None,
) -> None:
    """Pick the per-block mix (none / checkpoint / offload / selective on each repeated
    block, and on each large module beside the blocks) that fits BUDGET with the least
    added step time; exact under the cost model (exit 1: none fits)."""
    from memledger.replay.plan import plan as make_plan

    from memledger.commands.ranks import one_rank_ledger

    share = parse_share(budget)
    budget_bytes = parse_bytes(budget) if share is None else 0
    led = open_ledger(one_rank_ledger(ledger, "plan"))
    step_time_s = None if step_time is None else parse_duration(step_time)
    report = make_plan(led, budget_bytes, step_time_s=step_time_s, bandwidth=bandwidth,
                       flops=flops, front_points=front_points, budget_share=share)
    budget_bytes = report.budget_bytes   # a share resolved against the baseline peak
    if share is not None:
        budget = f"{format_bytes(budget_bytes)}, {budget} of the baseline"
    if measure and report.fits:
        from memledger.measure.plan_check import measure_plan

        path = script or Path(str(led.header.get("script", "")))
        argv = [str(a) for a in led.header.get("argv", [])] if script is None else []
        by = str(led.header.get("steps_by", "optimizer"))   # Note [A plan measured as its
        with stdout_to_stderr(json_):                       # ledger was traced]
            report = measure_plan(report, path, argv, steps=max(1, led.steps_traced),
                                  time_steps=time_steps,
                                  say=lambda m: err_console.print(m, style="dim"),
                                  clock=_clock(led),
                                  more_steps=_more_steps(led.header, ledger, script),
                                  steps_by=by)
    if json_:
        print_json(report.to_json_dict())
    else:
        _render(report, budget, front, share is not None)
        for line in report.time_caveats:   # as predict and compare say them
            console.print(line, style="yellow")
        if report.fits and report.policy != "none":
            # plan prices peaks and times; compare's gates say whether the gradients hold
            gate = traced_command(led.header, "memledger", "compare",
                                  options=("-p", report.policy))
            err_console.print(f"next: {gate}", style="dim", markup=False, soft_wrap=True)
    if not report.fits:
        own = {r.get("mod", "") for r in led.extra.get("script_ckpt", [])}
        hint = (f"; the script checkpoints {len(own)} module(s) itself, so checkpoint and "
                "selective are no candidates there (turn its checkpointing off to plan them)"
                if own else "")   # Note [The script's own checkpoint]
        s = led.summary()
        if s.peak.phase == "optimizer":   # what no candidate can lower: show's line
            from memledger.report.terminal import in_the_step_clause

            hint += "; " + in_the_step_clause(s)
            state = sum(s.at_peak[c] for c in ("parameter", "buffer", "gradient",
                                                "optimizer_state"))
            if state > budget_bytes:
                hint += (f"; the parameters, their gradients and the optimizer's state alone "
                         f"are {format_bytes(state)}, over the budget")
        raise CheckFailed(f"memledger: no candidate fits {budget} ({count(budget_bytes, 'byte')}); the "
                          f"lowest predicted peak is {format_bytes(report.predicted_peak_bytes)} "
                          f"({count(report.predicted_peak_bytes, 'byte')})" + hint)


# Note [A plan measured as its ledger was traced]
# `plan --measure` ran each policy for 3 optimizer steps whatever the ledger traced. A
# ledger of a script with no optimizer (`trace --steps-by forward`: a custom update by
# hand, an evaluation) had its plan measured by optimizer steps: "the script ran 0
# optimizer steps; measure needs 3", with a hint to trace it again without its
# `--steps-by`. And the peak it predicts is over the steps the ledger traced, while the
# one measured was over 3. Each run is now counted as the ledger counted (its header's
# `steps_by`) over as many steps as it traced, and the commands plan suggests (`compare`
# next, `trace` again with more steps) count so too (`traced_command`, ledger/names.py).
def _more_steps(header: dict, ledger: Path, script: Path | None):
    """How a plan's user lets the script run n steps (Note [Steps asked for as the verb
    takes them], measure/runner.py): plan takes no script arguments, so the trace is run
    again with the steps added, or the `--script` given runs more by itself."""
    if script is not None:
        return lambda n: (f"plan --measure runs {script} without arguments (--script), so "
                          f"by its defaults")
    argv = [str(a) for a in header.get("argv") or []]

    def hint(n: int) -> str:
        again = traced_command({**header, "argv": [*argv, "--steps", str(n)]}, "memledger",
                               "trace", options=("-o", str(ledger)))
        return (f"plan --measure runs the script as the ledger traced it: trace it again "
                f"with its steps added, e.g. {again}")
    return hint


def _clock(led) -> str:
    timing = led.extra.get("timing") or [{}]
    return "cpu" if timing[-1].get("clock") == "thread_cpu" else "wall"


def rough(m) -> bool:
    """A measured added time whose 90 % interval is wider than +-15 % (measure/interval.py)."""
    return m.measured_added_resolved is False


def ruled_out(refused: dict[str, str]) -> list[tuple[str, str]]:
    """(options, reason) lines: options refused for one reason share a line. Each reason
    names its own policy first ("selective:model.layers.*:save=rsqrt would re-run ..."):
    a transformers model with its KV cache on printed one 6-line paragraph for each of
    checkpoint and three selective save lists, the same but for that name."""
    from memledger.replay.policies import PolicyKind

    kinds = {k.value for k in PolicyKind}
    groups: dict[str, list[str]] = {}
    for option, why in refused.items():
        first, _, rest = why.partition(" ")
        own = ":" in first and first.split(":")[0] in kinds and rest
        groups.setdefault(f"each {rest}" if own else why, []).append(option)
    return [(", ".join(opts), why if len(opts) > 1 else refused[opts[0]])
            for why, opts in groups.items()]


def _on_blocks(options: str, report) -> str:
    """" on BLOCKS" where the options were refused on some blocks only, the others still
    searched with them (Note [Options refused on some blocks], replay/plan.py)."""
    from memledger.replay.plan import unit_selectors

    on = [report.refused_on.get(o) for o in options.split(", ")]
    if not on or any(not b for b in on) or any(b != on[0] for b in on):
        return ""
    return " on " + ", ".join(unit_selectors(on[0], report.blocks + report.left_out,
                                             report.modules))


def _searched(report) -> str:
    """"2 blocks and 1 module beside them (tokenizer)", "3 modules (stem, body, head)":
    what the search acted on (Note [Modules that are not blocks], replay/lone_modules.py)."""
    mods = report.modules
    if not mods:
        return count(len(report.blocks), "block")
    names = ", ".join(mods[:3]) + (f" and {len(mods) - 3} more" if len(mods) > 3 else "")
    if not report.blocks:
        return f"{count(len(mods), 'module')} ({names})"
    return (f"{count(len(report.blocks), 'block')} and {count(len(mods), 'module')} "
            f"beside them ({names})")


# Note [Each block's option, named]
# The search holds its blocks stack by stack, the stack that saves most first (Note [Stacks
# beside the blocks], replay/plan.py), then the modules beside them: not the model's order.
# bidirectional-cross-attention's transformer (`net.layers.{i}` = [attention, feedforward,
# context feedforward], tests/clients/train_bidir.py --mask both --talking-heads) is searched
# as `net.layers.0.2, net.layers.1.2, net.layers.0.0, net.layers.1.0, net.layers.0.1,
# net.layers.1.1`; at 80 % plan chose `offload:net.layers.0.2+offload:net.layers.*.1` and
# printed "per block: offload, none, none, none, offload, offload", which, read in the
# model's order, offloads net.layers.0.0, 1.1 and 1.2. Each option is printed beside its
# block's path.
def per_block(report) -> str:
    """The chosen option of each block, then of each module, beside its path
    (Note [Each block's option, named])."""
    return ", ".join(f"{name} {option}" for name, option
                     in zip([*report.blocks, *report.modules], report.choice))


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f}"


def _render(report, budget: str, front: bool, shared: bool) -> None:
    """`shared`: `budget` reads "32.2 MiB, 80% of the baseline", followed by the baseline."""
    if report.fits:
        console.print(f"[bold green]{report.policy}[/]")
        baseline = format_bytes(report.baseline_peak_bytes)
        console.print(f"  predicted peak {format_bytes(report.predicted_peak_bytes)} ≤ "
                      + (f"{budget} {baseline}" if shared else f"{budget} (baseline {baseline})"))
        # a line of its own: beside the peak it wrapped its band onto a line at 80 columns
        console.print(f"  added time {report.predicted_added_time_s * 1e3:+.1f} ms per step "
                      f"(band {_ms(report.added_time_lo_s)}–{_ms(report.added_time_hi_s)})")
        each = ("per block, then module" if report.blocks else "per module") \
            if report.modules else "per block"
        # indented as a whole: a long line of names wraps under its own start
        console.print(Padding(Text(f"{each}: {per_block(report)}", style="dim"), (0, 0, 0, 2),
                              expand=False))
    console.print(f"searched {report.assignments:,.0f} assignments ({len(report.options)} "
                  f"options on {_searched(report)}"
                  + (f" in {count(len(report.units), 'unit')}" if report.units else "")
                  + f", {report.method}, exact)"
                  + ("" if report.assumption_held else "; blocks did not add up, budget "
                     "tightened (see docs/policies.md)"), style="dim")
    if report.left_out:   # Note [Blocks that save nothing] (replay/plan.py)
        names = ", ".join(report.left_out[:3]) + (
            f" and {len(report.left_out) - 3} more" if len(report.left_out) > 3 else "")
        n = len(report.left_out)
        console.print(f"left out {count(n, 'block')} that save{'s' if n == 1 else ''} "
                      f"nothing for backward ({names}): no option on them changes the peak",
                      style="dim", markup=False)
    if report.runner_up:
        console.print(f"runner-up: {report.runner_up}", style="dim")
    for options, why in ruled_out(report.refused):   # what the search could not use, and why
        console.print(f"{options} ruled out{_on_blocks(options, report)}: {why}",
                      style="yellow", markup=False)
    if report.time_model != "traced":
        console.print(f"added time {report.time_model}", style="yellow")
    if report.measured:
        t = Table(title="Measured", title_justify="left", show_edge=False)
        for col in ("policy", "role", "peak pred", "peak meas", "fits", "+ms pred", "+ms meas"):
            t.add_column(col, justify="left" if col in ("policy", "role") else "right",
                         overflow="fold", no_wrap=col != "policy")
        for m in report.measured:
            t.add_row(policy_cell(m.policy), m.role,
                      format_bytes(m.predicted_peak_bytes),
                      format_bytes(m.measured_peak_bytes), "yes" if m.fits else "no",
                      _ms(m.predicted_added_time_s),
                      _ms(m.measured_added_time_s) + ("?" if rough(m) else ""))
        console.print(t)
        for m in filter(rough, report.measured):
            why = "fewer than 3 timed steps"
            if m.measured_added_interval_s:
                lo, hi = m.measured_added_interval_s
                why = f"90 % interval {lo * 1e3:+.1f}..{hi * 1e3:+.1f} ms, wider than +-15 %"
            console.print(f"? {m.policy}: measured +ms too noisy to judge the prediction "
                          f"({why})", style="yellow", markup=False)
    if front and report.front:
        title = "Pareto front (least added time per peak)"
        if not report.front_complete:
            title += (f": thinned to {len(report.front)} points at evenly spaced peaks, "
                      "endpoints and knee kept (--front-points for more)")
        t = Table(title=title, title_justify="left", show_edge=False)
        for col in ("peak", "+ms/step", "band", "", "policy"):
            t.add_column(col, justify="left" if col in ("policy", "") else "right",
                         overflow="fold", no_wrap=col != "policy")
        for p in report.front:
            t.add_row(format_bytes(p.peak_bytes), _ms(p.added_time_s),
                      f"{_ms(p.added_time_lo_s)}–{_ms(p.added_time_hi_s)}",
                      "knee" if p.knee else "", policy_cell(p.policy))
        console.print(t)
