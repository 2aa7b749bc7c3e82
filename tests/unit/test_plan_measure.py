"""`plan --measure`: predicted vs measured, and the fallback when a peak does not fit
(the runs are stubbed: tests/integration/test_plan_cli.py runs one for real)."""

from __future__ import annotations

import pytest

from memledger.measure import plan_check
from memledger.measure.runner import MeasureResult
from memledger.replay.plan import plan

from plan_ledgers import H8, T8, blocks_ledger


def _stub(monkeypatch, peaks: dict, cpu: dict):
    calls = []

    def fake(script, argv, policy, steps=3, time_steps=5, quiet=True, more_steps=None,
             steps_by="optimizer"):
        text = str(policy)
        calls.append(text)
        return MeasureResult(policy=text, peak_bytes=peaks.get(text, 0), step_time_s=0.1,
                             source="stub", steps=steps, step_cpu_time_s=cpu.get(text, 0.05))

    monkeypatch.setattr(plan_check, "measure_script", fake)
    return calls


@pytest.fixture(scope="module")
def report():
    led = blocks_ledger(H8[:4], T8[:4])
    base = plan(led, 10**12).baseline_peak_bytes
    return plan(led, int(base * 0.6))


def test_chosen_fits_for_real(report, monkeypatch):
    calls = _stub(monkeypatch, {report.policy: report.predicted_peak_bytes},
                  {"none": 0.050, report.policy: 0.0502})
    out = plan_check.measure_plan(report, "train.py", [])
    # interleaved: baseline, chosen, runner-up, baseline again
    assert calls == ["none", report.policy, report.runner_up, "none"]
    assert out.fits and out.policy == report.policy
    assert out.measured[0].role == "chosen"
    assert out.measured[0].measured_added_time_s == pytest.approx(0.0002)


def test_falls_back_to_runner_up_when_chosen_is_over(report, monkeypatch):
    over = report.budget_bytes + 1
    _stub(monkeypatch, {report.policy: over, report.runner_up: report.budget_bytes}, {})
    out = plan_check.measure_plan(report, "train.py", [])
    assert out.fits and out.policy == report.runner_up
    assert [m.fits for m in out.measured] == [False, True]


def test_nothing_fits_for_real(report, monkeypatch):
    _stub(monkeypatch, {}, {})
    big = {"peaks": report.budget_bytes + 1}
    monkeypatch.setattr(plan_check, "measure_script", lambda s, a, p, steps=3, time_steps=5,
                        more_steps=None, steps_by="optimizer":
                        MeasureResult(policy=str(p), peak_bytes=big["peaks"], step_time_s=0.1,
                                      source="stub", steps=3))
    out = plan_check.measure_plan(report, "train.py", [], max_extra=2)
    assert not out.fits and out.policy == ""
    assert [m.role for m in out.measured][:2] == ["chosen", "runner-up"]
    assert 2 < len(out.measured) <= 4           # then up to 2 front points under the budget


def test_measured_times_carry_their_interval(report, monkeypatch):
    """The chosen policy's CPU step times agree (resolved); the runner-up's spread over
    10x (its +ms cannot judge the prediction): memledger/measure/interval.py."""
    steps = {"none": [0.050, 0.051, 0.050, 0.052, 0.050],
             report.policy: [0.060, 0.061, 0.060, 0.060, 0.061],
             report.runner_up: [0.06, 0.6, 0.07, 0.2, 0.09]}

    def fake(script, argv, policy, steps_=3, time_steps=5, quiet=True, **kw):
        t = steps[str(policy)]
        return MeasureResult(policy=str(policy), peak_bytes=0, step_time_s=0.1,
                             source="stub", steps=3, step_cpu_time_s=sorted(t)[2],
                             step_cpu_times_s=t)

    monkeypatch.setattr(plan_check, "measure_script", fake)
    out = plan_check.measure_plan(report, "train.py", [])
    chosen, runner = out.measured[:2]
    assert chosen.measured_added_time_s == pytest.approx(0.010)
    lo, hi = chosen.measured_added_interval_s   # resampled medians: 60-61 ms vs 50-52 ms
    assert chosen.measured_added_resolved is True and 0.008 <= lo <= hi <= 0.011
    assert runner.measured_added_time_s == pytest.approx(0.040)
    assert runner.measured_added_resolved is False


def test_a_script_short_of_steps_is_told_what_plan_takes(report, monkeypatch):
    # Note [Steps asked for as the verb takes them] (measure/runner.py): plan takes no
    # script arguments, so its line names the trace to run again, not `-- --steps 4`
    from pathlib import Path

    from memledger.commands.plan import _more_steps
    from memledger.errors import ScriptError
    from memledger.measure.runner import result_from_worker
    from memledger.replay.policies import parse_policy

    hint = _more_steps({"script": "train.py", "argv": ["--depth", "4"]}, Path("p.ledger"), None)
    seen = []

    def short(script, argv, policy, steps=3, time_steps=5, quiet=True, more_steps=None,
              steps_by="optimizer"):
        seen.append(more_steps)
        return result_from_worker({"code": 0, "steps": 3, "step_times_s": [], "peak_bytes": 1,
                                   "source": "stub", "regions": []}, policy, steps,
                                  time_steps, more_steps=more_steps)

    monkeypatch.setattr(plan_check, "measure_script", short)
    with pytest.raises(ScriptError) as e:
        plan_check.measure_plan(report, "train.py", ["--depth", "4"], time_steps=1,
                                more_steps=hint)
    assert seen == [hint]
    assert str(e.value) == (
        "memledger: the script ran only 3 optimizer steps, none left to time; let it run 4 (plan "
        "--measure runs the script as the ledger traced it: trace it again with its steps "
        "added, e.g. memledger trace train.py -o p.ledger -- --depth 4 --steps 4)")
    assert _more_steps({}, Path("p.ledger"), Path("other.py"))(4) == (
        "plan --measure runs other.py without arguments (--script), so by its defaults")


def test_a_plan_is_measured_as_its_ledger_was_traced(tmp_path, monkeypatch, capsys):
    """Note [A plan measured as its ledger was traced] (commands/plan.py): a ledger traced
    `--steps-by forward` (a script with no optimizer) had its plan measured by optimizer
    steps, 3 of them ("the script ran 0 optimizer steps"), and plan's next command lacked
    the flag; each run now counts as the ledger did, over the steps it traced."""
    import json

    from plan_ledgers import H8, T8, blocks_records

    from memledger.cli import main
    from memledger.ledger.names import traced_command

    recs = blocks_records(H8[:4], T8[:4])
    recs[0] = {**recs[0], "script": "evalnet.py", "argv": ["--depth", "4"],
               "steps_by": "forward"}
    path = tmp_path / "e.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    seen = []

    def fake(script, argv, policy, steps=3, time_steps=5, quiet=True, more_steps=None,
             steps_by="optimizer"):
        seen.append((str(script), tuple(argv), steps, steps_by))
        return MeasureResult(policy=str(policy), peak_bytes=0, step_time_s=0.1, source="stub",
                             steps=steps, step_cpu_time_s=0.05)

    monkeypatch.setattr(plan_check, "measure_script", fake)
    assert main(["plan", str(path), "--budget", "60%", "--measure", "--time-steps", "3"]) == 0
    # blocks_records traces one step
    assert seen and set(seen) == {("evalnet.py", ("--depth", "4"), 1, "forward")}
    assert "next: memledger compare evalnet.py -p " in capsys.readouterr().err
    assert traced_command(recs[0], "memledger", "compare") == \
        "memledger compare evalnet.py --steps-by forward -- --depth 4"
