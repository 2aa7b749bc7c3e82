"""`memledger measure --nproc N`: the measured run on N ranks through torchrun, one result
per rank (the policy applied on every rank, each rank's own allocator peak and step time)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from memledger.errors import EXIT_USAGE, ScriptError
from memledger.measure.runner import MeasureResult, result_from_worker
from memledger.replay.policies import Policy
from memledger.trace.session import check_script


def measure_ranks(script: str | Path, argv: list[str], policy: Policy, nproc: int,
                  steps: int = 3, time_steps: int = 5,
                  timeout_s: float = 300.0) -> list[MeasureResult]:
    """One MeasureResult per rank; raises as `measure_script` does, naming the rank."""
    from memledger.trace.launch import _launch

    script = check_script(script)
    if steps < 1 or time_steps < 1 or nproc < 1:
        raise ScriptError("--steps, --time-steps and --nproc must be at least 1",
                          exit_code=EXIT_USAGE)
    with tempfile.TemporaryDirectory(prefix="memledger-measure-") as tmp:
        template = str(Path(tmp) / "result.rank{rank}.json")
        code, output = _launch(nproc, ["--out", template, "--policy", policy.text(),
                                       "--steps", str(steps), "--time-steps", str(time_steps),
                                       str(script), "--", *argv], timeout_s, quiet=True,
                               module="memledger.measure.worker")
        results = []
        for r in range(nproc):
            f = Path(tmp) / f"result.rank{r}.json"
            if not f.exists():
                sys.stderr.write(output)
                raise ScriptError(f"rank {r} of the measured run died (torchrun status {code})")
            try:
                results.append(result_from_worker(json.loads(f.read_text()), policy, steps,
                                                  time_steps, output.encode()))
            except ScriptError as e:
                raise ScriptError(f"rank {r}: {str(e).removeprefix('memledger: ')}",
                                  exit_code=e.exit_code) from None
    return results
