"""`memledger predict LEDGER --policy P [--policy Q ...]`: replay the ledger under policies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from memledger.commands.common import console, open_ledger, print_json
from memledger.errors import PolicyError
from memledger.report.compare_table import before_the_model_line, empty_line, idle_line
from memledger.report.names import Name, policy_cell
from memledger.units import format_bytes, format_signed_bytes, parse_duration


def predict(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    policy: Annotated[Optional[list[str]], typer.Option(
        "--policy", "-p", help="'kind:selector[:options]' joined by '+', or a .toml file; "
        "repeat for several")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.predict/1 JSON")] = False,
    step_time: Annotated[Optional[str], typer.Option(
        help="untraced baseline step time, e.g. 25ms or 1.2s (scales traced recompute "
        "times)")] = None,
    bandwidth: Annotated[Optional[float], typer.Option(
        help="offload copy bandwidth in bytes/s (default: measured on this machine)")] = None,
    flops: Annotated[Optional[float], typer.Option(
        help="fake ledgers: target FLOP/s for modelled time, e.g. 4e14 (default per device, "
             "docs/fake.md)")] = None,
) -> None:
    """Predicted peak, its breakdown and added step time for each policy, from the ledger."""
    if not policy:
        raise PolicyError("predict needs at least one --policy, e.g. --policy 'checkpoint:blocks.*'")
    from memledger.ledger.ranks import find_rank_files
    from memledger.replay.compiled import compiled_elsewhere_line
    from memledger.replay.policies import policies_from_args
    from memledger.replay.predict import predict as predict_policies

    pols = policies_from_args(policy)
    files = find_rank_files(ledger) or [ledger]   # run.ledger -> run.rank0.ledger, ...
    leds = [open_ledger(f) for f in files]
    reps = [predict_policies(led, pols, bandwidth=bandwidth, flops=flops, keep_going=True,
                             step_time_s=None if step_time is None else parse_duration(step_time))
            for led in leds]
    if not any(rep.policies for rep in reps):   # nothing predicted: the reasons alone
        _raise_refused(reps, len(pols))
    if len(files) > 1:
        from memledger.commands.ranks import predict_ranks

        predict_ranks(files, reps, json_, _print_table)
        _raise_refused(reps, len(pols))
        return
    if json_:
        print_json(reps[0].to_json_dict())
        _raise_refused(reps, len(pols))
        return
    _print_table(reps[0], str(ledger))
    for p in reps[0].policies:
        if p.peak_before_model:   # Note [A peak before the model is decided]
            console.print(before_the_model_line(p.policy, f"{p.peak_step}·{p.peak_phase}",
                                                p.peak_before_model),
                          style="yellow", markup=False)
    for line in unseen_save_ops(leds[0], pols):
        console.print(line, style="yellow", markup=False)
    if (line := compiled_elsewhere_line(leds[0])):
        console.print(line, style="yellow", markup=False)
    if (line := garbage_line(leds[0])):
        console.print(line, style="yellow", markup=False)
    hooks = leds[0].extra.get("hooks")
    if hooks:   # Note [The script's own saved-tensor hooks] (trace/collector.py)
        console.print(f"the script runs its forward under saved-tensor hooks of its own "
                      f"({hooks[0].get('pack', '')}): what it saves there is not in the "
                      f"ledger as saved, so these predictions do not move it", style="yellow",
                      markup=False)
    elif not (leds[0].storages["category"] == "activation").any():
        console.print("nothing in this ledger was saved for backward (no_grad or inference "
                      "code): checkpoint, selective and offload have nothing to free",
                      style="yellow")
    _raise_refused(reps, len(pols))


def _raise_refused(reps, asked: int) -> None:
    """Exit 2 when a policy was refused, after the others were shown (a refusal of one of
    several used to end `predict` before any table: the usual `checkpoint` + `offload` pair
    on a transformers model that keeps its KV cache printed only the checkpoint refusal)."""
    refused = {r.policy: r.reason for rep in reps for r in rep.refused}
    if not refused:
        return
    if len(refused) == 1:
        raise PolicyError(f"memledger: {next(iter(refused.values()))}")
    raise PolicyError(f"memledger: {len(refused)} of {asked} policies refused: "
                      + "; ".join(why if why.startswith(p) else f"{p}: {why}"
                                  for p, why in refused.items()))


def _print_table(rep, name: str) -> None:
    from memledger.replay.predict import (priced_by_calibration, unprobed_line, unsettled_line,
                                          unsettled_why)

    t = Table(title=f"{name}: baseline peak {format_bytes(rep.baseline_peak_bytes)}",
              title_justify="left", show_edge=False, pad_edge=False)
    # names fold onto further lines; numbers are never cut (a CI log is 80 columns wide)
    # (no min_width: a column held wider than the table gave it once cropped "peak at"
    # to `2·backw` at 60 columns; a Name measures its own narrowest width)
    t.add_column("policy", overflow="fold")
    # the peak's change from the baseline, signed (a saving reads -922.1 KiB: the column
    # once said "saving" over a negative number)
    for col in ("peak", "vs baseline", "+ms/step"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("peak at", overflow="fold")   # step·phase (recompute module)
    for p in rep.policies:
        where = f"{p.peak_step}·{p.peak_phase}"
        if p.peak_in_recompute:
            where += f" (recompute {p.peak_in_recompute})"
        t.add_row(policy_cell(p.policy),  # one part per line, broken after a dot
                  format_bytes(p.peak_bytes), format_signed_bytes(-p.saving_bytes),
                  f"{p.added_time_s * 1e3:.1f}\n({p.added_time_lo_s * 1e3:.1f}–"
                  f"{p.added_time_hi_s * 1e3:.1f})" if p.added_time_s else "0.0", Name(where))
    console.print(t)
    for p in rep.policies:
        if p.idle_regions:
            console.print(idle_line(p.policy, p.idle_regions, len(p.regions)), style="yellow",
                          markup=False)
        if p.empty_regions:
            console.print(empty_line(p.policy, p.empty_regions, len(p.regions)),
                          style="yellow", markup=False)
    if why := unsettled_why(rep.timings_busy, rep.calibration_unsettled):
        console.print(unsettled_line(why), style="yellow")
    elif wide := [p.policy for p in rep.policies if p.added_time_s > 0 and (
            p.added_time_hi_s > WIDE * p.added_time_s or p.added_time_lo_s * WIDE <
            p.added_time_s)]:   # noise no load average caught (a burst, another user)
        console.print(f"the +ms band of {wide[0]}" + (f" and {len(wide) - 1} more" if
                      len(wide) > 1 else "") + f" spans more than {WIDE}x its figure: the "
                      "timings behind it were noisy; trace again on a quiet machine",
                      style="yellow", markup=False)
    if rep.collective_bytes:   # Note [A gloo rank's gap] in replay/prepared.py
        console.print(f"gloo's own collective buffers ({rep.collective_bytes:,} B at the traced "
                      "peak) are live at a measured peak or not as its threads let them go: "
                      "a measured peak on this rank can differ by up to that much",
                      style="dim")
    if rep.time_model != "traced":
        console.print(f"+ms/step {rep.time_model}", style="yellow")
    if any(p.transfer_s for p in rep.policies):
        console.print("+ms/step includes offload copies to "
                      f"{rep.offload_to} ({rep.copy_bytes_per_s / 2**20:.0f} MiB/s; "
                      "--json: transfer_s)", style="dim")
    if priced_by_calibration(rep):
        console.print(unprobed_line(rep), style="yellow")
    if rep.cost_source == "traced" and not rep.untraced_step_time_s:
        console.print("added time from traced times, tracing overhead included (an upper "
                      "bound): the ledger has no untraced timings (traced with --no-timing, "
                      "by `check`, with --fake, or with --steps-by whole: no later step to "
                      "time); trace again without those, or pass "
                      "--step-time with the untraced step time from `memledger measure ... "
                      "--policy none`", style="dim")


WIDE = 4   # a band this many times the figure, either way, is noise, not a range


def garbage_line(led) -> str | None:
    """Tensors reference cycles held (trace/gc_window.py): the replay frees them where the
    traced run's collector did, a policy's run where its own does."""
    from memledger.ledger.summary import cycle_garbage
    from memledger.units import format_bytes

    g = cycle_garbage(led, led.peak().event)
    if g is None or not g.at_peak_bytes:
        return None
    return (f"{format_bytes(g.at_peak_bytes)} at the traced peak were tensors held by "
            "reference cycles after their last use, which Python's garbage collector frees "
            "when it runs: a policy's run collects at other points, so its measured peak may differ from "
            "these predictions by up to that (`memledger doctor` names the cycles)")


def unseen_save_ops(led, pols) -> list[str]:
    """A line per name in a selective save list that no op of the traced steps had: the
    replay keeps nothing for it, as selective checkpointing would. A name torch breaks up
    before the dispatcher (`save=matmul`), or no aten op, is refused by both sides instead
    (Note [Save names predict checks without torch], replay/aten_names.py): no line."""
    from memledger.replay.aten_names import lists_hold_for, reaches_dispatch
    from memledger.replay.policies import DEFAULT_SAVE_OPS, PolicyKind

    ran = set(led.storages["op"].astype(str).str.split(".").str[0])   # as replay names them
    checked = lists_hold_for(str(led.header.get("torch") or ""))   # else every name is noted
    out = []
    for pol in pols:
        for part in pol.parts:
            if part.kind is not PolicyKind.SELECTIVE or part.save_ops() == DEFAULT_SAVE_OPS:
                continue                  # the default list names ops some models never run
            for name in part.save_ops():
                if name not in ran and (name in reaches_dispatch() or not checked):
                    out.append(f"{pol.text()}: save={name}: no op of that name ran in the "
                               "traced steps, so nothing is kept for it (op names are aten's "
                               "as the ledger shows them: mm, addmm, bmm, convolution, ...)")
    return out
