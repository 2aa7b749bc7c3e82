"""`memledger doctor --nproc 2`: every rank watched, and the ranks' gradients compared
(Note [Replicas that drift], memledger/doctor/replicas.py). Two torchrun launches."""

from __future__ import annotations

import json
from pathlib import Path

from memledger.cli import main

SCRIPT = Path(__file__).parent / "scripts" / "ddp_accum.py"


def _doctor(capsys, *args: str) -> tuple[int, dict]:
    rc = main(["doctor", "--nproc", "2", "--steps", "2", "--json", str(SCRIPT), "--", *args])
    return rc, json.loads(capsys.readouterr().out)


def test_ddp_every_micro_batch_under_no_sync_is_an_error_on_every_rank(capsys):
    rc, out = _doctor(capsys, "--no-sync-always")
    assert rc == 1 and out["ok"] is False and out["worst_rank"] == 0
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for rep in out["ranks"]:
        (f,) = rep["findings"]
        assert (f["check"], f["severity"]) == ("unsynced_gradients", "error")
        # 4 tensors (2 Linear: weight, bias), equal weights before step 1, never averaged;
        # step 2 too: AdamW's first update is lr x sign(g) elementwise, so a tensor whose
        # gradients have the same signs on both ranks is still equal there
        assert f["evidence"]["parameters"] == 4 and f["evidence"]["steps"] == [1, 2]
        assert f["evidence"]["ranks"] == 2 and f["evidence"]["ddp"] is True
        assert "`module.0.weight`" in f["message"] and "no_sync()" in f["message"]
        assert f["where"]["file"].endswith("ddp_accum.py") and f["where"]["line"] == 28


def test_ddp_accumulation_with_its_last_micro_batch_synced_is_clean(capsys):
    rc, out = _doctor(capsys)
    assert rc == 0 and out["ok"] is True and out["schema"] == "memledger.doctor/1"
    assert [rep["findings"] for rep in out["ranks"]] == [[], []]


def test_gradients_all_reduced_by_hand_without_dividing_are_an_error(capsys):
    """dist_modes.py `ok` all-reduces each gradient by hand and never divides by the world
    size: every step's gradient is 2.00x the mean of the ranks' own (a tensor hook's sum)."""
    script = SCRIPT.parent / "dist_modes.py"
    rc = main(["doctor", "--nproc", "2", "--steps", "2", "--json", str(script), "--", "ok"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out["ok"] is False
    for rep in out["ranks"]:
        (f,) = rep["findings"]
        assert (f["check"], f["severity"]) == ("unaveraged_gradients", "error")
        assert f["evidence"] == {"ranks": 2, "parameters": 2, "steps": [1, 2],
                                 "ratio_to_mean": 2.0}
        assert "dist.get_world_size()" in f["message"]


def test_a_script_that_ends_before_training_says_so(capsys):
    """dist_modes.py `early` exits before its first step (as pytorch/examples' scripts do
    when their GPU check fails): the one line read "could not watch rank 0: script
    finished"."""
    script = SCRIPT.parent / "dist_modes.py"
    rc = main(["doctor", "--nproc", "2", "--steps", "2", str(script), "--", "early"])
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("memledger:")]
    assert rc == 2
    assert line == ("memledger: the doctor could not watch rank 0: the script finished without "
                    "an optimizer step; the doctor checks training steps, so call "
                    "optimizer.step() in the script")
