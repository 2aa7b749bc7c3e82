"""`unsynced_gradients` and `unaveraged_gradients`: data-parallel gradients that were not
averaged across ranks, told from the ranks' records after the run (no torch).

# Note [Replicas that drift]
Data parallelism (DDP, ZeRO) keeps one replica of the model per rank and holds them equal by
averaging the gradients before every step: DDP's all-reduce in backward. A loop that runs
every micro-batch under `no_sync()` (the last one too), or that skips the all-reduce some
other way, steps each rank on its own rank's gradient: nothing fails, the loss goes down on
every rank, and the replicas drift apart from the first step. One rank alone cannot tell;
the ranks' records can.

At each optimizer step the probe of each rank writes, per replicated trainable parameter,
float64 checksums of the gradient and the weight that step() is about to use (the `replica`
record, memledger/trace/doctor_probe.py). Here the ranks are compared: a parameter whose
weights are equal on every rank (sum and L2 norm within RTOL) and whose gradients are not
entered that step unsynchronised. Averaged gradients are equal on every rank (the all-reduce
hands every rank the same sum: no finding on the correct DDP loops, gloo), so the tolerance
only absorbs a backend that sums in another order per rank. Steps after the first drifted one have unequal
weights, so they are not counted again.

Worked example (tests/clients/train_hf_ranks.py --wrap ddp --accum 2 --bug no-sync-always,
a transformers Llama on 2 ranks): in step 1 all 21 parameter tensors have equal weights on
both ranks and gradients that differ (the largest spread of a gradient's norm between the
ranks is 27.5 % of it): one error, at the `opt.step()` line, on every rank. In step 2 the
weights differ, so nothing more is counted. Without the bug (the last micro-batch synced)
the gradients are equal to the bit: no finding. AdamW's first update is lr x sign(g) per
element, so a small tensor whose gradients have the same signs on every rank can still be
equal a step later and be counted there too (tests/integration/scripts/ddp_accum.py: steps
1 and 2).

`unaveraged_gradients`, the same records read the other way: where the gradients are equal
on every rank (they were reduced), each parameter's gradient is compared with the mean over
the ranks of what each rank's own backward brought it (its fifth checksum, taken by a
tensor hook before any all-reduce). DDP's average gives a ratio of 1; a hand-written
`dist.all_reduce(p.grad)` without `/ world_size` gives N, on every parameter: the update is
N times the data-parallel one (for SGD an N-times learning rate). The median ratio over the
step's parameters decides (a gradient that sums to about zero gives a ratio of noise).
Example (tests/integration/scripts/dist_modes.py `ok`, 2 ranks, SGD): ratio 2.00 in every
step.

`unsynced_gradients` is an error when a DistributedDataParallel module ran (its promise is
equal replicas), a warning otherwise (ranks that train alone on purpose, from one seed, read
the same), whose advice names DDP or an all-reduce, not `no_sync()`: ring-attention-pytorch's
LM on 2 ranks without DDP (tests/clients/train_ring_attention.py `--ring --no-ddp`) was
told to run its last micro-batch outside a `no_sync()` it never had; `unaveraged_gradients` is always an error (the gradients were reduced, wrongly).
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Record
from memledger.units import count

RTOL = 1e-6   # relative, per checksum; averaged gradients agree to the bit on gloo


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-30)


# Note [Replicas a step makes equal again]
# A sharded optimizer keeps the replicas equal without equal gradients. fairscale's
# ShardedDataParallel scales each rank's gradient by 1 / N and reduces it to the one rank
# that owns its parameter (`dist.reduce`, not all-reduce): the other ranks keep their own
# share. Its `OSS` steps each parameter on its owner alone (the inner AdamW holds that
# rank's shard) and broadcasts the updated shards before `step()` returns. The outer step's
# record (the one the probe keeps: an inner optimizer's step inside it is not counted)
# showed 7 of the 15 parameters with equal weights and different gradients on 2 ranks in
# both steps, and the doctor warned that the replicas drift apart, on a correct loop
# (tests/clients/train_fairscale.py --wrap sdp, `memledger doctor --nproc 2`), where every
# weight was equal again as step() returned. So the record also holds each weight's sum
# and norm as step() returns (`after`): a step whose every unsynchronised parameter leaves
# it equal on all ranks, each with a gradient that some rank's reduction changed (on some
# rank `p.grad` is not what that rank's own backward brought it), made the replicas equal
# itself, and is not counted. Under the bug the check is for (DDP's all-reduce skipped)
# each rank writes its own update, and the weights leave apart. A sharded optimizer over
# gradients nobody reduced keeps the weights equal too, but every gradient is still its
# rank's own: still counted, and the finding says each parameter moved on one rank's
# gradient alone. fairscale makes that easy: `opt.zero_grad(set_to_none=True)` (torch 2's
# default) instead of ShardedDataParallel's own `zero_grad` drops the gradients' views of
# its buckets, and from the second step on nothing is reduced (`--bug set-to-none`: step
# 2, all 15 parameters); so does OSS with no reduction at all (`--wrap oss --bug
# no-reduce`: steps 1 and 2).
def _left_equal(recs: list[Record], found: list[int]) -> bool:
    """Whether every parameter in `found` left this step with equal weights on all ranks
    (False when a rank's record has no `after`: a step that never returned)."""
    after = [{int(r[0]): r[1:] for r in rec.get("after", ())} for rec in recs]
    if not all(all(i in a for i in found) for a in after):
        return False
    return all(_close(a[i][k], after[0][i][k]) for i in found for a in after for k in (0, 1))


def _reduced(recs: list[Record], found: list[int]) -> bool:
    """Whether on some rank each parameter in `found` holds a gradient other than the one
    that rank's own backward brought it (its fifth checksum; NaN: no hook saw it)."""
    rows = [{int(r[0]): r[2:] for r in rec["params"]} for rec in recs]
    return all(any(len(row[i]) > 4 and row[i][4] == row[i][4] and
                   not _close(row[i][0], row[i][4]) for row in rows) for i in found)


def unsynced_gradients(by_rank: list[list[Record]]) -> list[Finding]:
    """One finding for the job (the same for every rank), or none. `by_rank[r]`: rank r's
    `replica` records, in the order its steps ran."""
    if len(by_rank) < 2 or not all(by_rank):
        return []
    steps: dict[tuple[int, int], list[Record]] = {}
    for recs in by_rank:
        for rec in recs:
            steps.setdefault((int(rec["opt"]), int(rec["step"])), []).append(rec)
    bad: dict[int, str] = {}
    bad_steps: list[int] = []
    kept_equal = False   # a counted step that left the weights equal (a sharded optimizer's)
    worst, ddp, where = 0.0, False, None
    for (_, step), recs in sorted(steps.items(), key=lambda kv: kv[0][1]):
        if len(recs) != len(by_rank):
            continue   # a step not every rank reached (it stopped early): nothing to compare
        rows = [{int(r[0]): r for r in rec["params"]} for rec in recs]
        common = set(rows[0]).intersection(*rows[1:])
        found = []
        for i in sorted(common):
            vals = [row[i][2:] for row in rows]   # grad sum, grad norm, weight sum, weight norm
            same_weights = all(_close(v[k], vals[0][k]) for v in vals for k in (2, 3))
            same_grads = all(_close(v[k], vals[0][k]) for v in vals for k in (0, 1))
            if same_weights and not same_grads:
                found.append(i)
        if found and _left_equal(recs, found):   # Note [Replicas a step makes equal again]
            if _reduced(recs, found):
                found = []
            else:
                kept_equal = True
        for i in found:
            norms = [row[i][3] for row in rows]
            worst = max(worst, (max(norms) - min(norms)) / max(max(norms), 1e-30))
            bad.setdefault(i, str(rows[0][i][1]))
        if found:
            bad_steps.append(step)
            ddp = ddp or any(rec.get("ddp") for rec in recs)
            if where is None:
                where = Where(file=str(recs[0].get("file", "")), line=int(recs[0].get("line", 0)))
    if not bad:
        return []
    names = sorted(bad.values())
    shown = ", ".join(f"`{n}`" for n in names[:3]) + (
        f" and {len(names) - 3} more" if len(names) > 3 else "")
    step_text = (f"step {bad_steps[0]}" if len(bad_steps) == 1
                 else f"steps {', '.join(map(str, bad_steps))}")
    return [Finding(
        check="unsynced_gradients", severity="error" if ddp else "warning",
        message=(f"{count(len(names), 'trainable parameter')} ({shown}) entered "
                 f"optimizer.step() in {step_text} with equal weights on all "
                 f"{len(by_rank)} ranks but different gradients: they were not averaged "
                 "across ranks (" + (
                     "DDP's all-reduce skipped: every micro-batch under no_sync()?), so each "
                     "rank steps on its own gradient and the replicas drift apart; run the "
                     "last micro-batch of each step outside no_sync()" if ddp else
                     # Note [Replicas that drift]: no DDP module ran, so no no_sync() to name
                     "no DistributedDataParallel module ran), so each rank steps on its own "
                     "gradient and the replicas drift apart; if they are replicas, wrap the "
                     "model in DDP or average the gradients before step() (dist.all_reduce "
                     "and / world_size)")) if not kept_equal else
                (f"{count(len(names), 'trainable parameter')} ({shown}) entered "
                 f"optimizer.step() in {step_text} with equal weights on all "
                 f"{len(by_rank)} ranks but different gradients, none reduced across ranks: "
                 "the step kept the weights equal (a "
                 "sharded optimizer broadcasts its update), but each parameter moved on one "
                 "rank's gradient alone; average the gradients before step() "
                 "(ShardedDataParallel, DDP, or dist.all_reduce and / world_size)"),
        evidence={"ranks": len(by_rank), "parameters": len(names), "steps": bad_steps,
                  "max_relative_grad_norm_difference": round(worst, 6),
                  "ddp": ddp},
        where=where or Where())]


SUMMED_RTOL = 0.01   # the median ratio within 1 % of the world size


def unaveraged_gradients(by_rank: list[list[Record]]) -> list[Finding]:
    """Note [Replicas that drift], the other way: gradients reduced by sum, not mean."""
    n = len(by_rank)
    if n < 2 or not all(by_rank):
        return []
    steps: dict[tuple[int, int], list[Record]] = {}
    for recs in by_rank:
        for rec in recs:
            steps.setdefault((int(rec["opt"]), int(rec["step"])), []).append(rec)
    found_steps, names, ratios, where = [], set(), [], None
    for (_, step), recs in sorted(steps.items(), key=lambda kv: kv[0][1]):
        if len(recs) != n:
            continue
        rows = [{int(r[0]): r for r in rec["params"] if len(r) > 6} for rec in recs]
        common = set(rows[0]).intersection(*rows[1:])
        step_ratios = {}
        for i in sorted(common):
            vals = [row[i][2:] for row in rows]
            if not all(_close(v[0], vals[0][0]) and _close(v[1], vals[0][1]) for v in vals):
                continue   # not reduced: unsynced_gradients' case
            local = [v[4] for v in vals]
            if any(x != x for x in local):   # NaN: no hook saw this rank's gradient
                continue
            mean = sum(local) / n
            if abs(mean) <= 1e-9 * max(abs(vals[0][0]), 1e-30):
                continue
            step_ratios[i] = vals[0][0] / mean
        if not step_ratios:
            continue
        median = sorted(step_ratios.values())[len(step_ratios) // 2]
        if abs(median - n) <= SUMMED_RTOL * n:
            found_steps.append(step)
            ratios.append(median)
            names.update(str(rows[0][i][1]) for i in step_ratios)
            if where is None:
                where = Where(file=str(recs[0].get("file", "")), line=int(recs[0].get("line", 0)))
    if not found_steps:
        return []
    shown = sorted(names)
    text = ", ".join(f"`{x}`" for x in shown[:3]) + (
        f" and {len(shown) - 3} more" if len(shown) > 3 else "")
    step_text = (f"step {found_steps[0]}" if len(found_steps) == 1
                 else f"steps {', '.join(map(str, found_steps))}")
    return [Finding(
        check="unaveraged_gradients", severity="error",
        message=(f"the gradients optimizer.step() used in {step_text} ({len(shown)} "
                 f"parameters: {text}) are the sum of the {n} ranks' gradients, not their "
                 f"mean ({max(ratios):.2f}x the mean): reduced without dividing by the world "
                 f"size, so the update is {n}x the data-parallel one; divide the gradients "
                 "(or the loss) by dist.get_world_size(), or let DDP average them"),
        evidence={"ranks": n, "parameters": len(shown), "steps": found_steps,
                  "ratio_to_mean": round(max(ratios), 4)},
        where=where or Where())]
