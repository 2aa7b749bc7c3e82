"""`memledger.trace()` as a user of the Python API meets it: blocks beside other threads,
blocks that raise, blocks repeated, and the exact bytes of a Linear + Adam step.

The step traced below: Linear(100, 50) + Adam, a batch of 8, fp32.
  parameters   (100·50 + 50)·4              = 20,200 B
  gradients    the same                     = 20,200 B
  Adam state   2 × 20,200 + 2 step counters (fp32 scalars, 4 B each) = 40,408 B
  input        8·100·4                      =  3,200 B
  peak: in the optimizer, Adam's sqrt and div of the weight live at once (2 × 20,000 B)
        20,200 + 20,200 + 40,408 + 40,000 + 3,200 = 124,008 B
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

import memledger

PARAMS = (100 * 50 + 50) * 4
ADAM = 2 * PARAMS + 2 * 4
INPUT = 8 * 100 * 4
PEAK = PARAMS + PARAMS + ADAM + 2 * 100 * 50 * 4 + INPUT


def _model():
    torch.manual_seed(0)
    m = torch.nn.Linear(100, 50)
    return m, torch.optim.Adam(m.parameters()), torch.randn(8, 100)


def _step(m, opt, x) -> None:
    m(x).relu().sum().backward()
    opt.step()
    opt.zero_grad()


class _OnADict(torch.nn.Module):
    """Linear(100, 50) called on `batch["x"]`: the model takes its batch as a dict."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(100, 50)

    def forward(self, batch):
        return self.lin(batch["x"])


def test_a_batch_handed_over_in_a_dict_is_input():
    """Note [A batch in a dict] (trace/collector.py): `model({"x": x})` filed x (8·100·4 =
    3,200 B) as an `activation` the Linear saved, where `model(x)` files it as input; the
    peak is the same either way."""
    with memledger.trace() as led:
        m = _OnADict()
        opt = torch.optim.Adam(m.parameters())
        x = torch.randn(8, 100)
        for _ in range(2):
            _step(m, opt, {"x": x})
    s = led.summary()
    assert (s.steps_traced, s.peak.bytes) == (2, PEAK)
    assert s.at_peak["input"] == INPUT and s.at_peak["activation"] == 0
    assert s.activations.saved_bytes == 8 * 50 * 4


def _hooks_left() -> tuple[int, ...]:
    return (len(nn_module._global_forward_hooks), len(nn_module._global_forward_pre_hooks),
            len(optim_module._global_optimizer_pre_hooks),
            len(optim_module._global_optimizer_post_hooks),
            torch._C._len_torch_dispatch_stack(),
            torch._C._autograd._top_saved_tensors_default_hooks(False) is not None,
            "resize_" in torch.UntypedStorage.__dict__)


def test_linear_adam_exact_and_nothing_left_behind():
    before = _hooks_left()
    with memledger.trace() as led:
        m, opt, x = _model()
        _step(m, opt, x)
        _step(m, opt, x)
    s = led.summary()
    assert (s.steps_traced, s.complete, s.peak.bytes) == (2, True, PEAK)
    assert s.at_peak["parameter"] == PARAMS and s.at_peak["gradient"] == PARAMS
    assert s.at_peak["optimizer_state"] == ADAM and s.at_peak["input"] == INPUT
    # saved for backward: relu's output, 8·50·4 B (addmm saves x and the weight: not new)
    assert s.activations.saved_bytes == 8 * 50 * 4
    assert _hooks_left() == before
    # a second block over the same model: what the first made is pre-existing, not new
    with memledger.trace() as again:
        _step(m, opt, x)
    s2 = again.summary()
    assert (s2.steps_traced, s2.peak.bytes) == (1, PEAK)
    pre = again.storages[again.storages["pre"]]
    assert int(pre["bytes"].sum()) == PARAMS + ADAM + INPUT
    assert set(pre["phase"]) == {"setup"} and set(pre["created"]) == {0}
    assert _hooks_left() == before


def test_another_threads_model_is_not_in_the_ledger():
    # Note [Other threads' modules]: the module and optimizer hooks are process-wide; a
    # model that another thread trains while the block runs was named into this ledger
    # (its 20-20-1 MLP's 1,764 B of parameters, its batches as input) and its optimizer
    # ended this ledger's steps
    m, opt, x = _model()

    def other() -> None:
        mlp = torch.nn.Sequential(torch.nn.Linear(20, 20), torch.nn.ReLU(),
                                  torch.nn.Linear(20, 1))
        sgd = torch.optim.SGD(mlp.parameters(), lr=0.1)
        for _ in range(3):
            mlp(torch.randn(4, 20)).sum().backward()
            sgd.step()

    with memledger.trace() as led:
        _step(m, opt, x)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        _step(m, opt, x)
    s = led.summary()
    assert (s.steps_traced, s.peak.bytes) == (2, PEAK)
    assert s.at_peak["parameter"] == PARAMS and s.at_peak["input"] == INPUT
    assert int(led.storages["bytes"].max()) == 100 * 50 * 4    # nothing of the other model
    assert not (led.storages["shape"] == "20x20").any()


def test_a_block_traced_in_a_thread():
    out = {}

    def worker() -> None:
        with memledger.trace() as led:
            m, opt, x = _model()
            _step(m, opt, x)
        out["summary"] = led.summary()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    s = out["summary"]
    assert (s.steps_traced, s.peak.bytes, s.at_peak["optimizer_state"]) == (1, PEAK, ADAM)


def test_an_exception_propagates_unchanged_and_the_partial_ledger_reads():
    class Boom(Exception):
        pass

    raised = Boom("inside the block")
    before = _hooks_left()
    try:
        with memledger.trace() as led:
            m, opt, x = _model()
            _step(m, opt, x)
            raise raised
    except Boom as e:
        assert e is raised and e.__context__ is None
    assert _hooks_left() == before
    s = led.summary()
    assert (s.complete, s.steps_traced, s.peak.bytes) == (False, 1, PEAK)
    assert led.end["status"] == "error" and led.end["message"] == "Boom: inside the block"
    try:
        with memledger.trace() as led:
            _step(m, opt, x)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert _hooks_left() == before
    assert (led.end["status"], led.summary().steps_traced) == ("interrupted", 1)


def test_a_compiled_model_in_the_block_raises_no_warning_of_ours():
    # torch warns that global module hooks (memledger's, inside the block) fire an extra
    # time for a torch.compile'd module; under `-W error` that failed the user's code
    import warnings

    torch.manual_seed(0)
    compiled = torch.compile(torch.nn.Linear(8, 8), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        filters = list(warnings.filters)
        with memledger.trace() as led:
            compiled(torch.randn(2, 8)).sum().backward()
        assert warnings.filters == filters   # the block's filter is gone with the block
    assert led.summary().compiled is True
    assert led.summary().at_peak["parameter"] == (8 * 8 + 8) * 4


def test_max_steps_leaves_the_block_not_the_program():
    # StopTracing escaped the `with` (an empty-message BaseException) and ended the program
    m, opt, x = _model()
    ran = []
    with memledger.trace(max_steps=1) as led:
        for i in range(3):
            _step(m, opt, x)
            ran.append(i)
    assert ran == []        # stopped inside the first step's optimizer step, at its end
    s = led.summary()
    assert (s.steps_traced, s.complete, s.peak.bytes) == (1, True, PEAK)
    with memledger.trace(max_steps=2) as outer:
        with memledger.trace() as inner:   # the outer block's stop passes through this one
            for i in range(3):
                _step(m, opt, x)
                ran.append(i)
    assert ran == [0] and outer.summary().steps_traced == 2 and inner.complete
    import pytest

    from memledger.errors import ScriptError

    for bad in (0, -1, 2.5, True):   # 0 and -1 traced one step, 2.5 three
        with pytest.raises(ScriptError, match=r"a number of steps, 1 or more"):
            with memledger.trace(max_steps=bad):
                _step(m, opt, x)


def test_device_without_fake_is_refused_before_the_block_runs():
    # it was ignored: the block ran on the CPU and its ledger said cpu
    import pytest

    from memledger.errors import ScriptError

    ran, before = [], _hooks_left()
    with pytest.raises(ScriptError, match=r"trace\(device='cuda'\) is the target of a fake "
                                          r"run: pass fake=True too"):
        with memledger.trace(device="cuda"):
            ran.append(1)
    assert ran == [] and _hooks_left() == before


def test_steps_by_for_a_block_without_an_optimizer():
    # inference: three forwards of Linear(100, 50) under no_grad, batch 8, fp32. Each step
    # holds the parameters (20,200 B) and the batch (3,200 B); from the second on, the
    # previous output (1,600 B) is still held by `y` while the next one is made
    m, _, x = _model()

    def infer() -> None:
        with torch.no_grad():
            for _ in range(3):
                y = m(x)  # noqa: F841

    one = PARAMS + INPUT + 1_600
    for by, steps, peaks in [("optimizer", 0, {"1": one + 1_600}),
                             ("forward", 3, {"1": one, "2": one + 1_600, "3": one + 1_600}),
                             ("whole", 1, {"1": one + 1_600})]:
        with memledger.trace(steps_by=by) as led:
            infer()
        s = led.summary()
        assert (s.steps_traced, s.by_step_peak) == (steps, peaks), by
    import pytest

    from memledger.errors import ScriptError

    with pytest.raises(ScriptError, match="use one of optimizer, forward, whole"):
        with memledger.trace(steps_by="forwards"):
            pass


def test_a_ledger_file_reads_back_as_the_block_saw_it(tmp_path, capsys):
    import json

    from memledger.cli import main

    path = tmp_path / "run.ledger"
    m, opt, x = _model()
    with memledger.trace(path) as led:
        _step(m, opt, x)
        _step(m, opt, x)
    here = led.summary().to_json_dict()
    assert memledger.load(path).summary().to_json_dict() == here
    capsys.readouterr()
    assert main(["show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == here and shown["peak"]["bytes"] == PEAK


def test_two_blocks_in_two_threads_at_once():
    # A in, B in, A out, B out: each ledger holds its own model only, and nothing of
    # either block is left on torch afterwards (B's resize wrapper had put A's back for good)
    before = _hooks_left()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    out = {}

    def block(name: str, n_in: int, go: threading.Event, wait: threading.Event,
              done: threading.Event | None) -> None:
        if name == "b":
            a_in.wait()
        torch.manual_seed(0)
        m = torch.nn.Linear(n_in, 50)
        opt = torch.optim.Adam(m.parameters())
        x = torch.randn(8, n_in)
        with memledger.trace() as led:
            _step(m, opt, x)
            go.set()
            wait.wait()
            _step(m, opt, x)
        if done is not None:
            done.set()
        out[name] = led.summary()

    threads = [threading.Thread(target=block, args=("a", 100, a_in, b_in, a_out)),
               threading.Thread(target=block, args=("b", 30, b_in, a_out, None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (out["a"].steps_traced, out["a"].peak.bytes) == (2, PEAK)
    assert out["a"].at_peak["parameter"] == PARAMS
    assert out["b"].steps_traced == 2 and out["b"].at_peak["parameter"] == (30 * 50 + 50) * 4
    assert _hooks_left() == before


class _Batches(torch.utils.data.Dataset):
    """x: 100 fp32 (a batch of 64: 25,600 B), y: one int64 label (a batch: 512 B)."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(100, generator=g), torch.randint(0, 50, (), generator=g)


def test_dataloader_workers_in_a_block_traced_to_a_file(tmp_path):
    # Note [A forked child writes nothing] (ledger/writer.py): the workers' copies of the
    # sink wrote into this file ("holds 3 ledgers (one header line each)")
    m, opt, _ = _model()
    path = tmp_path / "run.ledger"
    with memledger.trace(path) as led:
        loader = torch.utils.data.DataLoader(_Batches(), batch_size=64, num_workers=2)
        for i, (x, y) in enumerate(loader):   # each worker makes 2 batches ahead: 128
            torch.nn.functional.cross_entropy(m(x), y).backward()   # samples, ~800 records
            opt.step()
            opt.zero_grad()
            if i == 3:
                break
    assert path.read_text().count('"k":"header"') == 1
    s = memledger.load(path).summary()
    assert (s.steps_traced, s.complete, s.at_peak["parameter"]) == (4, True, PARAMS)


def test_batches_from_a_worker_are_made_when_they_arrive():
    # Note [Pre-existing storages, found on first use] (trace/collector.py): a batch rebuilt
    # from a worker's shared memory was first met at `aten.set_` and counted from event 0,
    # so the peak grew by a batch (25,600 + 512 B) per step traced. One worker keeps the
    # order: at the optimizer's peak only the step's own batch is live, whatever the steps.
    #   20,200 parameters + 20,200 gradients + 40,408 Adam + 40,000 Adam's sqrt and div
    #   + 25,600 x + 512 y = 146,920 B
    m, opt, _ = _model()
    for steps in (1, 5):
        with memledger.trace() as led:
            loader = torch.utils.data.DataLoader(_Batches(), batch_size=64, num_workers=1)
            for i, (x, y) in enumerate(loader):
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
                opt.zero_grad()
                if i == steps - 1:
                    break
        s = led.summary()
        assert (s.steps_traced, s.peak.bytes, s.at_peak["input"]) == (steps, 146_920, 26_112)
        batches = led.storages[led.storages["category"] == "input"]
        assert len(batches) == 2 * steps and not batches["pre"].any()


def test_a_batch_pinned_by_another_thread_is_made_when_it_arrives(monkeypatch):
    # Note [Pre-existing storages, found on first use] (trace/collector.py), the third
    # case: DataLoader(pin_memory=True) pins each batch in a thread of its own, out of the
    # dispatch mode's reach, and the block first met the pinned copy as an input: live
    # from event 0, a batch more at the peak per step traced (5 steps: 4 x 25,600 B more).
    # CPU-only torch cannot pin, so a thread makes the batch and `is_pinned` says it is
    # pinned; `test_dataloader_pin_memory_batches_are_made_when_they_arrive` is the real one.
    #   20,200 parameters + 20,200 gradients + 40,408 Adam + 40,000 Adam's sqrt and div
    #   + 25,600 x + 512 y (made before the block) = 146,920 B
    from memledger.trace import collector

    assert collector.is_pinned(torch.ones(2)) is False   # and no CUDA context made for it
    pinned: set[int] = set()
    monkeypatch.setattr(collector, "is_pinned",
                        lambda t: t.untyped_storage()._cdata in pinned)
    m, opt, _ = _model()
    y = torch.randint(0, 50, (64,))
    for steps in (1, 5):
        with memledger.trace() as led:
            for _ in range(steps):
                box: list[torch.Tensor] = []
                pinner = threading.Thread(target=lambda: box.append(torch.randn(64, 100)))
                pinner.start()
                pinner.join()
                x = box.pop()
                pinned.add(x.untyped_storage()._cdata)
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
                opt.zero_grad()
                del x
        s = led.summary()   # x is saved by the Linear: an activation
        assert (s.steps_traced, s.peak.bytes, s.at_peak["input"]) == (steps, 146_920, 512)
        batches = led.storages[led.storages["bytes"] == 25_600]
        assert len(batches) == steps and not batches["pre"].any()
        assert (batches["created"].diff().dropna() > 0).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_dataloader_pin_memory_batches_are_made_when_they_arrive():
    # the same with a real pinning thread: at the optimizer's peak only the step's own
    # pinned batch is live, whatever the steps (host storages; the model stays on the CPU)
    #   146,920 B as above, y pinned with x
    m, opt, _ = _model()
    for steps in (1, 5):
        with memledger.trace() as led:
            loader = torch.utils.data.DataLoader(_Batches(), batch_size=64, num_workers=1,
                                                 pin_memory=True)
            for i, (x, y) in enumerate(loader):
                assert x.is_pinned()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                opt.step()
                opt.zero_grad()
                if i == steps - 1:
                    break
        s = led.summary()
        assert (s.steps_traced, s.peak.bytes, s.at_peak["input"]) == (steps, 146_920, 26_112)


def test_memledger_trace_shows_the_apis_parameters():
    # it was `trace(*args, **kwargs)`: no parameters for help() or an editor to show
    import inspect

    from memledger.trace.api import trace

    ours, api = inspect.signature(memledger.trace), inspect.signature(trace)
    assert [(p.name, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.default) for p in api.parameters.values()]


class _WhatTheWorkerHas(torch.utils.data.Dataset):
    """Each sample: the worker's dispatch-mode stack depth and global forward hooks."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        return torch.tensor([torch._C._len_torch_dispatch_stack(),
                             len(nn_module._global_forward_hooks)])


def test_a_forked_child_traces_nothing():
    # Note [A forked child traces nothing] (trace/collector.py): DataLoader workers ran every
    # op of their dataset through the collector (data loading ~5x slower, records dropped)
    import os

    with memledger.trace() as led:
        for batch in torch.utils.data.DataLoader(_WhatTheWorkerHas(), batch_size=2,
                                                 num_workers=1):
            assert batch.tolist() == [[0, 0], [0, 0]]
    assert led.complete
    # a child forked by hand that goes on and leaves the block: nothing to undo, no error
    pid = None
    try:
        with memledger.trace() as led:
            (torch.ones(3) * 2).sum()
            pid = os.fork()
            if pid == 0:
                (torch.ones(3) * 3).sum()
    except BaseException:
        if pid == 0:
            os._exit(2)
        raise
    if pid == 0:
        # and torch's own cumprod kernel is back (Note [A derivative formula that branches
        # on the mode], trace/untraced_formulas.py)
        os._exit(0 if torch._C._len_torch_dispatch_stack() == 0 and _torchs_cumprod() else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert led.complete and _hooks_left()[-3:] == (0, False, False)
    assert _torchs_cumprod()


def _torchs_cumprod() -> bool:
    from memledger.trace.untraced_formulas import UntracedFormulas

    kernel = str(torch.library.get_kernel("aten::cumprod", "AutogradCPU"))
    return not UntracedFormulas.registered() and "VariableType" in kernel


def test_fake_option_errors_name_the_apis_arguments():
    # they said "--fake has no allocator pass ...; drop --measure" to a Python caller
    import pytest

    from memledger.errors import ScriptError

    with pytest.raises(ScriptError, match=r"^memledger: fake=True has no allocator pass .*; "
                                          r"drop measure=True, or trace without fake=True"):
        with memledger.trace(fake=True, measure=True):
            pass
    with pytest.raises(ScriptError, match=r"^memledger: device='tpu': a fake run targets cpu "
                                          r"or cuda\[:N\]; use device=\"cpu\" or "
                                          r"device=\"cuda\"$"):
        with memledger.trace(fake=True, device="tpu"):
            pass


def test_storages_grown_inside_an_op():
    """Note [Storages grown inside an op]: an `out=` of the wrong size, `resize_`, and eager
    QAT's observers (their empty per-channel `min_val`/`max_val` and the fake quantizer's
    `scale`/`zero_point`, grown inside `fused_moving_avg_obs_fake_quant` at the first
    forward) are counted at their new size, named as before. Before: the ledger kept each
    at its old size (the `out=` buffer at 0 B; QAT's buffers 5,240 B short of the
    allocator: 356 B of buffers where the model holds 5,596 B)."""
    torch.manual_seed(0)
    q = torch.ao.quantization
    m = torch.nn.Sequential(q.QuantStub(), torch.nn.Linear(16, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 4), q.DeQuantStub())
    m.train()
    m.qconfig = q.get_default_qat_qconfig("x86")
    m = q.prepare_qat(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, buf, grown = torch.randn(8, 16), torch.empty(0), torch.empty(0)
    with memledger.trace() as led:
        for _ in range(2):
            torch.mm(x, x.t(), out=buf)        # (8, 8) fp32 into an empty buffer
            grown.resize_(100)                 # 400 B
            m(x).sum().backward()
            opt.step()
            opt.zero_grad()
    st = led.storages
    made = st[st["op"] == "resize_"]
    assert 8 * 8 * 4 in set(made["bytes"]) and 100 * 4 in set(made["bytes"])
    buffers = sum(b.untyped_storage().nbytes() for b in m.buffers())
    end = led.resident_at_end()
    # fc1 and fc2 weights quantized per channel (64 and 4 channels): min_val, max_val,
    # scale (fp32) and zero_point (int32) grown to 4 x (64 + 4) x 4 = 1,088 B
    assert end["buffer"] == buffers == 1_236
    assert set(made[made["category"] == "buffer"]["name"]) >= {
        "1.weight_fake_quant.activation_post_process.min_val", "1.weight_fake_quant.scale"}


def test_gradients_a_parameter_holds_by_another_name():
    """Note [Gradients a parameter holds by another name] (trace/collector.py): opacus keeps
    per-sample gradients as `p.grad_sample` (batch x the weight's shape), Megatron-style
    code an fp32 `p.main_grad`; made in a backward hook, they read `temporary`."""
    lin = torch.nn.Linear(100, 50)

    def per_sample(module, grad_in, grad_out):
        for p in module.parameters():
            p.grad_sample = torch.zeros(8, *p.shape)
            p.main_grad = [torch.zeros(p.shape)]   # a list: one per call of the module
    lin.register_full_backward_hook(per_sample)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    with memledger.trace() as led:
        for _ in range(2):
            lin(torch.randn(8, 100, requires_grad=True)).sum().backward()
            opt.step()
            opt.zero_grad()
    st = led.storages
    grads = st[st["category"] == "gradient"]
    named = grads.groupby("name")["bytes"].max()
    assert named["weight.grad_sample"] == 8 * 100 * 50 * 4
    assert named["bias.grad_sample"] == 8 * 50 * 4
    assert named["weight.main_grad.0"] == 100 * 50 * 4
    assert named["weight"] == 100 * 50 * 4    # `.grad` itself, named as before


def test_autocasts_cached_casts_are_named_and_no_other_cast():
    # Note [Autocast's cache in a re-run] (trace/collector.py): the bf16 copies autocast
    # keeps in its cache are a parameter's, cast inside an autocast context; the input's
    # cast, and a weight cast by hand outside autocast, are not kept there
    lin = torch.nn.Linear(16, 8)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x = torch.randn(4, 16)
    with memledger.trace() as led:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(x)
        (y.float().sum() + lin.weight.to(torch.bfloat16).float().sum()).backward()
        opt.step()
    st = led.storages.set_index("sid")
    casts = st.loc[[r["sid"] for r in led.extra["acast"]]]
    assert sorted(casts["bytes"].tolist()) == [8 * 2, 16 * 8 * 2]   # bias, weight in bf16
    bf16 = st[(st["dtype"] == "bfloat16") & (st["op"] == "_to_copy.default")
             & (st["phase"] != "backward")]
    assert len(bf16) == 4   # and the input's cast and the hand-made weight cast, not named
