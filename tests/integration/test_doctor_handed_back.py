"""A recurrent state a model hands back with its output, carried into the next step
undetached and kept across it by `backward(retain_graph=True)` (tests/doctor/
carried_retained.py): the backward does not fail, every step's backward runs through every
earlier step's graph again. Note [A state a call hands back] (memledger/doctor/source.py)."""

from __future__ import annotations

from pathlib import Path

from memledger.doctor.run import diagnose_in_process

SCRIPT = Path(__file__).resolve().parents[1] / "doctor" / "carried_retained.py"


def test_a_state_handed_back_is_named_once_at_the_line_that_feeds_it_back():
    """GIVEN `out, h = model(x, h)` in a module-level loop, h never detached WHEN the doctor
    watches 3 steps THEN one error, `h` at that line, told to detach it where the step
    begins, `out` named beside it. Before: two errors, `h` at line 22 (the model's forward,
    `h = torch.tanh(...)`: another variable) and `out` at line 0, both told to "keep what
    that line adds detached"."""
    report, outcome = diagnose_in_process(SCRIPT, [], 3)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    lines = SCRIPT.read_text().splitlines()
    assert (f.check, f.severity) == ("cross_step_retention", "error")
    assert lines[f.where.line - 1].strip() == "out, h = model(x, h)"
    # h: 2x8 float32 = 64 B at the end of steps 2 and 3, its graph 11 then 16 nodes long
    assert f.evidence == {"steps": [2, 3], "bytes_per_step": [64, 64],
                          "nodes_per_step": [11, 16], "tensors_per_step": [1, 1]}
    assert f.message.startswith("`h` carries autograd history across optimizer steps")
    assert "; `out`, bound beside it, reaches the same graphs through it)" in f.message
    assert f.message.endswith("detach it where the step begins (`h = h.detach()`)")
    report, outcome = diagnose_in_process(SCRIPT, ["--fixed"], 3)
    assert outcome.code == 0 and report.findings == []
