"""Note [The script's own checkpoint]: a script that checkpoints its blocks itself.

tests/clients/train_checkpointed.py: 2 blocks of Linear(64, 256) -> GELU -> Linear(256, 64)
-> Dropout, each through torch.utils.checkpoint.checkpoint(block, x) in the model's forward
(non-reentrant, or `--reentrant`), batch 512 so that the peak falls in backward, where the
generator states checkpoint keeps are live.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import memledger
from memledger.errors import PolicyError
from memledger.replay.script_checkpoint import nests, runs_inside
from memledger.trace.timing import ProbeInput, context_probes
from tests.clients.harness import run_client

RNG_BYTES = torch.get_rng_state().nbytes   # 5,056: the CPU generator's mt19937 state
REFUSED = ["checkpoint:blocks.*", "checkpoint:blocks.*.fc1", "selective:blocks.0",
           "offload:blocks.*", "checkpoint:head+offload:blocks.1.fc2"]
ALLOWED = ["checkpoint:head", "offload:head"]


@pytest.mark.parametrize("kind", ["non-reentrant", "reentrant"])
def test_ledger_and_policies_of_a_script_that_checkpoints_its_blocks(kind):
    """The ledger peak equals the allocator's to 512 B (the generator states are counted:
    5,056 B each, made outside the dispatcher); every policy that would nest with the
    script's checkpoint is refused by predict and measure in the same line, before
    anything is predicted, and none tells to offload a block (refused as well); the others
    are predicted within 512 B."""
    argv = ["--batch-size", "512", *(["--reentrant"] if kind == "reentrant" else [])]
    run = run_client("train_checkpointed.py", argv, REFUSED + ALLOWED)
    assert abs(run.ledger_peak - run.allocator_peak) <= 512, \
        f"ledger {run.ledger_peak:,} vs allocator {run.allocator_peak:,}"
    for text in REFUSED:
        p = run.policies[text]
        assert p.predicted is None and p.measured is None, (text, p)
        assert p.predict_refusal == p.measure_refusal and "\n" not in p.predict_refusal
        assert "the script" in p.predict_refusal, p.predict_refusal
    # Note [An alternative that is refused too] (replay/script_checkpoint.py): the script
    # checkpoints each block's call, so offloading the block is refused too (REFUSED); the
    # line told the user to do it ("or offload that module instead")
    for text in ("checkpoint:blocks.*", "checkpoint:blocks.*.fc1", "selective:blocks.0"):
        assert run.policies[text].predict_refusal.endswith(
            "turn the script's checkpointing off to compare policies, or offload a module "
            "around it"), run.policies[text].predict_refusal
    for text in ALLOWED:
        p = run.policies[text]
        assert abs(p.predicted - p.measured) <= 512, (text, p)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x))


class _Net(nn.Module):
    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block(), _Block()])
        self.reentrant = reentrant

    def forward(self, x):
        for b in self.blocks:
            x = b(x) if self.reentrant is None else checkpoint(b, x,
                                                               use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("reentrant", [False, True])
def test_the_ledger_records_each_checkpoint_call_and_its_generator_states(reentrant):
    """One `script_ckpt` per checkpointed call, naming the block; one `get_rng_state`
    storage per call (5,056 B, in that block, freed in backward); each re-run's generator
    fork (`fork_rng`, 5,056 B) live in backward only (the reentrant kind's was not seen,
    Note [A checkpointed function that calls no module]). A re-run that stops early raises
    inside the forward; torch then calls the collector's call hooks without kwargs, which
    once raised a warning."""
    net = _Net(reentrant)
    x = torch.randn(4, 8, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught, memledger.trace() as led:
        warnings.simplefilter("always")
        net(x).sum().backward()
    assert not [w for w in caught if "always_call" in str(w.message)]
    calls = led.extra["script_ckpt"]
    assert [(r["mod"], r["first"]) for r in calls] == [("blocks.0", "blocks.0"),
                                                       ("blocks.1", "blocks.1")]
    st = led.storages
    rng = st[st["op"] == "get_rng_state"]
    assert rng["module"].tolist() == ["blocks.0", "blocks.1"]
    assert set(rng["bytes"]) == {RNG_BYTES} and (rng["freed"] <= len(led.curve())).all()
    fork = st[st["op"] == "fork_rng"]
    assert len(fork) == 2
    assert set(fork["phase"]) <= {"backward"} and set(fork["bytes"]) <= {RNG_BYTES}


def test_a_plain_model_has_no_script_checkpoint():
    with memledger.trace() as led:
        _Net(None)(torch.randn(4, 8, requires_grad=True)).sum().backward()
    assert "script_ckpt" not in led.extra
    assert not led.storages["op"].isin(["get_rng_state", "fork_rng"]).any()


def test_nesting_rules():
    """Rule 1 (checkpoint/selective): the region, inside it or around it. Rule 2 (offload):
    only a call that runs under the script's checkpoint (the region too, when the checkpoint
    wraps its call; not when it wraps only its forward, as transformers does)."""
    assert nests("h.0", "h.0") and nests("h.0.mlp", "h.0") and nests("h", "h.0")
    assert nests("", "h.0") and not nests("h.1", "h.0") and not nests("h.00", "h.0")
    assert runs_inside("h.0", "h.0", "h.0") and not runs_inside("h.0", "h.0", "h.0.ln_1")
    assert runs_inside("h.0.mlp", "h.0", "h.0.ln_1") and not runs_inside("h", "h.0", "h.0")


def test_probes_skip_regions_the_script_checkpoints():
    """Nothing is saved inside the regions (checkpoint holds it): no probe runs a second
    checkpoint around the script's, and every kind answers {} (the calibration prices it)."""
    net = _Net(False)
    out = context_probes(ProbeInput(net, (torch.randn(4, 8, requires_grad=True),)),
                         __import__("time").perf_counter_ns, pair_ns=1.0)
    assert out == {"checkpoint": {}, "selective": {}, "offload": {}}


def test_apply_policy_refuses_while_running():
    """`measure`'s side: the refusal comes from the first forward, before any recompute."""
    from memledger.measure.apply import apply_policy
    from memledger.replay.policies import parse_policy

    for text in ("checkpoint:blocks.0", "offload:blocks.1"):
        net = _Net(False)
        with apply_policy(net, parse_policy(text)), pytest.raises(PolicyError, match="script"):
            net(torch.randn(4, 8, requires_grad=True))


def test_plan_says_why_checkpoint_is_no_candidate(tmp_path, capsys):
    """A budget nothing fits: plan's one line says the script checkpoints its blocks itself
    (checkpoint and selective are refused there), with the fix."""
    from memledger.cli import main

    net, path = _Net(False), tmp_path / "own.ledger"
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with memledger.trace(path):
        for _ in range(2):
            net(torch.randn(4, 8, requires_grad=True)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert main(["plan", str(path), "--budget", "1B"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the script checkpoints 2 module(s) itself" in err and "turn its checkpointing" in err


def test_checkpoint_sequential_makes_each_module_of_a_segment_a_region():
    """torch's checkpoint_sequential(body, 2, x) checkpoints body.0 and body.1 as one
    segment through a function of no module (the last segment runs plainly): each of the
    two is a region the script checkpoints, and a policy on either, or on body.*, is
    refused; body.2 and body.3 are free."""
    from torch.utils.checkpoint import checkpoint_sequential

    from memledger.replay.engine import replay
    from memledger.replay.policies import parse_policy
    from memledger.replay.prepared import Prepared

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])

        def forward(self, x):
            return checkpoint_sequential(self.body, 2, x, use_reentrant=False)

    with memledger.trace() as led:
        Net()(torch.randn(4, 8, requires_grad=True)).sum().backward()
    assert [(r["mod"], r["first"]) for r in led.extra["script_ckpt"]] == [
        ("body.0", "body.0"), ("body.1", "body.1")]
    prep = Prepared.from_ledger(led)
    for text in ("checkpoint:body.1", "checkpoint:body.*", "offload:body.0"):
        with pytest.raises(PolicyError, match="the script"):
            replay(prep, parse_policy(text))
    replay(prep, parse_policy("checkpoint:body.2+offload:body.3"))


@pytest.mark.parametrize("reentrant", [False, True])
def test_the_doctor_names_torchs_checkpoint_function_as_the_keeper(reentrant):
    """Note [The Function that keeps them] (trace/doctor_retention.py): the reentrant
    checkpoint is an autograd Function that keeps each call's CPU generator state on ctx
    (`ctx.fwd_cpu_state`), which backward does not free; the loop keeps `loss` past the
    step (it prints it), so both blocks' states (2 x 5,056 B) stay to the next forward. The
    warning said "tensors a custom autograd Function keeps", in a script that defines
    none; it names `CheckpointFunction` now. The non-reentrant kind keeps nothing there."""
    from pathlib import Path

    from memledger.doctor.run import diagnose_in_process

    script = Path(__file__).resolve().parents[1] / "clients" / "train_checkpointed.py"
    argv = ["--width", "16", "--batch-size", "8", *(["--reentrant"] if reentrant else [])]
    report, outcome = diagnose_in_process(script, argv, 2)
    assert outcome.code == 0, outcome.reason
    if not reentrant:
        assert report.findings == []
        return
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "warning"), f.line()
    assert f.evidence["ctx_bytes_per_step"] == [2 * RNG_BYTES, 2 * RNG_BYTES]
    assert "9.9 KiB of tensors the autograd Function `CheckpointFunction` keeps on ctx" \
        in f.message
    assert f.message.endswith("`del loss` after the step frees them")


def _scan(h):
    return torch.tanh(h * h + 1).cumsum(-1) * h


class _Mixer(nn.Module):
    """Checkpoints a function in its forward: of no module (`_scan`), or one calling `fc`."""

    def __init__(self, reentrant: bool, calls_module: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.reentrant, self.calls_module = reentrant, calls_module

    def forward(self, x):
        fn = (lambda h: _scan(self.fc(h))) if self.calls_module else _scan
        return self.fc(checkpoint(fn, x, use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_function_of_no_module_is_recorded_in_its_callers_call(reentrant):
    """Note [A policy checkpoint around a checkpointed function]: one `script_ckpt_fn` record
    per call with gradients, naming the calling module, the function and the line that
    checkpoints it; none in an evaluation (no policy acts there), and none where a module
    runs under the checkpoint (the module rule's `script_ckpt` has it). `measure`'s side
    refuses a checkpoint of the caller in the line the replay writes."""
    from memledger.measure.apply import apply_policy
    from memledger.replay.engine import replay
    from memledger.replay.policies import parse_policy
    from memledger.replay.prepared import Prepared

    net = nn.Sequential(_Mixer(reentrant))
    x = torch.randn(4, 8, requires_grad=True)
    with memledger.trace() as led:
        with torch.no_grad():
            net(x)
        net(x).sum().backward()
    line = _Mixer.forward.__code__.co_firstlineno + 2
    assert [(r["mod"], r["fn"], r["at"]) for r in led.extra["script_ckpt_fn"]] == [
        ("0", "_scan", f"test_script_checkpoint.py:{line}")]
    assert "script_ckpt" not in led.extra
    with pytest.raises(PolicyError) as predicted:
        replay(Prepared.from_ledger(led), parse_policy("checkpoint:0"))
    replay(Prepared.from_ledger(led), parse_policy("checkpoint:0.fc"))
    with apply_policy(net, parse_policy("checkpoint:0")), \
            pytest.raises(PolicyError) as measured:
        net(x)
    assert str(predicted.value) == str(measured.value)
    assert "checkpoints the function _scan itself" in str(measured.value)

    with memledger.trace() as led:
        nn.Sequential(_Mixer(reentrant, calls_module=True))(x).sum().backward()
    assert "script_ckpt_fn" not in led.extra
    assert [r["mod"] for r in led.extra["script_ckpt"]] == ["0.fc"]
