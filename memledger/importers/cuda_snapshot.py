"""`memledger import snapshot.pickle`: a CUDA memory snapshot turned into a ledger.

Input: the dict `torch.cuda.memory._snapshot()` returns and `_dump_snapshot` pickles
(see torch/cuda/memory.py `_snapshot`): `segments` (each with `device`, `total_size`,
`blocks` [{address, size, state, frames}]) and `device_traces`, one list per device of
trace entries {action, addr, size, stream, frames}.

# Note [Allocator trace entries as ledger events]
Trace entry i of the chosen device is ledger event i. A block is a storage:
  - `alloc` at i creates it (`created = i`, bytes = the block size the allocator handed out,
    so the ledger's curve *is* the allocator's allocated-bytes curve);
  - `free_requested` at r is its last use (`last = r`);
  - `free_completed` at j frees it (`freed = j`): allocated bytes drop there, not at the
    request (a block used by another stream waits). Traces recorded without
    `free_completed` free at the request.
  - a free of an address never allocated in the trace (the ring buffer dropped its alloc,
    or it predates recording) is a storage from before: created at 0, `pre`;
  - a block the final `segments` show active but no trace alloc explains is also from
    before, live throughout.
  - `segment_alloc` / `segment_free` move the reserved bytes; `oom` is kept as an `oom`
    record and makes the ledger's end status "oom".
Worked example: alloc A 512 B (ev 0), alloc B 1024 B (ev 1), free_requested A (ev 2),
free_completed A (ev 3) -> live 512, 1536, 1536, 1024: peak 1536 B at event 1.
Categories come from stack frames (Note [Phases from allocator stack frames]): a forward
block freed during backward was saved for backward (activation); a backward block that
outlives backward is a gradient; an optimizer block made by `_init_group` or alive at the
end is optimizer state; blocks made while the model was moved/built are parameters; the
rest follow the ledger's rules (temporary when made during a step, other when made before).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memledger.errors import MemledgerError
from memledger.importers import frames as fr
from memledger.importers.safe_pickle import load_plain_pickle
from memledger.ledger.schema import SCHEMA
from memledger.ledger.writer import FileSink, Record
from memledger.outputs import check_output, commit, os_error, partial_path

ACTIVE = ("active_allocated", "active_awaiting_free")
STEP_PHASES = ("forward", "loss", "backward")


def check_snapshot(snap: Any, source: str) -> None:
    if not (isinstance(snap, dict) and isinstance(snap.get("segments"), list)
            and isinstance(snap.get("device_traces"), list)):
        raise MemledgerError(f"{source!r} is not a CUDA memory snapshot (no 'segments' and "
                             "'device_traces'); write one with "
                             "torch.cuda.memory._dump_snapshot(path)")


def pick_device(snap: dict, device: int | None) -> int:
    traces = snap["device_traces"]
    if device is not None:
        if not 0 <= device < max(len(traces), 1):
            raise MemledgerError(f"snapshot has traces for devices 0..{len(traces) - 1}, "
                                 f"not {device}; pass --device with one of those")
        return device
    if any(traces):
        return max(range(len(traces)), key=lambda d: len(traces[d] or []))
    devs = [s.get("device", 0) for s in snap["segments"]]
    return int(devs[0]) if devs else 0


class _Converter:
    """One pass over the trace entries (see Note above)."""

    def __init__(self, snap: dict, dev: int) -> None:
        self.dev, self.dname = dev, f"cuda:{dev}"
        self.entries = [e for e in (snap["device_traces"][dev] if snap["device_traces"] else [])
                        if isinstance(e, dict)]
        self.segments = [s for s in snap["segments"] if int(s.get("device", dev)) == dev]
        self.records: list[Record] = []
        self.pre: list[Record] = []
        self.sid = 0
        self.live: dict[Any, dict[str, Any]] = {}     # addr (or a key for pre-existing) -> facts
        self.phase, self.step = "setup", 1
        self.has_completed = any(e.get("action") == "free_completed" for e in self.entries)
        self.oom: Record | None = None
        self.seg_delta, self.seg_delta_max = 0, 0

    def _new(self, ev: int, size: int, frames: list, pre: bool, phase: str) -> dict[str, Any]:
        st = {"sid": self.sid, "ev": ev, "bytes": int(size), "frames": frames, "ph": phase,
              "step": self.step, "last": None, "pre": pre}
        self.sid += 1
        rec = {"k": "alloc", "sid": st["sid"], "ev": ev, "bytes": int(size), "dev": self.dname,
               "dtype": "", "shape": [], "op": fr.op_label(frames), "mod": fr.user_frame(frames),
               "ph": phase, "step": self.step,
               "stack": [fr.frame_label(f) for f in frames[:8]]}
        if pre:
            rec["pre"] = True
            self.pre.append(rec)
        else:
            self.records.append(rec)
        return st

    def _set_phase(self, ev: int, phase: str) -> None:
        if phase == self.phase:
            return
        if self.phase == "optimizer":               # leaving optimizer.step(): a step ended
            self.records.append({"k": "step", "step": self.step, "ev": ev - 1, "ns": 0})
            self.step += 1
        self.phase = phase
        self.records.append({"k": "phase", "ev": ev, "ph": phase, "step": self.step})

    def _free(self, st: dict[str, Any], ev: int) -> None:
        last = st["last"] if st["last"] is not None else max(ev - 1, st["ev"])
        self.records.append({"k": "free", "sid": st["sid"], "ev": ev, "last": last})
        self._roles(st, self.phase, alive_at_end=False)

    def _roles(self, st: dict[str, Any], free_phase: str | None, alive_at_end: bool) -> None:
        made, frames, sid = st["ph"], st["frames"], st["sid"]
        role = None
        if made == "forward" and free_phase == "backward":
            self.records.append({"k": "saved", "sid": sid, "ev": st["ev"],
                                 "mod": fr.user_frame(frames)})
        elif made == "backward" and (fr.is_accumulate_grad(frames) or free_phase != "backward"):
            role = "gradient"
        elif made == "optimizer" and (fr.makes_optimizer_state(frames) or alive_at_end):
            role = "optimizer_state"
        elif made == "setup" and fr.phase_from_frames(frames) == "setup":
            role = "parameter"
        if role:
            self.records.append({"k": "role", "sid": sid, "role": role})

    def run(self) -> list[Record]:
        self.records.append({"k": "phase", "ev": 0, "ph": "setup", "step": 1})
        free_action = "free_completed" if self.has_completed else "free_requested"
        for ev, e in enumerate(self.entries):
            act, addr, size = e.get("action"), e.get("addr"), int(e.get("size", 0) or 0)
            frames = [fr.normalize(f) for f in (e.get("frames") or []) if isinstance(f, dict)]
            if act == "alloc":
                ph = fr.phase_from_frames(frames)
                if ph is None and not frames:      # rule 5 of the Note on frames
                    ph = "backward" if self.phase in STEP_PHASES else self.phase
                elif ph is None:                    # rule 6
                    ph = "loss" if self.phase in ("forward", "loss") else "other"
                self._set_phase(ev, ph)
                self.live[addr] = self._new(ev, size, frames, False, ph)
            elif act == "free_requested" and addr in self.live:
                self.live[addr]["last"] = ev
            if act == free_action:
                st = self.live.pop(addr, None)
                if st is None:                          # allocated before the trace began
                    st = self._new(0, size, frames, True, "setup")
                self._free(st, ev)
            elif act == "segment_alloc":
                self.seg_delta += size
                self.seg_delta_max = max(self.seg_delta_max, self.seg_delta)
            elif act == "segment_free":
                self.seg_delta -= size
            elif act == "oom":
                self.oom = {"k": "oom", "ev": ev, "bytes": size,
                            "device_free": int(e.get("device_free", 0) or 0)}
                self.records.append(self.oom)
        n = max(len(self.entries), 1)
        traced = set(self.live)
        for seg in self.segments:                        # active blocks no alloc explains
            addr = seg.get("address")
            for b in seg.get("blocks") or []:
                # blocks tile their segment in address order; a block without an address
                # (torch's profile-to-snapshot writes none) sits right after the one before
                at = b.get("address", addr)
                size = int(b.get("size", 0) or 0)
                addr = at + size if isinstance(at, int) else None
                if b.get("state") in ACTIVE and (at is None or at not in traced):
                    frames = [fr.normalize(f) for f in b.get("frames") or []
                              if isinstance(f, dict)]
                    self.live[("pre", self.sid)] = self._new(0, size, frames, True, "setup")
        for st in self.live.values():
            self.records.append({"k": "live", "sid": st["sid"], "last": n - 1})
            self._roles(st, None, alive_at_end=True)
        if self.phase == "optimizer":
            self.records.append({"k": "step", "step": self.step, "ev": n - 1, "ns": 0})
        return self.pre + self.records

    def measured(self, ledger_records: list[Record]) -> Record:
        n = max(len(self.entries), 1)
        delta = [0] * (n + 1)
        for r in ledger_records:
            if r["k"] == "alloc":
                delta[r["ev"]] += r["bytes"]
        sizes = {r["sid"]: r["bytes"] for r in ledger_records if r["k"] == "alloc"}
        for r in ledger_records:
            if r["k"] == "free":
                delta[r["ev"]] -= sizes[r["sid"]]
        cur, peak = 0, 0
        for i in range(n):
            cur += delta[i]
            peak = max(peak, cur)
        reserved = sum(int(s.get("total_size", 0)) for s in self.segments)
        reserved_start = reserved - self.seg_delta
        frag = reserved - cur
        return {"k": "measured", "source": "cuda-snapshot", "device": self.dname,
                "peak_bytes": peak, "allocated": cur, "reserved": reserved,
                "reserved_peak": max(reserved, reserved_start + self.seg_delta_max),
                "fragmentation_bytes": max(frag, 0),
                "fragmentation": round(max(frag, 0) / reserved, 6) if reserved else 0.0,
                "segments": len(self.segments)}


def snapshot_records(snap: Any, source: str = "snapshot", device: int | None = None
                     ) -> list[Record]:
    """All ledger records (header first, end last) for one device of a snapshot dict."""
    check_snapshot(snap, source)
    try:
        dev = pick_device(snap, device)
        conv = _Converter(snap, dev)
        body = conv.run()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # a snapshot is someone else's data: a field of the wrong type is bad input (exit 2)
        raise MemledgerError(f"{source!r} is not a well-formed CUDA memory snapshot "
                             f"({type(e).__name__}: {str(e)[:80]}); write it again with "
                             "torch.cuda.memory._dump_snapshot(path)") from None
    header = {"k": "header", "schema": SCHEMA, "source": "cuda-snapshot", "snapshot": source,
              "device": conv.dname, "steps_requested": 0}
    end = {"k": "end", "ev": max(len(conv.entries), 1),
           "status": "oom" if conv.oom else "ok",
           "message": (f"CUDA out of memory asking for {conv.oom['bytes']} bytes"
                       if conv.oom else "")}
    return [header, *body, conv.measured(body), end]


def import_snapshot(path: str | Path, out: str | Path, device: int | None = None) -> Path:
    """Read a `_dump_snapshot` pickle safely and write the ledger to `out`."""
    out = check_output(out, "ledger", inputs=[path], ledger=True)
    snap = load_plain_pickle(path)
    records = snapshot_records(snap, str(path), device)
    partial = partial_path(out)
    sink = FileSink(partial)
    try:
        for r in records:
            sink.write(r)
    finally:
        sink.close()
    if sink.error is not None:
        partial.unlink(missing_ok=True)
        raise os_error(sink.error, f"the ledger {str(out)!r}")
    commit(partial, out)
    return out
