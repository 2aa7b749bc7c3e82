"""One doctor run in a fresh process: `python -m memledger.doctor.worker`.

    python -m memledger.doctor.worker --report r.json --status s.json --steps 3 \\
        [--ledger run.ledger] train.py -- --batch-size 8

The probe (memledger/trace/doctor_probe.py) watches the script; with `--ledger` the
Collector records the ledger alongside (the probe's hooks are registered first, so its
step-boundary pass runs before the Collector stops the script), and the findings are
appended to the ledger as `doctor` and `finding` records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from memledger.errors import EXIT_OK, EXIT_USAGE
from memledger.trace.optimizer_like import status_hint
from memledger.trace.steps import STEPS_BY


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memledger.doctor.worker")
    p.add_argument("--report", required=True)
    p.add_argument("--status", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--steps-by", default="optimizer", choices=STEPS_BY)
    p.add_argument("--ledger")
    p.add_argument("--replicas", help="under torchrun: this rank's `replica` records (JSON)")
    p.add_argument("script")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    from memledger.trace.rank import for_rank

    # under torchrun (`compare --nproc`): one report and one status per rank
    args.report, args.status = for_rank(args.report), for_rank(args.status)
    if args.replicas:
        args.replicas = for_rank(args.replicas)
    if args.steps < 1:
        return _status(args.status, EXIT_USAGE, "--steps must be >= 1", 0)

    from memledger.doctor.analyze import diagnose
    from memledger.ledger.writer import FileSink, append_records
    from memledger.trace.collector import Collector, StopTracing
    from memledger.trace.doctor_probe import DoctorProbe
    from memledger.trace.script import ScriptOutcome, run_and_classify

    # a ledger alongside: the probe holds no garbage past Python's own collections
    probe = DoctorProbe(max_steps=None if args.ledger else args.steps,
                        collections=not args.ledger, steps_by=args.steps_by)
    sink = FileSink(args.ledger) if args.ledger else None
    by = {"steps_by": args.steps_by} if args.steps_by != "optimizer" else {}
    collector = Collector(sink, max_steps=args.steps, header={
        "script": args.script, "argv": args.argv, "steps_requested": args.steps,
        "doctor": True, **by}, scan_garbage=True, steps_by=args.steps_by,
        on_steps_done=lambda: probe.stopped_by_others(args.steps)) \
        if sink else contextlib.nullcontext()
    outcome = ScriptOutcome(EXIT_OK, "")
    try:
        with probe, collector:
            outcome = run_and_classify(args.script, args.argv)
            if sink is not None and outcome.code != EXIT_OK:
                collector.close("error", outcome.reason)
    except StopTracing:
        pass
    finally:
        if sink is not None:
            sink.close()
    # Note [The doctor's own failure]
    # An exception in the analysis, after the script ran, is memledger's bug: exit 70 and
    # the traceback in a file (memledger/crash.py). Left to escape, the worker died with no
    # status and the parent read it as the script's: "the script's process ended with
    # status 1 before memledger finished (os._exit in the script?)", exit 3 (a bare
    # `nn.Parameter` in the optimizer did that, in `doctor` and so in every `compare`).
    try:
        report = diagnose(probe.records)
    except Exception as e:
        from memledger.crash import crash_line
        from memledger.errors import EXIT_INTERNAL

        return _status(args.status, EXIT_INTERNAL, crash_line(e), 0)
    if args.ledger:
        append_records(args.ledger, report.ledger_records())
    with open(args.report, "w", encoding="utf-8") as fh:
        json.dump(report.to_json_dict(), fh)
    if args.replicas:   # Note [Replicas that drift]: compared across ranks by the launcher
        with open(args.replicas, "w", encoding="utf-8") as fh:
            json.dump([r for r in probe.records if r.get("k") == "replica"], fh)
    return _status(args.status, outcome.code, outcome.reason, report.steps,
                   status_hint(probe, report.steps))


def _status(path: str, code: int, reason: str, steps: int, hint: dict | None = None) -> int:
    # Note [An optimizer torch's hooks do not see] (trace/optimizer_like.py)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"code": code, "reason": reason, "steps": steps, **(hint or {})}, fh)
    return code


if __name__ == "__main__":
    sys.exit(main())
