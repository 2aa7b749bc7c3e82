"""`run_compare`: gates first, then predicted vs measured performance, then verdicts.

    report = run_compare("train.py", [], [Policy.parse("checkpoint:blocks.*")], steps=3)
    report.policies[0].verdict      # "ADOPT" | "OK" | "REJECT"

The runs, each a fresh process, in this order:

0. doctor (unless `doctor=False`): the probe alone on the baseline; an error finding stops
   everything with exit 1 (`doctor_gate`): a policy cannot be judged against a baseline
   that trains wrong (docs/doctor.md).
1. capture: baseline twice, each policy once (memledger/verify/gates.py). These copy every
   gradient and state tensor, so nothing is measured in them.
2. only if some policy passed: trace the baseline once (`trace_script`: ledger + allocator
   pass), `predict` every policy from that ledger (replay, no run), and `measure_script`
   the baseline, each passing policy, and the baseline again (allocator peak, median step
   time, no capture hooks; see Note [Baseline step time, twice]). Rejected policies are not measured: a number for a wrong training run would
   only invite its use.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Callable

from memledger.errors import EXIT_USAGE, CheckFailed, PolicyError, ScriptError
from memledger.ledger.model import Ledger
from memledger.measure.interval import judged
from memledger.measure.runner import measure_script
from memledger.processes import several_workers
from memledger.replay.plan import pareto_points
from memledger.replay.policies import Policy
from memledger.replay.predict import predict, time_caveats
from memledger.trace.session import check_script, trace_script
from memledger.units import count
from memledger.verify.gates import GateOutcome, run_gates
from memledger.verify.runs import Variant, capture_run
from memledger.verify.verdict import (
    CompareReport,
    Gates,
    PolicyComparison,
    Worst,
    assign_verdicts,
)

Progress = Callable[[str], None]


@several_workers()   # fresh processes one after another: Note [Warm starts]
def run_compare(script: str | Path, argv: list[str], policies: list[Policy], steps: int = 3,
                time_steps: int = 5, rtol: float | None = None, performance: bool = True,
                progress: Progress | None = None, doctor: bool = True,
                steps_by: str = "optimizer") -> CompareReport:
    """`steps_by`: what ends a step (trace/steps.py): every run counts alike, the doctor's
    too (Note [A capture without an optimizer])."""
    say = progress or (lambda msg: None)
    script = check_script(script)
    if doctor:
        say(f"doctor: checking the baseline's training mechanics, {count(steps, 'step')}")
        doctor_gate(script, argv, steps, steps_by)
    say(f"gates: capturing the baseline twice and {count(len(policies), 'policy', 'policies')}, "
        f"{count(steps, 'step')} each")
    gates = run_gates(script, argv, [Variant.of(p) for p in policies], steps, rtol=rtol,
                      progress=say, runner=functools.partial(capture_run, steps_by=steps_by))
    report = gate_report(script, steps, gates)
    report.steps_by = steps_by
    passing = [(p, r) for p, r in zip(policies, report.policies) if r.verdict != "REJECT"]
    if performance and passing:
        try:
            _performance(report, script, argv, policies, passing, steps, time_steps, say,
                         steps_by)
        except ScriptError as e:   # a script too short to time: the gates' verdicts stand
            if e.exit_code != EXIT_USAGE:
                raise
            report.errors.append(f"performance not measured: {_line(e)}")
    finish_verdicts(report)
    return report


# Note [One bad policy among several]
# A policy that is bad input for this script (a selector that matches no module, a module
# called beside the model) is exit 2, as in `predict` and `measure`. In `compare` it ended
# the whole comparison where it was met: after minutes of the other policies' gates, whose
# verdicts were lost (seen on poutyne: `-p checkpoint:loss_function` among three good
# policies). And a script that runs exactly `--steps` steps is only found too short to time
# when the baseline is measured, after the doctor, the gates and the trace (5 min 48 s of
# runs on simple-hierarchical-transformer, then exit 2 with no verdict). Now the bad policy's
# row says "not run: <why>" (`failed_gate` "policy"), the others are judged as if it had not
# been given, the baseline is measured before the trace (a short script is found a run
# sooner), and `compare` prints everything it judged and then exits 2 with the first of
# `report.errors`: the exit code of bad input, the verdicts kept.


def _line(e: Exception) -> str:
    return str(e).removeprefix("memledger: ")


def gate_report(script: Path, steps: int, gates) -> CompareReport:
    """The report of the gates alone (performance columns empty): one row per policy."""
    return CompareReport(script=str(script), steps=gates.steps, device=gates.device,
                         tolerance=gates.tolerance.describe(),
                         reproducible=gates.reproducible, noise_floor=gates.noise_floor,
                         note=gates.note, performance=False,
                         policies=[_row(o) for o in gates.outcomes],
                         frozen_changed=gates.frozen_changed,
                         errors=[f"{o.variant.label}: {o.failure}" for o in gates.outcomes
                                 if o.bad_input])


def finish_verdicts(report: CompareReport) -> None:
    """ADOPT / OK among the rows that passed (see verdict.py), once performance is in."""
    times = report.baseline.get("measured_step_times_s") or []
    noise = max(times) - min(times) if len(times) >= 2 else 0.0
    assign_verdicts(report.policies, report.performance, noise_s=noise)
    for r in report.policies:
        if r.verdict == "OK" and report.performance and r.saving_bytes <= 0:
            r.reason = "gates passed; saves no memory (measured)"


def doctor_gate(script: Path, argv: list[str], steps: int, steps_by: str = "optimizer") -> None:
    """A policy can only be judged against a baseline that trains correctly: raise
    CheckFailed (exit 1) on the doctor's first error, before any policy runs."""
    from memledger.doctor.run import doctor_script

    refuse_doctor_errors(doctor_script(script, argv, steps=steps, quiet=True,
                                       steps_by=steps_by), script)


def refuse_doctor_errors(report, script: Path, where: str = "") -> None:
    """CheckFailed on the doctor report's first error (`where`: "on rank 1" under --nproc)."""
    errors = report.errors
    if errors:
        f = errors[0]
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        raise CheckFailed(f"the baseline fails the doctor{where}, so no policy is judged: "
                          f"{f.check} at {f.where}: {f.message}{more}; see `memledger doctor "
                          f"{script}`, or pass --no-doctor")


def _row(o: GateOutcome) -> PolicyComparison:
    c = o.comparison
    f = c.finding if c else None
    w = c.worst_gradient if c else None
    return PolicyComparison(
        policy=o.variant.label, verdict="OK" if o.passed else "REJECT",
        reason=o.reason, gates=Gates(**o.gates), failed_gate=f.gate if f else
        ("policy" if o.bad_input else "script" if o.failure else None),
        tensor=f.name if f else "",
        step=f.step if f else None, steps_compared=c.steps_compared if c else 0,
        worst_gradient=Worst(name=w.name, step=w.step, max_abs=w.max_abs, max_rel=w.max_rel)
        if w else None)


def _performance(report: CompareReport, script: Path, argv: list[str],
                 policies: list[Policy], passing: list, steps: int, time_steps: int,
                 say: Progress, steps_by: str = "optimizer") -> None:
    none = Policy.parse("none")

    def measured_under(policy: Policy):
        return measure_script(script, argv, policy, steps=steps, time_steps=time_steps,
                              steps_by=steps_by)

    # first: a script too short to time says so before the trace (Note [One bad policy
    # among several])
    say("performance: measuring the baseline")
    base = measured_under(none)
    with tempfile.TemporaryDirectory(prefix="memledger-compare-") as tmp:
        say("performance: tracing the baseline for the prediction")
        res = trace_script(script, argv, Path(tmp) / "baseline.ledger", steps=steps,
                           measure=True, steps_by=steps_by)
        led = Ledger.load(res.ledger_path)
        pred = predict_judged(led, policies, {p.text() for p, _ in passing})
    bad = bad_policies(pred, {p.text() for p, _ in passing})
    measured = {}
    for policy, _ in passing:
        if policy.text() in bad:
            continue
        say(f"performance: measuring {policy}")
        try:
            measured[policy.text()] = measured_under(policy)
        except PolicyError as e:
            bad[policy.text()] = _line(e)
    not_judged(report, policies, bad)
    say("performance: measuring the baseline again (step-time reference)")
    again = measured_under(none)
    fill_performance(report, led, pred, policies, base, measured, again)


def predict_judged(led: Ledger, policies: list[Policy], passed: set[str]):
    """Predict every policy that passed the gates, and those rejected ones predict can read.

    A policy the gates rejected because it was refused while it ran (a KV cache written in
    its region, a module the script checkpoints itself) is refused by predict the same way;
    that refusal must not turn the whole comparison into exit 2 and lose the other
    policies' verdicts (it did: `-p checkpoint:model.layers.* -p offload:model.layers.*` on
    a script with `gradient_checkpointing_enable()`). Its row keeps predicted 0. One that
    passed the gates yet predict refuses is bad input of its own (`bad_policies`), unless
    predict only cannot predict it (`runs`: inside compiled code), which is measured and
    judged."""
    return predict(led, policies, keep_going=True)


def bad_policies(pred, passed: set[str]) -> dict[str, str]:
    """{policy text: predict's one line} for the policies in `passed` (the gates') that
    predict refuses as bad input: not measured (Note [One bad policy among several])."""
    return {r.policy: r.reason.removeprefix("memledger: ") for r in pred.refused
            if r.policy in passed and not r.runs}


def not_judged(report: CompareReport, policies: list[Policy], bad: dict[str, str]) -> None:
    """Mark the rows of `bad` (policies that passed the gates but are bad input to predict
    or measure) as not run, and add each to the report's errors."""
    for row, p in zip(report.policies, policies):
        why = bad.get(p.text())
        if why is None:
            continue
        row.verdict, row.failed_gate, row.reason = "REJECT", "policy", f"not run: {why}"
        report.errors.append(f"{p.text()}: {why}")


def fill_performance(report: CompareReport, led: Ledger, pred, policies: list[Policy], base,
                     measured: dict, again) -> None:
    """One rank's (or the one process's) performance columns: `led` the traced baseline and
    `pred` its prediction, `base`/`again` the baseline's MeasureResults, `measured`
    {policy text: MeasureResult} for the policies that passed the gates."""
    report.front = pareto_points(led)
    report.time_caveats = time_caveats(pred, own_load=False)
    if led.summary().compiled:   # the eager ledger beside compiled measurements: say so
        report.compiled = (
            f"torch.compile: the predicted peaks are the EAGER run's (the baseline "
            f"{pred.baseline_peak_bytes:,} B), as the trace runs compiled code; the measured "
            f"peaks are the compiled run's (the baseline {base.peak_bytes:,} B)")
    predicted = {pp.policy: pp for pp in pred.policies}   # a refused policy has none
    unpredicted = {r.policy: r.reason for r in pred.refused if r.runs}
    refusals = {r.policy: r.reason for r in pred.refused if not r.runs}
    for row, p in zip(report.policies, policies):   # same order as `policies`
        pp = predicted.get(str(p))
        if pp is None:
            row.not_predicted = unpredicted.get(str(p), "")
            why = refusals.get(str(p), "")
            if row.verdict == "REJECT" and why and why not in row.reason:
                # the gate says what differs; predict's refusal often says why (a buffer its
                # forward writes: Note [State a re-run writes again])
                row.reason += f"; predict refuses it: {why}"
            continue
        row.predicted_peak_bytes = pp.peak_bytes
        row.predicted_added_time_s = pp.added_time_s
        row.at_peak = dict(pp.at_peak)
        row.idle_regions, row.selected = list(pp.idle_regions), len(pp.regions)
        row.empty_regions = list(pp.empty_regions)
        row.peak_before_model = pp.peak_before_model
        row.predicted_peak_at = f"{pp.peak_step}·{pp.peak_phase}"
    passing = [(p, row) for p, row in zip(policies, report.policies)
               if p.text() in measured]
    for policy, row in passing:
        m = measured[policy.text()]
        row.measured_peak_bytes = m.peak_bytes
        row.measured_step_time_s = m.step_time_s
        row.saving_bytes = base.peak_bytes - m.peak_bytes
        if m.peak_bytes and row.predicted_peak_bytes:
            row.peak_prediction_error = (row.predicted_peak_bytes - m.peak_bytes) / m.peak_bytes
    # Note [Baseline step time, twice]: other work on the machine only ever slows a step,
    # so the baseline is timed before and after the policies and the faster median is the
    # reference; one burst of load during the first timing would otherwise make every
    # policy look free (seen: a 2.1 s baseline median against 60 ms policy medians).
    ref = min((base, again), key=lambda r: r.step_time_s)
    step_s = ref.step_time_s
    for policy, row in passing:
        row.measured_added_time_s = row.measured_step_time_s - step_s
        # Note in memledger/measure/interval.py: a MoE model's steps took 50-300 ms, and
        # +1981 ms against a predicted +8 came with nothing to say the median meant little
        row.measured_added_interval_s, row.measured_added_resolved = judged(
            row.measured_added_time_s, measured[policy.text()].step_times_s,
            ref.step_times_s)
    report.baseline = {"predicted_peak_bytes": pred.baseline_peak_bytes,
                       "measured_peak_bytes": base.peak_bytes,
                       "measured_step_time_s": step_s,
                       "measured_step_times_s": [base.step_time_s, again.step_time_s],
                       "at_peak": dict(led.summary().at_peak)}
    report.performance = True

