"""Running the doctor: in this process (tests, tiny scripts) or in a fresh one (the CLI).

    report = doctor_script("train.py", [], steps=3)               # fresh process, probe only
    report = doctor_script("train.py", [], 3, ledger="run.ledger") # + the Collector's ledger
    report, outcome = diagnose_in_process("train.py", [], steps=3)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from memledger.doctor.findings import DoctorReport
from memledger.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, ScriptError
from memledger.processes import dead_worker, run_worker
from memledger.trace.optimizer_like import no_step_hint


def diagnose_in_process(script: str | Path, argv: list[str], steps: int,
                        steps_by: str = "optimizer"):
    """Run `script` here under the probe alone; (DoctorReport, ScriptOutcome)."""
    from memledger.doctor.analyze import diagnose
    from memledger.trace.doctor_probe import DoctorProbe
    from memledger.trace.script import run_and_classify

    probe = DoctorProbe(max_steps=steps, steps_by=steps_by)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        with probe:
            outcome = run_and_classify(script, argv)
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path   # run_script sets both
    return diagnose(probe.records), outcome


def doctor_script(script: str | Path, argv: list[str], steps: int = 3,
                  ledger: str | Path | None = None, quiet: bool = False,
                  steps_by: str = "optimizer") -> DoctorReport:
    """Run the doctor on `script` in a fresh process; raise ScriptError when it cannot.

    `ledger`: also record the ledger there (Collector alongside), findings appended to it.
    `quiet`: keep the script's output unless it fails (compare's pre-flight).
    `steps_by`: what ends a step, as `memledger trace --steps-by`.
    """
    from memledger.outputs import check_output, commit, partial_path
    from memledger.trace.session import check_script

    script = check_script(script)
    if ledger is not None:
        ledger = check_output(ledger, "ledger", inputs=[script], ledger=True)
    if steps < 1:
        raise ScriptError("--steps must be at least 1", exit_code=EXIT_USAGE)
    if ledger is None:
        return _doctor_run(script, argv, steps, None, quiet, steps_by)
    # the worker streams into a partial file renamed over `ledger` at the end, whatever
    # happened (memledger/outputs.py): never half a ledger at `ledger`
    partial = partial_path(ledger)
    try:
        return _doctor_run(script, argv, steps, partial, quiet, steps_by)
    except ScriptError as e:   # what was recorded is kept; say where, as trace does
        commit(partial, ledger)
        if e.exit_code == EXIT_USAGE and not ledger.exists():
            raise
        raise ScriptError(f"{str(e).removeprefix('memledger: ')}; the partial ledger is "
                          f"kept at {ledger}", exit_code=e.exit_code) from None
    finally:
        commit(partial, ledger)


def _doctor_run(script: Path, argv: list[str], steps: int, ledger: Path | None,
                quiet: bool, steps_by: str) -> DoctorReport:
    with tempfile.TemporaryDirectory(prefix="memledger-doctor-") as tmp:
        report_path, status = Path(tmp) / "doctor.json", Path(tmp) / "status.json"
        args = ["--report", str(report_path), "--status", str(status), "--steps", str(steps),
                "--steps-by", steps_by]
        if ledger is not None:
            args += ["--ledger", str(ledger)]
        try:
            returncode, output = run_worker("memledger.doctor.worker",
                                            [*args, str(script), "--", *argv],
                                            capture_output=quiet)
        except KeyboardInterrupt:
            raise ScriptError("interrupted", exit_code=EXIT_INTERRUPTED) from None
        if not status.exists():
            err = dead_worker(returncode, tmp)
            res = {"code": getattr(err, "exit_code", EXIT_USAGE), "steps": 0,
                   "reason": str(err).removeprefix("memledger: ")}
        else:
            res = json.loads(status.read_text())
        if quiet and res["code"] != EXIT_OK and output:
            sys.stderr.write(output.decode(errors="replace"))
        if res["code"] == EXIT_INTERNAL:   # Note [The doctor's own failure] (worker.py)
            raise ScriptError(res["reason"], exit_code=EXIT_INTERNAL)
        if res["code"] != EXIT_OK:
            raise ScriptError(f"the doctor could not watch the script: {res['reason']}"
                              + _found_before(report_path), exit_code=res["code"])
        if res["steps"] == 0 and steps_by == "forward":
            raise ScriptError("the script ran no forward of a module that holds parameters, "
                              "through nn.Module's call, so --steps-by forward found no "
                              "step; watch the whole script as one step (--steps-by whole)",
                              exit_code=EXIT_USAGE)
        if res["steps"] == 0:
            hint = no_step_hint(res.get("optimizer_like", ""), doctor=True,
                                unstepped=res.get("optimizer_unstepped", ""))
            raise ScriptError("the script ran no optimizer step" + (
                hint or
                "; for evaluation, inference or a hand-written update count steps by "
                "forward passes (--steps-by forward) or watch the whole script (--steps-by "
                "whole)"),
                exit_code=EXIT_USAGE)
        return DoctorReport.model_validate(json.loads(report_path.read_text()))


def _found_before(report_path: Path) -> str:
    """The findings the worker wrote for a script that failed (Note [A backward that fails
    through an earlier step] in trace/doctor_retention.py: what made its backward fail),
    on the failure's one line; "" when it wrote none."""
    try:
        report = DoctorReport.model_validate(json.loads(report_path.read_text()))
    except (OSError, ValueError):
        return ""
    return "".join(f"; found before it: {f.line()}" for f in report.findings)
