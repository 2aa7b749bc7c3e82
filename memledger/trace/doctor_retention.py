"""Tensors that carry autograd history across optimizer steps, found at step boundaries.

# Note [Cross-step retention]
At each step boundary (optimizer post-hook) the probe lists every live tensor that has a
`grad_fn` and keeps those nodes until the next boundary. A tensor alive at the next boundary
whose graph reaches one of them carries history across the step: `total_loss += loss` (the
same tensor, its graph one AddBackward longer each step), `total = total + loss` (a new
tensor whose graph holds the old one) and `losses.append(loss)` alike. A normal loop's
`loss` of step N is a new graph at boundary N+1 and reaches nothing old. Example: 3 steps of
`total_loss += loss` on a 4-byte scalar: at boundary 2 `total_loss` reaches boundary 1's
node; the finding reports 4 bytes held and the graph's node count per step. A loss that
`backward()` started from, kept after it until the next one replaces it (a GAN's generator
loss, alive when the discriminator steps), holds a spent graph that does not grow: not a
finding; nor does any tensor whose graph a backward ran through, such as the generator's
output that Lightning's GAN recipe keeps for the discriminator's step after the generator's
(`fake`, a warning before: it is no root, and the root loss may be gone). The roots of a
window are kept to the next boundary even when their loss is gone (`_fresh`). Growing
history is a finding, whatever started it. A variable found so is counted whole: the
graphs of the newest step it holds too, and what its graphs save (Note [What a variable
holds of the newest step]).

A parameter (or buffer) of a module with history is always a bug: it was updated in place
outside `no_grad` from a tensor that requires grad (an EMA / momentum-encoder update
`ema_p.mul_(d).add_(p, alpha=1 - d)` without `torch.no_grad()`), so it is no longer a leaf
and its graph grows by that update every step. It is named by the module variable that
holds it (`ema.0.weight`, also when that module never runs in the window) and located at
the op that first gave it history, which the probe sees (`param_history`).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import inspect
import re
import sys
import types
import weakref
from typing import Any, Callable, Iterable

import torch
from torch import nn

from memledger.trace.roots import module_named_parameters
from memledger.trace.where import is_user_file, user_frame

_Tensor = torch.Tensor
MAX_NODES = 100_000      # graph walks stop here (a runaway graph is a finding already)
_TAG = "memledger.boundary"   # a node's key in its metadata: the last boundary it was live at
# Note [A spent graph stays spent]
# A retained tensor whose graph a backward ran through holds a spent graph (a warning only
# if it grows). The backward's root is kept to the boundary after it and then only while
# it is live, so a root that was a temporary (`(out.loss / accum).backward()`, a scaled
# loss) was forgotten a boundary later, and the tensors of its graph still held read as
# unspent from then on. Counted by optimizer steps the next step replaces them; counted by
# forward, the last training step's output kept through a validation loop lives on
# several boundaries: tests/clients/train_hf.py --steps 2 --eval 3 (no_grad evaluation)
# got "`out` carries autograd history across steps ... 2 tensor(s), 32.0 KiB, a graph
# of 173 nodes" (spent at step 3, not at 4). A node found spent is tagged so in its
# metadata, which lives as long as the node: spent at every later boundary.
_SPENT = "memledger.spent"
_RETAINED = "memledger.retained"   # a root backwarded with retain_graph=True: (file, line)
# the probe's tag on each node a backward's walk met: (optimizer window, backward number)
WALKED = "memledger.doctor.walked"


class RetentionWatch:
    """Kept by the doctor's probe: `boundary(step)` at each optimizer post-hook returns
    `retained` records (see the Note above)."""

    def __init__(self) -> None:
        self.roots: list[tuple[str, weakref.ref]] = []   # (name prefix, root module)
        # the parameters the probe knows, held by a module or not (set by the probe)
        self.known_params: Callable[[], Iterable[_Tensor]] = tuple
        # id() of the grad_fn nodes of the previous boundary, each also tagged with the
        # boundary's number in its metadata (holding the nodes would keep their graphs, and
        # the cycles under them, alive: Note [Tensors only the garbage collector frees])
        self._prev: set[int] = set()
        self._boundaries = 0
        self._found_at = 0   # the line of the frame `_name_of` last found a variable in
        self._pre: dict[int, Any] = {}      # grad_fn nodes alive before the run
        self._roots: dict[int, Any] = {}    # grad_fn nodes a backward() started from
        self._fresh: set[int] = set()       # ... since the last boundary
        # id(parameter) -> (weakref, file, line) of the op that first gave it history
        self._param_ops: dict[int, tuple[weakref.ref, str, int]] = {}
        # saved-tensor hooks were on at a module call (the script's own, or the collector's
        # under `doctor -o`): reading a saved tensor would run them (Note [A graph kept by
        # retain_graph])
        self.saved_unreadable = False
        self._retaining: dict[int, Any] = {}   # backward number -> its root, retained
        # backward number -> ids of the parameters its retained graph reaches that no
        # optimizer.step() has taken since (Note [A retained graph another optimizer's
        # backward used])
        self._unstepped: dict[int, set[int]] = {}
        # backward number -> the loss a boundary found holding that retained graph while
        # it waited (weakly: judged when the last of those parameters is stepped)
        self._waited: dict[int, weakref.ref] = {}
        self._carried: set[int] = set()   # ... waiting since the boundary before this one
        # Note [A branch no backward ran, kept past a later backward]: this training step's
        # backward passes, number -> the first of the passes on one forward it belongs to,
        # and -> its (file, line); the last one (None: none, or one no walk tagged)
        self._group: dict[int, int] = {}
        self._bw_at: dict[int, tuple[str, int]] = {}
        self._last: int | None = None
        # Note [A branch kept over several steps]: id(tensor) -> (weakref, the backward's
        # (file, line)) of the branch tensors the last boundary reported
        self._side_kept: dict[int, tuple[weakref.ref, list]] = {}
        # Note [A store that saved-tensor hooks fill], Note [Every pack hook the script
        # registers]: (id(function), id(owner)) -> weakrefs of a user pack hook seen on top
        # at a module call (its function, and a bound method's object or None)
        self._packs: dict[tuple[int, int], tuple[weakref.ref, weakref.ref | None]] = {}

    def start(self) -> None:
        # Graphs alive before the run (another run's leftovers, say) are not its history.
        self._pre = {id(t.grad_fn): t.grad_fn for t in _grad_tensors()}

    def stop(self) -> None:
        self._prev, self._pre = set(), {}

    def add_root(self, prefix: str, root: nn.Module) -> None:
        self.roots.append((prefix, weakref.ref(root)))

    def rename_root(self, root: nn.Module, prefix: str) -> None:
        self.roots = [(prefix if r() is root else p, r) for p, r in self.roots]

    def backward_from(self, t: _Tensor, retain: bool = False,
                      where: tuple[str, int] = ("", 0), n: int = 0,
                      chained: bool = False) -> None:
        """`t.backward()` ran (backward number `n`): `t` kept afterwards is a loss kept for
        logging, its graph spent (a warning only if it grows); with `retain`
        (retain_graph=True, at `where`) its saved tensors stay (Note [A graph kept by
        retain_graph]); `chained`: it walked an earlier backward's graph of the step."""
        if t.grad_fn is not None:
            self._roots[id(t.grad_fn)] = t.grad_fn
            self._fresh.add(id(t.grad_fn))
            if retain:
                t.grad_fn.metadata[_RETAINED] = (*where, chained)
                self._retaining[n] = t.grad_fn
                self._unstepped[n] = _graph_params(t.grad_fn)
            else:
                t.grad_fn.metadata.pop(_RETAINED, None)

    def backward_seen(self, n: int, walked: bool, shares: int | None,
                      where: tuple[str, int]) -> None:
        """Backward number `n` is about to run (`walked`: the probe tagged its graph's nodes;
        `shares`: an earlier backward of the window whose nodes it met): Note [A branch no
        backward ran, kept past a later backward]."""
        self._group[n] = self._group.get(shares, shares) if shares is not None else n
        self._bw_at[n] = where
        self._last = n if walked else None

    def used_again(self, n: int) -> None:
        """A later backward of the step walked backward `n`'s graph: what it retained was
        for that one (Note [A graph kept by retain_graph])."""
        root = self._retaining.pop(n, None)
        self._unstepped.pop(n, None)
        self._waited.pop(n, None)
        if root is not None:
            root.metadata.pop(_RETAINED, None)

    def stepped(self, params: set[int], step: int) -> list[dict[str, Any]]:
        """An optimizer.step() took the parameters `params` (ids), in training step
        `step`: a retained graph a boundary let wait whose parameters are now all stepped,
        no later backward having used it, is judged here (Note [A retained graph another
        optimizer's backward used])."""
        out = []
        for n, left in list(self._unstepped.items()):
            left -= params
            ref = self._waited.get(n)
            if left or ref is None:
                continue
            t = ref()
            if t is not None and t.grad_fn is self._retaining.get(n):
                where = t.grad_fn.metadata.get(_RETAINED)
                rec = self._retain_record(t, step, where) if where else None
                if rec is not None:
                    out.append(rec)
                t.grad_fn.metadata.pop(_RETAINED, None)
            self._retaining.pop(n, None)
            self._unstepped.pop(n, None)
            self._waited.pop(n, None)
        return out

    def _retain_record(self, t: _Tensor, step: int, where,
                       more: list | None = None) -> dict[str, Any] | None:
        """The record of a loss whose retained graph no later backward used (with `more`:
        the other retained graphs that the variables holding it with it keep)."""
        kept = -1 if self.saved_unreadable else \
            _saved_bytes([t.grad_fn, *(more or ())], self._state())
        if not kept:
            return None
        rec = self._retained(t, step, {id(t.grad_fn): t.grad_fn})
        if rec is not None:
            rec["kept_saved"], rec["retain_at"] = kept, list(where[:2])
            rec["chained"] = bool(where[2])
        return rec

    def param_history(self, p: _Tensor, file: str, line: int) -> None:
        """An in-place op at file:line gave the parameter `p` autograd history."""
        known = self._param_ops.get(id(p))
        if known is None or known[0]() is not p:
            self._param_ops[id(p)] = (weakref.ref(p), file, line)

    def boundary(self, step: int) -> list[dict[str, Any]]:
        pre = self._pre
        live = [t for t in _grad_tensors() if pre.get(id(t.grad_fn)) is not t.grad_fn]
        old, clean, out = (self._prev, self._boundaries), set(), []
        found: set[int] = set()
        spent: dict[int, Any] | None = None
        new: list[_Tensor] = []   # graphs made since the last boundary
        older: list[tuple[dict[str, Any], _Tensor]] = []
        branches = self._kept_branches()   # Note [A branch kept over several steps]
        for t in live if self._prev else ():
            if id(t) in branches:
                continue
            if _reaches(t.grad_fn, old, clean):
                if spent is None:
                    spent = _graph_nodes(self._roots.values())
                rec = self._retained(t, step, spent)
                if rec is not None:
                    out.append(rec)
                    older.append((rec, t))
                    found.add(id(t))
            else:
                new.append(t)
        # Note [A spent graph that still holds tensors]
        for t in self._spent_holders(live, found):
            held, nodes, fns, kept = _ctx_held(t.grad_fn, self._state())
            if held:
                rec = self._retained(t, step, {id(t.grad_fn): t.grad_fn})
                if rec is not None:
                    rec["ctx_bytes"] = held
                    rec["ctx_fns"] = fns   # Note [The Function that keeps them]
                    if kept:   # Note [Graphs held through ctx]
                        rec["ctx_saved"] = kept
                    also = self._also_held_by(t, live, rec["var"])
                    if also:   # Note [Other variables that hold the spent graph]
                        rec["also"] = also
                    out.append(rec)
                    found.add(id(t))
        # Note [A graph kept by retain_graph]
        if any(self._unstepped.get(n) for n in self._retaining):
            held = _optimizer_params()
            for n in self._retaining:
                if n in self._unstepped:
                    self._unstepped[n] &= held
        waiting = {id(r): n for n, r in self._retaining.items()
                   if self._unstepped.get(n) and n not in self._carried}
        pending = {id(r): r for r in self._retaining.values()
                   if id(r) not in waiting and r.metadata.get(_RETAINED)}
        holders = _retained_holders(live, pending) if pending else []
        for t in live:
            where = t.grad_fn.metadata.get(_RETAINED)
            if id(t) in found or not where:
                continue
            if id(t.grad_fn) in waiting:   # Note [A retained graph another optimizer's
                self._waited[waiting[id(t.grad_fn)]] = weakref.ref(t)   # backward used]
                continue
            # Note [Other variables that hold a retained graph]
            extra = [(h, met) for h, met in holders if id(t.grad_fn) in met]
            more = [pending[i] for _, met in extra for i in met]
            rec = self._retain_record(t, step, where, more)
            if rec is not None:
                also = []
                for h, _ in extra:
                    _, holder, _ = self._name_of(h)
                    if holder and holder != rec["var"] and holder not in also:
                        also.append(holder)
                if also:
                    rec["also"] = also
                out.append(rec)
                found.add(id(t))
        # Note [A branch no backward ran, kept past a later backward]
        out += self._side_branches(live, found, step, branches)
        out += self._stores(step)   # Note [A store that saved-tensor hooks fill]
        # Note [What a variable holds of the newest step]
        newest = self._newest_held(out, new, found, step, spent)
        out += [r for r, _ in newest]
        if newest and not self.saved_unreadable:
            _graphs_saved(older, newest, self._state())
        # a parameter given history in place carries it from the boundary after that op on
        # (its graph reaches an old one only a boundary later)
        for pid, (ref, _, _) in list(self._param_ops.items()):
            p = ref()
            if p is None:
                del self._param_ops[pid]
            elif pid not in found and p.grad_fn is not None:
                rec = self._retained(p, step, {})
                if rec is not None:
                    out.append(rec)
        self._boundaries += 1
        self._prev = set()
        for t in live:
            t.grad_fn.metadata[_TAG] = self._boundaries
            self._prev.add(id(t.grad_fn))
        self._retaining = {n: r for n, r in self._retaining.items() if id(r) in waiting}
        self._carried = set(self._retaining)
        self._unstepped = {n: self._unstepped[n] for n in self._retaining}
        self._waited = {n: r for n, r in self._waited.items() if n in self._retaining}
        self._roots = {k: n for k, n in self._roots.items()
                       if k in self._prev or k in self._fresh}
        self._fresh = set()
        self._group, self._bw_at, self._last = {}, {}, None
        return out

    # Note [A branch no backward ran, kept past a later backward]
    # Note [A spent graph that still holds tensors] counts what a spent graph keeps that its
    # backward did not free: ctx attributes. A backward frees the saves of the nodes it
    # runs, and no others. Ops run on a graph's tensors that its loss does not read make a
    # branch off that graph, above its nodes, which no backward runs: SophiaG's README
    # refreshes the Hessian with `logits, _ = model(x)`, `samp_dist =
    # Categorical(logits=logits)` (which normalises them: `logits - logsumexp`, saving the
    # logits and the logsumexp), `samp_dist.sample()` (its `probs`, a softmax that saves its
    # result), and the cross-entropy of the logits against the samples, whose backward runs
    # from the logits down. `logits` and `samp_dist` stay bound until the next refresh, so
    # the branch's saves live through the next step's forward and backward: at step 2's
    # peak 735,260 B against 718,876 B with them deleted (tests/clients/
    # train_muon_sophia.py `--opt sophia --hess-every 1`; at GPT-2's vocabulary each is
    # logits-sized, GBs). `show` said "32.2 KiB saved for backward (3 storages) went
    # unread"; the doctor said nothing, three times over: the ctx check reads only
    # custom Functions' ctx; it asks backward roots and what lies below them, never a
    # tensor above the graph; and `samp_dist` is a torch.distributions object, which the
    # walk of Note [Who holds a retained tensor] does not look into.
    # At a boundary, a live tensor whose node no backward's walk tagged (the probe's
    # `WALKED`) and whose graph, walked down through untagged nodes (leaves aside), meets
    # nodes that a backward of this training step ran is on such a branch. It is reported
    # where none of those backward passes is one of the forward of the step's last backward
    # (passes that share nodes are one forward's, Note [Backward passes of one forward] in
    # doctor_probe.py): the branch was kept through a later forward and backward, where the
    # peak is. A branch of the last forward's graph is not: an actor-critic loop's
    # `dist.probs` (tests/doctor/styles.py --loop rl) is its step's, replaced by the next
    # iteration, and a branch its own step computes for logging is the step's too. The
    # record (`side_saved`) carries the bytes of the distinct storages the branch's nodes
    # still save (parameters and buffers aside: what `show` counts as unread), the ops
    # (`side_fns`), the backward it hangs from (`side_from`), and the holder: a variable of
    # the user's frames, or one attribute down into any object one holds (`samp_dist.probs`:
    # `del samp_dist` releases it, whoever wrote the class); other variables holding a
    # storage it counts are named (`also`: `logits`, which the logsumexp saves). Where
    # saved-tensor hooks were on, its saves are not read (Note [A branch saved through
    # hooks]); not found after a backward of several tensors at once (no walk tagged it).
    # Kept over several steps: Note [A branch kept over several steps].
    # Cost: at a boundary, one walk over the graphs of the live tensors no backward ran
    # (most loops have none; a GAN's `fake` at the discriminator's step is one), and
    # per-tensor walks only where that walk met an earlier forward's graph.
    def _side_branches(self, live: list[_Tensor], found: set[int], step: int,
                       kept: dict[int, tuple[_Tensor, list]]) -> list[dict[str, Any]]:
        self._side_kept = {}
        last = self._group.get(self._last) if self._last is not None else None
        unread = self.saved_unreadable   # Note [A branch saved through hooks]
        cands = [t for t in live if id(t) not in found and id(t) not in kept
                 and not isinstance(t, nn.Parameter) and _walked_by(t.grad_fn) is None]
        if last is None or not cands or \
                not self._earlier(_branch([t.grad_fn for t in cands])[1], last):
            cands = []
        # Note [A branch kept over several steps]: the last boundary's, still held
        cands += [t for i, (t, _) in kept.items() if i not in found]
        if not cands:
            return []
        resident = self._state()
        held: dict[tuple[str, str], dict[str, Any]] = {}
        for t in cands:
            nodes, met = _branch([t.grad_fn])
            if id(t) not in kept and not self._earlier(met, last):
                continue
            saved = {}
            for n in nodes if not unread else ():
                for x in _saved_of(n):
                    st = _storage_key(x)
                    if st is not None and st[0] not in resident:
                        saved[st[0]] = st[1]
            if unread and any(_saves(n) for n in nodes):
                saved = {-1: -1}   # Note [A branch saved through hooks]: held, not read
            if not saved:
                continue
            name, var, file = self._name_of(t)
            if not var:
                name, var, file = self._object_holding(t)
            if not var or _module_state_of(t) is not None:
                continue
            h = held.setdefault((var, file), {
                "k": "retained", "step": step, "name": name, "var": var, "file": file,
                "shape": list(t.shape), "bytes": 0, "nodes": 0, "backwarded": False,
                "storages": {}, "side_fns": {}, "side_from": None, "tensors": []})
            if self._found_at:
                h.setdefault("at", self._found_at)
            h["tensors"].append(t)
            h["storages"].update(saved)
            h["nodes"] = max(h["nodes"], len(nodes))
            for n in nodes:
                h["side_fns"][type(n).__name__.removesuffix("Backward0")] = None
            if id(t) in kept:
                h["side_from"] = h["side_from"] or kept[id(t)][1]
            else:
                first = min(self._group.get(n, n) for n in met)
                h["side_from"] = list(self._bw_at.get(first, ("", 0)))
        out = []
        for (var, _), h in held.items():
            mine = h.pop("tensors")
            storages = h.pop("storages")
            own = dict(st for x in mine if (st := _storage_key(x)) is not None)
            h["bytes"] = sum(own.values())
            h["side_saved"] = -1 if -1 in storages else sum(storages.values())
            h["side_tensors"] = len(mine)   # Note [A branch kept over several steps]
            h["side_fns"] = list(h["side_fns"])
            also = []
            for x in live:
                if any(x is m for m in mine) or (_storage_key(x) or (None,))[0] not in storages:
                    continue
                _, other, _ = self._name_of(x)
                if other and other != var and other not in also:
                    also.append(other)
            if also:
                h["also"] = also
            found.update(id(x) for x in mine)
            self._side_kept.update((id(x), (weakref.ref(x), h["side_from"])) for x in mine)
            out.append(h)
        return out

    # Note [A store that saved-tensor hooks fill]
    # Saved-tensor hooks hand each tensor autograd saves to the script's `pack`, and what
    # it returns back to `unpack` when backward needs it. A pack that keeps the tensor in a
    # list or dict of the script's (`stash[len(stash)] = t; return len(stash) - 1`, an
    # offload hook's `store[key] = t.cpu()`) and an unpack that only reads it keep every
    # saved tensor of every forward after its backward: the store grows by a forward's
    # saves a step (tests/doctor/saved_hooks.py: 5 storages, 964 B of the MLP's a step).
    # The doctor said "`stash` carries autograd history ... each step adds 3 tensors, 896
    # B): ... keep what that line adds detached instead": it counted only the saves with
    # history (not the batch, the targets) and its fix frees nothing (a detached tensor in
    # the store is kept all the same); a store of copies (`t.detach().clone()`, `t.cpu()`)
    # carries no history, and was not reported at all. The probe keeps each pack hook of the
    # user's it sees on at a module call (weakly: Note [Every pack hook the script registers];
    # it kept the first alone before), and at each boundary counts the tensors of the lists,
    # dicts and deques its code names (its globals, its closure's cells, its object's
    # attributes for a bound method), one level in and through tuples (`(device, t)`): their
    # distinct storages, parameters and buffers aside (`store`, their number; `bytes`), a
    # record per non-empty one. doctor/retention.py reports a store that grows as an error and
    # one that keeps a step's saves as a warning, in place of what the graph walk found under
    # the same name. Cost: at a boundary, where a pack hook was seen, one pass over its
    # containers; nothing on any per-op path.
    # Note [Every pack hook the script registers]
    # The store check kept the pack hook it first saw on at a module call and no other: a
    # second `saved_tensors_hooks` context (stacked inside the first around a part of the
    # forward, or entered later) was never looked at. tests/doctor/saved_hooks.py
    # `--stacked`: the first layer under a pair whose unpack pops its entry, the rest of
    # the forward under a leaky pair stacked inside it (torch uses the innermost pair
    # alone): 4 storages, 708 B a step kept (the ReLU's output 512, the log-softmax 128, the
    # targets 64, the weight total 4). The old code said what the graph walk found ("`stash`
    # carries autograd history ... each step adds 3 tensors, 896 B ... `.detach()` of a
    # tensor": the saves with history only, a fix that frees nothing), and of a store of
    # copies (`--stacked --copy`, 7 a step, 1,604 B) nothing. (The script's own hooks under
    # `doctor -o`, beside the collector's, were found already: `doctor -o saved_hooks.py`
    # gave the same error before.) Now every module call under saved-tensor hooks reads
    # the pair on top (one call into torch's stack) and keeps each distinct user pack weakly (its function, and
    # a bound method's object: a pack made per step dies with its step, and the check
    # forgets it); at a boundary each live pack's containers are counted as before, a
    # container two packs name (a shared global) once. (A context around functional ops
    # alone is read at its ops: Note [Saved-tensor hooks around a function] in
    # doctor_probe.py.) Known limitation: hooks put
    # on one saved tensor (`grad_fn._raw_saved_self.register_hooks(pack, unpack)`) are not
    # seen: torch gives them back to no one. Cost per module call: the stack read, and
    # for a pack not seen before a few attribute reads and a cached file test.
    def hooks_seen(self, pack: Any) -> None:
        """`pack`, the pack hook on top of torch's saved-tensor hook stack at a module call:
        kept, weakly, where it is the user's (Note [A store that saved-tensor hooks fill],
        Note [Every pack hook the script registers])."""
        fn = getattr(pack, "__func__", pack)
        owner = getattr(pack, "__self__", None)
        key = (id(fn), id(owner) if owner is not None else 0)
        known = self._packs.get(key)
        if known is not None and known[0]() is fn and \
                (known[1] is None or known[1]() is owner):
            return
        code = getattr(fn, "__code__", None)
        if code is None or not is_user_file(code.co_filename):
            return
        with contextlib.suppress(TypeError):   # an object that takes no weak reference
            self._packs[key] = (weakref.ref(fn),
                                weakref.ref(owner) if owner is not None else None)

    def _live_packs(self) -> list[tuple[Any, Any]]:
        """(function, owner or None) of each user pack hook still alive; the dead forgotten."""
        out = []
        for key, (fref, oref) in list(self._packs.items()):
            fn, owner = fref(), oref() if oref is not None else None
            if fn is None or (oref is not None and owner is None):
                del self._packs[key]
            else:
                out.append((fn, owner))
        return out

    def _stores(self, step: int) -> list[dict[str, Any]]:
        resident, out, seen = self._state(), [], set()
        # parameters no module call named (a forward of `F.linear` on the model's weights:
        # Note [Saved-tensor hooks around a function] in doctor_probe.py) are resident too
        for p in self.known_params():
            with contextlib.suppress(RuntimeError, NotImplementedError):
                resident.add(p.untyped_storage()._cdata)
        for fn, owner in self._live_packs():
            code = fn.__code__
            named: list[tuple[str, Any]] = [
                (k, fn.__globals__[k]) for k in code.co_names if k in fn.__globals__]
            named += [(k, c.cell_contents)
                      for k, c in zip(code.co_freevars, fn.__closure__ or ()) if _filled(c)]
            if owner is not None:
                named += list(getattr(owner, "__dict__", {}).items())
            for k, v in named:
                if not isinstance(v, (list, dict, collections.deque)) or id(v) in seen:
                    continue
                seen.add(id(v))
                items = list(dict.values(v)) if isinstance(v, dict) else list(v)
                storages: dict[int, int] = {}
                for x in items:
                    for t in x if isinstance(x, tuple) else (x,):
                        st = _storage_key(t) if isinstance(t, _Tensor) else None
                        if st is not None and st[0] not in resident:
                            storages[st[0]] = st[1]
                if storages:
                    out.append({"k": "retained", "step": step, "name": k, "var": k,
                                "file": code.co_filename, "shape": [],
                                "bytes": sum(storages.values()), "nodes": 0,
                                "backwarded": False, "store": len(storages),
                                "pack": [code.co_name, code.co_firstlineno]})
        return out

    # Note [A branch saved through hooks]
    # Under saved-tensor hooks (the script's own, `torch.autograd.graph.save_on_cpu()`, a
    # checkpoint's, the collector's under `doctor -o`) reading a save runs the hooks'
    # unpack (Note [A graph kept by retain_graph]), so the branch check did not run at all:
    # SophiaG's refresh kept under save_on_cpu (tests/doctor/hessian_refresh.py --bug keep
    # --save-on-cpu) got "no findings", where without the context it is the warning. The
    # branch is found by walking nodes, which reads no save; only its bytes need them. So
    # under hooks the branch is reported where its nodes have saves (by their attribute
    # names, not read), with its bytes unknown (`side_saved` -1), and the finding says they
    # were not read. Whatever the hooks did with the saves (a CPU copy, a file, a list),
    # the branch's nodes hold them until it is let go.
    # Note [A branch kept over several steps]
    # Note [A branch no backward ran, kept past a later backward] asks this step's backward
    # passes only, so a branch kept longer than one step was reported at the first boundary
    # after the later backward and at no other: SophiaG's refresh every k steps (`--hess-
    # every 2`, tests/doctor/hessian_refresh.py `--bug keep --every 2`) keeps `dist` from
    # one refresh to the next, through every step between, and the finding said "at the
    # end of steps 2, 4 and 6" of 6 (at 3 and 5 the branch's backward was an earlier
    # step's; its tensors, reaching the boundary before, went to the spent-graph check,
    # which dropped them: a torch.distributions object names nothing, and a variable
    # (`probs`) read as a spent graph kept, or, its nodes counted whole, as one that grows
    # where the run ended on such a step). The tensors a boundary reports on a branch are
    # kept weakly to the next; those still alive there, no backward having run them since,
    # are the same branch kept another step: reported again with what their branch still
    # saves, whatever backward ran that step, and kept out of the spent-graph check. The
    # finding then names every step end that held it, with its bytes at each (grown: a
    # variable that keeps more branches each step). Cost: one weak reference per reported
    # tensor; nothing where nothing was reported.
    def _kept_branches(self) -> dict[int, tuple[_Tensor, list]]:
        """id -> (tensor, the backward's (file, line)) for the branch tensors the last
        boundary reported that are still alive and that no backward has run through since
        (Note [A branch kept over several steps])."""
        out = {}
        for i, (ref, where) in self._side_kept.items():
            t = ref()
            if t is not None and t.grad_fn is not None and _walked_by(t.grad_fn) is None:
                out[i] = (t, where)
        return out

    def _earlier(self, met: set[int], last: int) -> bool:
        """Did a walk meet nodes of this step's backward passes, none of them one of the
        last backward's forward (Note [A branch no backward ran, kept past a later
        backward])?"""
        groups = {self._group[n] for n in met if n in self._group}
        return bool(groups) and last not in groups

    def _object_holding(self, t: _Tensor) -> tuple[str, str, str]:
        """(`samp_dist.probs`, `samp_dist`, file) where a variable of the user's frames holds
        an object (no module, class or tensor) with `t` as an attribute; else empty names
        (Note [A branch no backward ran, kept past a later backward])."""
        self._found_at = 0
        for f, scope, in_function in _user_scopes():
            for k, v in list(scope.items()):
                if isinstance(v, (_Tensor, nn.Module, type, types.ModuleType)):
                    continue
                attrs = getattr(v, "__dict__", None)
                if not isinstance(attrs, dict):
                    continue
                for a, x in list(attrs.items()):
                    if x is t:
                        if in_function:
                            self._found_at = f.f_lineno
                        return f"{k}.{a}", k, f.f_code.co_filename
        return "", "", ""

    # Note [What a variable holds of the newest step]
    # A boundary lists the tensors whose graph reaches one alive at the boundary before:
    # a list that takes a graph each step after the step's boundary (an evaluation under
    # gradients after `optimizer.step()`, `val_losses.append(criterion(model(xv), yv))`;
    # ponder-transformer's `history.append(logits)`, hunt49m) shows, at boundary 3, only
    # its first graph (made in step 2, alive at boundary 2), not the one step 3 added, and
    # its growth only at boundary 4, past the doctor's 3 default steps: "1 tensor(s)", a
    # warning, where it held 2 graphs and took one more every step. So where a boundary
    # found a variable of the user's holding an older graph, the graphs made since the
    # last boundary that the same variable holds are listed too, marked `fresh` (the name
    # of each new graph tensor is looked for only then: a loop that keeps nothing costs
    # nothing more). The tensors are the least of it: a graph no backward ran keeps every
    # tensor it saved (train_val_losses.py: 4 B of loss, 1,056 B its graph saves, besides
    # the held-out batch all of them share), so that variable's records carry the bytes its
    # graphs save (`graph_saved`: all of them; `older_saved`: the older ones; distinct
    # storages, parameters and buffers aside; not where saved-tensor hooks were on, which
    # reading them would run). The doctor counts them in what the variable holds, and a
    # variable holding the newest step's graph beside older ones grows (Note [A variable
    # that takes every step's graph], doctor/retention.py).
    def _newest_held(self, out: list[dict[str, Any]], new: list[_Tensor], found: set[int],
                     step: int, spent: dict[int, Any] | None
                     ) -> list[tuple[dict[str, Any], _Tensor]]:
        holders = {(r["var"], r["file"]) for r in out if not any(
            r.get(k) for k in ("state", "ctx_bytes", "kept_saved", "carried", "side_saved",
                               "store"))}
        if not holders:
            return []
        if spent is None:
            spent = _graph_nodes(self._roots.values())
        held = []
        for t in new:
            if id(t) in found or _module_state_of(t) is not None:
                continue
            rec = self._retained(t, step, spent)
            if rec is not None and (rec["var"], rec["file"]) in holders:
                rec["fresh"] = True
                held.append((rec, t))
                found.add(id(t))
        return held

    # Note [A backward that fails through an earlier step]
    # A module that keeps a tensor made in its forward across batches (a recurrent or
    # spiking layer's hidden state: snntorch's `init_hidden=True` neurons keep the membrane
    # in the buffer `mem`, and `utils.reset(net)` at each batch detaches it) chains the next
    # batch's graph onto the last one's. Without the reset, step 2's backward walks into
    # step 1's freed graph and fails ("Trying to backward through the graph a second
    # time"; with `retain_graph=True`, on the weights Adam changed in place). The doctor
    # stopped there and said torch's words: the script died before the boundary where
    # `cross_step_retention` would have named the buffers (train_snntorch.py --mode seq
    # --bug noreset). Now, when a backward raises, the same scan runs at once, with the
    # script's frames alive, and keeps what modules hold (their parameters, buffers and
    # plain attributes: the tensors that carry one step's graph into the next; the step's
    # own locals reach the old graph only through them), marked with the error; the
    # doctor prints the finding beside the failure.
    def at_failure(self, step: int, error: str, root: Any = None,
                   at: tuple[str, int] = ("", 0)) -> list[dict[str, Any]]:
        """The module state whose graph reaches a graph alive at the last boundary, as a
        backward of `step` from `root` (called at `at`, file and line) raised `error` (Note [A backward that fails through
        an earlier step]), else the variables that carried that graph into the failed one
        (Note [A variable that carried the graph into a failed backward]); nothing before
        the first boundary."""
        if not self._prev:
            return []
        pre, old, clean = self._pre, (self._prev, self._boundaries), set()
        first = error.splitlines()[0].split(". ")[0] if error else ""
        failed = first[:160] or "RuntimeError"   # torch's first sentence
        out = []
        for t in _grad_tensors():
            if pre.get(id(t.grad_fn)) is t.grad_fn or not _reaches(t.grad_fn, old, clean):
                continue
            if _module_state_of(t) is None:
                continue
            rec = self._retained(t, step, {})
            if rec is not None:
                rec["failed"] = failed
                out.append(rec)
        fn = getattr(root, "grad_fn", None) if isinstance(root, _Tensor) else None
        if out or fn is None:
            return out
        # Note [A variable that carried the graph into a failed backward]
        entries = {(n.name(), nr) for n, nr in _edges_into(fn, old)}
        carried = [c for c in _named_outputs() if (c[0].grad_fn.name(), c[0].output_nr)
                   in entries and _reaches(c[0].grad_fn, old, clean)]
        for t, name, var, file in carried:   # which of them fed it back: the doctor reads
            try:
                nbytes = t.untyped_storage().nbytes()
            except (RuntimeError, NotImplementedError):
                nbytes = 0
            out.append({"k": "retained", "step": step, "name": name, "var": var,
                        "file": file, "shape": list(t.shape), "bytes": nbytes,
                        "nodes": 0, "backwarded": True, "carried": True, "failed": failed,
                        # Note [The value backwarded carries nothing] (doctor/retention.py)
                        "backward_at": list(at)})
        return out

    def _state(self) -> set[int]:
        """The storages of the networks' parameters and buffers (resident anyway)."""
        out: set[int] = set()
        for _, ref in self.roots:
            root = ref()
            for x in [*root.parameters(), *root.buffers()] if root is not None else ():
                try:
                    out.add(x.untyped_storage()._cdata)
                except (RuntimeError, NotImplementedError):
                    continue
        return out

    # Note [A spent graph held below its root]
    # Note [A spent graph that still holds tensors] asked only the tensors a backward
    # started from. A loop that scales its loss, `(loss / accum).backward()` (gradient
    # accumulation, a loss weight), starts backward from a temporary, gone by the step's
    # end, while `loss` keeps the spent graph below it: memory-efficient-attention-
    # pytorch's reversible `Transformer` (`_ReversibleFunction` keeps `ctx.y`, 4,096 B on
    # tests/clients/train_memeff.py --mode lm) got no finding, where `loss.backward()`
    # got the warning. Where a root of the step is no longer held, the held tensors of its
    # graph that no other such tensor's graph reaches (the nearest to the root: `loss`,
    # not the `logits` under it, which `also` names where it keeps ctx tensors too) are
    # asked as its root would be.
    def _spent_holders(self, live: list[_Tensor], found: set[int]) -> list[_Tensor]:
        """The live tensors whose spent graphs are asked for ctx tensors: each backward
        root still held, and below each root no longer held, the nearest held tensors of
        its graph (Note [A spent graph held below its root])."""
        out = [t for t in live
               if id(t) not in found and self._roots.get(id(t.grad_fn)) is t.grad_fn]
        held = {id(t.grad_fn) for t in live}
        gone = [n for k, n in self._roots.items() if k not in held]
        if not gone:
            return out
        below = _graph_nodes(gone)
        under = [t for t in live if id(t) not in found and id(t.grad_fn) in below
                 and id(t.grad_fn) not in self._roots]
        # the nodes strictly under any of them: one walk from their nodes' inputs
        reached = _graph_nodes([f for t in under for f, _ in t.grad_fn.next_functions])
        return out + [t for t in under if id(t.grad_fn) not in reached]

    def _retained(self, t: _Tensor, step: int, spent: dict[int, Any]) -> dict[str, Any] | None:
        state = _module_state_of(t)
        name, var, file = state or self._name_of(t)
        if not var:
            return None   # held only by a library's internals (torch.compile's caches)
        nodes = sum(1 for _ in graph_nodes(t.grad_fn))
        try:
            nbytes = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            nbytes = 0
        # Note [A spent graph stays spent]
        backwarded = spent.get(id(t.grad_fn)) is t.grad_fn or bool(
            t.grad_fn.metadata.get(_SPENT))
        if backwarded:
            t.grad_fn.metadata[_SPENT] = True
        rec = {"k": "retained", "step": step, "name": name, "var": var, "file": file,
               "shape": list(t.shape), "bytes": nbytes, "nodes": nodes,
               "backwarded": backwarded}
        if state is None and self._found_at:   # Note [The function whose variable it is]
            rec["at"] = self._found_at             # (doctor/source.py)
        if state is not None:
            rec["state"] = "parameter" if isinstance(t, nn.Parameter) else "buffer"
            op = self._param_ops.get(id(t))
            if op is not None and op[0]() is t:
                rec["file"], rec["line"] = op[1], op[2]
        return rec

    def _also_held_by(self, root: _Tensor, live: list[_Tensor], var: str) -> list[str]:
        """The other user variables (besides `var`) that hold a tensor of `root`'s graph
        through which that graph still reaches a custom Function's ctx tensors, or a
        tensor of a graph it holds through ctx (Note [Graphs held through ctx]) that keeps
        some of what the finding counts."""
        walk: dict[str, set[int]] = {}
        resident = self._state()
        _ctx_held(root.grad_fn, resident, walk)
        out: list[str] = []
        for t in live:
            if t is root:
                continue
            g = id(t.grad_fn)
            if g in walk.get("ctx", ()):   # the copy task's `context`: the encoder's graph
                held = (_storage_key(t) or (None,))[0] in walk["storages"] or \
                    _saved_bytes([t.grad_fn], resident) or _ctx_bytes(t.grad_fn)[0]
            else:
                held = g in walk.get("edges", ()) and _ctx_bytes(t.grad_fn)[0]
            if not held:
                continue
            _, holder, _ = self._name_of(t)
            if holder and holder != var and holder not in out:
                out.append(holder)
        return out

    def _name_of(self, t: _Tensor) -> tuple[str, str, str]:
        """(display name, variable, file) of a user variable that holds `t`, if any; the
        line its function's frame is at in `_found_at` (0: not a function's local)."""
        seen: set[int] = set()
        self._found_at = 0
        for f, scope, in_function in _user_scopes():
            for k, v in list(scope.items()):
                path = _path_to(v, t, HOLDER_DEPTH, seen)
                if path is not None:   # the holder: the path less its last indices
                    holder = k + _less_last_items(path)
                    if in_function:
                        self._found_at = f.f_lineno
                    return f"{k}{path}", holder, f.f_code.co_filename
        # a global of one of the project's own modules no frame names (`from logutil import
        # log_loss`, whose list keeps what it is given)
        for mod in [m for m in list(sys.modules.values()) if _users(m)]:
            path = _path_to(mod, t, HOLDER_DEPTH, seen)
            if path is not None:
                short = mod.__name__.rsplit(".", 1)[-1]
                holder = _less_last_items(path).lstrip(".")
                return f"{short}{path}", holder, mod.__file__
        return self._attribute_of(t)

    def _attribute_of(self, t: _Tensor) -> tuple[str, str, str]:
        """A plain attribute of one of the model's modules (`model.side = out`), or an item
        of a list, tuple or dict one holds (`self.losses.append(loss)` in a
        LightningModule's `training_step`, the usual Lightning leak: it went unreported as
        a library's internals), if any."""
        seen: set[int] = set()
        for prefix, ref in self.roots:
            root = ref()
            for path, m in root.named_modules(prefix=prefix) if root is not None else ():
                for k, v in vars(m).items():
                    if k.startswith("_"):
                        continue
                    item = _path_to(v, t, HOLDER_DEPTH, seen)
                    if item is None:
                        continue
                    try:
                        file = inspect.getsourcefile(type(m)) or ""
                    except TypeError:
                        file = ""
                    return ".".join(x for x in (path, k) if x) + item, k, file
        return f"tensor{tuple(t.shape)}", "", ""


# Note [Who holds a retained tensor]
# A tensor with history from an earlier step is reported only under a name the user can
# find: a variable of the user's frames (locals, and the module's globals) or a path into
# what it holds, through lists, tuples, dicts, deques and the attributes of objects whose
# class or module is the user's own, at most HOLDER_DEPTH steps down:
# `history['loss'][2]`, `records[2]['loss']`, `meter.sum` (pytorch/examples' AverageMeter
# adding the loss itself), `trainer.losses[1]`, `logutil.HISTORY[0]` (a list in one of the
# project's modules). A tensor reachable only through a library's objects stays unnamed and
# unreported: torch.compile's caches hold graphs of their own.
#
# Note [A mapping that computes its items]
# A dict or list is read as it stores its items (`dict.items(v)`, `list.copy(v)`), never
# through a subclass's own `items()` or `__iter__`: transformers' `MODEL_MAPPING` (a
# `_LazyAutoMapping`, an OrderedDict) computes its items by importing every model class it
# names, and raises on one this install lacks ("Could not find VoxtralRealtimeTextModel").
# A script that imports it at the top, as HF's run_clm_no_trainer.py does
# (`MODEL_CONFIG_CLASSES = list(MODEL_MAPPING.keys())`), and kept a loss with its graph:
# the walk reached the mapping among the script's globals before the list, and `doctor`
# stopped with an internal error (exit 70) instead of naming `losses`; with
# MODEL_FOR_CAUSAL_LM_MAPPING it imported every causal LM's module first (the doctor's
# run 16.2 s against 7.7 s now, transformers' import in both). What a mapping stores is what it holds; what it computes on
# demand holds nothing of the user's.
#
# Note [A view of a dict's values]
# `d.values()` and `d.items()` are views of what the dict stores, and a model may return
# one: HRM-pytorch's forward returns its hidden states as `hiddens_dict.values()`, which
# the README's deep-supervision loop hands to the next segment's call. A script that kept
# every segment's `hiddens` in a list (tests/clients/train_hrm.py --keep-hiddens: 2 KiB
# and a graph of 518 nodes a step) got "no findings", where the same list of tuples got
# the error; and with the carried state not detached (`--no-detach --full-grad`) the
# failed backward was said in torch's words alone, where a tuple is named as the carrier.
# A view is read as the sequence it iterates, items by position (`kept[2][0]`); iterating
# the builtin view types reads the dict's storage in C, never a subclass's `__iter__` or
# `items()` (Note [A mapping that computes its items]), so only those types are read.
_DICT_VIEWS = (type({}.values()), type({}.items()))
HOLDER_DEPTH = 4
_HOLDER_OBJECTS = 20_000    # objects looked into per boundary at most


def _path_to(v: Any, t: _Tensor, depth: int, seen: set[int]) -> str | None:
    """The path from `v` to `t` ("" when `v` is `t`), or None (Note [Who holds a retained
    tensor]); `seen` is shared by one search, so each object is looked into once."""
    if v is t:
        return ""
    if depth == 0 or isinstance(v, (_Tensor, str, bytes, int, float, type)) or \
            id(v) in seen or len(seen) > _HOLDER_OBJECTS:
        return None
    seen.add(id(v))
    # Note [A mapping that computes its items]
    if isinstance(v, dict):
        items = [(f"[{k!r}]", x) for k, x in list(dict.items(v))]
    elif isinstance(v, list):
        items = [(f"[{i}]", x) for i, x in enumerate(list.copy(v))]
    elif isinstance(v, (tuple, collections.deque, *_DICT_VIEWS)):
        # Note [A view of a dict's values]
        items = [(f"[{i}]", x) for i, x in enumerate(list(v))]
    elif _users(v):
        items = [(f".{k}", x) for k, x in list(vars(v).items()) if not k.startswith("__")]
    else:
        return None
    for step, x in items:
        path = _path_to(x, t, depth - 1, seen)
        if path is not None:
            return step + path
    return None


def _users(v: Any) -> bool:
    """An object of the user's own code to look into: a module of the project, or an
    instance (no nn.Module: model modules are `_attribute_of`'s) of a class it defines."""
    if isinstance(v, types.ModuleType):
        return is_user_file(getattr(v, "__file__", None) or "<none>")
    if isinstance(v, nn.Module) or not hasattr(v, "__dict__") or callable(v):
        return False
    mod = sys.modules.get(type(v).__module__)
    return is_user_file(getattr(mod, "__file__", None) or "<none>")


def _user_scopes():
    """(frame, scope, in_function) for the locals then globals of each user frame, from
    the doctor's caller outwards; `in_function`: a function's locals, whose line says
    where the variable was set."""
    f = user_frame(4)
    while f is not None:
        yield f, f.f_locals, f.f_code.co_name != "<module>"
        if f.f_globals is not f.f_locals:
            yield f, f.f_globals, False
        f = f.f_back
        while f is not None and not is_user_file(f.f_code.co_filename):
            f = f.f_back


def _less_last_items(path: str) -> str:
    """`.losses[1]` -> `.losses`, `['loss'][2]` -> '': the holder of the item a path ends at."""
    return re.sub(r"(\[[^\[\]]*\])+$", "", path)


# Note [Asking an object its class]
# `isinstance(m, nn.Module)` on an object whose type is no subclass asks the object itself
# for `__class__`, through its own `__getattribute__`. Walking one attribute down from each
# local of the user's frames, the walk met `torch.distributed`'s module dict (a script's
# `import torch.distributed as dist` is a local of its module frame), whose deprecated
# `reduce_op` object warns on every attribute read: each `doctor` of such a script printed
# "FutureWarning: `torch.distributed.reduce_op` is deprecated" at this file's line, a warning
# the script never caused (tests/clients/train_fairscale.py). `issubclass(type(m), ...)`
# reads the type alone.
# Note [A module's state lent by functional_call]
# `torch.func.functional_call(model, params, x)` swaps the caller's tensors into the module
# for the call (torch.nn.utils.stateless: a tensor that is no Parameter sits among its
# buffers) and back after it. Counted by forward (Note [A doctor without an optimizer]),
# a step ends at the module's forward pre-hook, inside that call: a functional update by
# hand that kept its graph (`params = {n: p - lr * g[n] ...}` without detaching,
# tests/clients/train_func.py --by-hand autograd-graph) was read as the module's own state,
# "4 buffers of `model` ... were updated in place outside torch.no_grad() (an EMA or
# momentum-encoder update?)", at the `functional_call` line; the module's state was
# untouched. A module under a functional call in flight (a `_functional_call` frame on the
# stack) lends its state: the tensors are named by the user variable that holds them
# (`params`, at the line that assigns it) as any other.
_STATELESS_CALL = torch.nn.utils.stateless._functional_call.__code__


def _lent_modules() -> set[int]:
    """ids of the modules (and their submodules) a functional call in flight runs with
    tensors swapped in."""
    out: set[int] = set()
    f = sys._getframe(1)
    while f is not None:
        if f.f_code is _STATELESS_CALL:
            m = f.f_locals.get("module")
            if issubclass(type(m), nn.Module):
                out.update(id(x) for x in m.modules())
        f = f.f_back
    return out


def _module_state_of(t: _Tensor) -> tuple[str, str, str] | None:
    """(`ema.0.weight`, `ema`, file) when `t` is a parameter or buffer of a module that a
    variable of the user's code holds; None otherwise (most retained tensors: a loss)."""
    f = user_frame(4)
    seen: set[int] = _lent_modules()   # Note [A module's state lent by functional_call]
    while f is not None:
        for k, v in list(f.f_locals.items()):
            # a module variable, or one attribute down (`self.ema` in a trainer's method);
            # Note [Asking an object its class]
            held = [(k, v)] if issubclass(type(v), nn.Module) else [
                (f"{k}.{a}", m) for a, m in list(getattr(v, "__dict__", {}).items())
                if issubclass(type(m), nn.Module)] if not issubclass(type(v), type) else []
            for name, m in held:
                if id(m) in seen:
                    continue
                seen.add(id(m))
                for n, x in (*module_named_parameters(m, remove_duplicate=False),
                             *m.named_buffers(remove_duplicate=False)):
                    if x is t:
                        return f"{name}.{n}", name, f.f_code.co_filename
        f = f.f_back
        while f is not None and not is_user_file(f.f_code.co_filename):
            f = f.f_back
    return None


def _reaches(root, old: tuple[set[int], int], clean: set[int]) -> bool:
    """Does the graph from `root` reach a node of boundary `old` (its nodes' ids, its
    number in their metadata)? `clean`: nodes known not to."""
    ids, tag = old
    stack, seen = [root], set()
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen or id(n) in clean:
            continue
        if id(n) in ids and n.metadata.get(_TAG) == tag:   # not a new node at an old id
            return True
        seen.add(id(n))
        if len(seen) > MAX_NODES:
            return False
        stack.extend(f for f, _ in n.next_functions)
    clean.update(seen)
    return False


# Note [A spent graph that still holds tensors]
# A loss kept after its backward until the next step replaces it holds a spent graph:
# backward freed what its nodes saved, so it costs nothing (not a finding, Note
# [Cross-step retention]). Unless a custom autograd Function keeps tensors on `ctx` as
# plain attributes, not through `save_for_backward`: backward frees none of those, and they
# live as long as the graph. torchjd's autogram engine routes every hooked layer's output
# through `AutogramNode`, which keeps the layer's inputs and outputs as `ctx.args` and
# `ctx.rg_outputs`; its documented loop keeps `losses` until the next step's forward
# rebinds it, so the previous step's layer inputs and outputs (27,776 B on
# tests/clients/train_torchjd.py `--mode autogram --no-batch-dim`) stay through the next
# forward. At a step boundary, a live tensor a backward started from whose graph's
# Python-Function nodes hold tensors (parameters aside) on their `ctx` is a `retained`
# record with `ctx_bytes`: a warning, at the variable, that says `del` frees them. A node's
# own output kept on its ctx (`ctx.out = out`: out's grad_fn is that node) is left out: it
# is a reference cycle, which `del` does not free (check `cyclic_garbage`,
# tests/doctor/garbage.py --cycle ctx).
#
# Note [The Function that keeps them]
# The warning said the tensors were kept by "a custom autograd Function", in scripts that
# define none: torch's own reentrant checkpoint (`checkpoint(block, x,
# use_reentrant=True)`, as older code calls it around egnn-pytorch's layers,
# tests/clients/train_egnn.py --ckpt reentrant) is a Function that keeps each call's CPU
# RNG state as `ctx.fwd_cpu_state` (5,056 B), and the user had no Function of theirs to
# look for. The record now carries the names of the Functions whose nodes hold such
# tensors (`ctx_fns`, the node class's name without its `Backward`), and the warning names
# them: `CheckpointFunction`, torchjd's `AutogramNode`.
#
# Note [Graphs held through ctx]
# A Function may keep on ctx a tensor it did not take as an input: linear-attention-
# transformer's (and reformer's) `_ReversibleFunction` keeps `ctx.args`, the blocks'
# keyword arguments, a list of `{"f_args": {...}, "g_args": {...}}`. In its README's
# encoder/decoder with `reversible=True` the decoder's blocks get the encoder's output as
# `context` there, and their backward runs a backward into it (retain_graph=True: one per
# context layer). So the decoder's spent graph holds the encoder's whole graph through
# ctx alone (no edge of the graph leads there), with what that graph still saves: the
# retained backward freed none of it. The warning counted only tensors found two levels
# deep and only the nodes the root's edges reach: "16.0 KiB" (the decoder's `ctx.y`) on
# tests/clients/train_linattn.py `--mode encdec --reversible`, where `del loss` frees
# 33,312 B (the encoder's `ctx.y`, 8,192 B, its output and its final norm's saved input,
# 4,096 B each, the masks and the source tokens). Tensors are now looked for at any depth
# of ctx's lists, tuples and dicts (`_ctx_tensors`), the graphs of those that have one
# are walked as well, and what their nodes still save for backward counts too (the
# networks' parameters and buffers aside: resident anyway); the warning says how much of
# it is such saves. A variable of the script that holds a tensor of such a graph keeps
# that part past `del loss`: the copy task keeps the encoder's output as `context` in its
# loop, and the warning told to `del loss` alone; such variables are named with the others
# (Note [Other variables that hold the spent graph]).
#
# Note [Other variables that hold the spent graph]
# `del loss` frees the graph only when nothing else holds it. A training loop usually keeps
# the model's output as well (`logits = net(x); loss = F.cross_entropy(logits, y)`), and
# `logits`' grad_fn is a node of `loss`'s graph: fairscale's `checkpoint_wrapper` keeps each
# checkpointed block's CPU RNG state as `ctx.fwd_rng_state` (5,056 B), and with two blocks
# the doctor said "`del loss` after the step frees them" while `logits` kept both states
# (10,112 B) to the next forward: a script that did as told freed nothing
# (tests/clients/train_fairscale.py --ckpt wrap). The record now names, in `also`, every
# other user variable holding a tensor of that graph through which it still reaches such
# ctx tensors, and the finding tells to `del` them all.
# Note [A variable that carried the graph into a failed backward]
# The classic recurrent bug: `out, h = rnn(x, h)` across batches without `h = h.detach()`.
# Step 2's forward reads step 1's `h`, so its graph runs into step 1's, which step 1's
# backward freed, and step 2's backward fails ("Trying to backward through the graph a
# second time"). The script dies before the boundary where `cross_step_retention` would
# name `h`, and the module-state scan (Note [A backward that fails through an earlier
# step]) finds nothing: the hidden state is the script's variable, not a module's. By then
# `h` holds step 2's state, and step 2's `out` reaches step 1's graph as well as `h` does.
# What tells them apart is where the failing graph enters the old one: through one output
# of one operation (output 1 of step 1's GRU, its `h`; not output 0, `out`). The variable
# that carried it holds that same output of the same operation one step on: the state is
# fed back. So when a backward fails, its graph is walked to the edges that enter a node
# alive at the last boundary, and the variables of the user's frames (or items of a tuple,
# list or dict they hold: an LSTM's `(h, c)`) that hold such an output of such an
# operation, and reach the old graph, are the carriers; where several hold one tensor
# (`out = state`), the doctor keeps the one bound from a value that reads it (`state =
# cell(x, state)`, doctor/retention.py).
# The frames are read at the failure only: reading a running function's `f_locals` before
# Python 3.13 keeps a copy of its locals alive in the frame, which moved when Keras'
# per-forward cycles became garbage, at every boundary (tests/doctor/carried.py: a GRU, an
# LSTM's tuple, an RNN cell unrolled by hand).
_CARRIER_ITEMS = 64   # items of one container looked at



def _named_outputs() -> list[tuple[_Tensor, str, str, str]]:
    """(tensor, name, variable, file) of the tensors with history that the user's frames
    hold, directly or as an item of a tuple, list or dict."""
    out: list[tuple[_Tensor, str, str, str]] = []
    f = user_frame(1)
    while f is not None:
        file = f.f_code.co_filename
        scopes = [f.f_locals] + ([f.f_globals] if f.f_globals is not f.f_locals else [])
        for scope in scopes:
            for k, v in list(scope.items()):
                if isinstance(v, (tuple, list, *_DICT_VIEWS)):   # Note [A view of a dict's values]
                    items = [(f"{k}[{i}]", x) for i, x in enumerate(list(v)[:_CARRIER_ITEMS])]
                elif isinstance(v, dict):
                    items = [(f"{k}[{key!r}]", x) for key, x in
                             list(dict.items(v))[:_CARRIER_ITEMS]]
                else:
                    items = [(k, v)]
                out += [(x, name, k, file) for name, x in items if _has_history(x)]
        f = f.f_back
        while f is not None and not is_user_file(f.f_code.co_filename):
            f = f.f_back
    return out


def _has_history(x: Any) -> bool:
    return isinstance(x, _Tensor) and readable_grad_fn(x) is not None


def readable_grad_fn(t: _Tensor):
    """`t.grad_fn`, or None where torch refuses to say (Note [A view whose grad_fn cannot
    be read])."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _edges_into(root, old: tuple[set[int], int]) -> list[tuple[Any, int]]:
    """(node, output number) of the edges by which the graph from `root` enters a node of
    boundary `old` (its nodes' ids, its number in their metadata), in walk order."""
    ids, tag = old
    stack, seen, out = [root], set(), []
    while stack and len(seen) < MAX_NODES:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        for f, nr in n.next_functions:
            if f is None:
                continue
            if id(f) in ids and f.metadata.get(_TAG) == tag:
                out.append((f, nr))
            else:
                stack.append(f)
    return out


def graph_nodes(root, seen: set[int] | None = None):
    """The autograd nodes reachable from `root`, each once, at most MAX_NODES of them
    (`seen`: the ids of nodes walked before, skipped and counted against that limit, and
    added to as this walk goes)."""
    seen = set() if seen is None else seen
    stack = [root]
    while stack and len(seen) < MAX_NODES:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        stack.extend(f for f, _ in n.next_functions)
        yield n


def _ctx_bytes(root) -> tuple[int, int]:
    """(bytes of the distinct storages the graph's custom-Function nodes keep as `ctx`
    attributes, with what the graphs reached through them still save, parameters aside;
    nodes walked)."""
    held, nodes, _, _ = _ctx_held(root)
    return held, nodes


def _ctx_held(root, resident: set[int] | frozenset = frozenset(),
              walk: dict[str, set[int]] | None = None) -> tuple[int, int, list[str], int]:
    """`_ctx_bytes`, the names of the Functions whose nodes keep them (Note [The Function
    that keeps them]), in the graph's order, and how many of those bytes are saves of the
    graphs reached through ctx (Note [Graphs held through ctx]); `resident`: storages not
    counted (the networks' parameters and buffers). `walk`, if given, is filled with the
    ids of the nodes the root's edges reach ("edges"), of those reached through ctx
    ("ctx"), and the counted storages ("storages")."""
    storages: dict[int, int] = {}
    saved: dict[int, int] = {}
    names: dict[str, None] = {}
    seen: set[int] = set()
    through: set[int] = set()
    graphs = [(root, False)]
    while graphs and len(seen) < MAX_NODES:
        start, through_ctx = graphs.pop()
        for n in graph_nodes(start, seen):
            if through_ctx:   # no backward of the root's graph freed these
                through.add(id(n))
                for x in _saved_of(n):
                    st = _storage_key(x)
                    if st is not None and st[0] not in resident and st[0] not in storages:
                        saved[st[0]] = st[1]
            if not isinstance(n, torch.autograd.function.BackwardCFunction):
                continue
            name = type(n).__name__.removesuffix("Backward")
            for v in vars(n).values():
                for x in _ctx_tensors(v):
                    # parameters are resident anyway; the node's own output kept on ctx
                    # (`ctx.out = out`) is a reference cycle, which `del` does not free and
                    # check `cyclic_garbage` names
                    if isinstance(x, nn.Parameter) or x.grad_fn is n:
                        continue
                    st = _storage_key(x)
                    if st is None or st[0] in resident:
                        continue
                    storages[st[0]] = st[1]
                    saved.pop(st[0], None)
                    names[name] = None
                    if x.grad_fn is not None and id(x.grad_fn) not in seen:
                        graphs.append((x.grad_fn, True))
    nodes = len(seen)
    if walk is not None:
        walk.update(edges=seen - through, ctx=through, storages={*storages, *saved})
    if not storages:
        return 0, nodes, [], 0
    kept = sum(saved.values())
    return sum(storages.values()) + kept, nodes, list(names), kept


def _storage_key(x: _Tensor) -> tuple[int, int] | None:
    """(the storage's identity, its bytes), None where it has none to read."""
    try:
        st = x.untyped_storage()
        return st._cdata, st.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def _filled(cell) -> bool:
    """Is the closure cell bound (a variable assigned after the function was made may
    not be)?"""
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _saves(n) -> bool:
    """Does node `n` save tensors for backward? Asked of its attribute names alone: reading
    one would run the saved-tensor hooks' unpack (Note [A branch saved through hooks])."""
    return any(name.startswith("_saved_") for name in dir(n))


def _saved_of(n) -> list[_Tensor]:
    """The tensors node `n` still saves for backward (none where a backward freed them)."""
    out = []
    for name in dir(n):
        if not name.startswith("_saved_"):
            continue
        try:
            v = getattr(n, name)
        except Exception:   # freed by a backward through this node  # noqa: BLE001
            continue
        out.extend(x for x in (v if isinstance(v, (list, tuple)) else (v,))
                   if isinstance(x, _Tensor))
    return out


# Note [A graph kept by retain_graph]
# `loss.backward(retain_graph=True)` keeps every tensor the graph saved for backward, where
# a plain backward frees them as it goes. Added where nothing backwards that graph again (a
# script "fixing" an error it once had, a loss kept for a second backward that never
# comes), they stay as long as `loss` does: through the optimizer step and the next
# step's forward, until `loss` is bound again, so that forward's activations come on top
# of the last step's (tests/doctor/retained.py: the 2-layer MLP's traced peak 3,157,052 B
# against 2,829,372 B with `--fixed`). A backward root whose backward retained its graph
# and that is still held at the boundary is named with the bytes its graph still saves,
# read through the nodes' `_saved_*` attributes (a freed one raises: a later backward
# through the same nodes let them go); the networks' parameters aside, resident anyway. A
# later backward of the same step through that graph (two losses on one forward,
# `--twice`) is what retain_graph is for: not a finding, though the part only the first
# loss reaches stays with it too. The last of such a chain that retains as well (a
# multitask loop writing retain_graph=True on every head's backward) keeps the shared
# trunk's saves: named, as the one that need not retain (`--heads`). A saved tensor
# packed by saved-tensor hooks (the script's own, a checkpoint's, the collector's under `doctor -o`)
# would run their unpack when read, so where any were on at a module call the bytes are
# not read, and the finding says so.
# Note [A retained graph another optimizer's backward used]
# A GAN whose discriminator loss reads the generator's output undetached:
# `d_loss.backward(retain_graph=True)`, the discriminator's step, then the generator's
# loss on a new D(fake), whose backward walks the G part of the graph d_loss retained:
# what the retain is for (a plain backward there fails). The doctor said "no later
# backward used them ... drop retain_graph=True" (tests/doctor/retained.py --gan), for
# two reasons. (1) The walks that tag graph nodes count "shared" only within one
# optimizer-step window (Note [Backward passes of one forward], doctor_probe.py: two
# backward passes around a step are no accumulation), and the retain check read only
# that; a walk now also reports every earlier backward whose tag it meets, of any window,
# and each is used again. (2) The training step's boundary (its first one found at a
# root's next forward) fell between D's step and G's backward, so the retained root was
# judged before its later backward could come. A retained graph that reaches parameters
# no optimizer.step() has taken since its backward is not judged at that boundary: the
# training step is not over for those parameters: its root is kept, and judged (the loss
# still held, no backward having used it) at the step() that takes the last of them. It
# waits one boundary at most (the graph is held meanwhile, and a parameter no optimizer
# holds would be waited for for ever): at the next it is judged as any other. Only the
# parameters a live optimizer holds count (G's optimizer has not stepped yet at the first
# boundary, but it exists); a parameter no optimizer holds is not waited for. retained.py,
# --heads: one optimizer takes every parameter before the boundary, judged there as before.
def _optimizer_params() -> set[int]:
    """ids of the parameters that the live torch optimizers hold (one scan of the objects
    the garbage collector tracks: only where a retained graph waits)."""
    out: set[int] = set()
    for o in gc.get_objects():   # type(), not isinstance: a dead weakref.proxy's
        if issubclass(type(o), torch.optim.Optimizer):   # __class__ raises
            with contextlib.suppress(Exception):
                out.update(id(p) for g in o.param_groups for p in g["params"])
    return out


def _graph_params(root) -> set[int]:
    """ids of the parameters whose AccumulateGrad nodes the graph from `root` reaches."""
    return {id(v) for n in graph_nodes(root)
            if isinstance(v := getattr(n, "variable", None), nn.Parameter)}


# Note [Other variables that hold a retained graph]
# Micro-batches that retain their graphs and are summed, graphs and all (`loss.backward(
# retain_graph=True); total += loss`, recurrent-memory-transformer's train.py:
# tests/clients/train_kept_losses.py): at the boundary `loss` holds the last micro-batch's
# retained graph and `total` every one's. The finding named `loss` with one micro-batch's
# bytes (35.0 KiB of 105.0) and said "`del loss` after its last backward", which frees
# nothing while `total` holds them. A live tensor that is no retained root itself but whose
# graph reaches retained roots of the step (`total`) is a holder: a retained root it reaches
# that is alive counts the bytes of every retained graph the holder reaches, once per
# storage, and names the holder beside its own variable, as Note [Other variables that hold
# the spent graph] does for ctx tensors (`tests/doctor/retained.py --sum`).
def _retained_holders(live: list[_Tensor], pending: dict[int, Any]) -> list[tuple]:
    """(tensor, ids of the retained roots in `pending` its graph reaches) for each live
    tensor that is not one of those roots and reaches one."""
    out = []
    for t in live:
        if id(t.grad_fn) in pending:
            continue
        met = {i for i in _graph_nodes([t.grad_fn]) if i in pending}
        if met:
            out.append((t, met))
    return out


def _graphs_saved(older: list, newest: list, resident: set[int]) -> None:
    """Note [What a variable holds of the newest step]: on each record of a variable that
    holds the newest step's graphs, `graph_saved`, the bytes all its graphs still save for
    backward, and `older_saved`, those its older graphs save (distinct storages, the
    networks' parameters and buffers aside): what the newest step added is the difference."""
    mine: dict[tuple[str, str], tuple[list, list]] = {}
    for rec, t in newest:
        mine.setdefault((rec["var"], rec["file"]), ([], []))[1].append((rec, t))
    for rec, t in older:
        if (rec["var"], rec["file"]) in mine:
            mine[(rec["var"], rec["file"])][0].append((rec, t))
    for olds, news in mine.values():
        before = _saved_bytes([t.grad_fn for _, t in olds], resident)
        now = _saved_bytes([t.grad_fn for _, t in olds + news], resident)
        for rec, _ in olds + news:
            rec["graph_saved"], rec["older_saved"] = now, before


def _saved_bytes(roots, resident: set[int]) -> int:
    """Bytes of the distinct storages that the graphs from `roots` (a node or a list)
    still save for backward, those in `resident` (parameters, buffers) aside."""
    storages: dict[int, int] = {}
    nodes = _graph_nodes(roots if isinstance(roots, list) else [roots]).values()
    for n in nodes:
        for x in _saved_of(n):
            st = _storage_key(x)
            if st is not None and st[0] not in resident:
                storages[st[0]] = st[1]
    return sum(storages.values())


CTX_DEPTH = 8   # levels of lists, tuples and dicts looked into on ctx (a cycle ends)


def _ctx_tensors(v: Any, depth: int = 0) -> list[_Tensor]:
    """Tensors in a `ctx` attribute: itself, or in its lists, tuples and dicts, CTX_DEPTH
    levels deep (`ctx.args` a layer's positional arguments; a reversible sequence's, a list
    of dicts of dicts: Note [Graphs held through ctx])."""
    if isinstance(v, _Tensor):
        return [v]
    if depth >= CTX_DEPTH:
        return []
    if isinstance(v, (list, tuple)):
        return [x for i in v for x in _ctx_tensors(i, depth + 1)]
    if isinstance(v, dict):
        return [x for i in v.values() for x in _ctx_tensors(i, depth + 1)]
    return []


def _walked_by(node) -> int | None:
    """The number of the last backward whose walk tagged `node`, None if none did."""
    try:
        tag = node.metadata.get(WALKED)
    except (AttributeError, RuntimeError):
        return None
    return tag[1] if tag else None


def _branch(roots) -> tuple[list[Any], set[int]]:
    """(the nodes reachable from `roots` that no backward's walk tagged, leaves aside; the
    numbers of the backward passes whose tagged nodes that walk stopped at)."""
    nodes, met, seen = [], set(), set()
    stack = list(roots)
    while stack and len(seen) < MAX_NODES:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        if hasattr(n, "variable"):   # AccumulateGrad: shared by every forward
            continue
        walked = _walked_by(n)
        if walked is not None:
            met.add(walked)
            continue
        nodes.append(n)
        stack.extend(f for f, _ in n.next_functions)
    return nodes, met


def _graph_nodes(roots) -> dict[int, Any]:
    """Every node of the graphs from `roots` (id -> node)."""
    out: dict[int, Any] = {}
    stack = list(roots)
    while stack and len(out) < MAX_NODES:
        n = stack.pop()
        if n is None or id(n) in out:
            continue
        out[id(n)] = n
        stack.extend(f for f, _ in n.next_functions)
    return out


# Note [A view whose grad_fn cannot be read]
# A view of a tensor that requires grad, made under `no_grad`, raises on `.grad_fn` once its
# base has changed in place ("A view was created in no_grad mode and its base ... has been
# modified inplace"): torch would have to rebuild its history and refuses to. Optimizers
# make such views of their parameters and keep them across the update: heavyball's SOAP
# (`merge_dims=True`, its default) keeps a `no_grad` view of each parameter in its
# `optimizer.mapping` (the views its update works on) and updates the parameters in
# place, and the doctor's first step boundary crashed on it ("internal error", exit 70) for
# a loop that is correct. No backward can run through such a view (any use of it under
# grad mode raises the same error), so it carries no history to retain: skipped.
# The probe reads the same attribute of every tensor an op under `no_grad` is handed (a cut,
# Note [A state_dict is no cut] in doctor_probe.py) and of an activation module's input:
# xLSTM's sLSTM cell (`xlstm`, tests/clients/train_xlstm.py) keeps its recurrent kernel
# behind a `ParameterProxy` whose `__setitem__`, under `no_grad`, takes a permuted view
# of the parameter, writes the slice into it and reshapes it back, at construction. The
# reshape's `__torch_function__` read the written view's `grad_fn`, and `memledger doctor`
# said "the doctor could not watch the script: script raised RuntimeError: A view was
# created in no_grad mode ..." (exit 3, the script blamed) of a script that runs, traces
# and measures. Read through `readable_grad_fn`: no history, so no path to a parameter to
# cut (what a view made under no_grad and never written reads as, `grad_fn` None).


def _grad_tensors() -> list[_Tensor]:
    """Every live tensor that carries autograd history (has a grad_fn) that can be read
    (Note [A view whose grad_fn cannot be read])."""
    out = []
    with torch._C.DisableTorchFunction():
        for o in gc.get_objects():
            if not issubclass(type(o), _Tensor):
                continue
            if readable_grad_fn(o) is not None:
                out.append(o)
    return out
