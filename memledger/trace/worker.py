"""One pass over a training script in a fresh process: `python -m memledger.trace.worker`.

    ledger     record the ledger (dispatch mode + hooks), streamed to --out
    allocator  no tracing: the allocator's own peak (profiler from process start, or CUDA
               counters), written as JSON measured records to --out

The parent (`memledger trace`) runs the two side by side, the allocator pass's timed steps
alone after the ledger pass (Note [Warm allocator pass] in trace/session.py), and joins them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from memledger.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_SCRIPT_FAILED, EXIT_USAGE
from memledger.ledger.writer import FileSink
from memledger.trace.call_count import ModuleCalls
from memledger.trace.collector import Collector, StopTracing
from memledger.trace.compiled import compiler_compiles_so_far, compiles_so_far
from memledger.trace.interrupts import install_worker_handlers
from memledger.trace.rank import for_rank, rank_header
from memledger.trace.rng_state import generator_digests
from memledger.trace.script import ScriptOutcome, run_and_classify
from memledger.trace.optimizer_like import status_hint
from memledger.trace.steps import STEPS_BY

NO_STEP_MESSAGE = (
    "memledger: the script ran no optimizer step ({events} ops seen, {forwards} forward "
    "scopes); memledger traces training steps: call optimizer.step() in the script"
)


def _ledger_pass(args) -> int:
    sink = FileSink(args.out)
    header = {"script": args.script, "argv": args.argv, "steps_requested": args.steps,
              **rank_header(), **({"steps_by": args.steps_by}
                                  if args.steps_by != "optimizer" else {})}
    world = _fake_world(args)
    header.update(world.header() if world else {})
    if args.fake:   # the script runs above FakeTensorMode: memledger/trace/fake.py
        from memledger.trace.fake import FakeTarget
        collector = FakeTarget.for_device(args.device).collector(
            sink, max_steps=args.steps, header=header, steps_by=args.steps_by)
    else:
        # Note [Two passes, other random numbers?] (trace/rng_state.py)
        rng = {"start": generator_digests()}

        def rng_at_stop() -> None:
            sink.write({"k": "rng", "step": collector.steps_done, **rng,
                        "end": generator_digests()})

        collector = Collector(sink, max_steps=args.steps, header=header,
                              steps_by=args.steps_by, scan_garbage=True,
                              on_steps_done=rng_at_stop)
    outcome = ScriptOutcome(EXIT_OK, "")
    guard = _guard(args, lambda reason: (collector.close("timeout", reason), sink.close()))

    def stop_hard() -> None:  # Note [When a step ends] in trace/collector.py
        collector.close("ok", "stopped after the requested steps (the script caught the stop)")
        sink.close()
        code, reason = _sink_status(sink, EXIT_OK, "stopped after the requested steps", args)
        _write_status(args.status, code, reason, collector.steps_done, collector.events, guard,
                  status_hint(collector, collector.steps_done))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_OK)

    collector.on_stop_swallowed = stop_hard
    try:
        with world or contextlib.nullcontext(), collector, guard:
            refuse = None
            if args.fake:   # what a fake run (or a simulated world) cannot do: exit 2
                from memledger.trace.fake import fake_refusal
                from memledger.trace.fake_world import ddp_refusal

                def refuse(e: BaseException):
                    return (ddp_refusal(e, args.script) if world else None) or \
                        fake_refusal(e, collector.target, args.script,
                                     collector.last_zero_standin)
            outcome = run_and_classify(args.script, args.argv, refuse)
            if args.fake and outcome.code == EXIT_SCRIPT_FAILED:
                from memledger.trace.fake import standin_hint
                outcome = ScriptOutcome(outcome.code, outcome.reason +
                                        standin_hint(collector.last_standin), outcome.error)
            if world and outcome.code == EXIT_OK and not world.joined:
                from memledger.trace.fake_world import NOT_DISTRIBUTED
                outcome = ScriptOutcome(EXIT_USAGE, NOT_DISTRIBUTED)
            if _is_cuda_oom(outcome.error):  # the allocator's state at the OOM, for `show`
                from memledger.trace.allocator import cuda_oom_record
                sink.write(cuda_oom_record(outcome.error))
            if outcome.code == EXIT_INTERRUPTED:
                collector.close("interrupted", outcome.reason)
            elif outcome.code != EXIT_OK:
                collector.close("error", outcome.reason)
    except StopTracing:
        pass
    finally:
        sink.close()
    code, reason = _sink_status(sink, outcome.code, outcome.reason, args)
    _write_status(args.status, code, reason, collector.steps_done, collector.events, guard,
                  status_hint(collector, collector.steps_done))
    return code


def _sink_status(sink: FileSink, code: int, reason: str, args) -> tuple[int, str]:
    """A ledger that could not be written (disk full) is memledger's failure, exit 2: never
    the script's (issue 10)."""
    if sink.error is None:
        return code, reason
    from memledger.outputs import os_error

    return EXIT_USAGE, str(os_error(sink.error, f"the ledger {args.out!r}")).removeprefix(
        "memledger: ")


def _fake_world(args):
    """`--fake --world N --rank r`: Note [A simulated rank] (memledger/trace/fake_world.py)."""
    if not args.world:
        return None
    from memledger.trace.fake_world import FakeWorld

    return FakeWorld(args.world, args.rank)


def _guard(args, on_timeout=None):
    """Under torchrun (`--nproc`): Note [A rank that never returns]; else nothing."""
    if "RANK" not in os.environ:
        return contextlib.nullcontext()
    from memledger.trace.rank_guard import RankGuard

    return RankGuard(args.timeout, args.status, on_timeout)


def _is_cuda_oom(error: BaseException | None) -> bool:
    import torch

    return error is not None and isinstance(error, torch.OutOfMemoryError)


def _allocator_pass(args) -> int:
    """The allocator's peak over the first `--steps` steps, then `--timing-steps` more steps
    timed with nothing attached (for the cost model's untraced step time). With
    `--wait-for-go` the timed steps wait for the parent's "go" (Note [Warm allocator pass])."""
    import torch

    from memledger.trace.allocator import (
        CpuProfilerProbe,
        CudaProbe,
        collective_bytes_at_peak,
        allocation_devices,
        cublas_workspace_bytes,
        scratch_record,
    )
    from memledger.trace.steps import OptimizerSteps, StepCounter
    from memledger.trace.timing import StepTimers

    # Note [Two passes, other random numbers?] (trace/rng_state.py): before the profiler
    # starts, and after it stops (get_state makes a 5,056 B tensor the profiler would count)
    rng = {"start": generator_digests()}
    # the allocator's history (for the snapshot) only where one is asked for: Note [The
    # allocator's history and a checkpoint's re-run], trace/session.py
    cuda = CudaProbe(record_history=args.snapshot is not None) \
        if torch.cuda.is_available() else None
    cpu = CpuProfilerProbe()
    # the last timing step runs under the op timer: not a plain step time
    # one rank of several: no probes (Note [No probes on several ranks], timing.py)
    timers = StepTimers(module_steps=max(args.timing_steps - 1, 1),
                        device="cuda:0" if cuda else "cpu",
                        probes=int(os.environ.get("WORLD_SIZE", "1")) <= 1)
    state: dict = {"n": 0, "t": 0, "step_ns": [], "cuda": None, "probing": True,
                   "stopped": False, "compiles": compiles_so_far(),
                   "compiler": compiler_compiles_so_far()}
    calls = ModuleCalls()   # Note [Two passes, one run?] (trace/call_count.py)

    def stop_probes() -> None:
        if state["probing"]:
            state["probing"] = False
            cpu.stop()
            if cuda:
                state["cuda"] = cuda.stop(args.snapshot)
                if (ws := cublas_workspace_bytes()) is not None:   # Note [The cuBLAS workspace]
                    state["cuda"]["cublas_workspace_bytes"] = ws
            # read the profiler's events now, while the ledger pass may still run (Note
            # [Warm allocator pass]), and let them go before the timed steps
            cpu.walk()   # the event tree read once: the peak below reads the same walk
            state["measured"] = {
                "module_calls": calls.stop(),
                "peaks": cpu.peaks(),
                # Notes [Kernel scratch] and [Kernel scratch on a GPU]: one per device
                "scratch": [scratch_record(cpu, dev) for dev in allocation_devices(cpu)
                            if dev == "cpu" or (cuda and dev.startswith("cuda"))],
                # Under torchrun: the peak counted by pointer (Note [Collective scratch])
                "comm": collective_bytes_at_peak(cpu) if "RANK" in os.environ else {}}
            cpu.release()

    def on_step() -> None:
        if cuda:
            torch.cuda.synchronize()
        now = time.perf_counter_ns()
        state["n"] += 1
        if state["stopped"]:   # the script swallowed the stop below: end here
            finish(ScriptOutcome(EXIT_OK, "stopped after the measured steps"), guard)
            sys.stdout.flush()
            os._exit(EXIT_OK)
        if state["n"] == args.steps:
            stop_probes()
            rng.update(step=state["n"], end=generator_digests())
            # no timing asked (Note [Memory-only traces], trace/session.py), or the ledger
            # pass traced other steps: stop here
            if not args.timing_steps or not wait_for_go(args):
                state["stopped"] = True
                raise StopTracing()
        elif state["n"] > args.steps and timers.ops is None:
            state["step_ns"].append(now - state["t"])
        if state["n"] >= args.steps:
            timers.on_step()
        state["t"] = time.perf_counter_ns()
        # the timed steps end when the timers are done (Notes [Timing within a budget] and
        # [Timed steps in a settled process], timing.py): at most twice the module steps
        # asked for, and the op-timed one
        last = args.steps + 2 * timers.module_steps + 1
        if state["n"] > last:  # the script swallowed the stop
            finish(ScriptOutcome(EXIT_OK, "stopped after the requested steps"), guard)
            sys.stdout.flush()
            os._exit(EXIT_OK)
        if state["n"] >= last or timers.done:
            raise StopTracing()

    def finish(outcome: ScriptOutcome, guard) -> None:
        stop_probes()
        timers.close()
        counter.remove()
        if cuda and _is_cuda_oom(outcome.error):
            cuda.note_oom(outcome.error)
        # the timed steps the timing record keeps: Note [Timed steps in a settled process]
        step_ns = [state["step_ns"][i] for i in timers.settled() if i < len(state["step_ns"])]
        timing = {"step_ns": step_ns} if step_ns else {}
        measured = state["measured"]
        drawn = {"rng": rng} if "end" in rng else {}   # stopped after the measured steps
        records = [{"k": "measured", "source": cpu.source, "device": dev, "peak_bytes": peak,
                    "module_calls": measured["module_calls"], **timing, **measured["comm"],
                    **drawn}
                   for dev, peak in measured["peaks"].items() if dev == "cpu"]
        if state["cuda"]:
            records.append({**state["cuda"], **timing,
                            "module_calls": measured["module_calls"], **drawn})
        records += [r for r in measured["scratch"] if r["ops"]]   # Note [Kernel scratch]
        if (frames := compiles_so_far() - state["compiles"]):   # this pass ran compiled
            records.append({"k": "compiles", "frames": frames,   # code; the ledger pass
                            # could not (compiled.py); Note [A compile by the eager backend]
                            "aot": compiler_compiles_so_far() - state["compiler"]})
        timed = timers.record("cuda:0" if cuda else "cpu")
        if timed:
            records.append(timed)
        if args.timing_steps:   # prices policies: a memory-only trace has no use for it
            records += _calibration_records("cuda:0" if cuda else "cpu")
        steps = min(state["n"], args.steps)
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"records": records, "steps": steps}, fh)
        _write_status(args.status, outcome.code, outcome.reason, steps, 0, guard)

    if args.steps_by == "optimizer":   # the same steps as the ledger pass: trace/steps.py
        counter = OptimizerSteps(on_step)
    else:   # evaluation, inference, a custom update: trace/steps.py
        counter = StepCounter(args.steps_by, on_step)
    if cuda:
        cuda.start()
    cpu.start()
    guard = _guard(args)
    try:
        with guard:
            outcome = run_and_classify(args.script, args.argv)
        if args.steps_by != "optimizer" or outcome.code == EXIT_OK:
            counter.script_ended()   # a step left open ends with the script, as in the
                                     # ledger pass (Collector.close)
    except BaseException:
        stop_probes()
        timers.close()
        counter.remove()
        raise
    finish(outcome, guard)
    return outcome.code


def wait_for_go(args) -> bool:
    """Under `--wait-for-go`, after the measured steps: block until the parent says the
    ledger pass is done ("go STEPS", the steps it traced), so that the timed steps run
    alone (Note [Warm allocator pass] in trace/session.py). True: time them. False: the
    ledger pass traced other steps than these (the parent drops this pass's peak), or the
    parent is gone."""
    if not args.wait_for_go:
        return True
    word, _, steps = sys.stdin.readline().partition(" ")
    return word == "go" and steps.strip() == str(args.steps)


def _calibration_records(device: str) -> list[dict]:
    """This machine's cost calibration (cached per machine and device; measured once)."""
    from memledger.measure.calibrate import calibration

    return [{"k": "calibration", **calibration(device)}]


def _write_status(path: str | None, code: int, reason: str, steps: int, events: int,
                  guard=None, hint: dict | None = None) -> None:
    if path:
        # under --nproc: when this rank stopped, and whether it ever joined a process group
        rank = {"t": time.time(), "dist": guard.saw_process_group} if hasattr(
            guard, "saw_process_group") else {}
        # whole or not at all: the hang watchdog's thread may write it at the same moment
        # (two plain writes once left `{...}{...}`, and the launcher failed with exit 70)
        from memledger.outputs import write_atomic

        # Note [An optimizer torch's hooks do not see] (trace/optimizer_like.py)
        write_atomic(path, json.dumps({"code": code, "reason": reason, "steps": steps,
                                       "events": events, **(hint or {}), **rank}), "status")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memledger.trace.worker")
    p.add_argument("mode", choices=["ledger", "allocator"])
    p.add_argument("--out", required=True)
    p.add_argument("--status")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--snapshot", help="allocator pass on CUDA: dump the allocator snapshot here")
    p.add_argument("--timing-steps", type=int, default=8,
                   help="allocator pass: steps timed untraced after the measured ones "
                   "(0: none, no probes, no calibration: a memory-only trace)")
    p.add_argument("--timeout", type=float, default=0,
                   help="under torchrun: give up after this many seconds without a step")
    p.add_argument("--steps-by", choices=STEPS_BY, default="optimizer",
                   help="what ends a step (memledger/trace/steps.py)")
    p.add_argument("--fake", action="store_true", help="ledger pass above FakeTensorMode")
    p.add_argument("--device", help="--fake: the target device (cpu, cuda)")
    p.add_argument("--world", type=int, default=0, help="--fake: simulate one rank of N")
    p.add_argument("--rank", type=int, default=0, help="--world: the rank simulated")
    p.add_argument("--wait-for-go", action="store_true",
                   help="allocator pass: after the measured steps, wait for 'go STEPS' on "
                   "stdin before the timed ones (Note [Warm allocator pass], trace/session.py)")
    p.add_argument("script")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]
    # Under torchrun (`--nproc`) the paths are templates: one file per rank.
    args.out, args.status, args.snapshot = map(for_rank, (args.out, args.status, args.snapshot))
    if args.steps < 1:
        print("memledger: --steps must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    install_worker_handlers()  # Note [One interrupt, delivered once]
    return _ledger_pass(args) if args.mode == "ledger" else _allocator_pass(args)


# Note [A worker's exit]
# Once a pass has written its ledger or its records and its status, what is left of the
# process is the interpreter's own teardown: with torch, Dynamo and Inductor loaded,
# 0.3-0.8 s of freeing modules here (a plain 3-step tiny-GPT run pays it too), and the
# parent waits for each worker's exit: the ledger pass's before the allocator pass may
# time its steps, the allocator pass's before the ledger is complete. So a worker runs
# what a normal exit would run for the script (a collection, so that what it left open is
# finalized and flushed; the atexit handlers, so logging and the like close), flushes its
# streams and ends with os._exit, skipping only that teardown. Under torchrun (`--nproc`)
# the ranks exit normally: process groups and their threads are torch's to tear down.
def exit_now(code: int) -> None:
    if "RANK" in os.environ:
        sys.exit(code)
    end_process(code)


def end_process(code: int) -> None:
    """What a normal exit runs for the script, then os._exit (Note [A worker's exit])."""
    import atexit
    import gc

    gc.collect()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
