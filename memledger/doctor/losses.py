"""Check 12: what a loss function was given (no torch).

double_activation: a loss that takes logits (cross_entropy, binary_cross_entropy_with_logits)
or log-probabilities (nll_loss, kl_div) given the output of a softmax or a sigmoid, through
views only (Note [An activation the loss applies again] in
memledger/trace/doctor_losses.py). broadcast_target: an elementwise loss (mse, l1, smooth
l1, huber) whose input and target broadcast to more elements than either holds, `(N, 1)`
against `(N,)` (Note [A loss that broadcasts its target] there). Both errors: the loss
is not the one meant, at every step, and the training runs on without a sign but a
warning torch prints once.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, span, where

_DOES = {"cross_entropy": "applies log_softmax to its input itself, so the {op} runs "
                          "twice and the model trains on a squashed loss",
         "binary_cross_entropy_with_logits": "applies a sigmoid to its input itself, so the "
                                             "model trains on a squashed loss",
         "nll_loss": "takes log-probabilities: on probabilities it computes -p, not -log p",
         "kl_div": "takes log-probabilities as its input: on probabilities it computes "
                   "another quantity"}
_FIX = {"cross_entropy": "pass the logits (drop the {op} before the loss)",
        "binary_cross_entropy_with_logits": "pass the logits (drop the {op}), or keep it and "
                                            "use F.binary_cross_entropy / nn.BCELoss",
        "nll_loss": "pass torch.log_softmax(logits, dim), or the logits to F.cross_entropy",
        "kl_div": "pass torch.log_softmax(logits, dim) as the input"}


def _shape(s) -> str:
    return "(" + ", ".join(str(int(d)) for d in s) + ("," if len(s) == 1 else "") + ")"


def _called(r: dict) -> str:
    """`nn.CrossEntropyLoss` (calling F.cross_entropy) or `F.cross_entropy`."""
    fn = str(r["fn"])
    return f"{r['module']} (F.{fn})" if r.get("module") else f"F.{fn}"


def _groups(recs, *keys) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in recs:
        k = (r.get("file", ""), int(r.get("line", 0) or 0),
             *(str(r.get(key, "")) for key in keys))
        out.setdefault(k, []).append(r)
    return out


def double_activation(run: Run) -> list[Finding]:
    out = []
    for recs in _groups(run.double_activations, "fn", "op").values():
        first = recs[0]
        fn, op = str(first["fn"]), str(first["op"])
        steps = sorted({int(r["step"]) for r in recs})
        said = [f"shape {_shape(first.get('shape', []))}"]
        if "min" in first:
            said.append(f"values in [{first['min']:.3g}, {first['max']:.3g}]")
        if "row_sum_error" in first:
            said.append(f"each row of its {first.get('classes', 0)} classes summing to 1")
        act = first.get("activation", "")
        made = (f"{op}, the model's nn.{op.capitalize()} `{act}`" if act else op)
        fix = (f"drop nn.{op.capitalize()} `{act}` from the forward that trains (apply it "
               "at inference) and pass the logits" if act and fn in (
                   "cross_entropy", "binary_cross_entropy_with_logits")
               else _FIX.get(fn, "pass the logits").format(op=op))
        floor = ""
        if "floor" in first:
            floor = (f"; on probabilities the loss cannot go below {first['floor']:.3g} for "
                     f"{first['classes']} classes" + (f" (it reads {first['value']:.3g})"
                                                      if "value" in first else ""))
        out.append(Finding(
            check="double_activation", severity="error", where=where(first),
            message=(f"{_called(first)} was given the output of {made} "
                     f"({', '.join(said)}) in step {span(steps)}: {fn} "
                     f"{_DOES.get(fn, '').format(op=op)}{floor}; {fix}"),
            evidence={"loss": fn, "module": first.get("module", ""), "op": op,
                      "steps": steps, "calls": len(recs),
                      **{k: first[k] for k in ("activation", "shape", "min", "max",
                                               "classes", "floor", "value")
                         if first.get(k) not in (None, "")}}))
    return out


def _fix(inp: list, target: list) -> str:
    if len(inp) == len(target) + 1 and inp[-1] == 1 and inp[:-1] == target:
        return "pass input.squeeze(-1) (or target.unsqueeze(-1)) so the shapes match"
    if len(target) == len(inp) + 1 and target[-1] == 1 and target[:-1] == inp:
        return "pass target.squeeze(-1) (or input.unsqueeze(-1)) so the shapes match"
    return "reshape one operand to the other's shape (target.view_as(input)) so they match"


def broadcast_target(run: Run) -> list[Finding]:
    out = []
    for recs in _groups(run.broadcasts, "fn", "input", "target").values():
        first = recs[0]
        fn = str(first["fn"])
        inp, target, wide = (list(first[k]) for k in ("input", "target", "broadcast"))
        steps = sorted({int(r["step"]) for r in recs})
        meant = (f" (it reads {first['value']:.4g}; on matching shapes "
                 f"{first['meant']:.4g})" if "meant" in first and "value" in first else "")
        out.append(Finding(
            check="broadcast_target", severity="error", where=where(first),
            message=(f"{_called(first)} compared an input of shape "
                     f"{_shape(inp)} with a target of shape {_shape(target)} in step "
                     f"{span(steps)}: they broadcast to {_shape(wide)}, every prediction "
                     f"against every target, so the model learns toward the batch's mean"
                     f"{meant}; {_fix(inp, target)}"),
            evidence={"loss": fn, "module": first.get("module", ""), "input": inp,
                      "target": target, "broadcast": wide,
                      "steps": steps, "calls": len(recs),
                      **{k: first[k] for k in ("value", "meant") if k in first}}))
    return out
