"""Note [A closure's step] (memledger/trace/collector.py): a training loop that runs forward
and backward inside `optimizer.step(closure)`, as Lightning's automatic optimization and
LBFGS do, reads as the plain loop does: the update after the closure is the `optimizer`
phase (it read `other`), and the parameters are named (they read `(script)`,
`empty.memory_format`: the step's pre-hook marked them before the forward inside the closure
named them)."""

from __future__ import annotations

import torch

import memledger


def _closure_loop(path, steps: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    with memledger.trace(path) as led:
        for _ in range(steps):
            x = torch.randn(4, 8)

            def closure():
                opt.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss
            opt.step(closure)
    return led


def test_a_closures_step_peaks_in_the_optimizer_with_named_parameters(tmp_path):
    led = _closure_loop(tmp_path / "run.ledger")
    peak = led.summary().peak
    # Adam's update: parameters, gradients, exp_avg and exp_avg_sq of 8x16 + 16 + 16x4 + 4
    # = 212 floats (848 B each), 4 step counters, the batch, two temporaries of the update
    assert (peak.phase, peak.module, peak.op) == ("optimizer", "optimizer", "div.Tensor")
    live = led.labelled(led.live_at(peak.event))
    params = live[live["category"] == "parameter"]
    assert sorted(params["name"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert int(params["bytes"].sum()) == 212 * 4
    assert sorted(live[live["category"] == "optimizer_state"]["name"])[:2] == \
        ["0.bias.exp_avg", "0.bias.exp_avg_sq"]
    assert set(led.summary().by_phase_peak) >= {"forward", "backward", "optimizer"}


def test_other_threads_are_a_warning_only_where_the_peak_is_not_explained(tmp_path):
    """A DataLoader with worker processes runs 2 queue threads in the main process: where the
    allocator's peak is what the ledger says (to 12 B on the MLP fed that way), `show` says
    so in one dim line; where it is not measured or not explained, it is a warning. What
    other threads allocate is in the ledger from its first use, never in the CPU
    profiler's count: where the ledger counts more than the allocator (a
    `from_pretrained(dtype=torch.bfloat16)` converting the weights in its loading thread),
    the line says those bytes may be theirs."""
    from memledger.ledger.summary import Measured
    from memledger.report.terminal import _headline

    s = _closure_loop(tmp_path / "run.ledger").summary()
    peak = s.peak.bytes

    def lines(measured: int, source: str = "cpu-profiler") -> str:
        m = Measured(peak_bytes=measured, source=source)
        return "\n".join(t.plain for t in _headline(s.model_copy(update={
            "threads": 3, "measured": m}), "run.ledger"))
    explained = lines(peak + 12)
    assert "2 other Python thread(s) ran while tracing" in explained
    assert "the CPU profiler counts only the traced thread's allocations" in explained
    assert "may" not in explained
    assert "they may hold what the ledger does not explain" in lines(peak + 8192)
    assert "the 8,192 B the ledger counts over the allocator may be theirs" in \
        lines(peak - 8192)
    assert "the peak is not measured" in lines(0, "none")
    # short by bytes the kernels' scratch explains (measured op by op): explained
    m = Measured(peak_bytes=peak + 8192, source="cpu-profiler",
                 ledger_with_scratch_bytes=peak + 8192)
    scratch = "\n".join(t.plain for t in _headline(s.model_copy(update={
        "threads": 3, "measured": m}), "run.ledger"))
    assert "2 other Python thread(s) ran while tracing" in scratch and "may" not in scratch


def test_a_module_the_script_keeps_and_never_calls_is_named(tmp_path):
    """Note [Modules never called] (memledger/trace/collector.py): an EMA copy updated by
    `update_parameters`, never called, read "other · (script) · clone"; its tensors are now
    named by the script's name for it, in their module, and stay `other`."""
    from torch.optim.swa_utils import AveragedModel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memledger.trace(tmp_path / "run.ledger") as led:
        ema = AveragedModel(model)
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            ema.update_parameters(model)
    st = led.storages
    copies = st[st["name"].str.startswith("ema.")]
    assert sorted(copies["name"]) == ["ema.module.0.bias", "ema.module.0.weight",
                                      "ema.module.2.bias", "ema.module.2.weight",
                                      "ema.n_averaged"]
    assert set(copies["category"]) == {"other"}
    assert int(copies.loc[copies["name"] == "ema.module.0.weight", "bytes"].iloc[0]) == 8 * 16 * 4
    assert copies.loc[copies["name"] == "ema.module.0.weight", "module"].iloc[0] == "ema.module.0"
    assert set(st.loc[st["category"] == "parameter", "name"]) == {
        "0.weight", "0.bias", "2.weight", "2.bias"}


class _Unconfigured(torch.nn.Module):
    """A module that refuses to be walked until it is configured, as pytorch-frame's
    `StypeEncoder`s do before the model they are handed to gives them their stats."""

    def named_modules(self, *args, **kwargs):
        raise ValueError("module is not fully-specified yet")


def test_a_module_that_refuses_to_be_walked_is_left_unnamed(tmp_path):
    """Note [A module that refuses to be walked] (memledger/trace/collector.py): the script
    keeps a module it never calls whose `named_modules` raises (pytorch-frame's bare
    `LinearEncoder()`); the walk for modules never called read it at the first optimizer
    step and the trace died, exit 70 "internal error (ValueError: ... not fully-specified
    yet)". It is left unnamed now; an EMA copy beside it is still named."""
    from torch.optim.swa_utils import AveragedModel

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with memledger.trace(tmp_path / "run.ledger") as led:
        spare = _Unconfigured()   # noqa: F841 - held by the frame, as a script holds it
        ema = AveragedModel(model)
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            ema.update_parameters(model)
    st = led.storages
    assert "ema.module.0.weight" in set(st["name"])
    assert led.peak().bytes > 0
