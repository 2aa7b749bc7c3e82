"""Check 12: what a loss function was given (no torch).

double_activation: a loss that takes logits (cross_entropy, binary_cross_entropy_with_logits)
or log-probabilities (nll_loss, kl_div) given the output of a softmax or a sigmoid, through
views only (Note [An activation the loss applies again] in
memledger/trace/doctor_losses.py). broadcast_target: an elementwise loss (mse, l1, smooth
l1, huber) whose input and target broadcast to more elements than either holds, `(N, 1)`
against `(N,)` (Note [A loss that broadcasts its target] there). Both errors: the loss
is not the one meant, at every step, and the training runs on without a sign but a
warning torch prints once. not_log_probs: nll_loss, kl_div or ctc_loss given values that
are no log-probabilities (a positive value: raw logits, or probabilities), read from the values
(Note [Values that are no log-probabilities] there); an error. kl_div_mean: kl_div between
distributions with reduction='mean', the KL divided by the classes too (Note [kl_div's
reduction='mean'] there); a warning.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, steps_named, where

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
                     f"({', '.join(said)}) in {steps_named(steps)}: {fn} "
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
                     f"{_shape(inp)} with a target of shape {_shape(target)} in "
                     f"{steps_named(steps)}: they broadcast to {_shape(wide)}, every prediction "
                     f"against every target, so the model learns toward the batch's mean"
                     f"{meant}; {_fix(inp, target)}"),
            evidence={"loss": fn, "module": first.get("module", ""), "input": inp,
                      "target": target, "broadcast": wide,
                      "steps": steps, "calls": len(recs),
                      **{k: first[k] for k in ("value", "meant") if k in first}}))
    return out


def _reads(r: dict, never: str) -> str:
    if "value" not in r:
        return ""
    v = float(r["value"])
    return f" (it reads {v:.4g}, below 0, which {never} never is)" if v < 0 else \
        f" (it reads {v:.4g})"


_KL_TARGET = {
    "probabilities": "; the target stays probabilities",
    "log-probabilities": "; log_target=True reads the target as log-probabilities already",
    "log-probabilities read as probabilities":
        "; the target holds log-probabilities, which kl_div reads as probabilities "
        "(arguments swapped?): pass log_target=True with a target of log-probabilities"}


def not_log_probs(run: Run) -> list[Finding]:
    out = []
    recs = [r for r in run.not_log_probs if not r.get("normalised")]
    for group in _groups(recs, "fn", "kind").values():
        first = group[0]
        fn, kind = str(first["fn"]), str(first["kind"])
        steps = sorted({int(r["step"]) for r in group})
        shape, classes = _shape(first.get("shape", [])), int(first.get("classes", 0))
        dim = int(first.get("dim", 1))
        dim_s = "-1" if dim == len(first.get("shape", [])) - 1 and dim > 1 else str(dim)
        never = {"nll_loss": "nll_loss on log-probabilities",
                 "ctc_loss": "CTC on log-probabilities"}.get(fn, "a KL divergence")
        its = " as its input" if fn == "kl_div" else ""
        if kind == "probabilities":
            summing = (f", each row of its {classes} classes summing to 1"
                       if float(first.get("row_sum_error", 1.0)) <= 2e-2 else
                       f", over {classes} classes")
            said = (f"probabilities{its} (shape "
                    f"{shape}, values in [{first['min']:.3g}, {first['max']:.3g}]{summing})")
            if fn == "ctc_loss":
                does = ("ctc_loss takes log-probabilities (T, N, C): on probabilities it "
                        "sums exp(p) over the alignments, another quantity" +
                        _reads(first, never) + ", and its backward is the gradient of "
                        "log-softmaxed input, not of that loss")
                fix = f"pass logits.log_softmax({dim_s}) in place of the softmax"
            elif fn == "nll_loss":
                does = ("nll_loss takes log-probabilities: on probabilities it computes -p, "
                        "not -log p" + _reads(first, never))
                fix = ("pass torch.log(probs) (probs.clamp_min(1e-12).log()), or the logits to "
                       "F.cross_entropy")
            else:
                does = ("kl_div takes log-probabilities as its input and computes sum target * "
                        "(log target - input): on probabilities that is no divergence"
                        + _reads(first, never) + ", and the model trains toward another "
                        "quantity")
                fix = (f"pass log-probabilities as the input: torch.log_softmax(logits, "
                       f"{dim_s}) (or torch.log(probs) if only the probabilities exist)"
                       + _KL_TARGET.get(str(first.get("target", "")), ""))
        else:
            said = (f"values that are no log-probabilities{its} (shape {shape}: over its "
                    f"{classes} classes the rows' logsumexp ranges over "
                    f"[{first['lse_min']:.3g}, {first['lse_max']:.3g}], not 0, and values "
                    f"reach {first['max']:.3g}, where log-probabilities are <= 0)")
            if fn == "ctc_loss":
                does = ("ctc_loss takes log-probabilities (T, N, C) and returns -log of a sum "
                        "over the alignments of exp(the summed values), so on logits it "
                        "is no likelihood" + _reads(first, never) + ", and its backward is "
                        "the gradient of log-softmaxed input, not of that loss")
                fix = (f"pass logits.log_softmax({dim_s}) (as a CTC head does before the "
                       "loss)")
            elif fn == "nll_loss":
                does = ("nll_loss takes log-probabilities and returns minus the target's "
                        "value, so on logits it is unbounded below and training drives the "
                        "targets' logits to +inf" + _reads(first, never))
                fix = "pass torch.log_softmax(logits, 1), or the logits to F.cross_entropy"
            else:
                does = ("kl_div computes sum target * (log target - input), linear in the "
                        "input, so on logits it is unbounded below" + _reads(first, never))
                fix = (f"pass torch.log_softmax(logits, {dim_s}) as the input"
                       + _KL_TARGET.get(str(first.get("target", "")), ""))
        out.append(Finding(
            check="not_log_probs", severity="error", where=where(first),
            message=(f"{_called(first)} was given {said} in {steps_named(steps)}: {does}; "
                     f"{fix}"),
            evidence={"loss": fn, "module": first.get("module", ""), "kind": kind,
                      "steps": steps, "calls": len(group),
                      **{k: first[k] for k in ("shape", "classes", "rows", "lse_min",
                                               "lse_max", "min", "max", "row_sum_error",
                                               "value", "target", "log_target")
                         if first.get(k) not in (None, "")}}))
    return out


def kl_div_mean(run: Run) -> list[Finding]:
    out = []
    for group in _groups(run.kl_div_means).values():
        first = group[0]
        steps = sorted({int(r["step"]) for r in group})
        n, batch = int(first["elements"]), int(first["batch"])
        ratio = n / max(1, batch)
        ratio_s = f"{ratio:.0f}" if ratio == int(ratio) else f"{ratio:.3g}"
        reads = (f": it reads {first['value']:.4g}, 1/{ratio_s} of the "
                 f"{first['batchmean']:.4g} that 'batchmean' gives" if "batchmean" in first
                 else "")
        out.append(Finding(
            check="kl_div_mean", severity="warning", where=where(first),
            message=(f"{_called(first)} with reduction='mean' divided the summed KL by all "
                     f"{n} elements of its input (shape {_shape(first.get('shape', []))}), "
                     f"not by the batch's {batch}, in {steps_named(steps)}{reads}, so its "
                     f"gradient is {ratio_s}x smaller against any other term; pass "
                     "reduction='batchmean' ('mean' is no KL divergence: torch's docs)"),
            evidence={"loss": "kl_div", "module": first.get("module", ""),
                      "steps": steps, "calls": len(group),
                      **{k: first[k] for k in ("shape", "classes", "elements", "batch",
                                               "value", "batchmean", "target")
                         if first.get(k) not in (None, "")}}))
    return out
