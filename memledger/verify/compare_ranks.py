"""`run_compare_ranks`: `memledger compare --nproc N`, run_compare's stages on N ranks.

    reports = run_compare_ranks("examples/train_ddp.py", [], [Policy.parse("checkpoint:blocks.*")],
                                nproc=2, steps=1, time_steps=1)
    job = combine_ranks(reports)        # one verdict per policy for the whole job

Every run of run_compare (memledger/verify/compare.py) becomes one torchrun launch of N ranks
(`_launch` of memledger/trace/launch.py) running the same worker, each rank writing its own
file: the doctor (`memledger.doctor.worker`), the captures (`memledger.verify.worker`), the
traced baseline (`trace_ranks`) and the measured runs (`measure_ranks`). Then rank r is
judged as one process would be: rank r's captures against rank r's baseline captures
(`run_gates`, once per rank, reading the launches' files), rank r's ledger predicts rank r's
peak, rank r's allocator measures it. An FSDP2 rank's gradients are its local shards
(capture.py `_cpu`), so each rank checks the gradients it owns.

# Note [A verdict across ranks]

A policy is one decision for the whole job, so its verdict is shared by every rank:

1. REJECT on any rank is REJECT on all: gradients that differ on rank 1 are a wrong
   training run even where rank 0's agree. The job's row is the first rejecting rank's
   (its gates, its reason, prefixed `rank 1:`), and the policy is not measured.
2. Otherwise the job's row is the rank whose measured peak with the policy is highest (the
   rank that runs out of memory first), and its saving is the job's: the highest baseline
   peak minus the highest peak with the policy. Example: baseline peaks 3,928,476 and
   3,929,104 B, with the policy 3,100,000 and 3,090,000 B: the row is rank 0's, saving
   3,929,104 − 3,100,000 = 829,104 B (rank 0 alone would say 828,476 B).
3. ADOPT / OK are then assigned on the job's rows (verdict.py) and copied to every rank.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from memledger.errors import EXIT_OK, EXIT_SCRIPT_FAILED, PolicyError, ScriptError
from memledger.ledger.model import Ledger
from memledger.measure.ranks import measure_ranks
from memledger.replay.policies import Policy
from memledger.trace.launch import DEFAULT_TIMEOUT_S, _launch, trace_ranks
from memledger.trace.session import check_script
from memledger.verify.compare import (
    bad_policies,
    fill_performance,
    finish_verdicts,
    gate_report,
    not_judged,
    predict_judged,
    refuse_doctor_errors,
)
from memledger.verify.gates import run_gates
from memledger.verify.runs import CaptureResult, Variant
from memledger.verify.verdict import CompareReport

Progress = Callable[[str], None]


def run_compare_ranks(script: str | Path, argv: list[str], policies: list[Policy], nproc: int,
                      steps: int = 3, time_steps: int = 5, rtol: float | None = None,
                      performance: bool = True, progress: Progress | None = None,
                      doctor: bool = True,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> RanksCompare:
    """One CompareReport per rank and the job's, verdicts shared across ranks (Note [A
    verdict across ranks]); raises as run_compare does, naming the rank."""
    say = progress or (lambda msg: None)
    script = check_script(script)
    if nproc < 1:
        raise ScriptError("--nproc must be at least 1", exit_code=2)
    with tempfile.TemporaryDirectory(prefix="memledger-compare-ranks-") as tmp:
        tmp = Path(tmp)
        if doctor:
            say(f"doctor: checking the baseline's training mechanics on {nproc} ranks")
            _doctor_ranks(script, argv, steps, nproc, tmp, timeout_s)
        say(f"gates: capturing the baseline twice and {len(policies)} policies on {nproc} "
            f"ranks, {steps} steps each")
        captures = _RankCaptures(nproc, tmp, timeout_s)
        reports = [gate_report(script, steps, run_gates(
            script, argv, [Variant.of(p) for p in policies], steps, rtol=rtol,
            workdir=tmp, runner=captures.runner(r), progress=say if r == 0 else None))
            for r in range(nproc)]
        passing = [p for i, p in enumerate(policies)
                   if all(rep.policies[i].verdict != "REJECT" for rep in reports)]
        if performance and passing:
            _performance(reports, script, argv, policies, passing, nproc, steps, time_steps,
                         say, tmp, timeout_s)
    job, worst = combine_ranks(reports)
    return RanksCompare(reports, job, worst)


@dataclass
class RanksCompare:
    ranks: list[CompareReport]   # rank r's gates and figures; verdicts are the job's
    job: CompareReport           # per policy its worst rank's row (Note [A verdict across ranks])
    worst: int                   # the rank with the highest measured baseline peak

    def to_json_dict(self) -> dict:
        """memledger.compare/1 for several ranks: the job's report at top level, every
        rank's under "ranks" (design.md), `worst_rank` and `rank_skew` (baseline peaks)."""
        from memledger.ledger.ranks import peak_skew, ranks_json

        peaks = [rep.baseline.get("measured_peak_bytes", 0) for rep in self.ranks]
        skew = peak_skew(peaks)
        out = ranks_json([{"rank": r, **rep.to_json_dict()} for r, rep in enumerate(self.ranks)],
                         self.worst, skew)
        return {**out, **self.job.to_json_dict(), "rank": self.worst}


class _RankCaptures:
    """run_gates' runner for rank r: the first call for a capture (rank 0's) launches the
    N ranks once; every rank's call returns its own rank's result of that launch."""

    def __init__(self, nproc: int, tmp: Path, timeout_s: float) -> None:
        self.nproc, self.tmp, self.timeout_s = nproc, tmp, timeout_s
        self.results: dict[str, list[CaptureResult]] = {}

    def runner(self, rank: int):
        def run(script, argv, variant: Variant, steps: int, out) -> CaptureResult:
            key = Path(out).stem   # baseline0, baseline1, candidate0, ...: one per launch
            if key not in self.results:
                self.results[key] = self._launch(script, argv, variant, steps, key)
            return self.results[key][rank]
        return run

    def _launch(self, script, argv, variant: Variant, steps: int,
                key: str) -> list[CaptureResult]:
        from memledger.verify.capture import load_capture

        out, status = self.tmp / f"{key}.rank{{rank}}.capture", self.tmp / f"{key}.rank{{rank}}.json"
        args = ["--out", str(out), "--status", str(status), "--steps", str(steps),
                "--policy", variant.policy]
        if variant.broken:
            args += ["--broken", variant.broken, "--selector", variant.selector]
        code, output = _launch(self.nproc, [*args, str(script), "--", *argv], self.timeout_s,
                               quiet=True, module="memledger.verify.worker")
        results = []
        for r in range(self.nproc):
            st_file, cap_file = Path(str(status).format(rank=r)), Path(str(out).format(rank=r))
            if not st_file.exists():
                results.append(CaptureResult(EXIT_SCRIPT_FAILED, f"rank {r} died before it "
                                             f"could report (torchrun status {code})", None,
                                             output))
                continue
            st = json.loads(st_file.read_text())
            if st.get("policy_error"):
                raise PolicyError(f"rank {r}: {st['reason'].removeprefix('memledger: ')}")
            data = load_capture(str(cap_file)) if cap_file.exists() else None
            reason = f"rank {r}: {st['reason']}" if st["code"] != EXIT_OK else st["reason"]
            results.append(CaptureResult(st["code"], reason, data, output))
        return results


def _doctor_ranks(script: Path, argv: list[str], steps: int, nproc: int, tmp: Path,
                  timeout_s: float) -> None:
    """The doctor on every rank (one launch); CheckFailed on the first rank with an error."""
    from memledger.doctor.ranks import doctor_ranks

    for r, rep in enumerate(doctor_ranks(script, argv, steps, nproc, timeout_s)):
        refuse_doctor_errors(rep, script, where=f" on rank {r}")


def _performance(reports: list[CompareReport], script: Path, argv: list[str],
                 policies: list[Policy], passing: list[Policy], nproc: int, steps: int,
                 time_steps: int, say: Progress, tmp: Path, timeout_s: float) -> None:
    say(f"performance: tracing the baseline on {nproc} ranks for the prediction")
    res = trace_ranks(script, argv, tmp / "baseline.ledger", nproc, steps=steps, measure=True,
                      timeout_s=timeout_s)
    leds = [Ledger.load(p) for p in res.ledger_paths]
    judged = {p.text() for p in passing}
    preds = [predict_judged(led, policies, judged) for led in leds]
    bad: dict[str, str] = {}
    for r, pred in enumerate(preds):
        for policy, why in bad_policies(pred, judged).items():
            bad.setdefault(policy, f"{why} (rank {r})")
    for rep in reports:   # Note [One bad policy among several] (verify/compare.py)
        not_judged(rep, policies, bad)
    passing = [p for p in passing if p.text() not in bad]

    def measure(policy: Policy) -> list:
        return measure_ranks(script, argv, policy, nproc, steps=steps, time_steps=time_steps,
                             timeout_s=timeout_s)

    none = Policy.parse("none")
    say(f"performance: measuring the baseline on {nproc} ranks")
    base = measure(none)
    measured: list[dict] = [{} for _ in range(nproc)]
    for policy in passing:
        say(f"performance: measuring {policy} on {nproc} ranks")
        for r, m in enumerate(measure(policy)):
            measured[r][policy.text()] = m
    say("performance: measuring the baseline again (step-time reference)")
    again = measure(none)
    for r, rep in enumerate(reports):
        fill_performance(rep, leds[r], preds[r], policies, base[r], measured[r], again[r])


def combine_ranks(reports: list[CompareReport]) -> tuple[CompareReport, int]:
    """(the job's report, its worst rank): Note [A verdict across ranks]. Sets every rank's
    verdicts and reasons to the job's. The worst rank: the highest measured baseline peak
    (without performance: the first rank that rejected a policy, else rank 0)."""
    n = len(reports)
    if reports[0].performance:
        worst = max(range(n), key=lambda r: (reports[r].baseline["measured_peak_bytes"], -r))
    else:
        worst = next((r for r, rep in enumerate(reports) if rep.rejected), 0)
    job = reports[worst].model_copy(deep=True)
    job.note = "; ".join(filter(None, [f"{n} ranks: each policy's figures are its worst "
                                       "rank's", reports[worst].note]))
    for i, row in enumerate(job.policies):
        rows = [rep.policies[i] for rep in reports]
        bad = [r for r, x in enumerate(rows) if x.verdict == "REJECT"]
        if bad:
            pick = bad[0]
        else:
            pick = max(range(n), key=lambda r: (rows[r].measured_peak_bytes, -r))
        chosen = rows[pick].model_copy(deep=True)
        chosen.rank = pick
        chosen.by_rank = [{"rank": r, "gradients": x.gates.gradients,
                           "gates_passed": x.verdict != "REJECT",
                           "predicted_peak_bytes": x.predicted_peak_bytes,
                           "measured_peak_bytes": x.measured_peak_bytes}
                          for r, x in enumerate(rows)]
        if bad:
            chosen.reason = f"rank {pick}: {chosen.reason}"
        elif job.performance:
            chosen.saving_bytes = (max(rep.baseline["measured_peak_bytes"] for rep in reports)
                                   - chosen.measured_peak_bytes)
        job.policies[i] = chosen
    finish_verdicts(job)
    for rep in reports:   # one decision for the job (rule 3)
        for row, j in zip(rep.policies, job.policies):
            row.verdict, row.reason = j.verdict, j.reason
    return job, worst
