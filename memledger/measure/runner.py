"""`measure_script`: run a script under a policy in a fresh process; peak and step time.

    res = measure_script("examples/train_gpt.py", [], Policy.parse("checkpoint:blocks.*"))
    res.peak_bytes, res.step_time_s

Each call is a new Python process (memledger/measure/worker.py): no allocator cache,
profiler state or compiled kernel carries over between policies, and the script's own
seeds make every run see the same inputs.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from memledger.errors import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_SCRIPT_FAILED,
    EXIT_USAGE,
    PolicyError,
    ScriptError,
)
from memledger.processes import dead_worker, run_worker
from memledger.replay.policies import Policy
from memledger.trace.session import check_script

MEASURE_SCHEMA = "memledger.measure/1"


class MeasureResult(BaseModel):
    """The `memledger.measure/1` contract."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(MEASURE_SCHEMA, alias="schema")
    policy: str = Field(description="the policy as given")
    peak_bytes: int = Field(description="allocator peak over the first `steps` steps")
    step_time_s: float = Field(description="median wall time of the timed steps")
    source: str = Field(description="cpu-profiler | cuda-allocator")
    steps: int = Field(description="optimizer steps profiled for the peak")
    step_times_s: list[float] = Field(default_factory=list, description="each timed step")
    step_cpu_time_s: float = Field(0.0, description="median process CPU time of the timed "
                                   "steps (all threads); steadier than wall time when shared")
    step_cpu_times_s: list[float] = Field(default_factory=list, description="each timed "
                                          "step's process CPU time")
    regions: list[str] = Field(default_factory=list, description="modules the policy wrapped")

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def pass_steps(n: int) -> str:
    """The hint of a verb that takes the script's arguments: after `--`."""
    return f"e.g. -- --steps {n}"


# Note [Steps asked for as the verb takes them]
# A script that ends before the steps measure needs is told how to run longer: "pass e.g.
# -- --steps N", the script's arguments after `--`, as `measure`, `compare` and `check`
# take them. `plan --measure` takes none: it runs the script as the ledger traced it (or
# `--script` without arguments), and `plan LEDGER --measure -- --steps 4` is refused
# ("Got unexpected extra argument(s)"). A plan of a script that runs 3 steps by default
# (tests/clients/train_perceiver.py, traced with `--steps 2`) read "the script ran only 3
# optimizer steps, none left to time; let it run 4 (e.g. -- --steps 4)", a hint no flag of
# the verb could follow. The verb now says it its own way: plan, that it runs the script as
# traced, and the trace to run again with the steps added.
def measure_script(script: str | Path, argv: list[str], policy: Policy, steps: int = 3,
                   time_steps: int = 5, quiet: bool = True,
                   steps_by: str = "optimizer",
                   more_steps: Callable[[int], str] = pass_steps) -> MeasureResult:
    """Measure `policy` on `script`; raise PolicyError (2) or ScriptError (3) on failure.
    `steps_by`: what ends a step (trace/steps.py); "whole": the script is the one step,
    profiled and timed. `more_steps(n)`: how the caller's user lets the script run n steps,
    said where it ran fewer (Note [Steps asked for as the verb takes them])."""
    script = check_script(script)
    if steps_by == "whole":
        steps, time_steps = 1, 0
    elif steps < 1 or time_steps < 1:
        raise ScriptError("--steps and --time-steps must be at least 1", exit_code=EXIT_USAGE)
    with tempfile.TemporaryDirectory(prefix="memledger-measure-") as tmp:
        out = Path(tmp) / "result.json"
        args = ["--out", str(out), "--policy", policy.text(), "--steps", str(steps),
                "--time-steps", str(time_steps), "--steps-by", steps_by,
                str(script), "--", *argv]
        returncode, output = run_worker("memledger.measure.worker", args,
                                        capture_output=quiet)
        if not out.exists():
            if output:
                sys.stderr.write(output.decode(errors="replace"))
            raise dead_worker(returncode, tmp)
        res = json.loads(out.read_text())
    return result_from_worker(res, policy, steps, time_steps, output or None, steps_by,
                              more_steps)


def result_from_worker(res: dict, policy: Policy, steps: int, time_steps: int,
                       output: bytes | None = None,
                       steps_by: str = "optimizer",
                       more_steps: Callable[[int], str] = pass_steps) -> MeasureResult:
    """The MeasureResult of one worker's JSON (one rank's, under `--nproc`); raises on a
    failed run. `output`: the worker's captured output, shown when the script failed."""
    if res["code"] != EXIT_OK:
        if res["code"] == EXIT_USAGE:
            raise PolicyError(res["error"].splitlines()[0] if res["error"] else "policy failed")
        if output:
            sys.stderr.write(output.decode(errors="replace"))
        if res["code"] == EXIT_INTERNAL:   # memledger's own hook failed: a bug, not the script
            raise ScriptError(res["error"], exit_code=EXIT_INTERNAL)
        raise ScriptError(f"the script failed under {policy.text()!r}: {res['error']}",
                          exit_code=EXIT_SCRIPT_FAILED)
    what = "steps (each ending at the model's next forward)" if steps_by == "forward" \
        else "optimizer steps"
    if res["steps"] < steps:
        raise ScriptError(f"the script ran {res['steps']} {what}; measure needs "
                          f"{steps} for the peak and more to time "
                          f"({more_steps(steps + time_steps)})", exit_code=EXIT_USAGE)
    times = res["step_times_s"]
    if not times:
        raise ScriptError(f"the script ran only {res['steps']} {what}, none left to "
                          f"time; let it run {steps + time_steps} "
                          f"({more_steps(steps + time_steps)})", exit_code=EXIT_USAGE)
    return MeasureResult(policy=str(policy), peak_bytes=res["peak_bytes"],
                         step_time_s=statistics.median(times), source=res["source"],
                         steps=steps, step_times_s=times, regions=res["regions"],
                         step_cpu_time_s=statistics.median(res.get("step_cpu_s") or [0.0]),
                         step_cpu_times_s=res.get("step_cpu_s") or [])
