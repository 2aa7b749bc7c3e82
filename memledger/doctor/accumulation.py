"""Check 4: gradient accumulation and the token denominator (the transformers#34191 class).

With K backward passes per optimizer step, each on a loss that is a *mean* over its own
micro-batch's valid tokens (targets != ignore_index), a token in micro-batch k weighs
1 / (K · n_k) in the update instead of 1 / Σ n. Example: K=2, n = (30, 10): tokens of the
second micro-batch weigh 1/20 against 1/60 for the first, 3.0× as much; the right weight
is 1/40 for every token (relative weights 40/60 = 0.67 and 40/20 = 2.0).
"""

from __future__ import annotations

import math

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, steps_named, where

REL = 1e-6   # "the same value": backward on the loss itself, not on loss / K


def _micro_batches(run: Run) -> list[tuple[dict, list[dict]]]:
    by_n = {b["n"]: b for b in run.backwards}
    out = []
    for st in run.steps:
        bws = [by_n[n] for n in st["bw"] if n in by_n]
        # backward passes through one forward (a head each on a shared trunk, with
        # retain_graph) sum one objective's parts, not micro-batches (Note [Backward passes
        # of one forward] in memledger/trace/doctor_probe.py)
        if len(bws) >= 2 and not any("shares" in b for b in bws):
            out.append((st, bws))
    return out


# Note [A loss reduced after the call]
# Check 4 compares the value backward ran on with the loss function's: equal, the loss was
# not divided by K. A loss called with `reduction='none'` and reduced by the script (or a
# library: hl-gauss-pytorch's `HLGaussLoss` runs `F.cross_entropy(logits, soft_targets,
# reduction='none')` and then its own `masked_reduce`, a `.mean()` without a mask; per-sample
# losses reduced by hand, `F.mse_loss(p, y, reduction='none').mean()`) has no one value,
# and the check skipped every such loop: `--bug no-divide` of tests/clients/
# train_hl_gauss.py (K = 2, each backward on the full mean, 3.4693 and 3.4686) drew
# nothing. The probe now records the mean of such an output (`mean`, one reduction of a
# tensor the loss made anyway), and a pass whose backward value is that mean is the
# undivided loss; one on mean / K is divided (a D for Note [A step short of
# micro-batches]). A sum of the elements, a weighted or masked mean, or anything else the
# script makes of them equals neither, and is read as before: no finding.
def _loss_value(loss: dict) -> float | None:
    """The loss function's value: its own (a reduced loss), or the mean of its elements
    where it reduced nothing (Note [A loss reduced after the call])."""
    if loss.get("value") is not None:
        return loss["value"]
    return loss.get("mean") if loss.get("reduction") == "none" else None


def token_denominator(run: Run) -> list[Finding]:
    hits = []
    for st, bws in _micro_batches(run):
        losses = [b["losses"] for b in bws]
        if not all(len(ls) == 1 and ls[0].get("reduction") == "mean" and "valid" in ls[0]
                   for ls in losses):
            continue
        counts = [int(ls[0]["valid"]) for ls in losses]
        if len(set(counts)) > 1 and min(counts) > 0:
            hits.append((st, counts, losses[0][0]))
    if not hits:
        return []
    st, counts, loss = hits[0]
    k, total = len(counts), sum(counts)
    ratio = max(counts) / min(counts)
    rel = [round(total / (k * n), 4) for n in counts]
    return [Finding(
        check="token_denominator", severity="warning", where=where(loss),
        message=(f"{k} backward passes per optimizer step, each a mean over a different number "
                 f"of valid tokens {counts} ({steps_named(h[0]['step'] for h in hits)}): "
                 "a token of "
                 f"the micro-batch with {min(counts)} weighs {ratio:.2f}x one of the micro-batch "
                 f"with {max(counts)}; use reduction='sum' and divide by the step's {total} "
                 "valid tokens"),
        evidence={"micro_batches": k, "tokens": counts, "total_tokens": total,
                  "weight_ratio": round(ratio, 4), "relative_weights": rel,
                  "steps": sorted(h[0]["step"] for h in hits)})]


def loss_not_divided(run: Run) -> list[Finding]:
    hits, weighed = [], []
    for st, bws in _micro_batches(run):
        if len({(b["file"], b["line"]) for b in bws}) != 1:
            continue   # different backward lines: several objectives, not accumulation
        losses = [x for b in bws for x in b["losses"]]
        if not all(b["losses"] for b in bws) or \
                len({(x["file"], x["line"]) for x in losses}) != 1:
            continue
        if any(x.get("reduction") == "sum" for x in losses):
            continue   # summed over samples: K sums add up to the step's sum, as one batch's
        if all(len(b["losses"]) == 1 and b.get("value") is not None
               and _loss_value(b["losses"][0]) is not None for b in bws) and \
                all(abs(b["value"] - _loss_value(b["losses"][0])) <= REL * max(1.0, abs(b["value"]))
                    for b in bws):
            hits.append((st, bws))
            continue
        k = _whole_means(bws)   # Note [Passes that weigh whole means]
        if k is not None:
            weighed.append((st, bws, k))
    if hits:
        st, bws = hits[0]
        k = len(bws)
        return [Finding(
            check="loss_not_divided", severity="warning", where=where(bws[0]),
            message=(f"{k} backward passes per optimizer step on the undivided loss ("
                     f"{steps_named(h[0]['step'] for h in hits)}): the gradient is the sum of "
                     f"{k} micro-batch means, {k}x their mean; backward on loss / {k}"),
            evidence={"micro_batches": k,
                      "loss_values": [_loss_value(b["losses"][0]) for b in bws],
                      "backward_values": [b["value"] for b in bws],
                      "steps": sorted(h[0]["step"] for h in hits)})]
    if not weighed:
        return []
    st, bws, k = weighed[0]
    weights = [round(_weight(b), 4) for b in bws]
    runs = f"in {k} runs of passes, " if len(bws) > k else ""
    heads = len(bws[0]["losses"]) if _heads(bws) else 0   # Note [Heads weighed each]
    weighs = (f"each of a pass's {heads} losses (heads) weighs 1 in each; the gradient is "
              f"the sum of {k} micro-batch means of each head" if heads else
              f"{runs}the weights backward gave their loss elements sum to 1 in each; the "
              f"gradient is the sum of {k} micro-batch means")
    evidence = {"micro_batches": k, "backward_passes": len(bws), "loss_weights": weights,
                "steps": sorted(w[0]["step"] for w in weighed)}
    if heads:
        evidence["heads"] = heads
    return [Finding(
        check="loss_not_divided", severity="warning", where=where(bws[0]),
        message=(f"{len(bws)} backward passes per optimizer step "
                 f"({steps_named(w[0]['step'] for w in weighed)}) backpropagate {k} whole "
                 f"means: {weighs}, {k}x their mean; scale each micro-batch's loss by 1/{k} "
                 "before its backward"),
        evidence=evidence)]


# Note [Passes that weigh whole means]
# Read where a pass's value says nothing of its loss (several losses in one pass, a
# reduction='none' loss reduced by hand): each loss carries the `weight` a backward gave
# it (Note [What a backward weighs a loss by] in trace/doctor_probe.py: the sum over its
# elements of d(root)/d(element)). A step's passes (one backward line, one loss line, no
# summed reduction, none sharing a forward) weigh whole means when their weights add up
# to a whole number K >= 2 and, in order, fall into K runs of weight 1 each (the running
# sum passes through 1, 2, ..., K): K micro-batches, each backpropagated as a whole
# mean, none divided. infini-transformer-pytorch's wrapper without `grad_accum_scale`,
# 2 calls a step of 3 segments, a backward every 2: passes of 2/3, 1/3, 2/3, 1/3
# (running 2/3, 1, 5/3, 2: K = 2); with the scale 1/3, 1/6, 1/3, 1/6 (total 1: no
# finding); one call a step, truncated backpropagation through time, 2/3 and 1/3
# (total 1). A loss computed beside the backward (logged, never backpropagated) has no
# weight, and the step is not read. Passes of several losses alike, heads, are read head
# by head (Note [Heads weighed each]: two heads' means summed weigh 2 a pass undivided,
# 1 divided at K = 2). Otherwise a pass with two losses on one target tensor (the same
# storage, offset and shape) is not read: heads of one batch; a segment's targets are a
# slice of their own. Known limitation: one loss doubled (2 a pass) is no run of 1.
_RUN = 1e-3   # relative: weights are float32 gradient sums


def _weight(b: dict) -> float:
    return sum(float(x["weight"]) for x in b["losses"])


def _whole_means(bws: list[dict]) -> int | None:
    """K where the passes weigh their losses as K >= 2 whole means in K runs (Note [Passes
    that weigh whole means]); None otherwise."""
    if any(x.get("weight") is None for b in bws for x in b["losses"]):
        return None
    if _heads(bws):   # Note [Heads weighed each]
        ks = {_runs([float(b["losses"][j]["weight"]) for b in bws])
              for j in range(len(bws[0]["losses"]))}
        return ks.pop() if len(ks) == 1 else None
    for b in bws:   # two losses on one target tensor: heads of one batch, not its parts
        keys = [str(x["target"]) for x in b["losses"] if x.get("target")]
        if len(keys) != len(set(keys)):
            return None
    return _runs([_weight(b) for b in bws])


# Note [Heads weighed each]
# A model with several heads sums their losses into one a pass: `loss = F.mse_loss(a, x) +
# F.mse_loss(b, y)`, each head's mean on targets of its own. With K micro-batches a step
# each head's mean should weigh 1/K in each pass (Note [What a backward weighs a loss by]
# in trace/doctor_probe.py: the weight is what backward gave the loss's elements, summed),
# so that over the step each head weighs 1. Summed over the pass, as the rule above reads
# it, two heads divided by K = 2 weigh 1 a pass, read as "2 whole means" (a false
# warning on the correct loop, tests/doctor/two_heads.py), and undivided 2 a pass, no run
# of 1, read as nothing (the bug, `--bug`, unseen). Where every pass of the step holds the
# same number n >= 2 of losses, all weighed alike within the pass, and no two of a pass
# are parts of one tensor (targets in one storage at different offsets or shapes: a
# sequence's segments, whose shares of it differ, Note [Passes that weigh whole means]),
# the losses are heads: each head's weights, pass by pass, must fall into K runs of 1 by
# the rule above, the same K for every head. Two heads divided: 1/2, 1/2 a head (total 1:
# no finding); undivided: 1, 1 a head, 2 whole means, as a one-loss loop's. Heads on one
# target tensor (deep supervision: tests/doctor/helper_accum.py --heads) are read so too.
# A sequence's segments with targets of their own (not slices of one tensor): Note
# [Segments are no heads].
def _heads(bws: list[dict]) -> bool:
    """Every pass holds the same number (2 or more) of losses, weighed alike, none two
    parts of one tensor, nor two segments (Note [Heads weighed each], Note [Segments are
    no heads])."""
    n = len(bws[0]["losses"])
    if n < 2 or any(len(b["losses"]) != n for b in bws):
        return False
    for b in bws:
        ws = [float(x["weight"]) for x in b["losses"]]
        if max(ws) - min(ws) > _RUN * max(abs(w) for w in ws):
            return False
        where: dict[int, str] = {}
        for x in b["losses"]:
            t = x.get("target")
            if not t:
                continue
            if where.setdefault(t[0], str(t)) != str(t):
                return False   # one storage, another offset or shape: a part of it
        if _segments(b["losses"]):
            return False
    return True


# Note [Segments are no heads]
# Note [Heads weighed each] told a sequence's segments from heads by their targets alone:
# slices of one tensor are segments. A loop that runs its model over a sequence segment
# by segment, the state carried, with each segment's targets a tensor of its own (a list
# the loader gives, a shift computed per segment) and the sequence's loss the mean of
# the segments' (each weighed 1/S), read as S heads: tests/doctor/segments.py, 2
# segments, 2 sequences a step, undivided (`--bug`): each "head" weighed 1/2 and 1/2, a
# total of 1, no run to find, and the doctor said nothing of a gradient twice the mean.
# What tells them apart is what made the predictions: heads are the outputs of different
# modules (`heads[0](h)`, `heads[1](h)`), or parts of one output of one call (`out[:,
# 0]`, `out[:, 1:]`); a segment's prediction is made by the module that made the
# previous segment's, called again on the next part. The probe notes, on the graph node
# that made a training module's output, the module and the call's number (the last
# module to return it: the outermost that returns that tensor), and each loss records
# the call that made its prediction (through value-preserving ops: `model(x).transpose(1,
# 2)`). Two losses of a pass whose predictions one module made in two calls, on targets
# that are not one tensor, are segments: the pass is read whole (its weights summed, as
# infini's), where undivided 2 segments of 1/2 each weigh 1 a pass: "2 whole means".
# Two views of one batch by one model on one target tensor (a consistency loss) stay
# heads. Known limitation: two inputs run through one model with targets of their own
# and a loss each (a siamese pair trained on both) read as segments; divided by K = 2
# their pass weighs 1, "2 whole means". Cost: one metadata write per training module
# call returning a tensor; a walk of a few nodes per loss.
def _segments(losses: list[dict]) -> bool:
    """Two of the losses' predictions were made by one module in two calls, on targets
    that are not one tensor (Note [Segments are no heads])."""
    calls: dict[int, tuple[int, str]] = {}
    for x in losses:
        made = x.get("made")
        if not made:
            continue
        target = str(x.get("target"))
        seen = calls.setdefault(made[0], (made[1], target))
        if seen[0] != made[1] and (seen[1] != target or not x.get("target")):
            return True
    return False


def _runs(weights: list[float]) -> int | None:
    """K >= 2 where `weights`, in order, fall into K runs of 1 each (Note [Passes that
    weigh whole means]); None otherwise."""
    if any(not math.isfinite(w) or w <= 0 for w in weights):
        return None
    total = sum(weights)
    k = round(total)
    if k < 2 or abs(total - k) > _RUN * k:
        return None
    ran, hit = 0.0, set()
    for w in weights:
        ran += w
        j = round(ran)
        if abs(ran - j) <= _RUN * max(1, j):
            hit.add(j)
    return k if hit >= set(range(1, k + 1)) else None


# Note [A step short of micro-batches]
# A loop that accumulates K micro-batches divides each loss by K and steps on every K-th
# backward, and on the last one of the epoch when its micro-batches run out
# (pytorch-accelerated's Trainer: `(step + 1) % K == 0 or step + 1 == len(train_dl)`;
# Lightning and older transformers alike). A last step of k < K micro-batches then sums k
# gradients of loss / K: k/K of the mean gradient, as if K - k micro-batches of zero
# gradient had joined it (K = 2, 5 micro-batches: the third step's update is half the
# mean's, at SGD's learning rate half a step). Told from the probe's values: each backward
# ran on its loss divided by D (the loss function's value / the value backward ran on, a
# whole number >= 2, the same for the step's backward passes, one backward line), a step
# of exactly D such passes ran (so D is the accumulation, not a weight the script puts on
# its loss), and a step of k < D passes with that D. One warning, at the backward line.
_WHOLE = 1e-3   # relative: the loss values are the probe's, rounded


def _divisor(b: dict) -> int | None:
    """D where backward ran on this pass's loss / D (a whole number >= 2), else None."""
    losses = b.get("losses") or []
    if len(losses) != 1 or not b.get("value") or not _loss_value(losses[0]):
        return None
    d = _loss_value(losses[0]) / b["value"]
    if not math.isfinite(d):   # a non-finite loss (nonfinite_grad's) tells no divisor
        return None
    k = round(d)
    return k if k >= 2 and abs(d - k) <= _WHOLE * k else None


def short_accumulation(run: Run) -> list[Finding]:
    by_n = {b["n"]: b for b in run.backwards}
    divided: list[tuple[dict, list[dict], int]] = []   # (step, its passes, D)
    for st in run.steps:
        bws = [by_n[n] for n in st["bw"] if n in by_n]
        if not bws or any("shares" in b for b in bws) or \
                len({(b["file"], b["line"]) for b in bws}) != 1:
            continue
        ds = {_divisor(b) for b in bws}
        if len(ds) == 1 and (d := ds.pop()) is not None:
            divided.append((st, bws, d))
    whole = {d for _, bws, d in divided if len(bws) == d}
    short = [(st, bws, d) for st, bws, d in divided if len(bws) < d and d in whole]
    if not short:
        return []
    st, bws, d = short[0]
    k = len(bws)
    full = sorted(s["step"] for s, b, dd in divided if dd == d and len(b) == d)
    steps = sorted(s["step"] for s, _, _ in short)
    return [Finding(
        check="short_accumulation", severity="warning", where=where(bws[0]),
        message=(f"optimizer.step() in {steps_named(steps)} used {k} backward "
                 f"pass{'es' if k > 1 else ''} on loss / {d}, where "
                 f"{steps_named(full)} used {d} (an accumulation cut short, the epoch's last "
                 f"micro-batches?): the update is {k}/{d} of the mean gradient, as if "
                 f"{d - k} micro-batch{'es' if d - k > 1 else ''} of zero gradient had "
                 f"joined it; divide by the number of backward passes the step takes, or "
                 "leave out the micro-batches past the last whole step"),
        evidence={"micro_batches": k, "divisor": d, "steps": steps, "full_steps": full})]
