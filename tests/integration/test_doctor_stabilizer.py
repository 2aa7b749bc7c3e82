"""A dead branch stabilised by its own detached maximum is an unused branch, not a cut
(Note [A cut of a stabiliser], memledger/trace/doctor_probe.py): tests/doctor/
dead_stabilized.py, in-process, probe only. On main the `amax` and `chain` rows read
"cut_graph ... the path from the loss was cut by `.detach()`" (an error, which stops
`compare`) at the stabiliser's line, where the same branch without it (`none`) reads the
unused_parameter warning below."""

from __future__ import annotations

from pathlib import Path

import pytest

from memledger.doctor.run import diagnose_in_process

SCRIPT = Path(__file__).resolve().parents[1] / "doctor" / "dead_stabilized.py"


def _line(text: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return [i for i, s in enumerate(lines, 1) if s.strip() == text][0]


@pytest.mark.parametrize("how", ["amax", "chain", "none"])
def test_a_dead_branch_with_a_detached_maximum_is_unused_not_cut(how):
    report, outcome = diagnose_in_process(SCRIPT, ["--stabilizer", how], 3)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == [("unused_parameter",
                                                                 "warning")]
    (f,) = report.findings
    assert f.message.startswith("2 trainable parameters (`side.weight`, `side.bias`) got no "
                                "gradient in steps 1-3 while 4 others did: their modules ran "
                                "but the output never reached the loss")
    # side: Linear(8, 8): (64 + 8) x 4 B = 288 B
    assert f.evidence["bytes_without_grad"] == 288
    assert f.where.line == _line("opt.step()")   # the step that found them without one


def test_the_stabilised_branch_that_reaches_the_loss_has_no_finding():
    report, outcome = diagnose_in_process(SCRIPT, ["--stabilizer", "amax", "--used"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == []


def test_a_parameter_with_no_elements_is_no_finding():
    """Note [A parameter with no elements] (doctor/graph.py): `registers`, a (0, 8)
    parameter read only when it has rows, got no gradient; on main "1 trainable parameter
    (`registers`) got no gradient in steps 1-3 while 6 others did" (a warning)."""
    report, outcome = diagnose_in_process(SCRIPT, ["--stabilizer", "amax", "--used",
                                                   "--empty"], 3)
    assert outcome.code == 0, outcome.reason
    assert report.findings == []


def test_a_detach_of_a_linears_output_is_still_a_cut():
    """`h = lin(x); h.detach()` (tests/doctor/cut.py): the Linear's node has two inputs
    (weight, bias), so no chain is kept and the cut keeps its blame."""
    report, outcome = diagnose_in_process(SCRIPT.parent / "cut.py", ["--cut", "detach"], 3)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == [("cut_graph", "error")]
