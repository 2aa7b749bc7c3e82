"""The probe's records, indexed for the checks (no torch).

Record kinds (memledger/trace/doctor_probe.py writes them, in the order things happened):
`param` (index, name, trainable, bytes), `step` (one optimizer step: its parameters,
which backward passes reached each, gradients zeroed / non-finite, frozen ones that moved),
`backward` (value, line, the loss-function calls since the previous backward), `cut`
(an op that cut the graph and the parameters behind it), `leak`, `mode`, `retained`,
`sched`, `clip` (a clip_grad_norm_ / clip_grad_value_ call and where it fell: Note [Where a
clip and a step fall] in memledger/trace/doctor_order.py), `mixed` (a gradient added to
at changed weights: Note [Gradients of two weights] in doctor_probe.py), `penalty` (a
backward from a loss with a term made of gradients taken without a graph: Note [A
gradient penalty without create_graph] in doctor_penalty.py), `net` (a top-level network's
first forward under grad: its number, line, training flag, whether an input required
grad), `garbage` (tensors only the garbage collector would free, at a step's end: Note
[Tensors only the garbage collector frees] in doctor_garbage.py), `unused_graph` (a
top-level forward under grad whose graph no backward used: Note [A graph no backward used]
in doctor_unused.py), `double_activation` (a loss that takes logits given a softmax's or a
sigmoid's output: Note [An activation the loss applies again] in doctor_losses.py),
`broadcast_target` (an elementwise loss whose input and target broadcast to more elements
than either holds: Note [A loss that broadcasts its target] there), `not_log_probs` (an
nll_loss / kl_div input whose values are no log-probabilities: Note [Values that are no
log-probabilities] there), `kl_div_mean` (kl_div between distributions with
reduction='mean': Note [kl_div's reduction='mean'] there), `rng` (a step's draws from one
generator: its state at their start and the step's end; Note [The same randomness every
step] in doctor_rng.py), `loose` (an `nn.Parameter` no module or optimizer holds that a
backward reached and nothing changed: Note [A parameter no module holds] in
doctor_loose.py), `end`. A `param` record
has `grad_read` once the script read its `.grad`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memledger.doctor.findings import Where

Record = dict[str, Any]


@dataclass
class Run:
    params: dict[int, Record] = field(default_factory=dict)
    steps: list[Record] = field(default_factory=list)
    backwards: list[Record] = field(default_factory=list)
    cuts: list[Record] = field(default_factory=list)
    leaks: list[Record] = field(default_factory=list)
    modes: list[Record] = field(default_factory=list)
    retained: list[Record] = field(default_factory=list)
    scheds: list[Record] = field(default_factory=list)
    clips: list[Record] = field(default_factory=list)
    late_writes: list[Record] = field(default_factory=list)   # `late_write`
    mixed: list[Record] = field(default_factory=list)
    penalties: list[Record] = field(default_factory=list)
    garbage: list[Record] = field(default_factory=list)
    unused_graphs: list[Record] = field(default_factory=list)
    double_activations: list[Record] = field(default_factory=list)
    broadcasts: list[Record] = field(default_factory=list)
    not_log_probs: list[Record] = field(default_factory=list)
    kl_div_means: list[Record] = field(default_factory=list)
    rngs: list[Record] = field(default_factory=list)
    detached: list[Record] = field(default_factory=list)   # `param_detached`
    loose: list[Record] = field(default_factory=list)   # Note [A parameter no module holds]
    nets: dict[int, Record] = field(default_factory=dict)
    n_steps: int = 0
    n_optimizer_steps: int = 0
    steps_by: str = "optimizer"   # what ended a step (`doctor --steps-by`)

    @classmethod
    def of(cls, records: list[Record]) -> "Run":
        run = cls()
        lists = {"step": run.steps, "backward": run.backwards, "cut": run.cuts,
                 "leak": run.leaks, "mode": run.modes, "retained": run.retained,
                 "sched": run.scheds, "clip": run.clips, "late_write": run.late_writes,
                 "mixed": run.mixed,
                 "penalty": run.penalties, "garbage": run.garbage,
                 "unused_graph": run.unused_graphs,
                 "double_activation": run.double_activations,
                 "broadcast_target": run.broadcasts,
                 "not_log_probs": run.not_log_probs, "kl_div_mean": run.kl_div_means,
                 "rng": run.rngs, "param_detached": run.detached,
                 "loose": run.loose}
        for r in records:
            k = r.get("k")
            if k == "param":
                run.params[int(r["i"])] = r
            elif k == "net":
                run.nets.setdefault(int(r["root"]), r)
            elif k in lists:
                lists[k].append(r)
            elif k == "end":
                run.n_steps = int(r.get("steps", 0))
                run.n_optimizer_steps = int(r.get("optimizer_steps", run.n_steps))
                run.steps_by = str(r.get("steps_by", "optimizer"))
        return run

    def name(self, i: int) -> str:
        return str(self.params.get(i, {}).get("name", f"param{i}"))

    def names(self, idx, most: int = 3) -> str:
        """`a`, `b`, `c` and 4 more."""
        idx = sorted(set(idx))
        shown = ", ".join(f"`{self.name(i)}`" for i in idx[:most])
        return shown + (f" and {len(idx) - most} more" if len(idx) > most else "")

    def bytes_of(self, idx) -> int:
        return sum(int(self.params.get(i, {}).get("bytes", 0)) for i in set(idx))

    def untrained_roots(self) -> dict[int, list[int]]:
        """{network: its parameters backward gave gradients} for the top-level networks
        backward reached of which no optimizer holds a parameter, while one it holds was
        reached (so not a stale optimizer, nor master weights whose gradients the script
        copies in by hand): a teacher or loss network, not trained."""
        held = {i for st in self.steps for i in st["params"]}
        reached = {i for b in self.backwards for i in b.get("reached", ())}
        if not reached & held:
            return {}
        held_roots = {self.params.get(i, {}).get("root") for i in held}
        out: dict[int, list[int]] = {}
        for i in sorted(reached):
            root = self.params.get(i, {}).get("root")
            if root is not None and root not in held_roots:
                out.setdefault(int(root), []).append(i)
        return out

    def first_steps(self) -> set[int]:
        """`step` numbers that are an optimizer's first (its late-hooked params are unknown)."""
        seen, out = set(), set()
        for st in self.steps:
            if st["opt"] not in seen:
                seen.add(st["opt"])
                out.add(st["step"])
        return out


def where(r: Record) -> Where:
    return Where(file=str(r.get("file", "")), line=int(r.get("line", 0) or 0))


def steps_named(steps) -> str:
    """[2] -> 'step 2'; [2, 3] -> 'steps 2 and 3'; [2, 3, 4] -> 'steps 2-4'; [1, 3, 5] ->
    'steps 1, 3 and 5' (a finding's message reads "... in steps 2 and 3: ...")."""
    s = sorted(set(steps))
    if len(s) == 1:
        return f"step {s[0]}"
    if len(s) > 2 and s[-1] - s[0] == len(s) - 1:
        return f"steps {s[0]}-{s[-1]}"
    return f"steps {', '.join(str(x) for x in s[:-1])} and {s[-1]}"
