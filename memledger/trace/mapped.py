"""Tensors over a mapped file: `torch.load(mmap=True)`, safetensors' `load_file` and
`from_pretrained` (its default backend maps the file).

# Note [Storages over a mapped file]
Such a loader maps the whole file once (`UntypedStorage.from_file`), and each tensor's
storage is a slice of that mapping; the slices keep the mapping alive. The CPU profiler
counts the mapping once, at its whole size (the file's), when it is made, and frees it when
the last slice goes. The ledger read each slice as memory torch's allocator did not hand
out and left it out: a transformers Llama loaded with `from_pretrained` had no
`parameter` at all, the ledger 429,408 B under the allocator on a 417,792 B model, the gap
shown as 20 % `workspace` (predictions matched `measure` only by carrying that gap to every
policy); `torch.load(mmap=True)` of a resumed run, 1,645,553 B under (its file, whole, with
the optimizer's state in it). Now each slice is a storage of the ledger
with its own role (its parameter, its optimizer state), freed with the mapping, when the
last slice of it goes; the rest of the file (its header, the pickle, alignment) is one
more row, op MAPPED_REST_OP, live from the first slice to the mapping's end, written when
the mapping goes (or at the end of the trace), when the slices' bytes are known.
Known limitation: a mapping is met at the first use of one of its slices in the traced
thread (transformers rebuilds the weights in a thread of its own), not when it was made:
anything the script let go of in between was, for the allocator, alive beside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MAPPED_REST_OP = "(mapped file's rest)"


def file_mapping(ptr: int) -> tuple[int, int, str, bool] | None:
    """The mapping of a file that holds address `ptr` (start, end, path, private), from
    Linux's /proc/self/maps; None if it is no file's, or where that cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                lo, _, rest = line.partition("-")
                hi, _, rest = rest.partition(" ")
                if int(lo, 16) <= ptr < int(hi, 16):
                    fields = rest.split(None, 4)   # perms, offset, device, inode, path
                    if len(fields) == 5 and fields[3] != "0" and fields[4].startswith("/"):
                        return int(lo, 16), int(hi, 16), fields[4].rstrip("\n"), \
                            fields[0].endswith("p")
                    return None
    except (OSError, ValueError):
        return None
    return None


def _file_size(path: str, start: int, end: int) -> int:
    """The size the loader mapped: the file's, as the profiler counts it. A file deleted
    since (a temporary folder `from_pretrained` read, gone before this thread first used
    the weights) is still there through /proc/self/map_files; else the mapping's length,
    rounded up to pages."""
    for name in (path, f"/proc/self/map_files/{start:x}-{end:x}"):
        try:
            return os.stat(name).st_size
        except OSError:
            continue
    return end - start


@dataclass
class _Mapping:
    size: int          # bytes the profiler counts for the whole mapping
    alloc: dict        # the rest's alloc record, less its sid and bytes
    live: set = field(default_factory=set)    # sids of its slices still alive
    dead: list = field(default_factory=list)  # sids of slices gone, their frees held
    seen: int = 0      # bytes of its slices


class MappedFiles:
    """The mappings slices were met in, and which slice belongs to which (Note [Storages
    over a mapped file])."""

    def __init__(self) -> None:
        self._maps: dict[int, _Mapping] = {}   # start address -> mapping
        self._of: dict[int, int] = {}          # sid -> its mapping's start

    def __bool__(self) -> bool:
        return bool(self._of)

    def add(self, sid: int, ptr: int, nbytes: int, alloc: dict, private_only: bool) -> bool:
        """Note a storage whose memory maps a file; False if it does not. `private_only`:
        for a storage not met at `set_` (a loader's thread rebuilt it, out of the collector's
        sight), only a private mapping, as torch's and safetensors' are: numpy's `memmap`
        maps shared (modes "r", "r+"), and `torch.from_numpy` of it is numpy's memory,
        which the profiler never counts."""
        where = file_mapping(ptr)
        if where is None or private_only and not where[3]:
            return False
        start, end, path, _ = where
        m = self._maps.get(start)
        if m is None:
            m = self._maps[start] = _Mapping(_file_size(path.removesuffix(" (deleted)"),
                                                        start, end),
                                             {**alloc, "op": MAPPED_REST_OP, "shape": []})
        m.live.add(sid)
        m.seen += nbytes
        self._of[sid] = start
        return True

    def gone(self, sid: int) -> tuple[list[int], dict | None] | None:
        """A slice's storage was freed. None: `sid` is no slice (free it as usual). Else the
        slices to free now (none while others of its mapping live) and, when the mapping
        went, its rest's alloc record (without a sid; None when the slices were all of
        it)."""
        start = self._of.pop(sid, None)
        if start is None:
            return None
        m = self._maps[start]
        m.live.discard(sid)
        m.dead.append(sid)
        if m.live:
            return [], None
        del self._maps[start]
        return m.dead, self._rest(m)

    def remaining(self):
        """At the end of the trace: per mapping still alive, its slices already gone and its
        rest's alloc record (as `gone`)."""
        for m in self._maps.values():
            yield m.dead, self._rest(m)
        self._maps.clear()
        self._of.clear()

    @staticmethod
    def _rest(m: _Mapping) -> dict | None:
        rest = m.size - m.seen
        return {**m.alloc, "bytes": rest, "dtype": "uint8", "shape": [rest]} if rest > 0 \
            else None
