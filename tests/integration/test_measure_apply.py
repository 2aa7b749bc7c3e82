"""apply_policy / install_policy / Offloader on small real models (fast, in process)."""

from __future__ import annotations

import contextlib
import tempfile

import pytest

import torch
import torch.nn.functional as F
from torch import nn

from memledger.errors import PolicyError
from memledger.measure.apply import apply_policy, install_policy
from memledger.measure.offload import Offloader
from memledger.replay.policies import parse_policy


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 64)
        self.out = nn.Linear(64, 16)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        return x + self.drop(self.out(F.gelu(self.fc(x))))


class Net(nn.Module):
    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(n)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def grads(policy: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    with apply_policy(net, parse_policy(policy)):
        torch.manual_seed(7)   # dropout masks: the same stream for every policy
        net(x).square().mean().backward()
    return {n: p.grad for n, p in net.named_parameters()}


@pytest.mark.parametrize("policy", [
    "checkpoint:blocks.*", "checkpoint:blocks.[0-1]", "selective:@Block",
    "selective:blocks.*:save=addmm", "offload:blocks.*", "offload:**.fc:min=1KiB",
    "checkpoint:blocks.0+offload:blocks.[1-2]",
])
def test_policies_leave_gradients_bitwise_equal(policy):
    base, got = grads("none"), grads(policy)
    assert all(torch.equal(base[k], got[k]) for k in base)


def test_remove_restores_the_class_forward():
    net = Net()
    h = apply_policy(net, parse_policy("checkpoint:blocks.*"))
    assert "forward" in net.blocks[0].__dict__ and h.regions[0].path == "blocks.0"
    h.remove()
    assert "forward" not in net.blocks[0].__dict__


def test_apply_refuses_a_selector_matching_nothing():
    with pytest.raises(PolicyError, match="matches no module"):
        apply_policy(Net(), parse_policy("checkpoint:layers.*"))


def test_install_lands_on_the_first_model_called():
    seen = []
    inst = install_policy(parse_policy("checkpoint:@Block"), on_applied=seen.append)
    try:
        nn.ReLU()(torch.zeros(1))            # parameter-free: not the model
        net = Net(2)
        net(torch.randn(2, 16))
        assert [r.path for r in seen[0].regions] == ["blocks.0", "blocks.1"]
        assert seen[0].model is net
    finally:
        inst.remove()
    assert "forward" not in net.blocks[0].__dict__


def test_offloader_writes_a_storage_once_for_several_views():
    off = Offloader()
    qkv = torch.randn(2, 8, 48)              # 2*8*48*4 = 3,072 bytes, one storage
    q, k, v = qkv.split(16, dim=2)
    packed = [off.pack(t) for t in (q, k, v)]
    assert off.bytes_out == 3072             # written once, not 3 x 1,024
    back = [off.unpack(p) for p in packed]
    assert off.bytes_in == 3072              # read once while the three saves are pending
    for a, b in zip((q, k, v), back):
        assert torch.equal(a, b) and a.stride() == b.stride()
        assert a.storage_offset() == b.storage_offset()
    off.close()


def test_a_storage_changed_after_an_earlier_save_is_written_again():
    """torch's GRU cell splits its gates with `unsafe_chunk` (views with version counters of
    their own) and runs add_().sigmoid_() on one chunk after another: the reset gate is
    saved, and its storage copied, before the update gate is made in the same storage. The
    copy made at the first save read the update gate back stale and every GRU gradient
    differed under offload (Note [Offload moves storages, once each])."""
    torch.manual_seed(0)
    gru = nn.GRU(16, 16, batch_first=True)
    x = torch.randn(4, 8, 16)

    def grads(off: Offloader | None):
        gru.zero_grad()
        if off is None:
            y, _ = gru(x)
        else:
            with torch.autograd.graph.saved_tensors_hooks(off.pack, off.unpack):
                y, _ = gru(x)
        y.sum().backward()
        return [p.grad.clone() for p in gru.parameters()]

    params = {p.untyped_storage().data_ptr() for p in gru.parameters()}
    off = Offloader(skip_storages=params)
    assert all(torch.equal(a, b) for a, b in zip(grads(None), grads(off)))
    # the batch's 32x16 fp32 copy (2,048 B), then per time step the gates' 4x48 storage
    # (768 B) at the reset gate's save, the update gate's range of it again at its first
    # save (elements 16..175: 640 B; not at its second), and four 4x16 storages (256 B)
    assert off.storages_out == 1 + 8 * 5
    assert off.bytes_out == 2_048 + 8 * (768 + 640 + 4 * 256)


def test_a_conjugate_or_negative_view_is_read_back_as_saved():
    """RotatE's `t * torch.conj(r)` saves `conj(r)`, a view of `r` with the conjugate bit
    (pykeen, tests/clients/test_pykeen_clients.py); offload rebuilt it without the bit, so
    the backward read `r`: the gradient of `t` differed (and the backward cloned a view
    the baseline never met, 16,384 B more there). The same for the negative bit (Note [A
    conjugate view read back])."""
    torch.manual_seed(0)
    t = torch.randn(4, 8, dtype=torch.cfloat, requires_grad=True)
    r = torch.randn(4, 8, dtype=torch.cfloat, requires_grad=True)
    x = torch.randn(8, requires_grad=True)

    def grads(off: Offloader | None):
        hooks = torch.autograd.graph.saved_tensors_hooks(off.pack, off.unpack) \
            if off else contextlib.nullcontext()
        with hooks:
            loss = (t * torch.conj(r)).abs().sum() + (torch._neg_view(x * 2) * x).sum()
        return torch.autograd.grad(loss, (t, r, x))

    off = Offloader()
    assert all(torch.equal(a, b) for a, b in zip(grads(None), grads(off)))
    packed = off.pack(torch.conj(r.detach()))
    assert off.unpack(packed).is_conj()
    assert off.unpack(off.pack(torch._neg_view(x.detach() * 2))).is_neg()
    off.close()


def test_a_parameter_given_a_new_storage_is_still_left_alone():
    """pykeen re-initializes its embeddings with `weight.data = ...` after the policy went
    on: the offloader skipped the old address (reused by any tensor after, kept on the
    device as a weight: measured peaks that moved by 256 to 2,176 B between fresh
    processes) and wrote the new weight out as an activation, read back beside itself
    (Note [A parameter given a new storage])."""
    torch.manual_seed(0)
    net = Net(n=1)
    x = torch.randn(8, 16, requires_grad=True)   # so `addmm` saves the weight too
    with apply_policy(net, parse_policy("offload:blocks.0.fc")) as handle:
        fc = net.blocks[0].fc
        fc.weight.data = torch.randn(64, 16)   # a new storage, 4,096 B
        net(x).sum().backward()
        [off] = handle.offloaders
        # only the block's input (8 x 16 fp32, 512 B); not the weight (was 512 + 4,096)
        assert off.bytes_out == 512
        assert fc.weight.untyped_storage().data_ptr() in off.skip


def test_offloader_keeps_parameters_and_small_storages():
    w = nn.Parameter(torch.randn(4, 4))
    off = Offloader(min_bytes=1024, skip_storages={w.untyped_storage().data_ptr()})
    assert off.pack(w) is w
    small = torch.randn(16)                   # 64 bytes < 1,024
    assert off.pack(small) is small
    assert off.bytes_out == 0


def test_a_saved_output_left_in_place_goes_with_its_dropped_graph():
    """Note [A save left in place holds no graph]: `amax` saves its own output; under
    `min_bytes` the offloader left it on the device as the same object, which the node
    holding it is the `grad_fn` of, and where no backward runs through that node
    (`x - x.amax(...).detach()`, hyper_connections' Sinkhorn) the (1024,) fp32 output
    (4,096 B) and the node's saved input stayed to the end of the process. Now they go as
    without hooks, and the gradient is the same."""
    import weakref

    def step(off: Offloader | None):
        x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(0),
                        requires_grad=True)
        hooks = torch.autograd.graph.saved_tensors_hooks(off.pack, off.unpack) if off \
            else contextlib.nullcontext()
        with hooks:
            y = x * 2
            m = y.amax(dim=0)                     # saves y and its own output m
            out = (y - m.detach()).exp()
        gone = weakref.ref(m)
        del y, m
        out.sum().backward()
        return gone() is None, x.grad

    plain_gone, plain_grad = step(None)
    off = Offloader(min_bytes=1 << 20)            # everything stays on the device
    kept_gone, kept_grad = step(off)
    assert plain_gone and kept_gone
    assert off.bytes_out == 0
    assert torch.equal(plain_grad, kept_grad)


def test_offloader_reuses_slots_of_one_file_step_after_step(tmp_path):
    """Note [One file, slots reused]: the second step's storages take the first step's
    slots, so the file stops growing; nothing is left in the folder (the file is unnamed)."""
    off = Offloader(directory=str(tmp_path))

    def step(sizes):
        ts = [torch.full((n,), float(i), dtype=torch.float32) for i, n in enumerate(sizes)]
        packed = [off.pack(t) for t in ts]
        back = [off.unpack(p) for p in reversed(packed)]
        assert all(torch.equal(a, b) for a, b in zip(ts, reversed(back)))

    step([1000, 256, 1000])                       # 4,000 + 1,024 + 4,000 bytes
    assert off._slots.end == 9024
    for _ in range(3):
        step([1000, 256, 1000])
    assert off._slots.end == 9024                 # the same slots, every step
    step([600])                                   # 2,400 B: takes a 4,000 B slot (<= 2x)
    step([100])                                   # 400 B: no slot within 2x: a new one
    assert off._slots.end == 9024 + 400
    assert off.bytes_out == 4 * 9024 + 2400 + 400 and off.storages_out == 14
    assert list(tmp_path.iterdir()) == []
    off.close()


def test_offloader_makes_no_folder_of_its_own(tmp_path, monkeypatch):
    """The default destination is $TMPDIR itself: the file is unnamed, so nothing (not an
    empty folder either) is left there, during the run or after."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    off = Offloader()
    t = torch.randn(256)
    assert torch.equal(off.unpack(off.pack(t)), t)
    assert list(tmp_path.iterdir()) == []
    off.close()
    assert list(tmp_path.iterdir()) == []


def test_a_slot_given_back_from_another_thread_is_reused():
    import threading

    off = Offloader()
    records = [off.pack(torch.randn(512))]
    end = off._slots.end
    worker = threading.Thread(target=records.clear)   # the last record dies on another thread
    worker.start()
    worker.join()
    t = torch.randn(512)
    assert torch.equal(off.unpack(off.pack(t)), t)
    assert off._slots.end == end                  # the slot came back and was taken again
    off.close()


def test_an_offloaded_storage_can_still_be_freed_by_resize():
    """FSDP2 frees the parameters it gathered with `resize_(0)` after forward; offload's
    write once went through `.numpy()`, which marks the storage not resizable ("Trying to
    resize storage that is not resizable": every FSDP2 script crashed under offload)."""
    from memledger.measure.offload import Offloader

    off = Offloader()
    w = torch.randn(64, 64)
    ref = w.clone()
    packed = off.pack(w)
    w.untyped_storage().resize_(0)          # what FSDP2's reshard does
    assert off.bytes_out == 64 * 64 * 4
    w.untyped_storage().resize_(64 * 64 * 4)
    back = off.unpack(packed)
    assert back.shape == (64, 64) and torch.equal(back, ref)


@pytest.mark.parametrize("save, why", [
    ("matmul", "never reaches selective checkpointing"),   # dispatched as mm / bmm
    ("linear", "never reaches selective checkpointing"),   # dispatched as addmm
    ("dropout", "never reaches selective checkpointing"),  # dispatched as bernoulli_, mul
    ("fooo", "is no aten op"),
])
def test_selective_refuses_a_save_list_name_it_would_never_see(save, why):
    """torch's selective checkpointing sees ops after composite ones are broken up:
    `save=matmul` kept nothing, silently, and measured (and gated) as plain checkpoint."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)))
    with pytest.raises(PolicyError, match=why) as e:
        apply_policy(model, parse_policy(f"selective:1:save=mm,{save}"))
    assert "\n" not in str(e.value) and f"save={save}" in str(e.value)
    apply_policy(model, parse_policy("selective:1:save=mm,native_dropout,_to_copy")).remove()


@pytest.mark.parametrize("text", ["checkpoint:blocks.*", "selective:blocks.*",
                                  "offload:blocks.*"])
def test_a_model_under_a_policy_saves_and_copies_as_itself(text):
    """Note [A policy's forward travels as the original] (measure/apply.py): pytorch/examples'
    word_language_model runs `torch.save(model, f)`, which raised "Can't pickle <function
    LSTM.forward>" under every policy; and a deep copy (a best-so-far or EMA model) ran the
    original module's forward, its own weights unused."""
    import copy
    import io

    torch.manual_seed(0)
    net = Net()
    with apply_policy(net, parse_policy(text)):
        buf = io.BytesIO()
        torch.save(net, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        twin = copy.deepcopy(net)
        with torch.no_grad():
            for p in twin.parameters():
                p.mul_(2)
        x = torch.randn(5, 16)
        net.eval(), loaded.eval(), twin.eval()   # dropout off: the same output for the same x
        assert torch.equal(loaded(x), net(x))
        assert all(b.forward.__self__ is b for b in [*loaded.blocks, *twin.blocks])
        assert not torch.equal(twin(x), net(x))   # the copy runs with its own weights
        # and refers to nothing of its own through its forward: dropped, it goes at once,
        # not when Python's garbage collector runs (a copy per step once stayed)
        import gc
        import weakref
        gone = weakref.ref(twin.blocks[0])   # a module the policy wraps
        gc.disable()
        try:
            del twin
            assert gone() is None
        finally:
            gc.enable()
        net.train()
        net(x).sum().backward()    # the policy stays on the model it was put on


@pytest.mark.parametrize("text", ["checkpoint:blocks.*", "selective:blocks.*",
                                  "offload:blocks.*"])
def test_a_model_under_a_policy_goes_when_the_script_drops_it(text):
    """Note [A policy holds its model weakly] (measure/apply.py): the wrapper held the
    module's bound forward (a cycle through the module's __dict__) and the handle held the
    model, so a model per step (tests/doctor/rebuilt.py) measured 4,500 B under `offload:0`
    against 3,792 predicted. Dropped now, it goes at once with the policy still on; one
    dropped between its forward and its backward still re-runs (checkpoint's graph holds
    the bound forward, as the script's own checkpoint would)."""
    import gc
    import inspect
    import weakref

    torch.manual_seed(0)
    net = Net()
    handle = apply_policy(net, parse_policy(text))
    block = net.blocks[0]
    assert inspect.signature(block.forward) == inspect.signature(Block().forward)
    x = torch.randn(8, 16)
    loss = net(x).sum()
    gone = weakref.ref(block)
    gc.disable()
    try:
        del net, block
        assert gone() is not None or text.startswith("offload")   # the graph's re-run
        loss.backward()
        del loss
        assert gone() is None and handle.model is None
    finally:
        gc.enable()
    handle.remove()   # nothing left to put back


class CompiledOpError(Exception):
    """As einx's `CallOperationError`: whatever the compiled expression raised, wrapped."""


def _as_einx_calls(fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        raise CompiledOpError("the function that was compiled for this operation failed") from e


class MaskedBlock(nn.Module):
    """Ends as x-transformers' Attention does: its last save (`where`'s condition) made
    inside a call that wraps every error it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 64)

    def forward(self, x, mask):
        return _as_einx_calls(torch.where, mask, self.fc(x).square(), 0.0)


@pytest.mark.parametrize("policy", ["checkpoint:block", "selective:block"])
def test_an_early_stop_a_library_wrapped_stops_the_rerun(policy):
    """Note [An early stop a library wrapped] (measure/apply.py): the re-run's early stop,
    raised from the pack of `where`'s condition inside the wrapping call, reached torch as CompiledOpError
    and left the backward as the script's error (frame-averaging-pytorch around an
    x-transformers encoder with a mask, `selective:@Attention`: "script raised
    CallOperationError"). Now the backward runs, the gradients are the baseline's bit for
    bit, and with the collector off nothing holds the wrapped error afterwards (raised as
    the library's own stop, the stop and the wrapper held each other with the re-run's
    frames: 251,872 B measured over the prediction on that model)."""
    import gc

    def run(text: str | None):
        torch.manual_seed(0)
        net = nn.ModuleDict({"block": MaskedBlock()})
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        mask = torch.arange(8).unsqueeze(1).expand(8, 64) % 3 != 0
        with apply_policy(net, parse_policy(text)) if text else contextlib.nullcontext():
            net["block"](x, mask).sum().backward()
        return {n: p.grad for n, p in net.named_parameters()}

    base = run(None)
    gc.collect()
    gc.disable()
    try:
        got = run(policy)
        held = [o for o in gc.get_objects() if isinstance(o, CompiledOpError)]
    finally:
        gc.enable()
    assert held == []
    for name, g in base.items():
        assert torch.equal(got[name], g), name
