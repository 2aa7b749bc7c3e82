"""One measured run in a fresh process: `python -m memledger.measure.worker`.

The policy is installed (memledger/measure/apply.py `install_policy`) before the script
runs, so it lands on the model's first forward. Then:

1. steps 1..S (`--steps`): the allocator's peak. CPU: the profiler's memory events from
   process start (memledger/trace/allocator.py CpuProfilerProbe); CUDA: `max_memory_allocated`
   after `reset_peak_memory_stats` at process start.
2. steps S+1..S+T (`--time-steps`): the profiler is off; each step's wall time is the time
   between consecutive training step ends (so it includes data, forward, backward and
   the optimizer, as the user's loop runs them; a step ends as trace/steps.py says: after
   the last of several optimizers stepping after one backward). The step time is their median. The
   process CPU time of each step is kept too: on a shared machine it is the steadier
   number (other processes stretch wall time, not this process's CPU time).

The result is one JSON file (`--out`); the parent process reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from memledger.errors import EXIT_OK, EXIT_USAGE, PolicyError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memledger.measure.worker")
    p.add_argument("--out", required=True)
    p.add_argument("--policy", default="none")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--time-steps", type=int, default=5)
    p.add_argument("--steps-by", choices=("optimizer", "forward", "whole"), default="optimizer")
    p.add_argument("script")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    from memledger.trace.rank import for_rank

    args.out = for_rank(args.out)   # under torchrun (`measure --nproc`): one file per rank

    import torch

    from memledger.measure.apply import checkpoint_refusal, install_policy
    from memledger.replay.policies import no_model_message, parse_policy
    from memledger.trace.allocator import CpuProfilerProbe
    from memledger.trace.collector import StopTracing
    from memledger.trace.script import run_and_classify
    from memledger.trace.steps import OptimizerSteps, StepCounter

    result: dict = {"policy": args.policy, "steps": 0, "peak_bytes": 0, "source": "",
                    "step_times_s": [], "step_cpu_s": [], "regions": [], "error": "", "code": EXIT_OK}

    def write() -> None:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh)

    try:
        policy = parse_policy(args.policy)
    except PolicyError as e:
        result.update(error=str(e), code=EXIT_USAGE)
        write()
        return EXIT_USAGE
    cuda = torch.cuda.is_available()
    # the peak alone, save under torchrun, whose collectives' scratch is read from the ops
    cpu = None if cuda else CpuProfilerProbe(ops="RANK" in os.environ)
    state = {"n": 0, "t": 0.0, "c": 0.0, "profiling": True, "no_model": None}

    def finish_peak() -> None:
        state["profiling"] = False
        if installer is not None:   # Note [No model in the steps taken] (replay/policies.py)
            state["no_model"] = installer.roots_without_model()
        if cuda:
            torch.cuda.synchronize()
            result.update(peak_bytes=int(torch.cuda.max_memory_allocated()),
                          source="cuda-allocator")
        else:
            cpu.stop()
            result.update(peak_bytes=int(cpu.peaks().get("cpu", 0)), source="cpu-profiler")
            if "RANK" in os.environ:   # under torchrun: the peak counted by pointer
                from memledger.trace.allocator import collective_bytes_at_peak

                result.update(collective_bytes_at_peak(cpu))   # Note [Collective scratch]

    def on_step() -> None:
        state["n"] += 1
        result["steps"] = state["n"]
        if cuda:
            torch.cuda.synchronize()
        now, cpu_now = time.perf_counter(), time.process_time()
        if state["n"] == args.steps:
            if args.steps_by == "whole":   # the one step, profiled: its time is the script's
                result["step_times_s"].append(now - state["t"])
                result["step_cpu_s"].append(cpu_now - state["c"])
            finish_peak()
            now, cpu_now = time.perf_counter(), time.process_time()
        elif state["n"] > args.steps:
            result["step_times_s"].append(now - state["t"])
            result["step_cpu_s"].append(cpu_now - state["c"])   # all threads' CPU time
        state["t"], state["c"] = now, cpu_now
        if state["n"] >= args.steps + args.time_steps:
            raise StopTracing()

    installer = None
    if policy.parts:
        installer = install_policy(
            policy, on_applied=lambda h: result.update(regions=[r.path for r in h.regions]),
            steps_by=args.steps_by)
    # training steps as trace counts them, or (--steps-by) forwards or the whole script,
    # as trace's passes count them: trace/steps.py
    handle = OptimizerSteps(on_step) if args.steps_by == "optimizer" else \
        StepCounter(args.steps_by, on_step)
    state["t"], state["c"] = time.perf_counter(), time.process_time()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    else:
        cpu.start()
    try:
        outcome = run_and_classify(args.script, args.argv)
        code, reason = outcome.code, outcome.reason
        if args.steps_by != "optimizer":
            handle.script_ended()   # the open step ends with the script, as in trace
    finally:
        handle.remove()
        if state["profiling"]:
            finish_peak()
        if installer is not None:
            installer.remove()
    if installer is not None and installer.error is not None:
        result.update(error=str(installer.error), code=EXIT_USAGE)
    elif isinstance(outcome.error, PolicyError):   # refused while running (stateful call)
        result.update(error=str(outcome.error), code=EXIT_USAGE)
    elif installer is not None and type(outcome.error).__name__ == "CheckpointError":
        # torch's checkpoint found the policy's re-run unlike its first run: the policy's
        # failure, not the script's (which ran without it); said as a refusal, exit 2
        result.update(code=EXIT_USAGE, error=checkpoint_refusal(
            policy.text(), outcome.error, result.get("regions", [])))
    elif installer is not None and code == EXIT_OK and state["n"] >= args.steps and (
            state["no_model"] is not None or installer.applied is None):
        # no model by the end of the profiled steps: its peak is not the policy's, whatever
        # ran after (Note [No model in the steps taken], replay/policies.py). A script that
        # ended before those steps is told so, as without a policy (Note [A script that
        # ends before the steps, under a policy])
        result.update(error="memledger: " + no_model_message(
            state["no_model"] or [], args.steps), code=EXIT_USAGE)
    elif code != EXIT_OK:
        result.update(error=reason, code=code)
    write()
    return int(result["code"])


# Note [A script that ends before the steps, under a policy]
# taylor-series-linear-attention's causal attention, built without pytorch-fast-
# transformers, prints a line and calls `exit()` while the model is built: the script ends
# cleanly (status 0) before any step. `measure --policy none` said "the script ran 0
# optimizer steps; measure needs 2 for the peak", trace "the script ran no optimizer
# step", and `measure --policy checkpoint:blocks.*` "the policy never applied: no model
# ran in the 1 step taken (--steps 1): the script called no module" (0 taken, 2 asked:
# the count was clamped to 1). A policy cannot apply in steps the script never took: the
# no-model refusal is for a script that took the profiled steps without calling its model
# (Note [No model in the steps taken], replay/policies.py); one that ended sooner reads
# as it does without a policy (measure/runner.py `result_from_worker`).


if __name__ == "__main__":
    sys.exit(main())
