"""Check 13: the same randomness every step (no torch).

rng_reset: training steps whose random draws (dropout masks, noise, random indices)
started from the very state the previous step's did: the generator was set back between
them (`torch.manual_seed(0)` in the loop, `set_rng_state(saved)`, a generator seeded the
same way made anew each step), so every step draws the same numbers and the model trains
on one draw. The records and what is left alone: Note [The same randomness every step] in
memledger/trace/doctor_rng.py.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Run, steps_named, where


def _generator(key: str) -> str:
    if key == "cpu":
        return "the CPU generator"
    if key.startswith("cuda:"):
        return f"the CUDA generator of device {key[5:]}"
    return f"the generator handed to {key.split(':', 1)[1]}"


def rng_reset(run: Run) -> list[Finding]:
    by_key: dict[str, list[dict]] = {}
    for r in run.rngs:
        by_key.setdefault(str(r["key"]), []).append(r)
    out = []
    for key, recs in by_key.items():
        # a step that ended where the previous one did although its draws moved the state;
        # draws under gradients only: a validation that seeds each time feeds no training
        repeat = [r for r in recs if r.get("same_end") and r.get("moved") and r.get("grad")]
        if not repeat:
            continue
        steps = sorted({int(r["step"]) for r in repeat} |
                       {int(r["step"]) - 1 for r in repeat if int(r["step"]) > 1})
        ops: dict[str, int] = {}
        for r in repeat:
            for op, n in r.get("ops", {}).items():
                ops[op] = max(ops.get(op, 0), int(n))
        drawn = ", ".join(f"{op} x{n}" for op, n in ops.items())
        # the seed call the repeating steps made, the most frequent line
        seeds: dict[tuple, int] = {}
        for r in repeat:
            for s in r.get("resets", ()):
                k = (s.get("call", ""), s.get("file", ""), int(s.get("line", 0) or 0))
                seeds[k] = seeds.get(k, 0) + 1
        if seeds:
            (call, file, line), _ = max(seeds.items(), key=lambda kv: kv[1])
            at = Where(file=file, line=line)
            how = f"`{call}` sets it back each step"
        else:
            call, at = "", where(repeat[0])
            how = ("set back by a call the doctor does not see (a Generator's manual_seed "
                   "or set_state, made anew each step?); the line is the step's first draw"
                   if key.startswith(("cpu", "cuda")) else
                   "a generator seeded the same way each step (`torch.Generator()."
                   "manual_seed(s)` made inside the loop?); the line is its first draw")
        out.append(Finding(
            check="rng_reset", severity="error", where=at,
            message=(f"{steps_named(steps)} drew their random numbers ({drawn} a step) from "
                     f"the same state of {_generator(key)}: {how}, so every step draws "
                     "the same dropout masks, noise and random indices and the model "
                     "trains on one draw; seed once before the loop, seed with the step "
                     "(manual_seed(base + step)), or put the block that needs fixed "
                     "randomness under torch.random.fork_rng()"),
            evidence={"steps": steps, "generator": key, "ops": ops,
                      **({"reset": call} if call else {}),
                      "first_draw": f"{repeat[0].get('file', '')}:{repeat[0].get('line', 0)}"}))
    return out
