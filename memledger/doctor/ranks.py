"""The doctor on N ranks: one torchrun launch of the doctor worker, one report per rank.

    reports = doctor_ranks("train_ddp.py", [], steps=3, nproc=2)   # [rank 0's, rank 1's]

Every rank is watched as one process is (its own findings), then the ranks' `replica`
records are compared (Note [Replicas that drift], memledger/doctor/replicas.py): a finding
across ranks is added to every rank's report, since it is the job's.
`memledger doctor --nproc N` and `compare --nproc N`'s pre-flight both come here.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from memledger.doctor.findings import DoctorReport
from memledger.doctor.replicas import unaveraged_gradients, unsynced_gradients
from memledger.errors import EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE, ScriptError


def doctor_ranks(script: str | Path, argv: list[str], steps: int, nproc: int,
                 timeout_s: float | None = None) -> list[DoctorReport]:
    """Each rank's DoctorReport; ScriptError (its exit code) when a rank could not be watched."""
    from memledger.trace.launch import DEFAULT_TIMEOUT_S, _launch

    if steps < 1:
        raise ScriptError("--steps must be at least 1", exit_code=EXIT_USAGE)
    with tempfile.TemporaryDirectory(prefix="memledger-doctor-ranks-") as d:
        tmp = Path(d)
        report, status = tmp / "doctor.rank{rank}.json", tmp / "status.rank{rank}.json"
        replicas = tmp / "replicas.rank{rank}.json"
        code, output = _launch(nproc, ["--report", str(report), "--status", str(status),
                                       "--replicas", str(replicas), "--steps", str(steps),
                                       str(script), "--", *argv],
                               DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
                               quiet=True, module="memledger.doctor.worker")
        reports, by_rank = [], []
        for r in range(nproc):
            st_file = Path(str(status).format(rank=r))
            st = json.loads(st_file.read_text()) if st_file.exists() else {
                "code": EXIT_SCRIPT_FAILED, "steps": 0,
                "reason": f"died before it could report (torchrun status {code})"}
            if st["code"] != EXIT_OK or st["steps"] == 0:
                sys.stderr.write(output)
                # a rank that finished cleanly without a step said "script finished"
                why = st["reason"] if st["code"] != EXIT_OK else \
                    "the script finished without an optimizer step; the doctor checks " \
                    "training steps, so call optimizer.step() in the script"
                raise ScriptError(f"the doctor could not watch rank {r}: {why}",
                                  exit_code=st["code"] or EXIT_USAGE)
            reports.append(DoctorReport.model_validate(
                json.loads(Path(str(report).format(rank=r)).read_text())))
            rep_file = Path(str(replicas).format(rank=r))
            by_rank.append(json.loads(rep_file.read_text()) if rep_file.exists() else [])
    across = unsynced_gradients(by_rank) + unaveraged_gradients(by_rank)
    if not across:
        return reports
    return [DoctorReport.of([*rep.findings, *across], rep.steps, rep.optimizer_steps,
                            rep.steps_by)
            for rep in reports]


def worst_rank(reports: list[DoctorReport]) -> int:
    """The rank with the most errors, then the most findings (the first of equals)."""
    return max(range(len(reports)),
               key=lambda r: (len(reports[r].errors), len(reports[r].findings), -r))
