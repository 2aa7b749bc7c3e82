"""Check 7: Dropout or BatchNorm in eval mode inside a training step.

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


def _effect(classes: list[str]) -> str:
    """What eval mode does to these module classes, naming only the kinds present."""
    drop = any("dropout" in c.lower() for c in classes)
    norm = any("dropout" not in c.lower() for c in classes)
    parts = (["dropout is off"] if drop else []) + (
        ["BatchNorm uses frozen running statistics"] if norm else [])
    return " and ".join(parts)
