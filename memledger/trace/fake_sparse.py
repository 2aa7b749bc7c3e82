"""Rule 13 of Note [Fake runs] (trace/fake.py): a sparse COO tensor's parts at the sizes
the real run makes them.

Note [Fake sparse tensors]
FakeTensorMode's sparse ops (`_coalesce`, `t` / `transpose` of a sparse tensor, `clone`,
`sparse_mask`) make COO results with no entries, whatever their inputs': how many entries a
coalesce keeps depends on the indices' values. So a sparse filter made in setup and
coalesced (torch-harmonics' DISCO `psi`) and the transposes its sparse `bmm` makes in
backward read 0 B where the real run holds their indices (int64) and values: the harmonics
tier's `--model sht` 278,064 B under the real ledger, a plain-torch filter of 40 entries
1,120 B (tests/clients/train_sparse_filter.py). A sparse tensor's entry count is a small
integer fact, as Rule 3's index integers are: each sparse COO result keeps a real twin (its
indices real where the fake run knows them, its values zeros), made by running the op for
real on its inputs' twins (dense inputs: their shadows, or one real zero expanded to
their shape, which holds no memory: SparseAdam's `sparse_mask` of its state by the
gradient; a conversion from a dense one of unknown values, ones: Note [A sparse tensor
made from a dense one]); where the fake result has not the twin's entries, it is rebuilt with parts
whose shapes, strides and storage sizes are the twin's parts' (a coalesce's parts keep
storages of its input's entry count, the shapes its kept count), the parts' meta storages
filed under the sparse tensor's fake device (`PART_DEVICES`: the collector reads a fake
sparse tensor's parts as plain meta tensors). Where the indices are stand-ins (a random
draw of the fake run's own, Rule 21) the count is the stand-in's; indices drawn from a
generator of the script's own are the real run's while every draw from it is (Rule 4 of
Note [Draws a fake run makes for real]: its float draws are made for real too). CSR and
the other compressed layouts: Note [Fake compressed layouts], below. A sparse input with no
twin (made before the run, or from an op that failed for real) leaves the result as
FakeTensorMode made it, and Rule 13's stand-in record says so. Cost: every op of a fake
run passes one more Python frame (`_RunMode.__torch_dispatch__`: a type test); only sparse
results run anything for real, and a twin holds host memory of its entries. The real
trace's hot path is untouched.
"""

from __future__ import annotations

import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

_NEW_COO = torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors.default
_NEW_COMPRESSED = torch.ops.aten._sparse_compressed_tensor_unsafe.default
# every sparse layout; all but COO keep compressed indices (Note [Fake compressed layouts])
SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr,
                  torch.sparse_bsc)


class _Twin:
    """A sparse fake tensor's real twin, kept in its `__dict__`; a deep copy shares it
    (nothing writes a twin). `said`: the stand-in its entry count is, if any (Note [A
    sparse tensor made from a dense one])."""

    __slots__ = ("t", "said")

    def __init__(self, t: torch.Tensor, said: str | None = None) -> None:
        self.t = t
        self.said = said

    def __deepcopy__(self, memo) -> "_Twin":
        return _Twin(self.t, self.said)


def twin_of(t: torch.Tensor) -> torch.Tensor | None:
    if not isinstance(t, FakeTensor):
        return t if t.layout in SPARSE_LAYOUTS else None
    tw = getattr(t, "_memledger_sparse", None)
    return tw.t if tw is not None else None


# Note [A sparse tensor made from a dense one]
# `dense.to_sparse()` (COO), `.to_sparse_csr()` and the other compressed layouts keep one
# entry per nonzero element (per nonzero row or block where dense dimensions or blocks are
# kept): a count read off the dense input's values. Where the fake run knows them (Rule
# 3's shadow: a mask of drawn token ids) the twin is made from them and the count is the
# real run's. Where it does not (an activation, `torch.rand(...) < p`), the dense stand-in
# used to be zeros: a twin with no entries, so the result's parts read 0 B, and nothing
# was said (a (64, 64) mask of 408 nonzeros: its CSR's column indices and values, 4,896 B,
# missing from the fake ledger). Now such a conversion's twin is made from ones, every
# element an entry: the count's upper bound, as `nonzero` of unknown values gets (Rule 3),
# and the result is a stand-in said at its line ("upper bound: every element"). A dense
# input over BOUND_NUMEL elements keeps the zeros (a twin of every element would hold
# 12 B an element of host memory), and the line says its entries read 0 instead.
_FROM_DENSE = frozenset(getattr(torch.ops.aten, n) for n in (
    "_to_sparse", "_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc")
    if hasattr(torch.ops.aten, n))
BOUND_NUMEL = 1 << 20
BOUND = "upper bound: every element"
UNKNOWN = ("nnz 0: its entries are the dense input's nonzeros, which the fake run does not "
           "know (its bytes read 0)")


def stand_in_of(t: torch.Tensor) -> str | None:
    """Note [A sparse tensor made from a dense one]: the stand-in a fake sparse tensor's
    entry count is, if any."""
    tw = getattr(t, "_memledger_sparse", None)
    return tw.said if tw is not None else None


def _dense_stand_in(a: FakeTensor, shadow) -> torch.Tensor:
    """A dense operand's known values, else one real zero expanded to its shape: a fake
    run is for models larger than the host, and `sparse_mask` of an optimizer's state by a
    sparse gradient must not allocate the whole state for real."""
    known = shadow(a)
    if known is not None and not isinstance(known, FakeTensor):
        return known
    with _disable_current_modes():
        return torch.zeros((), dtype=a.dtype).expand(a.shape)


def _real_result(func, args, kwargs, shadow):
    """The op run for real on its inputs' twins, or None if a sparse input has none; and
    the stand-in its entry count is, if any (Note [A sparse tensor made from a dense
    one])."""
    flat, spec = tree_flatten((args, kwargs))
    real = []
    said = None
    if getattr(func, "_overloadpacket", None) in _FROM_DENSE and flat and \
            isinstance(flat[0], FakeTensor) and flat[0].layout is torch.strided:
        known = shadow(flat[0])
        if known is None or isinstance(known, FakeTensor):
            said = BOUND if flat[0].numel() <= BOUND_NUMEL else UNKNOWN
            if said is BOUND:
                with _disable_current_modes():
                    flat[0] = torch.ones((), dtype=flat[0].dtype).expand(flat[0].shape)
    for a in flat:
        if isinstance(a, torch.Tensor) and a.layout in SPARSE_LAYOUTS:
            a = twin_of(a)
            if a is None:
                return None, None
        elif isinstance(a, FakeTensor):
            if a.layout is not torch.strided:
                return None, None
            a = _dense_stand_in(a, shadow)
        elif isinstance(a, torch.device) and a.type != "cpu":
            a = torch.device("cpu")
        real.append(a)
    r_args, r_kwargs = tree_unflatten(real, spec)
    if "device" in r_kwargs and r_kwargs["device"] is not None:
        r_kwargs["device"] = torch.device("cpu")
    try:
        with _disable_current_modes(), torch.sparse.check_sparse_tensor_invariants(False):
            return func(*r_args, **r_kwargs), said
    except Exception:   # no CPU kernel, or values a stand-in cannot take: as FakeTensorMode
        return None, None


# Note [Fake sparse tensors]: the meta storages of the parts rebuilt here, by storage key,
# and the fake device of the sparse tensor they belong to. The collector reads a fake sparse
# tensor's parts as plain meta tensors (no `fake_device`), which a fake run's `_where`
# otherwise files as "meta".
# An entry goes with its storage (a weakref's callback), so a later storage at the same
# address is not taken for it.
PART_DEVICES: dict[int, tuple[torch.device, weakref.ref]] = {}


def part_device(st) -> torch.device | None:
    entry = PART_DEVICES.get(st._cdata)
    return entry[0] if entry is not None else None


def _file_part(st, device: torch.device) -> None:
    key = st._cdata
    PART_DEVICES[key] = (device, weakref.ref(st, lambda _r: PART_DEVICES.pop(key, None)))


def _like(n: int, shape, stride, offset, dtype) -> torch.Tensor:
    """A meta tensor with a real part's shape, strides, offset and storage size (`n`
    elements)."""
    return torch.empty(n, dtype=dtype, device="meta").as_strided(shape, stride, offset)


def _layout(part: torch.Tensor) -> tuple:
    return (part.untyped_storage().nbytes() // part.element_size(), tuple(part.shape),
            part.stride(), part.storage_offset(), part.dtype)


def as_real(func, args, kwargs, out: FakeTensor, shadow) -> FakeTensor:
    """`out` (a sparse COO fake result) with the entries the real run's has, and its twin
    kept (Note [Fake sparse tensors]). The twin is read, and the new result built, with the
    modes off (FakeTensorMode fakes a real sparse tensor it is handed with no entries, and
    its constructor's meta copies would size the parts' storages to their views)."""
    if out.layout is not torch.sparse_coo:
        return _compressed_as_real(func, args, kwargs or {}, out, shadow) \
            if out.layout in SPARSE_LAYOUTS else out
    r, said = _real_result(func, args, kwargs or {}, shadow)
    if not isinstance(r, torch.Tensor) or r.layout is not torch.sparse_coo \
            or r.shape != out.shape:
        return out
    written = any(out is a for a in tree_flatten((args, kwargs or {}))[0])
    with _disable_current_modes():
        # a constructor's parts are its inputs, where FakeTensorMode keeps them; an op in
        # place (`add_`) leaves the script's own tensor as FakeTensorMode left it (its twin
        # was written for real, and what is made from it gets its entries)
        if out._nnz() != r._nnz() and not written:
            parts = (_layout(r._indices()), _layout(r._values()))
            with torch.sparse.check_sparse_tensor_invariants(False):
                meta = _NEW_COO(r.sparse_dim(), r.dense_dim(), list(r.shape),
                                *(_like(*p) for p in parts), dtype=out.dtype,
                                layout=torch.sparse_coo, device=torch.device("meta"),
                                is_coalesced=r.is_coalesced())
            for part in (meta._indices(), meta._values()):
                _file_part(part.untyped_storage(), out.fake_device)
            out = FakeTensor(out.fake_mode, meta, out.fake_device)
    out._memledger_sparse = _Twin(r, said)
    return out


# Note [Fake compressed layouts]
# A CSR (CSC, BSR, BSC) tensor is three dense parts: compressed indices (rows + 1 offsets
# for CSR), plain indices and values; the real collector counts them (Note [Sparse
# tensors]). FakeTensorMode's `_to_sparse_csr` of a coalesced COO adjacency makes the
# offsets with 0 B of column indices and values, three plain meta storages the collector
# filed under "meta": no part counted on the target. The real op makes the offsets alone
# and takes the COO's column indices and values as views of its parts, which the CSR then
# keeps alive (tests/clients/train_sparse_saves.py --case csr, a (64, 64) adjacency of
# 256 drawn edges: the fake ledger 5,120 B under the real one at the peak, `input` and
# `other`). As for COO, each compressed result keeps a real twin (the op run for real on
# its inputs' twins); the fake result is rebuilt with parts over the storages the twin's
# parts have: an input part's own storage where the twin shares its input twin's (viewed
# as the twin's is), else a new meta storage of the twin's part's size, filed under the
# result's fake device. Its entry count stays 0 (the plain indices and values view none of
# their storage): FakeTensorMode's kernels on a compressed tensor with entries stop the
# run (the backward of a CSR matmul, `mm` of its transpose: "DispatchStub: unsupported
# device type meta"). So its bytes are the real run's, and what is made from its entries
# (`values() * 2`) reads 0: Rule 13's stand-in says so at its line. A view of one (`t`,
# `detach`) already shares its input's parts; a result with no twin has its parts filed.

def _parts_plain(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(compressed indices, plain indices, values) of a compressed sparse tensor, with the
    modes off (the caller's)."""
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return (t.crow_indices(), t.col_indices(), t.values())
    return (t.ccol_indices(), t.row_indices(), t.values())


def _shared_sources(args, kwargs) -> dict[int, torch.Tensor]:
    """Storage key of each part of a sparse input's twin -> that input's own part (modes
    off)."""
    out = {}
    for a in tree_flatten((args, kwargs))[0]:
        if isinstance(a, FakeTensor) and a.layout in SPARSE_LAYOUTS and \
                (tw := twin_of(a)) is not None:
            mine = (a._indices(), a._values()) if a.layout is torch.sparse_coo else \
                _parts_plain(a)
            theirs = (tw._indices(), tw._values()) if tw.layout is torch.sparse_coo else \
                _parts_plain(tw)
            for m, t in zip(mine, theirs):
                if m.untyped_storage().nbytes() == t.untyped_storage().nbytes():
                    out.setdefault(t.untyped_storage()._cdata, m)
    return out


def _empty_part(twin_part: torch.Tensor, sources: dict[int, torch.Tensor],
                entries: bool) -> torch.Tensor:
    """A meta part over the storage the twin's part has (its input's where the real op
    shares it, else a new one of its size); with no entries where `entries` is False."""
    src = sources.get(twin_part.untyped_storage()._cdata)
    st = src.untyped_storage() if src is not None else \
        _like(*_layout(twin_part)).untyped_storage()
    shape = tuple(twin_part.shape) if entries else (0, *twin_part.shape[1:])
    return torch.empty(0, dtype=twin_part.dtype, device="meta").set_(
        st, twin_part.storage_offset(), shape, twin_part.stride())


def _compressed_as_real(func, args, kwargs, out: FakeTensor, shadow) -> FakeTensor:
    """Note [Fake compressed layouts]: `out` with parts over the storages the real run's
    have, no entries, its twin kept; its new parts filed under its fake device."""
    r, said = _real_result(func, args, kwargs, shadow)
    with _disable_current_modes():
        if isinstance(r, torch.Tensor) and r.layout is out.layout and r.shape == out.shape \
                and out._nnz() == 0 and \
                not any(out is a for a in tree_flatten((args, kwargs))[0]):
            sources = _shared_sources(args, kwargs)
            twin_parts = _parts_plain(r)
            if not all(p.untyped_storage()._cdata in sources for p in twin_parts):
                parts = (_empty_part(twin_parts[0], sources, True),
                         *(_empty_part(p, sources, False) for p in twin_parts[1:]))
                with torch.sparse.check_sparse_tensor_invariants(False):
                    meta = _NEW_COMPRESSED(*parts, list(r.shape), dtype=out.dtype,
                                           layout=out.layout, device=torch.device("meta"))
                out = FakeTensor(out.fake_mode, meta, out.fake_device)
            out._memledger_sparse = _Twin(r, said)
        for part in _parts_plain(out):
            st = part.untyped_storage()
            if st.device.type == "meta" and part_device(st) is None:
                _file_part(st, out.fake_device)
    return out
