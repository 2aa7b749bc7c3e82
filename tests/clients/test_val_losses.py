"""A list that takes every step's graph after the step's boundary (tests/clients/
train_val_losses.py: a validation loss under gradients appended after `optimizer.step()`).

Before the fiftieth session the doctor's 3 default steps read it as "1 tensor(s), 4 B", a
warning: the probe's boundary 3 listed only the graph step 2 made (alive at boundary 2),
not the one step 3 added, and its growth showed at boundary 4 alone (hunt49m, "Seen, left
alone"). The probe now lists, beside a variable's older graphs, the newest step's it holds
(Note [What a variable holds of the newest step], memledger/trace/doctor_retention.py),
and the doctor counts both and calls it growing (Note [A variable that takes every step's
graph], memledger/doctor/retention.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.clients

SCRIPT = Path(__file__).parent / "train_val_losses.py"
FIX = "every step's graph stays reachable; accumulate val_loss.item() or val_loss.detach() " \
    "instead"


def _finding(steps: int):
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(SCRIPT, [], steps)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    lines = SCRIPT.read_text().splitlines()
    assert (f.check, lines[f.where.line - 1].strip()) == \
        ("cross_step_retention", "val_losses.append(val_loss)")
    return f


def test_a_list_of_graphs_taken_after_each_step_is_an_error_saying_what_grows():
    f = _finding(3)
    assert f.severity == "error"
    assert f.message == (
        "`val_losses` carries autograd history across optimizer steps (at the end of step "
        "3: 2 tensors, 8 B, a graph of 24 nodes, 2.6 KiB saved for backward; each step "
        "adds 1 tensor, 4 B, and the 1.0 KiB its graph saves): " + FIX)
    # each graph saves 1,056 B (the hidden activations), beside the held-out batch all of
    # them share (512 B): 512 + 2 x 1,056 = 2,624
    assert f.evidence == {"steps": [3], "bytes_per_step": [4], "nodes_per_step": [12],
                          "tensors_per_step": [1], "held_tensors_per_step": [2],
                          "held_bytes_per_step": [8], "graph_saved_per_step": [2_624],
                          "tensors_more": 1, "bytes_more": 4, "over_steps": 1,
                          "saved_more": 1_056}


def test_its_growth_over_several_boundaries():
    f = _finding(5)
    assert f.severity == "error"
    assert f.message == (
        "`val_losses` carries autograd history across optimizer steps (at the end of steps "
        "3-5: 4 tensors, 16 B, a graph of 48 nodes, up from 24, 4.6 KiB saved for "
        "backward; each step adds 1 tensor, 4 B, and the 1.0 KiB its graph saves): " + FIX)
    assert (f.evidence["held_tensors_per_step"], f.evidence["held_bytes_per_step"]) == \
        ([2, 3, 4], [8, 12, 16])
    assert f.evidence["graph_saved_per_step"] == [2_624, 3_680, 4_736]
    assert [f.evidence[k] for k in ("tensors_more", "bytes_more", "saved_more", "over_steps")] \
        == [2, 8, 2_112, 2]
