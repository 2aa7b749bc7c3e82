"""The Rich table of `memledger compare`: one row per policy, read at a glance.

    policy               verdict gates     peak    saved predicted (err) added ms (pred.)
    none (baseline)                     40.3 MiB         40.3 MiB                 25/step
    checkpoint:blocks.*  ADOPT   ✓✓✓   21.4 MiB 18.8 MiB 21.4 MiB (exact)         +9 (+8)

`gates` shows inputs, gradients and update as ✓/✗ (– where not evaluated: nothing after
different inputs is comparable). Rejected and adopted rows get their reason under the
table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.table import Table
from rich.text import Text

from memledger.measure.interval import MIN_STEPS
from memledger.units import count, format_bytes, format_error

if TYPE_CHECKING:   # annotations only: `memledger --help` imports no pydantic
    from memledger.verify.verdict import CompareReport, PolicyComparison

VERDICT_STYLE = {"ADOPT": "bold green", "OK": "green", "REJECT": "bold red"}
# what a compared step is, by `--steps-by` (trace/steps.py): (one, several)
STEPS_BY_WORDS = {"optimizer": ("step", "steps"), "forward": ("step (by forward)",
                                                              "steps (by forward)"),
                  "whole": ("run of the whole script", "runs of the whole script")}


def steps_compared(n: int, steps_by: str) -> str:
    """'1 step', '3 steps (by forward)': the compared steps, counted (`compare --steps 1`
    read "1 steps compared")."""
    return count(n, *STEPS_BY_WORDS[steps_by])


def _mark(ok: bool, evaluated: bool = True) -> Text:
    if not evaluated:
        return Text("–", style="dim")
    return Text("✓", style="green") if ok else Text("✗", style="bold red")


def compare_table(rep: CompareReport) -> Table:
    t = Table(title=f"{rep.script}: {steps_compared(rep.steps, rep.steps_by)} compared, "
              f"gradients {rep.tolerance}",
              title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    t.add_column("policy", overflow="fold", min_width=12)
    t.add_column("verdict", no_wrap=True)
    t.add_column("gates", no_wrap=True)   # inputs, gradients, update
    for name in ("peak", "saved"):
        t.add_column(name, justify="right", no_wrap=True)
    # two figures a cell: at 80 columns the bracketed one goes under the first rather than
    # off the edge (`+555? (+11)` was cut to `+555? (`)
    for name in ("pred. (err)", "+ms (pred.)"):
        t.add_column(name, justify="right", overflow="fold")
    b = rep.baseline
    if rep.performance:
        t.add_row("none (baseline)", "", "", format_bytes(b["measured_peak_bytes"]), "",
                  format_bytes(b["predicted_peak_bytes"]),
                  f"{b['measured_step_time_s'] * 1e3:.0f}/step", style="dim")
    for p in rep.policies:
        t.add_row(*_cells(p, rep.performance))
    return t


def _cells(p: PolicyComparison, performance: bool) -> list:
    not_run = p.failed_gate in ("script", "policy")   # no gate was reached
    inputs_failed = p.failed_gate == "inputs" or not_run
    gates = Text.assemble(_mark(p.gates.inputs, not not_run),
                          _mark(p.gates.gradients, not inputs_failed),
                          _mark(p.gates.update, not inputs_failed))
    measured = performance and p.verdict != "REJECT"
    peak = format_bytes(p.measured_peak_bytes) if measured else "–"
    saved = format_bytes(p.saving_bytes) if measured else "–"
    if performance and p.predicted_peak_bytes:
        pred = format_bytes(p.predicted_peak_bytes)
        if p.peak_prediction_error is not None:
            pred += f" ({format_error(p.peak_prediction_error)})"
    else:
        pred = "–"
    if measured:
        rough = "?" if p.measured_added_resolved is False else ""
        guess = "–" if p.not_predicted else f"{p.predicted_added_time_s * 1e3:+.0f}"
        added = f"{p.measured_added_time_s * 1e3:+.0f}{rough} ({guess})"
    else:
        added = "–"
    return [wrappable(p.policy), Text(p.verdict, style=VERDICT_STYLE[p.verdict]), gates, peak,
            saved, pred, added]


def wrappable(policy: str) -> str:
    """A policy as the table shows it: a space after each kind and around each `+`, where a
    narrow column wraps it (`checkpoint:` above `blocks.*`, not `checkpoint:bloc` above
    `ks.*`); the policy parser reads it back unchanged."""
    return " + ".join(": ".join(part.split(":", 1)) for part in policy.split("+"))


def reasons(rep: CompareReport) -> list[Text]:
    """One line per policy that was rejected or adopted, saying why."""
    out = []
    for p in rep.policies:
        if p.verdict != "OK":
            out.append(Text.assemble((f"{p.verdict} ", VERDICT_STYLE[p.verdict]),
                                     (f"{p.policy}: ", "bold"), p.reason))
    rough = [p for p in rep.policies if p.measured_added_resolved is False
             and p.verdict != "REJECT"]
    if rough:
        spans = "; ".join(f"{p.policy} {_ms_span(p.measured_added_interval_s)}"
                          for p in rough)
        out.append(Text(f"? measured +ms too noisy to judge the prediction (its 90 % "
                        f"interval is wider than +-15 %): {spans}; more --time-steps or a "
                        f"quieter machine narrow it", style="yellow"))
    out += [Text(line, style="yellow") for line in rep.time_caveats]
    out += [Text(f"{p.policy}: measured, not predicted: "
                 f"{p.not_predicted.removeprefix(p.policy + ': ')}", style="yellow")
            for p in rep.policies if p.not_predicted]
    for p in rep.policies:
        if p.idle_regions and p.verdict != "REJECT":
            out.append(Text(idle_line(p.policy, p.idle_regions, p.selected), style="yellow"))
        if p.empty_regions and p.verdict != "REJECT":
            out.append(Text(empty_line(p.policy, p.empty_regions, p.selected), style="yellow"))
        if p.peak_before_model and p.verdict != "REJECT":
            out.append(Text(before_the_model_line(p.policy, p.predicted_peak_at,
                                                  p.peak_before_model), style="yellow"))
    if rep.compiled:
        out.append(Text(rep.compiled, style="yellow"))
    if rep.note:
        out.append(Text(f"note: {rep.note}", style="yellow"))
    if rep.frozen_changed:
        out.append(Text(f"note: frozen parameters (requires_grad=False) that the optimizer "
                        f"step changes, in the baseline too: {', '.join(rep.frozen_changed)}",
                        style="yellow"))
    return out


def idle_line(policy: str, idle: list[str], n: int) -> str:
    """One line: the selected modules a policy acts on no call of (predict and compare)."""
    names = ", ".join(idle[:2]) + (f" and {len(idle) - 2} more" if len(idle) > 2 else "")
    which = "none of its modules" if len(idle) == n else f"{len(idle)} of its {n} modules"
    return (f"{policy}: {which} ({names}) ran with gradients in forward (called under "
            "no_grad, or only from inside backward, as a reversible layer's re-run): the "
            "policy leaves those calls as they are, here and in measure")


# Note [A peak before the model is decided]
# When the first top-level module the script calls never has gradients by the first
# optimizer step (a teacher's `encode` before its student, setfit's `DistillationTrainer`),
# that step decides the model (Note [The model], trace/roots.py), and the model's calls
# before it keep the label they were recorded with (`loss_fn.model.0...`): no policy acts
# on them, in the replay as in `measure`. Where the traced peak is one of those calls'
# (the first step's backward), every policy on the model reads +0 B, predicted = measured,
# and `predict` said nothing of why: a user who asked what checkpointing the student's
# layers would save read "nothing". Said now, once per policy whose peak lies there, by
# `predict` and `compare` alike (`peak_before_model` of the prediction and the row).
def before_the_model_line(policy: str, where: str, was: str) -> str:
    """One line: the policy's peak (`where`) lies before the first optimizer step decided
    the model, whose calls read as `was` until then, so it acts on none of the calls at its
    peak (Note [A peak before the model is decided]; predict and compare)."""
    return (f"{policy}: its peak ({where}) lies before the first optimizer step decided "
            f"which module is the model (the first one called with parameters had no "
            f"gradients, as a teacher has): until then the model's calls read as "
            f"{was!r} and no policy acts on them, here and in measure, so the "
            "policy's saving shows only after that step")


def empty_line(policy: str, empty: list[str], n: int) -> str:
    """One line: the selected modules whose calls saved nothing for backward (predict and
    compare; Note [A region that saves nothing] in replay/predict.py)."""
    names = ", ".join(empty[:2]) + (f" and {len(empty) - 2} more" if len(empty) > 2 else "")
    which = f"none of its modules ({names}) saved anything" if len(empty) == n else \
        f"{len(empty)} of its {n} modules ({names}) saved nothing"
    # Note [A region that saves nothing]: three causes, which the ledger does not tell
    # apart; the line named only the lazy module's, where perceiver-ar-pytorch's rotary
    # embedding (a table from a buffer) computes everything inside its call, and neither
    # of the first two where h-transformer-1d's reversible layers keep their input on ctx
    return (f"{policy}: {which} for backward inside their calls (nothing they compute "
            "needs a gradient, as with a table made from buffers; or their work runs later, "
            "outside them, as with a lazy module whose forward returns an object that "
            "computes it; or autograd is handed nothing to save, as with a reversible "
            "layer's custom Function that keeps its input on ctx as an attribute and "
            "recomputes the rest in backward): the policy changes nothing there")


def _ms_span(interval: list[float] | None) -> str:
    if not interval:
        return f"(fewer than {MIN_STEPS} timed steps)"
    lo, hi = interval
    return f"{lo * 1e3:+.1f}..{hi * 1e3:+.1f} ms"
