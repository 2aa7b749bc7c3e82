"""One capture run: in this process (`capture_in_process`) or in a fresh one (`capture_run`).

`memledger compare` always uses fresh processes (`capture_run`): a script may leave global
state behind (RNG, caches, registered hooks), and each run must start from the same place.
`capture_in_process` is what the fresh process runs, and what unit tests call directly on
tiny scripts that seed themselves.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from memledger.errors import EXIT_OK, EXIT_USAGE, OutputError, PolicyError, PolicyRefused
from memledger.processes import dead_worker, run_worker


@dataclass(frozen=True)
class Variant:
    """What a capture run applies: a policy string, or (tests only) a broken candidate."""

    label: str
    policy: str = "none"
    broken: str = ""       # a name from memledger/verify/broken.py (tests only)
    selector: str = ""     # the broken candidate's selector

    @classmethod
    def of(cls, policy) -> "Variant":
        return cls(label=str(policy), policy=policy.text())


BASELINE = Variant("none")

# what a capture that recorded no step says, by what ends a step (trace/steps.py)
NO_STEP = {
    "optimizer": "the script ran no optimizer step; call optimizer.step() in the training "
                 "loop, or count steps by forward passes (--steps-by forward)",
    "forward": "the script never called its model with parameters (--steps-by forward)",
    "whole": "the script never called its model with parameters (--steps-by whole)",
}


@dataclass
class CaptureResult:
    code: int
    reason: str
    data: dict | None      # the capture (see capture.py); None when no step was captured
    output: str = ""       # the script's output (fresh process only)


def capture_in_process(script: str | Path, argv: list[str], variant: Variant,
                       steps: int, steps_by: str = "optimizer") -> CaptureResult:
    """Run `script` here under `variant`; raise PolicyError if the policy cannot apply.
    `steps_by`: what ends a step (trace/steps.py; Note [A capture without an optimizer])."""
    from memledger.measure.apply import checkpoint_refusal, install_policy
    from memledger.replay.policies import parse_policy
    from memledger.trace.compiled import compiler_compiles_so_far
    from memledger.trace.script import run_and_classify
    from memledger.verify.broken import apply_broken
    from memledger.verify.capture import Capture

    cap = Capture(max_steps=steps, steps_by=steps_by)
    applied: list[str] = []
    errors: list[PolicyError] = []

    def on_applied(handle) -> None:
        cap.on_model(handle)
        applied.extend(handle.modules)
        if variant.broken:
            try:
                applied.extend(apply_broken(handle.model, variant.broken, variant.selector))
            except PolicyError as e:
                errors.append(e)
                raise

    installer = install_policy(parse_policy(variant.policy), on_applied=on_applied,
                               steps_by=steps_by)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    compiled_before = compiler_compiles_so_far()
    cap.start()
    try:
        outcome = run_and_classify(script, argv)
        code, reason = outcome.code, outcome.reason
    finally:
        cap.stop()
        installer.remove()
        sys.argv[:], sys.path[:] = saved_argv, saved_path   # run_script sets both
    if installer.error is not None or errors:
        err = installer.error or errors[0]
        if isinstance(err, PolicyRefused):   # this policy's REJECT, not the comparison's end
            return CaptureResult(EXIT_USAGE, str(err).removeprefix("memledger: "), None)
        raise err
    if type(outcome.error).__name__ == "CheckpointError" and \
            parse_policy(variant.policy).parts and not variant.broken:
        # torch's checkpoint refused the policy's re-run: a refusal, said as measure says
        # it (the script ran without the policy)
        return CaptureResult(EXIT_USAGE, checkpoint_refusal(
            variant.policy, outcome.error, applied).removeprefix("memledger: "), None)
    if code == EXIT_OK and not cap.steps:
        return CaptureResult(EXIT_USAGE, NO_STEP[steps_by], None)
    # `compiled`: graphs an AOT-autograd backend compiled (Note [A compile by the eager
    # backend] in trace/compiled.py)
    meta = {"policy": variant.policy, "steps_by": steps_by, "broken": variant.broken, "selector": variant.selector,
            "regions": applied, "device": cap.device, "steps_requested": steps,
            "compiled": compiler_compiles_so_far() - compiled_before}
    return CaptureResult(code, reason, cap.data(meta) if cap.steps else None)


def capture_run(script: str | Path, argv: list[str], variant: Variant, steps: int,
                out: str | Path, steps_by: str = "optimizer") -> CaptureResult:
    """Run `script` once under `variant` in a fresh process, capturing `steps` steps.

    Raises PolicyError when the policy cannot apply to the model (exit 2).
    """
    from memledger.verify.capture import load_capture

    out = Path(out)
    status = out.with_suffix(".status.json")
    args = ["--out", str(out), "--status", str(status), "--steps", str(steps),
            "--policy", variant.policy, "--steps-by", steps_by]
    if variant.broken:
        args += ["--broken", variant.broken, "--selector", variant.selector]
    returncode, out_bytes = run_worker("memledger.verify.worker",
                                       [*args, str(script), "--", *argv], capture_output=True)
    output = out_bytes.decode(errors="replace")
    if not status.exists():
        raise dead_worker(returncode, status.parent,
                          (output.strip().splitlines() or [""])[-1])
    st = json.loads(status.read_text())
    if st.get("policy_error"):
        raise PolicyError(st["reason"])
    if st.get("output_error"):
        raise OutputError(st["reason"])
    data = None
    if out.exists():
        data = load_capture(str(out))
        out.unlink()
    return CaptureResult(st["code"], st["reason"], data, output)
