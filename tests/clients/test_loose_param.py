"""The doctor on a script's own `nn.Parameter` that no module holds (Note [A parameter no
module holds], memledger/trace/doctor_loose.py): left out of the optimizer, it is named;
in the optimizer, moved by hand, or made anew in every step, it is not."""

import pytest

from memledger.doctor.run import diagnose_in_process
from tests.clients.harness import HERE

SCRIPT = HERE / "train_loose_param.py"


def _findings(argv: list[str]) -> list:
    report, outcome = diagnose_in_process(SCRIPT, argv, 2)
    assert outcome.code == 0, outcome.reason
    return report.findings


def test_a_loose_parameter_left_out_of_the_optimizer_is_named():
    """Before: no finding (the probe knew parameters from modules and optimizers only)."""
    [f] = _findings(["--left-out"])
    assert (f.check, f.severity) == ("no_optimizer", "warning")
    assert f.evidence == {"params": 1, "bytes": 6 * 4 * 4}   # (6, 4) float32 = 96 B
    assert "1 nn.Parameter that no module holds ((6, 4) float32, 96 B)" in f.message
    assert SCRIPT.read_text().splitlines()[f.where.line - 1].strip() == "loss.backward()"


@pytest.mark.parametrize("argv", [[], ["--by-hand"], ["--fresh"]])
def test_a_loose_parameter_in_the_optimizer_moved_by_hand_or_made_anew_is_no_finding(argv):
    assert _findings(argv) == []
