"""Offloading saved activations: `saved_tensors_hooks` that move bytes off the device.

# Note [Offload moves storages, once each]
Autograd calls `pack` once per *save*, not per storage: q, k and v of one attention are
three views of the single `qkv` storage (2*64*384*4 = 196,608 bytes at B=2, T=64, C=128),
saved by three ops. Writing each view separately would write (and read back) the storage
three times, so the offloader works on whole untyped storages:

- pack: the first save of a storage writes its bytes once (CPU: a slot of one file, Note
  [One file, slots reused]; CUDA: a pinned host buffer filled on a side stream) and every save gets a small `_Packed` record (dtype,
  size, stride, storage offset) pointing at that copy. Autograd now holds the record, not
  the tensor, so the device bytes are freed at the storage's last forward use.
- unpack: the first unpack reads the storage back into one fresh device allocation of
  196,608 bytes, which the copy holds until the last of its saves still held has been
  unpacked (Note [A save let go of unread, for the offloader]); the other views' unpacks
  reuse it, and each view is rebuilt with the same size, stride and offset, so kernels
  see the same strides as in the baseline and gradients stay bitwise equal. (A weak
  cache is not enough: autograd may drop the storage's Python object while its C++
  storage is still in use, and a second read would then double the bytes.)

A later save of a storage already copied is written again, over its own byte range of the
copy, unless it is a view of a tensor an earlier save was a view of, at the same version (q,
k and v: nothing changed since, so nothing is written). Why: tensors that share a storage
without being views of one another have version counters of their own, and one may change
after another was saved. torch's GRU cell splits its gates with `unsafe_chunk` and runs
`add_().sigmoid_()` on each chunk in turn: the reset gate is saved (and the storage
copied) before the update gate is computed in the same storage, so the update gate read
back stale and every GRU gradient differed under offload (`compare` rejected it). Each
view's elements are what they were at its own save as long as no saved view changes after
its save (what autograd needs without offload too), so writing each later save's range at
its save is exact.

Parameters, buffers and storages smaller than `min_bytes` stay on the device (`pack`
returns them in place, detached where they have a `grad_fn`: Note [A save left in place
holds no graph]): parameters are resident anyway and copying them would only add. So are
the constants a module holds as plain attributes (Note [A constant a module holds, left on
the device], measure/apply.py, which hands them in with the parameters and buffers).

# Note [One file, slots reused]
On CPU the copies go to one unnamed file per Offloader (in `directory`, `$TMPDIR` by
default), at offsets: a slot is taken at pack and given back when the copy's last record
goes, and the next step's storage of that size takes it again. Every step offloads the
same sizes, so after the first step the file stops growing (one step's offloaded bytes)
and a storage costs one `pwrite` and one `pread`. The first version wrote a file per
storage and unlinked it after backward: create + unlink per storage per step (63 us
each, calibrated), and on ext4 (`discard`) a cost that grew from process to process: the
tiny GPT's `offload:blocks.*` read 17.9, 20.5, 22.6 ms in three processes in a row, then
18.7, 26.8, 29.5 ms, where tmpfs held ~18.5 ms (docs/accuracy.md). A slot is reused only
for a storage at least half its size, so varying sizes waste at most half the file.
Slots given back from a finaliser (any thread, possibly in the middle of `pack`) go to a
list that only `pack` drains, so the sorted free list is touched by one caller at a time.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import tempfile
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from memledger.outputs import TMP_ELSEWHERE, os_error
from memledger.trace.wrapped import storage_ptrs


def _bytes_of(st: torch.UntypedStorage) -> memoryview:
    """A CPU storage's bytes, no copy. Not through `.numpy()`: that marks the storage not
    resizable, and FSDP2 frees the parameters it gathered with `resize_(0)` ("Trying to
    resize storage that is not resizable": offload crashed every FSDP2 script on CPU)."""
    n = st.nbytes()
    if n == 0:
        return memoryview(b"")
    return memoryview((ctypes.c_char * n).from_address(st.data_ptr())).cast("B")


class _SlotFile:
    """CPU copies: one unnamed file, slots reused step after step (Note [One file, slots
    reused]). A slot is (capacity in bytes, offset)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file = tempfile.TemporaryFile(dir=directory, buffering=0)
        self.fd = self._file.fileno()
        self.end = 0                                # the file's length in slots so far
        self._free: list[tuple[int, int]] = []      # sorted (capacity, offset)
        self._returned: list[tuple[int, int]] = []  # given back, not yet sorted in

    def take(self, nbytes: int) -> tuple[int, int]:
        while self._returned:
            bisect.insort(self._free, self._returned.pop())
        i = bisect.bisect_left(self._free, (nbytes, -1))
        if i < len(self._free) and self._free[i][0] <= 2 * nbytes:
            return self._free.pop(i)
        slot = (nbytes, self.end)
        self.end += nbytes
        return slot

    def give_back(self, slot: tuple[int, int]) -> None:
        self._returned.append(slot)                 # atomic: safe from any thread

    def write(self, offset: int, data: memoryview) -> None:
        try:
            while len(data):
                n = os.pwrite(self.fd, data, offset)
                data, offset = data[n:], offset + n
        except OSError as e:      # a full folder is the machine's state, not the script's
            # failure (Note [A full temporary folder] in memledger/outputs.py)
            raise os_error(e, f"offload's copies in {self.directory!r} (its file needed "
                           f"{offset + len(data):,} bytes)", elsewhere=TMP_ELSEWHERE) from None

    def read_into(self, offset: int, buf: memoryview) -> None:
        while len(buf):
            n = os.preadv(self.fd, [buf], offset)
            if n <= 0:
                raise OSError(f"memledger offload: short read at offset {offset}")
            buf, offset = buf[n:], offset + n

    def close(self) -> None:
        self._file.close()


class _Copy:
    """One storage's bytes off the device; its slot (CPU) is given back when the last
    record goes."""

    def __init__(self, nbytes: int, device: torch.device, slots: _SlotFile | None = None,
                 slot: tuple[int, int] | None = None, host: torch.Tensor | None = None,
                 event=None) -> None:
        self.nbytes = nbytes
        self.device = device
        self.slots = slots
        self.slot = slot
        self.host = host
        self.event = event
        self.saves = 0          # _Packed records made for this copy (one per save)
        # (tensor a save was a view of, or that tensor; its version then) for each range
        # written: a later save of a view of one of them at that version needs no write
        self.written: list[tuple[weakref.ref, int]] = []
        self.unpacked = 0       # unpacks served so far
        self.loaded: torch.UntypedStorage | None = None  # read back, held until the last unpack
        self.round = 0          # read-backs so far: a record read in this one is counted

    def served(self, packed: "_Packed") -> None:
        """One unpack of `packed` served from `loaded`."""
        if packed.read[0] != self.round:
            packed.read = (self.round, 0)
        packed.read = (self.round, packed.read[1] + 1)
        self.unpacked += 1
        self._done_if_all_read()

    def let_go(self, read: tuple[int, int]) -> None:
        """A record's save is gone (Note [A save let go of unread, for the offloader])."""
        self.saves -= 1
        if read[0] == self.round:
            self.unpacked -= read[1]
        self._done_if_all_read()

    def _done_if_all_read(self) -> None:
        if self.loaded is not None and self.unpacked >= self.saves:
            self.loaded = None   # the last save read back: the tensors hold it now
            self.unpacked = 0    # a second backward (retain_graph) reads again
            self.round += 1

    def __del__(self) -> None:
        if self.slots is not None:
            self.slots.give_back(self.slot)


@dataclass
class _PackedWrapper:
    """A wrapper subclass's save: each inner tensor packed on its own (Note [Wrapper
    subclasses] in trace/wrapped.py), and what `__tensor_unflatten__` needs to rebuild it."""

    cls: type
    inner: dict
    ctx: object
    size: object
    stride: object


# Note [A conjugate view read back]
# A save can be a view with a lazy bit: RotatE (pykeen, tests/clients/train_pykeen.py
# --mode rotate) scores `t * torch.conj(r)`, and `mul` saves `conj(r)` as it was handed,
# a view of `r`'s storage with the conjugate bit set (`torch._neg_view` sets the negative
# bit the same way). The copy holds the storage's bytes; the tensor rebuilt over them by
# `set_` had no bit, so the backward read `r` for `conj(r)`: the gradient of `t` came out
# wrong, and the backward's `grad * other.conj()` now met a conjugate view and cloned it,
# 16,384 B the baseline never made (offload:interaction measured 152,080 B, predicted
# 135,696 B). The bits are kept with the save and set again on the rebuilt tensor (views
# again, no copy), so the backward reads what was saved.
# Note [A save let go of unread, for the offloader]
# A node whose output the forward drops dies at once, and autograd lets go of its saves
# unread (Note [A save autograd let go of unread], trace/collector.py). sinkhorn-
# transformer's sort net hands back its bucket-reordering matrix R, and the attention
# saves it three times: by the einsum that reorders the keys, by the one that reorders
# the values (whose output the library overwrites with the keys': `b_v_r =
# b_k_r.reshape(...)`) and by `R.abs()` (read by an `argmax` for the mask, an index).
# The copy counted three saves, backward unpacked one, and the read-back R stayed with
# the copy until its last record went: in a graph backward keeps (a reversible decoder's
# `autograd.backward(..., retain_graph=True)` into the encoder it attends to), to the next
# step's forward. The replay reads a save let go of in forward as holding nothing into
# backward (Note [A save backward never reads], replay/engine.py): `offload:` on the
# encoder's layers predicted 433,890 B, measured 434,146 B (one 128 B R per attention
# layer held over the optimizer step; tests/clients/train_sinkhorn.py --mode encdec
# --reversible dec). So a record that goes tells its copy (`let_go`): the copy counts the
# saves still held, less the unpacks of this read-back that the record made, and lets go
# of the read-back once every save still held has been read. In plain torch:
# tests/clients/train_handback.py --case unread (`h.abs().argmax(-1)` beside a Linear
# reading `h`, under `retain_graph=True`), 2,048 B under before.
# Note [A round held across backward passes]
# A read-back round ends once every save still held was read in it, not when the backward
# pass that read the storage back ends: a save the pass will not read (one a later pass
# reads, one no pass reads) holds the copy past the pass, to its own read or its death.
# Ending each round with its pass too (autograd's final callback, queued at the read-back)
# was tried (the fifty-first session, the helper fix51b) and left: on the plain-torch
# case of Note [Rounds of a read-back, replayed] (replay/engine.py) it measured 128 B
# less (32,620 B against 32,748), on tests/clients/train_handback.py --case shared and
# --case backcast 1,024 B less, on memformer's `memory_replay_backprop` `offload:@Attention`
# 512 B less but `offload:*` 512 B more (141,628 against 141,116: a copy dropped at one
# pass's end, and read back again by the next while a tensor of the first still lived),
# and every storage a later pass reads costs one more read-back. The rule stays what it
# was; the replay replays its rounds from every read (Note [Rounds of a read-back,
# replayed]).
@dataclass(eq=False)
class _Packed:
    copy: _Copy
    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    conj: bool = False   # Note [A conjugate view read back]
    neg: bool = False
    read: tuple[int, int] = (-1, 0)   # (the copy's read-back round, unpacks in it)

    def __del__(self) -> None:   # Note [A save let go of unread, for the offloader]
        self.copy.let_go(self.read)


def _pointer(t: torch.Tensor | None) -> int:
    """`t.data_ptr()`; -1 for a tensor gone, 0 where it has no pointer of its own."""
    if t is None:
        return -1
    try:
        return t.data_ptr()
    except (RuntimeError, NotImplementedError):   # a wrapper with no storage of its own
        return 0


# Note [A save left in place holds no graph]
# `pack` handed a tensor it leaves on the device (a parameter, a storage under `min_bytes`)
# back as the same object. A pack hook's result is held by the node that saved it, and an
# op that saves its own output (`amax`, `exp`, `sigmoid`, `softmax`) then holds that output,
# whose `grad_fn` is the node itself: a cycle through C++ that Python's collector cannot
# see. Without hooks autograd saves an output without its `grad_fn`, and backward breaks
# the cycle anyway; but where no backward runs through the node (a part of a graph dropped
# at once: hyper_connections' Sinkhorn normalises with `log_alpha - log_alpha.amax(dim,
# keepdim=True).detach()`), the output and everything the node saved stayed to the end of
# the process. tab-transformer-pytorch's TabTransformer (tests/clients/train_tabtf.py)
# under `offload:transformer:min=2KiB` measured 1,963,904 B against 1,958,784 B predicted
# (2 steps: two mHC blocks a step, each leaking its (16, 5, 1, 1, 4) fp32 amax, 1,280 B);
# `min=16KiB` left `amax`'s saved input (6,400 B each) too: 30,720 B over. Without
# `min=` every such storage was offloaded (a `_Packed` record holds no tensor) and the
# policy measured as predicted. A tensor left in place is now handed back detached: the
# same storage and version counter (autograd's own version check reads the same), no
# `grad_fn`; autograd rebuilds the saved variable's graph edge from what it kept at the
# save, as it does for a `_Packed` record read back.
def _left(t: torch.Tensor) -> torch.Tensor:
    """`t` as `pack` leaves it on the device: detached where it has a `grad_fn` (Note [A
    save left in place holds no graph]); a leaf (a parameter) as it is."""
    return t.detach() if t.grad_fn is not None else t


class Offloader:
    """pack/unpack for `saved_tensors_hooks`. See Note [Offload moves storages, once each]."""

    def __init__(self, min_bytes: int = 0, skip_storages: set[int] | None = None,
                 directory: str | None = None,
                 skip_later: list[torch.Tensor] | None = None,
                 skip_state: list[torch.Tensor] | None = None) -> None:
        self.min_bytes = min_bytes
        self._fixed = set(skip_storages or ())
        # the model's parameters and buffers, weakly, their storages read again at each
        # region call (Note [A parameter given a new storage])
        self._state = [weakref.ref(t) for t in skip_state or ()]
        self._where: list[int] = []   # their data_ptr()s when the set was last built
        self.skip = set(self._fixed)
        self.refresh_skip()
        # a lazy module's parameters, skipped once they have a storage (Note [Lazy
        # parameters] in trace/collector.py): weakly, the model owns them
        self._skip_later = [weakref.ref(t) for t in skip_later or ()]
        # the file is unnamed (gone when closed or when the process dies): it needs no
        # folder of its own, only one to live in
        self.directory = directory or tempfile.gettempdir()
        os.makedirs(self.directory, exist_ok=True)
        self._slots: _SlotFile | None = None    # CPU: made at the first write
        # data_ptr -> (weakref(storage), weakref(_Copy)); identity is checked on use because
        # addresses are reused.
        self._written: dict[int, tuple[weakref.ref, weakref.ref]] = {}
        self._stream = None
        self.bytes_out = 0                            # bytes written off the device
        self.storages_out = 0                         # storages written (one copy each)
        self.bytes_in = 0                             # bytes read back

    # Note [A parameter given a new storage]
    # The storages the offloader leaves alone (the model's parameters and buffers) were
    # read once, by address, when the policy was installed. pykeen's training loop
    # (tests/clients/train_pykeen.py --mode hole) then re-initializes the entity embeddings
    # with `weight.data = ...` inside `train()`: the old address was freed and reused by
    # whatever came next, and a (16, 32) fp32 embedding lookup made there was kept on the
    # device as if it were a weight, at one address or another as malloc chose:
    # `offload:interaction` measured 56,476, 56,732, 58,524 or 58,652 B from one fresh
    # process to the next (predicted 56,476); and the new weight's storage was no longer
    # skipped. The parameters and buffers are held weakly and their storages read again
    # at each call of an offloaded region (`refresh_skip`).
    # A region call reads each tensor's `data_ptr()` (0.1 us) and rebuilds the set (storage_ptrs,
    # 1 us a tensor: wrappers, DTensors, functorch) only when one moved, or has no pointer
    # of its own to compare.
    def refresh_skip(self) -> None:
        """The storages to leave alone: those given by address, and the current storages of
        the state tensors given (Note [A parameter given a new storage])."""
        if not self._state:
            return
        where = [_pointer(ref()) for ref in self._state]
        if where == self._where and 0 not in where:
            return
        self._where = where
        skip = set(self._fixed)
        for ref in self._state:
            t = ref()
            if t is not None:
                skip.update(storage_ptrs(t))
        self.skip = skip

    def skip_also(self, state: list[torch.Tensor]) -> None:
        """Leave these parameters and buffers alone too: those of modules the model
        registered after the policy went on (Note [A region registered after the first
        call], measure/apply.py)."""
        known = {id(t) for ref in (*self._state, *self._skip_later) if (t := ref()) is not None}
        for t in state:
            if id(t) in known:
                continue
            if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
                self._skip_later.append(weakref.ref(t))
            else:
                self._state.append(weakref.ref(t))
        self._where = []   # the set is built again
        self.refresh_skip()

    # ---- pack -----------------------------------------------------------------------------
    def _take_later(self) -> None:
        waiting = []
        for ref in self._skip_later:
            p = ref()
            if p is None:
                continue
            if isinstance(p, torch.nn.parameter.UninitializedTensorMixin):
                waiting.append(ref)
            else:
                self.skip.update(storage_ptrs(p))
                self._state.append(ref)   # its storage read again at each refresh
        self._skip_later = waiting

    def pack(self, t: torch.Tensor):
        if self._skip_later:
            self._take_later()
        if is_traceable_wrapper_subclass(t):   # Note [Wrapper subclasses]: its memory is
            return self._pack_wrapper(t)       # its inner tensors'
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return _left(t)
        ptr = st.data_ptr()
        if ptr in self.skip or st.nbytes() < self.min_bytes or st.nbytes() == 0 or \
                t.device.type not in ("cpu", "cuda"):
            return _left(t)   # Note [A save left in place holds no graph]
        refs = self._written.get(ptr)
        copy = refs[1]() if refs is not None and refs[0]() is st else None
        base = t._base if t._base is not None else t
        if copy is None:
            copy = self._write(st, t.device)
            copy.written.append((weakref.ref(base), t._version))
            self._written[ptr] = (weakref.ref(st), weakref.ref(copy))
        elif not any(b() is base and v == t._version for b, v in copy.written):
            self._rewrite(copy, st, t)    # Note [Offload moves storages, once each]
            copy.written.append((weakref.ref(base), t._version))
        copy.saves += 1
        return _Packed(copy, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(),
                       t.is_conj(), t.is_neg())

    def _write(self, st: torch.UntypedStorage, device: torch.device) -> _Copy:
        self.bytes_out += st.nbytes()
        self.storages_out += 1
        if device.type == "cpu":
            if self._slots is None:
                self._slots = _SlotFile(self.directory)
            slot = self._slots.take(st.nbytes())
            self._slots.write(slot[1], _bytes_of(st))
            return _Copy(st.nbytes(), device, slots=self._slots, slot=slot)
        # CUDA: pinned host buffer, copied on a side stream that waits for the producer.
        raw = torch.empty(0, dtype=torch.uint8, device=device).set_(st)  # a byte view, no copy
        if self._stream is None:
            self._stream = torch.cuda.Stream(device)
        host = torch.empty(st.nbytes(), dtype=torch.uint8, pin_memory=True)
        self._stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(self._stream):
            host.copy_(raw, non_blocking=True)
            raw.record_stream(self._stream)   # keep the device block until the copy is done
            event = torch.cuda.Event()
            event.record(self._stream)
        return _Copy(st.nbytes(), device, host=host, event=event)

    def _rewrite(self, copy: _Copy, st: torch.UntypedStorage, t: torch.Tensor) -> None:
        """Write `t`'s byte range of its storage over the copy made at an earlier save."""
        if t.numel() == 0:
            return
        item = t.element_size()
        last = t.storage_offset() + sum((n - 1) * abs(d) for n, d in zip(t.shape, t.stride()))
        lo, hi = t.storage_offset() * item, min((last + 1) * item, st.nbytes())
        self.bytes_out += hi - lo
        if copy.slots is not None:
            copy.slots.write(copy.slot[1] + lo, _bytes_of(st)[lo:hi])
            return
        raw = torch.empty(0, dtype=torch.uint8, device=copy.device).set_(st)
        self._stream.wait_stream(torch.cuda.current_stream(copy.device))
        with torch.cuda.stream(self._stream):
            copy.host[lo:hi].copy_(raw[lo:hi], non_blocking=True)
            raw.record_stream(self._stream)
            copy.event = torch.cuda.Event()
            copy.event.record(self._stream)

    # ---- unpack ---------------------------------------------------------------------------
    def _pack_wrapper(self, t: torch.Tensor) -> "_PackedWrapper":
        """Each floating-point inner tensor packed (a jagged tensor's values; a frozen
        weight's are skipped as parameters); the others stay the same objects: a jagged
        tensor's ragged size is tied to its offsets tensor, and its backward refused a
        copy ("expected self and grad_output to have the same exact offsets tensor")."""
        names, ctx = t.__tensor_flatten__()
        inner = {}
        for n in names:
            x = getattr(t, n)
            inner[n] = self.pack(x) if x.is_floating_point() else x
        return _PackedWrapper(type(t), inner, ctx, t.size(), t.stride())

    def unpack(self, packed):
        if isinstance(packed, _PackedWrapper):   # rebuilt around its inner tensors, those
            inner = {n: self.unpack(p) for n, p in packed.inner.items()}   # left in place
            return packed.cls.__tensor_unflatten__(inner, packed.ctx, packed.size,  # the
                                                   packed.stride)   # same objects (a jagged
        if not isinstance(packed, _Packed):                        # tensor's offsets: its
            return packed                                          # ragged size stays)
        copy = packed.copy
        st = copy.loaded
        if st is None:
            st = self._read(copy)
            copy.loaded = st
        copy.served(packed)   # the last save read back: the tensors hold it now
        out = torch.empty(0, dtype=packed.dtype, device=copy.device)
        out = out.set_(st, packed.offset, packed.size, packed.stride)
        if packed.neg:   # Note [A conjugate view read back]
            out = torch._neg_view(out)
        return out.conj() if packed.conj else out

    def _read(self, copy: _Copy) -> torch.UntypedStorage:
        self.bytes_in += copy.nbytes
        buf = torch.empty(copy.nbytes, dtype=torch.uint8, device=copy.device)
        if copy.slots is not None:
            copy.slots.read_into(copy.slot[1], _bytes_of(buf.untyped_storage()))
        else:
            torch.cuda.current_stream(copy.device).wait_event(copy.event)
            buf.copy_(copy.host, non_blocking=True)
        return buf.untyped_storage()

    def close(self) -> None:
        self._written.clear()
        if self._slots is not None:
            self._slots.close()
            self._slots = None


def where_copies_go(directory: str | None = None) -> str:
    """CPU offload's destination as the user should read it: the folder its files go to and
    that folder's file system (from /proc/mounts where there is one): the cost of a byte
    written and read back differs by file system (docs/accuracy.md: ext4 drifted from 18 to
    30 ms per step between processes where tmpfs held 18 ms)."""
    directory = os.path.realpath(directory or tempfile.gettempdir())
    fs = ""
    try:
        with open("/proc/mounts", encoding="utf-8") as fh:
            best = ""
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and (directory == parts[1] or directory.startswith(
                        parts[1].rstrip("/") + "/")) and len(parts[1]) >= len(best):
                    best, fs = parts[1], parts[2]
    except OSError:
        pass
    return f"files in {directory}" + (f" ({fs})" if fs else "")
