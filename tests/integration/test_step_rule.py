"""One training step, one rule: several optimizers stepping after one backward are ONE step
in the ledger pass, the allocator pass, `measure` and `compare`'s capture (trace/steps.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

import memledger
from memledger.measure.runner import measure_script
from memledger.replay.policies import parse_policy
from memledger.trace.steps import OptimizerSteps
from memledger.verify.runs import Variant, capture_in_process

TWO_OPTIMIZERS = """
import pathlib, torch
torch.manual_seed(0)
body, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
model = torch.nn.Sequential(body, head)
opts = [torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
for it in range(1, 6):
    pathlib.Path(f"ITER{it}").touch()
    loss = model(torch.randn(4, 8)).sum()
    for o in opts:
        o.zero_grad()
    loss.backward()
    for o in opts:        # a backbone and a head optimizer after one backward: one step
        o.step()
"""


def _two_optimizers():
    torch.manual_seed(0)
    body, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    model = torch.nn.Sequential(body, head)
    return model, [torch.optim.SGD(body.parameters(), lr=0.1),
                   torch.optim.SGD(head.parameters(), lr=0.1)]


def _iteration(model, opts, extra_loss=None) -> None:
    loss = model(torch.randn(4, 8)).sum() + (extra_loss() if extra_loss else 0)
    for o in opts:
        o.zero_grad()
    loss.backward()
    for o in opts:
        o.step()


def test_first_iteration_with_two_optimizers_is_one_step():
    # GIVEN body under o1, head under o2, never stepped before
    # WHEN the first iteration steps o1 then o2
    # THEN one step ends, after o2 (the root `model` ran forward: its 4 parameters count)
    model, opts = _two_optimizers()
    ends = []
    steps = OptimizerSteps(lambda: ends.append(len(ends) + 1))
    try:
        _iteration(model, opts)
        assert ends == [1]
        assert steps.boundary.discovering is False and steps._watching is False  # hook gone
        _iteration(model, opts)
        assert ends == [1, 2]
    finally:
        steps.remove()


def test_step_ends_after_the_second_optimizer_not_the_first():
    model, opts = _two_optimizers()
    seen = []
    steps = OptimizerSteps()
    # the caller's own hooks feed pre/post, as Capture does
    pre = register_optimizer_step_pre_hook(
        lambda o, a, k: seen.append(("pre", opts.index(o), steps.pre(o))))
    post = register_optimizer_step_post_hook(
        lambda o, a, k: seen.append(("post", opts.index(o), steps.post(o))))
    try:
        _iteration(model, opts)
    finally:
        pre.remove(), post.remove(), steps.remove()
    assert seen == [("pre", 0, False), ("post", 0, False), ("pre", 1, False), ("post", 1, True)]


def test_a_bare_parameter_first_iteration_is_the_documented_limit():
    # GIVEN o2 over a bare tensor that belongs to no module (the case the docstring names)
    # THEN the first iteration ends at o1 (o2 unknown yet), and the count per iteration holds
    model = torch.nn.Linear(8, 4)
    w = torch.nn.Parameter(torch.ones(3))
    opts = [torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD([w], lr=0.1)]
    ends = []
    steps = OptimizerSteps(lambda: ends.append(1))
    try:
        for _ in range(3):
            loss = model(torch.randn(2, 8)).sum() + (w * w).sum()
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
    finally:
        steps.remove()
    assert len(ends) == 3        # one end per iteration, each after o1


def test_api_traces_two_iterations_as_two_steps():
    model, opts = _two_optimizers()
    _iteration(model, opts)      # warm: lazy imports outside the block
    model, opts = _two_optimizers()
    with memledger.trace() as led:
        for _ in range(2):
            _iteration(model, opts)
    assert led.steps_traced == 2     # 4 step() calls, 2 training steps


@pytest.fixture
def two_opt_script(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "train_two.py"
    p.write_text(textwrap.dedent(TWO_OPTIMIZERS))
    return p


def test_measure_counts_two_optimizers_as_one_step(two_opt_script, tmp_path):
    # 1 step for the peak + 1 timed = 2 training steps = 2 iterations (4 step() calls);
    # counting every step() call stopped after iteration 1 and timed o2's step alone
    res = measure_script(two_opt_script, [], parse_policy("none"), steps=1, time_steps=1)
    assert len(res.step_times_s) == 1
    assert (tmp_path / "ITER2").exists() and not (tmp_path / "ITER3").exists()


def test_compare_capture_counts_two_optimizers_as_one_step(two_opt_script, tmp_path):
    res = capture_in_process(two_opt_script, [], Variant(label="baseline", policy="none"), steps=2)
    steps = res.data["steps"]
    assert len(steps) == 2
    assert (tmp_path / "ITER2").exists() and not (tmp_path / "ITER3").exists()
    # each step holds both optimizers' gradients and moves all 4 parameters
    assert sorted(steps[0]["grads"]) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    assert steps[0]["unmoved"] == []


def test_a_trainable_parameter_no_optimizer_steps_holds_only_the_first_step_open():
    # GIVEN a head optimizer only, the body trainable too (its gradients never stepped)
    torch.manual_seed(0)
    body, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    model = torch.nn.Sequential(body, head)
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    ends = []
    steps = OptimizerSteps(lambda: ends.append(1))
    _iteration(model, [opt])
    assert ends == []             # the body's 2 parameters are still pending
    model(torch.randn(4, 8))      # the root's next forward ends step 1 (as in the collector)
    assert ends == [1]
    _iteration(model, [opt])      # from then on opt alone counts: one step per iteration
    assert ends == [1, 1]
    _iteration(model, [opt])
    assert ends == [1, 1, 1]
    steps.remove()
    # WHEN the script ends inside that first open step THEN it is a step (trace agrees)
    ends.clear()
    steps = OptimizerSteps(lambda: ends.append(1))
    _iteration(model, [opt])
    steps.script_ended()
    assert ends == [1]
    with memledger.trace() as led:
        _iteration(model, [opt])
    assert led.steps_traced == 1


def test_a_gan_loop_ends_its_steps_where_every_worker_does():
    """A GAN: the discriminator steps on its own loss, then the generator steps, and the
    generator's loss gave the discriminator gradients too, so from the second step on a
    step runs from the generator's step() to the discriminator's next one. The collector
    (ledger pass) and OptimizerSteps (allocator pass, measure) must end every step at the
    same point: when the collector also ended one at the generator's next forward, the two
    passes covered different events and `show` found 99,348 B (20 %) unexplained."""
    from memledger.ledger.writer import MemorySink
    from memledger.trace.collector import Collector

    torch.manual_seed(0)
    gen, disc = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
    og, od = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (gen, disc))
    ends, seen = [], []
    counted = OptimizerSteps(lambda: ends.append(1))
    with Collector(MemorySink()) as c:
        for _ in range(4):
            fake = gen(torch.randn(2, 4))
            seen.append((c.steps_done, len(ends)))                # after G's forward
            od.zero_grad()
            (disc(torch.randn(2, 8)).mean() - disc(fake.detach()).mean()).backward()
            od.step()
            seen.append((c.steps_done, len(ends)))                # after D's step
            og.zero_grad()
            disc(fake).mean().backward()
            og.step()
            seen.append((c.steps_done, len(ends)))                # after G's step
    counted.remove()
    assert [a for a, _ in seen] == [b for _, b in seen], seen
    # step 1 is D's first step (only D had gradients); then one step per iteration
    assert [a for a, _ in seen] == [0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4]


# torchtune's `optimizer_in_bwd`: one optimizer per parameter, stepped (and zeroed) by a
# post-accumulate-grad hook inside backward
OPTIMIZERS_IN_BACKWARD_MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
opts = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}
def step(p):
    opts[p].step()
    opts[p].zero_grad()
for p in model.parameters():
    p.register_post_accumulate_grad_hook(step)
"""


def _optimizer_in_backward():
    """The model of OPTIMIZERS_IN_BACKWARD_MODEL, its optimizers hooked to its parameters."""
    names: dict = {}
    exec(OPTIMIZERS_IN_BACKWARD_MODEL, names)
    return names["model"]


def test_optimizers_stepped_inside_backward_end_one_step_at_the_next_forward():
    """Note [An optimizer stepped inside backward] (trace/steps.py): 4 parameters, 4
    optimizers stepped inside each backward. Each update ended a step (4 per iteration)
    and the last inside backward; now one step per iteration, ended outside backward at
    the next forward (the last by the script's end)."""
    model = _optimizer_in_backward()
    ends = []
    steps = OptimizerSteps(lambda: ends.append(torch._C._current_graph_task_id()))
    try:
        for it in range(3):
            model(torch.randn(2, 8)).sum().backward()
            assert len(ends) == it      # the iteration's step is still open
        steps.script_ended()
    finally:
        steps.remove()
    assert ends == [-1, -1, -1]


def test_api_traces_optimizers_stepped_inside_backward_as_one_step_each():
    model = _optimizer_in_backward()
    model(torch.randn(2, 8)).sum().backward()     # warm: lazy imports outside the block
    model = _optimizer_in_backward()
    with memledger.trace() as led:
        for _ in range(2):
            model(torch.randn(2, 8)).sum().backward()
    assert led.steps_traced == 2     # 8 step() calls inside 2 backward passes


OPTIMIZER_IN_BACKWARD = OPTIMIZERS_IN_BACKWARD_MODEL + """
for it in range(3):
    model(torch.randn(4, 8)).pow(2).mean().backward()
"""


def test_compare_capture_reads_optimizers_stepped_inside_backward(tmp_path):
    """Note [A step read inside backward] (verify/capture.py): leaving the loss-input mode
    in the first optimizer's pre-hook, inside backward, raised "trying to pop from empty
    mode stack"; now 2 steps, each with all 4 gradients and 4 parameters moved."""
    script = tmp_path / "train_in_bwd.py"
    script.write_text(textwrap.dedent(OPTIMIZER_IN_BACKWARD))
    res = capture_in_process(script, [], Variant(label="baseline", policy="none"), steps=2)
    steps = res.data["steps"]
    assert len(steps) == 2
    assert all(len(s["grads"]) == 4 and all(g is not None for g in s["grads"].values())
               for s in steps)


def test_a_re_run_inside_backward_after_an_optimizer_stepped_there_ends_no_step():
    """Two top-level modules, each run under the script's checkpoint, their parameters
    stepped inside backward: `b`'s optimizers left the collector's phase "other", and
    `a`'s re-run there (a top-level call) ended the step in the middle of backward: 4
    steps for 2 iterations. A call inside backward never ends one (collector.py)."""
    from torch.utils.checkpoint import checkpoint

    def build():
        torch.manual_seed(0)
        a, b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
        opts = {p: torch.optim.SGD([p], lr=0.1) for m in (a, b) for p in m.parameters()}

        def step(p):
            opts[p].step()
            opts[p].zero_grad()

        for p in [*a.parameters(), *b.parameters()]:
            p.register_post_accumulate_grad_hook(step)
        return a, b

    def iteration(a, b):
        h = checkpoint(a, torch.randn(2, 8), use_reentrant=False)
        checkpoint(b, h, use_reentrant=False).sum().backward()

    iteration(*build())      # warm: lazy imports outside the block
    a, b = build()
    with memledger.trace() as led:
        for _ in range(2):
            iteration(a, b)
    assert led.steps_traced == 2


# optimi's gradient release: ONE optimizer, stepped per parameter (`opt.step(param=p)`) by
# a post-accumulate-grad hook inside backward
ONE_OPTIMIZER_IN_BACKWARD_MODEL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
class PerParam(torch.optim.SGD):
    def step(self, closure=None, param=None):
        if param is None:
            return super().step(closure)
        with torch.no_grad():
            param.add_(param.grad, alpha=-0.1)
opt = PerParam(model.parameters(), lr=0.1)
def release(p):
    opt.step(param=p)
    p.grad = None
for p in model.parameters():
    p.register_post_accumulate_grad_hook(release)
"""


@pytest.mark.parametrize("framework_step", [False, True])
def test_one_optimizer_stepped_per_parameter_inside_backward_ends_one_step(framework_step):
    """Note [One optimizer stepped per parameter inside backward] (trace/steps.py): the
    same optimizer's second `step(param=p)` inside one backward was taken for the next
    iteration and ended the step there: 3 of the 4 updates of each backward ended a step,
    inside backward (graph task ids, not -1). With `opt.step(); opt.zero_grad()` after the
    backward too (a framework's no-op), that step's pre and post hooks ended two more. Now
    one step per iteration, ended outside backward at the next forward."""
    names: dict = {}
    exec(ONE_OPTIMIZER_IN_BACKWARD_MODEL, names)
    model, opt = names["model"], names["opt"]
    ends = []
    steps = OptimizerSteps(lambda: ends.append(torch._C._current_graph_task_id()))
    try:
        for it in range(3):
            model(torch.randn(2, 8)).sum().backward()
            if framework_step:
                opt.step()
                opt.zero_grad()
            assert len(ends) == it      # the iteration's step is still open
        steps.script_ended()
    finally:
        steps.remove()
    assert ends == [-1, -1, -1]


def test_an_update_inside_backward_is_the_optimizers_phase_and_saves_read_before_it():
    """Note [An update inside backward is the optimizer's] (trace/collector.py) and Note [A
    backward pass resumed after an update] (ledger/model.py): each `opt.step(param=p)`
    inside backward switched back to "backward" at its first op, as a new backward pass,
    so the update's ops read as backward's (no "optimizer" in the phase peaks) and the
    activations "saved for backward" were read after the last update: 0 B. Now the same
    (8, 64) fp32 ReLU output, 2,048 B, as when the step runs after backward, and the
    update's `mul` (the (16, 64) step, 4,096 B) is made in the optimizer phase."""
    import memledger

    def build(release: bool):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 16))

        class PerParam(torch.optim.SGD):
            def step(self, closure=None, param=None):
                with torch.no_grad():
                    for p in [param] if param is not None else \
                            [p for p in model.parameters() if p.grad is not None]:
                        p.sub_(p.grad * 0.1)

        opt = PerParam(model.parameters(), lr=0.1)
        if release:
            def hook(p):
                opt.step(param=p)
                p.grad = None
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(hook)
        return model, opt

    def loop(model, opt, release):
        for _ in range(2):
            model(torch.randn(8, 64)).sum().backward()
            if not release:
                opt.step()
                opt.zero_grad()

    got = {}
    for release in (False, True):
        loop(*build(release), release)   # warm: lazy imports outside the block
        model, opt = build(release)
        with memledger.trace() as led:
            loop(model, opt, release)
        assert led.steps_traced == 2
        ev, saved = led.saved_before_backward()
        st = led.storages
        got[release] = (int(saved["bytes"].sum()),
                        set(st[(st.op == "mul.Tensor") & (st.bytes == 64 * 64 * 4)].phase))
    assert got == {False: (8 * 64 * 4, {"optimizer"}), True: (8 * 64 * 4, {"optimizer"})}


def test_compare_capture_reads_every_gradient_of_one_optimizer_stepped_per_parameter(
        tmp_path):
    """Note [One optimizer read once per parameter] (verify/capture.py): optimi's gradient
    release, one optimizer stepped per parameter inside backward. Each pre-hook read all 4
    of its parameters' gradients and the last one's read left 3 of them None: the gradients
    gate compared 1 gradient a step. Now 2 steps, each with all 4 gradients, equal to
    those a plain backward of the same batch computes."""
    script = tmp_path / "train_release.py"
    script.write_text(textwrap.dedent(ONE_OPTIMIZER_IN_BACKWARD_MODEL + """
for it in range(3):
    model(torch.randn(4, 8)).pow(2).mean().backward()
"""))
    res = capture_in_process(script, [], Variant(label="baseline", policy="none"), steps=2)
    steps = res.data["steps"]
    assert len(steps) == 2
    assert [sum(g is not None for g in s["grads"].values()) for s in steps] == [4, 4]
    names: dict = {}
    exec(textwrap.dedent(ONE_OPTIMIZER_IN_BACKWARD_MODEL.replace(
        "p.register_post_accumulate_grad_hook(release)", "pass")), names)
    model = names["model"]
    model(torch.randn(4, 8)).pow(2).mean().backward()
    assert sorted(steps[0]["grads"]) == sorted(n for n, _ in model.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(steps[0]["grads"][name], p.grad), name
