"""`memledger trace`: run the script twice in fresh processes and join the results.

Pass 1 records the ledger (streamed, so it survives whatever happens). Pass 2 runs the same
script with no tracing, under the allocator's own accounting, for the independent peak.
Both stop after the same optimizer step, so they measure the same stretch of the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from memledger.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SCRIPT_FAILED,
    EXIT_USAGE,
    LedgerFormatError,
    ScriptError,
)
from memledger.ledger.writer import append_records


@dataclass
class TraceResult:
    ledger_path: Path
    steps: int
    measured: bool


def check_script(script: str | Path) -> Path:
    p = Path(script)
    if not p.exists():
        raise ScriptError(f"no script at {str(script)!r}", exit_code=EXIT_USAGE)
    if p.is_dir():
        raise ScriptError(f"{str(script)!r} is a directory; give the training script's path",
                          exit_code=EXIT_USAGE)
    return p


def check_writable(out: str | Path) -> Path:
    p = Path(out)
    try:
        with open(p, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise LedgerFormatError(f"cannot write ledger {str(out)!r}: {e.strerror}") from None
    return p


def _worker(mode: str, script: Path, argv: list[str], out: Path, steps: int,
            quiet: bool, extra: tuple[str, ...] = ()) -> dict:
    with tempfile.TemporaryDirectory(prefix="memledger-") as tmp:
        status = Path(tmp) / "status.json"
        cmd = [sys.executable, "-m", "memledger.trace.worker", mode, "--out", str(out),
               "--status", str(status), "--steps", str(steps), *extra, str(script), "--", *argv]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(cmd, env=env,
                                stdout=subprocess.PIPE if quiet else None,
                                stderr=subprocess.STDOUT if quiet else None)
        try:
            output, _ = proc.communicate()
        except KeyboardInterrupt:
            proc.wait()  # the child got the same Ctrl-C: let it finish writing
            raise ScriptError(f"interrupted; the partial ledger is kept at {out}",
                              exit_code=EXIT_INTERRUPTED) from None
        if status.exists():
            result = json.loads(status.read_text())
        else:
            result = {"code": proc.returncode or EXIT_USAGE,
                      "reason": f"worker died with status {proc.returncode}", "steps": 0}
        if quiet and result["code"] != EXIT_OK and output:
            sys.stderr.write(output.decode(errors="replace"))
        return result


def trace_script(script: str | Path, argv: list[str], out: str | Path, steps: int = 3,
                 measure: bool | None = None, fake: bool = False,
                 device: str | None = None) -> TraceResult:
    """Trace `steps` optimizer steps of `script` into the ledger `out`; raises on failure.
    `fake`: above FakeTensorMode for the target `device` (no allocator pass: docs/fake.md)."""
    script = check_script(script)
    if fake:
        from memledger.trace.fake_options import check_fake_options
        check_fake_options(device, measure)
        measure = False
    else:
        measure = True if measure is None else measure
    if not fake and device is not None:
        raise ScriptError("--device chooses a --fake run's target; without --fake the script "
                          "picks its own device: pass it to the script after --",
                          exit_code=EXIT_USAGE)
    out = check_writable(out)
    if steps < 1:
        raise ScriptError("--steps must be at least 1", exit_code=EXIT_USAGE)
    fake_args = ("--fake", *(("--device", device) if device else ())) if fake else ()
    res = _worker("ledger", script, argv, out, steps, quiet=False, extra=fake_args)
    if res["code"] == EXIT_USAGE and fake:   # the script cannot run fake: one line
        raise ScriptError(res["reason"], exit_code=EXIT_USAGE)
    if res["code"] == EXIT_INTERRUPTED:
        raise ScriptError(f"interrupted; the partial ledger is kept at {out}",
                          exit_code=EXIT_INTERRUPTED)
    if res["code"] != EXIT_OK:
        raise ScriptError(f"{res['reason']}; the partial ledger is kept at {out}",
                          exit_code=EXIT_SCRIPT_FAILED)
    if res["steps"] == 0:
        raise ScriptError(
            f"the script ran no optimizer step ({res.get('events', 0)} ops seen); memledger "
            f"traces training steps, so call optimizer.step() in the script (ledger kept at {out})",
            exit_code=EXIT_USAGE)
    measured = False
    if measure:
        with tempfile.TemporaryDirectory(prefix="memledger-") as tmp:
            mpath = Path(tmp) / "measured.json"
            # On CUDA the allocator pass also leaves the allocator's own snapshot beside the
            # ledger (a torch pickle: read it with `memledger import`, never plain pickle).
            snapshot = ("--snapshot", str(out) + ".cuda-snapshot.pickle")
            mres = _worker("allocator", script, argv, mpath, res["steps"], quiet=True,
                           extra=snapshot)
            if mres["code"] == EXIT_OK and mpath.exists():
                append_records(out, json.loads(mpath.read_text())["records"])
                measured = True
            else:
                print(f"memledger: allocator pass failed ({mres['reason']}); the ledger has no "
                      "measured peak", file=sys.stderr)
    return TraceResult(ledger_path=out, steps=res["steps"], measured=measured)
