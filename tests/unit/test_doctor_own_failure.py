"""Note [The doctor's own failure] (memledger/doctor/worker.py): an exception in the
doctor's analysis is memledger's bug, exit 70, never the script's (exit 3)."""

from __future__ import annotations

import pytest

from memledger.errors import EXIT_INTERNAL, ScriptError


def test_an_analysis_that_raises_is_an_internal_error(tmp_path, monkeypatch):
    # GIVEN a script with one optimizer step, its worker run here, and an analysis that raises
    from memledger.doctor import analyze, worker
    from memledger.doctor import run as doctor_run

    script = tmp_path / "train.py"
    script.write_text("import torch\n"
                      "w = torch.nn.Parameter(torch.ones(4))\n"
                      "opt = torch.optim.SGD([w], lr=0.1)\n"
                      "(w * 2).sum().backward()\n"
                      "opt.step()\n")

    def broken(records):
        raise ValueError("a bug in a check")
    monkeypatch.setattr(analyze, "diagnose", broken)
    monkeypatch.setattr(doctor_run, "run_worker",
                        lambda module, args, capture_output=False: (worker.main(args), b""))
    monkeypatch.setattr("memledger.crash.write_crash_file", lambda exc: str(tmp_path / "c"))
    # WHEN the doctor runs
    with pytest.raises(ScriptError) as err:
        doctor_run.doctor_script(script, [], steps=1)
    # THEN exit 70, in crash's words, not "the script's process ended"
    assert err.value.exit_code == EXIT_INTERNAL
    assert "internal error (ValueError: a bug in a check)" in str(err.value)
    assert "script's process" not in str(err.value)
