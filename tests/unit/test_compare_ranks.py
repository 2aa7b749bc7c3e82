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
