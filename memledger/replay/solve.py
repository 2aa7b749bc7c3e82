"""Exact choice of one option per block under a peak budget. Pure numpy, no torch.

    choice, cost = solve(delta, cost, cap)      # None, inf when nothing fits

Input: `delta[b, o, s]` (int64 bytes): what option o of block b adds to the live bytes at
slot s; `cost[b, o]`: its added time; `cap[s]`: the bytes slot s may still take. Find the
assignment o_b minimising Σ cost[b, o_b] with Σ_b delta[b, o_b, s] <= cap[s] at every slot.

# Note [Exact block choice]
0. Runs of slots shrink to one column each (`reduce_runs`, once per ledger): along the
   slot axis, consecutive slots where at most one block's rows change, k, are one
   constraint, Σ_{b != k} delta[b, o_b] + max_s (delta[k, o_k, s] + base[s]) <= budget;
   with no block changing, the highest base of the run is what counts. A 48-block GPT's
   63,766 slots become 191 columns.
1. Columns shrink without changing the answer. A slot where every block's row is zero is a
   constant check (cap >= 0). Slots whose rows agree on every block but one, k, are one
   constraint: Σ_{b != k} delta[b, o_b] + max_s (delta[k, o_k, s] - cap[s]) <= 0. Blocks'
   effects nest in time (block k's recompute happens while blocks < k hold what they hold
   and blocks > k are done), so a 4-block GPT's ~9,000 slots become a few dozen columns.
   Rows are compared by hashes (int64 arithmetic, exact modulo 2^64, then equality is
   re-checked on the merged group's representative).
2. Exhaustive when options ** blocks <= EXHAUSTIVE_MAX: every assignment is scored at once.
3. Beyond, dynamic programming over blocks in order. A state is the partial sum vector on
   the columns some later block still touches, and its cost. A column that no later block
   touches is checked and dropped; a state that cannot fit even with every later block at
   its smallest delta is dropped; a state with another at no more cost and no more bytes on
   every open column is dropped (it can never do better). What is left is exact.
   Example: 48 identical blocks, options none / checkpoint / offload / selective: the open
   columns after block k carry Σ_{b<k} delta_b on every one of them, so states differ only
   by that sum and the front stays at a few hundred states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXHAUSTIVE_MAX = 4_096


@dataclass
class Steps:
    """One block's rows (options, slots) as steps: rows[:, s] = val[:, i] for
    pos[i] <= s < pos[i + 1] (pos[0] == 0). A 48-block GPT's rows change at a few hundred
    of its 63,766 slots, so the table never holds blocks x options x slots (147 MB)."""

    pos: np.ndarray    # int64, increasing, starts at 0
    val: np.ndarray    # int64 (options, len(pos))

    @classmethod
    def of(cls, rows: np.ndarray) -> "Steps":
        rows = np.asarray(rows, dtype=np.int64)
        pos = np.r_[0, np.flatnonzero((rows[:, 1:] != rows[:, :-1]).any(axis=0)) + 1]
        return cls(pos=pos.astype(np.int64), val=rows[:, pos])

    def at(self, slots: np.ndarray) -> np.ndarray:
        """The rows at the given slots: (options, len(slots))."""
        return self.val[:, np.searchsorted(self.pos, slots, side="right") - 1]


def reduce_runs(delta: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(delta', floor') with one column per run (Note rule 0): the budget check at run r is
    Σ_b delta'[b, o_b, r] + floor'[r] <= budget (workspace aside)."""
    delta = np.asarray(delta, dtype=np.int64)
    if not delta.shape[2]:
        return delta, np.rint(np.asarray(base, dtype=np.float64)).astype(np.int64)
    return reduce_steps([Steps.of(d) for d in delta], base)


def reduce_steps(blocks: list[Steps], base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """reduce_runs of the blocks' rows given as steps."""
    base = np.rint(np.asarray(base, dtype=np.float64)).astype(np.int64)
    nb, ns = len(blocks), len(base)
    no = blocks[0].val.shape[0] if blocks else 0
    nv, which = np.zeros(ns, dtype=np.int64), np.zeros(ns, dtype=np.int64)
    for b, st in enumerate(blocks):      # which block changes at each slot (where only one)
        nv[st.pos[1:]] += 1
        which[st.pos[1:]] = b
    starts, vary = [0], [-1]
    for s in np.flatnonzero(nv).tolist():
        if s and nv[s] == 1 and vary[-1] in (-1, which[s]):
            vary[-1] = int(which[s])
        elif s:
            starts.append(s)
            vary.append(-1)
    starts_a = np.array(starts, dtype=np.int64)
    vary_a = np.array(vary, dtype=np.int64)
    out = np.empty((nb, no, len(starts)), dtype=np.int64)
    for b, st in enumerate(blocks):
        out[b] = st.at(starts_a)
    floor = np.maximum.reduceat(base, starts_a)
    for k in np.unique(vary_a[vary_a >= 0]).tolist():
        # the pieces of block k's runs: each holds k's rows constant, so its highest slot
        # is its row plus the highest base in it
        st, runs = blocks[k], np.flatnonzero(vary_a == k)
        ends = np.r_[starts_a[1:], ns][runs]
        inside = st.pos[np.isin(np.searchsorted(starts_a, st.pos, side="right") - 1, runs)]
        cut = np.unique(np.r_[starts_a[runs], inside, ends])
        cut = cut[cut < ns]
        top = np.maximum.reduceat(base, cut)
        piece = st.at(cut) + top[None, :]
        run_of = np.searchsorted(starts_a, cut, side="right") - 1
        mine = vary_a[run_of] == k
        first = np.searchsorted(cut[mine], starts_a[runs])     # pieces are in run order
        out[k][:, runs] = np.maximum.reduceat(piece[:, mine], first, axis=1)
        floor[runs] = 0
    return out, floor


def reduce_columns(delta: np.ndarray, cap: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(delta', cap', feasible_at_all): equivalent, fewer columns (Note rule 1)."""
    delta = np.asarray(delta, dtype=np.int64)
    cap = np.asarray(cap, dtype=np.int64)
    nb, no, ns = delta.shape
    touched = (delta != 0).any(axis=(0, 1))
    if (cap[~touched] < 0).any():
        return delta[:, :, :0], cap[:0], False
    delta, cap = delta[:, :, touched], cap[touched]
    rng = np.random.default_rng(12345)
    for k in range(nb):
        if not delta.shape[2]:
            break
        weights = rng.integers(1, 2**62, size=(nb, no), dtype=np.int64)
        weights[k] = 0                              # hash every block but k
        with np.errstate(over="ignore"):
            key = np.einsum("bos,bo->s", delta, weights)
        _, group = np.unique(key, return_inverse=True)
        if group.max() + 1 == delta.shape[2]:
            continue
        reps = np.unique(group, return_index=True)[1]
        new = delta[:, :, reps].copy()
        slack = delta[k] - cap[None, :]             # (options, slots)
        worst = np.full((no, len(reps)), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(worst.T, group, slack.T)
        # exactness: the other blocks' rows must truly agree within each group
        others = np.delete(delta, k, axis=0)
        if not (others == np.delete(new, k, axis=0)[:, :, group]).all():
            continue                                 # a hash collision: skip this merge
        new[k] = worst
        delta, cap = new, np.zeros(len(reps), dtype=np.int64)
    return delta, cap, True


def solve(delta: np.ndarray, cost: np.ndarray, cap: np.ndarray,
          allowed: np.ndarray | None = None, method: str | None = None,
          merge: bool = True, stats: dict | None = None) -> tuple[np.ndarray | None, float]:
    """The cheapest assignment (options per block) that fits, and its cost. `allowed`:
    (blocks, options) mask; `method`: "exhaustive" | "dp" (default: by size); `merge`:
    apply rule 1 (off when the columns are already `reduce_runs`'s few); `stats`: filled
    with the work done (columns searched, method, most DP states kept after a block)."""
    stats = {} if stats is None else stats
    cost = np.asarray(cost, dtype=np.float64)
    if allowed is not None:
        cost = np.where(allowed, cost, np.inf)
    if merge:
        d, c, ok = reduce_columns(delta, cap)
    else:
        d, c = np.asarray(delta, dtype=np.int64), np.asarray(cap, dtype=np.int64)
        ok = True
    if not ok:
        return None, float("inf")
    nb, no = cost.shape
    stats["columns"] = int(d.shape[2])
    if method == "exhaustive" or (method is None and no ** nb <= EXHAUSTIVE_MAX):
        stats["method"] = "exhaustive"
        return _exhaustive(d, cost, c)
    stats["method"] = "dp"
    # Note [Blocks in the order they run]
    order = np.argsort(_first_column(d), kind="stable")
    choice, total = _dp(d[order], cost[order], c, stats)
    if choice is None:
        return None, total
    out = np.empty_like(choice)
    out[order] = choice
    return out, total


# Note [Blocks in the order they run]
# The DP keeps, after each block, the states no other beats on cost and on every column
# a later block still changes (the open columns). Blocks come in plan's order, the stacks
# one after another (Note [Stacks beside the blocks]), not in the order they run: where
# that order jumps about in time, nearly every column stays open to the last block and
# the front grows with each one. On hourglass-transformer-pytorch's nested hourglass
# (tests/clients/train_hourglass.py --batch 16, 1 step), whose 28 blocks plan lists as
# `post_transformer`'s, then `pre_transformer`'s, then the valley's, `plan --budget
# 740KiB` ran past 10 minutes in `_pareto`. Searched in the order of the first column
# each block changes (an exact search in any order: the answer is the same), the columns
# close as the blocks pass and the same plan takes 4 s; the answer comes back in plan's
# order.
def _first_column(d: np.ndarray) -> np.ndarray:
    """Per block, the first column any of its options changes (its columns' count where
    none does)."""
    touches = (d != 0).any(axis=1)
    return np.where(touches.any(axis=1), np.argmax(touches, axis=1), d.shape[2])


def _exhaustive(d: np.ndarray, cost: np.ndarray, cap: np.ndarray):
    nb, no = cost.shape
    combos = np.indices((no,) * nb).reshape(nb, -1).T          # (no**nb, nb)
    total = cost[np.arange(nb), combos].sum(axis=1)
    load = np.zeros((len(combos), d.shape[2]), dtype=np.int64)
    for b in range(nb):
        load += d[b][combos[:, b]]
    fits = (load <= cap[None, :]).all(axis=1) & np.isfinite(total)
    if not fits.any():
        return None, float("inf")
    ok = np.flatnonzero(fits)
    best = ok[_cheapest_then_lowest(total[ok], (load[ok] - cap[None, :]).max(axis=1))]
    return combos[best].copy(), float(total[best])


def _cheapest_then_lowest(total: np.ndarray, over: np.ndarray) -> int:
    """Index of the cheapest; among equal costs (identical blocks offloaded at [0-2] or
    [1-3]: the same sum to the last bit, or to summation order) the one whose highest
    column sits lowest under its cap, which is the lower peak (peak = budget + over).
    The tolerance is on the cost's size: a policy the cost model prices below the baseline
    (a negative added time, -0.2 ms on poutyne's `fit` ledger) made `min * (1 + 1e-12)`
    lie below the minimum itself, no cost was a tie, and `plan` failed (exit 70)."""
    least = total.min()
    tie = total <= least + abs(least) * 1e-12 + 1e-18
    cand = np.flatnonzero(tie)
    return int(cand[np.argmin(over[cand])])


def _dp(d: np.ndarray, cost: np.ndarray, cap: np.ndarray, stats: dict):
    nb, no, ns = d.shape
    touches = (d != 0).any(axis=1)                             # (blocks, cols)
    last = np.where(touches.any(axis=0), nb - 1 - np.argmax(touches[::-1], axis=0), -1)
    # the least any later blocks can add, per column: for the feasibility bound
    finite = np.isfinite(cost)
    mins = np.where(finite[:, :, None], d, np.iinfo(np.int64).max).min(axis=1)
    future = np.concatenate([np.cumsum(mins[::-1], axis=0)[::-1],
                             np.zeros((1, ns), dtype=np.int64)])
    vec = np.zeros((1, ns), dtype=np.int64)
    tot = np.zeros(1)
    paths = np.zeros((1, 0), dtype=np.int64)
    for b in range(nb):
        opts = np.flatnonzero(finite[b])
        vec = (vec[:, None, :] + d[b][opts][None, :, :]).reshape(-1, ns)
        tot = (tot[:, None] + cost[b, opts][None, :]).reshape(-1)
        paths = np.concatenate([np.repeat(paths, len(opts), axis=0),
                                np.tile(opts, len(paths))[:, None]], axis=1)
        ok = ((vec + future[b + 1]) <= cap).all(axis=1)
        vec, tot, paths = vec[ok], tot[ok], paths[ok]
        if not len(tot):
            return None, float("inf")
        open_cols = last > b
        # how far the closed columns sit under their caps: breaks ties in cost toward the
        # lower peak (they can no longer change, so it is final for the state)
        closed = (vec[:, ~open_cols] - cap[None, ~open_cols]).max(axis=1) \
            if (~open_cols).any() else np.zeros(len(tot), dtype=np.int64)
        vec, tot, paths = _pareto(vec, tot, paths, open_cols, closed)
        stats["max_states"] = max(stats.get("max_states", 0), len(tot))
    best = _cheapest_then_lowest(tot, (vec - cap[None, :]).max(axis=1))
    return paths[best], float(tot[best])


def _pareto_1d(v0: np.ndarray, vec: np.ndarray, tot: np.ndarray, paths: np.ndarray,
               closed: np.ndarray):
    """Every open column carries the same partial sum plus a constant (blocks nest): one
    number per state, so the front is a sort and a sweep."""
    order = np.lexsort((closed, tot, v0))
    t = tot[order]
    best_before = np.minimum.accumulate(np.r_[np.inf, t[:-1]])
    keep = order[t < best_before]
    return vec[keep], tot[keep], paths[keep]


def _pareto(vec: np.ndarray, tot: np.ndarray, paths: np.ndarray, open_cols: np.ndarray,
            closed: np.ndarray):
    """Drop states another state beats on cost and on every open column; among equal costs
    the one whose closed columns sit lower (`closed`) comes first, so it is the one kept."""
    v = vec[:, open_cols]
    if v.shape[1] and len(v) > 1 and (v - v[:, :1] == (v[0] - v[0, 0])[None, :]).all():
        return _pareto_1d(v[:, 0], vec, tot, paths, closed)
    order = np.lexsort((closed, tot, *v.T[::-1])) if v.shape[1] else np.lexsort((closed, tot))
    v, vec, tot, paths, closed = v[order], vec[order], tot[order], paths[order], closed[order]
    if not v.shape[1]:
        return vec[:1], tot[:1], paths[:1]
    # identical open vectors: keep the cheapest (first after the sort)
    same = np.r_[False, (v[1:] == v[:-1]).all(axis=1)]
    keep = ~same
    v, vec, tot, paths = v[keep], vec[keep], tot[keep], paths[keep]
    closed = closed[keep]
    by_cost = np.lexsort((closed, tot))
    kept: list[int] = []
    for i in by_cost:
        if kept:
            kv = v[kept]
            if (kv <= v[i]).all(axis=1).any():
                continue
        kept.append(int(i))
    kept_arr = np.array(kept, dtype=np.int64)
    return vec[kept_arr], tot[kept_arr], paths[kept_arr]
