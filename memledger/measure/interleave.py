"""Step times of several policies in ONE process, interleaved step by step.

    python -m memledger.measure.interleave --out t.json --policy none --policy 'checkpoint:blocks.*' \\
        --cycles 8 train.py -- --steps 60

# Note [Interleaved timing]
On a shared machine the load changes from second to second, so two policies timed in two
processes a minute apart differ by more than the policy costs (seen here: the same
checkpoint policy +24.9 ms in one round, +18.2 ms in the next, CPU time, load average 14).
This worker applies the policies to the running script's model in turn, `--turn` optimizer
steps each (`apply_policy` / `remove`, between steps), for `--cycles` cycles after
`--warmup` plain steps: every policy's steps are spread over the same seconds as the
baseline's, so load hits them alike. Only the last `--turn - 1` steps of a turn are timed:
the first step after a switch pays for the switch (the allocator's free lists were shaped
by the previous policy; with turns of one step, a policy that moves nothing, offload of a
Linear's output, measured +0.6 ms on a 3 ms MLP step). The first cycle is not timed either.
Per policy: the median of its timed steps' thread CPU time (one intra-op thread: the work
itself) and of their wall time.

Peaks are not measured here (policies share one process's allocator): see runner.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="memledger.measure.interleave")
    p.add_argument("--out", required=True)
    p.add_argument("--policy", action="append", default=[])
    p.add_argument("--cycles", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--turn", type=int, default=3, help="steps per policy turn (>= 2)")
    p.add_argument("script")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.argv and args.argv[0] == "--":
        args.argv = args.argv[1:]

    from memledger.measure.apply import apply_policy, install_policy
    from memledger.replay.policies import parse_policy
    from memledger.trace.collector import StopTracing
    from memledger.trace.script import run_and_classify
    from memledger.trace.steps import OptimizerSteps

    policies = [parse_policy(t) for t in (args.policy or ["none"])]
    texts = [str(pol) for pol in policies]
    times: dict[str, list[float]] = {t: [] for t in texts}
    walls: dict[str, list[float]] = {t: [] for t in texts}
    model: dict = {}
    state = {"n": 0, "current": None, "idx": -1, "t": 0.0, "w": 0.0}
    turn = max(args.turn, 2)
    total = args.warmup + len(policies) * (args.cycles + 1) * turn

    def switch(i: int) -> None:
        if state["current"] is not None:
            state["current"].remove()
            state["current"] = None
        if policies[i].parts:
            state["current"] = apply_policy(model["m"], policies[i])
        state["idx"] = i

    def on_step() -> None:
        now, wall = time.thread_time(), time.perf_counter()
        n = state["n"]
        k = n - args.warmup                       # steps since the warm-up
        # the step that just ended ran policy idx, in its turn's position k % turn
        if k >= len(policies) * turn and k % turn != 0:
            times[texts[state["idx"]]].append(now - state["t"])
            walls[texts[state["idx"]]].append(wall - state["w"])
        state["n"] = n + 1
        if state["n"] >= total:
            raise StopTracing()
        if "m" in model and (k + 1) % turn == 0 and k >= -1:
            switch(((k + 1) // turn) % len(policies))
        state["t"], state["w"] = time.thread_time(), time.perf_counter()

    installer = install_policy(parse_policy("none"),
                               on_applied=lambda h: model.update(m=h.model))
    handle = OptimizerSteps(on_step)   # training steps, as trace counts them: trace/steps.py
    try:
        outcome = run_and_classify(args.script, args.argv)
    finally:
        handle.remove()
        installer.remove()
        if state["current"] is not None:
            state["current"].remove()
    result = {"policies": texts, "cpu_s": times, "wall_s": walls, "steps": state["n"],
              "needed": total, "code": outcome.code, "error": outcome.reason}
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0 if state["n"] >= total else 1


if __name__ == "__main__":
    sys.exit(main())
