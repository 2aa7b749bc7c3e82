"""The gates on tiny self-seeding scripts, captured in this process (fast, exact).

Each broken candidate (memledger/verify/broken.py) must be rejected at the right gate with
the right tensor named; real policies must pass bitwise on CPU.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from memledger.verify.gates import run_gates
from memledger.verify.runs import CaptureResult, Variant, capture_in_process

# Three blocks of Linear -> ReLU -> Dropout, then a head; Adam; data from a seeded generator.
DROPOUT_NET = """
import torch
from torch import nn
import torch.nn.functional as F

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return self.drop(F.relu(self.fc(x)))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(16, 4)
    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)

torch.manual_seed(0)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
gen = {gen}
for step in range(5):
    x = torch.randn(32, 8, generator=gen)
    y = torch.randint(0, 4, (32,), generator=gen)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
SEEDED = "torch.Generator().manual_seed(1)"
UNSEEDED = "torch.Generator(); gen.seed()".replace("; gen.seed()", "") + "\ngen.seed()"

# Two blocks of Linear -> BatchNorm1d (training mode) -> ReLU; SGD with momentum.
BN_NET = """
import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential()
model.blocks = nn.Sequential(
    nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU()),
    nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU()))
model.head = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
gen = torch.Generator().manual_seed(1)
model.train()
for step in range(5):
    x = torch.randn(32, 8, generator=gen)
    loss = F.cross_entropy(model(x), torch.randint(0, 4, (32,), generator=gen))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def in_process(script, argv, variant, steps, out) -> CaptureResult:
    return capture_in_process(script, argv, variant, steps)


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


@pytest.fixture
def dropout_net(tmp_path):
    return _write(tmp_path, "dropout_net.py", DROPOUT_NET.format(gen=SEEDED))


def _one(script: Path, variant: Variant, steps: int = 2):
    report = run_gates(script, [], [variant], steps=steps, runner=in_process)
    return report, report.outcomes[0]


@pytest.mark.parametrize("policy", ["checkpoint:blocks.*", "offload:blocks.*",
                                    "selective:blocks.*", "checkpoint:blocks.[0-1]"])
def test_real_policies_pass_bitwise(dropout_net, policy):
    report, o = _one(dropout_net, Variant(policy, policy))
    assert report.reproducible and report.noise_floor == 0.0
    assert report.tolerance.describe() == "bitwise"
    assert o.passed and o.gates == {"inputs": True, "gradients": True, "update": True}
    assert o.reason == "gates passed"
    assert o.comparison.steps_compared == 2
    assert o.comparison.worst_gradient.max_abs == 0.0


def test_checkpoint_without_rng_state_fails_gradients(dropout_net):
    # GIVEN dropout inside every block, recomputed without restoring the RNG state
    _, o = _one(dropout_net, Variant("no-rng", broken="checkpoint_no_rng", selector="blocks.*"))
    # THEN the masks differ in backward: the gradients gate fails at step 0 and names the
    # parameter with the largest relative difference, one inside the first recomputed block
    assert not o.passed
    assert o.gates == {"inputs": True, "gradients": False, "update": True}
    f = o.comparison.finding
    assert (f.gate, f.step, f.name) == ("gradients", 0, "blocks.0.fc.bias")
    assert f.diff.max_rel > 0.5   # other dropout masks: not noise, a different gradient
    assert o.reason.startswith(f"gradients: gradient of {f.name} differs at step 0: max abs ")


def test_detached_output_fails_update_naming_the_parameter(dropout_net):
    _, o = _one(dropout_net, Variant("detach", broken="detach_output", selector="blocks.1"))
    f = o.comparison.finding
    # everything before blocks.1's output: inp, blocks.0, blocks.1 (4 + 2 = 6 tensors)
    assert f.gate == "update" and f.step == 0 and f.name == "inp.weight"
    assert o.reason == ("update: inp.weight (and 5 more) has no gradient at step 0: the graph "
                        "was cut (detach, no_grad or a frozen branch)")
    # the gradients that remain (blocks.2, head) are bitwise the baseline's
    assert o.gates == {"inputs": True, "gradients": True, "update": False}


def test_perturbed_saved_activations_fail_gradients(dropout_net):
    _, o = _one(dropout_net, Variant("perturb", broken="perturb_saved", selector="blocks.2"))
    f = o.comparison.finding
    # the saved input of blocks.2.fc is 1e-3 off: its weight gradient (grad_out^T @ x) is
    # the worst, a few 1e-3 relative (dropout and ReLU masks are saved too, ×1.001 as well)
    assert (f.gate, f.step, f.name) == ("gradients", 0, "blocks.2.fc.weight")
    assert 1e-3 <= f.diff.max_rel < 1e-2
    assert o.gates == {"inputs": True, "gradients": False, "update": True}



# The same loop with its forward and backward inside `optimizer.step(closure)`, zeroing with
# set_to_none inside the closure, as Lightning's automatic optimization runs it
CLOSURE_STEP = """    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss
    opt.step(closure)
"""
PLAIN_STEP = """    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_step_that_runs_its_closure_is_captured_as_the_plain_loop(tmp_path):
    """Note [A capture's step that runs its closure] (verify/capture.py): read in the step's
    pre-hook, the closure loop's step 0 had no gradient (all 10 None) and its inputs went to
    step 1, so a perturbed saved activation was caught one step late by the update gate
    ("parameter ... differs after step 0"), and a one-step compare checked no gradient."""
    plain = _write(tmp_path, "plain.py", DROPOUT_NET.format(gen=SEEDED))
    body = DROPOUT_NET.format(gen=SEEDED).replace(PLAIN_STEP, CLOSURE_STEP)
    assert body != DROPOUT_NET.format(gen=SEEDED)
    closure = _write(tmp_path, "closure.py", body)
    a = capture_in_process(plain, [], Variant("none"), 2).data["steps"]
    b = capture_in_process(closure, [], Variant("none"), 2).data["steps"]
    for sa, sb in zip(a, b):     # the same data, gradients and update, step by step
        assert sb["inputs"] == sa["inputs"] and len(sb["inputs"]) == 2   # x, then y
        assert sorted(sb["grads"]) == sorted(sa["grads"]) and len(sb["grads"]) == 10
        for name, g in sa["grads"].items():
            assert torch.equal(sb["grads"][name], g), name
        for name, p in sa["params"].items():
            assert torch.equal(sb["params"][name], p), name
    _, o = _one(closure, Variant("perturb", broken="perturb_saved", selector="blocks.2"),
                steps=1)
    f = o.comparison.finding
    assert (f.gate, f.step, f.name) == ("gradients", 0, "blocks.2.fc.weight")
    assert o.gates == {"inputs": True, "gradients": False, "update": True}

def test_unseeded_data_fails_inputs_for_every_candidate(tmp_path):
    script = _write(tmp_path, "unseeded.py", DROPOUT_NET.format(gen=UNSEEDED))
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*"),
                                    Variant("offload:blocks.*", "offload:blocks.*")],
                       steps=2, runner=in_process)
    assert not report.reproducible
    assert report.note == ("the script's inputs are not reproducible: two baseline runs differ "
                           "at step 0 on forward arg[0]; seed the data loader")
    for o in report.outcomes:
        assert o.gates == {"inputs": False, "gradients": False, "update": False}
        assert o.reason == "inputs: " + report.note


def test_checkpointed_batchnorm_is_caught_on_buffers(tmp_path):
    script = _write(tmp_path, "bn_net.py", BN_NET)
    _, o = _one(script, Variant("plain", broken="checkpoint_plain", selector="blocks.*"))
    f = o.comparison.finding
    # the recompute in backward updates running stats a second time: gradients are equal
    # (training mode normalises with batch statistics), the buffers are not
    assert o.gates == {"inputs": True, "gradients": True, "update": False}
    assert f.gate == "update" and f.step == 0
    # num_batches_tracked is 2 instead of 1: rel difference 1.0, the worst buffer
    assert f.name == "blocks.0.1.num_batches_tracked"
    assert (f.diff.max_abs, f.diff.max_rel) == (1.0, 1.0)


@pytest.mark.parametrize("policy", ["checkpoint:blocks.*", "selective:blocks.*"])
def test_memledger_checkpoint_of_batchnorm_updates_stats_once(tmp_path, policy):
    # memledger's own checkpoint application (measure/apply.py, Note [BatchNorm under
    # recompute]) puts the running statistics back after the recompute: unlike plain torch
    # checkpoint (the broken candidate above), the real policy passes every gate.
    script = _write(tmp_path, "bn_net.py", BN_NET)
    _, o = _one(script, Variant(policy, policy))
    assert o.passed, o.reason
    _, o = _one(script, Variant("offload:blocks.*", "offload:blocks.*"))
    assert o.passed


FROZEN_NET = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential()
model.blocks = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1)
model.blocks[0].bias.requires_grad_(False)
model.blocks[0].bias.grad = torch.ones(4)    # stale; zero_grad zeroes it, weight decay moves it
gen = torch.Generator().manual_seed(1)
for step in range(3):
    loss = model(torch.randn(8, 4, generator=gen)).pow(2).mean()
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
"""


def test_frozen_parameter_that_changes_is_named(tmp_path):
    script = _write(tmp_path, "frozen.py", FROZEN_NET)
    report, o = _one(script, Variant("checkpoint:blocks.*", "checkpoint:blocks.*"))
    # the baseline changes it too: named in the report, not held against the policy
    assert report.frozen_changed == ["blocks.0.bias"]
    assert o.passed and o.comparison.frozen_changed == ["blocks.0.bias"]


def test_nondeterministic_baseline_widens_the_tolerance_to_its_noise_floor(tmp_path):
    # GIVEN seeded data but gradients with unseeded relative noise of ~1e-6 (as a GPU's
    # accumulation order would add): the two baseline runs agree on inputs, not on numbers
    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "    loss.backward()\n",
        "    loss.backward()\n"
        "    for p in model.parameters():\n"
        "        p.grad.mul_(1 + torch.randn(p.shape, generator=noise) * 1e-6)\n")
    body = body.replace("gen = torch.Generator", "noise = torch.Generator()\nnoise.seed()\n"
                        "gen = torch.Generator")
    script = _write(tmp_path, "noisy.py", body)
    report = run_gates(script, [], [
        Variant("checkpoint:blocks.*", "checkpoint:blocks.*"),
        Variant("perturb", broken="perturb_saved", selector="blocks.2")], steps=2,
        runner=in_process)
    # THEN each tensor at each step is compared within 10 × its own baseline difference
    floors = report.tolerance.floors
    assert report.reproducible and report.noise_floor == max(floors.values()) > 0
    assert "0:gradient:blocks.2.fc.weight" in floors and report.tolerance.rtol == 0.0
    assert report.note == (f"the baseline does not agree with itself ({len(floors)} tensors "
                           f"differ, up to rel {report.noise_floor:.2g}); each is compared "
                           "within 10 × its own baseline difference")
    ok, bad = report.outcomes
    assert ok.passed, ok.reason   # one more sample of the same noise
    # 1e-3 perturbation: far above the ~1e-5 noise of that weight's gradient
    assert floors["0:gradient:blocks.2.fc.weight"] < 1e-4
    assert (bad.comparison.finding.gate, bad.comparison.finding.name) == (
        "gradients", "blocks.2.fc.weight")



def test_a_value_computed_from_the_model_is_no_input(tmp_path):
    """Note [Which tensors are inputs]: Lightning's closure keeps `loss.detach().clone()`
    every step. Under gradients that differ between runs in the last bits (a GPU's atomics;
    here 1e-3 relative noise), step 2's loss differs too: the clone's argument counted as
    an input, the baseline "differed" there and the policy was rejected at the inputs gate
    ("input clone arg[0] differs at step 2"). The targets stay inputs."""
    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "    loss.backward()\n",
        "    logged = loss.detach().clone()\n"
        "    loss.backward()\n"
        "    for p in model.parameters():\n"
        "        p.grad.mul_(1 + torch.randn(p.shape, generator=noise) * 1e-3)\n")
    body = body.replace("gen = torch.Generator", "noise = torch.Generator()\nnoise.seed()\n"
                        "gen = torch.Generator")
    script = _write(tmp_path, "logged.py", body)
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                       steps=3, runner=in_process)
    assert report.reproducible and report.noise_floor > 0
    (o,) = report.outcomes
    assert o.passed and o.comparison.steps_compared == 3, o.reason
    steps = capture_in_process(script, [], Variant("none"), 3).data["steps"]
    assert [[label for label, _ in st["inputs"]] for st in steps] == \
        [["forward arg[0]", "cross_entropy arg[1]"]] * 3

def test_a_baseline_drawing_other_dropout_masks_each_run_judges_nothing(tmp_path):
    # GIVEN seeded data and weights, but dropout drawing from a generator seeded from the OS
    # after the model is built (as transformers' Reformer does with torch.seed() per layer)
    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "model = Net()\n", "model = Net()\ntorch.seed()\n")
    script = _write(tmp_path, "reseeded.py", body)
    report = run_gates(script, [], [
        Variant("checkpoint:blocks.*", "checkpoint:blocks.*"),
        Variant("perturb", broken="perturb_saved", selector="blocks.2")], steps=2,
        runner=in_process)
    # THEN ten times its own difference would let any candidate through (the 1e-3
    # perturbation passed): every candidate is rejected at the gradients gate, named why
    # (Note [A baseline drawn anew], tolerance.py)
    assert report.reproducible
    assert report.note.startswith("the baseline draws other random numbers in each run: its "
                                  "gradients differ at step 0 by a median rel ")
    assert report.note.endswith("more than rounding makes, so no policy can be judged; seed "
                                "torch's global generator (torch.manual_seed, and no "
                                "torch.seed() after it), which the script draws from unseeded")
    for o in report.outcomes:
        assert not o.passed and o.gates == {"inputs": True, "gradients": False,
                                            "update": True}
        assert o.reason == "gradients: " + report.note


def test_a_baseline_drawing_from_numpys_unseeded_generator_is_told_to_seed_it(tmp_path):
    """transformers' wav2vec2 family draws SpecAugment's masks from numpy's global
    generator; a script that seeds torch alone gets other masks in each run. The note names
    numpy's generator, not torch's, which the script seeded (Note [A baseline drawn anew])."""
    body = DROPOUT_NET.format(gen=SEEDED).replace(   # each block's mask drawn by numpy
        "        return self.drop(F.relu(self.fc(x)))\n",
        "        import numpy as np\n"
        "        keep = torch.from_numpy(np.random.rand(*x.shape) < 0.5).float()\n"
        "        return F.relu(self.fc(x)) * keep\n")
    script = _write(tmp_path, "specaugment.py", body)
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                       steps=2, runner=in_process)
    assert report.note.endswith("so no policy can be judged; seed numpy's global generator "
                                "(np.random.seed), which the script draws from unseeded"), \
        report.note


def test_a_sampler_drawing_from_numpys_unseeded_generator_is_told_to_seed_it(tmp_path):
    """pytorch-metric-learning's MPerClassSampler shuffles with numpy's global generator:
    the batches differ from run to run though the script seeded torch. The note said "seed
    the data loader" (its DataLoader has no generator to seed); it names numpy's now."""
    body = DROPOUT_NET.format(gen=SEEDED).replace(   # the batch's rows chosen by numpy
        "    x = torch.randn(32, 8, generator=gen)\n",
        "    import numpy as np\n"
        "    x = torch.randn(64, 8, generator=gen)[torch.from_numpy(np.random.permutation(64))[:32]]\n")
    script = _write(tmp_path, "sampler.py", body)
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                       steps=2, runner=in_process)
    assert report.note == ("the script's inputs are not reproducible: two baseline runs differ "
                           "at step 0 on forward arg[0]; seed numpy's global generator "
                           "(np.random.seed), which the script draws from unseeded"), report.note


def test_unknown_selector_is_bad_input_of_its_own_and_the_others_are_judged(dropout_net):
    """Note [One bad policy among several] (verify/compare.py): the bad selector's outcome
    is "not run" (bad input, exit 2 in compare after the rest), the other policy gated."""
    report = run_gates(dropout_net, [], [Variant("x", "checkpoint:nothing.*"),
                                         Variant("y", "checkpoint:blocks.0")], steps=1,
                       runner=in_process)
    bad, good = report.outcomes
    assert bad.bad_input and not bad.refused and not bad.passed
    assert bad.reason.startswith("not run: selector 'nothing.*' matches no module")
    assert good.passed and not good.bad_input


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_a_baseline_that_compiled_code_is_judged_within_rounding(tmp_path):
    """Note [Compiled code under the gates]: a policy inside torch.compile'd code changes the
    graph the compiler fuses, and the rounding with it; such a baseline is judged within
    CUDA_RTOL, and a real defect (other dropout masks) is still rejected."""
    from memledger.verify.gates import CUDA_RTOL

    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "model = Net()\n", "model = Net()\nmodel.blocks[1] = torch.compile(model.blocks[1], "
        "backend='aot_eager')\n")
    script = _write(tmp_path, "compiled_net.py", body)
    # one baseline for both candidates (each compiled run ~0.7 s of CPU; the suite's longest
    # test when it captured the baseline twice over): the outcomes are judged one by one
    report = run_gates(script, [], [
        Variant("offload:blocks.0", "offload:blocks.0"),
        Variant("no-rng", broken="checkpoint_no_rng", selector="blocks.0")],
        steps=2, runner=in_process)
    o, bad = report.outcomes
    assert report.tolerance.rtol == CUDA_RTOL and o.passed, o.reason
    assert not bad.passed and bad.comparison.finding.diff.max_rel > 0.5


def _streams_gates(tmp_path, seed: int):
    """`checkpoint:blocks.*` through the gates on a net whose `mix` parameter is a one-hot
    at `random.randrange(4)` (hyper-connections' initial residual stream), unseeded by the
    script, with Python's generator seeded `seed` in this process around the runs."""
    import random

    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "        self.head = nn.Linear(16, 4)\n",
        "        self.head = nn.Linear(16, 4)\n"
        "        import random\n"
        "        self.mix = nn.Parameter(torch.zeros(4))\n"
        "        self.mix.data[random.randrange(4)] = 1.0\n").replace(
        "        return self.head(x)\n", "        return self.head(x) * self.mix.sum()\n")
    script = _write(tmp_path, "streams.py", body)
    state = random.getstate()
    random.seed(seed)
    try:
        return run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                         steps=2, runner=in_process)
    finally:
        random.setstate(state)


def test_a_baseline_drawing_a_few_tensors_from_pythons_unseeded_generator_judges_nothing(
        tmp_path):
    """Note [A few tensors drawn anew] (tolerance.py): hyper-connections picks each layer's
    initial residual stream by Python's `randrange`; here one parameter's one-hot init
    (`mix`, its sum the only thing the forward reads, so every gradient is equal). The
    two baseline runs differed on `mix` alone (the median gradient difference 0), its
    floor widened, and the candidate, a third draw, passed or failed by luck (BS-RoFormer's
    `checkpoint:layers.*.*` was rejected at the update gate, rel 1.87). Now every candidate
    is rejected where the baseline differed, and the note says to seed `random`."""
    # in this process the two baseline runs draw other streams (1, then 0)
    report = _streams_gates(tmp_path, seed=1)
    assert report.note == (
        "the baseline draws other random numbers in each run: mix differs at step 0 "
        "(update), drawn from a global generator the script leaves unseeded, so no policy "
        "can be judged; seed random's global generator (random.seed), which the script "
        "draws from unseeded")
    (o,) = report.outcomes
    assert not o.passed and o.gates == {"inputs": True, "gradients": True, "update": False}
    assert o.reason == "update: " + report.note


def test_a_rejection_where_the_baseline_drew_alike_by_chance_names_the_unseeded_draw(
        tmp_path):
    """Note [A few tensors drawn anew] (tolerance.py), its other half: the two baseline runs
    draw the same stream by chance (3, 3) and the candidate another (0): the candidate is
    rejected at the update gate on `mix`, as before, and the note now says the script
    draws from `random` unseeded, so the rejection may be that draw."""
    # in this process: 3 and 3 for the baseline, 0 for the candidate
    report = _streams_gates(tmp_path, seed=0)
    (o,) = report.outcomes
    assert report.reproducible and report.noise_floor == 0.0
    assert not o.passed and o.gates == {"inputs": True, "gradients": True, "update": False}
    assert o.comparison.finding.name == "mix"
    assert report.note == (
        "the script draws from a global generator it leaves unseeded: the baseline's two "
        "runs drew alike, a candidate's run may draw otherwise, so a rejection here may be "
        "that draw and not the policy; seed random's global generator (random.seed), which "
        "the script draws from unseeded")


def test_a_part_of_the_model_called_on_its_own_is_read_as_the_model_is(tmp_path):
    """Note [A part of the model called on its own] (verify/capture.py): a loss module the
    model holds, called by the loop after `model(x)` (torch-struct's CRF as
    tests/clients/train_struct.py calls it). Under `checkpoint:crit` torch's checkpoint
    reads `x.device` of each argument inside the call, and the gates read those `__get__`s
    as the loss's inputs: "input cross_entropy arg[1] differs at step 0" though the
    gradients were bitwise equal. Its arguments are read after the call now, the targets
    only (the logits are the model's)."""
    body = DROPOUT_NET.format(gen=SEEDED)
    body = body.replace("        self.head = nn.Linear(16, 4)\n",
                        "        self.head = nn.Linear(16, 4)\n        self.crit = Crit()\n")
    body = body.replace("class Net(nn.Module):",
                        "class Crit(nn.Module):\n"
                        "    def forward(self, logits, y):\n"
                        "        return F.cross_entropy(logits, y)\n\n"
                        "class Net(nn.Module):")
    body = body.replace("loss = F.cross_entropy(model(x), y)", "loss = model.crit(model(x), y)")
    script = _write(tmp_path, "crit.py", body)
    report, o = _one(script, Variant("checkpoint:crit", "checkpoint:crit"))
    assert o.passed and o.gates == {"inputs": True, "gradients": True, "update": True}, o.reason
    steps = capture_in_process(script, [], Variant("none"), 2).data["steps"]
    assert [[label for label, _ in st["inputs"]] for st in steps] == \
        [["forward arg[0]", "part arg[1]"]] * 2


def test_a_seeded_baseline_that_took_other_code_in_each_run_is_told_so(tmp_path):
    """transfusion-pytorch picks a layout by the clock in each process, and the layouts
    draw the noise otherwise: a script seeded with torch.manual_seed drew other numbers
    in each run, and the note said to seed torch's generator "which the script draws from
    unseeded". Here the pick is made by a file the first run leaves (as a cache on disk
    would): the second run draws once more before its dropout masks. The note names the
    generator as seeded alike and drawn apart, and the cure (Note [Seeded alike, drawn
    apart], tolerance.py)."""
    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "    def forward(self, x):\n        x = self.inp(x)\n",
        "    def forward(self, x):\n"
        "        import pathlib\n"
        "        mark = pathlib.Path(__file__).with_suffix('.ran')\n"
        "        if not getattr(Net, 'chosen', False):\n"
        "            Net.chosen = True\n"
        "            if mark.exists():\n"
        "                torch.rand(1)\n"
        "            mark.touch()\n"
        "        x = self.inp(x)\n")
    script = _write(tmp_path, "picked.py", body)
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                       steps=2, runner=in_process)
    assert report.note.startswith("the baseline draws other random numbers in each run: its "
                                  "gradients differ at step 0"), report.note
    assert report.note.endswith(
        "so no policy can be judged; torch's global generator, seeded alike in both runs, "
        "drew other numbers in their first step: the runs took other code (a choice by the "
        "clock, as a library that times its alternatives and keeps the fastest, or by "
        "something else outside the script's seeds); fix that choice by its setting"), \
        report.note
    (o,) = report.outcomes
    assert not o.passed and o.gates["gradients"] is False


def test_a_candidate_that_began_from_other_weights_is_told_so(tmp_path):
    """Note [A run that began elsewhere] (verify/gates.py): the weights a script makes can
    differ between processes by their last bits (pykan fits its KAN's spline coefficients by
    `torch.linalg.lstsq` as it is made, and LAPACK's rounding follows the memory layout);
    the baseline's two runs agreed, the policy's run began elsewhere (there 7.5e-9 away;
    here 1e-3 in one weight, where a single ulp happened to move no gradient), and the
    rejection read as the policy's ("gradient of ... differs at step 0 ... (bitwise)")."""
    counter = tmp_path / "runs"
    body = DROPOUT_NET.format(gen=SEEDED).replace("model = Net()\n", f"""model = Net()
import pathlib
runs = pathlib.Path({str(counter)!r})
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
if n > 2:   # the candidate's run: a process whose init rounds otherwise
    with torch.no_grad():
        model.inp.weight[0, 0] += 1e-3
""")
    script = _write(tmp_path, "init_elsewhere.py", body)
    report, o = _one(script, Variant("checkpoint:blocks.*", "checkpoint:blocks.*"))
    assert report.reproducible and report.noise_floor == 0.0
    assert not o.passed and o.gates["gradients"] is False
    assert "; but this run began from other weights: `inp.weight` differed before the first " \
           "step, which no policy touches" in o.reason
    assert o.reason.endswith("compare within a tolerance (--rtol 1e-5) or load the initial "
                             "weights from a file")


def test_the_steps_compared_are_those_the_script_ran(dropout_net):
    """`compare --steps 8` on a script that runs 5 steps said "8 steps compared"."""
    report, o = _one(dropout_net, Variant("checkpoint:blocks.*", "checkpoint:blocks.*"), 8)
    assert report.steps == o.comparison.steps_compared == 5


# A block whose distance bias, scaled by a learned slope, is cached in a buffer on the call
# that finds it empty; the loop empties it before each forward (Note [A cache emptied
# before every call], memledger/replay/emptied_cache.py)
EMPTIED_CACHE_NET = """
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.slope = nn.Parameter(torch.ones(1))
        self.register_buffer("bias", None, persistent=False)
    def forward(self, x):
        if self.bias is None:
            self.register_buffer("bias", torch.arange(8.0) * self.slope, persistent=False)
        return self.fc(x) + self.bias

torch.manual_seed(0)
model = nn.Sequential(Block(), Block())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    for b in model:
        b.bias = None
    loss = model(torch.randn(4, 8)).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_rerun_torch_refuses_is_a_refusal_in_measures_words(tmp_path):
    """torch's checkpoint refuses the re-run (it finds the bias cached and saves fewer
    tensors): the gates said "the script failed under this policy: script raised
    CheckpointError" after the script's traceback; now the row is a refusal, in the line
    measure and predict say."""
    script = _write(tmp_path, "emptied_cache_net.py", EMPTIED_CACHE_NET)
    _, o = _one(script, Variant("checkpoint:*", "checkpoint:*"))
    assert o.refused and not o.passed
    # the words since the fifty-third session (Note [A state filled on the first call])
    assert o.failure.startswith("checkpoint:* would re-run 1, whose forward call filled an "
                                "empty buffer of 1, so the re-run would find it full"), o.failure


def test_unseeded_data_handed_inside_an_object_fails_inputs(tmp_path):
    """Note [Tensors handed inside an object] (memledger/trace/collector.py): the model takes
    its batch in an object (a `Box`, as pytorch-frame's models take a `TensorFrame`) whose
    features come from an unseeded generator, the targets from a seeded one. The inputs gate
    digested no tensor inside the object, only the targets the loss reads: it passed, and
    the gradients gate rejected every policy on the baseline's own noise. It reads the box's
    attributes now and names the unseeded feature."""
    body = DROPOUT_NET.format(gen=SEEDED).replace(
        "    def forward(self, x):\n        x = self.inp(x)\n",
        "    def forward(self, box):\n        x = self.inp(box.x)\n").replace(
        "    x = torch.randn(32, 8, generator=gen)\n",
        "    x = torch.randn(32, 8, generator=noisy)\n").replace(
        "model(x)", "model(Box(x))").replace(
        "torch.manual_seed(0)\n",
        "class Box:\n    def __init__(self, x):\n        self.x = x\n\n"
        "noisy = torch.Generator()\nnoisy.seed()\ntorch.manual_seed(0)\n")
    script = _write(tmp_path, "boxed.py", body)
    report = run_gates(script, [], [Variant("checkpoint:blocks.*", "checkpoint:blocks.*")],
                       steps=2, runner=in_process)
    assert report.note == ("the script's inputs are not reproducible: two baseline runs differ "
                           "at step 0 on forward arg[0].x; seed the data loader"), report.note
    assert report.outcomes[0].gates == {"inputs": False, "gradients": False, "update": False}
