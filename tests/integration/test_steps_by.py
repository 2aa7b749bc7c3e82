"""Scripts without optimizer.step(): steps counted by forward passes, or the whole script."""

from __future__ import annotations

import textwrap

import pytest

import torch

from memledger.cli import main
from memledger.ledger.model import Ledger
from memledger.trace.steps import StepCounter

EVAL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
model.eval()
with torch.no_grad():
    for i in range(4):                      # four evaluation batches, no optimizer anywhere
        out = model(torch.randn(16, 64))
        print("batch", i, float(out.sum()))
"""
# parameters: 64*32*4 + 32*4 + 32*8*4 + 8*4 = 8192 + 128 + 1024 + 32 = 9376 bytes


def _script(tmp_path, body: str):
    p = tmp_path / "eval.py"
    p.write_text(textwrap.dedent(body))
    return p


def test_count_steps_by_forward_in_process():
    # GIVEN three root forwards (each with nested submodule forwards) WHEN counted by forward
    # THEN steps end at the 2nd and 3rd forward and the script's end closes the third
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    ticks = []
    counter = StepCounter("forward", lambda: ticks.append(len(ticks) + 1))
    for _ in range(3):
        model(torch.randn(2, 4))
    assert ticks == [1, 2]
    counter.script_ended()
    assert ticks == [1, 2, 3]
    model(torch.randn(2, 4))                  # hooks removed: nothing more counted
    assert ticks == [1, 2, 3]
    whole = StepCounter("whole", lambda: ticks.append("end"))
    model(torch.randn(2, 4))
    whole.script_ended()
    assert ticks[-1] == "end"


def test_evaluation_script_traced_by_forward(tmp_path, capsys):
    out = tmp_path / "eval.ledger"
    assert main(["trace", str(_script(tmp_path, EVAL)), "--steps-by", "forward", "--steps", "2",
                 "-o", str(out)]) == 0
    led = Ledger.load(out)
    assert led.steps_traced == 2 and led.header["steps_by"] == "forward"
    assert led.at_peak()["parameter"] == 9376          # see the arithmetic beside EVAL
    assert led.measured is not None                    # the allocator pass counted alike


def test_whole_script_is_one_step(tmp_path):
    out = tmp_path / "whole.ledger"
    assert main(["trace", str(_script(tmp_path, EVAL)), "--steps-by", "whole", "--no-measure",
                 "-o", str(out)]) == 0
    led = Ledger.load(out)
    assert led.steps_traced == 1 and led.complete
    assert int(led.steps["ev"].iloc[0]) == led.n_events - 1   # the step ends with the script


def test_refusal_names_the_way_out(tmp_path, capfd):
    assert main(["trace", str(_script(tmp_path, EVAL)), "--no-measure",
                 "-o", str(tmp_path / "n.ledger")]) == 2
    assert "--steps-by forward" in capfd.readouterr().err


CUSTOM_UPDATE = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
                              for _ in range(3)], torch.nn.Linear(64, 1))
for i in range(5):                         # a hand-written update: no optimizer anywhere
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
"""


def test_measure_counts_steps_as_trace_did(tmp_path, capsys):
    """`measure --steps-by forward|whole` (it had no such option: a loop without
    optimizer.step() could be traced and predicted, not measured). A checkpointed block's
    re-run inside backward is no new forward (Note [A forward inside backward is no new
    step], trace/steps.py): it ended the step mid-backward, the first step's measured peak
    106,704 B against the 126,608 B predicted."""
    import json

    script = tmp_path / "custom.py"
    script.write_text(textwrap.dedent(CUSTOM_UPDATE))
    ledger = tmp_path / "custom.ledger"
    assert main(["trace", str(script), "--steps-by", "forward", "--steps", "1", "--no-timing",
                 "--no-measure", "-o", str(ledger)]) == 0
    capsys.readouterr()
    assert main(["predict", str(ledger), "-p", "checkpoint:[0-2]", "--json"]) == 0
    predicted = json.loads(capsys.readouterr().out)["policies"][0]["peak_bytes"]
    assert main(["measure", str(script), "--steps-by", "forward", "--steps", "1",
                 "--time-steps", "1", "-p", "checkpoint:[0-2]", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["peak_bytes"] == predicted == 126_608 and len(got["step_times_s"]) == 1
    # the whole script is the one step, profiled and timed
    assert main(["measure", str(script), "--steps-by", "whole", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["steps"] == 1 and len(whole["step_times_s"]) == 1
    assert whole["peak_bytes"] == 116_760   # the baseline's peak: every step alike
    assert main(["measure", str(script), "--steps-by", "forward", "--nproc", "2"]) == 2
    assert "--steps-by does not apply with --nproc" in capsys.readouterr().err


OWN_CHECKPOINT = CUSTOM_UPDATE.replace(
    "model = torch.nn.Sequential(*[", "from torch.utils.checkpoint import checkpoint\n"
    "class Ckpt(torch.nn.Sequential):\n"
    "    def forward(self, x):\n"
    "        for b in self[:-1]:\n"
    "            x = checkpoint(b, x, use_reentrant=False)\n"
    "        return self[-1](x)\n"
    "model = Ckpt(*[")


def test_a_scripts_own_checkpoint_ends_no_step_in_the_allocator_pass(tmp_path):
    """The allocator pass counts `--steps-by forward` steps with the same StepCounter:
    the script's own checkpointed blocks, re-run inside backward, ended its first step
    there, and its peak read 104.2 KiB against the ledger's 126,608 B (Note [A forward
    inside backward is no new step])."""
    script = tmp_path / "own.py"
    script.write_text(textwrap.dedent(OWN_CHECKPOINT))
    out = tmp_path / "own.ledger"
    assert main(["trace", str(script), "--steps-by", "forward", "--steps", "1", "--no-timing",
                 "-o", str(out)]) == 0
    led = Ledger.load(out)
    assert led.peak().bytes == led.measured["peak_bytes"] == 126_608


class _Recurrent(torch.nn.Module):
    """A model generated from through a method of its own (as mambapy's `LM.step`): the
    model itself is never called; its method calls three parts per token."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.cell = torch.nn.Linear(16, 8)
        self.head = torch.nn.Linear(8, 10)

    def step(self, token, h):
        h = torch.tanh(self.cell(torch.cat([self.embed(token), h], -1)))
        return self.head(h), h


def _generate(model, tokens: int) -> None:
    h, token = torch.zeros(1, 8), torch.tensor([1])
    with torch.no_grad():
        for _ in range(tokens):
            logits, h = model.step(token, h)
            token = logits.argmax(-1)


def test_a_model_run_through_its_method_is_a_forward_per_call():
    """Note [A forward through the model's methods] (trace/steps.py): each of `step`'s
    three top-level part calls began a forward, in both passes: 4 tokens ticked 11 steps
    (12 with the script's end), now 3 (4). The ledger pass with 2 steps ended after the
    first token's `embed` and `cell` (steps ending at events 3 and 6, 7 events), now
    after the second token's `head` (events 9 and 17, 18 events)."""
    ticks = []
    counter = StepCounter("forward", lambda: ticks.append(len(ticks) + 1))
    _generate(_Recurrent(), 4)
    counter.script_ended()
    assert ticks == [1, 2, 3, 4]

    import memledger

    model = _Recurrent()
    with memledger.trace(steps_by="forward", max_steps=2) as led:
        _generate(model, 4)
    assert led.steps["ev"].tolist() == [9, 17] and led.n_events == 18
    assert led.scopes["mod"].tolist() == ["embed", "cell", "head"] * 2


def _captured(tmp_path, variants, steps=2):
    """The gates on CUSTOM_UPDATE, counted by forward, in this process."""
    from memledger.verify.gates import run_gates
    from memledger.verify.runs import capture_in_process

    script = tmp_path / "custom.py"
    script.write_text(textwrap.dedent(CUSTOM_UPDATE))
    return script, run_gates(script, [], variants, steps=steps, runner=lambda s, a, v, n, out:
                             capture_in_process(s, a, v, n, steps_by="forward"))


def test_the_gates_read_a_hand_written_updates_gradients_as_backward_returns(tmp_path):
    """Note [A capture without an optimizer] (verify/capture.py): `compare --steps-by
    forward` gates a loop with no optimizer. The gradients are read as each backward
    returns, before the update uses and frees them (`p.grad = None`): they are the ones
    this test computes itself, and the parameters each step leaves are the update's."""
    from memledger.verify.runs import BASELINE, Variant, capture_in_process

    script, rep = _captured(tmp_path, [
        Variant("checkpoint:[0-2]", "checkpoint:[0-2]"),
        Variant("perturbed", broken="perturb_saved", selector="1")])
    assert rep.reproducible and rep.noise_floor == 0.0
    ok, bad = rep.outcomes
    assert ok.passed and ok.comparison.steps_compared == 2
    assert ok.comparison.worst_gradient.max_abs == 0.0
    # the second block's saved activations x(1 + 1e-3): its Linear's weight gradient (the
    # saved input times the output's gradient) is the first to differ
    f = bad.comparison.finding
    assert (f.gate, f.step, f.name) == ("gradients", 0, "1.0.weight")

    cap = capture_in_process(script, [], BASELINE, 2, steps_by="forward").data
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh())
                                  for _ in range(3)], torch.nn.Linear(64, 1))
    model(torch.randn(32, 64)).pow(2).mean().backward()
    step0 = cap["steps"][0]
    names = [n for n, _ in model.named_parameters()]
    assert sorted(step0["grads"]) == sorted(names) and len(names) == 8
    for n, p in model.named_parameters():
        assert torch.equal(step0["grads"][n], p.grad), n
        assert torch.equal(step0["params"][n], p.detach() - 0.01 * p.grad), n
    assert cap["meta"]["steps_by"] == "forward" and len(cap["steps"]) == 2


@pytest.mark.slow
def test_compare_by_forward_from_the_command_line(tmp_path, capsys):
    import json

    script = tmp_path / "custom.py"
    script.write_text(textwrap.dedent(CUSTOM_UPDATE))
    assert main(["compare", str(script), "--steps-by", "forward", "-p", "checkpoint:[0-2]",
                 "--steps", "2", "--no-performance", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["steps_by"] == "forward" and rep["policies"][0]["verdict"] == "OK"
    assert rep["policies"][0]["steps_compared"] == 2
    assert not rep["note"]   # the doctor ran on the steps counted by forward: no findings
    # without it: refused in one line that names the way out (exit 2)
    assert main(["compare", str(script), "-p", "checkpoint:[0-2]", "--steps", "2",
                 "--no-performance", "--no-doctor"]) == 2
    assert "--steps-by forward" in capsys.readouterr().err
    assert main(["compare", str(script), "--steps-by", "forward", "--nproc", "2",
                 "-p", "checkpoint:[0-2]"]) == 2
    assert "--steps-by does not apply with --nproc" in capsys.readouterr().err


def test_the_next_batch_at_the_last_steps_end_is_input():
    """Note [The next batch, at a step's end] (trace/collector.py): a step counted by forward
    passes ends at the next forward, after the loop made the next batch; the last traced
    step's end stopped the loop before that forward marked it, and "resident at the end"
    read the (8, 16) fp32 batch, 512 B, `temporary`."""
    import memledger

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    model(torch.randn(8, 16)).sum().backward()      # warm: lazy imports outside the block
    model.zero_grad()
    with memledger.trace(max_steps=2, steps_by="forward") as led:
        for _ in range(3):
            x = torch.randn(8, 16)
            model(x).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
    assert led.steps_traced == 2
    resident = led.resident_at_end()
    assert resident["input"] == 8 * 16 * 4
    assert resident["temporary"] == 0


class _Normed(torch.nn.Module):
    """A weight-normed layer whose constructor reads (and initializes) its weight, as
    pytorch-tcn's `TemporalBlock.init_weights` does."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 4))
        torch.nn.init.xavier_uniform_(self.fc.weight)   # a read of the parametrized weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_parametrized_weights_read_begins_no_forward():
    """Note [A parametrized weight read is no forward] (trace/steps.py): each model built
    called its `ParametrizationList` at depth 0, so three models built and two forwards of
    one ticked 4 steps before the script's end (5 with it) by StepCounter, and the
    collector's pass stopped at 2 steps before the first forward ran (its peak in a weight
    read); now 1 (2), and the traced steps are the two forwards."""
    import memledger

    ticks = []
    counter = StepCounter("forward", lambda: ticks.append(len(ticks) + 1))
    models = [_Normed() for _ in range(3)]
    for _ in range(2):
        models[0](torch.randn(2, 4))
    counter.script_ended()
    assert ticks == [1, 2]

    with memledger.trace(steps_by="forward", max_steps=2) as led:
        models = [_Normed() for _ in range(3)]
        for _ in range(2):
            models[0](torch.randn(2, 4))
    peak = led.summary().peak
    assert led.steps["step"].tolist() == [1, 2]
    assert (peak.step, peak.phase, peak.module) == (1, "forward", "fc")


def test_a_weight_read_between_steps_leaves_the_next_batch_input():
    """The collector took a top-level weight read (`w = model.fc.weight`, logging the
    weight-normed layer's effective weight after `step()`) for a root forward: the phase
    went to "forward", then "loss" when the read returned, and the next batch, made in
    that "loss", was filed `activation` (the Linear saves it) where the same loop without
    the read files it `input`; "other" vanished from the phases. Now the read is no
    forward (Note [A parametrized weight read is no forward], trace/steps.py): the batch
    made after it is `input`, made in "other"."""
    import memledger

    with memledger.trace(max_steps=2) as led:
        model = _Normed()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(3):
            x = torch.randn(32, 4)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            w = model.fc.weight        # noqa: F841 (logged)
    batches = led.storages[led.storages.op == "randn.default"]
    assert batches.category.tolist() == ["input", "input"]
    assert batches.phase.tolist() == ["setup", "other"]
    assert "other" in led.summary().by_phase_peak
