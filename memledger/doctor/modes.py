"""Check 7: Dropout or BatchNorm in eval mode inside a training step, and a forward that
takes another path in eval mode (Note [A forward that takes another path in eval mode]).

Dropout is an nn.Dropout module, or a functional call (`F.dropout(x, p,
training=self.training)`, transformers' attention) with training=False and p > 0, counted
for the module whose forward made it (`fn` in its record; doctor_probe.py's
`_functional_dropout`).

A module counts when it ran with grad enabled, not in `training` mode, in a step whose
backward pass reached a parameter of the network it belongs to: dropout is off, BatchNorm
normalises with (and never updates) its running statistics. A network no gradient reaches
is not being trained, nor is a call whose graph no backward used (a validation forward
under grad, then `model.train()`: Note [A validation forward under grad] in
trace/doctor_probe.py): a frozen loss network (a perceptual loss, `.eval()` and
`requires_grad_(False)`) or a distillation teacher whose logits are detached is in eval
mode on purpose, and `model.train()` there would switch its dropout on; so is one that
gradients reach but no optimizer holds a parameter of (a teacher left trainable: the
waste is params.py's wasted_gradients, the fix is freezing it). Nor is a module
whose parent is in training mode: it was put in eval by a call of its own, after
`model.train()` (mmdetection's `norm_eval=True` keeps every BatchNorm's statistics frozen
while its affine parameters train; a `freeze_bn()` helper); the bug, a `model.eval()` for
validation and no `model.train()` after it, leaves the parent in eval too.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, steps_named, where
from memledger.units import count


def eval_mode(run: Run) -> list[Finding]:
    reached: dict[int, set[int]] = {}   # window -> networks a gradient reached
    for b in run.backwards:
        roots = reached.setdefault(b["window"], set())
        # a parameter of no module (a bare `nn.Parameter` in the optimizer, pyro's param
        # store) has root None: it belongs to no network
        roots.update(int(r) for i in b.get("reached", [])
                     if (r := run.params.get(i, {}).get("root")) is not None)
    untrained = run.untrained_roots()   # a teacher no optimizer holds: eval on purpose
    hits = [m for m in run.modes if m["window"] in reached and (
        m.get("root", -1) < 0 or m["root"] in reached[m["window"]])
        and m.get("parent_training") is not True and m.get("root", -1) not in untrained
        and not (m.get("graph") and not m.get("backprop"))]   # a call no backward used
        # (a validation forward without no_grad): Note [A validation forward under grad]
    groups: dict[tuple, list[dict]] = {}
    for m in hits:
        groups.setdefault((m["file"], m["line"]), []).append(m)
    out = []
    for _, ms in groups.items():
        parts = []
        for fn in (False, True):   # nn modules; functional dropout calls, by their module
            mods = sorted({m["mod"] for m in ms if bool(m.get("fn")) is fn})
            if not mods:
                continue
            kinds = "/".join(sorted({m["cls"] for m in ms if bool(m.get("fn")) is fn}))
            shown = ", ".join(f"`{m}`" for m in mods[:3]) + (
                f" and {len(mods) - 3} more" if len(mods) > 3 else "")
            parts.append(f"{kinds} in {len(mods)} modules ({shown})" if fn else
                         f"{len(mods)} {kinds} modules ({shown})")
        classes = sorted({m["cls"] for m in ms})
        out.append(Finding(
            check="eval_mode", severity="warning", where=where(ms[0]),
            message=(f"{' and '.join(parts)} ran in eval mode in training "
                     f"{steps_named(m['window'] for m in ms)}: {_effect(classes)}; "
                     "call model.train() before the training forward"),
            evidence={"modules": len({(m["mod"], bool(m.get("fn"))) for m in ms}),
                      "steps": sorted({m["window"] for m in ms})}))
    return out


# Note [A forward that takes another path in eval mode]
# A module's forward may branch on `self.training` for more than dropout and BatchNorm.
# loralib's layers (`merge_weights=True`, its default) add the low-rank update B @ A into
# the frozen weight in place on `model.eval()` and take it out on `model.train()`; while
# merged, their forward is the frozen weight's alone and reads neither factor. A loop that
# validates in eval mode and calls `model.train()` once before the loop, not at each step's
# start, trains every later step in eval: the LoRA factors, the only weights it means to
# train, get no gradient from then on, and only the LoRA layers' biases move. The checks
# said nothing: no Dropout ran (loralib's dropout sits on the branch not taken), and
# `unused_parameter` reads a parameter that got a gradient in another step as chosen by
# the data (tests/clients/train_loralib.py --validate --train-once). The probe records, for
# each step, the trainable parameters whose module ran under grad in that window in eval
# mode only (the module holding it in eval too: a module put in eval by a call of its own
# is meant, as above; trace/doctor_probe.py `_ran_eval`); a parameter that got no gradient in
# such a step and got one in a step where its module ran in training mode took another
# path because of the mode: the forgotten `model.train()`, at the step's line. A
# parameter the data chooses gets no gradient in training mode too, and a network frozen
# in eval mode from the first step on (a pretrained encoder) never got one in training.
def eval_path(run: Run) -> list[Finding]:
    trained = {int(i) for st in run.steps for i in st["accum"]
               if int(i) not in set(st.get("eval_only", ()))}
    groups: dict[tuple, dict] = {}
    for st in run.steps:
        got = {int(i) for i in st["accum"]}
        lost = {int(i) for i in st.get("eval_only", ())} - got
        if not got or not lost & trained:
            continue
        g = groups.setdefault((st["file"], st["line"]),
                              {"params": set(), "steps": set(), "where": st})
        g["params"] |= lost & trained
        g["steps"].add(st["step"])
    out = []
    for g in groups.values():
        idx, steps = g["params"], g["steps"]
        out.append(Finding(
            check="eval_mode", severity="warning", where=where(g["where"]),
            message=(f"{count(len(idx), 'trainable parameter')} ({run.names(idx)}) got no "
                     f"gradient in {steps_named(steps)}, where their modules ran in eval mode, "
                     "and got one in a step where they ran in training mode: their forward "
                     "takes another path in eval mode (loralib's layers merge their low-rank "
                     "update into the frozen weight and skip the factors); call model.train() "
                     "before the training forward"),
            evidence={"params": len(idx), "bytes": run.bytes_of(idx), "steps": sorted(steps)}))
    return out


def _effect(classes: list[str]) -> str:
    """What eval mode does to these module classes, naming only the kinds present."""
    drop = any("dropout" in c.lower() for c in classes)
    norm = any("dropout" not in c.lower() for c in classes)
    parts = (["dropout is off"] if drop else []) + (
        ["BatchNorm uses frozen running statistics"] if norm else [])
    return " and ".join(parts)
