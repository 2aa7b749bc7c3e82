"""Replay: rewrite the storages' lifetimes as a policy would, then recompute the live curve.

No torch here, and no Python loop over events or storages: each policy costs a handful of
numpy passes over the storage arrays (searchsorted, boolean masks, bincount, cumsum). The
only Python loops run over policy parts.

# Note [Replay of a checkpointed region]
Non-reentrant `torch.utils.checkpoint` (use_reentrant=False, early stop on) on a region R
whose forward call spans events [ev0, ev1):

1. A storage made inside R and saved for backward only by ops inside R (first save >= ev0,
   last save < ev1 - 1; see Rule 5) is *dropped*: autograd holds a placeholder, so the
   storage is freed at its last forward use (`fwdlast` record + 1) instead of in backward.
2. R's inputs stay (checkpoint keeps them to re-run R) until R's backward is done, even
   those autograd saved nothing for (`args` records; see `_hold_call_args`); so does
   everything made outside R.
3. At the first unpack of any dropped storage (event U, in backward) the forward of R is
   re-run *before* event U: its events ev0 .. E-1 are inserted there, where E is one past
   the last dropped storage's save record (early stop: torch raises from its pack hook as
   the last saved tensor is packed again). An op packs its *inputs* before it runs, so an
   input-saving last op is not re-run: on CPU `nn.Dropout` is `x * mask`, the multiply
   saves `mask` and the recompute stops before the multiply, so a block ending in dropout
   does not make its (4, 64, 1024) fp32 output (1,048,576 B) again while recomputing.
   An op packs its *outputs* after it ran (softmax, tanh): the record's event is that op. Dropped storages reappear at U + (created - ev0) and live until
   their original free; the region's temporaries reappear and die as they did in forward.
4. preserve_rng_state keeps the CPU generator state (5056 bytes, `torch.get_rng_state()`)
   from ev0 until R's backward ends; recomputation forks it once more while it runs.
5. Event numbers of saves: autograd saves an op's *inputs* before the op runs, so a save
   record's event is the op before the saving op; a save at ev1 - 1 is the next region's
   first op saving R's output, which R does not own.

Worked example (tiny GPT, B=8, T=64, C=128, fp32; one block, forward events 247..310):
the block saves 14 storages of its own (ln outputs 262,144 B each = 8*64*128*4, the GELU
input and output 1,048,576 B each = 8*64*512*4, attention 524,288 B each = 8*4*64*64*4,
...), 6.3 MiB in all; with `checkpoint:blocks.0` they are freed during the block's forward,
the block input (262,144 B) stays, and before the block's backward starts the 6.3 MiB come
back as the block's forward is re-run.

Selective checkpointing keeps the outputs of its `save` op kinds (they are cached in
forward and handed back during recomputation): those storages keep their lifetime, and one
that was not saved by autograd is held until the recomputation that reuses it.

Offload: a storage saved only inside offloaded regions (and at least `min` bytes) leaves the
device at its last forward use; at its unpack one copy comes back and lives until its
original free (see memledger/measure/offload.py: one copy per storage, not per save),
counted from the storage's first unpack (a ReLU output saved by the ReLU and by the next
MaxPool is read back at the pool's backward already).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from memledger.ledger.schema import CATEGORIES
from memledger.replay.policies import Policy, PolicyKind, resolve
from memledger.replay.calls import save_call, which_call
from memledger.replay.prepared import ACTIVATION, Prepared
from memledger.replay.stateful import refuse_recompute_of_stateful

WORKSPACE = CATEGORIES.index("workspace")
CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state().nbytes: the mt19937 state of the CPU generator

_KIND_CODE = {PolicyKind.CHECKPOINT: 1, PolicyKind.SELECTIVE: 2, PolicyKind.OFFLOAD: 3}


@dataclass
class Replayed:
    """What one policy does to a ledger."""

    policy: Policy
    peak_bytes: int                     # predicted allocator peak (ledger curve + workspace)
    ledger_peak_bytes: int              # predicted peak of tracked storages alone
    peak_event: int                     # in the original numbering (a recompute: its trigger)
    in_recompute: str                   # module whose recomputation holds the peak, or ""
    at_peak: dict[str, int]             # bytes per category at the new peak
    recompute_ns_per_step: float        # traced forward time re-run per step (before scaling)
    recompute_events_per_step: float    # events re-run per step (warm steps)
    recompute_events: int               # events re-run over the whole ledger
    offload_bytes: int                  # bytes written off the device over the whole ledger
    regions: list[str] = field(default_factory=list)
    events: int = 0                     # events of the rewritten stream
    at_probe: dict[str, int] = field(default_factory=dict)  # live per category at `probe`


def replay(prep: Prepared, policy: Policy, rng_bytes: int = CPU_RNG_STATE_BYTES,
           probe: int | None = None) -> Replayed:
    """Predict the live curve of `prep`'s run under `policy`. See Note [Replay of a
    checkpointed region]. `rng_bytes`: device bytes per checkpoint frame (0 on CUDA).
    `probe`: an original event; `Replayed.at_probe` is then the bytes per category live
    right after it in the rewritten stream."""
    regions = resolve(policy, prep.module_table) if policy.parts else []
    by_path = {r.path: r.part for r in regions}
    # ---- the selected forward calls, sorted (they never overlap: regions do not nest) ----
    wanted = np.flatnonzero(np.isin(prep.mod_names, list(by_path)))
    sel = np.isin(prep.scope_code, wanted)
    order = np.argsort(prep.scope_ev0[sel], kind="stable")
    mods = prep.scope_mod[sel][order]
    ev0 = prep.scope_ev0[sel][order]
    ev1 = prep.scope_ev1[sel][order]
    ns = prep.scope_ns[sel][order]
    step = prep.scope_step[sel][order]
    # per distinct module: its part's index, kind and min bytes; then per call by lookup
    part_of = {p: i for i, p in enumerate(policy.parts)}
    code_part = np.full(len(prep.mod_names), -1, dtype=np.int64)
    for c in wanted:
        code_part[c] = part_of[by_path[prep.mod_names[c]]]
    call_part = code_part[prep.scope_code[sel][order]]
    part_kind = np.array([_KIND_CODE[p.kind] for p in policy.parts] or [0], dtype=np.int64)
    part_min = np.array([p.min_bytes for p in policy.parts] or [0], dtype=np.int64)
    kind = part_kind[call_part] if len(call_part) else np.zeros(0, dtype=np.int64)
    min_b = part_min[call_part] if len(call_part) else np.zeros(0, dtype=np.int64)
    if prep.stateful_mod is not None:   # never re-run a call that writes outside state
        refuse_recompute_of_stateful(policy.text(), mods, ev0, (kind == 1) | (kind == 2),
                                     prep.stateful_mod, prep.stateful_ev0, prep.stateful_obj)

    n, nb, cr, fr0 = prep.n_events, prep.nbytes, prep.created, prep.freed
    is_act = prep.cat == ACTIVATION
    k_c = which_call(ev0, ev1, cr, n)                                # call that made it
    k_s = save_call(prep, by_path, mods, ev0, ev1)               # call of the first save
    k_l = np.where(prep.saved_last == prep.saved_first, k_s,
                   which_call(ev0 - 1, ev1 - 1, prep.saved_last, n))  # call of the last save
    one_call = (k_s >= 0) & (k_s == k_l)
    fwd_end = np.where(prep.fwd_last >= 0, prep.fwd_last + 1, prep.saved_last + 2)
    fwd_end = np.maximum(fwd_end, prep.arg_end)                  # an argument: until return
    rel = prep.released if prep.released is not None else np.full(len(cr), -2, np.int64)
    fwd_end = np.where(rel >= 0, rel, fwd_end)   # measured: when the script let go of it
    fwd_end = np.clip(fwd_end, cr + 1, fr0)                      # last forward use + 1

    # ---- checkpoint / selective: drop (Rule 1) ------------------------------------------
    kc = np.where(k_c >= 0, kind[np.maximum(k_c, 0)], 0) if len(kind) else np.zeros_like(cr)
    ckpt_call = (kc == 1) | (kc == 2)
    in_save_list = np.zeros(len(cr), dtype=bool)
    for i, p in enumerate(policy.parts):
        if p.kind is PolicyKind.SELECTIVE and len(call_part):
            codes = np.flatnonzero(np.isin(prep.op_names, list(p.save_ops())))
            mine = (kc == 2) & (call_part[np.maximum(k_c, 0)] == i)
            in_save_list |= mine & np.isin(prep.op_code, codes)
    dropped = is_act & ckpt_call & one_call & (k_s == k_c) & ~in_save_list
    kept_cache = ckpt_call & in_save_list & ~is_act               # SAC cache holds it

    # ---- offload --------------------------------------------------------------------------
    ks_kind = np.where(k_s >= 0, kind[np.maximum(k_s, 0)], 0) if len(kind) else np.zeros_like(cr)
    kl_kind = np.where(k_l >= 0, kind[np.maximum(k_l, 0)], 0) if len(kind) else np.zeros_like(cr)
    off = is_act & (ks_kind == 3) & (kl_kind == 3) & (
        nb >= (min_b[np.maximum(k_s, 0)] if len(min_b) else 0))
    held = prep.held if prep.held is not None else np.zeros(len(cr), dtype=bool)
    held = held | (rel == -1)       # the script still held it when backward began

    # ---- recompute segments (Rule 3) ------------------------------------------------------
    n_calls = len(ev0)
    big = np.iinfo(np.int64).max
    kd = np.where(dropped, k_c, n_calls)                          # n_calls: a bin for "none"
    trig = np.full(n_calls + 1, big, dtype=np.int64)
    np.minimum.at(trig, kd, np.where(prep.unpack >= 0, prep.unpack, big))
    stop = np.full(n_calls + 1, -1, dtype=np.int64)
    np.maximum.at(stop, kd, prep.saved_last + 1)   # Rule 3: the last pack ends it
    bw_end = np.full(n_calls + 1, -1, dtype=np.int64)
    np.maximum.at(bw_end, kd, fr0)
    trig, stop, bw_end = trig[:n_calls], stop[:n_calls], bw_end[:n_calls]
    has_seg = (trig < big) & (stop > ev0)
    seg_end = np.minimum(stop, ev1)
    seg_len = np.where(has_seg, seg_end - ev0, 0)
    # positions: a segment inserted before its trigger event shifts everything from there
    seg_idx = np.flatnonzero(has_seg)
    seg_at = trig[seg_idx]
    o = np.argsort(seg_at, kind="stable")
    seg_idx, seg_at = seg_idx[o], seg_at[o]
    cum = np.concatenate([[0], np.cumsum(seg_len[seg_idx])])
    seg_start = np.full(n_calls, -1, dtype=np.int64)
    seg_start[seg_idx] = seg_at + cum[:-1]

    # shift[e] = events inserted before or at e (a gather per storage, not a search)
    shift = np.cumsum(np.bincount(seg_at, weights=seg_len[seg_idx], minlength=n + 2)
                      ).astype(np.int64) if len(seg_at) else np.zeros(n + 2, dtype=np.int64)

    def pos_c(e):  # where an event that creates lands: after segments inserted at e
        return e + shift[np.clip(e, 0, n + 1)]

    def pos_f(e):  # where a free lands: before a segment inserted at the same event
        return e + np.where(e > 0, shift[np.clip(e - 1, 0, n + 1)], 0)

    fr = np.where((dropped | off) & ~held, fwd_end, fr0)   # a cache keeps what it holds
    fr = _hold_call_args(prep, fr, mods, ev0, ev1, (kind == 1) | (kind == 2), bw_end, n)
    rows_c = [pos_c(cr)]
    rows_f = [pos_f(fr)]
    rows_b = [nb]
    rows_k = [prep.cat]

    # dropped storages come back at the trigger, in forward order, until their old free
    d = np.flatnonzero(dropped & has_seg[np.maximum(k_c, 0)]) if n_calls else np.zeros(0, int)
    if len(d):
        k = k_c[d]
        rows_c.append(seg_start[k] + (cr[d] - ev0[k]))
        rows_f.append(pos_f(fr0[d]))
        rows_b.append(nb[d])
        rows_k.append(prep.cat[d])
    # temporaries and kept outputs made inside a segment's span are made again (or held)
    if n_calls:
        kk = np.maximum(k_c, 0)
        t_mask = (k_c >= 0) & has_seg[kk] & ~dropped & (cr < seg_end[kk]) & ~is_act
        t = np.flatnonzero(t_mask & ~kept_cache)
        if len(t):
            k = k_c[t]
            rows_c.append(seg_start[k] + (cr[t] - ev0[k]))
            rows_f.append(seg_start[k] + (np.minimum(fr0[t], seg_end[k]) - ev0[k]))
            rows_b.append(nb[t])
            rows_k.append(prep.cat[t])
        h = np.flatnonzero(t_mask & kept_cache)   # SAC: held from forward to its reuse
        if len(h):
            k = k_c[h]
            rows_f[0][h] = np.maximum(rows_f[0][h],
                                      seg_start[k] + (np.minimum(fr0[h], seg_end[k]) - ev0[k]))
        # Rule 4: the RNG state of every checkpointed call, and the fork while recomputing
        ck = np.flatnonzero((kind == 1) | (kind == 2)) if rng_bytes else np.zeros(0, int)
        if len(ck):
            end = np.where(bw_end[ck] >= 0, bw_end[ck], ev1[ck])
            rows_c.append(pos_c(ev0[ck]))
            rows_f.append(pos_f(end))
            rows_b.append(np.full(len(ck), rng_bytes, dtype=np.int64))
            rows_k.append(np.full(len(ck), CATEGORIES.index("other"), dtype=np.int64))
            s = ck[has_seg[ck]]
            rows_c.append(seg_start[s])
            rows_f.append(seg_start[s] + seg_len[s])
            rows_b.append(np.full(len(s), rng_bytes, dtype=np.int64))
            rows_k.append(np.full(len(s), CATEGORIES.index("other"), dtype=np.int64))
    # kernel scratch (Note [Kernel scratch]) for one event, and again where it is re-run
    if len(prep.scratch_ev):
        se, sb = prep.scratch_ev, prep.scratch_bytes
        rows_c.append(pos_c(se))
        rows_f.append(pos_c(se) + 1)
        rows_b.append(sb)
        rows_k.append(np.full(len(se), WORKSPACE, dtype=np.int64))
        if n_calls:
            ks = which_call(ev0, ev1, se, n)
            rr = np.flatnonzero((ks >= 0) & has_seg[np.maximum(ks, 0)]
                                & (se < seg_end[np.maximum(ks, 0)]))
            if len(rr):
                at = seg_start[ks[rr]] + (se[rr] - ev0[ks[rr]])
                rows_c.append(at)
                rows_f.append(at + 1)
                rows_b.append(sb[rr])
                rows_k.append(np.full(len(rr), WORKSPACE, dtype=np.int64))
    # offloaded storages come back at their unpack
    u = np.flatnonzero(off & (prep.unpack_first >= 0))
    if len(u):
        rows_c.append(pos_c(prep.unpack_first[u]))
        # a held storage's own free is the holder's: its read-back goes with autograd's use
        rows_f.append(pos_f(np.where(held[u], prep.unpack[u] + 1,
                                     np.maximum(fr0[u], prep.unpack[u] + 1))))
        rows_b.append(nb[u])
        rows_k.append(prep.cat[u])

    c = np.concatenate(rows_c)
    f = np.concatenate(rows_f)
    b = np.concatenate(rows_b)
    cat = np.concatenate(rows_k)
    total = n + int(cum[-1])
    f = np.maximum(f, c)   # a zero-length life adds nothing
    w = b.astype(np.float64)
    delta = np.bincount(c, weights=w, minlength=total + 1) - np.bincount(
        f, weights=w, minlength=total + 1)
    curve = np.cumsum(delta[:total])   # float64: exact below 2**53 bytes (8 PiB)
    p = int(np.argmax(curve)) if total else 0
    live = (c <= p) & (f > p)
    by_cat = np.bincount(cat[live], weights=w[live], minlength=len(CATEGORIES))
    at_peak = {name: int(round(by_cat[i])) for i, name in enumerate(CATEGORIES)}
    at_peak["workspace"] += prep.workspace
    at_probe: dict[str, int] = {}
    if probe is not None:
        q = int(pos_c(np.array([probe]))[0])
        lv = (c <= q) & (f > q)
        pc = np.bincount(cat[lv], weights=w[lv], minlength=len(CATEGORIES))
        at_probe = {name: int(round(pc[i])) for i, name in enumerate(CATEGORIES)}
    # back to the original numbering: inside a segment, the event that triggered it
    where, orig = "", p
    if len(seg_idx):
        starts = seg_at + cum[:-1]
        j = int(np.searchsorted(starts, p, side="right")) - 1
        if j >= 0 and p < starts[j] + seg_len[seg_idx[j]]:
            where, orig = str(mods[seg_idx[j]]), int(seg_at[j])
        else:
            orig = int(p - cum[j + 1]) if j >= 0 else p
    frac = np.where(ev1 > ev0, seg_len / np.maximum(ev1 - ev0, 1), 0.0)
    # A checkpointed call that drops nothing (a Linear: it saves only its input and weight,
    # both kept) is still re-run in backward to refill its holders: its time, not its bytes.
    saves_any = np.bincount(k_s[k_s >= 0], minlength=n_calls)[:n_calls] > 0 if n_calls \
        else np.zeros(0, dtype=bool)
    rerun_only = ((kind == 1) | (kind == 2)) & ~has_seg & saves_any
    frac = np.where(rerun_only, 1.0, frac)
    seg_len = np.where(rerun_only, ev1 - ev0, seg_len)
    steps_seen = np.unique(step[has_seg | rerun_only]) if len(step) else np.zeros(0)
    warm = steps_seen[steps_seen > 1] if (steps_seen > 1).any() else steps_seen
    warm_mask = np.isin(step, warm) & (has_seg | rerun_only)
    recompute_ns = float((ns[warm_mask] * frac[warm_mask]).sum() / max(len(warm), 1))
    recompute_ev = float(seg_len[warm_mask].sum() / max(len(warm), 1))
    ledger_peak = int(round(curve[p])) if total else 0
    return Replayed(
        policy=policy, peak_bytes=ledger_peak + prep.workspace, ledger_peak_bytes=ledger_peak,
        peak_event=int(min(max(orig, 0), max(n - 1, 0))), in_recompute=where,
        at_peak=at_peak, recompute_ns_per_step=recompute_ns,
        recompute_events_per_step=recompute_ev,
        recompute_events=int(cum[-1]), offload_bytes=int(nb[off].sum()),
        regions=[r.path for r in regions], events=total, at_probe=at_probe,
    )


def _hold_call_args(prep: Prepared, fr: np.ndarray, mods: np.ndarray, ev0: np.ndarray,
                    ev1: np.ndarray, ckpt: np.ndarray, bw_end: np.ndarray,
                    n: int) -> np.ndarray:
    """Rule 2: checkpoint's frame holds a region's arguments until its backward is done
    (the frame goes with the last of its saved-tensor holders), even when autograd saved
    none of them. A frozen LoRA base: the (2, 32, 64) fp32 hidden states entering a block
    (16,384 B) are saved by nothing and freed as the next block starts; checkpointed, they
    stay until that block's backward."""
    if prep.arg_row is None or not len(prep.arg_row) or not ckpt.any():
        return fr
    k = which_call(ev0, ev1, prep.arg_ev0, n)
    kk = np.maximum(k, 0)
    mine = (k >= 0) & (ev0[kk] == prep.arg_ev0) & (mods[kk] == prep.arg_mod) & ckpt[kk] & \
        (bw_end[kk] >= 0)
    if not mine.any():
        return fr
    fr = fr.copy()
    np.maximum.at(fr, prep.arg_row[mine], bw_end[kk[mine]])
    return fr
