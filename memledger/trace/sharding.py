"""What the collector needs for sharded training (FSDP2, DDP, ZeRO): a mixin of `Collector`.

# Note [Sharded storages]
Four things differ from one-process training, each with its own mechanism here:

1. A sharded parameter (FSDP2) is a `DTensor`: a wrapper whose `untyped_storage()` is not the
   rank's memory; its local shard (`_local_tensor`, a view of FSDP's padded
   `_sharded_param_data`) is. Every storage lookup unwraps it first (`local_tensor`).
   Example: c_fc.weight (256, 64) fp32 on 2 ranks is a (128, 64) local shard: 32,768 B,
   not 65,536 B. A dim-0 size that does not divide is padded: (3, 64) on 2 ranks keeps
   (2, 64) = 512 B on each rank.
2. FSDP2 all-gathers a unit's parameters into one storage per parameter before the unit's
   forward and backward, and frees them by resizing (Note [Storages resized outside
   dispatch] in trace/resize.py). The module's parameter attribute then points at the
   gathered tensor: the collector sees it from the module's forward hook (global hooks run
   before FSDP's own post-forward reshard) and names it role `unsharded`; the same storage,
   regathered later (backward), gets the name again on its resize.
3. Collectives (`c10d.*` ops: DDP's all-reduce of a gradient bucket, FSDP's all-gather and
   reduce-scatter, broadcasts) pass through the dispatcher; their tensors get the role
   `communication` unless they have a stronger one (a reduce-scatter's output *is* the
   sharded gradient, so it stays a gradient: ROLE_PRIORITY).
4. FSDP labels its work with `record_function("FSDP::all_gather (blocks.1)")`; inside such a
   region the module of a new storage is the FSDP unit named there, so a prefetched
   all-gather for `blocks.2` issued while `blocks.1` runs is attributed to `blocks.2`.
5. `fully_shard` cuts each parameter's local shard out of the full weight the script built
   (`copy_` of the rank's chunk into a zero-padded storage) and lets the full weight go.
   Roles are written at the first forward and optimizer step, by which time the full weight
   is gone, so it read as `other`: on a 2-layer GPT on 2 ranks, 473,856 B of the setup's
   580,310 B of `other`; on a simulated 7B rank of 8, 26.9 GB, the whole setup peak. A
   `copy_` during setup is remembered (destination storage -> source storage), and when a
   storage becomes a sharded parameter, the storage it was copied from becomes that
   parameter too, shard `unsharded` (the full weight, before sharding: its bytes are the
   parameter's, unpadded: wte (255, 64) fp32 is 65,280 B, where the gathered copies are
   padded to 65,536 B). A weight the script discards without sharding it (nanoGPT's head
   before it is tied) is copied into no shard and stays `other`.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from memledger.trace.roots import module_named_parameters

_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage this rank holds: a DTensor's local shard, else `t` itself."""
    if type(t) in _PLAIN:
        return t
    local = getattr(t, "_local_tensor", None)
    return local if isinstance(local, torch.Tensor) else t


def is_collective(func: Any) -> bool:
    """A c10d collective op (in-place ops on process groups, or the functional ones)."""
    ns = getattr(func, "namespace", "")
    return ns in ("c10d", "_c10d_functional", "c10d_functional")


def fsdp_unit(name: str) -> str | None:
    """The FSDP unit a `record_function` label names: 'FSDP::all_gather (blocks.1)' ->
    'blocks.1'; 'FSDP::forward_prefetch for blocks.2' -> 'blocks.2'; root labels -> ''."""
    if not name.startswith("FSDP::"):
        return None
    if name.endswith(")") and " (" in name:
        return name[name.rindex(" (") + 2:-1]
    if " for " in name:
        return name.rsplit(" for ", 1)[1]
    return ""


class ShardingMixin:
    """Collector methods for sharded training; see Note [Sharded storages]."""

    def _init_sharding(self) -> None:
        self._sharded_slots: set[tuple[int, str]] = set()   # (id(module), param name)
        # storage key -> (name, dtype, shape, device) of an unsharded parameter's storage
        self._unsharded: dict[int, tuple[str, str, list[int], str]] = {}
        # id -> (weakref, name) of the unsharded parameters FSDP gathered
        self._unsharded_params: dict[int, tuple[weakref.ref, str]] = {}
        self._resized_away: set[int] = set()   # sids freed by resize_, their weakref not yet
        self._fsdp_units: list[str | None] = []  # parallel to _rf_stack: FSDP unit or None
        self._comm_ops: dict[Any, bool] = {}
        self._copied_from: dict[int, int] = {}   # rule 5: sid -> the sid copied into it

    # ---- 1. sharded parameters ------------------------------------------------------------
    def _note_sharded(self, module: torch.nn.Module, name: str, p: torch.Tensor) -> bool:
        """Remember a DTensor parameter's slot; True when it is one."""
        if type(p) in _PLAIN or getattr(p, "_local_tensor", None) is None:
            return False
        self._sharded_slots.add((id(module), name))
        return True

    # ---- 2. unsharded parameters ------------------------------------------------------------
    def _mark_unsharded(self, module: torch.nn.Module, path: str) -> None:
        """Parameters FSDP has gathered for this module's forward (called from its hook)."""
        for name, p in module_named_parameters(module, recurse=False):
            if (id(module), name) not in self._sharded_slots \
                    or getattr(p, "_local_tensor", None) is not None:   # still the DTensor
                continue
            st = p.untyped_storage()
            if st.nbytes() == 0:
                continue
            full = f"{path}.{name}".lstrip(".")
            # its .grad, where FSDP2 accumulates without syncing, is a gradient too
            self._unsharded_params[id(p)] = (weakref.ref(p), full)
            if st._cdata not in self._unsharded:
                self._unsharded[st._cdata] = (full, str(p.dtype).removeprefix("torch."),
                                              list(p.shape), self._where(p, st)[0])
            self._role(p, "parameter", self._unsharded[st._cdata][0], shard="unsharded")

    def _on_resize(self, st: torch.UntypedStorage, old: int, new: int,
                   t: torch.Tensor | None = None) -> None:
        """Note [Storages resized outside dispatch]: a resize frees the old bytes and
        allocates the new ones under a new sid. `t`: a tensor on the storage, for its dtype
        and shape (Note [Storages grown inside an op] in collector.py)."""
        if self._closed or old == new:
            return
        key = st._cdata
        sid = self._sids.pop(key, None)
        if sid is not None:
            self._resized_away.add(sid)
            self._outside.discard(sid)
            self._saved_mod.pop(sid, None)
            self.sink.write({"k": "free", "sid": sid, "ev": self._ev,
                             "last": self._last.pop(sid, -1)})
        if new <= 0:
            return
        sid = self._next_sid
        self._next_sid = sid + 1
        self._sids[key] = sid
        ref = weakref.ref(st, self._on_free)
        self._refs[id(ref)] = (sid, key, ref)
        name, dtype, shape, dev = self._unsharded.get(
            key, ("", "uint8", [new], self._resized_device(st)))
        if t is not None and not name:
            dtype, shape = str(t.dtype).removeprefix("torch."), list(t.shape)
        self.sink.write({"k": "alloc", "sid": sid, "ev": self._ev,
                         "bytes": self._resized_bytes(dev, new), "dev": dev, "dtype": dtype, "shape": shape, "op": "resize_",
                         "mod": self._module_now(), "ph": self._phase, "step": self._step})
        self._last[sid] = self._ev
        if name:
            self._roles_written.add((sid, "parameter"))
            self.sink.write({"k": "role", "sid": sid, "role": "parameter", "name": name,
                             "shard": "unsharded"})

    def _resized_device(self, st: torch.UntypedStorage) -> str:
        """The device a resized storage is on; a fake run's meta storage stands for its
        target device (memledger/trace/fake.py, Note [Fake runs] rule 5)."""
        target = getattr(self, "target", None)
        if st.device.type == "meta" and target is not None:
            return target.storage_device()
        return str(st.device)

    def _resized_bytes(self, dev: str, nbytes: int) -> int:
        """A fake CUDA target rounds as the caching allocator does (fake.py rule 5)."""
        target = getattr(self, "target", None)
        if target is not None and target.rounding and dev.startswith("cuda"):
            from memledger.trace.fake import cuda_block_bytes

            return cuda_block_bytes(nbytes)
        return nbytes

    # ---- 5. the full weights fully_shard cut the shards from --------------------------------
    def _note_copy(self, args: tuple) -> None:
        """A `copy_(dst, src)` during setup: remember where dst's data came from."""
        dst, src = args[0], args[1]
        if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and getattr(
                dst, "_local_tensor", None) is None and getattr(src, "_local_tensor", None) is None:
            d, s = self._sids.get(dst.untyped_storage()._cdata), \
                self._sids.get(src.untyped_storage()._cdata)
            if d is not None and s is not None and d != s:
                self._copied_from.setdefault(d, s)

    def _name_original(self, sid: int, name: str) -> None:
        """A sharded parameter's storage was cut from a full weight: name that weight."""
        src = self._copied_from.pop(sid, None)
        if src is None or (src, "parameter") in self._roles_written:
            return
        self._roles_written.add((src, "parameter"))
        rec = {"k": "role", "sid": src, "role": "parameter", "shard": "unsharded"}
        if name:
            rec["name"] = name
        self.sink.write(rec)

    # ---- 3. collectives -----------------------------------------------------------------
    def _mark_communication(self, func: Any, args: tuple, out: Any) -> None:
        comm = self._comm_ops.get(func)
        if comm is None:
            comm = self._comm_ops[func] = is_collective(func)
        if not comm:
            return
        stack = [args, out]
        while stack:
            a = stack.pop()
            if isinstance(a, torch.Tensor):
                self._role(a, "communication")
            elif isinstance(a, (list, tuple)):
                stack.extend(a)

    # ---- 4. FSDP's own labels -------------------------------------------------------------
    def _fsdp_enter(self, name: str) -> None:
        self._fsdp_units.append(fsdp_unit(name))

    def _fsdp_exit(self) -> None:
        if self._fsdp_units:
            self._fsdp_units.pop()

    def _fsdp_module(self) -> str | None:
        """The innermost FSDP unit whose work is running, else None."""
        for unit in reversed(self._fsdp_units):
            if unit is not None:
                return unit
        return None

    # ---- nested optimizers (ZeroRedundancyOptimizer steps an inner optimizer) ----------
    def _nested_step(self) -> bool:
        """True inside an optimizer step that runs inside another optimizer's step: ZeRO's
        `step()` calls its local AdamW's `step()`; both fire the global step hooks, and only
        the outer one is a training step."""
        return sum(1 for n in self._rf_stack if n.startswith("Optimizer.step#")) > 1
