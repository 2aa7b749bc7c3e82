"""`memledger doctor --steps-by forward|whole`: the training mechanics of loops without
`optimizer.step()` (evaluation, inference, a hand-written update), Note [A doctor without
an optimizer] (memledger/trace/doctor_probe.py). Each script below is one a user writes;
the doctor must find the bug planted in the bad ones and nothing in the good ones."""

from __future__ import annotations

import json
import textwrap

import pytest

from memledger.cli import main
from memledger.doctor.run import diagnose_in_process
from memledger.ledger.model import Ledger

HEAD = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
"""
# an evaluation loop that sums the losses with their graphs: the classic validation leak
EVAL_SUMS_GRAPHS = HEAD + """
model.eval()
total = 0
for i in range(4):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    total = total + loss
"""
EVAL_OK = HEAD + """
model.eval()
total = 0.0
with torch.no_grad():
    for i in range(4):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        total += torch.nn.functional.cross_entropy(model(x), y).item()
"""
INFER_UNDER_GRAD = HEAD + """
model.eval()
preds = []
for i in range(4):
    preds.append(model(torch.randn(8, 16)).argmax(-1))
"""
SGD_BY_HAND = HEAD + """
for i in range(4):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
"""
SGD_KEEPS_LOSSES = SGD_BY_HAND.replace("            p.grad = None\n",
                                       "            p.grad = None\n    losses.append(loss)\n"
                                       ).replace("for i in range(4):", "losses = []\nfor i in "
                                                 "range(4):", 1)


def _doctor(tmp_path, body: str, steps_by: str = "forward", steps: int = 3):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(body))
    report, outcome = diagnose_in_process(script, [], steps, steps_by=steps_by)
    assert outcome.code == 0, outcome.reason
    return report


@pytest.mark.parametrize("body", [EVAL_OK, SGD_BY_HAND], ids=["eval", "sgd"])
def test_correct_loops_without_an_optimizer_have_no_findings(tmp_path, body):
    """Before: "the script ran no optimizer step; the doctor checks loops that step a
    torch.optim optimizer" (exit 2) on every such loop."""
    rep = _doctor(tmp_path, body)
    assert rep.ok and rep.findings == []
    assert (rep.steps, rep.optimizer_steps, rep.steps_by) == (3, 0, "forward")
    assert rep.steps_text() == "3 steps (by forward)"


def test_an_evaluation_loop_summing_graphs_is_an_error(tmp_path):
    """`total = total + loss` without no_grad: each batch's graph stays reachable from
    `total`, 10 nodes more every step (two Linears, a ReLU, the loss, the add...)."""
    rep = _doctor(tmp_path, EVAL_SUMS_GRAPHS)
    (f,) = rep.findings
    assert (f.check, f.severity, f.where.line) == ("cross_step_retention", "error", 11)
    assert f.message.startswith("`total` carries autograd history across steps (counted by "
                                "forward) (at the end of steps 2 and 3: 1 tensor, 4 B")
    assert f.evidence["bytes_per_step"] == [4, 4]
    nodes = f.evidence["nodes_per_step"]
    assert nodes[1] > nodes[0]


def test_a_hand_written_update_keeping_its_losses_is_an_error(tmp_path):
    rep = _doctor(tmp_path, SGD_KEEPS_LOSSES)
    (f,) = rep.findings
    assert (f.check, f.severity) == ("cross_step_retention", "error")
    assert "`losses` carries autograd history across steps (counted by forward)" in f.message
    assert f.evidence["tensors_per_step"] == [1, 2] and f.evidence["bytes_per_step"] == [4, 8]


def test_inference_under_gradients_is_a_warning_by_forward_and_whole(tmp_path):
    by_forward = _doctor(tmp_path, INFER_UNDER_GRAD)
    (f,) = by_forward.findings
    assert (f.check, f.severity, f.where.line) == ("unused_graph", "warning", 9)
    assert f.evidence["calls"] == 3 and f.evidence["steps"] == [1, 2, 3]
    whole = _doctor(tmp_path, INFER_UNDER_GRAD, steps_by="whole")
    (g,) = whole.findings
    assert g.check == "unused_graph" and g.evidence["calls"] == 4 and g.evidence["steps"] == [1]
    assert whole.steps_text() == "1 step (by whole)"


def test_the_command_line_takes_steps_by(tmp_path, capsys):
    script = tmp_path / "infer.py"
    script.write_text(textwrap.dedent(INFER_UNDER_GRAD))
    ledger = tmp_path / "infer.ledger"
    assert main(["doctor", str(script), "--steps-by", "forward", "--steps", "2",
                 "-o", str(ledger), "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    # the ledger's stop at the third forward began no third step (it read 3 of 2)
    assert (d["steps"], d["optimizer_steps"], d["steps_by"]) == (2, 0, "forward")
    assert [f["check"] for f in d["findings"]] == ["unused_graph"]
    led = Ledger.load(ledger)
    assert (led.steps_traced, led.header["steps_by"]) == (2, "forward")
    assert led.extra["doctor"][0]["steps"] == 2
    # without it, the refusal names the way out (exit 2); with --nproc it does not apply
    assert main(["doctor", str(script)]) == 2
    assert "--steps-by forward" in capsys.readouterr().err
    assert main(["doctor", str(script), "--steps-by", "forward", "--nproc", "2"]) == 2
    assert "--steps-by does not apply with --nproc" in capsys.readouterr().err
