"""Note [A verdict across ranks] (memledger/verify/compare_ranks.py): one verdict per policy
for the whole job, from per-rank reports made by hand (no run)."""

from __future__ import annotations

from memledger.verify.compare_ranks import RanksCompare, combine_ranks
from memledger.verify.verdict import CompareReport, Gates, PolicyComparison

OK_GATES = Gates(inputs=True, gradients=True, update=True)


def _row(policy: str, measured: int, predicted: int, gradients: bool = True,
         added_s: float = 0.01) -> PolicyComparison:
    if not gradients:
        return PolicyComparison(policy=policy, verdict="REJECT",
                                reason="gradients: blocks.0.weight differs at step 0",
                                gates=Gates(inputs=True, gradients=False, update=False),
                                failed_gate="gradients", tensor="blocks.0.weight", step=0)
    return PolicyComparison(policy=policy, verdict="OK", reason="gates passed", gates=OK_GATES,
                            failed_gate=None, predicted_peak_bytes=predicted,
                            measured_peak_bytes=measured, measured_added_time_s=added_s)


def _report(base: int, rows: list[PolicyComparison]) -> CompareReport:
    return CompareReport(script="train.py", steps=1, device="cpu", tolerance="bitwise",
                         reproducible=True, noise_floor=0.0, performance=True,
                         baseline={"measured_peak_bytes": base, "predicted_peak_bytes": base,
                                   "measured_step_time_s": 0.05},
                         policies=rows)


def test_the_worst_rank_sets_the_figures_and_the_job_saving():
    # GIVEN baseline peaks 3,928,476 and 3,929,104 B; with the policy 3,100,000 and 3,090,000 B
    ranks = [_report(3_928_476, [_row("checkpoint:blocks.*", 3_100_000, 3_050_000)]),
             _report(3_929_104, [_row("checkpoint:blocks.*", 3_090_000, 3_060_000)])]
    job, worst = combine_ranks(ranks)
    assert worst == 1                                    # the highest baseline peak
    row = job.policies[0]
    assert row.rank == 0 and row.measured_peak_bytes == 3_100_000   # the policy's worst rank
    assert row.saving_bytes == 3_929_104 - 3_100_000 == 829_104     # the job's saving
    assert row.verdict == "ADOPT"
    assert [x["measured_peak_bytes"] for x in row.by_rank] == [3_100_000, 3_090_000]
    assert [x["predicted_peak_bytes"] for x in row.by_rank] == [3_050_000, 3_060_000]
    assert all(rep.policies[0].verdict == "ADOPT" for rep in ranks)   # shared by every rank
    d = RanksCompare(ranks, job, worst).to_json_dict()
    assert d["schema"] == "memledger.compare/1" and d["worst_rank"] == 1
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert d["policies"][0]["saving_bytes"] == 829_104
    assert d["rank_skew"]["spread_bytes"] == 3_929_104 - 3_928_476 == 628


def test_gradients_that_differ_on_one_rank_reject_the_policy_on_every_rank():
    ranks = [_report(4_000_000, [_row("offload:blocks.*", 3_000_000, 3_000_000),
                                 _row("checkpoint:blocks.*", 3_500_000, 3_500_000)]),
             _report(4_000_000, [_row("offload:blocks.*", 0, 0, gradients=False),
                                 _row("checkpoint:blocks.*", 3_500_000, 3_500_000)])]
    job, _ = combine_ranks(ranks)
    bad, good = job.policies
    assert bad.verdict == "REJECT" and bad.rank == 1 and job.rejected
    assert bad.reason == "rank 1: gradients: blocks.0.weight differs at step 0"
    assert bad.gates.gradients is False and [x["gradients"] for x in bad.by_rank] == [True, False]
    assert [rep.policies[0].verdict for rep in ranks] == ["REJECT", "REJECT"]
    assert ranks[0].policies[0].gates.gradients is True   # rank 0's own gate is kept
    assert good.verdict == "ADOPT"


def test_a_doctor_error_on_one_rank_stops_compare_naming_the_rank(tmp_path, monkeypatch):
    # GIVEN a launch whose rank 1 reports an error finding (the files the doctor worker
    # writes under torchrun, from their `{rank}` templates), WHEN compare checks the baseline
    import json
    from pathlib import Path

    import pytest

    import memledger.verify.compare_ranks as cr
    from memledger.doctor.findings import DoctorReport, Finding, Where
    from memledger.errors import CheckFailed

    launched = []

    def fake_launch(nproc, args, timeout_s, quiet, module):
        launched.append((nproc, module))
        report, status = args[args.index("--report") + 1], args[args.index("--status") + 1]
        for r in range(nproc):
            bad = [Finding(check="grad_leak", severity="error", message="grads kept",
                           where=Where(file="train.py", line=7))] if r == 1 else []
            Path(report.format(rank=r)).write_text(
                DoctorReport(ok=not bad, steps=1, findings=bad).model_dump_json(by_alias=True))
            Path(status.format(rank=r)).write_text(json.dumps({"code": 0, "reason": "",
                                                              "steps": 1}))
        return 0, ""

    import importlib   # `memledger.trace` the attribute is the trace() API: import by name

    launch = importlib.import_module("memledger.trace.launch")   # doctor_ranks launches
    monkeypatch.setattr(launch, "_launch", fake_launch)
    with pytest.raises(CheckFailed, match="fails the doctor on rank 1, so no policy is judged: "
                       "grad_leak at train.py:7"):
        cr._doctor_ranks(Path("train.py"), [], 1, 2, tmp_path, 60.0)
    assert launched == [(2, "memledger.doctor.worker")]   # one launch for every rank


def test_the_terminal_table_shows_every_rank_and_marks_the_one_that_rejected():
    from io import StringIO

    from rich.console import Console

    from memledger.report.compare_ranks_table import ranks_table

    ranks = [_report(4_000_000, [_row("offload:blocks.*", 3_000_000, 3_000_000)]),
             _report(4_000_000, [_row("offload:blocks.*", 0, 0, gradients=False)])]
    job, worst = combine_ranks(ranks)
    out = StringIO()
    Console(file=out, width=80).print(ranks_table(ranks, job, worst))
    lines = [ln.rstrip() for ln in out.getvalue().splitlines() if "offload" in ln or "◀" in ln]
    assert lines[-2].split() == ["offload:", "blocks.*", "0", "✓", "2.9", "MiB", "2.9", "MiB"]
    assert lines[-1].split() == ["1", "✗", "–", "–", "◀", "rejected"]
