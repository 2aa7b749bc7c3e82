"""Check 7: Dropout or BatchNorm in eval mode inside a training step.

A module counts when it ran with grad enabled, not in `training` mode, in a step that
went on to a backward pass: dropout is off, BatchNorm normalises with (and never updates)
its running statistics. A fine-tune that freezes BatchNorm on purpose sees a warning.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, span, where


def eval_mode(run: Run) -> list[Finding]:
    trained = {b["window"] for b in run.backwards}
    hits = [m for m in run.modes if m["window"] in trained]
    groups: dict[tuple, list[dict]] = {}
    for m in hits:
        groups.setdefault((m["file"], m["line"]), []).append(m)
    out = []
    for _, ms in groups.items():
        mods = sorted({m["mod"] for m in ms})
        classes = sorted({m["cls"] for m in ms})
        shown = ", ".join(f"`{m}`" for m in mods[:3]) + (
            f" and {len(mods) - 3} more" if len(mods) > 3 else "")
        out.append(Finding(
            check="eval_mode", severity="warning", where=where(ms[0]),
            message=(f"{len(mods)} {'/'.join(classes)} modules ({shown}) ran in eval mode in "
                     f"training step {span(m['window'] for m in ms)}: dropout is off and "
                     "BatchNorm uses frozen running statistics; call model.train() before the "
                     "training forward"),
            evidence={"modules": len(mods), "steps": sorted({m["window"] for m in ms})}))
    return out
