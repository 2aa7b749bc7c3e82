"""The trace's recompute probe (memledger/trace/timing.py, Note [Recompute probe in
context]): which regions it checkpoints and what it counts. Its times are never asserted."""

from __future__ import annotations

import importlib
import itertools
import time
from types import SimpleNamespace

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from memledger.trace.timing import (
    ModuleTimer,
    ProbeInput,
    _RegionSteps,
    calm_readings,
    probe_regions,
    recompute_probe,
    sac_probe,
)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(3)])
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_regions_are_the_repeated_blocks_else_the_children_with_parameters():
    assert probe_regions(_Net()) == ["blocks.0", "blocks.1", "blocks.2"]
    seq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))
    assert probe_regions(seq) == ["0", "2"]            # the ReLU has no parameters
    assert probe_regions(torch.nn.Linear(2, 2)) == [""]   # the whole model, one region


def test_regions_of_a_model_that_is_a_sequential_are_its_top_level_blocks():
    """mlp-mixer's `MLPMixer` is an `nn.Sequential` (embedding, blocks, norm, head): its
    blocks are the top-level `1`, `2`; the probe took `1.0`, `1.1`, the halves of the first
    (Note [A model that is itself a Sequential], replay/plan.py)."""
    nn = torch.nn
    stage = lambda: nn.Sequential(_Block(), _Block())   # noqa: E731
    seq = nn.Sequential(nn.Linear(4, 4), stage(), stage(), nn.LayerNorm(4), nn.Linear(4, 2))
    assert probe_regions(seq) == ["1", "2"]


def test_probe_counts_saves_per_region_and_repeats():
    torch.manual_seed(0)
    net, x = _Net(), torch.randn(3, 4)
    # a clock that moves 1 us per reading, not the thread's: under a loaded box a step the
    # real clock saw stall was dropped (Note [A stalled step]) and 4 factors came back
    # (failed once in a clean clone's `make test`); this test counts, it does not time
    ticks = itertools.count(0, 1_000)
    out = recompute_probe(ProbeInput(net, (x,)), lambda: next(ticks), max_reps=5)
    assert out["regions"] == 3
    assert len(out["factor"]) == len(out["region_ns"]) == 5
    # saves inside the blocks: block 0 (input without grad): addmm's input + relu's
    # result = 2; blocks 1 and 2: addmm's input and weight + relu's result = 3 each;
    # (2 + 3 + 3) / 3 regions
    assert out["saves_per_region"] == 8 / 3
    # the model is left as it was: no wrapped forwards
    assert all("forward" not in m.__dict__ for m in net.modules())


def test_probe_gives_up_on_a_model_without_a_differentiable_output():
    net = torch.nn.Linear(2, 2).requires_grad_(False)
    assert recompute_probe(ProbeInput(net, (torch.randn(1, 2),)), time.thread_time_ns) == {}


def test_probe_repetitions_fit_the_budget():
    """2.5 s of probing, 2 pairs of steps per repetition (Note [Recompute probe in context])."""
    from memledger.trace.timing import probe_reps

    assert probe_reps(100e6) == 12      # tiny GPT: 2.5e9 // (2 x 0.1e9)
    assert probe_reps(1e6) == 15        # capped
    assert probe_reps(1e6, max_reps=5) == 5
    assert probe_reps(500e6) == 2       # a 0.5 s pair: 2 repetitions, not 5 (20 steps of 0.25 s)
    assert probe_reps(2e9) == 1         # a step longer than the budget: probed once


def test_timed_steps_stop_at_the_budget():
    """Note [Timing within a budget]: 2.5 s of module-timed steps, at least 2 of them."""
    from memledger.trace.timing import StepTimers, over_budget

    assert over_budget([1.2e9, 1.3e9]) and not over_budget([1.2e9, 1.2e9])
    assert not over_budget([3e9]) and over_budget([3e9], least=1)

    def timed_steps(step_ns: float) -> int:
        """Module-timed steps StepTimers(7) takes before its op-timed step, steps of step_ns."""
        t = StepTimers(module_steps=7)
        now = [0.0]
        t._clock, t._faults = (lambda: now[0]), (lambda: 0)
        try:
            for calls in range(1, 20):
                t.on_step()
                now[0] += step_ns
                if t.done:
                    assert t.step_ns == [step_ns] * (calls - 2)   # the op step is not one
                    return calls - 2      # the first call opens, the last ends the op step
        finally:
            t.close()
        raise AssertionError("never done")

    assert timed_steps(45e6) == 7         # tiny GPT: 7 x 45 ms = 0.3 s, every step kept
    assert timed_steps(1.9e9) == 2        # nanoGPT size: 2 x 1.9 s >= 2.5 s, then the op step
    assert timed_steps(1e9) == 3          # 1 s steps: 2 s < 2.5 s after two, 3 s after three


def test_timed_steps_keep_the_settled_ones():
    """Note [Timed steps in a settled process]: steps that mapped fresh pages while the
    process settled are timed but not kept, and timing goes on until half the steps asked
    for are settled. The MLP example's faults: 298, 736, 608, 256, then none."""
    from memledger.trace.timing import StepTimers, settled

    assert settled([298, 736, 608, 256, 0, 0, 0]) == [4, 5, 6]
    assert settled([0, 1, 0, 23, 0]) == [0, 1, 2, 3, 4]          # the tiny GPT: all
    assert settled([5000, 4100, 4090, 4100]) == [1, 2, 3]        # faults alike every step
    assert settled([]) == []

    def run(faults_per_step: list[int], steps_ns: float = 3e6) -> tuple[StepTimers, dict]:
        t = StepTimers(module_steps=7)
        now, faults = [0.0], [0]
        t._clock, t._faults = (lambda: now[0]), (lambda: faults[0])
        try:
            for f in [*faults_per_step, 0]:      # the last: the op-timed step
                t.on_step()
                if t.done:
                    break
                if t.modules.active:             # one module call per timed step
                    t.modules.steps[-1].append(("", int(now[0]) + 1))
                now[0] += steps_ns
                faults[0] += f
            else:
                t.on_step()
            assert t.done
            return t, t.record("cpu")
        finally:
            t.close()

    t, rec = run([298, 736, 608, 256, 0, 0, 0, 0, 0, 0])
    assert t.step_faults == [298, 736, 608, 256, 0, 0, 0, 0]   # 8 steps: 4 settled
    assert rec["unsettled_steps"] == 4
    assert len(rec["modules"]) == len(rec["step_ns"]) == 4
    assert [m[0][1] for m in rec["modules"]] == [12000001, 15000001, 18000001, 21000001]
    t, rec = run([0] * 10)                                      # settled from the first
    assert len(t.step_faults) == 7 and rec["unsettled_steps"] == 0
    t, rec = run([900] * 20)                                    # never fewer: all kept
    assert len(t.step_faults) == 7 and len(rec["modules"]) == 7
    t, rec = run([900, 0] * 10)                                 # 4 settled after 8
    assert len(t.step_faults) == 8 and len(rec["modules"]) == 4
    t, rec = run([900] * 6 + [0] + [900] * 20)                  # at most twice the steps
    assert len(t.step_faults) == 14 and len(rec["modules"]) == 1


class _KwargsNet(torch.nn.Module):
    """Called as transformers models are, `model(**batch)`; notes the autocast state its
    blocks run under."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))
        self.seen: list = []

    def forward(self, *, input_ids, scale=1.0):
        self.seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        x = input_ids * scale
        for b in self.blocks:
            x = b(x)
        return {"loss": x.float().pow(2).mean(), "logits": x}


def _timed_steps(net, steps, autocast: bool):
    from memledger.trace.timing import ModuleTimer

    timer = ModuleTimer()
    timer.start_step()
    try:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                net(input_ids=torch.randn(3, 4), scale=2.0)["loss"].backward()
    finally:
        timer.remove()
    return timer.root


def test_the_probes_get_keyword_arguments_and_the_scripts_autocast():
    """Note [The probes call the model as the script did]: a model called with keyword
    arguments only is probed (it used to get no probe at all), under the same autocast."""
    net = _KwargsNet()
    root = _timed_steps(net, 2, autocast=True)
    assert root is not None and root.module is net
    assert set(root.kwargs) == {"input_ids", "scale"} and root.args == ()
    assert root.autocast == (("cpu", torch.bfloat16),)
    net.seen.clear()
    out = recompute_probe(root, time.thread_time_ns, max_reps=1)
    assert out["regions"] == 2 and len(out["factor"]) == 1
    # every forward the probe ran (warm-up, plain and checkpointed) was under bf16 autocast
    assert net.seen and set(net.seen) == {(True, torch.bfloat16)}
    assert not torch.is_autocast_enabled("cpu")       # and the state is restored after


def test_without_autocast_the_probes_run_without_it():
    net = _KwargsNet()
    root = _timed_steps(net, 2, autocast=False)
    assert root.autocast == ()
    net.seen.clear()
    sac = sac_probe(root, 10, time.thread_time_ns, reps=1)
    assert len(sac) == 1
    assert {s[0] for s in net.seen} == {False}


def test_a_single_root_call_is_not_enough_to_capture():
    """The root's arguments are taken at its next call (the global hooks see no keyword
    arguments): one step leaves nothing to probe, and the hook is gone after remove()."""
    net = _KwargsNet()
    assert _timed_steps(net, 1, autocast=False) is None
    assert not net._forward_pre_hooks


def test_offload_probe_counts_the_stream_it_writes():
    """Note [Offload probe in context]: the storages and bytes one offloaded step writes.
    _Net's blocks save x (block 0's input), and each block's relu output (block k+1's
    addmm input is block k's relu output: the same storage, written once); the weights
    are parameters and stay: 4 storages of 3 x 4 floats = 192 bytes, 8 saves."""
    from memledger.trace.timing import offload_probe

    torch.manual_seed(0)
    out = offload_probe(ProbeInput(_Net(), (torch.randn(3, 4),)), time.thread_time_ns,
                        max_reps=2)
    assert (out["storages"], out["bytes"], out["saves"]) == (4, 192, 8)
    assert len(out["added_ns"]) == 2 and out["where"].startswith("files in ")
    assert offload_probe(None, time.thread_time_ns) == {}


def _counted_net() -> tuple[_Net, list]:
    """A seeded _Net and the list its calls append to."""
    torch.manual_seed(0)
    net, calls = _Net(), []
    net.register_forward_pre_hook(lambda m, a: calls.append(1))
    return net, calls


def test_offload_probe_counts_within_its_timed_steps():
    """The stream is read off the Offloader's counters over the probe's own offloaded
    steps, not in a step of its own: with the pair's cost known, 1 counting step + 2
    repetitions x (2 plain + 2 offloaded) = 9 calls of the model, the same counts."""
    from memledger.trace.timing import offload_probe

    net, calls = _counted_net()
    out = offload_probe(ProbeInput(net, (torch.randn(3, 4),)), time.thread_time_ns,
                        max_reps=2, pair_ns=1.0)
    assert len(calls) == 9
    assert (out["storages"], out["bytes"], out["saves"]) == (4, 192, 8)
    # the saves counted already (by the recompute probe, same regions): no counting step
    calls.clear()
    again = offload_probe(ProbeInput(net, (torch.randn(3, 4),)), time.thread_time_ns,
                          max_reps=2, pair_ns=1.0, saves=8)
    assert len(calls) == 8 and again["saves"] == 8 and again["storages"] == 4


def test_selective_probe_pairs_selective_with_checkpointed_steps():
    """Note [Selective probe in context]: per repetition, (selective - checkpointed step) /
    regions, the regions named and the save list given; each repetition runs 2 checkpointed
    and 2 selective steps (the first of each untimed), after one plain step that counts the
    regions' saves (none: nothing to probe); the model is left as it was."""
    from memledger.replay.policies import DEFAULT_SAVE_OPS
    from memledger.trace.timing import selective_probe

    net, calls = _counted_net()
    out = selective_probe(ProbeInput(net, (torch.randn(3, 4),)), time.thread_time_ns,
                          max_reps=2, pair_ns=1.0)
    assert len(out["region_ns"]) == 2 and len(calls) == 9
    assert out["paths"] == ["blocks.0", "blocks.1", "blocks.2"]
    assert out["save_ops"] == list(DEFAULT_SAVE_OPS)
    assert all("forward" not in m.__dict__ for m in net.modules())
    assert selective_probe(None, time.thread_time_ns) == {}


def test_no_probes_on_several_ranks(monkeypatch):
    """Note [No probes on several ranks]: the op-timed step ends the timing and no probe
    runs (a probe's step count may differ between ranks, and their collectives would
    wait on each other), and the record says why: before, predict read a rank ledger's
    missing probes as a script that ended too soon ("let it run 16 steps more than
    --steps")."""
    from memledger.trace import timing

    ran = []
    monkeypatch.setattr(timing, "sac_probe", lambda *a, **k: ran.append("sac_probe") or [])
    monkeypatch.setattr(timing, "context_probes",
                        lambda root, clock, kinds, **k: ran.append(kinds) or
                        {kind: {} for kind in kinds})
    called = SimpleNamespace(module=None)   # a call of the model the probes would re-run
    for probes, root, expected, skipped in (
            (False, called, [], "ranks"), (True, called, ["sac_probe", timing.PROBE_KINDS], ""),
            # Note [A model never called whole]: no call to re-run, and the record says so
            (True, None, [], "uncalled")):
        ran.clear()
        t = timing.StepTimers(module_steps=1, probes=probes)
        t._faults = lambda: 0
        t.modules.root = root
        try:
            for _ in range(3):          # opens the module step, then the op step, then ends
                t.on_step()
            assert t.done and ran == expected and t.probes_skipped == skipped
        finally:
            t.close()


def test_one_pass_for_the_probes(monkeypatch):
    """Note [One pass for the probes]: plain, one region checkpointed, checkpointed,
    selective and offloaded turns in one cycle. Caps 3, 2 and 2 repetitions: 1 counting
    step + 2 cycles of 5 modes x 2 steps + 1 cycle of plain, one and checkpointed x 2 = 27
    calls (one probe after the other: 19 + 8 + 8 = 35). A mode the model cannot run
    leaves the cycle and the other probes still answer."""
    from memledger.measure import apply
    from memledger.trace.timing import context_probes

    net, calls = _counted_net()
    # a clock that counts its reads: every reading is kept (Note [A stalled step] drops
    # none), whatever else the machine runs
    got = context_probes(ProbeInput(net, (torch.randn(3, 4),)), itertools.count().__next__,
                         pair_ns=1.0, max_reps={"checkpoint": 3, "selective": 2,
                                                "offload": 2})
    assert len(calls) == 27
    assert len(got["checkpoint"]["factor"]) == 3 and got["checkpoint"]["regions"] == 3
    # Note [A checkpointed step's own cost]: a per-step cost beside each per-region one
    assert len(got["checkpoint"]["step_ns"]) == 3 and got["checkpoint"]["early_stop"]
    assert len(got["selective"]["region_ns"]) == 2
    off = got["offload"]
    assert (off["storages"], off["bytes"], off["saves"], len(off["added_ns"])) == (4, 192, 8, 2)

    def broken(save_ops):
        def context_fn():
            raise RuntimeError("this model's ops cannot run under selective checkpointing")
        return context_fn
    monkeypatch.setattr(apply, "_selective_context", broken)
    got = context_probes(ProbeInput(net, (torch.randn(3, 4),)), itertools.count().__next__,
                         pair_ns=1.0, max_reps={"checkpoint": 2, "selective": 2,
                                                "offload": 2})
    assert got["selective"] == {}
    assert len(got["checkpoint"]["factor"]) == 2 and got["offload"]["storages"] == 4
    assert all("forward" not in m.__dict__ for m in net.modules())


def test_a_stalled_step_leaves_the_probes_and_the_timed_steps(monkeypatch):
    """Note [A stalled step]: a step the scheduler held for far longer than the step (a
    4.1 s probe step among 45-60 ms ones, traced beside a test run) carried the stall into
    a difference of steps and from there into predict's band (+30.2 ms, 4.1-4277.3). Here
    the timed checkpointed step of the first repetition stalls: that repetition's
    checkpoint and selective readings go (both read that step), offload's stays; a kind
    left with one clean reading keeps that one (two once had to remain: a pair's median is
    its mean, and a 230x stall in it priced a checkpoint at +105 s a step); one left with
    none keeps them all."""
    from memledger.trace import timing

    ms = 10**6
    assert timing.stalled([50 * ms, 55 * ms, 60 * ms, 4100 * ms, 52 * ms]) == \
        [False] * 3 + [True, False]
    assert timing.stalled([50 * ms, 50 * ms, 50 * ms, 76 * ms]) == [False] * 3 + [True]
    assert timing.stalled([2 * ms, 2 * ms, 2 * ms, 6.9 * ms]) == [False] * 4   # +5 ms at least
    assert timing.stalled([2 * ms, 2 * ms, 2 * ms, 7.1 * ms]) == [False] * 3 + [True]
    assert timing.stalled([]) == []

    real_run, n = timing._RegionSteps.run, [0]

    def run(self, wrap=None, counting=False):
        n[0] += 1
        step, *rest = real_run(self, wrap, counting)
        # call 1 counts the saves; then per mode (offload, plain, one, checkpoint,
        # selective) an untimed and a timed step: call 9 is the first timed checkpointed
        return (step + 10**9 if n[0] == 9 else step, *rest)
    monkeypatch.setattr(timing._RegionSteps, "run", run)
    net, _ = _counted_net()
    got = timing.context_probes(ProbeInput(net, (torch.randn(3, 4),)),
                                itertools.count().__next__, pair_ns=1.0,
                                max_reps={"checkpoint": 3, "selective": 3, "offload": 2})
    ck, sel, off = got["checkpoint"], got["selective"], got["offload"]
    assert (len(ck["factor"]), len(ck["region_ns"]), len(ck["step_ns"])) == (2, 2, 2)
    assert len(sel["region_ns"]) == 2 and len(off["added_ns"]) == 2
    assert max(map(abs, ck["region_ns"] + ck["step_ns"] + sel["region_ns"])) < 10**6

    n[0] = 0                          # two selective readings only: the stalled one goes too
    got = timing.context_probes(ProbeInput(net, (torch.randn(3, 4),)),
                                itertools.count().__next__, pair_ns=1.0,
                                max_reps={"checkpoint": 3, "selective": 2, "offload": 2})
    assert len(got["checkpoint"]["factor"]) == 2 and len(got["selective"]["region_ns"]) == 1
    assert max(map(abs, got["selective"]["region_ns"])) < 10**6


def test_a_stalled_timed_step_is_not_kept():
    """Note [A stalled step]: the module-timed steps drop one that took more than 1.5x the
    median of the others (timing goes on while fewer than half the steps asked for are
    kept, Note [Timed steps in a settled process])."""
    from memledger.trace.timing import StepTimers

    t = StepTimers(module_steps=5)
    now, times = [0], iter([40, 42, 95, 41, 43, 44, 40, 41, 40, 42])
    t._clock, t._faults = (lambda: now[0]), (lambda: 0)
    try:
        for _ in range(20):
            t.on_step()
            if t.done:
                break
            if t.modules.active:
                t.modules.steps[-1].append(("", 1))
            now[0] += next(times) * 10**6
        rec = t.record("cpu")
    finally:
        t.close()
    assert [ns // 10**6 for ns in rec["step_ns"]] == [40, 42, 41, 43]
    assert len(rec["modules"]) == 4 and rec["unsettled_steps"] == 1


def test_the_module_timer_names_top_level_modules_as_the_ledger_does():
    """memledger/trace/roots.py: the generator (called first) is the model; the
    discriminator is named by its class. When the timer named every top-level module from
    its own root, both had a module `fc`, and a policy on the generator's `fc` was priced
    with the discriminator's times too. The discriminator runs first in a timed step here
    (as a GAN's does when a step ends at its optimizer): names follow the first calls."""
    from memledger.ledger.writer import MemorySink
    from memledger.trace.collector import Collector
    from memledger.trace.timing import ModuleTimer

    gen, disc = _Block(), torch.nn.Sequential(torch.nn.Linear(4, 1))
    x = torch.randn(2, 4)

    def untimed_then_timed(timer=None):
        disc(gen(x)).sum().backward()
        if timer is not None:
            timer.start_step()
        disc(x).sum().backward()
        gen(x).sum().backward()

    timer = ModuleTimer()
    untimed_then_timed(timer)
    timer.remove()
    # the discriminator under the script's name for it (Note [Root names])
    assert [p for p, _ in timer.steps[0]] == ["disc.0", "disc", "fc", ""]
    sink = MemorySink()
    with Collector(sink):
        untimed_then_timed()
    scoped = {r["mod"] for r in sink.records if r["k"] == "scope"}
    assert {"disc.0", "disc", "fc", ""} <= scoped


def test_the_checkpoint_probe_splits_a_steps_own_cost_from_each_regions():
    """Note [A checkpointed step's own cost]. Runs are (step, regions' forward, re-run);
    3 regions. Plain 10,000 ns; all three checkpointed 11,500 with 300 of re-run: D_all =
    1,200; the first alone 10,700 with 100 of re-run: D_one = 600. Per region (1,200 - 600)
    / 2 = 300, per step 600 - 300 = 300. Without the one-region run: 1,200 / 3 = 400 per
    region and no per-step reading. The factor is the re-run over the plain forward."""
    from memledger.trace.timing import _checkpoint_record

    plain, every, one = (10_000, 4_000, 0), (11_500, 4_000, 300), (10_700, 4_000, 100)
    rec = _checkpoint_record([(plain, every)], [one], 3, 6, ["a", "b", "c"])
    assert rec["region_ns"] == [300.0] and rec["step_ns"] == [300.0]
    assert rec["factor"] == [300 / 4_000] and rec["saves_per_region"] == 2.0
    assert rec["early_stop"] and rec["paths"] == ["a", "b", "c"]
    alone = _checkpoint_record([(plain, every)], [None], 3, 6, ["a", "b", "c"])
    assert alone["region_ns"] == [400.0] and "step_ns" not in alone


def test_an_offload_probe_that_fails_says_why_and_the_others_still_answer(monkeypatch):
    """Note [A full temporary folder]: offload's copies on a full disk drop the offload turn;
    the record keeps why, and predict names it beside the calibration's price."""
    from memledger.errors import OutputError
    from memledger.measure import offload
    from memledger.trace.timing import context_probes

    def full(self, offset, data):
        raise OutputError("memledger: no space left on the device writing offload's copies "
                          "in '/tmp'")
    monkeypatch.setattr(offload._SlotFile, "write", full)
    net, calls = _counted_net()
    got = context_probes(ProbeInput(net, (torch.randn(3, 4),)), time.thread_time_ns,
                         pair_ns=1.0, max_reps={"checkpoint": 2, "selective": 2, "offload": 2})
    assert got["offload"] == {"failed": "no space left on the device writing offload's "
                                        "copies in '/tmp'"}
    assert len(got["checkpoint"]["factor"]) == 2 and len(got["selective"]["region_ns"]) == 2


def test_the_probe_records_whether_early_stop_was_on():
    """A script that turns early stop off for everything has its probe (and its policies)
    re-run whole regions: the record says so, and the cost model keeps the factor as read."""
    from torch.utils.checkpoint import set_checkpoint_early_stop

    from memledger.trace.timing import _checkpoint_record

    plain, every = (10_000, 4_000, 0), (11_500, 4_000, 300)
    assert _checkpoint_record([(plain, every)], [None], 3, 6, ["a"])["early_stop"]
    with set_checkpoint_early_stop(False):
        assert not _checkpoint_record([(plain, every)], [None], 3, 6, ["a"])["early_stop"]


def _trained(opt_kind, **settings):
    """A net and its optimizer after one real step (the optimizer has state)."""
    torch.manual_seed(0)
    net = _Net()
    opt = opt_kind(net.parameters(), **settings)
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    return net, opt


def test_the_probe_step_ends_with_the_scripts_kind_of_optimizer_step_on_copies():
    """Note [The probe's optimizer step]: AdamW (whose defaults name a setting its
    constructor does not take) runs on copies, every probe step; the model's weights and
    the script's optimizer state are as they were."""
    net, opt = _trained(torch.optim.AdamW, lr=1e-3, weight_decay=0.1)
    weights = [p.detach().clone() for p in net.parameters()]
    state = {k: v.clone() for k, v in opt.state[net.head.weight].items()}
    steps = _RegionSteps(ProbeInput(net, (torch.randn(3, 4),), optimizer=opt),
                         time.thread_time_ns)
    assert isinstance(steps.update.optimizer, torch.optim.AdamW)
    assert steps.update.optimizer.defaults["weight_decay"] == 0.1
    seen = []   # torch's global step hooks (memledger counts training steps by them)
    hook = register_optimizer_step_pre_hook(lambda *a: seen.append(a))
    try:
        for _ in range(3):
            steps.run()
    finally:
        hook.remove()
    assert seen == []
    copy = steps.update.optimizer.state[steps.update.copies[-1]]
    assert float(copy["step"]) == 3
    assert all(torch.equal(a, b) for a, b in zip(weights, net.parameters()))
    assert all(torch.equal(v, opt.state[net.head.weight][k]) for k, v in state.items())


def test_an_optimizer_the_probe_cannot_step_leaves_the_step_at_backward():
    net, opt = _trained(torch.optim.SGD, lr=0.1)
    lbfgs = torch.optim.LBFGS(net.parameters())     # its step wants a closure
    steps = _RegionSteps(ProbeInput(net, (torch.randn(3, 4),), optimizer=lbfgs),
                         time.thread_time_ns)
    assert steps.update is not None
    steps.run()
    assert steps.update is None
    assert _RegionSteps(ProbeInput(net, (torch.randn(3, 4),)), time.thread_time_ns).update \
        is None


def test_the_timer_takes_the_optimizer_that_updates_the_model():
    """A GAN's other optimizer steps first: the probe takes the model's."""
    net, opt = _trained(torch.optim.Adam)
    other = torch.nn.Linear(2, 2)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)
    timer = ModuleTimer()
    try:
        timer.start_step()
        net(torch.randn(3, 4))
        net(torch.randn(3, 4)).sum().backward()   # the root is taken at its next call
        other(torch.randn(1, 2)).sum().backward()
        other_opt.step()
        assert timer.root is not None and timer.root.optimizer is None
        opt.step()
        assert timer.root.optimizer is opt
    finally:
        timer.remove()


def test_a_model_near_the_memorys_size_goes_without_the_optimizer_pass(monkeypatch):
    """Copies and Adam's moments are 3x the trainable bytes: more than a quarter of the
    free memory, and the probe's step ends at backward as before."""
    timing = importlib.import_module("memledger.trace.timing")
    net, opt = _trained(torch.optim.Adam)
    trainable = sum(p.nbytes for p in net.parameters())
    monkeypatch.setattr(timing, "_room", lambda device: 4 * 3 * trainable - 4)
    probe = ProbeInput(net, (torch.randn(3, 4),), optimizer=opt)
    assert _RegionSteps(probe, time.thread_time_ns).update is None
    monkeypatch.setattr(timing, "_room", lambda device: 4 * 3 * trainable)
    assert _RegionSteps(probe, time.thread_time_ns).update is not None


def test_a_probe_loss_from_the_outputs_with_gradients():
    """Note [A probe's loss]: a first output without a gradient (sampled actions) gives way
    to the sum of the outputs with one; a first output with one is taken as it was."""
    from memledger.trace.timing import _first_tensor

    w = torch.ones(3, requires_grad=True)
    actions, values, log_prob = torch.tensor([1, 0]), w[:2] * 2, w[1:] * 3
    y = _first_tensor((actions, values, log_prob))
    y.float().sum().backward()
    assert w.grad.tolist() == [2.0, 5.0, 3.0]      # d(2 w0 + 2 w1 + 3 w1 + 3 w2)
    assert _first_tensor({"loss": values, "x": actions}) is values
    assert _first_tensor((actions,)) is actions    # nothing has a gradient: as before


# ---- Note [A stalled step] -------------------------------------------------------------------

def test_a_stalled_reading_is_dropped_while_one_calm_reading_remains():
    calm, slow = (1.0, 2.0, None, True), (1.0, 230.0, None, False)
    assert calm_readings([calm, slow]) == [calm]           # two readings, one stalled
    assert calm_readings([slow, calm, calm]) == [calm, calm]
    assert calm_readings([slow]) == [slow]                 # none calm: all kept
    assert calm_readings([]) == []
