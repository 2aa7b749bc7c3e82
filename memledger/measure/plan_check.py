"""`plan --measure`: run the chosen policy and the runner-up for real; fall back if needed.

    report = measure_plan(plan(led, budget), "train.py", [])

Runs, each a fresh process (memledger/measure/runner.py), interleaved so that load on a
shared machine hits every variant alike: baseline, chosen, runner-up, baseline again. The
baseline's step time is the faster of its two medians (see Note [Baseline step time, twice]
in memledger/verify/compare.py). Added time = step time - baseline step time, in process CPU
time when the ledger's timings were thread CPU time (one intra-op thread), else wall time.

If the chosen policy's measured peak is over the budget, the runner-up takes its place if
its measured peak fits; otherwise the next front points under the budget are measured, the
cheapest first, up to `max_extra` more runs. `report.policy` is the measured winner and
`report.fits` is false if none fits for real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from memledger.measure.interval import judged
from memledger.measure.runner import MeasureResult, measure_script, pass_steps
from memledger.processes import several_workers
from memledger.replay.plan import MeasuredChoice, PlanReport
from memledger.replay.policies import parse_policy


@several_workers()   # fresh processes one after another: Note [Warm starts]
def measure_plan(report: PlanReport, script: str | Path, argv: list[str], steps: int = 3,
                 time_steps: int = 20, max_extra: int = 2,
                 say: Callable[[str], None] = lambda m: None, clock: str = "cpu",
                 more_steps: Callable[[int], str] = pass_steps,
                 steps_by: str = "optimizer") -> PlanReport:
    """Measure the plan's choice and runner-up (and fallbacks down the front) beside two
    runs of no policy; `steps` and `steps_by` as the ledger traced them (Note [A plan
    measured as its ledger was traced], commands/plan.py)."""
    def run(text: str) -> MeasureResult:
        say(f"measuring {text}")
        return measure_script(script, argv, parse_policy(text), steps=steps,
                              time_steps=time_steps, more_steps=more_steps,
                              steps_by=steps_by)

    def step(m: MeasureResult) -> float:
        return m.step_cpu_time_s if clock == "cpu" else m.step_time_s

    def steps_of(m: MeasureResult) -> list[float]:
        return m.step_cpu_times_s if clock == "cpu" else m.step_times_s

    pred = {c.policy: c for c in report.candidates}
    order = [("chosen", report.policy)]
    if report.runner_up:
        order.append(("runner-up", report.runner_up))
    base = run("none")
    runs = [(role, text, run(text)) for role, text in order]
    again = run("none")
    ref_run = min((base, again), key=step)
    ref = step(ref_run), steps_of(ref_run)
    measured = [_row(role, text, m, pred, ref, step, steps_of, report.budget_bytes)
                for role, text, m in runs]
    winner = next((m for m in measured if m.fits), None)
    if winner is None:                          # fall back down the front, cheapest first
        tried = {m.policy for m in measured}
        extra = sorted((p for p in report.front if p.peak_bytes <= report.budget_bytes
                        and p.policy not in tried), key=lambda p: p.added_time_s)
        for p in extra[:max_extra]:
            row = _row("fallback", p.policy, run(p.policy), pred, ref, step, steps_of,
                       report.budget_bytes, p.peak_bytes, p.added_time_s)
            measured.append(row)
            if row.fits:
                winner = row
                break
    update = {"measured": measured}
    if winner is None:
        update.update(fits=False, policy="")
    elif winner.policy != report.policy:
        update.update(policy=winner.policy, predicted_peak_bytes=winner.predicted_peak_bytes,
                      predicted_added_time_s=winner.predicted_added_time_s)
    return report.model_copy(update=update)


def _row(role: str, text: str, m: MeasureResult, pred: dict, ref: tuple, step, steps_of,
         budget: int, peak: int | None = None, added: float | None = None) -> MeasuredChoice:
    """`ref`: the baseline's (step time, timed steps)."""
    p = pred.get(text)
    measured_added = step(m) - ref[0]
    interval, resolved = judged(measured_added, steps_of(m), ref[1])
    return MeasuredChoice(
        policy=text, role=role,
        predicted_peak_bytes=p.peak_bytes if p else int(peak or 0),
        measured_peak_bytes=m.peak_bytes,
        predicted_added_time_s=p.added_time_s if p else float(added or 0.0),
        measured_added_time_s=measured_added, fits=m.peak_bytes <= budget,
        measured_added_interval_s=interval, measured_added_resolved=resolved)
