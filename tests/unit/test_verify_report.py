"""Verdict rule, the Rich table and the HTML page, on a hand-made CompareReport."""

from __future__ import annotations

import re
from io import StringIO

from rich.console import Console

from memledger.report.compare_html import render_compare_html
from memledger.report.compare_table import compare_table, reasons
from memledger.verify.verdict import (
    CompareReport,
    Gates,
    PolicyComparison,
    assign_verdicts,
)

MiB = 2**20


def _row(policy, saving=0, added=0.0, passed=True, **kw):
    return PolicyComparison(
        policy=policy, verdict="OK" if passed else "REJECT",
        reason=kw.pop("reason", "gates passed"),
        gates=Gates(inputs=True, gradients=passed, update=True),
        failed_gate=None if passed else "gradients", saving_bytes=saving,
        measured_added_time_s=added, **kw)


def test_adopt_goes_to_the_best_saving_per_second():
    # 18 MiB for 9 ms = 2.10e9 B/s; 22 MiB for 3 ms = 7.69e9 B/s; 30 MiB rejected
    rows = [_row("checkpoint", 18 * MiB, 0.009), _row("offload", 22 * MiB, 0.003),
            _row("broken", 30 * MiB, 0.001, passed=False)]
    assign_verdicts(rows, performance=True)
    assert [r.verdict for r in rows] == ["OK", "ADOPT", "REJECT"]
    # 22 MiB / 3 ms = 7,689,557,333 B/s = 7.2 GiB/s
    assert rows[1].reason == ("best saving per second of added time: 22.0 MiB for +3.0 ms/step "
                              "(7.2 GiB/s)")
    assert round(rows[1].bytes_saved_per_s) == round(22 * MiB / 0.003)


def test_a_free_saving_beats_any_costly_one_and_no_saving_is_never_adopted():
    rows = [_row("a", 18 * MiB, 0.001), _row("b", 1 * MiB, -0.002), _row("c", 0, -0.01)]
    assign_verdicts(rows, performance=True)
    assert [r.verdict for r in rows] == ["OK", "ADOPT", "OK"]
    assert rows[1].reason == "saves 1.0 MiB at no cost in time measurable above the noise"
    assert rows[1].bytes_saved_per_s is None


def test_an_added_time_within_the_noise_is_the_noise_not_free():
    # the baseline timed 60.0 and 62.0 ms: 2 ms of noise. A 512-byte saving that happened to
    # time 0.4 ms faster is 512 B / 2 ms = 256 KB/s, far below 18 MiB / 9 ms = 2.1 GB/s
    rows = [_row("checkpoint", 18 * MiB, 0.009), _row("crumb", 512, -0.0004)]
    assign_verdicts(rows, performance=True, noise_s=0.002)
    assert [r.verdict for r in rows] == ["ADOPT", "OK"]
    assert rows[1].bytes_saved_per_s is None
    # two savings inside the noise: the larger wins, and the reason names the noise
    rows = [_row("a", 1 * MiB, 0.001), _row("b", 4 * MiB, 0.0015)]
    assign_verdicts(rows, performance=True, noise_s=0.002)
    assert [r.verdict for r in rows] == ["OK", "ADOPT"]
    assert rows[1].reason == ("saves 4.0 MiB at no cost in time measurable above the noise "
                              "(timings of the baseline differ by 2.0 ms)")


def test_without_performance_nothing_is_adopted():
    rows = [_row("a", 18 * MiB, 0.001)]
    assign_verdicts(rows, performance=False)
    assert rows[0].verdict == "OK"


def _report() -> CompareReport:
    rows = [
        _row("checkpoint:blocks.*", 18 * MiB, 0.009, measured_peak_bytes=22 * MiB,
             predicted_peak_bytes=21 * MiB, predicted_added_time_s=0.008,
             peak_prediction_error=-1 / 22, at_peak={"parameter": 4 * MiB,
                                                     "activation": 11 * MiB}),
        _row("selective:blocks.*", passed=False, predicted_peak_bytes=29 * MiB,
             reason="gradients: gradient of blocks.0.fc.bias differs at step 0: max abs "
                    "0.026, rel 1.72 (bitwise)", at_peak={"activation": 19 * MiB}),
    ]
    assign_verdicts(rows, performance=True)
    return CompareReport(
        script="train.py", steps=2, device="cpu", tolerance="bitwise", reproducible=True,
        noise_floor=0.0, performance=True, policies=rows,
        baseline={"predicted_peak_bytes": 40 * MiB, "measured_peak_bytes": 40 * MiB,
                  "measured_step_time_s": 0.025, "at_peak": {"activation": 36 * MiB}})


def test_json_contract_keys():
    d = _report().to_json_dict()
    assert d["schema"] == "memledger.compare/1"
    p = d["policies"][0]
    for key in ("policy", "verdict", "reason", "gates", "predicted_peak_bytes",
                "measured_peak_bytes", "predicted_added_time_s", "measured_added_time_s"):
        assert key in p
    assert p["gates"] == {"inputs": True, "gradients": True, "update": True}
    assert d["policies"][1]["gates"]["gradients"] is False
    assert isinstance(p["measured_peak_bytes"], int) and p["measured_peak_bytes"] == 22 * MiB


def test_table_lines():
    con = Console(file=StringIO(), width=100, color_system=None)
    rep = _report()
    con.print(compare_table(rep))
    for line in reasons(rep):
        con.print(line)
    lines = [ln.rstrip() for ln in con.file.getvalue().splitlines() if ln.strip()]
    assert lines[0] == "train.py: 2 steps compared, gradients bitwise"
    assert lines[1].split() == ["policy", "verdict", "gates", "peak", "saved", "pred.",
                                "(err)", "+ms", "(pred.)"]
    assert lines[3].split() == ["none", "(baseline)", "40.0", "MiB", "40.0", "MiB", "25/step"]
    # a space after the kind, where a narrow column wraps it (compare_table.wrappable)
    assert lines[4].split() == ["checkpoint:", "blocks.*", "ADOPT", "✓✓✓", "22.0", "MiB", "18.0",
                                "MiB", "21.0", "MiB", "(-4.5%)", "+9", "(+8)"]
    assert lines[5].split() == ["selective:", "blocks.*", "REJECT", "✓✗✓", "–", "–", "29.0",
                                "MiB", "–"]
    assert " ".join(lines[6:8]) == ("ADOPT checkpoint:blocks.*: best saving per second of added "
                                    "time: 18.0 MiB for +9.0 ms/step (2.0 GiB/s)")
    assert " ".join(lines[8:]) == ("REJECT selective:blocks.*: gradients: gradient of blocks.0.fc.bias "
                        "differs at step 0: max abs 0.026, rel 1.72 (bitwise)")


def test_one_compared_step_is_counted_in_the_singular():
    """`compare --steps 1` titled its table "1 steps compared" (and the HTML page too)."""
    rep = _report()
    rep.steps = 1
    con = Console(file=StringIO(), width=100, color_system=None)
    con.print(compare_table(rep))
    assert con.file.getvalue().splitlines()[0].rstrip() == \
        "train.py: 1 step compared, gradients bitwise"
    assert "<p>1 step compared on " in render_compare_html(rep)
    rep.steps_by = "whole"
    assert "<p>1 run of the whole script compared on " in render_compare_html(rep)


def test_html_is_self_contained_with_table_bars_and_scatter():
    page = render_compare_html(_report())
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert not re.search(r"<script|https?://|src=", page)   # opens offline
    assert page.count("<svg") == 2
    assert "<b style=\"color:#c62828\">REJECT</b>" in page
    # bars: baseline (1 category) + checkpoint (2) + selective (1) = 4 rects
    assert page.count("<rect") == 4
    # scatter: baseline and the one policy that passed
    assert page.count("<circle") == 2
    assert "differs at step 0: max abs 0.026, rel 1.72 (bitwise)" in page


def test_html_says_what_priced_the_predicted_times():
    """The terminal prints compare's time caveats under its table; the page says them too,
    below the table they qualify."""
    rep = _report()
    rep.time_caveats = ["checkpoint, selective and offload costs from the machine's "
                        "calibration, not this model's own"]
    page = render_compare_html(rep)
    assert page.index("</table>") < page.index(
        '<p class="warn">checkpoint, selective and offload costs from the machine&#x27;s '
        "calibration, not this model&#x27;s own</p>")
    assert '<p class="warn">' not in render_compare_html(_report())


def test_html_draws_plans_pareto_front_behind_the_measured_points():
    rep = _report()
    rep.front = [{"policy": "offload:blocks.*", "peak_bytes": 18 * MiB, "added_time_s": 0.020,
                  "added_time_lo_s": 0.018, "added_time_hi_s": 0.022},
                 {"policy": "checkpoint:blocks.*", "peak_bytes": 21 * MiB,
                  "added_time_s": 0.008, "added_time_lo_s": 0.007, "added_time_hi_s": 0.009},
                 {"policy": "none", "peak_bytes": 40 * MiB, "added_time_s": 0.0,
                  "added_time_lo_s": 0.0, "added_time_hi_s": 0.0}]
    page = render_compare_html(rep)
    assert page.count("<polyline") == 1 and page.count('class="front"') == 3
    assert "front: offload:blocks.*: 18.0 MiB, +20.0 ms (predicted)" in page
    assert page.count("<circle") == 2 + 3        # measured points + front points


def test_a_measured_time_too_noisy_to_judge_is_marked_with_its_interval():
    """A MoE model's policy steps took 0.19-4.2 s against a 14 ms baseline: the median said
    +1981 ms and nothing said it meant little. The row now carries the 90 % bootstrap
    interval of the added time, `?` in the table and a line saying why."""
    from memledger.measure.runner import MeasureResult
    from memledger.measure.interval import judged

    base = [0.010, 0.011, 0.010, 0.012, 0.011]
    steady = _row("checkpoint:blocks.*", 18 * MiB, predicted_added_time_s=0.008)
    steady.measured_added_time_s = 0.020 - 0.011          # medians: 20 ms vs 11 ms
    steady.measured_added_interval_s, steady.measured_added_resolved = judged(
        steady.measured_added_time_s, [0.020, 0.0201, 0.0199, 0.020, 0.0202], base)
    lo, hi = steady.measured_added_interval_s
    # every resample's medians lie in 19.9-20.2 ms and 10-12 ms: the interval in 7.9-10.2 ms,
    # inside +-15 % of 9 ms (7.65-10.35)
    assert steady.measured_added_resolved is True and 0.0079 <= lo <= hi <= 0.0102
    rough = _row("offload:blocks.*", 22 * MiB, predicted_added_time_s=0.008)
    rough.measured_added_time_s = 0.4 - 0.011
    rough.measured_added_interval_s, rough.measured_added_resolved = judged(
        rough.measured_added_time_s, [0.19, 4.2, 0.4, 1.3, 0.27], base)
    assert rough.measured_added_resolved is False
    assert rough.measured_added_interval_s[1] > 1.15 * rough.measured_added_time_s
    # two timed steps: their resampled medians can agree by chance, so nothing is resolved
    assert judged(0.01, [0.02, 0.0201], base) == (None, False)
    assert "step_times_s" in MeasureResult.model_fields

    rep = _report()
    rep.policies = [steady, rough]
    con = Console(file=StringIO(), width=100, color_system=None)
    con.print(compare_table(rep))
    for line in reasons(rep):
        con.print(line)
    out = con.file.getvalue()
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.strip()}
    assert rows["checkpoint:"][-2:] == ["+9", "(+8)"]
    assert rows["offload:"][-2:] == ["+389?", "(+8)"]
    lo, hi = (v * 1e3 for v in rough.measured_added_interval_s)
    assert (f"? measured +ms too noisy to judge the prediction (its 90 % interval is wider "
            f"than +-15 %): offload:blocks.* {lo:+.1f}..{hi:+.1f} ms; more --time-steps or a "
            f"quieter machine narrow it") in " ".join(out.split())
    page = render_compare_html(rep)
    assert f'title="90 % interval {lo:+.1f} to {hi:+.1f} ms: too noisy to judge the ' \
           f'prediction">+389.0 ms?</span>' in page
    d = rep.to_json_dict()["policies"]
    assert d[0]["measured_added_resolved"] is True and d[1]["measured_added_resolved"] is False


def test_a_policy_acting_on_no_call_says_why_in_compare_too():
    # a reversible layer's modules called only from inside backward (tests/clients/
    # train_rerun.py): predict named them; compare's table showed the same "+0 B" silently
    from memledger.report.compare_table import reasons

    rep = _report()
    rep.policies[0].idle_regions, rep.policies[0].selected = ["blocks.0.f", "blocks.1.f"], 2
    lines = [t.plain for t in reasons(rep)]
    assert ("checkpoint:blocks.*: none of its modules (blocks.0.f, blocks.1.f) ran with "
            "gradients in forward") in " ".join(lines)


def test_a_peak_before_the_model_is_decided_is_said_in_compare_too():
    # Note [A peak before the model is decided]: setfit's distillation peaks in the step
    # before the first optimizer step names the student; predict said so, compare's table
    # showed the policy's +0 B silently
    from memledger.report.compare_table import reasons

    rep = _report()
    rep.policies[0].peak_before_model, rep.policies[0].predicted_peak_at = \
        "loss_fn", "1·backward"
    lines = [t.plain for t in reasons(rep)]
    assert ("checkpoint:blocks.*: its peak (1·backward) lies before the first optimizer step "
            "decided which module is the model") in " ".join(lines)
    assert rep.to_json_dict()["policies"][0]["peak_before_model"] == "loss_fn"
